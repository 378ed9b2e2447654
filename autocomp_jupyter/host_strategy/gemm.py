"""The packed GEMM's shape: the contraction it runs (`Packed`: its batch, m, n and k loop groups),
its microkernel (`micro_shape`: MR x NR outputs in registers), its cache blocks
(`packed_blocks`; `swapped_blocks` when transposed), how its last column panel runs
(`last_panel`) and the order of its micro-tile loops (`rows_outer`). Each constant says
which measurement set it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.program import Access


# Packed GEMM microkernel: MR x NR outputs in a local array (8 x 16 f32: 8 AVX-512 registers,
# each k step 8 broadcast FMAs against one 16-wide row of B). Measured on Zen 4 against 6 x 16:
# GEMM 1024^3 20.8 -> 20.2 ms, a 3x3 conv 256 ch 14x14 2.69 -> 2.47, 512 ch 7x7 3.43 -> 3.04
# (10 x 16 and 12 x 16 were slower than both). With AVX2 only (16 registers) its 16
# accumulators spill: the code stays correct, not fast.
GEMM_MR, GEMM_NR = 8, 16
# Row counts the microkernel may take instead of GEMM_MR, where one divides M with less padding
# (a 7x7 feature map's 49 positions as rows: 7 panels of 7, none padded).
GEMM_MR_CHOICES = (8, 7, 6)
# At most this many rows (a 1x1 conv with 16 output channels) run as one panel of all of them
# (16 x 16: 16 of AVX-512's 32 registers) rather than two of 8 that each read every B panel:
# MobileNetV2's 32 -> 16 at 112x112, B read in place, 0.158 -> 0.119 ms alone on one thread.
GEMM_MR_ONE_PANEL = 16
# Largest padded copy of an operand (times the tensor) made to take bounds checks out of packing.
PAD_COPY_MAX = 4
# Smallest M*N*K a contraction needs for the packed GEMM path (packing costs O(MK + KN) copies).
GEMM_PACK_MIN = 64 * 64 * 64
# Smallest cache blocks (mc, nc, kc) the packed path uses: smaller schedule tiles are raised
# to these (below them packing A again per nc block, and updating C per kc block, cost more
# than the blocks save; kc = 8 measured ~4x slower than kc = 64 here).
GEMM_MIN_BLOCK = (4 * GEMM_MR, 4 * GEMM_NR, 64)
# A reduction of at most this many steps is one kc block whatever the schedule's tile (a 7x7
# stem's K = 147 in blocks of 64 read and wrote its 3.2 MB output three times).
GEMM_WHOLE_K = 256


@dataclass(frozen=True)
class Packed:
    """A contraction `O[..] += A[..] * B[..]` the host runs as a packed GEMM (see
    `packed_contraction`). Loops are the statement's own names, each group outer → inner:
    `batch` (run outside the GEMM, one GEMM per value), `m` (index O and A), `n` (index O
    and B, flattened so that O's offset is `col` when `n_contiguous`), `k` (index A and B:
    the reduction). `epilogue`: the statements fused into the microkernel's store."""

    index: int
    a: Access
    b: Access
    batch: tuple[str, ...]
    m: tuple[str, ...]
    n: tuple[str, ...]
    k: tuple[str, ...]
    extents: tuple[tuple[str, int], ...]
    epilogue: tuple[int, ...]
    n_contiguous: bool
    # m and n exchanged (`transposed`): the microkernel's rows run along the output's
    # contiguous loops and its 16-wide vectors across the output's rows
    swapped: bool = False

    def size(self, group: str) -> int:
        ext = dict(self.extents)
        return math.prod(ext[l] for l in getattr(self, group))

    @property
    def micro(self) -> tuple[int, int]:
        return micro_shape(self.size("m"))


