"""Beyond classifiers: a GPT-2 decoder block, a ViT encoder block, a UNet block and an int8 QDQ
ResNet block, built with onnx.helper in the layouts torch.onnx.export writes. Each imports,
matches onnxruntime and is optimised and verified on the accelerator presets.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import autocomp_jupyter as autocomp  # noqa: E402
from autocomp_jupyter.onnx_import import from_onnx, run_with_values  # noqa: E402


class Graph:
    """A tiny builder: nodes, seeded random initializers, unique names."""

    def __init__(self, seed=0):
        self.nodes, self.inits, self.rng, self.n = [], [], np.random.default_rng(seed), 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, value, base="c"):
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, *shape, scale=None):
        scale = scale if scale is not None else 1.0 / math.sqrt(math.prod(shape[1:]) if len(shape) > 1 else shape[0])
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), "w")

    def op(self, op, inputs, n_out=1, **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=outs[0], **attrs))
        return outs[0] if n_out == 1 else outs

    def linear(self, x, n_in, n_out):
        return self.op("Add", [self.op("MatMul", [x, self.weight(n_in, n_out)]), self.weight(n_out, scale=0.1)])

    def layernorm(self, x, d):
        return self.op("LayerNormalization", [x, self.const(np.ones(d, np.float32) + self.rng.standard_normal(d)
                                                            .astype(np.float32) * 0.1), self.weight(d, scale=0.1)],
                       epsilon=1e-5)

    def model(self, x, x_shape, y, opset=17):
        graph = helper.make_graph(self.nodes, "g", [helper.make_tensor_value_info(x, TensorProto.FLOAT, x_shape)],
                                  [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return onnx.shape_inference.infer_shapes(m)


def attention(g, x, seq, hidden, heads, causal):
    dh = hidden // heads
    qkv = g.linear(x, hidden, 3 * hidden)
    q, k, v = g.op("Split", [qkv, g.const(np.array([hidden] * 3, np.int64))], n_out=3, axis=-1)
    split = g.const(np.array([1, seq, heads, dh], np.int64))
    q = g.op("Transpose", [g.op("Reshape", [q, split])], perm=[0, 2, 1, 3])
    k = g.op("Transpose", [g.op("Reshape", [k, split])], perm=[0, 2, 3, 1])
    v = g.op("Transpose", [g.op("Reshape", [v, split])], perm=[0, 2, 1, 3])
    scores = g.op("Div", [g.op("MatMul", [q, k]), g.const(np.array(math.sqrt(dh), np.float32))])
    if causal:   # GPT-2: where(tril(ones), scores, finfo.min), the mask folded from constants
        ones = g.const(np.ones((1, 1, seq, seq), np.float32))
        mask = g.op("Cast", [g.op("Trilu", [ones], upper=0)], to=TensorProto.BOOL)
        scores = g.op("Where", [mask, scores, g.const(np.array(np.finfo(np.float32).min, np.float32))])
    probs = g.op("Softmax", [scores], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", [ctx, g.const(np.array([1, seq, hidden], np.int64))])
    return g.linear(ctx, hidden, hidden)


def gelu_tanh(g, x):
    """GPT-2's gelu_new as exported: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    cube = g.op("Pow", [x, g.const(np.array(3.0, np.float32))])
    inner = g.op("Add", [x, g.op("Mul", [cube, g.const(np.array(0.044715, np.float32))])])
    t = g.op("Tanh", [g.op("Mul", [inner, g.const(np.array(math.sqrt(2 / math.pi), np.float32))])])
    return g.op("Mul", [g.op("Mul", [x, g.const(np.array(0.5, np.float32))]),
                        g.op("Add", [t, g.const(np.array(1.0, np.float32))])])


def gpt2_block(seq=8, hidden=32, heads=4):
    g = Graph(1)
    h = g.op("Add", ["X", attention(g, g.layernorm("X", hidden), seq, hidden, heads, causal=True)])
    ff = g.linear(gelu_tanh(g, g.linear(g.layernorm(h, hidden), hidden, 4 * hidden)), 4 * hidden, hidden)
    return g.model("X", (1, seq, hidden), g.op("Add", [h, ff]))


