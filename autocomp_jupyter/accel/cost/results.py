"""What the cost model returns: a batch of candidate costs, one kernel's cost, a program's.

`BatchCost` holds n candidates as arrays (the tuner's view); `KernelCost` is one row of it,
with the report's metrics and what bounds its time (`bound`); `ProgramCost` kernels run one
after another (`combine`). `_rows`, `_merge` and `_pick` select and splice candidate rows
(a producer nest's order variants, its distinct regions).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..target import Target

# The per-kernel metric names of the report (docs/guide/report.md, kernels[*].metrics).
METRIC_NAMES = ("time_s", "flops", "bw_util", "occupancy", "pe_util",
                "arithmetic_intensity", "spill_ratio", "energy_j")



@dataclass
class BatchCost:
    """Costs of n candidate schedules of one kernel: each field an array of length n.

    bytes[:, m] is the traffic out of memory level `level_names[m]` (memory order, innermost
    first) toward the level inside it or, for the innermost level holding a tensor, into
    the datapath.
    """

    level_names: tuple[str, ...]
    time_s: np.ndarray
    cycles: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    energy_j: np.ndarray
    bw_util: np.ndarray
    occupancy: np.ndarray
    pe_util: np.ndarray
    arithmetic_intensity: np.ndarray
    spill_ratio: np.ndarray
    compute_s: np.ndarray
    level_time_s: np.ndarray  # [n, levels]: traffic / bandwidth per source level
    double_buffered: np.ndarray  # [n, tiling levels] bool
    datapath_bytes: np.ndarray | None = None  # [n, statements, levels]: operand streaming
    # What `bound` reads: the parts of each level's time (bandwidth, latency), the transfers
    # that wait in line with compute, and compute time per unit (PE array / vector unit).
    level_bw_s: np.ndarray | None = None       # [n, levels]
    level_latency_s: np.ndarray | None = None  # [n, levels]
    serial_s: np.ndarray | None = None         # [n]
    cold_s: np.ndarray | None = None           # [n]: first input tiles, before any compute
    drain_s: np.ndarray | None = None          # [n]: last output tiles, after all compute
    stream_s: np.ndarray | None = None         # [n]: operands streaming into the datapath
    compute_by_unit: dict | None = None        # {unit name: [n]}
    # [n, levels]: joules of the traffic at each level, reads and writes at both ends of
    # every transfer (energy.py); the rest of energy_j is MACs and vector operations
    energy_by_level: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.time_s)

    def row(self, i: int, kernel_name: str = "") -> "KernelCost":
        return KernelCost(
            kernel=kernel_name, time_s=float(self.time_s[i]), cycles=float(self.cycles[i]),
            flops=float(self.flops[i]),
            bytes={n: float(b) for n, b in zip(self.level_names, self.bytes[i])},
            energy_j=float(self.energy_j[i]), bw_util=float(self.bw_util[i]),
            occupancy=float(self.occupancy[i]), pe_util=float(self.pe_util[i]),
            arithmetic_intensity=float(self.arithmetic_intensity[i]),
            spill_ratio=float(self.spill_ratio[i]), compute_s=float(self.compute_s[i]),
            level_time_s={n: float(t) for n, t in zip(self.level_names, self.level_time_s[i])},
            limits=self._limits(i),
            energy_by_level=({n: float(e) for n, e in zip(self.level_names, self.energy_by_level[i])}
                             if self.energy_by_level is not None else {}),
        )

    def _limits(self, i: int) -> dict:
        """{what: seconds} for every candidate limit of row i (see KernelCost.bound)."""
        if self.level_bw_s is None:
            return {}
        out = {f"compute ({unit})": float(v[i]) for unit, v in (self.compute_by_unit or {}).items()}
        for m, name in enumerate(self.level_names):
            out[f"{name} bandwidth"] = float(self.level_bw_s[i, m])
            out[f"{name} latency"] = float(self.level_latency_s[i, m])
        out["serial transfers"] = float(self.serial_s[i])
        out["cold start"] = float(self.cold_s[i]) if self.cold_s is not None else 0.0
        out["drain"] = float(self.drain_s[i]) if self.drain_s is not None else 0.0
        out["operand streaming"] = float(self.stream_s[i]) if self.stream_s is not None else 0.0
        return out


@dataclass
class KernelCost:
    """The cost of one scheduled kernel (or, from `ProgramCost.total`, a whole program)."""

    kernel: str
    time_s: float
    cycles: float
    flops: float
    bytes: dict[str, float]
    energy_j: float
    bw_util: float
    occupancy: float
    pe_util: float
    arithmetic_intensity: float
    spill_ratio: float
    compute_s: float = 0.0
    level_time_s: dict[str, float] = field(default_factory=dict)
    limits: dict[str, float] = field(default_factory=dict)
    energy_by_level: dict[str, float] = field(default_factory=dict)   # joules of traffic per level

    @property
    def dram_bytes(self) -> float:
        return list(self.bytes.values())[-1]

    @property
    def bound(self) -> str:
        """What limits the time, in the model's own terms: the time is max(max(compute,
        operand streaming) + serial transfers + cold start + drain, each level's bytes /
        bandwidth + its 'latency' part — what its bound adds to that, ports.py), so the binding term is the busy chain — named by its
        largest part, 'compute (<unit>)' (the PE array, the vector unit, ...), 'operand
        streaming' (operands into the datapath), 'serial transfers' (loads that cannot double-
        buffer), 'cold start' (the first input tiles, loaded before anything computes) or
        'drain' (the last output tiles, written back after everything computed),
        with '+ <part>' for each other part above a quarter of it — or '<level> bandwidth' /
        '<level> latency' for the level whose time is largest (by its larger part). The
        roofline's slope is the DRAM bandwidth term alone: a kernel right of the ridge can
        still be bound by DRAM latency (many small loads), its cold start or an inner level."""
        lim = self.limits
        if not lim:
            worst = max(self.level_time_s.items(), key=lambda kv: kv[1], default=("compute", 0.0))
            return "compute" if self.compute_s >= worst[1] else worst[0]
        units = {k: v for k, v in lim.items() if k.startswith("compute")}
        unit = max(units, key=units.get) if units else "compute"
        stream = lim.get("operand streaming", 0.0)
        lead = (unit, self.compute_s) if self.compute_s >= stream else ("operand streaming", stream)
        parts = {lead[0]: lead[1], "serial transfers": lim.get("serial transfers", 0.0),
                 "cold start": lim.get("cold start", 0.0), "drain": lim.get("drain", 0.0)}
        busy = sum(parts.values())
        levels = {name: lim.get(f"{name} bandwidth", 0.0) + lim.get(f"{name} latency", 0.0)
                  for name in self.level_time_s}
        worst = max(levels, key=levels.get, default=None)
        if worst is None or busy >= levels[worst]:
            ranked = sorted(parts, key=lambda p: -parts[p])   # stable: compute first on ties
            return " + ".join([ranked[0]] + [p for p in ranked[1:] if parts[p] > 0.25 * busy])
        part = "bandwidth" if lim[f"{worst} bandwidth"] >= lim[f"{worst} latency"] else "latency"
        return f"{worst} {part}"

    def metrics(self) -> dict:
        """The report's kernels[*].metrics (docs/guide/report.md), names exactly as there."""
        return {name: getattr(self, name) for name in METRIC_NAMES}

    def summary(self) -> dict:
        """The report's naive / library / optimized block: time, cycles, energy, bytes."""
        return {"time_s": self.time_s, "cycles": self.cycles, "energy_j": self.energy_j,
                "bytes": dict(self.bytes)}


