"""What every C writer of a kernel shares (`WriterBase`): the kernel, its schedule and C names,
the lines written so far (`out`) and the static functions written ahead of the kernel
(`helpers`); C text of expressions (`expr_c`, `access_c`, `rounded`: the interpreter's
dtype semantics) and of the pieces several strategies use: a parallel region whose threads
note when they ran out of work (`region_begin`/`region_end`), a padded copy of an operand
(`pad_copy`), the store of a contraction with its fused epilogue (`epilogue_store`), a flat
index taken apart (`unflatten`), lines moved into a function of their own (`outline`).

Dtypes (the interpreter's semantics: float64 values, rounded to the target's dtype when a
statement stores, `interp.round_to_dtype`): f32, f16 and bf16 tensors are `float` buffers,
integer (i8, i32) tensors `double` buffers — a double holds every i32 and every integer sum
below 2^53 exactly, as the interpreter's float64 does. A statement whose target is an
integer computes in double (double constants and functions; a kernel where such a statement
adds a product that can round, x * 0.1 + y, is compiled without FMA contraction: `AC_EXACT`),
the others in float. Every `=` store is rounded to the target's dtype (`rounded`:
`ac_saturate` — half to even, saturated — for integers, `ac_round_f16`/`ac_round_bf16`);
reductions accumulate unrounded (an integer sum exactly) and are rounded in place once
complete, a later statement of the kernel reading them rounded.
"""
from __future__ import annotations

import math
import re

from ...host_strategy.access import substitute
from ...host_strategy.epilogue import epilogue_point
from ...host_strategy.gemm import Packed
from ...ir.program import Access, BinOp, Call, Const, Expr, IndexValue, Statement, Tensor
from ...ir.schedule import Kernel, Schedule
from .ctext import c_affine, c_double, c_float
from .layout import INT_RANGE, buffer_ctype
from .naming import Namer

# Comparisons give 1 or 0 (written inline, in the statement's type).
_C_COMPARE = {"less": "<", "less_equal": "<=", "equal": "=="}


