"""Attention's fused kernel: the vector unit keeps the score tile across the softmax's
statements (the cost model's traffic, replayed by the simulator), and the online-softmax
chain tiles the head dimension innermost where that keeps the nest one pass."""
from __future__ import annotations

import numpy as np
import pytest

from autocomp_jupyter import poly
from autocomp_jupyter.accel.cost import evaluate, kernel_model
from autocomp_jupyter.accel.sim import compare
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.interp import check_tiled
from autocomp_jupyter.ir.schedule import Kernel, Schedule
from autocomp_jupyter.ir.loopnest import single_pass
from autocomp_jupyter.rules.chains import whole_loops_tiled_innermost
from autocomp_jupyter.rules.online_softmax import online_softmax
from vector_registers import held_reads

ATTENTION = """input Q: f32[1, {n}, 64]
input K: f32[1, {n}, 64]
input V: f32[1, {n}, 64]
S[h, s, t] += Q[h, s, d] * K[h, t, d] * 0.125
M[h, s] max= S[h, s, t]
E[h, s, t] = exp(S[h, s, t] - M[h, s])
Z[h, s] += E[h, s, t]
O[h, s, d] += E[h, s, t] * V[h, t, d]
Y[h, s, d] = O[h, s, d] / Z[h, s]
output Y
"""


def _flash(n: int, target: str, tiles: dict, orders: dict):
    """(rewritten program, schedule, target): attention over n keys as one online-softmax
    kernel, the scores computed at the key tiles of the outer level."""
    program = parse(ATTENTION.format(n=n))
    rewritten, anchor = online_softmax(program, [op.name for op in program.ops])
    kernel = Kernel.from_ops(rewritten, [op.name for op in rewritten.ops], anchor=anchor)
    t = load_target(target)
    outer = t.tiling_levels[0]
    kernel = kernel.with_compute_at("S", "t", outer)
    levels = t.tiling_levels
    schedule = Schedule(kernel, tiles={l: dict(zip(levels, sizes)) for l, sizes in tiles.items()},
                        order={lv: tuple(o) for lv, o in zip(levels, orders)}, levels=levels)
    return rewritten, schedule, t



GEMMINI_TILES = {"h": (1, 1), "s": (128, 32), "d": (64, 64), "t": (16, 16)}


def test_the_exp_and_the_row_sum_read_the_score_tile_the_max_left_in_the_registers():
    _, schedule, target = _flash(256, "gemmini", GEMMINI_TILES, ("hstd", "hdst"))
    held = held_reads(schedule, target)
    # the max reads S first; the exp finds S and the max in the registers, the row sum the exp
    assert held["M"] == {}
    assert held["E"] == {"S": True, "M": True}
    assert held["Z"] == {"E": True}
    # the weighted sum runs on the PE array: it reads its operands through the scratchpad
    assert held["O"] == {}
    model = kernel_model(schedule.kernel, target)
    cost = model.evaluate_batch(*model.normalise(*model.schedule_arrays(schedule)))
    names = [st.target for st in schedule.kernel.statements]
    scratchpad = list(model.level_names).index("scratchpad")
    datapath = cost.datapath_bytes[0, :, scratchpad]
    assert datapath[names.index("E")] == 0.0 and datapath[names.index("Z")] == 0.0
    # every score read once, by the max
    assert datapath[names.index("M")] == pytest.approx(256 * 256 * 4)
    # the simulator charges each step the model's operand bytes: the same bytes, close times
    # (at this size the scratchpad binds, and the model's port time carries the loads'
    # latencies, which the simulator's byte total does not)
    check = compare(schedule, target)
    assert check["sim_bytes"] == pytest.approx(check["model_bytes"])
    assert check["time_error"] < 0.10


def test_a_score_tile_the_registers_cannot_hold_is_read_again():
    # 64 x 256 f32 scores (64 KiB) beside the accumulator's own tiles: no room in its 64 KiB
    tiles = dict(GEMMINI_TILES, s=(64, 64), t=(256, 256))
    _, schedule, target = _flash(256, "gemmini", tiles, ("hstd", "hdst"))
    held = held_reads(schedule, target)
    assert held["E"] == {"S": False, "M": False} and held["Z"] == {"E": False}


def test_simt_lanes_keep_nothing_across_statements():
    _, schedule, target = _flash(256, "gpu", {"h": (1, 1, 1), "s": (64, 32, 8), "d": (64, 64, 64),
                                               "t": (64, 32, 8)}, ("hstd", "hstd", "hstd"))
    assert all(not held for held in held_reads(schedule, target).values())


NPU_WHOLE_D = {"h": (1, 1), "s": (512, 32), "d": (64, 64), "t": (32, 32)}


def test_the_head_dimension_tiled_innermost_keeps_the_nest_one_pass():
    rewritten, schedule, target = _flash(512, "npu", NPU_WHOLE_D, ("hstd", "htsd"))
    assert single_pass(schedule)
    one_pass = schedule.with_tiles({**schedule.tiles, "d": {"SRAM": 64, "accumulator": 32}})
    assert single_pass(one_pass)
    # d outside s at the accumulator: the max, exp and row sum run apart over the SRAM tile
    split = one_pass.with_order({"SRAM": tuple("hstd"), "accumulator": tuple("htds")})
    assert not single_pass(split)
    assert poly.check_schedule(one_pass).ok


def test_the_online_softmax_chain_tiles_the_head_dimension_where_the_model_and_the_nest_agree():
    rewritten, schedule, target = _flash(512, "npu", NPU_WHOLE_D, ("hstd", "hdst"))
    before = evaluate(schedule, target).time_s
    tiled = whole_loops_tiled_innermost(schedule, target, {})
    after = evaluate(tiled, target)
    # one block of the PE array's 32 columns of d at a time: the accumulator holds a longer
    # run of rows twice, and each block of V streams over more of them per fill
    assert tiled.tile_sizes()["d"][-1] < 64 and tiled.order_at("accumulator")[-1] == "d"
    assert after.time_s < 0.95 * before
    assert single_pass(tiled)
    assert compare(tiled, target)["time_error"] < 0.05
    small = _flash(64, "npu", NPU_WHOLE_D, ("hstd", "hdst"))[0]
    twin = Schedule(Kernel.from_ops(small, [op.name for op in small.ops],
                                    anchor=tiled.kernel.ops[-1]).with_compute_at("S", "t", "SRAM"),
                    tiles={l: {lv: min(v, 16) for lv, v in per.items()} | ({"accumulator": 8} if l == "d" else {})
                           for l, per in tiled.tiles.items()},
                    order=dict(tiled.order), levels=tiled.levels)
    assert single_pass(twin) and check_tiled(twin, small).ok
    assert np.isfinite(after.time_s)


def test_a_softmax_row_tiled_at_the_outer_level_is_one_pass_per_statement():
    program = parse("input x: f32[64, 256]\ny = softmax(x)\noutput y\n")
    kernel = Kernel.from_ops(program, [op.name for op in program.ops])
    row = kernel.loop_names[-1]
    levels = load_target("tpu").tiling_levels
    assert single_pass(Schedule(kernel, tiles={row: {levels[0]: 256}}, levels=levels))
    # the max, the exp and sum, the division: each its own loop over the row's tiles
    assert not single_pass(Schedule(kernel, tiles={row: {levels[0]: 64}}, levels=levels))
