"""C code for an optimised Plan: one function per kernel, one entry point for the program.

The nest each kernel gets is the one `Schedule.loop_nest()` prints and `poly.from_tiled_schedule`
proves legal:

- tile loops, level by level (outer → inner), each level in `schedule.order_at(level)`; a
  tile loop is skipped where its tile covers the enclosing one. Tile ends are clipped with
  `AC_MIN` only where a remainder tile can occur (tracked exactly, level by level);
- inside the innermost tiles, the kernel's statements in program order, each over its own
  point loops: loops that follow an anchor loop run over that loop's current tile, local
  loops run in full;
- a statement that does not follow a tiled anchor loop (a ReLU epilogue has no `k`) runs
  once, in that loop's last tile (guarded by `tile_end == extent`): after the last update
  of its input, as poly.py models it;
- reduction targets are filled with their initial value (0, or -INFINITY for `max=`) when
  the kernel starts, so any tile order is correct;
- the register tile: a reduction whose output tile is small (<= `REGISTER_TILE_MAX`
  elements) is accumulated in a local array `acc` with the reduction loops outside and the
  output loops inside (constant trip counts, unrolled, the contiguous one `omp simd`), then
  stored back — the GEMM microkernel shape compilers vectorise well. Reassociating the sum
  is the same freedom the legality check grants (`reduction_reorderable=True`).
- packed GEMM: a kernel with a GEMM-like contraction (`C[i, j] += A[..] * B[..]`, operands
  indexed by plain in-range loops, A by {i, k}, B by {k, j} in any order, i*j*k >=
  `GEMM_PACK_MIN`, a tiled schedule) runs it BLIS-style instead of the tile nest: cache
  blocks mc/nc/kc are the schedule's outermost tiles of i/j/k, raised to at least
  `GEMM_MIN_BLOCK` (mc rounded up to whole micro-panels); per (nc, kc) block, B is copied
  into contiguous zero-padded 16-wide column panels, per (mc, kc) block A into 6-high row
  panels, and a 6x16 microkernel accumulates in a local array (j innermost, contiguous,
  `omp simd`) and adds it to C (edge tiles store only their valid part). `parallel` on i or
  j parallelises B's packing and the mc blocks (each thread packs its own A). The kernel's
  other statements (producers, epilogues) run in program order, each over its full nest
  (no longer fused into the GEMM's last k tile).

Annotations: `parallel` → `#pragma omp parallel for` on the outermost annotated loop
(with `collapse` over directly nested annotated loops of constant bounds); `vectorize` →
`#pragma omp simd` on that loop where it is innermost; `unroll` → `#pragma GCC unroll N`
on the innermost point loop.

Out-of-range reads give the access's pad value through a bounds check, emitted only for
dimensions whose index can leave the tensor. All tensors are `float` (f32); programs in
other dtypes compute in f32 and the host runner converts at the boundary (results then
differ from the interpreter, which rounds to the dtype after each statement, by at most that
rounding). DSL names are sanitised (`Namer`): C keywords, names the generated code uses,
invalid characters and leading digits, and collisions all get distinct C identifiers.

Buffers: `program_run(float* const* buffers)` takes one pointer per tensor, in
`buffer_layout(plan)` order — inputs and params, then outputs, then intermediates
(workspace the caller allocates); the order is written in the file's header comment.
"""
from __future__ import annotations

import math
from pathlib import Path
import re
from dataclasses import dataclass

from ..ir.program import Access, Affine, BinOp, Call, Const, Expr, Statement, Tensor
from ..ir.schedule import Kernel, Schedule

# Integer dtypes: the values a tensor can hold (stored in float buffers, saturating).
INT_RANGE = {"i8": (-128.0, 127.0), "i32": (-2147483648.0, 2147483647.0)}
# Largest register tile (output elements kept in a local `acc` array).
REGISTER_TILE_MAX = 256
# Packed GEMM microkernel: MR x NR outputs in a local array (6 x 16 f32: 12 AVX2 registers).
GEMM_MR, GEMM_NR = 6, 16
# Smallest M*N*K a contraction needs for the packed GEMM path (packing costs O(MK + KN) copies).
GEMM_PACK_MIN = 64 * 64 * 64
# Smallest cache blocks (mc, nc, kc) the packed path uses: smaller schedule tiles are raised
# to these (below them packing A again per nc block, and updating C per kc block, cost more
# than the blocks save; kc = 8 measured ~4x slower than kc = 64 here).
GEMM_MIN_BLOCK = (4 * GEMM_MR, 4 * GEMM_NR, 64)

