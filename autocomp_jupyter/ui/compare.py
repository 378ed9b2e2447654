"""Versions of a result side by side: the Tune tab's versions table and its A/B comparison.

A *version* is the optimised plan, one of the tuner's top-K (`report["tuning"]["top"]`,
plans in `result.versions`) or a variant the user kept from the Tune tab. Each is described
the same way — `{name, time_s, legal, kernels: {kernel: {trace, tiles, order_by_level,
annotations}}, plan}`: each kernel's trace (the schedule) with the views of it the table
shows (`schedule_json`) — so the table and the comparison need no per-source formats.

`versions_html(specs)` lists them with every tile, order and annotation that differs from
the optimised plan highlighted, a version that is the same plan as an earlier one says so,
and times have as many digits as it takes to tell them apart. `default_pair(specs)` is the
A/B the Tune tab opens with: the optimised plan and the fastest version that differs.
`ab_html(result, a, b)` compares two: program time and which is faster by how much, in
words why (`why_faster`: the slower one's binding term, the term of it that changes most,
the utilisation that moved — from the cost model's `limits_s`), per kernel tiles / orders /
annotations / metrics with exactly what differs highlighted, both on the kernel's
roofline, and the diff of their pseudo-kernels.
"""
from __future__ import annotations

import difflib
import html
import math

from .fmt import BAD, GOOD, MUTED, badge, esc, note, pct, ratio, seconds, table
from .glossary import th
from .names import kernel_labeller
from .roofline import kernel_point, roofline_svg


# --------------------------------------------------------------------------- specs


def _kernel_spec(entry: dict) -> dict:
    return {"trace": list(entry.get("trace") or []),
            "tiles": {loop: dict(per) for loop, per in (entry.get("tiles") or {}).items()},
            "order_by_level": {lv: list(o) for lv, o in (entry.get("order_by_level") or {}).items()},
            "annotations": dict(entry.get("annotations") or {})}


def schedule_spec(schedule) -> dict:
    """The {trace, tiles, order_by_level, annotations} of a Schedule, as the report writes
    them (`trace.schedule_json`, the one JSON form of a schedule)."""
    from ..schedule import schedule_json

    spec = schedule_json(schedule)
    return {key: spec[key] for key in ("trace", "tiles", "order_by_level", "annotations")}


def version_specs(result, kept: list[dict] = ()) -> list[dict]:
    """Every version of `result`, the optimised plan first, then the tuner's, then `kept`."""
    r = result.report
    optimized = {k["name"]: _kernel_spec(k) for k in r.get("kernels", [])}
    specs = [{"name": "optimized", "time_s": (r.get("optimized") or {}).get("time_s"), "legal": True,
              "kernels": optimized, "plan": result.after, "source": "the pipeline's choice"}]
    plans = getattr(result, "versions", {}) or {}
    for i, entry in enumerate((r.get("tuning") or {}).get("top") or []):
        if not isinstance(entry, dict):
            continue
        name = str(entry.get("name") or f"top{i + 1}")
        kernels = {k: dict(optimized.get(k, {})) for k in optimized}
        kernels.update({k: _kernel_spec(v) for k, v in (entry.get("kernels") or {}).items()})
        specs.append({"name": name, "time_s": entry.get("time_s"), "legal": entry.get("legal", True),
                      "kernels": kernels, "plan": plans.get(name), "source": "tuner"})
    specs += baseline_specs(result, {s["name"] for s in specs})
    listed = {s["name"] for s in specs} | {k["name"] for k in kept}
    for name, plan in plans.items():
        if name not in listed:
            specs.append({"name": name, "time_s": None, "legal": True, "plan": plan, "source": "tuner",
                          "kernels": {k.name: schedule_spec(s) for k, s in zip(plan.kernels, plan.schedules)}})
    specs.extend(kept)
    naive, base = (r.get("naive") or {}).get("time_s"), (r.get("optimized") or {}).get("time_s")
    for s in specs:
        t = s.get("time_s")
        s["speedup"] = naive / t if t and naive else None
        s["vs_optimized"] = base / t if t and base else None
    return specs


def baseline_specs(result, taken=()) -> list[dict]:
    """naive (one kernel per op, untiled) and library (each op tuned alone), as versions:
    whole plans of other kernels than the optimised one, compared program to program."""
    r = result.report
    out = []
    for name, attr, source in (("naive", "before", "one kernel per op, untiled"),
                               ("library", "library", "each op tuned alone")):
        plan = getattr(result, attr, None)
        if plan is None or name in taken:
            continue
        out.append({"name": name, "time_s": (r.get(name) or {}).get("time_s"), "legal": True, "plan": plan,
                    "source": source, "baseline": True,
                    "kernels": {k.name: schedule_spec(s) for k, s in zip(plan.kernels, plan.schedules)}})
    return out


