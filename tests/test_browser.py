"""The notebook in a real browser: JupyterLab + Chromium (Playwright), end to end.

Starts `jupyter lab` on a free port in a temp dir with a notebook holding
`%load_ext autocomp_jupyter` and a `%%autocomp --target tpu --tune 40` cell, runs all
cells, then checks what a user sees: every tab renders when clicked, the graph is an SVG,
moving a tile slider changes the Tune tab's metrics, A/B names the faster of two versions,
and the labextension highlights the DSL (`cm-autocomp-*` spans). It then saves the
notebook, shuts its kernel down and reloads the page: the output shows the static view,
never "model not found". A second test exports an `nbconvert --execute`d notebook to HTML
and opens it: every tab's content is there. The server loads this checkout's labextension
build and its kernels import this checkout. Screenshots go to test-artifacts/. Uses
Debian's Chromium; never downloads a browser. Skips only if Chromium, Playwright or the
labextension build is missing.
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
ARTIFACTS = ROOT / "test-artifacts"
EXTENSION_NAME = "autocomp-jupyter-labextension"
EXTENSION_BUILD = ROOT / "autocomp_jupyter" / "labextension"
MAGIC = "%%autocomp --target tpu --tune 40 --top 3 --seed 0"
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


def _notebook() -> dict:
    cells = ["%load_ext autocomp_jupyter", MAGIC + "\n" + SOURCE]
    return {"nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": src, "outputs": [],
                       "execution_count": None} for i, src in enumerate(cells)]}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a free port, rooted in a temp dir; its base URL."""
    root = tmp_path_factory.mktemp("lab")
    (root / "demo.ipynb").write_text(json.dumps(_notebook()))
    # No "get notified about Jupyter news?" toast over the screenshots.
    notification = root / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True)
    notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
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
            _accept_kernel_dialog(page)
            try:
                _run_all_and_check(page)
                _compare_two_versions(page)
                _save_reload_with_new_kernel(page, base)
            finally:
                page.screenshot(path=str(ARTIFACTS / "browser.png"), full_page=True)
        finally:
            browser.close()


def _compare_two_versions(page) -> None:
    tabs = page.locator(".jp-OutputArea .widget-tab").first
    tabs.locator(".lm-TabBar-tab").filter(has_text="Tune").first.click()
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


def _save_reload_with_new_kernel(page, base: str) -> None:
    """Save with live widgets, shut the kernel down, reload: the static view, no error."""
    page.locator(".jp-Notebook").first.click()
    page.keyboard.press("Control+s")
    page.wait_for_function(
        "() => !document.querySelector('.jp-mod-current .jp-mod-dirty, .lm-TabBar-tab.jp-mod-current.jp-mod-dirty')",
        timeout=10_000)
    for session in json.loads(urllib.request.urlopen(base + "/api/sessions", timeout=5).read()):
        request = urllib.request.Request(f"{base}/api/sessions/{session['id']}", method="DELETE")
        urllib.request.urlopen(request, timeout=10).read()
    page.reload()
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    _accept_kernel_dialog(page)
    view = page.locator(".autocomp-view").first
    view.wait_for(state="attached", timeout=20_000)
    # The static view shows at once; the widget view stays hidden while the new kernel's
    # widget manager has no such model (and is dropped once it says so).
    static = view.locator(".autocomp-view-static").first
    static.wait_for(state="visible", timeout=20_000)
    assert view.get_attribute("data-autocomp-view") in ("static", "static-only")
    assert view.locator(".autocomp-view-live:visible").count() == 0
    for title, selector in STATIC_MARKERS.items():
        section = view.locator(f"section.autocomp-tab[data-tab='{title}']")
        assert section.locator(selector).count() >= 1, title
    assert view.locator("section.autocomp-tab[data-tab='Graph'] svg.autocomp-graph").first.is_visible()
    text = page.locator(".jp-Notebook").inner_text()
    assert "model not found" not in text and "Error displaying widget" not in text
    page.screenshot(path=str(ARTIFACTS / "browser-reopened.png"), full_page=False)


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


def _accept_kernel_dialog(page) -> None:
    """JupyterLab may ask which kernel to start; take the notebook's own (python3)."""
    accept = page.locator(".jp-Dialog .jp-mod-accept")
    try:
        accept.wait_for(state="visible", timeout=8_000)
    except playwright_api.TimeoutError:
        return
    accept.click()


def _run_all_and_check(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()

    tabs = page.locator(".jp-OutputArea .widget-tab").first
    tabs.wait_for(state="visible", timeout=40_000)
    titles = tabs.locator(".lm-TabBar-tab")
    # the live widget, not the static fallback (the labextension found the model)
    page.wait_for_selector(".autocomp-view[data-autocomp-view='live']", timeout=40_000)
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
