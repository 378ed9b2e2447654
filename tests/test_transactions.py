"""Every rule, chain, pass, baseline and the tuner is a transaction: an internal fault in one
is a rollback entry ({"pass", "kernel", "reason"}: the step, its kernel, the exception in one
line), the pipeline goes on from the state before it, and the plan shown is verified. A
UserError is the user's input and still reaches the user."""
from __future__ import annotations

import pytest

import autocomp_jupyter as autocomp
from autocomp_jupyter.errors import UserError
from autocomp_jupyter.passes import fault_reason, transaction
from autocomp_jupyter.rules.engine import adrs_rule

CONV_RELU = """input X: f32[1, 8, 12, 12]
param W: f32[8, 8, 3, 3]
Y = conv2d(X, W, padding=1)
R = relu(Y)
output R
"""

# conv → conv: the chain rule depth_first_convs tries them as one kernel on npu.
TWO_CONVS = """input X: f32[1, 16, 40, 40]
param W1: f32[48, 16, 1, 1]
param W2: f32[48, 1, 3, 3]
E = conv2d(X, W1)
A = relu(E)
D = depthwise_conv2d(A, W2, stride=2, padding=1)
B = relu(D)
output B
"""


def _faults(report, pass_name=None):
    return [r for r in report["rollbacks"] if "Error" in r["reason"] and pass_name in (None, r["pass"])]


def test_a_fault_is_one_line_naming_the_step_the_kernel_and_the_exception():
    rollbacks = []
    with transaction(rollbacks, "fusion", "chain rule depth_first_convs", kernel="E_to_B", then="kept") as step:
        raise ValueError("could not broadcast\n  input array")
    assert step.failed and rollbacks == [{"pass": "fusion", "kernel": "E_to_B", "reason":
                                          "chain rule depth_first_convs on kernel E_to_B: ValueError: could not "
                                          "broadcast input array; kept"}]
    assert fault_reason("the tuner", "", KeyError("k")) == "the tuner: KeyError: 'k'"
    assert len(fault_reason("x", "", RuntimeError("y" * 5000))) < 300
    with pytest.raises(UserError), transaction(rollbacks, "fusion", "a rule"):
        raise UserError("the user's input")
    assert len(rollbacks) == 1


def test_a_python_rule_that_raises_is_a_rollback_and_the_pipeline_goes_on():
    @adrs_rule("raises_on_relu")
    def raises_on_relu(producer, consumer):
        if consumer.kind == "relu":
            raise ValueError("could not broadcast input array")
        return None

    res = autocomp.optimize(CONV_RELU, target="npu", rules=["raises_on_relu"], tune=0)
    faults = _faults(res.report)
    assert faults == [{"pass": "fusion", "kernel": "Y_R", "reason":
                       "fusion rule raises_on_relu on kernel Y_R: ValueError: could not broadcast input array"}]
    assert res.report["verified"] is True and res.report["fell_back"] is None
    # the other rules still ran: the YAML epilogue rule fused the relu into the conv
    assert [k["name"] for k in res.report["kernels"]] == ["Y_R"]


def test_a_chain_rule_that_faults_leaves_its_kernels_as_they_were(monkeypatch):
    from autocomp_jupyter.rules import chains

    def broken(*args):
        raise ValueError("could not broadcast input array from shape (1,16,16,16) into shape (1,16,28,28)")

    monkeypatch.setattr(chains, "_fused", broken)
    res = autocomp.optimize(TWO_CONVS, target="npu", tune=0)
    faults = _faults(res.report)
    assert faults and all(f["pass"] == "fusion" and f["reason"].startswith("chain rule depth_first_convs on kernel E_")
                          and "ValueError: could not broadcast input array from shape (1,16,16,16)" in f["reason"]
                          for f in faults)
    assert res.report["verified"] is True and res.report["fell_back"] is None
    assert len(res.report["kernels"]) == 2                       # each conv with its relu, not chained


def test_a_tiling_fault_on_one_kernel_rolls_back_that_kernel_only(monkeypatch):
    from autocomp_jupyter.rules import tiling

    search = tiling.search_tiles

    def fails_on_the_depthwise(kernel, *args, **kwargs):
        if "D" in kernel.ops:
            raise IndexError("tile index out of range")
        return search(kernel, *args, **kwargs)

    monkeypatch.setattr(tiling, "search_tiles", fails_on_the_depthwise)
    res = autocomp.optimize(TWO_CONVS, target="npu", tune=0, passes="fusion,tiling,scheduling")
    faults = [f for f in _faults(res.report, "tiling") if f["reason"].startswith("the tiling pass")]
    assert faults and all(f == {"pass": "tiling", "kernel": "D_B", "reason": "the tiling pass on kernel D_B: "
                                "IndexError: tile index out of range; its schedule kept"} for f in faults)
    tiled = [e for e in res.report["rules"] if e["pass"] == "tiling" and e["rule"] == "tile_E_A"]
    assert tiled                                                  # the other kernel was still tiled
    assert res.report["verified"] is True


