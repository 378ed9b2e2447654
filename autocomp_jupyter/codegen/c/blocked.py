"""Channel blocks in C: a depthwise convolution in blocks of 16 channels
(`host_strategy.depthwise.channel_blocks` decides which: a depthwise conv whose rows are
narrow or strided, its channels a multiple of 16, its blocked plane within L2).

Per batch item and block, the block's input rows are transposed (`ac_transpose16`) into a
ring of padded blocked rows (16 channels of a position in one vector), each as the output rows
reach it; each output is one vector of the block's channels summed over the window (4 outputs
along the row at a time, the taps' weights in registers), so every tap is one vector load and
FMA at any stride (along rows, a stride-2 tap loaded two vectors and permuted; a 7x7 plane
took 9 wide rows per pass for 7 outputs). The blocked outputs are transposed back to the
channels' planes, 16 positions at a time, with the fused epilogue.
"""
from __future__ import annotations

import math

from ...host_strategy.depthwise import BLOCK_CHANNELS, ChannelBlocks
from ...host_strategy.gemm import Packed
from ...host_strategy.rows import DirectRows
from .ctext import flat_reader
from .writer import WriterBase


class BlockedWriter(WriterBase):
    """Writes the channel-block strategy (see the module docstring)."""

    def blocked(self, pk: Packed, dr: DirectRows, cb: ChannelBlocks) -> None:
        """Depthwise convolution `pk.index` in blocks of BLOCK_CHANNELS channels
        (`channel_blocks`): per batch item and block, the channels' input planes transposed
        into one padded blocked plane, each output a vector of the block's channels summed
        over the window (4 outputs along the row at a time, the taps' weights in registers),
        each output row transposed back to the channels' rows and stored with the epilogue."""
        _ChannelBlocks(self, pk, cb).write()


