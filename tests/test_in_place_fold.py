"""In-place row updates (`rules/in_place.py`): the simulator skips the untouched rows as the
model does, and the row write folded into the kernel that reads the updated tensor."""
from __future__ import annotations

from autocomp_jupyter.accel.sim import simulate
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.canon import evaluate
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import Kernel, Schedule
from autocomp_jupyter.rules.in_place import mark_in_place_updates

CACHE = """
input  q:   f32[2, 4, 8]
input  kn:  f32[2, 8]
input  Kc:  f32[2, 256, 8]
input  pos: i32[1]
K2[g, t, d] = select(equal(t, pos[0]), kn[g, d], Kc[g, t, d])
S[g, r, t] += q[g, r, d] * K2[g, t, d]
output S, K2
"""


def test_the_simulator_moves_one_row_of_an_in_place_update_as_the_model():
    target = load_target("tpu")
    program, _ = mark_in_place_updates(parse(CACHE, "<test>"))
    kernel = Kernel.from_ops(program, ["K2"])
    outer, inner = target.tiling_levels[:2]
    schedule = Schedule(kernel, tiles={"g": {outer: 2, inner: 1}, "t": {outer: 256, inner: 32},
                                       "d": {outer: 8, inner: 8}})
    model, sim = evaluate(schedule, target), simulate(schedule, target)
    row = 2 * 8 * 4                       # one row of K2: g x d floats
    # the new row read, the old row read and the row written: no tile of the cache moves
    assert sim.bytes["DRAM"] <= 3 * row + 16
    assert abs(sim.bytes["DRAM"] - model.bytes["DRAM"]) <= 16
    assert abs(sim.time_s - model.time_s) <= 0.1 * model.time_s
