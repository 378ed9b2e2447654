"""Reproducers of "verified but wrong", "legal but racy" and tracebacks from valid programs
(issue: trust under fire). Each was found by a probe; each must stay fixed."""
from __future__ import annotations

import numpy as np
import pytest

import autocomp_jupyter as autocomp
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.interp import check_tiled, run, run_kernel_tiled
from autocomp_jupyter.ir.schedule import Kernel, Schedule

I8_BIAS = "input A: i8[16, 256]\nparam B: i8[256, 16]\nparam b: i8[16]\nC = matmul(A, B)\nD = bias_add(C, b)\n"


def test_i8_fused_kernel_saturates_the_matmul_before_the_bias():
    program = parse(I8_BIAS)
    kernel = Kernel.from_ops(program, ["C", "D"])
    schedule = Schedule(kernel, tiles={"k": {"L2": 64}}, levels=("L2",))
    inputs = {"A": np.full((16, 256), 3.0), "B": np.full((256, 16), 3.0), "b": np.full(16, -3.0)}
    expected = run(program, inputs)
    assert expected["C"].max() == 127 and expected["D"].max() == 124   # 2304 saturates to 127, then - 3
    got = run_kernel_tiled(schedule, {k: inputs[k] for k in kernel.inputs})
    np.testing.assert_array_equal(got["D"], expected["D"])              # not 2304 - 3 -> 127
    assert check_tiled(schedule, program).ok


@pytest.mark.parametrize("target", ["tpu", "gpu", "npu", "gemmini"])
def test_i8_program_is_verified_only_when_right(target):
    res = autocomp.optimize(I8_BIAS, target=target, tune=0)
    assert res.report["verified"]
    for kernel, schedule in zip(res.after.kernels, res.after.schedules):
        assert check_tiled(schedule, res.after.program, seed=11, max_boxes=None).ok


def test_i8_generated_c_saturates_like_the_interpreter():
    res = autocomp.optimize(I8_BIAS, target="host", tune=0, measure=True)
    assert res.report["measured"]["matches_interpreter"], res.report["measured"]["reason"]
    assert "ac_saturate(" in res.code("c")


def test_a_parallel_reduction_loop_is_refused_in_any_order():
    res = autocomp.optimize("input X: f32[4, 64, 64]\ntensor Y: f32[4]\nY[i] += X[i, r, s]\n", target="host", tune=0)
    racy = res.evaluate_variant("Y", order=("s", "r", "i"), annotations={"parallel": ("r",)})
    assert not racy["legal"] and "cannot run in parallel" in racy["reason"]
    fine = res.evaluate_variant("Y", order=("s", "r", "i"), annotations={"parallel": ("i",)})
    assert fine["legal"], fine["reason"]


@pytest.mark.parametrize("n", [1, 8])
def test_tiny_softmax_optimises_and_generates_code_everywhere(n):
    src = f"input X: f32[{n}]\nY = softmax(X)\n"
    for target in ["tpu", "gpu", "npu", "gemmini", "host"]:
        res = autocomp.optimize(src, target=target, tune=50)
        assert res.report["verified"]
        assert "kernel_" in res.code("c") and "kernel" in res.code("pseudo")
    res = autocomp.optimize(src, target="host", tune=0, measure=True)
    assert res.report["measured"]["matches_interpreter"]


def test_an_output_loop_no_operand_reads_broadcasts():
    program = parse("input A: f32[4, 3]\ntensor T: f32[4, 2]\nT[i, u] += A[i, k] * 2\n")
    from autocomp_jupyter.interp import random_inputs
    a = random_inputs(program)["A"]
    np.testing.assert_allclose(run(program, {"A": a})["T"], np.repeat(2 * a.sum(axis=1, keepdims=True), 2, axis=1))


def test_nan_where_the_program_gives_nan_is_a_match_in_tiled_runs():
    program = parse("input X: f32[6, 8]\nZ = relu(X)\ntensor Q: f32[6, 8]\nQ[i, j] = Z[i, j] / Z[i, j]\n")
    kernel = Kernel.from_ops(program, [op.name for op in program.ops])
    loop = kernel.loop_names[-1]
    assert check_tiled(Schedule(kernel, tiles={loop: {"L2": 3}}, levels=("L2",)), program).ok


def test_tuner_keeps_the_rules_schedule_of_a_tiny_space_and_says_so():
    res = autocomp.optimize("input X: f32[2, 2]\nY = softmax(X, axis=0)\n", target="tpu", tune=50)
    assert res.report["verified"]
    assert "no legal candidate beat the rules' schedule" in res.report["tuning"]["kept_rules_schedule"]["Y"]


def test_a_plan_whose_kernels_read_a_tensor_before_it_is_written_is_not_verified():
    # Found running torch's ResNet-18 export as C: the conv fused with the residual add ran
    # before the downsample branch it adds, so the C read an unwritten buffer (NaN), while
    # the interpreter (program order) and the tiled runs (inputs from it) could not see it.
    import autocomp_jupyter as ac
    from autocomp_jupyter.pipeline import _verify
    from autocomp_jupyter.passes import PassContext
    from autocomp_jupyter.ir.plan import Plan

    src = ("input X: f32[1, 8, 12, 12]\nparam W: f32[16, 8, 3, 3]\nparam V: f32[16, 8, 1, 1]\n"
           "c = conv2d(X, W, stride=2, padding=1)\nd = conv2d(X, V, stride=2)\ne = add(c, d)\noutput e\n")
    res = ac.optimize(src, target="host", tune=0)
    plan = res.after
    assert res.verified and [k.ops for k in plan.kernels] == [("d",), ("c", "e")]
    assert plan.order_problem() == ""
    from autocomp_jupyter.host import measure_plan
    assert measure_plan(plan, res.target, repeats=1)["matches_interpreter"] is True
    swapped = Plan(plan.program, plan.kernels[::-1], plan.schedules[::-1], "swapped")
    assert swapped.order_problem() == "kernel c_e reads 'd' before kernel d writes it"
    ctx = PassContext(res.program, res.target, res.rules)
    assert _verify(swapped, ctx) == (False, "kernel c_e reads 'd' before kernel d writes it")
