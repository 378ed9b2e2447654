"""The notebook in a real browser: JupyterLab (and Notebook 7) + Chromium (Playwright), end to end.

Starts `jupyter lab` on a free port in a temp dir with a notebook holding
`%load_ext autocomp_jupyter` and a `%%autocomp --target tpu --tune 40` cell, runs all
cells, then checks what a user sees: every tab renders when clicked, the graph is an SVG,
moving a tile slider changes the Tune tab's metrics, parallelising the reduction is refused
with its dependence, a legal move is badged verified, a reload while the kernel runs brings
the live controls back (and a version kept then reaches the saved output), A/B names the
faster of two versions,
and the labextension highlights the DSL (`cm-autocomp-*` spans). It then saves the
notebook, shuts its kernel down and reloads the page: the output shows the static view,
never "model not found". A second test exports an `nbconvert --execute`d notebook to HTML
and opens it: every tab's content is there. The server loads this checkout's labextension
build and its kernels import this checkout. Screenshots go to test-artifacts/. Uses
Debian's Chromium; never downloads a browser. Skips only if Chromium, Playwright or the
labextension build is missing.

At a 960 px notebook panel no tab is wider than its panel and no label is cut
(`_overflows`). Two course notebooks (the first, the fusion graphs; tests/test_tutorials.py
runs every one headless) are each opened (untouched, it is not marked modified once its
kernel is up), one exercise is answered wrongly and Run All is run: the CHECK
cell answers in one friendly line, nothing shows a traceback, and the later cells still
run. A kept version is in the saved notebook and comes back after the reload, under the
snapshot banner. In Notebook 7 (`jupyter notebook`, when installed) the cell's output is
the live widget.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ROOT = Path(__file__).resolve().parents[1]
PANEL_PX = 960  # the notebook panel's width the views must fit
# Per tutorial: a line appended to its first exercise cell (blank as shipped: a wrong answer for
# every name it asks for) and what the CHECK line below it must say. Every check's wrong answer,
# and every notebook's Run All blank and solved, is tested headless (tests/test_tutorials.py,
# every tutorial); in the browser, for the suite's time, two: the first (live widgets, the
# targets table, a DSL error shown without a traceback) and the fusion graphs (the rules
# table, static views, graph text). The other notebooks' outputs are the same views (the live
# widget and the static view are checked at the 960 px panel by test_notebook_in_jupyterlab).
WRONG_ANSWERS = {
    "01_quick_start": ('speedup, roofline_fraction, verified = res_npu.report["speedup_vs_library"], '
                       'res_npu.report["roofline_fraction"], res_npu.report["verified"]', "library"),
    "02_fusion_and_rules": ('groups = [["C", "D", "E", "F", "G"]]', "not the kernels"),
}
ARTIFACTS = ROOT / "test-artifacts"
EXTENSION_NAME = "autocomp-jupyter-labextension"
EXTENSION_BUILD = ROOT / "autocomp_jupyter" / "labextension"
MAGIC = "%%autocomp --target tpu --tune 40 --top 3 --seed 0"
EXPLORE = '%%autocomp --target npu --explore "compute.pe_rows,compute.pe_cols=8x8,16x16"'
STATIC_MARKERS = {  # tab title -> what only that tab's static section renders
    "Graph": "svg.autocomp-graph",
    "Tiles": "table.autocomp-tiles",
    "Schedule": "pre.autocomp-nest-after",
    "Profile": "svg.autocomp-roofline",
    "Rules": ".autocomp-rules-tab",
    "Tune": "table.autocomp-versions",
    "Code": "pre.autocomp-code, .autocomp-code-missing",
}

SOURCE = """\
input A: f32[256, 128]
input B: f32[128, 256]
C = matmul(A, B)
D = relu(C)
output D"""

playwright_api = pytest.importorskip("playwright.sync_api", reason="python playwright is not installed")
if not Path(CHROMIUM).exists():
    pytest.skip(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)
if not (EXTENSION_BUILD / "package.json").exists():
    pytest.skip("the labextension is not built (autocomp_jupyter/labextension/): `make test` or "
                "`pip install -e .` builds it; without it JupyterLab shows the static view only",
                allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(root: Path) -> dict:
    """Kernels import this checkout; JupyterLab loads this checkout's labextension build
    (JUPYTER_PATH comes first, and the first extension of a name wins)."""
    jupyter_dir = root / "jupyter"
    (jupyter_dir / "labextensions").mkdir(parents=True, exist_ok=True)
    link = jupyter_dir / "labextensions" / EXTENSION_NAME
    if not link.exists():
        link.symlink_to(EXTENSION_BUILD, target_is_directory=True)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    jupyter_path = os.pathsep.join(p for p in (str(jupyter_dir), os.environ.get("JUPYTER_PATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "JUPYTER_PATH": jupyter_path}


def _notebook(more: list[str] = ()) -> dict:
    cells = ["%load_ext autocomp_jupyter", MAGIC + "\n" + SOURCE, *more]
    return {"nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": src, "outputs": [],
                       "execution_count": None} for i, src in enumerate(cells)]}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a free port, rooted in a temp dir; its base URL."""
    root = tmp_path_factory.mktemp("lab")
    (root / "demo.ipynb").write_text(json.dumps(_notebook()))
    (root / "nb7.ipynb").write_text(json.dumps(_notebook(["%%autocomp --target gemmini --tune 0\n" + SOURCE,
                                                          EXPLORE + "\n" + SOURCE])))
    import shutil
    shutil.copytree(ROOT / "tutorials", root / "tutorials", ignore=shutil.ignore_patterns("*.yaml", "*.onnx", "__pycache__"))
    # No "get notified about Jupyter news?" toast over the screenshots.
    notification = root / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True)
    notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    # every cell laid out (no windowing): an output's width is measurable without scrolling to it
    tracker = root / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))
    port = _free_port()
    env = {**_env(root), "JUPYTER_RUNTIME_DIR": str(root / "runtime")}
    cmd = [sys.executable, "-m", "jupyter", "lab", "--allow-root", "--no-browser", "--ServerApp.token=",
           "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True", "--ServerApp.ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
           f"--ServerApp.root_dir={root}", f"--LabApp.workspaces_dir={root / 'workspaces'}",
           f"--LabApp.user_settings_dir={root / 'settings'}"]
    log = open(root / "lab.log", "w")
    server = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 40
        while True:
            try:
                urllib.request.urlopen(base + "/api/status", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail("jupyter lab did not start:\n" + (root / "lab.log").read_text()[-3000:])
                time.sleep(0.3)
        yield base, root
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _faster_of(a: str, b: str) -> str:
    """The faster of two versions of the notebook's cell, from the function API (same seed)."""
    import autocomp_jupyter
    from autocomp_jupyter.ui.compare import version_specs

    res = autocomp_jupyter.optimize(SOURCE, target="tpu", tune=40, top=3, seed=0)
    times = {s["name"]: s["time_s"] for s in version_specs(res)}
    assert times[a] != times[b], times
    return a if times[a] < times[b] else b


def test_notebook_in_jupyterlab(lab):
    base, _root = lab
    ARTIFACTS.mkdir(exist_ok=True)
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(base + "/lab/tree/demo.ipynb")
            page.wait_for_selector(".jp-Notebook .jp-Cell")
            _kernel_ready(page)
            try:
                _fit_panel(page)
                _run_all_and_check(page)
                _tune_refuses_then_verifies(page)
                _every_tab_fits_its_panel(page)
                _compare_two_versions(page)
                kept = _keep_a_version(page)
                again = _reload_with_live_kernel(page, base, kept)
                _save_reload_with_new_kernel(page, base, [kept, again])
            finally:
                page.screenshot(path=str(ARTIFACTS / "browser.png"), full_page=True)
        finally:
            browser.close()


def _fit_panel(page) -> None:
    """Resize the window so the notebook panel is PANEL_PX wide."""
    panel = ".jp-NotebookPanel:not(.lm-mod-hidden)"
    page.wait_for_selector(panel)
    width = page.locator(panel).first.evaluate("e => e.getBoundingClientRect().width")
    size = page.viewport_size
    page.set_viewport_size({"width": int(size["width"] + PANEL_PX - width), "height": size["height"]})
    page.wait_for_function(f"() => Math.abs(document.querySelector('{panel}').getBoundingClientRect().width - {PANEL_PX}) < 4")


# Everything in `root` whose box reaches past the right edge of `root` (or of a clipping
# ancestor) without a scroll box in between, and every label whose text is cut.
OVERFLOWS_JS = """(root) => {
  const bad = [];
  const edge = root.getBoundingClientRect().right + 1;
  for (const el of root.querySelectorAll(':not(svg *)')) {  // an SVG is checked as a whole
    const r = el.getBoundingClientRect();
    if (!r.width || !r.height) continue;
    const folded = el.closest('details:not([open])');  // what a closed <details> holds is not shown
    if (folded && !el.closest('summary')) continue;
    let clip = null, scrolls = false;
    for (let a = el.parentElement; a && a !== root.parentElement; a = a.parentElement) {
      const ox = getComputedStyle(a).overflowX;
      if (ox === 'auto' || ox === 'scroll') { scrolls = true; break; }
      if (ox === 'hidden' || ox === 'clip') { clip = a; break; }
    }
    const what = () => el.tagName.toLowerCase() + '.' + [...el.classList].join('.') + ' "' +
      (el.textContent || '').trim().slice(0, 40) + '"';
    if (!scrolls && r.right > (clip ? clip.getBoundingClientRect().right + 1 : edge)) bad.push('past the edge: ' + what());
    if (el.matches('.widget-label, .widget-label-basic, label, .widget-readout, .autocomp-snapshot-banner')
        && el.scrollWidth > el.clientWidth + 1) bad.push('cut: ' + what());
    if (bad.length > 8) break;
  }
  return bad;
}"""


# Pairs of roofline texts (axis ticks, ceilings, point labels) whose boxes overlap.
OVERLAPS_JS = """(root) => { const out = []; for (const svg of root.querySelectorAll('svg.autocomp-roofline')) {
  const t = [...svg.querySelectorAll('text')].map(e => [e.textContent, e.getBoundingClientRect()]);
  for (let i = 0; i < t.length; i++) for (let j = i + 1; j < t.length; j++) { const a = t[i][1], b = t[j][1];
    if (a.width && b.width && a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1)
      out.push(t[i][0] + ' | ' + t[j][0]); } }
  return out; }"""


def _overflows(locator) -> list[str]:
    return locator.evaluate(OVERFLOWS_JS)


def _every_tab_fits_its_panel(page) -> None:
    tabs = page.locator(".jp-OutputArea .widget-tab").first
    titles = tabs.locator(".lm-TabBar-tab")
    output = page.locator(".jp-OutputArea-output:has(.widget-tab)").first
    for title in ("Graph", "Tiles", "Schedule", "Profile", "Rules", "Tune", "Code"):
        titles.filter(has_text=title).first.click()
        page.wait_for_timeout(150)
        assert output.evaluate("e => e.getBoundingClientRect().width") <= PANEL_PX
        bad = _overflows(output)
        assert not bad, f"{title} tab at a {PANEL_PX} px panel: {bad}"
        if title == "Profile":
            assert not output.evaluate(OVERLAPS_JS), "roofline labels overlap"
    graph_text = tabs.locator("svg.autocomp-graph text").first
    titles.filter(has_text="Graph").first.click()
    size = graph_text.evaluate("e => e.getBoundingClientRect().height")
    assert size >= 9, f"graph text drawn {size:.1f} px high"


def _tune_refuses_then_verifies(page) -> None:
    """The Tune tab: parallelising the matmul's reduction is refused in one line naming the
    primitive, the loop and the dependence; a legal move is then badged verified."""
    tabs = page.locator(".jp-OutputArea .widget-tab").first
    tabs.locator(".lm-TabBar-tab").filter(has_text="Tune").first.click()
    tabs.locator(".autocomp-tune-parallel").filter(has_text=re.compile(r"^k$")).first.click()
    refusal = tabs.locator(".autocomp-refusal").first
    playwright_api.expect(refusal).to_contain_text("flow dependence", timeout=15_000)
    text = refusal.inner_text()
    assert "refused" in text and "parallel loop k" in text and "reduction over k" in text
    tabs.locator(".autocomp-tune-reverse").filter(has_text=re.compile(r"^i$")).first.click()
    playwright_api.expect(tabs.locator(".autocomp-tune-change").first).to_contain_text("reverse i", timeout=15_000)
    badge = tabs.locator(".autocomp-verify[data-verified='yes']").first
    playwright_api.expect(badge).to_contain_text("verified", timeout=30_000)
    tabs.screenshot(path=str(ARTIFACTS / "tab-tune-verified.png"))


def _reload_with_live_kernel(page, base: str, kept: str) -> str:
    """Save and reload while the kernel runs: the widget manager restores the models from the
    kernel and the live controls come back (not the snapshot), the kept version with them; a
    version kept then reaches the saved output too. The name of that version."""
    _save_with_kept(page, base, [kept])
    page.reload()
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    _kernel_ready(page)
    page.wait_for_selector(".autocomp-view[data-autocomp-view='live']", timeout=60_000)
    tabs = page.locator(".jp-OutputArea .widget-tab").first
    tabs.locator(".lm-TabBar-tab").filter(has_text="Tune").first.click()
    tabs.locator(".widget-slider").first.wait_for(state="visible", timeout=10_000)
    assert page.locator(".autocomp-snapshot-banner:visible").count() == 0
    playwright_api.expect(tabs.locator("table.autocomp-versions").first).to_contain_text(kept, timeout=10_000)
    text = page.locator(".jp-Notebook").inner_text()
    assert "model not found" not in text and "Error displaying widget" not in text
    again = _keep_a_version(page, "manual2")
    _save_with_kept(page, base, [kept, again])
    return again


def _keep_a_version(page, name: str = "manual1") -> str:
    """Move a slider, keep the variant: the versions table and the output list it."""
    tabs = page.locator(".jp-OutputArea .widget-tab").first
    tabs.locator(".lm-TabBar-tab").filter(has_text="Tune").first.click()
    handle = tabs.locator(".widget-slider .noUi-handle").first
    handle.focus()
    handle.press("ArrowLeft")
    keep = tabs.locator("button", has_text="keep as version").first
    playwright_api.expect(keep).to_be_enabled(timeout=10_000)
    keep.click()
    versions = tabs.locator("table.autocomp-versions").first
    playwright_api.expect(versions).to_contain_text(name, timeout=10_000)
    return name


def _compare_two_versions(page) -> None:
    tabs = page.locator(".jp-OutputArea .widget-tab").first
    tabs.locator(".lm-TabBar-tab").filter(has_text="Tune").first.click()
    # the default B is a version that differs from A, and the A/B says why it is faster
    why = tabs.locator(".autocomp-ab-why-summary, .autocomp-ab-why").first
    playwright_api.expect(why).to_contain_text("Why: ", timeout=10_000)
    assert "same plan" not in tabs.locator(".autocomp-ab-verdict").first.inner_text()
    a, b = "optimized", "v2"
    faster, slower = (a, b) if _faster_of(a, b) == a else (b, a)
    def picker(name: str):
        label = page.locator("label.widget-label", has_text=re.compile(f"^{name}$"))
        return tabs.locator(".widget-dropdown").filter(has=label).locator("select").first

    select_a, select_b = picker("A"), picker("B")
    select_a.select_option(label=a)
    select_b.select_option(label=b)
    # the HTML widget replaces its content on update: wait on the locator, not on an element
    verdict = tabs.locator(".autocomp-ab-verdict").first
    playwright_api.expect(verdict).to_contain_text(f"{faster} is ", timeout=10_000)
    assert f"faster than {slower}" in verdict.inner_text()
    tabs.locator(".autocomp-ab-out").first.screenshot(path=str(ARTIFACTS / "tab-tune-ab.png"))


def _save_with_kept(page, base: str, kept: list[str]) -> dict:
    """Save until the file holds the kept version (it reaches the cell's metadata from the
    kernel's message, which can land after a save on a busy machine: 10 s at most); the cell."""
    deadline = time.monotonic() + 10
    while True:
        page.locator(".jp-Notebook").first.click()
        page.keyboard.press("Control+s")
        page.wait_for_function(
            "() => !document.querySelector('.jp-mod-current .jp-mod-dirty, .lm-TabBar-tab.jp-mod-current.jp-mod-dirty')",
            timeout=10_000)
        saved = _saved_notebook(base, "demo.ipynb")
        cell = saved["cells"][1]
        names = [k["name"] for k in (cell["metadata"].get("autocomp") or {}).get("kept", [])]
        if names == kept or time.monotonic() > deadline:
            break
        page.wait_for_timeout(500)
    assert names == kept  # saved in the notebook
    data = cell["outputs"][0]["data"]
    assert "application/vnd.jupyter.widget-view+json" in data and all(k in data["text/html"] for k in kept)
    return cell


def _save_reload_with_new_kernel(page, base: str, kept_names: list[str], root: Path | None = None) -> None:
    """Save with live widgets, shut the kernel down, reload: the static view under its
    snapshot banner, the kept version in it, no error."""
    _save_with_kept(page, base, kept_names)
    kept = kept_names[-1]
    for session in json.loads(urllib.request.urlopen(base + "/api/sessions", timeout=5).read()):
        request = urllib.request.Request(f"{base}/api/sessions/{session['id']}", method="DELETE")
        urllib.request.urlopen(request, timeout=10).read()
    page.reload()
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    _kernel_ready(page)
    view = page.locator(".autocomp-view").first
    view.wait_for(state="attached", timeout=20_000)
    # The static view shows at once; the widget view stays hidden while the new kernel's
    # widget manager has no such model (and is dropped once it says so).
    static = view.locator(".autocomp-view-static").first
    static.wait_for(state="visible", timeout=20_000)
    assert view.get_attribute("data-autocomp-view") in ("static", "static-only")
    assert view.locator(".autocomp-view-live:visible").count() == 0
    banner = view.locator(".autocomp-snapshot-banner").first
    playwright_api.expect(banner).to_be_visible()
    assert "Snapshot" in banner.inner_text() and banner.evaluate("e => e.getBoundingClientRect().height") < 30
    assert kept in view.locator("section.autocomp-tab[data-tab='Tune'] table.autocomp-versions").first.inner_text()
    bad = _overflows(view)
    assert not bad, f"the static view at a {PANEL_PX} px panel: {bad}"
    for title, selector in STATIC_MARKERS.items():
        section = view.locator(f"section.autocomp-tab[data-tab='{title}']")
        assert section.locator(selector).count() >= 1, title
    assert view.locator("section.autocomp-tab[data-tab='Graph'] svg.autocomp-graph").first.is_visible()
    text = page.locator(".jp-Notebook").inner_text()
    assert "model not found" not in text and "Error displaying widget" not in text
    page.screenshot(path=str(ARTIFACTS / "browser-reopened.png"), full_page=False)
    # run the cell again in the new kernel: the kept version comes back into the live view
    _run_all(page)
    page.wait_for_selector(".autocomp-view[data-autocomp-view='live']", timeout=90_000)
    tabs = page.locator(".jp-OutputArea .widget-tab").first
    tabs.locator(".lm-TabBar-tab").filter(has_text="Tune").first.click()
    playwright_api.expect(tabs.locator("table.autocomp-versions").first).to_contain_text(kept, timeout=20_000)


def _saved_notebook(base: str, name: str) -> dict:
    """The notebook as saved; read again while a save in flight leaves the file empty, half
    written or, for a moment, missing (the server answers 400, 500 or 404 then)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return json.loads(urllib.request.urlopen(f"{base}/api/contents/{name}", timeout=5).read())["content"]
        except urllib.error.HTTPError as err:
            if err.code not in (400, 404, 500) or time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_nbconvert_execute_export_shows_every_tab(lab):
    """`jupyter nbconvert --execute --to html`: the export holds every tab's content, readable."""
    _base, root = lab
    out = root / "export"
    notebook = root / "export.ipynb"
    notebook.write_text(json.dumps(_notebook()))
    done = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--execute",
                           "--ExecutePreprocessor.timeout=120", f"--output-dir={out}", str(notebook)],
                          env=_env(root), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    exported = out / "export.html"
    html = exported.read_text()
    assert "model not found" not in html
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(exported.as_uri())
            result = page.locator(".autocomp-result").first
            result.wait_for(state="visible", timeout=10_000)
            for title, selector in STATIC_MARKERS.items():
                item = result.locator(f"section.autocomp-tab[data-tab='{title}']").locator(selector).first
                assert item.is_visible(), f"{title}: {selector} is not visible in the export"
            font = result.locator("pre.autocomp-nest-after").first.evaluate("e => getComputedStyle(e).fontFamily")
            assert "mono" in font.lower() or "consolas" in font.lower() or "menlo" in font.lower(), font
            why = result.locator(".autocomp-rules td:last-child").first
            assert why.evaluate("e => getComputedStyle(e).textAlign") in ("left", "start")
            page.screenshot(path=str(ARTIFACTS / "nbconvert-export.png"), full_page=False)
        finally:
            browser.close()


