"""The HTML content of each tab, as pure functions of a Result.

The live widget and the static HTML both call these, so a notebook opened without a
kernel (nbconvert, GitHub) shows the same tables as a live one.
"""
from __future__ import annotations

import html
import math
import re

from .fmt import (BAD, GOOD, MUTED, badge, esc, flag, joules, nbytes, note, num, pct, ratio,
                  seconds, si, table)
from .glossary import explain_why, legend, th
from .names import kernel_labeller
from .network import profiler_html

ROOFLINE_TIP = ("roofline fraction: the program's attained flop/s over what the roofline allows at its "
                "arithmetic intensity (min of peak compute and DRAM bandwidth × intensity). Low when kernels wait on "
                "latency, cold starts or small tiles rather than on compute or bandwidth: see the Profile tab's "
                "'bound by' column.")
LIMIT_TIP = ("limit fraction: the physical limit's time over the optimised time (1.0: nothing left to gain). The "
             "limit is the largest of the compulsory DRAM traffic over the DRAM bandwidth and, per datapath, its "
             "work at the best array fill the loop extents allow.")
DEFAULT_MONITOR = {"bw_util": 0.7, "occupancy": 0.5}
PLAN_LABELS = ("naive", "textbook", "library", "optimized")
PLAN_NOTES = {"naive": "one kernel per op, untiled", "textbook": "one kernel per op, fixed textbook tiles",
              "library": "one kernel per op, each tuned alone (no fusion)",
              "optimized": "fused, tiled, scheduled, verified"}


# --------------------------------------------------------------------------- header


def summary_html(result) -> str:
    """One line: target, speedups, roofline fraction, verified — and a failure banner."""
    r = result.report
    verified = bool(r.get("verified"))
    parts = [f"<b>target</b> {esc(r.get('target', getattr(result.target, 'name', '?')))}",
             f"<b>{ratio(r.get('speedup_vs_naive'))}</b> vs naive",
             f"<b>{ratio(r.get('speedup_vs_library'))}</b> vs library (each op tuned alone)",
             f'<span class="autocomp-term" title="{esc(ROOFLINE_TIP)}">roofline {pct(r.get("roofline_fraction"))}</span>']
    if r.get("limit_fraction") is not None:
        parts.append(f'<span class="autocomp-term" title="{esc(LIMIT_TIP)}">limit {pct(r.get("limit_fraction"))}</span>')
    parts += [f"optimised {seconds((r.get('optimized') or {}).get('time_s'))}",
             badge("verified", GOOD) if verified else badge("NOT VERIFIED", BAD)]
    out = '<div class="autocomp-summary">' + " · ".join(parts) + "</div>"
    if not verified:
        out += (f'<p style="color:{BAD}"><b>Verification failed:</b> the optimised plan was not proved '
                "legal and equivalent, so it must not be used.</p>")
    interrupted = (r.get("tuning") or {}).get("interrupted")
    if interrupted:
        out += note("Tuning was interrupted; showing the best configuration found so far.")
    return out


# --------------------------------------------------------------------------- tiles


def _footprints(result, kernel_name: str) -> tuple[list[str], list[float], list[float]] | None:
    """(levels outer→inner, bytes the kernel's tiles take per level, level capacity), as
    the pipeline computed them (`result.footprints`); None for a kernel without them."""
    fp = (getattr(result, "footprints", None) or {}).get(kernel_name)
    return (list(fp.levels), list(fp.used), list(fp.capacity)) if fp else None


