"""The course notebooks (tutorials/01..10) run headless both ways, and every answer check in
tutorials/checks.py accepts the intended answer and refuses a wrong one.

The exercises ship blank (`groups = ...`); their solutions are in tutorials/solutions/. Each
notebook runs blank (every CHECK says `✗ not yet: fill in ...`, no cell raises: Run All
completes for a student who has answered nothing), then, in the same kernel, each solution
and its CHECK again (every CHECK says `✓ correct`). The blank run's executed copy is kept in build/tutorials/ for the
documentation site. Notebooks run with nbclient in a scratch copy of tutorials/ (they import
`checks` and write small YAML files); they are stored without outputs. The check helpers are
tested directly in Python, which is fast; each refusal is tested next to its acceptance.
"""
from __future__ import annotations

import copy
import io
import os
import re
import sys
from contextlib import contextmanager, redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = ROOT / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("[0-9][0-9]_*.ipynb"))
sys.path.insert(0, str(TUTORIALS))
sys.path.insert(0, str(TUTORIALS / "solutions"))

import checks  # noqa: E402  (tutorials/checks.py)
import fill  # noqa: E402  (tutorials/solutions/fill.py)

import autocomp_jupyter as autocomp  # noqa: E402
from autocomp_jupyter import Fuse, Replace, adrs_rule, poly  # noqa: E402
from autocomp_jupyter.dsl import parse  # noqa: E402
from autocomp_jupyter.ir.program import Call, Op  # noqa: E402

@contextmanager
def refused(match: str = ""):
    """The check inside prints one friendly line — `✗ not yet: ...` matching `match` — and
    neither raises nor shows a traceback or source (checks.py holds the solutions)."""
    out = io.StringIO()
    checks.LAST = None
    with redirect_stdout(out):
        yield
    text = out.getvalue()
    assert checks.LAST is not None and not checks.LAST.ok, text
    assert text.count("\n") == 1 and text.startswith("✗ not yet: "), repr(text)
    assert "Traceback" not in text and "assert " not in text and "lambda" not in text, text
    assert re.search(match, text), (match, text)


def accepted(call, *args, **kwargs) -> str:
    """Run a check that must accept; its one line."""
    out = io.StringIO()
    with redirect_stdout(out):
        call(*args, **kwargs)
    text = out.getvalue()
    assert checks.LAST.ok and text.startswith("✓ correct: ") and text.count("\n") == 1, text
    return text


GEMM_RELU = "input A: f32[128, 128]\ninput B: f32[128, 128]\nC = matmul(A, B)\nD = relu(C)\n"
CHAIN = ("input A: f32[64, 64]\ninput B: f32[64, 64]\ninput b: f32[64]\nC = matmul(A, B)\n"
         "D = bias_add(C, b)\nE = relu(D)\nF = exp(E)\nG = tanh(F)\n")


# --------------------------------------------------------------------------- the notebooks


