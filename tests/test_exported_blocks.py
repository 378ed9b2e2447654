"""Blocks shaped as today's exporters write EfficientNet-B0 and ShuffleNetV2: stride-2
depthwise convolutions after a 1x1 expand, squeeze-excite, channel shuffles (reshape,
transpose, reshape). Their conv → depthwise chains are verified on a kernel twin (the
shuffle's literal shape pins the program's own twin), where the stride-2 depthwise reads
twice the rows its producer writes; cut on its own, the producer wrote too few and the
reference run raised `ValueError: could not broadcast ... (1,16,16,16) into ... (1,16,28,28)`.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import autocomp_jupyter as autocomp
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.interp import random_inputs, reference_run, run
from autocomp_jupyter.ir.twin import kernel_twin

EXPAND_THEN_STRIDE_2 = """input X: f32[1, 4, {n}, {n}]
param W1: f32[{c}, 4, 1, 1]
param W2: f32[{c}, 1, 3, 3]
E = conv2d(X, W1)
A = relu(E)
D = depthwise_conv2d(A, W2, stride=2, padding=1)
output D
"""


def test_a_twin_producer_writes_all_its_stride_2_reader_reads():
    # 28 rows of A cut to 16, but the depthwise's 14 output rows (not cut) read all 28.
    program = parse(EXPAND_THEN_STRIDE_2.format(n=28, c=24))
    twin = kernel_twin(program, ["E", "A", "D"], 16)
    assert twin.tensor("A").shape == (1, 16, 28, 28) and twin.tensor("D").shape == (1, 16, 14, 14)
    reference_run(twin, 0)                      # raised the broadcast ValueError
    # The same block written at the twin's size: the same values from the same inputs.
    small = parse(EXPAND_THEN_STRIDE_2.format(n=28, c=16))
    inputs = random_inputs(small, seed=1)
    np.testing.assert_allclose(run(twin, inputs)["D"], run(small, inputs)["D"])


def test_a_twin_grows_each_producer_of_a_stride_2_chain_in_turn():
    # Cut output rows 16 read 32 rows of A, which read 32 rows of X: every written tensor
    # is as large as its readers read, and no larger than the full size.
    program = parse(EXPAND_THEN_STRIDE_2.format(n=56, c=24))
    twin = kernel_twin(program, ["E", "A", "D"], 16)
    assert twin.tensor("D").shape == (1, 16, 16, 16)
    assert twin.tensor("A").shape == twin.tensor("E").shape == (1, 16, 32, 32)
    assert twin.tensor("X").shape == (1, 4, 32, 32)
    small = parse(EXPAND_THEN_STRIDE_2.format(n=32, c=16))
    inputs = random_inputs(small, seed=2)
    np.testing.assert_allclose(run(twin, inputs)["D"], run(small, inputs)["D"])


def test_a_twin_channel_shuffle_reads_what_it_wrote():
    # concat → reshape → transpose → reshape → the second half (split): the split's 16
    # channels from 58 on are made by the shuffle's rows 0..36 (2 each), which the twin
    # writes: cut to 16 rows, the split read zeros nobody wrote.
    src = ("input P: f32[1, 58, 20, 20]\ninput Q: f32[1, 58, 20, 20]\nC = concat(P, Q, axis=1)\n"
           "R = reshape(C, shape=[1, 2, 58, 20, 20])\nT = transpose(R, perm=[0, 2, 1, 3, 4])\n"
           "S = reshape(T, shape=[1, 116, 20, 20])\ntensor H: f32[1, 58, 20, 20]\nH[i0, i1, i2, i3] = S[i0, i1 + 58, i2, i3]\noutput H\n")
    program = parse(src)
    ops = [op.name for op in program.ops]
    twin = kernel_twin(program, ops, 16)
    assert twin.tensor("S").shape[1] == 74 and twin.tensor("H").shape == (1, 16, 16, 16)
    values = run(twin, random_inputs(twin, seed=3))
    # H[c] is channel 58 + c of the shuffle: (58 + c) = 2 * t + g reads C[g * 58 + t].
    got, c = values["H"], values["C"]
    for k in range(16):
        t, g = divmod(58 + k, 2)
        np.testing.assert_allclose(got[0, k], c[0, g * 58 + t])


def test_window_partition_folds_are_checked_on_a_twin_they_replay_on():
    """Swin's window partition (reshape → transpose → reshape into windows) folded into the
    projection reading it: the twin of the ops the folds changed keeps the window digits
    whole, so the folds replay on it and it decides (not the program at full size)."""
    from autocomp_jupyter import verify
    from autocomp_jupyter.rules.fusion import inline, is_view

    program = parse("input X: f32[1, 56, 56, 32]\nparam W: f32[32, 16]\n"
                    "V = reshape(X, shape=[1, 8, 7, 8, 7, 32])\nP = transpose(V, perm=[0, 1, 3, 2, 4, 5])\n"
                    "R = reshape(P, shape=[64, 49, 32])\nY[b, i, j] += R[b, i, k] * W[k, j]\n"
                    "Z[b, i, j] = Y[b, i, j] * 2\noutput Z\n")
    folded = program
    for name in ("V", "P", "R"):
        assert is_view(folded, folded.producer(name))
        folded = inline(folded, folded.producer(name))
    verdict = verify._equivalent_where_changed(program, folded, 0)
    assert verdict is not None and verdict.ok
    twin = verify._changed_twin(program, ("V", "P", "R", "Y"))
    assert twin.tensor("R").shape[:2] == (64, 49) and twin.tensor("R").shape[2] < 32


# --------------------------------------------------------------------------- ONNX blocks

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autocomp_jupyter.onnx_import import from_onnx  # noqa: E402


class _Graph:
    """Nodes and seeded initializers, named as torch.onnx names them (unique per op)."""

    def __init__(self, seed=0):
        self.nodes, self.inits, self.rng, self.n = [], [], np.random.default_rng(seed), 0

    def const(self, value):
        self.n += 1
        self.inits.append(numpy_helper.from_array(np.asarray(value), f"c_{self.n}"))
        return f"c_{self.n}"

    def op(self, op, inputs, **attrs):
        self.n += 1
        out = f"{op.lower()}_{self.n}"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, k=1, stride=1, group=1):
        w = (self.rng.standard_normal((cout, cin // group, k, k)) / math.sqrt(cin // group * k * k)).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.1).astype(np.float32)
        return self.op("Conv", [x, self.const(w), self.const(b)], kernel_shape=[k, k], strides=[stride, stride],
                       pads=[k // 2] * 4, group=group)

    def shuffle(self, x, c, hw):
        x = self.op("Reshape", [x, self.const(np.array([1, 2, c // 2, hw, hw], np.int64))])
        x = self.op("Transpose", [x], perm=[0, 2, 1, 3, 4])
        return self.op("Reshape", [x, self.const(np.array([1, c, hw, hw], np.int64))])

    def model(self, x_shape, y):
        graph = helper.make_graph(self.nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
                                  [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        m.ir_version = 8
        return onnx.shape_inference.infer_shapes(m)


def shufflenet_unit(hw=20, cin=4, c=72):
    """ShuffleNetV2's down-sampling branch: 1x1 conv, relu, stride-2 depthwise, 1x1 conv,
    relu, then the channel shuffle (its literal shape pins the program's twin)."""
    g = _Graph()
    h = g.op("Relu", [g.conv("X", cin, c)])
    h = g.conv(h, c, c, k=3, stride=2, group=c)
    h = g.op("Relu", [g.conv(h, c, c)])
    return g.model((1, cin, hw, hw), g.shuffle(h, c, (hw + 1) // 2))


def efficientnet_block(hw=20, cin=4, c=72, cout=72):
    """EfficientNet-B0's MBConv with stride 2: 1x1 expand, SiLU (x * sigmoid(x)), stride-2
    depthwise, SiLU, squeeze-excite (mean → 1x1 → SiLU → 1x1 → sigmoid → mul broadcast
    back), 1x1 project; then a reshape with a literal shape, as an exporter's view."""
    g = _Graph()

    def silu(x):
        return g.op("Mul", [x, g.op("Sigmoid", [x])])

    h = silu(g.conv("X", cin, c))
    h = silu(g.conv(h, c, c, k=3, stride=2, group=c))
    s = g.op("ReduceMean", [h, g.const(np.array([2, 3], np.int64))], keepdims=1)
    s = g.op("Sigmoid", [g.conv(silu(g.conv(s, c, max(1, cin // 4))), max(1, cin // 4), c)])
    h = g.conv(g.op("Mul", [h, s]), c, cout)
    return g.model((1, cin, hw, hw), g.shuffle(h, cout, (hw + 1) // 2))


BLOCKS = {"shufflenet_unit": shufflenet_unit, "efficientnet_block": efficientnet_block}


@pytest.mark.parametrize("target", ["npu", "gemmini"])
@pytest.mark.parametrize("name", list(BLOCKS))
def test_exported_block_optimises_verified_with_no_fault(name, target):
    res = autocomp.optimize(from_onnx(BLOCKS[name]()), target=target, tune=0)
    report = res.report
    assert report["verified"] is True and report["fell_back"] is None, report["rollbacks"]
    assert not [r for r in report["rollbacks"] if "Error" in r["reason"]], report["rollbacks"]
    assert report["verification"]["tiled_runs"].get("twin", 0) >= 1