C_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline
int long register restrict return short signed sizeof static struct switch typedef union unsigned
void volatile while _Bool _Complex _Imaginary _Alignas _Alignof _Atomic _Generic _Noreturn
_Static_assert _Thread_local bool true false NULL asm typeof
""".split())
# Identifiers the generated file or its headers define: never reused for DSL names.
RESERVED = frozenset("""
buffers seconds program_run program_run_profiled program_kernel_names ac_now main errno
exp expf sqrt sqrtf tanh tanhf fabs fabsf fmax fmaxf fmin fminf
INFINITY NAN HUGE_VAL size_t ptrdiff_t timespec clock_gettime memset malloc free aligned_alloc
""".split())


class Namer:
    """Gives each DSL name a distinct, valid C identifier (stable for a given call order)."""

    def __init__(self, taken=()):
        self.taken: set[str] = set(taken)
        self.names: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        if name in self.names:
            return self.names[name]
        self.names[name] = self.fresh(name)
        return self.names[name]

    def fresh(self, name: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", name) or "v"
        if base[0].isdigit() or base.startswith("_") or base.startswith("ac_") or base.startswith("AC_"):
            base = "v_" + base.lstrip("_")
        if base in C_KEYWORDS or base in RESERVED or base.startswith("kernel_"):
            base = base + "_"
        candidate, n = base, 2
        while candidate in self.taken:
            candidate, n = f"{base}_{n}", n + 1
        self.taken.add(candidate)
        return candidate

    def child(self) -> "Namer":
        """A scope that sees (and avoids) every name taken so far."""
        return Namer(self.taken)


# --------------------------------------------------------------------------- layout


def buffer_layout(plan) -> list[tuple[str, str]]:
    """[(tensor name, role)] in `program_run`'s buffer order: inputs/params, outputs, intermediates."""
    program = plan.program
    out = [(t.name, t.role) for t in program.inputs]
    out += [(name, "output") for name in program.outputs if name not in dict(out)]
    seen = dict(out)
    for kernel in plan.kernels:
        for t in kernel.tensors:
            if t.name not in seen:
                seen[t.name] = "workspace"
                out.append((t.name, "workspace"))
    return out


def tensor_of(plan, name: str) -> Tensor:
    if plan.program.has_tensor(name):
        return plan.program.tensor(name)
    for kernel in plan.kernels:
        for t in kernel.tensors:
            if t.name == name:
                return t
    raise KeyError(name)


# --------------------------------------------------------------------------- generation

_PRELUDE = r"""#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#define AC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define AC_MAX(a, b) ((a) > (b) ? (a) : (b))

/* An integer dtype's value: rounded half to even (the default rounding mode), saturated. */
static inline float ac_saturate(float x, float lo, float hi) { return fminf(fmaxf(nearbyintf(x), lo), hi); }
static inline float ac_relu(float x) { return x > 0.0f ? x : 0.0f; }
static inline float ac_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
static inline float ac_gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
static inline double ac_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
"""


