"""The auto-tuner: an evolutionary search over what the rules leave open.

tune.py owns the search of each kernel's legal schedule space — tile sizes per level
(the candidate space's tuner view, `space.TileSpace.tuner`: divisors and non-divisors,
each tile inside the enclosing one), a loop order per level,
and annotations (parallel loops, the vectorised loop; `unroll` is carried from the rules,
the cost model does not score it) — and the assembly of the best whole-program versions.
It decides nothing about legality or cost itself: candidates are scored in batches by the
cost model (`accel.cost.evaluate_batch`, or any `score_fn`), legality is asked of
`poly.check_schedule`.

The search, per kernel (most to win first, each with a share of the `configs` budget
proportional to its expected gain — its time under the rules' schedule above its roofline
floor, `expected_gain` — what a small, exhausted space leaves goes to the kernels after it; numpy Generator seeded ctx.seed + the kernel's index):

1. The population starts from the incumbent — the schedule the rules chose — plus
   mutations of it and random samples; the incumbent never leaves the population (elitism),
   so tuning is never worse than the rules alone.
2. Each generation breeds children by tournament selection, uniform crossover (per loop
   for tiles and parallel marks, per level for orders) and mutation (a tile a step up or
   down its list of sizes or anywhere in it; two loops of one level's order swapped; a
   parallel mark toggled; the vectorised loop moved). Children are repaired (tiles clipped
   inside the enclosing tile; at outer levels, loops that do not iterate ordered
   canonically), deduplicated against everything seen, and dropped without scoring if
   their footprint overflows a level beyond the rules' `tiling.max_spill_ratio` (the limit
   the tiling pass obeys).
3. Legality. Tile sizes do not change which dependences a plain tiling breaks: the DSL's
   kernels are single-assignment, their only self-dependences are reductions, and what
   breaks legality is reordering a non-reorderable reduction or running a reduction loop in
   parallel — neither depends on a size, only on which loops iterate at which level (that
   shapes the loop nest `ir.loopnest.lower` builds). Loops a later statement needs whole
   (`ir.loopnest.whole_loops`: a softmax row) are never tiled. poly checks parallel loops
   one by one, so one check (`poly.check_schedule`) per loop orders, with every loop
   marked parallel, answers both "are these orders legal" and "which loops may be
   parallel": the cache is keyed by (kernel, levels, orders, which loops iterate where)
   and shared across calls.
   A poly check costs 10-100 ms against ~10 us per scored candidate, so legality is asked
   lazily — before a candidate can become a version or the population's leader; while
   every verdict a search has obtained agrees (orders legal, one parallel set: on a
   network's kernels, always), a nest it has not asked about enters the rest of the
   population on that predicted verdict; the leader is checked each generation until
   `CONFIRMED_VERDICTS` nests agree, and a checked verdict that disagrees ends prediction
   for the search (`_Legality`). An illegal candidate never counts as a result:
   it leaves the board and its repair (the parallel marks its orders forbid dropped, else
   the incumbent's orders and parallel set) is scored instead. Versions are checked once
   more with their exact schedule.
4. Scoring is vectorised over fixed-size chunks of the generation; a chunk is a picklable
   task (score_fn, kernel, target, arrays → times), so any `concurrent.futures.Executor`
   can run it and the result is identical whatever the executor.

The top-K versions combine per-kernel candidates into the K fastest whole programs
(kernel times add), distinct in time. With `measure` (plan → seconds, e.g. a host run) the
model's best few are measured and re-ranked. `tune_plan` returns (best plan, versions,
tuning summary); a KeyboardInterrupt or the time budget ends the search with the best so far.
"""
from __future__ import annotations

import bisect
import heapq
import math
import threading
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from . import poly
from .accel.cost import evaluate_batch, kernel_model
from .accel.target import Target, load_target
from .caches import LRU
from .canon import canonical_kernel
from .ir.loopnest import loop_dims, lower
from .ir.schedule import Kernel, Schedule
from .ir.plan import Plan
from .space import TileSpace

DEFAULT_MAX_SPILL = 0.05   # rules/default.yaml tiling.max_spill_ratio
MEASURED_CANDIDATES = 4   # versions measured (besides the rules' plan) when tune_plan gets `measure`
CHUNK = 128                 # candidates per scoring task (fixed: results do not depend on the executor)
MAX_POPULATION = 48
MIN_POPULATION = 8
TOURNAMENT = 3
MAX_GENERATIONS_PER_CONFIG = 1   # a bound on generations when most children are infeasible
# Each loop order new to a search costs a poly check (0.03-0.5 s: more for deeper nests),
# against ~10 us to score a candidate: new orders are rationed per generation.
NEW_ORDERS_START = 6
# Verdicts a search confirms (the population's leader, each generation) before it trusts
# predicted verdicts for the rest of its population (see `_Legality`).
CONFIRMED_VERDICTS = 4
PREDICT_LEGALITY = True     # False: every nest is checked before it enters a population
NEW_ORDERS_PER_GENERATION = 2

