"""ONNX model validation: what a model must satisfy before the importer reads it.

The importer (`importer.py`) trusts nothing this module has not checked. It checks what onnx's
checker and onnxruntime check when they load a model, and turns each failure into a
`Diagnostic` naming the model field, the initializer, the graph input or the node, and what
was expected:

- the model: an IR version and an opset this onnx knows, one opset per domain, a graph with
  outputs, every name defined once (`model_problems`);
- each initializer: a known element type, non-negative dims, and stored data of exactly the
  size its dims and type say (a mutated or truncated initializer is named, never a numpy
  reshape error) (`initializer_arrays`);
- each node, in graph order (`NodeChecker`): its op defined at the model's opset (an op from a
  later opset is named with the opset it needs), its inputs, outputs and attributes as the
  op's schema says (onnx's `check_node`), and the element types of its inputs within the op's
  type constraints (onnx's per-node type inference: an int64 tensor feeding a Conv is refused
  at the Conv). Shape conflicts found by onnx's inference are returned separately: the
  importer's own shape check usually says it better, and reports onnx's only when its own
  accepts the node.

What the importer cannot read (an op it has no form for, a custom domain) is not a problem of
the model: `unsupported_ops_diagnostic` lists every such op once, with its nodes and the
supported ops it might be.
"""
from __future__ import annotations

import difflib
import math

import numpy as np

from ..errors import Diagnostic

# Element types the importer reads (the DSL's f32/f16/bf16/i8/i32, double as f32).
READABLE_TYPES = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16}
# Constant inputs up to this size are given to onnx's inference as values (shapes, axes, pads).
_DATA_ELEMENTS = 4096


def _type_name(code: int) -> str:
    from onnx import TensorProto

    try:
        return TensorProto.DataType.Name(code)
    except ValueError:
        return f"an unknown element type (code {code})"


def node_label(node) -> str:
    return node.name or (node.output[0] if node.output else "?")


# --------------------------------------------------------------------------- the model

def model_problems(model) -> list[Diagnostic]:
    """The model-level fields: IR version, opsets, a graph with outputs, names defined once."""
    import onnx
    from onnx import defs

    out = []
    if model.ir_version < 1:
        out.append(Diagnostic("the model has no IR version (ir_version is 0): not an ONNX model, or a damaged one"))
    elif model.ir_version > onnx.IR_VERSION:
        out.append(Diagnostic(f"the model's IR version {model.ir_version} is newer than this onnx reads "
                              f"(at most {onnx.IR_VERSION})", hint="upgrade onnx, or export with an older IR"))
    newest = defs.onnx_opset_version()
    seen = {}
    for o in model.opset_import:
        domain = o.domain or "ai.onnx"
        if domain in seen:
            out.append(Diagnostic(f"opset_import names the domain '{domain}' twice (versions {seen[domain]} and "
                                  f"{o.version})"))
        seen[domain] = o.version
        if domain == "ai.onnx" and not 1 <= o.version <= newest:
            out.append(Diagnostic(f"the model imports ONNX opset {o.version}, which does not exist "
                                  f"(onnx knows opsets 1 to {newest})"))
    graph = model.graph
    uses_default = any(n.domain in ("", "ai.onnx") for n in graph.node)
    if "ai.onnx" not in seen and uses_default and model.ir_version >= 3:
        out.append(Diagnostic("the model has no opset_import for the default ONNX domain, which its nodes use",
                              hint="IR version 3 and later name the opset they are written against"))
    text = _not_text(model)
    if text:
        return out + [Diagnostic(f"{text} is not valid UTF-8 text (a damaged model)")]
    if not graph.output:
        out.append(Diagnostic("the graph has no outputs: nothing to compute"))
    out += _value_info_problems(graph) + _names_defined_once(graph)
    if graph.sparse_initializer:
        out.append(Diagnostic(f"sparse initializer '{graph.sparse_initializer[0].values.name}': sparse "
                              "initializers are not supported", hint="store the weights dense"))
    return out


def _not_text(model) -> str:
    """The first name, op type or domain protobuf could not decode as UTF-8 (it hands those
    over as bytes), described; '' when all are text."""
    graph = model.graph
    for o in model.opset_import:
        if not isinstance(o.domain, str):
            return f"an opset_import domain ({o.domain!r})"
    for kind, infos in (("graph input", graph.input), ("graph output", graph.output),
                        ("initializer", graph.initializer)):
        for vi in infos:
            if not isinstance(vi.name, str):
                return f"the name of a {kind} ({vi.name!r})"
    for k, node in enumerate(graph.node):
        for what, value in (("op type", node.op_type), ("domain", node.domain), ("name", node.name)):
            if not isinstance(value, str):
                return f"the {what} of node {k} ({value!r})"
        for name in list(node.input) + list(node.output):
            if not isinstance(name, str):
                return f"an input or output name of node {k} ({name!r})"
    return ""


