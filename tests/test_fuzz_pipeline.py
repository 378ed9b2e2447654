"""Differential fuzzing of the pipeline (issue 17): the generator, the checker, and a fixed-seed slice.

The slice runs generated programs through `optimize` on every preset (tune 0, and a few at
tune 50) and checks the optimised plan and every kept version on fresh inputs: program-level,
tile by tile in the interpreter, and on host as C with 1 and 2 threads. It must find no
crash, no verified-but-wrong plan and no C mismatch. A failure message names the seed and
preset; `python benchmarks/fuzz_pipeline.py --programs 1 --seed SEED --presets PRESET`
writes a shrunk reproducer.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from autocomp_jupyter import interp, optimize
from autocomp_jupyter.dsl import LIBRARY, parse
from benchmarks import fuzzing as fuzz

SLICE_SEED = 1000
# A slice kept small for the suite's 10 minutes (35 runs); benchmarks/fuzz_pipeline.py runs
# the long ones (hundreds of programs per session).
SLICE_PROGRAMS = 5
TUNED_PROGRAMS = 2


# --------------------------------------------------------------------------- the generator


@pytest.fixture(scope="module")
def generated():
    return [fuzz.generate(seed) for seed in range(300)]


def test_every_generated_program_parses(generated):
    for gen in generated:
        program = parse(gen.text, f"<seed {gen.seed}>")
        assert program.ops, gen.text


def test_generator_is_deterministic_per_seed():
    assert fuzz.generate(17) == fuzz.generate(17)
    assert fuzz.generate(17).text != fuzz.generate(18).text
    texts = {fuzz.generate(s).text for s in range(50)}
    assert len(texts) == 50


def test_every_op_kind_and_dtype_appears(generated):
    kinds = Counter(k for gen in generated for k in gen.kinds)
    assert set(fuzz.KINDS) <= set(kinds), set(fuzz.KINDS) - set(kinds)
    dtypes = Counter(gen.dtype for gen in generated)
    assert set(dtypes) == set(fuzz.DTYPES)
    assert min(dtypes.values()) >= 30
    # every library op of the DSL is covered by the kinds (linear with and without bias)
    ops = {op.kind for gen in generated for op in parse(gen.text).ops}
    assert set(LIBRARY) <= ops, set(LIBRARY) - ops


def test_every_attribute_and_comprehension_form_appears(generated):
    text = "\n".join(gen.text for gen in generated)
    for attr in ("stride=", "padding=", "dilation=", "groups=", "kernel=", "axis=-", "axis=", "perm=[", "eps="):
        assert attr in text, attr
    for form in (r"\] = ", r"\] \+= ", r"\] max= ", r"\w \+ r - \d\]", r"\d\*\w \+ r", r"\w\*\d \+ r",
                 r"where r < \d+, \w < \d+", r" and ", r"^tensor ", r"^output \w+, \w+", r"/ \(1 \+ abs"):
        assert re.search(form, text, re.M), form
    for fn in ("exp(", "sqrt(", "tanh(", "sigmoid(", "relu(", "gelu(", "abs(", "max(", "min(", "-("):
        assert fn in text, fn


def test_shapes_are_odd_and_tiny(generated):
    dims = Counter(d for gen in generated for t in parse(gen.text).tensors for d in t.shape)
    assert dims[1] > 50
    assert sum(dims[p] for p in (7, 11, 13, 17, 19, 23, 29, 31)) > 50
    biggest = max(t.size for gen in generated for t in parse(gen.text).tensors)
    assert biggest <= 4 * 3072


# --------------------------------------------------------------------------- the checker and the shrinker


def test_checker_passes_a_correct_program():
    src = "input A: f32[7, 13]\nparam B: f32[13, 5]\nC = matmul(A, B)\nD = relu(C)\n"
    outcome = fuzz.check_program(src, "tpu", tune=0)
    assert outcome.verified is True
    assert outcome.classes() == []


def test_checker_reports_a_plan_that_computes_something_else():
    original = parse("input A: f32[7, 13]\nparam B: f32[13, 5]\nC = matmul(A, B)\nD = relu(C)\n")
    impostor = optimize("input A: f32[7, 13]\nparam B: f32[13, 5]\nC = matmul(A, B)\nD = sigmoid(C)\n",
                        target="tpu", tune=0)
    outcome = fuzz.Outcome("tpu", 0, verified=True)
    inputs = interp.random_inputs(original, 5)
    fuzz._check_plan(outcome, "after", impostor.after, original, inputs, interp.run(original, inputs), 5,
                     20_000, impostor.target, ())
    assert outcome.classes() == ["wrong"]
    assert "output 'D' differs" in outcome.problems["wrong"][0]


def test_checker_calls_a_user_error_refused_not_crash():
    outcome = fuzz.check_program("input A: f32[4, 4]\nB = relu(A)\n", "no-such-target", tune=0)
    assert outcome.classes() == ["refused"]


def test_shrink_keeps_the_failure_and_removes_the_rest():
    text = ("input X: f32[17, 13]\nparam W: f32[13, 11]\nparam V: f32[11, 7]\nA = relu(X)\n"
            "B = matmul(A, W)\nC = tanh(B)\nD = matmul(C, V)\nE = sigmoid(D)\noutput E\n")
    small = fuzz.shrink(text, lambda t: "tanh(" in t and "matmul" in t)
    program = parse(small)
    assert "tanh(" in small and "matmul" in small
    assert len(program.ops) <= 2
    assert max(d for t in program.inputs for d in t.shape) <= 2


# --------------------------------------------------------------------------- the fixed-seed slice


def _slice():
    runs = []
    for k in range(SLICE_PROGRAMS):
        gen = fuzz.generate(SLICE_SEED + k)
        for preset in fuzz.PRESETS:
            runs.append((gen.seed, preset, 0, fuzz.check_program(gen.text, preset, tune=0, seed=k)))
    for k in range(TUNED_PROGRAMS):
        gen = fuzz.generate(SLICE_SEED + SLICE_PROGRAMS + k)
        for preset in fuzz.PRESETS:
            runs.append((gen.seed, preset, 50, fuzz.check_program(gen.text, preset, tune=50, seed=k)))
    return runs


@pytest.fixture(scope="module")
def fuzz_slice():
    return _slice()


def _failures(runs, classes) -> list[str]:
    return [f"seed {seed} on {preset} at tune {tune}: {cls}: {outcome.problems[cls][0]} {outcome.problems[cls][1]}"
            for seed, preset, tune, outcome in runs for cls in classes if cls in outcome.problems]


def test_slice_runs_every_preset_at_both_budgets(fuzz_slice):
    assert len(fuzz_slice) == (SLICE_PROGRAMS + TUNED_PROGRAMS) * len(fuzz.PRESETS)
    assert {(p, t) for _, p, t, _ in fuzz_slice} == {(p, t) for p in fuzz.PRESETS for t in (0, 50)}
    # (how long a check takes is benchmarks/fuzz_pipeline.py's to report, not a test's to assert)


def test_slice_has_no_crash(fuzz_slice):
    assert _failures(fuzz_slice, ("crash",)) == []


def test_slice_has_no_verified_but_wrong_plan(fuzz_slice):
    assert _failures(fuzz_slice, ("wrong",)) == []


def test_slice_host_c_matches_the_interpreter_with_1_and_2_threads(fuzz_slice):
    assert _failures(fuzz_slice, ("host_c_1t", "host_c_2t")) == []


REPROS = sorted((Path(__file__).parent / "fuzz_repros").glob("*.acir"))


@pytest.mark.parametrize("path", REPROS, ids=lambda p: p.stem)
def test_every_fuzz_reproducer_stays_fixed(path):
    """Each program the fuzzer once found failing: every preset, its tuning budget, deep checks."""
    tune = 50 if path.stem.startswith("tune50") else 0
    presets = ["host"] if path.stem.startswith("host") else ["tpu", "gpu", "npu", "gemmini", "host"]
    if path.stem.startswith("replay"):      # a replay of the traces too: two presets show it (it was all four)
        presets = ["tpu", "npu"]
    named = [line.split(":", 1)[1].split("(")[0].split() for line in path.read_text().splitlines()
             if line.startswith("# presets:")]
    if named:       # a torchvision-sized program: the presets it failed on (each takes seconds)
        presets = named[0]
    for preset in presets:
        outcome = fuzz.check_program(path.read_text(), preset, tune, replay=path.stem.startswith("replay"))
        assert not outcome.problems, (preset, outcome.problems)
