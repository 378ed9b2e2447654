"""The tiling pass: multi-level tiles and a loop order per level for every kernel.

When it applies: to every kernel of the plan (after fusion), with `tiling.tile_heuristic:
model-driven` (with `fixed`, the textbook tiles stay and the pass only logs that).

What it produces: a new Schedule per kernel whose tiles `{loop: {level: size}}` and
per-level orders are chosen by the cost model:

1. Levels. The rule file's generic levels (`levels: [L2, L1, vector]`) map onto the target's
   on-chip levels outer → inner (`Target.tiling_levels`); a target with fewer on-chip
   levels uses the first names (tpu: L2 → VMEM, L1 → vregs).
2. Candidates per loop, from the kernel's one candidate space (`space.TileSpace`: the
   `tiling` view — powers of two, the extent, its divisors, balanced non-divisors
   ceil(E / q) (remainder tiles), multiples of the PE array / vector width on the loops the
   datapath maps; at the generic `vector` level the `register` view — register tiles of
   `register_tile_factor` (min..max) datapath units). Orders per level: every permutation for up to 4 loops, else
   the stationary orders (each tensor's non-indexing loops innermost) and the source order.
3. Search: a few thousand random candidates (inner tiles never larger than outer ones)
   plus the current and textbook tiles, scored at once by `accel.cost.evaluate_batch`;
   candidates whose `spill_ratio` exceeds `max_spill_ratio` are rejected; then rounds of
   local moves (one tile size, one order, a factor of 2 moved between two loops) from the
   best few until nothing improves.
4. Checks (`verify.verify_schedule`): isl legality of the chosen schedule, then the tiled
   execution check (`interp.check_tiled`, on a scaled-down twin of a large program); a
   kernel whose schedule fails is rolled back to its previous schedule and logged.

Searches and passing tiled runs are remembered by the kernel's canonical form
(`canon.canonical_kernel`: tensor names by position), so a network's repeated layers are
searched and run once. Searches of one kernel from different schedules (the library
baseline's from textbook tiles, the pipeline's from the library's) share the random draw
and the measured candidates: each candidate is costed once, and every search returns
what it would alone.

Example (GEMM 1024³ + relu on tpu): the textbook 256/128 tiles become e.g.
`i: VMEM 1024 / vregs 64, j: 512 / 128, k: 1024 / 128`, logged as
"2.0x less time than the textbook tiles: VMEM 1024x512x1024, vregs 64x128x128; ...".
"""
from __future__ import annotations

import hashlib
import itertools
import math
import time
from dataclasses import replace

import numpy as np

from .. import poly
from ..accel.cost import datapath_of, kernel_model, library_schedule, register_producer_search
from ..caches import LRU
from ..canon import canonical_kernel, evaluate, schedule_key
from ..ir.loopnest import whole_loops
from ..ir.schedule import Kernel, Schedule
from ..passes import PassContext, PassOutcome, rollback_entry, rule_entry
from ..space import TileSpace, lane_loop
from ..verify import verify_schedule
from ..result import Plan

PASS = "tiling"
RANDOM_CANDIDATES = 3000
LOCAL_ROUNDS = 8
KEEP = 4                      # candidates refined by local search


def tiling_pass(plan: Plan, ctx: PassContext) -> PassOutcome:
    params = ctx.rules.tiling
    log: list[dict] = []
    rollbacks: list[dict] = []
    if params.get("tile_heuristic", "model-driven") != "model-driven":
        log.append(rule_entry("multi_level_tiling", PASS, [op.name for op in plan.program.ops], False,
                              f"tile_heuristic is {params.get('tile_heuristic')!r}: textbook tiles kept"))
        return PassOutcome(plan, tuple(log), ())
    levels = level_mapping(params.get("levels", ["L2", "L1", "vector"]), ctx.target.tiling_levels)
    schedules = []
    for kernel, current in zip(plan.kernels, plan.schedules):
        started = time.perf_counter()
        choice = search_tiles(kernel, ctx.target, current, levels, params, seed=ctx.seed)
        seconds = time.perf_counter() - started
        rule = f"tile_{kernel.name}"
        if choice is None:
            log.append(rule_entry(rule, PASS, kernel.ops, False,
                                  f"no tiling within max_spill_ratio {params.get('max_spill_ratio', 0.05):g} "
                                  f"beats the current tiles"))
            schedules.append(current)
            continue
        schedule, cost, evaluated = choice
        old = evaluate(current, ctx.target)
        if cost.time_s >= old.time_s * (1 - 1e-9):
            log.append(rule_entry(rule, PASS, kernel.ops, False,
                                  f"the current tiles are already the best found ({evaluated} candidates)"))
            schedules.append(current)
            continue
        problem = verify_schedule(schedule, plan.program, ctx)
        if problem:
            rollbacks.append(rollback_entry(PASS, kernel.name, problem))
            log.append(rule_entry(rule, PASS, kernel.ops, False, f"rolled back: {problem}"))
            schedules.append(current)
            continue
        textbook = evaluate(library_schedule(kernel, ctx.target), ctx.target)
        log.append(rule_entry(rule, PASS, kernel.ops, True,
                              _why(schedule, cost, textbook, old, levels, evaluated, seconds)))
        schedules.append(schedule)
    return PassOutcome(Plan(plan.program, plan.kernels, tuple(schedules), "tiled"), tuple(log), tuple(rollbacks))


