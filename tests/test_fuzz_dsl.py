"""A fixed-seed slice of the DSL fuzzer (benchmarks/fuzz_dsl.py): every input ends in a
UserError with a location or in a program that runs, none in a traceback or past 5 s."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _fuzzer():
    spec = importlib.util.spec_from_file_location("fuzz_dsl", ROOT / "benchmarks" / "fuzz_dsl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fuzzed_inputs_end_in_a_located_error_or_a_run(tmp_path):
    result = _fuzzer().run_fuzz(300, seed=17, timeout=10.0, out=tmp_path)
    counts = result["counts"]
    assert sum(counts.values()) - counts.get("over 5 s", 0) == 300
    failures = "\n".join(f"{f['index']} {f['category']}: {f['outcome']}: {f['detail'][-300:]}" for f in result["failures"])
    assert counts.get("traceback", 0) == 0, failures
    assert counts.get("timeout", 0) == 0 and counts.get("over 5 s", 0) == 0, failures
    assert counts.get("unlocated", 0) == 0
    # the slice exercises both ends: many refusals, and many programs that really run
    assert counts.get("located", 0) >= 150 and counts.get("ran", 0) >= 50
    categories = result["by_category"]
    assert {"deep nesting", "huge numbers", "token soup", "binary", "unicode", "mutated example"} <= set(categories)


def test_the_fuzzer_is_reproducible():
    fuzz = _fuzzer()
    assert list(fuzz.inputs(50, seed=3)) == list(fuzz.inputs(50, seed=3))
    assert list(fuzz.inputs(50, seed=3)) != list(fuzz.inputs(50, seed=4))


def test_a_traceback_is_counted_and_saved_as_a_reproducer(tmp_path, monkeypatch):
    fuzz = _fuzzer()
    monkeypatch.setattr(fuzz, "inputs", lambda n, seed: iter([("planted", "input X: f32[4]\nY = relu(X)\n")] * n))
    monkeypatch.setattr(fuzz, "check_one", lambda text: ("traceback", "Traceback: planted"))
    result = fuzz.run_fuzz(2, seed=0, out=tmp_path)
    assert result["counts"] == {"traceback": 2}
    assert (tmp_path / "seed0_input1.acir").read_text() == "input X: f32[4]\nY = relu(X)\n"
    assert "planted" in (tmp_path / "seed0_input0.txt").read_text()
