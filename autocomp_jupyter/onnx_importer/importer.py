"""The import of one ONNX model: the walk over its graph and what every op handler writes with.

`from_onnx(model)` validates the model (`validate`), then walks the graph in order and writes
one DSL statement per ONNX node (library ops where one fits — `conv2d`, `linear`, `batchnorm`,
`layernorm`, `softmax` ..., comprehensions otherwise), keeping tensor names where they are
legal DSL names and sanitising them otherwise. Initializers become `param`s; their values
travel with the program (`Program.param_values`) so the reference interpreter runs the real
model. The handlers (`op_<OpType>`) live in one module per op family, mixed into `_Importer`;
this module owns the values read so far, the emission helpers (`lib`, `comp`, `ew`, `view`),
constant folding and the op version a node means.

Each node is read by its op version (the newest version of its op at the model's opset,
`_Importer.version`): attribute or input forms (Slice, Split, Pad, Reduce*, Squeeze ...),
opset < 7 arithmetic's `broadcast`/`axis` (`legacy_broadcast`), Softmax's flattening before
opset 13. Ops the library lacks are comprehensions over the DSL's scalar functions (`select`,
`less`, `pow`, `log` ... for activations, comparisons, Where, LRN); what is not affine becomes
a contraction with a constant matrix (Resize: onnx's own reference on a basis; Gather with
runtime indices: a one-hot sum) or a view (Tile, the stride spreading of ConvTranspose).

What is folded at import instead of emitted:
- shape subgraphs: every node whose inputs are all constants (initializers, `Constant`,
  `Shape` of a static tensor, ...) is evaluated by onnx's reference evaluator;
- BatchNormalization's four vectors → one scale and one shift (inference form);
- Gemm's transposed/scaled constant weight → a `[K, N]` param for `linear`;
- Reshape / Flatten / Squeeze / Unsqueeze are views: a `reshape` statement is written only
  when an op reads the reshaped tensor (GlobalAveragePool → Flatten becomes one
  `global_avgpool`);
- the GELU pattern x·0.5·(1 + erf(x/√2)) → `gelu(x, approximate=none)`, and GPT-2's
  0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) → `gelu(x)`;
- Identity, Dropout and same-type Cast are aliases;
- DequantizeLinear of constants (QDQ weights) → f32 weights.

A node the importer cannot read is a `UserError` naming the node, its op type and its inputs
(all such nodes at once, unsupported ops listed once each with their nodes; a refused node's
readers are skipped, not reported again); a bug of the importer on one node is an "internal
error" diagnostic for that node, never a traceback. `onnx` is an optional dependency: using
the importer without it raises a `UserError` saying how to install it.
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..errors import Diagnostic, UserError
from ..ir.program import Program
from ..limits import EXTENT
from .attention import AttentionOps
from .common import (_DTYPES, _FOLD_ELEMENTS, _NP_DTYPE, _NotFinite, _onnx, _shape_text, _Skip, _type_name,
                     _View, _fmt_num, sanitize)
from .conv import ConvOps
from .elementwise import ElementwiseOps
from .index import IndexOps
from .layout import LayoutOps
from .linear import LinearOps
from .normalize import NormalizeOps
from .resample import ResampleOps
from .validate import NodeChecker, initializer_arrays, model_problems, node_label, unsupported_ops_diagnostic

__all__ = ["from_onnx", "run_with_values", "sanitize", "SUPPORTED_OPS"]


def _common_coarsening(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The finest shape both `a` and `b` refine by merging contiguous dimensions ([8, 7, 8, 7]
    and [7, 8, 7, 8] -> [56, 56]), or None when it is the whole tensor in one dimension (no
    coarser step helps)."""
    out, pa, pb, i, j, size = [], 1, 1, 0, 0, 1
    while i < len(a) or j < len(b):
        if pa <= pb and i < len(a):
            pa *= a[i]
            i += 1
        elif j < len(b):
            pb *= b[j]
            j += 1
        else:
            pa *= a[i]
            i += 1
        if pa == pb:
            out.append(pa // size)
            size = pa
    return tuple(out) if len(out) > 1 else None


class _Importer(ElementwiseOps, LayoutOps, LinearOps, ConvOps, NormalizeOps, ResampleOps, IndexOps, AttentionOps):
    """One model's import: the values it has read, the DSL it has written, the errors it
    found. The op handlers are the mixins' (one module per op family)."""

    def __init__(self, model, input_shapes: dict | None, filename: str):
        self.onnx = _onnx()
        self.model = model
        self.graph = model.graph
        self.nodes = list(model.graph.node)  # one wrapper per node: identity comparisons hold
        self.filename = filename
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        self.input_shapes = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
        self.consts: dict[str, np.ndarray] = {}
        self.values: dict[str, tuple[str, tuple[int, ...], str] | _View] = {}   # onnx name → (dsl, shape, dtype)
        self.used: set[str] = set()
        self.params: dict[str, np.ndarray] = {}
        self.param_of_const: dict[str, str] = {}
        self.decls: list[str] = []
        self.body: list[str] = []
        self.errors: list[Diagnostic] = []
        self.poisoned: set[str] = set()
        self.consumers: dict[str, list] = {}
        self.producers: dict[str, object] = {}
        self.skip_nodes: set[int] = set()
        self.dtype_of_view: dict[str, str] = {}
        self.versions: dict[str, int] = {}
        self.unsupported: dict[str, list[str]] = {}   # op label → names of its nodes

    def fresh(self, wanted: str) -> str:
        name = sanitize(wanted)
        base, k = name, 1
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name

    def is_const(self, name: str) -> bool:
        return name == "" or name in self.consts

    def const(self, node, k: int, what: str) -> np.ndarray:
        name = node.input[k] if k < len(node.input) else ""
        if name not in self.consts:
            self.fail(node, f"its {what} (input {k}, '{name}') must be a constant (an initializer or a folded "
                            "shape computation)")
        return self.consts[name]

    def shape(self, name: str) -> tuple[int, ...]:
        if name in self.consts:
            return tuple(self.consts[name].shape)
        v = self.values[name]
        return v.shape if isinstance(v, _View) else v[1]

    def dtype(self, name: str) -> str:
        if name in self.consts:
            kind = self.consts[name].dtype.kind
            return "f32" if kind == "f" else ("i8" if kind == "b" else "i32")
        v = self.values[name]
        return self.dtype_of_view.get(name, "f32") if isinstance(v, _View) else v[2]

    def operand(self, name: str) -> str:
        """The DSL tensor holding `name`: params for constants, views materialised."""
        if name in self.consts:
            if name not in self.param_of_const:
                value = self.consts[name]
                if value.ndim == 0:
                    value = value.reshape(1)
                dsl = self.fresh(name)
                dtype = "f32" if value.dtype.kind == "f" else ("i8" if value.dtype.kind == "b" else "i32")
                self.params[dsl] = value.astype(_NP_DTYPE[dtype])
                self.decls.append(f"param  {dsl}: {dtype}{_shape_text(value.shape)}")
                self.param_of_const[name] = dsl
            return self.param_of_const[name]
        v = self.values[name]
        if isinstance(v, _View):
            dsl = self.fresh(name)
            self.body.append(f"{dsl} = reshape({v.base}, shape={_shape_text(v.shape)})")
            self.values[name] = (dsl, v.shape, self.dtype_of_view.get(name, "f32"))
            return dsl
        return v[0]

    def define(self, onnx_name: str, shape, dtype: str) -> str:
        shape = tuple(shape) or (1,)   # a rank-0 result is held as [1] (the DSL has no scalars)
        dsl = self.fresh(onnx_name)
        self.values[onnx_name] = (dsl, tuple(int(d) for d in shape), dtype)
        return dsl

    def fail(self, node, message: str, hint: str = ""):
        ins = ", ".join(f"'{i}' {list(self.shape(i)) if (i in self.consts or i in self.values) else '?'}"
                        for i in node.input if i)
        label = node.name or (node.output[0] if node.output else "?")
        self.errors.append(Diagnostic(f"ONNX node '{label}' ({node.op_type}, inputs: {ins or 'none'}): {message}",
                                      hint=hint))
        raise _Skip

    def lib(self, node, out: str, op: str, inputs: list[str], **attrs) -> str:
        """Write `out = op(inputs..., attrs)` for ONNX names `inputs`; the library op's own
        lowering checks the shapes (its error is the node's error)."""
        from ..dsl.library import LIBRARY, Operand, OpError

        dsl_inputs, operands = [], []
        for i in inputs:
            shape = self.shape(i)
            dsl = self.operand(i)
            dsl_inputs.append(dsl)
            operands.append(Operand(dsl, tuple(shape)))
        full = dict(LIBRARY[op].attrs)
        full.update({k: tuple(int(x) for x in v) if isinstance(v, list) else v for k, v in attrs.items()})
        try:
            lowered = LIBRARY[op].lower("__out__", operands, full)
        except OpError as err:
            self.fail(node, f"{op}: {err.message}", err.hint)
        dtype = self.dtype(inputs[0])
        dsl_out = self.define(out, lowered.shape, dtype)
        args = dsl_inputs + [f"{k}={self.attr_text(v)}" for k, v in attrs.items()]
        self.body.append(f"{dsl_out} = {op}({', '.join(args)})")
        return dsl_out

    @staticmethod
    def attr_text(value) -> str:
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(str(int(v)) for v in value) + "]"
        if isinstance(value, float):
            return repr(value)
        return str(value)

    def comp(self, out: str, shape, dtype: str, lhs: list[str], op: str, expr: str, note: str = "") -> str:
        """Write a comprehension with a declared result shape (index ranges never ambiguous)."""
        dsl = self.define(out, shape, dtype)
        self.body.append(f"tensor {dsl}: {dtype}{_shape_text(shape)}")
        self.body.append(f"{dsl}[{', '.join(lhs)}] {op} {expr}" + (f"   # {note}" if note else ""))
        return dsl

    def alias(self, node, out: str, src: str) -> None:
        if src in self.consts:
            self.consts[out] = self.consts[src]
        else:
            self.values[out] = self.values[src]
            if src in self.dtype_of_view:
                self.dtype_of_view[out] = self.dtype_of_view[src]

    def view(self, node, out: str, src: str, shape) -> None:
        """`out` is `src` reshaped: aliased when the shape is the same, else a lazy view."""
        shape = tuple(int(d) for d in shape)
        if math.prod(shape) != math.prod(self.shape(src)):
            self.fail(node, f"cannot reshape {list(self.shape(src))} to {list(shape)}")
        if src in self.consts:
            self.consts[out] = self.consts[src].reshape(shape)
            return
        shape = shape or (1,)   # a computed rank-0 tensor is held as [1]
        v = self.values[src]
        base, base_shape, dtype = (v.base, self._base_shape(v), self.dtype_of_view.get(src, "f32")) \
            if isinstance(v, _View) else (v[0], v[1], v[2])
        if shape == base_shape:
            self.values[out] = (base, base_shape, dtype)
            return
        from ..dsl.library import reshape_plan

        own = tuple(int(d) for d in self.shape(src)) or (1,)
        if reshape_plan(base_shape, shape) is None and isinstance(v, _View) and reshape_plan(own, shape) is not None:
            # a view of a view that is affine only through the first (two channel shuffles in a
            # row; MaxViT's 8x7 merged to 56 and split as 7x8): the first is written out
            base, base_shape = self.operand(src), own
        coarse = _common_coarsening(base_shape, shape)
        if reshape_plan(base_shape, shape) is None and coarse is not None:
            # merged then split another way (8 x 7 -> 56 -> 7 x 8): the merge is written out,
            # then split as a view (each step alone is affine)
            merged = out + "_merged"
            self.values[merged] = _View(base, coarse)
            self.base_shapes[base] = base_shape
            self.dtype_of_view[merged] = dtype
            base, base_shape = self.operand(merged), coarse
        if reshape_plan(base_shape, shape) is None:
            self.fail(node, f"reshape {list(base_shape)} -> {list(shape)} is not affine (no dimension of one shape "
                            "is a contiguous product of the other's)")
        self.values[out] = _View(base, shape)
        self.base_shapes[base] = base_shape
        self.dtype_of_view[out] = dtype

    base_shapes: dict

    def _base_shape(self, v: _View) -> tuple[int, ...]:
        return self.base_shapes[v.base]

    def run(self) -> Program:
        """Validate the model, read its inputs, walk its nodes, and parse the written program."""
        self.base_shapes = {}
        problems = model_problems(self.model)
        if problems:
            raise UserError(problems, filename=self.filename)
        arrays, problems = initializer_arrays(self.graph)
        self.errors.extend(problems)
        self.consts.update(arrays)
        self.checker = NodeChecker(self.model, self.opset)
        self.checker.seed(self.graph, arrays)
        for node in self.nodes:
            for i in node.input:
                self.consumers.setdefault(i, []).append(node)
            for o in node.output:
                self.producers[o] = node
        for vi in self.graph.input:
            if vi.name not in self.consts:   # old exporters list initializers as inputs too
                self._graph_input(vi)
        if self.errors:
            raise UserError(self.errors, filename=self.filename)
        self._walk()
        outputs = self._graph_outputs()
        if self.unsupported:
            self.errors.insert(0, unsupported_ops_diagnostic(self.unsupported, SUPPORTED_OPS))
        if self.errors:
            raise UserError(self.errors, filename=self.filename)
        return self._parse(outputs)

    def _graph_input(self, vi) -> None:
        """Declare graph input `vi` (static shape, a readable type), or record why not."""
        onnx = self.onnx
        if not vi.type.HasField("tensor_type"):
            self.errors.append(Diagnostic(f"graph input '{vi.name}' is not a tensor (sequences, maps and "
                                          "optional values are not supported)"))
            return
        tt = vi.type.tensor_type
        dtype = _DTYPES.get(tt.elem_type)
        if dtype is None:
            self.errors.append(Diagnostic(
                f"graph input '{vi.name}' has element type {_type_name(onnx, tt.elem_type)}",
                hint="inputs must be float32, float16, bfloat16, an integer type or bool"
                     + (" (the DSL's widest float is f32: export the model in float32)" if tt.elem_type == 11 else "")))
            return
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if vi.name in self.input_shapes:
            given = self.input_shapes[vi.name]
            if len(given) != len(dims) or any(a is not None and a != b for a, b in zip(dims, given)):
                self.errors.append(Diagnostic(f"input_shapes['{vi.name}'] = {list(given)} does not fit the "
                                              f"model's {['?' if d is None else d for d in dims]}"))
                return
            dims = list(given)
        if not tt.HasField("shape"):
            self.errors.append(Diagnostic(f"graph input '{vi.name}' has no shape",
                                          hint=f"give it one: from_onnx(model, input_shapes={{'{vi.name}': [...]}})"))
            return
        if any(d is not None and d > EXTENT.value() for d in dims):
            self.errors.append(Diagnostic(f"graph input '{vi.name}' {dims}: "
                                          + EXTENT.exceeded(max(d for d in dims if d), "a dimension"),
                                          hint=EXTENT.hint()))
            return
        if any(d is None or d <= 0 for d in dims):
            if any(d is not None and d <= 0 for d in dims):
                self.errors.append(Diagnostic(f"graph input '{vi.name}' has a dimension below 1: {dims}",
                                              hint="every dimension of an input must be at least 1"))
                return
            sym = [d.dim_param or "?" for d in tt.shape.dim if not d.HasField("dim_value")]
            self.errors.append(Diagnostic(
                f"graph input '{vi.name}' has symbolic dimensions ({', '.join(sym)})",
                hint=f"give static shapes: from_onnx(model, input_shapes={{'{vi.name}': [1, ...]}}) "
                     f"or `autocomp import --shape {vi.name}=1,...`"))
            return
        dims = dims or [1]   # a scalar input is held as [1] (the DSL has no scalars)
        dsl = self.fresh(vi.name)
        self.values[vi.name] = (dsl, tuple(dims), dtype)
        self.decls.append(f"input  {dsl}: {dtype}{_shape_text(dims)}")
        if self.input_shapes.get(vi.name):   # onnx's inference follows the static shape given
            self.checker.types[vi.name] = self.onnx.helper.make_tensor_type_proto(tt.elem_type, list(dims))

    def _walk(self) -> None:
        """Each node in graph order; an error poisons the node's outputs (its readers are skipped)."""
        for index, node in enumerate(self.nodes):
            if index in self.skip_nodes:   # folded into an earlier node's op: its types still flow on
                self.checker.infer(node, self.consts)
                continue
            if any(i in self.poisoned for i in node.input if i):
                self.poisoned.update(node.output)
                continue
            try:
                self.node(index, node)
            except _Skip:
                self.poisoned.update(node.output)
            except UserError:
                raise
            except _NotFinite as err:
                self.errors.append(Diagnostic(
                    f"ONNX node '{node_label(node)}' ({node.op_type}): a constant or attribute is {err}, where the "
                    "op needs a finite number"))
                self.poisoned.update(node.output)
            except Exception as err:  # a bug of this importer: name the node, never a traceback
                self.errors.append(Diagnostic(
                    f"ONNX node '{node_label(node)}' ({node.op_type}): internal error of the importer "
                    f"({type(err).__name__}: {err})", hint="please report it with the model"))
                self.poisoned.update(node.output)

    def _graph_outputs(self) -> list[str]:
        """The DSL names of the graph's outputs (errors recorded for those not computed)."""
        outputs = []
        graph_inputs = {i.name for i in self.graph.input}
        input_names = {v[0] for k, v in self.values.items() if k in graph_inputs and not isinstance(v, _View)}
        for vi in self.graph.output:
            if vi.name in self.poisoned:
                continue
            if vi.name not in self.consts and vi.name not in self.values:
                self.errors.append(Diagnostic(f"graph output '{vi.name}' is not computed by any node (a dangling "
                                              "output)"))
                continue
            if vi.name in self.consts:
                self.errors.append(Diagnostic(f"graph output '{vi.name}' is a constant (the whole computation "
                                              "folds away): nothing to optimise"))
                continue
            declared, inferred = vi.type.tensor_type.elem_type, self.checker.types.get(vi.name)
            if declared and inferred is not None and inferred.tensor_type.elem_type not in (0, declared):
                self.errors.append(Diagnostic(
                    f"graph output '{vi.name}' is declared {_type_name(self.onnx, declared)}, but its node computes "
                    f"{_type_name(self.onnx, inferred.tensor_type.elem_type)}"))
                continue
            v = self.values[vi.name]
            if not isinstance(v, _View) and v[0] in input_names:
                # an input passed straight through: a copy makes it a computed tensor
                names = [f"i{d}" for d in range(len(v[1]))]
                outputs.append(self.comp(vi.name + "_out", v[1], v[2], names, "=", f"{v[0]}[{', '.join(names)}]"))
                continue
            outputs.append(self.operand(vi.name))
        return outputs

    def _parse(self, outputs: list[str]) -> Program:
        name = Path(self.filename).name
        header = [f"# imported from {name} (ONNX opset {self.opset}) by autocomp import",
                  f"# {len(self.nodes)} ONNX nodes -> {sum(1 for l in self.body if not l.startswith(('tensor', '#')))}"
                  " statements; weights are the model's (Program.param_values)"]
        text = "\n".join(header + self.decls + [""] + self.body + ["", f"output {', '.join(outputs)}", ""])
        from ..dsl import parse

        try:
            program = parse(text, self.filename + ".acir")
        except UserError as err:  # a limit, or a bug of this importer: each error with its line
            lines = text.splitlines()
            raise UserError([Diagnostic(f"the program imported from '{self.filename}' does not check: "
                                        f"{d.message} (line {d.line}: {lines[d.line - 1] if d.line else ''})",
                                        hint=d.hint) for d in err.diagnostics],
                            filename=self.filename) from None
        return replace(program, param_values=dict(self.params))

    def node(self, index: int, node) -> None:
        """Check `node` (its inputs defined, its schema, its input types), then fold or import it."""
        op = node.op_type
        if node.domain not in ("", "ai.onnx"):
            self._unsupported(node, f"{op} (custom domain '{node.domain}')")
        for name in node.input:
            if name and name not in self.consts and name not in self.values:
                self.fail(node, f"its input '{name}' is not a graph input, an initializer or an earlier node's "
                                "output", "the graph has a dangling input, a cycle or nodes out of order")
        problem = self.checker.schema_problem(node)
        if problem is not None:
            self.fail(node, *problem)
        inferred = self.checker.infer(node, self.consts)
        if inferred is not None and inferred[0] == "type":
            self.fail(node, f"an input's element type is outside the op's type constraints: {inferred[1]}")
        if all(self.is_const(i) for i in node.input) and op not in ("Dropout",):
            self.fold(node)
        else:
            handler = getattr(self, f"op_{op}", None)
            if handler is None:
                self._unsupported(node, op if self.onnx.defs.has(op) else f"{op} (not an ONNX op)")
            handler(index, node)
        if inferred is not None:   # onnx's inference found a conflict the import did not
            self.fail(node, f"onnx's shape inference refuses the node: {inferred[1]}")
        for name in node.output:
            want = self.checker.static_shape(name)
            if want is None or not (name in self.consts or name in self.values):
                continue
            have = tuple(self.shape(name))
            if have != want and not (want == () and have == (1,)):
                self.fail(node, f"its output '{name}' has shape {list(want)} by the ONNX definition of the op, "
                                f"but {list(have)} by its inputs and attributes here",
                          "an attribute disagrees with the inputs' shapes (kernel_shape, output_shape, ...)")

    def _unsupported(self, node, label: str) -> None:
        ins = ", ".join(f"'{i}' {list(self.shape(i)) if (i in self.consts or i in self.values) else '?'}"
                        for i in node.input if i)
        self.unsupported.setdefault(label, []).append(f"'{node_label(node)}' (inputs: {ins or 'none'})")
        raise _Skip

    def attrs(self, node) -> dict:
        from onnx import helper

        out = {}
        for a in node.attribute:
            value = helper.get_attribute_value(a)
            out[a.name] = value.decode() if isinstance(value, bytes) else value
        return out

    def flag(self, node, name: str, default: int) -> int:
        """A 0/1 attribute (is_causal, largest, reverse ...): another value is refused, as
        runtimes read it differently."""
        value = self.attrs(node).get(name, default)
        if value not in (0, 1):
            self.fail(node, f"attribute {name}={value!r} must be 0 or 1")
        return int(value)

    def version(self, node) -> int:
        """The op version `node` means: the newest version of its op at the model's opset."""
        if node.op_type not in self.versions:
            try:
                self.versions[node.op_type] = self.onnx.defs.get_schema(node.op_type, self.opset, "").since_version
            except Exception:  # an op onnx does not know: the handler (if any) decides
                self.versions[node.op_type] = self.opset
        return self.versions[node.op_type]

    def legacy_broadcast(self, node, k: int = 1) -> str:
        """Input k of an arithmetic node as numpy broadcasting reads it. Before opset 7, B
        broadcasts only with broadcast=1, its dimensions aligned with A's from `axis`
        (default: the trailing ones): B[3] on A[3, 4] with axis=0 is B as [3, 1]."""
        name = node.input[k]
        if self.version(node) >= 7:
            return name
        a = self.attrs(node)
        sa, sb = tuple(self.shape(node.input[0])), tuple(self.shape(name))
        if not a.get("broadcast", 0):
            if sa != sb:
                self.fail(node, f"opset-{self.version(node)} {node.op_type} without broadcast=1 needs equal shapes, "
                                f"got {list(sa)} and {list(sb)}")
            return name
        axis = a.get("axis", len(sa) - len(sb))
        axis = axis + len(sa) if axis < 0 else axis
        if not 0 <= axis <= len(sa) - len(sb) or any(e not in (1, sa[axis + j]) for j, e in enumerate(sb)):
            self.fail(node, f"B {list(sb)} does not broadcast onto A {list(sa)} from axis {axis}")
        trailing = len(sa) - axis - len(sb)
        if trailing == 0 or math.prod(sb) == 1:
            return name
        aligned = f"{name}__axis{axis}"
        if aligned not in self.consts and aligned not in self.values:
            self.view(node, aligned, name, sb + (1,) * trailing)
        return aligned

    def fold(self, node) -> None:
        feeds = {i: self.consts[i] for i in node.input if i}
        self._fold_size_check(node, feeds)
        if node.op_type == "DequantizeLinear" and not self.attrs(node).get("block_size", 0):
            # QDQ weights (the reference evaluator implements only recent versions of this op)
            x, scale = (self.consts[i] for i in node.input[:2])
            zp = self.consts[node.input[2]] if len(node.input) > 2 and node.input[2] else np.zeros((), x.dtype)
            axis = self.attrs(node).get("axis", 1) % max(x.ndim, 1)
            shape = [-1 if d == axis else 1 for d in range(x.ndim)] if scale.size > 1 else [1] * x.ndim
            value = (x.astype(np.float64) - zp.astype(np.float64).reshape(shape)) * scale.astype(np.float64).reshape(shape)
            self.consts[node.output[0]] = value.astype(np.float32)
            return
        if node.op_type == "GatherElements":
            # np.take_along_axis is GatherElements (onnx's reference evaluator fails on
            # transformers' BERT: data [1, 512] gathered by [1, 64] along axis 1)
            data, idx = (self.consts[i] for i in node.input[:2])
            axis = self.attrs(node).get("axis", 0) % max(data.ndim, 1)
            idx = np.where(idx < 0, idx + data.shape[axis], idx)
            if data.ndim == idx.ndim and ((idx >= 0) & (idx < data.shape[axis])).all():
                self.consts[node.output[0]] = np.take_along_axis(data, idx.astype(np.int64), axis)
                return
        try:
            results = self.evaluate(node, feeds)
        except Exception as err:  # the reference evaluator rejects what onnx does not define
            self.fail(node, f"cannot fold this constant computation: {err}")
        for name, value in zip(node.output, results):
            if name:
                value = np.asarray(value)
                # bfloat16 and the float8s (ml_dtypes, not numpy kinds) compute as float32
                self.consts[name] = value if value.dtype.kind in "fiub" else value.astype(np.float32)

    def evaluate(self, node, feeds: dict, opset: int | None = None) -> list:
        """`node` run by onnx's reference evaluator on `feeds`, as an op of the model's opset
        (a one-node model: the evaluator then picks the op version the model means)."""
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        def info(name, value=None):
            code = helper.np_dtype_to_tensor_dtype(value.dtype) if value is not None else 1
            return helper.make_tensor_value_info(name, code, None)
        graph = helper.make_graph([node], "fold", [info(k, v) for k, v in feeds.items()],
                                  [info(o) for o in node.output if o])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset or self.opset)])
        return ReferenceEvaluator(model).run(None, feeds)

    def _fold_size_check(self, node, feeds) -> None:
        """Refuse constant computations that would build huge tensors (before building them)."""
        op, vals = node.op_type, [feeds.get(i) for i in node.input]
        try:
            if op == "ConstantOfShape":
                count = math.prod(int(d) for d in vals[0].reshape(-1))
            elif op == "Expand":
                count = math.prod(np.broadcast_shapes(vals[0].shape, tuple(int(d) for d in vals[1].reshape(-1))))
            elif op == "Tile":
                count = vals[0].size * math.prod(int(r) for r in vals[1].reshape(-1))
            elif op == "Range":
                count = abs((float(vals[1]) - float(vals[0])) / float(vals[2]))
            else:
                return
        except (ValueError, TypeError, ZeroDivisionError, OverflowError, AttributeError):
            return   # the evaluator reports the bad input
        if count > _FOLD_ELEMENTS:
            self.fail(node, f"this constant computation would build {count:,.0f} elements (at most "
                            f"{_FOLD_ELEMENTS:,} are folded)")

    def _scalar(self, node, out: str, src: str, op: str, value: float, reverse: bool = False) -> str:
        shape = self.shape(src)
        names = [f"i{d}" for d in range(len(shape))]
        xs = f"{self.operand(src)}[{', '.join(names)}]"
        num = _fmt_num(value)
        expr = f"{num} {op} {xs}" if reverse else f"{xs} {op} {num}"
        return self.comp(out, shape, self.dtype(src), names, "=", expr)

    def _finite_scalar(self, name: str) -> bool:
        """A one-element finite constant (written as a literal; inf and NaN stay params)."""
        return name in self.consts and self.consts[name].size == 1 and bool(np.isfinite(self.consts[name]).all())

    def _unary_fn(self, node, fn: str, dtype: str | None = None):
        self._unary_fn_named(node, node.output[0], node.input[0], fn, dtype)

    def read(self, name: str, out_shape, names) -> str:
        """`name` read at the point `names` of a (numpy-)broadcast result of `out_shape`:
        a literal for a one-element constant, else an access (size-1 dimensions at 0)."""
        if name in self.consts and self.consts[name].size == 1 and np.isfinite(self.consts[name]).all():
            return _fmt_num(self.consts[name].reshape(()))   # inf and NaN stay params: no DSL literal
        shape = tuple(self.shape(name))
        off = len(out_shape) - len(shape)
        idx = ["0" if (e == 1 and out_shape[off + d] != 1) else names[off + d] for d, e in enumerate(shape)]
        return f"{self.operand(name)}[{', '.join(idx) or '0'}]"

    def ew(self, node, out: str, inputs: list[str], template: str, dtype: str | None = None,
           note: str = "") -> str:
        """`out` = `template` (a format string: {0}, {1} ... are the inputs) at every point of
        the inputs' numpy broadcast: one comprehension."""
        try:
            shape = tuple(np.broadcast_shapes(*[tuple(self.shape(i)) for i in inputs]))
        except ValueError:
            self.fail(node, "its inputs do not broadcast: " + " vs ".join(str(list(self.shape(i))) for i in inputs))
        shape = shape or (1,)
        names = [f"i{d}" for d in range(len(shape))]
        reads = [self.read(i, shape, names) for i in inputs]
        dtype = dtype or next((self.dtype(i) for i in inputs if i not in self.consts), self.dtype(inputs[0]))
        return self.comp(out, shape, dtype, names, "=", template.format(*reads), note)

    def _producer(self, name):
        """The node writing `name`, or None (an input or a constant)."""
        return self.producers.get(name)

    def _const_value(self, name):
        """The value of a one-element constant, else None."""
        return float(self.consts[name].reshape(())) if name in self.consts and self.consts[name].size == 1 else None

    def _only_consumer(self, name):
        """The one node reading `name` (not a graph output), else None."""
        users = self.consumers.get(name, [])
        return users[0] if len(users) == 1 and name not in {o.name for o in self.graph.output} else None

    def _scaled(self, name, value, op="Mul"):
        """(the other operand, the node) where `name` is `op` of something and the constant
        `value` (either order), else None."""
        n = self._producer(name)
        if n is None or n.op_type != op:
            return None
        for i, j in ((0, 1), (1, 0)):
            v = self._const_value(n.input[j])
            if v is not None and abs(v - value) <= 1e-4 * max(1.0, abs(value)):
                return n.input[i], n
        return None

    def _drop(self, onnx_name: str) -> None:
        """Remove the statement written for `onnx_name` (its reader is being replaced)."""
        dsl, shape, dtype = self.values.pop(onnx_name)
        self.body = [l for l in self.body if l != f"tensor {dsl}: {dtype}{_shape_text(shape)}"
                     and not l.startswith((f"{dsl}[", f"{dsl} = "))]

    def _unary_fn_named(self, node, out: str, src: str, fn: str, dtype: str | None = None) -> str:
        shape = self.shape(src)
        names = [f"i{d}" for d in range(len(shape))]
        x = f"{self.operand(src)}[{', '.join(names)}]"
        self.comp(out, shape, dtype or self.dtype(src), names, "=", fn.replace("X", x))
        return out


