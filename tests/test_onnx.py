"""ONNX import: every supported op alone and in small networks matches onnxruntime.

Models are built with onnx.helper here (no downloads, no torch). Each test imports the
model, runs the reference interpreter on the imported program (weights attached) and
compares every graph output with onnxruntime on the same random inputs.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import autocomp_jupyter as autocomp  # noqa: E402
from autocomp_jupyter import interp  # noqa: E402
from autocomp_jupyter.errors import UserError  # noqa: E402
from autocomp_jupyter.onnx_import import from_onnx, run_with_values  # noqa: E402

RNG = np.random.default_rng(0)


def model_of(nodes, inputs, outputs, inits=(), opset=17, name="g"):
    """A model from nodes; `inputs`/`outputs` are (name, shape) pairs, `inits` (name, array)."""
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def check(model, tol=2e-4, **shapes):
    """Import, run both, compare; returns the imported program."""
    program = from_onnx(model)
    feeds = {i.name: rand(*[d.dim_value for d in i.type.tensor_type.shape.dim]) for i in model.graph.input}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    names = {i.name: t.name for i, t in zip(model.graph.input, [t for t in program.inputs if t.role == "input"])}
    got = run_with_values(program, {names[k]: v for k, v in feeds.items()})
    for out_name, want in zip(program.outputs, expected):
        have = got[out_name]
        assert have.shape == want.shape, (out_name, have.shape, want.shape)
        scale = max(1.0, float(np.abs(want).max()))
        err = float(np.abs(have - want).max())
        assert err <= tol * scale, f"{out_name}: max error {err:g} > {tol * scale:g}\n{program.source}"
    return program


def single(op, inputs, out_shape, inits=(), opset=17, **attrs):
    node = helper.make_node(op, [n for n, _ in inputs] + [n for n, _ in inits], ["Y"], name=f"{op}_0", **attrs)
    return model_of([node], inputs, [("Y", out_shape)], inits, opset)


# --------------------------------------------------------------------------- one op at a time


@pytest.mark.parametrize("attrs,wshape,out", [
    ({"pads": [1, 1, 1, 1]}, (8, 4, 3, 3), (1, 8, 6, 6)),
    ({"strides": [2, 2], "pads": [1, 1, 1, 1]}, (8, 4, 3, 3), (1, 8, 3, 3)),
    ({"dilations": [2, 2], "pads": [2, 2, 2, 2]}, (8, 4, 3, 3), (1, 8, 6, 6)),
    ({"group": 2, "pads": [1, 1, 1, 1]}, (8, 2, 3, 3), (1, 8, 6, 6)),
    ({"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 2]}, (4, 1, 3, 3), (1, 4, 3, 3)),   # depthwise
    ({"pads": [0, 1, 1, 0], "strides": [1, 2]}, (8, 4, 2, 3), (1, 8, 6, 3)),               # asymmetric
], ids=["pad", "stride", "dilation", "groups", "depthwise", "asymmetric"])
def test_conv(attrs, wshape, out):
    bias = rand(wshape[0])
    m = single("Conv", [("X", (1, 4, 6, 6))], out, [("W", rand(*wshape)), ("B", bias)], **attrs)
    program = check(m)
    kinds = {op.kind for op in program.ops}
    assert kinds & {"conv2d", "depthwise_conv2d", "comprehension"} and "bias_add" in kinds


@pytest.mark.parametrize("attrs", [{}, {"transB": 1}, {"transA": 1}, {"alpha": 0.5, "beta": 2.0, "transB": 1}])
def test_gemm(attrs):
    a_shape = (6, 4) if attrs.get("transA") else (4, 6)
    b_shape = (5, 6) if attrs.get("transB") else (6, 5)
    m = single("Gemm", [("A", a_shape)], (4, 5), [("B", rand(*b_shape)), ("C", rand(5))], **attrs)
    program = check(m)
    if attrs in ({}, {"transB": 1}):
        assert [op.kind for op in program.ops] == ["linear"]   # a Linear layer is one linear op


def test_gemm_without_constant_weight():
    m = single("Gemm", [("A", (4, 6)), ("B", (5, 6)), ("C", (4, 5))], (4, 5), transB=1, alpha=2.0, beta=0.5)
    check(m)


@pytest.mark.parametrize("a,b,out", [((4, 6), (6, 5), (4, 5)), ((3, 4, 6), (3, 6, 5), (3, 4, 5)),
                                     ((2, 4, 6), (6, 5), (2, 4, 5)), ((2, 3, 4, 6), (2, 3, 6, 5), (2, 3, 4, 5)),
                                     ((2, 1, 4, 6), (3, 6, 5), (2, 3, 4, 5))],
                         ids=["2d", "batched", "weight", "4d", "broadcast"])
def test_matmul(a, b, out):
    check(model_of([helper.make_node("MatMul", ["A", "B"], ["Y"])], [("A", a), ("B", b)], [("Y", out)]))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("bshape", [(2, 3, 4, 5), (3, 1, 1), (5,), (1, 3, 1, 5)], ids=["same", "channel", "last", "mixed"])
def test_binary_broadcasting(op, bshape):
    b = rand(*bshape) + (3.0 if op == "Div" else 0.0)
    check(single(op, [("X", (2, 3, 4, 5))], (2, 3, 4, 5), [("B", b)]))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary_with_a_scalar_on_either_side(op):
    c = np.array(1.5, np.float32)
    for order in (["X", "c"], ["c", "X"]):
        m = model_of([helper.make_node(op, order, ["Y"])], [("X", (3, 4))], [("Y", (3, 4))], [("c", c)])
        program = check(m)
        assert program.ops[0].kind == "comprehension" and "1.5" in program.source   # inlined, not a param


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Sqrt", "Abs", "Neg", "Reciprocal"])
def test_unary(op):
    m = single(op, [("X", (2, 3, 4))], (2, 3, 4))
    if op in ("Sqrt", "Reciprocal"):   # positive inputs
        m = model_of([helper.make_node("Abs", ["X"], ["P"]), helper.make_node("Add", ["P", "one"], ["Q"]),
                      helper.make_node(op, ["Q"], ["Y"])], [("X", (2, 3, 4))], [("Y", (2, 3, 4))],
                     [("one", np.array(1.0, np.float32))])
    check(m, tol=1e-5)


@pytest.mark.parametrize("lo,hi,kind", [(0.0, 6.0, "relu6"), (-1.0, 1.0, "comprehension"), (0.0, None, "relu")])
def test_clip(lo, hi, kind):
    inits = [("lo", np.array(lo, np.float32))] + ([("hi", np.array(hi, np.float32))] if hi is not None else [])
    node = helper.make_node("Clip", ["X", "lo"] + (["hi"] if hi is not None else []), ["Y"])
    program = check(model_of([node], [("X", (2, 8))], [("Y", (2, 8))], inits))
    assert program.ops[0].kind == kind


@pytest.mark.parametrize("exponent", [2.0, 0.5, 3.0])
def test_pow(exponent):
    nodes = [helper.make_node("Abs", ["X"], ["A"]), helper.make_node("Pow", ["A", "e"], ["Y"])]
    check(model_of(nodes, [("X", (3, 4))], [("Y", (3, 4))], [("e", np.array(exponent, np.float32))]))


@pytest.mark.parametrize("axis", [-1, 1])
def test_softmax(axis):
    check(single("Softmax", [("X", (2, 5, 7))], (2, 5, 7), axis=axis))


def decomposed_layernorm(g, b):
    """LayerNorm over the last axis of X as an opset-13 export writes it, into Y: (nodes, inits)."""
    nodes = [helper.make_node("ReduceMean", ["X"], ["mu"], axes=[-1]),
             helper.make_node("Sub", ["X", "mu"], ["xc"]),
             helper.make_node("Pow", ["xc", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
             helper.make_node("Add", ["var", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["xc", "sd"], ["nx"]),
             helper.make_node("Mul", ["nx", "g"], ["sc"]),
             helper.make_node("Add", ["sc", "b"], ["Y"])]
    return nodes, [("two", np.array(2.0, np.float32)), ("eps", np.array(1e-5, np.float32)), ("g", g), ("b", b)]


def test_layernorm_op_and_its_decomposed_form():
    d = 8
    g, b = rand(d), rand(d)
    m = single("LayerNormalization", [("X", (2, 3, d))], (2, 3, d), [("g", g), ("b", b)], epsilon=1e-5)
    assert [op.kind for op in check(m).ops] == ["layernorm"]
    nodes, inits = decomposed_layernorm(g, b)
    check(model_of(nodes, [("X", (2, 3, d))], [("Y", (2, 3, d))], inits, opset=13))


def test_a_decomposed_layernorm_runs_as_one_kernel_on_chip():
    """An opset-13 export's LayerNormalization (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt,
    Div, Mul, Add) is five kernels after epilogue fusion; `row_normalisation` makes them one,
    each row tile finished on chip, verified, and the result still matches onnxruntime."""
    d = 256
    g, b = rand(d), rand(d)
    nodes, inits = decomposed_layernorm(g, b)
    model = model_of(nodes, [("X", (1, 64, d))], [("Y", (1, 64, d))], inits, opset=13)
    check(model)
    res = autocomp.optimize(model, target="npu", tune=0)
    r = res.report
    assert r["verified"] and len(r["kernels"]) == 1 and r["speedup_vs_library"] > 2
    (entry,) = [e for e in r["rules"] if e["rule"] == "row_normalisation" and e["applied"]]
    assert entry["ops"] == ["mu", "xc", "sq", "var", "sd", "nx", "sc", "Y"]


def test_batchnorm_is_folded_to_scale_and_shift():
    c = 4
    inits = [("s", rand(c)), ("b", rand(c)), ("m", rand(c)), ("v", np.abs(rand(c)) + 0.5)]
    program = check(single("BatchNormalization", [("X", (2, c, 3, 3))], (2, c, 3, 3), inits, epsilon=1e-3))
    assert [op.kind for op in program.ops] == ["batchnorm"]


@pytest.mark.parametrize("op,attrs,out", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (1, 3, 4, 4)),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}, (1, 3, 4, 4)),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}, (1, 3, 4, 4)),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}, (1, 3, 8, 8)),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "count_include_pad": 1},
     (1, 3, 8, 8)),
], ids=["max-pad", "max", "avg", "avg-exclude-pad", "avg-include-pad"])
def test_pooling(op, attrs, out):
    check(single(op, [("X", (1, 3, 8, 8))], out, **attrs))


def test_global_average_pool_keeps_rank_four_and_flatten_fuses_it():
    check(single("GlobalAveragePool", [("X", (2, 3, 4, 4))], (2, 3, 1, 1)))
    nodes = [helper.make_node("GlobalAveragePool", ["X"], ["P"]), helper.make_node("Flatten", ["P"], ["Y"], axis=1)]
    program = check(model_of(nodes, [("X", (2, 3, 4, 4))], [("Y", (2, 3))]))
    assert [op.kind for op in program.ops] == ["global_avgpool"]


def test_reshape_flatten_transpose_concat_identity():
    nodes = [helper.make_node("Reshape", ["X", "shape"], ["R"]),             # [2, 12, 5] -> [2, 3, 4, 5]
             helper.make_node("Transpose", ["R"], ["T"], perm=[0, 2, 1, 3]),
             helper.make_node("Identity", ["T"], ["I"]),
             helper.make_node("Concat", ["I", "Z"], ["C"], axis=2),
             helper.make_node("Flatten", ["C"], ["Y"], axis=2)]
    m = model_of(nodes, [("X", (2, 12, 5)), ("Z", (2, 4, 2, 5))], [("Y", (2, 4, 25))][:0] + [("Y", (8, 25))],
                 [("shape", np.array([2, 3, 4, -1], np.int64))])
    program = check(m)
    assert {"reshape", "transpose", "concat"} <= {op.kind for op in program.ops}


def test_shape_subgraphs_are_folded():
    """Shape → Gather → Unsqueeze → Concat → Reshape, as torch writes x.view(x.size(0), -1)."""
    nodes = [helper.make_node("Shape", ["X"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.array(2.0, np.float32))),
             helper.make_node("Reshape", ["X", "shape"], ["R"]),
             helper.make_node("Mul", ["R", "k"], ["Y"])]
    inits = [("zero", np.array(0, np.int64)), ("axes", np.array([0], np.int64)), ("minus1", np.array([-1], np.int64))]
    program = check(model_of(nodes, [("X", (2, 3, 4))], [("Y", (2, 12))], inits))
    assert [op.kind for op in program.ops] == ["reshape", "comprehension"]


def test_gelu_pattern_becomes_one_gelu_op():
    nodes = [helper.make_node("Div", ["X", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["X", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["Y"])]
    inits = [("sqrt2", np.array(math.sqrt(2), np.float32)), ("one", np.array(1.0, np.float32)),
             ("half", np.array(0.5, np.float32))]
    program = check(model_of(nodes, [("X", (4, 16))], [("Y", (4, 16))], inits), tol=1e-5)
    assert [str(op) for op in program.ops] == ["Y = gelu(X, approximate=none)"]
    check(single("Gelu", [("X", (4, 16))], (4, 16), opset=20), tol=1e-5)


@pytest.mark.parametrize("half_first", [True, False])
def test_gpt2_tanh_gelu_pattern_becomes_one_gelu_op(half_first):
    """GPT-2's GELU as torch exports it, 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))): one
    `gelu` (the DSL's tanh form), matching onnxruntime; x*0.5 first, or the 0.5 last."""
    c = lambda name, v: (name, np.array(v, np.float32))  # noqa: E731
    inits = [c("half", 0.5), c("three", 3.0), c("k", 0.044715), c("s", math.sqrt(2 / math.pi)), c("one", 1.0)]
    core = [helper.make_node("Pow", ["X", "three"], ["p"]), helper.make_node("Mul", ["k", "p"], ["m"]),
            helper.make_node("Add", ["X", "m"], ["a"]), helper.make_node("Mul", ["a", "s"], ["t_in"]),
            helper.make_node("Tanh", ["t_in"], ["t"]), helper.make_node("Add", ["one", "t"], ["a1"])]
    if half_first:
        nodes = [helper.make_node("Mul", ["X", "half"], ["hx"])] + core + [helper.make_node("Mul", ["hx", "a1"], ["Y"])]
    else:
        nodes = core + [helper.make_node("Mul", ["X", "a1"], ["xm"]), helper.make_node("Mul", ["xm", "half"], ["Y"])]
    program = check(model_of(nodes, [("X", (4, 16))], [("Y", (4, 16))], inits), tol=1e-5)
    assert [str(op) for op in program.ops] == ["Y = gelu(X, approximate=tanh)"]


def test_slice_and_gather_of_computed_tensors():
    nodes = [helper.make_node("Relu", ["X"], ["R"]),
             helper.make_node("Slice", ["R", "st", "en", "ax", "sp"], ["S"]),
             helper.make_node("Gather", ["S", "idx"], ["Y"], axis=1)]
    inits = [("st", np.array([1, 0], np.int64)), ("en", np.array([7, 3], np.int64)), ("ax", np.array([2, 1], np.int64)),
             ("sp", np.array([2, 1], np.int64)), ("idx", np.array(1, np.int64))]
    check(model_of(nodes, [("X", (2, 4, 8))], [("Y", (2, 3))], inits))


# --------------------------------------------------------------------------- small networks


def resnet_block(c=8, hw=8):
    """Conv-BN(folded)-ReLU → Conv → + skip → ReLU, then GAP → Flatten → Gemm (torch's layout)."""
    nodes = [helper.make_node("Conv", ["X", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c2", "s", "b", "m", "v"], ["bn"]),
             helper.make_node("Add", ["bn", "X"], ["sum"]),
             helper.make_node("Relu", ["sum"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["gap"]),
             helper.make_node("Flatten", ["gap"], ["flat"]),
             helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1)]
    inits = [("W1", rand(c, c, 3, 3, scale=0.2)), ("B1", rand(c)), ("W2", rand(c, c, 3, 3, scale=0.2)),
             ("s", rand(c)), ("b", rand(c)), ("m", rand(c)), ("v", np.abs(rand(c)) + 0.5),
             ("fc_w", rand(10, c)), ("fc_b", rand(10))]
    return model_of(nodes, [("X", (1, c, hw, hw))], [("logits", (1, 10))], inits)


def inverted_residual(c=8, expand=4, hw=8):
    """MobileNetV2: 1x1 expand → ReLU6 (Clip) → 3x3 depthwise → ReLU6 → 1x1 project → + skip."""
    e = c * expand
    nodes = [helper.make_node("Conv", ["X", "W1", "B1"], ["c1"]),
             helper.make_node("Clip", ["c1", "zero", "six"], ["r1"]),
             helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], group=e, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c2", "zero", "six"], ["r2"]),
             helper.make_node("Conv", ["r2", "W3", "B3"], ["c3"]),
             helper.make_node("Add", ["X", "c3"], ["Y"])]
    inits = [("W1", rand(e, c, 1, 1, scale=0.3)), ("B1", rand(e)), ("W2", rand(e, 1, 3, 3, scale=0.3)), ("B2", rand(e)),
             ("W3", rand(c, e, 1, 1, scale=0.3)), ("B3", rand(c)),
             ("zero", np.array(0.0, np.float32)), ("six", np.array(6.0, np.float32))]
    return model_of(nodes, [("X", (1, c, hw, hw))], [("Y", (1, c, hw, hw))], inits)


def bert_layer(seq=8, hidden=32, heads=4, ff=64):
    """A BERT encoder layer as torch exports it: Q/K/V MatMul+Add, Reshape/Transpose to
    heads, scaled QK^T, Softmax, context, output projection, Add & LayerNorm, GELU (erf) FFN."""
    dh = hidden // heads
    nodes, inits = [], []

    def const(name, value):
        inits.append((name, np.asarray(value)))
        return name

    def linear(x, name, n_in, n_out):
        nodes.append(helper.make_node("MatMul", [x, const(name + "_w", rand(n_in, n_out, scale=0.2))], [name + "_mm"]))
        nodes.append(helper.make_node("Add", [name + "_mm", const(name + "_b", rand(n_out))], [name]))
        return name
    heads_shape = const("heads_shape", np.array([1, seq, heads, dh], np.int64))
    for p in ("q", "k", "v"):
        linear("X", p, hidden, hidden)
        nodes.append(helper.make_node("Reshape", [p, heads_shape], [p + "_h"]))
        perm = [0, 2, 3, 1] if p == "k" else [0, 2, 1, 3]
        nodes.append(helper.make_node("Transpose", [p + "_h"], [p + "_t"], perm=perm))
    nodes += [helper.make_node("MatMul", ["q_t", "k_t"], ["scores"]),
              helper.make_node("Div", ["scores", const("sqrt_dh", np.array(math.sqrt(dh), np.float32))], ["scaled"]),
              helper.make_node("Add", ["scaled", const("mask", rand(1, 1, 1, seq))], ["masked"]),
              helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
              helper.make_node("MatMul", ["probs", "v_t"], ["ctx"]),
              helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ctx_t", const("hidden_shape", np.array([1, seq, hidden], np.int64))],
                               ["ctx_2"])]
    linear("ctx_2", "attn_out", hidden, hidden)
    nodes += [helper.make_node("Add", ["attn_out", "X"], ["res1"]),
              helper.make_node("LayerNormalization", ["res1", const("ln1_g", rand(hidden)), const("ln1_b", rand(hidden))],
                               ["ln1"], epsilon=1e-12)]
    linear("ln1", "ff1", hidden, ff)
    nodes += [helper.make_node("Div", ["ff1", const("sqrt2", np.array(math.sqrt(2), np.float32))], ["g_d"]),
              helper.make_node("Erf", ["g_d"], ["g_e"]),
              helper.make_node("Add", ["g_e", const("one", np.array(1.0, np.float32))], ["g_a"]),
              helper.make_node("Mul", ["ff1", "g_a"], ["g_m"]),
              helper.make_node("Mul", ["g_m", const("half", np.array(0.5, np.float32))], ["gelu"])]
    linear("gelu", "ff2", ff, hidden)
    nodes += [helper.make_node("Add", ["ff2", "ln1"], ["res2"]),
              helper.make_node("LayerNormalization", ["res2", const("ln2_g", rand(hidden)), const("ln2_b", rand(hidden))],
                               ["Y"], epsilon=1e-12)]
    return model_of(nodes, [("X", (1, seq, hidden))], [("Y", (1, seq, hidden))], inits)


def gpt2_block(seq=8, hidden=32, heads=4):
    """A GPT-2 block as torch.onnx exports it at opset 13: layernorms decomposed (ReduceMean,
    Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add), c_attn one MatMul then Split, a causal
    mask by Where on a constant, the tanh GELU written out, residual adds."""
    dh = hidden // heads
    nodes, inits = [], []

    def const(name, value):
        inits.append((name, np.asarray(value)))
        return name

    def node(op, inputs, out, **attrs):
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def ln(x, p):
        mu = node("ReduceMean", [x], p + "_mu", axes=[-1])
        xc = node("Sub", [x, mu], p + "_xc")
        var = node("ReduceMean", [node("Pow", [xc, const(p + "_two", np.array(2.0, np.float32))], p + "_sq")],
                   p + "_var", axes=[-1])
        sd = node("Sqrt", [node("Add", [var, const(p + "_eps", np.array(1e-5, np.float32))], p + "_ve")], p + "_sd")
        scaled = node("Mul", [node("Div", [xc, sd], p + "_n"), const(p + "_g", rand(hidden))], p + "_s")
        return node("Add", [scaled, const(p + "_b", rand(hidden))], p)

    def linear(x, name, n_in, n_out):
        mm = node("MatMul", [x, const(name + "_w", rand(n_in, n_out, scale=0.2))], name + "_mm")
        return node("Add", [mm, const(name + "_b", rand(n_out))], name)

    qkv = linear(ln("X", "ln1"), "qkv", hidden, 3 * hidden)
    nodes.append(helper.make_node("Split", [qkv, const("split", np.array([hidden] * 3, np.int64))],
                                  ["q", "k", "v"], axis=2))
    heads_shape = const("heads_shape", np.array([1, seq, heads, dh], np.int64))
    for p in ("q", "k", "v"):
        node("Transpose", [node("Reshape", [p, heads_shape], p + "_h")], p + "_t",
             perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])
    scores = node("Div", [node("MatMul", ["q_t", "k_t"], "scores"),
                          const("sqrt_dh", np.array(math.sqrt(dh), np.float32))], "scaled")
    causal = const("causal", np.tril(np.ones((seq, seq), bool)).reshape(1, 1, seq, seq))
    masked = node("Where", [causal, scores, const("neg", np.array(-1e4, np.float32))], "masked")
    ctx = node("MatMul", [node("Softmax", [masked], "probs", axis=-1), "v_t"], "ctx")
    ctx = node("Reshape", [node("Transpose", [ctx], "ctx_t", perm=[0, 2, 1, 3]),
                           const("hidden_shape", np.array([1, seq, hidden], np.int64))], "ctx_2")
    x = node("Add", [linear(ctx, "attn_out", hidden, hidden), "X"], "res1")
    h = linear(ln(x, "ln2"), "fc", hidden, 4 * hidden)
    c = {k: const(k, np.array(v, np.float32)) for k, v in
         (("half", 0.5), ("three", 3.0), ("k3", 0.044715), ("s2pi", math.sqrt(2 / math.pi)), ("one", 1.0))}
    inner = node("Mul", [node("Add", [h, node("Mul", [node("Pow", [h, c["three"]], "g_p"), c["k3"]], "g_m")], "g_a"),
                         c["s2pi"]], "g_i")
    gelu = node("Mul", [node("Mul", [h, c["half"]], "g_h"),
                        node("Add", [node("Tanh", [inner], "g_t"), c["one"]], "g_1")], "gelu")
    node("Add", [linear(gelu, "proj", 4 * hidden, hidden), x], "Y")
    return model_of(nodes, [("X", (1, seq, hidden))], [("Y", (1, seq, hidden))], inits, opset=13)