ScoreFn = Callable[[Kernel, Target, np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


# --------------------------------------------------------------------------- scoring


def model_score(kernel: Kernel, target: Target, tiles: np.ndarray, orders: np.ndarray,
                parallel: np.ndarray, vectorize: np.ndarray) -> np.ndarray:
    """The default score: the analytic cost model's time in seconds, one per candidate.

    Any `score_fn` with this signature (module-level, so it pickles) can replace it, e.g.
    a measured run on the host; lower is better.
    """
    return evaluate_batch(kernel, target, tiles, orders, parallel, vectorize).time_s


def _score_chunk(score_fn: ScoreFn, kernel: Kernel, target: Target, tiles, orders, parallel, vectorize) -> np.ndarray:
    """One scoring task: what an executor runs (picklable arguments, times back)."""
    return np.asarray(score_fn(kernel, target, tiles, orders, parallel, vectorize), dtype=float)


class _Scorer:
    """Scores batches of candidates, in chunks, serially or through an executor."""

    def __init__(self, executor, score_fn: ScoreFn):
        self.score_fn = score_fn
        self.seconds = 0.0
        self.executor, self._owned = open_executor(executor)   # _owned: what this scorer opened and must close
        self._futures = []

    def __call__(self, kernel: Kernel, target: Target, tiles, orders, parallel, vectorize) -> np.ndarray:
        started = time.perf_counter()
        try:
            return self._score(kernel, target, tiles, orders, parallel, vectorize)
        finally:
            self.seconds += time.perf_counter() - started

    def _score(self, kernel, target, tiles, orders, parallel, vectorize) -> np.ndarray:
        n = len(tiles)
        spans = [(lo, min(n, lo + CHUNK)) for lo in range(0, n, CHUNK)]
        if self.executor is None:
            parts = [_score_chunk(self.score_fn, kernel, target, tiles[a:b], orders[a:b], parallel[a:b],
                                  vectorize[a:b]) for a, b in spans]
        else:
            self._futures = [self.executor.submit(_score_chunk, self.score_fn, kernel, target, tiles[a:b],
                                                  orders[a:b], parallel[a:b], vectorize[a:b]) for a, b in spans]
            parts = [f.result() for f in self._futures]
            self._futures = []
        return np.concatenate(parts) if parts else np.zeros(0)

    def close(self) -> None:
        for f in getattr(self, "_futures", []):
            f.cancel()
        close_executor(self._owned)


def open_executor(executor) -> tuple[Executor | None, list]:
    """(executor to submit to, the things opened here that `close_executor` must close) for
    None / "serial", a concurrent.futures.Executor (or anything with `submit`),
    "processes[:N]" or "tcp://host:port" (a dask scheduler)."""
    if executor is None or executor == "serial":
        return None, []
    if isinstance(executor, Executor) or hasattr(executor, "submit"):
        return executor, []
    if isinstance(executor, str) and executor.startswith("processes"):
        _, _, workers = executor.partition(":")
        pool = ProcessPoolExecutor(max_workers=int(workers) if workers else None)
        return pool, [pool]
    if isinstance(executor, str) and "://" in executor:
        from dask.distributed import Client

        client = Client(executor)
        return client.get_executor(), [client]
    raise ValueError(f"executor must be None, a concurrent.futures.Executor, 'processes[:N]' or "
                     f"'tcp://host:port' (a dask scheduler), got {executor!r}")


def close_executor(owned: list) -> None:
    for thing in owned:
        if isinstance(thing, Executor):
            thing.shutdown(wait=True, cancel_futures=True)
        else:
            thing.close()


# --------------------------------------------------------------------------- the space of one kernel


@dataclass
class KernelSpace:
    """What may vary in one kernel's schedule, and the incumbent it starts from.

    Genomes are arrays: tiles [n, D, L] (sizes, inner <= outer), orders [n, L, D]
    (permutations per level), parallel [n, D] bool, vectorize [n] (loop index, -1 = the
    innermost loop). `unroll` is carried from the incumbent: the cost model does not score it.
    """

    kernel: Kernel
    target: Target
    levels: tuple[str, ...]
    choices: list[np.ndarray]                 # per loop, sorted tile sizes
    incumbent: Schedule
    incumbent_genome: tuple                   # (tiles[D, L], orders[L, D], parallel[D], vectorize)
    tune_orders: bool = True
    tune_annotations: bool = True
    max_spill: float = math.inf               # the rules' max_spill_ratio (or the incumbent's, if larger)

    @property
    def D(self) -> int:
        return len(self.kernel.loops)

    @property
    def L(self) -> int:
        return len(self.levels)

    @staticmethod
    def of(schedule: Schedule, target: Target, divisors_only: bool = False, tune_orders: bool = True,
           tune_annotations: bool = True, max_spill: float = math.inf) -> "KernelSpace":
        kernel = schedule.kernel
        model = kernel_model(kernel, target)
        levels = target.tiling_levels
        tiles, orders, parallel, vectorize = model.normalise(*model.schedule_arrays(schedule))
        sizes = TileSpace.of(kernel, target)  # the candidate space's tuner view (a whole loop: its extent)
        choices = [np.union1d(sizes.tuner(d, divisors_only), tiles[0, d])   # the incumbent's sizes stay reachable
                   for d in range(len(kernel.loops))]
        space = KernelSpace(kernel, target, levels, choices, schedule, (), tune_orders, tune_annotations)
        space.max_spill = max(max_spill, float(space.spill(tiles)[0]))
        rt, ro = space.repair(tiles[:1], np.array(orders[:1]))
        space.incumbent_genome = (rt[0], ro[0], np.array(parallel[0]), int(vectorize[0]))
        return space

    def spill(self, tiles) -> np.ndarray:
        """Spill ratio of each tiling (as the cost model defines it): the worst level's
        footprint overflow, a fraction of its capacity."""
        model = kernel_model(self.kernel, self.target)
        footprint = model.capacity_footprints(tiles)
        return np.clip(footprint / model.capacity[None, :] - 1.0, 0.0, None).max(axis=1)

    # ------------------------------------------------------------------ genomes ↔ schedules

    def schedule(self, tiles, orders, parallel, vectorize) -> Schedule:
        # what the genome does not hold (unroll, point-loop order, staging) is the incumbent's
        return Schedule.of_arrays(self.kernel, self.levels, tiles, orders, parallel, int(vectorize),
                                  keep=self.incumbent)

    def repair(self, tiles, orders):
        """Clip tiles inside their enclosing tile; at levels where no loop iterates, keep the
        next inner order (the order there changes nothing); order loops that run once at a
        level by index after the iterating ones (so equivalent genomes coincide), but for a
        compute point's loop, which keeps its place."""
        extents = np.array([l.extent for l in self.kernel.loops])
        tiles = np.minimum(np.minimum.accumulate(np.minimum(tiles, extents[None, :, None]), axis=2), extents[None, :, None])
        tiles = np.maximum(tiles, 1)
        n, D, L = tiles.shape
        enclosing = np.concatenate([np.broadcast_to(extents[None, :, None], (n, D, 1)), tiles[:, :, :-1]], axis=2)
        iterates = tiles < enclosing                                  # [n, D, L]
        # A compute point's loop keeps its place at its level even where it runs once: which
        # tile loops come before it decides the region its producers compute.
        names = self.kernel.loop_names
        for _, loop, level in self.kernel.compute_at:
            if level in self.levels and loop in names:
                iterates[:, names.index(loop), self.levels.index(level)] = True
        orders = orders.copy()
        for h in range(L - 1):   # the innermost level's order also orders the point loops: keep it
            it = np.take_along_axis(iterates[:, :, h], orders[:, h, :], axis=1)   # in order position
            # stable sort: iterating loops first in their order, then the others by index
            key = np.where(it, np.arange(D)[None, :], D + orders[:, h, :])
            pos = np.argsort(key, axis=1, kind="stable")
            orders[:, h, :] = np.take_along_axis(orders[:, h, :], pos, axis=1)
        return tiles, orders


def _genome_keys(tiles, orders, parallel, vectorize) -> list[bytes]:
    n = len(tiles)
    flat = np.concatenate([tiles.reshape(n, -1), orders.reshape(n, -1), parallel.reshape(n, -1).astype(np.int64),
                           vectorize.reshape(n, 1)], axis=1).astype(np.int64)
    return [row.tobytes() for row in flat]


# --------------------------------------------------------------------------- legality


# Verdicts outlive one tune_plan call: notebooks re-run cells, the Tune tab re-tunes.
LEGALITY_CACHE_SIZE = 20000
_LEGALITY_CACHE = LRU("tune.legality", LEGALITY_CACHE_SIZE)


class _Legality:
    """Legality per loop orders of one kernel, asked of poly once per orders.

    poly checks parallel loops one by one (a loop is parallel iff it carries no
    dependence), so one check with every loop marked parallel tells both whether the
    orders are legal and which loops may run in parallel under them.

    Prediction. A search asks about a new loop nest every few candidates, but the verdicts
    of one kernel rarely differ: on a network's per-op and fused kernels every nest the
    searches try is legal, with the same parallel loops (reductions reorderable). So, while
    every verdict this search has obtained agrees — orders legal, one set of parallel loops
    — a nest it has not asked about is *predicted* to have that verdict: it may enter the
    population on the prediction, but it becomes a result (a version, the best time) only
    once poly has checked it (`exact`), and the population's leader is checked every
    generation until CONFIRMED_VERDICTS nests agree. A checked verdict that disagrees (there,
    or when results are taken) ends prediction for the search: from then
    on every nest is checked before it enters the population, as without prediction.
    Predictions and checks depend only on what this search asked (never on which verdicts
    other searches left in the shared cache), so the search is deterministic.
    """

    def __init__(self, space: KernelSpace, predict: bool | None = None):
        self.space = space
        self.cache = _LEGALITY_CACHE
        self.asked: dict = {}      # nest key -> verdict, for the nests this search asked about
        self.seconds = 0.0
        self.predicting = PREDICT_LEGALITY if predict is None else predict
        self._agreed: tuple | None = None   # (True, may) every verdict asked so far agrees on

    def _key(self, tiles, orders) -> bytes:
        # Which loops iterate at which level shapes the nest (fission, tile loops), so it is
        # part of the key; the sizes themselves do not change what depends on what.
        extents = np.array([l.extent for l in self.space.kernel.loops])
        enclosing = np.concatenate([extents[:, None], np.asarray(tiles)[:, :-1]], axis=1)
        iterates = np.asarray(tiles) < enclosing
        return np.asarray(orders, dtype=np.int64).tobytes() + iterates.tobytes()

    def verdict(self, tiles, orders) -> tuple[bool, np.ndarray]:
        """(orders legal, bool [D]: loops that may be parallel under them), from poly."""
        nest = self._key(tiles, orders)
        found = self.asked.get(nest)
        if found is not None:
            return found
        # Keyed by the kernel's canonical form: a network's repeated layers share verdicts.
        key = (canonical_kernel(self.space.kernel), poly._isl_names_ok(self.space.kernel), self.space.levels, nest)
        found = self.cache.get(key)
        if found is None:
            started = time.perf_counter()
            sp = self.space
            D = sp.D
            schedule = sp.schedule(tiles, orders, np.ones(D, dtype=bool), -1)
            verdict = poly.check_schedule(schedule)
            refused = {v.loop for v in verdict.violated if v.loop is not None}
            order_ok = not any(v.loop is None for v in verdict.violated)
            nest_loops = lower(schedule)
            may = np.array([not (set(loop_dims(nest_loops, name)) & refused) for name in sp.kernel.loop_names])
            found = (order_ok, may)
            self.cache.put(key, found)
            self.seconds += time.perf_counter() - started
        self.asked[nest] = found
        if self._agreed is None:
            self._agreed = found
        if not found[0] or not np.array_equal(found[1], self._agreed[1]):
            self.predicting = False          # the verdicts differ: check every nest from now on
        return found

    def judge(self, tiles, orders, exact: bool) -> tuple[tuple[bool, np.ndarray], bool]:
        """(verdict, whether it is a prediction): poly's verdict if this search asked it (or
        `exact`, or prediction is off), else the verdict every one asked so far agrees on."""
        if not exact and self.predicting and self._agreed is not None:
            nest = self._key(tiles, orders)
            if nest not in self.asked:
                return self._agreed, True
        return self.verdict(tiles, orders), False

    def ok(self, tiles, orders, parallel, vectorize, exact: bool = True) -> bool:
        return self.admits(tiles, orders, parallel, exact)[0]

    def admits(self, tiles, orders, parallel, exact: bool) -> tuple[bool, bool]:
        """(legal, predicted) for a candidate: its orders' verdict, and its parallel marks
        within the loops that verdict lets run in parallel."""
        (order_ok, may), predicted = self.judge(tiles, orders, exact)
        return order_ok and not np.any(np.asarray(parallel, dtype=bool) & ~may), predicted


def legal(schedule: Schedule) -> bool:
    """poly's verdict on a tiled schedule (as the pipeline asks it)."""
    return poly.check_schedule(schedule).ok


# --------------------------------------------------------------------------- the search of one kernel


Batch = tuple  # (tiles [n, D, L], orders [n, L, D], parallel [n, D] bool, vectorize [n])


def _stack(genomes: list) -> Batch:
    return (np.stack([g[0] for g in genomes]), np.stack([g[1] for g in genomes]),
            np.stack([np.asarray(g[2], dtype=bool) for g in genomes]),
            np.array([int(g[3]) for g in genomes], dtype=np.int64))


def _concat(*batches: Batch) -> Batch:
    batches = [b for b in batches if b is not None and len(b[0])]
    return tuple(np.concatenate([b[i] for b in batches]) for i in range(4))


@dataclass
class _Search:
    """The evolutionary search state for one kernel."""

    space: KernelSpace
    rng: np.random.Generator
    configs: int
    legality: _Legality
    seen: dict = field(default_factory=dict)             # genome key -> time (scored, not known illegal)
    genomes: dict = field(default_factory=dict)          # genome key -> (tiles, orders, parallel, vectorize)
    board: list = field(default_factory=list)           # (time, key) of `seen`, ascending
    evaluated: int = 0                                   # candidates scored
    considered: int = 0                                  # candidates new to the search (scored or infeasible)
    rejected: int = 0                                    # found illegal
    infeasible: set = field(default_factory=set)        # spill beyond the rules' limit: never scored
    orders_known: set = field(default_factory=set)      # loop orders already in the search
    unchecked: set = field(default_factory=set)         # scored, legality not yet asked
    predicted: set = field(default_factory=set)         # admitted on a predicted verdict, not yet checked
    illegal: set = field(default_factory=set)           # scored, found illegal: never a result
    pending: list = field(default_factory=list)         # legal repairs waiting to be scored
    population: list = field(default_factory=list)       # genome keys, best first

    def __post_init__(self):
        sp = self.space
        self._lengths = np.array([len(c) for c in sp.choices])
        self._padded = np.zeros((sp.D, self._lengths.max()), dtype=np.int64)
        for d, c in enumerate(sp.choices):
            self._padded[d, :len(c)] = c
            self._padded[d, len(c):] = c[-1]

    @property
    def incumbent_key(self) -> bytes:
        t, o, p, v = self.space.incumbent_genome
        return _genome_keys(t[None], o[None], p[None], np.array([v]))[0]

    def best_time(self) -> float:
        """The best legal time so far (checks legality of the leaders as needed)."""
        best = self.verified(1)
        return best[0][0] if best else math.inf

    # ------------------------------------------------------------------ variation (vectorised)

    def _random(self, n: int, new_orders: float = 0.5) -> Batch:
        """Random tiles; the incumbent's orders (or, with probability `new_orders`, one
        random permutation for every level) and annotations."""
        sp, rng = self.space, self.rng
        tiles = np.empty((n, sp.D, sp.L), dtype=np.int64)
        for d, ch in enumerate(sp.choices):
            tiles[:, d, :] = ch[rng.integers(0, len(ch), size=(n, sp.L))]
        tiles = -np.sort(-tiles, axis=2)   # outer >= inner
        it, io, ip, iv = sp.incumbent_genome
        orders = np.repeat(io[None], n, axis=0)
        if sp.tune_orders:
            fresh = np.flatnonzero(rng.random(n) < new_orders)
            perms = np.argsort(rng.random((len(fresh), sp.D)), axis=1)
            orders[fresh] = perms[:, None, :]
        return tiles, orders, np.repeat(ip[None], n, axis=0), np.full(n, iv, dtype=np.int64)

    def _mutate(self, batch: Batch, strength: float = 1.0) -> Batch:
        """1 + Poisson(strength) moves per genome, each by one of the `MUTATORS` (drawn by
        their shares of the moves): a tile a step or two along its sizes, two loops of one
        level's order swapped, a parallel mark toggled or the vectorised loop moved."""
        sp, rng = self.space, self.rng
        genome = [x.copy() for x in batch]
        n = genome[0].shape[0]
        moves = 1 + rng.poisson(strength, size=n)
        shares = [m.share(sp) for m in MUTATORS]
        bounds = list(np.cumsum(shares))
        if shares[-1] > 0:
            bounds[-1] = math.inf                  # rounding never leaves a draw without a move
        for r in range(int(moves.max(initial=0))):
            act = np.flatnonzero(moves > r)
            u = rng.random(len(act))
            low = 0.0
            for mutator, high in zip(MUTATORS, bounds):
                rows = act[(u >= low) & (u < high)] if low > 0 else act[u < high]
                low = high
                if len(rows):
                    mutator.apply(self, rows, *genome)
        return tuple(genome)

    def _breed(self, n: int) -> Batch:
        """n children of the population: tournament parents, uniform crossover (per loop
        for tiles and parallel marks, per level for orders) 3 times in 5, then mutation."""
        rng = self.rng
        if not self.population:
            # Nothing legal has been scored yet (every candidate so far was illegal or
            # overflowed): breed from the incumbent until something legal is found.
            return self._mutate(tuple(np.repeat(x, n, axis=0) for x in _stack([self.space.incumbent_genome])))
        pop = _stack([self.genomes[k] for k in self.population])
        fit = np.array([self.seen[k] for k in self.population])
        K, rows = len(fit), np.arange(n)

        def tournament():
            idx = rng.integers(K, size=(n, TOURNAMENT))
            return idx[rows, np.argmin(fit[idx], axis=1)]

        a, b = tournament(), tournament()
        keep_a = ~((rng.random(n) < 0.6) & (K > 1))
        D, L = self.space.D, self.space.L
        from_a = lambda shape: (rng.random((n,) + shape) < 0.5) | keep_a.reshape((n,) + (1,) * len(shape))
        T = np.where(from_a((D,))[:, :, None], pop[0][a], pop[0][b])
        O = np.where(from_a((L,))[:, :, None], pop[1][a], pop[1][b])
        P = np.where(from_a((D,)), pop[2][a], pop[2][b])
        V = np.where(from_a(()), pop[3][a], pop[3][b])
        return self._mutate((T, O, P, V))

    # ------------------------------------------------------------------ legality

    def _legal_variant(self, genome, exact: bool = True) -> tuple | None:
        """The genome if legal; else repaired (parallel marks the orders forbid dropped,
        or the incumbent's orders and parallel set); None when even that is illegal."""
        tiles, orders, parallel, vectorize = genome
        (order_ok, may), _ = self.legality.judge(tiles, orders, exact)
        if order_ok:
            return tiles, orders, parallel & may, vectorize
        it, io, ip, iv = self.space.incumbent_genome
        if self.legality.ok(tiles, io, ip, vectorize, exact):
            return tiles, io.copy(), ip.copy(), vectorize
        return None

    def iter_verified(self, exact: bool = True):
        """Legal candidates (time, key), fastest first. Candidates reached for the first
        time are judged; an illegal one leaves `seen` and the board (it is never a
        result) and its legal repair is queued for scoring. `exact`: every candidate
        yielded was checked by poly; else a candidate may stand on a predicted verdict
        (`_Legality`: the population, never a result)."""
        i = 0
        while i < len(self.board):
            t, key = self.board[i]
            if key in self.unchecked or (key in self.predicted and (exact or not self.legality.predicting)):
                self.unchecked.discard(key)
                genome = self.genomes[key]
                legal, predicted = self.legality.admits(genome[0], genome[1], genome[2], exact)
                if predicted:
                    self.predicted.add(key)
                else:
                    self.predicted.discard(key)
                if not legal:
                    del self.seen[key]
                    self.board.pop(i)
                    self.illegal.add(key)
                    self.rejected += 1
                    repaired = self._legal_variant(genome, exact)
                    if repaired is not None:
                        self.pending.append(repaired)
                    continue
            yield t, key
            i += 1

    def verified(self, n: int, exact: bool = True) -> list[tuple[float, bytes]]:
        """The n fastest legal candidates, (time, key) ascending (see `iter_verified`)."""
        out = []
        for item in self.iter_verified(exact):
            if len(out) >= n:
                break
            out.append(item)
        return out

    # ------------------------------------------------------------------ evaluation

    def evaluate(self, batch: Batch | None, scorer, limit: int, new_orders: int = NEW_ORDERS_PER_GENERATION) -> int:
        """Repair, deduplicate and score up to `limit` new candidates (the legal repairs of
        illegal ones first). Legality is decided before a candidate can enter the
        population or a version (`iter_verified`); at most `new_orders` loop orders new to
        the search come in (candidates with more are dropped unscored)."""
        sp = self.space
        pending = _stack(self.pending) if self.pending else None
        self.pending = []
        batch = _concat(pending, batch) if (pending is not None or batch is not None) else None
        if batch is None or not len(batch[0]) or limit <= 0:
            return 0
        tiles, orders = sp.repair(batch[0], batch[1])
        parallel, vectorize = batch[2].astype(bool), batch[3].astype(np.int64)
        keys = _genome_keys(tiles, orders, parallel, vectorize)
        pick, batch_keys = [], set()
        for i, key in enumerate(keys):
            if key in self.seen or key in self.illegal or key in self.infeasible or key in batch_keys:
                continue
            order_key = orders[i].tobytes()
            if order_key not in self.orders_known:
                if new_orders <= 0:
                    continue
                new_orders -= 1
                self.orders_known.add(order_key)
            pick.append(i)
            batch_keys.add(key)
            if len(pick) >= limit:
                break
        if not pick:
            return 0
        pick = np.array(pick)
        self.considered += len(pick)
        # Tilings that overflow a level beyond the rules' max_spill_ratio are out of the space.
        fits = sp.spill(tiles[pick]) <= sp.max_spill + 1e-12
        self.infeasible.update(keys[i] for i in pick[~fits])
        pick = pick[fits]
        if not len(pick):
            return 0
        times = scorer(sp.kernel, sp.target, tiles[pick], orders[pick], parallel[pick], vectorize[pick])
        for j, i in enumerate(pick):
            t = float(times[j])
            t = t if math.isfinite(t) else math.inf
            self.seen[keys[i]] = t
            self.genomes[keys[i]] = (tiles[i], orders[i], parallel[i], int(vectorize[i]))
            self.unchecked.add(keys[i])
            bisect.insort(self.board, (t, keys[i]))
        self.evaluated += len(pick)
        return len(pick)

    def _select(self, size: int):
        if len(self.legality.asked) < CONFIRMED_VERDICTS:
            # The leader is checked by poly until the search has seen enough nests' verdicts
            # agree (a failed prediction ends prediction); results are always checked.
            self.verified(1)
        keep = [k for _, k in self.verified(size, exact=False)]
        if self.incumbent_key in self.seen and self.incumbent_key not in keep:
            keep = keep[:-1] if len(keep) >= size else keep
            keep.append(self.incumbent_key)   # the rules' choice never leaves the population
        self.population = keep

    # ------------------------------------------------------------------ the loop

    def start(self, scorer, pop_size: int) -> None:
        """The first population: the incumbent, mutations of it, random samples."""
        inc = self.space.incumbent_genome
        n_mut = pop_size // 2
        first = _stack([inc])
        mutants = self._mutate(tuple(np.repeat(x, n_mut, axis=0) for x in first), strength=1.5)
        randoms = self._random(pop_size - 1 - n_mut)
        self.orders_known.add(self.space.incumbent_genome[1].astype(np.int64).tobytes())
        self.evaluate(_concat(first, mutants, randoms), scorer, max(1, min(self.configs, pop_size)),
                      new_orders=NEW_ORDERS_START)
        self._select(pop_size)

    def run(self, scorer, over_budget: Callable[[], bool] = lambda: False,
            after_generation: Callable[[], None] = lambda: None) -> bool:
        """Generations until `configs` candidates are scored, the space is exhausted or
        `over_budget()`; returns whether the budget stopped it."""
        pop = population_size(self.configs)
        self.start(scorer, pop)
        after_generation()
        stale = 0
        for _ in range(MAX_GENERATIONS_PER_CONFIG * self.configs):
            if self.evaluated >= self.configs:
                break
            if over_budget():
                return True
            considered = self.considered
            self.step(scorer, pop)
            after_generation()
            stale = stale + 1 if self.considered == considered else 0
            if stale >= 3:
                break    # the space is exhausted
        return False

    def step(self, scorer, pop_size: int) -> int:
        """One generation: breed `pop_size` children, score the new ones. Returns how many."""
        remaining = self.configs - self.evaluated
        if remaining <= 0:
            return 0
        considered = self.considered
        done = self.evaluate(self._breed(pop_size), scorer, remaining)
        if self.considered == considered:
            # Everything bred was seen before: explore with random samples instead.
            done = self.evaluate(self._random(pop_size, new_orders=1.0), scorer, remaining)
        self._select(pop_size)
        return done


def population_size(configs: int) -> int:
    return int(np.clip(configs // 12, MIN_POPULATION, MAX_POPULATION))


# --------------------------------------------------------------------------- versions


def _top_combinations(per_kernel: list[list[tuple[float, bytes]]], k: int) -> list[tuple[float, tuple[int, ...]]]:
    """The k smallest sums picking one entry per list (each list sorted ascending)."""
    if not per_kernel or any(not lst for lst in per_kernel):
        return []
    start = tuple(0 for _ in per_kernel)
    total = lambda idx: sum(per_kernel[i][j][0] for i, j in enumerate(idx))
    heap = [(total(start), start)]
    seen = {start}
    out = []
    while heap and len(out) < k:
        t, idx = heapq.heappop(heap)
        out.append((t, idx))
        for i in range(len(idx)):
            if idx[i] + 1 < len(per_kernel[i]):
                nxt = idx[:i] + (idx[i] + 1,) + idx[i + 1:]
                if nxt not in seen:
                    seen.add(nxt)
                    heapq.heappush(heap, (total(nxt), nxt))
    return out


# --------------------------------------------------------------------------- mutators


@dataclass(frozen=True)
class Mutator:
    """One kind of move of the tuner, over the genome (tiles T[n, D, L], orders O[n, L, D],
    parallel marks P[n, D], vectorised loop V[n]) — the arrays a trace's steps of one
    primitive set. `share(space)` is its part of all moves (the shares sum to 1);
    `apply(search, rows, T, O, P, V)` changes the genomes `rows` in place. A new kind of
    move is one more entry in `MUTATORS`."""

    name: str
    step: str                                  # the trace primitive it varies
    share: Callable[["KernelSpace"], float]
    apply: Callable[..., None]


def _tile_share(sp: "KernelSpace") -> float:
    return 0.65 if (sp.tune_orders and sp.D > 1) or sp.tune_annotations else 1.0


def _order_share(sp: "KernelSpace") -> float:
    return (0.85 if sp.tune_orders and sp.D > 1 else _tile_share(sp)) - _tile_share(sp)


def _annotation_share(sp: "KernelSpace") -> float:
    return (1.0 - _tile_share(sp) - _order_share(sp)) if sp.tune_annotations else 0.0


def _tile_step(search, rows, T, O, P, V) -> None:
    """A tile a step or two along its loop's sizes (anywhere, 1 in 5); the tiles of the other
    levels move with it so that inner tiles never exceed outer ones."""
    rng, D, L = search.rng, search.space.D, search.space.L
    levels = np.arange(L)
    d = rng.integers(D, size=len(rows))
    h = rng.integers(L, size=len(rows))
    cur = T[rows, d, h]
    idx = np.empty(len(rows), dtype=np.int64)
    for dd in range(D):
        sel = d == dd
        idx[sel] = np.searchsorted(search.space.choices[dd], cur[sel])
    step = rng.choice(np.array([-2, -1, 1, 2]), size=len(rows))
    jump = rng.random(len(rows)) >= 0.8
    anywhere = (rng.random(len(rows)) * search._lengths[d]).astype(np.int64)
    idx = np.clip(np.where(jump, anywhere, idx + step), 0, search._lengths[d] - 1)
    value = search._padded[d, idx][:, None]
    sub = T[rows, d, :]
    # keep the nest: inner tiles may not exceed it, outer ones not undercut it
    sub = np.where(levels[None] > h[:, None], np.minimum(sub, value),
                   np.where(levels[None] < h[:, None], np.maximum(sub, value), value))
    T[rows, d, :] = sub


def _order_swap(search, rows, T, O, P, V) -> None:
    """Two loops of one level's order swapped; half the time that order copied to every
    level (levels often want the same order, and each new order costs a legality check)."""
    rng, D, L = search.rng, search.space.D, search.space.L
    h = rng.integers(L, size=len(rows))
    a = rng.integers(D, size=len(rows))
    b = (a + 1 + rng.integers(D - 1, size=len(rows))) % D
    va, vb = O[rows, h, a].copy(), O[rows, h, b].copy()
    O[rows, h, a], O[rows, h, b] = vb, va
    same = rng.random(len(rows)) < 0.5
    O[rows[same]] = O[rows[same], h[same]][:, None, :]


def _annotation_flip(search, rows, T, O, P, V) -> None:
    """A parallel mark toggled (3 in 5) or the vectorised loop moved (or dropped)."""
    rng, D = search.rng, search.space.D
    toggle = rng.random(len(rows)) < 0.6
    tr = rows[toggle]
    d = rng.integers(D, size=len(tr))
    P[tr, d] = ~P[tr, d]
    vr = rows[~toggle]
    V[vr] = rng.integers(-1, D, size=len(vr))


MUTATORS: tuple[Mutator, ...] = (
    Mutator("tile step", "tile", _tile_share, _tile_step),
    Mutator("order swap", "interchange", _order_share, _order_swap),
    Mutator("parallel toggle / vectorise move", "parallel, vectorize", _annotation_share, _annotation_flip),
)


@dataclass(frozen=True)
class KernelMove:
    """A move that changes the kernel itself, and so its cost model (the genome is one
    model's arrays): tried on each kernel's best schedule after its search, kept where the
    scorer says it is faster, legal and within the spill limit. `candidates(schedule)` are
    the schedules it proposes. A new kind of kernel move is one more entry in `KERNEL_MOVES`."""

    name: str
    step: str                                   # the trace primitive it varies
    candidates: Callable[[Schedule], list]


def _compute_at_placements(schedule: Schedule) -> list[Schedule]:
    """The kernel's computed-at tensors moved together to another compute point: every
    loop their regions follow, at every level but the innermost."""
    from .ir.loopnest import regions

    kernel = schedule.kernel
    if not kernel.compute_at:
        return []
    spans = regions(kernel)
    followed = {a for loops in spans.values() for r in loops.values() for a, _ in r.terms}
    loops = [l for l in kernel.loop_names if l in followed and kernel.extents[l] > 1]
    out = []
    for level in schedule.levels[:-1] or schedule.levels:
        for loop in loops:
            if all((l, lv) == (loop, level) for _, l, lv in kernel.compute_at):
                continue
            moved = kernel
            for tensor, _, _ in kernel.compute_at:
                moved = moved.with_compute_at(tensor, loop, level)
            out.append(replace(schedule, kernel=moved))
    return out


KERNEL_MOVES: tuple[KernelMove, ...] = (
    KernelMove("compute_at placement", "compute_at", _compute_at_placements),
)
PRIMITIVE_MOVES_CHECKED = 4     # of a primitive's candidates, the fastest few checked (spill, isl)


def _kernel_moves(entry: tuple[float, Schedule], target, score_fn, max_spill: float):
    """(time, schedule) of the best kernel move from `entry`, or None when none beats it:
    the KERNEL_MOVES, then every step a tuned primitive's decisions offer (`_primitive_moves`)."""
    from .canon import evaluate

    best_time, best = entry
    found = None
    for move in KERNEL_MOVES:
        for candidate in move.candidates(best):
            if evaluate(candidate, target).spill_ratio > max_spill or not poly.check_schedule(candidate).ok:
                continue
            t = float(_score_chunk(score_fn, *((candidate.kernel, target) + _arrays(candidate, target)))[0])
            if t < best_time * (1 - 1e-9):
                found, best_time = (t, candidate), t
    moved = _primitive_moves((best_time, found[1] if found else best), target, score_fn, max_spill)
    return moved or found


def _primitive_moves(entry: tuple[float, Schedule], target, score_fn, max_spill: float):
    """(time, schedule) of the fastest step a `tuned` primitive's decisions offer on `entry`'s
    schedule (schedule/: `split`'s perfect tilings, and any primitive registered later with
    `tuned = True`), scored in one batch; the fastest few that gain are checked for spill and
    legality. None when none beats it. A new primitive is searched here with no change."""
    from .canon import evaluate
    from .schedule import PRIMITIVES, ScheduleError, apply_step

    best_time, best = entry
    candidates = []
    for cls in PRIMITIVES.values():
        if not cls.tuned:
            continue
        for decision in cls.decisions(best.kernel.without_compute_at(), best.levels):
            for value in decision.choices[1:]:
                step = cls.step_for(best, decision.key, value)
                try:
                    candidates.append(apply_step(best, step)) if step is not None else None
                except ScheduleError:
                    continue
    if not candidates:
        return None
    arrays = [_arrays(c, target) for c in candidates]
    times = _score_chunk(score_fn, best.kernel, target, *(np.concatenate([a[j] for a in arrays]) for j in range(4)))
    for i in np.argsort(times, kind="stable")[:PRIMITIVE_MOVES_CHECKED]:
        t, candidate = float(times[i]), candidates[int(i)]
        if t >= best_time * (1 - 1e-9):
            break
        if evaluate(candidate, target).spill_ratio <= max_spill and poly.check_schedule(candidate).ok:
            return t, candidate
    return None


def _kernel_entry(schedule: Schedule) -> dict:
    from .schedule import schedule_json

    return schedule_json(schedule)


# --------------------------------------------------------------------------- public API


def expected_gain(kernel: Kernel, time_s: float, target: Target) -> float:
    """What tuning `kernel` can win at most: its time under the rules' schedule minus its
    roofline floor (its flops at peak, or its inputs and outputs moved once through DRAM,
    whichever is slower); at least 5% of its time, so every kernel gets a share."""
    dtype = kernel.tensor(kernel.anchor_statement.target).dtype
    moved = sum(kernel.tensor(t).nbytes for t in kernel.inputs + kernel.outputs)
    floor = max(kernel.flops / target.peak_flops(dtype), moved / target.dram_bandwidth)
    return max(time_s - floor, 0.05 * time_s)


def split_configs(times: Sequence[float], configs: int) -> list[int]:
    """Configurations per kernel, in proportion to kernel time (largest remainders)."""
    total = sum(times)
    if configs <= 0 or not times:
        return [0] * len(times)
    weights = [t / total if total > 0 else 1 / len(times) for t in times]
    raw = [configs * w for w in weights]
    out = [int(math.floor(r)) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: (-(raw[i] - out[i]), i))[: configs - sum(out)]:
        out[i] += 1
    return out


@dataclass
class KernelResult:
    """What tune_plan keeps of one kernel's search: its candidates, checked with their
    exact schedules, fastest first (None stands for the incumbent), and its counts.
    Small and picklable: a search run by an executor sends back this, not itself."""

    entries: list            # [(time, Schedule | None)], None = the incumbent (the rules' schedule)
    evaluated: int
    best_time: float
    legality_checks: int
    legality_seconds: float
    scoring_seconds: float
    rejected: int
    rejected_spill: int

    @staticmethod
    def of(search: "_Search", keep: int, scoring_seconds: float = 0.0) -> "KernelResult":
        inc_key = search.incumbent_key
        entries: list = []
        for t, key in search.iter_verified():
            if len(entries) >= keep:
                break
            if entries and t == entries[-1][0]:
                # The same time as the last kept: an equivalent schedule, not another
                # version; on a tie the rules' own schedule is the one shown.
                if key == inc_key:
                    entries[-1] = (t, None)
                continue
            chosen = None if key == inc_key else search.space.schedule(*search.genomes[key])
            if chosen is not None and not legal(chosen):   # the exact schedule, once more
                continue
            entries.append((t, chosen))
        return KernelResult(entries, search.evaluated, entries[0][0] if entries else math.inf,
                            len(search.legality.asked), search.legality.seconds, scoring_seconds,
                            search.rejected, len(search.infeasible))


def _search_task(schedule: Schedule, target: Target, divisors_only: bool, max_spill: float, seed: int,
                 share: int, score_fn: ScoreFn, keep: int) -> KernelResult:
    """One kernel's whole search (what an executor runs when kernels are tuned in parallel):
    the same search tune_plan runs serially, with the same seed and share.

    isl contexts and the caches are not thread-safe: in a worker running tasks in threads
    (a threaded dask worker), searches take turns; processes run them side by side."""
    with _SEARCH_LOCK:
        space = KernelSpace.of(schedule, target, divisors_only, max_spill=max_spill)
        search = _Search(space, np.random.default_rng(seed), share, _Legality(space))
        scorer = _Scorer(None, score_fn)
        search.run(scorer)
        return KernelResult.of(search, keep, scorer.seconds)


_SEARCH_LOCK = threading.Lock()


def _tune_in_parallel(plan: Plan, target: Target, gains, order, configs: int, keep: int, seed: int,
                      divisors_only: bool, max_spill: float, score_fn: ScoreFn, scorer: "_Scorer",
                      results: dict, over_budget, report) -> bool:
    """Run the kernels' searches on `scorer.executor`, one task per kernel, with exactly the
    shares the serial loop gives them, so the result is the serial one.

    A kernel's share depends on what the kernels before it left unused (an exhausted small
    space passes its rest on), known only once they finish. Kernels ahead are started on
    the prediction that every earlier search uses its whole share; a prediction proved wrong
    is discarded and that kernel run again with its true share. Returns whether the time
    budget stopped the tuning."""
    executor = scorer.executor
    window = 2 * max(1, int(getattr(executor, "_max_workers", 2) or 2))
    running: dict[int, tuple[int, object]] = {}    # position in `order` -> (share, future)
    left_configs, left_time = configs, sum(gains)
    try:
        for pos, i in enumerate(order):
            share = split_configs([gains[i], max(left_time - gains[i], 0.0)], left_configs)[0]
            # Start (or restart) the kernels ahead on the prediction from here.
            lc, lt, ahead = left_configs, left_time, 0
            for q in range(pos, len(order)):
                if ahead >= window:
                    break
                j = order[q]
                predicted = split_configs([gains[j], max(lt - gains[j], 0.0)], lc)[0]
                lt -= gains[j]
                if predicted < 2:
                    continue
                lc -= predicted
                ahead += 1
                if q in running and running[q][0] == predicted:
                    continue
                if q in running:
                    running[q][1].cancel()
                if over_budget():
                    break
                running[q] = (predicted, executor.submit(_search_task, plan.schedules[j], target, divisors_only,
                                                         max_spill, seed + j, predicted, score_fn, keep))
            left_time -= gains[i]
            if share < 2:
                continue     # too small a share to search: the rules' schedule stands (its share goes on)
            if pos not in running or running[pos][0] != share:
                if over_budget():
                    return True
                running[pos] = (share, executor.submit(_search_task, plan.schedules[i], target, divisors_only,
                                                       max_spill, seed + i, share, score_fn, keep))
            result = running.pop(pos)[1].result()
            results[i] = result
            left_configs -= result.evaluated
            report()
            if over_budget() and pos + 1 < len(order):
                return True
        return False
    finally:
        for _, future in running.values():
            future.cancel()


def tune_plan(plan: Plan, ctx, configs: int, top: int = 3, budget: float | None = None,
              progress: Callable[[int, int, float], None] | None = None, executor=None,
              score_fn: ScoreFn = model_score, divisors_only: bool = False,
              max_spill: float | None = None,
              measure: Callable[[Plan], float] | None = None) -> tuple[Plan, dict, dict]:
    """Tune every kernel of `plan` and return (best plan, versions, tuning summary).

    plan: the plan the rules produced (its schedules are the incumbents, kept in every
    population: the result is never slower than `plan` under `score_fn`); ctx: a
    PassContext (target, seed); configs: candidate schedules to score in all, split over
    kernels by their time; top: whole-program versions kept; budget: seconds, checked
    between generations; progress: callback(done, total, best_time_s) after each
    generation; executor: None (serial), a concurrent.futures.Executor, "processes[:N]"
    or "tcp://host:port" (a dask scheduler) — the result does not depend on it; score_fn:
    the scorer (default: the cost model's time); divisors_only: tile sizes from divisors;
    max_spill: the largest spill ratio a tuned tiling may have (default: the rules'
    tiling.max_spill_ratio, as the tiling pass obeys; never below the incumbent's own);
    measure: `measure(plan) -> seconds` for expensive measured scoring (e.g.
    `host.measured_scorer()`): the model ranks, then the best MEASURED_CANDIDATES
    whole-program versions and the rules' plan are measured and the versions re-ranked by
    measured time (entries gain "measured_s").

    A KeyboardInterrupt (^C, or raised by `progress`) stops the search: the best found so
    far is returned with tuning["interrupted"] = True.
    """
    target = load_target(ctx.target)
    started = time.perf_counter()
    if max_spill is None:
        rules = getattr(ctx, "rules", None)
        max_spill = float((getattr(rules, "tiling", None) or {}).get("max_spill_ratio", DEFAULT_MAX_SPILL))
    seed = int(getattr(ctx, "seed", 0) or 0)
    kernels = list(plan.kernels)
    incumbent_times = [float(_score_chunk(score_fn, *((s.kernel, target) + _arrays(s, target)))[0])
                       for s in plan.schedules]
    rules_time = sum(incumbent_times)
    # The budget follows the expected gain: a kernel's headroom above its own roofline
    # floor (a kernel already at the physical limit has nothing to win), not its time alone.
    gains = [expected_gain(k, t, target) for k, t in zip(kernels, incumbent_times)]
    order = sorted(range(len(kernels)), key=lambda i: (-gains[i], i))   # most to win first
    searches: dict[int, _Search] = {}
    interrupted = budget_exhausted = False
    scorer = _Scorer(executor, score_fn)

    results: dict[int, KernelResult] = {}     # searches run elsewhere (an executor), and finished ones

    def best_time(i: int) -> float:
        if i in searches:
            return min(searches[i].best_time(), incumbent_times[i])
        if i in results:
            return min(results[i].best_time, incumbent_times[i])
        return incumbent_times[i]

    def best_total() -> float:
        return sum(best_time(i) for i in range(len(kernels)))

    def over_budget() -> bool:
        return budget is not None and time.perf_counter() - started > budget

    def report() -> None:
        if progress:
            progress(sum(s.evaluated for s in searches.values()) + sum(r.evaluated for r in results.values()),
                     configs, best_total())

    keep = max(top, 1) if measure is None else max(top, MEASURED_CANDIDATES)
    try:
        if scorer.executor is not None and sum(1 for g in gains if g > 0) > 1:
            budget_exhausted = _tune_in_parallel(plan, target, gains, order, configs, keep, seed, divisors_only,
                                                 max_spill, score_fn, scorer, results, over_budget, report)
        else:
            budget_exhausted = _tune_serially(plan, target, gains, order, configs, seed, divisors_only, max_spill,
                                              scorer, searches, over_budget, report)
        done = sum(s.evaluated for s in searches.values()) + sum(r.evaluated for r in results.values())
        if progress and done < configs:
            progress(done, done, best_total())   # finished early (small or exhausted spaces): close the bar
    except KeyboardInterrupt:
        interrupted = True
    finally:
        scorer.close()
    for i, search in searches.items():
        results[i] = KernelResult.of(search, keep)

    per_kernel = _per_kernel_candidates(plan, results, incumbent_times, target, score_fn, max_spill)
    candidates, measured = _ranked_candidates(plan, per_kernel, keep, rules_time,
                                              None if interrupted else measure)
    versions, top_entries = _versions(plan, candidates, measured, top, rules_time)
    best_plan = versions["v1"] if versions else plan
    tuning = _tuning_summary(kernels, results, incumbent_times, top_entries, scorer, max_spill,
                             seconds=time.perf_counter() - started, interrupted=interrupted,
                             budget_exhausted=budget_exhausted, rules_time=rules_time)
    return best_plan, versions, tuning


def _tune_serially(plan: Plan, target: Target, gains, order, configs: int, seed: int, divisors_only: bool,
                   max_spill: float, scorer: "_Scorer", searches: dict, over_budget, report) -> bool:
    """Search the kernels one after another, most to win first, into `searches`; returns
    whether the time budget stopped the tuning."""
    left_configs, left_time = configs, sum(gains)
    for i in order:
        # This kernel's share of what is left: configurations a smaller (exhausted)
        # space did not use go to the kernels after it.
        share = split_configs([gains[i], max(left_time - gains[i], 0.0)], left_configs)[0]
        left_time -= gains[i]
        if share < 2:
            continue     # too small a share to search: the rules' schedule stands (its share goes on)
        if over_budget():
            return True
        space = KernelSpace.of(plan.schedules[i], target, divisors_only, max_spill=max_spill)
        search = _Search(space, np.random.default_rng(seed + i), share, _Legality(space))
        searches[i] = search
        budget_exhausted = search.run(scorer, over_budget, report)
        left_configs -= search.evaluated
        if budget_exhausted:
            return True
    return False


def _per_kernel_candidates(plan: Plan, results: dict, incumbent_times: list, target: Target, score_fn: ScoreFn,
                           max_spill: float) -> list[list[tuple[float, Schedule]]]:
    """Per kernel: its candidates, fastest first, each checked with its exact schedule; a
    kernel move's best first when one beats them."""
    per_kernel: list[list[tuple[float, Schedule]]] = []
    for i, schedule in enumerate(plan.schedules):
        result = results.get(i)
        entries = [(t, schedule if chosen is None else chosen) for t, chosen in result.entries] if result else []
        per_kernel.append(entries or [(incumbent_times[i], schedule)])

    # Moves that change the kernel itself (KERNEL_MOVES), on each kernel's best schedule and
    # on the rules' one (a tie of tiles may hide the move that pays from the other).
    for i, entries in enumerate(per_kernel):
        starts = [entries[0]] + ([(incumbent_times[i], plan.schedules[i])] if entries[0][1] is not plan.schedules[i]
                                 else [])
        moves = [m for m in (_kernel_moves(e, target, score_fn, max_spill) for e in starts) if m is not None]
        if moves:
            per_kernel[i] = [min(moves, key=lambda m: m[0])] + entries
    return per_kernel


def _ranked_candidates(plan: Plan, per_kernel: list, keep: int, rules_time: float,
                       measure: Callable[[Plan], float] | None) -> tuple[list, list]:
    """The `keep` fastest whole-program combinations [(time, schedules)], and their measured
    times: with `measure`, the rules' plan joins them and all are re-ranked by measured time."""
    combos = _top_combinations([[(t, b"") for t, _ in entries] for entries in per_kernel], keep)
    candidates = [(total, tuple(per_kernel[k][j][1] for k, j in enumerate(idx))) for total, idx in combos]
    measured: list[float | None] = [None] * len(candidates)
    if measure is not None:
        if not any(all(a is b for a, b in zip(sch, plan.schedules)) for _, sch in candidates):
            candidates.append((rules_time, tuple(plan.schedules)))   # measured tuning never loses to the rules
        measured = [float(measure(Plan(plan.program, plan.kernels, sch, plan.label))) for _, sch in candidates]
        ranking = sorted(range(len(candidates)), key=lambda c: (measured[c], candidates[c][0], c))
        candidates = [candidates[c] for c in ranking]
        measured = [measured[c] for c in ranking]
    return candidates, measured


def _versions(plan: Plan, candidates: list, measured: list, top: int, rules_time: float) -> tuple[dict, list]:
    """The top versions as plans ({"v1": ...}) and their entries in the tuning summary."""
    versions: dict[str, Plan] = {}
    top_entries = []
    for rank, ((total, schedules), seconds) in enumerate(zip(candidates[:max(top, 1)], measured), start=1):
        name = f"v{rank}"
        # (a kernel move may have changed a kernel: where its producers are computed)
        versions[name] = Plan(plan.program, tuple(s.kernel for s in schedules), schedules, label=f"tuned {name}")
        entry = {
            "name": name, "time_s": total,
            "speedup_vs_rules": rules_time / total if total > 0 else math.inf,
            "legal": True,
            "kernels": {k.name: _kernel_entry(s) for k, s in zip(plan.kernels, schedules)},
        }
        if seconds is not None:
            entry["measured_s"] = seconds
        top_entries.append(entry)
    return versions, top_entries


def _tuning_summary(kernels: list, results: dict, incumbent_times: list, top_entries: list, scorer: "_Scorer",
                    max_spill: float, *, seconds: float, interrupted: bool, budget_exhausted: bool,
                    rules_time: float) -> dict:
    """The tuning summary: the versions, how the search ended, its counts over every kernel."""
    return {
        "configs_evaluated": int(sum(r.evaluated for r in results.values())),
        "seconds": seconds,
        "top": top_entries,
        "interrupted": interrupted,
        "budget_exhausted": budget_exhausted,
        "rules_time_s": rules_time,
        "legality_checks": sum(r.legality_checks for r in results.values()),
        "legality_seconds": sum(r.legality_seconds for r in results.values()),
        "scoring_seconds": scorer.seconds + sum(r.scoring_seconds for r in results.values()),
        "rejected_illegal": sum(r.rejected for r in results.values()),
        "rejected_spill": sum(r.rejected_spill for r in results.values()),
        "max_spill_ratio": max_spill,
        "configs_by_kernel": {kernels[i].name: r.evaluated for i, r in sorted(results.items())},
        # Kernels where nothing legal beat the rules' schedule (a tiny, exhausted or entirely
        # illegal space): the rules' schedule is kept, and said so.
        "kept_rules_schedule": {kernels[i].name: f"no legal candidate beat the rules' schedule "
                                                 f"({r.evaluated} scored, {r.rejected} illegal)"
                                for i, r in sorted(results.items())
                                if r.best_time >= incumbent_times[i] * (1 - 1e-9)},
    }


def search_kernel(schedule: Schedule, target, configs: int, seed: int = 0, *, divisors_only: bool = False,
                  tune_orders: bool = True, tune_annotations: bool = True,
                  max_spill: float = DEFAULT_MAX_SPILL, score_fn: ScoreFn = model_score) -> tuple[float, Schedule, int]:
    """Tune one kernel from `schedule` (serially): (best legal time, its schedule, candidates
    scored). The building block of `tune_plan`, for benchmarks and experiments on one
    kernel's space (tiles from divisors only, orders or annotations held fixed)."""
    target = load_target(target)
    space = KernelSpace.of(schedule, target, divisors_only, tune_orders, tune_annotations, max_spill)
    search = _Search(space, np.random.default_rng(seed), configs, _Legality(space))
    scorer = _Scorer(None, score_fn)
    search.run(scorer)
    t, key = search.verified(1)[0]
    best = schedule if key == search.incumbent_key else space.schedule(*search.genomes[key])
    return t, best, search.evaluated


def _arrays(schedule: Schedule, target: Target):
    model = kernel_model(schedule.kernel, target)
    tiles, orders, parallel, vectorize = model.normalise(*model.schedule_arrays(schedule))
    return tiles, np.ascontiguousarray(orders), np.ascontiguousarray(parallel), vectorize


def tqdm_progress(**tqdm_kwargs) -> Callable[[int, int, float], None]:
    """A `progress=` callback drawing a tqdm bar in a terminal (closes itself at the end)."""
    from tqdm.auto import tqdm

    state = {"bar": None}

    def callback(done: int, total: int, best_time_s: float) -> None:
        bar = state["bar"]
        if bar is None:
            bar = state["bar"] = tqdm(total=total, desc="tuning", unit="cfg", **tqdm_kwargs)
        bar.total = max(total, done)
        bar.n = done
        bar.set_postfix_str(f"best {best_time_s * 1e6:.2f} us", refresh=False)
        bar.refresh()
        if done >= total:
            bar.close()

    return callback
