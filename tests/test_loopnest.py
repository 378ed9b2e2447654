"""The loop-nest IR: one lowering, and every reader agrees with it.

For a set of schedules — remainder tiles at two levels, padding, an epilogue after a tiled
reduction, a stencil reading across tiles, softmax and layernorm tiled along their rows —
the tree's own meaning (`LoopNest.instances`, every statement instance in run order) is the
reference; isl's schedule (poly) must order every instance the same way, the interpreter's
tiled run and the generated C must compute the program's values, the Schedule tab must print
one loop per tree loop, the pseudo-kernel one tile loop per tree tile loop, TVM must build
and match.
"""
from __future__ import annotations

import shutil

import islpy as isl
import numpy as np
import pytest

from autocomp_jupyter import host, poly
from autocomp_jupyter.codegen import generate
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.interp import check_tiled
from autocomp_jupyter.ir.loopnest import Compute, TileLoop, lower, whole_loops
from autocomp_jupyter.ir.schedule import Kernel, Schedule
from autocomp_jupyter.result import Plan

GEMM_RELU = "input A: f32[13, 9]\ninput B: f32[9, 7]\nC = matmul(A, B)\nD = relu(C)\n"
CONV = ("input X: f32[1, 3, 7, 6]\nparam W: f32[4, 3, 3, 3]\nparam g: f32[4]\nparam b: f32[4]\n"
        "Y = conv2d(X, W, padding=1)\nZ = batchnorm(Y, g, b)\nR = relu(Z)\n")
SHIFTED = "input X: f32[11]\nparam K: f32[3]\nY = exp(X)\ntensor P: f32[11]\nP[h] += Y[h + r - 1] * K[r]\noutput P\n"
SOFTMAX = "input X: f32[6, 10]\nY = softmax(X)\n"
LAYERNORM = "input X: f32[5, 12]\nparam g: f32[12]\nparam b: f32[12]\nY = layernorm(X, g, b)\n"

CASES = {
    "gemm_relu_remainders_k_outer": (GEMM_RELU, {"i": {"L2": 5, "L1": 2}, "j": {"L2": 4}, "k": {"L2": 4, "L1": 3}},
                                     {"L2": ("k", "j", "i"), "L1": ("j", "k", "i")}),
    "conv_bn_relu_padding": (CONV, {"f": {"L2": 3, "L1": 2}, "h": {"L2": 4}, "w": {"L2": 5, "L1": 2},
                                    "c": {"L2": 2}}, {"L2": ("c", "f", "h", "w", "n", "r", "s")}),
    "stencil_across_tiles": (SHIFTED, {"h": {"L2": 4, "L1": 3}}, {}),
    "softmax_rows_split": (SOFTMAX, {"i0": {"L2": 4}, "i1": {"L2": 4, "L1": 3}}, {}),
    "layernorm_rows_split": (LAYERNORM, {"i0": {"L2": 2}, "i1": {"L2": 5}}, {"L2": ("i1", "i0")}),
}


def case(name):
    src, tiles, order = CASES[name]
    program = parse(src)
    kernel = Kernel.from_ops(program, [op.name for op in program.ops])
    schedule = Schedule(kernel, tiles=tiles, order=order, levels=("L2", "L1"),
                        annotations={"parallel": (kernel.loop_names[0],)})
    return program, kernel, schedule


