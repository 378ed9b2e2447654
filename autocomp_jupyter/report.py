"""The report (docs/guide/report.md) as typed data: frozen dataclasses built once from the costs of
the pipeline's plans, each with `to_json()` giving the JSON-able dict users read.

    build_report(...) -> Report          # from plans' costs, never from a PassContext
    Report.to_json() -> dict             # `res.report`, `autocomp optimize --json`
    Report.from_json(dict) -> Report     # the typed view of a (possibly older, partial) dict

Field names and their order in `to_json()` are a contract: tests, tutorials, the notebook
UI and the benchmarks read them. Extra fields (`textbook`, `gain_breakdown`, `monitor`,
`roofline`, `program`, `seconds`, `fell_back`, `measured`) add to §8, never rename it.
Parts whose shape another module owns (a kernel's `metrics` and `limits_s` from the cost
model, the tuner's `tuning` block, the host measurement) are carried as mappings.

Also here, because they are numbers derived from the same costs: the roofline helpers and
`kernel_footprints` (bytes each kernel's tiles hold per memory level, for the Tiles tab).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from .accel.cost import KernelCost, ProgramCost
from .accel.roofline import compulsory_bytes, program_dtype
from .accel.roofline import roofline_fraction as _roofline_fraction
from .accel.target import Target
from .ir.plan import Plan
from .ir.program import Program

REPORT_VERSION = 1
BASELINES = ("naive", "textbook", "library")   # the report's baseline blocks, weakest first


def attainable_flops(program: Program, target: Target) -> float:
    """min(peak, AI_c × DRAM bandwidth): the physical limit at compulsory traffic."""
    ai = program.flops / compulsory_bytes(program)
    return min(target.peak_flops(program_dtype(program)), ai * target.dram_bandwidth)


def roofline_fraction(program: Program, target: Target, time_s: float) -> float:
    """(flops / time) / attainable: 1.0 is the physical limit (docs/guide/report.md). A program
    without arithmetic (a transpose) is judged by bandwidth: compulsory bytes / time / DRAM bw."""
    if program.flops == 0:
        return compulsory_bytes(program) / time_s / target.dram_bandwidth if time_s > 0 else 0.0
    return _roofline_fraction(program.flops, time_s, compulsory_bytes(program), target, program_dtype(program))


def roofline_point(program: Program, cost: KernelCost, label: str) -> dict:
    """A point of the roofline plot: arithmetic intensity over DRAM bytes, achieved flop/s."""
    return RooflinePoint.of(program.flops, cost, label).to_json()


# --------------------------------------------------------------------------- the typed report


@dataclass(frozen=True)
class PlanTotals:
    """A whole plan's cost: the report's naive / textbook / library / optimized blocks."""

    time_s: float
    cycles: float
    energy_j: float
    bytes: Mapping[str, float]          # bytes moved per memory level, outer level last

    @classmethod
    def of(cls, cost: KernelCost) -> "PlanTotals":
        return cls(cost.time_s, cost.cycles, cost.energy_j, dict(cost.bytes))

    def to_json(self) -> dict:
        return {"time_s": self.time_s, "cycles": self.cycles, "energy_j": self.energy_j, "bytes": dict(self.bytes)}

    @classmethod
    def from_json(cls, d: Mapping) -> "PlanTotals":
        return cls(d.get("time_s"), d.get("cycles"), d.get("energy_j"), dict(d.get("bytes") or {}))


@dataclass(frozen=True)
class KernelReport:
    """One kernel of the optimised plan: what it fuses, its schedule and its cost."""

    name: str
    ops: tuple[str, ...]
    loops: tuple[str, ...]
    extents: Mapping[str, int]
    order: tuple[str, ...]                           # at the outermost tiling level
    order_by_level: Mapping[str, tuple[str, ...]]
    annotations: Mapping[str, Any]                   # parallel (loops), vectorize (loop), unroll (factor)
    tiles: Mapping[str, Mapping[str, int]]           # loop → level → tile size
    metrics: Mapping[str, float]                     # the cost model's METRIC_NAMES
    bound: str                                       # which term of the time formula binds
    limits_s: Mapping[str, float]                    # every term `bound` compares
    trace: tuple[Mapping[str, Any], ...] = ()        # the primitives that build the schedule (schedule/)
    energy_by_level: Mapping[str, float] = field(default_factory=dict)   # joules per memory level, and "compute"

    @classmethod
    def of(cls, kernel, schedule, cost: KernelCost) -> "KernelReport":
        from .schedule import schedule_json

        spec = schedule_json(schedule)
        return cls(
            name=kernel.name, ops=tuple(kernel.ops), loops=tuple(kernel.loop_names), extents=dict(kernel.extents),
            order=tuple(spec["order"]), order_by_level={lv: tuple(o) for lv, o in spec["order_by_level"].items()},
            annotations=dict(schedule.annotations), tiles=spec["tiles"],
            metrics=cost.metrics(), bound=cost.bound, limits_s=dict(cost.limits), trace=tuple(spec["trace"]),
            energy_by_level=_energy_by_level(cost))

    @property
    def time_s(self) -> float:
        return float(self.metrics.get("time_s") or 0.0)

    def to_json(self) -> dict:
        return {"name": self.name, "ops": list(self.ops), "loops": list(self.loops), "extents": dict(self.extents),
                "order": list(self.order), "order_by_level": {lv: list(o) for lv, o in self.order_by_level.items()},
                "annotations": {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.annotations.items()},
                "tiles": {loop: dict(per) for loop, per in self.tiles.items()},
                "metrics": dict(self.metrics), "bound": self.bound, "limits_s": dict(self.limits_s),
                "trace": [dict(step) for step in self.trace], "energy_by_level": dict(self.energy_by_level)}

    @classmethod
    def from_json(cls, d: Mapping) -> "KernelReport":
        order_by_level = {lv: tuple(o) for lv, o in (d.get("order_by_level") or {}).items()}
        return cls(d.get("name", ""), tuple(d.get("ops") or ()), tuple(d.get("loops") or ()),
                   dict(d.get("extents") or {}), tuple(d.get("order") or ()), order_by_level,
                   {k: (tuple(v) if isinstance(v, list) else v) for k, v in (d.get("annotations") or {}).items()},
                   {loop: dict(per) for loop, per in (d.get("tiles") or {}).items()},
                   dict(d.get("metrics") or {}), d.get("bound", ""), dict(d.get("limits_s") or {}),
                   tuple(dict(step) for step in d.get("trace") or ()), dict(d.get("energy_by_level") or {}))


def _energy_by_level(cost: KernelCost) -> dict[str, float]:
    """Joules per memory level (reads and writes at it), and the rest — MACs and vector
    operations — as "compute"; they add up to the kernel's energy_j."""
    levels = dict(cost.energy_by_level)
    return {**levels, "compute": max(cost.energy_j - sum(levels.values()), 0.0)}


