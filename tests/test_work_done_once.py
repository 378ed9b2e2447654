"""Work the checks do once per structure, not once per call: a kernel's twin is built once for
all the schedules of that kernel verified on it, and a rewritten program is checked against
the original once across runs (a sweep's designs, a re-run cell) while its weights are the same."""
from dataclasses import replace

import numpy as np

from autocomp_jupyter import caches, pipeline, verify
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import Kernel, Schedule
from autocomp_jupyter.passes import PassContext
from autocomp_jupyter.rules.engine import load_rules

MATMUL = """input A: f32[96, 80]
param W: f32[80, 72]
C[i, j] += A[i, k] * W[k, j]
R[i, j] = relu(C[i, j])
"""

INLINES = """input A: f32[4, 8]
param b: f32[8]
c[j] = exp(b[j])
D[i, j] = A[i, j] * c[j]
"""


def _schedules(kernel: Kernel, levels):
    return [Schedule(kernel, tiles={"i": {levels[0]: t}, "j": {levels[0]: t}}, levels=levels) for t in (8, 16, 32)]


def _count(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(a) or real(*a, **k))
    return calls


def test_a_kernels_twin_is_built_once_for_all_its_schedules(monkeypatch):
    caches.clear_all()
    program = replace(parse(MATMUL, "<test>"), source="")      # no source: the kernel's own twin
    target = load_target("tpu")
    ctx = PassContext(program, target, load_rules([], target.name))
    kernel = Kernel.from_ops(program, ["C"])
    built = _count(monkeypatch, verify, "kernel_twin")
    records = []
    for schedule in _schedules(kernel, target.tiling_levels):
        record: dict = {}
        assert verify.verify_schedule(schedule, program, ctx, record=record) == ""
        records.append(record["tiled_run"])
    assert records == ["twin"] * 3                 # each schedule still runs tile by tile on the twin
    assert len(built) == 1


def test_the_program_twin_is_replayed_once_for_its_kernels(monkeypatch):
    caches.clear_all()
    program = parse(MATMUL, "<test>")
    target = load_target("tpu")
    ctx = PassContext(program, target, load_rules([], target.name))
    replayed = _count(monkeypatch, verify, "replay_inlines")
    for op in ("C", "R"):
        kernel = Kernel.from_ops(program, [op])
        for schedule in _schedules(kernel, target.tiling_levels):
            assert verify.verify_schedule(schedule, program, ctx) == ""
    assert len(replayed) == 1


def test_a_rewrite_is_checked_once_across_targets_while_the_weights_are_the_same(monkeypatch):
    caches.clear_all()
    checked = _count(monkeypatch, pipeline, "equivalent_at_scale")
    program = parse(INLINES, "<test>")
    first = pipeline.optimize(program, target="tpu", tune=0)
    n = len(checked)
    assert n >= 1 and first.report["verified"]
    second = pipeline.optimize(program, target="npu", tune=0)
    assert len(checked) == n and second.report["verified"]         # the same rewrites: not run again
    weighted = replace(program, param_values={"b": np.ones(8)})   # equal as a program, other weights
    pipeline.optimize(weighted, target="npu", tune=0)
    assert len(checked) > n