def generate_c(plan, target=None) -> str:
    """The C translation unit for `plan` (deterministic text)."""
    program = plan.program
    namer = Namer(C_KEYWORDS | RESERVED)
    layout = buffer_layout(plan)
    cname = {name: namer(name) for name, _ in layout}
    lines = ["/* Generated by autocomp-jupyter. Do not edit: regenerate with Result.code(\"c\").",
             f" * program: {Path(program.filename).name}" + (f"    target: {target.name}" if target is not None else ""),
             " * Compile: cc -O3 -march=native -fopenmp -shared -fPIC program.c -o program.so",
             " * All tensors are row-major float (f32) arrays.",
             " * program_run(buffers): buffers[i] is the tensor below (workspace: caller-allocated scratch).",
             " *"]
    for i, (name, role) in enumerate(layout):
        t = tensor_of(plan, name)
        dtype_note = "" if t.dtype == "f32" else f" (declared {t.dtype}: computed as f32)"
        lines.append(f" *   buffers[{i}] {cname[name]:<12} {role:<9} float[{', '.join(map(str, t.shape))}]{dtype_note}")
    lines += [" */", _PRELUDE, f"#define PROGRAM_NUM_BUFFERS {len(layout)}",
              f"#define PROGRAM_NUM_KERNELS {len(plan.kernels)}", ""]
    kernel_names = []
    kernel_namer = Namer()
    for kernel, schedule in zip(plan.kernels, plan.schedules):
        fn = "kernel_" + kernel_namer.fresh(kernel.name)
        kernel_names.append(fn)
        lines.append(_KernelWriter(plan, kernel, schedule, cname, namer.child()).function(fn))
        lines.append("")
    index = {name: i for i, (name, _) in enumerate(layout)}
    calls = []
    for kernel, fn in zip(plan.kernels, kernel_names):
        args = ", ".join(f"buffers[{index[t.name]}]" for t in kernel.tensors)
        calls.append(f"{fn}({args});")
    names = ", ".join(f'"{k.name}"' for k in plan.kernels)
    lines.append(f"const char* const program_kernel_names[PROGRAM_NUM_KERNELS] = {{{names}}};")
    lines.append("")
    lines.append("void program_run(float* const* buffers) {")
    lines += [f"    {c}" for c in calls]
    lines.append("}")
    lines.append("")
    lines.append("/* program_run, timing each kernel: seconds[i] for kernel i. */")
    lines.append("void program_run_profiled(float* const* buffers, double* seconds) {")
    lines.append("    double t0 = ac_now(), t1;")
    for i, c in enumerate(calls):
        lines.append(f"    {c}")
        lines.append(f"    t1 = ac_now(); seconds[{i}] = t1 - t0; t0 = t1;")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _float(value: float) -> str:
    if value == math.inf:
        return "INFINITY"
    if value == -math.inf:
        return "(-INFINITY)"
    if math.isnan(value):
        return "NAN"
    text = repr(float(value))
    if "e" not in text and "." not in text:
        text += ".0"
    return text + "f"


def _affine_c(terms: dict[str, int], const: int) -> str:
    parts = []
    for var, coeff in terms.items():
        if coeff == 0:
            continue
        term = var if abs(coeff) == 1 else f"{abs(coeff)} * {var}"
        if not parts:
            parts.append(term if coeff > 0 else f"-{term}")
        else:
            parts.append(("+ " if coeff > 0 else "- ") + term)
    if const or not parts:
        if not parts:
            parts.append(str(const))
        else:
            parts.append(f"+ {const}" if const > 0 else f"- {-const}")
    return " ".join(parts)


@dataclass
class _Tile:
    """Where the nest stands for one anchor loop: the current tile's start and end (C
    expressions, None when untiled) and the lengths that tile can have."""

    start: str | None
    end: str | None
    lengths: frozenset[int]


