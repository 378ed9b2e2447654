"""The JupyterLab extension: its tokenizer's node tests, and that JupyterLab sees it.

The tokenizer (labextension/src/tokenizer.ts) is tested by plain node against the
compiled labextension/lib/tokenizer.js; this module compiles it when missing or
stale, runs `node --test`, and fails with node's own report if any case fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LABEXTENSION = ROOT / "labextension"
COMPILED_TOKENIZER = LABEXTENSION / "lib" / "tokenizer.js"
BUILT_EXTENSION = ROOT / "autocomp_jupyter" / "labextension" / "package.json"
NPM_NAME = json.loads((LABEXTENSION / "package.json").read_text())["name"]
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=LABEXTENSION, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "NO_COLOR": "1"},
    )


def _ensure_compiled_tokenizer() -> None:
    """Compile src/ to lib/ with the project's own TypeScript if lib/ is missing or stale."""
    source = LABEXTENSION / "src" / "tokenizer.ts"
    if COMPILED_TOKENIZER.exists() and COMPILED_TOKENIZER.stat().st_mtime >= source.stat().st_mtime:
        return
    tsc = LABEXTENSION / "node_modules" / ".bin" / "tsc"
    if not tsc.exists():
        npm = shutil.which("npm")
        assert npm, "labextension/lib/ is not built and npm is absent: install npm, or build lib/ elsewhere"
        installed = _run([npm, "ci", "--no-audit", "--no-fund"], timeout=900)
        assert installed.returncode == 0, f"npm ci in labextension/ failed:\n{installed.stdout}\n{installed.stderr}"
    compiled = _run([str(tsc)], timeout=300)
    assert compiled.returncode == 0, f"tsc in labextension/ failed:\n{compiled.stdout}\n{compiled.stderr}"


def test_tokenizer_node_tests_pass():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the tokenizer tests run under node (node:test)")
    _ensure_compiled_tokenizer()
    result = _run([node, "--test", "test/"], timeout=300)
    report = result.stdout + result.stderr
    assert result.returncode == 0, f"node tokenizer tests failed:\n{report}"
    passed = re.search(r"^# pass (\d+)$", report, re.MULTILINE)
    failed = re.search(r"^# fail (\d+)$", report, re.MULTILINE)
    assert passed and int(passed.group(1)) > 0, f"no node tests ran:\n{report}"
    assert failed and int(failed.group(1)) == 0, report


def test_jupyterlab_lists_the_extension_enabled():
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed")
    if not BUILT_EXTENSION.exists():
        pytest.skip(f"the labextension is not built ({BUILT_EXTENSION.relative_to(ROOT)} is absent)")
    # `-m jupyterlab.labextensions` rather than `jupyter labextension`: the
    # `jupyter` found on PATH may belong to another environment.
    result = subprocess.run(
        [sys.executable, "-m", "jupyterlab.labextensions", "list"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"},
    )
    listing = ANSI_ESCAPE.sub("", result.stdout + result.stderr)
    lines = [line for line in listing.splitlines() if line.split() and line.split()[0] == NPM_NAME]
    assert lines, (
        f"{NPM_NAME} is built but JupyterLab does not list it; install the package "
        f"(pip install -e .) so share/jupyter/labextensions/{NPM_NAME} exists:\n{listing}"
    )
    assert "enabled" in lines[0] and "OK" in lines[0], f"{NPM_NAME} is not enabled and OK:\n{listing}"