def test_the_course_has_its_notebooks_in_order():
    names = [p.name for p in NOTEBOOKS]
    assert [n[:2] for n in names] == ["01", "02", "03", "04", "05", "06", "07", "08", "09", "10"], names
    assert names[0] == "01_quick_start.ipynb" and names[-1] == "10_design_space.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_clean_and_has_exercises_and_checks(path):
    import nbformat

    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "store notebooks without outputs"
    assert sum(c.cell_type == "markdown" for c in nb.cells) >= 5
    assert any(c.source.startswith("# CHECK") for c in code), "every tutorial ends its exercises with a CHECK cell"
    exercises = [c for c in code if c.source.startswith(fill.EXERCISE)]
    assert exercises, "an exercise cell"
    for cell in exercises:  # blank: each answer is `...`, nothing of a solution left in the cell
        body = [line for line in cell.source.splitlines()[1:] if line.strip() and not line.startswith("#")]
        assert any(line.rstrip().endswith("= ...") for line in body), cell.source
        assert all(line.rstrip().endswith("= ...") or re.fullmatch(r"\w+ = \d+", line) for line in body), cell.source
    assert fill.filled(nb, path.stem)  # every exercise has a solution, every solution an exercise
    last = [c for c in nb.cells if c.cell_type == "markdown"][-1].source
    assert "## What you learned" in last and "## Try next" in last, "each tutorial ends with what was learned"
    # stored as JupyterLab (the Jupyter server's nbformat) writes it, so opening and saving
    # an untouched tutorial changes nothing, and opening it does not mark it modified
    assert nbformat.writes(nb) + ("" if nbformat.writes(nb).endswith("\n") else "\n") == path.read_text()
    assert nb.metadata.kernelspec == {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    assert {"codemirror_mode", "file_extension", "mimetype", "name", "nbconvert_exporter", "pygments_lexer",
            "version"} <= set(nb.metadata.language_info)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_blank_then_each_solution_checks_correct(path, tmp_path):
    """A student's Run All before answering anything: no cell raises, each CHECK cell of an
    exercise says `✗ not yet: fill in ...` in one line (a CHECK with nothing to fill in still
    checks). The executed copy is what the documentation shows. Then, in the same kernel,
    each exercise's solution and its CHECK again: every one says `✓ correct`."""
    import nbformat

    nb, solved = fill.execute_blank_then_solved(nbformat.read(path, as_version=4), path.stem,
                                                tmp_path / "tutorials")   # raises naming a failing cell
    verdicts = fill.check_lines(nb)
    blanks = [v for v in verdicts if v.startswith("✗ not yet: fill in `")]
    assert len(blanks) == len(fill.exercise_ids(nb)), verdicts
    assert all(v.count("\n") == 0 and (v.startswith("✗ not yet: fill in `") or v.startswith("✓ correct: "))
               for v in verdicts), verdicts
    text = "\n".join(o.get("text", "") + str(o.get("data", "")) for c in nb.cells if c.cell_type == "code"
                     for o in c.outputs)
    assert "Traceback" not in text
    fill.save_executed(nb, path)
    assert len(solved) == len(fill.exercise_ids(nb)), solved
    assert all(v.startswith("✓ correct: ") and "\n" not in v for v in solved), solved


def test_a_blank_answer_is_one_line_naming_the_variable():
    with refused(r"fill in `carrying_loop` in the exercise cell above"):
        checks.check_carrying_loop(..., None)
    with refused(r"fill in `slowest` and `share`"):
        checks.check_share_of_time(None, ..., ...)
    with refused(r"fill in `groups`"):
        checks.check_fusion_groups("input A: f32[4]\nB = relu(A)\n", ...)


def test_the_solutions_fill_in_every_exercise_of_a_copy(tmp_path):
    assert fill.main(["--out", str(tmp_path)]) == 0
    import nbformat

    for path in NOTEBOOKS:
        nb = nbformat.read(tmp_path / path.name, as_version=4)
        assert not any(c.source.rstrip().endswith("= ...") for c in nb.cells if c.cell_type == "code"), path.name
    assert (tmp_path / "checks.py").exists()


# --------------------------------------------------------------------------- 01


@pytest.fixture(scope="module")
def gemm_res():
    return autocomp.optimize(GEMM_RELU, target="npu", tune=0)


def test_check_quick_start(gemm_res):
    r = gemm_res.report
    accepted(checks.check_quick_start, gemm_res, r["speedup_vs_naive"], r["roofline_fraction"], r["verified"])
    with refused("library"):
        checks.check_quick_start(gemm_res, r["speedup_vs_library"], r["roofline_fraction"], r["verified"])
    with refused("roofline"):
        checks.check_quick_start(gemm_res, r["speedup_vs_naive"], r["roofline_fraction"] / 2, r["verified"])
    with refused():
        checks.check_quick_start(gemm_res, r["speedup_vs_naive"], r["roofline_fraction"], "yes")
    with refused("number"):
        checks.check_quick_start(gemm_res, None, r["roofline_fraction"], r["verified"])


# --------------------------------------------------------------------------- 02


def test_check_fusion_groups():
    src = "input A: f32[64, 64]\ninput B: f32[64, 64]\nC = matmul(A, B)\nD = relu(C)\nE = exp(C)\noutput D, E\n"
    accepted(checks.check_fusion_groups, src, [["C"], ["D"], ["E"]])
    with refused("ONLY reader"):
        checks.check_fusion_groups(src, [["C", "D"], ["E"]])
    with refused("exactly one kernel"):
        checks.check_fusion_groups(src, [["C", "D"]])


def test_check_disable_rule(tmp_path):
    path = str(tmp_path / "r.yaml")
    good = "fusion:\n  rules:\n    - {name: epilogue, enabled: false}\n"
    accepted(checks.check_disable_rule, good, CHAIN, "epilogue", path=path)
    with refused("still fired"):
        checks.check_disable_rule("fusion:\n  params: {max_fusion_depth: 6}\n", CHAIN, "epilogue", path=path)
    with refused("does not load"):
        checks.check_disable_rule("fusion:\n  rulez: []\n", CHAIN, "epilogue", path=path)


def test_check_max_depth(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    accepted(checks.check_max_depth, 2, CHAIN, want_kernels=3)
    with refused("not 3"):
        checks.check_max_depth(4, CHAIN, want_kernels=3)
    with refused("integer"):
        checks.check_max_depth("2", CHAIN, want_kernels=3)


# --------------------------------------------------------------------------- 03


def test_check_footprint(gemm_res):
    t = gemm_res.report["kernels"][0]["tiles"]
    i, j, k = t["i"]["SRAM"], t["j"]["SRAM"], t["k"]["SRAM"]
    right = (i * k + k * j + i * j) * 4
    accepted(checks.check_footprint, gemm_res, "C_D", "SRAM", right)
    with refused("elements"):
        checks.check_footprint(gemm_res, "C_D", "SRAM", right // 4)
    with refused("not the footprint"):
        checks.check_footprint(gemm_res, "C_D", "SRAM", (i * k + k * j) * 4)


def test_check_smaller_memory(tmp_path):
    import yaml

    src = "input A: f32[512, 512]\ninput B: f32[512, 512]\nC = matmul(A, B)\nD = relu(C)\n"
    spec = yaml.safe_load((Path(autocomp.__file__).parent / "accel" / "presets" / "npu.yaml").read_text())
    spec["name"] = "npu_small"
    for level in spec["memory"]:
        if level["name"] == "SRAM":
            level["size_bytes"] = "64 KiB"
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(spec))
    big = autocomp.optimize(src, target="npu", tune=0)
    small = autocomp.optimize(src, target=str(tmp_path / "small.yaml"), tune=0)
    accepted(checks.check_smaller_memory, big, small)
    with refused():
        checks.check_smaller_memory(big, big)


# --------------------------------------------------------------------------- 04


@pytest.fixture(scope="module")
def gemm():
    return parse("input A: f32[16, 16]\ninput B: f32[16, 16]\nC = matmul(A, B)\n").ops[0].statements


def test_check_carrying_loop(gemm):
    accepted(checks.check_carrying_loop, "k", gemm)
    with refused("carries no flow"):
        checks.check_carrying_loop("i", gemm)
    with refused("string"):
        checks.check_carrying_loop(2, gemm)


def test_check_legal_schedule(gemm):
    original = poly.original_schedule(gemm)
    accepted(checks.check_legal_schedule, original.tile({"i": 4, "j": 4, "k": 4}).interchange("j_outer", "i_outer"), gemm)
    with refused("isl refuses"):
        checks.check_legal_schedule(original.reverse("k"), gemm)
    with refused("original"):
        checks.check_legal_schedule(original, gemm)


def test_check_parallel_loops(gemm):
    accepted(checks.check_parallel_loops, {"i", "j"}, gemm)
    with refused("race"):
        checks.check_parallel_loops({"i", "j", "k"}, gemm)
    with refused("missed"):
        checks.check_parallel_loops(["i"], gemm)


# --------------------------------------------------------------------------- 05


@pytest.fixture(scope="module")
def tuned():
    src = "input A: f32[128, 128]\ninput B: f32[128, 128]\nC = matmul(A, B)\nD = relu(C)\n"
    return autocomp.optimize(src, target="tpu", tune=100, top=3, seed=0)


def test_check_fastest_version(tuned):
    top = tuned.report["tuning"]["top"]
    best = min(top, key=lambda t: t["time_s"])["name"]
    accepted(checks.check_fastest_version, tuned, best)
    slower = [t["name"] for t in top if t["time_s"] > min(x["time_s"] for x in top)]
    if slower:
        with refused("not the fastest"):
            checks.check_fastest_version(tuned, slower[0])
    with refused("not a version"):
        checks.check_fastest_version(tuned, "v9")


def test_check_variant(tuned):
    tiles = copy.deepcopy(tuned.report["kernels"][0]["tiles"])
    accepted(checks.check_variant, tuned, "C_D", tiles)
    with refused():  # untiled at every level: spills or is far slower
        checks.check_variant(tuned, "C_D", {"i": {"VMEM": 1, "vregs": 1}, "j": {"VMEM": 1, "vregs": 1}})


def test_fastest_version_counts_the_optimised_plan_and_ties(tuned):
    from autocomp_jupyter.ui.compare import version_specs

    specs = [s for s in version_specs(tuned) if s.get("time_s")]
    best = min(s["time_s"] for s in specs)
    tied = [s["name"] for s in specs if s["time_s"] == best]
    for name in tied:  # the Tune tab lists 'optimized' as a version: the check agrees
        accepted(checks.check_fastest_version, tuned, name)
    with refused("not a version of this result"):
        checks.check_fastest_version(tuned, "optimised")


def test_a_tile_larger_than_its_loop_is_an_error(tuned):
    v = tuned.evaluate_variant("C_D", tiles={"i": {"VMEM": 300}})
    assert v["legal"] is False and v["error"] is True
    assert "larger than loop i (extent 128)" in v["reason"]
    with refused("not valid: tile i = 300 at VMEM is larger than loop i"):
        checks.check_variant(tuned, "C_D", {"i": {"VMEM": 300, "vregs": 32}})
    with refused("not a kernel of this result"):
        checks.check_variant(tuned, "CD", {"i": {"VMEM": 64}})


def test_an_answer_of_the_wrong_shape_is_a_line_not_a_traceback(gemm_res):
    with refused("cannot be checked|should be a number"):
        checks.check_share_of_time(gemm_res, gemm_res.report["kernels"][0]["name"], [0.5])
    with refused("not a kernel name"):
        checks.check_share_of_time(gemm_res, "nope", 0.5)


def test_an_imported_models_kernels_answer_by_full_or_short_name(tmp_path):
    pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from autocomp_jupyter.ui.names import kernel_labels

    w = numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32) * 0.1)
    w.name = "stem.w"
    nodes = [helper.make_node("Conv", ["image", "stem.w"], ["/stem/Conv_output_0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["/stem/Conv_output_0"], ["/stem/Relu_output_0_long_enough_to_shorten"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("/stem/Relu_output_0_long_enough_to_shorten",
                                                             TensorProto.FLOAT, [1, 8, 8, 8])], [w])
    path = tmp_path / "m.onnx"
    import onnx
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    res = autocomp.optimize(str(path), target="npu", tune=0)
    labels = kernel_labels(res)
    (full, short), = labels.items()
    assert len(full) > 24 and short == "conv2d_1"
    assert res.report["kernels"][0]["name"] == full  # the JSON keeps the full name
    accepted(checks.check_slowest_kernel, res, full)
    accepted(checks.check_slowest_kernel, res, short)
    accepted(checks.check_share_of_time, res, short, 1.0)


