"""The Program IR: tensors, ops, and each op's lowering to comprehension statements.

Everything here is a frozen dataclass; passes build new objects instead of mutating.

A *statement* is one tensor comprehension over a box iteration domain:

    target[f(i...)] (=|+=|max=) expr(i...)      for 0 <= loop < extent, each loop

Index expressions are affine (`Affine`), so every domain is an isl box set and every
access an isl affine map (see `poly.py`); reads outside a tensor's bounds yield the
access's `pad` value (0 unless a lowering says otherwise, e.g. -inf for max pooling).
A statement's domain may be cut by affine relations between its loops (`where t <= s`:
`Statement.domain`, each `a >= 0`): a reduction reduces over the domain only, an `=` statement's
element outside it is 0. A loop's value may appear in an expression (`IndexValue`).
A statement may be marked `Rescale`: computed against a running max (the online softmax a
rewrite makes, `rules/online_softmax.py`), the same statement untiled.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Iterator, Mapping

DTYPES = ("f32", "f16", "bf16", "i8", "i32")
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i8": 1, "i32": 4}

# TVM FuseOps-style operator classes, from most to least fusable.
OP_CLASSES = ("elementwise", "broadcast", "injective", "reduction", "contraction")

# Scalar functions an expression may call, with their arity. The comparisons (less,
# less_equal, equal) give 1 or 0; select(c, a, b) is a where c != 0, else b; pow(x, y) is
# x^y (NaN for x < 0 and a fractional y).
FUNCTIONS = {
    "exp": 1, "sqrt": 1, "tanh": 1, "sigmoid": 1, "relu": 1, "gelu": 1, "abs": 1,
    "max": 2, "min": 2, "neg": 1,
    "log": 1, "pow": 2, "floor": 1, "less": 2, "less_equal": 2, "equal": 2, "select": 3,
}
# Floating-point operations one call of each function counts as (for flop totals).
FUNCTION_FLOPS = {
    "exp": 1, "sqrt": 1, "tanh": 1, "sigmoid": 1, "relu": 1, "gelu": 1, "abs": 1,
    "max": 1, "min": 1, "neg": 1,
    "log": 1, "pow": 1, "floor": 1, "less": 1, "less_equal": 1, "equal": 1, "select": 1,
}


@dataclass(frozen=True)
class Span:
    """A place in the source text: 1-based line and column, `length` characters long."""

    line: int
    col: int
    length: int = 1

    def __str__(self) -> str:
        return f"{self.line}:{self.col}"


# --------------------------------------------------------------------------- indices


@dataclass(frozen=True)
class Affine:
    """An affine index: sum(coeff * loop) + const, terms sorted by loop name."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    @staticmethod
    def var(name: str, coeff: int = 1) -> "Affine":
        return Affine(((name, coeff),), 0)

    @staticmethod
    def constant(value: int) -> "Affine":
        return Affine((), value)

    @staticmethod
    def of(terms: Mapping[str, int], const: int = 0) -> "Affine":
        return Affine(tuple(sorted((k, v) for k, v in terms.items() if v != 0)), const)

    def __add__(self, other: "Affine | int") -> "Affine":
        if isinstance(other, int):
            return Affine(self.terms, self.const + other)
        merged = dict(self.terms)
        for k, v in other.terms:
            merged[k] = merged.get(k, 0) + v
        return Affine.of(merged, self.const + other.const)

    def __sub__(self, other: "Affine | int") -> "Affine":
        return self + (other * -1 if isinstance(other, Affine) else -other)

    def __mul__(self, factor: int) -> "Affine":
        return Affine.of({k: v * factor for k, v in self.terms}, self.const * factor)

    @cached_property
    def loops(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.terms)

    @property
    def single_loop(self) -> str | None:
        """The loop name if this index is exactly one loop (coefficient 1, no offset)."""
        if len(self.terms) == 1 and self.terms[0][1] == 1 and self.const == 0:
            return self.terms[0][0]
        return None

    def coeff(self, loop: str) -> int:
        return dict(self.terms).get(loop, 0)

    def evaluate(self, env: Mapping[str, object]):
        """Value for loop values in `env` (ints or broadcastable numpy arrays)."""
        value = self.const
        for k, v in self.terms:
            value = value + v * env[k]
        return value

    def bounds(self, box: Mapping[str, tuple[int, int]]) -> tuple[int, int]:
        """(lowest, highest) value over a box {loop: (first, end)} (end exclusive, non-empty):
        an affine index is extreme at the box's corners."""
        lo = hi = self.const
        for k, v in self.terms:
            first, end = box[k]
            a, b = v * first, v * (end - 1)
            lo, hi = lo + min(a, b), hi + max(a, b)
        return lo, hi

    def rename(self, mapping: Mapping[str, "Affine"]) -> "Affine":
        """Substitute loops by affine expressions (loops absent from `mapping` stay)."""
        out = Affine.constant(self.const)
        for k, v in self.terms:
            out = out + (mapping[k] * v if k in mapping else Affine.var(k, v))
        return out

    def __str__(self) -> str:
        parts: list[str] = []
        for k, v in self.terms:
            term = k if abs(v) == 1 else f"{abs(v)}*{k}"
            if not parts:
                parts.append(term if v > 0 else f"-{term}")
            else:
                parts.append(f"+ {term}" if v > 0 else f"- {term}")
        if self.const or not parts:
            if not parts:
                parts.append(str(self.const))
            else:
                parts.append(f"+ {self.const}" if self.const > 0 else f"- {-self.const}")
        return " ".join(parts)


