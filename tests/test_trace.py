"""Schedules as traces of primitives (trace.py): every report kernel carries its trace,
replaying a report reproduces its time, bad steps are refused with a named error (exit 2 in
the CLI, no traceback), and user skews / reversals are applied, verified and compiled."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import autocomp_jupyter as autocomp
from autocomp_jupyter import canon
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.loopnest import lower
from autocomp_jupyter.ir.schedule import Kernel, Schedule
from autocomp_jupyter.result import Plan
from autocomp_jupyter.schedule import (BadArgumentError, IllegalStepError, ScheduleError,
                                    UnknownLoopError, replay)

ROOT = Path(__file__).resolve().parent.parent
GEMM = """input A: f32[48, 40]
input B: f32[40, 36]
C = matmul(A, B)
D = relu(C)
"""


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "autocomp_jupyter.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT)


# Every kernel of every plan replaying from its trace to the same nest and cost is checked
# on every golden case (every example on every preset, tuned ones too): test_golden_reports.py.


def test_replaying_a_report_reproduces_its_optimised_time_exactly(tmp_path):
    first = _cli("optimize", "examples/mlp.acir", "--target", "npu", "--tune", "60", "--json")
    assert first.returncode == 0, first.stderr
    report = tmp_path / "report.json"
    report.write_text(first.stdout)
    again = _cli("optimize", "examples/mlp.acir", "--target", "npu", "--schedule", str(report), "--json")
    assert again.returncode == 0, again.stderr
    a, b = json.loads(first.stdout), json.loads(again.stdout)
    assert b["verified"] and b["optimized"]["time_s"] == a["optimized"]["time_s"]
    assert [k["trace"] for k in b["kernels"]] == [k["trace"] for k in a["kernels"]]
    assert b["tuning"]["configs_evaluated"] == 0          # every kernel given: nothing searched
    assert any(r["rule"] == "replay" and r["applied"] for r in b["rules"])


def test_parallel_on_a_reduction_loop_is_refused_naming_primitive_and_dependence(tmp_path):
    res = autocomp.optimize(GEMM, target="tpu", tune=0)
    kernel = res.report["kernels"][0]
    trace = kernel["trace"] + [{"primitive": "parallel", "loop": "k"}]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"kernels": [{"name": kernel["name"], "trace": trace}]}))
    (tmp_path / "gemm.acir").write_text(GEMM)
    run = _cli("optimize", str(tmp_path / "gemm.acir"), "--target", "tpu", "--schedule", str(path))
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert f"step {len(trace)}, parallel" in run.stderr
    assert "cannot run in parallel" in run.stderr and "reduction over k" in run.stderr
    with pytest.raises(IllegalStepError) as err:                      # the same in Python
        autocomp.optimize(GEMM, target="tpu", schedule={kernel["name"]: trace})
    assert err.value.primitive == "parallel" and err.value.step == len(trace) - 1


@pytest.mark.parametrize("order", ["i_outside", "wavefront"])
def test_a_user_skew_on_a_gemm_is_applied_verified_and_its_host_c_matches(order):
    res = autocomp.optimize(GEMM, target="host", tune=0)
    levels = res.target.tiling_levels
    s = res.schedule("C_D")
    s.tile(loop="i", level=levels[0], size=16)
    s.tile(loop="j", level=levels[0], size=12)
    if order == "wavefront":                            # j' outside i: i's bounds follow j'
        s.reorder(level=levels[-1], order=["j", "i", "k"])
    s.skew(loop="j", by="i", factor=2)
    s.reverse(loop="k")
    out = autocomp.optimize(GEMM, target="host", schedule={"C_D": s}, measure=True, threads=1)
    assert out.verified
    assert out.report["measured"]["matches_interpreter"]
    kernel = out.report["kernels"][0]
    assert {"primitive": "skew", "loop": "j", "by": "i", "factor": 2} in kernel["trace"]
    assert kernel["annotations"]["skew"] == [["j", "i", 2]] or kernel["annotations"]["skew"] == [("j", "i", 2)]
    code = out.code("c")
    assert "j_s" in code and "--k" in code          # affine bounds, k counting down
    assert "j_s" in out.after.schedules[0].loop_nest()


def test_skewed_and_reversed_nests_run_every_instance_once_in_time_order():
    program = parse("input A: f32[5, 3]\ninput B: f32[3, 4]\nC = matmul(A, B)\n", "<t>")
    kernel = Kernel.from_ops(program, ["C"])
    s = Schedule(kernel, order={"L1": ("j", "i", "k")}, levels=("L1",),
                 annotations={"skew": (("j", "i", 1),), "reverse": ("k",)})
    points = [p for _, p in lower(s).instances()]
    assert sorted(points) == sorted((i, j, k) for i in range(5) for j in range(4) for k in range(3))
    times = [(j + i, i, -k) for i, j, k in points]
    assert times == sorted(times)


def test_bad_steps_are_refused_with_what_was_expected():
    res = autocomp.optimize(GEMM, target="tpu", tune=0)
    kernel, levels = res.kernel("C_D"), res.target.tiling_levels
    cases = [
        ({"primitive": "tiel", "loop": "i"}, BadArgumentError, "unknown primitive 'tiel'", "did you mean 'tile'?"),
        ({"primitive": "tile", "loop": "q", "level": levels[0], "size": 4}, UnknownLoopError, "no loop 'q'", ""),
        ({"primitive": "tile", "loop": "i", "level": levels[0], "size": 300}, BadArgumentError,
         "tile size 300 is larger than loop i (extent 48)", ""),
        ({"primitive": "tile", "loop": "i", "level": "L9", "size": 4}, UnknownLoopError, "no level 'L9'", ""),
        ({"primitive": "skew", "loop": "j", "by": "i", "factor": 0}, BadArgumentError, "factor must be a positive", ""),
        ({"primitive": "skew", "loop": "j", "by": "j", "factor": 1}, BadArgumentError, "skewed by itself", ""),
        ({"primitive": "unroll", "loop": "i", "factor": 4}, BadArgumentError, "not the innermost loop (k is)", ""),
        ({"primitive": "parallel", "loop": "i", "extra": 1}, BadArgumentError, "unknown extra", ""),
        ({"primitive": "reorder", "level": levels[0]}, BadArgumentError, "missing order", ""),
    ]
    for step, kind, message, hint in cases:
        with pytest.raises(kind) as err:
            replay(kernel, [step], levels)
        text = str(err.value)
        assert "kernel C_D, step 1" in text and message in text, text
        assert hint in text
        assert isinstance(err.value, ScheduleError)


def test_schedule_files_that_are_not_reports_are_clear_errors(tmp_path):
    (tmp_path / "gemm.acir").write_text(GEMM)
    (tmp_path / "broken.json").write_text('{"kernels": [')
    (tmp_path / "other.json").write_text(json.dumps({"kernels": [{"name": "C_E", "trace": []}]}))
    for name, message in [("broken.json", "not JSON"), ("missing.json", "cannot read the schedule file"),
                          ("other.json", "no kernel named 'C_E'")]:
        run = _cli("optimize", str(tmp_path / "gemm.acir"), "--schedule", str(tmp_path / name))
        assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr, run.stderr


def test_the_printed_trace_pastes_back_as_python():
    res = autocomp.optimize(GEMM, target="npu", tune=30)
    text = res.code("schedule")
    namespace = {"res": res}
    builders = {}
    for block in text.split("\n\n"):
        exec(block, namespace)                            # what a user pastes into a cell
        builders[namespace["s"].kernel.name] = namespace["s"]
    again = autocomp.optimize(GEMM, target="npu", schedule=builders)
    assert again.verified
    assert again.report["optimized"]["time_s"] == res.report["optimized"]["time_s"]
    assert "s.tile(loop=" in text and "s = res.schedule('C_D')" in text


def test_one_call_clears_every_cache_the_lru_cache_ones_too():
    from autocomp_jupyter import caches

    autocomp.optimize(GEMM, target="tpu", tune=0)
    before = caches.stats()
    assert before["poly.parse_schedule"]["entries"] > 0 and before["poly.check_schedule"]["entries"] > 0
    caches.clear_all()
    assert all(s["entries"] == 0 for s in caches.stats().values())


def test_interchange_swaps_two_loops_at_one_level_and_keeps_the_others():
    res = autocomp.optimize(GEMM, target="npu", tune=0)
    levels = res.target.tiling_levels
    s = res.schedule("C_D")
    s.reorder(level=levels[0], order=["k", "i", "j"])
    s.interchange(level=levels[0], loop="i", other="k")
    assert s.schedule.order_at(levels[0]) == ("i", "k", "j")
    assert all(s.schedule.order_at(lv) == ("k", "i", "j") for lv in levels[1:])   # as before the swap
    assert s.trace[-1] == {"primitive": "interchange", "level": levels[0], "loop": "i", "other": "k"}
    with pytest.raises(UnknownLoopError, match="no loop 'q' \\(other\\)"):
        s.interchange(level=levels[0], loop="i", other="q")


def test_stage_holds_a_tensor_at_a_level_it_would_bypass():
    from autocomp_jupyter.accel.cost import evaluate
    from autocomp_jupyter.codegen.pseudo import generate_pseudo

    res = autocomp.optimize(GEMM, target="gemmini", tune=0)
    kernel, schedule = res.after.kernels[0], res.after.schedules[0]
    inner = res.target.tiling_levels[-1]                     # the accumulator: outputs only
    assert "activations" not in res.target.level(inner).roles
    staged = replay(kernel, schedule.trace + [{"primitive": "stage", "tensor": "A", "level": inner}],
                    schedule.levels)
    assert {"primitive": "stage", "tensor": "A", "level": inner} in staged.trace
    assert replay(kernel, staged.trace, schedule.levels).annotations["stage"] == (("A", inner),)
    before, after = evaluate(schedule, res.target), evaluate(staged, res.target)
    assert after.bytes[inner] > before.bytes[inner]          # A's tiles now move into it
    text = generate_pseudo(Plan(res.after.program, (kernel,), (staged,)), res.target)
    assert f"dma_load {inner} <- " in text and any(f"dma_load {inner}" in l and " A[" in l for l in text.splitlines())
    with pytest.raises(UnknownLoopError, match="no tensor 'Z'"):
        replay(kernel, [{"primitive": "stage", "tensor": "Z", "level": inner}], schedule.levels)


def test_no_parallel_loop_is_a_step_of_its_own_on_a_target_that_runs_loops_in_parallel_by_itself():
    from dataclasses import replace

    from autocomp_jupyter.accel.cost import textbook_schedule
    from autocomp_jupyter.accel.target import load_target

    kernel = Kernel.from_ops(parse("input A: f32[1024, 512]\ninput B: f32[512, 1024]\nC = matmul(A, B)\n"), ["C"])
    tiled = textbook_schedule(kernel, load_target("gpu"))
    default = replace(tiled, annotations={})
    none = replace(tiled, annotations={"parallel": ()})
    assert {"primitive": "parallel", "loop": None} in none.trace
    again = replay(kernel, none.trace, tiled.levels)
    assert again.parallel == () and default.parallel is None
    assert canon.evaluate(again, "gpu").time_s == canon.evaluate(none, "gpu").time_s \
        > canon.evaluate(default, "gpu").time_s      # the threads' default parallelism is gone


def test_a_schedule_by_position_replays_on_a_kernel_of_the_same_form_with_other_names():
    from autocomp_jupyter import canon as c
    from autocomp_jupyter.schedule import by_position, from_positions

    src = GEMM.replace("D = relu(C)", "D = relu(C)\nE = exp(D)")
    other = src.replace("A", "P").replace("B", "Q")
    k1 = Kernel.from_ops(parse(src), ["C", "D", "E"])
    k2 = Kernel.from_ops(parse(other), ["C", "D", "E"])
    assert c.canonical_kernel(k1) is c.canonical_kernel(k2)
    levels = ("SRAM", "accumulator")
    s1 = replay(k1, [{"primitive": "tile", "loop": "i", "level": "SRAM", "size": 16},
                     {"primitive": "tile", "loop": "j", "level": "SRAM", "size": 12},
                     {"primitive": "reorder", "level": "SRAM", "order": ["j", "i", "k"]},
                     {"primitive": "parallel", "loop": "i"}], levels)
    record = by_position(s1)
    assert hash(record) is not None
    s2 = from_positions(k2, record)
    assert s2.kernel is k2 or s2.kernel.without_compute_at() == k2.without_compute_at()
    assert s2.tiles == s1.tiles and s2.order == s1.order and s2.parallel == s1.parallel
    assert canon.evaluate(s2, "npu").time_s == canon.evaluate(s1, "npu").time_s