def _run_all(page) -> None:
    """Run > Run All Cells, again if the menu did not take (the first cell's prompt
    shows no execution within a few seconds)."""
    prompt = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt").first
    for attempt in range(3):
        dialog = page.locator(".jp-Dialog .jp-mod-accept")
        if dialog.count():  # a late "select kernel" dialog: take the notebook's kernel
            dialog.first.click()
        page.keyboard.press("Escape")
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        try:
            playwright_api.expect(prompt).to_have_text(re.compile(r"\[(\*|\d+)\]"), timeout=5_000)
            return
        except AssertionError:
            if attempt == 2:
                raise


def _accept_kernel_dialog(page) -> None:
    """JupyterLab may ask which kernel to start; take the notebook's own (python3)."""
    accept = page.locator(".jp-Dialog .jp-mod-accept")
    try:
        accept.wait_for(state="visible", timeout=8_000)
    except playwright_api.TimeoutError:
        return
    accept.click()


def _run_all_and_check(page) -> None:
    tabs = page.locator(".jp-OutputArea .widget-tab").first
    prompts = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt")
    for attempt in range(3):
        _run_all(page)
        try:
            tabs.wait_for(state="visible", timeout=90_000)   # the cells optimise first: slow on a loaded machine
            break
        except playwright_api.TimeoutError:
            # Run All was taken and then lost, whole or after its first cell (a prompt still
            # "[ ]", none "[*]": seen on a loaded machine when the kernel connection settles
            # late): run them again. A cell still running ("[*]") is given more time instead.
            texts = [t.strip() for t in prompts.all_inner_texts()]
            if any("*" in t for t in texts):
                tabs.wait_for(state="visible", timeout=120_000)
                break
            if attempt == 2 or not any(t in ("[ ]:", "[ ]") for t in texts):
                raise
    titles = tabs.locator(".lm-TabBar-tab")
    # the live widget, not the static fallback (the labextension found the model)
    page.wait_for_selector(".autocomp-view[data-autocomp-view='live']", timeout=90_000)
    expected = {  # tab title -> something only that tab renders
        "Graph": "svg.autocomp-graph",
        "Tiles": "table.autocomp-tiles",
        "Schedule": "pre.autocomp-nest-after",
        "Profile": "svg.autocomp-roofline",
        "Rules": ".autocomp-rules-tab",
        "Tune": ".widget-slider",
        "Code": "pre.autocomp-code, .autocomp-code-missing",
    }
    assert [t.strip() for t in titles.all_inner_texts()] == list(expected)
    for title, selector in expected.items():
        titles.filter(has_text=title).first.click()
        tabs.locator(selector).filter(visible=True).first.wait_for(state="visible", timeout=10_000)
        tabs.screenshot(path=str(ARTIFACTS / f"tab-{title.lower()}.png"))
    titles.filter(has_text="Graph").first.click()
    assert tabs.locator("svg.autocomp-graph").count() == 2  # before | after

    titles.filter(has_text="Tune").first.click()
    metrics = tabs.locator(".autocomp-tune-metrics").first
    metrics.wait_for(state="visible")
    before = metrics.inner_text()
    handle = tabs.locator(".widget-slider .noUi-handle").first
    handle.focus()
    for key in ("ArrowLeft", "ArrowLeft"):
        handle.press(key)
    page.wait_for_function(
        "([el, old]) => el.innerText !== old", arg=[metrics.element_handle(), before], timeout=10_000)
    assert metrics.inner_text() != before
    assert "program time with this variant" in tabs.inner_text()

    highlighted = page.locator(".jp-Cell .cm-content [class*='cm-autocomp-']")
    assert highlighted.count() > 0, "the labextension did not highlight the %%autocomp cell"
    assert page.locator(".cm-autocomp-op").filter(has_text="matmul").count() >= 1