# --------------------------------------------------------------------------- expressions


class Expr:
    """Base of scalar expressions evaluated at each point of a statement's domain."""

    def children(self) -> tuple["Expr", ...]:
        return ()

    def walk(self) -> Iterator["Expr"]:
        yield self
        for child in self.children():
            yield from child.walk()

    def accesses(self) -> list["Access"]:
        # Kept on the (immutable) expression: the cost model and the host model ask each
        # statement's reads at every evaluation (DenseNet-121 on host: 400,000 times).
        if isinstance(self, Access):       # (kept on itself, it would hold a cycle)
            return [e for e in self.walk() if isinstance(e, Access)]
        found = self.__dict__.get("_accesses")
        if found is None:
            found = tuple(e for e in self.walk() if isinstance(e, Access))
            object.__setattr__(self, "_accesses", found)
        return list(found)

    def flops(self) -> int:
        """Arithmetic operations per evaluation (accesses and constants are free)."""
        total = self.__dict__.get("_flops")
        if total is None:
            total = 0
            for e in self.walk():
                if isinstance(e, BinOp):
                    total += 1
                elif isinstance(e, Call):
                    total += FUNCTION_FLOPS[e.fn]
            object.__setattr__(self, "_flops", total)
        return total


@dataclass(frozen=True)
class Const(Expr):
    value: float

    def __str__(self) -> str:
        if self.value == math.inf:
            return "inf"
        if self.value == -math.inf:
            return "-inf"
        return repr(self.value) if not float(self.value).is_integer() else str(int(self.value))


@dataclass(frozen=True)
class Access(Expr):
    """A read of `tensor` at affine `indices`; out-of-range reads give `pad`.

    An *indirect* dimension takes its index from an integer tensor's element (`W[ids[s], c]`,
    `Kc[h, pos[0], d]`): `indirect` maps the dimension to that read, checked against the
    dimension's range when it runs (an id out of range is an error, never clamped). There
    `indices` holds the index read's flat position in its tensor (`s` for `ids[s]`, `2*s + k`
    for `ids[s, k]` of shape [S, 2], `0` for `pos[0]`): which loops move the index and how many
    distinct rows a tile can gather, what a footprint or a tiling needs; isl sees the whole
    dimension read (`poly.py`), and the interpreter, C and TVM read through the index tensor."""

    tensor: str
    indices: tuple[Affine, ...]
    pad: float = 0.0
    span: Span | None = field(default=None, compare=False)
    indirect: tuple[tuple[int, "Access"], ...] = ()      # (dimension, the integer read giving its index)

    def children(self) -> tuple["Expr", ...]:
        return tuple(a for _, a in self.indirect)

    @property
    def indirect_dims(self) -> dict[int, "Access"]:
        return dict(self.indirect)

    def __str__(self) -> str:
        through = self.indirect_dims
        return f"{self.tensor}[{', '.join(str(through.get(d, i)) for d, i in enumerate(self.indices))}]"


@dataclass(frozen=True)
class IndexValue(Expr):
    """The value of an affine combination of the statement's loops, as a number (`t * 0.5`,
    `select(less_equal(t, s), x, y)`)."""

    index: Affine

    def __str__(self) -> str:
        text = str(self.index)
        return text if self.index.single_loop or not self.index.terms else f"({text})"


@dataclass(frozen=True)
class BinOp(Expr):
    op: str  # one of + - * /
    lhs: Expr
    rhs: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.lhs, self.rhs)

    def __str__(self) -> str:
        return f"({self.lhs} {self.op} {self.rhs})"


