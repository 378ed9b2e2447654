"""The reference interpreter against independent formulas, op by op."""
import math
from pathlib import Path

import numpy as np
import pytest

from autocomp_jupyter import interp
from autocomp_jupyter.dsl import load, parse

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.acir"))
rng = np.random.default_rng(1)


def run1(src, **inputs):
    program = parse(src)
    values = interp.run(program, inputs)
    return values[program.outputs[0]]


def direct_conv(x, w, stride, padding, dilation=1, groups=1):
    n, c, h, wd = x.shape
    f, cg, r, s = w.shape
    ho = (h + 2 * padding - dilation * (r - 1) - 1) // stride + 1
    wo = (wd + 2 * padding - dilation * (s - 1) - 1) // stride + 1
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    out = np.zeros((n, f, ho, wo))
    fg = f // groups
    for b in range(n):
        for o in range(f):
            g = o // fg
            for i in range(ho):
                for j in range(wo):
                    for cc in range(cg):
                        for a in range(r):
                            for q in range(s):
                                out[b, o, i, j] += xp[b, g * cg + cc, i * stride + a * dilation,
                                                      j * stride + q * dilation] * w[o, cc, a, q]
    return out


def test_matmul_and_friends():
    a, b = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    head = "input A: f32[5, 7]\ninput B: f32[7, 3]\n"
    np.testing.assert_allclose(run1(head + "C = matmul(A, B)", A=a, B=b), a @ b, rtol=1e-5)
    bias = rng.standard_normal(3)
    np.testing.assert_allclose(run1(head + "param b: f32[3]\nC = linear(A, B, b)", A=a, B=b, b=bias),
                               a @ b + bias, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run1(head + "C = linear(A, B)", A=a, B=b), a @ b, rtol=1e-5)
    x, y = rng.standard_normal((2, 4, 6)), rng.standard_normal((2, 6, 3))
    np.testing.assert_allclose(
        run1("input X: f32[2, 4, 6]\ninput Y: f32[2, 6, 3]\nZ = batch_matmul(X, Y)", X=x, Y=y), x @ y, rtol=1e-5)


@pytest.mark.parametrize("stride,padding,dilation,groups", [(1, 1, 1, 1), (2, 1, 1, 1), (1, 2, 2, 1), (2, 0, 1, 2)])
def test_conv2d_matches_direct_loop(stride, padding, dilation, groups):
    x = rng.standard_normal((2, 4, 9, 8))
    w = rng.standard_normal((6, 4 // groups, 3, 3))
    src = (f"input X: f32[2, 4, 9, 8]\nparam W: f32[6, {4 // groups}, 3, 3]\n"
           f"Y = conv2d(X, W, stride={stride}, padding={padding}, dilation={dilation}, groups={groups})")
    np.testing.assert_allclose(run1(src, X=x, W=w), direct_conv(x, w, stride, padding, dilation, groups),
                               rtol=1e-4, atol=1e-5)


def test_depthwise_conv2d_is_a_grouped_conv():
    x, w = rng.standard_normal((1, 3, 7, 7)), rng.standard_normal((3, 1, 3, 3))
    got = run1("input X: f32[1, 3, 7, 7]\nparam W: f32[3, 1, 3, 3]\nY = depthwise_conv2d(X, W, stride=2, padding=1)",
               X=x, W=w)
    np.testing.assert_allclose(got, direct_conv(x, w, 2, 1, groups=3), rtol=1e-4, atol=1e-5)


def test_unary_ops():
    x = rng.standard_normal((3, 4)) * 4
    head = "input X: f32[3, 4]\n"
    expect = {
        "relu": np.maximum(x, 0), "relu6": np.clip(x, 0, 6), "sigmoid": 1 / (1 + np.exp(-x)),
        "tanh": np.tanh(x), "exp": np.exp(x),
        "gelu": np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))(x),
    }
    for op, want in expect.items():
        tol = 2e-3 if op == "gelu" else 1e-5  # the tanh form of GELU is within 1e-3 of the erf form
        np.testing.assert_allclose(run1(head + f"Y = {op}(X)", X=x), want, rtol=tol, atol=tol, err_msg=op)


def test_binary_broadcasting():
    x, c, v = rng.standard_normal((2, 3, 4)), rng.standard_normal((3, 1)), rng.standard_normal(4)
    head = "input X: f32[2, 3, 4]\ninput C: f32[3, 1]\ninput V: f32[4]\n"
    np.testing.assert_allclose(run1(head + "Y = add(X, C)", X=x, C=c, V=v), x + c, rtol=1e-6)
    np.testing.assert_allclose(run1(head + "Y = sub(V, X)", X=x, C=c, V=v), v - x, rtol=1e-6)
    np.testing.assert_allclose(run1(head + "Y = mul(C, V)", X=x, C=c, V=v), c * v, rtol=1e-6)


