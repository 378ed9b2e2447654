"""The notebook in a real browser: JupyterLab + Chromium (Playwright), end to end.

Starts `jupyter lab` on a free port in a temp dir with a notebook holding
`%load_ext autocomp_jupyter` and a `%%autocomp --target tpu` cell, runs all cells, then
checks what a user sees: every tab renders when clicked, the graph is an SVG, moving a
tile slider changes the Tune tab's metrics, and the labextension highlights the DSL
(`cm-autocomp-*` spans). A screenshot goes to test-artifacts/. Uses Debian's Chromium;
never downloads a browser. Skips only if Chromium or Playwright is missing.
"""
from __future__ import annotations

import json
import os
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

SOURCE = """\
input A: f32[256, 128]
input B: f32[128, 256]
C = matmul(A, B)
D = relu(C)
output D"""

playwright_api = pytest.importorskip("playwright.sync_api", reason="python playwright is not installed")
if not Path(CHROMIUM).exists():
    pytest.skip(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _extension_installed() -> bool:
    from jupyter_core.paths import jupyter_path

    return any((Path(p) / EXTENSION_NAME / "package.json").exists() for p in jupyter_path("labextensions"))


def _notebook() -> dict:
    cells = ["%load_ext autocomp_jupyter", "%%autocomp --target tpu --tune 0\n" + SOURCE]
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
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(root / "runtime")}
    cmd = [sys.executable, "-m", "jupyter", "lab", "--allow-root", "--no-browser", "--ServerApp.token=",
           "--ServerApp.password=", "--ServerApp.ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
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
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def test_notebook_in_jupyterlab(lab):
    ARTIFACTS.mkdir(exist_ok=True)
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(lab + "/lab/tree/demo.ipynb")
            page.wait_for_selector(".jp-Notebook .jp-Cell")
            _accept_kernel_dialog(page)
            try:
                _run_all_and_check(page)
            finally:
                page.screenshot(path=str(ARTIFACTS / "browser.png"), full_page=True)
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

    if _extension_installed():
        highlighted = page.locator(".jp-Cell .cm-content [class*='cm-autocomp-']")
        assert highlighted.count() > 0, "the labextension did not highlight the %%autocomp cell"
        assert page.locator(".cm-autocomp-op").filter(has_text="matmul").count() >= 1
