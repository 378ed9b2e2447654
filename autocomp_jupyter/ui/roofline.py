"""A roofline plot drawn as inline SVG (log-log), with no plotting library.

Attainable performance is min(peak, AI × DRAM bandwidth): a slope up to the ridge point,
then the flat compute roof. A dashed vertical line marks the compulsory intensity (each
input and output moved once), the bound `roofline_fraction` is measured against. Points are (arithmetic intensity, achieved flop/s), one per
plan (naive, textbook, library, optimised), one small dot per kernel of the optimised plan
(points with `kind: "kernel"`; only those marked `labelled` are named) and, in the Tune tab,
one for the variant being tried.
"""
from __future__ import annotations

import math

from .fmt import esc, si

POINT_COLOURS = {"naive": "#9e9e9e", "textbook": "#bcaaa4", "library": "#f57c00", "optimized": "#1b7f3b",
                 "variant": "#1565c0"}
KERNEL_COLOUR = "#7b1fa2"


def roofline_data(result) -> dict:
    """{"peak_flops", "dram_bw", "points": [{"label", "ai", "flops_per_s"}]} for a Result.

    Uses `report["roofline"]` when the pipeline provides it; otherwise derives the same
    from the target and the report's naive/library/optimized blocks.
    """
    report = result.report
    if report.get("roofline"):
        return report["roofline"]
    target = result.target
    flops = sum(k.get("metrics", {}).get("flops", 0) for k in report.get("kernels", [])) \
        or float(result.program.flops)
    points = []
    for label in ("naive", "textbook", "library", "optimized"):
        block = report.get(label) or {}
        dram = list((block.get("bytes") or {}).values())[-1:] or [0]
        time_s = block.get("time_s") or 0
        if time_s and dram[0]:
            points.append({"label": label, "ai": flops / dram[0], "flops_per_s": flops / time_s})
    dtype = result.program.tensors[0].dtype if result.program.tensors else "f32"
    return {"peak_flops": target.peak_flops(dtype), "dram_bw": target.dram_bandwidth, "points": points}


def kernel_point(label: str, metrics: dict) -> dict | None:
    """A kernel's roofline point: (flop per DRAM byte, flop/s) from its metrics."""
    flops, t, ai = metrics.get("flops"), metrics.get("time_s"), metrics.get("arithmetic_intensity")
    if not (flops and t and ai and math.isfinite(ai)):
        return None
    return {"label": label, "ai": ai, "flops_per_s": flops / t}


def _decades(lo: float, hi: float) -> tuple[int, int]:
    return math.floor(math.log10(lo)), math.ceil(math.log10(hi))


FONT_PX = 11  # readable at 100% zoom; label boxes below assume ~0.6 em per character


def _text_box(x: float, y: float, text: str, anchor: str = "start") -> tuple[float, float, float, float]:
    w = 0.6 * FONT_PX * len(text) + 2
    x0 = x - w if anchor == "end" else x - w / 2 if anchor == "middle" else x
    return (x0, y - FONT_PX, x0 + w, y + 2)


def _place_labels(anchors: list[tuple[float, float, str]], box: tuple[float, float, float, float],
                  reserved: list[tuple[float, float, float, float]] = ()) -> list[tuple]:
    """(x, y, text-anchor) for each label so that no two label boxes overlap: right of the
    point if there is room, else left, moved down (then up) a line at a time when taken."""
    left, top, right, bottom = box
    placed: list[tuple[float, float, float, float]] = list(reserved)
    out = []
    line = FONT_PX + 2
    for px, py, text in anchors:
        w = 0.6 * FONT_PX * len(text) + 2
        best = None
        for shift in (0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5):
            for side in (1, -1):
                x0 = px + 8 if side > 0 else px - 8 - w
                if x0 < left or x0 + w > right:
                    continue
                y = py + 4 + shift * line
                rect = (x0, y - FONT_PX, x0 + w, y + 2)
                if rect[1] < top or rect[3] > bottom:
                    continue
                if all(rect[2] <= r[0] or rect[0] >= r[2] or rect[3] <= r[1] or rect[1] >= r[3] for r in placed):
                    best = (rect, (px + 8 if side > 0 else px - 8, y, "start" if side > 0 else "end"))
                    break
            if best:
                break
        if best is None:  # no free spot: right of the point, as before
            best = ((px, py, px, py), (px + 8, py + 4, "start"))
        placed.append(best[0])
        out.append(best[1])
    return out