def test_bias_add_and_batchnorm():
    x4, x2, b3, b5 = (rng.standard_normal(s) for s in [(2, 3, 4, 5), (4, 5), (3,), (5,)])
    np.testing.assert_allclose(run1("input X: f32[2, 3, 4, 5]\nparam b: f32[3]\nY = bias_add(X, b)", X=x4, b=b3),
                               x4 + b3[None, :, None, None], rtol=1e-6)
    np.testing.assert_allclose(run1("input X: f32[4, 5]\nparam b: f32[5]\nY = bias_add(X, b)", X=x2, b=b5),
                               x2 + b5, rtol=1e-6)
    s, t = rng.standard_normal(3), rng.standard_normal(3)
    got = run1("input X: f32[2, 3, 4, 5]\nparam s: f32[3]\nparam t: f32[3]\nY = batchnorm(X, s, t)", X=x4, s=s, t=t)
    np.testing.assert_allclose(got, x4 * s[None, :, None, None] + t[None, :, None, None], rtol=1e-5, atol=1e-6)


def test_layernorm_moments():
    x = rng.standard_normal((6, 32)) * 3 + 2
    ones, zeros = np.ones(32), np.zeros(32)
    got = run1("input X: f32[6, 32]\nparam g: f32[32]\nparam b: f32[32]\nY = layernorm(X, g, b)", X=x, g=ones, b=zeros)
    np.testing.assert_allclose(got.mean(axis=-1), 0, atol=1e-5)
    np.testing.assert_allclose(got.var(axis=-1), 1, atol=1e-3)
    g, b = rng.standard_normal(32), rng.standard_normal(32)
    got = run1("input X: f32[6, 32]\nparam g: f32[32]\nparam b: f32[32]\nY = layernorm(X, g, b, eps=0.1)", X=x, g=g, b=b)
    want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 0.1) * g + b
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_softmax_rows_sum_to_one():
    x = rng.standard_normal((4, 5, 6)) * 10
    got = run1("input X: f32[4, 5, 6]\nY = softmax(X)", X=x)
    np.testing.assert_allclose(got.sum(axis=-1), 1, rtol=1e-5)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    got0 = run1("input X: f32[4, 5, 6]\nY = softmax(X, axis=0)", X=x)
    np.testing.assert_allclose(got0.sum(axis=0), 1, rtol=1e-5)


