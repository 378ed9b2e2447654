"""Semantic analysis: surface syntax → a shape-checked, immutable `Program`.

Checks names (unknown, repeated, with suggestions), dtypes, dimensions, library-op
signatures and shapes, access ranks, and infers every comprehension index's range
(docs/guide/dsl.md: left-hand indices take the output shape, reduction indices the extent of
the dimension they index directly, any other index needs a declared shape or `where`).
All problems are collected as diagnostics and raised once as a `UserError`.

Size limits (`limits.py`) are checked here, where shapes become known: tensor rank,
dimension extent and element count (declared, computed by a library op, or inferred for a
comprehension), loops and iteration points per statement, and the magnitude of library-op
attributes (a `padding=1000000` would make a 4x4 image a 2-million-wide one).
"""
from __future__ import annotations

import difflib
import math
from dataclasses import replace

from ..errors import Diagnostic, UserError, did_you_mean
from ..limits import ATTRIBUTE, ELEMENTS, EXTENT, LOOPS, POINTS, RANK
from ..ir.program import (DTYPES, FUNCTIONS, Access, Affine, BinOp, Call, Const, IndexValue, Loop, Op, Program,
                          Span, Statement, Tensor)
from . import syntax as S
from .library import LIBRARY, Operand, OpError


class _Skip(Exception):
    """The current statement has an error already recorded; move on to the next."""


def _span(at: S.Where) -> Span:
    return Span(at.line, at.col, at.length)