@dataclass
class ProgramCost:
    """Kernels run one after another: times, bytes and energy add up."""

    target: str
    kernels: list[KernelCost]
    total: KernelCost


def combine(costs: Sequence[KernelCost], target: Target) -> KernelCost:
    """Totals of kernels run one after another (utilisations weighted by time)."""
    time_s = sum(c.time_s for c in costs)
    names = [m.name for m in target.memory]
    bytes_ = {n: sum(c.bytes.get(n, 0.0) for c in costs) for n in names}
    weight = lambda attr: sum(getattr(c, attr) * c.time_s for c in costs) / time_s if time_s else 0.0
    flops = sum(c.flops for c in costs)
    dram = bytes_[names[-1]]
    return KernelCost(
        kernel="total", time_s=time_s, cycles=time_s * target.clock_ghz * 1e9, flops=flops, bytes=bytes_,
        energy_j=sum(c.energy_j for c in costs),
        bw_util=dram / time_s / target.dram_bandwidth if time_s else 0.0,
        occupancy=weight("occupancy"), pe_util=weight("pe_util"),
        arithmetic_intensity=flops / dram if dram else math.inf,
        spill_ratio=max((c.spill_ratio for c in costs), default=0.0),
        compute_s=sum(c.compute_s for c in costs),
        level_time_s={n: sum(c.level_time_s.get(n, 0.0) for c in costs) for n in names},
        limits={k: sum(c.limits.get(k, 0.0) for c in costs) for k in dict.fromkeys(k for c in costs for k in c.limits)},
        energy_by_level={n: sum(c.energy_by_level.get(n, 0.0) for c in costs) for n in names},
    )




def _rows(cost: "BatchCost", idx: np.ndarray) -> "BatchCost":
    """The BatchCost of candidates `idx` of `cost`."""
    out = {}
    n = len(cost.time_s)
    for f in BatchCost.__dataclass_fields__:
        v = getattr(cost, f)
        if isinstance(v, np.ndarray):
            out[f] = v[idx]
        elif isinstance(v, dict):      # (an [n] array is taken as is; a scalar broadcast first)
            out[f] = {k: x[idx] if isinstance(x, np.ndarray) and x.shape == (n,) and not isinstance(idx, slice)
                      else np.broadcast_to(x, (n,))[idx] for k, x in v.items()}
        else:
            out[f] = v
    return BatchCost(**out)


def _merge(cost: "BatchCost", part: "BatchCost", idx: np.ndarray) -> "BatchCost":
    """`cost` with candidates `idx` replaced by the rows of `part`."""
    n = len(cost.time_s)
    out = {}
    for f in BatchCost.__dataclass_fields__:
        v, w = getattr(cost, f), getattr(part, f)
        if isinstance(v, np.ndarray):
            v = v.copy()
            v[idx] = w
            out[f] = v
        elif isinstance(v, dict):
            merged = {}
            for k, x in v.items():
                x = np.array(np.broadcast_to(x, (n,)), dtype=float)
                x[idx] = w[k]
                merged[k] = x
            out[f] = merged
        else:
            out[f] = v
    return BatchCost(**out)


def _pick(costs: list["BatchCost"], best: np.ndarray) -> "BatchCost":
    """One BatchCost of candidate i's row from costs[best[i]]."""
    rows = np.arange(len(best))
    out = {}
    for f in BatchCost.__dataclass_fields__:
        first = getattr(costs[0], f)
        if isinstance(first, np.ndarray):
            out[f] = np.stack([getattr(c, f) for c in costs])[best, rows]
        elif isinstance(first, dict):
            out[f] = {k: np.stack([np.broadcast_to(getattr(c, f)[k], (len(best),)) for c in costs])[best, rows]
                      for k in first}
        else:
            out[f] = first
    return BatchCost(**out)
