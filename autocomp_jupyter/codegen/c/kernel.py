"""A kernel's C function, and which strategy writes each of its statements.

`_KernelWriter` joins the strategy writers (one module each) over their shared base
(`writer.WriterBase`). `function` writes the kernel: its reductions' targets filled with their
initial value, then the strategy the host analysis (`host_strategy`) gives the kernel —

- a flat copy (`flat_copy`: a whole tensor copied element for element, one straight pass
  whatever the schedule's tiles);
- a window reduction as direct rows (`direct.py`: `window`), the rest over its full nest;
- a packed contraction (`contraction`), the rest over its full nest, in program order:
  direct rows (`direct.py`: rows, a GEMV's shared row, dot products), vector rows
  (`vector_rows.py`), channel blocks (`blocked.py`), Winograd (`winograd.py`) or the
  packed GEMM (`packed.py`);
- else the schedule's loop nest (`nest.py`);

then the non-f32 reductions rounded once complete and the online-softmax buffers freed. A
kernel with `compute_at` always runs its tree (the other strategies run whole nests).
"""
from __future__ import annotations

import math

from ...host_strategy.access import flat_offsets, in_range, one_to_one
from ...host_strategy.contraction import packed_contraction
from ...host_strategy.depthwise import channel_blocks, vector_rows
from ...host_strategy.gemm import Packed
from ...host_strategy.rows import DirectRows, direct_rows, window_rows
from ...host_strategy.winograd import winograd
from ...ir.program import Access
from ...ir.schedule import Schedule
from .blocked import BlockedWriter
from .ctext import c_double, c_float
from .direct import DirectWriter
from .layout import buffer_ctype
from .nest import NestWriter
from .packed import PackedWriter
from .vector_rows import VectorRowsWriter
from .winograd import WinogradWriter


