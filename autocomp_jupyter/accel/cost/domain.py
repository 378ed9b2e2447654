"""Domains cut by `where` relations: which tiles of a statement are not empty.

`TileDomain` counts, per tile size, the fraction of tiles a statement's `where` relations
leave non-empty (the only ones computed and fetched), and inside a tile on the domain's edge
the datapath's passes that meet it (the only ones it runs: `passes_meeting`, and over the
whole run `kept_at` the pass's sizes); `RowTiles` is the same interface for
an in-place row update, which runs one row whatever the tiles. `zero_outside` gives the
relations a sum inherits from a factor that is 0 outside its own domain (a causal softmax's
row sum over its exps), which the online-softmax rewrite writes into the sum and the limit
counts.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.program import Access, Affine, BinOp, Statement, domain_points


class TileDomain:
    """The tiles of a statement's `where` domain (`Statement.domain`) that are not empty.

    A tile of T[d] points along each anchor loop d (tile b covers x_d = T_d b_d + r_d with
    0 <= r_d < T_d) meets a relation sum a_d x_d + c >= 0 iff sum a_d T_d b_d + c + sum over
    a_d > 0 of a_d (T_d - 1) >= 0: a relation on the tile coordinates, whose points
    `ir.program.domain_points` counts exactly (several relations: each checked on its own,
    an upper bound). Empty tiles are skipped: the model charges the work and fetches of the
    non-empty ones, as the simulator replays and the C runs them."""

    def __init__(self, relations: list[tuple[np.ndarray, float]], extents: np.ndarray):
        self.relations = relations
        self.loops = sorted({int(d) for coeff, _ in relations for d in np.nonzero(coeff)[0]})
        self.extents = extents
        self._kept: dict[tuple, float] = {}
        self._passes: dict[tuple, int] = {}

    def kept_fraction(self, sizes: tuple[int, ...]) -> float:
        """The fraction of tiles of `sizes` (along `self.loops`) that meet the domain."""
        cached = self._kept.get(sizes)
        if cached is not None:
            return cached
        tiles = {f"b{d}": int(math.ceil(self.extents[d] / t)) for d, t in zip(self.loops, sizes)}
        size = dict(zip(self.loops, sizes))
        constraints = []
        for coeff, const in self.relations:
            terms = {f"b{d}": int(round(coeff[d] * size[d])) for d in self.loops if coeff[d]}
            slack = sum(coeff[d] * (size[d] - 1) for d in self.loops if coeff[d] > 0)
            constraints.append(Affine.of(terms, int(math.floor(const + slack))))
        kept = domain_points(tiles, tuple(constraints)) / max(1, math.prod(tiles.values()))
        self._kept[sizes] = kept
        return kept

    def meets(self, box) -> bool:
        """Whether a tile, box[d] = (first point, points) along each anchor loop d, holds a
        point of the domain (each relation checked on its own, as `kept_fraction`)."""
        for coeff, const in self.relations:
            top = const + sum(c * (box[d][0] + (box[d][1] - 1 if c > 0 else 0)) for d, c in enumerate(coeff) if c)
            if top < 0:
                return False
        return True

    def kept(self, T: np.ndarray) -> np.ndarray:
        """[n, L]: the kept fraction of each level's tiles, for full tiles T [n, D, L]."""
        n, D, L = T.shape
        return self.kept_at(T.transpose(0, 2, 1).reshape(n * L, D)).reshape(n, L)

    def kept_at(self, sizes: np.ndarray) -> np.ndarray:
        """[n]: the kept fraction of boxes of `sizes` [n, D] points along each anchor loop
        (a level's tiles, or the datapath's passes: `passes_meeting` over the whole run)."""
        extents = np.asarray(self.extents, dtype=np.int64)[self.loops]
        picked = np.clip(sizes[:, self.loops], 1, extents).astype(np.int64)   # [n, k]
        # one integer per row (a row-wise np.unique sorts far slower)
        codes = picked @ np.cumprod(np.concatenate([[1], extents[:-1] + 1]))
        unique, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
        values = np.array([self.kept_fraction(tuple(int(v) for v in picked[i])) for i in first])
        return values[inverse.reshape(-1)]

    def passes_meeting(self, box, unit) -> int:
        """How many of the datapath's passes over tile `box` (box[d] = (first point, points)
        along each anchor loop d; a pass covers unit[d] of them, the last one what is left)
        hold a point of the domain, counted along `self.loops` (each relation checked on its
        own, as `meets`). A tile on the domain's edge runs only those: the loop over its
        passes is bounded by the relations, as the points inside a pass are by its mask.
        Exact; cached by the relations' offsets at the tile and the pieces' sizes."""
        pieces = tuple((int(box[d][1]), max(1, min(int(unit[d]), int(box[d][1])))) for d in self.loops)
        shifts = tuple(float(const + sum(coeff[d] * box[d][0] for d in self.loops)) for coeff, const in self.relations)
        key = (shifts, pieces)
        cached = self._passes.get(key)
        if cached is not None:
            return cached
        firsts = [np.arange(0, points, u) for points, u in pieces]
        lasts = [np.minimum(f + u, points) - 1 for f, (points, u) in zip(firsts, pieces)]
        axes = lambda k, v: v.reshape([-1 if j == k else 1 for j in range(len(pieces))])   # noqa: E731
        meets = np.ones([len(f) for f in firsts], dtype=bool)
        for (coeff, _), shift in zip(self.relations, shifts):
            top = shift
            for k, d in enumerate(self.loops):
                if coeff[d]:
                    top = top + coeff[d] * axes(k, lasts[k] if coeff[d] > 0 else firsts[k])
            meets &= np.asarray(top) >= 0
        count = int(np.count_nonzero(meets))
        if len(self._passes) >= 65536:
            self._passes.clear()
        self._passes[key] = count
        return count


