"""Direct rows: a one-row contraction (M = 1: a depthwise convolution, a GEMV: `direct_rows`)
or a window reduction (pooling: `window_rows`) run as rows of outputs accumulated in a local
array, no packing: packing a one-row GEMM reuses nothing. A long GEMV row is shared by the
threads (`gemv_split`); a batch item that reads one slab of its input pads that slab alone
(`direct_slab`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.program import Access
from ..ir.schedule import Kernel, Schedule
from .access import flat_offsets, in_range, keeps_point_order, padding, reads_loop_values
from .gemm import PAD_COPY_MAX, Packed


# A one-row contraction (M = 1: depthwise convolutions) with at most this many reduction steps
# runs as direct rows (`direct_rows`) instead of packing: packing its 16-wide panels costs more
# than its few multiply-adds (measured, MobileNetV2's stride-2 3x3 depthwise on 96 channels
# 112x112: 1.78 ms packed, 3.6 GFLOP/s).
DIRECT_K_MAX = 64
# Smallest contraction that runs as direct rows (smaller ones keep the plain nest).
DIRECT_MIN_POINTS = 16 * 1024
# Largest step along the output row a direct row may read its input at (stride 2: the compiler
# loads two vectors and permutes them).
DIRECT_STEP_MAX = 2
# Rows narrower than this (read at step 1) run as planes (`DirectRows.plane`).
DIRECT_PLANE_WIDTH = 32
# Longest row a one-row GEMM with many reduction steps accumulates locally (16 KiB: in L1).
DIRECT_ROW_MAX = 4096


@dataclass(frozen=True)
class DirectRows:
    """How the host runs a one-row packed contraction directly: for each batch item and each
    value of the outer n loops, a row of `width` outputs (the innermost n loop `w`, contiguous
    in the output) accumulated in a local array, each reduction step adding a[k] times a row
    of B read at `step` apart (from B's padded copy when B's reads leave it: `pads`)."""

    w: str
    width: int
    step: int
    pads: tuple[tuple[int, int], ...]
    dots: bool = False      # each output one dot product along the innermost k loop `w`
    plane: int = 0          # > 0: the two innermost n loops as one row, output rows this far apart


def direct_rows(kernel: Kernel, pk: "Packed") -> DirectRows | None:
    """The direct form of packed contraction `pk` (`DirectRows`), or None. M = 1 and f32
    tensors, A in range, and either
    - rows: K <= DIRECT_K_MAX (a depthwise conv), or B in range and read at step 1 along the
      row with rows of at most DIRECT_ROW_MAX (a GEMV against B[k, n]); B's reads in range
      or in a padded copy of at most PAD_COPY_MAX times B, the innermost n loop contiguous
      in the output and read by B at a step of at most DIRECT_STEP_MAX;
    - dots (`dots`): K > DIRECT_K_MAX, A and B in range and both contiguous along the
      innermost k loop (a GEMV against B[n, k], a classifier's Gemm with transB): each
      output one dot product, vectorised along k.
    Packing a one-row GEMM reuses nothing: every B element is used once."""
    if pk.size("m") != 1 or not pk.n:
        return None
    stmt = kernel.statements[pk.index]
    names = {stmt.target, pk.a.tensor, pk.b.tensor} | {a.tensor for s in pk.epilogue
                                                       for a in kernel.statements[s].reads()} \
        | {kernel.statements[s].target for s in pk.epilogue}
    if any(kernel.tensor(t).dtype != "f32" for t in names):
        return None
    ext = dict(pk.extents)
    if not all(in_range(kernel, pk.a, ext)):
        return None
    t = kernel.tensor(pk.b.tensor)
    pads = padding(kernel, pk.b, ext)
    small = pk.size("k") <= DIRECT_K_MAX
    if not small:
        kk = pk.k[-1]
        a_coeff, _ = flat_offsets(kernel, pk.a)
        b_coeff, _ = flat_offsets(kernel, pk.b)
        if not any(lo or hi for lo, hi in pads) and a_coeff.get(kk) == 1 and b_coeff.get(kk) == 1:
            return DirectRows(kk, ext[kk], 1, tuple(pads), dots=True)
    if not pk.n_contiguous:
        return None
    pshape = tuple(n + lo + hi for n, (lo, hi) in zip(t.shape, pads))
    if math.prod(pshape) > PAD_COPY_MAX * t.size or (not small and any(lo or hi for lo, hi in pads)):
        return None
    w = pk.n[-1]
    coeff, _ = flat_offsets(kernel, pk.b, pshape, [lo for lo, _ in pads])
    o_coeff, _ = flat_offsets(kernel, Access(stmt.target, stmt.target_indices))
    step = coeff.get(w, 0)
    if o_coeff.get(w, 0) != 1 or not 0 <= step <= (DIRECT_STEP_MAX if small else 1) \
            or (not small and ext[w] > DIRECT_ROW_MAX):
        return None
    # Narrow rows (a 14x14 depthwise) read at step 1: the innermost two n loops as one row of
    # the plane, B's row pitch apart (one vectorised pass of ~200 elements per reduction step
    # instead of 14 of 14).
    if step == 1 and len(pk.n) >= 2 and ext[w] < DIRECT_PLANE_WIDTH:
        h = pk.n[-2]
        pitch = coeff.get(h, 0)
        if pitch >= ext[w] and (ext[h] - 1) * pitch + ext[w] <= DIRECT_ROW_MAX:
            return DirectRows(w, ext[w], step, tuple(pads), plane=pitch)
    return DirectRows(w, ext[w], step, tuple(pads))


# A GEMV row at least this long is shared by the threads (`gemv_split`).
GEMV_SPLIT_MIN = 256


def gemv_split(pk: "Packed", dr: DirectRows, parallel: bool) -> bool:
    """Whether the direct rows `dr` of `pk` are one long GEMV row the threads share, each its
    own run of outputs over all K (codegen/c/direct.py `split_row`): parallel, one batch item, one
    n loop of at least GEMV_SPLIT_MIN outputs read at step 1, many reduction steps (K >
    DIRECT_K_MAX: each streams a weight row). A classifier's 8 MB of weights then stream on
    every core instead of one."""
    return (parallel and pk.size("batch") == 1 and len(pk.n) == 1 and not dr.plane and not dr.dots
            and dr.step == 1 and pk.size("k") > DIRECT_K_MAX and dr.width >= GEMV_SPLIT_MIN)


def direct_slab(kernel: Kernel, pk: "Packed", dr: DirectRows) -> dict[int, str]:
    """{dimension: batch loop} when each batch item of direct rows `dr` reads only one slab of
    B — B's leading dimensions indexed by batch loops alone, unpadded, its others by none
    (a depthwise conv's X[n, c, :, :]) — so that a padded copy may be made per item, of that
    slab only; else {}."""
    if not any(lo or hi for lo, hi in dr.pads):
        return {}
    out: dict[int, str] = {}
    batch = set(pk.batch)
    for d, idx in enumerate(pk.b.indices):
        loops = set(idx.loops)
        if loops & batch:
            if len(out) != d or idx.single_loop is None or any(dr.pads[d]):
                return {}
            out[d] = idx.single_loop
    return out if out and len(out) < len(pk.b.indices) - 1 else {}


# A window reduction's padded copy of at least this many elements is filled by all the threads
# when the window rows are parallel (codegen/c/direct.py `window`); smaller, a region costs more.
WINDOW_SHARED_COPY_MIN = 1 << 16


def window_rows(kernel: Kernel, schedule: Schedule | None = None) -> tuple[int, DirectRows] | None:
    """(statement index, its rows) of a window reduction the host runs as direct rows: a
    pooling `Y[.., w] max= X[..]` or `+=` of one f32 read, the target indexed by its own
    loops, at most DIRECT_K_MAX reduction points per output, at least DIRECT_MIN_POINTS
    points, X read along the target's last loop `w` at a step of at most DIRECT_STEP_MAX
    (out-of-range reads from a padded copy of at most PAD_COPY_MAX times X), and (given a
    schedule) a tiled one. Each output row of `w` accumulates in a local array (vectorised:
    a bounds-checked read per point measured 0.8 GFLOP/s on ResNet-50's 3x3 stride-2 max
    pool). None otherwise."""
    if reads_loop_values(kernel):
        return None
    if (schedule is not None and not schedule.tile_sizes()) or keeps_point_order(schedule):
        return None
    for index, stmt in enumerate(kernel.statements):
        e = stmt.expr
        if stmt.reduce not in ("max", "+") or not isinstance(e, Access) or e.tensor == stmt.target:
            continue
        loops = [idx.single_loop for idx in stmt.target_indices]
        if None in loops or len(set(loops)) != len(loops) or not loops:
            continue
        ext = stmt.extents
        red = [l for l in stmt.loop_names if l not in loops]
        if not red or math.prod(ext[l] for l in red) > DIRECT_K_MAX or math.prod(ext.values()) < DIRECT_MIN_POINTS:
            continue
        if kernel.tensor(stmt.target).dtype != "f32" or kernel.tensor(e.tensor).dtype != "f32":
            continue
        if any(kernel.statements[s].target == e.tensor for s in range(len(kernel.statements))):
            continue
        if schedule is not None:
            sizes, anchors = schedule.tile_sizes(), kernel.loop_map(index)
            if all(all(t >= kernel.extents[anchors[l]] for t in sizes.get(anchors.get(l), ()))
                   for l in stmt.loop_names if l in anchors):
                continue    # an untiled (naive) schedule: the plain nest
        t = kernel.tensor(e.tensor)
        pads = padding(kernel, e, ext)
        pshape = tuple(n + lo + hi for n, (lo, hi) in zip(t.shape, pads))
        if math.prod(pshape) > PAD_COPY_MAX * t.size:
            continue
        coeff, _ = flat_offsets(kernel, e, pshape, [lo for lo, _ in pads])
        step = coeff.get(loops[-1], 0)
        if 0 <= step <= DIRECT_STEP_MAX:
            return index, DirectRows(loops[-1], ext[loops[-1]], step, tuple(pads))
    return None
