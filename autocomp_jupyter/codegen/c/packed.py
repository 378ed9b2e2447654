"""The packed GEMM in C (BLIS-style): what a contraction `C[i, j] += A[..] * B[..]` runs as when
`host_strategy.contraction.packed_contraction` finds one and it is neither direct rows nor
Winograd — GEMMs, batched GEMMs, convolutions (stride, dilation, padding, groups) and
transposed operands, read from the accesses. Packing costs O(MK + KN) copies, repaid by a
microkernel that keeps an MR x NR output tile in registers and streams contiguous panels.

- cache blocks mc/nc/kc are the schedule's outermost tiles of i/j/k, raised to at least
  `GEMM_MIN_BLOCK` (mc rounded up to whole micro-panels; `packed_blocks`); per (nc, kc)
  block, B is copied into contiguous zero-padded NR-wide column panels (`pack_b`), per
  (mc, kc) block A into MR-high row panels (`pack_a`); the packing loops are functions of
  their own (`outline`). Out-of-range reads come from a padded copy made once per call, or
  are checked while packing, never in the microkernel;
- the microkernel (`micro_tiles`) accumulates an MR x NR tile in a local array (j innermost,
  contiguous, `omp simd`) and adds it to C, applying the fused epilogue in its store at the
  last kc block (edge tiles store only their valid part); a last panel of at most a half or a
  quarter of NR columns runs narrower vectors (`quarter_panel`, `half_panel`);
- `parallel` on a batch, i or j loop opens one parallel region whose threads share work
  units (`packed_partition`: batch items, or chunks of N or M micro-panels, chosen per thread
  count, written as a table): each thread runs its own contiguous share, then takes what is
  left of the others', packing its own panels into scratch kept between calls;
- an operand that is a param read in range (`prepacked`: weights) is packed once, on the first
  call, into panels over all of K kept between calls (again when its buffer address changes),
  and streamed from there; a B with few rows is read in place, unpacked (`b_in_place`);
- an integer contraction runs in double (panels, microkernel), in float where every partial
  sum is an integer of at most 2^24 (i8 x i8, K <= 1024).

The kernel's other statements (producers, epilogues not fused) run in program order, each
over its full nest.
"""
from __future__ import annotations

import math
import re
from types import SimpleNamespace

from ...host_strategy.access import flat_offsets, in_range, padding, substitute
from ...host_strategy.epilogue import epilogue_point
from ...host_strategy.gemm import GEMM_MIN_BLOCK, PAD_COPY_MAX, Packed, last_panel, packed_blocks, rows_outer
from ...host_strategy.operands import B_IN_PLACE_AHEAD, b_in_place, host_copy_costs, prepacked, prepacked_ahead
from ...host_strategy.partition import PARTITION_THREADS, packed_partition
from ...host_strategy.rows import DIRECT_STEP_MAX
from ...ir.program import Access
from .ctext import c_double, c_float
from .layout import INT_RANGE
from .writer import WriterBase

# The C names a packed contraction takes first, in this order: (attribute, name asked for).
_NAMES = (("tab", "tab"), ("nth", "nth"), ("tid", "tid"), ("part", "part"), ("bt", "bt"), ("j0", "j0"),
          ("k0", "k0"), ("i0", "i0"), ("jr", "jr"), ("ir", "ir"), ("p", "p"), ("r", "r"), ("c", "c"),
          ("nc", "nc"), ("kc", "kc"), ("mc", "mc"), ("Ap", "Apack"), ("Bp", "Bpack"), ("acc", "acc"),
          ("rows", "rows"), ("cols", "cols"), ("v", "v"), ("cbuf", "Cpart"))


class PackedWriter(WriterBase):
    """Writes the packed-GEMM strategy (see the module docstring)."""

    def block_size(self, index: int, own: str) -> int:
        """The cache block for a loop: its tile at the outermost level that tiles it."""
        anchor = self.kernel.loop_map(index).get(own)
        extent = self.kernel.statements[index].extents[own]
        if anchor is None or anchor not in self.schedule.tile_sizes():
            return extent
        for t in self.schedule.tile_sizes()[anchor]:
            if t < extent:
                return max(1, t)
        return extent

    def packed(self, pk: Packed) -> None:
        """Statement `pk.index` as a packed GEMM (BLIS-style) over batch x M x N x K, with the
        statements `pk.epilogue` applied in the microkernel's store (see the module docstring)."""
        _PackedGemm(self, pk).write()