class RowTiles:
    """What an in-place row update (`ir.program.InPlace`) runs: the one row it writes,
    addressed directly (which row is known when it runs), whatever the tiles along its loop;
    `TileDomain`'s interface, so the model, the limit and the simulator charge that row alone
    (the simulator replays the first tile's first row for it)."""

    def __init__(self, loop: int, extent: int):
        self.loops = [loop]
        self.extent = extent

    def kept_fraction(self, sizes: tuple[int, ...]) -> float:
        return 1.0 / self.extent

    def meets(self, box) -> bool:
        return box[self.loops[0]][0] == 0

    def kept(self, T: np.ndarray) -> np.ndarray:
        return np.full((T.shape[0], T.shape[2]), 1.0 / self.extent)

    def kept_at(self, sizes: np.ndarray) -> np.ndarray:
        return np.full(sizes.shape[0], 1.0 / self.extent)

    def passes_meeting(self, box, unit) -> int:
        """The passes along its loop over the one row the replay cuts the tile to: all of them."""
        points = int(box[self.loops[0]][1])
        return -(-points // max(1, min(int(unit[self.loops[0]]), points)))



def zero_outside(s: Statement, writers: dict) -> tuple[Affine, ...]:
    """The relations sum `s` may add to its own domain, exactly: where a factor of its
    product reads (at single-loop indices) a tensor written by an `=` statement over a
    `where` domain, that tensor is 0 outside it, so every term outside adds 0.
    `writers`: {tensor: the statement writing it}. () when there are none."""
    if s.reduce != "+":
        return ()
    factors, out = _factors(s.expr), []
    for f in factors:
        w = writers.get(f.tensor) if isinstance(f, Access) else None
        if w is None or w.reduce is not None or not w.domain \
                or any(idx.single_loop is None for idx in w.target_indices):
            continue
        if sum(a.tensor == f.tensor for a in s.expr.accesses()) != 1:
            continue
        seen = dict(zip((idx.single_loop for idx in w.target_indices), f.indices))
        out += [c.rename(seen) for c in w.domain if c.rename(seen) not in s.domain and c.rename(seen) not in out]
    return tuple(out)


def _factors(expr) -> list:
    if isinstance(expr, BinOp) and expr.op == "*":
        return _factors(expr.lhs) + _factors(expr.rhs)
    return [expr]