@dataclass(frozen=True)
class RuleEntry:
    """A rule the passes fired (`applied`), skipped or rolled back, with the reason."""

    rule: str
    pass_name: str                   # "pass" in JSON
    ops: tuple[str, ...]
    applied: bool
    why: str = ""

    def to_json(self) -> dict:
        return {"rule": self.rule, "pass": self.pass_name, "ops": list(self.ops), "applied": self.applied,
                "why": self.why}

    @classmethod
    def from_json(cls, d: Mapping) -> "RuleEntry":
        return cls(d.get("rule", ""), d.get("pass", ""), tuple(d.get("ops") or ()), bool(d.get("applied")),
                   d.get("why", ""))


@dataclass(frozen=True)
class Rollback:
    """A step the pipeline undid, and why."""

    pass_name: str                   # "pass" in JSON
    kernel: str
    reason: str

    def to_json(self) -> dict:
        return {"pass": self.pass_name, "kernel": self.kernel, "reason": self.reason}

    @classmethod
    def from_json(cls, d: Mapping) -> "Rollback":
        return cls(d.get("pass", ""), d.get("kernel", ""), d.get("reason", ""))


@dataclass(frozen=True)
class Tuning:
    """The tuner's summary: §8's fields first, then what the tuner adds (kept as it wrote them)."""

    configs_evaluated: int = 0
    seconds: float = 0.0
    top: tuple[Mapping, ...] = ()    # the tuner's entries: {name, time_s, legal, kernels: {...}, ...}
    interrupted: bool = False
    budget_exhausted: bool = False
    details: Mapping[str, Any] = field(default_factory=dict)

    _CORE = ("configs_evaluated", "seconds", "top", "interrupted", "budget_exhausted")

    def to_json(self) -> dict:
        out = {"configs_evaluated": self.configs_evaluated, "seconds": self.seconds, "top": copy.deepcopy(list(self.top)),
               "interrupted": self.interrupted, "budget_exhausted": self.budget_exhausted}
        out.update(copy.deepcopy(dict(self.details)))
        return out

    @classmethod
    def from_json(cls, d: Mapping) -> "Tuning":
        return cls(d.get("configs_evaluated", 0), d.get("seconds", 0.0), tuple(copy.deepcopy(d.get("top") or [])),
                   bool(d.get("interrupted", False)), bool(d.get("budget_exhausted", False)),
                   copy.deepcopy({k: v for k, v in d.items() if k not in cls._CORE}))


