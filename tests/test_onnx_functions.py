"""The scalar functions ONNX import added to the DSL: log, pow, floor, less, less_equal, equal,
select. Each parses, means what numpy means in the interpreter, and the generated C (and
TVM, when installed) computes the same."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import autocomp_jupyter as autocomp
from autocomp_jupyter import interp
from autocomp_jupyter.dsl import parse

SOURCE = """
input X: f32[4, 8]
input Y: f32[4, 8]
tensor Z: f32[4, 8]
Z[i, j] = select(less(X[i, j], Y[i, j]), log(1 + abs(X[i, j])), pow(abs(Y[i, j]), 1.5)) + floor(X[i, j]) + less_equal(X[i, j], 0) + equal(X[i, j], Y[i, j])
output Z
"""


def test_functions_mean_what_numpy_means():
    program = parse(SOURCE)
    values = interp.run(program)
    x, y = values["X"], values["Y"]
    want = np.where(x < y, np.log(1 + abs(x)), abs(y) ** 1.5) + np.floor(x) + (x <= 0) + (x == y)
    np.testing.assert_allclose(values["Z"], want, rtol=1e-6)


def test_functions_in_c_match_the_interpreter():
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        pytest.skip("no C compiler")
    from autocomp_jupyter import host

    res = autocomp.optimize(parse(SOURCE), target="host", tune=0)
    assert res.verified
    report = host.measure_plan(res.after, repeats=1, threads=1)
    assert report["matches_interpreter"], report["reason"]


def test_functions_in_tvm():
    from autocomp_jupyter import tvm_bridge

    if not tvm_bridge.available():
        pytest.skip("tvm is not installed")
    res = autocomp.optimize(parse(SOURCE), target="tpu", tune=0)
    _, run = tvm_bridge.to_tvm(res)
    inputs = interp.random_inputs(res.program)
    got = run({k: v.astype(np.float32) for k, v in inputs.items()})
    want = interp.run(res.program, inputs)
    np.testing.assert_allclose(got["Z"], want["Z"], rtol=1e-4, atol=1e-4)