class _PackedGemm:
    """One packed contraction being written: its shape and blocks, the C names it takes from
    the kernel's Namer, and the steps that write it in the order the C runs them. Names are
    taken in a fixed order (the generated text depends on it): the shared ones here, the
    rest by each step as it writes."""

    def __init__(self, writer: PackedWriter, pk: Packed):
        self.writer, self.pk = writer, pk
        self.k = writer.kernel
        self.stmt = self.k.statements[pk.index]
        self.ext = dict(pk.extents)
        self.NB, self.M, self.N, self.K = (pk.size(g) for g in ("batch", "m", "n", "k"))
        self.mr, self.nr = pk.micro
        self.MC, self.NC, self.KC = packed_blocks(pk, lambda l: writer.block_size(pk.index, l))
        self.MCP, self.NCP = -(-self.MC // self.mr) * self.mr, -(-self.NC // self.nr) * self.nr   # whole micro-panels
        f = self.f = writer.namer.fresh    # kernel scope: later statements' names avoid these
        self.e = writer.emit
        self.T = self.element_type()
        self.lit = c_double if self.T == "double" else c_float
        anchors = self.k.loop_map(pk.index)
        self.parallel = bool(set(writer.parallel) & {anchors.get(l) for l in pk.batch + pk.m + pk.n})
        self.n = SimpleNamespace(**{attr: f(name) for attr, name in _NAMES})
        self.lo = {g: f(g + "_lo") for g in ("m", "n")}
        self.hi = {g: f(g + "_hi") for g in ("m", "n")}
        self.groups = {"m": pk.m, "n": pk.n, "k": pk.k}
        self.tables: dict[tuple, str] = {}      # (group, coefficients) -> C array name
        self.table_fill: list[tuple[str, tuple[str, ...], tuple[int, ...]]] = []
        self.bvar = {l: f(l) for l in pk.batch}
        self.padded: list[tuple[str, Access, list[tuple[int, int]]]] = []   # (copy, access, pads)
        self.run_flags: list[tuple[str, str, int]] = []     # (flag array, n-group offset table, step)
        self.runs: dict[Access, tuple[str, str, int, str]] = {}    # access -> (table, text, step, run start)
        self.sources: dict[str, str] = {}      # operand arrays the packing reads: name -> C parameter type

    def element_type(self) -> str:
        """The element type of the panels and the microkernel: an integer result sums in
        double (exact below 2^53, as the interpreter), unless both operands are integers small
        enough that every partial sum is an integer of at most 2^24 (i8 x i8 with K <= 1024):
        float holds those exactly, at twice the lanes. Anything else in float."""
        def bound(access: Access) -> float:
            rng = INT_RANGE.get(self.writer.tensor(access.tensor).dtype)
            return max(-rng[0], rng[1], abs(access.pad)) if rng and float(access.pad).is_integer() else math.inf
        wide = self.writer.in_double(self.stmt) and self.K * bound(self.pk.a) * bound(self.pk.b) > 2 ** 24
        return "double" if wide else "float"

    def write(self) -> None:
        writer, e = self.writer, self.e
        self.plan_operands()
        self.plan_store()
        self.comment()
        body_start = len(writer.out)     # the constants go here (their names are known at the end)
        self.partition_table()
        self.open_region()
        self.open_unit_loop()
        self.pack_b()
        self.pack_a()
        self.micro_tiles()
        self.close_region()
        writer.out[body_start:body_start] = ["    " * 2 + line for line in self.constants()]
        e(1, "}")

    # ------------------------------------------------------------------ operands and store

    def term(self, group: str, coeff: dict[str, int], x: str) -> str:
        """sum(coeff[l] * l) over `group`'s loops at flattened position x: a multiple of
        x where the group flattens linearly, else a lookup in a table filled once."""
        loops, ext = self.groups[group], self.ext
        cs = tuple(coeff.get(l, 0) for l in loops)
        if not any(cs):
            return ""
        live = [(l, cv) for l, cv in zip(loops, cs) if ext[l] > 1]
        step = live[-1][1] if live else 0
        if all(cv == step * math.prod(ext[x2] for x2, _ in live[i + 1:]) for i, (_, cv) in enumerate(live)):
            return "" if step == 0 else (f" + {x}" if step == 1 else f" + {step} * {x}")
        key = (group, cs)
        if key not in self.tables:
            self.tables[key] = self.f(f"{group}_off")
            self.table_fill.append((self.tables[key], loops, cs))
        return f" + {self.tables[key]}[{x}]"

    def batch_term(self, coeff: dict[str, int], const: int) -> str:
        parts = [f"{cv} * {self.bvar[l]}" if cv != 1 else self.bvar[l] for l in self.pk.batch if (cv := coeff.get(l, 0))]
        return " + ".join(parts + ([str(const)] if const or not parts else []))

    def operand(self, access: Access, rowg: str, row: str, colg: str, col: str, pad: float) -> tuple[str, list[str]]:
        """C text reading `access` at (row of group rowg, col of group colg), and the
        batch-part declarations. An access that can leave its tensor reads a padded copy
        (made once per call, before the parallel region) when that copy is at most
        PAD_COPY_MAX times the tensor, else it is checked on those dimensions."""
        writer, f, n, term = self.writer, self.f, self.n, self.term
        t = writer.tensor(access.tensor)
        pads = padding(self.k, access, self.ext)
        shape, shift, name = t.shape, None, writer.cname[access.tensor]
        if any(lo or hi for lo, hi in pads):
            pshape = tuple(size + lo + hi for size, (lo, hi) in zip(t.shape, pads))
            if math.prod(pshape) <= PAD_COPY_MAX * t.size:
                name = f(f"{name}_padded")
                self.padded.append((name, access, pads))
                shape, shift = pshape, [lo for lo, _ in pads]
        coeff, const = flat_offsets(self.k, access, shape, shift)
        self.sources[name] = f"const {writer.ctype(access.tensor)}* restrict"
        base = f(f"{name}_base")
        decls = [f"const long {base} = {self.batch_term(coeff, const)};"]
        text = f"{name}[{base}{term(rowg, coeff, row)}{term(colg, coeff, col)}]"
        conds = []
        for d, (idx, inside) in enumerate(zip(access.indices, in_range(self.k, access, self.ext))):
            if inside or shift is not None:
                continue
            dc = dict(idx.terms)
            q = f(f"{name}_d{d}")
            decls.append(f"const long {q} = {self.batch_term(dc, idx.const)};")
            conds.append(f"(unsigned long)({q}{term(rowg, dc, row)}{term(colg, dc, col)}) < {shape[d]}UL")
        if conds:
            text = f"({' && '.join(conds)} ? {text} : {self.lit(pad)})"
        else:   # where the column offsets come from a table: the text for a run of NR columns
            key = (colg, tuple(coeff.get(l, 0) for l in self.groups[colg]))
            # runs at the innermost column loop's step (1, or 2: a stride-2 conv's input)
            step = coeff.get(self.groups[colg][-1], 0) if self.groups[colg] else 0
            if key in self.tables and 1 <= step <= DIRECT_STEP_MAX:
                at = f"{n.c}" if step == 1 else f"{step} * {n.c}"
                table = self.tables[key]
                self.runs[access] = (table, f"{name}[{base}{term(rowg, coeff, row)} + {table}[{n.j0} + {n.jr}] + {at}]",
                                     step, f"{name} + {base}{term(rowg, coeff, row)} + {table}[{n.j0} + {n.jr}]")
        return text, decls

    def plan_operands(self) -> None:
        """What the packing reads: which operands are packed once, ahead (`prepacked`: the
        name of the kept copy, its copies one per batch item it varies with), and the C
        text of A and B at a panel's (row, k) and (k, column)."""
        pk, n, writer = self.pk, self.n, self.writer
        operands = (("a", pk.a), ("b", pk.b))
        self.pre = {which: self.f(f"{writer.cname[access.tensor]}_prepacked") if prepacked(self.k, pk, which) else ""
                    for which, access in operands}
        self.pre_items = {which: self.NB if any(flat_offsets(self.k, access)[0].get(l, 0) for l in pk.batch) else 1
                          for which, access in operands}
        self.pre_len = {"a": -(-self.M // self.mr) * self.mr * self.K, "b": -(-self.N // self.nr) * self.nr * self.K}
        self.pre_batch = {which: f" + {n.bt} * {self.pre_len[which]}L" if self.pre_items[which] > 1 else ""
                          for which in "ab"}
        self.a_text, self.a_decls = self.operand(pk.a, "m", f"({n.i0} + {n.ir} + {n.r})", "k", f"({n.k0} + {n.p})",
                                                 pk.a.pad)
        self.b_text, self.b_decls = self.operand(pk.b, "k", f"({n.k0} + {n.p})", "n", f"({n.j0} + {n.jr} + {n.c})",
                                                 pk.b.pad)

    def at_point(self, access: Access) -> str:
        """C text of `access` at the micro-tile's (row, col), its batch part declared once."""
        key = (access.tensor, access.indices)
        if key not in self.store_cache:
            coeff, const = flat_offsets(self.k, access)
            name = self.writer.cname[access.tensor]
            base = self.f(f"{name}_base")
            self.store_decls.append(f"const long {base} = {self.batch_term(coeff, const)};")
            self.store_cache[key] = f"{name}[{base}{self.term('m', coeff, self.row)}{self.term('n', coeff, self.col)}]"
        return self.store_cache[key]

    def needed(self, t: str) -> bool:
        """Whether tensor `t` must be stored: outside the kernel, or read by a statement not fused."""
        return t not in self.k.internals or t in self.readers

    def plan_store(self) -> None:
        """The store: the output and every fused statement's accesses at (row, col), and the
        lines the epilogue writes there."""
        pk, n, stmt, writer = self.pk, self.n, self.stmt, self.writer
        self.row, self.col = f"({n.i0} + {n.ir} + {n.r})", f"({n.j0} + {n.jr} + {n.c})"
        self.store_decls: list[str] = []
        self.store_cache: dict[tuple, str] = {}
        self.output = self.at_point(Access(stmt.target, stmt.target_indices))
        fused = set(pk.epilogue)
        self.readers = {a.tensor for s, st in enumerate(self.k.statements)
                        if s != pk.index and s not in fused for a in st.reads()}
        self.epilogue_lines: list[str] = []
        self.epilogue_fetch: list[tuple[str, bool]] = []     # (element text, written) the epilogue touches
        local = {stmt.target: writer.rounded(stmt.target, n.v) if stmt.target in writer.rounded_accumulators else n.v}
        for s in pk.epilogue:
            st = self.k.statements[s]
            at = epilogue_point(self.k, pk.index, s)

            def access_at(a: Access, at=at):
                if a.tensor in local:
                    return local[a.tensor]
                text = self.at_point(substitute(a, at))
                # a read that varies with the column (a residual; not a per-row bias)
                if any(l in pk.n for idx in substitute(a, at).indices for l in idx.loops):
                    self.epilogue_fetch.append((text, False))
                return text
            value = writer.rounded(st.target, writer.expr_c(st.expr, {}, st, access=access_at))
            var = self.f(f"{writer.cname[st.target]}_v")
            self.epilogue_lines.append(f"const {'double' if writer.in_double(st) else 'float'} {var} = {value};")
            local[st.target] = var
            if self.needed(st.target):
                target_text = self.at_point(substitute(Access(st.target, st.target_indices), at))
                self.epilogue_lines.append(f"{target_text} = {var};")
                self.epilogue_fetch.append((target_text, True))

    def comment(self) -> None:
        pk, e = self.pk, self.e
        e(1, f"/* {str(self.stmt).split('    #')[0]} */")
        epi = ", ".join(str(self.k.statements[s]).split("    #")[0] for s in pk.epilogue)
        e(1, f"/* packed GEMM: batch {' '.join(pk.batch) or '-'} ({self.NB}) x M {' '.join(pk.m) or '-'} ({self.M}) x "
             f"N {' '.join(pk.n)} ({self.N}) x K {' '.join(pk.k)} ({self.K}); blocks mc={self.MC} nc={self.NC} kc={self.KC} "
             + ("(transposed: m and n exchanged, its own blocks)" if pk.swapped else
                f"(the schedule's outermost tiles, raised to >= {'/'.join(map(str, GEMM_MIN_BLOCK))})")
             + f", microkernel {self.mr}x{self.nr}"
             + (f"; applied in its store: {epi}" if epi else "") + " */")
        e(1, "{")

    # ------------------------------------------------------------------ threads and work units

    def partition_table(self) -> None:
        """The work units for each thread count (`packed_partition`), chosen here and read at
        run time: a table written ahead of the kernel."""
        writer, fn = self.writer, self.writer.fn
        a_cost, b_cost = host_copy_costs(self.k, self.pk)
        parts = [packed_partition(self.pk, self.NC, t, a_cost, b_cost) for t in range(1, PARTITION_THREADS + 1)]
        self.split = f"ac_units_{fn}"
        writer.helpers.append(f"/* {fn}: the packed contraction's work units for 1..{PARTITION_THREADS} threads: "
                              f"{{mode (0 batch items, 1 N chunks, 2 M chunks), panels per chunk, units}} */\n"
                              f"static const long {self.split}[{PARTITION_THREADS}][3] = {{"
                              + ", ".join(f"{{{p.code}, {p.chunk}, {p.units}}}" for p in parts) + "};")

    def open_region(self) -> None:
        """The team, each thread's first unit, one parallel region, and each thread's scratch
        for its panels. Each thread runs its own contiguous share of the units first (the same
        share every call: its panels and its part of the output stay in its caches; claiming
        them in any order, `schedule(dynamic)`, measured 1.63 ms against 1.52 for static
        halves, conv 3x3 64ch on 2 otherwise idle cores), then takes what is left of the
        others' (a thread whose core another process holds ends up with fewer)."""
        n, e, f, T = self.n, self.e, self.f, self.T
        n.unit, n.per, n.chunk, n.nxt, n.vv, n.victim, n.end = (f(x) for x in (
            "unit", "per", "chunk", "next", "v", "victim", "end"))
        e(2, f"const int {n.nth} = {'ac_team()' if self.parallel else '1'};")
        n.t_start, n.t_done = f("t_start"), f("t_done")
        if self.parallel:
            e(2, f"double {n.t_done}[{n.nth} * 8];    /* per thread: when it ran out of units */")
            e(2, f"const double {n.t_start} = ac_now();")
        e(2, f"const long* {n.part} = {self.split}[({n.nth} < {PARTITION_THREADS} ? {n.nth} : {PARTITION_THREADS}) - 1];")
        e(2, f"const long {n.per} = {n.part}[2] / {self.NB};    /* units per batch item */")
        e(2, f"long {n.nxt}[{n.nth} * 8];    /* per thread: its next unit (a cache line each) */")
        e(2, f"for (long {n.vv} = 0; {n.vv} < {n.nth}; ++{n.vv}) {n.nxt}[{n.vv} * 8] = {n.part}[2] * {n.vv} / {n.nth};")
        e(2, "/* one parallel region; its threads claim work units (a batch item, or a chunk of its N or M "
             "panels): their own share, then the others' */")
        if self.parallel:
            e(2, f"#pragma omp parallel num_threads({n.nth})")
        e(2, "{")
        e(3, f"int {n.tid} = 0;")
        e(0, "#ifdef _OPENMP")
        e(3, f"{n.tid} = omp_get_thread_num() % {n.nth};")
        e(0, "#endif")
        self.size = 8 if T == "double" else 4
        self.ks = b_in_place(self.k, self.pk) if T == "float" else 0      # B read in place, k steps ks apart
        if not self.pre["b"] and not self.ks:
            e(3, f"{T}* {n.Bp} = ac_scratch(0, {self.KC * self.NCP * self.size}UL);")
        if not self.pre["a"]:
            e(3, f"{T}* {n.Ap} = ac_scratch(1, {self.MCP * self.KC * self.size}UL);")
        if self.pk.swapped and self.K > self.KC:
            e(3, f"{T}* {n.cbuf} = ac_scratch(4, {self.MCP * self.NCP * self.size}UL);    /* partial sums, as tiles */")

    def open_unit_loop(self) -> None:
        """The claim loop over units (own share first, then the others'), a unit's batch item
        and range of N or M, and the cache-block loops over N and K."""
        pk, n, e, lo, hi, ext = self.pk, self.n, self.e, self.lo, self.hi, self.ext
        e(3, f"for (long {n.vv} = 0; {n.vv} < {n.nth}; ++{n.vv}) {{")
        e(4, f"const long {n.victim} = ({n.tid} + {n.vv}) % {n.nth}, {n.end} = {n.part}[2] * ({n.victim} + 1) / {n.nth};")
        e(4, f"for (long {n.unit}; ({n.unit} = __atomic_fetch_add(&{n.nxt}[{n.victim} * 8], 1, __ATOMIC_RELAXED)) "
             f"< {n.end}; ) {{")
        self.unit_body = len(self.writer.out)
        if pk.batch:
            e(4, f"const long {n.bt} = {n.unit} / {n.per};")
        e(4, f"const long {n.chunk} = {n.unit} % {n.per};")
        e(4, f"const long {lo['n']} = {n.part}[0] == 1 ? {n.chunk} * {n.part}[1] * {self.nr} : 0, "
             f"{hi['n']} = {n.part}[0] == 1 ? AC_MIN({self.N}L, ({n.chunk} + 1) * {n.part}[1] * {self.nr}) : {self.N};")
        e(4, f"const long {lo['m']} = {n.part}[0] == 2 ? {n.chunk} * {n.part}[1] * {self.mr} : 0, "
             f"{hi['m']} = {n.part}[0] == 2 ? AC_MIN({self.M}L, ({n.chunk} + 1) * {n.part}[1] * {self.mr}) : {self.M};")
        inner = 1
        for l in reversed(pk.batch):
            e(4, f"const long {self.bvar[l]} = ({n.bt} / {inner}) % {ext[l]};" if inner > 1 else
                 f"const long {self.bvar[l]} = {n.bt} % {ext[l]};")
            inner *= ext[l]
        for line in dict.fromkeys(self.a_decls + self.b_decls + self.store_decls):
            e(4, line)
        e(4, f"for (long {n.j0} = {lo['n']}; {n.j0} < {hi['n']}; {n.j0} += {self.NC}) {{")
        e(5, f"const long {n.nc} = AC_MIN({self.NC}, {hi['n']} - {n.j0});")
        e(5, f"for (long {n.k0} = 0; {n.k0} < {self.K}; {n.k0} += {self.KC}) {{")
        e(6, f"const long {n.kc} = AC_MIN({self.KC}, {self.K} - {n.k0});")

    # ------------------------------------------------------------------ packing

    def pack_b(self) -> None:
        """B[k0:+kc, j0:+nc] as NR-wide column panels, zero-padded (out-of-range reads give the
        pad): a function of its own, or nothing where B is prepacked or read in place."""
        n, e, nr, writer = self.n, self.e, self.nr, self.writer
        if not self.pre["b"] and not self.ks:
            e(6, f"/* pack B[k0:+kc, j0:+nc] as {nr}-wide column panels (zero-padded; out-of-range reads give the pad) */")
        b_start = len(writer.out)
        e(6, f"for (long {n.jr} = 0; {n.jr} < {n.nc}; {n.jr} += {nr}) {{")
        d = 7
        if self.pk.b in self.runs and not self.pre["b"]:
            self.b_run_copy()
            d = 8
        # B's columns copied NR at a time for each k (a 16-row gather where they are rows apart,
        # a transposed GEMM's weights W[f, c]): read from DRAM that way, the rows advance
        # together (measured 10 GB/s against 4.5 for copying each column's run in turn)
        e(d, f"for (long {n.p} = 0; {n.p} < {n.kc}; ++{n.p}) {{")
        e(d + 1, "#pragma omp simd")
        e(d + 1, f"for (long {n.c} = 0; {n.c} < {nr}; ++{n.c}) {n.Bp}[{n.jr} * {n.kc} + {n.p} * {nr} + {n.c}] = "
                 f"{n.jr} + {n.c} < {n.nc} ? {self.b_text} : 0.0f;")
        e(d, "}")
        if d == 8:
            e(7, "}")
        e(6, "}")
        # The packing loops are functions of their own: inlined into the kernel, their register
        # allocation moved with unrelated constants (measured: changing mc alone made a conv's
        # B packing 2.5x slower, 0.28 vs 0.20 ms in all).
        scalars = {name: "long" for name in re.findall(r"const long (\w+) =", "\n".join(self.a_decls + self.b_decls))}
        scalars.update({x: "long" for x in (n.j0, n.k0, n.kc, n.nc, n.i0, n.mc)})
        self.packing_params = {n.Bp: f"{self.T}* restrict", n.Ap: f"{self.T}* restrict", **self.sources, **scalars,
                               **{t: "const AC_OFFSET_T* restrict" for t in self.tables.values()},
                               **{flag: "const unsigned char* restrict" for flag, _, _ in self.run_flags}}
        if self.pre["b"] or self.ks:
            del writer.out[b_start:]
        else:
            writer.outline(b_start, 6, "pack_b", self.packing_params)

    def b_run_copy(self) -> None:
        """A panel whose NR columns are evenly spaced in B (step 1 or 2: a flag per panel,
        filled once) copied as vectors; the `else` branch that follows gathers."""
        n, e, f, nr = self.n, self.e, self.f, self.nr
        table, run_text, run_step, run_start = self.runs[self.pk.b]
        run_flag = f(f"{table}_run")
        self.run_flags.append((run_flag, table, run_step))
        e(7, f"if ({n.jr} + {nr} <= {n.nc} && {run_flag}[({n.j0} + {n.jr}) / {nr}]) {{")
        wide2 = run_step == 2 and nr == 16 and self.T == "float" and self.writer.ctype(self.pk.b.tensor) == "float"
        if wide2:
            # a stride-2 run (a stride-2 conv's input): two loads and one permute per k step
            # (the compiler's own loop took a 256-bit permute, a 128-bit shuffle and four
            # scalar inserts: MobileNetV2's stem 0.41 -> 0.37 ms)
            q, ev = f("q"), f("ev")
            e(8, "#if defined(__AVX512F__)")
            e(8, f"const __m512i {ev} = _mm512_set_epi32({', '.join(str(x) for x in range(30, -1, -2))});")
            e(8, f"for (long {n.p} = 0; {n.p} < {n.kc}; ++{n.p}) {{")
            e(9, f"const float* {q} = {run_start};")
            e(9, f"_mm512_storeu_ps({n.Bp} + {n.jr} * {n.kc} + {n.p} * 16, _mm512_permutex2var_ps("
                 f"_mm512_loadu_ps({q}), {ev}, _mm512_maskz_loadu_ps(0x7FFF, {q} + 16)));"
                 f"    /* the run's last element is {q}[30] */")
            e(8, "}")
            e(8, "#else")
        e(8, f"for (long {n.p} = 0; {n.p} < {n.kc}; ++{n.p}) {{")
        e(9, "#pragma omp simd")
        e(9, f"for (long {n.c} = 0; {n.c} < {nr}; ++{n.c}) {n.Bp}[{n.jr} * {n.kc} + {n.p} * {nr} + {n.c}] = {run_text};")
        e(8, "}")
        if wide2:
            e(8, "#endif")
        e(7, "} else {")

    def pack_a(self) -> None:
        """The cache-block loop over M, and A[i0:+mc, k0:+kc] as MR-high row panels,
        zero-padded: a function of its own, or nothing where A is prepacked."""
        n, e, mr, writer = self.n, self.e, self.mr, self.writer
        e(6, f"for (long {n.i0} = {self.lo['m']}; {n.i0} < {self.hi['m']}; {n.i0} += {self.MC}) {{")
        e(7, f"const long {n.mc} = AC_MIN({self.MC}, {self.hi['m']} - {n.i0});")
        if not self.pre["a"]:
            e(7, f"/* pack A[i0:+mc, k0:+kc] as {mr}-high row panels (zero-padded) */")
        a_start = len(writer.out)
        e(7, f"for (long {n.ir} = 0; {n.ir} < {n.mc}; {n.ir} += {mr}) {{")
        e(8, f"for (long {n.p} = 0; {n.p} < {n.kc}; ++{n.p}) {{")
        e(9, f"for (long {n.r} = 0; {n.r} < {mr}; ++{n.r}) {n.Ap}[{n.ir} * {n.kc} + {n.p} * {mr} + {n.r}] = "
             f"{n.ir} + {n.r} < {n.mc} ? {self.a_text} : 0.0f;")
        e(8, "}")
        e(7, "}")
        if self.pre["a"]:
            del writer.out[a_start:]
        else:
            writer.outline(a_start, 7, "pack_a", self.packing_params)

    # ------------------------------------------------------------------ the microkernel

    def micro_tiles(self) -> None:
        """The micro-tile loops over the block's panels, each tile accumulated in registers
        over the kc block and stored."""
        pk, n, e, f, T, K, mr, nr = self.pk, self.n, self.e, self.f, self.T, self.K, self.mr, self.nr
        loops = [f"for (long {n.jr} = 0; {n.jr} < {n.nc}; {n.jr} += {nr}) {{",
                 f"for (long {n.ir} = 0; {n.ir} < {n.mc}; {n.ir} += {mr}) {{"]
        if rows_outer(pk, self.KC, self.NCP):
            loops.reverse()
        e(7, loops[0])
        e(8, loops[1])
        n.av, n.bv = f("ap"), f("bp")
        # a prepacked operand's panel holds all of K: the kc block starts k0 steps in
        e(9, f"const {T}* restrict {n.av} = " + (
            f"{self.pre['a']}{self.pre_batch['a']} + ({n.i0} + {n.ir}) * {K} + {n.k0} * {mr};" if self.pre["a"]
            else f"{n.Ap} + {n.ir} * {n.kc};"))
        if self.ks:      # B in place: its row of the panel at each k step, ks apart
            b_base = self.b_decls[0].split(" = ")[0].split()[-1]
            e(9, f"/* B read in place (b_in_place): {nr} columns of a straight run per k step, {self.ks} apart */")
            e(9, f"const {T}* restrict {n.bv} = {self.writer.cname[pk.b.tensor]} + {b_base} + {n.j0} + {n.jr} + "
                 f"{n.k0} * {self.ks}L;")
        else:
            e(9, f"const {T}* restrict {n.bv} = " + (
                f"{self.pre['b']}{self.pre_batch['b']} + ({n.j0} + {n.jr}) * {K} + {n.k0} * {nr};" if self.pre["b"]
                else f"{n.Bp} + {n.jr} * {n.kc};"))
        e(9, f"const long {n.rows} = AC_MIN({mr}, {n.mc} - {n.ir}), {n.cols} = AC_MIN({nr}, {n.nc} - {n.jr});")
        self.prefetch_store_lines()
        e(9, f"{T} {n.acc}[{mr}][{nr}] = {{{{0.0f}}}};")
        # A last panel of at most half its columns (a 14x14 map's 196 = 12 x 16 + 4) runs
        # half-wide vectors, twice as many to an FMA cycle: its padded columns cost half
        # (MobileNetV2's 576 -> 96 at 14x14 spent 6% of its time in that panel, all columns)
        tail = last_panel(pk) if T == "float" else 1.0
        half = nr // 2 if tail < 1 else 0
        quarter = nr // 4 if tail < 0.5 else 0
        if quarter:
            self.quarter_panel(quarter)
        if half:
            self.half_panel(half)
        self.full_panel()
        if half:
            e(9, "}")
        self.store()
        for depth in (8, 7, 6, 5, 4):
            e(depth, "}")

    def prefetch_store_lines(self) -> None:
        """The store's lines (the output micro-tile, read and written once per kc block, and at
        the last block the fused statements' reads and stores), rows far apart: fetched while
        the reduction runs, not when the store needs them. Only lines the store touches: with
        one kc block an output the epilogue consumes is never read or written (prefetching it
        for write anyway fetched a dead tensor's lines: 3.2 MB per 1x1 conv)."""
        pk, n, e = self.pk, self.n, self.e
        single = self.K <= self.KC
        fetch_out = [(self.output, True)] if (not single and not pk.swapped) or self.needed(self.stmt.target) else []
        fetch_last = [(x, w) for x, w in dict.fromkeys(self.epilogue_fetch) if x != self.output]
        if pk.swapped and not single:      # its output is written at the last kc block only
            fetch_out, fetch_last = [], fetch_out + fetch_last
        if not (fetch_out or fetch_last):
            return
        # a line at each end of every output row of the tile (its columns, transposed)
        (x1, n1), (x2, n2) = ((n.c, n.cols), (n.r, n.rows)) if pk.swapped else ((n.r, n.rows), (n.c, n.cols))
        e(9, f"for (long {x1} = 0; {x1} < {n1}; ++{x1}) {{")
        for group, cond in ((fetch_out, None), (fetch_last, None if single else f"{n.k0} + {n.kc} >= {self.K}")):
            if not group:
                continue
            dd = 10
            if cond:
                e(10, f"if ({cond}) {{")
                dd = 11
            for first_col in (True, False):
                e(dd, f"{{ const long {x2} = {'0' if first_col else f'{n2} - 1'};")
                for x, write in group:
                    e(dd + 1, f"__builtin_prefetch(&{x}, {1 if write else 0}, 3);")
                e(dd, "}")
            if cond:
                e(10, "}")
        e(9, "}")

    def b_step(self) -> str:
        """The distance between a B panel's k steps: NR, or the in-place B's row stride."""
        return f"{self.ks or self.nr}{'L' if self.ks else ''}"

    def quarter_panel(self, quarter: int) -> None:
        """A last panel of at most a quarter of the columns: the rows as the vector (an A
        panel's k step is mr contiguous floats), each column a broadcast of B, even and odd k
        steps summed apart (2 x quarter chains of FMAs in flight): a quarter of a full panel's
        time (the 576 -> 96 conv at 14x14 alone 0.2585 -> 0.2547 ms; with no last panel at all
        0.2499). Leaves an `else` for the wider tiles."""
        n, e, f, mr, T = self.n, self.e, self.f, self.mr, self.T
        acc_q, q = f(f"{n.acc}_q"), f("q")
        e(9, f"if ({n.cols} <= {quarter}) {{")
        e(10, f"{T} {acc_q}[2][{quarter}][{mr}] = {{{{{{0.0f}}}}}};")
        e(10, f"long {n.p} = 0;")
        e(10, f"for (; {n.p} + 2 <= {n.kc}; {n.p} += 2) {{")
        e(11, "#pragma GCC unroll 2")
        e(11, f"for (long {q} = 0; {q} < 2; ++{q}) {{")
        e(12, f"#pragma GCC unroll {quarter}")
        e(12, f"for (long {n.c} = 0; {n.c} < {quarter}; ++{n.c}) {{")
        e(13, "#pragma omp simd")
        e(13, f"for (long {n.r} = 0; {n.r} < {mr}; ++{n.r}) {acc_q}[{q}][{n.c}][{n.r}] += "
              f"{n.av}[({n.p} + {q}) * {mr} + {n.r}] * {n.bv}[({n.p} + {q}) * {self.b_step()} + {n.c}];")
        e(12, "}")
        e(11, "}")
        e(10, "}")
        e(10, f"if ({n.p} < {n.kc}) {{")
        e(11, f"for (long {n.c} = 0; {n.c} < {quarter}; ++{n.c}) {{")
        e(12, "#pragma omp simd")
        e(12, f"for (long {n.r} = 0; {n.r} < {mr}; ++{n.r}) {acc_q}[0][{n.c}][{n.r}] += {n.av}[{n.p} * {mr} + {n.r}] * "
              f"{n.bv}[{n.p} * {self.b_step()} + {n.c}];")
        e(11, "}")
        e(10, "}")
        e(10, f"for (long {n.r} = 0; {n.r} < {mr}; ++{n.r})")
        e(11, f"for (long {n.c} = 0; {n.c} < {quarter}; ++{n.c}) "
              f"{n.acc}[{n.r}][{n.c}] = {acc_q}[0][{n.c}][{n.r}] + {acc_q}[1][{n.c}][{n.r}];")
        e(9, "} else")

    def half_panel(self, half: int) -> None:
        """A last panel of at most half the columns: half-wide vectors, twice as many to an FMA
        cycle. Leaves an `else {` the full panel closes."""
        n, e, mr, T = self.n, self.e, self.mr, self.T
        acc_h = self.f(f"{n.acc}_h")
        e(9, f"if ({n.cols} <= {half}) {{")
        e(10, f"{T} {acc_h}[{mr}][{half}] = {{{{0.0f}}}};")
        e(10, f"for (long {n.p} = 0; {n.p} < {n.kc}; ++{n.p}) {{")
        e(11, f"#pragma GCC unroll {mr}")
        e(11, f"for (long {n.r} = 0; {n.r} < {mr}; ++{n.r}) {{")
        e(12, "#pragma omp simd")
        e(12, f"for (long {n.c} = 0; {n.c} < {half}; ++{n.c}) {acc_h}[{n.r}][{n.c}] += {n.av}[{n.p} * {mr} + {n.r}] * "
              f"{n.bv}[{n.p} * {self.b_step()} + {n.c}];")
        e(11, "}")
        e(10, "}")
        e(10, f"for (long {n.r} = 0; {n.r} < {mr}; ++{n.r})")
        e(11, f"for (long {n.c} = 0; {n.c} < {half}; ++{n.c}) {n.acc}[{n.r}][{n.c}] = {acc_h}[{n.r}][{n.c}];")
        e(9, "} else {")

    def full_panel(self) -> None:
        """The MR x NR tile over the kc block. A prepacked operand (weights) comes from memory
        on its panels' first use, each panel slice a short stream the hardware prefetcher starts
        late: on that first use (the other operand's first panel) fetch the next panel's slice,
        one line per k step, while this one computes (`prepacked_ahead`)."""
        n, e, mr, nr, K, ks = self.n, self.e, self.mr, self.nr, self.K, self.ks
        ahead = prepacked_ahead(self.pk, bool(self.pre["a"]), bool(self.pre["b"]) and not ks)
        for with_fetch in ((True, False) if ahead else (False,)):
            if ahead:
                first, nxt, step = (f"{n.ir} == 0 && {n.jr} + {nr} < {n.nc}", f"{n.bv} + {nr} * {K}L", nr) \
                    if ahead == "b" else (f"{n.jr} == 0 && {n.ir} + {mr} < {n.mc}", f"{n.av} + {mr} * {K}L", mr)
                e(9, f"if ({first}) {{" if with_fetch else "} else {")
            e(9, f"for (long {n.p} = 0; {n.p} < {n.kc}; ++{n.p}) {{")
            if ks:      # B in place: its kc rows are as many streams, far apart; fetch ahead along each
                e(10, f"__builtin_prefetch(&{n.bv}[{n.p} * {ks}L + {B_IN_PLACE_AHEAD * nr}], 0, 3);")
            if with_fetch:
                e(10, f"__builtin_prefetch({nxt} + {n.p} * {step}, 0, 2);")
            e(10, f"#pragma GCC unroll {mr}")
            e(10, f"for (long {n.r} = 0; {n.r} < {mr}; ++{n.r}) {{")
            e(11, "#pragma omp simd")
            e(11, f"for (long {n.c} = 0; {n.c} < {nr}; ++{n.c}) {n.acc}[{n.r}][{n.c}] += {n.av}[{n.p} * {mr} + {n.r}] * "
                  f"{n.bv}[{n.p} * {self.b_step()} + {n.c}];")
            e(10, "}")
            e(9, "}")
        if ahead:
            e(9, "}")

    def store(self) -> None:
        """The tile added to C (the first kc block stores, later ones add; the last applies the
        epilogue), full tiles with constant trips, edge tiles their valid part."""
        pk, n, e, mr, nr = self.pk, self.n, self.e, self.mr, self.nr
        single = self.K <= self.KC
        cases = [(True, True)] if single else [(True, True), (True, False), (False, True), (False, False)]
        for n_case, (first, last) in enumerate(cases):
            if not single:
                cond = " && ".join([f"{n.k0} == 0" if first else f"{n.k0} > 0",
                                    f"{n.k0} + {n.kc} >= {self.K}" if last else f"{n.k0} + {n.kc} < {self.K}"])
                e(9, ("if" if n_case == 0 else "} else if") + f" ({cond}) {{")
            d = 9 if single else 10
            # transposed (pk.swapped): partial sums between kc blocks stay in a buffer laid out
            # as the tiles (vector loads and stores); only the last block writes the output,
            # whose rows are the tile's columns
            part_sum = f"{n.cbuf}[{n.jr} * {self.MCP} + {n.ir} * {nr} + {n.r} * {nr} + {n.c}]" if pk.swapped \
                else self.output
            lines = [f"const {self.writer.ctype(self.stmt.target)} {n.v} = {n.acc}[{n.r}][{n.c}]"
                     + ("" if first else f" + {part_sum}") + ";"]
            if not last:
                lines.append(f"{part_sum} = {n.v};")
            elif self.needed(self.stmt.target):
                lines.append(f"{self.output} = {n.v};")
            if last:
                lines += self.epilogue_lines
            for full in (True, False):
                e(d, f"if ({n.rows} == {mr} && {n.cols} == {nr}) {{    /* a full tile */" if full else "} else {")
                # Transposed, the output is contiguous along the tile's columns' rows, but the
                # store still walks the tile's rows, its 16 columns one vector (a scatter of
                # 16 outputs a row apart): walked column by column (7 rows each) the loop
                # stays scalar, and gcc turns a relu6 epilogue's min/max into branches
                # (MobileNetV2's 1x1 64 -> 384 at 14x14 + relu6: 0.32 ms against 0.11)
                (x1, n1, u1), (x2, n2) = (n.r, mr if full else n.rows, mr), (n.c, nr if full else n.cols)
                if full:
                    e(d + 1, f"#pragma GCC unroll {u1}")
                e(d + 1, f"for (long {x1} = 0; {x1} < {n1}; ++{x1}) {{")
                e(d + 2, "#pragma omp simd")
                e(d + 2, f"for (long {x2} = 0; {x2} < {n2}; ++{x2}) {{")
                for line in lines:
                    e(d + 3, line)
                e(d + 2, "}")
                e(d + 1, "}")
            e(d, "}")
        if not single:
            e(9, "}")

    def close_region(self) -> None:
        """The unit loops closed (their body indented one more level: the claim loop's), each
        thread's finishing time noted, and the team told whether one was held up."""
        n, e, out = self.n, self.e, self.writer.out
        out[self.unit_body:] = ["    " + line if line.strip() else line for line in out[self.unit_body:]]
        e(4, "}")
        e(3, "}")
        if self.parallel:
            e(3, f"{n.t_done}[{n.tid} * 8] = ac_now();")
        e(2, "}")
        if self.parallel:
            e(2, f"ac_team_waited({n.t_done}, {n.nth}, {n.t_start});")

    # ------------------------------------------------------------------ constants of the kernel

    def constants(self) -> list[str]:
        """Lines ahead of the region: the offset tables and their run flags (constants of the
        kernel, filled on the first call and kept, as prepacked weights are: filled per call,
        MobileNetV2's stem spent 11 us of 0.28 ms on its 12544 offsets), the padded copies
        (scratch slots 2, 3) and the prepacked operands."""
        fill = self.offset_tables() + self.run_flag_tables()
        copies: list[str] = []
        for name, access, pads in self.padded:
            fill += self.writer.pad_copy(name, access, pads, 2 + len(copies))
            copies.append(name)
        for which in ("a", "b"):
            if self.pre[which]:
                fill += self.prepack_lines(which)
        return fill

    def offset_tables(self) -> list[str]:
        """The offset tables `term` asked for, in one array filled on the first call: int
        offsets (16 to a vector, so the packing loops vectorise) where every value fits."""
        if not self.table_fill:
            return []
        writer, f, ext, tab = self.writer, self.f, self.ext, self.n.tab
        total = sum(math.prod(ext[l] for l in loops) for _, loops, _ in self.table_fill)
        ctype = "int" if all(sum(abs(cv) * (ext[l] - 1) for l, cv in zip(loops, cs)) < 2 ** 31
                             for _, loops, cs in self.table_fill) else "long"
        writer.helpers = [h.replace("AC_OFFSET_T", ctype) for h in writer.helpers]
        fresh = f("tab_fresh")
        fill = [f"static {ctype}* {tab} = NULL;",
                f"const int {fresh} = {tab} == NULL;",
                f"if ({fresh}) {tab} = ({ctype}*)malloc({max(total, 1)}UL * sizeof({ctype}));"]
        at = 0
        for name, loops, cs in self.table_fill:
            fill.append(f"{ctype}* {name} = {tab} + {at};")
            at += math.prod(ext[l] for l in loops)
        fill.append(f"if ({fresh}) {{")
        for name, loops, cs in self.table_fill:
            x = f("x")
            fill.append(f"{{ long {x} = 0;")
            lv = {l: f(l) for l in loops}
            depth = 1
            for l in loops:
                fill.append("    " * depth + f"for (long {lv[l]} = 0; {lv[l]} < {ext[l]}; ++{lv[l]})")
                depth += 1
            value = " + ".join(f"{cv} * {lv[l]}" for l, cv in zip(loops, cs) if cv) or "0"
            fill.append("    " * depth + f"{name}[{x}++] = {value};")
            fill.append("}")
        fill.append("}")
        return fill

    def run_flag_tables(self) -> list[str]:
        """Per run flag: whether each NR-wide panel's offsets are evenly spaced (filled once)."""
        N, nr, fill = self.N, self.nr, []
        for flag, table, run_step in self.run_flags:
            pan, x = self.f("pan"), self.f("x")
            fill.append(f"static unsigned char* {flag} = NULL;")
            fill.append(f"if ({flag} == NULL) {{")
            fill.append(f"{flag} = (unsigned char*)malloc({-(-N // nr)}UL);")
            fill.append(f"for (long {pan} = 0; {pan} < {-(-N // nr)}; ++{pan}) {{")
            fill.append(f"    {flag}[{pan}] = {pan} * {nr} + {nr} <= {N};")
            fill.append(f"    for (long {x} = 1; {x} < {nr} && {flag}[{pan}]; ++{x}) "
                        f"{flag}[{pan}] = {table}[{pan} * {nr} + {x}] == {table}[{pan} * {nr}] + "
                        + (f"{x};" if run_step == 1 else f"{run_step} * {x};"))
            fill.append("}")
            fill.append("}")
        return fill

    def prepack_lines(self, which: str) -> list[str]:
        """Pack operand `which` once for all calls: its MR-high row panels (A) or NR-wide
        column panels (B) over all of K, zero-padded, per batch item where it varies with
        one; again only when its buffer's address changes (see `prepacked`)."""
        pk, n, T, K = self.pk, self.n, self.T, self.K
        access, text, decls = (pk.a, self.a_text, self.a_decls) if which == "a" else (pk.b, self.b_text, self.b_decls)
        src = self.writer.cname[access.tensor]
        rows, width, outer, inner = (self.M, self.mr, n.i0, n.ir) if which == "a" else (self.N, self.nr, n.j0, n.jr)
        lane = n.r if which == "a" else n.c
        per_batch, items = self.pre_len[which], self.pre_items[which]
        dst, seen = self.pre[which], f"{self.pre[which]}_src"
        lines = [f"/* {access.tensor} packed once as {width}-{'high row' if which == 'a' else 'wide column'} panels "
                 f"over all of K (re-packed when its buffer changes) */",
                 f"static {T}* {dst} = NULL;",
                 f"static const void* {seen} = NULL;",
                 f"if ({seen} != (const void*){src}) {{",
                 f"    if (!{dst}) {dst} = ({T}*)ac_kept({-(-items * per_batch * self.size // 64) * 64}UL);",
                 f"    for (long {n.bt} = 0; {n.bt} < {items}; ++{n.bt}) {{"]
        inner_div = 1
        for l in reversed(pk.batch):
            lines.append(f"        const long {self.bvar[l]} = ({n.bt} / {inner_div}) % {self.ext[l]};")
            inner_div *= self.ext[l]
        lines += ["        " + x for x in decls]
        lines += [f"        const long {outer} = 0, {n.k0} = 0;",
                  f"        for (long {inner} = 0; {inner} < {-(-rows // width) * width}; {inner} += {width})",
                  f"            for (long {n.p} = 0; {n.p} < {K}; ++{n.p})",
                  f"                for (long {lane} = 0; {lane} < {width}; ++{lane})",
                  f"                    {dst}[{n.bt} * {per_batch}L + {inner} * {K}L + {n.p} * {width} + {lane}] = "
                  f"{inner} + {lane} < {rows} ? {text} : 0.0f;",
                  "    }",
                  f"    {seen} = (const void*){src};",
                  "}"]
        return lines