@pytest.mark.parametrize("build", [resnet_block, inverted_residual, bert_layer, gpt2_block],
                         ids=["resnet", "mobilenetv2", "bert", "gpt2"])
def test_model_family_matches_onnxruntime(build):
    program = check(build(), tol=3e-4)
    assert program.param_values and all(t.role != "param" or t.name in program.param_values for t in program.tensors)


def test_gpt2_block_reads_as_its_layers():
    """It optimises and verifies; each decomposed layernorm is one kernel on chip, the GELU
    one op."""
    program = from_onnx(gpt2_block())
    assert sum(op.kind == "gelu" for op in program.ops) == 1 and not any(op.kind == "tanh" for op in program.ops)
    res = autocomp.optimize(program, target="tpu", tune=0)
    assert res.verified and res.report["speedup_vs_naive"] >= 1.0
    norms = [k for k in res.after.kernels if "ln1_mu" in k.ops or "ln2_mu" in k.ops]
    assert len(norms) == 2 and all({"ln1_mu", "ln1"} <= set(k.ops) or {"ln2_mu", "ln2"} <= set(k.ops) for k in norms)


def test_resnet_block_reads_like_the_model():
    text = from_onnx(resnet_block()).source
    assert "c1_conv = conv2d(X, W1, stride=1, padding=1)" in text
    assert "r1 = relu(c1)" in text and "batchnorm(c2, bn_scale, bn_shift)" in text
    assert "flat = global_avgpool(r2)" in text or "gap_pool = global_avgpool(r2)" in text
    assert "logits = linear(" in text and "output logits" in text


