"""The model-driven tile search: the best multi-level tiles and loop orders of one kernel
by the cost model's score — the random-draw-and-local-moves strategy over the kernel's
search space in its tiling view (`search_space.SearchSpace.tiling`).

It lives beside the cost model it scores with, because the model needs it too: a statement
computed at the anchor's tiles is costed with its nest scheduled alone as this search
schedules it (`producer_schedule`; the accel package connects the two when imported, as
neither module can import the other). The tiling pass (rules/tiling.py) runs it on every
kernel, the chain rules on their producers.

1. Candidates per loop and level, and orders per level, from the space's tiling view:
   the `tiling` sizes at an on-chip level, the `register` sizes at the generic `vector`
   level; every permutation for up to 4 loops, else the stationary orders (each tensor's
   non-indexing loops innermost) and the source order (`search_space.order_candidates`).
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

from functools import lru_cache
from itertools import chain

import numpy as np

from ..caches import LRU
from ..canon import canonical_kernel, evaluate, schedule_key
from ..ir.schedule import Kernel, Schedule
from .cost import library_schedule
from .search_space import Points, SearchSpace, vector_loop_index

RANDOM_CANDIDATES = 3000
ENERGY_ROUNDS = 1             # rounds of the climb that lowers energy within 1% of the fastest (latency)
PAST_THE_BAND = 100.0         # the energy climb's penalty: energy x e^(100 x how far past 1% of the fastest)
LOCAL_ROUNDS = 8
KEEP = 4                      # candidates refined by local search
# The search of a chain computed at its last kernel's tiles (rules/chains.py, at each compute
# point; baselines.py, the library's search of such a kernel, at its own point)
CHAIN_CANDIDATES = 40         # random tile candidates per compute point (then the local search)
CHAIN_ROUNDS = 2              # rounds of the local refinement per compute point


def chain_tiles(kernel: Kernel, target, params: dict, seed: int = 0):
    """`search_tiles` of a chain at the compute point `kernel` holds, with the chain search's
    budget (CHAIN_CANDIDATES, CHAIN_ROUNDS) and the rules' levels on the target's: the one
    call the chain pass and the library's search of a chain make, so they share its entry."""
    mapping = level_mapping(params.get("levels", ["L2", "L1", "vector"]), target.tiling_levels)
    return search_tiles(kernel, target, None, mapping, params, seed=seed, n_random=CHAIN_CANDIDATES,
                        rounds=CHAIN_ROUNDS)


def level_mapping(generic: list[str], target_levels: tuple[str, ...]) -> dict[str, str]:
    """{generic name: target level}, outer → inner; extra generic names are dropped."""
    return {g: t for g, t in zip(generic, target_levels)}



# --------------------------------------------------------------------------- search


def search_tiles(kernel: Kernel, target, current: Schedule | None, levels: dict[str, str], params: dict,
                 seed: int = 0, n_random: int = RANDOM_CANDIDATES, ranked: int = 1, rounds: int = LOCAL_ROUNDS,
                 ties: float = 0.0):
    """The best tiles and orders found for `kernel` on `target`.

    Returns (schedule, KernelCost, candidates evaluated), or None when every candidate
    spills beyond `max_spill_ratio`. With `ranked > 1`, returns a list of up to `ranked`
    distinct (schedule, cost) pairs, best first, instead (for legality fallbacks).
    `ties`: under `latency`, how close to the fastest (and to `current`) a candidate ties, the
    ties broken by less energy after a climb that lowers it (`objective.ties(target)`; the
    pipeline asks it once, of its final kernels: `pipeline._energy_ties`). 0: the fastest,
    as every intermediate search returns (a tie taken early would steer the later searches).
    """
    key = _search_key(kernel, target, current, levels, params, seed, n_random, ranked, rounds, ties)
    found = _SEARCHES.get(key)
    if found is None:
        found = _search(kernel, target, current, levels, params, seed, n_random, ranked, rounds, ties)
        _SEARCHES.put(key, found)
    picks, evaluated = found
    vec = vector_loop_index(kernel, target)
    results = []
    for tiles, orders in picks:
        # the current schedule's annotations, and the vectorised loop the tiles were scored with
        schedule = Schedule.of_arrays(kernel, target.tiling_levels, tiles, orders, vectorize=vec if vec >= 0 else None,
                                      keep=current)
        results.append((schedule, evaluate(schedule, target)))
    if ranked > 1:
        return results
    if not results:
        return None
    return results[0][0], results[0][1], evaluated


