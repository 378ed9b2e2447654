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


@pytest.mark.parametrize("name", ["gemm_relu", "conv_bn_relu"])
def test_skewed_and_reversed_kernels_run_in_tvm_as_plain_tir_with_affine_bounds(name):
    import autocomp_jupyter as autocomp
    from autocomp_jupyter.dsl import load
    from autocomp_jupyter.interp import compare_outputs, random_inputs, run

    program = load(ROOT / "examples" / f"{name}.acir", max_extent=12)
    result = autocomp.optimize(program, target="host", tune=0)
    kernel = result.after.kernels[0]
    loops = [l for l in kernel.loop_names if kernel.extents[l] > 4]
    levels = result.target.tiling_levels
    s = result.schedule(kernel.name)
    s.tile(loop=loops[0], level=levels[0], size=4)
    s.reorder(level=levels[-1], order=[loops[1], loops[0]])       # a wavefront: loops[1]' outside loops[0]
    s.skew(loop=loops[1], by=loops[0], factor=1)
    s.reverse(loop=loops[-1])
    skewed = autocomp.optimize(program, target="host", schedule={kernel.name: s})
    assert skewed.verified
    mod, execute = tvm_bridge.to_tvm(skewed)
    inputs = random_inputs(program)
    verdict = compare_outputs(program, run(program, inputs), execute(inputs))
    assert verdict.ok, verdict.reason
    assert f"{loops[1]}_s" in mod.script()