@pytest.mark.parametrize("build", [resnet_block, bert_layer], ids=["resnet", "bert"])
def test_imported_model_optimises_and_verifies(build):
    res = autocomp.optimize(from_onnx(build()), target="tpu", tune=0)
    assert res.verified and res.report["speedup_vs_naive"] >= 1.0


def test_imported_text_reparses_to_the_same_program(tmp_path):
    program = from_onnx(bert_layer())
    again = autocomp.dsl.parse(program.source) if hasattr(autocomp, "dsl") else None
    from autocomp_jupyter.dsl import parse

    again = parse(program.source)
    assert again == program


# --------------------------------------------------------------------------- errors


def test_unsupported_ops_are_refused_once_each_with_its_nodes_and_alternatives():
    """Every unsupported op of the model in one diagnostic: op type, each node with its inputs,
    a close supported op or what to do instead; a refused node's readers are not reported."""
    nodes = [helper.make_node("Relu", ["X"], ["r"]),
             helper.make_node("Hardmax", ["r"], ["h"], name="my_hardmax"),
             helper.make_node("Hardmax", ["X"], ["h2"], name="second_hardmax"),
             helper.make_node("LpNormalization", ["X"], ["l"], name="lp"),
             helper.make_node("Add", ["h", "l"], ["s"], name="reader"),
             helper.make_node("Relu", ["X"], ["Y"], name="fine")]
    m = model_of(nodes, [("X", (3, 4))], [("Y", (3, 4)), ("s", (3, 4)), ("h2", (3, 4))])
    with pytest.raises(UserError) as err:
        from_onnx(m)
    assert len(err.value.diagnostics) == 1
    text = err.value.format()
    assert "2 op types the importer does not support" in text
    assert "Hardmax: 2 nodes 'my_hardmax' (inputs: 'r' [3, 4]), 'second_hardmax' (inputs: 'X' [3, 4])" in text
    assert "-- ArgMax, then Equal against a Range constant" in text
    assert "LpNormalization: node 'lp' (inputs: 'X' [3, 4]) -- ReduceL2 (or ReduceL1) then Div" in text
    assert "'reader'" not in text and "'fine'" not in text


