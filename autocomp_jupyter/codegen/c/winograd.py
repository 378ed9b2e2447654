"""Winograd in C: a 3x3 stride-1 convolution as Winograd F(2x2, 3x3)
(`host_strategy.winograd.winograd` decides which: f32, weights a param, output rows at least
7 wide, at least 32 channels in and out). 16 multiplies per 2x2 tile and channel pair instead
of 36, exact up to float rounding (the transforms' coefficients are 0, ±1, ±1/2).

The weights are transformed once per weights buffer (U = G g G^T, kept as 16-wide f panels, as
a prepacked operand is); then per block of tile panels (a block's transformed input and
products within L2), all threads in each phase: the input transform (V = B^T d B, 8 tiles of a
tile row as vectors), 16 GEMMs through the same 8x16 microkernel as the packed GEMM
(M[k] = V[k] U[k] over the channels), and the output transform (A^T m A) with the fused
epilogue where each output is stored.
"""
from __future__ import annotations

from ...host_strategy.access import flat_offsets, substitute
from ...host_strategy.epilogue import epilogue_point
from ...host_strategy.gemm import GEMM_NR, Packed
from ...host_strategy.winograd import WINOGRAD_PANEL, Winograd
from ...ir.program import Access
from .writer import WriterBase


class WinogradWriter(WriterBase):
    """Writes the Winograd strategy (see the module docstring)."""

    def winograd(self, pk: Packed, wg: Winograd) -> None:
        """Statement `pk.index`, a 3x3 stride-1 convolution, as Winograd F(2x2, 3x3) (see
        host_strategy.winograd.Winograd), the statements `pk.epilogue` applied where each
        output is stored: weights transformed once (as a prepacked operand), then per block of
        tile panels (one OpenMP loop over the blocks) the input transform, 16 GEMMs through the
        same 8x16 microkernel, and the output transform."""
        _WinogradConv(self, pk, wg).write()


