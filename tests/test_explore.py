"""Design-space exploration (explore.py, `autocomp explore`): sweeps, the Pareto front,
invalid designs, Dask, resuming from the cache, and bad input. Tiny programs, 2-4 designs."""
import json
import random

import pytest

from autocomp_jupyter.cli import main
from autocomp_jupyter.dse import explore, pareto_front

SRC = """input A: f32[64, 64]
input B: f32[64, 64]
C = matmul(A, B)
D = relu(C)
output D
"""
POINT_KEYS = {"params", "valid", "verified", "time_s", "energy_j", "area_mm2", "edp", "limit_fraction", "bound"}


def brute_force_front(points):
    ok = [(i, (p["time_s"], p["energy_j"], p["area_mm2"])) for i, p in enumerate(points) if p["valid"] and p["verified"]]
    return [i for i, a in ok
            if not any(b != a and all(y <= x for x, y in zip(a, b)) for _, b in ok)]


def test_pareto_front_matches_brute_force_on_random_points_with_ties_and_invalid_ones():
    rng = random.Random(0)
    for _ in range(30):
        points = [{"valid": rng.random() > 0.1, "verified": True, "time_s": rng.choice([1, 2, 3]),
                   "energy_j": rng.choice([1, 2, 3]), "area_mm2": rng.choice([1, 2])} for _ in range(12)]
        assert pareto_front(points) == brute_force_front(points)
    # a point equal to a front point on all three stays on the front beside it
    same = [{"valid": True, "verified": True, "time_s": 1, "energy_j": 1, "area_mm2": 1}] * 2
    assert pareto_front(same) == [0, 1]


def test_a_sweep_runs_every_design_keeps_the_invalid_one_and_area_grows():
    res = explore(SRC, "npu", ["compute.pe_rows,compute.pe_cols=8x8,16x16", "memory.SRAM.size_bytes=64KiB,0"])
    points = res.points
    assert [p["params"] for p in points] == [
        {"compute.pe_rows": r, "compute.pe_cols": r, "memory.SRAM.size_bytes": s} for r in (8, 16) for s in (65536, 0)]
    valid = [p for p in points if p["valid"]]
    assert len(valid) == 2 and all(set(p) == POINT_KEYS for p in valid) and all(p["verified"] for p in valid)
    assert all(p["edp"] == pytest.approx(p["time_s"] * p["energy_j"]) for p in valid)
    assert valid[0]["area_mm2"] < valid[1]["area_mm2"]
    zero = points[1]
    assert not zero["valid"] and "memory[1].size_bytes" in zero["reason"]
    assert res.pareto == brute_force_front(points)
    assert res.reports[0]["area_mm2"] == points[0]["area_mm2"] and res.reports[1] is None
    assert list(res.to_json()) == ["target", "sweeps", "points", "pareto", "seconds"]