def test_symbolic_input_dimension_needs_a_shape():
    graph = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"])], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UserError, match="symbolic dimensions \\(batch\\)"):
        from_onnx(m)
    assert from_onnx(m, input_shapes={"X": [3, 4]}).tensor("X").shape == (3, 4)


def test_not_an_onnx_file_is_a_user_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01not a model")
    with pytest.raises(UserError, match="is not an ONNX model"):
        from_onnx(bad)
    with pytest.raises(UserError, match="no such file"):
        from_onnx(tmp_path / "missing.onnx")


# --------------------------------------------------------------------------- CLI, optimize(), the magic


def test_cli_import_then_check_runs_with_given_inputs_and_saves_outputs(tmp_path, capsys):
    from autocomp_jupyter.cli import main

    model = resnet_block()
    path = tmp_path / "block.onnx"
    onnx.save(model, str(path))
    x = rand(1, 8, 8, 8)
    np.savez(tmp_path / "x.npz", X=x)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]

    assert main(["check", str(path), "--run", "--inputs", str(tmp_path / "x.npz"), "--save", str(tmp_path / "y.npz")]) == 0
    got = np.load(tmp_path / "y.npz")["logits"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)

    acir = tmp_path / "block.acir"
    assert main(["import", str(path), "-o", str(acir)]) == 0
    assert acir.read_text().startswith("# imported from block.onnx")
    weights = tmp_path / "block.params.npz"
    assert main(["check", str(acir), "--run", "--inputs", str(weights), "--inputs", str(tmp_path / "x.npz"),
                 "--save", str(tmp_path / "y2.npz")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "y2.npz")["logits"], expected, rtol=1e-4, atol=1e-4)
    capsys.readouterr()
    assert main(["check", str(acir), "--inputs", str(weights)]) == 2          # --inputs without --run
    assert "--inputs and --save need --run" in capsys.readouterr().err