# --------------------------------------------------------------------------- formatting


def distinct_seconds(values: list) -> list[str]:
    """Times with the fewest significant digits (3 to 6) that keep different values apart:
    913 ns / 1.021 µs / 1.05 µs rather than three equal-looking numbers."""
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    distinct = len({float(f"{v:.9g}") for v in finite})
    for digits in range(3, 7):
        texts = [seconds(v, digits) for v in values]
        if len({seconds(v, digits) for v in finite}) >= distinct:
            return texts
    return [seconds(v, 6) for v in values]


def _mark(text: str, differs: bool) -> str:
    """Text, highlighted when it differs from the optimised plan."""
    if differs:
        return f'<mark class="autocomp-diff" title="differs from the optimized plan">{esc(text)}</mark>'
    return esc(text)


def _norm(value):
    """An annotation as compared: lists and tuples alike, '' / [] / None all 'none'."""
    if value in (None, "", [], ()):
        return None
    return tuple(value) if isinstance(value, (list, tuple)) else value


def same_plan(a: dict, b: dict) -> bool:
    """Do two version specs schedule every kernel alike? (Their traces in normal form are
    equal; specs without one compare tiles, orders and annotations.)"""
    ka, kb = a.get("kernels") or {}, b.get("kernels") or {}
    if set(ka) != set(kb):
        return False
    for name in ka:
        x, y = ka[name], kb[name]
        if x.get("trace") and y.get("trace"):
            if x["trace"] != y["trace"]:
                return False
            continue
        if (x.get("tiles") or {}) != (y.get("tiles") or {}) or \
                {lv: list(o) for lv, o in (x.get("order_by_level") or {}).items()} != \
                {lv: list(o) for lv, o in (y.get("order_by_level") or {}).items()}:
            return False
        xa, ya = x.get("annotations") or {}, y.get("annotations") or {}
        if any(_norm(xa.get(k)) != _norm(ya.get(k)) for k in set(xa) | set(ya)):
            return False
    return True


def default_pair(specs: list[dict], a: str | None = None) -> tuple[str, str]:
    """The A/B the Tune tab opens with: A (default the optimised plan) and the fastest
    version that schedules something differently from A — never A's own plan under another
    name (the tuner's v1 often *is* the optimised plan)."""
    by_name = {s["name"]: s for s in specs}
    first = by_name.get(a) or (specs[0] if specs else {"name": ""})
    others = [s for s in specs if s["name"] != first["name"] and not same_plan(s, first)]
    if not others:
        others = [s for s in specs if s["name"] != first["name"]]
    if not others:
        return first["name"], first["name"]
    timed = [s for s in others if s.get("time_s")]
    pick = min(timed, key=lambda s: s["time_s"]) if timed else others[0]
    return first["name"], pick["name"]


def _tiles_text(per_level: dict) -> str:
    return "/".join(str(v) for v in per_level.values())


def kernel_detail_html(spec: dict, base: dict | None) -> str:
    """'i 256/64 · j 256/128 · order VMEM i j k, vregs i k j · vectorize j' for one kernel,
    with exactly what differs from `base` (the kernel it is compared with) highlighted;
    `base` None highlights nothing."""
    if base is None:
        base = spec
    parts = []
    base_tiles = base.get("tiles") or {}
    tiles = " · ".join(f"<code>{esc(loop)}</code> " + _mark(_tiles_text(per), per != base_tiles.get(loop))
                       for loop, per in (spec.get("tiles") or {}).items())
    if tiles:
        parts.append(tiles)
    base_order = base.get("order_by_level") or {}
    orders = ", ".join(f"{esc(lv)} " + _mark(" ".join(o), list(o) != list(base_order.get(lv, [])))
                       for lv, o in (spec.get("order_by_level") or {}).items())
    if orders:
        parts.append("order " + orders)
    ann, base_ann = spec.get("annotations") or {}, base.get("annotations") or {}
    for key in sorted(set(ann) | set(base_ann)):
        value = ann.get(key)
        text = "(none)" if value in (None, "", []) else (" ".join(value) if isinstance(value, list) else str(value))
        parts.append(f"{esc(key)} " + _mark(text, _norm(value) != _norm(base_ann.get(key))))
    return "<br>".join(parts)


