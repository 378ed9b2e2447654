"""A vector unit beside a PE array runs its lanes along the output loop that fills them.

Its lanes load from the on-chip buffers, not a contiguous vector of DRAM: where the output's
stride-1 loop is shorter than the lanes (a depthwise convolution on a 7x7 map: 7 of 32 lanes
busy), they run along the loop that fills them best (the 64 channels), as the physical limit
counts them (accel/limit.py)."""
from __future__ import annotations

import autocomp_jupyter as autocomp
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import kernels_unfused
from autocomp_jupyter.space import lane_loop


def depthwise(hw: int) -> str:
    return (f"input X: f32[1, 64, {hw}, {hw}]\nparam W: f32[64, 1, 5, 5]\n"
            "Y = depthwise_conv2d(X, W, stride=1, padding=2)\noutput Y\n")


def test_depthwise_on_a_small_map_runs_its_lanes_along_the_channels():
    small, wide = kernels_unfused(parse(depthwise(7)))[0], kernels_unfused(parse(depthwise(32)))[0]
    npu = load_target("npu")
    assert lane_loop(small, npu) == "c"
    assert lane_loop(wide, npu) == "w"          # a map as wide as the lanes keeps its stride-1 loop
    res = autocomp.optimize(depthwise(7), target="npu", tune=0)
    assert res.report["verified"]
    assert res.after.schedules[0].annotations.get("vectorize") == "c"
    why = [e["why"] for e in res.report["rules"] if e["rule"].startswith("vectorize_inner")]
    assert why and "the vector lanes along it: Y's stride-1 loop w has 7 points" in why[0]
    # along w each pass of 32 lanes would carry 7 points: at most 7/32 of the limit
    assert res.report["limit_fraction"] > 0.6