def test_cli_import_errors_exit_2_without_traceback(tmp_path, capsys):
    from autocomp_jupyter.cli import main

    nodes = [helper.make_node("Hardmax", ["X"], ["Y"], name="hm")]
    path = tmp_path / "bad.onnx"
    onnx.save(model_of(nodes, [("X", (3, 4))], [("Y", (3, 4))]), str(path))
    assert main(["import", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Hardmax: node 'hm' (inputs: 'X' [3, 4])" in err and "Traceback" not in err


def test_optimize_and_the_magic_take_an_onnx_path(tmp_path):
    path = tmp_path / "mb.onnx"
    onnx.save(inverted_residual(), str(path))
    res = autocomp.optimize(str(path), target="npu", tune=0)
    assert res.verified and res.program.param_values
    IPython = pytest.importorskip("IPython")
    from IPython.testing.globalipapp import get_ipython

    ip = get_ipython()
    ip.run_line_magic("load_ext", "autocomp_jupyter")
    ip.run_cell_magic("autocomp", "--target npu --tune 0 --static --out r", str(path))
    assert ip.user_ns["r"].verified and ip.user_ns["r"].program.param_values


# --------------------------------------------------------------------------- the new library ops end to end


NEW_OPS = """
input X: f32[2, 6, 4, 4]
input Y: f32[2, 3, 4, 4]
param W: f32[8, 9, 3, 3]
param P: f32[16]
C = concat(X, Y, axis=1)
K = conv2d(C, W, padding=1)
R = relu(K)
A = flatten(R)
B = reshape(A, shape=[2, 8, 16])
D = erf(B)
E = gelu(D, approximate=none)
F = div(E, P)
M = reshape(E, shape=[2, 2, 4, 16])
output F, M
"""


def test_new_library_ops_optimise_verify_and_their_c_matches_the_interpreter():
    import shutil

    from autocomp_jupyter import host
    from autocomp_jupyter.dsl import parse

    program = parse(NEW_OPS)
    assert {op.kind for op in program.ops} >= {"concat", "flatten", "reshape", "erf", "gelu", "div"}
    assert autocomp.optimize(program, target="tpu", tune=0).verified
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        pytest.skip("no C compiler")
    res = autocomp.optimize(program, target="host", tune=0)
    assert res.verified
    report = host.measure_plan(res.after, repeats=1, threads=1)
    assert report["matches_interpreter"], report["reason"]


def test_reshape_that_is_not_affine_is_an_error_with_a_hint():
    from autocomp_jupyter.dsl import parse

    with pytest.raises(UserError, match="not affine") as err:
        parse("input X: f32[2, 3]\nY = reshape(X, shape=[3, 2])\n")
    assert "common refinement" in err.value.format()
    with pytest.raises(UserError, match="cannot reshape"):
        parse("input X: f32[2, 3]\nY = reshape(X, shape=[4, 2])\n")


def test_a_cnn_tail_as_torchs_default_exporter_writes_it_imports_and_verifies_tile_by_tile():
    # torch.onnx.export(dynamo=True), torch's default since 2.9: opset 18, the global pool
    # as ReduceMean with its axes as an input, the flatten as a Reshape to a literal shape
    # (96 channels: the program's twin cannot shrink them).
    nodes = [helper.make_node("Conv", ["X", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("ReduceMean", ["r", "axes"], ["m"], keepdims=1),
             helper.make_node("Reshape", ["m", "shape"], ["v"]),
             helper.make_node("Gemm", ["v", "fw", "fb"], ["Y"], transB=1)]
    inits = [("w", rand(96, 8, 3, 3, scale=0.2)), ("b", rand(96)), ("axes", np.array([2, 3], np.int64)),
             ("shape", np.array([1, 96], np.int64)), ("fw", rand(10, 96)), ("fb", rand(10))]
    program = check(model_of(nodes, [("X", (1, 8, 40, 40))], [("Y", (1, 10))], inits, opset=18))
    res = autocomp.optimize(program, target="tpu", tune=0)
    checks = res.report["verification"]
    assert res.report["verified"] is True
    # Every kernel ran tile by tile on a small twin: none rests on isl's verdict alone.
    assert checks["isl_only"] == [] and checks["twin_max_extent"] <= 64


def test_two_channel_shuffles_in_a_row_import():
    """A reshape of a view that is affine only through that view (the fuzzer's two channel
    shuffles in a row; torchvision's MaxViT-T) writes the view out and imports."""
    import onnxruntime as ort

    model = onnx.load(Path(__file__).parent / "fuzz_repros" / "onnx_two_channel_shuffles_refused_not_affine.onnx")
    program = from_onnx(model)
    initialized = {i.name for i in model.graph.initializer}
    feeds = {i.name: np.random.default_rng(0).standard_normal(
        [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
        for i in model.graph.input if i.name not in initialized}
    expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    inputs = {**interp.random_inputs(program), **program.param_values, **{k: v.astype(float) for k, v in feeds.items()}}
    np.testing.assert_allclose(interp.run(program, inputs)[program.outputs[0]].reshape(expected.shape), expected,
                               rtol=1e-5, atol=1e-6)


def test_a_reshape_merged_then_split_another_way_imports():
    """[.., 8, 7, ..] -> [.., 7, 8, ..] (MaxViT's window partition): 8 x 7 merged to 56 and split
    as 7 x 8, each step affine; and BERT's constant GatherElements of token type ids folds."""
    import onnxruntime as ort

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 7, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 7, 8, 3])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [1, 6])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 6])
    shape = numpy_helper.from_array(np.array([2, 7, 8, 3], np.int64), "shape")
    data = numpy_helper.from_array(np.arange(12, dtype=np.int64).reshape(1, 12), "data")
    idx = numpy_helper.from_array(np.array([[0, 1, 2, 3, 4, -1]], np.int64), "idx")
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["y"]),
                               helper.make_node("GatherElements", ["data", "idx"], ["g"], axis=1),
                               helper.make_node("Cast", ["g"], ["gf"], to=TensorProto.FLOAT),
                               helper.make_node("Add", ["w", "gf"], ["z"])],
                              "g", [x, w], [y, z], [shape, data, idx])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    program = from_onnx(model)
    feed = np.random.default_rng(0).standard_normal((2, 8, 7, 3)).astype(np.float32)
    feed_w = np.zeros((1, 6), np.float32)
    want_y, want_z = ort.InferenceSession(model.SerializeToString()).run(None, {"x": feed, "w": feed_w})
    env = interp.run(program, {**interp.random_inputs(program), **program.param_values,
                               program.inputs[0].name: feed.astype(float), program.inputs[1].name: feed_w.astype(float)})
    np.testing.assert_allclose(env[program.outputs[0]], want_y, rtol=1e-6)
    np.testing.assert_array_equal(env[program.outputs[1]].reshape(want_z.shape), want_z)
