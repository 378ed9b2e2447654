"""Compute at: statements computed at the anchor's tiles, costed as nests of their own.

A statement computed at the anchor's tiles (`Kernel.compute_at`) is costed as its own nest
over its region: its model alone (`_ProducerModel`, a kernel of its own: `_producer_kernel`),
with tiles of the region a tile at the compute point reads (`ir.loopnest.regions`: the halo
included) at that level and outside it, its schedule alone inside (the tile search's),
clipped to the region (its loops the region does not follow run whole instead where that is
faster); its work, traffic and energy are then scaled by the recompute: the
regions' total over every tile at the compute point (halos counted in each) over the
statement's own points, times the tiles of loops its region does not follow (it runs again
in each). Along the compute loop itself the halo is carried where that loop runs in order on
one unit (a line buffer: only new rows are computed, the halo once per sweep); where the loop
is spread over several units it is recomputed in every tile (`_ProducerModel.carries`). Its
tensor is internal: no DRAM traffic, its region held on chip (capacity.py). How producer and
consumer nests overlap is overlap.py's.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ...caches import LRU
from ...ir.loopnest import regions
from ...ir.schedule import Kernel, Schedule, _map_loops, canonical_kernel
from ..target import Target
from .capacity import _inside_point, _tiles_at_point
from .compute import datapath_of
from .results import BatchCost, _merge, _pick, _rows


def _producer_groups(kernel: Kernel) -> list[tuple[int, ...]]:
    """The computed-at statements as nests: each contraction (or first statement) with the
    elementwise statements after it that read it (its epilogue: applied to its tile on chip,
    as in any fused kernel), in program order."""
    groups: list[list[int]] = []
    for i in sorted(kernel.computed_at()):
        st = kernel.statements[i]
        previous = groups[-1] if groups else None
        reads = {a.tensor for a in st.reads()}
        if (previous is not None and st.reduce is None and not st.reduction_loops and previous[-1] == i - 1
                and kernel.statements[previous[-1]].target in reads):
            previous.append(i)
        else:
            groups.append([i])
    return [tuple(g) for g in groups]


class _ProducerModel:
    """Statements computed at the anchor's tiles (a contraction and its epilogue), costed as
    their own nest over their region (see the module docstring)."""

    def __init__(self, kernel: Kernel, group: tuple[int, ...], target: Target, anchor_index: Mapping[str, int],
                 model_of, schedule_alone):
        """`model_of(kernel, target)`: the compiled model of its own kernel (`kernel_model`);
        `schedule_alone(kernel, target)`: its schedule alone (the tile search's)."""
        index = group[0]
        self.group = group
        stmt = kernel.statements[index]
        self.loop, self.level = kernel.computed_at()[index]
        self.levels = target.tiling_levels
        self.units = target.compute.units
        self.kernel = _producer_kernel(kernel, group)
        self.model = model_of(self.kernel, target)
        self.extents = np.array([l.extent for l in stmt.loops], dtype=float)
        self.anchor_extents = np.array([l.extent for l in kernel.loops], dtype=float)
        self.anchor_index = dict(anchor_index)
        # Per own loop: (primary anchor index or -1, its scale, lo, hi) — other region terms
        # run whole (an untiled 1x1 kernel window): they widen the region by scale*extent.
        self.spans = []
        for l in stmt.loops:
            r = regions(kernel)[index][l.name]
            if not r.terms:
                self.spans.append((-1, 0, r.lo, r.hi))
                continue
            primary = max(r.terms, key=lambda t: t[1] * kernel.extents[t[0]])
            hi = r.hi + sum(k * kernel.extents[a] for a, k in r.terms if (a, k) != primary)
            self.spans.append((anchor_index[primary[0]], primary[1], r.lo, hi))
        self.followed = {a for a, _, _, _ in self.spans if a >= 0}
        # Inside the region it runs as the tiling search schedules it alone (cached by structure).
        own = self.own = schedule_alone(self.kernel, target)
        inner = own.tile_sizes(self.levels)
        self.inner_tiles = np.array([inner[l.name] for l in stmt.loops], dtype=float)   # [D_P, L]
        _, orders, self.parallel, self.vectorize = self.model.schedule_arrays(own)
        # A region is not the whole nest: fewer rows may stream past each weight block, so the
        # loop order alone may refill the PE array at every tile. Its inner orders are its own
        # and, at the innermost level, each loop the region follows moved innermost; each
        # candidate takes the fastest (the simulator replays the same choice).
        # (Only on a PE array, whose stationary blocks refill: elsewhere the order moves no work.)
        on_array = datapath_of(target.compute, self.model.statements[0]).on_array
        followed_own = [d for d, (a, _, _, _) in enumerate(self.spans) if a >= 0 and self.extents[d] > 1 and on_array]
        self.orders = _order_variants(orders[0], followed_own, MAX_PRODUCER_ORDERS)   # [K, L, D_P]
        # Its loops the region does not follow keep the tiles they have alone; where those do
        # not suit the region (tiny tiles chosen for a nest the region does not have), each
        # candidate may run them whole instead, whichever is faster (the simulator replays it).
        self.whole = {d: float(max(0, min(self.extents[d], hi) - max(0, lo)))
                      for d, (a, _, lo, hi) in enumerate(self.spans) if a < 0 and self.extents[d] > 1
                      and (self.inner_tiles[d] < min(self.extents[d], hi) - max(0, lo)).any()}
        alone = self.model.evaluate_batch(*self.model.schedule_arrays(own))
        self.alone_compute = float(alone.compute_s[0])
        # What `_choose` reads, as a key: nests equal in it cost every region tiling alike, so
        # they share one bank of costed rows (`_remembered`): MobileNetV2's chains build ~380
        # producer nests of ~55 forms (each chain at each compute point, the library's too),
        # and a third of the rows they cost had been costed by a nest of the same form.
        self._bank_key = (canonical_kernel(self.kernel), target, self.orders.tobytes(), self.orders.shape,
                          tuple(sorted(self.whole.items())), np.asarray(self.parallel).tobytes(),
                          np.asarray(self.vectorize).tobytes(), self.alone_compute)

    def _cost(self, sub: np.ndarray, order: np.ndarray) -> "BatchCost":
        """Its nest's cost for each row of `sub` in `order` ([L, D], or [n, L, D]: one per row)."""
        n = len(sub)
        return self.model.evaluate_batch(sub, np.broadcast_to(order, (n,) + order.shape[-2:]), self.parallel,
                                         np.broadcast_to(self.vectorize, (n,)))

    def _choose(self, sub: np.ndarray) -> tuple["BatchCost", np.ndarray, np.ndarray]:
        """(cost, index into self.orders, whether its unfollowed loops run whole) per row of
        `sub`: its tiles alone, or those loops whole where that is faster (`self.whole`).
        Both are costed in one batch (each row's cost depends on that row alone, and a batch
        of a few dozen rows costs little more than one row)."""
        n = len(sub)
        whole = np.zeros(n, dtype=bool)
        if not self.whole:
            own, choice = self._choose_order(sub)
            return own, choice, whole
        both, both_choice = self._choose_order(np.concatenate([sub, self._whole(sub)]))
        own, choice = _rows(both, np.arange(n)), both_choice[:n]
        alt, alt_choice = _rows(both, np.arange(n, 2 * n)), both_choice[n:]
        whole = alt.time_s < own.time_s
        if not whole.any():
            return own, choice, whole
        rows = np.nonzero(whole)[0]
        choice[rows] = alt_choice[rows]
        return _merge(own, _rows(alt, rows), rows), choice, whole

    def _whole(self, sub: np.ndarray) -> np.ndarray:
        out = np.array(sub, copy=True)
        for d, length in self.whole.items():
            out[:, d, :] = max(1, int(length))
        return out

    def _choose_order(self, sub: np.ndarray) -> tuple["BatchCost", np.ndarray]:
        """(cost, index into self.orders) per row of `sub`: its own order, or where that
        computes much slower than it does alone (the order refills the array over this
        region), the fastest of the variants. Each row's choice depends on that row alone;
        the variants of every poor row are costed in one batch."""
        own = self._cost(sub, self.orders[0])
        choice = np.zeros(len(sub), dtype=np.int64)
        if len(self.orders) == 1:
            return own, choice
        # (a region's nest is costed over the producer's whole extents, as alone: the two compare)
        poor = np.nonzero(own.compute_s > POOR_ORDER * self.alone_compute)[0]
        if not len(poor):
            return own, choice
        m, variants = len(poor), self.orders[1:]
        rows = np.tile(sub[poor], (len(variants), 1, 1))                 # variant k: rows k*m ... (k+1)*m - 1
        tried = self._cost(rows, np.repeat(variants, m, axis=0))
        costs = [_rows(own, poor)] + [_rows(tried, np.arange(k * m, (k + 1) * m)) for k in range(len(variants))]
        best = np.argmin(np.stack([c.time_s for c in costs]), axis=0)
        choice[poor] = best
        return _merge(own, _pick(costs, best), poor), choice

    def evaluate(self, tiles, orders, counts, parallel=None) -> tuple["BatchCost", np.ndarray]:
        """(its cost over its whole region once, the recompute factor) per candidate.
        Candidates that differ only outside its region (the anchor's inner tiles, its
        orders) give it the same region tiles: each distinct one is costed once
        (`_remembered`: a chain's tiling search asks ~5x as many rows as there are distinct
        regions, and its scheduling pass and tuner ask the search's regions again)."""
        sub, mult = self.region_tiles(tiles, orders, counts, parallel)
        return self._remembered(sub), mult

    def _remembered(self, sub: np.ndarray) -> "BatchCost":
        """`_choose(sub)`'s cost, each distinct row of `sub` costed once across calls: a row's
        cost depends on that row alone (`_choose`), so the rows costed before are kept in one
        batch (a bank: at most PRODUCER_ROWS, then started again) and read back by index.
        Shared by every producer nest of the same form (`_bank_key`), in any kernel model."""
        n = len(sub)
        keys = [row.tobytes() for row in np.ascontiguousarray(sub).reshape(n, -1)]
        bank = _BANKS.get(self._bank_key)
        if bank is None:
            bank = [{}, None]                    # region tiles -> row of the costs; the costs
            _BANKS.put(self._bank_key, bank)
        index = bank[0]
        missing = dict.fromkeys(k for k in keys if k not in index)
        if len(index) + len(missing) > PRODUCER_ROWS:
            index = bank[0] = {}
            bank[1] = None
            missing = dict.fromkeys(keys)
        if missing:
            first = {}
            for i, k in enumerate(keys):
                if k in missing and k not in first:
                    first[k] = i
            fresh = self._choose(sub[list(first.values())])[0]
            base = 0 if bank[1] is None else len(bank[1])
            bank[1] = fresh if bank[1] is None else _concat(bank[1], fresh)
            for j, k in enumerate(first):
                index[k] = base + j
        return _rows(bank[1], np.fromiter((index[k] for k in keys), dtype=np.int64, count=n))

    def schedule(self, sub: np.ndarray) -> Schedule:
        """Its nest as a schedule of its own kernel, tiles `sub` [loops, levels], in the inner
        order (and with its unfollowed loops whole or not) as the model picks for them (what
        the simulator replays)."""
        _, choice, whole = self._choose(sub[None])
        tiles = self._whole(sub[None])[0] if whole[0] else sub
        return Schedule.of_arrays(self.kernel, self.levels, tiles, self.orders[int(choice[0])], keep=self.own)


    def carries(self, parallel) -> np.ndarray:
        """[n] bool: whether its halo along the compute loop is carried from tile to tile —
        where that loop runs in order on one unit; spread over several units, each tile
        recomputes its halo (`parallel` [n, D] as the model normalises it; None: carried)."""
        loop = self.anchor_index[self.loop]
        if parallel is None or self.units <= 1:
            return np.ones(len(parallel) if parallel is not None else 1, dtype=bool)
        return ~np.asarray(parallel, dtype=bool)[:, loop]

    def region_tiles(self, tiles, orders, counts, parallel=None) -> tuple[np.ndarray, np.ndarray]:
        """Its tiles [n, loops, levels] over the region of each candidate, and the recompute."""
        n, D, L = tiles.shape
        carried = np.broadcast_to(self.carries(parallel), (n,))
        levels = self.levels
        at = levels.index(self.level) if self.level in levels else L - 1
        loop = self.anchor_index[self.loop]
        # Each anchor loop's tile (and tile count) at the compute point: at its level when it
        # comes at or before the compute loop in the order there, else one level out.
        inside = _inside_point(orders, at, loop)                               # [n, D]
        outer = max(at - 1, 0)
        T_point = _tiles_at_point(tiles, inside, at, self.anchor_extents)
        n_point = np.where(inside, counts[:, at, :], counts[:, outer, :] if at else 1.0)
        sub = np.empty((n, len(self.spans), L))
        mult = np.ones(n)
        for d, (a, k, lo, hi) in enumerate(self.spans):
            ext = self.extents[d]
            if a < 0:
                length = np.full(n, float(max(0, min(ext, hi) - max(0, lo))))
                # not split by the consumer's tiles: tiled inside as it is alone
                sub[:, d, :] = np.minimum(length[:, None], self.inner_tiles[d][None, :])
                continue
            region = lambda t: np.clip(k * t + hi - lo, 1, ext)               # noqa: E731
            sub[:, d, :] = np.minimum(region(tiles[:, a, :].astype(float)), self.inner_tiles[d][None, :])
            sub[:, d, : at + 1] = region(T_point[:, a])[:, None]
            # Rows computed over all tiles at the point: each tile's region, the borders clipped;
            # a carried halo once per sweep of the compute loop (its parent tiles).
            Ea = self.anchor_extents[a]
            halos = n_point[:, a]
            if a == loop:
                sweeps = counts[:, at - 1, a] if at else np.ones(n)
                halos = np.where(carried, sweeps, halos)
            total = k * Ea + halos * (hi - lo) - max(0, -lo) - np.maximum(0.0, k * Ea + hi - ext)
            mult *= np.clip(total, 1.0, None) / ext
        for a in range(D):       # loops its region does not follow: it runs again in each of their tiles
            if a not in self.followed:
                mult *= n_point[:, a]
        sub = np.maximum(np.minimum.accumulate(np.floor(sub), axis=2), 1).astype(np.int64)
        return sub, mult


# Costed region tilings by producer nest form (`_ProducerModel._bank_key`); a bank holds up
# to PRODUCER_ROWS rows (MobileNetV2's largest: 10k rows, 3 MB).
_BANKS = LRU("cost.producer_rows", 64)
MAX_PRODUCER_ORDERS = 4     # inner orders tried for a producer nest over its region
PRODUCER_ROWS = 16384       # region tilings whose cost a producer nest form remembers (`_remembered`)
POOR_ORDER = 1.5            # ... where its own order computes this much slower than alone


def _concat(a: BatchCost, b: BatchCost) -> BatchCost:
    """The candidates of `a`, then those of `b`, as one BatchCost."""
    out = {}
    for f in BatchCost.__dataclass_fields__:
        v, w = getattr(a, f), getattr(b, f)
        if isinstance(v, np.ndarray):
            out[f] = np.concatenate([v, w])
        elif isinstance(v, dict):
            out[f] = {k: np.concatenate([np.broadcast_to(x, (len(a),)), np.broadcast_to(w[k], (len(b),))])
                      for k, x in v.items()}
        else:
            out[f] = v
    return BatchCost(**out)


def _order_variants(order: np.ndarray, loops: list[int], limit: int) -> np.ndarray:
    """[K, L, D] orders: `order` [L, D] itself, then each of `loops` moved innermost at the
    innermost level; at most `limit`, no repeats."""
    out = [order]
    seen = {order.tobytes()}
    h = order.shape[0] - 1
    for d in loops:
        v = order.copy()
        v[h] = np.concatenate([[x for x in order[h] if x != d], [d]])
        if v.tobytes() not in seen and len(out) < limit:
            seen.add(v.tobytes())
            out.append(v)
    return np.stack(out)


def _producer_kernel(kernel: Kernel, group: tuple[int, ...]) -> Kernel:
    """Statements `group` of `kernel` as a kernel of their own, anchored at the first; what
    they write and the kernel's own tensors they read are internal (never in DRAM)."""
    statements = tuple(kernel.statements[i] for i in group)
    written = [st.target for st in statements]
    reads = [a.tensor for st in statements for a in st.reads()]
    names = tuple(dict.fromkeys(reads + written))
    on_chip = set(kernel.internals) | set(written)
    maps = _map_loops(statements, 0)
    return Kernel(name=f"{kernel.name}.{'_'.join(written)}", ops=tuple(written), statements=statements,
                  loops=statements[0].loops, inputs=tuple(t for t in dict.fromkeys(reads) if t not in written),
                  outputs=(), internals=tuple(t for t in names if t in on_chip),
                  tensors=tuple(kernel.tensor(t) for t in names), anchor=0,
                  loop_maps=tuple(tuple(sorted(m.items())) for m in maps))