def test_check_determinism():
    src = "input X: f32[96, 160]\ninput W: f32[160, 64]\nY = matmul(X, W)\nZ = gelu(Y)\n"
    accepted(checks.check_determinism, True, False, src, tune=100)
    with refused("seed"):
        checks.check_determinism(False, False, src, tune=100)


# --------------------------------------------------------------------------- 06


TARGET = """name: t16
clock_ghz: 1.0
compute: {kind: systolic, pe_rows: 16, pe_cols: 16, dataflow: weight_stationary, vector_ops_per_cycle: 16}
energy_pj_per_mac: 0.25
memory:
  - {name: accumulator, size_bytes: 64 KiB, holds: [outputs], bandwidth_gbps: 64, latency_cycles: 2, energy_pj_per_byte: 0.2}
  - {name: scratchpad, size_bytes: 256 KiB, holds: [inputs], bandwidth_gbps: 64, latency_cycles: 2, energy_pj_per_byte: 0.4}
  - {name: DRAM, size_bytes: unbounded, bandwidth_gbps: 16, latency_cycles: 100, energy_pj_per_byte: 40}
"""


def test_check_target_yaml(tmp_path):
    path = str(tmp_path / "t.yaml")
    accepted(checks.check_target_yaml, TARGET.replace("pe_rows: 16, pe_cols: 16", "pe_rows: 32, pe_cols: 32"), pe=32, path=path)
    with refused("16x16"):
        checks.check_target_yaml(TARGET, pe=32, path=path)
    with refused("does not load"):
        checks.check_target_yaml(TARGET.replace("bandwidth_gbps: 16,", "bandwidth_gbps: -4,"), pe=16, path=path)