def versions_html(specs: list[dict]) -> str:
    """The versions table: one row per version, tiles/orders per kernel, differences marked."""
    base = next((s for s in specs if s["name"] == "optimized"), specs[0] if specs else {})
    times = distinct_seconds([s.get("time_s") for s in specs])
    rows = []
    for n, (s, t) in enumerate(zip(specs, times)):
        twin = next((o["name"] for o in specs[:n] if same_plan(o, s)), None)
        kernels = s.get("kernels") or {}
        detail = "<br>".join(
            (f"<b>{esc(k)}</b>: " if len(kernels) > 1 else "") + kernel_detail_html(v, (base.get("kernels") or {}).get(k))
            for k, v in kernels.items()) or esc(s.get("source", ""))
        if s.get("baseline"):      # other kernels than the optimised plan's: what it is, not a diff
            detail = esc(f"{s.get('source', '')} ({len(kernels)} kernel{'s' if len(kernels) != 1 else ''})")
        if twin:
            detail = f'<span class="autocomp-twin">the same plan as {esc(twin)}</span><br>' + detail
        rows.append([esc(s["name"]), t, ratio(s.get("speedup")), ratio(s.get("vs_optimized")),
                     badge("legal", GOOD) if s.get("legal", True) else badge("illegal", BAD), detail])
    header = ["version", th("time"), "vs naive", "vs optimized", "legal", th("tiles / order")]
    return ('<div class="autocomp-scroll">' + table(header, rows, "autocomp-versions") + "</div>"
            + note("Tile sizes read outer/inner level (e.g. VMEM/vregs); highlighted: differs from the "
                   "optimized plan."))


# --------------------------------------------------------------------------- A/B


def kernel_metrics(result, kernel: str, spec: dict, entry: dict | None = None) -> dict:
    """Cost-model metrics and legality of one kernel of a version, via `evaluate_variant`;
    `entry` (the report's kernel) answers for a spec equal to the optimised plan's."""
    if entry is not None and same_plan({"kernels": {kernel: spec}}, {"kernels": {kernel: _kernel_spec(entry)}}):
        return {"metrics": entry.get("metrics") or {}, "legal": True, "bound": entry.get("bound", ""),
                "limits_s": entry.get("limits_s") or {}}
    evaluate = getattr(result, "evaluate_variant", None)
    if not callable(evaluate):
        k = next((k for k in result.report.get("kernels", []) if k["name"] == kernel), {})
        return {"metrics": k.get("metrics") or {}, "legal": True}
    try:
        if spec.get("trace") is not None:        # the schedule itself
            ev = evaluate(kernel, schedule=spec["trace"], verify=False)
        else:
            order = {lv: tuple(o) for lv, o in (spec.get("order_by_level") or {}).items()} or None
            ev = evaluate(kernel, tiles=spec.get("tiles"), order=order)
    except Exception as err:  # a refused variant is a verdict
        return {"metrics": {}, "legal": False, "reason": f"{type(err).__name__}: {err}"}
    return ev


def faster_verdict(a: dict, b: dict) -> str:
    """'v1 is 1.118× faster than optimized (913.1 ns vs 1.021 µs)'."""
    ta, tb = a.get("time_s"), b.get("time_s")
    if not (ta and tb):
        return "no program time for one of the two versions"
    ta_s, tb_s = distinct_seconds([ta, tb])
    if ta == tb or abs(ta - tb) <= 1e-12 * max(ta, tb):
        return f"{a['name']} and {b['name']} take the same time ({ta_s})"
    fast, slow, tf, ts = (a, b, ta_s, tb_s) if ta < tb else (b, a, tb_s, ta_s)
    gain = max(ta, tb) / min(ta, tb)
    digits = 2 if gain >= 1.01 else 4
    return f"{fast['name']} is {gain:.{digits}f}× faster than {slow['name']} ({tf} vs {ts})"


WHY_METRICS = (("pe_util", "pe_util"), ("bw_util", "bw_util"), ("occupancy", "occupancy"),
               ("spill_ratio", "spill"))


