"""The one search space of a kernel's schedules, as the arrays the cost model scores.

A point of the space is one value per decision of the primitives the cost model prices in
batch — a tile size per loop and level (`tile`), a loop order per level (`reorder`), the
parallel loops (`parallel`) and the vectorised loop (`vectorize`) — held as `Points`:
tiles [n, D, L] (inner within outer), orders [n, L, D] (loop indices, outer → inner),
parallel [n, D] (None: the target's default) and vectorize [n] (a loop index; -1 the
innermost). `SearchSpace.schedule` and `SearchSpace.points` are the one conversion between
points and schedules (`Schedule.of_arrays` and `KernelModel.schedule_arrays` underneath);
`SearchSpace.decisions` lists the same space as the schedule package's `Decision`s, so a
point is also a trace (`schedule.space.trace_from`). The other primitives' decisions
(unroll, split, ... : `trace_decisions`) are tried on a search's best schedules:
`refinements` makes the schedules each offers, scored as points are — a primitive added
to the schedule package with `tuned = True` is searched with no change to any search.

What a space offers comes from the kernel's one candidate space of tile sizes
(`space.TileSpace`), in the view a strategy asks for:
  * `SearchSpace.tiling` — the tiling pass's sizes per level (the `register` view at the
    generic `vector` level), the stationary loop orders (`order_candidates`), the vector
    loop fixed, loops read whole pinned;
  * `SearchSpace.tuner` — the auto-tuner's sizes per loop (every level alike), any loop
    order, parallel marks and the vectorised loop, from an incumbent schedule;
  * `SearchSpace.every` — every size of every loop, every order, every parallel set and
    vectorised loop: what `exhaustive` enumerates for a kernel small enough.

The strategies over a space: random draws and local moves (`accel/tile_search.py`: the
tiling pass, each chain compute point, producers), evolution (`tune/search.py`: the
auto-tuner and the library baseline's tuner candidates) and enumeration (`exhaustive`: the
library baseline's small kernels). Each scores points with `measure`.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

from .. import objective
from ..ir.loopnest import whole_loops
from ..ir.schedule import Kernel, Schedule
from .cost import datapath_of, fitting_unroll, kernel_model


class Points(NamedTuple):
    """A batch of points of one kernel's space (see the module docstring)."""

    tiles: np.ndarray
    orders: np.ndarray
    parallel: np.ndarray | None = None
    vectorize: np.ndarray | None = None

    def __len__(self) -> int:       # the number of points, not of fields
        return len(self.tiles)

    def take(self, rows) -> "Points":
        return Points(*(None if a is None else a[rows] for a in self))

    def keys(self) -> list[bytes]:
        """One compact bytes key per point (equal keys: equal points)."""
        n = len(self.tiles)
        if not n:
            return []
        parts = [np.ascontiguousarray(self.tiles.reshape(n, -1), dtype=np.int32).view(np.uint8),
                 np.ascontiguousarray(self.orders.reshape(n, -1), dtype=np.int8).view(np.uint8)]
        if self.parallel is not None:
            parts.append(np.ascontiguousarray(self.parallel.reshape(n, -1), dtype=np.uint8))
        if self.vectorize is not None:
            parts.append(np.ascontiguousarray(self.vectorize.reshape(n, 1), dtype=np.int8).view(np.uint8))
        return [row.tobytes() for row in np.concatenate(parts, axis=1)]

    @staticmethod
    def stack(rows: Sequence[tuple]) -> "Points":
        """Points from single points (tiles [D, L], orders [L, D], parallel [D], vectorize)."""
        return Points(np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]),
                      np.stack([np.asarray(r[2], dtype=bool) for r in rows]),
                      np.array([int(r[3]) for r in rows], dtype=np.int64))

    @staticmethod
    def concat(*batches) -> "Points":
        batches = [b for b in batches if b is not None and len(b[0])]
        return Points(*(np.concatenate([b[i] for b in batches]) for i in range(4)))