POOL = "input X: f32[1, 16, 32, 32]\nP = maxpool2d(X, kernel=2)\nR = relu(P)\n"


def test_check_custom_rule():
    @adrs_rule("tutorial_test_pool_relu")
    def pool_relu(producer, consumer):
        return Fuse("relu on the pooled tile") if producer.kind == "maxpool2d" and consumer.kind == "relu" else None

    @adrs_rule("tutorial_test_never")
    def never(producer, consumer):
        return None

    accepted(checks.check_custom_rule, "tutorial_test_pool_relu", POOL, ["P", "R"])
    with refused("did not fire"):
        checks.check_custom_rule("tutorial_test_never", POOL, ["P", "R"])
    with refused("registered"):
        checks.check_custom_rule("tutorial_test_not_registered", POOL, ["P", "R"])


def test_check_rollback_named():
    @adrs_rule("tutorial_test_wrong_relu")
    def wrong(producer, consumer):
        if producer.kind != "matmul" or consumer.kind != "relu":
            return None
        st = producer.statements[0]
        bad = st.__class__(consumer.output, st.target_indices, st.reduce, st.loops, Call("relu", (st.expr,)))
        return Replace((Op("fused_mm_relu", "contraction", producer.inputs, consumer.output, (), (bad,)),))

    src = "input A: f32[32, 32]\ninput B: f32[32, 32]\nC = matmul(A, B)\nD = relu(C)\n"
    res = autocomp.optimize(src, target="tpu", tune=0, rules=["tutorial_test_wrong_relu"])
    accepted(checks.check_rollback_named, res, "tutorial_test_wrong_relu")
    clean = autocomp.optimize(src, target="tpu", tune=0)
    with refused("not named"):
        checks.check_rollback_named(clean, "tutorial_test_wrong_relu")


