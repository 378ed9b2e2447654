"""In-place row updates (`rules/in_place.py`): the simulator skips the untouched rows as the
model does, and the row write folded into the kernel that reads the updated tensor."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import autocomp_jupyter as autocomp
from autocomp_jupyter.accel.sim import simulate
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.canon import evaluate
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.host import compile_plan, run_compiled
from autocomp_jupyter.interp import compare_outputs, random_inputs, run
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


KV_CACHE = Path(__file__).resolve().parent.parent / "examples" / "kv_cache_decode.acir"


def _fold_entries(report):
    return [r for r in report["rules"] if r["rule"] == "in_place_fold"]


def test_the_row_writes_fold_into_the_attention_reading_the_cache():
    res = autocomp.optimize(KV_CACHE, target="tpu", tune=0)
    report = res.report
    assert report["verified"]
    (kernel,) = res.after.kernels                  # writes the rows and attends: one kernel
    assert {"K2", "V2", "S", "Y"} <= set(kernel.ops)
    (entry,) = [e for e in _fold_entries(report) if e["applied"]]
    assert "K2, V2 written in place inside" in entry["why"] and "3 kernels -> 1" in entry["why"]
    before, after = (float(x) for x in re.search(r"\(([\d.]+) -> ([\d.]+) us\)", entry["why"]).groups())
    assert after < before
    # priced as the reader's traffic plus the rows: 2 rows of 8 x 64 floats written, the new
    # and old rows read, the position
    reader, rows = (int(x) for x in re.search(r"DRAM (\d+) bytes of the reader plus (\d+)", entry["why"]).groups())
    assert rows == 2 * (3 * 8 * 64 * 4 + 4)
    assert report["optimized"]["bytes"]["DRAM"] == pytest.approx(reader + rows)
    schedule = res.after.schedules[0]
    model, sim = evaluate(schedule, res.target), simulate(schedule, res.target)
    assert sim.time_s == pytest.approx(model.time_s, rel=0.02)
    # the folded kernel's generated C computes what the interpreter does
    compiled = compile_plan(res.after, res.target)
    inputs = random_inputs(res.after.program, 0)
    outputs, _ = run_compiled(compiled, inputs, repeats=0, threads=1)
    verdict = compare_outputs(res.after.program, run(res.after.program, inputs), outputs)
    assert verdict.ok, verdict.reason


def test_row_writes_no_reader_takes_run_as_one_kernel():
    # (on npu and tpu the attention now takes the rows: with two loads in flight its cache
    # streams in the latency the fold used to add; gemmini's still gains nothing by it)
    res = autocomp.optimize(KV_CACHE, target="gemmini", tune=0)
    assert res.report["verified"]
    names = [k.name for k in res.after.kernels]
    assert "K2_V2" in names and "K2" not in names and "V2" not in names
    entries = _fold_entries(res.report)
    assert any(not e["applied"] and "no better by the latency objective" in e["why"] for e in entries)
    (merged,) = [e for e in entries if e["applied"]]
    assert "one DRAM latency instead of 2" in merged["why"]
    # one kernel's latency: not two
    one = evaluate(res.after.schedules[names.index("K2_V2")], res.target).time_s
    k2 = Kernel.from_ops(res.after.program, ["K2"])
    alone = evaluate(Schedule(k2, tiles=res.after.schedules[names.index("K2_V2")].tiles), res.target).time_s
    assert one < 1.5 * alone       # (gemmini's rows' bytes add a quarter of a latency)


def test_on_the_host_the_updates_stay_as_written():
    report = autocomp.optimize(KV_CACHE, target="host", tune=0).report
    (entry,) = _fold_entries(report)
    assert not entry["applied"] and "generated C" in entry["why"]
    assert {"K2", "V2"} <= {k["name"] for k in report["kernels"]}
