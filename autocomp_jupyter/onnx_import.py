"""ONNX import: an ONNX model → a DSL program (its text and its `Program`), weights attached.

`from_onnx(model)` walks the graph in order and writes one DSL statement per ONNX node
(library ops where one fits — `conv2d`, `linear`, `batchnorm`, `layernorm`, `softmax` ...,
comprehensions otherwise), keeping tensor names where they are legal DSL names and
sanitising them otherwise. Initializers become `param`s; their values travel with the
program (`Program.param_values`) so the reference interpreter runs the real model.

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

Anything else is a `UserError` naming the node, its op type and its inputs (all such
nodes at once; a refused node's readers are skipped, not reported again); a bug of the
importer on one node is an "internal error" diagnostic for that node, never a traceback.
`onnx` is an optional dependency: importing this module without it raises a `UserError`
saying how to install it.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .errors import Diagnostic, UserError
from .ir.program import Program
from .limits import EXTENT
from .onnx_attention_ops import AttentionOps
from .onnx_index_ops import IndexOps
from .onnx_validate import NodeChecker, initializer_arrays, model_problems, node_label, unsupported_ops_diagnostic

__all__ = ["from_onnx", "run_with_values", "sanitize", "SUPPORTED_OPS"]


def _onnx():
    try:
        import onnx
    except ImportError:
        raise UserError("reading ONNX models needs the 'onnx' package",
                        filename="from_onnx") from None
    return onnx


# onnx.TensorProto codes → DSL dtypes: the 64-bit and unsigned integer types as i32 (values
# past its range saturate), BOOL as i8 holding 0 or 1. DOUBLE graph inputs are refused: f32
# would silently lose their range (1e200 becomes inf); float64 constants become f32 params.
_DTYPES = {1: "f32", 10: "f16", 16: "bf16", 3: "i8", 6: "i32", 7: "i32", 2: "i32", 4: "i32",
           5: "i32", 12: "i32", 13: "i32", 9: "i8"}
# Folding a constant computation may build at most this many elements (a mutated
# ConstantOfShape or Expand must not exhaust memory).
_FOLD_ELEMENTS = 1 << 27
_F32_MAX = float(np.finfo(np.float32).max)
_NP_DTYPE = {"f32": np.float32, "f16": np.float16, "bf16": np.float32, "i8": np.int8, "i32": np.int32}
_RESERVED = {"input", "param", "tensor", "output", "where", "and"}
_INDEX_NAME = re.compile(r"^(?:[ijkbu]\d*|n|c|h|w|r|s|f|g|fo|a\d+)$")  # index names the importer and library use


@dataclass
class _View:
    """A tensor that is `base` (a DSL tensor) reshaped to `shape`, not yet materialised."""

    base: str
    shape: tuple[int, ...]


class _Skip(Exception):
    """This node has an error already recorded (or reads one that had)."""


def _type_name(onnx, code: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(code)
    except ValueError:
        return f"an unknown element type (code {code})"


class _NotFinite(ValueError):
    """A constant the op's written form needs as a number is inf or NaN."""


def _fmt_num(value: float) -> str:
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise _NotFinite(value)
    text = repr(value)
    return text if not text.startswith("-") else f"({text})"


def _shape_text(shape) -> str:
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def sanitize(name: str) -> str:
    """An ONNX tensor name as a DSL name: kept where legal, else runs of other characters
    become '_' ('/layer1/conv1/Conv_output_0' → 'layer1_conv1_Conv', 'input.1' → 'input_1')."""
    out = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")
    out = re.sub(r"^onnx_+", "", out)
    if out.endswith("_output_0") and len(out) > len("_output_0"):
        out = out[: -len("_output_0")]
    if not out or out[0].isdigit():
        out = "t_" + out
    if out in _RESERVED or _INDEX_NAME.match(out):
        out += "_"
    return out


