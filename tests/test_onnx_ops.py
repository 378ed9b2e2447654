"""ONNX import, the wider op set: each op alone matches onnxruntime, across op versions.

Single-node models built with onnx.helper (no downloads, no torch); every output is compared
with onnxruntime on the same inputs (integer and bool inputs get small valid values).
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autocomp_jupyter.errors import UserError  # noqa: E402
from autocomp_jupyter.onnx_import import from_onnx, run_with_values  # noqa: E402

RNG = np.random.default_rng(1)
F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def model(nodes, inputs, outputs, inits=(), opset=17):
    """`inputs`/`outputs`: (name, shape) or (name, shape, elem type) tuples."""
    def info(spec):
        name, shape, *kind = spec
        if shape is None:   # left to shape inference
            return helper.make_tensor_value_info(name, kind[0] if kind else F, [])
        return helper.make_tensor_value_info(name, kind[0] if kind else F, shape)
    graph = helper.make_graph(nodes, "g", [info(i) for i in inputs], [info(o) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8 if opset < 21 else 10
    if any(o[1] is None for o in outputs):
        del m.graph.output[:]
        inferred = onnx.shape_inference.infer_shapes(m)
        m.graph.output.extend(v for v in inferred.graph.value_info if v.name in {o[0] for o in outputs})
    onnx.checker.check_model(m)
    return m


def feeds_for(m, positive=False):
    out = {}
    for i in m.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        kind = i.type.tensor_type.elem_type
        if kind == I64:
            out[i.name] = RNG.integers(-3, 4, size=shape).astype(np.int64)
        elif kind == BOOL:
            out[i.name] = RNG.integers(0, 2, size=shape).astype(bool)
        else:
            x = rand(*shape)
            out[i.name] = np.abs(x) + 0.1 if positive else x
    return out


def check(m, feeds=None, tol=2e-4, positive=False):
    """Import `m`, run it here and in onnxruntime on the same inputs, compare every output."""
    program = from_onnx(m)
    feeds = feeds if feeds is not None else feeds_for(m, positive)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    names = [t.name for t in program.inputs if t.role == "input"]
    got = run_with_values(program, dict(zip(names, feeds.values())))
    for out, expected in zip(program.outputs, want):
        have = got[out].reshape(expected.shape) if got[out].size == expected.size else got[out]
        assert have.shape == expected.shape, (out, have.shape, expected.shape)
        expected = expected.astype(np.float64)
        err = float(np.abs(have - expected).max(initial=0.0))
        assert err <= tol * max(1.0, float(np.abs(expected).max(initial=0.0))), f"{out}: error {err:g}\n{program.source}"
    return program


def one(op, shapes, out_shape, inits=(), opset=17, n_out=1, **attrs):
    ins = [(f"X{k}", s) for k, s in enumerate(shapes)]
    outs = [("Y", out_shape)] if n_out == 1 else [(f"Y{k}", s) for k, s in enumerate(out_shape)]
    node = helper.make_node(op, [n for n, _ in ins] + [n for n, _ in inits], [o[0] for o in outs], **attrs)
    return model([node], ins, outs, inits, opset)


# --------------------------------------------------------------------------- elementwise

@pytest.mark.parametrize("op,attrs", [
    ("LeakyRelu", {"alpha": 0.1}), ("Elu", {"alpha": 0.7}), ("Selu", {}), ("Celu", {"alpha": 1.3}),
    ("Softplus", {}), ("Softsign", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSwish", {}),
    ("Mish", {}), ("ThresholdedRelu", {"alpha": 0.2}), ("Shrink", {"lambd": 0.3, "bias": 0.1}), ("Floor", {}),
    ("Ceil", {}), ("Sign", {}),
])
def test_activations(op, attrs):
    opset = 18 if op == "Mish" else 17
    check(one(op, [(2, 3, 4)], (2, 3, 4), opset=opset, **attrs), tol=1e-5)


def test_log_and_pow_with_a_tensor_exponent():
    check(one("Log", [(3, 4)], (3, 4)), positive=True)
    check(one("Pow", [(3, 4), (3, 4)], (3, 4)), positive=True)


@pytest.mark.parametrize("op", ["Sum", "Max", "Min", "Mean"])
def test_variadic_with_broadcasting(op):
    check(one(op, [(2, 3, 4), (3, 1), (4,)], (2, 3, 4)))


@pytest.mark.parametrize("slope", [(1,), (3, 1, 1)], ids=["shared", "per-channel"])
def test_prelu(slope):
    check(one("PRelu", [(2, 3, 4, 5)], (2, 3, 4, 5), [("s", rand(*slope))]))


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
def test_comparisons_feed_where(op):
    nodes = [helper.make_node(op, ["A", "B"], ["c"]), helper.make_node("Where", ["c", "A", "B"], ["Y"]),
             helper.make_node("Cast", ["c"], ["Z"], to=F)]
    m = model(nodes, [("A", (3, 4)), ("B", (4,))], [("Y", (3, 4)), ("Z", (3, 4))])
    a = np.round(rand(3, 4)).astype(np.float32)
    check(m, {"A": a, "B": a[1].copy()})


def test_expand_tile_trilu():
    check(one("Expand", [(3, 1)], (2, 3, 4), [("shape", np.array([2, 3, 4], np.int64))]))
    check(one("Tile", [(2, 3)], (4, 9), [("r", np.array([2, 3], np.int64))]))
    for upper in (0, 1):
        check(one("Trilu", [(2, 4, 5)], (2, 4, 5), [("k", np.array(1, np.int64))], upper=upper))


@pytest.mark.parametrize("to", [TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL, TensorProto.FLOAT16])
def test_cast(to):
    x = (rand(3, 5) * 3).astype(np.float32)
    nodes = [helper.make_node("Cast", ["X"], ["c"], to=to), helper.make_node("Cast", ["c"], ["Y"], to=F)]
    check(model(nodes, [("X", (3, 5))], [("Y", (3, 5))]), {"X": x}, tol=1e-3)


# --------------------------------------------------------------------------- layout

@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes(mode):
    pads = np.array([0, 1, 2, 0, 0, 2, 1, 3], np.int64)
    inits = [("p", pads)] + ([("v", np.array(1.5, np.float32))] if mode == "constant" else [])
    check(one("Pad", [(1, 3, 4, 5)], (1, 6, 7, 8), inits, opset=19, mode=mode))


def test_pad_opset2_attributes():
    check(one("Pad", [(1, 2, 3, 3)], (1, 2, 6, 5), opset=9, pads=[0, 0, 1, 2, 0, 0, 2, 0], value=0.5))


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split(opset):
    if opset == 18:
        m = one("Split", [(2, 7)], [(2, 4), (2, 3)], opset=18, n_out=2, axis=1, num_outputs=2)
    elif opset == 13:
        m = one("Split", [(2, 7)], [(2, 2), (2, 5)], [("s", np.array([2, 5], np.int64))], opset=13, n_out=2, axis=1)
    else:
        m = one("Split", [(6, 3)], [(2, 3), (4, 3)], opset=11, n_out=2, axis=0, split=[2, 4])
    check(m)


def test_slice_negative_steps_and_opset1_form():
    inits = [("st", np.array([-1, 4], np.int64)), ("en", np.array([-100, 0], np.int64)),
             ("ax", np.array([1, 2], np.int64)), ("sp", np.array([-1, -2], np.int64))]
    check(one("Slice", [(2, 5, 6)], (2, 5, 2), inits, opset=13))


def test_gather_with_runtime_int64_indices_is_an_embedding():
    table = rand(10, 6)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["Y"], axis=0)]
    m = model(nodes, [("ids", (2, 3), I64)], [("Y", (2, 3, 6))], [("table", table)])
    ids = np.array([[0, 9, 3], [-1, 4, 4]], np.int64)
    check(m, {"ids": ids})
    idx = np.array([[2, 0], [1, 1]], np.int64)           # irregular constant indices, axis 1
    check(one("Gather", [(3, 4)], (3, 2, 2), [("i", idx)], axis=1))


def test_einsum_and_vector_matmul():
    check(one("Einsum", [(2, 3, 4), (2, 4, 5)], (2, 3, 5), equation="bij,bjk->bik"))
    check(one("Einsum", [(3, 4)], (4,), equation="ij->j"))
    check(one("MatMul", [(4,), (2, 4, 3)], (2, 3)))
    check(one("MatMul", [(2, 3, 4), (4,)], (2, 3)))
    check(one("MatMul", [(4,), (4,)], ()))


# --------------------------------------------------------------------------- normalisation, reductions

@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 2), (13, 1), (13, -1)])
def test_softmax_and_logsoftmax_by_version(opset, axis):
    for op in ("Softmax", "LogSoftmax"):
        check(one(op, [(2, 3, 4)], (2, 3, 4), opset=opset, axis=axis))


def test_lrn_instance_group_layer_norm():
    check(one("LRN", [(1, 6, 4, 4)], (1, 6, 4, 4), size=3, alpha=1e-2, beta=0.75, bias=2.0), positive=True)
    check(one("InstanceNormalization", [(2, 3, 4, 5)], (2, 3, 4, 5), [("s", rand(3)), ("b", rand(3))]))
    check(one("GroupNormalization", [(2, 6, 4, 4)], (2, 6, 4, 4), [("s", rand(6)), ("b", rand(6))], opset=21,
              num_groups=3))
    check(one("LayerNormalization", [(2, 3, 4)], (2, 3, 4), [("s", rand(3, 4)), ("b", rand(3, 4))], axis=1))
    check(one("RMSNormalization", [(2, 3, 8)], (2, 3, 8), [("s", rand(8))], opset=23, epsilon=1e-6))


@pytest.mark.parametrize("op", ["ReduceMin", "ReduceMax", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
                                "ReduceLogSumExp", "ReduceMean", "ReduceSum"])
@pytest.mark.parametrize("opset", [13, 18])
def test_reductions_attribute_and_input_axes(op, opset):
    keep = 0
    if opset >= 18 or (op == "ReduceSum" and opset >= 13):
        m = one(op, [(2, 3, 4)], (2, 4), [("axes", np.array([1], np.int64))], opset=opset, keepdims=keep)
    else:
        m = one(op, [(2, 3, 4)], (2, 4), opset=opset, axes=[1], keepdims=keep)
    check(m)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_argmax_with_ties(op, last):
    x = np.round(rand(3, 5)).astype(np.float32)
    m = one(op, [(3, 5)], (3, 1), axis=1, keepdims=1, select_last_index=last)
    m.graph.output[0].type.tensor_type.elem_type = I64
    check(m, {"X0": x})


# --------------------------------------------------------------------------- convolution, pooling, resampling

@pytest.mark.parametrize("x,w,attrs", [
    ((1, 4, 9), (6, 2, 3), {"group": 2, "pads": [1, 2], "strides": [2]}),
    ((1, 2, 5, 6, 5), (3, 2, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1], "dilations": [2, 1, 1]}),
    ((1, 4, 7, 7), (6, 2, 3, 3), {"group": 2, "pads": [0, 1, 1, 0], "strides": [1, 2]}),
    ((1, 3, 7, 7), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
], ids=["1d-grouped", "3d-dilated", "2d-grouped-asymmetric", "same-upper"])
def test_conv_any_rank(x, w, attrs):
    check(one("Conv", [x], None, [("W", rand(*w, scale=0.3)), ("B", rand(w[0]))], **attrs))


@pytest.mark.parametrize("attrs", [
    {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 0]},
    {"strides": [3, 2], "group": 2, "dilations": [1, 2]},
    {"strides": [2, 2], "output_shape": [9, 10]},
], ids=["padded", "grouped-dilated", "output-shape"])
def test_conv_transpose(attrs):
    c_in = 4
    w = rand(c_in, 3, 3, 3, scale=0.3)
    check(one("ConvTranspose", [(1, c_in, 4, 5)], None, [("W", w), ("B", rand(3 * attrs.get("group", 1)))], **attrs))


@pytest.mark.parametrize("op,x,attrs", [
    ("MaxPool", (1, 2, 9), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ("MaxPool", (1, 2, 9, 8), {"kernel_shape": [3, 2], "dilations": [2, 1], "pads": [1, 0, 1, 1]}),
    ("MaxPool", (1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2], "ceil_mode": 1}),
    ("AveragePool", (1, 2, 7, 6), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 1, 1, 0]}),
    ("AveragePool", (1, 2, 7, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                   "count_include_pad": 1, "ceil_mode": 1}),
    ("AveragePool", (1, 2, 6), {"kernel_shape": [2], "strides": [2]}),
], ids=["max-1d", "max-dilated-rect", "max-3d-ceil", "avg-rect-exclude", "avg-include-ceil", "avg-1d"])
def test_pooling_any_rank(op, x, attrs):
    check(one(op, [x], None, opset=19, **attrs))


@pytest.mark.parametrize("attrs,inputs", [
    ({"mode": "nearest"}, {"scales": [1, 1, 2, 2]}),
    ({"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, {"scales": [1, 1, 2, 1.5]}),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, {"sizes": [1, 2, 7, 3]}),
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
     {"scales": [1, 1, 0.5, 3]}),
    ({"mode": "cubic"}, {"scales": [1, 1, 2, 2]}),
], ids=["nearest2x", "linear", "align-corners-sizes", "asymmetric-down", "cubic"])
def test_resize(attrs, inputs):
    if "scales" in inputs:
        inits = [("roi", np.array([], np.float32)), ("scales", np.array(inputs["scales"], np.float32))]
        node = helper.make_node("Resize", ["X", "roi", "scales"], ["Y"], **attrs)
    else:
        inits = [("roi", np.array([], np.float32)), ("scales", np.array([], np.float32)),
                 ("sizes", np.array(inputs["sizes"], np.int64))]
        node = helper.make_node("Resize", ["X", "roi", "scales", "sizes"], ["Y"], **attrs)
    check(model([node], [("X", (1, 2, 4, 6))], [("Y", None)], inits, opset=13))


def test_upsample_opset9():
    node = helper.make_node("Upsample", ["X", "s"], ["Y"], mode="nearest")
    check(model([node], [("X", (1, 2, 3, 3))], [("Y", (1, 2, 6, 9))], [("s", np.array([1, 1, 2, 3], np.float32))], 9))


# --------------------------------------------------------------------------- quantisation

@pytest.mark.parametrize("zp_dtype", [np.int8, np.uint8])
def test_quantize_dequantize_onto_integer_tensors(zp_dtype):
    scale = np.array(0.05, np.float32)
    zp = np.array(3 if zp_dtype == np.int8 else 128, zp_dtype)
    nodes = [helper.make_node("QuantizeLinear", ["X", "s", "zp"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["Y"])]
    m = model(nodes, [("X", (2, 50))], [("Y", (2, 50))], [("s", scale), ("zp", zp)], opset=13)
    x = np.linspace(-9, 9, 100, dtype=np.float32).reshape(2, 50)    # saturates at both ends
    program = check(m, {"X": x}, tol=1e-6)
    assert program.tensor("q").dtype == ("i8" if zp_dtype == np.int8 else "i32")


def test_per_axis_quantisation():
    scale = np.array([0.1, 0.02, 0.5], np.float32)
    zp = np.array([0, 5, -4], np.int8)
    nodes = [helper.make_node("QuantizeLinear", ["X", "s", "zp"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["Y"], axis=1)]
    check(model(nodes, [("X", (2, 3, 4))], [("Y", (2, 3, 4))], [("s", scale), ("zp", zp)], opset=13), tol=1e-6)


# --------------------------------------------------------------------------- old op versions

def test_legacy_broadcast_axis_is_honoured():
    """opset 6: Add(broadcast=1, axis=0) of A[3, 3] and B[3] adds B[i] to row i (numpy would add
    it to column j): the old silent wrong result."""
    a = np.arange(9, dtype=np.float32).reshape(3, 3)
    b = np.array([100, 200, 300], np.float32)
    for axis, want in ((0, a + b[:, None]), (1, a + b[None, :])):
        node = helper.make_node("Add", ["A", "B"], ["Y"], broadcast=1, axis=axis)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", F, (3, 3)),
                                                helper.make_tensor_value_info("B", F, (3,))],
                                  [helper.make_tensor_value_info("Y", F, (3, 3))])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)])
        m.ir_version = 3
        program = from_onnx(m)
        got = run_with_values(program, {"A": a, "B": b})[program.outputs[0]]
        np.testing.assert_array_equal(got, want)
    node = helper.make_node("Mul", ["A", "B"], ["Y"])            # no broadcast=1: shapes must agree
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", F, (3, 3)),
                                            helper.make_tensor_value_info("B", F, (3,))],
                              [helper.make_tensor_value_info("Y", F, (3, 3))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)])
    with pytest.raises(UserError, match="without broadcast=1 needs equal shapes"):
        from_onnx(m)


def test_opset9_unsqueeze_of_weights_folds_and_dropout_opset12_is_the_identity():
    nodes = [helper.make_node("Unsqueeze", ["w"], ["w3"], axes=[1, 2]),
             helper.make_node("Mul", ["X", "w3"], ["m"]),
             helper.make_node("Dropout", ["m"], ["Y"])]
    check(model(nodes, [("X", (1, 4, 2, 2))], [("Y", (1, 4, 2, 2))], [("w", rand(4))], opset=9))
    nodes = [helper.make_node("Dropout", ["X", "r", "t"], ["Y"])]
    check(model(nodes, [("X", (3, 4))], [("Y", (3, 4))],
                [("r", np.array(0.5, np.float32)), ("t", np.array(False))], opset=13))


def test_vgg_flatten_width_is_within_the_limits():
    nodes = [helper.make_node("Reshape", ["X", "s"], ["r"]), helper.make_node("Gemm", ["r", "w"], ["Y"], transB=1)]
    m = model(nodes, [("X", (1, 512, 7, 7))], [("Y", (1, 4))],
              [("s", np.array([1, 25088], np.int64)), ("w", rand(4, 25088, scale=0.01))])
    assert "shape=[1, 25088]" in check(m).source


# --------------------------------------------------------------------------- what transformers' exports add (issue 36)

def test_isnan_isinf():
    x = np.array([[1.0, np.nan, -np.inf], [np.inf, 0.0, -2.5]], np.float32)
    nodes = [helper.make_node("IsNaN", ["X"], ["b"]), helper.make_node("Cast", ["b"], ["Y"], to=F)]
    check(model(nodes, [("X", (2, 3))], [("Y", (2, 3))]), {"X": x})
    for pos, neg in ((1, 1), (1, 0), (0, 1)):
        nodes = [helper.make_node("IsInf", ["X"], ["b"], detect_positive=pos, detect_negative=neg),
                 helper.make_node("Cast", ["b"], ["Y"], to=F)]
        check(model(nodes, [("X", (2, 3))], [("Y", (2, 3))], opset=20), {"X": x})


@pytest.mark.parametrize("attrs", [{}, {"exclusive": 1}, {"reverse": 1}, {"exclusive": 1, "reverse": 1}])
def test_cumsum(attrs):
    check(one("CumSum", [(3, 5, 2)], (3, 5, 2), [("axis", np.array(-2, np.int64))], **attrs))


def test_cumsum_of_an_attention_mask_gives_position_ids():
    """transformers' `position_ids = attention_mask.long().cumsum(-1) - 1` on an int64 mask."""
    nodes = [helper.make_node("CumSum", ["mask", "axis"], ["c"]), helper.make_node("Sub", ["c", "one"], ["p"]),
             helper.make_node("Cast", ["p"], ["Y"], to=F)]
    m = model(nodes, [("mask", (2, 6), I64)], [("Y", (2, 6))],
              [("axis", np.array(1, np.int64)), ("one", np.array(1, np.int64))])
    check(m, {"mask": np.array([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]], np.int64)})