@dataclass
class SearchSpace:
    """One kernel's search space on one target, in a strategy's view (module docstring).

    `sizes[h][d]`: the tile sizes offered to loop d at level h (sorted); `searched`: the
    level indices whose tiles vary (others inherit the enclosing tile); `orders`: the
    candidate orders of a level (None: any permutation); `whole[d]`: loop d is read whole by
    a later statement and never tiled; `vector`: the vectorised loop a point is scored with
    when the space does not vary it (-1: the innermost); `tune_orders`, `tune_annotations`:
    whether orders, and parallel marks and the vectorised loop, vary; `incumbent`: the
    schedule a search starts from, and its point; `vector_level`: the level whose sizes are
    register tiles; `structure`: what the space depends on (a key: the spaces of kernels of
    one structure are one space)."""

    kernel: Kernel
    target: object
    sizes: list
    searched: list
    orders: np.ndarray | None
    max_spill: float
    vector: int = -1
    tune_orders: bool = True
    tune_annotations: bool = False
    incumbent: Schedule | None = None
    incumbent_point: tuple = ()
    vector_level: int | None = None
    structure: tuple = ()

    def __post_init__(self):
        self.model = kernel_model(self.kernel, self.target)
        self.objective = objective.of(self.target)
        self.tie = objective.ties(self.target)          # (the tiling view's searches: 0 unless asked)
        self.levels = tuple(self.target.tiling_levels)
        self.extents = self.model.extents
        kept = whole_loops(self.kernel)
        self.whole = np.array([l.name in kept for l in self.kernel.loops])

    @property
    def D(self) -> int:
        return len(self.kernel.loops)

    @property
    def L(self) -> int:
        return len(self.levels)

    # ------------------------------------------------------------------ the views

    @staticmethod
    def tiling(kernel: Kernel, target, levels: dict[str, str], params: dict, structure: tuple = (),
               ties: float = 0.0) -> "SearchSpace":
        """The tiling pass's view: `levels` ({generic name: target level}) are searched, the
        sizes at the generic `vector` level are register tiles (`register_tile_factor`);
        `ties`: latency's tie band, asked only by the pipeline's energy-ties stage (0: the fastest)."""
        from ..space import TileSpace

        target_levels = tuple(target.tiling_levels)
        searched = [target_levels.index(t) for t in levels.values()]
        factor = tuple(params.get("register_tile_factor", [4, 16]))
        view = TileSpace.of(kernel, target)
        vector_level = target_levels.index(levels["vector"]) if "vector" in levels else None
        D = len(kernel.loops)
        sizes = [[view.register(d, factor) if h == vector_level else view.tiling(d) for d in range(D)]
                 for h in range(len(target_levels))]
        space = SearchSpace(kernel, target, sizes, searched, np.array(order_candidates(kernel), dtype=np.int64),
                            float(params.get("max_spill_ratio", 0.05)), vector_loop_index(kernel, target),
                            vector_level=vector_level, structure=structure)
        if space.objective == "latency":
            space.tie = ties
        return space

    @staticmethod
    def tuner(schedule: Schedule, target, divisors_only: bool = False, tune_orders: bool = True,
              tune_annotations: bool = True, max_spill: float = math.inf) -> "SearchSpace":
        """The auto-tuner's view from `schedule` (the incumbent): the tuner's sizes per loop
        at every level (the incumbent's kept reachable), any order when `tune_orders`,
        parallel and vectorize when `tune_annotations`; the spill limit is the rules' or the
        incumbent's, whichever is larger."""
        from ..space import TileSpace

        kernel = schedule.kernel
        model = kernel_model(kernel, target)
        L = len(target.tiling_levels)
        tiles, orders, parallel, vectorize = model.normalise(*model.schedule_arrays(schedule))
        view = TileSpace.of(kernel, target)
        per_loop = [np.union1d(view.tuner(d, divisors_only), tiles[0, d]) for d in range(len(kernel.loops))]
        s = SearchSpace(kernel, target, [per_loop] * L, list(range(L)), None, max_spill, tune_orders=tune_orders,
                        tune_annotations=tune_annotations, incumbent=schedule)
        s.max_spill = max(max_spill, float(s.spill(tiles)[0]))
        rt, ro = s.repair(tiles[:1], np.array(orders[:1]))
        s.incumbent_point = (rt[0], ro[0], np.array(parallel[0]), int(vectorize[0]))
        return s

    @staticmethod
    def every(kernel: Kernel, target, max_spill: float) -> "SearchSpace":
        """Every size of every loop at every level, every order, parallel set and vectorised
        loop (`exhaustive` enumerates it)."""
        from ..space import TileSpace

        view = TileSpace.of(kernel, target)
        L = len(target.tiling_levels)
        per_loop = [view.every(d) for d in range(len(kernel.loops))]
        return SearchSpace(kernel, target, [per_loop] * L, list(range(L)), None, max_spill, tune_annotations=True)

    @property
    def choices(self) -> list:
        """The sizes per loop where every level is offered the same (the tuner's view)."""
        return self.sizes[0]

    # ------------------------------------------------------------------ points and schedules

    def schedule(self, tiles, orders, parallel=None, vectorize=-1, keep: Schedule | None = None,
                 fit_unroll: bool = True) -> Schedule:
        """The schedule of one point; what a point does not hold (unroll, point-loop order,
        staging, and the parallel loops when None) is `keep`'s (the incumbent's by default),
        its unroll capped at what this point's registers hold (`unroll_fitted`: a point's
        score prices no unroll, which is exact once none spills; `fit_unroll=False` for a
        legality check, which unroll does not change)."""
        keep = self.incumbent if keep is None else keep
        vectorize = None if vectorize is None else int(vectorize)
        schedule = Schedule.of_arrays(self.kernel, self.levels, tiles, orders, parallel, vectorize, keep=keep)
        return unroll_fitted(schedule, self.target) if fit_unroll else schedule

    def points(self, schedules: Sequence[Schedule]) -> Points:
        """The points of `schedules` (of this kernel)."""
        rows = [self.model.normalise(*self.model.schedule_arrays(s)) for s in schedules]
        return Points(*(np.concatenate([np.ascontiguousarray(r[j]) for r in rows]) for j in range(4)))

    def decisions(self) -> tuple:
        """The space as the schedule package's decisions, in trace order: a tile per searched
        (level, loop), an order per level, a parallel mark per loop and the vectorised loop
        when they vary. One value per decision is a point (`schedule.space.trace_from`)."""
        from ..schedule import Decision

        names = self.kernel.loop_names
        out = [Decision("tile", (names[d], self.levels[h]), (None, *map(int, self.sizes[h][d])))
               for h in self.searched for d in range(self.D) if not self.whole[d]]
        if self.tune_orders and self.D > 1:
            orders = (itertools.permutations(range(self.D)) if self.orders is None else map(tuple, self.orders))
            named = tuple(tuple(names[i] for i in o) for o in orders)
            out += [Decision("reorder", (self.levels[h],), (None, *named)) for h in self.searched]
        if self.tune_annotations:
            out += [Decision("parallel", (names[d],), (None, False, True)) for d in range(self.D)]
            out.append(Decision("vectorize", (), (None, *names)))
        return tuple(out)

    # ------------------------------------------------------------------ shape of points

    def monotone(self, tiles: np.ndarray) -> np.ndarray:
        """Clip to the extents, and make each level's tile no larger than the enclosing one
        (a level left at 0 inherits the enclosing tile)."""
        full = np.broadcast_to(self.extents[None, :, None], tiles.shape)
        tiles = np.where(tiles <= 0, full, np.minimum(tiles, full))
        return np.minimum.accumulate(tiles, axis=2)

    def pin_whole(self, tiles: np.ndarray) -> np.ndarray:
        """Loops a later statement reads whole (a softmax row) untiled: tiled, the nest would
        split into one tile loop per statement (ir.loopnest)."""
        tiles[:, self.whole, :] = self.extents[self.whole, None]
        return tiles

    def repair(self, tiles, orders):
        """Clip tiles inside their enclosing tile; order the loops that run once at a level
        after the iterating ones, by index (so equivalent points coincide) — but a compute
        point's loop keeps its place — at every level but the innermost, whose order also
        orders the point loops."""
        extents = self.extents
        tiles = np.minimum(np.minimum.accumulate(np.minimum(tiles, extents[None, :, None]), axis=2), extents[None, :, None])
        tiles = np.maximum(tiles, 1)
        n, D, L = tiles.shape
        enclosing = np.concatenate([np.broadcast_to(extents[None, :, None], (n, D, 1)), tiles[:, :, :-1]], axis=2)
        iterates = tiles < enclosing                                  # [n, D, L]
        # which tile loops come before a compute point decides the region its producers compute
        names = self.kernel.loop_names
        for _, loop, level in self.kernel.compute_at:
            if level in self.levels and loop in names:
                iterates[:, names.index(loop), self.levels.index(level)] = True
        orders = orders.copy()
        for h in range(L - 1):
            it = np.take_along_axis(iterates[:, :, h], orders[:, h, :], axis=1)   # in order position
            key = np.where(it, np.arange(D)[None, :], D + orders[:, h, :])      # stable: iterating first
            pos = np.argsort(key, axis=1, kind="stable")
            orders[:, h, :] = np.take_along_axis(orders[:, h, :], pos, axis=1)
        return tiles, orders

    # ------------------------------------------------------------------ scoring

    def spill(self, tiles) -> np.ndarray:
        """Spill ratio of each tiling (as the cost model defines it): the worst level's
        footprint overflow, a fraction of its capacity."""
        footprint = self.model.capacity_footprints(tiles)
        return np.clip(footprint / self.model.capacity[None, :] - 1.0, 0.0, None).max(axis=1)

    def measure(self, points: Points):
        """(time, energy, within the spill limit, DRAM bytes) of each point, from the cost
        model in one batch."""
        if not len(points):      # no move left (every loop has extent 1)
            return np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool), np.zeros(0)
        vectorize = points.vectorize if points.vectorize is not None else np.full(len(points), self.vector)
        cost = self.model.evaluate_batch(points.tiles, points.orders, points.parallel, vectorize)
        return cost.time_s, cost.energy_j, cost.spill_ratio <= self.max_spill + 1e-12, cost.bytes[:, -1]

    def rank(self, time_s, energy_j, ok) -> np.ndarray:
        """A batch's scores by the target's objective, lower is better (inf beyond the spill
        limit): `objective.score`."""
        if not len(time_s):
            return np.zeros(0)
        return np.where(ok, objective.score(self.objective, time_s, energy_j), np.inf)

    def decide(self, tiles, orders, measured, ranked: int = 1) -> list:
        """Up to `ranked` distinct (tiles, orders) of the measured candidates, best first by the
        objective's rule (`objective.order`: under latency, the least energy within 1% of the
        fastest, then the fewest DRAM bytes); none when every candidate spills."""
        time_s, energy_j, ok, dram = measured
        idx = np.flatnonzero(ok & np.isfinite(time_s))
        picks, seen = [], set()
        for j in idx[objective.order(self.objective, time_s[idx], energy_j[idx], dram[idx], self.tie)]:
            key = (tiles[j].tobytes(), orders[j].tobytes())
            if key in seen:
                continue
            seen.add(key)
            picks.append((tiles[j].copy(), orders[j].copy()))
            if len(picks) == ranked:
                break
        return picks


