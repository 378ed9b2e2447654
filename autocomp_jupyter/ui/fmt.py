"""Number formatting and small HTML helpers shared by every renderer.

Renderers build HTML strings; everything user-supplied (tensor names, rule reasons) goes
through `esc`. Numbers carry their unit so a table needs no legend.
"""
from __future__ import annotations

import html
import math
import re

GOOD = "#1b7f3b"
BAD = "#b00020"
MUTED = "#6b6b6b"


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def seconds(x, digits: int = 3) -> str:
    """1.23 ms, 45.6 µs, 2.1 s (`digits` significant digits)."""
    if not _finite(x):
        return "–"
    for scale, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if abs(x) >= scale:
            return f"{x / scale:.{digits}g} {unit}"
    return f"{x / 1e-9:.{digits}g} ns" if x else "0 s"


def nbytes(x) -> str:
    """Bytes with binary prefixes: 4 KiB, 1.5 MiB."""
    if not _finite(x):
        return "∞" if isinstance(x, float) and math.isinf(x) else "–"
    for scale, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.0f} B"


def joules(x) -> str:
    if not _finite(x):
        return "–"
    for scale, unit in ((1, "J"), (1e-3, "mJ"), (1e-6, "µJ"), (1e-9, "nJ")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x / 1e-12:.3g} pJ" if x else "0 J"


def si(x, unit: str = "") -> str:
    """1.2 G, 34 T (for flops, flop/s)."""
    if not _finite(x):
        return "–"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}".rstrip()


def pct(x) -> str:
    return f"{100 * x:.1f}%" if _finite(x) else "–"


def ratio(x) -> str:
    return f"{x:.2f}×" if _finite(x) else "–"


def num(x) -> str:
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:.3g}" if _finite(x) else "–"


_TAG = re.compile(r"<[^>]+>")
_NUMBER = re.compile(r"^(?:[-+]?[\d.,]+(?:e[-+]?\d+)?\s*(?:%|×|[A-Za-zµ/()]{1,12})?|–|∞)$")


def _td(content: str) -> str:
    """A cell; a number (with its unit) is right-aligned, everything else left."""
    text = html.unescape(_TAG.sub("", content)).replace("⚠", "").strip()
    return f'<td class="autocomp-num">{content}</td>' if _NUMBER.match(text) else f"<td>{content}</td>"


def table(header: list[str], rows: list[list[str]], cls: str = "", raw: bool = True) -> str:
    """An HTML table; cells are HTML already (escape before) unless raw=False."""
    cell = (lambda c: c) if raw else esc
    head = "".join(f"<th>{cell(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_td(cell(c)) for c in r) + "</tr>" for r in rows)
    # in its own scroll box: a wide table scrolls inside its tab, never widens the panel
    return (f'<div class="autocomp-scroll"><table class="autocomp-table {cls}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def badge(text: str, color: str, title: str = "") -> str:
    tip = f' title="{esc(title)}"' if title else ""
    return (f'<span class="autocomp-badge" style="color:#fff;background:{color};border-radius:3px;'
            f'padding:0 4px;font-size:85%"{tip}>{esc(text)}</span>')


def flag(text: str, title: str) -> str:
    """A threshold warning next to a number."""
    return f'<span class="autocomp-flag" style="color:{BAD}" title="{esc(title)}">⚠ {esc(text)}</span>'


def note(text: str) -> str:
    return f'<p class="autocomp-note" style="color:{MUTED}">{esc(text)}</p>'


MONO = "var(--jp-code-font-family,ui-monospace,SFMono-Regular,Menlo,Consolas,'DejaVu Sans Mono',monospace)"

# Text columns read left-aligned; numbers (class autocomp-num: time, ratios, sizes) right-aligned.
# Code and loop nests are monospace everywhere (nbconvert's page font is proportional).
STYLE = """<style>
.autocomp-result{font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:13px;max-width:100%;min-width:0;box-sizing:border-box}
.autocomp-result .widget-html,.autocomp-result .widget-html-content,.autocomp-result .widget-box,.autocomp-result .widget-tab-contents{min-width:0;max-width:100%}
.autocomp-result .widget-html-content{overflow-x:auto}
.autocomp-result p,.autocomp-result .autocomp-note{white-space:normal;overflow-wrap:anywhere;max-width:100%}
.autocomp-result .autocomp-table.autocomp-kernels td:nth-child(2),.autocomp-result .autocomp-table.autocomp-profile-table td:nth-child(3){white-space:normal;min-width:8em;overflow-wrap:anywhere}
.autocomp-result .autocomp-table.autocomp-totals td:nth-child(2),.autocomp-result .autocomp-table.autocomp-totals td:last-child{white-space:normal;min-width:9em}
.autocomp-result table.autocomp-table{border-collapse:collapse;margin:4px 0 10px 0}
.autocomp-result .autocomp-table th,.autocomp-result .autocomp-table td{border:1px solid #ddd;padding:2px 8px;text-align:left;vertical-align:top;white-space:nowrap}
.autocomp-result .autocomp-table td.autocomp-num{text-align:right;font-variant-numeric:tabular-nums}
.autocomp-result .autocomp-table.autocomp-rules td:last-child,.autocomp-result .autocomp-table.autocomp-rollbacks td:last-child,.autocomp-result .autocomp-table.autocomp-versions td:last-child,.autocomp-result .autocomp-table.autocomp-ab td:nth-child(2){white-space:normal;min-width:14em}
.autocomp-table th{background:#f3f3f3}
.autocomp-scroll{max-width:100%;overflow-x:auto}
.autocomp-pair{display:flex;gap:16px;flex-wrap:wrap;align-items:flex-start}
.autocomp-pair>div{flex:1 1 45%;min-width:280px;max-width:100%;overflow:auto}
.autocomp-graph-box{overflow:auto;max-height:720px;max-width:100%}
.autocomp-result svg.autocomp-graph{max-width:none;height:auto}
.autocomp-result pre,.autocomp-result code{font-family:MONO_FONT}
.autocomp-result pre{background:#f7f7f7;padding:6px;overflow:auto;font-size:12px;text-align:left;white-space:pre;max-width:100%;box-sizing:border-box}
.autocomp-result pre.autocomp-code{white-space:pre-wrap;overflow-wrap:anywhere}
.autocomp-result h4{margin:10px 0 4px 0}
.autocomp-term{text-decoration:underline dotted;cursor:help}
.autocomp-result mark.autocomp-diff{background:#fff3b0;padding:0 2px}
.autocomp-legend dt{font-weight:bold;float:left;clear:left;width:9em}
.autocomp-legend dd{margin-left:9.5em;overflow-wrap:anywhere;min-width:0}
.autocomp-result svg text{font-size:11px}
</style>""".replace("MONO_FONT", MONO)