class _ChannelBlocks:
    """One depthwise convolution's channel blocks being written: the C names it takes, then
    the steps in the order the C runs them."""

    def __init__(self, writer: BlockedWriter, pk: Packed, cb: ChannelBlocks):
        self.writer, self.pk, self.cb = writer, pk, cb
        self.k = writer.kernel
        self.stmt = self.k.statements[pk.index]
        self.ext = ext = dict(pk.extents)
        f = self.f = writer.namer.fresh
        self.e = writer.emit
        self.cv = {l: f(l) for l in self.stmt.loop_names}
        self.bt, self.base, self.T, self.trow, self.srow, self.y, self.q, self.x = (f(n) for n in (
            "bt", "cbase", "T", "trow", "srow", "y", "q", "x"))
        self.wvf, self.orow, self.out16, self.i = f("wvf"), f("orow"), f("out16"), f("i")
        f("t0")     # taken, unused: the names after it follow from it
        self.nb = ext[cb.c] // BLOCK_CHANNELS
        self.outer = [l for l in pk.batch if l != cb.c]
        self.units = self.nb * math.prod(ext[l] for l in self.outer)
        self.flat = flat_reader(self.k, self.cv)
        self.h, self.w = self.cv[cb.h], self.cv[cb.w]

    def write(self) -> None:
        self.comment()
        parallel = bool(set(self.writer.parallel) & {self.k.loop_map(self.pk.index).get(l)
                                                     for l in self.pk.batch + self.pk.n})
        region = self.writer.region_begin(2, "dynamic, 1") if parallel and self.units > 1 else None
        self.open_block()
        self.weights()
        self.output_rows()
        self.transpose_back()
        self.e(2, "}")
        if region is not None:
            self.writer.region_end(2, region)
        self.e(1, "}")

    def comment(self) -> None:
        pk, cb, ext, e, L = self.pk, self.cb, self.ext, self.e, BLOCK_CHANNELS
        hp, wp = cb.plane
        (sh, sw) = cb.stride
        e(1, f"/* {str(self.stmt).split('    #')[0]} */")
        epi = ", ".join(str(self.k.statements[s]).split("    #")[0] for s in pk.epilogue)
        e(1, f"/* channel blocks: {ext[cb.c]} channels in blocks of {L} ({self.units} blocks), each a padded "
             f"blocked plane [{hp}][{wp}][{L}] of {pk.b.tensor}; outputs {ext[cb.h]}x{ext[cb.w]}, each a vector of "
             f"{L} channels over {ext[cb.r]}x{ext[cb.s]} taps at stride {sh}x{sw}, rows transposed back"
             + (f"; applied in its store: {epi}" if epi else "") + " */")
        e(1, "{")

    def open_block(self) -> None:
        """The loop over (batch item, block) units: the block's first channel, its loops'
        values, the start of its input planes."""
        pk, cb, ext, e, cv, writer = self.pk, self.cb, self.ext, self.e, self.cv, self.writer
        L, bt, base, nb = BLOCK_CHANNELS, self.bt, self.base, self.nb
        H, W = cb.image
        e(2, f"for (long {bt} = 0; {bt} < {self.units}; ++{bt}) {{")
        e(3, f"const long {base} = ({bt} % {nb}) * {L};")
        writer.unflatten(3, f"({bt} / {nb})", self.outer, cv, ext)
        for l in self.stmt.loop_names:      # loops of one trip (a depthwise conv as groups: its group's channel)
            if ext[l] == 1 and l not in self.outer:
                e(3, f"const long {cv[l]} = 0;")
        outer = [l for l in self.outer if ext[l] > 1]
        xs = self.k.tensor(pk.b.tensor).shape
        img = f"{xs[1] * H * W} * {cv[outer[0]]} + " if outer else ""
        self.xb = self.f("xb")
        e(3, f"const float* restrict {self.xb} = {writer.cname[pk.b.tensor]} + ({img}{H * W} * {base});")

    def weights(self) -> None:
        """The block's weights, one vector of its 16 channels per tap, held in registers."""
        pk, cb, ext, e, cv, i, wvf, L = self.pk, self.cb, self.ext, self.e, self.cv, self.i, self.wvf, BLOCK_CHANNELS
        KH, KW = ext[cb.r], ext[cb.s]
        self.taps = [(r, s) for r in range(KH) for s in range(KW)]
        e(3, f"float {wvf}[{len(self.taps) * L}] __attribute__((aligned(64)));")
        e(3, f"for (long {i} = 0; {i} < {L}; ++{i}) {{")
        e(4, f"const long {cv[cb.c]} = {self.base} + {i};")
        e(4, f"for (long {cv[cb.r]} = 0; {cv[cb.r]} < {KH}; ++{cv[cb.r]})")
        e(5, f"for (long {cv[cb.s]} = 0; {cv[cb.s]} < {KW}; ++{cv[cb.s]})")
        e(6, f"{wvf}[({KW} * {cv[cb.r]} + {cv[cb.s]}) * {L} + {i}] = {self.writer.cname[pk.a.tensor]}[{self.flat(pk.a)}];")
        e(3, "}")
        self.wv = [self.f(f"w{t}") for t in range(len(self.taps))]
        for t, name in enumerate(self.wv):
            e(3, f"const ac_v16 {name} = *(const ac_v16*)({wvf} + {t * L});")

    def output_rows(self) -> None:
        """Per output row: the input rows it reads transposed into the ring (those not yet
        in), then its outputs, 4 at a time, each a vector of channels over the taps."""
        cb, ext, e, f, L = self.cb, self.ext, self.e, self.f, BLOCK_CHANNELS
        h, w, T, trow, y, q = self.h, self.w, self.T, self.trow, self.y, self.q
        H, W = cb.image
        _, wp = cb.plane
        pt, pl = cb.pads
        Ho, Wo, KH = ext[cb.h], ext[cb.w], ext[cb.r]
        (sh, sw), (dh, dw), (oh, ow) = cb.stride, cb.dilation, cb.offset
        span = cb.ring
        # a slot holds a padded row and what its last transpose writes past it (zeros): the
        # next slot may hold a row still read
        wq = cb.slot
        nxt, lo = f("next"), f("lo")
        e(3, f"/* outputs, blocked: {self.orow}[y * {Wo} + x] the {L} channels' vector */")
        e(3, f"ac_v16* restrict {self.orow} = ac_scratch(3, {-(-(Ho * Wo) // L) * L}UL * sizeof(ac_v16));")
        e(3, f"float* restrict {T} = ac_scratch(2, {span * wq * L}UL * sizeof(float));")
        e(3, f"/* a ring of the {span} padded input rows an output row reads, blocked: row y at "
             f"{T}[((y % {span}) * {wq} + x) * {L} + channel], each row transposed in once, as the output rows reach it */")
        e(3, f"long {nxt} = {oh};")
        e(3, f"for (long {h} = 0; {h} < {Ho}; ++{h}) {{")
        e(4, f"const long {lo} = {sh} * {h} + {oh};")
        e(4, f"if ({nxt} < {lo}) {nxt} = {lo};")
        e(4, f"for (; {nxt} < {lo} + {span}; ++{nxt}) {{")
        e(5, f"const long {y} = {nxt};")
        e(5, f"float* restrict {trow} = {T} + {wq * L} * ({y} % {span});")
        e(5, f"if (!((unsigned long)({y} - {pt}) < {H}UL)) {{")
        e(6, f"for (long {q} = 0; {q} < {wp * L}; ++{q}) {trow}[{q}] = 0.0f;")
        e(6, "continue;")
        e(5, "}")
        if pl:
            e(5, f"for (long {q} = 0; {q} < {pl * L}; ++{q}) {trow}[{q}] = 0.0f;")
        if (pl + W) < wp:
            e(5, f"for (long {q} = {(pl + W) * L}; {q} < {wp * L}; ++{q}) {trow}[{q}] = 0.0f;")
        e(5, f"const float* restrict {self.srow} = {self.xb} + {W} * ({y} - {pt});")
        # a row's last transpose writes all 16 positions: past the row's end (its slot's slack)
        # with zeros
        e(5, f"for (long {self.x} = 0; {self.x} < {W}; {self.x} += {L}) ac_transpose16({self.srow} + {self.x}, {H * W}, "
             f"(int)AC_MIN({L}, {W} - {self.x}), {trow} + {L} * ({pl} + {self.x}), {L});")
        e(4, "}")
        prow = [f(f"t{r}") for r in range(KH)]
        for r in range(KH):
            e(4, f"const float* restrict {prow[r]} = {T} + {wq * L} * (({lo} + {dh * r}) % {span}) + {L * ow};")
        e(4, f"ac_v16* restrict {self.out16} = {self.orow} + {Wo} * {h};")
        e(4, f"long {w} = 0;")
        group = 4
        accs = [f(f"a{j}") for j in range(group)]
        for g, cond in ((group, f"{w} + {group} <= {Wo}"), (1, f"{w} < {Wo}")):
            e(4, f"for (; {cond}; {w} += {g}) {{")
            for j in range(g):
                e(5, f"ac_v16 {accs[j]} = {{0}};")
            for t, (r, s) in enumerate(self.taps):
                off = dw * s * L
                for j in range(g):
                    e(5, f"{accs[j]} += {self.wv[t]} * *(const ac_v16*)({prow[r]} + {L * sw} * ({w} + {j}) + {off});")
            for j in range(g):
                e(5, f"{self.out16}[{w} + {j}] = {accs[j]};")
            e(4, "}")
        e(3, "}")

    def transpose_back(self) -> None:
        """The blocked outputs back to the channels' planes 16 positions at a time (the output
        plane is contiguous, so positions run flat across rows: a 7x7 plane is 3 full vectors
        and one of 1, not 7 rows of 7), the epilogue applied along them."""
        cb, e, f, L, writer = self.cb, self.e, self.f, BLOCK_CHANNELS, self.writer
        tile, j, pos = f("tile"), f("j"), f("p")
        e(3, f"float {tile}[{L}][{L}] __attribute__((aligned(64)));")
        P = self.ext[cb.h] * self.ext[cb.w]
        full = P // L * L

        def back(depth: int, start: str, count: int) -> None:
            e(depth, f"ac_transpose16((const float*)({self.orow} + {start}), {L}, {L}, &{tile}[0][0], {L});")
            e(depth, f"for (long {self.i} = 0; {self.i} < {L}; ++{self.i}) {{")
            e(depth + 1, f"const long {self.cv[cb.c]} = {self.base} + {self.i};")
            e(depth + 1, "#pragma omp simd")
            e(depth + 1, f"for (long {j} = 0; {j} < {count}; ++{j}) {{")
            e(depth + 2, f"const long {self.h} = 0, {self.w} = {start} + {j};")
            e(depth + 2, f"const float {v} = {tile}[{self.i}][{j}];")
            writer.epilogue_store(self.pk, depth + 2, v, lambda access: f"{writer.cname[access.tensor]}[{self.flat(access)}]")
            e(depth + 1, "}")
            e(depth, "}")
        v = f("v")
        if full:
            e(3, f"for (long {pos} = 0; {pos} < {full}; {pos} += {L}) {{")
            back(4, pos, L)
            e(3, "}")
        if P - full:
            back(3, str(full), P - full)
