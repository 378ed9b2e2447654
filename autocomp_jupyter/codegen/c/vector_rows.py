"""Vector rows in C: a depthwise convolution whose output rows are 32 to 256 wide, read at
stride 1 or 2 (`host_strategy.depthwise.vector_rows` decides which), run per channel plane as
rows of 16-wide vectors read straight from the unpadded input: a stride-2 tap's columns two
loads and one permute, the columns outside the plane (its padding, read as 0) masked-off lanes
of those loads, the rows outside it skipped. No padded copy, no transposes: MobileNetV2's 96
channels at 112x112 stride 2 ran 0.37 ms as channel blocks, 0.52 as direct rows, 0.25 so.
Up to VECTOR_ROWS_PASS vectors (rows x vectors of a row) are summed per pass over the window,
each its own chain of FMAs; each row is then stored with the fused epilogue. Without AVX-512,
the same sums in scalar C.
"""
from __future__ import annotations

from ...host_strategy.access import flat_offsets
from ...host_strategy.depthwise import BLOCK_CHANNELS, VECTOR_ROWS_PASS, ChannelBlocks
from ...host_strategy.gemm import Packed
from ...host_strategy.rows import DirectRows
from .ctext import c_affine, flat_reader
from .direct import DIRECT_CHUNK
from .writer import WriterBase


class VectorRowsWriter(WriterBase):
    """Writes the vector-row strategy (see the module docstring)."""

    def vector_rows(self, pk: Packed, dr: DirectRows, cb: ChannelBlocks) -> None:
        """Depthwise convolution `pk.index` as vector rows (`vector_rows`): per batch item
        (a channel's plane), each output row's 16-wide vectors summed over the window straight
        from the input plane, up to VECTOR_ROWS_PASS vectors a pass: a stride-2 tap's columns
        two loads and one permute, the columns outside the plane (its padding, read as 0)
        masked-off lanes, the rows outside it skipped; the row then stored with the epilogue.
        Without AVX-512, the same sums in scalar C."""
        _VectorRows(self, pk, cb).write()