# --------------------------------------------------------------------------- levels


def level_mapping(generic: list[str], target_levels: tuple[str, ...]) -> dict[str, str]:
    """{generic name: target level}, outer → inner; extra generic names are dropped."""
    return {g: t for g, t in zip(generic, target_levels)}


def _why(schedule: Schedule, cost, textbook, old, levels: dict[str, str], evaluated: int, seconds: float) -> str:
    sizes = schedule.tile_sizes()
    parts = []
    for h, level in enumerate(schedule.levels):
        parts.append(f"{level} " + "x".join(str(sizes[l][h]) for l in schedule.kernel.loop_names))
    orders = "; ".join(f"order@{lv} {','.join(schedule.order_at(lv))}" for lv in schedule.levels)
    gain = textbook.time_s / cost.time_s if cost.time_s else math.inf
    mapping = ", ".join(f"{g}→{t}" for g, t in levels.items())
    return (f"{gain:.1f}x less time than the textbook tiles ({textbook.time_s * 1e6:.1f} -> "
            f"{cost.time_s * 1e6:.1f} us; {old.time_s / cost.time_s:.2f}x over the tiles before): "
            f"{', '.join(parts)} ({'x'.join(schedule.kernel.loop_names)}); {orders}; "
            f"spill {cost.spill_ratio:.3f}, pe_util {cost.pe_util:.2f}, {cost.bound}-bound; "
            f"levels {mapping}; {evaluated} candidates in {seconds:.2f} s")


# --------------------------------------------------------------------------- candidates


def vector_loop_index(kernel: Kernel, target) -> int:
    """The loop index the tiling scores vectorised (-1: the cost model's default)."""
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


