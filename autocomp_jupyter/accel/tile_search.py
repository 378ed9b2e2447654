"""The model-driven tile search: the best multi-level tiles and loop orders of one kernel
by the cost model's score.

It lives beside the cost model it scores with, because the model needs it too: a statement
computed at the anchor's tiles is costed with its nest scheduled alone as this search
schedules it (`producer_schedule`; the accel package connects the two when imported, as
neither module can import the other). The tiling pass (rules/tiling.py) runs it on every
kernel, the chain rules on their producers.

1. Candidates per loop, from the kernel's one candidate space (`space.TileSpace`: the
   `tiling` view at an on-chip level, the `register` view at the generic `vector` level).
   Orders per level: every permutation for up to 4 loops, else the stationary orders (each
   tensor's non-indexing loops innermost) and the source order (`order_candidates`).
2. A few thousand random candidates (inner tiles never larger than outer ones) plus the
   current and textbook tiles, scored at once by `KernelModel.evaluate_batch`; candidates
   whose `spill_ratio` exceeds `max_spill_ratio` are rejected (`_draw`).
3. Rounds of local moves (one tile size, one order, a factor of 2 moved between two loops)
   from the best few until nothing improves (`_local_search`).

Searches are remembered by the kernel's canonical form (`canon.canonical_kernel`), so a
network's repeated layers are searched once; searches of one kernel from different
schedules share the random draw and the measured candidates: each candidate is costed once,
and every search returns what it would alone.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..caches import LRU
from ..canon import canonical_kernel, evaluate, schedule_key
from ..ir.loopnest import whole_loops
from ..ir.schedule import Kernel, Schedule
from .cost import datapath_of, kernel_model, library_schedule

RANDOM_CANDIDATES = 3000
LOCAL_ROUNDS = 8
KEEP = 4                      # candidates refined by local search


def level_mapping(generic: list[str], target_levels: tuple[str, ...]) -> dict[str, str]:
    """{generic name: target level}, outer → inner; extra generic names are dropped."""
    return {g: t for g, t in zip(generic, target_levels)}



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


def _schedule_arrays(schedule: Schedule, kernel: Kernel, target_levels) -> tuple[np.ndarray, np.ndarray]:
    index = {n: i for i, n in enumerate(kernel.loop_names)}
    sizes = schedule.tile_sizes(target_levels)
    tiles = np.array([[sizes[n][h] for h in range(len(target_levels))] for n in kernel.loop_names])
    orders = np.array([[index[l] for l in schedule.order_at(lv, target_levels)] for lv in target_levels])
    return tiles, orders


# --------------------------------------------------------------------------- search


def search_tiles(kernel: Kernel, target, current: Schedule | None, levels: dict[str, str], params: dict,
                 seed: int = 0, n_random: int = RANDOM_CANDIDATES, ranked: int = 1, rounds: int = LOCAL_ROUNDS):
    """The best tiles and orders found for `kernel` on `target`.

    Returns (schedule, KernelCost, candidates evaluated), or None when every candidate
    spills beyond `max_spill_ratio`. With `ranked > 1`, returns a list of up to `ranked`
    distinct (schedule, cost) pairs, best first, instead (for legality fallbacks).
    """
    # The search depends on the kernel's structure, not its names: repeated layers share it.
    key = (canonical_kernel(kernel), schedule_key(current) if current is not None else None, target,
           tuple(levels.items()), repr(sorted(params.items())), seed, n_random, ranked, rounds)
    found = _SEARCHES.get(key)
    if found is None:
        found = _search(kernel, target, current, levels, params, seed, n_random, ranked, rounds)
        _SEARCHES.put(key, found)
    picks, evaluated = found
    target_levels = target.tiling_levels
    tiled = [target_levels.index(t) for t in levels.values()]
    vec = vector_loop_index(kernel, target)
    results = []
    for tiles, orders in picks:
        schedule = _to_schedule(kernel, current, tiles, orders, target_levels, tiled, vec)
        results.append((schedule, evaluate(schedule, target)))
    if ranked > 1:
        return results
    if not results:
        return None
    return results[0][0], results[0][1], evaluated


# Search results by canonical kernel, incumbent schedule, target, rule parameters and seed.
_SEARCHES = LRU("tiling.search_tiles", 2048)
# A search's random draw (tiles, orders, scores, tie-break scale) by kernel structure,
# target, rule parameters and seed; and the scores of its local moves. ResNet-50 on one
# preset draws for ~190 structures (library, pipeline, chain and producer searches); at 160
# entries a fifth of its draws were evicted and drawn again. A draw is ~0.3 MB.
_RANDOM = LRU("tiling.random_draw", 320)
_KNOWN = LRU("tiling.local_scores", 320)



@dataclass
class _Space:
    """What one search draws from and moves within: the model, the tiled levels (target
    level indices), the sizes offered per level and loop (`values`), the candidate orders,
    the loops kept whole, the vectorised loop it scores with, and the key of its draw."""

    model: object
    L: int
    D: int
    tiled: list
    max_spill: float
    extents: np.ndarray
    vector_level: int | None
    values: list
    orders_set: np.ndarray
    vec: int
    whole: np.ndarray
    structure: tuple


def _space(kernel: Kernel, target, levels: dict[str, str], params: dict, seed: int, n_random: int) -> _Space:
    from ..space import TileSpace      # (space.py reads the cost model: imported when a search runs)

    model = kernel_model(kernel, target)
    target_levels = target.tiling_levels
    L, D = len(target_levels), len(kernel.loops)
    tiled = [target_levels.index(t) for t in levels.values()]       # target level indices we tile
    factor = tuple(params.get("register_tile_factor", [4, 16]))
    space = TileSpace.of(kernel, target)            # the sizes offered per loop and level (space.py)
    vector_level = target_levels.index(levels["vector"]) if "vector" in levels else None
    values = [[space.register(d, factor) if h == vector_level else space.tiling(d) for d in range(D)] for h in range(L)]
    kept_whole = whole_loops(kernel)
    # The random draw depends on the kernel's structure, not on the schedule it has now.
    structure = (canonical_kernel(kernel), target, tuple(levels.items()), repr(sorted(params.items())), seed, n_random)
    return _Space(model, L, D, tiled, float(params.get("max_spill_ratio", 0.05)), model.extents, vector_level, values,
                  np.array(order_candidates(kernel), dtype=np.int64), vector_loop_index(kernel, target),
                  np.array([l.name in kept_whole for l in kernel.loops]), structure)


def _search(kernel: Kernel, target, current: Schedule | None, levels: dict[str, str], params: dict,
            seed: int, n_random: int, ranked: int, rounds: int = LOCAL_ROUNDS) -> tuple[list, int]:
    """search_tiles' search: ([(tiles [D, L], orders [L, D]) best first, up to `ranked`],
    candidates evaluated); an empty list when every candidate spills."""
    s = _space(kernel, target, levels, params, seed, n_random)
    tiles, orders, measured, evaluated = _draw(kernel, target, current, s, seed, n_random)
    return _local_search(s, tiles, orders, _scores(*measured), evaluated, ranked, rounds)


def _draw(kernel: Kernel, target, current: Schedule | None, s: _Space, seed: int, n_random: int):
    """The random candidates and the seeds (the current schedule and the textbook one),
    measured: (tiles, orders, (time, energy, within the spill limit), candidates evaluated)."""
    L, D, extents, whole = s.L, s.D, s.extents, s.whole
    rng = np.random.default_rng(seed)
    # Seeds: the current schedule and the textbook one.
    seeds_t, seeds_o = [], []
    for sched in filter(None, [current, library_schedule(kernel, target)]):
        try:
            t, o = _schedule_arrays(sched, kernel, target.tiling_levels)
        except (KeyError, ValueError):
            continue
        seeds_t.append(t)
        seeds_o.append(o)
    # Random candidates: each (loop, level) from its list; levels not tiled inherit. They
    # depend on the kernel's structure, not on the schedule it has now: searches of one
    # kernel from different schedules (the library's, the pipeline's) draw and score them once.
    drawn = _RANDOM.get(s.structure)
    if drawn is None:
        tiles = np.empty((n_random, D, L), dtype=np.int64)
        for h in range(L):
            for d in range(D):
                tiles[:, d, h] = rng.choice(s.values[h][d], size=n_random) if h in s.tiled else 0
        tiles = _monotone(tiles, extents)
        orders = s.orders_set[rng.integers(len(s.orders_set), size=(n_random, L))]
        # Loops a later statement of the kernel reads whole (a softmax row) stay untiled:
        # tiled, the nest would split into one tile loop per statement (ir.loopnest).
        tiles[:, whole, :] = extents[whole, None]
        drawn = (tiles.astype(np.int32), orders.astype(np.int8), _measure(s.model, tiles, orders, s.max_spill, s.vec))
        _RANDOM.put(s.structure, drawn)
    tiles, orders, measured = drawn
    tiles, orders = tiles.astype(np.int64), orders.astype(np.int64)
    evaluated = len(tiles)
    if seeds_t:
        seed_t = _monotone(np.array(seeds_t), extents)
        seed_t[:, whole, :] = extents[whole, None]
        seed_o = np.array(seeds_o)
        tiles = np.concatenate([seed_t, tiles])
        orders = np.concatenate([seed_o, orders])
        ms = _measure(s.model, seed_t, seed_o, s.max_spill, s.vec)
        measured = tuple(np.concatenate([a, b]) for a, b in zip(ms, measured))
        evaluated += len(seed_t)
    return tiles, orders, measured, evaluated


def _local_search(s: _Space, tiles, orders, scores, evaluated: int, ranked: int, rounds: int) -> tuple[list, int]:
    """Local search from the best few distinct candidates. Pool members that stay in the
    pool have the same neighbours next round, and searches of one kernel from different
    schedules meet the same candidates: each is measured once (the model is deterministic
    and scores each row alone), the rest are looked up; a round's scores are made from
    its whole batch, as if it were all measured."""
    extents, whole = s.extents, s.whole
    known = _KNOWN.get((s.structure, s.vec, s.max_spill))
    if known is None:
        known = {}
        _KNOWN.put((s.structure, s.vec, s.max_spill), known)
    counted: set = set()
    moves: dict[bytes, tuple] = {}       # a pool member's neighbours, keys
    best_idx = _top_distinct(scores, tiles, orders, KEEP)
    pool_t, pool_o, pool_s = tiles[best_idx], orders[best_idx], scores[best_idx]
    for _ in range(rounds):
        parts = []
        for i, member in enumerate(_candidate_keys(pool_t, pool_o)):
            if member not in moves:
                mt, mo = _neighbours(pool_t[i:i + 1], pool_o[i:i + 1], s.values, s.tiled, s.orders_set, extents,
                                     s.vector_level)
                mt[:, whole, :] = extents[whole, None]
                moves[member] = (mt, mo, _candidate_keys(mt, mo))
            parts.append(moves[member])
        nt = np.concatenate([p[0] for p in parts])
        no = np.concatenate([p[1] for p in parts])
        keys = [k for p in parts for k in p[2]]
        first: dict = {}
        for i, k in enumerate(keys):
            if k not in known:
                first.setdefault(k, i)       # a candidate repeated within this round is scored once too
        if first:
            fresh = np.array(sorted(first.values()), dtype=np.int64)
            for i, t, e, ok in zip(fresh, *_measure(s.model, nt[fresh], no[fresh], s.max_spill, s.vec)):
                known[keys[i]] = (float(t), float(e), bool(ok))
        rows = [known[k] for k in keys]
        ns = _scores(np.array([r[0] for r in rows], dtype=float), np.array([r[1] for r in rows], dtype=float),
                     np.array([r[2] for r in rows], dtype=bool))
        new_here = set(keys) - counted
        evaluated += len(new_here)
        counted |= new_here
        all_t = np.concatenate([pool_t, nt])
        all_o = np.concatenate([pool_o, no])
        all_s = np.concatenate([pool_s, ns])
        keep = _top_distinct(all_s, all_t, all_o, KEEP)
        if np.isclose(all_s[keep[0]], pool_s.min(), rtol=1e-9) and set(map(float, all_s[keep])) == set(map(float, pool_s)):
            break
        pool_t, pool_o, pool_s = all_t[keep], all_o[keep], all_s[keep]
    picks = [(pool_t[i].copy(), pool_o[i].copy()) for i in np.argsort(pool_s, kind="stable")[:ranked]
             if np.isfinite(pool_s[i])]
    return picks, evaluated


def _monotone(tiles: np.ndarray, extents: np.ndarray) -> np.ndarray:
    """Clip to the extents, and make each level's tile no larger than the enclosing one
    (a level left at 0 inherits the enclosing tile)."""
    full = np.broadcast_to(extents[None, :, None], tiles.shape)
    tiles = np.where(tiles <= 0, full, np.minimum(tiles, full))
    return np.minimum.accumulate(tiles, axis=2)


def _measure(model, tiles, orders, max_spill: float, vectorize: int = -1):
    """(time, energy, within the spill limit) of each candidate, from the cost model."""
    if not len(tiles):      # no move left (every loop has extent 1)
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool)
    cost = model.evaluate_batch(tiles, orders, vectorize=np.full(len(tiles), vectorize))
    return cost.time_s, cost.energy_j, cost.spill_ratio <= max_spill + 1e-12


def _scores(time_s, energy_j, ok) -> np.ndarray:
    """A batch's scores: time (inf beyond the spill limit); ties in time (common when
    compute-bound) go to less energy, relative to the batch's largest."""
    if not len(time_s):
        return np.zeros(0)
    return np.where(ok, time_s * (1.0 + 1e-3 * energy_j / max(float(energy_j.max()), 1e-30)), np.inf)


