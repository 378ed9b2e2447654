"""Which statement of a kernel the host runs as a packed GEMM (`packed_contraction`: read from
the accesses, never from op names) and in which orientation (`transposed`: m and n exchanged
where the output is a few positions wide and many channels tall).
"""
from __future__ import annotations

import dataclasses
import math

from ..ir.program import Access, BinOp
from ..ir.schedule import Kernel, Schedule
from .access import flat_offsets, keeps_point_order, one_to_one, reads_loop_values
from .epilogue import fused_epilogue
from .gemm import GEMM_MR, GEMM_NR, GEMM_PACK_MIN, Packed, padded_points
from .operands import HOST_COPY_RUN, host_copy_costs, prepacked
from .rows import DIRECT_MIN_POINTS, direct_rows


# The microkernel runs transposed (`transposed`) when that pads the output's tiles to at most
# SWAP_PADDING of the points the plain orientation pads them to, and the plain B is gathered
# anyway (im2col through offset tables: a 3x3 conv): transposed, the store writes columns (a
# 16-wide vector across 16 output rows) and the weights are gathered 16 rows at a time. Where
# the plain B copies in straight runs (a 1x1 conv's input) that gather loses: MobileNetV2's
# 1x1 160 -> 960 at 7x7 ran 0.22 ms transposed against 0.19 with its data in cache, 0.45
# against 0.30 without (as in the network). 3x3 convs gain either way: 256 channels at 14x14
# 2.84 -> 2.54 ms from a cold cache, 512 at 7x7 3.38 -> 3.05.
SWAP_PADDING = 0.95
# The same bound for a 1x1 conv with prepacked weights (its plain B copied in straight runs):
# at 14x14 (94%) the plain orientation wins, measured alone on one thread, plain against
# transposed: MobileNetV2's 96 -> 576 0.209 against 0.229 ms, 64 -> 384 0.097 / 0.112, 384 -> 64
# 0.098 / 0.108 (ResNet-50's 1024 -> 256 0.976 / 0.970, 256 -> 1024 0.954 / 0.974); at 7x7
# (77%) the transposed one (160 -> 960 0.150 against 0.174, 960 -> 160 0.147 / 0.178).
SWAP_PADDING_RUNS = 0.9


def transposed(kernel: Kernel, pk: "Packed") -> "Packed":
    """`pk` with its microkernel's orientation chosen: m and n (and A and B) exchanged when
    the output is a few positions wide (N of a 7x7 map: 49, 4 panels of 16 for 49 columns,
    77% useful) and tall in whole vectors (M channels: 512), so that N pads less as rows than
    M does as columns (`SWAP_PADDING`), where B is gathered anyway. One-row GEMMs (direct
    rows), small M, B copied in straight runs and A's rows a multiple of 4 KiB apart stay."""
    M, N = pk.size("m"), pk.size("n")
    if M < GEMM_NR or N < GEMM_MR:
        return pk
    if padded_points(N, M) > SWAP_PADDING * padded_points(M, N):
        return pk
    # A prepacked A (a conv's weights) becomes a prepacked B: its gather is done once, ahead,
    # so the transposed form costs no extra copy whatever the plain B is; but where the plain
    # B copies in straight runs (a 1x1 conv's input) the transposed store's scatter must save
    # more padding than a 14x14 map's (196 positions in 13 panels of 16: 94%)
    if prepacked(kernel, pk, "a"):
        if host_copy_costs(kernel, pk)[1] <= HOST_COPY_RUN \
                and padded_points(N, M) > SWAP_PADDING_RUNS * padded_points(M, N):
            return pk
    else:
        _, b_cost = host_copy_costs(kernel, pk)
        if b_cost <= HOST_COPY_RUN:
            return pk
        # Transposed, A's rows become B's 16 columns, gathered for each k: rows a multiple of
        # 4 KiB apart fall into one L1 set and evict each other (1x1 convs with K = 1024 or
        # 2048 at 7x7: 1.65 ms transposed against 1.31)
        a_coeff, _ = flat_offsets(kernel, pk.a)
        if pk.m and (a_coeff.get(pk.m[-1], 0) * 4) % 4096 == 0:
            return pk
    return dataclasses.replace(pk, a=pk.b, b=pk.a, m=pk.n, n=pk.m, n_contiguous=False, swapped=True)