# --------------------------------------------------------------------------- 07


@pytest.fixture(scope="module")
def host_res():
    old = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        src = ("input A: f32[32, 32]\ninput B: f32[32, 32]\nC = matmul(A, B)\nD = relu(C)\n"
               "E = transpose(D)\n")
        return autocomp.optimize(src, target="host", tune=0, measure=True)
    finally:
        if old is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = old


def test_check_kernel_functions(host_res):
    names = re.findall(r"static void (kernel_\w+)\(", host_res.code("c"))
    assert names
    accepted(checks.check_kernel_functions, host_res, names)
    with refused("kernel functions"):
        checks.check_kernel_functions(host_res, names[:-1] + ["program_run"])


def test_check_model_error(host_res):
    ratio = host_res.report["measured"]["measured_time_s"] / host_res.report["optimized"]["time_s"]
    accepted(checks.check_model_error, host_res, ratio)
    with refused():
        checks.check_model_error(host_res, ratio * 2)
    if abs(ratio - 1) > 0.02:
        with refused("upside down"):
            checks.check_model_error(host_res, 1 / ratio)
    with refused("not measured"):
        checks.check_model_error(autocomp.optimize("input A: f32[8, 8]\nB = relu(A)\n", target="npu", tune=0), 1.0)


# --------------------------------------------------------------------------- 08