@pytest.mark.parametrize("axis, largest", [(-1, 1), (1, 0), (0, 1)])
def test_topk_values_and_indices(axis, largest):
    x = np.round(rand(4, 6) * 2) / 2                 # ties: the lower index comes first
    nodes = [helper.make_node("TopK", ["X", "k"], ["V", "I"], axis=axis, largest=largest),
             helper.make_node("Cast", ["I"], ["Ic"], to=F)]
    out = [4, 6]
    out[axis] = 3
    m = model(nodes, [("X", (4, 6))], [("V", out), ("Ic", out)], [("k", np.array([3], np.int64))])
    check(m, {"X": x.astype(np.float32)})


def test_topk_router_top2_of_8_experts():
    """Mixtral's router: softmax over 8 experts, the top 2 with their expert ids."""
    nodes = [helper.make_node("Softmax", ["logits"], ["p"], axis=-1),
             helper.make_node("TopK", ["p", "k"], ["w", "ids"], axis=-1)]
    m = model(nodes, [("logits", (5, 8))], [("w", (5, 2)), ("ids", (5, 2), I64)], [("k", np.array([2], np.int64))])
    check(m)


def test_gather_elements_with_negative_indices():
    idx = np.array([[0, -1, 2], [1, 0, -3]], np.int64)
    nodes = [helper.make_node("GatherElements", ["X", "idx"], ["Y"], axis=1)]
    m = model(nodes, [("X", (2, 4)), ("idx", (2, 3), I64)], [("Y", (2, 3))])
    check(m, {"X": rand(2, 4), "idx": idx})
    check(one("GatherElements", [(3, 2)], (2, 2), [("i", np.array([[2, 0], [-1, 1]], np.int64))], axis=0))


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(reduction):
    idx = np.array([[1, 3], [0, 0], [2, -1]], np.int64) if reduction != "none" else \
        np.array([[1, 3], [0, 2], [2, -1]], np.int64)
    nodes = [helper.make_node("ScatterElements", ["X", "idx", "U"], ["Y"], axis=1, reduction=reduction)]
    m = model(nodes, [("X", (3, 4)), ("idx", (3, 2), I64), ("U", (3, 2))], [("Y", (3, 4))], opset=18)
    check(m, {"X": rand(3, 4), "idx": idx, "U": rand(3, 2)})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction):
    idx = np.array([[0, 2], [1, -1], [0, 2]], np.int64)[: 2 if reduction == "none" else 3]
    nodes = [helper.make_node("ScatterND", ["X", "idx", "U"], ["Y"], reduction=reduction)]
    m = model(nodes, [("X", (2, 4, 3)), ("idx", idx.shape, I64), ("U", (len(idx), 3))], [("Y", (2, 4, 3))],
              opset=18)
    check(m, {"X": rand(2, 4, 3), "idx": idx, "U": rand(len(idx), 3)})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max"])