# --------------------------------------------------------------------------- beyond the arrays


def unroll_fitted(schedule: Schedule, target) -> Schedule:
    """`schedule` with its unroll capped at what its registers hold (`accel.cost.fitting_unroll`):
    searches score points without unroll, which is exact once no unroll spills."""
    fits = fitting_unroll(schedule, target) if schedule.unroll > 1 else schedule.unroll
    if fits == schedule.unroll:
        return schedule
    return dataclasses.replace(schedule, annotations={**schedule.annotations, "unroll": fits})


def trace_decisions(schedule: Schedule) -> list:
    """(primitive class, decision) of the primitives a point does not hold that a search
    tries on its best schedules (`tuned = True`: unroll, split, ... — tiles, orders and
    annotations are the points' own)."""
    from ..schedule import PRIMITIVES

    kernel = schedule.kernel.without_compute_at()
    return [(cls, d) for cls in PRIMITIVES.values() if cls.tuned for d in cls.decisions(kernel, schedule.levels)]


def refinements(schedule: Schedule) -> list[Schedule]:
    """Every schedule one of `trace_decisions` makes from `schedule` (its arguments checked;
    legality is the caller's)."""
    from ..schedule import ScheduleError, apply_step

    out = []
    for cls, decision in trace_decisions(schedule):
        for value in decision.choices[1:]:
            step = cls.step_for(schedule, decision.key, value)
            if step is None:
                continue
            try:
                out.append(apply_step(schedule, step))
            except ScheduleError:
                continue
    return out