def _search_key(kernel: Kernel, target, current: Schedule | None, levels: dict[str, str], params: dict, seed: int,
                n_random: int, ranked: int, rounds: int, ties: float) -> tuple:
    # The search depends on the kernel's structure, not its names: repeated layers share it.
    return (canonical_kernel(kernel), schedule_key(current) if current is not None else None, target,
            tuple(levels.items()), repr(sorted(params.items())), seed, n_random, ranked, rounds, ties)


def search_all(requests, target, levels: dict[str, str], params: dict, seed: int = 0, ties: float = 0.0,
               n_random: int = RANDOM_CANDIDATES, rounds: int = LOCAL_ROUNDS) -> None:
    """Run the searches `search_tiles` makes of each (kernel, current schedule) of `requests`
    (with these candidates, rounds and `ties`) that are not remembered yet, side by side here
    and on the spare cores (`workers.run_all`): the tiling pass, the energy tie-break and a
    chain's compute points ask it of all theirs before they take them one by one. A search
    depends only on what it is given, so `search_tiles` then returns what it finds alone."""
    from .. import workers

    if workers.spare_cores() < 1:
        return                  # one process: each search runs when it is asked
    todo: dict = {}
    for kernel, current in requests:
        key = _search_key(kernel, target, current, levels, params, seed, n_random, 1, rounds, ties)
        if key not in todo and key not in _SEARCHES:
            todo[key] = (_search, kernel, target, current, levels, params, seed, n_random, 1, rounds, ties)
    if len(todo) < 2:
        return
    for key, found in zip(todo, workers.run_all(list(todo.values()))):
        _SEARCHES.put(key, found)


# Search results by canonical kernel, incumbent schedule, target, rule parameters and seed.
_SEARCHES = LRU("tiling.search_tiles", 2048)
# A search's random draw (tiles, orders, scores, tie-break scale) by kernel structure,
# target, rule parameters and seed; and the scores of its local moves. ResNet-50 on one
# preset draws for ~190 structures (library, pipeline, chain and producer searches); at 160
# entries a fifth of its draws were evicted and drawn again; MaxViT-T draws for ~820, and at
# 320 it drew 257 of them again (9% of its time). A draw is ~0.3 MB.
_RANDOM = LRU("tiling.random_draw", 1024)
_KNOWN = LRU("tiling.local_scores", 1024)



def _space(kernel: Kernel, target, levels: dict[str, str], params: dict, seed: int, n_random: int,
           ties: float = 0.0) -> SearchSpace:
    # The random draw depends on the kernel's structure, not on the schedule it has now.
    structure = (canonical_kernel(kernel), target, tuple(levels.items()), repr(sorted(params.items())), seed, n_random)
    return SearchSpace.tiling(kernel, target, levels, params, structure, ties)


def _search(kernel: Kernel, target, current: Schedule | None, levels: dict[str, str], params: dict,
            seed: int, n_random: int, ranked: int, rounds: int = LOCAL_ROUNDS, ties: float = 0.0) -> tuple[list, int]:
    """search_tiles' search: ([(tiles [D, L], orders [L, D]) best first, up to `ranked`],
    candidates evaluated); an empty list when every candidate spills."""
    s = _space(kernel, target, levels, params, seed, n_random, ties)
    tiles, orders, measured, evaluated = _draw(kernel, target, current, s, seed, n_random)
    return _local_search(s, tiles, orders, measured, evaluated, ranked, rounds)