class WriterBase:
    """A kernel's C being written: the state and the tools every strategy writes with."""

    def __init__(self, plan, kernel: Kernel, schedule: Schedule, cname: dict[str, str], namer: Namer):
        self.plan, self.kernel, self.schedule, self.cname, self.namer = plan, kernel, schedule, cname, namer
        self.extents = kernel.extents
        self.parallel = schedule.parallel or ()
        self.vectorize = schedule.vectorize
        self.unroll = schedule.unroll
        # Non-f32 tensors this kernel accumulates: stored unrounded while the sum runs (an integer
        # sum exactly, in double), read rounded to their dtype, rounded in place once complete.
        self.rounded_accumulators = {st.target for st in kernel.statements
                                     if st.reduce is not None and kernel.tensor(st.target).dtype != "f32"}
        self.out: list[str] = []
        self.helpers: list[str] = []    # static functions the kernel calls (written before it)
        self.fn = ""
        self.seen: dict[int, str] = {}  # rescaled sum (online softmax) -> its last-seen-max buffer

    # ------------------------------------------------------------------ helpers

    def emit(self, depth: int, text: str) -> None:
        self.out.append("    " * depth + text)

    def tensor(self, name: str) -> Tensor:
        return self.kernel.tensor(name)

    def ctype(self, name: str) -> str:
        """The C element type of tensor `name`'s buffer."""
        return buffer_ctype(self.tensor(name).dtype)

    def in_double(self, stmt: Statement) -> bool:
        """Whether `stmt` computes in double: its target is an integer tensor."""
        return self.tensor(stmt.target).dtype in INT_RANGE

    def literal(self, stmt: Statement, value: float) -> str:
        """A constant of `stmt`'s expression, in the type it computes in."""
        return c_double(value) if self.in_double(stmt) else c_float(value)

    def exact_needed(self) -> bool:
        """Whether an integer statement of this kernel adds a product that can round (a
        non-integer constant or a floating tensor: X[i] * 0.1 + b[i], Y += X * 0.5): then
        a*b+c must not become one FMA (`AC_EXACT`), or the sum differs from numpy's in its
        last bit and can round half to even the other way. Products of integers are exact,
        fused or not (the integer GEMM keeps its FMAs)."""
        def integral(e: Expr) -> bool:
            if isinstance(e, Const):
                return float(e.value).is_integer()
            if isinstance(e, Access):
                return self.tensor(e.tensor).dtype in INT_RANGE and float(e.pad).is_integer()
            if isinstance(e, BinOp):
                return e.op != "/" and integral(e.lhs) and integral(e.rhs)
            if isinstance(e, Call):
                return e.fn in ("neg", "abs", "relu", "max", "min") and all(integral(a) for a in e.args)
            return False

        def fusable(e: Expr, added: bool) -> bool:     # a rounding product an add can absorb
            if isinstance(e, BinOp):
                if e.op == "*" and added and not integral(e):
                    return True
                return fusable(e.lhs, e.op in "+-") or fusable(e.rhs, e.op in "+-")
            if isinstance(e, Call):
                return any(fusable(a, added and e.fn == "neg") for a in e.args)
            return False
        return any(self.in_double(st) and fusable(st.expr, st.reduce == "+") for st in self.kernel.statements)

    # ------------------------------------------------------------------ pieces several strategies use

    def region_begin(self, depth: int, schedule: str) -> tuple[str, str, str]:
        """Open a parallel region of ac_team() threads whose loop (emitted next, at `depth`) is
        shared with `schedule`, each thread noting when it ran out of iterations (see
        `region_end`)."""
        nth, t_done, t_start = (self.namer.fresh(x) for x in ("nth", "t_done", "t_start"))
        e = self.emit
        e(depth, "{")
        e(depth, f"const int {nth} = ac_team();")
        e(depth, f"double {t_done}[{nth} * 8];    /* per thread: when it ran out of iterations */")
        e(depth, f"const double {t_start} = ac_now();")
        e(depth, f"#pragma omp parallel num_threads({nth})")
        e(depth, "{")
        e(depth, f"#pragma omp for schedule({schedule}) nowait")
        return nth, t_done, t_start

    def region_end(self, depth: int, names: tuple[str, str, str]) -> None:
        nth, t_done, t_start = names
        self.emit(depth, f"{t_done}[ac_thread() * 8] = ac_now();")
        self.emit(depth, "}")
        self.emit(depth, f"ac_team_waited({t_done}, {nth}, {t_start});")
        self.emit(depth, "}")

    def epilogue_store(self, pk: Packed, depth: int, v: str, at_point) -> None:
        """Store `v` (the contraction's value at the current point) and apply the statements
        `pk.epilogue` there (`at_point(access)`: the C text of an access at the point)."""
        k, f, e = self.kernel, self.namer.fresh, self.emit
        stmt = k.statements[pk.index]
        fused = set(pk.epilogue)
        readers = {r.tensor for s, st in enumerate(k.statements) if s != pk.index and s not in fused for r in st.reads()}

        def needed(t: str) -> bool:
            return t not in k.internals or t in readers
        if needed(stmt.target):
            e(depth, f"{at_point(Access(stmt.target, stmt.target_indices))} = {v};")
        local = {stmt.target: v}
        for s in pk.epilogue:
            st = k.statements[s]
            at = epilogue_point(k, pk.index, s)

            def access_at(r: Access, at=at):
                return local.get(r.tensor) or at_point(substitute(r, at))
            var = f(f"{self.cname[st.target]}_v")
            e(depth, f"const float {var} = {self.expr_c(st.expr, {}, st, access=access_at)};")
            local[st.target] = var
            if needed(st.target):
                e(depth, f"{at_point(substitute(Access(st.target, st.target_indices), at))} = {var};")

    def unflatten(self, depth: int, flat: str, loops, cv: dict, ext: dict) -> None:
        """Each of `loops` (outer → inner) as its value in the flat index `flat` over them."""
        inner = 1
        for l in reversed(list(loops)):
            self.emit(depth, f"const long {cv[l]} = ({flat} / {inner}) % {ext[l]};")
            inner *= ext[l]

    def pad_copy(self, name: str, access: Access, pads: list[tuple[int, int]], slot: int,
                 fixed: dict[int, str] | None = None, shared: bool = False) -> list[str]:
        """C lines filling scratch slot `slot` as `name`: `access`'s tensor padded by `pads` (per
        dimension, below and past the end) with the access's pad value. `fixed` {dimension:
        C index}: only the slab at those indices of the leading dimensions (unpadded), its
        other dimensions laid out as in the whole padded copy. `shared`: its rows shared by
        the threads (one parallel loop over them)."""
        f = self.namer.fresh
        fixed = fixed or {}
        t = self.tensor(access.tensor)
        pshape = [n + lo + hi for n, (lo, hi) in zip(t.shape, pads)]
        qs = [f(f"q{d}") for d in range(len(pshape))]
        ct = self.ctype(access.tensor)
        size = math.prod(n for d, n in enumerate(pshape) if d not in fixed)
        fill = [f"/* {self.cname[access.tensor]} padded by {pads} (pad value {access.pad:g}), "
                + ("this batch item's slab, by the thread that reads it" if fixed else "once per call")
                + ": no bounds checks while packing */",
                f"{ct}* {name} = ac_scratch({slot}, {size}UL * sizeof({ct}));"]
        # row by row: a row outside the tensor is all pad, else pad, a straight copy, pad (the
        # copy vectorises; a bounds check per element measured ~10x slower on 576 x 16 x 16)
        *outer, last = qs
        loops = [(dd, q) for dd, q in enumerate(outer) if dd not in fixed]
        for dd, q in enumerate(outer):
            if dd in fixed:
                fill.append(f"const long {q} = {fixed[dd]};")
        if shared and loops:
            fill.append(f"#pragma omp parallel for collapse({len(loops)}) num_threads(ac_team())")
        for i, (dd, q) in enumerate(loops):
            fill.append("    " * i + f"for (long {q} = 0; {q} < {pshape[dd]}; ++{q})" + (" {" if i == len(loops) - 1 else ""))
        ind = "    " * len(loops)
        conds = " && ".join(f"(unsigned long)({q} - {lo}) < {n}UL" for q, n, (lo, hi) in zip(outer, t.shape, pads) if lo or hi)
        src = c_affine({q: math.prod(t.shape[dd + 1:]) for dd, q in enumerate(outer)},
                        -sum(lo * math.prod(t.shape[dd + 1:]) for dd, (lo, _) in enumerate(pads[:-1])))
        dst = c_affine({q: math.prod(pshape[dd + 1:]) for dd, q in enumerate(outer) if dd not in fixed}, 0)
        pad_c = c_double(access.pad) if ct == "double" else c_float(access.pad)
        (lo, hi), n = pads[-1], t.shape[-1]
        row, srow = f("row"), f("srow")
        fill.append(f"{ind}{ct}* restrict {row} = {name} + {dst};")
        if conds:
            fill.append(f"{ind}if (!({conds})) {{")
            fill.append(f"{ind}    for (long {last} = 0; {last} < {pshape[-1]}; ++{last}) {row}[{last}] = {pad_c};")
            fill.append(f"{ind}    continue;")
            fill.append(f"{ind}}}")
        fill.append(f"{ind}const {ct}* restrict {srow} = {self.cname[access.tensor]} + ({src});")
        if lo:
            fill.append(f"{ind}for (long {last} = 0; {last} < {lo}; ++{last}) {row}[{last}] = {pad_c};")
        fill.append(f"{ind}#pragma omp simd")
        fill.append(f"{ind}for (long {last} = 0; {last} < {n}; ++{last}) {row}[{last} + {lo}] = {srow}[{last}];")
        if hi:
            fill.append(f"{ind}for (long {last} = {lo + n}; {last} < {pshape[-1]}; ++{last}) {row}[{last}] = {pad_c};")
        if loops:
            fill.append("    " * (len(loops) - 1) + "}")
        return fill

    def outline(self, start: int, depth: int, what: str, candidates: dict[str, str]) -> None:
        """Move the lines written since `start` (at `depth`) into a static noinline function
        taking the names they use among `candidates` ({name: C parameter type}), and call it."""
        body = self.out[start:]
        del self.out[start:]
        text = "\n".join(body)
        params = [n for n in candidates if re.search(rf"\b{re.escape(n)}\b", text)]
        name = f"ac_{what}_{self.fn}"
        self.helpers.append("\n".join(
            [f"/* {self.fn}: {what.replace('_', ' ')} */",
             f"static __attribute__((noinline)) void {name}({', '.join(f'{candidates[n]} {n}' for n in params)}) {{"]
            + ["    " + line[4 * depth:] for line in body] + ["}"]))
        self.emit(depth, f"{name}({', '.join(params)});")

    # ------------------------------------------------------------------ expressions

    def access_c(self, tensor: str, indices, var, stmt: Statement, check=True, pad: float = 0.0,
                 indirect: "dict[int, Access] | None" = None) -> str:
        t = self.tensor(tensor)
        shape = t.shape
        strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
        terms: dict[str, int] = {}
        const = 0
        conditions = []
        gathered = []                    # indirect dimensions: the index tensor's element, checked
        ext = stmt.extents
        for d, idx in enumerate(indices):
            if indirect and d in indirect:
                read = indirect[d]
                value = self.access_c(read.tensor, read.indices, var, stmt, check=False)
                index = f'ac_index({value}, {shape[d]}, "{tensor}", {d})'
                gathered.append(index if strides[d] == 1 else f"{strides[d]} * {index}")
                continue
            for loop, coeff in idx.terms:
                terms[var[loop]] = terms.get(var[loop], 0) + coeff * strides[d]
            const += idx.const * strides[d]
            lo = idx.const + sum(min(0, c * (ext[l] - 1)) for l, c in idx.terms)
            hi = idx.const + sum(max(0, c * (ext[l] - 1)) for l, c in idx.terms)
            if check and (lo < 0 or hi >= shape[d]):
                dim_c = c_affine({var[l]: c for l, c in idx.terms}, idx.const)
                conditions.append(f"(unsigned long)({dim_c}) < {shape[d]}UL")
        flat = " + ".join([c_affine(terms, const)] + gathered) if gathered else c_affine(terms, const)
        text = f"{self.cname[tensor]}[{flat}]"
        if conditions:
            return f"({' && '.join(conditions)} ? {text} : {self.literal(stmt, pad)})"
        return text

    def rounded(self, tensor: str, value: str) -> str:
        """`value` as stored in `tensor` (the interpreter's `round_to_dtype`): rounded half to
        even and saturated for integer dtypes, rounded to f16/bf16, unchanged for f32."""
        dtype = self.tensor(tensor).dtype
        if dtype in INT_RANGE:
            lo, hi = INT_RANGE[dtype]
            return f"ac_saturate({value}, {c_double(lo)}, {c_double(hi)})"
        if dtype in ("f16", "bf16"):
            return f"ac_round_{dtype}({value})"
        return value

    def expr_c(self, e: Expr, var, stmt: Statement, access=None) -> str:
        """C text of `e`; `access(Access) -> str`, when given, writes every tensor read."""
        if isinstance(e, Const):
            return self.literal(stmt, e.value)
        if isinstance(e, Access) and access is not None:
            return access(e)
        if isinstance(e, Access):
            text = self.access_c(e.tensor, e.indices, var, stmt, check=True, pad=e.pad, indirect=e.indirect_dims)
            if e.tensor in self.rounded_accumulators:   # read once complete: rounded
                return self.rounded(e.tensor, text)
            return text
        if isinstance(e, IndexValue):        # a loop's value as a number of the statement's type
            text = c_affine({var[l]: c for l, c in e.index.terms}, e.index.const)
            return f"(({'double' if self.in_double(stmt) else 'float'})({text}))"
        if isinstance(e, BinOp):
            return f"({self.expr_c(e.lhs, var, stmt, access)} {e.op} {self.expr_c(e.rhs, var, stmt, access)})"
        if isinstance(e, Call):
            args = [self.expr_c(a, var, stmt, access) for a in e.args]
            if self.in_double(stmt):
                fn = {"exp": "exp", "sqrt": "sqrt", "tanh": "tanh", "abs": "fabs", "relu": "ac_relu_d",
                      "sigmoid": "ac_sigmoid_d", "gelu": "ac_gelu_d", "max": "AC_MAX", "min": "AC_MIN",
                      "log": "log", "pow": "pow", "floor": "floor"}.get(e.fn)
            else:
                fn = {"exp": "ac_expf", "sqrt": "sqrtf", "tanh": "ac_tanhf", "abs": "fabsf", "relu": "ac_relu",
                      "sigmoid": "ac_sigmoid", "gelu": "ac_gelu", "max": "AC_MAX", "min": "AC_MIN",
                      "log": "logf", "pow": "powf", "floor": "floorf"}.get(e.fn)
            if e.fn == "neg":
                return f"(-{args[0]})"
            if e.fn in _C_COMPARE:
                one, zero = self.literal(stmt, 1.0), self.literal(stmt, 0.0)
                return f"({args[0]} {_C_COMPARE[e.fn]} {args[1]} ? {one} : {zero})"
            if e.fn == "select":
                return f"({args[0]} != {self.literal(stmt, 0.0)} ? {args[1]} : {args[2]})"
            if fn is None:
                raise ValueError(f"no C translation for function {e.fn!r}")
            return f"{fn}({', '.join(args)})"
        raise TypeError(f"cannot generate C for {e!r}")
