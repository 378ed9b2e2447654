"""`%%autocomp` and the line magics, driven through a real IPython shell, next to the
function API they wrap (the magic must be a thin shell over `optimize()`)."""
from __future__ import annotations

import json

import pytest
from IPython.utils.capture import capture_output

import autocomp_jupyter
from autocomp_jupyter import ui
from test_ui import ipython_shell

SOURCE = """\
input A: f32[128, 64]
input B: f32[64, 128]
C = matmul(A, B)
D = relu(C)
output D
"""
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
VIEW_MIME = "application/vnd.autocomp.view+json"


@pytest.fixture(scope="module")
def ip():
    shell = ipython_shell()
    # A terminal shell formats text/plain only; a notebook kernel formats every mime type.
    shell.display_formatter.active_types = list(shell.display_formatter.format_types)
    shell.run_line_magic("load_ext", "autocomp_jupyter")
    return shell


def run(ip, line: str, cell: str = SOURCE):
    """Run the cell magic; (return value, displayed outputs' data dicts, captured stdio).
    Rules only (--tune 0) unless the line asks for tuning: the default tunes 1000 configs."""
    if "--tune" not in line and line.startswith("--target"):
        line += " --tune 0"
    with capture_output() as cap:
        value = ip.run_cell_magic("autocomp", line, cell)
    return value, saved_outputs(cap.outputs), cap


def saved_outputs(published) -> list[dict]:
    """The outputs a notebook keeps: an update replaces the output with the same display id."""
    kept: list[tuple[str | None, dict]] = []
    for o in published:
        display_id = (getattr(o, "transient", None) or {}).get("display_id")
        if getattr(o, "update", False):
            kept = [(i, o.data if i == display_id else d) for i, d in kept]
        else:
            kept.append((display_id, o.data))
    return [d for _, d in kept if d]


def html_of(outputs) -> str:
    return "".join(o.get("text/html", "") for o in outputs)


def text_of(outputs) -> str:
    return "".join(o.get("text/plain", "") for o in outputs)


@pytest.fixture(params=["func", "magic"])
def surface(request, ip):
    """The same optimisation through optimize() and through %%autocomp --out."""
    def optimise(**flags):
        if request.param == "func":
            return autocomp_jupyter.optimize(SOURCE, **flags)
        line = " ".join(f"--{k} {v}" for k, v in flags.items()) + " --out res --static"
        value, outputs, _ = run(ip, line)
        assert value is None
        return ip.user_ns.pop("res")
    return optimise


def test_function_and_magic_give_the_same_report(surface):
    res = surface(target="tpu", tune=0)
    reference = autocomp_jupyter.optimize(SOURCE, target="tpu", tune=0).report
    drop = lambda r: {k: v for k, v in r.items() if k not in ("seconds", "seconds_by_pass", "program")}
    assert json.dumps(drop(res.report), sort_keys=True, default=str) == \
        json.dumps(drop(reference), sort_keys=True, default=str)


def test_magic_shows_the_widget_with_a_static_fallback(ip):
    value, outputs, cap = run(ip, "--target tpu")
    assert value is None
    views = [o for o in outputs if VIEW_MIME in o]
    assert len(views) == 1 and len(outputs) == 1
    assert views[0][VIEW_MIME]["model_id"]  # the live widget, rendered by the labextension
    # not the ipywidgets type: it would win over text/html where the model is gone
    assert WIDGET_MIME not in views[0]
    assert '<section class="autocomp-tab" data-tab="Graph">' in views[0]["text/html"]
    assert "Traceback" not in cap.stdout + cap.stderr


def test_static_output_has_the_graph_svg_and_every_tab(ip):
    _, outputs, _ = run(ip, "--target tpu --static")
    assert not any(WIDGET_MIME in o for o in outputs)
    html = html_of(outputs)
    for tab in ui.TABS:
        assert f'data-tab="{tab}"' in html
    assert '<svg class="autocomp-graph"' in html or "graphviz's <code>dot</code> is not installed" in html
    assert '<svg class="autocomp-roofline"' in html
    assert "for i" in html and "epilogue" in html  # the Schedule and Rules tabs' content


def test_out_stores_the_result_in_the_user_namespace(ip):
    ip.user_ns.pop("my_res", None)
    value, _, _ = run(ip, "--target npu --out my_res --static")
    assert value is None
    res = ip.user_ns["my_res"]
    assert res.report["target"] == "npu" and res.verified


def test_dsl_error_shows_caret_and_hint_without_traceback(ip):
    bad = "input A: f32[8, 8]\nB = matmull(A, A)\n"
    value, outputs, cap = run(ip, "--target tpu", bad)
    assert value is None
    text = text_of(outputs)
    # line 3 of the cell: the %%autocomp line is line 1, as the editor numbers it
    assert "cell:3:5: error: unknown op 'matmull'" in text
    assert "    ^^^^^^^" in text and "did you mean 'matmul'?" in text
    assert 'color:#b00020' in html_of(outputs)
    assert "Traceback" not in cap.stdout + cap.stderr + text