def why_faster(a_name: str, ea: dict, b_name: str, eb: dict, differs: list[str] = ()) -> str:
    """Why one version of a kernel is faster, from the cost model's terms: the slower one's
    binding term and how much it drops in the faster one, the largest drop if another term,
    and the utilisation metrics that moved. `differs` names what the schedules change (said
    when the model prices none of it). '' without the terms."""
    ta, tb = (ea.get("metrics") or {}).get("time_s"), (eb.get("metrics") or {}).get("time_s")
    la, lb = ea.get("limits_s") or {}, eb.get("limits_s") or {}
    if not (ta and tb):
        return ""
    if math.isclose(ta, tb, rel_tol=1e-9):
        what = f" ({', '.join(differs)})" if differs else ""
        return (f"Same modelled time: what the two change{what} does not move any term the cost model "
                "prices for this kernel (it may still change the generated code).")
    (fast, lf, ef), (slow, ls, es) = sorted(((a_name, la, ea), (b_name, lb, eb)),
                                            key=lambda v: (v[2].get("metrics") or {})["time_s"])
    parts = []
    bound = es.get("bound") or ""
    main = bound.split(" + ")[0]
    # The terms the binding expression adds up: a level's time alone, or the busy chain
    # (compute units, serial transfers, cold start, drain; operand streaming when it leads).
    if main.endswith((" bandwidth", " latency")):
        terms = [main]
    else:
        terms = [k for k in ls if k.startswith("compute")] + ["serial transfers", "cold start", "drain"]
        terms += ["operand streaming"] if main == "operand streaming" else []
    drops = sorted(((ls.get(k, 0.0) - lf.get(k, 0.0), k) for k in terms), reverse=True)
    say = f"{slow} is bound by {bound}" if bound else f"{slow} is slower"
    if drops and drops[0][0] > 0:
        drop, k = drops[0]
        old, new = distinct_seconds([ls.get(k, 0.0), lf.get(k, 0.0)])
        share = drop / (ls.get(k) or 1.0)
        say += f"; of its terms, {k} changes most: {old} in {slow}, {new} in {fast} (−{share:.0%})"
    if ef.get("bound") and ef.get("bound") != bound:
        say += f"; {fast} is bound by {ef['bound']}"
    parts.append(say)
    ms, mf = es.get("metrics") or {}, ef.get("metrics") or {}
    moved = [f"{label} {pct(ms[key])} → {pct(mf[key])}" for key, label in WHY_METRICS
             if isinstance(ms.get(key), (int, float)) and isinstance(mf.get(key), (int, float))
             and abs(ms[key] - mf[key]) > 0.005]
    if moved:
        parts.append(f"from {slow} to {fast}: " + ", ".join(moved))
    return ("Why: " + "; ".join(parts) + ".") if parts else ""


def differences(sa: dict, sb: dict) -> list[str]:
    """What two kernel specs set differently: 'tiles of i', 'order at vregs', 'vectorize'."""
    out = []
    ta, tb = sa.get("tiles") or {}, sb.get("tiles") or {}
    out += [f"tiles of {loop}" for loop in sorted(set(ta) | set(tb)) if ta.get(loop) != tb.get(loop)]
    oa, ob = sa.get("order_by_level") or {}, sb.get("order_by_level") or {}
    out += [f"order at {lv}" for lv in list(dict.fromkeys(list(oa) + list(ob)))
            if list(oa.get(lv, [])) != list(ob.get(lv, []))]
    aa, ab = sa.get("annotations") or {}, sb.get("annotations") or {}
    out += [k for k in sorted(set(aa) | set(ab)) if _norm(aa.get(k)) != _norm(ab.get(k))]
    return out


def _code(result, spec: dict) -> str:
    plan = spec.get("plan")
    if plan is None:
        return ""
    try:
        from .. import codegen

        return codegen.generate(plan, result.target, "pseudo")
    except Exception as err:  # codegen refusing a plan is shown, not raised
        return f"(no pseudo-kernel: {type(err).__name__}: {err})"


def code_diff_html(result, a: dict, b: dict, max_lines: int = 200) -> str:
    ca, cb = _code(result, a), _code(result, b)
    if not ca or not cb:
        return note("no plan stored for one of the two versions: no code to compare")
    lines = list(difflib.unified_diff(ca.splitlines(), cb.splitlines(), a["name"], b["name"], lineterm="", n=2))
    if not lines:
        return note("the two versions generate the same pseudo-kernel")
    styled = []
    for line in lines[:max_lines]:
        colour = GOOD if line.startswith("+") else BAD if line.startswith("-") else MUTED if line.startswith("@") else ""
        styled.append(f'<span style="color:{colour}">{html.escape(line)}</span>' if colour else html.escape(line))
    more = f"\n… {len(lines) - max_lines} more lines" if len(lines) > max_lines else ""
    return f'<pre class="autocomp-code-diff">{chr(10).join(styled)}{more}</pre>'