SUPPORTED_OPS = sorted(name[3:] for name in dir(_Importer) if name.startswith("op_"))


def _as_model(model, filename: str | None):
    onnx = _onnx()
    if isinstance(model, (str, Path)):
        path = Path(model)
        try:
            loaded = onnx.load(str(path))
        except FileNotFoundError:
            raise UserError(f"cannot read '{path}': no such file", filename=str(path)) from None
        except Exception as err:  # protobuf's DecodeError and friends: not an ONNX file
            raise UserError(f"'{path}' is not an ONNX model ({type(err).__name__}: {err})",
                            filename=str(path)) from None
        return loaded, filename or str(path)
    if isinstance(model, onnx.ModelProto):
        return model, filename or (model.graph.name or "<onnx>")
    raise UserError(f"from_onnx() takes a path to a .onnx file or an onnx.ModelProto, got {type(model).__name__}",
                    filename="from_onnx")


def from_onnx(model, input_shapes: dict | None = None, filename: str | None = None) -> Program:
    """Import an ONNX model (a path or an `onnx.ModelProto`) as a `Program`.

    The program's DSL text is `program.source` (one statement per ONNX node, readable and
    re-parseable; `autocomp import` writes it to a `.acir` file) and the model's weights are
    `program.param_values` (name → numpy array). `input_shapes` gives static shapes for
    inputs with symbolic dimensions, e.g. `{"input": [1, 3, 224, 224]}`. Unsupported nodes
    raise a `UserError` naming each node, its op type and its inputs.
    """
    model, filename = _as_model(model, filename)
    return _Importer(model, input_shapes, filename).run()


def run_with_values(program: Program, inputs: dict | None = None, seed: int = 0) -> dict:
    """The reference interpreter on `program` with its attached param values, the given
    `inputs` (name → array) and random values for anything else; returns every tensor."""
    from .. import interp

    values = interp.random_inputs(program, seed)
    values.update({k: np.asarray(v, dtype=np.float64) for k, v in program.param_values.items()})
    for name, value in (inputs or {}).items():
        if not program.has_tensor(name) or program.tensor(name).role not in ("input", "param"):
            known = ", ".join(t.name for t in program.inputs if t.role == "input")
            raise UserError(f"'{name}' is not an input of the program (inputs: {known})")
        value = np.asarray(value, dtype=np.float64)
        if value.ndim == 0 and program.tensor(name).shape == (1,):   # an ONNX scalar, held as [1]
            value = value.reshape(1)
        if value.shape != program.tensor(name).shape:
            raise UserError(f"'{name}' has shape {list(value.shape)}, the program expects "
                            f"{list(program.tensor(name).shape)}")
        values[name] = value
    return interp.run(program, values)