def tiles_html(result) -> str:
    """Per kernel: loop × level tile sizes, then footprint and fill per level."""
    report_kernels = {k["name"]: k for k in result.report.get("kernels", [])}
    label = kernel_labeller(result)
    out = []
    levels_all = tuple(getattr(result.target, "tiling_levels", ()))
    for kernel, schedule in zip(result.after.kernels, result.after.schedules):
        levels = schedule.levels or levels_all
        sizes = schedule.tile_sizes(levels)
        rk = report_kernels.get(kernel.name, {})
        rows = []
        for loop in kernel.loops:
            cells = [f"<code>{esc(loop.name)}</code>", num(loop.extent)]
            for size in sizes[loop.name]:
                tiled = size < loop.extent
                cells.append(f"<b>{size}</b>" if tiled else f'<span style="color:{MUTED}">{size}</span>')
            rows.append(cells)
        header = ["loop", "extent"] + [esc(lv) for lv in levels]
        spill = (rk.get("metrics") or {}).get("spill_ratio")
        out.append(f"<h4>kernel {label(kernel.name)} <small>ops {esc(', '.join(kernel.ops))}</small></h4>")
        out.append(table(header, rows, "autocomp-tiles"))
        fp = _footprints(result, kernel.name)
        if fp:
            lvls, used, cap = fp
            cells = []
            for lv, u, c in zip(lvls, used, cap):
                fill = u / c if c and math.isfinite(c) else 0.0
                text = f"{nbytes(u)} / {nbytes(c)} ({pct(fill)})"
                cells.append(flag(text, f"tiles overflow {lv}: they spill") if fill > 1 else text)
            out.append(table(["footprint"] + [esc(l) for l in lvls], [["tiles / capacity"] + cells],
                             "autocomp-footprint"))
        if spill is not None:
            s = f"spill ratio {pct(spill)}"
            out.append(f"<p>{flag(s, 'some tiles overflow their level') if spill > 0 else esc(s)}</p>")
    if any(e.get("pass") == "tiling" for e in result.report.get("rollbacks", [])):
        out.insert(0, note("The tiling pass was rolled back (see the Rules tab): these are the tiles the plan "
                           "kept — from before that pass, or the tuner's when it ran."))
    return "".join(out) or note("no kernels")


# --------------------------------------------------------------------------- schedule


def _nest(schedule) -> str:
    try:
        text = schedule.loop_nest()
    except Exception as err:  # show what is there even if one nest cannot print
        text = f"(cannot print this loop nest: {err})"
    ann = schedule.annotations
    head = f"# kernel {schedule.kernel.name}: ops {', '.join(schedule.kernel.ops)}"
    if ann:
        head += "\n# " + ", ".join(f"{k}={_annotation(v)}" for k, v in ann.items())
    return head + "\n" + text


def _annotation(value) -> str:
    """An annotation's value as the nest's header writes it: `i,j`, `(j,i,1)` for a (loop, by, factor) triple."""
    if not isinstance(value, (tuple, list)):
        return str(value)
    if any(isinstance(v, (tuple, list)) for v in value):
        return " ".join("(" + ",".join(map(str, v)) + ")" for v in value)
    return ",".join(map(str, value))


def schedule_html(result) -> str:
    """Loop nests before (one naive nest per op) and after (fused, tiled), side by side, and
    the optimised kernels' traces as Python calls that rebuild them (`res.code("schedule")`)."""
    before = "\n\n".join(_nest(s) for s in result.before.schedules)
    after = "\n\n".join(_nest(s) for s in result.after.schedules)
    try:
        trace = result.code("schedule")
    except Exception as err:  # a hand-built Result without a target: the nests still show
        trace = f"(no trace: {err})"
    return ('<div class="autocomp-pair">'
            f'<div><h4>before</h4><pre class="autocomp-nest-before">{html.escape(before)}</pre></div>'
            f'<div><h4>after</h4><pre class="autocomp-nest-after">{html.escape(after)}</pre></div></div>'
            '<h4>trace (paste into a cell to rebuild a kernel\'s schedule; '
            'replay with optimize(..., schedule={kernel: s}))</h4>'
            f'<pre class="autocomp-trace">{html.escape(trace)}</pre>')


# --------------------------------------------------------------------------- profile


def _monitor(report: dict) -> dict:
    return {**DEFAULT_MONITOR, **(report.get("monitor") or {})}


def metric_cells(metrics: dict, monitor: dict) -> list[str]:
    """time, flops, AI, bw_util, occupancy, pe_util, spill, energy — with threshold flags."""
    def flagged(name: str) -> str:
        value = metrics.get(name)
        text = pct(value)
        if value is not None and name in monitor and value < monitor[name]:
            return flag(text, f"{name} below the monitor threshold {pct(monitor[name])}")
        return text

    return [seconds(metrics.get("time_s")), si(metrics.get("flops"), "flop"),
            num(metrics.get("arithmetic_intensity")), flagged("bw_util"), flagged("occupancy"),
            pct(metrics.get("pe_util")), pct(metrics.get("spill_ratio")), joules(metrics.get("energy_j"))]


METRIC_HEADER = ["time", "flops", "AI (flop/B)", "bw_util", "occupancy", "pe_util", "spill", "energy"]