def _dirty(page) -> bool:
    return page.evaluate("() => !!document.querySelector('.lm-TabBar-tab.jp-mod-current.jp-mod-dirty')")


def _wait_kernel_idle(page, timeout: int = 30_000) -> None:
    page.wait_for_function(
        "() => { const s = document.querySelector('.jp-Notebook-ExecutionIndicator');"
        " return s && s.getAttribute('data-status') === 'idle'; }", timeout=timeout)


def _kernel_ready(page) -> None:
    """Wait until the kernel is idle, taking the notebook's kernel if JupyterLab asks."""
    page.wait_for_function(
        "() => !!document.querySelector('.jp-Dialog .jp-mod-accept') || (document.querySelector("
        "'.jp-Notebook-ExecutionIndicator') || {getAttribute: () => ''}).getAttribute('data-status') === 'idle'",
        timeout=30_000)
    if page.locator(".jp-Dialog .jp-mod-accept").count():
        page.locator(".jp-Dialog .jp-mod-accept").first.click()
        _wait_kernel_idle(page)


def test_each_tutorial_coaches_a_wrong_answer(lab):
    """Open two course notebooks (WRONG_ANSWERS; untouched: not marked modified once its kernel is up),
    answer its first exercise wrongly, Run All: the CHECK cell answers in one friendly
    line, nothing shows a traceback, the later cells still run, no output is wider than
    the 960 px panel."""
    base, _root = lab
    ARTIFACTS.mkdir(exist_ok=True)
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(f"{base}/lab/tree/tutorials?reset")  # the file browser in tutorials/, nothing open
            page.wait_for_selector(".jp-DirListing-item")
            for stem, (wrong, says) in WRONG_ANSWERS.items():
                page.locator(".jp-DirListing-item", has_text=f"{stem}.ipynb").first.dblclick()
                nb = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").first
                nb.locator(".jp-Cell").first.wait_for()
                _fit_panel(page)
                _kernel_ready(page)
                page.wait_for_timeout(300)
                assert not _dirty(page), f"{stem} is marked modified before any edit"
                cell = nb.locator(".jp-CodeCell").filter(has_text="# your answer").first
                cell.locator(".cm-content").click()
                page.keyboard.press("Control+End")
                page.keyboard.insert_text("\n" + wrong)
                _run_all(page)
                check = nb.locator(".jp-CodeCell").filter(has_text="# CHECK").first
                line = check.locator(".jp-OutputArea-output").first
                playwright_api.expect(line).to_contain_text("✗ not yet: ", timeout=60_000)
                text = line.text_content().strip()  # (off-screen cells have no inner text)
                assert says in text and "\n" not in text, (stem, text)
                _wait_kernel_idle(page, 90_000)
                last = nb.locator(".jp-CodeCell").last.locator(".jp-InputPrompt").text_content()
                assert re.search(r"\[\d+\]", last), f"{stem}: Run All stopped before the last cell ({last})"
                shown = nb.locator(".jp-Notebook").first.text_content()
                assert "Traceback" not in shown and "AssertionError" not in shown, stem
                bad = nb.evaluate("nb => [...nb.querySelectorAll('.jp-OutputArea-output')].flatMap(o => ("
                                  + OVERFLOWS_JS + ")(o))")
                assert not bad, f"{stem}: an output is wider than the {PANEL_PX} px panel: {bad}"
                smallest = nb.evaluate("nb => Math.min(1e9, ...[...nb.querySelectorAll('svg.autocomp-graph text')]"
                                       ".map(t => t.getBoundingClientRect().height).filter(h => h > 0))")
                assert smallest >= 9, f"{stem}: graph text drawn {smallest:.1f} px high"  # readable, not shrunk
                page.screenshot(path=str(ARTIFACTS / f"tutorial-{stem}.png"))
                # close it unsaved, and shut its kernel down
                for session in json.loads(urllib.request.urlopen(base + "/api/sessions", timeout=5).read()):
                    request = urllib.request.Request(f"{base}/api/sessions/{session['id']}", method="DELETE")
                    urllib.request.urlopen(request, timeout=10).read()
                page.keyboard.press("Alt+w")  # close the tab
                discard = page.locator(".jp-Dialog button", has_text=re.compile("Discard|Don.t Save"))
                discard.first.click()
                nb.wait_for(state="detached")
        finally:
            browser.close()