# --------------------------------------------------------------------------- enumeration

EXHAUSTIVE_MAX = 50_000   # points: a space with no more than these is enumerated whole


def size(space: SearchSpace) -> int:
    """The number of points of `space` (tiles non-increasing outward to inward: C(E + L - 1, L)
    chains of L sizes out of E per loop; every order per level; every parallel set; every
    vectorised loop)."""
    L, D = space.L, space.D
    return (math.prod(math.comb(len(s) + L - 1, L) for s in space.choices) * math.factorial(D) ** L * 2 ** D * (D + 1))


def enumerate_points(space: SearchSpace) -> Points | None:
    """Every point of `space`, or None when it has more than EXHAUSTIVE_MAX."""
    if size(space) > EXHAUSTIVE_MAX:
        return None
    L, D = space.L, space.D
    orders = list(itertools.permutations(range(D)))
    chains = [list(itertools.combinations_with_replacement(sorted(s, reverse=True), L)) for s in space.choices]
    tile_sets = np.array([list(t) for t in itertools.product(*chains)], dtype=np.int64)        # [n, D, L]
    order_sets = np.array(list(itertools.product(orders, repeat=L)), dtype=np.int64)            # [m, L, D]
    par_sets = np.array(list(itertools.product((False, True), repeat=D)), dtype=bool)
    grid = np.array(list(itertools.product(range(len(tile_sets)), range(len(order_sets)),
                                           range(len(par_sets)), range(-1, D))), dtype=np.int64)
    return Points(tile_sets[grid[:, 0]], order_sets[grid[:, 1]], par_sets[grid[:, 2]], grid[:, 3])


