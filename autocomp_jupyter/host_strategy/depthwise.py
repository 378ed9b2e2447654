"""Depthwise convolutions of direct rows in vector form: in blocks of 16 channels
(`channel_blocks`: a blocked plane, each output one vector of channels, no permutes at any
stride) or as rows of 16-wide vectors read in place from the unpadded input (`vector_rows`:
wide rows, stride 1 or 2).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..ir.program import Access, Affine
from ..ir.schedule import Kernel
from .access import flat_offsets, substitute
from .epilogue import epilogue_point
from .gemm import Packed
from .rows import DirectRows


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
        accesses += [substitute(a, at) for a in st.reads() if a.tensor != stmt.target]
        accesses.append(substitute(Access(st.target, st.target_indices), at))
    for a in accesses:
        coeff, _ = flat_offsets(kernel, a)
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
