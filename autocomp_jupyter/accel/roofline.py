"""The roofline: what a target can attain at a given arithmetic intensity.

attainable(AI) = min(peak, AI x bandwidth) for each memory level; `roofline_fraction`
compares an optimised time with the DRAM roofline at the program's *compulsory*
intensity (every program input and output moved once): 1.0 is the physical limit.
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping

from ..ir.program import Program
from .target import Target, load_target


def attainable_flops(ai: float, target, dtype: str = "f32", level: str | None = None) -> float:
    """min(peak, AI x bandwidth of `level` (DRAM if None)) in flop/s."""
    target = load_target(target)
    bw = (target.level(level) if level else target.dram).bandwidth_gbps * 1e9
    return min(target.peak_flops(dtype), ai * bw)


def compulsory_bytes(program: Program) -> int:
    """Bytes of every program input, param and output, each moved once."""
    names = [t.name for t in program.inputs] + [o for o in program.outputs if o not in {t.name for t in program.inputs}]
    return sum(program.tensor(n).nbytes for n in names)


def roofline_fraction(flops: float, time_s: float, compulsory: float, target, dtype: str = "f32") -> float:
    """(flops / time) / min(peak, AI_c x DRAM bandwidth), AI_c = flops / compulsory bytes."""
    target = load_target(target)
    if time_s <= 0 or flops <= 0:
        return 0.0
    ai = flops / compulsory if compulsory else math.inf
    bound = min(target.peak_flops(dtype), ai * target.dram_bandwidth)
    return (flops / time_s) / bound


def program_dtype(program: Program) -> str:
    """The dtype the peak is taken at: that of the op doing most of the work."""
    if not program.ops:
        return "f32"
    heaviest = max(program.ops, key=lambda op: op.flops)
    return program.tensor(heaviest.inputs[0] if heaviest.inputs else heaviest.output).dtype


def roofline_plot_data(target, points: Mapping[str, Mapping[str, float]] = (), dtype: str = "f32",
                       ai_range: tuple[float, float] = (1 / 16, 4096), samples: int = 64) -> dict:
    """Data for a log-log roofline plot.

    points: {label: {"flops": .., "time_s": .., "dram_bytes": ..}} (e.g. naive, library,
    optimized). Returns {"peak_flops", "ceilings": [{"level", "bandwidth", "ai", "flops"}],
    "points": [{"label", "ai", "flops_per_s"}]}, every level's ceiling over `ai_range`.
    """
    target = load_target(target)
    lo, hi = ai_range
    ais = [lo * (hi / lo) ** (i / (samples - 1)) for i in range(samples)]
    peak = target.peak_flops(dtype)
    ceilings = []
    for level in reversed(target.memory[1:]):  # DRAM first; the innermost has no feed
        bw = level.bandwidth_gbps * 1e9
        ceilings.append({"level": level.name, "bandwidth": bw, "ai": ais,
                         "flops": [min(peak, a * bw) for a in ais],
                         "ridge_ai": peak / bw})
    out_points = []
    for label, p in dict(points).items():
        ai = p["flops"] / p["dram_bytes"] if p.get("dram_bytes") else math.inf
        out_points.append({"label": label, "ai": ai,
                           "flops_per_s": p["flops"] / p["time_s"] if p.get("time_s") else 0.0})
    return {"target": target.name, "dtype": dtype, "peak_flops": peak, "ceilings": ceilings,
            "points": out_points}
