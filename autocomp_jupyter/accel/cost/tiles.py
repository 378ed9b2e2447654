"""The tiles of a batch of candidates: how many of each level there are along each loop.

`_chunks` and `_tile_counts` split a loop's extent by non-dividing tiles (remainder tiles
counted); `TileGrid` is what every step of the model reads about a batch's tiles: counts per
level, their mean sizes and the loop sequence seen from inside each level.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def _chunks(extent: np.ndarray, tiles: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """Pieces of size `unit` after splitting `extent` by tiles[..., 0], tiles[..., 1], ...

    Each split leaves full tiles and one remainder tile; each is split further. With no
    tiles this is ceil(extent / unit). All arguments broadcast; tiles are non-increasing.
    """
    levels = tiles.shape[-1]

    def split(x, k):
        if k == levels:
            return -(-x // unit)
        t = tiles[..., k]
        full = x // t
        rest = x - full * t
        return full * split(t, k + 1) + split(rest, k + 1)

    return split(extent, 0)


def _tile_counts(extent: np.ndarray, tiles: np.ndarray, T: np.ndarray | None = None):
    """`_chunks` for every tiling level in one pass: counts [n, L, D] of level-h tiles along
    each loop over the whole run, and the innermost tiles as L + 1 lengths with
    multiplicities (lists of [n, D] arrays; zero multiplicities are padding).

    A level splits each parent tile of length x into floor(x / t) tiles of t and one
    remainder of x mod t. Full tiles of every parent have the same length t, so after level
    h there are at most h + 2 distinct lengths: the remainders of the extent and of each
    outer tile size, and t itself. Floats: x * (1/t) is within 1e-9 relative of the exact
    quotient and all lengths are integers far below 2^53, so floor / ceil with a 1e-9 margin
    are exact.
    """
    n, D, L = tiles.shape
    T = tiles.astype(float) if T is None else T     # (`T`: the tiles as floats, when the caller has them)
    lengths = [np.broadcast_to(extent.astype(float), (n, D))]
    mult = [np.ones((n, D))]
    counts = np.empty((n, L, D))
    for h in range(L):
        t = T[:, :, h]
        inv = 1.0 / t
        fulls = 0.0
        for q, (x, m) in enumerate(zip(lengths, mult)):
            full = np.floor(x * inv + 1e-9)
            rest = x - full * t
            fulls = fulls + full * m
            lengths[q] = rest
            mult[q] = np.where(rest > 0.5, m, 0.0)
        lengths.append(t)
        mult.append(fulls)
        counts[:, h, :] = sum(mult)
    return counts, lengths, mult


@dataclass
class TileGrid:
    """A batch's tiles as every step reads them (n candidates, D loops, L tiling levels).

    counts[:, h, d]: level-h tiles along loop d over the whole run; rel: per enclosing tile;
    mean_tile: the mean level-h tile; T: the full tiles [n, D, L] as floats; piece_len /
    piece_mult: the innermost tiles' lengths and multiplicities (`_tile_counts`);
    seq_loops / seq_trips: the loop order seen from inside the innermost level (the orders
    of levels 0..L-1, outer → inner) and each loop's trips there."""

    tiles: np.ndarray        # [n, D, L] int
    orders: np.ndarray       # [n, L, D]
    E: np.ndarray            # [1, D] extents
    counts: np.ndarray       # [n, L, D]
    piece_len: list
    piece_mult: list
    rel: np.ndarray          # [n, L, D]
    mean_tile: np.ndarray    # [n, L, D]
    T: np.ndarray            # [n, D, L] float
    seq_loops: np.ndarray    # [n, L * D]
    seq_trips: np.ndarray    # [n, L * D]
    # what several statements' accesses read of the same grid, computed once (below)
    _shared: dict = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        return self.tiles.shape[0]

    def counts_at(self, chain: tuple[int, ...]) -> np.ndarray:
        """[n, H, D] the counts at the levels of `chain` (a tuple of tiling levels)."""
        key = ("counts", chain)
        found = self._shared.get(key)
        if found is None:
            found = self._shared[key] = self.counts[:, list(chain), :]
        return found

    def mean_footprint(self, a, footprint) -> np.ndarray:
        """[n, H] `footprint(a, mean tiles)` of access `a` (a `_AccessModel`) at each level of its
        chain: accesses of the same region over the same levels share it."""
        key = ("footprint", a.region_key, a.chain)
        found = self._shared.get(key)
        if found is None:
            mean = self._shared.get(("mean", a.chain))
            if mean is None:
                mean = self._shared["mean", a.chain] = self.mean_tile[:, list(a.chain), :].transpose(0, 2, 1)
            found = self._shared[key] = footprint(a, mean)
        return found

    def datapath_loops(self) -> np.ndarray:
        """[L * D + D, n] the loop at each position of the sequence from the outermost level
        down to the datapath (every statement's `LoopSequence.loops`)."""
        found = self._shared.get("loops")
        if found is None:
            found = self._shared["loops"] = np.ascontiguousarray(
                np.concatenate([self.seq_loops, self.inner_order], axis=1).T)
        return found

    @property
    def rows(self) -> np.ndarray:
        """[n, 1] the candidates' indices (to gather one column per row)."""
        found = self._shared.get("rows")
        if found is None:
            found = self._shared["rows"] = np.arange(self.n)[:, None]
        return found

    @property
    def inner_order(self) -> np.ndarray:
        """[n, D] the innermost level's loop order."""
        return self.orders[:, -1, :]


def tile_grid(extents: np.ndarray, tiles: np.ndarray, orders: np.ndarray) -> TileGrid:
    """The TileGrid of normalised tiles [n, D, L] and orders [n, L, D]."""
    n, D, L = tiles.shape
    E = extents[None, :].astype(np.int64)
    # Tiles of each level along each loop over the whole run, and per enclosing tile.
    T = tiles.astype(float)                               # [n, D, L] full tiles
    counts, piece_len, piece_mult = _tile_counts(E, tiles, T)
    rel = counts.copy()
    rel[:, 1:, :] /= counts[:, :-1, :]
    mean_tile = E[:, None, :] / counts                    # [n, L, D]
    # Loop order seen from inside level h: the orders of levels 0..h, outer → inner.
    seq_loops = orders.reshape(n, L * D)
    seq_trips = rel[np.arange(n)[:, None, None], np.arange(L)[None, :, None], orders].reshape(n, L * D)  # along orders
    return TileGrid(tiles, orders, E, counts, piece_len, piece_mult, rel, mean_tile, T, seq_loops, seq_trips)