@dataclass(frozen=True)
class Call(Expr):
    fn: str
    args: tuple[Expr, ...]

    def children(self) -> tuple[Expr, ...]:
        return self.args

    def __str__(self) -> str:
        if self.fn == "neg":
            return f"-{self.args[0]}"
        return f"{self.fn}({', '.join(map(str, self.args))})"


def rename_loops(expr: Expr, mapping: Mapping[str, Affine]) -> Expr:
    """`expr` with loops substituted by affine expressions, in every tensor index and every
    index value (loops absent from `mapping` stay)."""
    def fn(e):
        if isinstance(e, Access):                   # (its index reads are renamed already)
            return replace(e, indices=tuple(i.rename(mapping) for i in e.indices))
        if isinstance(e, IndexValue):
            return IndexValue(e.index.rename(mapping))
        return None
    return substitute(expr, fn)


def substitute(expr: Expr, fn) -> Expr:
    """Rebuild `expr` bottom-up, replacing each node `e` by `fn(e)` (or `e` if None)."""
    if isinstance(expr, BinOp):
        expr = BinOp(expr.op, substitute(expr.lhs, fn), substitute(expr.rhs, fn))
    elif isinstance(expr, Call):
        expr = Call(expr.fn, tuple(substitute(a, fn) for a in expr.args))
    elif isinstance(expr, Access) and expr.indirect:
        expr = replace(expr, indirect=tuple((d, substitute(a, fn)) for d, a in expr.indirect))
    out = fn(expr)
    return expr if out is None else out


# --------------------------------------------------------------------------- statements


@dataclass(frozen=True)
class Loop:
    """One dimension of an iteration domain: `name` runs over 0 .. extent-1."""

    name: str
    extent: int


REDUCE_INIT = {None: None, "+": 0.0, "max": -math.inf}


def relation_text(constraint: Affine) -> str:
    """`constraint >= 0` as the user writes it: `t <= s`, `t <= s + 1`, `r >= 2`."""
    small = Affine.of({k: -v for k, v in constraint.terms if v < 0})
    large = Affine.of({k: v for k, v in constraint.terms if v > 0})
    if not small.terms:                          # a + c >= 0  ->  a >= -c
        return f"{large} >= {-constraint.const}"
    return f"{small} <= {large + constraint.const}"