def test_check_slowest_kernel_and_share(gemm_res):
    kernels = sorted(gemm_res.report["kernels"], key=lambda k: -k["metrics"]["time_s"])
    accepted(checks.check_slowest_kernel, gemm_res, kernels[0]["name"])
    with refused("kernel name"):
        checks.check_slowest_kernel(gemm_res, 3)
    total = sum(k["metrics"]["time_s"] for k in kernels)
    share = kernels[0]["metrics"]["time_s"] / total
    accepted(checks.check_share_of_time, gemm_res, kernels[0]["name"], share)
    with refused("percentage"):
        checks.check_share_of_time(gemm_res, kernels[0]["name"], 100 * share)


# --------------------------------------------------------------------------- 09


ATTENTION = ("input Q: f32[2, 64, 16]\ninput K: f32[2, 64, 16]\ninput V: f32[2, 64, 16]\n"
             "S[h, s, t] += Q[h, s, d] * K[h, t, d]\nM[h, s] max= S[h, s, t]\nE[h, s, t] = exp(S[h, s, t] - M[h, s])\n"
             "Z[h, s] += E[h, s, t]\nO[h, s, d] += E[h, s, t] * V[h, t, d]\nY[h, s, d] = O[h, s, d] / Z[h, s]\n")


def test_check_attention_fused():
    res = autocomp.optimize(ATTENTION, target="npu", tune=0)
    fired = [r["rule"] for r in res.report["rules"] if r["pass"] == "fusion" and r["applied"]]
    accepted(checks.check_attention_fused, res, len(res.report["kernels"]), fired[-1])
    with refused("kernel"):
        checks.check_attention_fused(res, 6, fired[-1])
    with refused("not a fusion rule that fired"):
        checks.check_attention_fused(res, len(res.report["kernels"]), "conv_relu")


def test_check_causal_share():
    accepted(checks.check_causal_share, 512, sum(s + 1 for s in range(512)) / 512 ** 2)
    with refused("diagonal"):
        checks.check_causal_share(512, 0.5)
    with refused("not the share"):
        checks.check_causal_share(512, 0.25)


def test_check_decode_floor():
    src = ("input q: f32[2, 2, 16]\ninput Kc: f32[2, 128, 16]\ninput Vc: f32[2, 128, 16]\n"
           "S[g, r, t] += q[g, r, d] * Kc[g, t, d]\nO[g, r, d] += S[g, r, t] * Vc[g, t, d]\n")
    res = autocomp.optimize(src, target="npu", tune=0)
    right = 2 * 2 * 128 * 16 * 4
    accepted(checks.check_decode_floor, res, right, right / res.target.dram_bandwidth)
    with refused("one of the two caches"):
        checks.check_decode_floor(res, right / 2, right / 2 / res.target.dram_bandwidth)
    with refused("DRAM bandwidth"):
        checks.check_decode_floor(res, right, right / 1e9)


# --------------------------------------------------------------------------- 10


@pytest.fixture(scope="module")
def flows():
    """Four designs of a small GEMM: two dataflows by two arrays."""
    return autocomp.explore(GEMM_RELU, "npu", ["compute.dataflow=weight_stationary,output_stationary",
                                               "compute.pe_rows,compute.pe_cols=8x8,16x16"], tune=0)


def fake_exploration(rows):
    """An exploration-shaped object from (time_s, energy_j, area_mm2) rows (None: an invalid design)."""
    from types import SimpleNamespace

    points = [{"params": {"compute.pe_rows": i}, "valid": False, "verified": False, "reason": "zero-byte SRAM"}
              if r is None else {"params": {"compute.pe_rows": i}, "valid": True, "verified": True,
                                 "time_s": r[0], "energy_j": r[1], "area_mm2": r[2], "edp": r[0] * r[1], "bound": ""}
              for i, r in enumerate(rows)]
    return SimpleNamespace(points=points)


def test_check_pareto_front(flows):
    accepted(checks.check_pareto_front, flows, list(flows.pareto))
    ex = fake_exploration([(1, 1, 1), (2, 2, 2), (1, 3, 0.5), None, (1, 1, 1)])  # 4 ties 0; 1 is beaten
    accepted(checks.check_pareto_front, ex, [0, 2, 4])
    with refused("design 1 .* is beaten by design 0"):
        checks.check_pareto_front(ex, [0, 1, 2, 4])
    with refused("you missed design 4"):
        checks.check_pareto_front(ex, [0, 2])
    with refused("design 3 .* did not run"):
        checks.check_pareto_front(ex, [0, 2, 3, 4])
    with refused("not an index"):
        checks.check_pareto_front(ex, [0, 2, 9])
    with refused("list of indices"):
        checks.check_pareto_front(ex, 0)