class Builder:
    def __init__(self, source: str, filename: str, max_extent: int | None):
        self.source, self.filename, self.max_extent = source, filename, max_extent
        self.errors: list[Diagnostic] = []
        self.tensors: dict[str, Tensor] = {}
        self.declared: dict[str, S.Decl] = {}  # 'tensor' declarations awaiting a definition
        self.defined_at: dict[str, S.Where] = {}
        self.ops: list[Op] = []
        self.outputs: list[str] | None = None
        # Names whose definition had an error: later uses stay quiet instead of cascading.
        self.poisoned: set[str] = set()
        self.index_values: list[S.Ref] = []   # indices the current comprehension reads as numbers

    def error(self, at: S.Where | None, message: str, hint: str = "") -> None:
        if at is None:
            self.errors.append(Diagnostic(message, hint=hint))
        else:
            self.errors.append(Diagnostic(message, at.line, at.col, at.length, hint))

    def shape_problem(self, name: str, shape: tuple[int, ...]) -> tuple[str, str] | None:
        """(message, hint) if a tensor shape is over a size limit, else None."""
        if len(shape) > RANK.value():
            return (f"'{name}' has rank {len(shape)}, over the {RANK.name} limit of {RANK.value()}", RANK.hint())
        for dim in shape:
            if dim > EXTENT.value():
                return (f"'{name}' has a dimension of {dim:,}, over the {EXTENT.name} limit of "
                        f"{EXTENT.value():,}", EXTENT.hint())
        elements = math.prod(shape)
        if elements > ELEMENTS.value():
            return (f"'{name}' {list(shape)} has {elements:,} elements, over the {ELEMENTS.name} limit of "
                    f"{ELEMENTS.value():,}", ELEMENTS.hint())
        return None

    def check_shape(self, name: str, shape: tuple[int, ...], at: S.Where) -> None:
        problem = self.shape_problem(name, shape)
        if problem:
            self.error(at, *problem)
            raise _Skip

    def check_loops(self, st: Statement, at: S.Where) -> None:
        """A statement's loop count and iteration points against their limits."""
        if len(st.loops) > LOOPS.value():
            self.error(at, f"the statement defining '{st.target}' has {len(st.loops)} loops, over the "
                       f"{LOOPS.name} limit of {LOOPS.value()}", LOOPS.hint())
            raise _Skip
        points = math.prod(l.extent for l in st.loops)
        if points > POINTS.value():
            self.error(at, f"the statement defining '{st.target}' iterates over {points:,} points, over the "
                       f"{POINTS.name} limit of {POINTS.value():,}", POINTS.hint())
            raise _Skip

    def scaled(self, dim: int) -> int:
        """Shape scaling for equivalence checks: large dims shrink, equal dims stay equal."""
        if self.max_extent is None or dim <= self.max_extent:
            return dim
        return self.max_extent

    # ---------------------------------------------------------------- statements

    def build(self, nodes: list) -> Program:
        for node in nodes:
            skipped = False
            try:
                n_errors = len(self.errors)
                if isinstance(node, S.Decl):
                    self.declaration(node)
                elif isinstance(node, S.Outputs):
                    self.output_list(node)
                elif isinstance(node, S.LibCall):
                    self.library_call(node)
                elif isinstance(node, S.Comprehension):
                    self.comprehension(node)
            except _Skip:
                skipped = True      # (quietly, where it reads a name already in error)
            if skipped or len(self.errors) > n_errors:
                name = getattr(node, "name", None) or getattr(node, "target", None)
                if name and name not in self.tensors:
                    self.poisoned.add(name)
        for name, decl in self.declared.items():
            self.error(decl.name_at, f"tensor '{name}' is declared but never defined",
                       f"add a statement that defines '{name}', or remove the declaration")
        if not self.ops and not any(d.message.startswith(("expected", "unexpected")) for d in self.errors):
            if not self.errors:  # pointed at the end of the input, where a statement is missing
                self.error(S.Where(max(1, len(self.source.splitlines())), 1), "empty program: no statements",
                           "write at least one statement, e.g. 'Y = relu(X)' after 'input X: f32[4, 4]'")
        outputs = self.outputs
        if outputs is None:
            read = {t for op in self.ops for t in op.inputs}
            outputs = [op.output for op in self.ops if op.output not in read]
        if self.errors:
            raise UserError(sorted(self.errors, key=lambda d: (d.line, d.col)), self.source, self.filename)
        return Program(tuple(self.tensors.values()), tuple(self.ops), tuple(outputs), self.source, self.filename)

    def new_name(self, name: str, at: S.Where) -> None:
        if name in self.tensors:
            first = self.defined_at.get(name)
            where = f" (first at line {first.line})" if first else ""
            self.error(at, f"'{name}' is already defined{where}",
                       "every tensor is assigned once; pick a new name")
            raise _Skip

    def declaration(self, d: S.Decl) -> None:
        ok = True
        if d.dtype not in DTYPES:
            self.error(d.dtype_at, f"unknown dtype '{d.dtype}'", did_you_mean(d.dtype, DTYPES))
            ok = False
        if len(d.shape) > RANK.value():
            self.error(d.name_at, f"'{d.name}' has rank {len(d.shape)}, over the {RANK.name} limit of "
                       f"{RANK.value()}", RANK.hint())
            ok = False
        for value, at in d.shape:
            if value <= 0:
                self.error(at, f"dimension {value} of '{d.name}' must be positive", "dimensions are integers >= 1")
                ok = False
            elif value > EXTENT.value():
                self.error(at, f"dimension {value:,} of '{d.name}' is over the {EXTENT.name} limit of "
                           f"{EXTENT.value():,}", EXTENT.hint())
                ok = False
        if ok and math.prod(v for v, _ in d.shape) > ELEMENTS.value():
            self.error(d.name_at, f"'{d.name}' has {math.prod(v for v, _ in d.shape):,} elements, over the "
                       f"{ELEMENTS.name} limit of {ELEMENTS.value():,}", ELEMENTS.hint())
            ok = False
        if d.name in self.tensors or d.name in self.declared:
            self.new_name(d.name, d.name_at) if d.name in self.tensors else self.error(
                d.name_at, f"'{d.name}' is already declared", "declare each tensor once")
            return
        if not ok:
            raise _Skip
        shape = tuple(self.scaled(v) for v, _ in d.shape)
        if d.role == "tensor":
            self.declared[d.name] = d
            return
        self.tensors[d.name] = Tensor(d.name, d.dtype, shape, d.role, _span(d.name_at))
        self.defined_at[d.name] = d.name_at

    def output_list(self, node: S.Outputs) -> None:
        names = []
        for ref in node.names:
            if ref.name in self.poisoned:
                continue
            if ref.name not in self.tensors:
                self.error(ref.at, f"unknown tensor '{ref.name}' in output", did_you_mean(ref.name, self.tensors))
            elif self.tensors[ref.name].role in ("input", "param"):
                self.error(ref.at, f"'{ref.name}' is an {self.tensors[ref.name].role}, not a computed tensor",
                           "list tensors that statements compute")
            else:
                names.append(ref.name)
        self.outputs = (self.outputs or []) + names

    def lookup(self, name: str, at: S.Where) -> Tensor:
        if name in self.poisoned and name not in self.tensors:
            raise _Skip
        if name not in self.tensors:
            hint = did_you_mean(name, self.tensors)
            if name in self.declared:
                msg, hint = f"'{name}' is used before it is defined", "statements run in order; define it first"
            else:
                msg = f"unknown tensor '{name}'"
            self.error(at, msg, hint)
            raise _Skip
        return self.tensors[name]

    def declared_shape(self, name: str) -> tuple[int, ...] | None:
        d = self.declared.get(name)
        return tuple(self.scaled(v) for v, _ in d.shape) if d else None

    def define(self, name: str, dtype: str, shape: tuple[int, ...], at: S.Where) -> None:
        declared = self.declared.pop(name, None)
        if declared is not None:
            dshape = tuple(self.scaled(v) for v, _ in declared.shape)
            if dshape != shape:
                self.error(at, f"'{name}' is declared {list(dshape)} but computes {list(shape)}",
                           f"shape {list(shape)} vs {list(dshape)} (declared at line {declared.at.line})")
                raise _Skip
            dtype = declared.dtype
        self.tensors[name] = Tensor(name, dtype, shape, "intermediate", _span(at))
        self.defined_at[name] = at

    def temp_name(self, wanted: str) -> str:
        name = wanted
        while name in self.tensors or name in self.declared:
            name += "_"
        return name

    # ---------------------------------------------------------------- library calls

    def library_call(self, node: S.LibCall) -> None:
        self.new_name(node.target, node.at)
        lib = LIBRARY.get(node.op)
        if lib is None:
            hint = did_you_mean(node.op, LIBRARY)
            if node.op in FUNCTIONS:
                hint = f"'{node.op}' is an expression function; use it in a comprehension"
            self.error(node.op_at, f"unknown op '{node.op}'", hint)
            raise _Skip
        lo, hi = lib.n_inputs
        if not lo <= len(node.args) <= hi:
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            self.error(node.op_at, f"{node.op} takes {want} tensor operand{'s' if hi > 1 else ''}, got {len(node.args)}",
                       f"{node.op}: {lib.doc}")
            raise _Skip
        operands, arg_at = [], []
        bad = False
        for arg in node.args:
            if not isinstance(arg, S.Ref):
                at = getattr(arg, "at", node.op_at)
                self.error(at, f"operands of {node.op} must be tensor names",
                           "compute expressions in a comprehension, then pass its name")
                bad = True
                continue
            if arg.name not in self.tensors:
                try:
                    self.lookup(arg.name, arg.at)
                except _Skip:
                    bad = True
                    continue
            operands.append(Operand(arg.name, self.tensors[arg.name].shape, self.tensors[arg.name].dtype))
            arg_at.append(arg.at)
        attrs = dict(lib.attrs)
        kw_at = {}
        for key, value, at in node.kwargs:
            if key not in lib.attrs:
                valid = ", ".join(lib.attrs) or "none"
                hint = did_you_mean(key, lib.attrs) if lib.attrs else ""
                self.error(at, f"unknown keyword argument '{key}' for {node.op}",
                           (hint + " " if hint else "") + f"(valid: {valid})")
                bad = True
                continue
            # A shape is a list of dimensions: bounded as extents are (VGG's flatten is 25,088 wide).
            limit = EXTENT if key == "shape" else ATTRIBUTE
            too_big = [v for v in (value if isinstance(value, tuple) else (value,))
                       if isinstance(v, (int, float)) and abs(v) > limit.value()]
            if too_big:
                self.error(at, f"{key}={_number(too_big[0])} is over the {limit.name} limit of {limit.value():,} "
                           f"for library-op attributes", limit.hint())
                bad = True
                continue
            attrs[key] = value
            kw_at[key] = at
        if bad:
            raise _Skip
        out = node.target
        try:
            lowered = lib.lower(out, operands, attrs)
        except OpError as err:
            if isinstance(err.arg, int) and err.arg < len(arg_at):
                at = arg_at[err.arg]
            else:
                at = kw_at.get(err.arg, node.op_at)
            self.error(at, err.message, err.hint)
            raise _Skip
        for name, shape, *_ in ((out, lowered.shape), *lowered.temps):
            self.check_shape(name, tuple(shape), node.at)
        for st in lowered.statements:
            self.check_loops(st, node.at)
        declared = self.declared_shape(out)
        if declared is not None and declared != lowered.shape:
            self.error(node.at, f"'{out}' is declared {list(declared)} but {node.op} gives {list(lowered.shape)}",
                       f"shape {list(lowered.shape)} vs {list(declared)}")
            raise _Skip
        dtype = self.tensors[operands[0].name].dtype
        # temporaries get collision-free names before the op is recorded
        renames = {t: self.temp_name(t) for t, *_ in lowered.temps}
        statements = tuple(_rename_tensors(st, renames) for st in lowered.statements)
        statements = tuple(_with_span(st, _span(node.at)) for st in statements)
        self.define(out, dtype, lowered.shape, node.at)
        for t, shape, *own in lowered.temps:           # a temp's own dtype (an index's i32), else the op's
            self.tensors[renames[t]] = Tensor(renames[t], own[0] if own else dtype, shape, "temp", _span(node.at))
        self.ops.append(Op(node.op, lowered.op_class, tuple(o.name for o in operands), out,
                           tuple(sorted(attrs.items())), statements, tuple(renames[t] for t, *_ in lowered.temps),
                           _span(node.at)))

    # ---------------------------------------------------------------- comprehensions

    def comprehension(self, node: S.Comprehension) -> None:
        self.new_name(node.target, node.at)
        lhs = [r.name for r in node.indices]
        self._check_lhs_indices(node, lhs)
        # expression, with accesses' affine indices and the indices it reads as numbers
        accesses: list[tuple[Access, S.Where, Tensor]] = []
        self.index_values: list[S.Ref] = []
        expr = self.expression(node.expr, accesses)
        domain = tuple(dict.fromkeys(c for r in node.relations for c in self.relation(r)))
        extents = self._index_extents(node, lhs, accesses)
        used = self._used_indices(node, lhs, accesses)
        self._check_ranges_known(node, lhs, used, extents, accesses)
        reduction = [n for n in used if n not in lhs]
        if node.reduce is None and reduction:
            self.error(node.at, f"index '{reduction[0]}' is not on the left-hand side of '='",
                       f"use '+=' or 'max=' to reduce over '{reduction[0]}', or add it to {node.target}[...]")
            raise _Skip
        shape = tuple(extents[n] for n in lhs)
        self.check_shape(node.target, shape, node.at)
        loops = tuple(Loop(n, extents[n]) for n in lhs + reduction)
        st = Statement(node.target, tuple(Affine.var(n) for n in lhs), node.reduce, loops, expr, _span(node.at),
                       domain=domain)
        self.check_loops(st, node.at)
        self.define(node.target, _comprehension_dtype(accesses), shape, node.at)
        inputs = []
        for acc, _, _ in accesses:
            if acc.tensor not in inputs:
                inputs.append(acc.tensor)
        self.ops.append(Op("comprehension", _comprehension_class(st), tuple(inputs), node.target,
                           (), (st,), (), _span(node.at)))

    def _check_lhs_indices(self, node: S.Comprehension, lhs: list[str]) -> None:
        """Left-hand indices are distinct, and none is a tensor's name."""
        for k, ref in enumerate(node.indices):
            if ref.name in lhs[:k]:
                self.error(ref.at, f"index '{ref.name}' appears twice on the left-hand side",
                           "use distinct indices, e.g. D[i] = A[i, i] for a diagonal")
                raise _Skip
            if ref.name in self.tensors:
                self.error(ref.at, f"'{ref.name}' is a tensor name, not an index", "pick another index name")
                raise _Skip

    def _index_extents(self, node: S.Comprehension, lhs: list[str], accesses: list) -> dict[str, int]:
        """Each index's range: from its `where` bound, else the target's declared shape, else the
        tensor dimension it indexes directly; two sources that disagree are an error."""
        extents: dict[str, int] = {}
        origin: dict[str, str] = {}
        for ref, bound, bat in node.bounds:
            if bound <= 0:
                self.error(bat, f"bound of '{ref.name}' must be positive, got {bound}")
                raise _Skip
            extents[ref.name] = bound
            origin[ref.name] = f"'where {ref.name} < {bound}'"
        declared = self.declared_shape(node.target)
        if declared is not None:
            if len(declared) != len(lhs):
                self.error(node.at, f"'{node.target}' is declared with rank {len(declared)} but indexed with "
                           f"{len(lhs)} indices", f"declared shape {list(declared)}")
                raise _Skip
            for name, extent in zip(lhs, declared):
                extents.setdefault(name, extent)
                origin.setdefault(name, f"the declared shape of '{node.target}'")
        for acc, at, tensor in accesses:
            for dim, idx in enumerate(acc.indices):
                loop = idx.single_loop
                if loop is None or dim in acc.indirect_dims:   # an indirect index ranges over its tensor's
                    continue
                extent = tensor.shape[dim]
                if loop not in extents:
                    extents[loop], origin[loop] = extent, f"'{tensor.name}' {list(tensor.shape)} (axis {dim})"
                elif extents[loop] != extent and loop not in {r.name for r, _, _ in node.bounds} \
                        and not (declared is not None and loop in lhs and extents[loop] < extent):
                    # (a declared shape may read a sub-range of a larger dimension: A[s, e] = Q[s, e]
                    # with e over a declared 32 of Q's 64)
                    self.error(at, f"index '{loop}' ranges over {extents[loop]} from {origin[loop]} but over "
                               f"{extent} in '{tensor.name}' {list(tensor.shape)} (axis {dim})",
                               f"shape mismatch: {extents[loop]} vs {extent}")
                    raise _Skip
        return extents

    def _used_indices(self, node: S.Comprehension, lhs: list[str], accesses: list) -> list[str]:
        """The indices the right-hand side uses (in accesses, or read as values), in order of use;
        every index read as a value, bounded by `where` or named by a relation must be one."""
        used = []
        for acc, _, _ in accesses:
            for idx in acc.indices:
                for loop in idx.loops:
                    if loop not in used:
                        used.append(loop)
        bounded = {ref.name for ref, _, _ in node.bounds}
        for ref in self.index_values:
            if ref.name not in lhs and ref.name not in used and ref.name not in bounded:
                close = difflib.get_close_matches(ref.name, list(self.tensors) + lhs + used, n=1, cutoff=0.6)
                self.error(ref.at, f"unknown name '{ref.name}'", f"did you mean '{close[0]}'?" if close else
                           "an index read as a value must also index a tensor, be on the left-hand side, "
                           f"or be bounded with 'where {ref.name} < N'")
                raise _Skip
            if ref.name not in used:
                used.append(ref.name)
        for ref, _, _ in node.bounds:
            if ref.name not in lhs and ref.name not in used:
                self.error(ref.at, f"'where' bounds index '{ref.name}', which the statement does not use")
                raise _Skip
        for r in node.relations:
            for name in sorted({k for c in self.relation(r) for k in c.loops}):
                if name not in lhs and name not in used:
                    self.error(r.at, f"'where' relation names '{name}', which is not an index of the statement",
                               did_you_mean(name, lhs + used) or f"the statement's indices: {', '.join(lhs + used)}")
                    raise _Skip
        return used

    def _check_ranges_known(self, node: S.Comprehension, lhs: list[str], used: list[str],
                            extents: dict[str, int], accesses: list) -> None:
        """Every index has a range; the error points at where the first one without is used."""
        missing = [n for n in lhs + used if n not in extents]
        if missing:
            at = next((r.at for r in node.indices if r.name == missing[0]), node.at)
            for acc, aat, _ in accesses:
                if any(missing[0] in i.loops for i in acc.indices):
                    at = aat if missing[0] not in lhs else at
                    break
            self.error(at, f"cannot infer the range of index '{missing[0]}'",
                       f"'{missing[0]}' never indexes a tensor dimension directly; declare "
                       f"'tensor {node.target}: f32[...]' or add 'where {missing[0]} < N'")
            raise _Skip

    def expression(self, e, accesses: list):
        if isinstance(e, S.Num):
            return Const(e.value)
        if isinstance(e, S.Negate):
            inner = self.expression(e.operand, accesses)
            return Const(-inner.value) if isinstance(inner, Const) else Call("neg", (inner,))
        if isinstance(e, S.Binary):
            return BinOp(e.op, self.expression(e.lhs, accesses), self.expression(e.rhs, accesses))
        if isinstance(e, S.Apply):
            if e.fn not in FUNCTIONS:
                hint = did_you_mean(e.fn, FUNCTIONS)
                if e.fn in LIBRARY:
                    hint = f"'{e.fn}' is a library op; call it on its own line: 'Y = {e.fn}(X)'"
                self.error(e.at, f"unknown function '{e.fn}'", hint)
                raise _Skip
            if len(e.args) != FUNCTIONS[e.fn]:
                self.error(e.at, f"{e.fn} takes {FUNCTIONS[e.fn]} argument{'s' if FUNCTIONS[e.fn] > 1 else ''}, "
                           f"got {len(e.args)}")
                raise _Skip
            return Call(e.fn, tuple(self.expression(a, accesses) for a in e.args))
        if isinstance(e, S.Index):
            tensor = self.lookup(e.tensor, e.at)
            if len(e.indices) != len(tensor.shape):
                self.error(e.at, f"'{e.tensor}' has rank {len(tensor.shape)} but is indexed with "
                           f"{len(e.indices)} ind{'ex' if len(e.indices) == 1 else 'ices'}",
                           f"'{e.tensor}' is {tensor.dtype}{list(tensor.shape)}")
                raise _Skip
            indices, indirect = [], []
            for dim, i in enumerate(e.indices):
                if isinstance(i, S.Index):              # an integer tensor's element is the index
                    flat, read = self.indirect_index(i, accesses)
                    indices.append(flat)
                    indirect.append((dim, read))
                else:
                    indices.append(self.affine(i))
            acc = Access(e.tensor, tuple(indices), 0.0, _span(e.at), indirect=tuple(indirect))
            accesses.append((acc, e.at, tensor))
            return acc
        if isinstance(e, S.Ref):
            if e.name in self.tensors:
                self.error(e.at, f"tensor '{e.name}' needs indices here",
                           f"write {e.name}[...] with {len(self.tensors[e.name].shape)} indices")
                raise _Skip
            # an index read as a number; the statement checks that it is one of its indices
            self.index_values.append(e)
            return IndexValue(Affine.var(e.name))
        raise _Skip  # unreachable: the parser produces only the nodes above

    def affine(self, e, what: str = "index expression") -> Affine:
        """An index expression (or one side of a `where` relation) as `Affine`, or a
        diagnostic if it is not affine."""
        if isinstance(e, S.Ref):
            if e.name in self.tensors:
                self.error(e.at, f"tensor '{e.name}' used as an index", "indices are loop names like i, j, k")
                raise _Skip
            return Affine.var(e.name)
        if isinstance(e, S.Num):
            if not float(e.value).is_integer():
                self.error(e.at, f"index offset {e.value} is not an integer")
                raise _Skip
            return Affine.constant(int(e.value))
        if isinstance(e, S.Negate):
            return self.affine(e.operand, what) * -1
        if isinstance(e, S.Binary) and e.op in "+-":
            lhs, rhs = self.affine(e.lhs, what), self.affine(e.rhs, what)
            return lhs + rhs if e.op == "+" else lhs - rhs
        if isinstance(e, S.Binary) and e.op == "*":
            lhs, rhs = self.affine(e.lhs, what), self.affine(e.rhs, what)
            if not lhs.terms:
                return rhs * lhs.const
            if not rhs.terms:
                return lhs * rhs.const
        at = getattr(e, "at", None)
        self.error(at, f"{what} is not affine",
                   "indices are sums of loop names times integers plus a constant, e.g. 2*h + r - 1")
        raise _Skip

    def indirect_index(self, e: S.Index, accesses: list) -> tuple[Affine, Access]:
        """`ids[s]` used as an index: (its flat position in `ids`, the read). The index tensor
        must be an integer tensor read at affine indices."""
        tensor = self.lookup(e.tensor, e.at)
        if tensor.dtype not in ("i32", "i8"):
            self.error(e.at, f"index tensor '{e.tensor}' must have an integer type (i32 or i8), "
                       f"not {tensor.dtype}", f"declare it as '{e.tensor}: i32[...]'")
            raise _Skip
        if any(isinstance(i, S.Index) for i in e.indices):
            self.error(e.at, f"'{e.tensor}' is read through another index tensor",
                       "an index tensor's own indices are affine, e.g. W[ids[s], c]")
            raise _Skip
        read = self.expression(e, accesses)
        strides = [math.prod(tensor.shape[d + 1:]) for d in range(len(tensor.shape))]
        flat = Affine.constant(0)
        for index, stride in zip(read.indices, strides):
            flat = flat + index * stride
        return flat, read

    def relation(self, r: S.Relation) -> tuple[Affine, ...]:
        """A `where` relation as constraints `a >= 0` (two for `==`)."""
        what = "a 'where' relation"
        lhs, rhs = self.affine(r.lhs, what), self.affine(r.rhs, what)
        if r.op in ("<", "<="):
            return (rhs - lhs - (1 if r.op == "<" else 0),)
        if r.op in (">", ">="):
            return (lhs - rhs - (1 if r.op == ">" else 0),)
        return (rhs - lhs, lhs - rhs)