class _Importer(IndexOps, AttentionOps):
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

    # ---------------------------------------------------------------- names

    def fresh(self, wanted: str) -> str:
        name = sanitize(wanted)
        base, k = name, 1
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name

    # ---------------------------------------------------------------- values

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

    # ---------------------------------------------------------------- emission helpers

    def lib(self, node, out: str, op: str, inputs: list[str], **attrs) -> str:
        """Write `out = op(inputs..., attrs)` for ONNX names `inputs`; the library op's own
        lowering checks the shapes (its error is the node's error)."""
        from .dsl.library import LIBRARY, Operand, OpError

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
        from .dsl.library import reshape_plan

        if reshape_plan(base_shape, shape) is None:
            self.fail(node, f"reshape {list(base_shape)} -> {list(shape)} is not affine (no dimension of one shape "
                            "is a contiguous product of the other's)")
        self.values[out] = _View(base, shape)
        self.base_shapes[base] = base_shape
        self.dtype_of_view[out] = dtype

    base_shapes: dict

    def _base_shape(self, v: _View) -> tuple[int, ...]:
        return self.base_shapes[v.base]

    # ---------------------------------------------------------------- the walk

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
        from .dsl import parse

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
                self._unsupported(node, op)
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

    # ---------------------------------------------------------------- constant folding

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

    def op_Shape(self, index, node):
        a = self.attrs(node)
        shape = self.shape(node.input[0])
        start, end = a.get("start", 0), a.get("end", None)
        self.consts[node.output[0]] = np.array(shape[start:end], dtype=np.int64)

    def op_Range(self, index, node):   # folded when its inputs are constants (the usual case)
        self.fail(node, "its start, limit and delta must be constants: the length of its output depends on their "
                        "values", "give the model static shapes (the exporter then folds the Range)")

    def op_Size(self, index, node):
        self.consts[node.output[0]] = np.array(math.prod(self.shape(node.input[0])), dtype=np.int64)

    # ---------------------------------------------------------------- aliases and views

    def op_Identity(self, index, node):
        self.alias(node, node.output[0], node.input[0])

    def op_Reshape(self, index, node):
        if self.version(node) < 5:   # opset 1: the shape is an attribute
            target = [int(d) for d in self.attrs(node).get("shape", [])]
        else:
            target = [int(d) for d in self.const(node, 1, "target shape")]
        src = self.shape(node.input[0])
        allowzero = self.attrs(node).get("allowzero", 0)
        shape = [src[k] if d == 0 and not allowzero else d for k, d in enumerate(target)]
        if -1 in shape:
            known = math.prod(d for d in shape if d != -1)
            shape[shape.index(-1)] = math.prod(src) // known if known else 0
        self.view(node, node.output[0], node.input[0], shape)

    def op_Flatten(self, index, node):
        axis = self.attrs(node).get("axis", 1)
        src = self.shape(node.input[0])
        axis = axis + len(src) if axis < 0 else axis
        self.view(node, node.output[0], node.input[0], (math.prod(src[:axis]), math.prod(src[axis:])))

    def _axes(self, node, k_input: int):
        a = self.attrs(node)
        if "axes" in a:
            return [int(x) for x in a["axes"]]
        if len(node.input) > k_input and node.input[k_input]:
            return [int(x) for x in self.const(node, k_input, "axes")]
        return None

    def op_Squeeze(self, index, node):
        src = self.shape(node.input[0])
        axes = self._axes(node, 1)
        axes = [a % len(src) for a in axes] if axes is not None else [d for d, e in enumerate(src) if e == 1]
        self.view(node, node.output[0], node.input[0], [e for d, e in enumerate(src) if d not in axes])

    def op_Unsqueeze(self, index, node):
        src = list(self.shape(node.input[0]))
        axes = self._axes(node, 1)
        rank = len(src) + len(axes)
        out = iter(src)
        axes = {a % rank for a in axes}
        self.view(node, node.output[0], node.input[0], [1 if d in axes else next(out) for d in range(rank)])

    # ---------------------------------------------------------------- contractions

    def op_Gemm(self, index, node):
        a = self.attrs(node)
        alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
        trans_a, trans_b = a.get("transA", 0), a.get("transB", 0)
        x = node.input[0]
        if trans_a:
            if self.is_const(x):
                self.consts[x + "__T"] = self.consts[x].T
                x = x + "__T"
            else:
                self.lib(node, node.output[0] + "_At", "transpose", [x], perm=[1, 0])
                x = node.output[0] + "_At"
        b = node.input[1]
        scale_after = 1.0
        if self.is_const(b):
            value = self.consts[b].T if trans_b else self.consts[b]
            if alpha != 1.0:
                value = value * alpha
            if trans_b or alpha != 1.0:
                name = b + ("_T" if trans_b else "") + ("_scaled" if alpha != 1.0 else "")
                self.consts[name] = value.astype(self.consts[b].dtype)
                b = name
        else:
            if trans_b:
                self.lib(node, node.output[0] + "_Bt", "transpose", [b], perm=[1, 0])
                b = node.output[0] + "_Bt"
            scale_after = alpha
        m, k = self.shape(x)
        n = self.shape(b)[1]
        c = node.input[2] if len(node.input) > 2 and node.input[2] else None
        out = node.output[0]
        bias = None
        if c is not None and self.is_const(c) and math.prod(self.consts[c].shape) in (n, 1) \
                and (self.consts[c].ndim < 2 or self.consts[c].shape[0] == 1) and scale_after == 1.0:
            value = np.broadcast_to(self.consts[c].reshape(-1), (n,)) * beta
            self.consts[c + "_bias"] = value.astype(np.float32)
            bias = c + "_bias"
        if bias is not None:
            self.lib(node, out, "linear", [x, b, bias])
            return
        mm = out if c is None and scale_after == 1.0 else out + "_mm"
        self.lib(node, mm, "matmul", [x, b])
        cur = mm
        if scale_after != 1.0:
            nxt = out if c is None else out + "_scaled"
            self._scalar(node, nxt, cur, "*", scale_after)
            cur = nxt
        if c is not None:
            if beta != 1.0:
                if self.is_const(c):
                    self.consts[c + "_beta"] = (self.consts[c] * beta).astype(np.float32)
                    c = c + "_beta"
                else:
                    self._scalar(node, out + "_C", c, "*", beta)
                    c = out + "_C"
            self.lib(node, out, "add", [cur, c])

    def op_MatMul(self, index, node):
        a_name, b_name = node.input[0], node.input[1]
        sa, sb = self.shape(a_name), self.shape(b_name)
        if len(sa) == 1 or len(sb) == 1:
            # numpy's vector rules: A[K] is [1, K], B[K] is [K, 1], and that axis is dropped after
            out = node.output[0]
            if len(sa) == 1:
                self.view(node, a_name + "__row", a_name, (1,) + tuple(sa))
                a_name = a_name + "__row"
            if len(sb) == 1:
                self.view(node, b_name + "__col", b_name, tuple(sb) + (1,))
                b_name = b_name + "__col"
            inner = self.onnx.helper.make_node("MatMul", [a_name, b_name], [out + "__2d"], name=node.name)
            self.op_MatMul(index, inner)
            full = list(self.shape(out + "__2d"))
            drop = ([len(full) - 1] if len(sb) == 1 else []) + ([len(full) - 2] if len(sa) == 1 else [])
            return self.view(node, out, out + "__2d", [e for d, e in enumerate(full) if d not in drop])
        if len(sa) == 2 and len(sb) == 2:
            return self.lib(node, node.output[0], "matmul", [a_name, b_name])
        if len(sa) == 3 and len(sb) == 3 and sa[0] == sb[0]:
            return self.lib(node, node.output[0], "batch_matmul", [a_name, b_name])
        m, k = sa[-2:]
        k2, n = sb[-2:]
        if k != k2:
            self.fail(node, f"inner dimensions differ: {list(sa)} x {list(sb)}")
        batch = np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2])) if True else ()
        rank = len(batch)
        names = [f"b{d}" for d in range(rank)]

        def idx(shape_batch):
            off = rank - len(shape_batch)
            return [("0" if (e == 1 and batch[off + d] != 1) else names[off + d]) for d, e in enumerate(shape_batch)]
        an, bn = self.operand(a_name), self.operand(b_name)
        ia = ", ".join(idx(sa[:-2]) + ["i", "k"])
        ib = ", ".join(idx(sb[:-2]) + ["k", "j"])
        self.comp(node.output[0], tuple(batch) + (m, n), self.dtype(a_name), names + ["i", "j"], "+=",
                  f"{an}[{ia}] * {bn}[{ib}]", "MatMul, batched with broadcasting")

    # ---------------------------------------------------------------- elementwise

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

    def _binary(self, node, op_name: str, symbol: str):
        a, b = node.input[0], self.legacy_broadcast(node)
        for first, second, reverse in ((a, b, False), (b, a, True)):
            if self._finite_scalar(second) and self.consts[second].ndim <= len(self.shape(first)):
                return self._scalar(node, node.output[0], first, symbol, float(self.consts[second].reshape(())),
                                    reverse)
        return self.lib(node, node.output[0], op_name, [a, b])

    def op_Add(self, index, node):
        self._binary(node, "add", "+")

    def op_Sub(self, index, node):
        self._binary(node, "sub", "-")

    def op_Mul(self, index, node):
        self._binary(node, "mul", "*")

    def op_Div(self, index, node):
        a, b = node.input[0], self.legacy_broadcast(node)
        if self._finite_scalar(b) and self.consts[b].ndim <= len(self.shape(a)):
            return self._scalar(node, node.output[0], a, "/", float(self.consts[b].reshape(())))
        self._binary(node, "div", "/")

    def _unary_fn(self, node, fn: str, dtype: str | None = None):
        self._unary_fn_named(node, node.output[0], node.input[0], fn, dtype)

    def op_Relu(self, index, node):
        self.lib(node, node.output[0], "relu", [node.input[0]])

    def op_Sigmoid(self, index, node):
        self.lib(node, node.output[0], "sigmoid", [node.input[0]])

    def op_Tanh(self, index, node):
        gelu = self._gelu_tanh_pattern(index, node)
        if gelu is not None:
            x, out, skip = gelu
            self.skip_nodes.update(skip)
            return self.lib(node, out, "gelu", [x])
        self.lib(node, node.output[0], "tanh", [node.input[0]])

    def _gelu_tanh_pattern(self, index, node):
        """GPT-2's GELU written out (`0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`,
        as torch exports it: Pow(x, 3) → Mul 0.044715 → Add x → Mul √(2/π) → Tanh, then the
        tail `_gelu_tail` shares with the erf form; each product's operands in either order),
        the DSL's `gelu` exactly. Returns (x, out, nodes to skip) or None."""
        outer = self._scaled(node.input[0], math.sqrt(2 / math.pi))
        if outer is None or self._only_consumer(outer[1].output[0]) is not node:
            return None
        add_x = self._producer(outer[0])
        if add_x is None or add_x.op_type != "Add" or self._only_consumer(add_x.output[0]) is not outer[1]:
            return None
        for i, j in ((0, 1), (1, 0)):
            cubic = self._scaled(add_x.input[j], 0.044715)
            if cubic is None or self._only_consumer(cubic[1].output[0]) is not add_x:
                continue
            pw = self._scaled(cubic[0], 3.0, "Pow")
            if pw is not None and pw[0] == add_x.input[i] and self._only_consumer(pw[1].output[0]) is cubic[1]:
                x = add_x.input[i]
                break
        else:
            return None
        return self._gelu_tail(index, node, x, [outer[1], add_x, cubic[1], pw[1]])

    def op_Exp(self, index, node):
        self.lib(node, node.output[0], "exp", [node.input[0]])

    def op_Sqrt(self, index, node):
        self._unary_fn(node, "sqrt(X)")

    def op_Abs(self, index, node):
        self._unary_fn(node, "abs(X)")

    def op_Neg(self, index, node):
        self._unary_fn(node, "-X")

    def op_Reciprocal(self, index, node):
        self._unary_fn(node, "1 / X")

    def op_Pow(self, index, node):
        b = self.legacy_broadcast(node)
        forms = {1.0: "X", 2.0: "X * X", 3.0: "X * X * X", 0.5: "sqrt(X)", -1.0: "1 / X", -0.5: "1 / sqrt(X)"}
        if b in self.consts and self.consts[b].size == 1 and self.consts[b].ndim <= len(self.shape(node.input[0])) \
                and float(self.consts[b].reshape(())) in forms:
            return self._unary_fn(node, forms[float(self.consts[b].reshape(()))])
        self.ew(node, node.output[0], [node.input[0], b], "pow({0}, {1})")

    # ---------------------------------------------------------------- elementwise, any arity

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

    def _variadic(self, node, fold: str):
        inputs = [i for i in node.input if i]
        if len(inputs) == 1:
            return self.alias(node, node.output[0], inputs[0])
        if fold == "mean":
            expr = "(" + " + ".join("{%d}" % k for k in range(len(inputs))) + f") / {len(inputs)}"
        elif fold == "sum":
            expr = " + ".join("{%d}" % k for k in range(len(inputs)))
        else:
            expr = "{0}"
            for k in range(1, len(inputs)):
                expr = f"{fold}({expr}, {{{k}}})"
        if fold == "sum" and len(inputs) == 2 and self.version(node) >= 8:
            return self.lib(node, node.output[0], "add", inputs)   # ResNet's residual Sum: an add
        if self.version(node) < 8 and len({tuple(self.shape(i)) for i in inputs}) > 1:
            self.fail(node, f"opset-{self.version(node)} {node.op_type} needs inputs of one shape, got "
                            + ", ".join(str(list(self.shape(i))) for i in inputs))
        self.ew(node, node.output[0], inputs, expr, note=node.op_type)

    def op_Sum(self, index, node):
        self._variadic(node, "sum")

    def op_Mean(self, index, node):
        self._variadic(node, "mean")

    def op_Max(self, index, node):
        self._variadic(node, "max")

    def op_Min(self, index, node):
        self._variadic(node, "min")

    def _activation(self, node, template: str, **defaults):
        a = self.attrs(node)
        values = {k: _fmt_num(a.get(k, v)) for k, v in defaults.items()}
        self.ew(node, node.output[0], [node.input[0]], template.format("{0}", **values), note=node.op_type)

    def op_LeakyRelu(self, index, node):
        self._activation(node, "max({0}, 0) + {alpha} * min({0}, 0)", alpha=0.01)

    def op_Elu(self, index, node):
        self._activation(node, "max({0}, 0) + {alpha} * (exp(min({0}, 0)) - 1)", alpha=1.0)

    def op_Celu(self, index, node):
        self._activation(node, "max({0}, 0) + min(0, {alpha} * (exp({0} / {alpha}) - 1))", alpha=1.0)

    def op_Selu(self, index, node):
        self._activation(node, "{gamma} * (max({0}, 0) + {alpha} * (exp(min({0}, 0)) - 1))",
                         alpha=1.67326319217681884765625, gamma=1.05070102214813232421875)

    def op_Softplus(self, index, node):   # log(1 + e^x), without overflow for large x
        self._activation(node, "max({0}, 0) + log(1 + exp(-abs({0})))")

    def op_Softsign(self, index, node):
        self._activation(node, "{0} / (1 + abs({0}))")

    def op_HardSigmoid(self, index, node):
        self._activation(node, "max(0, min(1, {alpha} * {0} + {beta}))", alpha=0.2, beta=0.5)

    def op_HardSwish(self, index, node):
        self._activation(node, "{0} * max(0, min(1, {0} / 6 + 0.5))")

    def op_Mish(self, index, node):
        self._activation(node, "{0} * tanh(max({0}, 0) + log(1 + exp(-abs({0}))))")

    def op_ThresholdedRelu(self, index, node):
        self._activation(node, "select(less({alpha}, {0}), {0}, 0)", alpha=1.0)

    def op_Shrink(self, index, node):
        self._activation(node, "select(less({0}, -{lambd}), {0} + {bias}, select(less({lambd}, {0}), {0} - {bias}, 0))",
                         lambd=0.5, bias=0.0)

    def op_Log(self, index, node):
        self._unary_fn(node, "log(X)")

    def op_Floor(self, index, node):
        self._unary_fn(node, "floor(X)")

    def op_Ceil(self, index, node):
        self._unary_fn(node, "-floor(-X)")

    def op_Sign(self, index, node):
        self._unary_fn(node, "less(0, X) - less(X, 0)")

    def op_IsNaN(self, index, node):   # NaN is the one value not equal to itself
        self._unary_fn(node, "1 - equal(X, X)", "i8")

    def op_IsInf(self, index, node):   # beyond the largest finite f32 (the f16 and bf16 ones are smaller)
        a = self.attrs(node)
        tests = ([f"less({_F32_MAX!r}, X)"] if a.get("detect_positive", 1) else []) \
            + ([f"less(X, -{_F32_MAX!r})"] if a.get("detect_negative", 1) else [])
        self._unary_fn(node, " + ".join(tests) or "0 * equal(X, X)", "i8")

    def op_Not(self, index, node):
        self._unary_fn(node, "1 - X")

    def op_PRelu(self, index, node):
        slope = node.input[1]
        x_shape = self.shape(node.input[0])
        s_shape = tuple(self.shape(slope))
        if self.version(node) < 7 and len(x_shape) > 2 and s_shape == (x_shape[1],):
            # opset 6: a slope per channel (axis 1), not numpy broadcasting
            aligned = slope + "__channel"
            if aligned not in self.consts and aligned not in self.values:
                self.view(node, aligned, slope, s_shape + (1,) * (len(x_shape) - 2))
            slope = aligned
        self.ew(node, node.output[0], [node.input[0], slope], "max({0}, 0) + {1} * min({0}, 0)", note="PRelu")

    def _compare(self, node, template: str):
        b = self.legacy_broadcast(node)
        self.ew(node, node.output[0], [node.input[0], b], template, dtype="i8", note=node.op_type)

    def op_Equal(self, index, node):
        self._compare(node, "equal({0}, {1})")

    def op_Less(self, index, node):
        self._compare(node, "less({0}, {1})")

    def op_LessOrEqual(self, index, node):
        self._compare(node, "less_equal({0}, {1})")

    def op_Greater(self, index, node):
        self._compare(node, "less({1}, {0})")

    def op_GreaterOrEqual(self, index, node):
        self._compare(node, "less_equal({1}, {0})")

    def op_And(self, index, node):
        self._compare(node, "{0} * {1}")

    def op_Or(self, index, node):
        self._compare(node, "max({0}, {1})")

    def op_Xor(self, index, node):
        self._compare(node, "abs({0} - {1})")

    def op_Where(self, index, node):
        c, a, b = node.input[:3]
        dtype = next((self.dtype(i) for i in (a, b) if i not in self.consts), self.dtype(a))
        self.ew(node, node.output[0], [c, a, b], "select({0}, {1}, {2})", dtype=dtype, note="Where")

    def op_Expand(self, index, node):
        target = tuple(int(d) for d in self.const(node, 1, "shape"))
        shape = tuple(self.shape(node.input[0]))
        try:
            out = tuple(np.broadcast_shapes(shape, target))
        except ValueError:
            self.fail(node, f"{list(shape)} does not broadcast to {list(target)}")
        if out == shape:
            return self.alias(node, node.output[0], node.input[0])
        names = [f"i{d}" for d in range(len(out))]
        self.comp(node.output[0], out, self.dtype(node.input[0]), names, "=",
                  self.read(node.input[0], out, names), "Expand")

    def op_Clip(self, index, node):
        a = self.attrs(node)
        lo, hi = a.get("min"), a.get("max")
        if len(node.input) > 1 and node.input[1]:
            lo = float(self.const(node, 1, "min").reshape(()))
        if len(node.input) > 2 and node.input[2]:
            hi = float(self.const(node, 2, "max").reshape(()))
        lo = None if lo is not None and float(lo) == -math.inf else lo   # an infinite bound is no bound
        hi = None if hi is not None and float(hi) == math.inf else hi
        if lo == 0.0 and hi == 6.0:
            return self.lib(node, node.output[0], "relu6", [node.input[0]])
        if lo == 0.0 and hi is None:
            return self.lib(node, node.output[0], "relu", [node.input[0]])
        fn = "X"
        if lo is not None:
            fn = f"max({fn}, {_fmt_num(lo)})"
        if hi is not None:
            fn = f"min({fn}, {_fmt_num(hi)})"
        self._unary_fn(node, fn)

    def op_Erf(self, index, node):
        gelu = self._gelu_pattern(index, node)
        if gelu is not None:
            x, out, skip = gelu
            self.skip_nodes.update(skip)
            return self.lib(node, out, "gelu", [x], approximate="none")
        self.lib(node, node.output[0], "erf", [node.input[0]])

    def op_Gelu(self, index, node):
        approx = self.attrs(node).get("approximate", b"none")
        approx = approx.decode() if isinstance(approx, bytes) else approx
        self.lib(node, node.output[0], "gelu", [node.input[0]], approximate=approx)

    def _gelu_pattern(self, index, node):
        """x·0.5·(1 + erf(x/√2)) as torch writes it: Div(x, √2) | Mul(x, 1/√2) → Erf, then
        `_gelu_tail`. Returns (x, out, nodes to skip)."""
        pre = self._producer(node.input[0])
        if pre is None:
            return None
        x = None
        if pre.op_type == "Div" and self._const_value(pre.input[1]) is not None \
                and abs(self._const_value(pre.input[1]) - math.sqrt(2)) < 1e-4:
            x = pre.input[0]
        scaled = self._scaled(pre.output[0], 1 / math.sqrt(2))
        if scaled is not None:
            x = scaled[0]
        if x is None or self._only_consumer(pre.output[0]) is not node:
            return None
        return self._gelu_tail(index, node, x, [pre])

    def _gelu_tail(self, index, node, x, before):
        """The end both GELU forms share: `node` (Erf, Tanh) → Add 1 → Mul x → Mul 0.5, or Mul
        with x·0.5 (the Muls' operands in either order). `before`: the pattern's nodes that
        lead to `node`, written already and dead once it is one op. Returns (x, out, nodes
        to skip) or None."""
        if x in self.consts:
            return None
        add = self._only_consumer(node.output[0])
        if add is None or add.op_type != "Add" or 1.0 not in (self._const_value(add.input[0]), self._const_value(add.input[1])):
            return None
        m1 = self._only_consumer(add.output[0])
        if m1 is None or m1.op_type != "Mul":
            return None
        other = m1.input[1] if m1.input[0] == add.output[0] else m1.input[0]
        half = None
        if other == x:      # (x * (1 + f)) * 0.5
            m2 = self._only_consumer(m1.output[0])
            if m2 is None or m2.op_type != "Mul" or 0.5 not in (self._const_value(m2.input[0]), self._const_value(m2.input[1])):
                return None
            last = m2
        else:               # (x * 0.5) * (1 + f)
            scaled = self._scaled(other, 0.5)
            if scaled is None or scaled[0] != x or self._only_consumer(other) is not m1:
                return None
            last, half = m1, scaled[1]
        ids = {id(n): k for k, n in enumerate(self.nodes)}
        skip = {ids[id(add)], ids[id(m1)]} | ({ids[id(last)]} if last is not m1 else set())
        if any(k < index for k in skip):
            return None
        for n in before:
            self._drop(n.output[0])
        if half is not None:
            if ids[id(half)] < index:
                self._drop(half.output[0])
            else:
                skip.add(ids[id(half)])
        return x, last.output[0], skip

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

    # ---------------------------------------------------------------- layout

    def op_Transpose(self, index, node):
        perm = self.attrs(node).get("perm")
        rank = len(self.shape(node.input[0]))
        perm = list(perm) if perm is not None else list(reversed(range(rank)))
        self.lib(node, node.output[0], "transpose", [node.input[0]], perm=perm)

    def op_Concat(self, index, node):
        axis = self.attrs(node).get("axis", 1)   # required from opset 4; 1 before
        inputs = [i for i in node.input if i and math.prod(self.shape(i)) > 0]
        if len(inputs) == 1:
            return self.alias(node, node.output[0], inputs[0])
        self.lib(node, node.output[0], "concat", inputs, axis=axis)

    # ---------------------------------------------------------------- dropout and casts (versioned)

    def op_Dropout(self, index, node):  # inference: the identity (the mask output must be unused)
        if len(node.output) > 1 and node.output[1] and self.consumers.get(node.output[1]):
            self.fail(node, "its mask output is used; only inference Dropout is supported")
        if self.version(node) >= 12 and len(node.input) > 2 and node.input[2]:
            training = self.const(node, 2, "training_mode")
            if bool(training.reshape(-1)[0]):
                self.fail(node, "training-mode Dropout (random) is not supported")
        self.alias(node, node.output[0], node.input[0])

    def op_Cast(self, index, node):
        code = self.attrs(node)["to"]
        to = "f32" if code == 11 else _DTYPES.get(code)   # a cast to double computes in f32
        if to is None:
            self.fail(node, f"casts to {self.onnx.TensorProto.DataType.Name(code)}, which has no DSL type")
        src = self.dtype(node.input[0])
        if to == src and code != 9:
            return self.alias(node, node.output[0], node.input[0])
        if code == 9:                         # bool: 1 where non-zero
            return self._unary_fn(node, "1 - equal(X, 0)", "i8")
        if to in ("i8", "i32") and src in ("f32", "f16", "bf16"):   # ONNX truncates toward zero
            return self._unary_fn(node, "select(less(X, 0), -floor(-X), floor(X))", to)
        self._unary_fn(node, "X", to)

    def op_CastLike(self, index, node):
        node = self.onnx.helper.make_node("Cast", [node.input[0]], [node.output[0]], name=node.name,
                                          to=self.onnx.helper.np_dtype_to_tensor_dtype(
                                              np.dtype(_NP_DTYPE[self.dtype(node.input[1])])))
        self.op_Cast(0, node)

    # ---------------------------------------------------------------- slicing, splitting, padding, tiling

    def _sliced(self, node, out: str, src: str, lo, step, out_shape, note: str) -> str:
        """`out` = `src` read at lo[d] + step[d] * i_d (a slice; negative steps read backwards)."""
        shape = self.shape(src)
        rank = len(shape)
        names = [f"i{d}" for d in range(rank)]
        idx = []
        for d in range(rank):
            if (step[d], lo[d]) == (1, 0):
                idx.append(names[d])
            elif step[d] < 0:
                idx.append(f"{lo[d]} - {-step[d]}*{names[d]}")
            else:
                idx.append(f"{step[d]}*{names[d]} + {lo[d]}")
        # a sliced axis indexed directly ranges over the slice, not the whole input axis
        bounds = [f"{names[d]} < {out_shape[d]}" for d in range(rank) if idx[d] == names[d] and out_shape[d] != shape[d]]
        where = f" where {', '.join(bounds)}" if bounds else ""
        return self.comp(out, out_shape, self.dtype(src), names, "=",
                         f"{self.operand(src)}[{', '.join(idx)}]{where}", note)

    def op_Slice(self, index, node):
        shape = self.shape(node.input[0])
        rank = len(shape)
        if self.version(node) < 10:   # opset 1: starts, ends, axes are attributes
            a = self.attrs(node)
            if "starts" not in a or "ends" not in a:
                self.fail(node, "opset-1 Slice needs its 'starts' and 'ends' attributes")
            starts, ends = [int(v) for v in a["starts"]], [int(v) for v in a["ends"]]
            axes = [int(v) for v in a.get("axes", range(len(starts)))]
            steps = [1] * len(starts)
        else:
            starts = [int(v) for v in self.const(node, 1, "starts").reshape(-1)]
            ends = [int(v) for v in self.const(node, 2, "ends").reshape(-1)]
            axes = [int(v) for v in self.const(node, 3, "axes").reshape(-1)] if len(node.input) > 3 and node.input[3] \
                else list(range(len(starts)))
            steps = [int(v) for v in self.const(node, 4, "steps").reshape(-1)] if len(node.input) > 4 and node.input[4] \
                else [1] * len(starts)
        if not len(starts) == len(ends) == len(axes) == len(steps):
            self.fail(node, f"starts, ends, axes and steps differ in length ({len(starts)}, {len(ends)}, {len(axes)}, "
                            f"{len(steps)})")
        lo, step, out_shape = [0] * rank, [1] * rank, list(shape)
        for st, en, ax, sp in zip(starts, ends, axes, steps):
            if not -rank <= ax < rank:
                self.fail(node, f"axis {ax} is out of range for rank {rank}")
            ax %= rank
            if sp == 0:
                self.fail(node, "a slice step of 0")
            size = shape[ax]
            st = st + size if st < 0 else st
            en = en + size if en < 0 else en
            if sp > 0:
                st, en = max(0, min(size, st)), max(0, min(size, en))
                count = max(0, -(-(en - st) // sp))
            else:
                st, en = max(0, min(size - 1, st)), max(-1, min(size - 1, en))
                count = max(0, -(-(st - en) // -sp))
            lo[ax], step[ax], out_shape[ax] = st, sp, count
        if 0 in out_shape:
            self.fail(node, f"the slice is empty (result shape {out_shape})")
        if tuple(out_shape) == tuple(shape) and all(s == 1 for s in step):
            return self.alias(node, node.output[0], node.input[0])
        self._sliced(node, node.output[0], node.input[0], lo, step, out_shape, "Slice")

    def op_Split(self, index, node):
        a = self.attrs(node)
        shape = self.shape(node.input[0])
        axis = a.get("axis", 0) % len(shape)
        outs = list(node.output)
        if self.version(node) < 13 and "split" in a:
            sizes = [int(v) for v in a["split"]]
        elif self.version(node) >= 13 and len(node.input) > 1 and node.input[1]:
            sizes = [int(v) for v in self.const(node, 1, "split").reshape(-1)]
        else:
            parts = a.get("num_outputs", len(outs))
            each = -(-shape[axis] // parts)
            sizes = [min(each, shape[axis] - k * each) for k in range(parts)]
        if sum(sizes) != shape[axis] or len(sizes) != len(outs) or min(sizes) < 0:
            self.fail(node, f"split sizes {sizes} do not cut axis {axis} ({shape[axis]}) into {len(outs)} parts")
        offset = 0
        for name, size in zip(outs, sizes):
            out_shape = [size if d == axis else e for d, e in enumerate(shape)]
            if name and size == 0:   # an empty part (a function body's "nothing left over"): a constant
                self.consts[name] = np.zeros(out_shape, np.float32)
            elif name:
                lo = [offset if d == axis else 0 for d in range(len(shape))]
                self._sliced(node, name, node.input[0], lo, [1] * len(shape), out_shape, "Split")
            offset += size

    def op_Pad(self, index, node):
        a = self.attrs(node)
        x = node.input[0]
        shape = self.shape(x)
        rank = len(shape)
        mode = a.get("mode", "constant")
        if self.version(node) < 11:
            pads = [int(v) for v in a.get("pads", a.get("paddings", []))]
            value = float(a.get("value", 0.0))
        else:
            pads = [int(v) for v in self.const(node, 1, "pads").reshape(-1)]
            value = float(self.const(node, 2, "constant value").reshape(-1)[0]) \
                if len(node.input) > 2 and node.input[2] else 0.0
            if len(node.input) > 3 and node.input[3]:
                axes = [int(v) % rank for v in self.const(node, 3, "axes").reshape(-1)]
                full = [0] * (2 * rank)
                for k, ax in enumerate(axes):
                    full[ax], full[ax + rank] = pads[k], pads[k + len(axes)]
                pads = full
        if len(pads) != 2 * rank:
            self.fail(node, f"{len(pads)} pads for a rank-{rank} input (expected {2 * rank})")
        begin, end = pads[:rank], pads[rank:]
        out_shape = [e + b + f for e, b, f in zip(shape, begin, end)]
        if min(out_shape) <= 0:
            self.fail(node, f"the padded shape {out_shape} is empty")
        if not any(pads):
            return self.alias(node, node.output[0], x)
        out = node.output[0]
        names = [f"i{d}" for d in range(rank)]
        if mode == "constant":
            src = x
            if value != 0.0:    # reads outside give 0: pad (x - v), then add v back
                src = self._unary_fn_named(node, out + "_shifted", x, f"X - {_fmt_num(value)}")
            idx = [f"{n} - {b}" if b > 0 else (f"{n} + {-b}" if b < 0 else n) for n, b in zip(names, begin)]
            bounds = [f"{names[d]} < {out_shape[d]}" for d in range(rank) if begin[d] == 0 and out_shape[d] != shape[d]]
            expr = f"{self.operand(src)}[{', '.join(idx)}]" + (f" + {_fmt_num(value)}" if value != 0.0 else "")
            self.comp(out, out_shape, self.dtype(x), names, "=",
                      expr + (f" where {', '.join(bounds)}" if bounds else ""), "Pad")
            return
        if mode not in ("reflect", "edge", "wrap"):
            self.fail(node, f"pad mode '{mode}' is not supported", "supported: constant, reflect, edge, wrap")
        if min(pads) < 0:
            self.fail(node, f"negative pads with mode '{mode}'")
        cur = x
        for d in range(rank):
            b, f = begin[d], end[d]
            if not b and not f:
                continue
            n = self.shape(cur)[d]
            if mode == "reflect" and max(b, f) >= n or mode == "wrap" and max(b, f) > n:
                self.fail(node, f"{mode} padding of {max(b, f)} on an axis of {n}")
            pieces = []
            for side, count in (("left", b), ("right", f)):
                if not count:
                    pieces.append(None)
                    continue
                src_shape = list(self.shape(cur))
                piece_shape = [count if k == d else e for k, e in enumerate(src_shape)]
                if mode == "edge":
                    at = "0" if side == "left" else str(n - 1)
                elif mode == "reflect":
                    at = f"{count} - {names[d]}" if side == "left" else f"{n - 2} - {names[d]}"
                else:   # wrap
                    at = f"{names[d]} + {n - count}" if side == "left" else names[d]
                idx = [at if k == d else names[k] for k in range(rank)]
                bound = f" where {names[d]} < {count}" if at == names[d] and count != n else ""
                name = f"{out}_{side}{d}"
                self.comp(name, piece_shape, self.dtype(x), names, "=",
                          f"{self.operand(cur)}[{', '.join(idx)}]{bound}", f"Pad {mode}")
                pieces.append(name)
            parts = [p for p in (pieces[0], cur, pieces[1]) if p is not None]
            nxt = out if all(not begin[k] and not end[k] for k in range(d + 1, rank)) else f"{out}_pad{d}"
            self.lib(node, nxt, "concat", parts, axis=d)
            cur = nxt

    def _unary_fn_named(self, node, out: str, src: str, fn: str, dtype: str | None = None) -> str:
        shape = self.shape(src)
        names = [f"i{d}" for d in range(len(shape))]
        x = f"{self.operand(src)}[{', '.join(names)}]"
        self.comp(out, shape, dtype or self.dtype(src), names, "=", fn.replace("X", x))
        return out

    def op_Tile(self, index, node):
        repeats = [int(r) for r in self.const(node, 1, "repeats").reshape(-1)]
        shape = self.shape(node.input[0])
        if len(repeats) != len(shape) or min(repeats) < 1:
            self.fail(node, f"repeats {repeats} do not fit a rank-{len(shape)} input")
        if all(r == 1 for r in repeats):
            return self.alias(node, node.output[0], node.input[0])
        # T[j0, i0, j1, i1, ...] = X[i0, i1, ...] (j_d the copy), viewed as [r0*n0, r1*n1, ...]
        lhs, big, src = [], [], []
        for d, (r, e) in enumerate(zip(repeats, shape)):
            if r > 1:
                lhs.append(f"j{d}")
                big.append(r)
            lhs.append(f"i{d}")
            big.append(e)
            src.append(f"i{d}")
        self.comp(node.output[0] + "_tiled", big, self.dtype(node.input[0]), lhs, "=",
                  f"{self.operand(node.input[0])}[{', '.join(src)}]", "Tile")
        self.view(node, node.output[0], node.output[0] + "_tiled", [r * e for r, e in zip(repeats, shape)])

    def op_Trilu(self, index, node):
        """The upper (or lower) triangle from diagonal k: a constant 0/1 mask when k is a
        constant, else the comparison j - i >= k (<= k) of two iotas and the runtime k."""
        x = node.input[0]
        shape = self.shape(x)
        if len(shape) < 2:
            self.fail(node, f"Trilu needs a matrix (rank 2 or more), got {list(shape)}")
        upper = self.attrs(node).get("upper", 1)
        rows, cols = shape[-2:]
        has_k = len(node.input) > 1 and node.input[1]
        if not has_k or node.input[1] in self.consts:
            k = int(self.const(node, 1, "k").reshape(-1)[0]) if has_k else 0
            i, j = np.arange(rows)[:, None], np.arange(cols)[None, :]
            mask = (j - i >= k) if upper else (j - i <= k)
            self.consts[node.output[0] + "_mask"] = mask.astype(np.float32)
            return self.ew(node, node.output[0], [node.output[0] + "_mask", x], "select({0}, {1}, 0)",
                           dtype=self.dtype(x), note="Trilu")
        kname = node.input[1]
        if math.prod(self.shape(kname)) != 1 or self.dtype(kname) not in ("i32", "i8"):
            self.fail(node, f"its k '{kname}' must be one integer")
        self.consts[node.output[0] + "_rows"] = np.arange(rows, dtype=np.int32)
        self.consts[node.output[0] + "_cols"] = np.arange(cols, dtype=np.int32)
        r, c = self.operand(node.output[0] + "_rows"), self.operand(node.output[0] + "_cols")
        names = [f"i{d}" for d in range(len(shape))]
        ki = f"{self.operand(kname)}[{', '.join(['0'] * max(1, len(self.shape(kname))))}]"
        a, b = names[-2], names[-1]
        keep = f"less_equal({ki} + {r}[{a}], {c}[{b}])" if upper else f"less_equal({c}[{b}], {ki} + {r}[{a}])"
        self.comp(node.output[0], shape, self.dtype(x), names, "=",
                  f"select({keep}, {self.operand(x)}[{', '.join(names)}], 0)", "Trilu, runtime k")

    def _conv_generic(self, node, out: str, x: str, w: str, strides, dil, begin, end, groups: int,
                      note: str = "Conv") -> str:
        """An N-D (grouped, dilated, strided, asymmetrically padded) convolution as one
        comprehension: out[n, f, o..] += X[n, c, s*o + d*k - p ..] * W[f, c, k..]; groups
        compute [N, G, F/G, o..], viewed as [N, F, o..]."""
        xs, ws = self.shape(x), self.shape(w)
        nd = len(xs) - 2
        n, c = xs[:2]
        f, cg = ws[:2]
        ks = ws[2:]
        if len(ws) != len(xs) or c != cg * groups or f % groups:
            self.fail(node, f"weight {list(ws)} does not fit input {list(xs)} with group={groups}")
        outs = [(xs[2 + d] + begin[d] + end[d] - dil[d] * (ks[d] - 1) - 1) // strides[d] + 1 for d in range(nd)]
        if min(outs, default=1) <= 0:
            self.fail(node, f"the output would be empty ({outs})")
        o = [f"i{d}" for d in range(nd)]
        k = [f"k{d}" for d in range(nd)]

        def at(d):
            terms = [f"{strides[d]}*{o[d]}" if strides[d] != 1 else o[d], f"{dil[d]}*{k[d]}" if dil[d] != 1 else k[d]]
            p = begin[d]
            return " + ".join(terms) + (f" - {p}" if p > 0 else (f" + {-p}" if p < 0 else ""))
        xn, wn = self.operand(x), self.operand(w)
        dtype = self.dtype(x)
        if groups == 1:
            return self.comp(out, [n, f] + outs, dtype, ["b0", "j0"] + o, "+=",
                             f"{xn}[b0, a0, {', '.join(at(d) for d in range(nd))}] * {wn}[j0, a0, {', '.join(k)}]",
                             note)
        fg = f // groups
        self.comp(out + "_groups", [n, groups, fg] + outs, dtype, ["b0", "g", "j0"] + o, "+=",
                  f"{xn}[b0, {cg}*g + a0, {', '.join(at(d) for d in range(nd))}] * "
                  f"{wn}[{fg}*g + j0, a0, {', '.join(k)}]", note + ", grouped")
        self.view(node, out, out + "_groups", [n, f] + outs)
        return out

    def _conv_pads(self, node, a, xs, ks, strides, dil):
        nd = len(xs) - 2
        pads = list(a.get("pads", [0] * 2 * nd))
        auto = a.get("auto_pad", "NOTSET")
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            pads = [0] * 2 * nd
            for d in range(nd):
                out = -(-xs[2 + d] // strides[d])
                total = max(0, (out - 1) * strides[d] + dil[d] * (ks[d] - 1) + 1 - xs[2 + d])
                small, big = total // 2, total - total // 2
                pads[d], pads[d + nd] = (small, big) if auto == "SAME_UPPER" else (big, small)
        elif auto == "VALID":
            pads = [0] * 2 * nd
        elif auto != "NOTSET":
            self.fail(node, f"auto_pad={auto!r} is not supported")
        if len(pads) != 2 * nd:
            self.fail(node, f"{len(pads)} pads for {nd} spatial dimensions")
        return pads[:nd], pads[nd:]

    def _channel_bias(self, node, out: str, y: str, b: str) -> None:
        shape = self.shape(y)
        if len(shape) == 4:
            self.lib(node, out, "bias_add", [y, b])
            return
        aligned = b + f"__rank{len(shape)}"
        if aligned not in self.consts and aligned not in self.values:
            self.view(node, aligned, b, (shape[1],) + (1,) * (len(shape) - 2))
        self.ew(node, out, [y, aligned], "{0} + {1}", note="bias")

    def op_Conv(self, index, node):
        a = self.attrs(node)
        x_shape = self.shape(node.input[0])
        w_shape = self.shape(node.input[1])
        nd = len(x_shape) - 2
        if nd < 1 or len(w_shape) != len(x_shape):
            self.fail(node, f"input {list(x_shape)} and weight {list(w_shape)} are not an N-D convolution")
        groups = a.get("group", 1)
        strides = list(a.get("strides", [1] * nd))
        dil = list(a.get("dilations", [1] * nd))
        begin, end = self._conv_pads(node, a, x_shape, w_shape[2:], strides, dil)
        out = node.output[0]
        has_bias = len(node.input) > 2 and node.input[2]
        conv_out = out + "_conv" if has_bias else out
        c, f = x_shape[1], w_shape[0]
        square = nd == 2 and strides[0] == strides[1] and dil[0] == dil[1] and len(set(begin + end)) == 1
        if square and groups == c == f and w_shape[1] == 1 and dil[0] == 1:
            self.lib(node, conv_out, "depthwise_conv2d", [node.input[0], node.input[1]],
                     stride=strides[0], padding=begin[0])
        elif square:
            kw = {"stride": strides[0], "padding": begin[0]}
            if dil[0] != 1:
                kw["dilation"] = dil[0]
            if groups != 1:
                kw["groups"] = groups
            self.lib(node, conv_out, "conv2d", [node.input[0], node.input[1]], **kw)
        else:
            self._conv_generic(node, conv_out, node.input[0], node.input[1], strides, dil, begin, end, groups,
                               f"Conv {nd}-D")
        if has_bias:
            self._channel_bias(node, out, conv_out, node.input[2])

    def op_ConvTranspose(self, index, node):
        """The transposed convolution as a convolution: the input spread by the strides
        (zeros between its points: T[.., i, t, ..] = X[.., i + S*t, ..], t > 0 reading outside),
        then an ordinary convolution with the flipped, transposed kernel."""
        a = self.attrs(node)
        x, xs = node.input[0], self.shape(node.input[0])
        w = self.const(node, 1, "weight")
        nd = len(xs) - 2
        groups = a.get("group", 1)
        c, fg = w.shape[:2]
        ks = list(w.shape[2:])
        strides = list(a.get("strides", [1] * nd))
        dil = list(a.get("dilations", [1] * nd))
        out_pad = list(a.get("output_padding", [0] * nd))
        if c != xs[1] or c % groups:
            self.fail(node, f"weight {list(w.shape)} does not fit input {list(xs)} with group={groups}")
        if "output_shape" in a:
            want = list(a["output_shape"])[-nd:]
            begin, end = [], []
            for d in range(nd):
                total = strides[d] * (xs[2 + d] - 1) + out_pad[d] + (ks[d] - 1) * dil[d] + 1 - want[d]
                upper = a.get("auto_pad", "NOTSET") == "SAME_UPPER"
                begin.append(total // 2 if upper else total - total // 2)
                end.append(total - begin[-1])
        elif a.get("auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER"):
            begin, end = [], []
            for d in range(nd):
                total = strides[d] * (xs[2 + d] - 1) + out_pad[d] + (ks[d] - 1) * dil[d] + 1 - xs[2 + d] * strides[d]
                total = max(total, 0)
                first = total // 2 if a["auto_pad"] == "SAME_UPPER" else total - total // 2
                begin.append(first)
                end.append(total - first)
        else:
            pads = list(a.get("pads", [0] * 2 * nd))
            begin, end = pads[:nd], pads[nd:]
        outs = [strides[d] * (xs[2 + d] - 1) + out_pad[d] + (ks[d] - 1) * dil[d] + 1 - begin[d] - end[d]
                for d in range(nd)]
        if min(outs) <= 0:
            self.fail(node, f"the output would be empty ({outs})")
        # spread the input by the strides
        src = x
        if any(s > 1 for s in strides):
            lhs, big, idx = ["b0", "a0"], list(xs[:2]), ["b0", "a0"]
            for d in range(nd):
                lhs.append(f"i{d}")
                big.append(xs[2 + d])
                if strides[d] > 1:
                    lhs.append(f"j{d}")
                    big.append(strides[d])
                    idx.append(f"i{d} + {xs[2 + d]}*j{d}")
                else:
                    idx.append(f"i{d}")
            self.comp(node.output[0] + "_spread", big, self.dtype(x), lhs, "=",
                      f"{self.operand(x)}[{', '.join(idx)}]", "ConvTranspose: the input spread by the strides")
            src = node.output[0] + "_spread"
            self.view(node, src + "_v", src, list(xs[:2]) + [xs[2 + d] * strides[d] for d in range(nd)])
            src = src + "_v"
        # W[c, f/g, k..] -> V[g*fg + f, c', K-1-k..] (flipped; per group, channels swapped)
        cg = c // groups
        flipped = np.flip(w, axis=tuple(range(2, 2 + nd)))
        v = np.concatenate([np.swapaxes(flipped[g * cg:(g + 1) * cg], 0, 1) for g in range(groups)], axis=0)
        self.consts[node.output[0] + "_kernel"] = np.ascontiguousarray(v)
        spread = [xs[2 + d] * strides[d] for d in range(nd)]
        cbegin = [dil[d] * (ks[d] - 1) - begin[d] for d in range(nd)]
        cend = [outs[d] - spread[d] - cbegin[d] + dil[d] * (ks[d] - 1) for d in range(nd)]
        out = node.output[0]
        has_bias = len(node.input) > 2 and node.input[2]
        conv_out = out + "_conv" if has_bias else out
        self._conv_generic(node, conv_out, src, out + "_kernel", [1] * nd, dil, cbegin, cend, groups,
                           "ConvTranspose")
        if has_bias:
            self._channel_bias(node, out, conv_out, node.input[2])

    def op_Einsum(self, index, node):
        eq = self.attrs(node)["equation"].replace(" ", "")
        if "..." in eq:
            self.fail(node, f"einsum '{eq}' with an ellipsis is not supported")
        lhs_text, _, rhs_text = eq.partition("->")
        terms = lhs_text.split(",")
        inputs = [i for i in node.input]
        if len(terms) != len(inputs):
            self.fail(node, f"einsum '{eq}' names {len(terms)} operands, the node has {len(inputs)}")
        extents = {}
        for t, name in zip(terms, inputs):
            shape = self.shape(name)
            if len(t) != len(shape):
                self.fail(node, f"einsum term '{t}' does not fit '{name}' {list(shape)}")
            for ch, e in zip(t, shape):
                if extents.setdefault(ch, e) != e:
                    self.fail(node, f"einsum index '{ch}' is {extents[ch]} and {e}")
        if "->" not in eq:
            rhs_text = "".join(sorted(ch for ch in extents if lhs_text.count(ch) == 1))
        letters = {ch: f"a{k}" for k, ch in enumerate(extents)}
        reads = [f"{self.operand(name)}[{', '.join(letters[ch] for ch in t)}]" for t, name in zip(terms, inputs)]
        reduce = "+=" if set(extents) - set(rhs_text) else "="
        self.comp(node.output[0], [extents[ch] for ch in rhs_text], self.dtype(inputs[0]),
                  [letters[ch] for ch in rhs_text], reduce, " * ".join(reads), f"Einsum {eq}")

    # ---------------------------------------------------------------- normalisation

    def _softmax(self, node, log: bool):
        x = node.input[0]
        shape = self.shape(x)
        rank = len(shape)
        v = self.version(node)
        axis = self.attrs(node).get("axis", -1 if v >= 13 else 1)
        if not -rank <= axis < rank:
            self.fail(node, f"axis {axis} is out of range for rank {rank}")
        axis %= rank
        out = node.output[0]
        if v < 13 and math.prod(shape[axis + 1:]) != 1:
            # before opset 13: over the input flattened to 2-D at `axis`
            flat = (math.prod(shape[:axis]), math.prod(shape[axis:]))
            self.view(node, x + "__2d", x, flat)
            self._softmax_core(node, out + "_2d", x + "__2d", 1, log)
            return self.view(node, out, out + "_2d", shape)
        self._softmax_core(node, out, x, axis, log)

    def _softmax_core(self, node, out: str, x: str, axis: int, log: bool):
        shape = self.shape(x)
        if not log:
            return self.lib(node, out, "softmax", [x], axis=axis - len(shape))
        names = [f"i{d}" for d in range(len(shape))]
        keep = [f"u{d}" if d == axis else names[d] for d in range(len(shape))]
        red = [f"k{d}" if d == axis else names[d] for d in range(len(shape))]
        keep_shape = [1 if d == axis else e for d, e in enumerate(shape)]
        xs = self.operand(x)
        dtype = self.dtype(x)
        m = self.comp(out + "_max", keep_shape, dtype, keep, "max=", f"{xs}[{', '.join(red)}]")
        bcast = [("0" if d == axis else names[d]) for d in range(len(shape))]
        s = self.comp(out + "_sum", keep_shape, dtype, keep, "+=",
                      f"exp({xs}[{', '.join(red)}] - {m}[{', '.join(keep)}])")
        self.comp(out, shape, dtype, names, "=",
                  f"{xs}[{', '.join(names)}] - {m}[{', '.join(bcast)}] - log({s}[{', '.join(bcast)}])", "LogSoftmax")

    def op_Softmax(self, index, node):
        self._softmax(node, False)

    def op_LogSoftmax(self, index, node):
        self._softmax(node, True)

    def op_LayerNormalization(self, index, node):
        a = self.attrs(node)
        x = node.input[0]
        shape = self.shape(x)
        axis = a.get("axis", -1) % len(shape)
        for extra in node.output[1:]:
            if extra and self.consumers.get(extra):
                self.fail(node, "its mean/inv-std-dev outputs are used; only the first output is supported")
        d = math.prod(shape[axis:])
        gamma = node.input[1]
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        out = node.output[0]
        if bias is None:
            self.consts[out + "_beta"] = np.zeros(d, np.float32)
            bias = out + "_beta"
        if axis == len(shape) - 1:
            return self.lib(node, out, "layernorm", [x, gamma, bias], eps=float(a.get("epsilon", 1e-5)))
        # over the trailing axes from `axis`: on the input flattened there
        flat = (math.prod(shape[:axis]), d)
        g, b = self.const(node, 1, "scale"), self.consts[bias] if bias in self.consts else self.const(node, 2, "bias")
        self.consts[out + "_g1"] = np.broadcast_to(g, shape[axis:]).reshape(d).astype(np.float32)
        self.consts[out + "_b1"] = np.broadcast_to(b, shape[axis:]).reshape(d).astype(np.float32)
        self.view(node, x + "__2d", x, flat)
        self.lib(node, out + "_2d", "layernorm", [x + "__2d", out + "_g1", out + "_b1"],
                 eps=float(a.get("epsilon", 1e-5)))
        self.view(node, out, out + "_2d", shape)

    def op_RMSNormalization(self, index, node):   # opset 23: x / sqrt(mean(x^2) + eps) * scale
        a = self.attrs(node)
        x = node.input[0]
        shape = self.shape(x)
        axis = a.get("axis", -1) % len(shape)
        rows, d = math.prod(shape[:axis]), math.prod(shape[axis:])
        out = node.output[0]
        scale = self.const(node, 1, "scale")
        self.consts[out + "_scale"] = np.broadcast_to(scale, shape[axis:]).reshape(d).astype(np.float32)
        self.view(node, x + "__2d", x, (rows, d))
        xs = self.operand(x + "__2d")
        ms = self.comp(out + "_ms", (rows,), "f32", ["i0"], "+=", f"{xs}[i0, i1] * {xs}[i0, i1] / {d}")
        eps = _fmt_num(float(a.get("epsilon", 1e-5)))
        self.comp(out + "_2d", (rows, d), self.dtype(x), ["i0", "i1"], "=",
                  f"{xs}[i0, i1] / sqrt({ms}[i0] + {eps}) * {self.operand(out + '_scale')}[i1]", "RMSNormalization")
        self.view(node, out, out + "_2d", shape)

    def op_BatchNormalization(self, index, node):
        a = self.attrs(node)
        v = self.version(node)
        scale, bias = self.const(node, 1, "scale"), self.const(node, 2, "bias")
        mean, var = self.const(node, 3, "mean"), self.const(node, 4, "variance")
        extra = [o for o in node.output[1:] if o]
        if a.get("training_mode", 0) or (v < 14 and extra) or (v < 7 and a.get("is_test", 0) == 0 and extra):
            self.fail(node, "training-mode BatchNormalization (batch statistics) is not supported",
                      "export the model in eval mode")
        inv = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + float(a.get("epsilon", 1e-5)))
        shift = bias - mean * inv
        out = node.output[0]
        x_shape = self.shape(node.input[0])
        if inv.shape != (x_shape[1],):
            # spatial=0 (opset 7-8): a scale and shift per activation, [C, H, W]
            self.consts[out + "_scale"] = inv.astype(np.float32)
            self.consts[out + "_shift"] = shift.astype(np.float32)
            self.lib(node, out + "_scaled", "mul", [node.input[0], out + "_scale"])
            return self.lib(node, out, "add", [out + "_scaled", out + "_shift"])
        self.consts[out + "_scale"] = inv.astype(np.float32)
        self.consts[out + "_shift"] = shift.astype(np.float32)
        self.lib(node, out, "batchnorm", [node.input[0], out + "_scale", out + "_shift"])

    def _stats(self, node, out: str, xv: str, keep: int):
        """mean and variance of `xv` over its axes after the first `keep`: two tensors of
        its first `keep` dimensions."""
        shape = self.shape(xv)
        names = [f"i{d}" for d in range(len(shape))]
        count = math.prod(shape[keep:])
        x = f"{self.operand(xv)}[{', '.join(names)}]"
        mean = self.comp(out + "_mean", shape[:keep], "f32", names[:keep], "+=", f"{x} / {count}")
        m = f"{mean}[{', '.join(names[:keep])}]"
        var = self.comp(out + "_var", shape[:keep], "f32", names[:keep], "+=", f"({x} - {m}) * ({x} - {m}) / {count}")
        return mean, var

    def op_InstanceNormalization(self, index, node):
        x = node.input[0]
        shape = self.shape(x)
        eps = float(self.attrs(node).get("epsilon", 1e-5))
        out = node.output[0]
        mean, var = self._stats(node, out, x, 2)
        names = [f"i{d}" for d in range(len(shape))]
        xs = f"{self.operand(x)}[{', '.join(names)}]"
        scale, bias = self.operand(node.input[1]), self.operand(node.input[2])
        self.comp(out, shape, self.dtype(x), names, "=",
                  f"({xs} - {mean}[i0, i1]) / sqrt({var}[i0, i1] + {_fmt_num(eps)}) * {scale}[i1] + {bias}[i1]",
                  "InstanceNormalization")

    def op_GroupNormalization(self, index, node):
        a = self.attrs(node)
        x = node.input[0]
        shape = self.shape(x)
        groups = int(a["num_groups"])
        n, c = shape[:2]
        if c % groups:
            self.fail(node, f"num_groups={groups} does not divide {c} channels")
        cg, rest = c // groups, math.prod(shape[2:])
        scale, bias = self.const(node, 1, "scale"), self.const(node, 2, "bias")
        if scale.size == groups and groups != c:   # opset 18: one scale per group
            scale, bias = np.repeat(scale, cg), np.repeat(bias, cg)
        if scale.size != c:
            self.fail(node, f"scale {list(scale.shape)} is neither per channel ({c}) nor per group ({groups})")
        out = node.output[0]
        self.consts[out + "_g"] = scale.reshape(groups, cg).astype(np.float32)
        self.consts[out + "_b"] = bias.reshape(groups, cg).astype(np.float32)
        self.view(node, x + "__groups", x, (n, groups, cg, rest))
        mean, var = self._stats(node, out, x + "__groups", 2)
        xs = f"{self.operand(x + '__groups')}[i0, i1, i2, i3]"
        eps = _fmt_num(float(a.get("epsilon", 1e-5)))
        g, b = self.operand(out + "_g"), self.operand(out + "_b")
        self.comp(out + "_4d", (n, groups, cg, rest), self.dtype(x), ["i0", "i1", "i2", "i3"], "=",
                  f"({xs} - {mean}[i0, i1]) / sqrt({var}[i0, i1] + {eps}) * {g}[i1, i2] + {b}[i1, i2]",
                  "GroupNormalization")
        self.view(node, out, out + "_4d", shape)

    def op_LRN(self, index, node):
        a = self.attrs(node)
        x = node.input[0]
        shape = self.shape(x)
        size = int(a["size"])
        alpha, beta, bias = float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)), float(a.get("bias", 1.0))
        lo = (size - 1) // 2
        names = [f"i{d}" for d in range(len(shape))]
        xs = self.operand(x)
        shifted = f"{xs}[{', '.join(['i0', f'i1 + k0 - {lo}' if lo else 'i1 + k0'] + names[2:])}]"
        out = node.output[0]
        sq = self.comp(out + "_sq", shape, "f32", names, "+=", f"{shifted} * {shifted} where k0 < {size}")
        own = f"{xs}[{', '.join(names)}]"
        self.comp(out, shape, self.dtype(x), names, "=",
                  f"{own} / pow({_fmt_num(bias)} + {_fmt_num(alpha / size)} * {sq}[{', '.join(names)}], "
                  f"{_fmt_num(beta)})", f"LRN size {size}")

    # ---------------------------------------------------------------- reductions

    def _reduce(self, index, node, kind: str):
        a = self.attrs(node)
        x = node.input[0]
        shape = self.shape(x)
        rank = len(shape)
        axes = self._axes(node, 1)
        if axes is None or not axes:
            if a.get("noop_with_empty_axes", 0):
                return self.alias(node, node.output[0], x)
            axes = list(range(rank))
        if any(not -rank <= ax < rank for ax in axes):
            self.fail(node, f"axes {axes} are out of range for rank {rank}")
        axes = sorted({ax % rank for ax in axes})
        keep = a.get("keepdims", 1)
        names = [f"i{d}" if d not in axes else f"k{d}" for d in range(rank)]
        lhs, out_shape, u = [], [], 0
        for d in range(rank):
            if d not in axes:
                lhs.append(names[d])
                out_shape.append(shape[d])
            elif keep:
                lhs.append(f"u{u}")
                u += 1
                out_shape.append(1)
        xs = f"{self.operand(x)}[{', '.join(names)}]"
        count = math.prod(shape[d] for d in axes)
        dtype = self.dtype(x)
        out = node.output[0]
        on = [f"i{d}" for d in range(len(out_shape))]
        at = f"[{', '.join(on)}]"
        simple = {"sum": ("+=", xs), "mean": ("+=", f"{xs} / {count}"),   # not "* (1/n)": exact
                  "max": ("max=", xs), "l1": ("+=", f"abs({xs})"), "sumsquare": ("+=", f"{xs} * {xs}")}
        if kind in simple:
            op, expr = simple[kind]
            self.comp(out, out_shape, dtype, lhs, op, expr)
        elif kind == "min":
            t = self.comp(out + "_neg", out_shape, dtype, lhs, "max=", f"-{xs}")
            self.comp(out, out_shape, dtype, on, "=", f"-{t}{at}", "ReduceMin")
        elif kind in ("l2", "logsum"):
            t = self.comp(out + "_sum", out_shape, "f32", lhs, "+=", f"{xs} * {xs}" if kind == "l2" else xs)
            self.comp(out, out_shape, dtype, on, "=", f"{'sqrt' if kind == 'l2' else 'log'}({t}{at})", node.op_type)
        elif kind == "logsumexp":
            m = self.comp(out + "_max", out_shape, "f32", lhs, "max=", xs)
            s = self.comp(out + "_sum", out_shape, "f32", lhs, "+=", f"exp({xs} - {m}[{', '.join(lhs)}])")
            self.comp(out, out_shape, dtype, on, "=", f"log({s}{at}) + {m}{at}", "ReduceLogSumExp")
        elif kind == "prod":
            if count > 64:
                self.fail(node, f"a product over {count} elements (at most 64 are written out)")
            import itertools
            factors = []
            for combo in itertools.product(*[range(shape[d]) for d in axes]):
                pick = dict(zip(axes, combo))
                factors.append(f"{self.operand(x)}[{', '.join(str(pick[d]) if d in pick else names[d] for d in range(rank))}]")
            self.comp(out, out_shape, dtype, lhs, "=", " * ".join(factors), "ReduceProd")

    def op_ReduceMean(self, index, node):
        self._reduce(index, node, "mean")

    def op_ReduceSum(self, index, node):
        self._reduce(index, node, "sum")

    def op_ReduceMax(self, index, node):
        self._reduce(index, node, "max")

    def op_ReduceMin(self, index, node):
        self._reduce(index, node, "min")

    def op_ReduceProd(self, index, node):
        self._reduce(index, node, "prod")

    def op_ReduceL1(self, index, node):
        self._reduce(index, node, "l1")

    def op_ReduceL2(self, index, node):
        self._reduce(index, node, "l2")

    def op_ReduceSumSquare(self, index, node):
        self._reduce(index, node, "sumsquare")

    def op_ReduceLogSum(self, index, node):
        self._reduce(index, node, "logsum")

    def op_ReduceLogSumExp(self, index, node):
        self._reduce(index, node, "logsumexp")

    def _arg(self, node, sign: str):
        a = self.attrs(node)
        x = node.input[0]
        shape = self.shape(x)
        rank = len(shape)
        axis = a.get("axis", 0) % rank
        keep, last = a.get("keepdims", 1), a.get("select_last_index", 0)
        names = [f"k{d}" if d == axis else f"i{d}" for d in range(rank)]
        lhs = [("u0" if d == axis else names[d]) for d in range(rank) if d != axis or keep]
        out_shape = [(1 if d == axis else e) for d, e in enumerate(shape) if d != axis or keep]
        xs = f"{sign}{self.operand(x)}[{', '.join(names)}]"
        out = node.output[0]
        k = shape[axis]
        m = self.comp(out + "_max", out_shape, "f32", lhs, "max=", xs)
        # the last index of the maximum: max of k where x == max; the first: K-1 - max of K-1-k
        self.consts[out + "_at"] = (np.arange(k) if last else k - 1 - np.arange(k)).astype(np.int32)
        at = self.operand(out + "_at")
        mark = f"{at}[k{axis}] * equal({xs}, {m}[{', '.join(lhs)}])"
        if last:
            self.comp(out, out_shape, "i32", lhs, "max=", mark, node.op_type)
            return
        t = self.comp(out + "_rev", out_shape, "i32", lhs, "max=", mark)
        on = [f"i{d}" for d in range(len(out_shape))]
        self.comp(out, out_shape, "i32", on, "=", f"{k - 1} - {t}[{', '.join(on)}]", node.op_type)

    def op_ArgMax(self, index, node):
        self._arg(node, "")

    def op_ArgMin(self, index, node):
        self._arg(node, "-")

    # ---------------------------------------------------------------- pooling (any rank)

    def _pool(self, node, kind: str):
        a = self.attrs(node)
        x = node.input[0]
        xs = self.shape(x)
        nd = len(xs) - 2
        if nd < 1:
            self.fail(node, f"pooling needs an [N, C, ...] input, got {list(xs)}")
        kernel = list(a["kernel_shape"])
        strides = list(a.get("strides", [1] * nd))
        dil = list(a.get("dilations", [1] * nd))
        if len(kernel) != nd:
            self.fail(node, f"kernel_shape {kernel} does not fit {nd} spatial dimensions")
        begin, end = self._conv_pads(node, a, xs, kernel, strides, dil)
        ceil = a.get("ceil_mode", 0)
        outs = []
        for d in range(nd):
            span = xs[2 + d] + begin[d] + end[d] - dil[d] * (kernel[d] - 1) - 1
            o = (-(-span // strides[d]) if ceil else span // strides[d]) + 1
            if ceil and (o - 1) * strides[d] >= xs[2 + d] + begin[d]:
                o -= 1   # a window must start inside the input or its leading padding
            outs.append(o)
        if min(outs) <= 0:
            self.fail(node, f"the pooled output would be empty ({outs})")
        out = node.output[0]
        include = a.get("count_include_pad", 0)
        square = nd == 2 and len(set(kernel)) == 1 and len(set(strides)) == 1 and len(set(begin + end)) == 1 \
            and set(dil) == {1} and not ceil
        if square and (kind == "max" or not begin[0] or include):
            op = "maxpool2d" if kind == "max" else "avgpool2d"
            return self.lib(node, out, op, [x], kernel=kernel[0], stride=strides[0], padding=begin[0])
        o = [f"i{d}" for d in range(nd)]
        k = [f"k{d}" for d in range(nd)]
        idx = []
        for d in range(nd):
            t = [f"{strides[d]}*{o[d]}" if strides[d] != 1 else o[d], f"{dil[d]}*{k[d]}" if dil[d] != 1 else k[d]]
            idx.append(" + ".join(t) + (f" - {begin[d]}" if begin[d] else ""))
        where = " where " + ", ".join(f"{k[d]} < {kernel[d]}" for d in range(nd))
        read = f"{self.operand(x)}[b0, a0, {', '.join(idx)}]"
        dtype = self.dtype(x)
        reach = [(outs[d] - 1) * strides[d] + dil[d] * (kernel[d] - 1) + 1 for d in range(nd)]
        outside = any(begin[d] > 0 or reach[d] > xs[2 + d] + begin[d] for d in range(nd))
        if kind == "max":
            extra = ""
            if outside:   # a read outside the input is -inf, not 0: add a penalty per padded position
                for d in range(nd):
                    pen = np.zeros(reach[d], np.float32)
                    pos = np.arange(reach[d]) - begin[d]
                    pen[(pos < 0) | (pos >= xs[2 + d])] = -np.inf
                    if (pen != 0).any():
                        self.consts[f"{out}_pad{d}"] = pen
                        t = [f"{strides[d]}*{o[d]}" if strides[d] != 1 else o[d],
                             f"{dil[d]}*{k[d]}" if dil[d] != 1 else k[d]]
                        extra += f" + {self.operand(f'{out}_pad{d}')}[{' + '.join(t)}]"
            self.comp(out, list(xs[:2]) + outs, dtype, ["b0", "a0"] + o, "max=", read + extra + where,
                      f"MaxPool {nd}-D")
            return
        # average: the window sum over the number of cells counted (inside the input, or
        # inside input and padding with count_include_pad), per output position
        counts = []
        for d in range(nd):
            start = np.arange(outs[d])[:, None] * strides[d] + np.arange(kernel[d])[None, :] * dil[d] - begin[d]
            lo, hi = (-begin[d], xs[2 + d] + end[d]) if include else (0, xs[2 + d])
            counts.append(((start >= lo) & (start < hi)).sum(axis=1))
        total = counts[0]
        for cnt in counts[1:]:
            total = np.multiply.outer(total, cnt)
        s = self.comp(out + "_sum", list(xs[:2]) + outs, "f32", ["b0", "a0"] + o, "+=", read + where)
        if len(set(total.reshape(-1))) == 1:
            self.comp(out, list(xs[:2]) + outs, dtype, ["b0", "a0"] + o, "=",
                      f"{s}[b0, a0, {', '.join(o)}] / {int(total.reshape(-1)[0])}", f"AveragePool {nd}-D")
            return
        self.consts[out + "_count"] = total.astype(np.float32)
        cnt = self.operand(out + "_count")
        self.comp(out, list(xs[:2]) + outs, dtype, ["b0", "a0"] + o, "=",
                  f"{s}[b0, a0, {', '.join(o)}] / {cnt}[{', '.join(o)}]", f"AveragePool {nd}-D")

    def op_MaxPool(self, index, node):
        if len(node.output) > 1 and node.output[1] and self.consumers.get(node.output[1]):
            self.fail(node, "its Indices output is used; not supported")
        self._pool(node, "max")

    def op_AveragePool(self, index, node):
        self._pool(node, "avg")

    def op_GlobalAveragePool(self, index, node):
        shape = self.shape(node.input[0])
        if len(shape) == 4:
            self.lib(node, node.output[0] + "_pool", "global_avgpool", [node.input[0]])
            dsl, flat_shape, dtype = self.values[node.output[0] + "_pool"]
            # [N, C] computed; the ONNX result is [N, C, 1, 1]: a view, written only if read as 4-D
            self.base_shapes[dsl] = flat_shape
            self.values[node.output[0]] = _View(dsl, tuple(shape[:2]) + (1, 1))
            self.dtype_of_view[node.output[0]] = dtype
            return
        self._global(node, "mean")

    def op_GlobalMaxPool(self, index, node):
        self._global(node, "max")

    def _global(self, node, kind):
        shape = self.shape(node.input[0])
        if len(shape) < 3:
            self.fail(node, f"global pooling needs an [N, C, ...] input, got {list(shape)}")
        names = ["i0", "i1"] + [f"k{d}" for d in range(2, len(shape))]
        x = f"{self.operand(node.input[0])}[{', '.join(names)}]"
        count = math.prod(shape[2:])
        lhs = ["i0", "i1"] + [f"u{d}" for d in range(len(shape) - 2)]
        self.comp(node.output[0], tuple(shape[:2]) + (1,) * (len(shape) - 2), self.dtype(node.input[0]), lhs,
                  "max=" if kind == "max" else "+=", x if kind == "max" else f"{x} / {count}")

    # ---------------------------------------------------------------- resampling

    def _resample(self, node, attrs: dict, scales, sizes):
        """Resize/Upsample as one contraction per resized axis with a constant [out, in]
        matrix: onnx's own reference run on a basis gives each matrix (nearest: one-hot rows;
        linear and cubic: the interpolation weights), so every mode and coordinate transform
        means what onnx says it means."""
        from onnx import helper

        x = node.input[0]
        shape = list(self.shape(x))
        rank = len(shape)
        mode = attrs.get("mode", "nearest")
        if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
            self.fail(node, "coordinate_transformation_mode=tf_crop_and_resize is not supported")
        if attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch":
            self.fail(node, "keep_aspect_ratio_policy other than 'stretch' is not supported")
        axes = [int(v) % rank for v in attrs.get("axes", range(rank))]
        if scales is not None:
            scales = [float(v) for v in scales]
            if len(scales) != len(axes):
                self.fail(node, f"{len(scales)} scales for {len(axes)} axes")
            per = {ax: ("scale", s) for ax, s in zip(axes, scales)}
        else:
            sizes = [int(v) for v in sizes]
            if len(sizes) != len(axes):
                self.fail(node, f"{len(sizes)} sizes for {len(axes)} axes")
            per = {ax: ("size", s) for ax, s in zip(axes, sizes)}
        keep = {k: v for k, v in attrs.items() if k in ("mode", "coordinate_transformation_mode", "nearest_mode",
                                                         "cubic_coeff_a", "exclude_outside", "antialias")}
        cur = x
        out = node.output[0]
        moved = [ax for ax in sorted(per) if not (per[ax] == ("scale", 1.0) or per[ax] == ("size", shape[ax]))]
        if not moved:
            return self.alias(node, out, x)
        for step, ax in enumerate(moved):
            kind, value = per[ax]
            n = shape[ax]
            basis = np.eye(n, dtype=np.float32)
            inputs = ["X", "", "scales"] if kind == "scale" else ["X", "", "", "sizes"]
            feeds = {"X": basis}
            if kind == "scale":
                feeds["scales"] = np.array([1.0, value], np.float32)
            else:
                feeds["sizes"] = np.array([n, value], np.int64)
            probe = helper.make_node("Resize", inputs, ["Y"], **keep)
            try:   # Resize of opset 19 and later: every attribute the older versions have
                matrix = np.asarray(self.evaluate(probe, feeds, opset=max(19, self.opset))[0]).T   # [out, in]
            except Exception as err:
                self.fail(node, f"cannot resample with {keep} ({type(err).__name__}: {err})")
            if matrix.shape[1] != n or matrix.shape[0] <= 0:
                self.fail(node, f"resampling axis {ax} gives {matrix.shape[0]} points")
            m_name = f"{out}_interp{ax}"
            self.consts[m_name] = matrix.astype(np.float32)
            names = [f"i{d}" for d in range(rank)]
            src = [("k0" if d == ax else names[d]) for d in range(rank)]
            new_shape = [matrix.shape[0] if d == ax else e for d, e in enumerate(shape)]
            target = out if step == len(moved) - 1 else f"{out}_axis{ax}"
            self.comp(target, new_shape, self.dtype(x), names, "+=",
                      f"{self.operand(m_name)}[i{ax}, k0] * {self.operand(cur)}[{', '.join(src)}]",
                      f"{node.op_type} {mode}, axis {ax}")
            cur, shape = target, new_shape

    def op_Resize(self, index, node):
        a = self.attrs(node)
        v = self.version(node)
        if v < 11:
            scales = self.const(node, 1, "scales").reshape(-1)
            a.setdefault("coordinate_transformation_mode", "asymmetric")
            a.setdefault("nearest_mode", "floor")
            return self._resample(node, a, scales, None)
        scales = self.const(node, 2, "scales").reshape(-1) if len(node.input) > 2 and node.input[2] else None
        if scales is not None and scales.size == 0:
            scales = None
        sizes = self.const(node, 3, "sizes").reshape(-1) if scales is None else None
        self._resample(node, a, scales, sizes)

    def op_Upsample(self, index, node):
        a = self.attrs(node)
        scales = a["scales"] if "scales" in a else self.const(node, 1, "scales").reshape(-1)
        a = {"mode": a.get("mode", "nearest"), "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
        self._resample(node, a, scales, None)

    # ---------------------------------------------------------------- quantisation (QDQ)

    _QRANGE = {3: (-128, 127, "i8"), 2: (0, 255, "i32"), 5: (-32768, 32767, "i32"), 4: (0, 65535, "i32"),
               6: (-2 ** 31, 2 ** 31 - 1, "i32")}

    def _per_axis(self, node, name: str, k: int, x_rank: int, axis: int) -> str:
        value = self.const(node, k, name)
        if value.size == 1:
            return node.input[k]
        aligned = f"{node.input[k]}__axis{axis}"
        self.consts[aligned] = value.reshape((-1,) + (1,) * (x_rank - axis - 1))
        return aligned

    def op_QuantizeLinear(self, index, node):
        a = self.attrs(node)
        x = node.input[0]
        rank = len(self.shape(x))
        axis = a.get("axis", 1) % max(rank, 1)
        if a.get("block_size", 0):
            self.fail(node, "blocked quantisation (block_size) is not supported")
        has_zp = len(node.input) > 2 and node.input[2]
        code = self.onnx.helper.np_dtype_to_tensor_dtype(self.consts[node.input[2]].dtype) if has_zp \
            and node.input[2] in self.consts else a.get("output_dtype", 2) or 2
        if code not in self._QRANGE:
            self.fail(node, f"quantising to {self.onnx.TensorProto.DataType.Name(code)} is not supported",
                      "supported: int8, uint8, int16, uint16, int32")
        lo, hi, dtype = self._QRANGE[code]
        scale = self._per_axis(node, "scale", 1, rank, axis)
        inputs, expr = [x, scale], "{0} / {1}"
        if has_zp:
            inputs.append(self._per_axis(node, "zero point", 2, rank, axis))
            expr += " + {2}"
        if dtype != "i8":   # the i8 store saturates by itself; a wider one clamps to the type's range
            expr = f"min(max({expr}, {lo}), {hi})"
        # stored rounded half to even, as ONNX's QuantizeLinear
        self.ew(node, node.output[0], inputs, expr, dtype=dtype, note="QuantizeLinear")

    def op_DequantizeLinear(self, index, node):
        a = self.attrs(node)
        x = node.input[0]
        rank = len(self.shape(x))
        axis = a.get("axis", 1) % max(rank, 1)
        if a.get("block_size", 0):
            self.fail(node, "blocked quantisation (block_size) is not supported")
        scale = self._per_axis(node, "scale", 1, rank, axis)
        if len(node.input) > 2 and node.input[2]:
            zp = self._per_axis(node, "zero point", 2, rank, axis)
            return self.ew(node, node.output[0], [x, zp, scale], "({0} - {1}) * {2}", dtype="f32",
                           note="DequantizeLinear")
        self.ew(node, node.output[0], [x, scale], "{0} * {1}", dtype="f32", note="DequantizeLinear")


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
    from . import interp

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
