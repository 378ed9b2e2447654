"""The HTML content of each tab, as pure functions of a Result.

The live widget and the static HTML both call these, so a notebook opened without a
kernel (nbconvert, GitHub) shows the same tables as a live one.
"""
from __future__ import annotations

import html
import math

from .fmt import (BAD, GOOD, MUTED, badge, esc, flag, joules, nbytes, note, num, pct, ratio,
                  seconds, si, table)

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
             f"roofline {pct(r.get('roofline_fraction'))}",
             f"optimised {seconds((r.get('optimized') or {}).get('time_s'))}",
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


def _footprints(result, schedule) -> tuple[list[str], list[float], list[float]] | None:
    """(levels outer→inner, bytes the kernel's tiles take per level, level capacity)."""
    try:
        from ..accel.cost import kernel_model
        model = kernel_model(schedule.kernel, result.target)
        tiles, *_ = model.schedule_arrays(schedule)
        fp = model.capacity_footprints(tiles)[0]
        return list(result.target.tiling_levels), [float(x) for x in fp], [float(x) for x in model.capacity]
    except Exception:  # footprints are an extra; the tile table stands without them
        return None


def tiles_html(result) -> str:
    """Per kernel: loop × level tile sizes, then footprint and fill per level."""
    report_kernels = {k["name"]: k for k in result.report.get("kernels", [])}
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
        out.append(f"<h4>kernel {esc(kernel.name)} <small>ops {esc(', '.join(kernel.ops))}</small></h4>")
        out.append(table(header, rows, "autocomp-tiles"))
        fp = _footprints(result, schedule)
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
        head += "\n# " + ", ".join(f"{k}={v if not isinstance(v, tuple) else ','.join(v)}" for k, v in ann.items())
    return head + "\n" + text


def schedule_html(result) -> str:
    """Loop nests before (one naive nest per op) and after (fused, tiled), side by side."""
    before = "\n\n".join(_nest(s) for s in result.before.schedules)
    after = "\n\n".join(_nest(s) for s in result.after.schedules)
    return ('<div class="autocomp-pair">'
            f'<div><h4>before</h4><pre class="autocomp-nest-before">{html.escape(before)}</pre></div>'
            f'<div><h4>after</h4><pre class="autocomp-nest-after">{html.escape(after)}</pre></div></div>')


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


def _time_bars(kernels: list[dict], width: int = 420) -> str:
    """Horizontal bars: each kernel's share of the optimised time."""
    times = [(k["name"], (k.get("metrics") or {}).get("time_s") or 0.0) for k in kernels]
    total = sum(t for _, t in times)
    if not total:
        return ""
    row, label_w = 18, 120
    h = row * len(times) + 4
    out = [f'<svg class="autocomp-timebars" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
           'font-family="sans-serif" font-size="10">']
    for i, (name, t) in enumerate(times):
        w = (width - label_w - 70) * t / total
        y = 2 + i * row
        out.append(f'<text x="0" y="{y + 12}">{esc(name[:18])}</text>'
                   f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{row - 4}" fill="#5c6bc0"/>'
                   f'<text x="{label_w + w + 4:.1f}" y="{y + 12}">{esc(seconds(t))} ({t / total:.0%})</text>')
    out.append("</svg>")
    return "".join(out)


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
        rows.append([esc(label), esc(PLAN_NOTES.get(label, "")), seconds(b.get("time_s")), gain,
                     num(b.get("cycles")), joules(b.get("energy_j")),
                     ", ".join(f"{esc(k)} {nbytes(v)}" for k, v in by.items())])
    out = ["<h4>program</h4>", table(["plan", "what", "time", "optimised is", "cycles", "energy",
                                      "bytes moved per level"], rows, "autocomp-totals")]
    g = r.get("gain_breakdown")
    if g:
        out.append(note(f"gain over the library {ratio(r.get('speedup_vs_library'))} = fusion "
                        f"{ratio(g.get('fusion'))} × tiling {ratio(g.get('tiling'))} × scheduling "
                        f"{ratio(g.get('scheduling'))} (fusion: the fused kernels tuned as the library would; "
                        "tiling: the optimised tiles and orders on them; scheduling: the optimised annotations)."))
    monitor = _monitor(r)
    krows = [[f"<code>{esc(k['name'])}</code>", esc(", ".join(k.get("ops", [])))]
             + metric_cells(k.get("metrics") or {}, monitor) + [esc(k.get("bound", ""))]
             for k in r.get("kernels", [])]
    out.append("<h4>kernels</h4>")
    out.append(table(["kernel", "ops"] + METRIC_HEADER + ["bound by"], krows, "autocomp-kernels"))
    out.append(note(f"⚠ marks bw_util below {pct(monitor['bw_util'])} or occupancy below "
                    f"{pct(monitor['occupancy'])} (rules' monitor thresholds)."))
    out.append(_time_bars(r.get("kernels", [])))
    if roofline_svg:
        out.append(f"<h4>roofline (roofline fraction {pct(r.get('roofline_fraction'))})</h4>{roofline_svg}")
    return "".join(out)