def _value_info_problems(graph) -> list[Diagnostic]:
    """Graph inputs and outputs must declare a tensor type with a known element type."""
    from onnx import TensorProto

    out = []
    for kind, infos in (("input", graph.input), ("output", graph.output)):
        for vi in infos:
            if not vi.type.HasField("tensor_type"):
                continue   # the importer names sequences and maps itself
            code = vi.type.tensor_type.elem_type
            if code == 0 or code not in TensorProto.DataType.values():
                out.append(Diagnostic(f"graph {kind} '{vi.name}' has no element type ({_type_name(code)})"
                                      if code else f"graph {kind} '{vi.name}' has no element type"))
    return out


def _names_defined_once(graph) -> list[Diagnostic]:
    """Static single assignment, as onnx's checker demands: each value has one definition (an
    initializer may also be listed as a graph input, as exporters before IR 4 did)."""
    out, defined = [], {}
    for vi in graph.input:
        if vi.name in defined:
            out.append(Diagnostic(f"graph input '{vi.name}' is listed twice"))
        defined[vi.name] = "a graph input"
    for init in graph.initializer:
        if not init.name:
            out.append(Diagnostic("an initializer has no name"))
        elif defined.get(init.name, "a graph input") != "a graph input":
            out.append(Diagnostic(f"initializer '{init.name}' is defined twice"))
        defined[init.name] = "an initializer"
    for node in graph.node:
        for name in node.output:
            if not name:
                continue
            if name in defined:
                out.append(Diagnostic(f"ONNX node '{node_label(node)}' ({node.op_type}): its output '{name}' is "
                                      f"already defined (by {defined[name]})",
                                      hint="every value of an ONNX graph is defined once"))
            defined[name] = f"node '{node_label(node)}'"
    return out


# --------------------------------------------------------------------------- initializers

