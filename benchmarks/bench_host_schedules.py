"""Shared by the host benchmarks: the fidelity programs and a one-kernel plan builder."""
from __future__ import annotations

import numpy as np

from autocomp_jupyter.ir.schedule import Kernel, Schedule
from autocomp_jupyter.result import Plan

GEMM = "input A: f32[{n}, {n}]\ninput B: f32[{n}, {n}]\nC = matmul(A, B)\n"
CONV = "input X: f32[1, 32, 28, 28]\nparam W: f32[32, 32, 3, 3]\nY = conv2d(X, W, stride=1, padding=1)\n"


def plan_of(program, tiles, order=None, annotations=None, levels=("L2", "registers")):
    """All of `program` in one kernel with the given tiles (loops it lacks are ignored)."""
    kernel = Kernel.from_ops(program, [op.name for op in program.ops])
    schedule = Schedule(kernel, tiles={l: t for l, t in tiles.items() if l in kernel.loop_names},
                        order={lv: o for lv, o in (order or {}).items()}, annotations=annotations or {}, levels=levels)
    return Plan(program, (kernel,), (schedule,))


def ranks(x):
    """Ranks of `x` (0-based), tied values sharing their average rank (as scipy's rankdata)."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x))
    r[order] = np.arange(len(x), dtype=float)
    for value in np.unique(x):
        tied = x == value
        if tied.sum() > 1:
            r[tied] = r[tied].mean()
    return r


def spearman(x, y):
    """Spearman's rank correlation, ties at their average rank (schedules that compile to the
    same code are predicted and measured alike: a tie, not a coin toss)."""
    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])