@dataclass(frozen=True)
class RooflinePoint:
    label: str
    ai: float                        # flop per DRAM byte
    flops_per_s: float

    @classmethod
    def of(cls, flops: float, cost: KernelCost, label: str) -> "RooflinePoint":
        dram = cost.dram_bytes
        return cls(label, flops / dram if dram else math.inf, flops / cost.time_s if cost.time_s else 0.0)

    def to_json(self) -> dict:
        return {"label": self.label, "ai": self.ai, "flops_per_s": self.flops_per_s}

    @classmethod
    def from_json(cls, d: Mapping) -> "RooflinePoint":
        return cls(d.get("label", ""), d.get("ai", 0.0), d.get("flops_per_s", 0.0))


@dataclass(frozen=True)
class Roofline:
    peak_flops: float
    dram_bw: float
    attainable_flops: float | None
    compulsory_ai: float | None
    points: tuple[RooflinePoint, ...]   # naive, textbook, library, optimized

    def to_json(self) -> dict:
        return {"peak_flops": self.peak_flops, "dram_bw": self.dram_bw, "attainable_flops": self.attainable_flops,
                "compulsory_ai": self.compulsory_ai, "points": [p.to_json() for p in self.points]}

    @classmethod
    def from_json(cls, d: Mapping) -> "Roofline":
        return cls(d.get("peak_flops"), d.get("dram_bw"), d.get("attainable_flops"), d.get("compulsory_ai"),
                   tuple(RooflinePoint.from_json(p) for p in d.get("points") or ()))


@dataclass(frozen=True)
class ProgramInfo:
    file: str | None
    flops: float
    outputs: tuple[str, ...]

    def to_json(self) -> dict:
        return {"file": self.file, "flops": self.flops, "outputs": list(self.outputs)}

    @classmethod
    def from_json(cls, d: Mapping) -> "ProgramInfo":
        return cls(d.get("file"), d.get("flops", 0), tuple(d.get("outputs") or ()))


@dataclass(frozen=True)
class Report:
    """docs/guide/report.md, typed. `to_json()` is `res.report`; keys appear in this field order
    (`measured` only when the C was measured; `textbook`, `roofline`, `program` may be
    None in a report read back from an older dict and are then left out)."""

    version: int
    target: str
    verified: bool
    naive: PlanTotals
    textbook: PlanTotals | None
    library: PlanTotals
    optimized: PlanTotals
    gain_breakdown: Mapping[str, float]       # fusion × tiling × scheduling = speedup_vs_library
    gain_chain_time_s: Mapping[str, float]    # the chain of plans the breakdown divides
    speedup_vs_naive: float
    speedup_vs_textbook: float | None
    speedup_vs_library: float
    roofline_fraction: float
    limit_fraction: float | None              # the physical limit's time / the optimised time (accel/limit.py)
    kernels: tuple[KernelReport, ...]
    rules: tuple[RuleEntry, ...]
    rollbacks: tuple[Rollback, ...]
    tuning: Tuning
    monitor: Mapping[str, float]              # the rule set's flag thresholds (bw_util, occupancy)
    roofline: Roofline | None
    program: ProgramInfo | None
    seconds: float
    fell_back: str | None = None              # None, "library" or "naive"
    measured: Mapping[str, Any] | None = None  # host.measure_plan's result, with --measure
    verification: Mapping[str, Any] | None = None  # how the final check ran kernels tile by tile (pipeline._verify)
    limit: Mapping[str, Any] | None = None    # the physical limit: time_s, bound, dram_s, datapaths_s, ports_s
    area_mm2: float | None = None             # the target's on-chip area (accel/area.py)
    seconds_by_pass: Mapping[str, float] | None = None   # optimize's seconds per stage (parse, baselines, passes, ...)
    objective: str = "latency"                # what every search minimised (objective.py)

    def kernel(self, name: str) -> KernelReport:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel named {name!r}")

    def totals(self, label: str) -> PlanTotals | None:
        """The block of one plan: 'naive', 'textbook', 'library' or 'optimized'."""
        return getattr(self, label) if label in BASELINES + ("optimized",) else None

    def to_json(self) -> dict:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("measured", "verification", "limit", "limit_fraction", "area_mm2",
                          "seconds_by_pass") and value is None:
                continue
            if value is None and f.name in ("textbook", "speedup_vs_textbook", "roofline", "program"):
                continue
            if f.name in ("kernels", "rules", "rollbacks"):
                value = [v.to_json() for v in value]
            elif hasattr(value, "to_json"):
                value = value.to_json()
            else:
                value = copy.deepcopy(value if not isinstance(value, Mapping) else dict(value))
            out[f.name] = value
        return out

    @classmethod
    def from_json(cls, d: Mapping) -> "Report":
        """The typed view of a report dict; missing optional blocks become None / empty."""
        def totals(label):
            block = d.get(label)
            return PlanTotals.from_json(block) if block else None

        empty = PlanTotals(None, None, None, {})
        return cls(
            version=d.get("version", REPORT_VERSION), target=d.get("target", ""), verified=bool(d.get("verified")),
            naive=totals("naive") or empty, textbook=totals("textbook"), library=totals("library") or empty,
            optimized=totals("optimized") or empty,
            gain_breakdown=dict(d.get("gain_breakdown") or {}), gain_chain_time_s=dict(d.get("gain_chain_time_s") or {}),
            speedup_vs_naive=d.get("speedup_vs_naive"), speedup_vs_textbook=d.get("speedup_vs_textbook"),
            speedup_vs_library=d.get("speedup_vs_library"), roofline_fraction=d.get("roofline_fraction"),
            limit_fraction=d.get("limit_fraction"),
            kernels=tuple(KernelReport.from_json(k) for k in d.get("kernels") or ()),
            rules=tuple(RuleEntry.from_json(e) for e in d.get("rules") or ()),
            rollbacks=tuple(Rollback.from_json(e) for e in d.get("rollbacks") or ()),
            tuning=Tuning.from_json(d.get("tuning") or {}), monitor=dict(d.get("monitor") or {}),
            roofline=Roofline.from_json(d["roofline"]) if d.get("roofline") else None,
            program=ProgramInfo.from_json(d["program"]) if d.get("program") else None,
            seconds=d.get("seconds", 0.0), fell_back=d.get("fell_back"), measured=d.get("measured"),
            verification=d.get("verification"), limit=d.get("limit"), area_mm2=d.get("area_mm2"),
            seconds_by_pass=d.get("seconds_by_pass"), objective=d.get("objective", "latency"))