def test_an_onnx_model_sweeps_too():
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"])], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [8, 32])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [8, 16])],
                              [numpy_helper.from_array(np.ones((32, 16), np.float32), "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    res = explore(model, "gemmini", ["memory.DRAM.bandwidth_gbps=8,32"])
    slow, fast = res.points
    assert slow["verified"] and fast["verified"] and fast["time_s"] <= slow["time_s"]
    assert slow["area_mm2"] == fast["area_mm2"]


def test_serial_and_dask_give_the_same_points():
    distributed = pytest.importorskip("dask.distributed")
    sweeps = ["compute.pe_rows,compute.pe_cols=8x8,16x16"]
    serial = explore(SRC, "npu", sweeps)
    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        on_dask = explore(SRC, "npu", sweeps, scheduler=cluster.scheduler_address)
    assert on_dask.points == serial.points and on_dask.pareto == serial.pareto


def test_an_interrupted_sweep_resumes_from_the_cache(tmp_path):
    sweeps = ["clock_ghz=0.5,1.0,2.0"]

    def stop_after_two(done, total, point):
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        explore(SRC, "npu", sweeps, cache=tmp_path, progress=stop_after_two)
    seen = []
    resumed = explore(SRC, "npu", sweeps, cache=tmp_path, progress=lambda d, t, p: seen.append(d))
    assert resumed.cached == 2 and seen == [3]
    fresh = explore(SRC, "npu", sweeps)
    assert resumed.points == fresh.points
    assert [p["time_s"] for p in fresh.points] == sorted((p["time_s"] for p in fresh.points), reverse=True)


@pytest.mark.parametrize("sweep, words", [
    ("compute.pe_rowz=8,16", ["unknown path 'compute.pe_rowz'", "did you mean 'compute.pe_rows'", "memory.SRAM.size_bytes"]),
    ("memory.SRAM.size_bytes=256KiB,1MB2", ["memory.SRAM.size_bytes: expected a size", "'1MB2'"]),
    ("compute.pe_rows=8.5", ["compute.pe_rows: expected an integer, got '8.5'"]),
    ("compute.pe_rows,compute.pe_cols=8x8,16", ["value '16' needs 2 parts"]),
])
def test_bad_sweeps_exit_2_pointing_at_the_input(tmp_path, capsys, sweep, words):
    program = tmp_path / "mm.acir"
    program.write_text(SRC)
    assert main(["explore", str(program), "--target", "npu", "--sweep", sweep]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(w in err for w in words), err


def test_over_a_thousand_points_needs_max_points_and_the_cli_writes_json_and_csv(tmp_path, capsys):
    program = tmp_path / "mm.acir"
    program.write_text(SRC)
    big = ["--sweep", "compute.pe_rows=" + ",".join(map(str, range(1, 41))),
           "--sweep", "compute.pe_cols=" + ",".join(map(str, range(1, 27)))]
    assert main(["explore", str(program), *big]) == 2
    err = capsys.readouterr().err
    assert "1,040 points" in err and "--max-points 1040" in err
    csv = tmp_path / "points.csv"
    assert main(["explore", str(program), "--target", "gemmini", "--sweep", "memory.scratchpad.size_bytes=128KiB,512KiB",
                 "--json", "--csv", str(csv)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["params"]["memory.scratchpad.size_bytes"] for p in out["points"]] == [131072, 524288]
    assert set(out) >= {"points", "pareto", "seconds"} and out["pareto"] == brute_force_front(out["points"])
    lines = csv.read_text().splitlines()
    assert lines[0].startswith("index,memory.scratchpad.size_bytes,valid,verified,time_s") and len(lines) == 3


def test_a_swept_array_scales_the_peak_macs_a_preset_writes_out():
    import yaml

    from autocomp_jupyter.accel.target import parse_target
    from autocomp_jupyter.dse import edited, target_mapping

    raw, _ = target_mapping("npu")  # 32x32 with peak_macs_per_cycle {f16: 1024, f32: 256, ...}
    small = parse_target(yaml.safe_dump(edited(raw, {"compute.pe_rows": 16, "compute.pe_cols": 16})))
    assert small.compute.macs("f16") == 256 and small.compute.macs("f32") == 64
    pinned = parse_target(yaml.safe_dump(edited(raw, {"compute.pe_rows": 16, "compute.peak_macs_per_cycle.f32": 100})))
    assert pinned.compute.macs("f16") == 512 and pinned.compute.macs("f32") == 100


def test_a_swept_array_rescales_per_pe_levels_and_derived_peaks_and_an_energy_form_replaces_the_other():
    from pathlib import Path

    import yaml

    from autocomp_jupyter.accel.target import parse_target
    from autocomp_jupyter.dse import edited, parse_sweep, path_kinds, target_mapping, typed_sweep

    raw, _ = target_mapping(str(Path(__file__).parent.parent / "benchmarks" / "targets" / "tpu_like.yaml"))
    sweep = typed_sweep(parse_sweep("compute.pe_rows,compute.pe_cols=8x8,16x16"), path_kinds(raw))
    for n, step in zip((8, 16), sweep.values):
        t = parse_target(yaml.safe_dump(edited(raw, dict(zip(sweep.paths, step)))))
        assert t.level("rf_W").size_bytes == n * n * 128 and t.level("rf_W").bandwidth_gbps == n * n
        assert t.level("rf_O").size_bytes == n * n * 2 and t.compute.macs("i8") == n * n
    per_byte = parse_target(yaml.safe_dump(edited(raw, {"memory.SRAM.energy_pj_per_byte": 50})))
    assert per_byte.level("SRAM").energy_pj_per_byte == 50
    wider = parse_target(yaml.safe_dump(edited(raw, {"memory.SRAM.width_bits": 1024})))
    assert wider.level("SRAM").read_pj_per_byte == pytest.approx(416.16 / 128)


def test_the_explore_tab_draws_every_valid_design_and_joins_the_front():
    from autocomp_jupyter.ui.explore import explore_static_html

    res = explore(SRC, "npu", ["compute.pe_rows,compute.pe_cols=8x8,16x16", "memory.SRAM.size_bytes=64KiB,0"])
    html = explore_static_html(res)
    assert html.count("<circle") == 2 and 'data-tab="Explore"' in html
    assert ("autocomp-pareto" in html) == (len(res.pareto) > 1)
    assert "compute.pe_rows=16, compute.pe_cols=16" in html and "memory[1].size_bytes" in html  # hover, invalid row
    # a design's full report is the pipeline's on that design: the same numbers as its point
    assert res.result(0).report["optimized"]["time_s"] == res.points[0]["time_s"]
    # without a live frontend the view is the static tab only (as a reopened notebook shows it)
    bundle = res._repr_mimebundle_()
    assert 'data-tab="Explore"' in bundle["text/html"] and "application/vnd.jupyter.widget-view+json" not in bundle


def test_a_click_on_a_designs_circle_opens_its_report_and_rings_it():
    pytest.importorskip("anywidget")
    from autocomp_jupyter.ui.explore import ExploreView

    res = explore(SRC, "npu", ["compute.pe_rows,compute.pe_cols=8x8,16x16", "memory.SRAM.size_bytes=64KiB,0"])
    view = ExploreView(res)
    assert view.plot.svg.count('<circle data-point="') == 2 and view.report.children == ()
    assert [p["valid"] for p in res.points] == [True, False, True, False]
    view.plot.picked = 1                       # the invalid design (no circle): nothing opens
    assert view.report.children == () and view.pick.value is None
    view.plot.picked = 2                       # what the browser sends on a click on circle 2
    assert view.pick.value == 2 and "design #2" in view.report.children[0].value
    assert 'stroke="#000"' in view.plot.svg.split('data-point="2"')[1].split(">")[0]   # ringed
    view.pick.value = 0                        # the menu moves the ring and the click state too
    assert view.plot.picked == 0 and "design #0" in view.report.children[0].value


def test_the_magic_explores_and_keeps_the_sweep_in_out():
    from IPython.utils.capture import capture_output
    from test_ui import ipython_shell

    from autocomp_jupyter.dse import Exploration

    ip = ipython_shell()
    ip.display_formatter.active_types = list(ip.display_formatter.format_types)  # as a notebook kernel
    ip.run_line_magic("load_ext", "autocomp_jupyter")
    with capture_output() as cap:
        ip.run_cell_magic("autocomp", '--target npu --static --out ex --explore '
                          '"compute.pe_rows,compute.pe_cols=8x8,16x16; clock_ghz=1.0"', SRC)
    assert isinstance(ip.user_ns["ex"], Exploration) and len(ip.user_ns["ex"].points) == 2
    html = "".join(o.data.get("text/html", "") for o in cap.outputs)
    assert 'data-tab="Explore"' in html
    with capture_output() as cap:
        ip.run_cell_magic("autocomp", '--target npu --explore "compute.pe_rowz=8"', SRC)
    text = "".join(o.data.get("text/plain", "") for o in cap.outputs)
    assert "unknown path 'compute.pe_rowz'" in text and "Traceback" not in text


def test_designs_differing_only_in_area_fields_share_one_pipeline_run(monkeypatch):
    import autocomp_jupyter.pipeline as pipeline

    runs = []
    real = pipeline.optimize
    monkeypatch.setattr(pipeline, "optimize", lambda *a, **k: runs.append(k["target"]) or real(*a, **k))
    res = explore(SRC, "npu", ["technology_nm=7,16,28", "memory.SRAM.ports=1,2"])
    assert len(runs) == 1 and len(res.points) == 6
    assert len({p["time_s"] for p in res.points}) == 1 and len({p["area_mm2"] for p in res.points}) == 6
    assert res.pareto == [0]  # 7 nm, one port: the smallest, as fast and as frugal as the others
    assert [r["area_mm2"] for r in res.reports] == [p["area_mm2"] for p in res.points]


def test_a_design_the_pipeline_fails_on_is_kept_with_its_reason(monkeypatch):
    import autocomp_jupyter.pipeline as pipeline

    real = pipeline.optimize

    def no_mapping_on_8x8(program, target, **kwargs):
        if target.compute.pe_rows == 8:
            raise RuntimeError("no legal mapping")
        return real(program, target=target, **kwargs)

    monkeypatch.setattr(pipeline, "optimize", no_mapping_on_8x8)
    first, second = explore(SRC, "npu", ["compute.pe_rows=8,16"]).points
    assert not first["valid"] and first["reason"].endswith("RuntimeError: no legal mapping")
    assert second["valid"] and second["verified"]