def domain_points(extents: Mapping[str, int], domain: tuple[Affine, ...]) -> int:
    """The number of integer points of the box `0 <= loop < extent` cut by `domain` (each
    constraint `a >= 0`), exactly: the loops no constraint names multiply; of the constrained
    ones, all but the last are enumerated and the last one's interval is solved per point."""
    import numpy as np

    if any(not a.terms and a.const < 0 for a in domain):
        return 0                                    # a constant relation that never holds
    domain = tuple(a for a in domain if a.terms)
    if not domain:
        return math.prod(extents.values())
    named = sorted({k for a in domain for k in a.loops}, key=list(extents).index)
    free = math.prod(e for k, e in extents.items() if k not in named)
    last, rest = named[-1], named[:-1]
    total = 0
    outer = [np.arange(extents[k]) for k in rest]
    per_first = math.prod(extents[k] for k in rest[1:])     # points per value of the first loop
    chunk = max(1, 4_000_000 // per_first)
    first_values = outer[0] if outer else np.zeros(1, dtype=np.int64)
    for start in range(0, len(first_values), chunk):
        grids = np.meshgrid(first_values[start:start + chunk], *outer[1:], indexing="ij") if outer else []
        env = {k: g.ravel() for k, g in zip(rest, grids)}
        n = len(next(iter(env.values()))) if env else 1
        lo = np.zeros(n, dtype=np.int64)
        hi = np.full(n, extents[last] - 1, dtype=np.int64)
        ok = np.ones(n, dtype=bool)
        for a in domain:
            c = a.coeff(last)
            other = np.full(n, a.const, dtype=np.int64)
            for k, v in a.terms:
                if k != last:
                    other = other + v * env[k]
            if c > 0:                               # c*L + other >= 0  ->  L >= ceil(-other / c)
                lo = np.maximum(lo, -((other) // c))
            elif c < 0:                             # L <= floor(other / -c)
                hi = np.minimum(hi, other // (-c))
            else:
                ok &= other >= 0
        total += int(np.where(ok, np.maximum(hi - lo + 1, 0), 0).sum())
    return total * free


@dataclass(frozen=True)
class Rescale:
    """A statement computed against a *running* maximum (online softmax, FlashAttention).

    The statement reads `tensor` (written by a `max=` statement of the same kernel) at
    `indices` (over the statement's loops), where its terms carry exp(scale * (x - m)).
    Run after all of the max, it is the plain statement. Tiled along the max's reduction
    loop, it sees the max so far: an `=` statement (exp(scale * (S - M))) is then relative
    to it, and a `+=` statement rescales its partial sums by exp(scale * (m_old - m_new))
    each time the max grows before it adds the new terms, so that after the last tile it
    holds the plain sum. (`rules/online_softmax.py` writes these; the DSL has no syntax.)"""

    tensor: str
    indices: tuple[Affine, ...]
    scale: float

    def __str__(self) -> str:
        return f"rescaled by running {self.tensor}[{', '.join(map(str, self.indices))}]"


@dataclass(frozen=True)
class InPlace:
    """A statement that is `source` with one row of `loop` replaced, written in `source`'s
    storage (a KV-cache update: `rules/in_place.py`): the same values, one row of traffic."""

    source: str
    loop: str

    def __str__(self) -> str:
        return f"in place of {self.source}: one row of {self.loop} written"


@dataclass(frozen=True)
class Statement:
    """One comprehension: `target[target_indices] reduce= expr` over `loops`.

    `reduce` is None for '=', '+' for '+=' and 'max' for 'max='. Loops that do not appear
    in `target_indices` are reduction loops. `loops` lists output loops first, in target
    order, then reduction loops in order of first appearance.
    """

    target: str
    target_indices: tuple[Affine, ...]
    reduce: str | None
    loops: tuple[Loop, ...]
    expr: Expr
    span: Span | None = field(default=None, compare=False)
    rescale: Rescale | None = None       # computed against a running max (see `Rescale`)
    domain: tuple[Affine, ...] = ()      # the box cut by these relations, each `a >= 0`
    in_place: InPlace | None = None      # one row of another tensor's storage (see `InPlace`)

    @cached_property
    def loop_names(self) -> tuple[str, ...]:
        return tuple(l.name for l in self.loops)

    @property
    def extents(self) -> dict[str, int]:
        return {l.name: l.extent for l in self.loops}

    @property
    def output_loops(self) -> tuple[Loop, ...]:
        used = {n for a in self.target_indices for n in a.loops}
        return tuple(l for l in self.loops if l.name in used)

    @property
    def reduction_loops(self) -> tuple[Loop, ...]:
        used = {n for a in self.target_indices for n in a.loops}
        return tuple(l for l in self.loops if l.name not in used)

    @cached_property
    def points(self) -> int:
        """Points of the iteration domain: the box, or the part of it `domain` keeps."""
        return domain_points(self.extents, self.domain)

    @property
    def box_points(self) -> int:
        return math.prod(l.extent for l in self.loops)

    @property
    def identity(self) -> float:
        """What a point outside the domain contributes: 0 to a sum or an `=`, -inf to a max."""
        return -math.inf if self.reduce == "max" else 0.0

    def domain_condition(self) -> Expr | None:
        """The domain's relations as one expression (1 inside, 0 outside), or None for a box."""
        condition = None
        for a in self.domain:
            term = Call("less_equal", (Const(0.0), IndexValue(a)))
            condition = term if condition is None else BinOp("*", condition, term)
        return condition

    @property
    def guarded_expr(self) -> Expr:
        """The expression with the domain folded in: `select(inside, expr, identity)` — what a
        reader that runs the whole box computes (the same values; no point skipped)."""
        condition = self.domain_condition()
        if condition is None:
            return self.expr
        return Call("select", (condition, self.expr, Const(self.identity)))

    @property
    def uses_index_values(self) -> bool:
        """True where the statement's values depend on its loop values themselves (a domain,
        an index read as a number, or a read through an index tensor): a code path that moves
        points around or reads operands as dense tiles must keep them."""
        return bool(self.domain) or any(isinstance(e, IndexValue) or (isinstance(e, Access) and e.indirect)
                                        for e in self.expr.walk())

    def reads(self) -> list[Access]:
        return self.expr.accesses()

    @property
    def flops(self) -> int:
        """Total arithmetic operations: per-point expression ops plus the reduction op."""
        per_point = self.expr.flops() + (1 if self.reduce else 0)
        return per_point * self.points

    def __str__(self) -> str:
        op = {None: "=", "+": "+=", "max": "max="}[self.reduce]
        lhs = f"{self.target}[{', '.join(map(str, self.target_indices))}]"
        bounds = ", ".join(f"{l.name} < {l.extent}" for l in self.loops)
        note = "".join(f"; {mark}" for mark in (self.rescale, self.in_place) if mark)
        where = f" where {', '.join(relation_text(a) for a in self.domain)}" if self.domain else ""
        return f"{lhs} {op} {self.expr}{where}    # {bounds}{note}"


# --------------------------------------------------------------------------- program


@dataclass(frozen=True)
class Tensor:
    """A named tensor. role: 'input', 'param', 'intermediate' or 'temp' (local to an op)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    role: str
    span: Span | None = field(default=None, compare=False)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * DTYPE_BYTES[self.dtype]

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class Op:
    """One operator: a library call or a comprehension, producing tensor `output`.

    `kind` is the library op name ('conv2d', 'matmul', ...) or 'comprehension';
    `statements` is its lowering, run in order; `temps` are tensors only it uses.
    """

    kind: str
    op_class: str
    inputs: tuple[str, ...]
    output: str
    attrs: tuple[tuple[str, object], ...]
    statements: tuple[Statement, ...]
    temps: tuple[str, ...] = ()
    span: Span | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        """Ops are named after the tensor they define (single assignment)."""
        return self.output

    def attr(self, key: str, default=None):
        return dict(self.attrs).get(key, default)

    @property
    def flops(self) -> int:
        return sum(s.flops for s in self.statements)

    def __str__(self) -> str:
        if self.kind == "comprehension":
            return str(self.statements[0]).split("    #")[0]
        args = list(self.inputs) + [f"{k}={v}" for k, v in self.attrs]
        return f"{self.output} = {self.kind}({', '.join(map(str, args))})"


@dataclass(frozen=True)
class Program:
    """A whole tensor program: tensors, ops in execution order, and its outputs."""

    tensors: tuple[Tensor, ...]
    ops: tuple[Op, ...]
    outputs: tuple[str, ...]
    source: str = field(default="", compare=False)
    filename: str = field(default="<program>", compare=False)
    # Values of params known at import (an ONNX model's weights), name -> numpy array.
    # Not part of the program's identity; the interpreter takes them as given inputs.
    param_values: Mapping[str, object] = field(default_factory=dict, compare=False, repr=False)
    # Structural rewrites made after the fusion pass's inlines, in order ((name, op names), ...),
    # so that a scaled twin of the source can replay them (`verify.equivalent_at_scale`).
    rewrites: tuple = field(default=(), compare=False, repr=False)

    @cached_property
    def _tensor_index(self) -> dict[str, Tensor]:
        return {t.name: t for t in self.tensors}

    @cached_property
    def _producer_index(self) -> dict[str, Op]:
        return {op.output: op for op in self.ops}

    @cached_property
    def _readers_index(self) -> dict[str, tuple[Op, ...]]:
        readers: dict[str, list[Op]] = {}
        for op in self.ops:
            for name in dict.fromkeys(op.inputs):
                readers.setdefault(name, []).append(op)
        return {name: tuple(ops) for name, ops in readers.items()}

    @cached_property
    def op_positions(self) -> dict[str, int]:
        """{op name: its index in `ops`}."""
        return {op.name: i for i, op in enumerate(self.ops)}

    def tensor(self, name: str) -> Tensor:
        return self._tensor_index[name]

    def has_tensor(self, name: str) -> bool:
        return name in self._tensor_index

    def producer(self, tensor: str) -> Op | None:
        """The op that defines `tensor`, or None for inputs and params."""
        return self._producer_index.get(tensor)

    def op(self, name: str) -> Op:
        return self._producer_index[name]

    def readers(self, tensor: str) -> tuple[Op, ...]:
        """Ops that read `tensor`, in program order."""
        return self._readers_index.get(tensor, ())

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """Tensors supplied from outside: inputs and params, in declaration order."""
        return tuple(t for t in self.tensors if t.role in ("input", "param"))

    @property
    def flops(self) -> int:
        return sum(op.flops for op in self.ops)

    @property
    def statements(self) -> tuple[Statement, ...]:
        return tuple(s for op in self.ops for s in op.statements)

    def with_ops(self, ops) -> "Program":
        return replace(self, ops=tuple(ops))

    def summary(self) -> str:
        """A plain-text table of tensors and ops (what `autocomp check` prints)."""
        rows = [("tensor", "role", "dtype", "shape", "bytes")]
        for t in self.tensors:
            if t.role == "temp":
                continue
            role = "output" if t.name in self.outputs else t.role
            rows.append((t.name, role, t.dtype, "[" + ", ".join(map(str, t.shape)) + "]", str(t.nbytes)))
        out = [_table(rows), ""]
        rows = [("op", "kind", "class", "reads", "flops")]
        for op in self.ops:
            rows.append((op.output, op.kind, op.op_class, ", ".join(op.inputs), f"{op.flops:,}"))
        out.append(_table(rows))
        return "\n".join(out)


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