def micro_shape(m: int) -> tuple[int, int]:
    """The microkernel (MR rows x NR columns) for a GEMM with `m` rows: GEMM_MR x 16, or
    the row count of GEMM_MR_CHOICES that pads m least; fewer rows and more columns when m
    is small; one row (a depthwise convolution) keeps 16 columns: its few reduction steps
    make packing, not the FMA chain, the cost, and 16-column panels copy as straight runs of
    an input row (measured 3x faster than 1 x 64 on a 3x3 depthwise 56x56). Up to
    GEMM_MR_ONE_PANEL rows are one panel of all of them, so each B panel is read once."""
    if GEMM_MR < m <= GEMM_MR_ONE_PANEL:
        return m, GEMM_NR
    if m >= GEMM_MR:
        return min(GEMM_MR_CHOICES, key=lambda r: (-(-m // r) * r, -r)), GEMM_NR
    mr = max(1, m)
    return mr, GEMM_NR * (1 if mr == 1 else max(1, min(4, GEMM_MR // mr)))


# A transposed GEMM's B block (kc x all of N) at most this many bytes: it stays in L2 while
# every row panel of A passes over it.
SWAP_B_BLOCK = 512 * 1024
# Its kc (all of K up to twice this): each kc block reads and writes every partial-sum tile once
# (ResNet-50's 1x1 2048-channel conv at kc = 64: 3.66 ms against 3.28 untransposed).
SWAP_KC = 256


def swapped_blocks(pk: "Packed") -> tuple[int, int, int]:
    """(mc, nc, kc) of a transposed packed GEMM (`transposed`), whatever the schedule's
    tiles (they were chosen for the other orientation): its M (a feature map's few
    positions) whole, kc = SWAP_KC (all of K when that is at most twice it), N in blocks of
    SWAP_B_BLOCK bytes of B (all of it where it fits: A is packed once per block)."""
    mr, nr = pk.micro
    M, N, K = pk.size("m"), pk.size("n"), pk.size("k")
    ncp = -(-N // nr) * nr
    kc = K if K <= 2 * SWAP_KC else SWAP_KC
    nc = min(ncp, max(nr, SWAP_B_BLOCK // (4 * kc) // nr * nr))
    return M, nc, kc


def padded_points(m: int, n: int) -> int:
    """Output points the microkernel computes for an m x n GEMM, its edge tiles padded."""
    mr, nr = micro_shape(m)
    return -(-m // mr) * mr * (-(-n // nr) * nr)


def packed_blocks(pk: Packed, block_of) -> tuple[int, int, int]:
    """Cache blocks (mc, nc, kc) of a packed GEMM: per group, the product of its loops'
    blocks (`block_of(loop)`: the schedule's outermost tile of it), raised to
    GEMM_MIN_BLOCK and capped at the group's size; mc in whole micro-panels; kc all of K up
    to GEMM_WHOLE_K."""
    mr, _ = pk.micro
    sizes = []
    for group, floor in zip(("m", "n", "k"), GEMM_MIN_BLOCK):
        size = pk.size(group)
        sizes.append(min(max(math.prod(block_of(l) for l in getattr(pk, group)), floor), size))
    mc, nc, kc = sizes
    nr = pk.micro[1]
    if pk.swapped:
        return swapped_blocks(pk)
    if pk.size("k") <= GEMM_WHOLE_K:    # one kc block: the output is written once, never re-read
        kc = pk.size("k")
    return (min(-(-mc // mr) * mr, pk.size("m")) if mc >= mr else mc), -(-nc // nr) * nr, kc


def last_panel(pk: Packed) -> float:
    """The time of a plain packed GEMM's last N panel, in full panels (codegen/c/packed.py's
    microkernel): 1/4 when it holds at most a quarter of NR columns (the rows as the vector,
    even and odd k steps apart), 1/2 at most half (half-wide vectors), else 1 (a 14x14 map:
    196 = 12 x 16 + 4 columns, 12.25 panels' time instead of 13)."""
    nr, tail = pk.micro[1], pk.size("n") % pk.micro[1]
    if pk.swapped or nr != GEMM_NR or not tail or tail > nr // 2:
        return 1.0
    return 0.25 if tail <= nr // 4 else 0.5


# A packed GEMM with at most this many reduction steps whose B block fits ROWS_OUTER_B_BLOCK bytes
# runs its micro-tiles row panel by row panel (`rows_outer`): half of L2, where the B block is
# read again for each row panel (MobileNetV2's stem, K = 27, its 331 KiB B block: column panels
# outside 0.375 ms alone, row panels outside 0.323; 128 KiB kept it column panels outside).
ROWS_OUTER_K = 64
ROWS_OUTER_B_BLOCK = 512 * 1024


def rows_outer(pk: Packed, kc: int, ncp: int) -> bool:
    """Whether the microkernel loops run A's row panels outside B's column panels. With few
    reduction steps (a 1x1 expand conv, K = 16) the store is the cost: column panels outside
    (the usual order, B's panel in L1) store each micro-tile into MC rows a whole output row
    apart, ~100 lines at once in few cache sets; row panels outside store along MR rows, and
    the small B block (kc x nc) is read again from L1/L2 for each."""
    return pk.size("k") <= ROWS_OUTER_K and kc * ncp * 4 <= ROWS_OUTER_B_BLOCK and not pk.swapped
