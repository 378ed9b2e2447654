"""The DSL builds the Program IR DESIGN §3 describes: shapes, op classes, lowering."""
import dataclasses
from pathlib import Path

import pytest

from autocomp_jupyter.dsl import LIBRARY, load, parse
from autocomp_jupyter.ir.program import Affine

EXAMPLES = Path(__file__).parent.parent / "examples"


def test_design_example_parses():
    src = """
# comments start with '#'
input  X: f32[1, 64, 56, 56]          # activations (NCHW)
param  W: f32[64, 64, 3, 3]
param  g: f32[64]
param  b: f32[64]
input  A: f32[64, 32]
input  B: f32[32, 64]
Y = conv2d(X, W, stride=1, padding=1)
Z = batchnorm(Y, g, b)
R = relu(Z)
tensor S: f32[64, 64]
S[i, j] += A[i, k] * B[k, j]
M[i]    max= S[i, j]
E[i, j] = exp(S[i, j] - M[i])
tensor P: f32[1, 64, 56, 56]
P[n, c, h, w] += X[n, c, h + r - 1, w + s - 1] * W[c, 0, r, s]
output R, E
"""
    p = parse(src)
    assert p.outputs == ("R", "E")
    assert p.tensor("Y").shape == (1, 64, 56, 56)
    assert p.tensor("M").shape == (64,)
    assert p.tensor("P").shape == (1, 64, 56, 56)
    classes = {op.output: op.op_class for op in p.ops}
    assert classes == {"Y": "contraction", "Z": "broadcast", "R": "elementwise", "S": "contraction",
                       "M": "reduction", "E": "broadcast", "P": "contraction"}
    st = p.op("P").statements[0]
    assert [l.name for l in st.reduction_loops] == ["r", "s"]
    assert st.reads()[0].indices[2] == Affine.of({"h": 1, "r": 1}, -1)


def test_every_library_op_lowers():
    shapes = {"matmul": ("A2", "B2"), "batch_matmul": ("A3", "B3"), "linear": ("A2", "B2", "b16"),
              "conv2d": ("X", "W"), "depthwise_conv2d": ("X", "Wd"), "add": ("X", "X"), "sub": ("X", "X"),
              "mul": ("X", "X"), "div": ("X", "X"), "bias_add": ("X", "b4"), "batchnorm": ("X", "b4", "b4"),
              "layernorm": ("X", "b8", "b8"), "softmax": ("X",), "maxpool2d": ("X",), "avgpool2d": ("X",),
              "global_avgpool": ("X",), "transpose": ("X",), "reshape": ("X", "shape=[8, -1]"),
              "concat": ("X", "X", "axis=1"), "gather": ("X", "ids"), "scatter": ("X", "ids4", "U4")}
    head = ("input X: f32[2, 4, 8, 8]\ninput A2: f32[8, 4]\ninput B2: f32[4, 16]\ninput A3: f32[2, 8, 4]\n"
            "input B3: f32[2, 4, 16]\nparam W: f32[6, 4, 3, 3]\nparam Wd: f32[4, 1, 3, 3]\nparam b16: f32[16]\n"
            "param b4: f32[4]\nparam b8: f32[8]\ninput ids: i32[3]\ninput ids4: i32[1, 4, 8, 8]\n"
            "input U4: f32[1, 4, 8, 8]\n")
    for op in LIBRARY:
        args = shapes.get(op, ("X",))
        p = parse(head + f"Y = {op}({', '.join(args)})")
        (o,) = p.ops
        assert o.kind == op and o.statements and o.flops > 0 or op in ("transpose", "reshape", "flatten")
        assert o.op_class in ("elementwise", "broadcast", "injective", "reduction", "contraction")


def test_default_outputs_are_unread_tensors():
    p = parse("input A: f32[4]\nB = relu(A)\nC = exp(B)\nD = tanh(A)")
    assert p.outputs == ("C", "D")


def test_program_is_immutable_and_hashable():
    p = load(EXAMPLES / "gemm_relu.acir")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.outputs = ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.ops[0].statements[0].reduce = None
    assert hash(p.ops[0].statements[0]) == hash(load(EXAMPLES / "gemm_relu.acir").ops[0].statements[0])
    assert p.readers("C") == (p.op("D"),)
    assert p.producer("A") is None and p.producer("C").kind == "matmul"
    assert p.flops == 2 * 1024 ** 3 + 1024 ** 2


def test_temps_do_not_collide_with_user_names():
    p = parse("input X: f32[4, 8]\ninput Y_max: f32[4]\nY = softmax(X)\nZ[i] = Y_max[i]")
    temps = p.op("Y").temps
    assert "Y_max" not in temps and len(set(temps)) == 3
    assert all(p.tensor(t).role == "temp" for t in temps)


def test_strided_conv_access_is_affine():
    p = parse("input X: f32[1, 3, 9, 9]\nparam W: f32[4, 3, 3, 3]\nY = conv2d(X, W, stride=2, padding=1)")
    st = p.ops[0].statements[0]
    assert p.tensor("Y").shape == (1, 4, 5, 5)
    assert st.reads()[0].indices[2] == Affine.of({"h": 2, "r": 1}, -1)
