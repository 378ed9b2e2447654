"""The `autocomp` command: exit codes, messages on stderr, no tracebacks."""
import subprocess
import sys
from pathlib import Path

import pytest

from autocomp_jupyter import __version__
from autocomp_jupyter.cli import main

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.acir"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_check_every_example(path, capsys):
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path}: ok" in out
    assert "tensor" in out and "class" in out


def test_check_bad_program_exits_2_with_location(tmp_path, capsys):
    bad = tmp_path / "bad.acir"
    bad.write_text("input A: f32[4, 4]\nB = matmull(A, A)\n")
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2:5: error: unknown op 'matmull'" in err
    assert "did you mean 'matmul'?" in err
    assert "Traceback" not in err


def test_cli_as_a_process(tmp_path):
    bad = tmp_path / "bad.acir"
    bad.write_bytes(b"\x00\x01\x02binary")
    proc = subprocess.run([sys.executable, "-m", "autocomp_jupyter.cli", "check", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "binary" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "autocomp_jupyter.cli", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and __version__ in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "autocomp_jupyter.cli", "check"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_check_run_prints_outputs(capsys):
    assert main(["check", str(EXAMPLES[0]), "--run"]) == 0
    assert "O: shape [128, 64]" in capsys.readouterr().out
