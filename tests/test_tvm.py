"""The TVM bridge: TE translation + the chosen schedule, compiled by LLVM, vs the interpreter."""
from __future__ import annotations

from pathlib import Path

import pytest

from autocomp_jupyter import tvm_bridge

pytestmark = pytest.mark.skipif(not tvm_bridge.available(),
                                reason="Apache TVM is not installed (pip install 'autocomp-jupyter[tvm]')")

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", ["gemm_relu", "conv_bn_relu", "mlp"])
def test_tvm_matches_interpreter(name):
    import autocomp_jupyter as autocomp
    from autocomp_jupyter.dsl import load
    from autocomp_jupyter.interp import compare_outputs, random_inputs, run

    program = load(ROOT / "examples" / f"{name}.acir", max_extent=16)
    result = autocomp.optimize(program, target="host", tune=0)
    mod, execute = tvm_bridge.to_tvm(result)
    inputs = random_inputs(program)
    verdict = compare_outputs(program, run(program, inputs), execute(inputs))
    assert verdict.ok, verdict.reason
    assert "main" in str(mod)
