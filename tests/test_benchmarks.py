"""The benchmark suite (benchmarks/run_suite.py): a smoke run on one tiny workload and one
preset, its JSON/Markdown/SVG output, the README block, and that every workload parses."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from autocomp_jupyter.dsl import load

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def run_suite():
    spec = importlib.util.spec_from_file_location("run_suite", BENCH / "run_suite.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def smoke(run_suite, tmp_path_factory):
    out = tmp_path_factory.mktemp("suite")
    data = run_suite.main(["--quick", "--workloads", "gemm_small_64", "--targets", "npu", "--tune", "20",
                           "--skip", "search", "host", "zigzag", "llm", "--sim-max-steps", "2000", "--quiet",
                           "--out", str(out)])
    return run_suite, out, data


@pytest.mark.parametrize("path", sorted((BENCH / "workloads").glob("*.acir")), ids=lambda p: p.stem)
def test_every_workload_parses(path):
    program = load(path)
    moves_only = all(op.op_class == "injective" for op in program.ops)     # a gather: data, no arithmetic
    assert (program.flops > 0 or moves_only) and program.outputs


def test_json_has_every_column_with_numbers(smoke):
    run_suite, out, data = smoke
    saved = json.loads((out / "results.json").read_text())
    assert saved["meta"]["targets"] == ["npu"] and saved["meta"]["tune"] == 20
    for section, configs in (("rules", 0), ("tuned", 20)):
        (row,) = saved["sections"][section]
        assert "error" not in row, row.get("error")
        assert row["workload"] == "gemm_small_64" and row["target"] == "npu"
        assert row["verified"] is True
        for key, _ in run_suite.COLUMNS[3:]:
            if key == "fusion_share" and row[key] is None:   # no gain over the library to share
                assert row["speedup_vs_library"] <= 1.02
                continue
            assert isinstance(row[key], (int, float)) and math.isfinite(row[key]), key
        if row["fusion_share"] is not None:
            assert row["fusion_share"] == pytest.approx(math.log(row["speedup_fusion"]) / math.log(row["speedup_vs_library"]))
        assert row["speedup_vs_naive"] >= 1.0 and row["speedup_vs_library"] >= 1.0
        assert 0 < row["roofline_fraction"] <= 1.0 + 1e-9
        assert row["energy_j"] > 0
        assert row["configs_evaluated"] == configs if configs == 0 else 0 < row["configs_evaluated"] <= configs
    (sim,) = saved["sections"]["sim"]
    assert sim["model_time_s"] > 0 and sim["sim_time_s"] > 0 and sim["disagreement"] >= 0
    assert data["sections"]["tuned"][0]["speedup_vs_naive"] == saved["sections"]["tuned"][0]["speedup_vs_naive"]


def test_markdown_has_the_tables(smoke):
    run_suite, out, _ = smoke
    text = (out / "results.md").read_text()
    header = "| " + " | ".join(h for _, h in run_suite.COLUMNS) + " |"
    assert text.count(header) == 2                       # rules only and tuned
    assert "## Tuned (tune=20)" in text and "## Rules only (tune=0)" in text
    assert "## Simulator vs analytic model" in text
    rows = [line for line in text.splitlines() if line.startswith("| gemm_small_64 | npu | yes |")]
    assert len(rows) >= 2
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert len(cells) == len(run_suite.COLUMNS)
    assert cells[3].endswith("x") and float(cells[3][:-1]) >= 1.0


def test_llm_table_gives_each_workload_and_the_ratios(run_suite):
    # The smoke run skips the LLM section (its workloads are real-sized: minutes); its table
    # is made from rows as `llm_inference` writes them.
    def row(workload, time_s, verified=True, flops=0.0):
        return {"workload": workload, "target": "npu", "vs_library": 1.5, "limit_fraction": 0.8,
                "time_s": time_s, "verified": verified, "flops": flops}
    section = {"targets": ["npu", "tpu"],
               "rows": [row("attention_2048", 4e-3), row("attention_2048_causal", 2.2e-3, verified=False),
                        row("embedding_32000x2048", 1e-5, flops=64 * 2048 * 0.25)]}
    text = "\n".join(run_suite.llm_markdown(section, "##"))
    assert "| attention_2048 | 1.50 / 0.80 | - |" in text
    assert "| attention_2048_causal | 1.50 / 0.80 (NOT verified) | - |" in text
    assert "| npu | 0.55 | - | 0.25 |" in text and "| tpu | - | - | - |" in text


def test_plots_are_svg(smoke):
    _, out, data = smoke
    assert data["plots"]
    for path in data["plots"]:
        text = Path(path).read_text()
        assert text.startswith("<svg") and text.rstrip().endswith("</svg>") and "<rect" in text


def test_readme_block_is_replaced(smoke, tmp_path):
    run_suite, _, data = smoke
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nbefore\n{run_suite.README_START}\nold table\n{run_suite.README_END}\nafter\n")
    run_suite.update_readme(readme, run_suite.markdown(data, for_readme=True))
    text = readme.read_text()
    assert "old table" not in text and "before" in text and "after" in text
    assert "| gemm_small_64 | npu | yes |" in text
    run_suite.update_readme(readme, "second\n")           # idempotent: markers stay
    assert text.count(run_suite.README_START) == 1 and "second" in readme.read_text()


def test_readme_without_markers_is_a_clear_error(run_suite, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# no markers here\n")
    with pytest.raises(SystemExit, match="missing <!-- results:start -->"):
        run_suite.update_readme(readme, "table")
    assert readme.read_text() == "# no markers here\n"


def test_render_rebuilds_from_json(smoke, tmp_path):
    run_suite, out, _ = smoke
    readme = tmp_path / "README.md"
    readme.write_text(f"x\n{run_suite.README_START}\n{run_suite.README_END}\n")
    run_suite.main(["--render", str(out / "results.json"), "--out", str(tmp_path / "again"),
                    "--readme", str(readme), "--quiet"])
    assert (tmp_path / "again" / "results.md").read_text() == (out / "results.md").read_text()
    assert "| gemm_small_64 | npu | yes |" in readme.read_text()


def test_fusion_share_is_fusions_part_of_the_log_gain():
    import importlib.util
    spec = importlib.util.spec_from_file_location("run_suite_mod", BENCH / "run_suite.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.fusion_share(2.0, 4.0) == pytest.approx(0.5)
    assert mod.fusion_share(1.0, 3.0) == 0.0
    assert mod.fusion_share(0.9, 2.0) < 0          # fusion alone lost time
    assert mod.fusion_share(1.5, 1.01) is None     # no gain to share


@pytest.fixture(scope="module")
def bench_stream():
    spec = importlib.util.spec_from_file_location("bench_stream", BENCH / "bench_stream.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_stream_without_stream_says_how_to_add_it(bench_stream, monkeypatch, capsys):
    if bench_stream.stream_available() is None:
        pytest.skip("Stream loads here: the bench would run it")
    monkeypatch.delenv("STREAM_PYTHON", raising=False)
    assert bench_stream.main([]) == 0
    out = capsys.readouterr().out
    assert "Stream comparison skipped" in out and "--stream-python" in out and "zigzag-dse < 3" in out
    assert bench_stream.main(["--stream-python", "/nonexistent/python"]) == 2
    assert "no such interpreter" in capsys.readouterr().err


@pytest.mark.parametrize("block", ["resnet50 bottleneck (conv2_x)", "mobilenetv2 inverted residual",
                                   "bert-base ffn (seq 128)"])
def test_bench_stream_blocks_are_the_same_layers(bench_stream, block):
    # Stream's layer dictionaries and autocomp's program describe the same contractions:
    # the same MACs per layer, in the same order.
    from autocomp_jupyter.dsl import parse
    from autocomp_jupyter.ir.schedule import kernels_unfused

    layers, _, src = bench_stream.BLOCKS[block]
    stream_macs = [math.prod(v for d, v in layer["loop_dim_size"].items()) for layer in layers.values()]
    ours = [k.anchor_statement.points for k in kernels_unfused(parse(src))]
    assert stream_macs == ours
