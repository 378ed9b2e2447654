"""The roofline: what a target can attain at a given arithmetic intensity.

attainable(AI) = min(peak, AI x bandwidth) for each memory level; `roofline_fraction`
compares an optimised time with the DRAM roofline at the program's *compulsory*
intensity (every program output and the elements of each input the program reads, moved
once: `compulsory_traffic`): 1.0 is the physical limit.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ..ir.program import Program
from .target import load_target


def attainable_flops(ai: float, target, dtype: str = "f32", level: str | None = None) -> float:
    """min(peak, AI x bandwidth of `level` (DRAM if None)) in flop/s."""
    target = load_target(target)
    bw = (target.level(level) if level else target.dram).bandwidth_gbps * 1e9
    return min(target.peak_flops(dtype), ai * bw)


def compulsory_bytes(program: Program) -> int:
    """Bytes every schedule must move: each program input, param and output once
    (`compulsory_traffic`)."""
    return sum(compulsory_traffic(program).values())


# Inputs up to this many elements are marked element by element (exact); larger ones take
# the largest single access's elements (a floor).
_MASK_ELEMENTS = 1 << 24


def compulsory_traffic(program: Program) -> dict[str, int]:
    """{tensor: bytes} that any schedule must move once: each output whole, and of each input
    and param the elements the program reads. A stride-2 1x1 conv reads every other row and
    column of its input, a quarter of it: the rest need never leave DRAM, and a floor that
    counted it read 10% past the model's best schedule. Remembered on the program."""
    memo = program.__dict__.get("_compulsory_traffic")
    if memo is not None:
        return memo
    reads: dict[str, list] = {}            # tensor -> [(access, its statement's extents)]
    # A tensor written in place of an input (a KV-cache update) is that input's storage: its
    # update reads none of the rows it keeps, and what reads the tensor reads the input.
    storage = {st.target: st.in_place.source for st in program.statements if st.in_place is not None}
    for st in program.statements:
        ext = st.extents
        for access in st.reads():
            if st.in_place is not None and access.tensor == st.in_place.source:
                continue
            reads.setdefault(storage.get(access.tensor, access.tensor), []).append((access, ext))
    out = {t.name: _read_bytes(t, reads.get(t.name, [])) for t in program.inputs}
    for name in program.outputs:
        if name not in out:
            out[name] = program.tensor(name).nbytes
            writer = next((st for st in program.statements if st.target == name), None)
            if writer is not None and writer.in_place is not None:    # one row written in place
                out[name] //= max(1, writer.extents[writer.in_place.loop])
    object.__setattr__(program, "_compulsory_traffic", out)
    return out


def statements_read_bytes(tensor, statements) -> int:
    """Bytes of `tensor` that `statements` read (in range; each element once): what a kernel
    must bring in at least once. A gather reads the rows its ids select, not the table."""
    return _read_bytes(tensor, [(a, st.extents) for st in statements for a in st.reads() if a.tensor == tensor.name])


def _read_bytes(tensor, reads) -> int:
    """Bytes of `tensor` its `reads` [(access, statement extents)] touch (in range only)."""
    boxes, floor = [], 0
    for access, ext in reads:
        values = [_index_values(idx, ext, n) for idx, n in zip(access.indices, tensor.shape)]
        loops = [set(idx.loops) for idx in access.indices]
        separable = all(not (a & b) for i, a in enumerate(loops) for b in loops[i + 1:])
        if separable and all(v is not None for v in values):
            boxes.append(values)
            floor = max(floor, math.prod(len(v) for v in values))
        else:   # dimensions tied by a loop (a diagonal): its largest projection, a floor
            floor = max(floor, max((len(v) for v in values if v is not None), default=0))
    if any(all(len(v) == n for v, n in zip(values, tensor.shape)) for values in boxes):
        count = tensor.size         # one access reads it whole (a weight): no mask to mark
    elif boxes and tensor.size <= _MASK_ELEMENTS and len(boxes) == len(reads):
        mask = np.zeros(tensor.shape, dtype=bool)
        for values in boxes:
            mask[np.ix_(*values)] = True
        count = int(mask.sum())
    else:
        count = floor
    return count * tensor.nbytes // max(tensor.size, 1)


def _index_values(index, extents, size: int) -> np.ndarray | None:
    """The distinct in-range values of an affine index over its loops' extents (None past
    a million combinations)."""
    values = np.array([index.const], dtype=np.int64)
    for loop, coeff in index.terms:
        if len(values) * extents[loop] > 1_000_000:
            return None
        values = np.unique(np.add.outer(values, coeff * np.arange(extents[loop], dtype=np.int64)).ravel())
    return values[(values >= 0) & (values < size)]


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