def exhaustive(kernel: Kernel, target, max_spill: float, legal) -> Schedule | None:
    """The fastest schedule `legal` accepts of a kernel whose whole space (`SearchSpace.every`)
    has at most EXHAUSTIVE_MAX points, scored at once by the cost model (spill within
    `max_spill`); None for a larger space or when none fits."""
    space = SearchSpace.every(kernel, target, max_spill)
    points = enumerate_points(space)
    if points is None:
        return None
    time_s, energy_j, ok, dram = space.measure(points)
    fits = np.flatnonzero(ok)
    for i in fits[objective.order(space.objective, time_s[fits], energy_j[fits], dram[fits], space.tie)]:   # best legal
        schedule = Schedule.of_arrays(kernel, space.levels, *points.take(i))
        if legal(schedule):
            return schedule
    return None


# --------------------------------------------------------------------------- the tiling view's parts


def vector_loop_index(kernel: Kernel, target) -> int:
    """The loop index the tiling scores vectorised (-1: the cost model's default)."""
    from ..space import lane_loop

    model = kernel_model(kernel, target)
    if datapath_of(target.compute, model.statements[kernel.anchor]).on_array:
        return -1
    loop = lane_loop(kernel, target)
    return kernel.loop_names.index(loop) if loop in kernel.loop_names else -1


def order_candidates(kernel: Kernel) -> list[tuple[int, ...]]:
    """Loop orders (as loop indices, outer → inner) worth trying at a level.

    Up to 4 loops: all permutations. Otherwise the source order, its reverse, and for every
    tensor accessed the order that keeps its tile resident (stationary): loops that index
    it outside, the others inside — output-stationary (reductions innermost),
    weight-stationary, input-stationary.
    """
    D = len(kernel.loops)
    if D <= 4:
        return list(itertools.permutations(range(D)))
    index = {n: i for i, n in enumerate(kernel.loop_names)}
    out = [tuple(range(D)), tuple(reversed(range(D)))]
    anchor = kernel.anchor_statement
    accesses = [anchor.target_indices] + [a.indices for a in anchor.reads()]
    for indices in accesses:
        used = {index[l] for idx in indices for l in idx.loops if l in index}
        inner = [d for d in range(D) if d not in used]
        outer = [d for d in range(D) if d in used]
        out.append(tuple(outer + inner))
        out.append(tuple(inner + outer))
    return list(dict.fromkeys(out))