def ab_html(result, a: dict, b: dict) -> str:
    """Two versions side by side; the verdict names the faster one."""
    from .tables import METRIC_HEADER, _monitor, metric_cells

    label = kernel_labeller(result)
    whys: list[str] = []
    out = [f'<p class="autocomp-ab-verdict"><b>{esc(faster_verdict(a, b))}</b></p>']
    monitor = _monitor(result.report)
    roof = result.report.get("roofline") or {}
    kernels = result.report.get("kernels") or []
    names = {k["name"] for k in kernels}
    other = [v for v in (a, b) if set(v.get("kernels") or {}) != names]
    if other:       # a baseline: other kernels than the optimised plan's, compared as programs
        out.append(note(f"{', '.join(v['name'] for v in other)} schedule{'s' if len(other) == 1 else ''} other kernels "
                        f"({', '.join(str(len(v.get('kernels') or {})) for v in other)}) than the optimized plan "
                        f"({len(names)}): compared as whole programs."))
        out.append("<h4>pseudo-kernel diff</h4>")
        out.append(code_diff_html(result, a, b))
        return '<div class="autocomp-ab">' + "".join(out) + "</div>"
    # Only kernels the two versions schedule differently are compared (a network's versions
    # differ in a few of its kernels); a kernel scheduled as in the optimised plan reads the
    # report's metrics instead of being re-scored.
    differ = [k for k in kernels
              if not same_plan({"kernels": {k["name"]: (a.get("kernels") or {}).get(k["name"], {})}},
                               {"kernels": {k["name"]: (b.get("kernels") or {}).get(k["name"], {})}})]
    if not differ:
        out.append(note(f"{a['name']} and {b['name']} are the same plan (every tile, order and annotation "
                        "alike): pick two versions that differ."))
    same = len(kernels) - len(differ)
    if same:
        out.append(note(f"{same} of {len(kernels)} kernel{'s' if len(kernels) != 1 else ''} scheduled the same "
                        "in both versions" + (": not repeated below." if differ else ".")))
    for kernel in differ:
        name = kernel["name"]
        sa, sb = (a.get("kernels") or {}).get(name, {}), (b.get("kernels") or {}).get(name, {})
        ea, eb = (kernel_metrics(result, name, s, kernel) for s in (sa, sb))
        cells = [metric_cells(e.get("metrics") or {}, monitor) for e in (ea, eb)]
        for i in range(len(METRIC_HEADER)):  # mark exactly the metrics that differ
            if cells[0][i] != cells[1][i]:
                cells[0][i], cells[1][i] = (f'<mark class="autocomp-diff">{c}</mark>' for c in (cells[0][i], cells[1][i]))
        rows = [[esc(v["name"]), kernel_detail_html(s, other)] + c
                for v, s, other, c in ((a, sa, sb, cells[0]), (b, sb, sa, cells[1]))]
        out.append(f"<h4>kernel {label(name)}</h4>")
        out.append('<div class="autocomp-scroll">'
                   + table(["version", th("tiles / order")] + [th(h) for h in METRIC_HEADER], rows, "autocomp-ab")
                   + "</div>")
        ta, tb = (ea.get("metrics") or {}).get("time_s"), (eb.get("metrics") or {}).get("time_s")
        if ta and tb:
            out.append(f"<p>{esc(faster_verdict({'name': a['name'], 'time_s': ta}, {'name': b['name'], 'time_s': tb}))}"
                       f" on kernel {label(name)}</p>")
        why = why_faster(a["name"], ea, b["name"], eb, differences(sa, sb))
        if why:
            out.append(f'<p class="autocomp-ab-why">{esc(why)}</p>')
            whys.append(why)
        if roof.get("peak_flops") and roof.get("dram_bw"):
            points = [kernel_point(f"{v['name']}", e.get("metrics") or {}) for v, e in ((a, ea), (b, eb))]
            points = [p for p in points if p]
            if points:
                out.append(roofline_svg({"peak_flops": roof["peak_flops"], "dram_bw": roof["dram_bw"],
                                         "points": points}, width=420, height=260,
                                        title=f"kernel {name}"))
    if len(whys) == 1:  # one kernel differs: its reason is the program's, said under the verdict
        out.insert(1, f'<p class="autocomp-ab-why-summary">{esc(whys[0])}</p>')
    out.append("<h4>pseudo-kernel diff</h4>")
    out.append(code_diff_html(result, a, b))
    return '<div class="autocomp-ab">' + "".join(out) + "</div>"
