"""What host C runs for each kernel, read from its accesses: the one analysis codegen/c.py
writes C from and accel/host_model.py costs (so the model times the code that runs).

- `packed_contraction`: a contraction `O += A * B` run as a packed GEMM (BLIS-style: cache
  blocks `packed_blocks`, an MR x NR microkernel `micro_shape`, fused elementwise epilogue
  `epilogue_point`), with the work units threads share (`packed_partition`) and the cycles
  packing an operand costs (`host_copy_costs`); its orientation (`transposed`: m and n
  exchanged for narrow outputs, with blocks of its own, `swapped_blocks`), the order of
  its micro-tile loops (`rows_outer`) and which operands are packed once, ahead (`prepacked`:
  a network's weights) and whether B is read in place, unpacked (`b_in_place`);
- `winograd`: a 3x3 stride-1 convolution run instead as Winograd F(2x2, 3x3);
- `direct_rows`: a one-row packed contraction (M = 1: a depthwise convolution) run instead
  as rows of outputs accumulated in a local array, no packing (padded per batch item where
  each reads one slab: `direct_slab`);
- `channel_blocks`: a depthwise convolution of direct rows run in blocks of 16 channels
  (a blocked plane per block, one vector of channels per output);
- `vector_rows`: a strided depthwise convolution of direct rows run per channel as rows of
  16-wide vectors read straight from its unpadded input (masked loads at the edges);
- `window_rows`: a window reduction (max / avg pooling) run the same way;
- offsets and bounds of affine accesses (`flat_offsets`, `padding`, `in_range`,
  `unit_stride_reads`).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..ir.program import Access, Affine, BinOp, Statement
from ..ir.schedule import Kernel, Schedule

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
        a_coeff, _ = _flat_offsets(kernel, pk.a)
        if pk.m and (a_coeff.get(pk.m[-1], 0) * 4) % 4096 == 0:
            return pk
    return dataclasses.replace(pk, a=pk.b, b=pk.a, m=pk.n, n=pk.m, n_contiguous=False, swapped=True)


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
    if not all(_in_range(kernel, pk.a, ext)):
        return None
    t = kernel.tensor(pk.b.tensor)
    pads = _padding(kernel, pk.b, ext)
    small = pk.size("k") <= DIRECT_K_MAX
    if not small:
        kk = pk.k[-1]
        a_coeff, _ = _flat_offsets(kernel, pk.a)
        b_coeff, _ = _flat_offsets(kernel, pk.b)
        if not any(lo or hi for lo, hi in pads) and a_coeff.get(kk) == 1 and b_coeff.get(kk) == 1:
            return DirectRows(kk, ext[kk], 1, tuple(pads), dots=True)
    if not pk.n_contiguous:
        return None
    pshape = tuple(n + lo + hi for n, (lo, hi) in zip(t.shape, pads))
    if math.prod(pshape) > PAD_COPY_MAX * t.size or (not small and any(lo or hi for lo, hi in pads)):
        return None
    w = pk.n[-1]
    coeff, _ = _flat_offsets(kernel, pk.b, pshape, [lo for lo, _ in pads])
    o_coeff, _ = _flat_offsets(kernel, Access(stmt.target, stmt.target_indices))
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
    own run of outputs over all K (codegen/c.py `split_row`): parallel, one batch item, one
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


# Channels per block of a channel-blocked depthwise convolution (`channel_blocks`): one
# AVX-512 vector of f32.
BLOCK_CHANNELS = 16
# Largest blocked output plane (floats, all the block's channels) of a channel block: 512 KiB,
# within L2 (1 MiB per core); and the largest ring of blocked, padded input rows (floats) it
# keeps: the rows one output row reads (a 3x3 window: 3), each transposed in once as the output
# rows reach it, so the taps read L1. MobileNetV2's 112x112 stride-2 layer (3 rows of 113 x 16:
# 21 KiB) 0.204 -> 0.179 ms alone and the network 7.73 -> 7.62 ms against the earlier bands of
# output rows (7 of 8 rows, 108 KiB in L2, the row between two bands transposed twice).
BLOCK_PLANE_MAX = 128 * 1024
BLOCK_RING_MAX = 32 * 1024
# Output rows this wide, read at stride 1, stay direct rows: their vectors along the row are
# full, and the blocked form's two transposes cost more than it saves (144 channels at 56x56:
# 0.165 ms as rows, 0.207 blocked; 192 at 28x28 0.070 either way; 384 at 14x14 0.045 -> 0.034).
BLOCK_ROW_MIN = 32


@dataclass(frozen=True)
class ChannelBlocks:
    """How the host runs a depthwise convolution of direct rows in blocks of
    BLOCK_CHANNELS channels (`channel_blocks`): per batch item and block, the channels'
    padded input planes transposed into one blocked plane `[hp][wp][16]` (16 channels of a
    position in one vector), each output a vector of 16 channels summed over the `taps`
    window points (no permutes at any stride), each output row transposed back to the
    output's per-channel rows, where the epilogue is applied. `c`: the channel loop (the
    last batch loop), `h`, `w`: the output row and column loops, `r`, `s`: the window
    loops; input row = stride_h * h + dil_h * r + off_h (off: the index's constant plus its
    padding), likewise columns. The blocked plane is never whole: a ring of its `ring` rows
    (the rows one output row reads), each transposed in once, as the output rows reach it."""

    c: str
    h: str
    w: str
    r: str
    s: str
    stride: tuple[int, int]
    dilation: tuple[int, int]
    offset: tuple[int, int]       # input row, column of output (0, 0) at tap (0, 0) in the padded plane
    plane: tuple[int, int]        # padded input plane (hp, wp)
    image: tuple[int, int]        # the input plane (H, W)
    pads: tuple[int, int]         # top, left padding inside the padded plane
    ring: int                     # padded input rows kept (those one output row reads: dil_h * (kh - 1) + 1)
    rows: int                     # padded input rows transposed in, each once
    slot: int                     # a ring row's width: the padded row and its last transpose's slack


def channel_blocks(kernel: Kernel, pk: "Packed", dr: DirectRows, any_size: bool = False) -> ChannelBlocks | None:
    """The channel-blocked form (`ChannelBlocks`) of direct rows `dr`, or None. A depthwise
    convolution `Y[n, c, h, w] += A[c.., r, s] * X[n, c, sh h + dh r - ph, sw w + dw s - pw]`:
    X of rank 4 whose first two dimensions are batch loops (image, channel: the channel loop
    the last batch loop, a multiple of BLOCK_CHANNELS) and whose last two each an n loop and
    a k loop (the output's row and column loops, each its own window loop), A read by the
    channel and window loops only, Y indexed (n, c, h, w) by single loops, the blocked
    padded plane at most BLOCK_PLANE_MAX floats. Blocked, every tap of a 16-channel output
    is one vector load and FMA (along rows, a stride-2 tap loaded two vectors and permuted;
    a 7x7 plane took 9 wide rows per pass for 7 outputs)."""
    ext = dict(pk.extents)
    # loops of one trip index nothing (a depthwise conv written as groups: its channel in the
    # group and its filter in the group)
    def live(loops):
        return tuple(l for l in loops if ext[l] > 1)

    def strip(idx: Affine) -> Affine:
        return Affine.of({l: v for l, v in idx.terms if ext[l] > 1}, idx.const)
    batch, n, k = live(pk.batch), live(pk.n), live(pk.k)
    if dr.dots or len(batch) < 1 or len(n) != 2 or len(k) != 2 or len(pk.n) != 2 or pk.n != n:
        return None
    stmt = kernel.statements[pk.index]
    b = dataclasses.replace(pk.b, indices=tuple(strip(i) for i in pk.b.indices))
    out = [strip(i) for i in stmt.target_indices]
    if len(b.indices) != 4 or len(out) != 4:
        return None
    c = batch[-1]
    if not any_size and ext[c] % BLOCK_CHANNELS or b.indices[1].single_loop != c or b.indices[1].const or \
            [i.single_loop for i in out[1:]] != [c, n[0], n[1]] or any(i.const for i in out):
        return None
    n0 = b.indices[0].single_loop if b.indices[0].terms else None
    if b.indices[0].terms and (n0 is None or n0 not in batch or out[0].single_loop != n0) or b.indices[0].const:
        return None
    if set(batch) - {c, n0}:
        return None
    geo = []
    for d, out in ((2, pk.n[0]), (3, pk.n[1])):
        terms = dict(b.indices[d].terms)
        win = [l for l in terms if l in k]
        if set(terms) != {out, *win} or len(win) != 1 or terms[out] <= 0 or terms[win[0]] <= 0:
            return None
        geo.append((terms[out], terms[win[0]], win[0], b.indices[d].const))
    if {geo[0][2], geo[1][2]} != set(k):
        return None
    a_loops = {l for idx in pk.a.indices for l in strip(idx).loops}
    if not a_loops <= {c, *k}:
        return None
    if kernel.tensor(stmt.target).shape[2:] != (ext[pk.n[0]], ext[pk.n[1]]):
        return None
    if not any_size and (ext[pk.n[1]] >= BLOCK_ROW_MIN and dict(b.indices[3].terms)[pk.n[1]] == 1
                         or vector_rows(kernel, pk, dr) is not None):
        return None
    # the output goes back to the channels' planes along flat positions (rows run on): each
    # access of the epilogue must move along a row as it does along the plane
    h, w = pk.n
    accesses = [Access(stmt.target, stmt.target_indices)]
    for s in pk.epilogue:
        st, at = kernel.statements[s], epilogue_point(kernel, pk.index, s)
        accesses += [_substitute(a, at) for a in st.reads() if a.tensor != stmt.target]
        accesses.append(_substitute(Access(st.target, st.target_indices), at))
    for a in accesses:
        coeff, _ = _flat_offsets(kernel, a)
        if coeff.get(h, 0) != ext[w] * coeff.get(w, 0):
            return None
    t = kernel.tensor(b.tensor)
    pads = dr.pads
    if pads[0] != (0, 0) or pads[1] != (0, 0):
        return None
    hp, wp = t.shape[2] + sum(pads[2]), t.shape[3] + sum(pads[3])
    Ho = ext[pk.n[0]]
    (sh, dh), kh = geo[0][:2], ext[geo[0][2]]

    ring = dh * (kh - 1) + 1
    pl, W = pads[3][0], t.shape[3]
    slot = max(wp, pl + -(-W // BLOCK_CHANNELS) * BLOCK_CHANNELS)     # a row and its last transpose's slack
    if not any_size and (ring * slot * BLOCK_CHANNELS > BLOCK_RING_MAX
                         or Ho * ext[pk.n[1]] * BLOCK_CHANNELS > BLOCK_PLANE_MAX):
        return None
    rows = Ho * ring if sh >= ring else sh * (Ho - 1) + ring        # each padded row read, once
    return ChannelBlocks(c, pk.n[0], pk.n[1], geo[0][2], geo[1][2], (geo[0][0], geo[1][0]), (geo[0][1], geo[1][1]),
                         (geo[0][3] + pads[2][0], geo[1][3] + pads[3][0]), (hp, wp), (t.shape[2], t.shape[3]),
                         (pads[2][0], pads[3][0]), ring, rows, slot)


# A depthwise convolution whose output rows are VECTOR_ROWS_MIN to VECTOR_ROWS_MAX wide and
# read their input at stride VECTOR_ROWS_STRIDE runs as vector rows (`vector_rows`): per
# channel, each output row's 16-wide vectors summed over the window straight from the
# unpadded input plane, a tap's stride-2 columns two loads and one permute, the padding
# masked-off lanes of those loads (no padded copy, no transposes). MobileNetV2's 96 channels
# at 112x112 stride 2, alone on one thread: 0.37 ms as channel blocks, 0.52 as direct rows
# (a padded slab per channel, the compiler's stride-2 loads), 0.25 as vector rows; in the
# network 0.28-0.32 -> 0.19-0.21. Narrower rows stay channel blocks: 144 channels at 56x56
# stride 2 (28-wide rows) were faster alone as vector rows (0.096 -> 0.076 ms) but slower in
# the network (0.080 -> 0.128, both orders interleaved).
VECTOR_ROWS_MIN = 32
VECTOR_ROWS_MAX = 256
VECTOR_ROWS_STRIDE = (1, 2)
# Accumulators (16-wide vectors) of a row summed in one pass over the window.
VECTOR_ROWS_PASS = 8


def vector_rows(kernel: Kernel, pk: "Packed", dr: DirectRows) -> ChannelBlocks | None:
    """The geometry (`ChannelBlocks`: loops, stride, offsets; its ring unused) of a depthwise
    convolution of direct rows `dr` the host runs as vector rows, or None: f32 (direct rows
    are), B's padding read as 0, unit dilation along the row, a row read at a stride of
    VECTOR_ROWS_STRIDE, VECTOR_ROWS_MIN to VECTOR_ROWS_MAX outputs wide; any number of channels
    (`channel_blocks`' geometry, without its block and size bounds: `any_size`)."""
    if dr.dots or dr.plane or pk.b.pad != 0.0:
        return None
    cb = channel_blocks(kernel, pk, dr, any_size=True)
    if cb is None or cb.dilation[1] != 1 or cb.stride[1] not in VECTOR_ROWS_STRIDE:
        return None
    return cb if VECTOR_ROWS_MIN <= dict(pk.extents)[cb.w] <= VECTOR_ROWS_MAX else None


# A window reduction's padded copy of at least this many elements is filled by all the threads
# when the window rows are parallel (codegen/c.py `window`); smaller, a region costs more.
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
    if _reads_loop_values(kernel):
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
        pads = _padding(kernel, e, ext)
        pshape = tuple(n + lo + hi for n, (lo, hi) in zip(t.shape, pads))
        if math.prod(pshape) > PAD_COPY_MAX * t.size:
            continue
        coeff, _ = _flat_offsets(kernel, e, pshape, [lo for lo, _ in pads])
        step = coeff.get(loops[-1], 0)
        if 0 <= step <= DIRECT_STEP_MAX:
            return index, DirectRows(loops[-1], ext[loops[-1]], step, tuple(pads))
    return None


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
    """The time of a plain packed GEMM's last N panel, in full panels (codegen/c.py's
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


# Threads share a packed contraction as work units: each thread runs its own contiguous
# share first, then takes what is left of the others' (codegen below), so that a thread whose
# core another process holds ends up with fewer units instead of holding the others at the
# region's end. (Static halves of a 2.4 ms conv ran 0.9x on 2 threads whenever another
# process was running: the woken worker thread preempted the master on its core and the
# halves ran one after the other.) The unit grid is chosen per thread count by
# `packed_partition` and emitted as a table (PARTITION_THREADS entries).
PARTITION_THREADS = 32
# Of a unit's work, what a thread may lose to another process (a time slice): the makespan
# penalty that favours more, smaller units (`packed_partition`), against the packing more
# units repeat. Measured, GEMM 1024^3 on 2 bound threads with another process on one core:
# 2 units (N halves) 27-29 ms, 4 units 18-20 ms (one thread: 20-21 ms); on 2 idle cores
# 10.4 against 11.0 ms.
PARTITION_SLACK = 0.25
# Cycles per element at least, to pack an operand again for another unit: a whole operand
# that outgrows L2 streams from L3 (measured, GEMM 1024^3: packing B took 0.6 ns an
# element, ~2 cycles, against 0.25 for a panel copied from cache).
PARTITION_REPACK_CYCLES = 1.6
# Cycles per element to read a prepacked operand (`prepacked`) again for another unit: no copy,
# but another pass over it from L3 (each thread streaming all of a BERT FFN's 9.4 MB of weights,
# cut along M, against half of them each, cut along N).
PARTITION_REREAD_CYCLES = 0.25
# Microkernel multiply-adds per cycle assumed when weighing packing copies against compute
# (a 6x16 f32 tile at ~70% of two 8- or 16-lane FMA pipes; the choice is insensitive to it).
PARTITION_MACS_PER_CYCLE = 16.0
# Cycles a unit costs beyond its share of the work (claiming it, setting up its panels and
# cache blocks): among near-equal makespans, fewer units win.
PARTITION_UNIT_CYCLES = 2000.0


@dataclass(frozen=True)
class Partition:
    """How threads share a packed contraction: `units` work units, each one batch item x
    (`mode` "batch": all of M and N; "n": `chunk` NR-wide column panels, all of M; "m":
    `chunk` MR-high row panels, all of N). `extra_cycles`: the packing the split adds over
    one thread (an "n" unit packs A again for its columns, an "m" unit packs all of B);
    `share`: the busiest thread's part of the (work + extra) on an idle machine."""

    mode: str
    chunk: int
    units: int
    extra_cycles: float
    share: float
    reread_cycles: float = 0.0      # the part of extra_cycles that re-reads a prepacked operand

    @property
    def code(self) -> int:
        return {"batch": 0, "n": 1, "m": 2}[self.mode]


# Cycles to copy one element into a packed panel, by how the copy reads it (calibrated on this
# class of core; the host model in accel/cost.py charges the same).
HOST_COPY_RUN = 0.25            # in a straight run (vectorised)
HOST_COPY_GATHER = 1.5          # through an offset table (scalar)
HOST_COPY_STRIDED = 1.0         # at a constant stride
# A's MR-high row panels where A's rows run along k (A[i, k], k contiguous: an activation times
# weights): the copy walks MR rows at their stride for each k, but the next k reads the same MR
# lines, so it streams MR rows side by side. Measured (one thread, this machine): the copy alone
# 0.23-0.28 cycles an element (128 x 3072 and 1024 x 1024 sources, mc x kc blocks 32 x 512 to
# 256 x 512); inside the BERT FFN's second GEMM (128 x 3072 x 768), 4 against 2 packings of A
# (nc = 224 against 384, kc = 512) 5.58 -> 5.49 ms: ~0.3 an element, not the 1.0 of a strided copy.
HOST_COPY_ROWS = 0.3


def prepacked(kernel: Kernel, pk, operand: str) -> bool:
    """Whether operand `operand` ("a" or "b") of packed contraction `pk` is packed once, ahead
    of the calls that read it, instead of per cache block: a param (a network's weights, the
    same values every call) read in range. codegen/c.py packs it on the first call into panels
    kept for the whole K (per batch item where it varies with one) and re-packs only when the
    buffer's address changes, as onnxruntime pre-packs weights when a session loads; the
    microkernel then streams them straight from that copy (no packing phase that waits for
    DRAM). The host model charges it no copy (`host_copy_costs`)."""
    access = pk.a if operand == "a" else pk.b
    if kernel.tensor(access.tensor).role != "param":
        return False
    return all(_in_range(kernel, access, dict(pk.extents)))


def prepacked_ahead(pk, pre_a: bool, pre_b: bool) -> str | None:
    """Which prepacked operand ("b", else "a") the microkernel fetches a panel ahead of
    (codegen/c.py): on a panel's first use — the other operand's first panel — the next
    panel's slice, one line per k step. Weights come from memory (a network's 14 MB do not
    stay in L3 from one call to the next), each slice a short stream the hardware prefetcher
    starts late: MobileNetV2's 960 -> 320 at 7x7 (1.2 MB of weights) 0.315 -> 0.300 ms alone
    with a cold cache, 0.282 either way with a warm one. None without a second panel to fetch."""
    mr, nr = pk.micro
    if pre_b and pk.size("n") > nr:
        return "b"
    if pre_a and pk.size("m") > mr:
        return "a"
    return None


# A packed contraction with few rows (M <= B_IN_PLACE_M_MAX output channels: each B panel feeds
# at most 4 micro-tiles) reads B in place instead of packing it (`b_in_place`) where B's
# columns are one straight run per k and the k steps a constant stride apart: packing was a
# fifth of MobileNetV2's 1x1 32 -> 16 conv at 112x112 (0.166 -> 0.136 ms alone, its input in
# cache), 144 -> 24 at 56x56 0.250 -> 0.210, 192 -> 32 at 28x28 0.102 -> 0.087.
B_IN_PLACE_M_MAX = 32
B_IN_PLACE_K_MAX = 256
# More rows (up to B_IN_PLACE_SWEPT_M_MAX) read B in place where K <= B_IN_PLACE_SWEPT_K_MAX
# (the row panels outside the column panels, `rows_outer`) and B is at most
# B_IN_PLACE_SWEPT_BYTES_MAX: each of their row panels sweeps all of B, from L2 only when B
# leaves room there. In MobileNetV2 (one thread, the same network old and new interleaved):
# 24 -> 144 at 56x56 (B 294 KB) 0.235 -> 0.223 ms, 0.231 -> 0.214; 32 -> 192 at 28x28 (98 KB)
# 0.099 -> 0.095; but 16 -> 96 at 112x112 (784 KB) 0.427 -> 0.498.
B_IN_PLACE_SWEPT_M_MAX = 256
B_IN_PLACE_SWEPT_K_MAX = 64
B_IN_PLACE_SWEPT_BYTES_MAX = 512 * 1024
# The in-place B's K rows are K streams far apart, more than the hardware prefetcher follows:
# the microkernel fetches each row this many panels ahead (codegen/c.py). Without it B in place
# lost where B outgrew L2 (MobileNetV2's 32 -> 16 at 112x112, 1.6 MB, 0.211 -> 0.229 ms in the
# network); with it, alone on one thread, 0.174 -> 0.119 (with GEMM_MR_ONE_PANEL) and 144 -> 24
# at 56x56 (1.8 MB) 0.243 -> 0.128, so B has no size bound.
B_IN_PLACE_AHEAD = 4


def b_in_place(kernel: Kernel, pk) -> int:
    """The stride (elements) between B's k steps when the packed contraction `pk` reads B in
    place (no packing): not transposed, B f32, not prepacked, in range, its n loops one
    straight run (offset n) over whole 16-column panels (N a multiple of GEMM_NR), its k
    loops linear, K <= B_IN_PLACE_K_MAX and M <= B_IN_PLACE_M_MAX (or M <=
    B_IN_PLACE_SWEPT_M_MAX with K <= B_IN_PLACE_SWEPT_K_MAX and B, the K x N it reads, at most
    B_IN_PLACE_SWEPT_BYTES_MAX); else 0."""
    m, k, kn_bytes = pk.size("m"), pk.size("k"), pk.size("k") * pk.size("n") * 4
    few = m <= B_IN_PLACE_M_MAX or (m <= B_IN_PLACE_SWEPT_M_MAX and k <= B_IN_PLACE_SWEPT_K_MAX
                                    and kn_bytes <= B_IN_PLACE_SWEPT_BYTES_MAX)
    if pk.swapped or not few or pk.size("k") > B_IN_PLACE_K_MAX \
            or pk.size("n") % GEMM_NR or kernel.tensor(pk.b.tensor).dtype != "f32" or prepacked(kernel, pk, "b"):
        return 0
    ext = dict(pk.extents)
    if any(lo or hi for lo, hi in _padding(kernel, pk.b, ext)):
        return 0
    coeff, _ = _flat_offsets(kernel, pk.b)

    def linear_step(loops) -> int:
        live = [(l, coeff.get(l, 0)) for l in loops if ext[l] > 1]
        if not live:
            return 0
        step = live[-1][1]
        ok = all(c == step * math.prod(ext[x] for x, _ in live[i + 1:]) for i, (_, c) in enumerate(live))
        return step if ok else -1
    if linear_step(pk.n) != 1:
        return 0
    ks = linear_step(pk.k)
    return ks if ks >= pk.size("n") else 0


def host_copy_costs(kernel: Kernel, pk) -> tuple[float, float]:
    """Cycles to pack one element of the packed contraction `pk`'s A and B operands: straight
    runs, a constant stride, or offset-table panels (NR consecutive offsets copy as runs,
    the rest element-wise). What the thread split weighs its repacking by, and what the host
    model (accel/cost.py) charges for packing."""
    import numpy as np

    ext = dict(pk.extents)

    def copy_cost(access, inner_group: str, rows_along: str | None = None) -> float:
        # the offsets the packing reads: in the padded copy where codegen makes one
        pads = _padding(kernel, access, ext)
        t = kernel.tensor(access.tensor)
        pshape = tuple(n + lo + hi for n, (lo, hi) in zip(t.shape, pads))
        if any(lo or hi for lo, hi in pads) and math.prod(pshape) <= PAD_COPY_MAX * t.size:
            coeff, _ = _flat_offsets(kernel, access, pshape, [lo for lo, _ in pads])
        else:
            coeff, _ = _flat_offsets(kernel, access)
        loops = list(getattr(pk, inner_group))
        if not loops:
            return HOST_COPY_STRIDED
        cs = [coeff.get(l, 0) for l in loops]
        live = [(l, c) for l, c in zip(loops, cs) if ext[l] > 1]
        step = live[-1][1] if live else 0
        linear = all(c == step * math.prod(ext[x] for x, _ in live[i + 1:]) for i, (_, c) in enumerate(live))
        if linear:
            if step == 1:
                return HOST_COPY_RUN
            # rows side by side, each a straight run along `rows_along`'s innermost live loop
            along = [l for l in getattr(pk, rows_along) if ext[l] > 1] if rows_along else []
            return HOST_COPY_ROWS if along and coeff.get(along[-1], 0) == 1 else HOST_COPY_STRIDED
        # an offset table: panels of NR evenly spaced offsets copy as runs, the rest element-wise
        grids = np.meshgrid(*[np.arange(ext[l]) for l in loops], indexing="ij")
        table = sum(c * g for c, g in zip(cs, grids)).reshape(-1)
        nr = pk.micro[1]
        full = len(table) // nr
        if full == 0:
            return HOST_COPY_GATHER
        panels = table[:full * nr].reshape(full, nr)
        # panels evenly spaced at the innermost loop's step (1, or 2: codegen copies those as
        # vectors too)
        step = cs[-1] if 1 <= cs[-1] <= DIRECT_STEP_MAX else 1
        runs = np.mean(np.all(np.diff(panels, axis=1) == step, axis=1))
        return runs * HOST_COPY_RUN + (1 - runs) * HOST_COPY_GATHER

    b_cost = 0.0 if prepacked(kernel, pk, "b") or b_in_place(kernel, pk) else copy_cost(pk.b, "n")
    # A's panels are copied MR rows at a time for each k (codegen/c.py packs r innermost):
    # the copy walks A along its m loops
    a_cost = 0.0 if prepacked(kernel, pk, "a") else copy_cost(pk.a, "m", "k") if pk.m else HOST_COPY_STRIDED
    return float(a_cost), float(b_cost)


# Units beyond which `claimed_makespan` estimates instead of replaying the claims (many small
# units: the greedy bound's middle is within a small unit of the replay).
CLAIM_REPLAY_MAX = 512


def claimed_makespan(costs: list[float], threads: int) -> float:
    """When the last of `threads` equally fast threads finishes `costs` (one per work unit, in
    unit order) claimed as the C claims them: thread t owns the contiguous share [U t / T,
    U (t + 1) / T), runs it front to back, then takes the next unit of the others' shares,
    (t + 1) % T first, whoever reaches a unit first running it. Beyond CLAIM_REPLAY_MAX units:
    total / T + half the largest unit (the middle of greedy list scheduling's bounds)."""
    import heapq

    U = len(costs)
    if threads <= 1 or U == 0:
        return float(sum(costs))
    if U > CLAIM_REPLAY_MAX:
        return sum(costs) / threads + 0.5 * max(costs) * (1 - 1 / threads)
    heads = [U * t // threads for t in range(threads)]
    ends = [U * (t + 1) // threads for t in range(threads)]
    victim = list(range(threads))        # where each thread looks next (shares only ever empty)
    ready = [(0.0, t) for t in range(threads)]
    finish = 0.0
    while ready:
        clock, t = heapq.heappop(ready)
        for _ in range(threads):
            v = victim[t]
            if heads[v] < ends[v]:
                break
            victim[t] = (v + 1) % threads
        else:
            finish = max(finish, clock)      # no unit left anywhere: this thread is done
            continue
        clock += costs[heads[v]]
        heads[v] += 1
        heapq.heappush(ready, (clock, t))
    return finish


def packed_partition(pk: "Packed", nc: int, threads: int, a_cost: float = 1.0, b_cost: float = 1.0,
                     macs_per_cycle: float = PARTITION_MACS_PER_CYCLE, cached_bytes: float = 0.0) -> Partition:
    """The work units `threads` threads share a packed contraction in (cache block `nc`
    columns; `a_cost`/`b_cost`: cycles to pack one element of A/B). Candidates: the batch
    items, or each batch item cut into g chunks of N panels or of M panels (g up to
    4 x threads), the last chunk of each item the rest. Each unit costs its panels' work,
    the packing it does (an "n" unit packs A for its columns, an "m" unit all of B) and
    PARTITION_UNIT_CYCLES; the chosen cut minimises the makespan of the units claimed as
    the C claims them (`claimed_makespan`: a short last chunk leaves its owner idle), plus
    PARTITION_SLACK of the largest unit (what a thread whose core is shared holds the
    others up by). One thread: the batch items (the serial code). Every choice covers each
    output exactly once (`partition_ranges`); `share` is the busiest thread's part of all
    the units' cycles on an idle machine. `extra_cycles` (what the host model adds) counts no
    re-read of a prepacked operand of at most `cached_bytes` (per batch item): each core reads
    it from its own cache, within the microkernel's time (GEMM 128^3 with prepacked B, 64 KB,
    on 2 threads: 2.14e-5 s measured, 2.52e-5 without the re-read, 2.76e-5 with it; 4.13e-5 on
    one). The choice of cut still weighs every re-read (as measured when it was tuned)."""
    NB, M, N, K = (pk.size(g) for g in ("batch", "m", "n", "k"))
    mr, nr = pk.micro
    mpan, npan = -(-M // mr), -(-N // nr)
    nc = max(nr, min(nc, npan * nr))
    per_panel_n = mpan * mr * nr * K / macs_per_cycle        # one N panel, all of M, one batch item
    per_panel_m = mr * npan * nr * K / macs_per_cycle        # one M panel, all of N
    nblocks = -(-N // nc)

    def unit_costs(mode: str, chunk: int, cached: float = 0.0) -> tuple[list[float], float]:
        """(cycles of each unit in unit order: its panels, the packing it does, its claim; the
        packing all the units do beyond one thread's), a prepacked operand of at most `cached`
        bytes read again for free."""
        # cycles per element packed: a whole operand that outgrows L2 streams from L3; a
        # prepacked operand (cost 0) is never packed again for another unit, only read again
        a_el = max(a_cost, PARTITION_REPACK_CYCLES) if a_cost else \
            (0.0 if 4 * M * K <= cached else PARTITION_REREAD_CYCLES)
        b_el = max(b_cost, PARTITION_REPACK_CYCLES) if b_cost else \
            (0.0 if 4 * K * N <= cached else PARTITION_REREAD_CYCLES)
        serial = npan * per_panel_n + M * K * nblocks * a_el + N * K * b_el      # one batch item on one thread
        if mode == "batch":
            return [serial + PARTITION_UNIT_CYCLES] * NB, 0.0
        panels = npan if mode == "n" else mpan
        sizes = [min(chunk, panels - lo) for lo in range(0, panels, chunk)]
        item = []
        for i, c in enumerate(sizes):
            if mode == "n":         # A for each nc block of its columns, B for its columns
                cols = min(c * nr, N - i * chunk * nr)
                item.append(c * per_panel_n + -(-cols // nc) * M * K * a_el + cols * K * b_el)
            else:                   # A for its rows (each nc block), all of B
                rows = min(c * mr, M - i * chunk * mr)
                item.append(c * per_panel_m + rows * K * nblocks * a_el + N * K * b_el)
        extra = max(0.0, sum(item) - serial)
        return [x + PARTITION_UNIT_CYCLES for x in item] * NB, NB * extra

    options = [("batch", 1)]
    if threads > 1:
        for g in range(2, 4 * threads + 1):
            if g <= npan:
                options.append(("n", -(-npan // g)))
            if g <= mpan:
                options.append(("m", -(-mpan // g)))
    options = list(dict.fromkeys(options))

    # No claim order beats the busiest unit or an even share: options are replayed in the
    # order of that bound, until the bound alone is worse than the best replayed (the choice,
    # the first of the fastest, is the one replaying them all makes).
    bounded = []
    for index, option in enumerate(options):
        costs, _ = unit_costs(*option)
        slack = PARTITION_SLACK * max(costs) if threads > 1 else 0.0
        bounded.append((max(max(costs), sum(costs) / threads) + slack, index, costs, slack))
    best, best_score, best_costs = None, math.inf, None
    for bound, index, costs, slack in sorted(bounded, key=lambda b: (b[0], b[1])):
        if bound > best_score * (1 + 1e-9):
            break
        score = claimed_makespan(costs, threads) + slack
        if (score, index) < (best_score, best if best is not None else math.inf):
            best, best_score, best_costs = index, score, costs
    mode, chunk = options[best]
    costs = best_costs
    _, extra = unit_costs(mode, chunk, cached_bytes)
    _, copies = unit_costs(mode, chunk, math.inf)        # no re-read anywhere: the copies alone
    return Partition(mode, chunk, len(costs), extra, claimed_makespan(costs, threads) / sum(costs), extra - copies)


def partition_ranges(pk: "Packed", part: Partition) -> list[tuple[int, int, int, int, int]]:
    """[(batch item, m_lo, m_hi, n_lo, n_hi)] of each unit, in unit order: what the C's
    unit loop computes from the unit number (for tests: the units tile the output)."""
    NB, M, N = (pk.size(g) for g in ("batch", "m", "n"))
    mr, nr = pk.micro
    per = part.units // NB
    out = []
    for u in range(part.units):
        bt, c = divmod(u, per)
        if part.mode == "n":
            out.append((bt, 0, M, c * part.chunk * nr, min(N, (c + 1) * part.chunk * nr)))
        elif part.mode == "m":
            out.append((bt, c * part.chunk * mr, min(M, (c + 1) * part.chunk * mr), 0, N))
        else:
            out.append((bt, 0, M, 0, N))
    return out


def _flat_offsets(kernel: Kernel, access: Access, shape=None, shift=None) -> tuple[dict[str, int], int]:
    """The flat (row-major) element offset of `access` as {loop: coefficient}, constant (in
    a tensor of `shape` whose indices are shifted by `shift`, per dimension: a padded copy)."""
    shape = shape or kernel.tensor(access.tensor).shape
    shift = shift or [0] * len(shape)
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    coeff: dict[str, int] = {}
    const = 0
    for d, idx in enumerate(access.indices):
        for loop, c in idx.terms:
            coeff[loop] = coeff.get(loop, 0) + c * strides[d]
        const += (idx.const + shift[d]) * strides[d]
    return coeff, const


def _padding(kernel: Kernel, access: Access, ext: dict[str, int]) -> list[tuple[int, int]]:
    """Per dimension, how far the index reaches below 0 and past the end (0, 0: in range)."""
    shape = kernel.tensor(access.tensor).shape
    out = []
    for d, idx in enumerate(access.indices):
        lo = idx.const + sum(min(0, c * (ext[l] - 1)) for l, c in idx.terms)
        hi = idx.const + sum(max(0, c * (ext[l] - 1)) for l, c in idx.terms)
        out.append((max(0, -lo), max(0, hi - shape[d] + 1)))
    return out


def _one_to_one(coeff: dict[str, int], loops: list[str], ext: dict[str, int]) -> bool:
    """Whether offset sum(coeff[l] * l) is one-to-one over the box of `loops`: the positive
    coefficients, sorted, each at least the span the smaller ones cover (a row-major box)."""
    span = 1
    for l in sorted((l for l in loops if ext[l] > 1), key=lambda l: coeff.get(l, 0)):
        if coeff.get(l, 0) < span:
            return False
        span = coeff[l] * ext[l]
    return True


def _in_range(kernel: Kernel, access: Access, ext: dict[str, int]) -> list[bool]:
    """Per dimension: whether the index stays inside the tensor over the whole nest."""
    shape = kernel.tensor(access.tensor).shape
    out = []
    for d, idx in enumerate(access.indices):
        lo = idx.const + sum(min(0, c * (ext[l] - 1)) for l, c in idx.terms)
        hi = idx.const + sum(max(0, c * (ext[l] - 1)) for l, c in idx.terms)
        out.append(lo >= 0 and hi < shape[d])
    return out


def _unit_stride_reads(stmt: Statement, loop: str) -> bool:
    """Whether every read indexes `loop` (the register tile's vectorised output loop) only in
    its last dimension with coefficient 1, or not at all. Otherwise the tile's vectors gather
    from rows a stride apart (a row max M[i] max= X[i, j] tiled over i: 5x slower than the
    plain nest, measured on 512 x 512, the rows falling into a handful of cache sets)."""
    for access in stmt.reads():
        for d, idx in enumerate(access.indices):
            c = dict(idx.terms).get(loop, 0)
            if c and (d != len(access.indices) - 1 or c != 1):
                return False
    return True


def _substitute(access: Access, by: dict[str, Affine]) -> Access:
    """`access` with each loop replaced by an affine index (over another statement's loops)."""
    indices = []
    for idx in access.indices:
        out = Affine.constant(idx.const)
        for loop, c in idx.terms:
            out = out + by[loop] * c
        indices.append(out)
    return dataclasses.replace(access, indices=tuple(indices))


def keeps_point_order(schedule: Schedule | None) -> bool:
    """A user's trace skewed or reversed point loops: the nest must run in that order, so no
    packed, direct-row or window path (each has its own order) may take the kernel."""
    return schedule is not None and bool(schedule.annotations.get("skew") or schedule.annotations.get("reverse"))


def _reads_loop_values(kernel: Kernel) -> bool:
    """A statement cut by a `where` domain or reading a loop's value: the host's packed and
    direct forms move points between loops, so such kernels keep the plain nest."""
    return any(st.uses_index_values for st in kernel.statements)


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
    if keeps_point_order(schedule) or _reads_loop_values(kernel):
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
        o_coeff, _ = _flat_offsets(kernel, target)
        if not _one_to_one(o_coeff, [l for l in stmt.loop_names if l in out_loops], ext):
            continue
        by_offset = lambda coeff: (lambda l: -abs(coeff.get(l, 0)))      # noqa: E731 - outer → inner
        a_coeff, _ = _flat_offsets(kernel, a)
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
        epilogue = _epilogue(kernel, index, batch + m + n)
        pk = Packed(index, a, b, tuple(batch), tuple(m), tuple(n), tuple(k),
                    tuple(sorted(ext.items())), epilogue, contiguous)
        if math.prod(ext.values()) < GEMM_PACK_MIN and direct_rows(kernel, pk) is None:
            continue    # too small to pack; direct rows (no packing) pay from DIRECT_MIN_POINTS
        return transposed(kernel, pk) if direct_rows(kernel, pk) is None else pk
    return None


def epilogue_point(kernel: Kernel, index: int, s: int) -> dict[str, Affine] | None:
    """Statement `s`'s loops as indices over the contraction `index`'s loops, when `s` is an
    elementwise statement over the contraction's output shape (no reduction, its target
    indexed by its own loops, each once, in order: Z[n, c, h, w] = ...): its point
    Z[x] is then computed where the contraction stores Y[x] (a grouped convolution's
    channel c becomes fo + 10*g). None otherwise."""
    stmt, st = kernel.statements[index], kernel.statements[s]
    if st.reduce is not None or kernel.tensor(st.target).shape != kernel.tensor(stmt.target).shape:
        return None
    point: dict[str, Affine] = {}
    for idx, at in zip(st.target_indices, stmt.target_indices):
        loop = idx.single_loop
        if loop is None or loop in point:
            return None
        point[loop] = at
    return point if set(point) == set(st.loop_names) else None


def _epilogue(kernel: Kernel, index: int, out_loops: list[str]) -> tuple[int, ...]:
    """Statements right after the contraction `index` that its store can apply: elementwise
    over its output (`epilogue_point`), where the contraction writes every element of its
    target once, reading its result and earlier fused results only at the point being
    stored, anything else in range."""
    stmt = kernel.statements[index]
    ext = stmt.extents
    target = Access(stmt.target, stmt.target_indices)
    if math.prod(ext[l] for l in out_loops) != kernel.tensor(stmt.target).size or not all(_in_range(kernel, target, ext)):
        return ()
    point = {stmt.target: tuple(stmt.target_indices)}
    fused: list[int] = []
    for s in range(index + 1, len(kernel.statements)):
        st = kernel.statements[s]
        at = epilogue_point(kernel, index, s)
        if at is None:
            break
        ok = True
        for access in st.reads():
            moved = _substitute(access, at)
            if access.tensor in point:
                ok = moved.indices == point[access.tensor]
            elif any(kernel.statements[w].target == access.tensor for w in range(index, len(kernel.statements))):
                ok = False    # written by a statement not fused (or later): keep program order
            else:
                ok = all(_in_range(kernel, moved, ext))
            if not ok:
                break
        if not ok or st.target in point:
            break
        point[st.target] = tuple(_substitute(Access(st.target, st.target_indices), at).indices)
        fused.append(s)
    return tuple(fused)


# A 3x3 stride-1 convolution whose output rows are at least this wide runs as Winograd
# F(2x2, 3x3) (`winograd`): its tiles of 2x2 outputs go in panels of 8, along a tile row
# padded to whole panels (14 wide: 7 tiles in 8) or of whole rows padded to a power of two
# (7 wide: 2 rows of 4 tiles), so narrower maps would compute mostly padding.
WINOGRAD_MIN_WIDTH = 7
# Channels (in and out) at least: below, the transforms cost more than the multiplies saved.
WINOGRAD_MIN_CHANNELS = 32
# Bytes of one tile block's transformed input (and of its products): blocks of tiles stay in
# L2 between the input transform, the 16 GEMMs and the output transform.
WINOGRAD_BLOCK_BYTES = 1 << 20
WINOGRAD_PANEL = 8      # tiles per row panel of the GEMMs (the microkernel's rows)


@dataclass(frozen=True)
class Winograd:
    """A 3x3 stride-1 convolution `O[.., f, h, w] += X[.., c, h + r + ph, w + s + pw] *
    W[f, c, r, s]` (W a param) run as Winograd F(2x2, 3x3): the weights transformed once
    (U = G g G^T, 16 values per (f, c), kept as 16-wide f panels like a prepacked operand), per
    block of 2x2-output tiles the input transformed (V = B^T d B), 16 GEMMs U[k] x V[k] over
    the channels, and the products transformed back (A^T m A) into the outputs, where the
    fused epilogue applies. 16 multiplies per tile and channel pair against 36: 2.25x fewer
    multiply-adds, exact up to float rounding (the transforms' coefficients are 0, ±1, ±1/2)."""

    x: Access
    w: Access
    f: str
    h: str
    w_loop: str
    c: str
    r: str
    s: str
    ph: int         # the input row read for output row h, kernel row r: h + r + ph
    pw: int

    def tiles(self, ext: dict) -> tuple[int, int, int]:
        """(tile rows, tiles per row in the layout, tiles per row holding outputs). A row of at
        least a panel's tiles is padded to whole panels; a shorter one to a power of two, so
        that a panel holds whole rows (a 7x7 map's rows of 4 tiles: a panel of 2 rows); tile
        rows padded so that each batch item's tiles fill whole panels."""
        tw = -(-ext[self.w_loop] // 2)
        twp = -(-tw // WINOGRAD_PANEL) * WINOGRAD_PANEL if tw >= WINOGRAD_PANEL else 1 << (tw - 1).bit_length()
        rows = WINOGRAD_PANEL // twp if twp < WINOGRAD_PANEL else 1
        return -(-(-(-ext[self.h] // 2)) // rows) * rows, twp, tw

    def block_panels(self, ext: dict) -> int:
        """Tile panels per block: the block's transformed input and products each within
        WINOGRAD_BLOCK_BYTES."""
        fp = -(-ext[self.f] // GEMM_NR) * GEMM_NR
        return max(1, WINOGRAD_BLOCK_BYTES // (16 * WINOGRAD_PANEL * 4 * max(ext[self.c], fp)))


def winograd(kernel: Kernel, pk: "Packed | None") -> Winograd | None:
    """The Winograd form of packed contraction `pk` (see `Winograd`) when it is a 3x3
    stride-1 dilation-1 convolution of f32 tensors with a param as weights, output rows at
    least WINOGRAD_MIN_WIDTH wide, WINOGRAD_MIN_CHANNELS channels in and out, and output and
    input rows contiguous; else None."""
    if pk is None or direct_rows(kernel, pk) is not None:
        return None
    stmt = kernel.statements[pk.index]
    if stmt.reduce != "+" or getattr(stmt.expr, "op", None) != "*":
        return None
    if any(t.dtype != "f32" for t in kernel.tensors):
        return None
    ext = dict(pk.extents)
    reads = stmt.reads()
    if len(reads) != 2:
        return None
    ws = [a for a in reads if kernel.tensor(a.tensor).role == "param"]
    if len(ws) != 1:
        return None
    wacc = ws[0]
    xacc = next(a for a in reads if a is not wacc)
    wl = [idx.single_loop for idx in wacc.indices]
    if len(wl) != 4 or None in wl or any(idx.const for idx in wacc.indices) or len(set(wl)) != 4:
        return None
    f, c, r, s = wl
    if kernel.tensor(wacc.tensor).shape[2:] != (3, 3) or ext[r] != 3 or ext[s] != 3:
        return None
    out = [idx.single_loop for idx in stmt.target_indices]
    if len(out) < 3 or None in out or out[-3] != f or any(idx.const for idx in stmt.target_indices):
        return None
    h, w = out[-2], out[-1]
    batch = out[:-3]
    if tuple(sorted(pk.k)) != tuple(sorted((c, r, s))) or set(pk.batch) != set(batch):
        return None
    xi = xacc.indices
    if len(xi) != len(batch) + 3:
        return None
    for idx, l in zip(xi, batch):
        if idx.single_loop != l or idx.const:
            return None
    if xi[-3].single_loop != c or xi[-3].const:
        return None
    if dict(xi[-2].terms) != {h: 1, r: 1} or dict(xi[-1].terms) != {w: 1, s: 1}:
        return None
    if ext[w] < WINOGRAD_MIN_WIDTH or ext[h] < 2 or ext[c] < WINOGRAD_MIN_CHANNELS or ext[f] < WINOGRAD_MIN_CHANNELS:
        return None
    if kernel.tensor(wacc.tensor).shape[:2] != (ext[f], ext[c]) or not all(_in_range(kernel, wacc, ext)):
        return None
    return Winograd(xacc, wacc, f, h, w, c, r, s, xi[-2].const, xi[-1].const)