# --------------------------------------------------------------------------- rules


def rules_html(result) -> str:
    """Fired and skipped rules with reasons, rollbacks with reasons, tuning summary."""
    r = result.report
    def rule_rows(entries):
        return [[f"<code>{esc(e.get('rule', ''))}</code>", esc(e.get("pass", "")),
                 badge("fired", GOOD) if e.get("applied") else badge("skipped", MUTED),
                 esc(", ".join(map(str, e.get("ops", [])))), esc(e.get("why", ""))] for e in entries]

    header = ["rule", "pass", "status", "ops", "why"]
    fired = [e for e in r.get("rules", []) if e.get("applied")]
    skipped = [e for e in r.get("rules", []) if not e.get("applied")]
    out = [f"<h4>rules fired ({len(fired)})</h4>",
           table(header, rule_rows(fired), "autocomp-rules") if fired else note("no rule fired")]
    if skipped:  # often many (every candidate interchange, skew, ...): folded, with reasons
        out.append(f'<details class="autocomp-skipped"><summary><b>rules skipped ({len(skipped)})</b> '
                   "and why</summary>" + table(header, rule_rows(skipped), "autocomp-rules") + "</details>")
    rb = [[esc(e.get("pass", "")), f"<code>{esc(e.get('kernel', ''))}</code>", badge("rolled back", BAD),
           esc(e.get("reason", ""))] for e in r.get("rollbacks", [])]
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
    return '<div class="autocomp-rules-tab">' + "".join(out) + "</div>"


# --------------------------------------------------------------------------- versions


def version_rows(result, kept: list[dict] = ()) -> list[dict]:
    """Rows {name, time_s, speedup, legal, detail} for the A/B table: the optimised plan,
    the tuner's top-K and versions the user kept from the Tune tab."""
    r = result.report
    base = (r.get("optimized") or {}).get("time_s")
    naive = (r.get("naive") or {}).get("time_s")
    rows = [{"name": "optimized", "time_s": base, "legal": True, "detail": "the pipeline's choice"}]
    for i, entry in enumerate((r.get("tuning") or {}).get("top") or []):
        if isinstance(entry, dict):
            name = str(entry.get("name") or f"top{i + 1}")
            rows.append({"name": name, "time_s": entry.get("time_s"), "legal": entry.get("legal", True),
                         "detail": variant_detail(entry.get("kernels") or {})})
    listed = {row["name"] for row in rows}
    for name in getattr(result, "versions", {}) or {}:
        if name not in listed and not any(k["name"] == name for k in kept):
            rows.append({"name": name, "time_s": None, "legal": True, "detail": "tuned variant"})
    rows.extend(kept)
    for row in rows:
        t = row.get("time_s")
        row["speedup"] = naive / t if t and naive else None
        row["vs_optimized"] = base / t if t and base else None
    return rows


def variant_detail(kernels: dict) -> str:
    """'C_D: i 128/32, j 128/128; vectorize j' from a tuning entry's {kernel: schedule}."""
    parts = []
    for name, sched in kernels.items():
        tiles = ", ".join(f"{loop} " + "/".join(str(v) for v in per.values())
                          for loop, per in (sched.get("tiles") or {}).items())
        vec = (sched.get("annotations") or {}).get("vectorize")
        order = sched.get("order")
        parts.append(f"{name}: {tiles}" + (f"; order {' '.join(order)}" if order else "")
                     + (f"; vectorize {vec}" if vec else ""))
    return " | ".join(parts)


def versions_html(rows: list[dict]) -> str:
    body = [[esc(v["name"]), seconds(v.get("time_s")), ratio(v.get("speedup")), ratio(v.get("vs_optimized")),
             badge("legal", GOOD) if v.get("legal", True) else badge("illegal", BAD), esc(v.get("detail", ""))]
            for v in rows]
    return table(["version", "time", "vs naive", "vs optimized", "legal", "what"], body, "autocomp-versions")


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