def profile_html(result, roofline_svg: str = "") -> str:
    """Program totals (naive, textbook, library, optimised), the gain over the library by
    step, per-kernel metrics with flags, roofline."""
    r = result.report
    rows = []
    opt = (r.get("optimized") or {}).get("time_s")
    for label in PLAN_LABELS:
        b = r.get(label)
        if not b:
            continue  # a report from before the textbook baseline existed
        by = b.get("bytes") or {}
        gain = ratio(b["time_s"] / opt) if opt and b.get("time_s") and label != "optimized" else ""
        rows.append([label, esc(PLAN_NOTES.get(label, "")), seconds(b.get("time_s")), gain,
                     num(b.get("cycles")), joules(b.get("energy_j")),
                     ", ".join(f"{esc(k)} {nbytes(v)}" for k, v in by.items())])
    for row in rows:
        row[0] = th(row[0])
    out = ["<h4>program</h4>", table(["plan", "what", th("time"), "optimised is", "cycles", th("energy"),
                                      "bytes moved per level"], rows, "autocomp-totals")]
    g = r.get("gain_breakdown")
    if g:
        out.append(note(f"gain over the library {ratio(r.get('speedup_vs_library'))} = fusion "
                        f"{ratio(g.get('fusion'))} × tiling {ratio(g.get('tiling'))} × scheduling "
                        f"{ratio(g.get('scheduling'))} (fusion: the fused kernels tuned as the library would; "
                        "tiling: the optimised tiles and orders on them; scheduling: the optimised annotations)."))
    monitor = _monitor(r)
    label = kernel_labeller(result)
    krows = [[label(k["name"]), esc(", ".join(k.get("ops", [])))]
             + metric_cells(k.get("metrics") or {}, monitor) + [esc(k.get("bound", ""))]
             for k in r.get("kernels", [])]
    out.append(profiler_html(result))
    out.append("<h4>kernels: metrics</h4>")
    tall = ' style="max-height:420px;overflow-y:auto"' if len(krows) > 20 else ""
    out.append(f'<div class="autocomp-scroll"{tall}>'
               + table(["kernel", "ops"] + [th(h) for h in METRIC_HEADER] + [th("bound by")], krows,
                       "autocomp-kernels") + "</div>")
    out.append(note(f"⚠ marks bw_util below {pct(monitor['bw_util'])} or occupancy below "
                    f"{pct(monitor['occupancy'])} (the rule set's monitor thresholds)."))
    out.append(legend(METRIC_HEADER + ["bound by"]))
    if roofline_svg:
        fraction = r.get("roofline_fraction")
        why_low = ""
        if isinstance(fraction, (int, float)) and fraction < 0.2 and r.get("kernels"):
            share: dict[str, float] = {}
            for k in r["kernels"]:
                bound = (k.get("bound") or "?").split(" + ")[0]
                share[bound] = share.get(bound, 0.0) + float((k.get("metrics") or {}).get("time_s") or 0.0)
            top, t = max(share.items(), key=lambda kv: kv[1])
            total = sum(share.values()) or 1.0
            why_low = note(f"Roofline fraction {pct(fraction)} is low: {pct(t / total)} of the time is in kernels "
                           f"bound by {top}, a term the roofline (peak compute, DRAM bandwidth) does not draw — "
                           "the kernels are far below both ceilings.")
        limit = r.get("limit") or {}
        limit_line = note(f"Limit fraction {pct(r.get('limit_fraction'))}: the physical limit is "
                          f"{seconds(limit.get('time_s'))}, {limit.get('bound')}-bound ({LIMIT_TIP.split(': ', 1)[1]})"
                          ) if r.get("limit_fraction") is not None and limit else ""
        out.append(f"<h4>roofline (roofline fraction {pct(r.get('roofline_fraction'))})</h4>{why_low}{limit_line}{roofline_svg}"
                   + note("Large dots: the whole program under each plan; small dots: one per kernel of the "
                          "optimised plan (the slowest named; hover for any)."))
    return "".join(out)


# --------------------------------------------------------------------------- rules


# What a plan keeps when a pass is rolled back (the Tiles and Schedule tabs still show a schedule).
ROLLBACK_KEEPS = {
    "tiling": "The plan keeps the tiles it had before this pass (each kernel's tuned library tiles, "
              "re-tiled for fused kernels), and the tuner's when it ran: those are the tiles the Tiles tab shows.",
    "scheduling": "The plan keeps the loop orders and annotations it had before this pass.",
    "fusion": "The plan keeps the kernels it had before this pass (one per op, or the fusions that stayed).",
}


_TIMES = re.compile(r"(\d+(?:\.\d+)?) -> (\d+(?:\.\d+)?) ([µu]s|ms|ns|s)\b")


