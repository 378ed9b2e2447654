"""A 3x3 stride-1 convolution run as Winograd F(2x2, 3x3) (`winograd`; `Winograd`: its loops,
its layout of 2x2-output tiles in panels, its blocks of panels).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.program import Access
from ..ir.schedule import Kernel
from .access import in_range
from .gemm import GEMM_NR, Packed
from .rows import direct_rows


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
    if kernel.tensor(wacc.tensor).shape[:2] != (ext[f], ext[c]) or not all(in_range(kernel, wacc, ext)):
        return None
    return Winograd(xacc, wacc, f, h, w, c, r, s, xi[-2].const, xi[-1].const)
