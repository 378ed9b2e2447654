"""Direct rows in C: one-row contractions and window reductions accumulated row by row in a
local array, no packing (`host_strategy.rows` decides which kernels).

- `direct`: a one-row packed contraction (M = 1: a depthwise convolution with few reduction
  steps, a GEMV against B[k, n]): per batch item and outer n point, `dr.width` outputs
  accumulated in a local row, DIRECT_BLOCK outputs at a time through all the reduction steps
  (in registers), then stored with the fused epilogue. Packing a one-row GEMM reuses
  nothing: every B element is used once, so its 16-wide panels cost more than its few
  multiply-adds (MobileNetV2's stride-2 3x3 depthwise: 1.78 ms packed);
- `split_row`: a GEMV's one long row shared by the threads (`gemv_split`), each streaming
  its part of every weight row, so a classifier's weights stream on every core;
- `dots`: a GEMV against B[n, k] (a classifier's Gemm with transB): each output one dot
  product, vectorised along the contiguous k loop;
- `window`: a window reduction (max or average pooling), each output row reduced in a
  local array over the window from a padded copy (a bounds-checked read per point ran at
  0.8 GFLOP/s on ResNet-50's max pool).
"""
from __future__ import annotations

import math

from ...host_strategy.access import flat_offsets
from ...host_strategy.gemm import GEMM_NR, Packed
from ...host_strategy.rows import DIRECT_K_MAX, WINDOW_SHARED_COPY_MIN, DirectRows, direct_slab, gemv_split
from ...ir.program import Access
from .ctext import c_affine, c_float, flat_reader
from .writer import WriterBase

# (schedule dynamic), a thread whose core another process holds takes fewer (static halves
# ran MobileNetV2's depthwise convs slower on 2 threads than on 1 with the machine loaded).
DIRECT_CHUNK = 4
# Outputs of a direct row accumulated at a time through all its reduction steps (4 AVX-512 vectors).
DIRECT_BLOCK = 64
# How far ahead (floats) a GEMV of direct rows prefetches its weight rows.
DIRECT_PREFETCH_FLOATS = 8192