@pytest.mark.parametrize("line, message, caret", [
    ("--tune -5", "argument --tune: expected a non-negative integer, got '-5'", "^^"),
    ("--top x", "argument --top: expected a positive integer, got 'x'", "^"),
    ("--trget tpu", "unknown flag '--trget'", "^^^^^^^"),
    ("--passes fusion,tilling", "unknown pass 'tilling' (did you mean 'tiling'?)", "^^^^^^^"),
    ("--out 1x", "expected a Python variable name, got '1x'", "^^"),
    ("--code rust", "expected one of c, pseudo, got 'rust'", "^^^^"),
    ("--budget 0", "expected a positive number of seconds, got '0'", "^"),
    # values only optimize() can judge get the caret on the magic line too
    ("--target tpux --tune 0", "--target tpux: unknown target; presets are", "^^^^"),
    ("--target tpu --rules nosuch --tune 0", "--rules nosuch: unknown rules 'nosuch'", "^^^^^^"),
    ("--target ./no_such_target.yaml --tune 0", "no such target file", "^" * len("./no_such_target.yaml")),
])
def test_bad_flags_are_clear_messages_with_a_caret(ip, line, message, caret):
    value, outputs, cap = run(ip, line)
    assert value is None
    text = text_of(outputs)
    assert message in text, text
    caret_line = text.splitlines()[2]
    assert caret_line.strip() == caret
    assert "Traceback" not in cap.stdout + cap.stderr + text
    if line.startswith("--trget"):
        assert "did you mean '--target'?" in text
    if "tpux" in line:  # the caret sits under the value itself
        source, carets = text.splitlines()[1:3]
        assert source[carets.index("^"):].startswith("tpux") and "did you mean 'tpu'?" in text


def test_every_bad_flag_is_reported_at_once_with_the_cells_prefix(ip):
    _, outputs, cap = run(ip, "--tune -5 --trget tpu --top x --code rust")
    text = text_of(outputs)
    assert "4 errors" in text and "Traceback" not in cap.stdout + cap.stderr + text
    heads = [l for l in text.splitlines() if ": error: " in l]
    assert [h.split(": error: ")[0] for h in heads] == ["cell:1:19", "cell:1:22", "cell:1:40", "cell:1:49"]
    _, outputs, _ = run(ip, "--tune 0", "input A: f32[4]\nB = relu(A\n")
    assert "cell:3:" in text_of(outputs)  # DSL errors: the same prefix, the %%autocomp line is line 1


def test_bad_target_and_rules_are_user_errors(ip):
    _, outputs, cap = run(ip, "--target nosuch")
    assert "unknown target; presets are" in text_of(outputs) and "did you mean" not in cap.stderr
    _, outputs, cap = run(ip, "--rules no_such_rule")
    assert "no_such_rule" in text_of(outputs)
    assert "Traceback" not in cap.stdout + cap.stderr


