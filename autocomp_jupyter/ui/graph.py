"""The dataflow graph of a Plan as graphviz DOT and inline SVG.

Tensors supplied from outside are ellipses, ops are boxes coloured by op class, edges are
tensors. In a fused plan every kernel of more than one op is a cluster labelled with the
kernel name and the fusion rule(s) that built it (from the report's `rules` log); edges
inside a cluster are dashed: those intermediates stay on chip.
"""
from __future__ import annotations

import re
import shutil

from ..ir.plan import Plan

CLASS_COLOURS = {
    "elementwise": "#e3f2fd", "broadcast": "#e8f5e9", "injective": "#fff8e1",
    "reduction": "#fce4ec", "contraction": "#ede7f6",
}


def _q(text: str) -> str:
    """A DOT string; `\\n` in labels is DOT's line break, so backslashes pass through."""
    return '"' + str(text).replace('"', '\\"') + '"'


def fusion_rules_by_kernel(plan: Plan, report: dict | None) -> dict[str, list[str]]:
    """{kernel name: names of applied fusion rules whose ops lie in that kernel}."""
    out: dict[str, list[str]] = {}
    groups = plan.group_of()
    for entry in (report or {}).get("rules", []):
        if entry.get("pass") != "fusion" or not entry.get("applied"):
            continue
        kernels = {groups.get(op) for op in entry.get("ops", [])} - {None}
        for k in kernels:
            names = out.setdefault(k, [])
            if entry.get("rule") and entry["rule"] not in names:
                names.append(entry["rule"])
    return out


def plan_dot(plan: Plan, report: dict | None = None, title: str = "") -> str:
    """DOT source of `plan`'s graph with fused kernels boxed as clusters."""
    program = plan.program
    rules = fusion_rules_by_kernel(plan, report)
    lines = ["digraph autocomp {", "  rankdir=TB;",
             '  graph [fontname="Helvetica", fontsize=12, nodesep=0.3, ranksep=0.35];',
             '  node [fontname="Helvetica", fontsize=11];', '  edge [fontname="Helvetica", fontsize=11];']
    if title:
        lines.append(f"  label={_q(title)}; labelloc=t;")
    for t in program.inputs:
        shape = "x".join(map(str, t.shape))
        label = t.name + "\\n" + f"{t.dtype}[{shape}]"
        lines.append(f"  {_q('t:' + t.name)} [label={_q(label)}, shape=ellipse, "
                     f'style=filled, fillcolor="#f5f5f5", color="#9e9e9e"];')

    def op_node(op, indent: str) -> str:
        t = program.tensor(op.output)
        shape = "x".join(map(str, t.shape))
        label = f"{op.output} = {op.kind}\\n{t.dtype}[{shape}]"
        colour = CLASS_COLOURS.get(op.op_class, "#ffffff")
        return (f"{indent}{_q('op:' + op.name)} [label={_q(label)}, shape=box, style=\"rounded,filled\", "
                f"fillcolor={_q(colour)}, tooltip={_q(op.op_class)}];")

    internal: set[str] = set()
    for kernel in plan.kernels:
        ops = [program.op(name) for name in kernel.ops]
        if len(ops) > 1:
            fused_by = rules.get(kernel.name, [])
            label = f"kernel {kernel.name}" + (f"\\nfused by {', '.join(fused_by)}" if fused_by else "")
            lines.append(f"  subgraph {_q('cluster_' + kernel.name)} {{")
            lines.append(f"    label={_q(label)}; style=\"rounded,dashed\"; color=\"#5c6bc0\"; fontcolor=\"#283593\";")
            lines.extend(op_node(op, "    ") for op in ops)
            lines.append("  }")
            internal.update(kernel.internals)
        else:
            lines.extend(op_node(op, "  ") for op in ops)
    for op in program.ops:
        for name in dict.fromkeys(op.inputs):
            producer = program.producer(name)
            src = "op:" + producer.name if producer else "t:" + name
            style = ', style=dashed, color="#5c6bc0"' if name in internal else ""
            label = f"{name} (on chip)" if name in internal else ("" if producer is None else name)
            lines.append(f"  {_q(src)} -> {_q('op:' + op.name)} [label={_q(label)}{style}];")
    for name in program.outputs:
        lines.append(f"  {_q('out:' + name)} [label={_q(name)}, shape=plaintext];")
        if program.producer(name):
            lines.append(f"  {_q('op:' + name)} -> {_q('out:' + name)};")
    lines.append("}")
    return "\n".join(lines)


def have_dot() -> bool:
    return shutil.which("dot") is not None


def dot_to_svg(dot: str) -> str | None:
    """Inline SVG (no XML prologue) for DOT source, or None without graphviz's `dot`."""
    if not have_dot():
        return None
    try:
        import graphviz
        svg = graphviz.Source(dot).pipe(format="svg", encoding="utf-8")
    except Exception:  # a broken graphviz install must not hide the rest of the result
        return None
    svg = re.sub(r"^.*?(?=<svg)", "", svg, flags=re.S)
    return svg.replace("<svg ", '<svg class="autocomp-graph" ', 1)


def plan_svg_html(plan: Plan, report: dict | None = None, title: str = "") -> str:
    """The graph as inline SVG, or its DOT source in a <pre> if `dot` is missing."""
    import html

    dot = plan_dot(plan, report, title)
    svg = dot_to_svg(dot)
    if svg is not None:
        return svg
    return ('<p style="color:#6b6b6b">graphviz\'s <code>dot</code> is not installed '
            '(apt-get install graphviz); DOT source:</p><pre>' + html.escape(dot) + "</pre>")
