"""Unroll priced by register pressure: an unrolled body's operands beside the register
level's tile, free while they fit, a spill to the next level and back once they do not —
in the scalar and the batch paths alike, said in words, kept out of the passes' and the
tuner's schedules, and shown by the Tune tab; and the skew factors the tab offers."""
from __future__ import annotations

import numpy as np
import pytest

import autocomp_jupyter as autocomp
from autocomp_jupyter import ui
from autocomp_jupyter.accel.cost import evaluate, fitting_unroll, kernel_model, unroll_note
from autocomp_jupyter.accel.target import parse_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import Kernel
from autocomp_jupyter.schedule import replay
from autocomp_jupyter.schedule.skew import Skew
from autocomp_jupyter.accel.search_space import SearchSpace

# 8 f32 lanes; 256 B of registers hold the accumulators (outputs); A and B stream from L1.
SMALL_CORE = parse_target("""
name: small_core
description: test core
clock_ghz: 1.0
compute: {kind: vector, pe_dtype: f32, cores: 1, lanes: 8, fma_units: 1}
energy_pj_per_mac: 1.0
memory:
  - {name: registers, size_bytes: 256, holds: [outputs], bandwidth_gbps: 64, latency_cycles: 1, energy_pj_per_byte: 0.05}
  - {name: L1, size_bytes: 32 KiB, bandwidth_gbps: 32, latency_cycles: 4, energy_pj_per_byte: 0.3}
  - {name: DRAM, size_bytes: unbounded, bandwidth_gbps: 8, latency_cycles: 100, energy_pj_per_byte: 40}
""")
GEMM = "input A: f32[32, 32]\ninput B: f32[32, 32]\nC = matmul(A, B)\n"
LEVELS = ("L1", "registers")


def _gemm_kernel() -> Kernel:
    program = parse(GEMM)
    return Kernel.from_ops(program, [op.name for op in program.ops])


def _k_innermost(unroll: int = 1, k_tile: int = 8):
    """C's registers tile 2 x 8 (64 B), k innermost with `k_tile` steps, j vectorised."""
    steps = [{"primitive": "tile", "loop": "i", "level": "registers", "size": 2},
             {"primitive": "tile", "loop": "j", "level": "registers", "size": 8},
             {"primitive": "tile", "loop": "k", "level": "registers", "size": k_tile},
             {"primitive": "reorder", "level": "registers", "order": ["i", "j", "k"]},
             {"primitive": "vectorize", "loop": "j"}]
    if unroll > 1:
        steps.append({"primitive": "unroll", "loop": "k", "factor": unroll})
    return replay(_gemm_kernel(), steps, LEVELS)


def test_unroll_is_free_while_the_operands_fit_and_charged_as_a_spill_past_the_registers():
    times = {f: evaluate(_k_innermost(f), SMALL_CORE) for f in (1, 2, 4, 8, 16)}
    # each k step loads one element of A (4 B) and a vector of B (32 B) beside the 64 B tile:
    # 4 steps = 144 B + 64 B fit the 256 B; 8 steps = 288 B + 64 B = 352 B do not
    assert times[1].time_s == times[2].time_s == times[4].time_s
    assert times[8].time_s > times[4].time_s and times[16].time_s == times[8].time_s   # 16 capped at k's 8 steps
    assert times[4].spill_ratio == 0 and times[8].spill_ratio == pytest.approx(352 / 256 - 1)
    # the spill: 96 B per body stored to L1 and loaded back, one body per 8 steps of k over the run
    bodies = 32 * 32 * 32 / 8 / 8
    spilled = 2 * 96 * bodies
    l1 = SMALL_CORE.memory[1]
    assert times[8].bytes["L1"] - times[4].bytes["L1"] == pytest.approx(spilled)
    assert times[8].time_s - times[4].time_s == pytest.approx(spilled / (l1.bandwidth_gbps * 1e9))
    assert times[8].energy_j > times[4].energy_j