def _draw(kernel: Kernel, target, current: Schedule | None, s: SearchSpace, seed: int, n_random: int):
    """The random candidates and the seeds (the current schedule and the textbook one),
    measured: (tiles, orders, (time, energy, within the spill limit, DRAM bytes), candidates
    evaluated)."""
    L, D = s.L, s.D
    rng = np.random.default_rng(seed)
    # Seeds: the current schedule and the textbook one.
    seeds_t, seeds_o = [], []
    for sched in filter(None, [current, library_schedule(kernel, target)]):
        try:
            t, o, _, _ = s.model.schedule_arrays(sched)
        except (KeyError, ValueError):
            continue
        seeds_t.append(t[0])
        seeds_o.append(o[0])
    seed_t = seed_o = seed_measured = None
    if seeds_t:
        seed_t = s.pin_whole(s.monotone(np.array(seeds_t)))
        seed_o = np.array(seeds_o)
    # Random candidates: each (loop, level) from its list; levels not tiled inherit. They
    # depend on the kernel's structure, not on the schedule it has now: searches of one
    # kernel from different schedules (the library's, the pipeline's) draw and score them once.
    drawn = _RANDOM.get(s.structure)
    if drawn is None:
        tiles = np.empty((n_random, D, L), dtype=np.int64)
        for h in range(L):
            for d in range(D):
                tiles[:, d, h] = rng.choice(s.sizes[h][d], size=n_random) if h in s.searched else 0
        tiles = s.monotone(tiles)
        orders = s.orders[rng.integers(len(s.orders), size=(n_random, L))]
        tiles = s.pin_whole(tiles)
        # The seeds are scored in the draw's batch (each row's score is its own; a call of
        # the model costs more than a few rows).
        k = 0 if seed_t is None else len(seed_t)
        both = s.measure(Points(tiles, orders) if seed_t is None else
                         Points(np.concatenate([seed_t, tiles]), np.concatenate([seed_o, orders])))
        if k:
            seed_measured = tuple(a[:k].copy() for a in both)
        drawn = (tiles.astype(np.int32), orders.astype(np.int8), tuple(a[k:].copy() for a in both))
        _RANDOM.put(s.structure, drawn)
    tiles, orders, measured = drawn
    tiles, orders = tiles.astype(np.int64), orders.astype(np.int64)
    evaluated = len(tiles)
    if seed_t is not None:
        tiles = np.concatenate([seed_t, tiles])
        orders = np.concatenate([seed_o, orders])
        ms = seed_measured if seed_measured is not None else s.measure(Points(seed_t, seed_o))
        measured = tuple(np.concatenate([a, b]) for a, b in zip(ms, measured))
        evaluated += len(seed_t)
    return tiles, orders, measured, evaluated


def _local_search(s: SearchSpace, tiles, orders, measured, evaluated: int, ranked: int, rounds: int) -> tuple[list, int]:
    """Local search from the best few distinct candidates by the objective's score; then,
    under `latency` when ties are asked (`s.tie`: the pipeline's `energy ties` stage), a
    second climb from the objective's picks that lowers energy among the candidates within 1%
    of the fastest (a tiling that keeps a tensor in a bigger buffer at equal time); under
    `energy` and `edp`, a second climb by the objective from the fastest candidates. What the
    search returns is decided by the objective's rule over every candidate it measured
    (`SearchSpace.decide`)."""
    known = _KNOWN.get((s.structure, s.vector, s.max_spill))
    if known is None:
        known = {}
        _KNOWN.put((s.structure, s.vector, s.max_spill), known)
    every = [(tiles, orders, measured)]
    climb = _Climb(s, known, every, evaluated)
    climb.run(tiles, orders, s.rank(*measured[:3]), lambda m: s.rank(*m[:3]), rounds)
    if s.objective == "latency" and s.tie > 0:
        fastest = min(float(np.min(np.where(m[2], m[0], np.inf), initial=np.inf)) for _, _, m in every)
        if np.isfinite(fastest):
            bound = fastest * (1.0 + s.tie)

            def energy(m):      # with a steep penalty past the band: slower low-energy tilings may climb into it
                past = np.minimum(PAST_THE_BAND * np.maximum(m[0] / bound - 1.0, 0.0), 50.0)
                return np.where(m[2], m[1] * np.exp(past), np.inf)

            joined = _joined(every)
            climb.run(joined[0], joined[1], energy(joined[2]), energy, ENERGY_ROUNDS)
    if s.objective != "latency":
        # Energy (or EDP) also climbs from the fastest candidates: the least-energy climb can
        # settle on tiles that leave the array part idle (a 32x32 array with 8 of its columns
        # busy), while the tilings that fill it sit in another basin.
        joined = _joined(every)
        speed = lambda m: np.where(m[2], m[0], np.inf)
        fastest = _top_distinct(speed(joined[2]), joined[0], joined[1], KEEP)
        climb.run(joined[0][fastest], joined[1][fastest], s.rank(*(a[fastest] for a in joined[2][:3])),
                  lambda m: s.rank(*m[:3]), rounds)
    joined = _joined(every)
    return s.decide(joined[0], joined[1], joined[2], ranked), climb.evaluated


def _joined(every: list) -> tuple:
    return (np.concatenate([e[0] for e in every]), np.concatenate([e[1] for e in every]),
            tuple(np.concatenate([e[2][j] for e in every]) for j in range(4)))