def _search(kernel: Kernel, target, current: Schedule | None, levels: dict[str, str], params: dict,
            seed: int, n_random: int, ranked: int, rounds: int = LOCAL_ROUNDS) -> tuple[list, int]:
    """search_tiles' search: ([(tiles [D, L], orders [L, D]) best first, up to `ranked`],
    candidates evaluated); an empty list when every candidate spills."""
    model = kernel_model(kernel, target)
    target_levels = target.tiling_levels
    L, D = len(target_levels), len(kernel.loops)
    tiled = [target_levels.index(t) for t in levels.values()]       # target level indices we tile
    max_spill = float(params.get("max_spill_ratio", 0.05))
    factor = tuple(params.get("register_tile_factor", [4, 16]))
    extents = model.extents
    space = TileSpace.of(kernel, target)            # the sizes offered per loop and level (space.py)
    vector_level = target_levels.index(levels["vector"]) if "vector" in levels else None
    values = [[space.register(d, factor) if h == vector_level else space.tiling(d) for d in range(D)] for h in range(L)]
    orders_set = np.array(order_candidates(kernel), dtype=np.int64)
    rng = np.random.default_rng(seed)
    vec = vector_loop_index(kernel, target)

    # Seeds: the current schedule and the textbook one.
    seeds_t, seeds_o = [], []
    for s in filter(None, [current, library_schedule(kernel, target)]):
        try:
            t, o = _schedule_arrays(s, kernel, target_levels)
        except (KeyError, ValueError):
            continue
        seeds_t.append(t)
        seeds_o.append(o)
    kept_whole = whole_loops(kernel)
    whole = np.array([l.name in kept_whole for l in kernel.loops])
    # Random candidates: each (loop, level) from its list; levels not tiled inherit. They
    # depend on the kernel's structure, not on the schedule it has now: searches of one
    # kernel from different schedules (the library's, the pipeline's) draw and score them once.
    structure = (canonical_kernel(kernel), target, tuple(levels.items()), repr(sorted(params.items())), seed, n_random)
    drawn = _RANDOM.get(structure)
    if drawn is None:
        tiles = np.empty((n_random, D, L), dtype=np.int64)
        for h in range(L):
            for d in range(D):
                tiles[:, d, h] = rng.choice(values[h][d], size=n_random) if h in tiled else 0
        tiles = _monotone(tiles, extents)
        orders = orders_set[rng.integers(len(orders_set), size=(n_random, L))]
        # Loops a later statement of the kernel reads whole (a softmax row) stay untiled:
        # tiled, the nest would split into one tile loop per statement (ir.loopnest).
        tiles[:, whole, :] = extents[whole, None]
        drawn = (tiles.astype(np.int32), orders.astype(np.int8), _measure(model, tiles, orders, max_spill, vec))
        _RANDOM.put(structure, drawn)
    tiles, orders, measured = drawn
    tiles, orders = tiles.astype(np.int64), orders.astype(np.int64)
    evaluated = len(tiles)
    if seeds_t:
        seed_t = _monotone(np.array(seeds_t), extents)
        seed_t[:, whole, :] = extents[whole, None]
        seed_o = np.array(seeds_o)
        tiles = np.concatenate([seed_t, tiles])
        orders = np.concatenate([seed_o, orders])
        ms = _measure(model, seed_t, seed_o, max_spill, vec)
        measured = tuple(np.concatenate([a, b]) for a, b in zip(ms, measured))
        evaluated += len(seed_t)
    scores = _scores(*measured)

    # Local search from the best few distinct candidates. Pool members that stay in the
    # pool have the same neighbours next round, and searches of one kernel from different
    # schedules meet the same candidates: each is measured once (the model is deterministic
    # and scores each row alone), the rest are looked up; a round's scores are made from
    # its whole batch, as if it were all measured.
    known = _KNOWN.get((structure, vec, max_spill))
    if known is None:
        known = {}
        _KNOWN.put((structure, vec, max_spill), known)
    counted: set = set()
    moves: dict[bytes, tuple] = {}       # a pool member's neighbours, keys
    best_idx = _top_distinct(scores, tiles, orders, KEEP)
    pool_t, pool_o, pool_s = tiles[best_idx], orders[best_idx], scores[best_idx]
    for _ in range(rounds):
        parts = []
        for i, member in enumerate(_candidate_keys(pool_t, pool_o)):
            if member not in moves:
                mt, mo = _neighbours(pool_t[i:i + 1], pool_o[i:i + 1], values, tiled, orders_set, extents, vector_level)
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
            for i, t, e, ok in zip(fresh, *_measure(model, nt[fresh], no[fresh], max_spill, vec)):
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
    names = kernel.loop_names
    tile_map = {}
    for d, n in enumerate(names):
        tile_map[n] = {target_levels[h]: int(tiles[d, h]) for h in range(len(target_levels))}
    order = {target_levels[h]: tuple(names[i] for i in orders[h]) for h in range(len(target_levels))}
    annotations = dict(current.annotations) if current is not None else {}
    if vec >= 0:
        annotations["vectorize"] = names[vec]   # what the tiles were scored with
    return Schedule(kernel, tiles=tile_map, order=order, annotations=annotations, levels=tuple(target_levels))


def _producer_schedule(kernel: Kernel, target) -> Schedule | None:
    """The search's schedule of a producer nest alone (accel/cost.py costs a compute_at
    producer over its region as this schedules it)."""
    found = search_tiles(kernel, target, None, level_mapping(list(target.tiling_levels), target.tiling_levels), {},
                         n_random=PRODUCER_CANDIDATES, rounds=PRODUCER_ROUNDS)
    return found[0] if found is not None else None


# A producer nest's search is smaller than a kernel's: a chain searches one per producer and
# compute point, and its tiles are clipped to each region anyway.
PRODUCER_CANDIDATES = 500
PRODUCER_ROUNDS = 3


register_producer_search(_producer_schedule)