class DirectWriter(WriterBase):
    """Writes the direct-row strategies (see the module docstring)."""

    def direct(self, pk: Packed, dr: DirectRows) -> None:
        """Statement `pk.index` as direct rows (`direct_rows`): per batch item and outer n
        point, `dr.width` outputs accumulated in a local row (vectorised), then stored with
        the statements `pk.epilogue` applied."""
        _DirectRows(self, pk, dr).write()

    def split_row(self, pk: Packed, d: int, taps, acc: str, length: int, w: str, flat) -> None:
        """The one row of a GEMV (`gemv_split`) shared by the threads: each accumulates its own
        contiguous run of the outputs (whole vectors) over all the reduction steps, streaming
        its part of every weight row, then stores it with the epilogue."""
        f, e = self.namer.fresh, self.emit
        nth, t_done, t_start, tid, lo, hi, jj, v = (f(x) for x in ("nth", "t_done", "t_start", "tid", "lo", "hi",
                                                                    "jj", "v"))
        vecs = -(-length // GEMM_NR)
        e(d, "/* the row shared by the threads: each its own run of whole vectors, over all of K */")
        e(d, f"const int {nth} = ac_team();")
        e(d, f"double {t_done}[{nth} * 8];    /* per thread: when it ran out of outputs */")
        e(d, f"const double {t_start} = ac_now();")
        e(d, f"#pragma omp parallel num_threads({nth})")
        e(d, "{")
        e(d + 1, f"const int {tid} = ac_thread();")
        e(d + 1, f"const long {lo} = {vecs}L * {tid} / {nth} * {GEMM_NR}, "
                 f"{hi} = AC_MIN({length}L, {vecs}L * ({tid} + 1) / {nth} * {GEMM_NR});")
        e(d + 1, f"float {acc}[{length}];")
        e(d + 1, "#pragma omp simd")
        e(d + 1, f"for (long {jj} = {lo}; {jj} < {hi}; ++{jj}) {acc}[{jj}] = 0.0f;")
        taps(d + 1, acc, "0", f"{hi} - {lo}", False, base=lo)
        e(d + 1, "#pragma omp simd")
        e(d + 1, f"for (long {w} = {lo}; {w} < {hi}; ++{w}) {{")
        e(d + 2, f"const float {v} = {acc}[{w}];")
        self.epilogue_store(pk, d + 2, v, lambda access: f"{self.cname[access.tensor]}[{flat(access)}]")
        e(d + 1, "}")
        e(d + 1, f"{t_done}[{tid} * 8] = ac_now();")
        e(d, "}")
        e(d, f"ac_team_waited({t_done}, {nth}, {t_start});")
        for x in range(d - 1, 1, -1):
            e(x, "}")
        e(1, "}")

    def dots(self, pk: Packed, dr: DirectRows) -> None:
        """Statement `pk.index` as one dot product per output (`direct_rows` with `dots`):
        the outputs (batch x N) shared by the threads, each summed along the contiguous
        innermost k loop in a local (`omp simd reduction`), then stored with its epilogue."""
        k = self.kernel
        stmt = k.statements[pk.index]
        ext = dict(pk.extents)
        f, e = self.namer.fresh, self.emit
        cv = {l: f(l) for l in stmt.loop_names}
        u, acc = f("u"), f("acc")

        flat = flat_reader(k, cv)
        e(1, f"/* {str(stmt).split('    #')[0]} */")
        e(1, f"/* direct dot products: batch {' '.join(pk.batch) or '-'} x N {' '.join(pk.n)} ({pk.size('n')}) "
             f"outputs, each over K {' '.join(pk.k)} ({pk.size('k')}), vectorised along {dr.w} */")
        outs = list(pk.batch) + list(pk.n)
        total = math.prod(ext[l] for l in outs)
        # one output at a time: summing 4 at once (4 weight rows streamed together) ran a
        # 2048 -> 1000 classifier from L3 in 0.117 ms against 0.133, but 8000 rows from DRAM
        # (64 MB) in 2.72 ms against 1.75
        parallel = bool(set(self.parallel) & {k.loop_map(pk.index).get(l) for l in outs})
        if parallel and total > 1:
            e(1, f"#pragma omp parallel for schedule(dynamic, {DIRECT_CHUNK * 4}) num_threads(ac_team())")
        e(1, f"for (long {u} = 0; {u} < {total}; ++{u}) {{")
        self.unflatten(2, u, outs, cv, ext)
        for l in pk.m:
            e(2, f"const long {cv[l]} = 0;")
        e(2, f"float {acc} = 0.0f;")
        d = 2
        for l in pk.k:
            if l == dr.w:
                e(d, f"#pragma omp simd reduction(+:{acc})")
            e(d, f"for (long {cv[l]} = 0; {cv[l]} < {ext[l]}; ++{cv[l]}) {{")
            d += 1
        e(d, f"{acc} += {self.cname[pk.a.tensor]}[{flat(pk.a)}] * {self.cname[pk.b.tensor]}[{flat(pk.b)}];")
        for x in range(d - 1, 1, -1):
            e(x, "}")
        self.epilogue_store(pk, 2, acc, lambda access: f"{self.cname[access.tensor]}[{flat(access)}]")
        e(1, "}")

    def window(self, index: int, dr: DirectRows) -> None:
        """Window reduction `index` (`window_rows`) as direct rows: per output row, `dr.width`
        outputs reduced in a local array over the window, reading a padded copy."""
        k = self.kernel
        stmt = k.statements[index]
        ext = stmt.extents
        f, e = self.namer.fresh, self.emit
        cv = {l: f(l) for l in stmt.loop_names}
        row, acc, src = f("row"), f("acc"), f("src")
        w = cv[dr.w]
        x = stmt.expr
        outer = [idx.single_loop for idx in stmt.target_indices][:-1]
        red = [l for l in stmt.loop_names if l not in outer and l != dr.w]
        e(1, f"/* {str(stmt).split('    #')[0]} */")
        e(1, f"/* direct rows of {dr.width} (the window read at step {dr.step}), reduced over {' '.join(red)} */")
        e(1, "{")
        xsrc, shape, shift = self.cname[x.tensor], None, None
        shared = False
        if any(lo or hi for lo, hi in dr.pads):
            xsrc = f(f"{xsrc}_padded")
            t = self.tensor(x.tensor)
            shape, shift = tuple(n + lo + hi for n, (lo, hi) in zip(t.shape, dr.pads)), [lo for lo, _ in dr.pads]
            # on several threads, the copy's rows shared too (serial, ResNet-50's 3.2 MB copy for
            # its max pool kept the pool at 0.35 ms on 2 threads against 0.30 on one)
            shared = bool(self.parallel) and math.prod(shape) >= WINDOW_SHARED_COPY_MIN
            self.out += ["    " * 2 + line for line in self.pad_copy(xsrc, x, list(dr.pads), 2, shared=shared)]
        rows = math.prod(ext[l] for l in outer)
        # static halves of the rows where the copy was shared: each thread then reads the
        # rows it padded itself, from its own cache (shared dynamically, ResNet-50's max pool
        # read the other core's rows and ran slower on 2 threads than on one)
        region = self.region_begin(2, "static" if shared else f"dynamic, {DIRECT_CHUNK}") \
            if self.parallel and rows > 1 else None
        e(2, f"for (long {row} = 0; {row} < {rows}; ++{row}) {{")
        self.unflatten(3, row, outer, cv, ext)
        init = c_float(0.0 if stmt.reduce == "+" else -math.inf)
        e(3, f"float {acc}[{dr.width}];")
        e(3, "#pragma omp simd")
        e(3, f"for (long {w} = 0; {w} < {dr.width}; ++{w}) {acc}[{w}] = {init};")
        d = 3
        for l in red:
            e(d, f"for (long {cv[l]} = 0; {cv[l]} < {ext[l]}; ++{cv[l]}) {{")
            d += 1
        coeff, const = flat_offsets(k, x, shape, shift)
        e(d, f"const float* restrict {src} = {xsrc} + {c_affine({cv[l]: c for l, c in coeff.items() if l != dr.w}, const)};")
        e(d, "#pragma omp simd")
        read = f"{src}[{w if dr.step == 1 else f'{dr.step} * {w}'}]"
        update = f"{acc}[{w}] += {read}" if stmt.reduce == "+" else f"{acc}[{w}] = AC_MAX({acc}[{w}], {read})"
        e(d, f"for (long {w} = 0; {w} < {dr.width}; ++{w}) {update};")
        for y in range(d - 1, 2, -1):
            e(y, "}")
        o_coeff, o_const = flat_offsets(k, Access(stmt.target, stmt.target_indices))
        e(3, "#pragma omp simd")
        e(3, f"for (long {w} = 0; {w} < {dr.width}; ++{w}) "
             f"{self.cname[stmt.target]}[{c_affine({cv[l]: c for l, c in o_coeff.items()}, o_const)}] = {acc}[{w}];")
        e(2, "}")
        if region is not None:
            self.region_end(2, region)
        e(1, "}")


class _DirectRows:
    """One contraction's direct rows being written (`DirectWriter.direct`): the C names of its
    loops and locals, then the steps in the order the C runs them."""

    def __init__(self, writer: DirectWriter, pk: Packed, dr: DirectRows):
        self.writer, self.pk, self.dr = writer, pk, dr
        self.k = writer.kernel
        self.stmt = self.k.statements[pk.index]
        self.ext = dict(pk.extents)
        self.f, self.e = writer.namer.fresh, writer.emit
        f = self.f
        self.cv = {l: f(l) for l in self.stmt.loop_names}
        self.bt, self.acc, self.a, self.src, self.v = f("bt"), f("acc"), f("a"), f("src"), f("v")
        self.w = self.cv[dr.w]
        self.parallel = bool(set(writer.parallel) & {self.k.loop_map(pk.index).get(l) for l in pk.batch + pk.n})

    def flat(self, access: Access, shape=None, shift=None, drop=()) -> str:
        coeff, const = flat_offsets(self.k, access, shape, shift)
        return c_affine({self.cv[l]: c for l, c in coeff.items() if l not in drop}, const)

    def write(self) -> None:
        self.comment()
        self.padded_source()
        d = self.open_rows()
        if gemv_split(self.pk, self.dr, self.parallel):
            return self.writer.split_row(self.pk, d, self.taps, self.acc, self.length, self.w, self.flat)
        self.row_blocks(d)
        self.store_rows(d)

    def comment(self) -> None:
        pk, dr, k, e = self.pk, self.dr, self.k, self.e
        e(1, f"/* {str(self.stmt).split('    #')[0]} */")
        epi = ", ".join(str(k.statements[s]).split("    #")[0] for s in pk.epilogue)
        e(1, f"/* direct rows: batch {' '.join(pk.batch) or '-'} x N {' '.join(pk.n)} ({pk.size('n')}, rows of "
             f"{dr.width}, B read at step {dr.step}" + (f", as planes of rows {dr.plane} apart" if dr.plane else "")
             + f") x K {' '.join(pk.k)} ({pk.size('k')})"
             + (f"; applied in its store: {epi}" if epi else "") + " */")
        e(1, "{")

    def padded_source(self) -> None:
        """B as the rows read it: in place, or a padded copy made once before the rows (or
        per batch item, of its slab alone: `direct_slab`)."""
        pk, dr, writer = self.pk, self.dr, self.writer
        self.bsrc, self.shape, self.shift = writer.cname[pk.b.tensor], None, None
        self.slab = direct_slab(self.k, pk, dr)      # {dimension: batch loop}: each item pads its own slab
        if any(lo or hi for lo, hi in dr.pads):
            self.bsrc = self.f(f"{self.bsrc}_padded")
            t = writer.tensor(pk.b.tensor)
            self.shape = tuple(n + lo + hi for n, (lo, hi) in zip(t.shape, dr.pads))
            self.shift = [lo for lo, _ in dr.pads]
            if not self.slab:
                writer.out += ["    " * 2 + line for line in writer.pad_copy(self.bsrc, pk.b, list(dr.pads), 2)]

    def open_rows(self) -> int:
        """The loops down to one row (batch items, then the outer n loops) and the row's
        accumulators; returns the depth of the row's body."""
        pk, dr, writer, cv, ext, e = self.pk, self.dr, self.writer, self.cv, self.ext, self.e
        NB = pk.size("batch")
        self.region = writer.region_begin(2, f"dynamic, {DIRECT_CHUNK}") if self.parallel and NB > 1 else None
        e(2, f"for (long {self.bt} = 0; {self.bt} < {NB}; ++{self.bt}) {{")
        writer.unflatten(3, self.bt, pk.batch, cv, ext)
        self.slab_drop: tuple[str, ...] = ()
        if self.slab and self.shape is not None:
            # the padded slab of this item (a channel's plane of a depthwise conv: in L1/L2 while
            # its rows are computed), addressed without the slab's leading indices; padding the
            # whole input once, serially before the parallel loop, wrote and read it all
            # through memory (96 x 113 x 113 floats per MobileNetV2 stride-2 depthwise)
            writer.out += ["    " * 3 + line for line in writer.pad_copy(self.bsrc, pk.b, list(dr.pads), 2,
                                                                         fixed={d: cv[l] for d, l in self.slab.items()})]
            self.slab_drop = tuple(self.slab.values())
        for l in pk.m:
            e(3, f"const long {cv[l]} = 0;")
        d = 3
        # plane: the last two n loops (h, w) as one row of (H - 1) * pitch + W accumulators,
        # h's outputs `pitch` apart as B's rows are (the columns between rows are computed
        # and dropped): each reduction step one long vectorised pass instead of H short ones
        rowed = pk.n[:-2] if dr.plane else pk.n[:-1]
        for l in rowed:
            e(d, f"for (long {cv[l]} = 0; {cv[l]} < {ext[l]}; ++{cv[l]}) {{")
            d += 1
        self.h = pk.n[-2] if dr.plane else None
        self.length = (ext[self.h] - 1) * dr.plane + dr.width if dr.plane else dr.width
        if dr.plane:
            self.f("j")     # taken, unused: the names after it follow from it
        if not gemv_split(pk, dr, self.parallel):
            e(d, f"float {self.acc}[{self.length}];")
        self.jb, self.jj, self.blk = self.f("jb"), self.f("jj"), self.f("blk")
        return d

    def taps(self, depth: int, target: str, lo: str, trip: str, unroll: bool, base: str = "") -> None:
        """Every reduction step adds a times B's row to the outputs [lo, lo + trip); `base`:
        the run starts there in both the target and B's row (a thread's part of a row)."""
        pk, dr, cv, ext, e, jj = self.pk, self.dr, self.cv, self.ext, self.e, self.jj
        dk = depth
        for l in pk.k:
            if unroll:
                e(dk, "#pragma GCC unroll 16")
            e(dk, f"for (long {cv[l]} = 0; {cv[l]} < {ext[l]}; ++{cv[l]}) {{")
            dk += 1
        e(dk, f"const float {self.a} = {self.writer.cname[pk.a.tensor]}[{self.flat(pk.a)}];")
        e(dk, f"const float* restrict {self.src} = {self.bsrc} + "
              f"{self.flat(pk.b, self.shape, self.shift, drop=(dr.w, self.h) + self.slab_drop)};")
        step_k = flat_offsets(self.k, pk.b)[0].get(pk.k[-1], 0)
        if not unroll and step_k * 4 >= 64:
            # a GEMV's weights stream once, from DRAM: each row's lines fetched ~32 KB ahead
            # (the hardware prefetcher alone: the 1280 -> 1000 classifier cold 0.37 ms,
            # with this 0.23), into L2 only: 32 KB ahead into L1 (its size) evicted lines
            # before their use (MobileNetV2's classifier, weights cold, in the network's
            # buffers: 0.280 ms fetched into L1, 0.223 into L2)
            ahead = -(-DIRECT_PREFETCH_FLOATS // step_k) * step_k
            e(dk, f"for (long {jj} = 0; {jj} < {trip}; {jj} += 16) __builtin_prefetch({self.src} + {ahead} + "
                  f"{base + ' + ' if base else ''}{jj}, 0, 2);")
        e(dk, "#pragma omp simd")
        at = f"{lo} + {jj}" if unroll else f"{base} + {jj}" if base else jj
        e(dk, f"for (long {jj} = 0; {jj} < {trip}; ++{jj}) {target}[{base + ' + ' if base else ''}{jj}] += {self.a} * "
              f"{self.src}[{at if dr.step == 1 else f'{dr.step} * ({at})'}];")
        for x in range(dk - 1, depth - 1, -1):
            e(x, "}")

    def row_blocks(self, d: int) -> None:
        """The row accumulated block by block, each block through all the reduction steps."""
        e, acc, jb, jj, blk, length = self.e, self.acc, self.jb, self.jj, self.blk, self.length
        # DIRECT_BLOCK outputs at a time through all the reduction steps (a local block the
        # compiler keeps in registers), the rest of the row after: the whole row per step
        # loaded and stored it again for each step (a 3x3 depthwise on 192 channels at 28x28:
        # 0.101 -> 0.070 ms)
        # A GEMV's many reduction steps (K > DIRECT_K_MAX) take the whole row per step
        # instead: each step then streams one contiguous row of B (in blocks of 64 outputs
        # every step read 256 bytes of a row 4 KB apart, MobileNetV2's 1280 -> 1000 classifier
        # from DRAM in 0.33 ms; its row of 1000 accumulators stays in L1)
        small = self.pk.size("k") <= DIRECT_K_MAX
        block = DIRECT_BLOCK if small else length
        e(d, f"long {jb} = 0;")
        e(d, f"for (; {jb} + {block} <= {length}; {jb} += {block}) {{")
        e(d + 1, f"float {blk}[{block}];")
        e(d + 1, "#pragma omp simd")
        e(d + 1, f"for (long {jj} = 0; {jj} < {block}; ++{jj}) {blk}[{jj}] = 0.0f;")
        self.taps(d + 1, blk, jb, str(block), small)
        e(d + 1, "#pragma omp simd")
        e(d + 1, f"for (long {jj} = 0; {jj} < {block}; ++{jj}) {acc}[{jb} + {jj}] = {blk}[{jj}];")
        e(d, "}")
        # the rest of the row: a block of its own, its length a constant (the row's length is
        # one): with a run-time trip gcc gathered the stride-2 reads and masked every vector
        # (MobileNetV2's stride-2 depthwise rows of 56, 28, 14, 7 never fill a block of 64)
        tail = length % block
        if tail:
            e(d, "{")
            e(d + 1, f"const long {jb}_rest = {length - tail};")
            e(d + 1, f"float {blk}[{tail}];")
            e(d + 1, "#pragma omp simd")
            e(d + 1, f"for (long {jj} = 0; {jj} < {tail}; ++{jj}) {blk}[{jj}] = 0.0f;")
            self.taps(d + 1, blk, f"{jb}_rest", str(tail), True)
            e(d + 1, "#pragma omp simd")
            e(d + 1, f"for (long {jj} = 0; {jj} < {tail}; ++{jj}) {acc}[{jb}_rest + {jj}] = {blk}[{jj}];")
            e(d, "}")

    def store_rows(self, d: int) -> None:
        """Each output of the row (each row of a plane) stored with the epilogue; the loops closed."""
        dr, e, w, cv, h, writer = self.dr, self.e, self.w, self.cv, self.h, self.writer
        dd = d
        if dr.plane:
            e(d, f"for (long {cv[h]} = 0; {cv[h]} < {self.ext[h]}; ++{cv[h]}) {{")
            dd = d + 1
        e(dd, "#pragma omp simd")
        e(dd, f"for (long {w} = 0; {w} < {dr.width}; ++{w}) {{")
        e(dd + 1, f"const float {self.v} = {self.acc}[{f'{cv[h]} * {dr.plane} + {w}' if dr.plane else w}];")
        writer.epilogue_store(self.pk, dd + 1, self.v, lambda access: f"{writer.cname[access.tensor]}[{self.flat(access)}]")
        e(dd, "}")
        if dr.plane:
            e(d, "}")
        for x in range(d - 1, 1, -1):
            e(x, "}")
        if self.region is not None:
            writer.region_end(2, self.region)
        e(1, "}")