class _KernelWriter:
    def __init__(self, plan, kernel: Kernel, schedule: Schedule, cname: dict[str, str], namer: Namer):
        self.plan, self.kernel, self.schedule, self.cname, self.namer = plan, kernel, schedule, cname, namer
        self.extents = kernel.extents
        self.parallel = tuple(schedule.annotations.get("parallel", ()) or ())
        self.vectorize = schedule.annotations.get("vectorize")
        self.unroll = int(schedule.annotations.get("unroll") or 0)
        # Integer tensors this kernel accumulates: stored raw while the sum runs, read saturated.
        self.int_accumulators = {st.target for st in kernel.statements
                                 if st.reduce is not None and kernel.tensor(st.target).dtype in INT_RANGE}
        self.out: list[str] = []

    # ------------------------------------------------------------------ helpers

    def emit(self, depth: int, text: str) -> None:
        self.out.append("    " * depth + text)

    def tensor(self, name: str) -> Tensor:
        return self.kernel.tensor(name)

    def function(self, fn: str) -> str:
        k = self.kernel
        written = {s.target for s in k.statements}
        params = []
        for t in k.tensors:
            const = "" if t.name in written else "const "
            params.append(f"{const}float* restrict {self.cname[t.name]}")
        ops = ", ".join(k.ops)
        self.emit(0, f"/* kernel {k.name}: ops {ops} */")
        self.emit(0, f"static void {fn}({', '.join(params)}) {{")
        for s in k.statements:
            if s.reduce is not None:
                t = self.tensor(s.target)
                var = self.namer.fresh("n")
                self.emit(1, "#pragma omp parallel for simd" if t.size >= (1 << 16) and self.parallel else "#pragma omp simd")
                self.emit(1, f"for (long {var} = 0; {var} < {t.size}L; ++{var}) "
                             f"{self.cname[t.name]}[{var}] = {_float(0.0 if s.reduce == '+' else -math.inf)};")
        from ..ir.loopnest import lower

        gemm = self.gemm_statement()
        if gemm is None:
            self.emit_nest(lower(self.schedule))
        else:
            # The packed path: every statement over its full nest, in program order (the
            # untiled schedule's tree), the GEMM-like one packed with the schedule's blocks.
            index, ops, loops = gemm
            self.emit_nest(lower(Schedule.default(self.kernel, self.schedule.levels)), index, (ops, loops))
        for s in k.statements:    # integer reductions saturate once complete (see saturate)
            if s.reduce is not None and self.tensor(s.target).dtype in INT_RANGE:
                t, var = self.tensor(s.target), self.namer.fresh("n")
                self.emit(1, f"for (long {var} = 0; {var} < {t.size}L; ++{var}) "
                             f"{self.cname[t.name]}[{var}] = {self.saturate(t.name, f'{self.cname[t.name]}[{var}]')};")
        self.emit(0, "}")
        return "\n".join(self.out)

    # ------------------------------------------------------------------ packed GEMM

    def gemm_statement(self):
        """(statement index, (A access, B access), (i, j, k)) for a GEMM-like contraction this
        kernel can run packed: `C[i, j] += A[..] * B[..]` where each operand is indexed by
        plain loops (one loop per dimension, coefficient 1, in range: no pads), A by {i, k},
        B by {k, j}, the schedule tiles at least one of i, j, k, and the work is large enough
        to pay for the packing; else None."""
        found = None
        for index, stmt in enumerate(self.kernel.statements):
            if stmt.reduce != "+" or len(stmt.target_indices) != 2 or len(stmt.loop_names) != 3:
                continue
            i, j = (idx.single_loop for idx in stmt.target_indices)
            if i is None or j is None or i == j or any(idx.const for idx in stmt.target_indices):
                continue
            (k,) = [l for l in stmt.loop_names if l not in (i, j)] or [None]
            e = stmt.expr
            if k is None or not (isinstance(e, BinOp) and e.op == "*" and isinstance(e.lhs, Access)
                                 and isinstance(e.rhs, Access)):
                continue
            ext = stmt.extents
            if ext[i] * ext[j] * ext[k] < GEMM_PACK_MIN or all(self.block_size(index, l) >= ext[l] for l in (i, j, k)):
                continue    # small, or an untiled (naive) schedule: the plain nest

            def loops_of(a: Access):
                t = self.tensor(a.tensor)
                out = []
                for d, idx in enumerate(a.indices):
                    if idx.const or len(idx.terms) != 1 or idx.terms[0][1] != 1:
                        return None
                    loop = idx.terms[0][0]
                    if ext[loop] > t.shape[d]:
                        return None
                    out.append(loop)
                return out
            la, lb = loops_of(e.lhs), loops_of(e.rhs)
            if la is None or lb is None:
                continue
            ops = None
            if sorted(la) == sorted((i, k)) and sorted(lb) == sorted((k, j)):
                ops = (e.lhs, e.rhs)
            elif sorted(lb) == sorted((i, k)) and sorted(la) == sorted((k, j)):
                ops = (e.rhs, e.lhs)
            if ops is None or stmt.target in (ops[0].tensor, ops[1].tensor):
                continue
            found = (index, ops, (i, j, k))
            break
        return found

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

    def strides_of(self, a: Access) -> dict[str, int]:
        shape = self.tensor(a.tensor).shape
        return {idx.terms[0][0]: math.prod(shape[d + 1:]) for d, idx in enumerate(a.indices)}

    def packed_gemm(self, index: int, stmt: Statement, ops, loops) -> None:
        mr, nr = GEMM_MR, GEMM_NR
        i, j, k = loops
        ext = stmt.extents
        M, N, K = ext[i], ext[j], ext[k]
        MC, NC, KC = (min(max(self.block_size(index, l), floor), ext[l]) for l, floor in zip(loops, GEMM_MIN_BLOCK))
        MC = -(-MC // mr) * mr if MC >= mr else MC
        MCP, NCP = -(-MC // mr) * mr, -(-NC // nr) * nr      # padded to whole micro-panels
        a, b = ops
        sa, sb = self.strides_of(a), self.strides_of(b)
        A, B, C = self.cname[a.tensor], self.cname[b.tensor], self.cname[stmt.target]
        sc = self.strides_of(Access(stmt.target, stmt.target_indices))
        f = self.namer.fresh    # kernel scope: later statements' names avoid these
        j0, k0, i0, jr, ir, p, r, c = (f(n) for n in ("j0", "k0", "i0", "jr", "ir", "p", "r", "c"))
        nc, kc, mc, Ap, Bp, acc, cp, av, bv = (f(n) for n in ("nc", "kc", "mc", "Apack", "Bpack", "acc", "cp",
                                                               "ap", "bp"))
        parallel = bool(set(self.parallel) & {self.kernel.loop_map(index).get(l) for l in (i, j)})
        e = self.emit
        e(1, f"/* {str(stmt).split('    #')[0]} */")
        e(1, f"/* packed GEMM: blocks mc={MC} nc={NC} kc={KC} (the schedule's outermost tiles, raised to >= {'/'.join(map(str, GEMM_MIN_BLOCK))}, mc in whole micro-panels), "
             f"microkernel {mr}x{nr} */")
        e(1, f"float* {Bp} = (float*)aligned_alloc(64, {KC * NCP * 4}UL);")
        e(1, f"for (long {j0} = 0; {j0} < {N}; {j0} += {NC}) {{")
        e(2, f"const long {nc} = AC_MIN({NC}, {N} - {j0});")
        e(2, f"for (long {k0} = 0; {k0} < {K}; {k0} += {KC}) {{")
        e(3, f"const long {kc} = AC_MIN({KC}, {K} - {k0});")
        e(3, f"/* pack B[{k0}:+{kc}, {j0}:+{nc}] as {nr}-wide column panels, zero-padded */")
        if parallel:
            e(3, "#pragma omp parallel for")
        e(3, f"for (long {jr} = 0; {jr} < {nc}; {jr} += {nr}) {{")
        e(4, f"for (long {p} = 0; {p} < {kc}; ++{p}) {{")
        e(5, "#pragma omp simd")
        e(5, f"for (long {c} = 0; {c} < {nr}; ++{c}) {Bp}[{jr} * {kc} + {p} * {nr} + {c}] = {jr} + {c} < {nc} ? "
             f"{B}[{_affine_c({f'({k0} + {p})': sb[k], f'({j0} + {jr} + {c})': sb[j]}, 0)}] : 0.0f;")
        e(4, "}")
        e(3, "}")
        if parallel:
            e(3, "#pragma omp parallel")
        e(3, "{")
        e(4, f"float* {Ap} = (float*)aligned_alloc(64, {-(-MCP * KC * 4 // 64) * 64}UL);")
        if parallel:
            e(4, "#pragma omp for schedule(dynamic, 1)")
        e(4, f"for (long {i0} = 0; {i0} < {M}; {i0} += {MC}) {{")
        e(5, f"const long {mc} = AC_MIN({MC}, {M} - {i0});")
        e(5, f"/* pack A[{i0}:+{mc}, {k0}:+{kc}] as {mr}-high row panels, zero-padded */")
        e(5, f"for (long {ir} = 0; {ir} < {mc}; {ir} += {mr}) {{")
        e(6, f"for (long {p} = 0; {p} < {kc}; ++{p}) {{")
        e(7, f"for (long {r} = 0; {r} < {mr}; ++{r}) {Ap}[{ir} * {kc} + {p} * {mr} + {r}] = {ir} + {r} < {mc} ? "
             f"{A}[{_affine_c({f'({i0} + {ir} + {r})': sa[i], f'({k0} + {p})': sa[k]}, 0)}] : 0.0f;")
        e(6, "}")
        e(5, "}")
        e(5, f"for (long {jr} = 0; {jr} < {nc}; {jr} += {nr}) {{")
        e(6, f"for (long {ir} = 0; {ir} < {mc}; {ir} += {mr}) {{")
        e(7, f"const float* restrict {av} = {Ap} + {ir} * {kc};")
        e(7, f"const float* restrict {bv} = {Bp} + {jr} * {kc};")
        e(7, f"float {acc}[{mr}][{nr}] = {{{{0.0f}}}};")
        e(7, f"for (long {p} = 0; {p} < {kc}; ++{p}) {{")
        e(8, f"#pragma GCC unroll {mr}")
        e(8, f"for (long {r} = 0; {r} < {mr}; ++{r}) {{")
        e(9, "#pragma omp simd")
        e(9, f"for (long {c} = 0; {c} < {nr}; ++{c}) {acc}[{r}][{c}] += {av}[{p} * {mr} + {r}] * {bv}[{p} * {nr} + {c}];")
        e(8, "}")
        e(7, "}")
        cidx = _affine_c({r: sc[i], c: sc[j]}, 0)
        e(7, f"float* restrict {cp} = {C} + {_affine_c({f'({i0} + {ir})': sc[i], f'({j0} + {jr})': sc[j]}, 0)};")
        e(7, f"if ({mc} - {ir} >= {mr} && {nc} - {jr} >= {nr}) {{")
        e(8, f"#pragma GCC unroll {mr}")
        e(8, f"for (long {r} = 0; {r} < {mr}; ++{r}) {{")
        e(9, "#pragma omp simd")
        e(9, f"for (long {c} = 0; {c} < {nr}; ++{c}) {cp}[{cidx}] += {acc}[{r}][{c}];")
        e(8, "}")
        e(7, "} else {    /* an edge tile */")
        e(8, f"for (long {r} = 0; {r} < AC_MIN({mr}, {mc} - {ir}); ++{r}) {{")
        e(9, f"for (long {c} = 0; {c} < AC_MIN({nr}, {nc} - {jr}); ++{c}) {cp}[{cidx}] += {acc}[{r}][{c}];")
        e(8, "}")
        e(7, "}")
        e(6, "}")
        e(5, "}")
        e(4, "}")
        e(4, f"free({Ap});")
        e(3, "}")
        e(2, "}")
        e(1, "}")
        e(1, f"free({Bp});")

    # ------------------------------------------------------------------ the loop nest

    def emit_nest(self, nest, gemm_index: int | None = None, gemm=None) -> None:
        """Write the kernel's loop nest (`ir.loopnest.lower`): tile loops as C for loops
        (ends clipped with `AC_MIN` only where a remainder tile can occur), each statement's
        point nest inside them, guarded where it runs only in the last tile; the statement
        `gemm_index` (an untiled nest's packed GEMM) through the packed path."""
        from ..ir.loopnest import TileLoop

        cvar: dict[str, str] = {}

        def name(var: str) -> str:
            if var not in cvar:
                cvar[var] = self.namer.fresh(var)
            return cvar[var]

        closing: list[int] = []
        for depth, node, bounds in nest.walk(name=name, minimum="AC_MIN"):
            while closing and closing[-1] >= depth + 1:
                self.emit(closing.pop(), "}")
            d = depth + 1
            if isinstance(node, TileLoop):
                start, stop, _ = bounds[node.var]
                if node.parallel:
                    self.emit(d, "#pragma omp parallel for")
                self.emit(d, f"for (long {name(node.var)} = {start}; {name(node.var)} < {stop}; "
                             f"{name(node.var)} += {node.size}) {{")
                closing.append(d)
                continue
            if node.index == gemm_index:
                self.packed_gemm(node.index, node.statement, *gemm)
                continue
            innermost = {t.anchor: t.var for t in nest.tile_loops() if t.var in node.last_of}
            guards = [f"{bounds[v][2]} == {self.extents[a]}" for a, v in innermost.items()]
            if guards:
                self.emit(d, f"if ({' && '.join(dict.fromkeys(guards))}) {{")
                d += 1
            tiles = {p.name: (_Tile(name(p.tile), bounds[p.tile][2], p.lengths) if p.tile else None)
                     for p in node.loops}
            self.statement(node, tiles, d)
            if guards:
                self.emit(d - 1, "}")
        while closing:
            self.emit(closing.pop(), "}")

    # ------------------------------------------------------------------ statements

    def statement(self, node, tiles: dict, depth: int) -> None:
        """One statement's point nest (`Compute` node), under tiles {own loop: _Tile or None}."""
        index, stmt = node.index, node.statement
        scope = self.namer.child()
        var: dict[str, str] = {}
        bounds: dict[str, tuple[str, str, int | None]] = {}  # own loop -> (start, end, constant trip)
        order = [p.name for p in node.loops]
        ext = stmt.extents
        for p in node.loops:
            var[p.name] = scope.fresh(p.anchor or p.name)
            tile = tiles[p.name]
            if tile is None:
                bounds[p.name] = ("0", str(ext[p.name]), ext[p.name])
            else:
                trip = next(iter(tile.lengths)) if len(tile.lengths) == 1 else None
                bounds[p.name] = (tile.start, tile.end, trip)
        self.emit(depth, f"/* {str(stmt).split('    #')[0]} */")
        rank_out = [idx.single_loop for idx in stmt.target_indices]
        out_loops = [l for l in order if l in rank_out]
        red_loops = [l for l in order if l not in rank_out]
        # a full tile's size per output loop (remainder tiles take the plain nest)
        full = {l: bounds[l][2] or (max(tiles[l].lengths) if tiles[l] is not None else None) for l in out_loops}
        register_tile = math.prod(full[l] or REGISTER_TILE_MAX + 1 for l in out_loops) if out_loops else 1
        if (stmt.reduce is not None and red_loops and None not in rank_out
                and len(set(rank_out)) == len(rank_out) and register_tile <= REGISTER_TILE_MAX):
            partial = [l for l in out_loops if bounds[l][2] is None]
            if partial:
                cond = " && ".join(f"{bounds[l][1]} - {bounds[l][0]} == {full[l]}" for l in partial)
                self.emit(depth, f"if ({cond}) {{    /* a full register tile */")
                full_bounds = {l: (b[0], b[1], full.get(l, b[2]) if l in full else b[2]) for l, b in bounds.items()}
                self.register_tiled(stmt, depth + 1, var, full_bounds, out_loops, red_loops, scope)
                self.emit(depth, "} else {")
                self.plain(node, depth + 1, var, bounds)
                self.emit(depth, "}")
            else:
                self.register_tiled(stmt, depth, var, bounds, out_loops, red_loops, scope)
        else:
            self.plain(node, depth, var, bounds)

    def _for(self, depth: int, v: str, start: str, end: str, trip: int | None) -> None:
        if trip is not None and start != "0":
            end = f"{start} + {trip}"
        self.emit(depth, f"for (long {v} = {start}; {v} < {end}; ++{v}) {{")

    def plain(self, node, depth, var, bounds) -> None:
        stmt = node.statement
        target = self.access_c(stmt.target, stmt.target_indices, var, stmt, check=False)
        expr = self.expr_c(stmt.expr, var, stmt)
        d = depth
        for p in node.loops:
            if p.parallel:
                self.emit(d, "#pragma omp parallel for")
            if p.vectorize:
                self.emit(d, "#pragma omp simd")  # (a loop takes one of simd / unroll: simd wins)
            elif p.unroll > 1:
                self.emit(d, f"#pragma GCC unroll {p.unroll}")
            start, end, trip = bounds[p.name]
            self._for(d, var[p.name], start, end, trip)
            d += 1
        if stmt.reduce == "+":
            self.emit(d, f"{target} += {expr};")
        elif stmt.reduce == "max":
            self.emit(d, f"{target} = AC_MAX({target}, {expr});")
        else:
            self.emit(d, f"{target} = {self.saturate(stmt.target, expr)};")
        for dd in range(d - 1, depth - 1, -1):
            self.emit(dd, "}")

    def register_tiled(self, stmt, depth, var, bounds, out_loops, red_loops, scope) -> None:
        """Accumulate the output tile in `acc` (registers), reduction loops outside."""
        acc = scope.fresh("acc")
        trips = [bounds[l][2] for l in out_loops]
        # the contiguous output loop innermost (vectorised): the target's last dimension
        last = stmt.target_indices[-1].single_loop
        out_loops = [l for l in out_loops if l != last] + [last]
        trips = [bounds[l][2] for l in out_loops]
        size = math.prod(trips)
        strides = [math.prod(trips[i + 1:]) for i in range(len(trips))]
        local = {l: f"({var[l]} - {bounds[l][0]})" if bounds[l][0] != "0" else var[l] for l in out_loops}
        acc_index = " + ".join(f"{local[l]} * {st}" if st != 1 else local[l] for l, st in zip(out_loops, strides))
        target = self.access_c(stmt.target, stmt.target_indices, var, stmt, check=False)
        expr = self.expr_c(stmt.expr, var, stmt)
        d = depth
        self.emit(d, "{")
        d += 1
        self.emit(d, f"float {acc}[{size}];")

        def out_nest(body: str, d: int) -> None:
            for n, l in enumerate(out_loops):
                if n == len(out_loops) - 1:
                    self.emit(d, "#pragma omp simd")
                else:
                    self.emit(d, f"#pragma GCC unroll {bounds[l][2]}")
                self._for(d, var[l], bounds[l][0], bounds[l][1], bounds[l][2])
                d += 1
            self.emit(d, body)
            for dd in range(d - 1, d - 1 - len(out_loops), -1):
                self.emit(dd, "}")

        out_nest(f"{acc}[{acc_index}] = {target};", d)
        dd = d
        for n, l in enumerate(red_loops):
            if n == len(red_loops) - 1 and self.unroll > 1:
                self.emit(dd, f"#pragma GCC unroll {self.unroll}")
            self._for(dd, var[l], *bounds[l])
            dd += 1
        if stmt.reduce == "+":
            out_nest(f"{acc}[{acc_index}] += {expr};", dd)
        else:
            out_nest(f"{acc}[{acc_index}] = AC_MAX({acc}[{acc_index}], {expr});", dd)
        for x in range(dd - 1, d - 1, -1):
            self.emit(x, "}")
        out_nest(f"{target} = {acc}[{acc_index}];", d)
        self.emit(d - 1, "}")

    # ------------------------------------------------------------------ expressions

    def access_c(self, tensor: str, indices, var, stmt: Statement, check=True, pad: float = 0.0) -> str:
        t = self.tensor(tensor)
        shape = t.shape
        strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
        terms: dict[str, int] = {}
        const = 0
        conditions = []
        ext = stmt.extents
        for d, idx in enumerate(indices):
            for loop, coeff in idx.terms:
                terms[var[loop]] = terms.get(var[loop], 0) + coeff * strides[d]
            const += idx.const * strides[d]
            lo = idx.const + sum(min(0, c * (ext[l] - 1)) for l, c in idx.terms)
            hi = idx.const + sum(max(0, c * (ext[l] - 1)) for l, c in idx.terms)
            if check and (lo < 0 or hi >= shape[d]):
                dim_c = _affine_c({var[l]: c for l, c in idx.terms}, idx.const)
                conditions.append(f"(unsigned long)({dim_c}) < {shape[d]}UL")
        flat = _affine_c(terms, const)
        text = f"{self.cname[tensor]}[{flat}]"
        if conditions:
            return f"({' && '.join(conditions)} ? {text} : {_float(pad)})"
        return text

    def saturate(self, tensor: str, value: str) -> str:
        """`value` as stored in `tensor`: rounded half to even and saturated for integer
        dtypes (the interpreter's `round_to_dtype`), unchanged for floats."""
        dtype = self.tensor(tensor).dtype
        if dtype not in INT_RANGE:
            return value
        lo, hi = INT_RANGE[dtype]
        return f"ac_saturate({value}, {_float(lo)}, {_float(hi)})"

    def expr_c(self, e: Expr, var, stmt: Statement) -> str:
        if isinstance(e, Const):
            return _float(e.value)
        if isinstance(e, Access):
            text = self.access_c(e.tensor, e.indices, var, stmt, check=True, pad=e.pad)
            if e.tensor in self.int_accumulators:   # read once complete: saturated
                return self.saturate(e.tensor, text)
            return text
        if isinstance(e, BinOp):
            return f"({self.expr_c(e.lhs, var, stmt)} {e.op} {self.expr_c(e.rhs, var, stmt)})"
        if isinstance(e, Call):
            args = [self.expr_c(a, var, stmt) for a in e.args]
            fn = {"exp": "expf", "sqrt": "sqrtf", "tanh": "tanhf", "abs": "fabsf", "relu": "ac_relu",
                  "sigmoid": "ac_sigmoid", "gelu": "ac_gelu", "max": "AC_MAX", "min": "AC_MIN"}.get(e.fn)
            if e.fn == "neg":
                return f"(-{args[0]})"
            if fn is None:
                raise ValueError(f"no C translation for function {e.fn!r}")
            return f"{fn}({', '.join(args)})"
        raise TypeError(f"cannot generate C for {e!r}")