def test_notebook7_shows_the_live_widget(lab):
    """`jupyter notebook` (Notebook 7) renders the cell's output as the live widget, and a click
    on a design in an Explore tab opens that design's report (its tabs) beside the plot."""
    base, _root = lab
    try:
        urllib.request.urlopen(base + "/tree", timeout=5).read()
    except OSError:
        pytest.skip("Notebook 7 is not installed (pip install notebook): no /tree page")
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(base + "/notebooks/nb7.ipynb")
            page.wait_for_selector(".jp-Notebook .jp-Cell")
            _accept_kernel_dialog(page)
            _run_all(page)
            tabs = page.locator(".jp-OutputArea .widget-tab").first
            tabs.wait_for(state="visible", timeout=60_000)
            tabs.locator(".lm-TabBar-tab").filter(has_text="Tune").first.click()
            tabs.locator(".widget-slider").first.wait_for(state="visible", timeout=10_000)
            # gemmini's levels have long names ("accumulator"): the Tune tab's labels are not cut
            gemmini = page.locator(".jp-OutputArea .widget-tab").nth(1)
            gemmini.wait_for(state="visible", timeout=60_000)
            gemmini.locator(".lm-TabBar-tab").filter(has_text="Tune").first.click()
            gemmini.locator(".widget-slider").first.wait_for(state="visible", timeout=10_000)
            assert "accumulator" in gemmini.inner_text()
            bad = _overflows(page.locator(".jp-OutputArea-output:has(.widget-tab)").nth(1))
            assert not bad, f"gemmini's Tune tab: {bad}"
            # the Explore tab: a click on a design's circle opens its full report beside the plot
            # (the live scatter's circle: the progress bar's static scatter before it takes no clicks)
            circle = page.locator(".jp-OutputArea .autocomp-explore-live circle[data-point='1']").first
            circle.wait_for(state="visible", timeout=60_000)
            circle.click()
            page.locator(".jp-OutputArea h4", has_text="design #1").first.wait_for(state="visible", timeout=60_000)
            page.locator(".jp-OutputArea .widget-tab").nth(2).wait_for(state="visible", timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "notebook7.png"))
        finally:
            browser.close()