class _Climb:
    """Rounds of local moves from a pool of the best few. Pool members that stay in the pool
    have the same neighbours next round, and searches of one kernel from different schedules
    meet the same candidates: each is measured once (the model is deterministic and scores
    each row alone; `known`), the rest are looked up; a round's scores are made from its
    whole batch, as if it were all measured. Every round's candidates join `every`."""

    def __init__(self, s: SearchSpace, known: dict, every: list, evaluated: int):
        self.s, self.known, self.every, self.evaluated = s, known, every, evaluated
        self.counted: set = set()
        self.counted_members: set = set()         # pool members whose neighbours are all in `counted`
        self.moves: dict[bytes, list] = {}        # a pool member's neighbours: [tiles, orders, keys, measured]

    def run(self, tiles, orders, scores, score, rounds: int) -> None:
        """Climb from the best KEEP of (tiles, orders) by `scores`; `score(measured)` scores a round."""
        best_idx = _top_distinct(scores, tiles, orders, KEEP)
        pool_t, pool_o, pool_s = tiles[best_idx], orders[best_idx], scores[best_idx]
        for _ in range(rounds):
            if not len(pool_s) or not np.isfinite(pool_s).any():
                return
            members = Points(pool_t, pool_o).keys()
            parts = [self._moves_of(member, pool_t[i:i + 1], pool_o[i:i + 1]) for i, member in enumerate(members)]
            self._measure(parts)
            nt = np.concatenate([p[0] for p in parts])
            no = np.concatenate([p[1] for p in parts])
            measured = tuple(np.concatenate([p[3][j] for p in parts]) for j in range(4))
            self.every.append((nt, no, measured))
            ns = score(measured)
            for member, part in zip(members, parts):
                if member not in self.counted_members:
                    new_here = set(part[2]) - self.counted
                    self.evaluated += len(new_here)
                    self.counted |= new_here
                    self.counted_members.add(member)
            all_t = np.concatenate([pool_t, nt])
            all_o = np.concatenate([pool_o, no])
            all_s = np.concatenate([pool_s, ns])
            keep = _top_distinct(all_s, all_t, all_o, KEEP)
            if np.isclose(all_s[keep[0]], pool_s.min(), rtol=1e-9) and \
                    set(map(float, all_s[keep])) == set(map(float, pool_s)):
                return
            pool_t, pool_o, pool_s = all_t[keep], all_o[keep], all_s[keep]

    def _moves_of(self, member: bytes, t, o) -> list:
        part = self.moves.get(member)
        if part is None:
            mt, mo = _neighbours(self.s, t, o)
            mt = self.s.pin_whole(mt)
            part = self.moves[member] = [mt, mo, Points(mt, mo).keys(), None]
        return part

    def _measure(self, parts: list) -> None:
        """Give each part its neighbours' (time, energy, ok, DRAM bytes): those not in `known`
        measured in one batch (a candidate repeated within it once), the rest looked up."""
        known = self.known
        todo = [part for part in parts if part[3] is None]
        fresh: dict = {}            # key -> None: the unmeasured candidates, first seen first
        rows_of = []                # per part, the rows of its first sightings
        for part in todo:
            rows = []
            for j, k in enumerate(part[2]):
                if k not in known and k not in fresh:
                    fresh[k] = None
                    rows.append(j)
            rows_of.append(rows)
        if fresh:
            ft = np.concatenate([part[0][rows] for part, rows in zip(todo, rows_of) if rows])
            fo = np.concatenate([part[1][rows] for part, rows in zip(todo, rows_of) if rows])
            for k, t, e, ok, b in zip(fresh, *(a.tolist() for a in self.s.measure(Points(ft, fo)))):
                known[k] = (float(t), float(e), bool(ok), float(b))
        for part in todo:
            keys = part[2]
            rows = np.fromiter(chain.from_iterable(map(known.__getitem__, keys)), dtype=float,
                               count=4 * len(keys)).reshape(len(keys), 4)
            part[3] = (rows[:, 0].copy(), rows[:, 1].copy(), rows[:, 2] != 0, rows[:, 3].copy())


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