def _candidate_keys(tiles: np.ndarray, orders: np.ndarray) -> list[bytes]:
    """One compact bytes key per candidate (tiles as int32, loop indices as int8)."""
    n = len(tiles)
    if not n:
        return []
    t = np.ascontiguousarray(tiles.reshape(n, -1), dtype=np.int32).view(np.uint8)
    o = np.ascontiguousarray(orders.reshape(n, -1), dtype=np.int8).view(np.uint8)
    flat = np.concatenate([t, o], axis=1)
    return [row.tobytes() for row in flat]


def _top_distinct(scores, tiles, orders, k: int) -> np.ndarray:
    chosen, seen = [], set()
    for i in np.argsort(scores, kind="stable"):
        key = (tiles[i].tobytes(), orders[i].tobytes())
        if key in seen:
            continue
        seen.add(key)
        chosen.append(i)
        if len(chosen) == k:
            break
    return np.array(chosen)


def _neighbours(pool_t, pool_o, values, tiled, orders_set, extents, vector_level=None):
    """One-step moves from each pool member: one tile size, one order, a factor of two
    moved between two loops at one level (per member and level, in that order)."""
    out_t, out_o = [], []
    for t, o in zip(pool_t, pool_o):
        D, L = t.shape
        levels = np.arange(L)
        for h in tiled:
            # One tile size: loop d at level h set to v; outer tiles grow to hold it, inner
            # ones shrink inside it.
            dd, vv = [], []
            for d in range(D):
                vals = values[h][d]
                vals = vals[vals != t[d, h]]
                dd.append(np.full(len(vals), d, dtype=np.int64))
                vv.append(vals)
            dd, vv = np.concatenate(dd), np.concatenate(vv).astype(t.dtype)
            c = np.repeat(t[None], len(dd), axis=0)
            rows = np.arange(len(dd))
            row = c[rows, dd, :]
            v = vv[:, None]
            c[rows, dd, :] = np.where(levels < h, np.maximum(row, v), np.where(levels == h, v, np.minimum(row, v)))
            out_t.append(c)
            out_o.append(np.repeat(o[None], len(dd), axis=0))
            # Trade between two loops: one grows by 1-2 candidate steps while another
            # shrinks by 1-2 (what a full level needs to move at all).
            steps = [np.searchsorted(values[h][d], t[d, h]) for d in range(D)]
            trades = []
            for d1 in range(D):
                up = values[h][d1][steps[d1] + 1: steps[d1] + 3]
                for d2 in range(D):
                    if d1 == d2:
                        continue
                    down = values[h][d2][max(0, steps[d2] - 2): steps[d2]]
                    trades.extend((d1, d2, v1, v2) for v1 in up for v2 in down)
            if trades:
                tr = np.array(trades, dtype=np.int64)
                c = np.repeat(t[None], len(tr), axis=0)
                rows = np.arange(len(tr))
                d1, d2, v1, v2 = tr[:, 0], tr[:, 1], tr[:, 2:3].astype(t.dtype), tr[:, 3:4].astype(t.dtype)
                row = c[rows, d1, :]
                c[rows, d1, :] = np.where(levels < h, np.maximum(row, v1), np.where(levels == h, v1, row))
                row = c[rows, d2, :]
                c[rows, d2, :] = np.where(levels == h, v2, np.where(levels > h, np.minimum(row, v2), row))
                out_t.append(c)
                out_o.append(np.repeat(o[None], len(tr), axis=0))
            # One order: level h's order replaced by another candidate order.
            perms = orders_set[~np.all(orders_set == o[h][None], axis=1)]
            if len(perms):
                c = np.repeat(o[None], len(perms), axis=0)
                c[:, h, :] = perms
                out_t.append(np.repeat(t[None], len(perms), axis=0))
                out_o.append(c)
    out_t = [a for a in out_t if len(a)]
    out_o = [a for a in out_o if len(a)]
    if not out_t:
        return pool_t[:0], pool_o[:0]
    return _monotone(np.concatenate(out_t), extents), np.concatenate(out_o)


def _to_schedule(kernel: Kernel, current: Schedule | None, tiles, orders, target_levels, tiled,
                 vec: int = -1) -> Schedule:
    # the current schedule's annotations, and the vectorised loop the tiles were scored with
    return Schedule.of_arrays(kernel, target_levels, tiles, orders, vectorize=vec if vec >= 0 else None, keep=current)


def producer_schedule(kernel: Kernel, target) -> Schedule | None:
    """The search's schedule of a producer nest alone (the cost model costs a compute_at
    producer over its region as this schedules it: accel/cost/producer.py)."""
    found = search_tiles(kernel, target, None, level_mapping(list(target.tiling_levels), target.tiling_levels), {},
                         n_random=PRODUCER_CANDIDATES, rounds=PRODUCER_ROUNDS)
    return found[0] if found is not None else None


# A producer nest's search is smaller than a kernel's: a chain searches one per producer and
# compute point, and its tiles are clipped to each region anyway.
PRODUCER_CANDIDATES = 500
PRODUCER_ROUNDS = 3