def _stored_count(init) -> tuple[int, str]:
    """How many elements `init` stores, and where (raw bytes or a typed field)."""
    from onnx import helper

    itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(init.data_type)).itemsize \
        if init.data_type != 16 else 2
    if init.HasField("raw_data"):
        size = len(init.raw_data)
        return (size // itemsize if size % itemsize == 0 else -1), f"{size} bytes of raw data"
    field = helper.tensor_dtype_to_field(init.data_type)
    count = len(getattr(init, field))
    return count, f"{count} values in {field}"


def initializer_arrays(graph) -> tuple[dict, list[Diagnostic]]:
    """Each initializer as a numpy array (bfloat16 and other non-numpy types as float32), and
    a diagnostic for each one whose type, dims or stored data are wrong."""
    from onnx import TensorProto, numpy_helper

    arrays, out = {}, []
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    for init in graph.initializer:
        where = f"initializer '{init.name}'"
        dims = list(init.dims)
        if init.data_type not in TensorProto.DataType.values() or init.data_type == 0:
            out.append(Diagnostic(f"{where} has {_type_name(init.data_type)}"))
            continue
        if any(d < 0 for d in dims):
            out.append(Diagnostic(f"{where} has a negative dimension: dims {dims}"))
            continue
        if init.data_location == TensorProto.EXTERNAL:
            out.append(Diagnostic(f"{where} keeps its data in an external file that was not loaded",
                                  hint="load the model from its path, with its data files beside it"))
            continue
        if init.data_type not in READABLE_TYPES:
            if init.name in used:
                out.append(Diagnostic(f"{where} has element type {_type_name(init.data_type)}, which the importer "
                                      "does not read", hint="float32, float16, bfloat16, double, integers and bool "
                                                            "are read"))
            continue
        try:   # numpy's reshape refuses data that disagrees with the dims: described below
            value = numpy_helper.to_array(init)
        except Exception as err:
            want = math.prod(dims)
            count, stored = _stored_count(init)
            if count != want:
                out.append(Diagnostic(f"{where}: dims {dims} ({_type_name(init.data_type)}) need {want:,} elements, "
                                      f"but it stores {stored}",
                                      hint="the initializer's dims and data disagree (a damaged or hand-edited model)"))
            else:
                out.append(Diagnostic(f"{where}: its data cannot be read ({type(err).__name__}: {err})"))
            continue
        if value.size != math.prod(dims):
            out.append(Diagnostic(f"{where}: dims {dims} need {math.prod(dims):,} elements, but it stores {value.size:,}"))
            continue
        if value.dtype.kind not in "fiub":   # bfloat16 (ml_dtypes) computes as float32
            value = value.astype(np.float32)
        arrays[init.name] = value
    return arrays, out


# --------------------------------------------------------------------------- nodes

class NodeChecker:
    """Each node checked against its op's schema at the model's opset, with the element types
    (and, where known, shapes) of its inputs followed through the graph as onnx infers them."""

    def __init__(self, model, opset: int):
        from onnx import checker, helper

        self.opset = opset
        self.ir_version = max(model.ir_version, 3)
        self.opset_imports = [helper.make_opsetid(o.domain, o.version) for o in model.opset_import] \
            or [helper.make_opsetid("", opset)]
        self.context = checker.C.CheckerContext()
        self.context.ir_version = self.ir_version
        self.context.opset_imports = {o.domain: o.version for o in self.opset_imports}
        if "" not in self.context.opset_imports:
            self.context.opset_imports = {**self.context.opset_imports, "": opset}
        self.scope = checker.C.LexicalScopeContext()
        self.types: dict = {}

    def seed(self, graph, arrays: dict) -> None:
        """The types of the graph's inputs and initializers."""
        from onnx import helper

        for vi in graph.input:
            if vi.type.HasField("tensor_type"):
                self.types[vi.name] = vi.type
        for init in graph.initializer:
            if init.name in arrays:
                self.types[init.name] = helper.make_tensor_type_proto(init.data_type, list(init.dims))

    def schema_problem(self, node) -> tuple[str, str] | None:
        """(message, hint) when `node` does not exist at the model's opset or breaks its schema."""
        import onnx
        from onnx import defs

        try:
            defs.get_schema(node.op_type, self.opset, node.domain)
        except Exception:
            first = _first_version(node.op_type, node.domain)
            if first is not None and first > self.opset:
                return (f"{node.op_type} does not exist at opset {self.opset} (it was added in opset {first})",
                        f"import opset {first} or later, or export with an op of opset {self.opset}")
            return None   # not an ONNX op: the importer lists it with the unsupported ones
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return None   # a subgraph reads the outer scope, which a node alone does not have (Loop, If, Scan)
        try:
            from onnx import checker

            checker.check_node(node, self.context, self.scope)
        except Exception as err:
            return f"the node does not fit the {node.op_type} schema of opset {self.opset}: {_clean(err)}", ""
        return None

    def infer(self, node, consts: dict) -> tuple[str, str] | None:
        """onnx's type and shape inference of `node`, given the values of its small constant
        inputs (`consts`: an empty `scales` of Resize means "absent"): ('type', message) for
        inputs outside the op's type constraints, ('shape', message) for a shape conflict,
        None when it passes (its outputs' types then recorded) or an input's type is unknown."""
        from onnx import defs, numpy_helper, shape_inference

        if any(i and i not in self.types for i in node.input) or any(a.type in (5, 10) for a in node.attribute):
            return None   # an input of unknown type, or a subgraph (GRAPH, GRAPHS attributes) reading the outer scope
        try:
            schema = defs.get_schema(node.op_type, self.opset, node.domain)
        except Exception:
            return None
        types = {i: self.types[i] for i in node.input if i}
        data = {}
        for i in node.input:
            value = consts.get(i)
            if value is not None and value.size <= _DATA_ELEMENTS and value.dtype.kind in "fiub":
                try:
                    data[i] = numpy_helper.from_array(np.asarray(value), i)
                except Exception:   # a value onnx cannot store: inferred from its type alone
                    pass
        try:
            result = shape_inference.infer_node_outputs(schema, node, types, data, opset_imports=self.opset_imports,
                                                        ir_version=self.ir_version)
        except shape_inference.InferenceError as err:
            return "shape", _clean(err)
        except Exception as err:   # the checker's ValidationError: a type constraint broken
            return "type", _clean(err)
        for name, value in result.items():
            if name:
                self.types[name] = value
        return None

    def static_shape(self, name: str) -> tuple[int, ...] | None:
        """The shape onnx inferred for `name`, when every dimension is known."""
        t = self.types.get(name)
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            return None
        dims = t.tensor_type.shape.dim
        if not all(d.HasField("dim_value") for d in dims):
            return None
        return tuple(int(d.dim_value) for d in dims)


_FIRST_VERSION: dict = {}


def _first_version(op_type: str, domain: str) -> int | None:
    """The opset that introduced `op_type` (None for an op onnx does not define)."""
    from onnx import defs

    if not _FIRST_VERSION:
        for s in defs.get_all_schemas_with_history():
            key = (s.name, s.domain)
            _FIRST_VERSION[key] = min(_FIRST_VERSION.get(key, s.since_version), s.since_version)
    return _FIRST_VERSION.get((op_type, "" if domain == "ai.onnx" else domain))


def _clean(err: Exception) -> str:
    """onnx's message without its bracketed prefixes and trailing blank lines."""
    text = str(err).strip()
    for prefix in ("[ShapeInferenceError] ", "[TypeInferenceError] ", "Inference error(s): "):
        text = text.replace(prefix, "")
    return " ".join(text.split())


# --------------------------------------------------------------------------- unsupported ops

# Ops with no close name among the supported ones, and what to do instead.
_ALTERNATIVES = {
    "Loop": "export with the loop unrolled (static shapes fold it away)",
    "If": "export with the branch taken (static shapes fold it away)",
    "Scan": "export with the recurrence unrolled",
    "LSTM": "export with the recurrence unrolled into MatMul, Sigmoid and Tanh",
    "GRU": "export with the recurrence unrolled into MatMul, Sigmoid and Tanh",
    "RNN": "export with the recurrence unrolled into MatMul and Tanh",
    "NonZero": "its output length depends on the data: not expressible with static shapes",
    "Unique": "its output length depends on the data: not expressible with static shapes",
    "NonMaxSuppression": "its output length depends on the data: not expressible with static shapes",
    "LpNormalization": "ReduceL2 (or ReduceL1) then Div",
    "MeanVarianceNormalization": "ReduceMean, Sub, Mul, ReduceMean, Sqrt, Div",
    "Attention": "MatMul, Softmax and MatMul (opset 23's Attention written out)",
    "OneHot": "Equal against a Range constant, then Cast",
    "Hardmax": "ArgMax, then Equal against a Range constant (a one-hot of the maximum)",
    "Compress": "its output length depends on the data: not expressible with static shapes",
    "QLinearConv": "export in QDQ form (QuantizeLinear/DequantizeLinear around a float Conv)",
    "QLinearMatMul": "export in QDQ form (QuantizeLinear/DequantizeLinear around a float MatMul)",
    "ConvInteger": "export in QDQ form (QuantizeLinear/DequantizeLinear around a float Conv)",
    "MatMulInteger": "export in QDQ form (QuantizeLinear/DequantizeLinear around a float MatMul)",
    "DynamicQuantizeLinear": "export with static quantisation (QuantizeLinear with a constant scale)",
    "RandomNormal": "random ops have no reproducible result: export in eval mode",
    "RandomUniform": "random ops have no reproducible result: export in eval mode",
    "RandomNormalLike": "random ops have no reproducible result: export in eval mode",
    "RandomUniformLike": "random ops have no reproducible result: export in eval mode",
    "Bernoulli": "random ops have no reproducible result: export in eval mode",
    "SequenceConstruct": "sequences are not tensors: export with the sequence unrolled",
    "SplitToSequence": "sequences are not tensors: export with the sequence unrolled",
    "ConcatFromSequence": "sequences are not tensors: export with the sequence unrolled",
}


def unsupported_ops_diagnostic(unsupported: dict, supported: list[str]) -> Diagnostic:
    """One diagnostic for every op the importer cannot read: `unsupported` maps an op's label
    (op type, with its domain if not the default) to its nodes (quoted names with inputs)."""
    lines = []
    for label, nodes in sorted(unsupported.items()):
        op = label.split(" ")[0]
        shown = ", ".join(nodes[:8]) + (f" and {len(nodes) - 8} more" if len(nodes) > 8 else "")
        close = difflib.get_close_matches(op, supported, n=3, cutoff=0.6)
        if " (custom domain" in label and op in supported:
            instead = f"the default ONNX domain's {op} is supported"
        elif op in _ALTERNATIVES:
            instead = _ALTERNATIVES[op]
        elif close:
            instead = "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
        else:
            instead = "no supported op is close"
        lines.append(f"  {label}: {'node' if len(nodes) == 1 else f'{len(nodes)} nodes'} {shown} -- {instead}")
    count = len(unsupported)
    return Diagnostic(f"the model uses {count} op type{'s' if count > 1 else ''} the importer does not support "
                      "(op type not supported):\n" + "\n".join(lines),
                      hint="supported: " + ", ".join(supported))
