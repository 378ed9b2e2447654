"""The scheduling pass's legality decisions, through its own helpers.

Each refusal has a legal twin next to it, so a check that refuses everything fails too.
"""
import re


import autocomp_jupyter as autocomp
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.program import Access, Affine, Loop, Op, Program, Statement, Tensor
from autocomp_jupyter.ir.schedule import Kernel, Schedule
from autocomp_jupyter.rules.scheduling import interchange_verdict, parallel_verdict

GEMM = """
input A: f32[8, 6]
input B: f32[6, 5]
C = matmul(A, B)
D = relu(C)
output D
"""


def gemm_schedule(tiled=True):
    program = parse(GEMM)
    kernel = Kernel.from_ops(program, ["C", "D"])
    tiles = {"i": {"L2": 4}, "k": {"L2": 4, "L1": 2}} if tiled else {}
    return Schedule(kernel, tiles=tiles, levels=("L2", "L1"))


def wavefront_schedule():
    """T[i + j] += X[i, j]: S0[i, j] and S0[i + 1, j - 1] update the same element, a
    dependence of distance (1, -1)."""
    V = Affine.var
    st = Statement("T", (V("i") + V("j"),), "+", (Loop("i", 6), Loop("j", 6)), Access("X", (V("i"), V("j"))))
    program = Program((Tensor("X", "f32", (6, 6), "input"), Tensor("T", "f32", (11,), "intermediate")),
                      (Op("comprehension", "reduction", ("X",), "T", (), (st,)),), ("T",))
    return Schedule(Kernel.from_ops(program, ["T"]), levels=("L2",))


def test_skew_and_reverse_are_tried_per_kernel_and_kept_only_with_a_modelled_gain():
    res = autocomp.optimize("examples/gemm_relu.acir", target="gpu", tune=0)
    entries = [r for r in res.report["rules"] if r["rule"].startswith(("skew_", "reverse_"))]
    kernels = [k["name"] for k in res.report["kernels"]]
    assert sorted(r["rule"] for r in entries) == sorted([f"skew_{k}" for k in kernels] + [f"reverse_{k}" for k in kernels])
    skew = next(r for r in entries if r["rule"].startswith("skew_"))
    # gemm_relu's kernel has loops i, j, k: 6 ordered pairs skewed, 3 loops reversed
    assert not skew["applied"] and re.match(r"\d+ candidates \(skew i by j", skew["why"]) and "no gain" in skew["why"]
    reverse = next(r for r in entries if r["rule"].startswith("reverse_"))
    assert not reverse["applied"] and reverse["why"].startswith("3 candidates (reverse i")
    assert all(not k["annotations"].get("skew") and not k["annotations"].get("reverse") for k in res.report["kernels"])


def test_a_reduction_loop_is_never_parallel_an_output_loop_is():
    s = gemm_schedule()
    refused = parallel_verdict(s, "k")
    assert not refused.ok and "cannot run in parallel" in refused.reason
    assert parallel_verdict(s, "i").ok and parallel_verdict(s, "j").ok
    w = wavefront_schedule()
    refused = parallel_verdict(w, "i")           # carries S0[i, j] -> S0[i + 1, j - 1]
    assert not refused.ok and "loop i cannot run in parallel" in refused.reason
    assert parallel_verdict(w, "j").ok           # inside one i, no two j update one element


def test_interchanging_tile_loops_is_legal():
    s = gemm_schedule()
    assert interchange_verdict(s, "L2", ("k", "j", "i")).ok


def test_pass_logs_refusals_with_reasons_and_schedules_are_real():
    res = autocomp.optimize("examples/gemm_relu.acir", target="gpu", tune=0,
                            passes="fusion,tiling,scheduling")
    rules = [e for e in res.report["rules"] if e["pass"] == "scheduling"]
    assert rules, "the scheduling pass logs every transformation it tried"
    parallel_k = [e for e in rules if e["rule"].startswith("parallel_outer") and e["why"].startswith("k:")]
    assert parallel_k and "cannot run in parallel" in parallel_k[0]["why"]
    skews = [e for e in rules if e["rule"].startswith("skew")]
    assert skews and all(not e["applied"] for e in skews)
    assert res.report["verified"]


def test_scheduling_pass_annotations_reach_the_plan():
    from autocomp_jupyter.passes import PassContext
    from autocomp_jupyter.rules.engine import load_rules
    from autocomp_jupyter.rules.scheduling import scheduling_pass

    res = autocomp.optimize("examples/gemm_relu.acir", target="gpu", tune=0, passes="fusion,tiling")
    ctx = PassContext(res.program, res.target, load_rules([], "gpu"))
    out = scheduling_pass(res.after, ctx)
    s = out.plan.schedules[0]
    assert "k" not in s.annotations["parallel"] and set(s.annotations["parallel"]) == {"i", "j"}
    assert s.annotations.get("vectorize") == "j"
    assert s.annotations.get("unroll", 1) > 1
    assert not out.rollbacks