def build_report(program: Program, target: Target, costs: Mapping[str, ProgramCost], optimized: Plan, *,
                 monitor: Mapping[str, float], gain_breakdown: Mapping[str, Any], rules: list, rollbacks: list,
                 tuning: Mapping, verified: bool, seconds: float, fell_back: str | None = None,
                 measured: Mapping | None = None) -> Report:
    """The report from the costs of the four plans (`costs[label]` for naive, textbook,
    library, optimized), the optimised plan (its kernels' schedules), the passes' logs and
    the tuner's summary. `gain_breakdown` is `baselines.gain_breakdown(...)` (with its
    `plans_time_s` chain)."""
    from .accel.limit import physical_limit

    t = {k: c.total.time_s for k, c in costs.items()}
    limit = physical_limit(program, target)
    breakdown = dict(gain_breakdown)
    chain = breakdown.pop("plans_time_s", {})
    return Report(
        version=REPORT_VERSION, target=target.name, verified=bool(verified),
        naive=PlanTotals.of(costs["naive"].total), textbook=PlanTotals.of(costs["textbook"].total),
        library=PlanTotals.of(costs["library"].total), optimized=PlanTotals.of(costs["optimized"].total),
        gain_breakdown=breakdown, gain_chain_time_s=dict(chain),
        speedup_vs_naive=t["naive"] / t["optimized"], speedup_vs_textbook=t["textbook"] / t["optimized"],
        speedup_vs_library=t["library"] / t["optimized"],
        roofline_fraction=roofline_fraction(program, target, t["optimized"]),
        limit_fraction=limit["time_s"] / t["optimized"] if t["optimized"] > 0 else 0.0,
        kernels=tuple(KernelReport.of(k, s, c) for k, s, c in
                      zip(optimized.kernels, optimized.schedules, costs["optimized"].kernels)),
        rules=tuple(RuleEntry.from_json(e) for e in rules),
        rollbacks=tuple(Rollback.from_json(e) for e in rollbacks),
        tuning=Tuning.from_json(tuning), monitor=dict(monitor),
        roofline=Roofline(
            peak_flops=target.peak_flops(program_dtype(program)), dram_bw=target.dram_bandwidth,
            attainable_flops=attainable_flops(program, target),
            compulsory_ai=program.flops / max(compulsory_bytes(program), 1),
            points=tuple(RooflinePoint.of(program.flops, costs[k].total, k) for k in BASELINES + ("optimized",))),
        program=ProgramInfo(program.filename, program.flops, tuple(program.outputs)),
        seconds=seconds, fell_back=fell_back, measured=measured,
        limit={"time_s": limit["time_s"], "bound": limit["bound"], "dram_s": limit["dram_s"],
               "datapaths_s": dict(limit["datapaths_s"]), "ports_s": dict(limit["ports_s"])},
        area_mm2=target.area_mm2, objective=target.objective)