def test_the_note_says_what_is_live_against_what_and_the_charge():
    fits = unroll_note(_k_innermost(4), SMALL_CORE)
    assert "144 B beside the 64 B tile" in fits and "256 B registers" in fits and "no spill" in fits
    spills = unroll_note(_k_innermost(16), SMALL_CORE)
    assert "capped at the 8 steps of k" in spills and "288 B" in spills and "1.38x the 256 B registers" in spills
    assert "96 B per body spill to L1 and back" in spills and "µs" in spills
    assert unroll_note(_k_innermost(1), SMALL_CORE) == ""


def test_batch_arrays_carry_the_unroll_factor_as_the_scalar_path_does():
    schedule = _k_innermost(1)
    model = kernel_model(schedule.kernel, SMALL_CORE)
    tiles, orders, parallel, vectorize = model.schedule_arrays(schedule)
    factors = np.array([1, 2, 4, 8, 16])
    n = len(factors)
    batch = model.evaluate_batch(np.repeat(tiles, n, axis=0), np.repeat(orders, n, axis=0),
                                 None if parallel is None else np.repeat(parallel[None], n, axis=0),
                                 np.repeat(vectorize, n), unroll=factors)
    scalar = [evaluate(_k_innermost(int(f)), SMALL_CORE).time_s for f in factors]
    np.testing.assert_allclose(batch.time_s, scalar, rtol=1e-12)


def test_the_passes_and_the_tuner_keep_only_unrolls_the_registers_hold():
    assert fitting_unroll(_k_innermost(16), SMALL_CORE) == 4          # 16 and 8 spill; halved to 4
    assert fitting_unroll(_k_innermost(4), SMALL_CORE) == 4
    assert fitting_unroll(_k_innermost(1), SMALL_CORE, 8) == 4
    incumbent = _k_innermost(8)
    space = SearchSpace.tuner(incumbent, SMALL_CORE)
    tiles, orders, parallel, vectorize = space.incumbent_point
    assert space.schedule(tiles, orders, parallel, vectorize).unroll == 4


def test_an_array_that_streams_its_operands_is_not_charged():
    res = autocomp.optimize("input A: f32[128, 128]\ninput B: f32[128, 128]\nC = matmul(A, B)\nD = relu(C)\n",
                            target="tpu", tune=0)
    kernel = res.report["kernels"][0]["name"]
    trace = [s for s in res.traces()[kernel] if s["primitive"] != "unroll"]
    loop = res.after.schedule_of(kernel).innermost_loop
    evs = [res.evaluate_variant(kernel, schedule=trace + ([{"primitive": "unroll", "loop": loop, "factor": f}]
                                                        if f > 1 else []), verify=False) for f in (1, 16)]
    assert evs[0]["time_s"] == evs[1]["time_s"] and evs[0]["unroll"] == ""
    assert "not charged" in evs[1]["unroll"] and "PE array" in evs[1]["unroll"]


@pytest.fixture(scope="module")
def small():
    return autocomp.optimize(GEMM, target=SMALL_CORE, tune=0)


def test_the_tab_shows_the_spill_in_the_change_line(small):
    tune = ui.widget(small).tune
    tune.background = False
    tune.set("unroll", 1)
    assert not any(s["primitive"] == "unroll" for s in tune.last_legal["trace"])    # off drops the step
    tune.set("reorder registers", ("i", "j", "k"))
    before = tune.last_legal["time_s"]
    for factor in (2, 4, 8, 16):     # up to the first factor that spills: unchanged, and says why
        ev = tune.set("unroll", factor)
        if ev["time_s"] > before:
            break
        assert "unchanged" in tune.change.value and "no spill" in tune.change.value
    assert ev["time_s"] > before and {"primitive": "unroll", "loop": "k", "factor": factor} in ev["trace"]
    line = tune.change.value
    assert "spill to L1 and back" in line and f"s.unroll(loop=&#x27;k&#x27;, factor={factor})" in line and "×" in line


def test_a_reorder_takes_the_unroll_with_it(small):
    tune = ui.widget(small).tune
    tune.background = False
    assert small.after.schedule_of(tune.kernel).unroll > 1
    ev = tune.set("reorder registers", ("i", "j", "k"))
    assert ev["legal"], ev.get("reason")
    assert [s["loop"] for s in ev["trace"] if s["primitive"] == "unroll"] == ["k"]


