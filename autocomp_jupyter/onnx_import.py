"""ONNX import: an ONNX model → a DSL program (its text and its `Program`), weights attached.

`from_onnx(model)` walks the graph in order and writes one DSL statement per ONNX node
(library ops where one fits — `conv2d`, `linear`, `batchnorm`, `layernorm`, `softmax` ...,
comprehensions otherwise), keeping tensor names where they are legal DSL names and
sanitising them otherwise. Initializers become `param`s; their values travel with the
program (`Program.param_values`) so the reference interpreter runs the real model.

What is folded at import instead of emitted:
- shape subgraphs: every node whose inputs are all constants (initializers, `Constant`,
  `Shape` of a static tensor, ...) is evaluated by onnx's reference evaluator;
- BatchNormalization's four vectors → one scale and one shift (inference form);
- Gemm's transposed/scaled constant weight → a `[K, N]` param for `linear`;
- Reshape / Flatten / Squeeze / Unsqueeze are views: a `reshape` statement is written only
  when an op reads the reshaped tensor (GlobalAveragePool → Flatten becomes one
  `global_avgpool`);
- the GELU pattern x·0.5·(1 + erf(x/√2)) → `gelu(x, approximate=none)`;
- Identity, Dropout and same-type Cast are aliases.

Anything else is a `UserError` naming the node, its op type and its inputs (all such
nodes at once). `onnx` is an optional dependency: importing this module without it raises
a `UserError` saying how to install it.
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


def _fmt_num(value: float) -> str:
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise ValueError(value)
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


class _Importer:
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
        self.skip_nodes: set[int] = set()
        self.dtype_of_view: dict[str, str] = {}
        self.versions: dict[str, int] = {}

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
        onnx = self.onnx
        from onnx import numpy_helper

        self.base_shapes = {}
        for init in self.graph.initializer:
            self.consts[init.name] = numpy_helper.to_array(init)
        for node in self.nodes:
            for i in node.input:
                self.consumers.setdefault(i, []).append(node)
        for vi in self.graph.input:
            if vi.name in self.consts:
                continue  # old exporters list initializers as inputs too
            tt = vi.type.tensor_type
            dtype = _DTYPES.get(tt.elem_type)
            if not vi.type.HasField("tensor_type"):
                self.errors.append(Diagnostic(f"graph input '{vi.name}' is not a tensor (sequences, maps and "
                                              "optional values are not supported)"))
                continue
            if dtype is None:
                self.errors.append(Diagnostic(
                    f"graph input '{vi.name}' has element type {onnx.TensorProto.DataType.Name(tt.elem_type)}",
                    hint="inputs must be float32, float16, bfloat16, an integer type or bool"
                         + (" (the DSL's widest float is f32: export the model in float32)"
                            if tt.elem_type == 11 else "")))
                continue
            dims = []
            for k, d in enumerate(tt.shape.dim):
                dims.append(d.dim_value if d.HasField("dim_value") else None)
            if vi.name in self.input_shapes and vi.name not in self.consts:
                given = self.input_shapes[vi.name]
                if len(given) != len(dims) or any(a is not None and a != b for a, b in zip(dims, given)):
                    self.errors.append(Diagnostic(f"input_shapes['{vi.name}'] = {list(given)} does not fit the "
                                                  f"model's {['?' if d is None else d for d in dims]}"))
                    continue
                dims = list(given)
            if not tt.HasField("shape"):
                self.errors.append(Diagnostic(f"graph input '{vi.name}' has no shape",
                                              hint=f"give it one: from_onnx(model, input_shapes={{'{vi.name}': [...]}})"))
                continue
            if any(d is not None and d > EXTENT.value() for d in dims):
                self.errors.append(Diagnostic(f"graph input '{vi.name}' {dims}: "
                                              + EXTENT.exceeded(max(d for d in dims if d), "a dimension"),
                                              hint=EXTENT.hint()))
                continue
            if any(d is None or d <= 0 for d in dims):
                sym = [d.dim_param or "?" for d in tt.shape.dim if not d.HasField("dim_value")]
                self.errors.append(Diagnostic(
                    f"graph input '{vi.name}' has symbolic dimensions ({', '.join(sym)})",
                    hint=f"give static shapes: from_onnx(model, input_shapes={{'{vi.name}': [1, ...]}}) "
                         f"or `autocomp import --shape {vi.name}=1,...`"))
                continue
            dsl = self.fresh(vi.name)
            self.values[vi.name] = (dsl, tuple(dims), dtype)
            self.decls.append(f"input  {dsl}: {dtype}{_shape_text(dims)}")
        if self.errors:
            raise UserError(self.errors, filename=self.filename)
        for index, node in enumerate(self.nodes):
            if index in self.skip_nodes:
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
            except Exception as err:  # a bug of this importer: name the node, never a traceback
                label = node.name or (node.output[0] if node.output else "?")
                self.errors.append(Diagnostic(
                    f"ONNX node '{label}' ({node.op_type}): internal error of the importer "
                    f"({type(err).__name__}: {err})", hint="please report it with the model"))
                self.poisoned.update(node.output)
        outputs = []
        input_names = {v[0] for k, v in self.values.items() if k in {i.name for i in self.graph.input}
                       and not isinstance(v, _View)}
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
            v = self.values[vi.name]
            if not isinstance(v, _View) and v[0] in input_names:
                # an input passed straight through: a copy makes it a computed tensor
                names = [f"i{d}" for d in range(len(v[1]))]
                outputs.append(self.comp(vi.name + "_out", v[1], v[2], names, "=", f"{v[0]}[{', '.join(names)}]"))
                continue
            outputs.append(self.operand(vi.name))
        if self.errors:
            raise UserError(self.errors, filename=self.filename)
        name = Path(self.filename).name
        header = [f"# imported from {name} (ONNX opset {self.opset}) by autocomp import",
                  f"# {len(self.nodes)} ONNX nodes -> {sum(1 for l in self.body if not l.startswith(('tensor', '#')))}"
                  " statements; weights are the model's (Program.param_values)"]
        text = "\n".join(header + self.decls + [""] + self.body + ["", f"output {', '.join(outputs)}", ""])
        from .dsl import parse

        try:
            program = parse(text, self.filename + ".acir")
        except UserError as err:  # a limit, or a bug of this importer: the first error (the rest follow from it)
            d = err.diagnostics[0]
            raise UserError([Diagnostic(f"the program imported from '{self.filename}' does not check: "
                                        f"{d.message} (line {d.line}: "
                                        f"{text.splitlines()[d.line - 1] if d.line else ''})", hint=d.hint)],
                            filename=self.filename) from None
        return replace(program, param_values=dict(self.params))

    def node(self, index: int, node) -> None:
        op = node.op_type
        if node.domain not in ("", "ai.onnx"):
            self.fail(node, f"custom domain '{node.domain}' is not supported", "only the default ONNX domain is")
        for name in node.input:
            if name and name not in self.consts and name not in self.values:
                self.fail(node, f"its input '{name}' is not a graph input, an initializer or an earlier node's "
                                "output", "the graph has a dangling input, a cycle or nodes out of order")
        if all(self.is_const(i) for i in node.input) and op not in ("Dropout",):
            return self.fold(node)
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            self.fail(node, "op type not supported",
                      "supported: " + ", ".join(SUPPORTED_OPS))
        handler(index, node)

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
        try:
            results = self.evaluate(node, feeds)
        except Exception as err:  # the reference evaluator rejects what onnx does not define
            self.fail(node, f"cannot fold this constant computation: {err}")
        for name, value in zip(node.output, results):
            if name:
                self.consts[name] = np.asarray(value)

    def evaluate(self, node, feeds: dict) -> list:
        """`node` run by onnx's reference evaluator on `feeds`, as an op of the model's opset
        (a one-node model: the evaluator then picks the op version the model means)."""
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        def info(name, value=None):
            code = helper.np_dtype_to_tensor_dtype(value.dtype) if value is not None else 1
            return helper.make_tensor_value_info(name, code, None)
        graph = helper.make_graph([node], "fold", [info(k, v) for k, v in feeds.items()],
                                  [info(o) for o in node.output if o])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
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

    def op_Size(self, index, node):
        self.consts[node.output[0]] = np.array(math.prod(self.shape(node.input[0])), dtype=np.int64)

    # ---------------------------------------------------------------- aliases and views

    def op_Identity(self, index, node):
        self.alias(node, node.output[0], node.input[0])

    def op_Dropout(self, index, node):  # inference: the identity (the mask output must be unused)
        if len(node.output) > 1 and node.output[1] and self.consumers.get(node.output[1]):
            self.fail(node, "its mask output is used; only inference Dropout is supported")
        self.alias(node, node.output[0], node.input[0])

    def op_Cast(self, index, node):
        to = _DTYPES.get(self.attrs(node)["to"])
        if to != self.dtype(node.input[0]):
            self.fail(node, f"casts {self.dtype(node.input[0])} to {to or 'an unsupported type'}; only same-type "
                            "casts are supported on computed tensors")
        self.alias(node, node.output[0], node.input[0])

    def op_Reshape(self, index, node):
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

    def op_Conv(self, index, node):
        a = self.attrs(node)
        x_shape = self.shape(node.input[0])
        w_shape = self.shape(node.input[1])
        if len(x_shape) != 4:
            self.fail(node, f"only 2-D convolutions (rank-4 input) are supported, got rank {len(x_shape)}")
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
            self.fail(node, f"auto_pad={a['auto_pad']!r} is not supported", "export with explicit pads")
        groups = a.get("group", 1)
        strides = list(a.get("strides", [1, 1]))
        dil = list(a.get("dilations", [1, 1]))
        pads = list(a.get("pads", [0, 0, 0, 0]))
        out = node.output[0]
        has_bias = len(node.input) > 2 and node.input[2]
        conv_out = out + "_conv" if has_bias else out
        n, c, h, w = x_shape
        f = w_shape[0]
        if strides[0] == strides[1] and dil[0] == dil[1] and len(set(pads)) == 1:
            if groups == c == f and w_shape[1] == 1 and dil[0] == 1:
                self.lib(node, conv_out, "depthwise_conv2d", [node.input[0], node.input[1]],
                         stride=strides[0], padding=pads[0])
            else:
                kw = {"stride": strides[0], "padding": pads[0]}
                if dil[0] != 1:
                    kw["dilation"] = dil[0]
                if groups != 1:
                    kw["groups"] = groups
                self.lib(node, conv_out, "conv2d", [node.input[0], node.input[1]], **kw)
        else:
            if groups != 1:
                self.fail(node, "grouped convolution with unequal strides/dilations or asymmetric pads")
            r, s = w_shape[2], w_shape[3]
            ho = (h + pads[0] + pads[2] - dil[0] * (r - 1) - 1) // strides[0] + 1
            wo = (w + pads[1] + pads[3] - dil[1] * (s - 1) - 1) // strides[1] + 1
            xn, wn = self.operand(node.input[0]), self.operand(node.input[1])
            hi = f"{strides[0]}*h + {dil[0]}*r - {pads[0]}"
            wi = f"{strides[1]}*w + {dil[1]}*s - {pads[1]}"
            self.comp(conv_out, (n, f, ho, wo), self.dtype(node.input[0]), ["n", "f", "h", "w"], "+=",
                      f"{xn}[n, c, {hi}, {wi}] * {wn}[f, c, r, s]", "Conv, asymmetric pads/strides")
        if has_bias:
            self.lib(node, out, "bias_add", [conv_out, node.input[2]])

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
        if len(sa) < 2 or len(sb) < 2:
            self.fail(node, "MatMul of a vector (rank 1) is not supported", "reshape it to a matrix first")
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

    def _binary(self, node, op_name: str, symbol: str):
        a, b = node.input[0], self.legacy_broadcast(node)
        for first, second, reverse in ((a, b, False), (b, a, True)):
            if self.is_const(second) and self.consts[second].size == 1 \
                    and self.consts[second].ndim <= len(self.shape(first)):
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
        if self.is_const(b) and self.consts[b].size == 1 and self.consts[b].ndim <= len(self.shape(a)):
            return self._scalar(node, node.output[0], a, "/", float(self.consts[b].reshape(())))
        self._binary(node, "div", "/")

    def _unary_fn(self, node, fn: str):
        shape = self.shape(node.input[0])
        names = [f"i{d}" for d in range(len(shape))]
        x = f"{self.operand(node.input[0])}[{', '.join(names)}]"
        self.comp(node.output[0], shape, self.dtype(node.input[0]), names, "=", fn.replace("X", x))

    def op_Relu(self, index, node):
        self.lib(node, node.output[0], "relu", [node.input[0]])

    def op_Sigmoid(self, index, node):
        self.lib(node, node.output[0], "sigmoid", [node.input[0]])

    def op_Tanh(self, index, node):
        self.lib(node, node.output[0], "tanh", [node.input[0]])

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
        if name in self.consts and self.consts[name].size == 1:
            return _fmt_num(self.consts[name].reshape(()))
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
        self._activation(node, "select(lt({alpha}, {0}), {0}, 0)", alpha=1.0)

    def op_Shrink(self, index, node):
        self._activation(node, "select(lt({0}, -{lambd}), {0} + {bias}, select(lt({lambd}, {0}), {0} - {bias}, 0))",
                         lambd=0.5, bias=0.0)

    def op_Log(self, index, node):
        self._unary_fn(node, "log(X)")

    def op_Floor(self, index, node):
        self._unary_fn(node, "floor(X)")

    def op_Ceil(self, index, node):
        self._unary_fn(node, "-floor(-X)")

    def op_Sign(self, index, node):
        self._unary_fn(node, "lt(0, X) - lt(X, 0)")

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
        self._compare(node, "eq({0}, {1})")

    def op_Less(self, index, node):
        self._compare(node, "lt({0}, {1})")

    def op_LessOrEqual(self, index, node):
        self._compare(node, "le({0}, {1})")

    def op_Greater(self, index, node):
        self._compare(node, "lt({1}, {0})")

    def op_GreaterOrEqual(self, index, node):
        self._compare(node, "le({1}, {0})")

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
        """x·0.5·(1 + erf(x/√2)) as torch writes it: Div(x, √2) | Mul(x, 1/√2) → Erf → Add 1
        → Mul x → Mul 0.5 (the two Muls in either order). Returns (x, out, nodes to skip)."""
        producers = {o: (k, n) for k, n in enumerate(self.nodes) for o in n.output}

        def scalar(name):
            return float(self.consts[name].reshape(())) if name in self.consts and self.consts[name].size == 1 \
                else None

        def only_consumer(name):
            users = self.consumers.get(name, [])
            return users[0] if len(users) == 1 and name not in {o.name for o in self.graph.output} else None
        pre = producers.get(node.input[0])
        if pre is None:
            return None
        k_pre, pre = pre
        x = None
        if pre.op_type == "Div" and scalar(pre.input[1]) is not None and abs(scalar(pre.input[1]) - math.sqrt(2)) < 1e-4:
            x = pre.input[0]
        if pre.op_type == "Mul":
            for i, j in ((0, 1), (1, 0)):
                v = scalar(pre.input[j])
                if v is not None and abs(v - 1 / math.sqrt(2)) < 1e-4:
                    x = pre.input[i]
        if x is None or x in self.consts or only_consumer(pre.output[0]) is not node:
            return None
        add = only_consumer(node.output[0])
        if add is None or add.op_type != "Add" or 1.0 not in (scalar(add.input[0]), scalar(add.input[1])):
            return None
        m1 = only_consumer(add.output[0])
        if m1 is None or m1.op_type != "Mul":
            return None
        other = m1.input[1] if m1.input[0] == add.output[0] else m1.input[0]
        m2 = only_consumer(m1.output[0])
        if other == x:      # (x * (1 + erf)) * 0.5
            if m2 is None or m2.op_type != "Mul" or 0.5 not in (scalar(m2.input[0]), scalar(m2.input[1])):
                return None
            last = m2
        elif other in producers and producers[other][1].op_type == "Mul":   # (x * 0.5) * (1 + erf)
            k_half, half = producers[other]
            if x not in half.input or 0.5 not in (scalar(half.input[0]), scalar(half.input[1])) \
                    or only_consumer(half.output[0]) is not m1:
                return None
            last = m1
        else:
            return None
        ids = {id(n): k for k, n in enumerate(self.nodes)}
        skip = {ids[id(add)], ids[id(m1)]} | ({ids[id(m2)]} if last is m2 else set())
        if any(k < index for k in skip):
            return None
        # Nodes of the pattern written before Erf (x/√2, maybe x·0.5) would be dead code.
        self._drop(pre.output[0])
        if last is m1:
            if k_half < index:
                self._drop(half.output[0])
            else:
                skip.add(k_half)
        return x, last.output[0], skip

    def _drop(self, onnx_name: str) -> None:
        """Remove the statement written for `onnx_name` (its reader is being replaced)."""
        dsl, shape, dtype = self.values.pop(onnx_name)
        self.body = [l for l in self.body if l != f"tensor {dsl}: {dtype}{_shape_text(shape)}"
                     and not l.startswith((f"{dsl}[", f"{dsl} = "))]

    # ---------------------------------------------------------------- normalisation and reductions

    def op_Softmax(self, index, node):
        shape = self.shape(node.input[0])
        axis = self.attrs(node).get("axis", -1 if self.opset >= 13 else 1)
        axis = axis + len(shape) if axis < 0 else axis
        if self.opset < 13 and axis != len(shape) - 1:
            self.fail(node, f"opset {self.opset} Softmax flattens from axis {axis}; only the last axis is supported")
        self.lib(node, node.output[0], "softmax", [node.input[0]], axis=axis - len(shape))

    def op_LayerNormalization(self, index, node):
        a = self.attrs(node)
        shape = self.shape(node.input[0])
        axis = a.get("axis", -1)
        if axis % len(shape) != len(shape) - 1:
            self.fail(node, "only normalisation over the last axis is supported")
        for extra in node.output[1:]:
            if extra and self.consumers.get(extra):
                self.fail(node, "its mean/inv-std-dev outputs are used; only the first output is supported")
        d = shape[-1]
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if bias is None:
            self.consts[node.output[0] + "_beta"] = np.zeros(d, np.float32)
            bias = node.output[0] + "_beta"
        self.lib(node, node.output[0], "layernorm", [node.input[0], node.input[1], bias],
                 eps=float(a.get("epsilon", 1e-5)))

    def op_BatchNormalization(self, index, node):
        a = self.attrs(node)
        scale, bias = self.const(node, 1, "scale"), self.const(node, 2, "bias")
        mean, var = self.const(node, 3, "mean"), self.const(node, 4, "variance")
        if a.get("training_mode", 0):
            self.fail(node, "training-mode BatchNormalization is not supported")
        inv = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + float(a.get("epsilon", 1e-5)))
        out = node.output[0]
        self.consts[out + "_scale"] = inv.astype(np.float32)
        self.consts[out + "_shift"] = (bias - mean * inv).astype(np.float32)
        self.lib(node, out, "batchnorm", [node.input[0], out + "_scale", out + "_shift"])

    def _reduce(self, index, node, kind: str):
        a = self.attrs(node)
        shape = self.shape(node.input[0])
        rank = len(shape)
        axes = self._axes(node, 1)
        if axes is None or not axes:
            if a.get("noop_with_empty_axes", 0):
                return self.alias(node, node.output[0], node.input[0])
            axes = list(range(rank))
        axes = sorted({x % rank for x in axes})
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
        x = f"{self.operand(node.input[0])}[{', '.join(names)}]"
        count = math.prod(shape[d] for d in axes)
        if kind == "mean":
            self.comp(node.output[0], out_shape, self.dtype(node.input[0]), lhs, "+=",
                      f"{x} / {count}")   # not "* (1/n)": exact, and no einsum over unread loops
        else:
            self.comp(node.output[0], out_shape, self.dtype(node.input[0]), lhs, "+=" if kind == "sum" else "max=", x)

    def op_ReduceMean(self, index, node):
        self._reduce(index, node, "mean")

    def op_ReduceSum(self, index, node):
        self._reduce(index, node, "sum")

    def op_ReduceMax(self, index, node):
        self._reduce(index, node, "max")

    # ---------------------------------------------------------------- pooling

    def _pool_attrs(self, node):
        a = self.attrs(node)
        kernel = list(a["kernel_shape"])
        strides = list(a.get("strides", [1] * len(kernel)))
        pads = list(a.get("pads", [0] * 2 * len(kernel)))
        if len(kernel) != 2:
            self.fail(node, "only 2-D pooling is supported")
        if any(d != 1 for d in a.get("dilations", [1, 1])):
            self.fail(node, "dilated pooling is not supported")
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
            self.fail(node, f"auto_pad={a['auto_pad']!r} is not supported", "export with explicit pads")
        if kernel[0] != kernel[1] or strides[0] != strides[1] or len(set(pads)) != 1:
            self.fail(node, f"only square windows with equal strides and pads are supported (kernel {kernel}, "
                            f"strides {strides}, pads {pads})")
        h, w = self.shape(node.input[0])[2:]
        k, s, p = kernel[0], strides[0], pads[0]
        if a.get("ceil_mode", 0):
            for size in (h, w):
                if (size + 2 * p - k) % s:
                    self.fail(node, "ceil_mode=1 with a window that does not tile the input exactly")
        return k, s, p, a

    def op_MaxPool(self, index, node):
        if len(node.output) > 1 and node.output[1] and self.consumers.get(node.output[1]):
            self.fail(node, "its Indices output is used; not supported")
        k, s, p, _ = self._pool_attrs(node)
        self.lib(node, node.output[0], "maxpool2d", [node.input[0]], kernel=k, stride=s, padding=p)

    def op_AveragePool(self, index, node):
        k, s, p, a = self._pool_attrs(node)
        out = node.output[0]
        if p == 0 or a.get("count_include_pad", 0):
            return self.lib(node, out, "avgpool2d", [node.input[0]], kernel=k, stride=s, padding=p)
        # ONNX's default excludes padding from the count: avgpool2d divides by k*k, so
        # multiply each output position by k*k / (window cells inside the input).
        pooled = self.lib(node, out + "_pool", "avgpool2d", [node.input[0]], kernel=k, stride=s, padding=p)
        n, c, ho, wo = self.shape(out + "_pool")
        h, w = self.shape(node.input[0])[2:]

        def inside(o, size):
            return min(o * s - p + k, size) - max(o * s - p, 0)
        fix = np.array([[k * k / (inside(i, h) * inside(j, w)) for j in range(wo)] for i in range(ho)], np.float32)
        self.consts[out + "_count"] = fix.reshape(1, 1, ho, wo)
        self.lib(node, out, "mul", [out + "_pool", out + "_count"])

    def op_GlobalAveragePool(self, index, node):
        shape = self.shape(node.input[0])
        if len(shape) != 4:
            self.fail(node, "only rank-4 (NCHW) input is supported")
        self.lib(node, node.output[0] + "_pool", "global_avgpool", [node.input[0]])
        dsl, flat_shape, dtype = self.values[node.output[0] + "_pool"]
        # [N, C] computed; the ONNX result is [N, C, 1, 1]: a view, written only if read as 4-D
        self.base_shapes[dsl] = flat_shape
        self.values[node.output[0]] = _View(dsl, tuple(shape[:2]) + (1, 1))
        self.dtype_of_view[node.output[0]] = dtype

    def op_GlobalMaxPool(self, index, node):
        n, c, h, w = self.shape(node.input[0])
        x = self.operand(node.input[0])
        self.comp(node.output[0], (n, c, 1, 1), self.dtype(node.input[0]), ["i0", "i1", "u0", "u1"], "max=",
                  f"{x}[i0, i1, k2, k3]")

    # ---------------------------------------------------------------- layout

    def op_Transpose(self, index, node):
        perm = self.attrs(node).get("perm")
        rank = len(self.shape(node.input[0]))
        perm = list(perm) if perm is not None else list(reversed(range(rank)))
        self.lib(node, node.output[0], "transpose", [node.input[0]], perm=perm)

    def op_Concat(self, index, node):
        axis = self.attrs(node)["axis"]
        inputs = [i for i in node.input if i and math.prod(self.shape(i)) > 0]
        if len(inputs) == 1:
            return self.alias(node, node.output[0], inputs[0])
        self.lib(node, node.output[0], "concat", inputs, axis=axis)

    def op_Slice(self, index, node):
        shape = self.shape(node.input[0])
        rank = len(shape)
        starts = [int(v) for v in self.const(node, 1, "starts")]
        ends = [int(v) for v in self.const(node, 2, "ends")]
        axes = [int(v) for v in self.const(node, 3, "axes")] if len(node.input) > 3 and node.input[3] \
            else list(range(len(starts)))
        steps = [int(v) for v in self.const(node, 4, "steps")] if len(node.input) > 4 and node.input[4] \
            else [1] * len(starts)
        lo, step, out_shape = [0] * rank, [1] * rank, list(shape)
        for st, en, ax, sp in zip(starts, ends, axes, steps):
            ax %= rank
            if sp <= 0:
                self.fail(node, "negative or zero slice steps are not supported")
            size = shape[ax]
            st = max(0, min(size, st + size if st < 0 else st))
            en = max(0, min(size, en + size if en < 0 else en))
            lo[ax], step[ax] = st, sp
            out_shape[ax] = max(0, -(-(en - st) // sp))
        names = [f"i{d}" for d in range(rank)]
        idx = [f"{step[d]}*{names[d]} + {lo[d]}" if (step[d], lo[d]) != (1, 0) else names[d] for d in range(rank)]
        if tuple(out_shape) == tuple(shape):
            return self.alias(node, node.output[0], node.input[0])
        # a sliced axis indexed directly ranges over the slice, not the whole input axis
        bounds = [f"{names[d]} < {out_shape[d]}" for d in range(rank) if idx[d] == names[d] and out_shape[d] != shape[d]]
        where = f" where {', '.join(bounds)}" if bounds else ""
        self.comp(node.output[0], out_shape, self.dtype(node.input[0]), names, "=",
                  f"{self.operand(node.input[0])}[{', '.join(idx)}]{where}", "Slice")

    def op_Gather(self, index, node):
        indices = self.const(node, 1, "indices")
        if indices.ndim != 0:
            self.fail(node, "only a scalar constant index is supported on computed tensors",
                      "an embedding lookup (Gather on a table by token ids) is not affine")
        shape = self.shape(node.input[0])
        axis = self.attrs(node).get("axis", 0) % len(shape)
        at = int(indices) % shape[axis]
        names = [f"i{d}" for d in range(len(shape)) if d != axis]
        src = [names[d] if d < axis else (str(at) if d == axis else names[d - 1]) for d in range(len(shape))]
        self.comp(node.output[0], [e for d, e in enumerate(shape) if d != axis], self.dtype(node.input[0]), names,
                  "=", f"{self.operand(node.input[0])}[{', '.join(src)}]", "Gather")


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
        if value.shape != program.tensor(name).shape:
            raise UserError(f"'{name}' has shape {list(value.shape)}, the program expects "
                            f"{list(program.tensor(name).shape)}")
        values[name] = value
    return interp.run(program, values)
