"""The report (DESIGN §8): one JSON-able dict, built once from the pipeline's plans.

Field names are a contract: tests, tutorials, the notebook UI and the benchmarks read
them. Extra fields (`monitor`, `roofline`, `program`, `seconds`) add to it, never rename.
"""
from __future__ import annotations

import math

from .accel.cost import ProgramCost
from .accel.roofline import compulsory_bytes, program_dtype
from .accel.roofline import roofline_fraction as _roofline_fraction
from .accel.target import Target
from .ir.program import Program
from .passes import PassContext
from .result import Plan
from .rules.engine import RuleSet

REPORT_VERSION = 1


def attainable_flops(program: Program, target: Target) -> float:
    """min(peak, AI_c × DRAM bandwidth): the physical limit at compulsory traffic."""
    ai = program.flops / compulsory_bytes(program)
    return min(target.peak_flops(program_dtype(program)), ai * target.dram_bandwidth)


def roofline_fraction(program: Program, target: Target, time_s: float) -> float:
    """(flops / time) / attainable: 1.0 is the physical limit (DESIGN §7). A program
    without arithmetic (a transpose) is judged by bandwidth: compulsory bytes / time / DRAM bw."""
    if program.flops == 0:
        return compulsory_bytes(program) / time_s / target.dram_bandwidth if time_s > 0 else 0.0
    return _roofline_fraction(program.flops, time_s, compulsory_bytes(program), target, program_dtype(program))


def roofline_point(program: Program, cost, label: str) -> dict:
    """A point of the roofline plot: arithmetic intensity over DRAM bytes, achieved flop/s."""
    dram = cost.dram_bytes
    return {"label": label, "ai": program.flops / dram if dram else math.inf,
            "flops_per_s": program.flops / cost.time_s if cost.time_s else 0.0}


def _kernel_entry(kernel, schedule, cost) -> dict:
    levels = schedule.levels
    return {
        "name": kernel.name,
        "ops": list(kernel.ops),
        "loops": list(kernel.loop_names),
        "extents": dict(kernel.extents),
        "order": list(schedule.order_at(levels[0], levels)) if levels else list(kernel.loop_names),
        "order_by_level": {lv: list(schedule.order_at(lv, levels)) for lv in levels},
        "annotations": {k: (list(v) if isinstance(v, tuple) else v) for k, v in schedule.annotations.items()},
        "tiles": {loop: {lv: size for lv, size in zip(levels, sizes)}
                  for loop, sizes in schedule.tile_sizes(levels).items()},
        "metrics": cost.metrics(),
        "bound": cost.bound,
        "limits_s": dict(cost.limits),   # every term of the time formula `bound` compares
    }


BASELINES = ("naive", "textbook", "library")   # the report's baseline blocks, weakest first


def build_report(program: Program, target: Target, rules: RuleSet, naive: Plan, library: Plan, optimized: Plan,
                 ctx: PassContext, log: list, rollbacks: list, tuning: dict, verified: bool, seconds: float,
                 textbook: Plan | None = None) -> dict:
    from .baselines import gain_breakdown, textbook_plan

    textbook = textbook if textbook is not None else textbook_plan(program, target)
    costs: dict[str, ProgramCost] = {"naive": ctx.cost(naive), "textbook": ctx.cost(textbook),
                                     "library": ctx.cost(library), "optimized": ctx.cost(optimized)}
    t = {k: c.total.time_s for k, c in costs.items()}
    breakdown = gain_breakdown(library, optimized, ctx)
    chain = breakdown.pop("plans_time_s")
    return {
        "version": REPORT_VERSION,
        "target": target.name,
        "verified": bool(verified),
        "naive": costs["naive"].total.summary(),
        "textbook": costs["textbook"].total.summary(),
        "library": costs["library"].total.summary(),
        "optimized": costs["optimized"].total.summary(),
        "gain_breakdown": breakdown,
        "gain_chain_time_s": chain,
        "speedup_vs_naive": t["naive"] / t["optimized"],
        "speedup_vs_textbook": t["textbook"] / t["optimized"],
        "speedup_vs_library": t["library"] / t["optimized"],
        "roofline_fraction": roofline_fraction(program, target, t["optimized"]),
        "kernels": [_kernel_entry(k, s, c) for k, s, c in
                    zip(optimized.kernels, optimized.schedules, costs["optimized"].kernels)],
        "rules": list(log),
        "rollbacks": list(rollbacks),
        "tuning": tuning,
        "monitor": dict(rules.monitor),
        "roofline": {
            "peak_flops": target.peak_flops(program_dtype(program)),
            "dram_bw": target.dram_bandwidth,
            "attainable_flops": attainable_flops(program, target),
            "compulsory_ai": program.flops / max(compulsory_bytes(program), 1),
            "points": [roofline_point(program, costs[k].total, k) for k in BASELINES + ("optimized",)],
        },
        "program": {"file": program.filename, "flops": program.flops, "outputs": list(program.outputs)},
        "seconds": seconds,
    }


def _fmt_time(s: float) -> str:
    for unit, scale in (("s", 1), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


def summary_text(report: dict) -> str:
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
        f"roofline fraction {r['roofline_fraction']:.2f}",
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
    return "\n".join(lines)