def poly_order(kernel, schedule) -> list[tuple[int, tuple[int, ...]]]:
    """Every instance, sorted by the time isl's schedule gives it."""
    timed = []
    union = poly.from_tiled_schedule(schedule).to_isl()
    for k, stmt in enumerate(kernel.statements):
        bounds = " and ".join(f"0 <= {l.name} < {l.extent}" for l in stmt.loops)
        domain = isl.UnionSet(f"{{ S{k}[{', '.join(stmt.loop_names)}] : {bounds} }}")
        n = len(stmt.loops)

        def add(point, k=k, n=n):
            values = [point.get_coordinate_val(isl.dim_type.set, d).to_python()
                      for d in range(point.get_space().dim(isl.dim_type.set))]
            timed.append((tuple(values[n:]), k, tuple(values[:n])))
        union.intersect_domain(domain).wrap().foreach_point(add)
    return [(k, point) for _, k, point in sorted(timed)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_isl_orders_every_instance_as_the_tree_runs_it(name):
    program, kernel, schedule = case(name)
    nest = lower(schedule)
    assert poly_order(kernel, schedule) == list(nest.instances())
    assert poly.check_schedule(schedule).ok          # legal by construction


@pytest.mark.parametrize("name", sorted(CASES))
def test_interpreter_runs_the_tree_tile_by_tile(name):
    program, kernel, schedule = case(name)
    verdict = check_tiled(schedule, program, seed=3)
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize("name", sorted(CASES))
def test_printed_nest_and_pseudo_kernel_have_one_loop_per_tree_loop(name):
    program, kernel, schedule = case(name)
    nest = lower(schedule)
    tiles = nest.tile_loops()
    points = sum(len(c.loops) for _, c in nest.computes())
    text = schedule.loop_nest()
    assert sum(line.lstrip().startswith("for ") for line in text.splitlines()) == len(tiles) + points
    for t in tiles:
        assert f"for {t.var} in range(" in text
    pseudo = generate(Plan(program, (kernel,), (schedule,)), None, "pseudo")
    assert sum("# tile in" in line for line in pseudo.splitlines()) == len(tiles)


@pytest.mark.skipif(not any(shutil.which(c) for c in ("cc", "gcc", "clang")), reason="no C compiler on PATH")
@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_c_computes_what_the_program_computes(name):
    program, kernel, schedule = case(name)
    report = host.measure_plan(Plan(program, (kernel,), (schedule,)), repeats=1, threads=2)
    assert report["matches_interpreter"], report["reason"]


@pytest.mark.parametrize("name", ["gemm_relu_remainders_k_outer", "softmax_rows_split"])
def test_tvm_builds_the_tree_and_matches(name):
    from autocomp_jupyter import tvm_bridge
    if not tvm_bridge.available():
        pytest.skip("apache-tvm not installed")
    from autocomp_jupyter.interp import random_inputs, run

    program, kernel, schedule = case(name)
    _, run_tvm = tvm_bridge.to_tvm(Plan(program, (kernel,), (schedule,)))
    inputs = random_inputs(program, 1)
    expected = run(program, inputs)
    for out, value in run_tvm(inputs).items():
        np.testing.assert_allclose(value, expected[out], rtol=1e-4, atol=1e-4)


def test_softmax_splits_into_the_three_passes_of_a_row_kernel():
    program, kernel, schedule = case("softmax_rows_split")
    nest = lower(schedule)
    (row_tile,) = nest.body
    assert isinstance(row_tile, TileLoop) and row_tile.anchor == "i0"
    # max; then exp and sum in one pass; then the division: three tile loops over the row
    passes = [[c.statement.target for c in node.body[0].body] if isinstance(node.body[0], TileLoop) else
              [c.statement.target for c in node.body if isinstance(c, Compute)] for node in row_tile.body]
    assert passes == [["Y_max"], ["Y_exp", "Y_sum"], ["Y"]]
    assert whole_loops(kernel) == {"i1"}


def test_epilogue_runs_in_the_last_reduction_tile_only():
    program, kernel, schedule = case("gemm_relu_remainders_k_outer")
    nest = lower(schedule)
    (relu,) = [c for _, c in nest.computes() if c.statement.target == "D"]
    assert relu.last_of == ("k_L2", "k_L1")
    assert "if last(k_L2, k_L1):" in nest.pretty()


def test_a_reduction_loop_is_never_marked_parallel():
    program = parse("input X: f32[4, 8, 8]\ntensor Y: f32[4]\nY[i] += X[i, r, s]\n")
    kernel = Kernel.from_ops(program, ["Y"])
    schedule = Schedule(kernel, tiles={"r": {"L2": 4}}, order={"L2": ("s", "r", "i")}, levels=("L2",),
                        annotations={"parallel": ("r",)})
    nest = lower(schedule)
    assert not any(t.parallel for t in nest.tile_loops())
    assert not any(p.parallel for _, c in nest.computes() for p in c.loops)
    verdict = poly.check_schedule(schedule)      # and the annotation itself is refused
    assert not verdict.ok and "cannot run in parallel" in verdict.reason
    assert poly.check_schedule(schedule.with_order({"L2": ("i", "r", "s")})).ok is False
    ok = Schedule(kernel, tiles={"r": {"L2": 4}}, levels=("L2",), annotations={"parallel": ("i",)})
    assert poly.check_schedule(ok).ok