def packed_contraction(kernel: Kernel, schedule: Schedule | None = None) -> Packed | None:
    """The kernel's statement the host runs as a packed GEMM, or None. Eligibility is read
    from the accesses, never from op names: a `+=` of a product of two tensor reads whose
    every loop indexes the output and both operands (batch), the output and one operand (m
    or n), or both operands and not the output (k: the reduction), with an output offset
    that is one-to-one over the loops (no two points write one element), at least
    `GEMM_PACK_MIN` multiply-adds, and (given a schedule) at least one of its loops tiled:
    an untiled (naive) schedule keeps the plain nest. Operands may be any affine access,
    out-of-range reads included (padding: checked while packing, never in the microkernel).
    GEMM, batched GEMM, convolutions (stride, dilation, padding, groups, depthwise) and
    transposed operands all match."""
    if keeps_point_order(schedule) or reads_loop_values(kernel):
        return None
    for index, stmt in enumerate(kernel.statements):
        e = stmt.expr
        if stmt.reduce != "+" or not (isinstance(e, BinOp) and e.op == "*" and isinstance(e.lhs, Access)
                                      and isinstance(e.rhs, Access)):
            continue
        if stmt.target in (e.lhs.tensor, e.rhs.tensor):
            continue
        ext = stmt.extents
        if math.prod(ext.values()) < DIRECT_MIN_POINTS:
            continue
        out_loops = {l for idx in stmt.target_indices for l in idx.loops}
        found = None
        for a, b in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
            in_a = {l for idx in a.indices for l in idx.loops}
            in_b = {l for idx in b.indices for l in idx.loops}
            groups: dict[str, list[str]] = {"batch": [], "m": [], "n": [], "k": []}
            ok = True
            for l in stmt.loop_names:
                key = {(True, True, True): "batch", (True, True, False): "m", (True, False, True): "n",
                       (False, True, True): "k"}.get((l in out_loops, l in in_a, l in in_b))
                if key is None:
                    ok = ext[l] == 1    # a loop of one iteration takes no part
                    if not ok:
                        break
                    key = "batch"
                groups[key].append(l)
            if not ok or not groups["k"] or not groups["n"]:
                continue
            last = stmt.target_indices[-1].loops
            score = (bool(set(last) & set(groups["n"])), math.prod(ext[l] for l in groups["n"]))
            if found is None or score > found[0]:
                found = (score, a, b, groups)
        if found is None:
            continue
        _, a, b, groups = found
        target = Access(stmt.target, stmt.target_indices)
        o_coeff, _ = flat_offsets(kernel, target)
        if not one_to_one(o_coeff, [l for l in stmt.loop_names if l in out_loops], ext):
            continue
        by_offset = lambda coeff: (lambda l: -abs(coeff.get(l, 0)))      # noqa: E731 - outer → inner
        a_coeff, _ = flat_offsets(kernel, a)
        m = sorted(groups["m"], key=by_offset(o_coeff))
        n = sorted(groups["n"], key=by_offset(o_coeff))
        k = sorted(groups["k"], key=by_offset(a_coeff))
        # n's inner loops whose output offset is `col` (stride 1, dense) stay in n; the outer
        # rest run as batch loops, so the microkernel stores contiguous rows.
        inner, stride = [], 1
        for l in reversed(n):
            if o_coeff.get(l, 0) != stride:
                break
            inner.insert(0, l)
            stride *= ext[l]
        contiguous = bool(inner)
        if contiguous:
            batch = sorted(groups["batch"] + n[:len(n) - len(inner)], key=by_offset(o_coeff))
            n = inner
        else:
            batch = sorted(groups["batch"], key=by_offset(o_coeff))
        if schedule is not None:
            sizes = schedule.tile_sizes()
            anchors = kernel.loop_map(index)
            if all(all(t >= kernel.extents[anchors[l]] for t in sizes.get(anchors.get(l), ()))
                   for l in stmt.loop_names if l in anchors):
                continue    # an untiled (naive) schedule: the plain nest
        epilogue = fused_epilogue(kernel, index, batch + m + n)
        pk = Packed(index, a, b, tuple(batch), tuple(m), tuple(n), tuple(k),
                    tuple(sorted(ext.items())), epilogue, contiguous)
        if math.prod(ext.values()) < GEMM_PACK_MIN and direct_rows(kernel, pk) is None:
            continue    # too small to pack; direct rows (no packing) pay from DIRECT_MIN_POINTS
        return transposed(kernel, pk) if direct_rows(kernel, pk) is None else pk
    return None