class _KernelWriter(NestWriter, PackedWriter, WinogradWriter, DirectWriter, BlockedWriter, VectorRowsWriter):
    """Writes one kernel's C function (`function`), each statement by its strategy."""

    def function(self, fn: str) -> str:
        """The kernel's C function `fn`, after the static helpers it calls."""
        k = self.kernel
        self.fn = fn
        self.signature()
        # A kernel with compute_at runs its tree: the packed and window paths run whole nests.
        pk = packed_contraction(k, self.schedule) if not k.compute_at else None
        win = window_rows(k, self.schedule) if pk is None and not k.compute_at else None
        self.initial_values({pk.index} if pk is not None else ({win[0]} if win is not None else set()))
        self.running_max_buffers()
        self.body(pk, win)
        self.round_accumulators()
        for name in self.seen.values():
            self.emit(1, f"free({name});")
        self.emit(0, "}")
        return "\n\n".join(self.helpers + ["\n".join(self.out)])

    def signature(self) -> None:
        """The function's head: a buffer per tensor (const where the kernel only reads it),
        compiled without FMA contraction where an integer statement needs it (`AC_EXACT`)."""
        k = self.kernel
        written = {s.target for s in k.statements}
        params = []
        for t in k.tensors:
            const = "" if t.name in written else "const "
            params.append(f"{const}{buffer_ctype(t.dtype)}* restrict {self.cname[t.name]}")
        exact = self.exact_needed()
        self.emit(0, f"/* kernel {k.name}: ops {', '.join(k.ops)} */")
        self.emit(0, f"static {'AC_EXACT ' if exact else ''}void {self.fn}({', '.join(params)}) {{")
        if exact:
            self.emit(1, "AC_EXACT_BODY")

    def initial_values(self, own: set[int]) -> None:
        """Every reduction's target filled with its initial value (0, or -INFINITY for
        `max=`) when the kernel starts, so any tile order is correct; except the statements a
        strategy stores whole (`own`) and the targets computed at a tile (restarted in each
        tile: `restart_region`)."""
        k = self.kernel
        computed = {t for t, _, _ in k.compute_at}
        for index, s in enumerate(k.statements):
            if s.reduce is not None and index not in own and s.target not in computed:
                t = self.tensor(s.target)
                var = self.namer.fresh("n")
                self.emit(1, "#pragma omp parallel for simd num_threads(ac_team())" if t.size >= (1 << 16) and self.parallel
                          else "#pragma omp simd")
                init = 0.0 if s.reduce == "+" else -math.inf
                self.emit(1, f"for (long {var} = 0; {var} < {t.size}L; ++{var}) {self.cname[t.name]}[{var}] = "
                             f"{c_double(init) if self.ctype(t.name) == 'double' else c_float(init)};")

    def running_max_buffers(self) -> None:
        """Online softmax (ir.program.Rescale): each rescaled sum keeps the running max it last
        saw, per element of the max, from -inf (`rescale_sums`)."""
        for index, s in enumerate(self.kernel.statements):
            if s.rescale is not None and s.reduce == "+":
                n = self.tensor(s.rescale.tensor).size
                name = self.seen[index] = self.namer.fresh(f"seen_{self.cname[s.rescale.tensor]}")
                var = self.namer.fresh("n")
                self.emit(1, f"double* {name} = (double*)malloc({n}UL * sizeof(double));")
                self.emit(1, f"for (long {var} = 0; {var} < {n}L; ++{var}) {name}[{var}] = -INFINITY;")

    def body(self, pk: Packed | None, win: tuple[int, DirectRows] | None) -> None:
        """The kernel's statements by their strategy: a flat copy, a window reduction or a
        packed contraction with the rest over its full nest, or the schedule's nest."""
        from ...ir.loopnest import lower

        copy = self.flat_copy() if pk is None and win is None and not self.kernel.compute_at else None
        if copy is not None:
            # a copy of a whole tensor, element for element in the same order (a reshape of a
            # transpose's result): one straight pass, whatever the schedule's tiles (BERT's
            # reshape before the output projection, tiled by 2 along its rows: 0.2 ms for 393 KB)
            dst, src, n = copy
            var = self.namer.fresh("x")
            self.emit(1, "#pragma omp parallel for simd num_threads(ac_team())" if n >= (1 << 16) and self.parallel
                      else "#pragma omp simd")
            self.emit(1, f"for (long {var} = 0; {var} < {n}L; ++{var}) {dst}[{var}] = {src}[{var}];")
        elif win is not None:    # a window reduction as direct rows, the rest over its full nest
            self.emit_nest(lower(Schedule.default(self.kernel, self.schedule.levels)), window=win)
        elif pk is None:
            self.emit_nest(lower(self.schedule))
        else:
            # The packed path: every statement over its full nest, in program order (the
            # untiled schedule's tree), the contraction packed with the schedule's blocks and
            # its fused epilogue in its store.
            self.emit_nest(lower(Schedule.default(self.kernel, self.schedule.levels)), pk)

    def round_accumulators(self) -> None:
        """Non-f32 reductions rounded to their dtype once complete (see `rounded`)."""
        for s in self.kernel.statements:
            if s.target in self.rounded_accumulators:
                t, var = self.tensor(s.target), self.namer.fresh("n")
                self.emit(1, f"for (long {var} = 0; {var} < {t.size}L; ++{var}) "
                             f"{self.cname[t.name]}[{var}] = {self.rounded(t.name, f'{self.cname[t.name]}[{var}]')};")

    # ------------------------------------------------------------------ strategies

    def flat_copy(self) -> "tuple[str, str, int] | None":
        """(target, source, elements) when the kernel is one statement copying a whole tensor
        of the same buffer type element for element (its target and its one read at the same
        flat offset at every point, covering the target once); else None."""
        k = self.kernel
        if len(k.statements) != 1:
            return None
        st = k.statements[0]
        reads = st.reads()
        if st.reduce is not None or len(reads) != 1 or not isinstance(st.expr, Access) or st.expr != reads[0] \
                or st.domain:
            return None
        src, dst = reads[0], Access(st.target, st.target_indices)
        t_dst, t_src = self.tensor(dst.tensor), self.tensor(src.tensor)
        if src.tensor == dst.tensor or t_dst.size != t_src.size or self.ctype(dst.tensor) != self.ctype(src.tensor) \
                or t_dst.dtype != t_src.dtype or math.prod(st.extents.values()) != t_dst.size:
            return None
        def offsets(a: Access):     # loops of one trip do not move
            coeff, const = flat_offsets(k, a)
            return {l: c for l, c in coeff.items() if c and st.extents[l] > 1}, const
        if offsets(src) != offsets(dst) or not all(in_range(k, src, st.extents)):
            return None
        coeff, const = offsets(dst)
        if const != 0 or not one_to_one(coeff, list(st.extents), st.extents) \
                or sum(c * (st.extents[l] - 1) for l, c in coeff.items()) + 1 != t_dst.size:
            return None
        return self.cname[dst.tensor], self.cname[src.tensor], t_dst.size

    def contraction(self, pk: Packed) -> None:
        """Statement `pk.index`, a packed contraction, by the first strategy that takes it:
        direct rows (as dot products, vector rows, channel blocks or plain rows), Winograd, or
        the packed GEMM."""
        dr = direct_rows(self.kernel, pk)
        if dr is not None:
            if dr.dots:
                return self.dots(pk, dr)
            vr = vector_rows(self.kernel, pk, dr)
            if vr is not None:
                return self.vector_rows(pk, dr, vr)
            cb = channel_blocks(self.kernel, pk, dr)
            if cb is not None:
                return self.blocked(pk, dr, cb)
            return self.direct(pk, dr)
        wg = winograd(self.kernel, pk)
        if wg is not None:
            return self.winograd(pk, wg)
        return self.packed(pk)