def test_check_array_speedup(flows):
    small, big = 0, 1  # weight-stationary 8x8, 16x16
    right = flows.points[small]["time_s"] / flows.points[big]["time_s"]
    assert right > 1.5
    text = accepted(checks.check_array_speedup, flows, small, big, right)
    assert "for 4x the MACs per cycle" in text
    with refused("upside down"):
        checks.check_array_speedup(flows, small, big, 1 / right)
    with refused("not the speedup"):
        checks.check_array_speedup(flows, small, big, right * 1.2)


def test_check_dataflows(flows):
    on8 = {p["params"]["compute.dataflow"]: p for p in flows.points if p["params"]["compute.pe_rows"] == 8}
    faster = min(on8, key=lambda d: on8[d]["time_s"])
    frugal = min(on8, key=lambda d: on8[d]["energy_j"])
    accepted(checks.check_dataflows, flows, 8, faster, frugal)
    other = {"weight_stationary": "output_stationary", "output_stationary": "weight_stationary"}
    assert on8[faster]["time_s"] < on8[other[faster]]["time_s"] and on8[frugal]["energy_j"] < on8[other[frugal]]["energy_j"]
    with refused("not the faster dataflow"):
        checks.check_dataflows(flows, 8, other[faster], frugal)
    with refused("does not use the least energy"):
        checks.check_dataflows(flows, 8, faster, other[frugal])
    with refused("not a dataflow of this sweep"):
        checks.check_dataflows(flows, 8, "row_stationary", frugal)
    with refused("no two verified dataflows on a 64-row array"):
        checks.check_dataflows(flows, 64, faster, frugal)
    with refused("does not vary compute.dataflow"):
        checks.check_dataflows(fake_exploration([(1, 1, 1)]), 0, faster, frugal)


def test_check_budget_design(flows):
    # 0 fastest, 1 most frugal, 2 the lowest EDP within budget, 3 over the area budget, 4 invalid
    ex = fake_exploration([(1.0, 9.0, 1.0), (5.0, 1.5, 1.0), (2.0, 3.0, 1.0), (0.5, 0.5, 5.0), None])
    budget = dict(max_time_s=6.0, max_energy_j=10.0, max_area_mm2=2.0)
    text = accepted(checks.check_budget_design, ex, 2, **budget)
    assert "lowest EDP of the 3 design(s)" in text
    accepted(checks.check_budget_design, ex, ex.points[2], **budget)  # the point itself counts
    with refused("breaks the area budget: 5 mm² > 2 mm²"):
        checks.check_budget_design(ex, 3, **budget)
    with refused("design 2 .* has a lower energy-delay product.*best on time alone"):
        checks.check_budget_design(ex, 0, **budget)
    with refused("best on energy alone"):
        checks.check_budget_design(ex, 1, **budget)
    with refused("breaks the latency budget"):
        checks.check_budget_design(ex, 1, max_time_s=4.0, max_energy_j=10.0, max_area_mm2=2.0)
    with refused("did not run or is not verified: zero-byte SRAM"):
        checks.check_budget_design(ex, 4, **budget)
    with refused("None is not right"):
        checks.check_budget_design(ex, None, **budget)
    accepted(checks.check_budget_design, ex, None, max_time_s=0.1, max_energy_j=10.0, max_area_mm2=2.0)
    with refused("index into ex.points"):
        checks.check_budget_design(ex, "design 2", **budget)
    with refused("the energy budget should be a number"):
        checks.check_budget_design(ex, 2, max_time_s=6.0, max_energy_j="10 J", max_area_mm2=2.0)
    # on a real sweep: the lowest-EDP design under loose budgets is accepted
    loose = dict(max_time_s=1.0, max_energy_j=1.0, max_area_mm2=100.0)
    best = min(range(len(flows.points)), key=lambda i: flows.points[i]["edp"])
    accepted(checks.check_budget_design, flows, best, **loose)