class _WinogradConv:
    """One convolution's Winograd code being written: its tile layout and blocks, the C names
    it takes, then the steps in the order the C runs them."""

    def __init__(self, writer: WinogradWriter, pk: Packed, wg: Winograd):
        self.writer, self.pk, self.wg = writer, pk, wg
        self.k = writer.kernel
        self.stmt = self.k.statements[pk.index]
        self.ext = ext = dict(pk.extents)
        f = self.f = writer.namer.fresh
        self.e = writer.emit
        self.NB = pk.size("batch")
        self.F, self.C, self.H, self.W = ext[wg.f], ext[wg.c], ext[wg.h], ext[wg.w_loop]
        self.TH, self.TWP, self.TWV = wg.tiles(ext)
        self.P = P = WINOGRAD_PANEL
        self.FPAN = -(-self.F // GEMM_NR)
        self.FP = self.FPAN * GEMM_NR
        self.PPI = self.TH * self.TWP // P      # panels per batch item: tile t of one is at row t / TWP, column t % TWP
        self.R = max(1, P // self.TWP)          # tile rows a panel holds
        self.NP = self.NB * self.PPI
        self.PB = min(wg.block_panels(ext), self.NP)
        self.NBLK = -(-self.NP // self.PB)
        # V[k] and M[k] strides, a line more than whole blocks: a power of two apart (64 KiB),
        # the 16 values of a tile fell into one cache set
        self.KS, self.MS = self.PB * self.C * P + 16, self.PB * P * self.FP + 16
        anchors = self.k.loop_map(pk.index)
        self.parallel = bool(set(writer.parallel) & {anchors.get(l) for l in pk.batch + pk.m + pk.n})
        self.xname, self.wname = writer.cname[wg.x.tensor], writer.cname[wg.w.tensor]
        self.U, self.Usrc, self.V, self.Mb, self.Yb = (
            f(f"{self.wname}_winograd"), f(f"{self.wname}_winograd_src"), f("V"), f("Mprod"), f("Ybuf"))
        self.blk, self.p0, self.pb, self.pp, self.pan, self.bt, self.th, self.tw0, self.tw, self.cv, self.r, \
            self.kk, self.fp, self.p, self.cc, self.fv, self.q = (f(x) for x in (
                "blk", "p0", "pb", "pp", "pan", "bt", "th", "tw0", "tw", "c", "r", "k", "fp", "p", "cc", "f", "q"))
        self.hv, self.wv = f(wg.h), f(wg.w_loop)
        self.bvar = {l: f(l) for l in pk.batch}
        self.cvar = {**self.bvar, wg.f: self.fv, wg.h: self.hv, wg.w_loop: self.wv}

    def text(self, access: Access, loops: dict) -> str:
        coeff, const = flat_offsets(self.k, access)
        terms = [f"{cv_} * {loops[l]}" if cv_ != 1 else loops[l] for l, cv_ in coeff.items() if cv_ and l in loops]
        return f"{self.writer.cname[access.tensor]}[{' + '.join(terms + ([str(const)] if const or not terms else []))}]"

    def batch_decls(self, depth: int) -> None:
        inner = 1
        for l in reversed(self.pk.batch):
            self.e(depth, f"const long {self.bvar[l]} = ({self.bt} / {inner}) % {self.ext[l]};")
            inner *= self.ext[l]

    def write(self) -> None:
        e, parallel = self.e, self.parallel
        self.store_lines()
        self.comment()
        self.transform_weights()
        # the blocks one after the other, all threads in each phase (its loop shared, a barrier
        # after it): V and M are shared, a block of 7 panels (14x14) still splits in two. Static
        # halves: claimed in chunks of 4 (schedule(dynamic, 4)) the 56x56 conv on 2 threads took
        # 1.24 ms against 0.79 (each thread's chunks scattered over the block's panels)
        e(2, f"float* {self.V} = ac_scratch(0, {16 * self.KS * 4}UL);      /* V[k][panel][c][{self.P}] */")
        e(2, f"float* {self.Mb} = ac_scratch(1, {16 * self.MS * 4}UL);    /* M[k][tile][f] */")
        nth, t_done, t_start = self.f("nth"), self.f("t_done"), self.f("t_start")
        if parallel:
            e(2, f"const int {nth} = ac_team();")
            e(2, f"double {t_done}[{nth} * 8];    /* per thread: when it finished the last block's outputs */")
            e(2, f"const double {t_start} = ac_now();")
            e(2, f"#pragma omp parallel num_threads({nth})")
        e(2, "{")
        e(3, f"float* {self.Yb} = ac_scratch(2, {4 * self.FP * 4}UL);    /* one tile's 2x2 outputs [q][f] */")
        e(3, f"for (long {self.blk} = 0; {self.blk} < {self.NBLK}; ++{self.blk}) {{")
        e(4, f"const long {self.p0} = {self.blk} * {self.PB}, {self.pb} = AC_MIN({self.PB}, {self.NP} - {self.p0});")
        self.input_transform()
        self.gemms()
        self.output_transform()
        e(3, "}")
        if parallel:
            e(3, f"{t_done}[ac_thread() * 8] = ac_now();")
        e(2, "}")
        if parallel:
            e(2, f"ac_team_waited({t_done}, {nth}, {t_start});")
        e(1, "}")

    def store_lines(self) -> None:
        """The store of one output `v` at (batch, f, h, w): the output and the fused
        statements, computed there."""
        pk, k, writer, stmt, cvar = self.pk, self.k, self.writer, self.stmt, self.cvar
        fused = set(pk.epilogue)
        readers = {a.tensor for s, st in enumerate(k.statements)
                   if s != pk.index and s not in fused for a in st.reads()}

        def needed(t: str) -> bool:
            return t not in k.internals or t in readers
        v = self.v = self.f("v")
        lines = self.lines = []
        if needed(stmt.target):
            lines.append(f"{self.text(Access(stmt.target, stmt.target_indices), cvar)} = {v};")
        local = {stmt.target: v}
        for s in pk.epilogue:
            st = k.statements[s]
            at = epilogue_point(k, pk.index, s)

            def access_at(a: Access, at=at):
                return local[a.tensor] if a.tensor in local else self.text(substitute(a, at), cvar)
            value = writer.expr_c(st.expr, {}, st, access=access_at)
            var = self.f(f"{writer.cname[st.target]}_v")
            lines.append(f"const float {var} = {value};")
            local[st.target] = var
            if needed(st.target):
                lines.append(f"{self.text(substitute(Access(st.target, st.target_indices), at), cvar)} = {var};")

    def comment(self) -> None:
        e = self.e
        epi = ", ".join(str(self.k.statements[s]).split("    #")[0] for s in self.pk.epilogue)
        e(1, f"/* {str(self.stmt).split('    #')[0]} */")
        e(1, f"/* Winograd F(2x2, 3x3): {self.NB} x {self.F} x {self.C} channels, {self.H}x{self.W} outputs as "
             f"{self.TH} x {self.TWV} tiles of 2x2 (rows padded to {self.TWP}: panels of {self.P}, {self.R} tile row(s) "
             f"each), blocks of {self.PB} panels; 16 GEMMs per block, microkernel {self.P}x{GEMM_NR}"
             + (f"; applied in its store: {epi}" if epi else "") + " */")
        e(1, "{")

    def transform_weights(self) -> None:
        """U[k][f panel][c][16]: G g G^T, G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1], once per
        weights buffer."""
        e, wg, U, Usrc, wname, fv, cv, F, C, FP = (self.e, self.wg, self.U, self.Usrc, self.wname, self.fv, self.cv,
                                                   self.F, self.C, self.FP)
        wcoeff, wconst = flat_offsets(self.k, wg.w)
        e(2, f"static float* {U} = NULL;")
        e(2, f"static const void* {Usrc} = NULL;")
        e(2, f"if ({Usrc} != (const void*){wname}) {{")
        e(3, f"if (!{U}) {U} = (float*)ac_kept({16 * FP * C * 4}UL);")
        e(3, f"for (long {fv} = 0; {fv} < {FP}; ++{fv})")
        e(4, f"for (long {cv} = 0; {cv} < {C}; ++{cv}) {{")
        e(5, "float g[3][3], t[4][3], u[4][4];")
        e(5, "for (int i = 0; i < 3; ++i)")
        e(6, "for (int j = 0; j < 3; ++j)")
        e(7, f"g[i][j] = {fv} < {F} ? {wname}[{wconst} + {wcoeff.get(wg.f, 0)} * {fv} + {wcoeff.get(wg.c, 0)} * {cv} + "
             f"{wcoeff.get(wg.r, 0)} * i + {wcoeff.get(wg.s, 0)} * j] : 0.0f;")
        e(5, "for (int j = 0; j < 3; ++j) {")
        e(6, "t[0][j] = g[0][j]; t[1][j] = 0.5f * (g[0][j] + g[1][j] + g[2][j]);")
        e(6, "t[2][j] = 0.5f * (g[0][j] - g[1][j] + g[2][j]); t[3][j] = g[2][j];")
        e(5, "}")
        e(5, "for (int i = 0; i < 4; ++i) {")
        e(6, "u[i][0] = t[i][0]; u[i][1] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);")
        e(6, "u[i][2] = 0.5f * (t[i][0] - t[i][1] + t[i][2]); u[i][3] = t[i][2];")
        e(5, "}")
        e(5, f"for (int kk = 0; kk < 16; ++kk) {U}[((long)kk * {self.FPAN} + {fv} / {GEMM_NR}) * {C * GEMM_NR}L + "
             f"{cv} * {GEMM_NR} + {fv} % {GEMM_NR}] = u[kk / 4][kk % 4];")
        e(4, "}")
        e(3, f"{Usrc} = (const void*){wname};")
        e(2, "}")

    def input_transform(self) -> None:
        """B^T d B, B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], for the block's panels and
        channels, 8 tiles of a tile row at once."""
        e, wg, P, R, TWP, cv, r = self.e, self.wg, self.P, self.R, self.TWP, self.cv, self.r
        pp, pan, bt, th, tw0 = self.pp, self.pan, self.bt, self.th, self.tw0
        if self.parallel:
            e(4, "#pragma omp for collapse(2) schedule(static)")
        e(4, f"for (long {pp} = 0; {pp} < {self.pb}; ++{pp})")
        e(5, f"for (long {cv} = 0; {cv} < {self.C}; ++{cv}) {{")
        e(6, f"const long {pan} = {self.p0} + {pp}, {bt} = {pan} / {self.PPI}, {th} = ({pan} % {self.PPI}) * {P} / {TWP}, "
             f"{tw0} = ({pan} % {self.PPI}) * {P} % {TWP};")
        self.batch_decls(6)
        xcoeff, xconst = flat_offsets(self.k, wg.x)
        xh, xw, xc = xcoeff.get(wg.h, 0), xcoeff.get(wg.w_loop, 0), xcoeff.get(wg.c, 0)
        xs = self.k.tensor(wg.x.tensor).shape
        HI, WI = xs[-2], xs[-1]
        # the batch item's and channel's plane (hi, wi below are the input's own row and column)
        xb = " + ".join([str(xconst - wg.ph * xh - wg.pw * xw)]
                        + [f"{xcoeff[l]} * {self.bvar[l]}" for l in self.pk.batch if xcoeff.get(l)])
        e(6, f"const float* restrict xc = {self.xname} + ({xb}) + {xc} * {cv};")
        e(6, f"float* restrict vo = {self.V} + ({pp} * {self.C} + {cv}) * {P};")
        # the 4 input rows under the panel's 8 tiles (18 columns each, zero outside the input),
        # then the transform for the 8 tiles as vectors (written out: gcc keeps loops over
        # small local arrays scalar)
        # (a panel of R tile rows: 4 + 2 (R - 1) input rows)
        tcols = min(P, TWP)
        seg, segr = 2 * tcols + 2, 2 * R + 2
        e(6, f"float seg[{segr}][{seg}];")
        e(6, f"for (int i = 0; i < {segr}; ++i) {{")
        e(7, f"const long hi = 2 * {th} + i + {wg.ph};")
        e(7, "#pragma omp simd")
        e(7, f"for (int j = 0; j < {seg}; ++j) {{")
        e(8, f"const long wi = 2 * {tw0} + j + {wg.pw};")
        e(8, f"seg[i][j] = (unsigned long)hi < {HI}UL && (unsigned long)wi < {WI}UL ? xc[{xh} * hi + {xw} * wi] : 0.0f;")
        e(7, "}")
        e(6, "}")
        e(6, "#pragma omp simd")
        e(6, f"for (long {r} = 0; {r} < {P}; ++{r}) {{")
        row0, col0 = (f"2 * ({r} / {tcols})", f"2 * ({r} % {tcols})") if R > 1 else ("0", f"2 * {r}")

        def sg(i, j):
            return f"seg[{row0} + {i}][{col0} + {j}]" if R > 1 else f"seg[{i}][{col0} + {j}]"
        for j in range(4):
            e(7, f"const float t0{j} = {sg(0, j)} - {sg(2, j)}, t1{j} = {sg(1, j)} + {sg(2, j)}, "
                 f"t2{j} = {sg(2, j)} - {sg(1, j)}, t3{j} = {sg(1, j)} - {sg(3, j)};")
        for i in range(4):
            for j, ex in enumerate((f"t{i}0 - t{i}2", f"t{i}1 + t{i}2", f"t{i}2 - t{i}1", f"t{i}1 - t{i}3")):
                e(7, f"vo[{4 * i + j} * {self.KS}L + {r}] = {ex};")
        e(6, "}")
        e(5, "}")

    def gemms(self) -> None:
        """The 16 GEMMs: M[k][tile][f] = sum_c V[k][tile][c] U[k][c][f]."""
        e, P, FP, C, r, kk, fp, pp, p, cc = (self.e, self.P, self.FP, self.C, self.r, self.kk, self.fp, self.pp,
                                             self.p, self.cc)
        if self.parallel:
            e(4, "#pragma omp for collapse(2) schedule(static)")
        e(4, f"for (long {kk} = 0; {kk} < 16; ++{kk})")
        e(5, f"for (long {fp} = 0; {fp} < {self.FPAN}; ++{fp}) {{")
        e(6, f"const float* restrict bp = {self.U} + ({kk} * {self.FPAN} + {fp}) * {C * GEMM_NR}L;")
        e(6, f"for (long {pp} = 0; {pp} < {self.pb}; ++{pp}) {{")
        e(7, f"const float* restrict ap = {self.V} + {kk} * {self.KS}L + {pp} * {C * P}L;")
        e(7, f"float acc[{P}][{GEMM_NR}] = {{{{0.0f}}}};")
        e(7, f"for (long {p} = 0; {p} < {C}; ++{p}) {{")
        e(8, f"#pragma GCC unroll {P}")
        e(8, f"for (long {r} = 0; {r} < {P}; ++{r}) {{")
        e(9, "#pragma omp simd")
        e(9, f"for (long {cc} = 0; {cc} < {GEMM_NR}; ++{cc}) acc[{r}][{cc}] += ap[{p} * {P} + {r}] * bp[{p} * {GEMM_NR} + {cc}];")
        e(8, "}")
        e(7, "}")
        e(7, f"float* restrict mo = {self.Mb} + {kk} * {self.MS}L + {pp} * {P * FP}L + {fp} * {GEMM_NR};")
        e(7, f"#pragma GCC unroll {P}")
        e(7, f"for (long {r} = 0; {r} < {P}; ++{r}) {{")
        e(8, "#pragma omp simd")
        e(8, f"for (long {cc} = 0; {cc} < {GEMM_NR}; ++{cc}) mo[{r} * {FP} + {cc}] = acc[{r}][{cc}];")
        e(7, "}")
        e(6, "}")
        e(5, "}")

    def output_transform(self) -> None:
        """A^T m A, A^T = [1 1 1 0; 0 1 -1 -1], and the store with the epilogue; no barrier
        after it (the next block's input transform writes V only, and its barrier holds the
        GEMMs that write M until every thread is through), so that the threads' finishing
        times tell the team whether one was held up (ac_team_waited)."""
        e, P, FP, F, r, fv, q, Yb = self.e, self.P, self.FP, self.F, self.r, self.fv, self.q, self.Yb
        pp, pan, bt, th, tw0, tw, hv, wv = self.pp, self.pan, self.bt, self.th, self.tw0, self.tw, self.hv, self.wv
        if self.parallel:
            e(4, "#pragma omp for collapse(2) schedule(static) nowait")
        e(4, f"for (long {pp} = 0; {pp} < {self.pb}; ++{pp})")
        e(5, f"for (long {r} = 0; {r} < {P}; ++{r}) {{")
        e(6, f"const long {pan} = {self.p0} + {pp}, {bt} = {pan} / {self.PPI}, {th} = ({pan} % {self.PPI}) * {P} / "
             f"{self.TWP}, {tw0} = ({pan} % {self.PPI}) * {P} % {self.TWP};")
        e(6, f"const long {tw} = {tw0} + {r} % {min(P, self.TWP)}, {th}_r = {th} + {r} / {min(P, self.TWP)};")
        e(6, f"if ({tw} >= {self.TWV}) continue;     /* a tile of the row's padding */")
        self.batch_decls(6)
        e(6, f"const float* restrict mt = {self.Mb} + ({pp} * {P} + {r}) * {FP}L;")
        e(6, "#pragma omp simd")
        e(6, f"for (long {fv} = 0; {fv} < {F}; ++{fv}) {{")
        m = [[f"mt[{4 * i + j} * {self.MS}L + {fv}]" for j in range(4)] for i in range(4)]
        for j in range(4):
            e(7, f"const float s0{j} = {m[0][j]} + {m[1][j]} + {m[2][j]}, s1{j} = {m[1][j]} - {m[2][j]} - {m[3][j]};")
        for i in range(2):
            e(7, f"{Yb}[{2 * i} * {FP} + {fv}] = s{i}0 + s{i}1 + s{i}2;")
            e(7, f"{Yb}[{2 * i + 1} * {FP} + {fv}] = s{i}1 - s{i}2 - s{i}3;")
        e(6, "}")
        e(6, f"for (long {q} = 0; {q} < 4; ++{q}) {{")
        e(7, f"const long {hv} = 2 * {th}_r + {q} / 2, {wv} = 2 * {tw} + {q} % 2;")
        e(7, f"if ({hv} >= {self.H} || {wv} >= {self.W}) continue;")
        e(7, "#pragma omp simd")
        e(7, f"for (long {fv} = 0; {fv} < {F}; ++{fv}) {{")
        e(8, f"const float {self.v} = {Yb}[{q} * {FP} + {fv}];")
        for line in self.lines:
            e(8, line)
        e(7, "}")
        e(6, "}")
        e(5, "}")
