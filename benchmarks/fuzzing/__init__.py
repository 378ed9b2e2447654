"""Differential fuzzing of the whole pipeline: test tooling, not part of the package.

    from benchmarks import fuzzing as fuzz
    gen = fuzz.generate(seed)                  # a valid DSL program: gen.text, gen.kinds, gen.dtype
    outcome = fuzz.check_program(gen.text, "host", tune=0, seed=3)
    outcome.classes()                          # e.g. ["not_verified", "fell_back"]
    small = fuzz.shrink(gen.text, lambda text: "wrong" in fuzz.check_program(text, "tpu", 0).classes())

The modules, each one idea:

- `programs`: the op-chain generator (`generate`), random valid programs over every library
  op, comprehension form and dtype, on tiny and odd shapes;
- `models`: the exporter-shaped generator (`generate_model`), ONNX networks built the way
  torch.onnx writes them, imported, and checked against onnxruntime (`check_model`);
- `check`: `check_program`, one program through `optimize` on one preset at one tuning budget,
  sorted into the failure classes (`CLASSES`);
- `shrink`: minimising a failing program (`shrink`) and writing it down (`write_reproducer`).

It lives beside the tools that run it (`benchmarks/fuzz_pipeline.py`, the long runs) and is
imported by the suite's fixed-seed slices (`tests/test_fuzz_*.py`) and by the golden report
cases (`tests/golden_reports.py`, generated programs), from the checkout's root, like the
package itself. This package re-exports what the op-chain fuzzer offers as one namespace.
"""
from __future__ import annotations

from .check import CLASSES, PRESETS, Outcome, _check_plan, check_program  # _check_plan: a test plants a plan in it
from .programs import COMPREHENSION_KINDS, DTYPES, KINDS, LIBRARY_KINDS, Generated, generate
from .shrink import shrink, write_reproducer

__all__ = ["CLASSES", "COMPREHENSION_KINDS", "DTYPES", "KINDS", "LIBRARY_KINDS", "PRESETS", "Generated", "Outcome",
           "check_program", "generate", "shrink", "write_reproducer"]