def test_target_yaml_file_errors_name_the_key(ip, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nclock_ghz: -1\n")
    _, outputs, _ = run(ip, f"--target {bad}")
    text = text_of(outputs)
    assert str(bad) in text and "error" in text


def test_vis_graph_writes_dot_and_shows_the_graph(ip, tmp_path):
    path = tmp_path / "g.dot"
    _, outputs, _ = run(ip, f"--target tpu --static --vis-graph {path}")
    dot = path.read_text()
    assert dot.startswith("digraph") and "cluster_C_D" in dot
    assert "wrote the optimised graph" in html_of(outputs)


def test_code_flag_opens_the_code_tab(ip):
    _, outputs, _ = run(ip, "--target host --code c")
    assert any(VIEW_MIME in o for o in outputs)
    _, outputs, _ = run(ip, "--target host --code pseudo --static")
    code = html_of(outputs).split('data-tab="Code"', 1)[1]
    assert "autocomp-code" in code or "not available yet" in code


def test_rules_flag_names_a_rule_registered_in_an_earlier_cell(ip, monkeypatch):
    from autocomp_jupyter.rules import engine

    seen = {}
    real = autocomp_jupyter.optimize
    monkeypatch.setattr(autocomp_jupyter, "optimize",
                        lambda src, **flags: seen.update(flags) or real(src, **flags))
    ip.run_cell("from autocomp_jupyter import adrs_rule\n"
                "@adrs_rule('leave_alone_test')\n"
                "def leave_alone_test(producer, consumer):\n"
                "    return None\n")
    try:
        with capture_output() as cap:
            ip.run_line_magic("autocomp_rules", "")
        assert "<code>leave_alone_test</code>" in cap.outputs[0].data["text/html"]
        ip.user_ns.pop("r", None)
        _, outputs, _ = run(ip, "--target tpu --rules leave_alone_test --rules tpu --out r --static")
        assert seen["rules"] == ["leave_alone_test", "tpu"]
        assert "r" in ip.user_ns, text_of(outputs)
    finally:
        engine._REGISTRY.pop("leave_alone_test", None)  # other tests list the registry


def test_line_magics_list_targets_and_rules(ip):
    with capture_output() as cap:
        ip.run_line_magic("autocomp_targets", "")
        ip.run_line_magic("autocomp_rules", "")
    targets, rules = (o.data["text/html"] for o in cap.outputs)
    for name in ("gpu", "tpu", "npu", "gemmini", "host"):
        assert f"<code>{name}</code>" in targets
    assert "<code>epilogue</code>" in rules


def test_progress_callback_is_passed_to_optimize(ip, monkeypatch):
    """The pipeline calls progress(done, total, best); the magic shows a bar, then the
    result takes its place: the saved cell holds the result only."""
    seen = {}
    real = autocomp_jupyter.optimize

    def fake(src, progress=None, **flags):
        for done in (0, 5, 10):
            progress(done, 10, 1e-3)
        seen["bar"] = progress
        return real(src, **flags)

    monkeypatch.setattr(autocomp_jupyter, "optimize", fake)
    _, outputs, _ = run(ip, "--target tpu --tune 10")
    assert seen["bar"].calls == 3 and seen["bar"]._box is None  # shown, then closed
    assert len(outputs) == 1 and VIEW_MIME in outputs[0]  # the result, in the bar's place
    assert not any(WIDGET_MIME in o for o in outputs)


def test_real_tuning_feeds_the_progress_bar_and_the_versions(ip):
    ip.user_ns.pop("tuned", None)
    _, outputs, _ = run(ip, "--target tpu --tune 40 --top 2 --seed 1 --out tuned")
    assert len(outputs) == 1 and VIEW_MIME in outputs[0]  # the progress bar left nothing behind
    res = ip.user_ns["tuned"]
    assert res.report["tuning"]["configs_evaluated"] > 0
    assert "<td>v1</td>" in html_of(outputs)  # the tuned versions in the Tune tab's A/B table


def kernel_imports_this_checkout(monkeypatch) -> None:
    """A kernel started from a temp dir imports the checkout under test, not an installed copy."""
    import os
    from pathlib import Path

    root = str(Path(autocomp_jupyter.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))


def test_headless_notebook_runs_the_magic(tmp_path, monkeypatch):
    kernel_imports_this_checkout(monkeypatch)
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext autocomp_jupyter"),
                nbformat.v4.new_code_cell("%%autocomp --target tpu --tune 0 --out res\n" + SOURCE),
                nbformat.v4.new_code_cell("print(round(res.speedup, 3) > 0)")]
    client = nbclient.NotebookClient(nb, timeout=60, kernel_name="python3", shutdown_kernel="immediate",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = nb.cells[1].outputs
    assert [sorted(o.get("data", {})) for o in outputs] == [[VIEW_MIME, "text/html", "text/plain"]]
    assert 'data-tab="Profile"' in outputs[0]["data"]["text/html"]
    assert nb.cells[2].outputs[0]["text"].strip() == "True"


def test_interrupted_tuning_shows_the_best_so_far(ip, monkeypatch):
    """^C during tuning (here: raised from the progress callback) keeps the best found."""
    calls = {"n": 0}
    original = ui.TuningProgress.__call__

    def interrupt_later(self, done, total, best=None):
        original(self, done, total, best)
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(ui.TuningProgress, "__call__", interrupt_later)
    ip.user_ns.pop("partial", None)
    _, outputs, cap = run(ip, "--target tpu --tune 400 --out partial --static")
    res = ip.user_ns["partial"]
    assert res.report["tuning"].get("interrupted") is True
    assert res.report["tuning"]["configs_evaluated"] < 400
    assert "Tuning was interrupted" in html_of(outputs)
    assert "Traceback" not in cap.stdout + cap.stderr


def test_a_cell_naming_an_acir_file_optimises_that_file(ip, tmp_path):
    path = tmp_path / "prog.acir"
    path.write_text(SOURCE)
    ip.user_ns.pop("from_file", None)
    run(ip, "--target tpu --static --out from_file", f"{path}\n")
    assert ip.user_ns["from_file"].program.outputs == ("D",)
    _, outputs, _ = run(ip, "--target tpu --static", str(tmp_path / "missing.acir"))
    assert "cannot read" in text_of(outputs)


def test_a_user_error_from_a_python_call_is_its_message_not_a_traceback(ip):
    with capture_output() as cap:
        ip.run_cell("import autocomp_jupyter\nautocomp_jupyter.optimize('input A: f32[4]\\nB = relux(A)\\n', target='tpu')")
    text = text_of(saved_outputs(cap.outputs))
    assert "unknown op 'relux'" in text and "error:" in text
    assert "Traceback" not in cap.stdout + cap.stderr + text