def test_skew_offers_factors_up_to_three_below_the_loops_extent(small):
    kernel = _gemm_kernel()
    decisions = {d.key: d.choices for d in Skew.decisions(kernel, LEVELS)}
    assert decisions[("i", "j")] == (0, 1, 2, 3)
    program = parse("input A: f32[2, 3]\nB = relu(A)\n")
    short = {d.key: d.choices for d in Skew.decisions(Kernel.from_ops(program, ["B"]), LEVELS)}
    assert short == {("i0", "i1"): (0, 1), ("i1", "i0"): (0, 1, 2)}     # below the skewed loop's extent
    tune = ui.widget(small).tune
    tune.background = False
    ev = tune.set("skew j by i", 2)
    assert ev["legal"] and {"primitive": "skew", "loop": "j", "by": "i", "factor": 2} in ev["trace"]
    assert "skew j by i" in tune.change.value and "factor=2" in tune.change.value


# conv+bn+relu's kernel with h's point loop outside the reduction over c and run in parallel
# (replayed, so that the test does not depend on which schedule the search finds)
_CONV_TRACE = ([{"primitive": "tile", "loop": loop, "level": level, "size": size}
                for level, sizes in (("SRAM", (1, 4, 6, 6, 4, 3, 3)), ("accumulator", (1, 4, 6, 2, 4, 3, 2)))
                for loop, size in zip("nfhwcrs", sizes)]
               + [{"primitive": "reorder", "level": "SRAM", "order": list("snfhwcr")},
                  {"primitive": "reorder", "level": "accumulator", "order": list("nfhcrsw")}]
               + [{"primitive": "parallel", "loop": loop} for loop in "fhw"]
               + [{"primitive": "vectorize", "loop": "w"}, {"primitive": "unroll", "loop": "w", "factor": 2}])


def test_an_illegal_skew_factor_is_refused_with_the_dependence_named():
    res = autocomp.optimize("input X: f32[1, 4, 6, 6]\nparam W: f32[4, 4, 3, 3]\nparam g: f32[4]\nparam b: f32[4]\n"
                            "Y = conv2d(X, W, stride=1, padding=1)\nZ = batchnorm(Y, g, b)\nR = relu(Z)\n",
                            target="npu", tune=0, schedule={"Y_R": _CONV_TRACE})
    tune = ui.widget(res).tune
    tune.background = False
    assert "h" in res.report["kernels"][0]["annotations"]["parallel"]
    legal = tune.last_legal
    ev = tune.set("skew h by c", 2)            # h then carries the reduction over c: parallel h races
    assert ev["legal"] is False and ev["loop"] == "h"
    line = tune.change.value
    assert "refused" in line and "skew h by c → 2" in line and "flow dependence" in line and "reduction over c" in line
    assert tune.last_legal is legal


def test_a_control_shows_the_schedules_own_value_where_it_is_not_a_stop():
    from autocomp_jupyter.ui.playground import controls, variant_trace

    schedule = _k_innermost(3)                 # the scheduling pass caps unroll at a tile: 3 is no stop
    unroll = next(c for c in controls(schedule) if c.primitive == "unroll")
    assert unroll.choices == (1, 2, 3, 4, 8, 16) and unroll.initial == 3
    unroll.value = 1
    assert not any(s["primitive"] == "unroll" for s in variant_trace(schedule, [unroll]))


def test_a_value_no_control_offers_is_refused_in_one_line_and_nothing_changes(small):
    tune = ui.widget(small).tune
    tune.background = False
    legal = tune.last_legal
    ev = tune.set("unroll", 5)                 # not a stop of the unroll control
    assert ev["legal"] is False and "not a value this control offers" in ev["reason"]
    assert "refused" in tune.change.value and tune.last_legal is legal
    order = tune.set("reorder registers", ["k", "k", "k"])    # not an order at all
    assert order["legal"] is False and tune.last_legal is legal