def roofline_svg(data: dict, extra_points: list[dict] = (), width: int = 460, height: int = 300,
                 title: str = "") -> str:
    """The plot as an <svg> string. `extra_points` are drawn on top (e.g. the variant);
    `title` is written in the plot's top-left corner (e.g. the kernel it shows)."""
    peak, bw = float(data["peak_flops"]), float(data["dram_bw"])
    points = [p for p in list(data.get("points", [])) + list(extra_points)
              if p.get("ai", 0) > 0 and p.get("flops_per_s", 0) > 0 and math.isfinite(p["ai"])]
    ridge = peak / bw
    compulsory = data.get("compulsory_ai")  # flops / bytes of inputs+outputs moved once
    ais = [p["ai"] for p in points] + [ridge] + ([compulsory] if compulsory else [])
    ys = [p["flops_per_s"] for p in points] + [peak]
    x0, x1 = _decades(min(ais) / 3, max(ais) * 3)
    y0, y1 = _decades(min(ys) / 3, peak * 2)
    x1, y1 = max(x1, x0 + 1), max(y1, y0 + 1)
    left, right, top, bottom = 58, 12, 14, 40
    pw, ph = width - left - right, height - top - bottom

    def X(ai: float) -> float:
        return left + (math.log10(ai) - x0) / (x1 - x0) * pw

    def Y(f: float) -> float:
        return top + ph - (math.log10(f) - y0) / (y1 - y0) * ph

    out = [f'<svg class="autocomp-roofline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="{FONT_PX}">',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fff" stroke="#999"/>']
    for e in range(x0, x1 + 1):
        x = X(10.0 ** e)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{top + ph + 15}" text-anchor="middle">1e{e}</text>')  # clear of the y labels
    for e in range(y0, y1 + 1):
        y = Y(10.0 ** e)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 4}" y="{y + 3:.1f}" text-anchor="end">{esc(si(10.0 ** e))}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 6}" text-anchor="middle">arithmetic intensity (flop/byte, DRAM)</text>')
    out.append(f'<text transform="translate(12,{top + ph / 2}) rotate(-90)" text-anchor="middle">flop/s</text>')
    # The roof: DRAM slope from the left edge to the ridge, then the peak.
    ax0, ax1 = 10.0 ** x0, 10.0 ** x1
    start = max(ax0, 10.0 ** y0 / bw)
    roof = [(start, start * bw), (ridge, peak), (ax1, peak)] if ridge < ax1 else [(start, start * bw), (ax1, ax1 * bw)]
    path = " ".join(f"{'M' if i == 0 else 'L'}{X(a):.1f},{Y(min(f, 10.0 ** y1)):.1f}" for i, (a, f) in enumerate(roof))
    out.append(f'<path class="autocomp-roof" d="{path}" fill="none" stroke="#333" stroke-width="2"/>')
    reserved = [_text_box(left + pw - 4, Y(peak) - 4, f'peak {si(peak, "flop/s")}', "end")]
    out.append(f'<text x="{left + pw - 4}" y="{Y(peak) - 4:.1f}" text-anchor="end">peak {esc(si(peak, "flop/s"))}</text>')
    mid = math.sqrt(start * min(ridge, ax1))
    out.append(f'<text x="{X(mid) + 6:.1f}" y="{Y(mid * bw) + 14:.1f}" fill="#555">DRAM {esc(si(bw, "B/s"))}</text>')
    reserved.append(_text_box(X(mid) + 6, Y(mid * bw) + 14, f'DRAM {si(bw, "B/s")}', "start"))  # points' labels avoid it
    if compulsory and compulsory > 0:
        x = X(compulsory)
        out.append(f'<line class="autocomp-compulsory" x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" '
                   'stroke="#888" stroke-dasharray="4,3"><title>compulsory arithmetic intensity: every input '
                   'and output moved once (the roofline_fraction bound)</title></line>')
        out.append(f'<text x="{x - 3:.1f}" y="{top + ph - 4}" text-anchor="end" fill="#777">compulsory AI</text>')
        reserved.append(_text_box(x - 3, top + ph - 4, "compulsory AI", "end"))
    if title:
        out.append(f'<text x="{left + 6}" y="{top + FONT_PX + 3}" font-weight="bold">{esc(title)}</text>')
    # Plan points first, kernel points (kind "kernel": small, named only when `labelled`) after.
    named = [p for p in points if p.get("kind") != "kernel" or p.get("labelled")]
    spots = dict(zip(map(id, named), _place_labels([(X(p["ai"]), Y(p["flops_per_s"]), p["label"]) for p in named],
                                                   (left, top + (FONT_PX + 6 if title else 0), left + pw, top + ph),
                                                   reserved)))
    for p in points:
        kernel = p.get("kind") == "kernel"
        colour = KERNEL_COLOUR if kernel else POINT_COLOURS.get(p["label"], "#6a1b9a")
        x, y = X(p["ai"]), Y(p["flops_per_s"])
        fraction = p["flops_per_s"] / min(peak, p["ai"] * bw)
        tip = (f'{"kernel " if kernel else ""}{p["label"]}: AI {p["ai"]:.3g} flop/B, '
               f'{si(p["flops_per_s"], "flop/s")} ({fraction:.0%} of roof)')
        text, opacity = "", ' fill-opacity="0.7"' if kernel else ""
        if id(p) in spots:
            lx, ly, anchor = spots[id(p)]
            text = f'<text x="{lx:.1f}" y="{ly:.1f}" text-anchor="{anchor}" fill="{colour}">{esc(p["label"])}</text>'
        out.append(f'<g class="autocomp-point{" autocomp-kernel-point" if kernel else ""}" '
                   f'data-label="{esc(p["label"])}"><title>{esc(tip)}</title>'
                   f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{3 if kernel else 5}" fill="{colour}" stroke="#000" '
                   f'stroke-width="0.5"{opacity}/>{text}</g>')
    out.append("</svg>")
    return "".join(out)