def vit_block(image=16, patch=4, hidden=32, heads=4):
    """Patch embedding (a strided Conv), class token, position embedding, one encoder layer
    (erf GELU as the Gelu op of opset 20), the class token's LayerNorm."""
    g = Graph(2)
    n = (image // patch) ** 2
    emb = g.op("Conv", ["X", g.weight(hidden, 3, patch, patch), g.weight(hidden, scale=0.1)],
               kernel_shape=[patch, patch], strides=[patch, patch])
    tokens = g.op("Transpose", [g.op("Reshape", [emb, g.const(np.array([1, hidden, n], np.int64))])], perm=[0, 2, 1])
    tokens = g.op("Concat", [g.weight(1, 1, hidden, scale=0.5), tokens], axis=1)
    x = g.op("Add", [tokens, g.weight(1, n + 1, hidden, scale=0.5)])
    x = g.op("Add", [x, attention(g, g.layernorm(x, hidden), n + 1, hidden, heads, causal=False)])
    ff = g.linear(g.op("Gelu", [g.linear(g.layernorm(x, hidden), hidden, 2 * hidden)]), 2 * hidden, hidden)
    x = g.op("Add", [x, ff])
    cls = g.op("Gather", [x, g.const(np.array(0, np.int64))], axis=1)
    return g.model("X", (1, 3, image, image), g.layernorm(cls, hidden), opset=20)


def unet_block(c=4, hw=8):
    """Down (Conv-ReLU, MaxPool, Conv-ReLU), up (ConvTranspose 2x and a nearest Resize 2x),
    concat with the skip, Conv: a UNet level."""
    g = Graph(3)

    def conv(x, cin, cout):
        return g.op("Relu", [g.op("Conv", [x, g.weight(cout, cin, 3, 3), g.weight(cout, scale=0.1)],
                                  pads=[1, 1, 1, 1])])
    skip = conv("X", c, c)
    deep = conv(g.op("MaxPool", [skip], kernel_shape=[2, 2], strides=[2, 2]), c, 2 * c)
    up = g.op("ConvTranspose", [deep, g.weight(2 * c, c, 2, 2), g.weight(c, scale=0.1)], strides=[2, 2])
    near = g.op("Resize", [deep, "", g.const(np.array([1, 1, 2, 2], np.float32))], mode="nearest")
    joined = g.op("Concat", [skip, up, near], axis=1)
    return g.model("X", (1, c, hw, hw), g.op("Conv", [joined, g.weight(c, 4 * c, 1, 1)]))


def qdq_resnet_block(c=8, hw=8):
    """An int8 QDQ ResNet basic block as onnxruntime's static quantiser writes it: every
    activation through QuantizeLinear/DequantizeLinear (i8), weights int8 with per-channel
    scales dequantised (folded at import), int32 biases."""
    g = Graph(4)
    act = g.const(np.array(0.05, np.float32))
    zp = g.const(np.array(0, np.int8))

    def qdq(x):
        return g.op("DequantizeLinear", [g.op("QuantizeLinear", [x, act, zp]), act, zp])

    def conv(x, relu):
        w = g.rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.2
        scale = (np.abs(w).reshape(c, -1).max(axis=1) / 127).astype(np.float32)
        wq = np.round(w / scale[:, None, None, None]).astype(np.int8)
        wd = g.op("DequantizeLinear", [g.const(wq), g.const(scale), g.const(np.zeros(c, np.int8))], axis=0)
        bias_scale = (scale * 0.05).astype(np.float32)
        bq = g.const((g.rng.standard_normal(c) * 10).astype(np.int32))
        bd = g.op("DequantizeLinear", [bq, g.const(bias_scale), g.const(np.zeros(c, np.int32))], axis=0)
        y = g.op("Conv", [x, wd, bd], pads=[1, 1, 1, 1])
        return qdq(g.op("Relu", [y]) if relu else y)
    x = qdq("X")
    y = conv(conv(x, True), False)
    return g.model("X", (1, c, hw, hw), qdq(g.op("Relu", [g.op("Add", [y, x])])), opset=13)


BLOCKS = {"gpt2": gpt2_block, "vit": vit_block, "unet": unet_block, "qdq-resnet": qdq_resnet_block}


def run_both(m, seed=0):
    x_info = m.graph.input[0]
    x = np.random.default_rng(seed).standard_normal([d.dim_value for d in x_info.type.tensor_type.shape.dim])
    x = x.astype(np.float32)
    options = ort.SessionOptions()
    # Unfused: onnxruntime would otherwise run DQ-Conv-Q as QLinearConv (its own rounding).
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    program = from_onnx(m)
    got = run_with_values(program, {"X": x})[program.outputs[0]]
    return program, got.reshape(want.shape), want


@pytest.mark.parametrize("name", list(BLOCKS))
def test_block_matches_onnxruntime(name):
    program, got, want = run_both(BLOCKS[name]())
    if name == "qdq-resnet":
        # integer activations: a sum rounded the other side of .5 moves one quantum (0.05)
        diff = np.abs(got - want)
        assert diff.max() <= 0.05 * 2 + 1e-6 and (diff > 1e-6).mean() < 0.02
        assert {t.dtype for t in program.tensors} >= {"i8", "f32"}
    else:
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * max(1.0, float(np.abs(want).max())))


def test_the_blocks_read_as_their_models():
    text = from_onnx(gpt2_block()).source
    # its tanh GELU, written out as torch exports it, reads as one gelu op
    assert "select(" in text and "softmax(" in text and "gelu(" in text and "tanh(" not in text
    assert "conv" in from_onnx(unet_block()).source.lower()


@pytest.mark.parametrize("name,target", [(name, "tpu") for name in BLOCKS] + [("unet", "npu"), ("qdq-resnet", "npu")])
def test_block_optimises_and_verifies(name, target):
    res = autocomp.optimize(from_onnx(BLOCKS[name]()), target=target, tune=0)
    assert res.verified, res.report.get("verification")