def _neighbours(s: SearchSpace, pool_t, pool_o):
    """One-step moves from each pool member: one tile size, one order, a factor of two
    moved between two loops at one level (per member and level, in that order)."""
    orders_set = s.orders
    out_t, out_o = [], []
    for t, o in zip(pool_t, pool_o):
        D, L = t.shape
        levels = np.arange(L)
        for h in s.searched:
            padded, counts = _padded_sizes(s, h)
            c, _ = size_moves(s, t, h)
            out_t.append(c)
            out_o.append(np.repeat(o[None], len(c), axis=0))
            # Trade between two loops: one grows by 1-2 candidate steps while another
            # shrinks by 1-2 (what a full level needs to move at all).
            tr = _trades(padded, counts, t[:, h])
            if len(tr):
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
    return s.monotone(np.concatenate(out_t)), np.concatenate(out_o)


def size_moves(s: SearchSpace, t: np.ndarray, h: int) -> tuple[np.ndarray, np.ndarray]:
    """Every one-tile-size move of point `t` ([D, L] tiles) at level h: loop d set to another
    size the level offers, outer tiles growing to hold it, inner ones shrinking inside it.
    ([n, D, L] tiles, [n] the loop each row moves), rows by loop, then by size."""
    padded, counts = _padded_sizes(s, h)
    offered = (np.arange(padded.shape[1])[None, :] < counts[:, None]) & (padded != t[:, h][:, None])
    dd, jj = np.nonzero(offered)                          # (masks flatten by loop, then by size)
    v = padded[dd, jj].astype(t.dtype)[:, None]
    c = np.repeat(t[None], len(dd), axis=0)
    rows, levels = np.arange(len(dd)), np.arange(t.shape[1])
    row = c[rows, dd, :]
    c[rows, dd, :] = np.where(levels < h, np.maximum(row, v), np.where(levels == h, v, np.minimum(row, v)))
    return c, dd


def _padded_sizes(s: SearchSpace, h: int) -> tuple[np.ndarray, np.ndarray]:
    """Level h's sizes per loop as one array [D, most sizes] (padded past each loop's count
    with its largest), and the counts: the moves index them all at once. Kept on the space."""
    memo = s.__dict__.setdefault("_padded", {})
    if h not in memo:
        lists = [np.asarray(v, dtype=np.int64) for v in s.sizes[h]]
        counts = np.array([len(v) for v in lists], dtype=np.int64)
        padded = np.zeros((len(lists), max(1, int(counts.max(initial=0)))), dtype=np.int64)
        for d, v in enumerate(lists):
            padded[d, :len(v)] = v
            padded[d, len(v):] = v[-1] if len(v) else 0
        memo[h] = padded, counts
    return memo[h]


def _trades(padded: np.ndarray, counts: np.ndarray, now: np.ndarray) -> np.ndarray:
    """[(d1, d2, v1, v2)]: loop d1 up to one of its next two sizes above `now[d1]`, loop d2
    down to one of its two below `now[d2]`, d1 != d2; ordered by d1, d2, v1, v2 (the sizes
    ascending)."""
    D = len(counts)
    # each loop's sizes below `now` (its sizes ascend; past its count the row is padding)
    steps = ((padded < now[:, None]) & (np.arange(padded.shape[1])[None, :] < counts[:, None])).sum(axis=1)
    up_at = steps[:, None] + 1 + np.arange(2)[None, :]                  # [D, 2] indices of the sizes above
    up_ok = up_at < counts[:, None]
    low = np.maximum(0, steps - 2)
    down_at = low[:, None] + np.arange(2)[None, :]                      # [D, 2] indices of the sizes below
    down_ok = down_at < steps[:, None]
    d1, d2, i1, i2 = _pairs(D)
    keep = up_ok[d1, i1] & down_ok[d2, i2]
    d1, d2, i1, i2 = d1[keep], d2[keep], i1[keep], i2[keep]
    width = padded.shape[1] - 1
    v1 = padded[d1, np.minimum(up_at[d1, i1], width)]
    v2 = padded[d2, np.minimum(down_at[d2, i2], width)]
    return np.stack([d1, d2, v1, v2], axis=1) if len(d1) else np.zeros((0, 4), dtype=np.int64)


@lru_cache(maxsize=64)
def _pairs(D: int) -> tuple[np.ndarray, ...]:
    """(d1, d2, i1, i2) over D x D x 2 x 2, d1 != d2, in that order (`_trades`'s grid)."""
    d1, d2, i1, i2 = (a.reshape(-1) for a in np.indices((D, D, 2, 2)))
    apart = d1 != d2
    out = tuple(a[apart] for a in (d1, d2, i1, i2))
    for a in out:
        a.setflags(write=False)
    return out


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