def test_pooling():
    x = rng.standard_normal((1, 2, 7, 7))
    got = run1("input X: f32[1, 2, 7, 7]\nY = maxpool2d(X, kernel=3, stride=2, padding=1)", X=x)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    want = np.array([[[[xp[0, c, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max() for j in range(4)] for i in range(4)]
                      for c in range(2)]])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    got = run1("input X: f32[1, 2, 7, 7]\nY = avgpool2d(X)", X=x)
    want = x[:, :, :6, :6].reshape(1, 2, 3, 2, 3, 2).mean(axis=(3, 5))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    got = run1("input X: f32[1, 2, 7, 7]\nY = global_avgpool(X)", X=x)
    np.testing.assert_allclose(got, x.mean(axis=(2, 3)), rtol=1e-5)


def test_transpose():
    x = rng.standard_normal((2, 3, 4))
    np.testing.assert_allclose(run1("input X: f32[2, 3, 4]\nY = transpose(X, perm=[1, 2, 0])", X=x),
                               np.transpose(x, (1, 2, 0)))
    np.testing.assert_allclose(run1("input X: f32[2, 3, 4]\nY = transpose(X)", X=x), x.T)


def test_comprehension_padding_equals_library_conv():
    x, w = rng.standard_normal((1, 3, 6, 6)), rng.standard_normal((4, 3, 3, 3))
    head = "input X: f32[1, 3, 6, 6]\nparam W: f32[4, 3, 3, 3]\n"
    comp = run1(head + "tensor Y: f32[1, 4, 6, 6]\nY[n, f, h, w] += X[n, c, h + r - 1, w + s - 1] * W[f, c, r, s]",
                X=x, W=w)
    lib = run1(head + "Y = conv2d(X, W, padding=1)", X=x, W=w)
    np.testing.assert_allclose(comp, lib, rtol=1e-5, atol=1e-6)


def test_where_bounds_and_max_reduction():
    x = rng.standard_normal(10)
    got = run1("input X: f32[10]\ntensor Y: f32[8]\nY[i] max= X[i + r] where r < 3", X=x)
    np.testing.assert_allclose(got, [x[i:i + 3].max() for i in range(8)])
    got = run1("input X: f32[10]\nY[i] += X[i + r] * 0.5 where i < 10, r < 2", X=x)
    np.testing.assert_allclose(got, [0.5 * (x[i] + (x[i + 1] if i + 1 < 10 else 0)) for i in range(10)], rtol=1e-6)


def test_attention_matches_numpy():
    program = load(EXAMPLES[0])
    assert program.filename.endswith("attention.acir")
    values = interp.run(program, seed=3)
    q, k, v = (values[n] for n in "QKV")
    s = q @ k.T
    p = np.exp((s - s.max(1, keepdims=True)) * 0.125)
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(values["O"], p @ v, rtol=1e-4, atol=1e-5)


def test_dtypes_round():
    x = np.array([[1.0001, 2.5, -3.7]])
    got = run1("input X: f16[1, 3]\nY = relu(X)", X=x)
    assert got[0, 0] == np.float16(1.0001)
    got = run1("input X: i8[1, 3]\nY[i, j] = X[i, j] * 100", X=np.array([[1.0, 2.0, -3.0]]))
    np.testing.assert_array_equal(got, [[100, 127, -128]])  # saturates like an int8 store
    got = run1("input X: bf16[1, 3]\nY = relu(X)", X=np.array([[1.00390625, 3.0, 1.0]]))
    assert got[0, 0] == 1.0  # bf16 has 8 mantissa bits: 1 + 2^-8 rounds to 1


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_run_full_and_scaled(path):
    for max_extent in (None, 8):
        program = load(path, max_extent=max_extent)
        values = interp.run(program)
        for name in program.outputs:
            out = values[name]
            assert out.shape == program.tensor(name).shape
            assert np.isfinite(out).all()
            if max_extent:
                assert max(out.shape) <= max_extent


def test_scaled_program_keeps_structure():
    full, small = load(EXAMPLES[-1]), load(EXAMPLES[-1], max_extent=8)
    assert [(o.kind, o.op_class, o.inputs) for o in full.ops] == [(o.kind, o.op_class, o.inputs) for o in small.ops]
    assert small.tensor("W1").shape == (8, 8, 3, 3)


def test_equivalence_detects_a_difference():
    a = parse("input X: f32[4, 4]\nY = relu(X)")
    b = parse("input X: f32[4, 4]\nY = sigmoid(X)")
    assert interp.equivalent(a, a)
    verdict = interp.equivalent(a, b)
    assert not verdict and "differs at" in verdict.reason


def test_a_slice_gathers_what_fancy_indexing_gathers(monkeypatch):
    """`_gather`'s slice path (every index one distinct loop plus a constant, in range) gives
    the values and axes of the general path, on random accesses of random boxes."""
    import random

    from autocomp_jupyter.ir.program import Access, Affine, Loop, Statement

    rng = random.Random(3)
    sliced = 0
    for _ in range(600):
        shape = tuple(rng.randint(1, 5) for _ in range(rng.randint(1, 3)))
        data = np.arange(math.prod(shape), dtype=np.float64).reshape(shape)
        loops = tuple(Loop(n, rng.randint(1, 5)) for n in "abcd"[:rng.randint(1, 4)])
        names = [l.name for l in loops]
        indices = tuple(Affine.constant(rng.randint(-1, d)) if rng.random() < 0.2
                        else Affine(((rng.choice(names), 1 if rng.random() < 0.85 else 2),), rng.randint(-1, 1))
                        for d in shape)
        acc = Access("X", indices, -7.0)
        st = Statement("Y", (), None, loops, acc)
        ranges = []
        for l in loops:
            lo = rng.randint(0, l.extent - 1)
            ranges.append((lo, rng.randint(lo + 1, l.extent)))
        used = sorted({k for idx in indices for k in idx.loops}, key=names.index)
        sliced += interp._window(acc, data, tuple(names), tuple(ranges), used) is not None
        fast = interp._gather(acc, st, {"X": data}, tuple(ranges))
        with monkeypatch.context() as m:
            m.setattr(interp, "_window", lambda *a: None)
            general = interp._gather(acc, st, {"X": data}, tuple(ranges))
        assert fast[1] == general[1] and np.array_equal(fast[0], general[0])
    assert sliced > 100      # the slice path was taken


def test_overflow_and_inf_minus_inf_are_values_not_warnings():
    """A deep model's random weights can overflow f32: the interpreter gives inf and NaN as
    the C does, without numpy warnings (they would print under a notebook cell)."""
    import warnings

    program = parse("input X: f32[4]\nY[i] = X[i] * 1e30 * 1e30\nZ[i] = Y[i] - Y[i]\noutput Z\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = interp.run(program, {"X": np.ones(4)})
    assert np.isinf(out["Y"]).all() and np.isnan(out["Z"]).all()