class _VectorRows:
    """One depthwise convolution's vector rows being written: the C names it takes and its
    geometry, then the steps in the order the C runs them."""

    def __init__(self, writer: VectorRowsWriter, pk: Packed, cb: ChannelBlocks):
        self.writer, self.pk, self.cb = writer, pk, cb
        self.k = writer.kernel
        self.stmt = self.k.statements[pk.index]
        self.ext = ext = dict(pk.extents)
        f = self.f = writer.namer.fresh
        self.e = writer.emit
        self.cv = {l: f(l) for l in self.stmt.loop_names}
        self.bt, self.plane, self.row, self.wts, self.accrow, self.yv, self.xv, self.sv, self.v, self.ev = (
            f(n) for n in ("bt", "plane", "row", "wts", "accrow", "y", "x", "s", "v", "ev"))
        self.H, self.W = cb.image
        self.Ho, self.Wo, self.KH, self.KW = ext[cb.h], ext[cb.w], ext[cb.r], ext[cb.s]
        (self.sh, self.sw), (self.dh, self.dw), (oh, ow) = cb.stride, cb.dilation, cb.offset
        # input row, column of output (0, 0) at tap (0, 0)
        self.ch, self.cw = oh - cb.pads[0], ow - cb.pads[1]
        self.nv = -(-self.Wo // BLOCK_CHANNELS)
        self.flat = flat_reader(self.k, self.cv)
        # a pass sums up to VECTOR_ROWS_PASS vectors (rows x vectors of a row), each its own
        # chain of FMAs: a 28-wide row's 2 vectors alone waited on the FMA latency (MobileNetV2's
        # 144 channels at 56x56 stride 2: 0.16 ms, 4 rows a pass 0.08)
        self.R = max(1, min(self.Ho, VECTOR_ROWS_PASS // self.nv))

    def write(self) -> None:
        e, R, Ho = self.e, self.R, self.Ho
        self.comment()
        region = self.open_plane()
        self.h0 = self.f("h0")
        e(3, f"float {self.accrow}[{R}][{self.nv * BLOCK_CHANNELS}] __attribute__((aligned(64)));")
        e(3, f"for (long {self.h0} = 0; {self.h0} < {Ho}; {self.h0} += {R}) {{")
        e(3, "#if defined(__AVX512F__)")
        if self.sw == 2:
            e(4, f"const __m512i {self.ev} = _mm512_set_epi32({', '.join(str(x) for x in range(30, -1, -2))});")
        if Ho % R:
            e(4, f"if ({self.h0} + {R} <= {Ho}) {{")
            self.one_pass(5, R)
            e(4, "} else {")
            self.one_pass(5, Ho % R)
            e(4, "}")
        else:
            self.one_pass(4, R)
        e(3, "#else")
        self.scalar_rows()
        e(3, "#endif")
        self.store_rows()
        e(3, "}")
        e(2, "}")
        if region is not None:
            self.writer.region_end(2, region)
        e(1, "}")

    def comment(self) -> None:
        pk, e = self.pk, self.e
        e(1, f"/* {str(self.stmt).split('    #')[0]} */")
        epi = ", ".join(str(self.k.statements[s]).split("    #")[0] for s in pk.epilogue)
        e(1, f"/* vector rows: batch {' '.join(pk.batch)} ({pk.size('batch')} planes {self.H}x{self.W}), outputs "
             f"{self.Ho}x{self.Wo} as {self.nv} vectors of {BLOCK_CHANNELS} per row over {self.KH}x{self.KW} taps at "
             f"stride {self.sh}x{self.sw}, read in place (masked at the edges)"
             + (f"; applied in its store: {epi}" if epi else "") + " */")
        e(1, "{")

    def open_plane(self):
        """The loop over batch items (channel planes): the plane's start and its window's
        weights; returns the parallel region it opened, if any."""
        pk, cb, ext, e, cv, writer = self.pk, self.cb, self.ext, self.e, self.cv, self.writer
        KH, KW, bt = self.KH, self.KW, self.bt
        coeff, _ = flat_offsets(self.k, pk.b)
        base = c_affine({cv[l]: c for l, c in coeff.items() if l in pk.batch}, 0)
        parallel = bool(set(writer.parallel) & {self.k.loop_map(pk.index).get(l) for l in pk.batch + pk.n})
        NB = pk.size("batch")
        region = writer.region_begin(2, f"dynamic, {DIRECT_CHUNK}") if parallel and NB > 1 else None
        e(2, f"for (long {bt} = 0; {bt} < {NB}; ++{bt}) {{")
        writer.unflatten(3, bt, pk.batch, cv, ext)
        for l in self.stmt.loop_names:       # loops of one trip (a depthwise conv as groups)
            if ext[l] == 1 and l not in pk.batch:
                e(3, f"const long {cv[l]} = 0;")
        e(3, f"const float* restrict {self.plane} = {writer.cname[pk.b.tensor]} + {base};")
        e(3, f"float {self.wts}[{KH * KW}];")
        e(3, f"for (long {cv[cb.r]} = 0; {cv[cb.r]} < {KH}; ++{cv[cb.r]})")
        e(4, f"for (long {cv[cb.s]} = 0; {cv[cb.s]} < {KW}; ++{cv[cb.s]})")
        e(5, f"{self.wts}[{KW} * {cv[cb.r]} + {cv[cb.s]}] = {writer.cname[pk.a.tensor]}[{self.flat(pk.a)}];")
        return region

    def load(self, i: int, s: int) -> str | None:
        """The 16 inputs of output vector i at tap column s (None: all padding)."""
        L, sw, W, row = BLOCK_CHANNELS, self.sw, self.W, self.row
        first = sw * L * i + self.dw * s + self.cw
        lim = min(L, self.Wo - L * i)
        masks = [0] * sw
        for lane in range(sw * (lim - 1) + 1):      # lanes up to the last one used, inside the row
            if 0 <= first + lane < W:
                masks[lane // L] |= 1 << (lane % L)
        if not any(masks[j // L] >> (j % L) & 1 for j in range(0, sw * lim, sw)):
            return None
        loads = [(f"_mm512_loadu_ps({row} + {first + L * j})" if m == 0xFFFF else
                  f"_mm512_maskz_loadu_ps({m:#x}, {row} + {first + L * j})" if m else "_mm512_setzero_ps()")
                 for j, m in enumerate(masks)]
        return loads[0] if sw == 1 else f"_mm512_permutex2var_ps({loads[0]}, {self.ev}, {loads[1]})"

    def one_pass(self, depth: int, rows: int) -> None:
        """`rows` output rows summed over the window, VECTOR_ROWS_PASS vectors at a time in
        AVX-512 registers, into the local rows `accrow`."""
        e, H, KH, KW, sh, dh, ch, yv = self.e, self.H, self.KH, self.KW, self.sh, self.dh, self.ch, self.yv
        for p0 in range(0, self.nv, VECTOR_ROWS_PASS):
            vecs = range(p0, min(self.nv, p0 + VECTOR_ROWS_PASS))
            accs = {(j, i): self.f(f"a{j}_{i}") for j in range(rows) for i in vecs}
            e(depth, "{")
            for x in accs.values():
                e(depth + 1, f"__m512 {x} = _mm512_setzero_ps();")
            for r in range(KH):
                for j in range(rows):
                    lo_y, hi_y = ch + dh * r + sh * j, sh * (self.Ho - 1) + dh * r + ch
                    e(depth + 1, f"{{ const long {yv} = {sh} * ({self.h0} + {j}) + {ch + dh * r};")
                    cond = lo_y < 0 or hi_y >= H
                    if cond:
                        e(depth + 1, f"if ((unsigned long){yv} < {H}UL) {{")
                    e(depth + 2, f"const float* restrict {self.row} = {self.plane} + {self.W} * {yv};")
                    for s in range(KW):
                        for i in vecs:
                            x = self.load(i, s)
                            if x is not None:
                                e(depth + 2, f"{accs[j, i]} = _mm512_fmadd_ps(_mm512_set1_ps({self.wts}[{KW * r + s}]), "
                                             f"{x}, {accs[j, i]});")
                    if cond:
                        e(depth + 1, "}")
                    e(depth + 1, "}")
            for (j, i), x in accs.items():
                e(depth + 1, f"_mm512_store_ps({self.accrow}[{j}] + {BLOCK_CHANNELS * i}, {x});")
            e(depth, "}")

    def scalar_rows(self) -> None:
        """The same rows without AVX-512: each output a scalar sum over the window."""
        e, cv, cb, H, W, KH, KW = self.e, self.cv, self.cb, self.H, self.W, self.KH, self.KW
        xv, sv, yv, h0 = self.xv, self.sv, self.yv, self.h0
        jv = self.f("j")
        e(4, f"for (long {jv} = 0; {jv} < {self.R} && {h0} + {jv} < {self.Ho}; ++{jv})")
        e(4, f"for (long {xv} = 0; {xv} < {self.Wo}; ++{xv}) {{")
        e(5, f"float {sv} = 0.0f;")
        e(5, f"for (long {cv[cb.r]} = 0; {cv[cb.r]} < {KH}; ++{cv[cb.r]}) {{")
        e(6, f"const long {yv} = {self.sh} * ({h0} + {jv}) + {self.dh} * {cv[cb.r]} + {self.ch};")
        e(6, f"if ((unsigned long){yv} >= {H}UL) continue;")
        e(6, f"for (long {cv[cb.s]} = 0; {cv[cb.s]} < {KW}; ++{cv[cb.s]}) {{")
        col = self.f("col")
        e(7, f"const long {col} = {self.sw} * {xv} + {self.dw} * {cv[cb.s]} + {self.cw};")
        e(7, f"if ((unsigned long){col} < {W}UL) "
             f"{sv} += {self.wts}[{KW} * {cv[cb.r]} + {cv[cb.s]}] * {self.plane}[{W} * {yv} + {col}];")
        e(6, "}")
        e(5, "}")
        e(5, f"{self.accrow}[{jv}][{xv}] = {sv};")
        e(4, "}")

    def store_rows(self) -> None:
        """The pass's rows stored with the epilogue."""
        e, writer, h, w, h0 = self.e, self.writer, self.cv[self.cb.h], self.cv[self.cb.w], self.h0
        jv = self.f("j")
        e(4, f"for (long {jv} = 0; {jv} < {self.R} && {h0} + {jv} < {self.Ho}; ++{jv}) {{")
        e(5, f"const long {h} = {h0} + {jv};")
        e(5, "#pragma omp simd")
        e(5, f"for (long {w} = 0; {w} < {self.Wo}; ++{w}) {{")
        e(6, f"const float {self.v} = {self.accrow}[{jv}][{w}];")
        writer.epilogue_store(self.pk, 6, self.v, lambda access: f"{writer.cname[access.tensor]}[{self.flat(access)}]")
        e(5, "}")
        e(4, "}")