def test_a_pass_that_faults_is_rolled_back_and_a_user_error_reaches_the_user():
    def broken_pass(plan, ctx):
        raise ZeroDivisionError("division by zero")

    res = autocomp.optimize(CONV_RELU, target="tpu", tune=0, passes=["fusion", broken_pass, "tiling"])
    assert _faults(res.report) == [{"pass": "broken_pass", "kernel": "", "reason":
                                    "the broken_pass pass: ZeroDivisionError: division by zero; pass rolled back"}]
    assert res.report["verified"] is True

    def refusing_pass(plan, ctx):
        raise UserError("this pass needs a square matrix")

    with pytest.raises(UserError, match="square matrix"):
        autocomp.optimize(CONV_RELU, target="tpu", tune=0, passes=[refusing_pass])


def test_a_tuner_fault_keeps_the_plan_the_rules_made(monkeypatch):
    from autocomp_jupyter import tune

    def broken(*args, **kwargs):
        raise RuntimeError("no candidates")

    # the library baseline tunes each op with the same tuner: searched (and cached) first, so
    # that the fault is the pipeline's own tuning step's
    autocomp.optimize(CONV_RELU, target="tpu", tune=0)
    monkeypatch.setattr(tune, "tune_plan", broken)
    res = autocomp.optimize(CONV_RELU, target="tpu", tune=8)
    assert _faults(res.report) == [{"pass": "tuning", "kernel": "", "reason":
                                    "the tuner: RuntimeError: no candidates; the plan as the rules left it"}]
    assert res.report["verified"] is True and res.report["tuning"]["configs_evaluated"] == 0


def test_a_library_baseline_fault_lets_the_textbook_plan_stand_in(monkeypatch):
    from autocomp_jupyter import pipeline

    def broken(*args):
        raise KeyError("n")

    monkeypatch.setattr(pipeline, "library_plan", broken)
    res = autocomp.optimize(CONV_RELU, target="tpu", tune=0)
    assert _faults(res.report)[0] == {"pass": "baseline", "kernel": "", "reason":
                                      "the library baseline: KeyError: 'n'; the textbook plan stands in for it"}
    assert res.report["library"]["time_s"] == res.report["textbook"]["time_s"]
    assert res.report["verified"] is True


def test_a_verification_fault_falls_back_to_a_plan_that_verifies(monkeypatch):
    from autocomp_jupyter import pipeline

    check = pipeline._verify_plan

    def faults_on_the_optimised_plan(plan, ctx, notes=None):
        if plan.label not in ("library", "naive"):
            raise ValueError("could not broadcast")
        return check(plan, ctx, notes)

    monkeypatch.setattr(pipeline, "_verify_plan", faults_on_the_optimised_plan)
    res = autocomp.optimize(CONV_RELU, target="tpu", tune=0)
    assert res.report["verified"] is True and res.report["fell_back"] == "library"
    assert any(r["pass"] == "verify" and "the check raised: ValueError: could not broadcast" in r["reason"]
               for r in res.report["rollbacks"])


def test_inside_raise_faults_a_fault_propagates_with_its_traceback(monkeypatch):
    from autocomp_jupyter import tune
    from autocomp_jupyter.passes import raise_faults

    def broken(*args, **kwargs):
        raise RuntimeError("no candidates")

    monkeypatch.setattr(tune, "tune_plan", broken)
    with raise_faults(), pytest.raises(RuntimeError, match="no candidates"):
        autocomp.optimize(CONV_RELU, target="tpu", tune=8)
    assert autocomp.optimize(CONV_RELU, target="tpu", tune=8).report["verified"] is True   # caught again after


def test_a_fused_kernel_that_cannot_be_built_leaves_its_ops_one_kernel_each(monkeypatch):
    from autocomp_jupyter.rules import fusion

    inherited = fusion.inherited_schedule

    def fails_when_fused(program, kernel, ctx, plan):
        if len(kernel.ops) > 1:
            raise AssertionError("no anchor schedule")
        return inherited(program, kernel, ctx, plan)

    monkeypatch.setattr(fusion, "inherited_schedule", fails_when_fused)
    res = autocomp.optimize(CONV_RELU, target="tpu", tune=0)
    assert {"pass": "fusion", "kernel": "Y_R", "reason": "building the fused kernel on kernel Y_R: AssertionError: "
            "no anchor schedule; its ops stay one kernel each"} in res.report["rollbacks"]
    assert [k["name"] for k in res.report["kernels"]] == ["Y", "R"] and res.report["verified"] is True