def _number(value: int | float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def _comprehension_dtype(accesses: list) -> str:
    """A comprehension's dtype: the first value it reads sets it; a float's wins over an integer
    compared or selected on (K2 = select(equal(t, pos[0]), kn, Kc) is a float tensor)."""
    index_reads = {id(r) for acc, _, _ in accesses for _, r in acc.indirect}
    valued = [t for acc, _, t in accesses if id(acc) not in index_reads]   # not the ids of a gather
    floats = [t for t in valued if t.dtype not in ("i8", "i32")]
    return (floats or valued)[0].dtype if valued else "f32"


def _comprehension_class(st: Statement) -> str:
    reads = st.reads()
    if any(a.indirect for a in reads):
        return "injective"           # a gather: each point reads where an index tensor says
    if st.reduce is not None:
        products = [e for e in st.expr.walk() if isinstance(e, BinOp) and e.op == "*"
                    and e.lhs.accesses() and e.rhs.accesses()]
        return "contraction" if products else "reduction"
    lhs = tuple(st.target_indices)
    if all(a.indices == lhs for a in reads):
        return "elementwise"
    lhs_names = [i.single_loop for i in lhs]
    def is_broadcast(a: Access) -> bool:
        names = [i.single_loop for i in a.indices if not (not i.terms)]
        consts_zero = all(i.terms or i.const == 0 for i in a.indices)
        order = [lhs_names.index(n) for n in names if n in lhs_names]
        return consts_zero and None not in names and len(order) == len(names) and order == sorted(order)
    if all(is_broadcast(a) for a in reads):
        return "broadcast"
    return "injective"


def _rename_tensors(st: Statement, renames: dict[str, str]) -> Statement:
    if not renames or all(k == v for k, v in renames.items()):
        return st
    from ..ir.program import substitute

    def fn(e):
        if isinstance(e, Access) and e.tensor in renames:
            return replace(e, tensor=renames[e.tensor])
        return None
    return replace(st, target=renames.get(st.target, st.target), expr=substitute(st.expr, fn))


def _with_span(st: Statement, span: Span) -> Statement:
    return replace(st, span=span)


def build_program(source: str, filename: str = "<program>", max_extent: int | None = None) -> Program:
    errors: list[Diagnostic] = []
    nodes, broken_names = S.parse_syntax(source, errors)
    builder = Builder(source, filename, max_extent)
    builder.errors = errors
    builder.poisoned |= broken_names
    return builder.build(nodes)