def gains_nothing(entry: dict) -> bool:
    """An applied rule whose own "why" says the time stayed the same ("0.9 -> 0.9 us"):
    it is in the plan but did not make it faster, so it is not listed as fired."""
    times = _TIMES.findall(entry.get("why", ""))
    return bool(entry.get("applied")) and bool(times) and all(a == b for a, b, _ in times)


def rules_html(result) -> str:
    """Fired and skipped rules with reasons, rollbacks with reasons, tuning summary."""
    r = result.report
    def rule_rows(entries, status):
        return [[f"<code>{esc(e.get('rule', ''))}</code>", esc(e.get("pass", "")), status,
                 esc(", ".join(map(str, e.get("ops", [])))), explain_why(e.get("why", ""))] for e in entries]

    header = ["rule", "pass", "status", "ops", "why"]
    entries = r.get("rules", [])
    # Every applied rule is "fired", as res.summary() lists it; one whose own "why" shows
    # the same time before and after says so in its status (it is in the plan and the
    # generated code, but the cost model does not price what it changes).
    fired = [e for e in entries if e.get("applied")]
    no_gain = [e for e in fired if gains_nothing(e)]
    skipped = [e for e in entries if not e.get("applied")]
    rows = []
    for e in fired:
        status = (badge("fired · no modelled gain", MUTED, "in the plan and the generated code; the cost model "
                        "shows the same time before and after") if gains_nothing(e) else badge("fired", GOOD))
        rows.extend(rule_rows([e], status))
    out = [f"<h4>rules fired ({len(fired)})</h4>",
           table(header, rows, "autocomp-rules") if fired else note("no rule fired")]
    if no_gain:
        out.append(note(f"{len(no_gain)} of them fired with no modelled gain: the cost model does not price "
                        "what they change (an annotation such as unroll, or a change off the binding term); "
                        "they stay because they are legal and do not slow the program down."))
    if skipped:  # often many (every candidate interchange, every loop transformation tried, ...): folded, with reasons
        out.append(f'<details class="autocomp-skipped"><summary><b>rules skipped ({len(skipped)})</b> '
                   "and why</summary>" + table(header, rule_rows(skipped, badge("skipped", MUTED)), "autocomp-rules")
                   + "</details>")
    label = kernel_labeller(result)
    rb = [[esc(e.get("pass", "")), label(e.get("kernel", "")) if e.get("kernel") else "", badge("rolled back", BAD),
           explain_why(e.get("reason", "")) + (f"<br><i>{esc(ROLLBACK_KEEPS[e.get('pass')])}</i>"
                                               if e.get("pass") in ROLLBACK_KEEPS else "")]
          for e in r.get("rollbacks", [])]
    out.append("<h4>rollbacks</h4>")
    out.append(table(["pass", "kernel", "status", "reason"], rb, "autocomp-rollbacks") if rb
               else note("no rollbacks: every step was legal and equivalent"))
    t = r.get("tuning") or {}
    if t:
        out.append("<h4>tuning</h4>")
        extra = []
        if t.get("rejected_illegal") is not None:
            extra.append(f"{num(t['rejected_illegal'])} rejected as illegal")
        if t.get("interrupted"):
            extra.append("interrupted: best so far kept")
        if t.get("budget_exhausted"):
            extra.append("time budget used up")
        out.append(f"<p>{num(t.get('configs_evaluated', 0))} configurations in {seconds(t.get('seconds'))}"
                   + (f" ({esc(', '.join(extra))})" if extra else "") + "</p>")
    out.append(legend(["tiles_letters", "order@", "in_place", "moved", "none", "spill", "pe_util", "bw_util",
                       "occupancy", "parallel", "vectorize", "unroll"]))
    return '<div class="autocomp-rules-tab">' + "".join(out) + "</div>"


# --------------------------------------------------------------------------- code


def code_text(result, lang: str) -> tuple[str, bool]:
    """(generated code, True) or (why it is not available, False)."""
    try:
        return result.code(lang), True
    except (NotImplementedError, ImportError, AttributeError, ModuleNotFoundError) as err:
        return f"{lang} code generation is not available yet ({type(err).__name__}: {err})", False
    except Exception as err:  # codegen refusing a plan is information, not a crash of the view
        return f"{lang} code generation failed: {type(err).__name__}: {err}", False


def code_html(result, lang: str) -> str:
    text, ok = code_text(result, lang)
    if not ok:
        return f'<div class="autocomp-code-missing">{note(text)}</div>'
    return f'<pre class="autocomp-code" data-lang="{esc(lang)}">{html.escape(text)}</pre>'