def test_scatter_elements_with_indices_shorter_than_the_data(reduction):
    idx = np.array([[2, 0], [1, 2]], np.int64)            # data [3, 4]: columns 0-1 only
    nodes = [helper.make_node("ScatterElements", ["X", "idx", "U"], ["Y"], axis=0, reduction=reduction)]
    m = model(nodes, [("X", (3, 4)), ("idx", (2, 2), I64), ("U", (2, 2))], [("Y", (3, 4))], opset=18)
    check(m, {"X": rand(3, 4), "idx": idx, "U": rand(2, 2)})


def test_scatter_nd_kv_cache_update():
    """A decode step's cache write as torch exports `cache.index_copy_(2, pos, k)`: ScatterND
    of one row per head at a runtime position."""
    nodes = [helper.make_node("ScatterND", ["cache", "where", "k"], ["Y"])]
    where = np.array([[[0, 0, 5], [0, 1, 5]]], np.int64)          # [1, 2 heads, (b, h, t)]
    m = model(nodes, [("cache", (1, 2, 8, 4)), ("where", (1, 2, 3), I64), ("k", (1, 2, 4))], [("Y", (1, 2, 8, 4))])
    check(m, {"cache": rand(1, 2, 8, 4), "where": where, "k": rand(1, 2, 4)})


