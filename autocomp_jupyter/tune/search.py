"""The evolutionary search of one kernel (`_Search`) and its mutators: the evolution strategy over
the kernel's search space in its tuner view (`accel.search_space.SearchSpace.tuner`)."""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .constants import (CONFIRMED_VERDICTS, MAX_GENERATIONS_PER_CONFIG, MAX_POPULATION, MIN_POPULATION,
                        NEW_ORDERS_PER_GENERATION, NEW_ORDERS_START, TOURNAMENT)
from ..accel.search_space import Points, SearchSpace
from .legality import _Legality


# --------------------------------------------------------------------------- the search of one kernel


@dataclass
class _Search:
    """The evolutionary search state for one kernel."""

    space: SearchSpace
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
        # (asked every generation; the incumbent never changes)
        key = self.__dict__.get("_incumbent_key")
        if key is None:
            key = self.__dict__["_incumbent_key"] = Points.stack([self.space.incumbent_point]).keys()[0]
        return key

    def best_time(self) -> float:
        """The best legal time so far (checks legality of the leaders as needed)."""
        best = self.verified(1)
        return best[0][0] if best else math.inf

    # ------------------------------------------------------------------ variation (vectorised)

    def _random(self, n: int, new_orders: float = 0.5) -> Points:
        """Random tiles; the incumbent's orders (or, with probability `new_orders`, one
        random permutation for every level) and annotations."""
        sp, rng = self.space, self.rng
        tiles = np.empty((n, sp.D, sp.L), dtype=np.int64)
        for d, ch in enumerate(sp.choices):
            tiles[:, d, :] = ch[rng.integers(0, len(ch), size=(n, sp.L))]
        tiles = -np.sort(-tiles, axis=2)   # outer >= inner
        it, io, ip, iv = sp.incumbent_point
        orders = np.repeat(io[None], n, axis=0)
        if sp.tune_orders:
            fresh = np.flatnonzero(rng.random(n) < new_orders)
            perms = np.argsort(rng.random((len(fresh), sp.D)), axis=1)
            orders[fresh] = perms[:, None, :]
        return Points(tiles, orders, np.repeat(ip[None], n, axis=0), np.full(n, iv, dtype=np.int64))

    def _mutate(self, batch: Points, strength: float = 1.0) -> Points:
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
        return Points(*genome)

    def _breed(self, n: int) -> Points:
        """n children of the population: tournament parents, uniform crossover (per loop
        for tiles and parallel marks, per level for orders) 3 times in 5, then mutation."""
        rng = self.rng
        if not self.population:
            # Nothing legal has been scored yet (every candidate so far was illegal or
            # overflowed): breed from the incumbent until something legal is found.
            return self._mutate(Points(*(np.repeat(x, n, axis=0) for x in Points.stack([self.space.incumbent_point]))))
        pop = Points.stack([self.genomes[k] for k in self.population])
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
        return self._mutate(Points(T, O, P, V))

    # ------------------------------------------------------------------ legality

    def _legal_variant(self, genome, exact: bool = True) -> tuple | None:
        """The genome if legal; else repaired (parallel marks the orders forbid dropped,
        or the incumbent's orders and parallel set); None when even that is illegal."""
        tiles, orders, parallel, vectorize = genome
        (order_ok, may), _ = self.legality.judge(tiles, orders, exact)
        if order_ok:
            return tiles, orders, parallel & may, vectorize
        it, io, ip, iv = self.space.incumbent_point
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

    def evaluate(self, batch: Points | None, scorer, limit: int, new_orders: int = NEW_ORDERS_PER_GENERATION) -> int:
        """Repair, deduplicate and score up to `limit` new candidates (the legal repairs of
        illegal ones first). Legality is decided before a candidate can enter the
        population or a version (`iter_verified`); at most `new_orders` loop orders new to
        the search come in (candidates with more are dropped unscored)."""
        sp = self.space
        pending = Points.stack(self.pending) if self.pending else None
        self.pending = []
        batch = Points.concat(pending, batch) if (pending is not None or batch is not None) else None
        if batch is None or not len(batch[0]) or limit <= 0:
            return 0
        tiles, orders = sp.repair(batch[0], batch[1])
        parallel, vectorize = batch[2].astype(bool), batch[3].astype(np.int64)
        keys = Points(tiles, orders, parallel, vectorize).keys()
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
        inc = self.space.incumbent_point
        n_mut = pop_size // 2
        first = Points.stack([inc])
        mutants = self._mutate(Points(*(np.repeat(x, n_mut, axis=0) for x in first)), strength=1.5)
        randoms = self._random(pop_size - 1 - n_mut)
        self.orders_known.add(self.space.incumbent_point[1].astype(np.int64).tobytes())
        self.evaluate(Points.concat(first, mutants, randoms), scorer, max(1, min(self.configs, pop_size)),
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
    share: Callable[["SearchSpace"], float]
    apply: Callable[..., None]


def _tile_share(sp: "SearchSpace") -> float:
    return 0.65 if (sp.tune_orders and sp.D > 1) or sp.tune_annotations else 1.0


def _order_share(sp: "SearchSpace") -> float:
    return (0.85 if sp.tune_orders and sp.D > 1 else _tile_share(sp)) - _tile_share(sp)


def _annotation_share(sp: "SearchSpace") -> float:
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