# --------------------------------------------------------------------------- footprints


@dataclass(frozen=True)
class Footprint:
    """Bytes one kernel's tiles hold at each tiling level (outer → inner), and the
    level's capacity: over 1.0 the tiles overflow the level and spill."""

    levels: tuple[str, ...]
    used: tuple[float, ...]
    capacity: tuple[float, ...]


def kernel_footprints(plan: Plan, target: Target) -> dict[str, Footprint]:
    """{kernel name: Footprint} for every kernel of `plan` the cost model can size."""
    from .accel.cost import kernel_model

    out = {}
    for kernel, schedule in zip(plan.kernels, plan.schedules):
        try:
            model = kernel_model(kernel, target)
            tiles, *_ = model.schedule_arrays(schedule)
            used = model.capacity_footprints(tiles)[0]
        except Exception:  # footprints are an extra: a kernel the model cannot size shows none
            continue
        out[kernel.name] = Footprint(tuple(target.tiling_levels), tuple(float(x) for x in used),
                                     tuple(float(x) for x in model.capacity))
    return out


# --------------------------------------------------------------------------- text


def _fmt_time(s: float) -> str:
    for unit, scale in (("s", 1), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


def summary_text(report: Mapping) -> str:
    """What `autocomp optimize` prints: headline numbers, kernels, fired rules, rollbacks."""
    r = report
    g = r["gain_breakdown"]
    lines = [
        f"target {r['target']}: {'verified' if r['verified'] else 'NOT VERIFIED'}"
        + (f" (fell back to the {r['fell_back']} baseline: no optimised plan verified)" if r.get("fell_back") else ""),
        f"  naive {_fmt_time(r['naive']['time_s'])}  textbook {_fmt_time(r['textbook']['time_s'])}  "
        f"library (tuned per op) {_fmt_time(r['library']['time_s'])}  optimized {_fmt_time(r['optimized']['time_s'])}",
        f"  speedup {r['speedup_vs_naive']:.2f}x vs naive, {r['speedup_vs_library']:.2f}x vs library "
        f"(fusion {g['fusion']:.2f}x, tiling {g['tiling']:.2f}x, scheduling {g['scheduling']:.2f}x); "
        f"roofline fraction {r['roofline_fraction']:.2f}"
        + (f", limit fraction {r['limit_fraction']:.2f} (the physical limit, {r['limit']['bound']}-bound: "
           f"{_fmt_time(r['limit']['time_s'])})" if r.get("limit_fraction") is not None and r.get("limit") else ""),
        "kernels:",
    ]
    for k in r["kernels"]:
        m = k["metrics"]
        tiles = ", ".join(f"{loop}:{'/'.join(str(v) for v in lv.values())}" for loop, lv in k["tiles"].items())
        lines.append(f"  {k['name']:<24} {_fmt_time(m['time_s']):>10}  pe_util {m['pe_util']:.2f}  "
                     f"bw_util {m['bw_util']:.2f}  ({k['bound']}-bound)  tiles {tiles}")
    fired = [e for e in r["rules"] if e["applied"]]
    if fired:
        lines.append("rules fired:")
        lines += [f"  {e['pass']}: {e['rule']} on {', '.join(e['ops'])} — {e['why']}" for e in fired]
    skipped = [e for e in r["rules"] if not e["applied"]]
    if skipped:
        lines.append(f"rules skipped: {len(skipped)} (see --json)")
    if r["rollbacks"]:
        lines.append("rollbacks:")
        lines += [f"  {e['pass']} {e['kernel']}: {e['reason']}" for e in r["rollbacks"]]
    if r["tuning"].get("configs_evaluated"):
        lines.append(f"tuning: {r['tuning']['configs_evaluated']} configurations in {r['tuning']['seconds']:.2f} s")
    if r.get("seconds_by_pass"):
        lines.append("seconds by pass: " + ", ".join(f"{k} {v:.2f}" for k, v in r["seconds_by_pass"].items()))
    return "\n".join(lines)
