"""Capacity: the bytes a batch's tiles hold at each on-chip level, spill and double buffering.

Each access's tile at a level takes its footprint there (traffic.py's `_footprint`); a
tensor's tiles at one level take the largest of its accesses'; an in-place epilogue reuses
the buffer of the internal tile it reads. A computed-at tensor's region is held on chip at
its compute point's level from its writer to its last reader (`_HeldRegion`, `_held_peak`).
A level whose tiles overflow it by a fraction s of their footprint streams that fraction of
its traffic through from its parent (`overflow`, applied in traffic.py); a level whose
tiles fit twice double-buffers (the ports step overlaps its loads with compute).

Registers and unroll (`unroll_pressure`). The innermost level is the register file (a
target's innermost memory level: registers, vregs, an accumulator). Unrolling a statement's
innermost point loop by f keeps f copies of its body's values live at once: f datapath steps
(one vector of the vectorised loop, or one point) of every operand that varies along the
unrolled loop, one of those that do not. The roles the register level holds (an
accumulator's outputs) are its tile, already counted; the operands the level does not hold
(loaded for the body and used in it) are what unrolling adds. Past the level's capacity the
excess is spilled: stored to the next level out and loaded back once per unrolled body. A
statement on the PE array is not charged (the array streams its operands; an unrolled
command stream keeps no values live), nor is one whose register level holds every role
(the unrolled values are its tile). No target field prices a benefit of unrolling (loop
overhead), so below capacity unroll costs and saves nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ...ir.loopnest import regions
from ...ir.schedule import Kernel
from ..target import Target
from .compute import DatapathTile
from .domain import RowTiles
from .statements import _StatementModel
from .tiles import TileGrid
from .traffic import _footprint


@dataclass
class Capacity:
    """How a batch's tiles fill the on-chip levels: each access's tile bytes at the levels
    holding it (`tile_bytes[(statement, access)]` [n, L]), the bytes held per level
    (`footprint` [n, L]), the fraction of a level's traffic that overflows it (`overflow`),
    the worst overflow (`spill` [n], the report's spill_ratio), and the levels whose tiles
    fit twice (`double_buffered` [n, L]); `overflowing` [L]: whether any candidate's tiles
    overflow each level (else its traffic needs no blending toward its parent's)."""

    tile_bytes: dict
    footprint: np.ndarray
    overflow: np.ndarray
    spill: np.ndarray
    double_buffered: np.ndarray
    overflowing: np.ndarray
    # per level, whether every candidate's tiles fit it twice, and whether none's do: the
    # traffic's buckets then take each transfer whole, or none of it, with no mask
    buffered_all: tuple = ()
    buffered_none: tuple = ()


def occupy(model, grid: TileGrid) -> Capacity:
    """The Capacity of a batch's tiles on `model`'s levels."""
    tile_bytes: dict = {}
    capacity_fp = footprints(model, grid.T, tile_bytes, grid.orders)   # [n, L]
    # (np.clip with no upper bound is np.maximum: called directly)
    overflow = np.maximum(1.0 - model.capacity[None, :] / np.maximum(capacity_fp, 1e-30), 0.0)
    spill = np.maximum.reduce(np.maximum(capacity_fp / model.capacity[None, :] - 1.0, 0.0), axis=1)
    double_buffered = 2.0 * capacity_fp <= model.capacity[None, :]
    return Capacity(tile_bytes, capacity_fp, overflow, spill, double_buffered, overflow.any(axis=0),
                    tuple(double_buffered.all(axis=0).tolist()), tuple((~double_buffered.any(axis=0)).tolist()))


def footprints(model, T: np.ndarray, tile_bytes: dict | None = None, orders=None) -> np.ndarray:
    """[n, L] bytes held per level; fills `tile_bytes[(statement, access)]` with each
    access's full tile at the levels holding it ([n, L]) when given. A computed-at
    tensor's region is held at its compute point's level while it is live (`_held_regions`);
    the anchor's tiles of it are part of that region."""
    n, L = T.shape[0], model.n_levels
    per_tensor: dict[str, np.ndarray] = {}
    held = {h.tensor for h in model.held}
    # accesses of equal regions over the same levels hold the same bytes: one array for them
    # (nothing writes into these), and one gather of the tiles per chain of levels
    shared: dict = {}
    at_chain: dict = {}
    for si, st in enumerate(model.statements):
        if si in model.computed:
            continue      # its own nest's buffers (`_ProducerModel`)
        for ai, a in enumerate(st.accesses):
            skip = st.in_place and (a.internal or a.kind != "read") or a.tensor in held
            if skip and tile_bytes is None:
                continue  # reuses the buffer of the internal tile it reads
            fp = shared.get((a.region_key, a.chain))
            if fp is None:
                fp = shared[a.region_key, a.chain] = np.zeros((n, L))
                if a.chain:   # every holding level at once (the same arithmetic per level)
                    tiles = at_chain.get(a.chain)
                    if tiles is None:
                        tiles = at_chain[a.chain] = T[:, :, list(a.chain)]
                    fp[:, list(a.chain)] = _footprint(a, tiles)
            if tile_bytes is not None:
                tile_bytes[si, ai] = fp
            if skip:
                continue
            if isinstance(st.domain, RowTiles) and si != model.kernel.anchor and a.chain:
                # an in-place row update beside the anchor (folded into its reader:
                # rules/in_place.py) holds its one row, not its tiles (domain.py)
                row = T[:, :, list(a.chain)].copy()
                row[:, st.domain.loops[0], :] = 1
                fp = np.zeros((n, L))
                fp[:, list(a.chain)] = _footprint(a, row)
            prev = per_tensor.get(a.tensor)
            per_tensor[a.tensor] = fp if prev is None else np.maximum(prev, fp)
    total = sum(per_tensor.values()) if per_tensor else np.zeros((n, L))
    if model.held:
        total = total + _held_peak(model.held, T, orders, model.extents)
    return total


@dataclass(frozen=True)
class _HeldRegion:
    """A computed-at tensor's region, held on chip at its compute point's level `level` from
    the statement that writes it (`start`) to its last reader (`end`, statement indices).
    `dims`: per dimension, (anchor loop indices, their scales, fixed length) — its length in
    a tile is sum(scale * tile) + fixed, clipped to [1, extent]. `buffer` names the tensor
    whose buffer it overwrites (an elementwise step over a same-shaped region read last
    there: exp(S - M) in place of S), or None."""

    tensor: str
    level: int
    loop: int               # the compute loop (an anchor loop index)
    start: int
    end: int
    dims: tuple[tuple[tuple[int, ...], tuple[int, ...], int, int], ...]
    elem_bytes: int
    buffer: str | None


def _held_regions(kernel: Kernel, target: Target, index: Mapping[str, int], elem_bytes) -> list[_HeldRegion]:
    """The computed-at tensors of `kernel` as regions held on chip (see `_HeldRegion`): where
    a consumer reads a whole row of scores, that row stays on chip at the compute point, and
    a tile too large for the level spills (the model's spill, the search's capacity bound)."""
    levels = target.tiling_levels
    computed = kernel.computed_at()
    reach = regions(kernel)
    statements = kernel.statements
    last_read = {}
    for c, st in enumerate(statements):
        for a in st.reads():
            last_read[a.tensor] = c
    out: list[_HeldRegion] = []
    owner: dict[str, str] = {}       # tensor -> the buffer it lives in
    for si in sorted(computed):         # one writer each (`regions` refuses more)
        st = statements[si]
        loop, level = computed[si]
        h = levels.index(level) if level in levels else len(levels) - 1
        dims = []
        for idx in st.target_indices:
            r = reach[si][idx.single_loop]
            ext = st.extents[idx.single_loop]
            if not r.terms:
                dims.append(((), (), max(1, min(ext, r.hi) - max(0, r.lo)), ext))
            else:
                dims.append((tuple(index[a] for a, _ in r.terms), tuple(k for _, k in r.terms), r.hi - r.lo, ext))
        buffer = None
        if st.reduce is None:
            for a in st.reads():
                if a.tensor in owner and a.indices == st.target_indices and last_read.get(a.tensor) == si \
                        and kernel.tensor(a.tensor).shape == kernel.tensor(st.target).shape:
                    buffer = owner[a.tensor]
                    break
        owner[st.target] = buffer or st.target
        out.append(_HeldRegion(st.target, h, index[loop], si, last_read.get(st.target, si), tuple(dims),
                               elem_bytes(kernel.tensor(st.target).dtype), buffer))
    return out


def _held_peak(held: list[_HeldRegion], T: np.ndarray, orders, extents) -> np.ndarray:
    """[n, L] the most bytes the held regions take at once at each level, statement by
    statement (a region from its writer to its last reader; one written in place of another
    takes no new bytes). A region's loop that comes after the compute point in the order at
    its level spans the tile one level out (the producers run over all of it there)."""
    n, D, L = T.shape
    sizes: dict[str, np.ndarray] = {}
    at_point: dict[tuple[int, int], np.ndarray] = {}     # (level, compute loop) -> [n, D] tiles there
    for r in held:
        if (r.level, r.loop) not in at_point:
            at_point[r.level, r.loop] = (T[:, :, r.level] if orders is None
                                         else _tiles_at_point(T, _inside_point(orders, r.level, r.loop), r.level,
                                                              extents))
        point = at_point[r.level, r.loop]
        length = np.ones(n)
        for loops, scales, fixed, ext in r.dims:
            span = float(fixed)     # (a scalar: the same sums as an [n] array of it)
            for a, k in zip(loops, scales):
                span = span + k * point[:, a]
            length = length * np.clip(span, 1.0, ext)
        sizes[r.tensor] = length * r.elem_bytes
    out = np.zeros((n, L))
    steps = sorted({r.start for r in held})
    for s in steps:
        live = [r for r in held if r.start <= s <= r.end]
        buffers: dict[tuple[str, int], np.ndarray] = {}
        for r in live:
            key = (r.buffer or r.tensor, r.level)
            buffers[key] = np.maximum(buffers.get(key, 0.0), sizes[r.tensor])
        now = np.zeros((n, L))
        for (_, level), b in buffers.items():
            now[:, level] += b
        out = np.maximum(out, now)
    return out


def _inside_point(orders: np.ndarray, at: int, loop: int) -> np.ndarray:
    """[n, D] each anchor loop comes at or before the compute loop `loop` in the order at level `at`."""
    position = np.argsort(orders[:, at, :], axis=1)
    return position <= position[:, [loop]]


def _tiles_at_point(tiles: np.ndarray, inside: np.ndarray, at: int, extents) -> np.ndarray:
    """[n, D] each anchor loop's tile at a compute point at level `at`: its tile at that level
    where it comes at or before the compute loop in the order there (`inside`, from
    `_inside_point`), else one level out (its whole extent above the outermost level)."""
    outer = tiles[:, :, at - 1] if at else np.asarray(extents, dtype=float)[None, :]
    return np.where(inside, tiles[:, :, at], outer)


# --------------------------------------------------------------------------- registers and unroll


@dataclass
class UnrollPressure:
    """One statement's unrolled body against the register level, for a batch ([n] arrays):
    the unrolled loop (an anchor loop index) and its effective factor (the unroll, capped at
    the loop's steps in an innermost tile), the tile bytes the register level holds (`held`),
    the operand bytes the body keeps live unrolled (`live`) and not unrolled (`live_one`),
    the level's capacity, the bytes unrolling pushes past it per body (`excess`), the bodies
    over the run, and the spill traffic to the next level out (stored and loaded back)."""

    statement: int
    loop: np.ndarray
    factor: np.ndarray
    held: np.ndarray
    live: np.ndarray
    live_one: np.ndarray
    capacity: float
    excess: np.ndarray
    bodies: np.ndarray

    @property
    def traffic(self) -> np.ndarray:
        """[n] bytes the spill moves over the run: each spilled byte stored once and loaded once per body."""
        return 2.0 * self.excess * self.bodies

    @property
    def ratio(self) -> np.ndarray:
        """[n] how far the register level overflows with the unrolled body (0: it fits)."""
        return np.where(self.excess > 0, (self.held + self.live) / self.capacity - 1.0, 0.0)


def unroll_pressure(model, grid: TileGrid, cap: Capacity, si: int, st: _StatementModel, tile: DatapathTile,
                    unroll: np.ndarray) -> UnrollPressure | None:
    """Statement `si`'s UnrollPressure under `unroll` [n] (factors; <= 1: not unrolled), or
    None where unrolling cannot spill its registers (see the module doc)."""
    L = model.n_levels
    reg = L - 1
    if tile.dp.on_array or not np.any(unroll > 1):
        return None
    operands = [a for a in st.accesses
                if reg not in a.chain and not (st.in_place and a.internal)]   # not held in the registers
    if not operands:
        return None
    n, D = tile.unit.shape
    rows = np.arange(n)
    inner_order = grid.inner_order
    last = D - 1 - np.argmax(st.present[inner_order][:, ::-1], axis=1)
    loop = inner_order[rows, last]                       # the statement's innermost point loop
    step = tile.unit[rows, loop].astype(float)           # points one datapath step covers along it
    span = grid.T[rows, loop, reg]
    trips = np.ceil(span / step - 1e-9)
    factor = np.clip(np.minimum(unroll, trips), 1.0, None)
    # one datapath step, within the innermost tile (a vector over a 2-wide tile holds 2 points)
    body_one = np.where(st.present[None, :], np.minimum(tile.unit, grid.T[:, :, reg]), 1.0)
    body = body_one.copy()
    body[rows, loop] = np.minimum(factor * step, span)
    live = _operand_bytes(operands, body)
    live_one = _operand_bytes(operands, body_one)
    held = cap.footprint[:, reg]
    capacity = float(model.capacity[reg])
    excess = np.clip(held + live - capacity, 0.0, None) - np.clip(held + live_one - capacity, 0.0, None)
    excess = np.where(factor > 1, np.clip(excess, 0.0, None), 0.0)
    bodies = tile.passes / factor
    return UnrollPressure(si, loop, factor, held, live, live_one, capacity, excess, bodies)


def _operand_bytes(accesses, body: np.ndarray) -> np.ndarray:
    """[n] bytes of the accesses' values over a body ([n, D] points): a tensor read twice is held once."""
    per_tensor: dict[str, np.ndarray] = {}
    for a in accesses:
        fp = _footprint(a, body)
        prev = per_tensor.get(a.tensor)
        per_tensor[a.tensor] = fp if prev is None else np.maximum(prev, fp)
    return sum(per_tensor.values())