def test_a_causal_mask_as_transformers_writes_it():
    """SDPA's mask in a dynamo export: Range → Unsqueeze → LessOrEqual → Where(mask, 0, -inf)
    added to the scores, Softmax, and Where(IsNaN(p), 0, p) for rows masked whole."""
    s = 5
    nodes = [helper.make_node("Range", ["zero", "len", "one"], ["ar"]),
             helper.make_node("Unsqueeze", ["ar", "ax1"], ["cols"]),
             helper.make_node("Unsqueeze", ["ar", "ax0"], ["rows"]),
             helper.make_node("LessOrEqual", ["rows", "cols"], ["keep"]),
             helper.make_node("Where", ["keep", "fzero", "ninf"], ["bias"]),
             helper.make_node("Add", ["scores", "bias"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
             helper.make_node("IsNaN", ["p"], ["bad"]),
             helper.make_node("Where", ["bad", "fzero", "p"], ["Y"])]
    inits = [("zero", np.array(0, np.int64)), ("len", np.array(s, np.int64)), ("one", np.array(1, np.int64)),
             ("ax0", np.array([0], np.int64)), ("ax1", np.array([1], np.int64)),
             ("fzero", np.array(0.0, np.float32)), ("ninf", np.array(-np.inf, np.float32))]
    m = model(nodes, [("scores", (2, s, s))], [("Y", (2, s, s))], inits, opset=18)
    check(m)
    # runtime scores with a row masked whole: NaN from the softmax, 0 after the Where
    nodes = [helper.make_node("Add", ["scores", "bias"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
             helper.make_node("IsNaN", ["p"], ["bad"]),
             helper.make_node("Where", ["bad", "fzero", "p"], ["Y"])]
    bias = np.zeros((s, s), np.float32)
    bias[2] = -np.inf
    m = model(nodes, [("scores", (2, s, s))], [("Y", (2, s, s))],
              [("bias", bias), ("fzero", np.array(0.0, np.float32))], opset=18)
    check(m)


def test_a_runtime_range_is_refused_clearly():
    nodes = [helper.make_node("Range", ["a", "b", "d"], ["Y"], name="rng")]
    m = model(nodes, [("a", (), F), ("b", (), F), ("d", (), F)], [("Y", None)])
    with pytest.raises(UserError, match="ONNX node 'rng'.*start, limit and delta must be constants"):
        from_onnx(m)


# --------------------------------------------------------------------------- opset 23's Attention and RotaryEmbedding

def _attention(q, k, v, extra_inputs=(), outputs=None, inits=(), **attrs):
    names = ["Q", "K", "V"] + [n for n, _, _ in extra_inputs]
    node = helper.make_node("Attention", names, ["Y"] + ([n for n, _ in outputs[1:]] if outputs else []), **attrs)
    ins = [("Q", q), ("K", k), ("V", v)] + [(n, s, t) for n, s, t in extra_inputs if n]
    outs = outputs or [("Y", None)]
    return model([node], ins, outs, inits, opset=23)


@pytest.mark.parametrize("attrs", [{}, {"is_causal": 1}, {"scale": 0.3, "softcap": 2.0}, {"is_causal": 1, "softcap": 5.0}])
def test_attention_4d_grouped_query_heads(attrs):
    check(_attention((2, 4, 5, 8), (2, 2, 6, 8), (2, 2, 6, 3), **attrs))


@pytest.mark.parametrize("kind", [F, BOOL])
def test_attention_with_a_mask(kind):
    mask_shape = (1, 4, 5, 6) if kind == F else (5, 6)
    m = _attention((1, 4, 5, 8), (1, 4, 6, 8), (1, 4, 6, 8), [("M", mask_shape, kind)])
    feeds = feeds_for(m)
    if kind == BOOL:
        feeds["M"][:, 0] = True           # no row masked whole (onnxruntime leaves those NaN)
    check(m, feeds)


def test_attention_3d_with_a_kv_cache_and_causal_offset():
    m = _attention((1, 3, 16), (1, 3, 8), (1, 3, 8), [("", None, F), ("pk", (1, 2, 4, 4), F), ("pv", (1, 2, 4, 4), F)],
                   outputs=[("Y", None), ("present_k", None), ("present_v", None)],
                   is_causal=1, q_num_heads=4, kv_num_heads=2)
    check(m)


@pytest.mark.parametrize("interleaved, rd", [(0, 0), (1, 0), (0, 4), (1, 6)])
def test_rotary_embedding_4d_with_runtime_positions(interleaved, rd):
    attrs = {"interleaved": interleaved} | ({"rotary_embedding_dim": rd} if rd else {})
    half = (rd or 8) // 2
    node = helper.make_node("RotaryEmbedding", ["X", "cos", "sin", "pos"], ["Y"], **attrs)
    angles = np.arange(16)[:, None] * (0.3 ** np.arange(half))[None, :]
    m = model([node], [("X", (2, 3, 5, 8)), ("pos", (2, 5), I64)], [("Y", (2, 3, 5, 8))],
              [("cos", np.cos(angles).astype(np.float32)), ("sin", np.sin(angles).astype(np.float32))], opset=23)
    check(m, {"X": rand(2, 3, 5, 8), "pos": np.array([[0, 1, 2, 3, 4], [7, 8, 9, 10, 15]], np.int64)})


def test_rotary_embedding_3d_with_constant_positions():
    node = helper.make_node("RotaryEmbedding", ["X", "cos", "sin", "pos"], ["Y"], num_heads=2)
    angles = np.arange(6)[:, None] * (0.5 ** np.arange(2))[None, :]
    m = model([node], [("X", (1, 4, 8))], [("Y", (1, 4, 8))],
              [("cos", np.cos(angles).astype(np.float32)), ("sin", np.sin(angles).astype(np.float32)),
               ("pos", np.array([[2, 3, 4, 5]], np.int64))], opset=23)
    check(m)


def _decoder_step(s=8, heads=4, kv_heads=2, d=8):
    """What a transformers export at opset 23 strings together: position ids from the
    attention mask's CumSum, RotaryEmbedding of Q and K, causal GQA Attention, the SDPA NaN
    guard (IsNaN, Where), an output projection and a top-2 router (TopK)."""
    angles = np.arange(32)[:, None] * (0.3 ** np.arange(d // 2))[None, :]
    inits = [("cos", np.cos(angles).astype(np.float32)), ("sin", np.sin(angles).astype(np.float32)),
             ("wo", rand(heads * d, heads * d, scale=0.1)), ("axis", np.array(-1, np.int64)),
             ("one", np.array(1, np.int64)), ("k2", np.array([2], np.int64)), ("zero", np.array(0.0, np.float32))]
    nodes = [helper.make_node("CumSum", ["mask", "axis"], ["cs"]), helper.make_node("Sub", ["cs", "one"], ["pos"]),
             helper.make_node("RotaryEmbedding", ["q", "cos", "sin", "pos"], ["qr"], num_heads=heads),
             helper.make_node("RotaryEmbedding", ["k", "cos", "sin", "pos"], ["kr"], num_heads=kv_heads),
             helper.make_node("Attention", ["qr", "kr", "v"], ["a"], is_causal=1, q_num_heads=heads,
                              kv_num_heads=kv_heads),
             helper.make_node("IsNaN", ["a"], ["bad"]), helper.make_node("Where", ["bad", "zero", "a"], ["a2"]),
             helper.make_node("MatMul", ["a2", "wo"], ["o"]),
             helper.make_node("TopK", ["o", "k2"], ["tv", "ti"], axis=-1)]
    ins = [("mask", (1, s), I64), ("q", (1, s, heads * d)), ("k", (1, s, kv_heads * d)), ("v", (1, s, kv_heads * d))]
    return model(nodes, ins, [("tv", (1, s, 2)), ("ti", (1, s, 2), I64)], inits, opset=23)


def test_a_decoder_step_matches_onnxruntime_and_optimises_verified():
    import autocomp_jupyter as autocomp

    m = _decoder_step()
    feeds = feeds_for(m)
    feeds["mask"] = np.ones((1, 8), np.int64)          # position ids 0 .. 7
    program = check(m, feeds)
    res = autocomp.optimize(program, target="npu", tune=0)
    assert res.report["verified"] and res.report["speedup_vs_library"] >= 1.0


def test_sdpa_masks_from_a_runtime_padding_mask_and_a_causal_range():
    """transformers' SDPA mask at export: the causal part from two Ranges (LessOrEqual), the
    padding part from the runtime attention_mask (Cast to bool, Unsqueeze), And, Expand;
    torch's SDPA lowering then adds Where(mask, 0, -inf), softmaxes, and zeroes the NaN rows
    a left-padded token leaves (Where(IsNaN(p), 0, p)) before the value product."""
    s, d = 6, 4
    nodes = [helper.make_node("Range", ["zero", "len", "one"], ["ar"]),
             helper.make_node("Unsqueeze", ["ar", "ax1"], ["q_idx"]),
             helper.make_node("LessOrEqual", ["ar", "q_idx"], ["causal"]),            # kv <= q: [s, s]
             helper.make_node("Cast", ["attention_mask"], ["pad"], to=BOOL),
             helper.make_node("Unsqueeze", ["pad", "ax12"], ["pad4"]),               # [b, 1, 1, s]
             helper.make_node("And", ["causal", "pad4"], ["keep"]),
             helper.make_node("Expand", ["keep", "shape4"], ["keep4"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["qk"]),
             helper.make_node("Mul", ["qk", "scale"], ["scores"]),
             helper.make_node("Where", ["keep4", "fzero", "ninf"], ["bias"]),
             helper.make_node("Add", ["scores", "bias"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
             helper.make_node("IsNaN", ["p"], ["nan"]),
             helper.make_node("Where", ["nan", "fzero", "p"], ["p2"]),
             helper.make_node("MatMul", ["p2", "v"], ["Y"])]
    inits = [("zero", np.array(0, np.int64)), ("len", np.array(s, np.int64)), ("one", np.array(1, np.int64)),
             ("ax1", np.array([1], np.int64)), ("ax12", np.array([1, 2], np.int64)),
             ("shape4", np.array([2, 1, s, s], np.int64)), ("scale", np.array(0.5, np.float32)),
             ("fzero", np.array(0.0, np.float32)), ("ninf", np.array(-np.inf, np.float32))]
    m = model(nodes, [("attention_mask", (2, s), I64), ("q", (2, 2, s, d)), ("k", (2, 2, s, d)), ("v", (2, 2, s, d))],
              [("Y", (2, 2, s, d))], inits, opset=18)
    feeds = feeds_for(m)
    feeds["attention_mask"] = np.array([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]], np.int64)   # the first left-padded
    check(m, feeds)


def test_pad_with_minus_infinity():
    """An attention bias padded to the keys' length with -inf (Attention's function body)."""
    inits = [("p", np.array([0, 1, 0, 3], np.int64)), ("v", np.array(-np.inf, np.float32))]
    nodes = [helper.make_node("Pad", ["X", "p", "v"], ["b"], mode="constant"),
             helper.make_node("Softmax", ["b"], ["Y"], axis=-1)]
    check(model(nodes, [("X", (3, 4))], [("Y", (3, 8))], inits, opset=18))


def test_gather_elements_with_indices_shorter_than_the_data_off_the_axis():
    idx = np.array([[3, 0, 1], [2, 2, -1]], np.int64)             # data [3, 5]: rows 0-1, columns 0-2
    nodes = [helper.make_node("GatherElements", ["X", "idx"], ["Y"], axis=1)]
    m = model(nodes, [("X", (3, 5)), ("idx", (2, 3), I64)], [("Y", (2, 3))])
    check(m, {"X": rand(3, 5), "idx": idx})
