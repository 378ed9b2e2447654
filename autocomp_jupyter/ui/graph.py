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
from .names import plan_labels

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


def plan_dot(plan: Plan, report: dict | None = None, title: str = "", params: bool = True) -> str:
    """DOT source of `plan`'s graph with fused kernels boxed as clusters; without
    `params`, weights are left out (each op's label counts them): a network's graph then
    shows its activations only."""
    program = plan.program
    rules = fusion_rules_by_kernel(plan, report)
    lines = ["digraph autocomp {", "  rankdir=TB;",
             '  graph [fontname="Helvetica", fontsize=12, nodesep=0.3, ranksep=0.35];',
             '  node [fontname="Helvetica", fontsize=11];', '  edge [fontname="Helvetica", fontsize=11];']
    if title:
        lines.append(f"  label={_q(title)}; labelloc=t;")
    # A plan may hold part of the program (one block of a network): tensors coming from
    # outside it are drawn like inputs, tensors read outside it like outputs.
    in_plan = {op for k in plan.kernels for op in k.ops}
    ops_in_plan = [op for op in program.ops if op.name in in_plan]
    read = dict.fromkeys(name for op in ops_in_plan for name in op.inputs)
    external = [name for name in read if program.producer(name) is None or program.producer(name).name not in in_plan]
    hidden = set() if params else {name for name in external if program.tensor(name).role == "param"}
    external = [name for name in external if name not in hidden]
    for name in external:
        t = program.tensor(name)
        shape = "x".join(map(str, t.shape))
        label = t.name + "\\n" + f"{t.dtype}[{shape}]"
        lines.append(f"  {_q('t:' + t.name)} [label={_q(label)}, shape=ellipse, "
                     f'style=filled, fillcolor="#f5f5f5", color="#9e9e9e"];')

    def op_node(op, indent: str) -> str:
        t = program.tensor(op.output)
        shape = "x".join(map(str, t.shape))
        n_params = sum(1 for name in dict.fromkeys(op.inputs) if name in hidden)
        label = f"{op.output} = {op.kind}\\n{t.dtype}[{shape}]" + (f" + {n_params} param{'s' if n_params > 1 else ''}" if n_params else "")
        colour = CLASS_COLOURS.get(op.op_class, "#ffffff")
        return (f"{indent}{_q('op:' + op.name)} [label={_q(label)}, shape=box, style=\"rounded,filled\", "
                f"fillcolor={_q(colour)}, tooltip={_q(op.op_class)}];")

    internal: set[str] = set()
    short = plan_labels(plan)  # an imported model's kernel names are long: the short name, the full on hover
    for kernel in plan.kernels:
        ops = [program.op(name) for name in kernel.ops]
        if len(ops) > 1:
            fused_by = rules.get(kernel.name, [])
            label = f"kernel {short.get(kernel.name, kernel.name)}" + (f"\\nfused by {', '.join(fused_by)}" if fused_by else "")
            lines.append(f"  subgraph {_q('cluster_' + kernel.name)} {{")
            lines.append(f"    label={_q(label)}; tooltip={_q('kernel ' + kernel.name)}; style=\"rounded,dashed\"; "
                         'color="#5c6bc0"; fontcolor="#283593";')
            lines.extend(op_node(op, "    ") for op in ops)
            lines.append("  }")
            internal.update(kernel.internals)
        else:
            lines.extend(op_node(op, "  ") for op in ops)
    external_set = set(external)
    for op in ops_in_plan:
        for name in dict.fromkeys(op.inputs):
            if name in hidden:
                continue
            src = "t:" + name if name in external_set else "op:" + program.producer(name).name
            style = ', style=dashed, color="#5c6bc0"' if name in internal else ""
            label = f"{name} (on chip)" if name in internal else ("" if name in external_set else name)
            lines.append(f"  {_q(src)} -> {_q('op:' + op.name)} [label={_q(label)}{style}];")
    read_outside = {name for op in program.ops if op.name not in in_plan for name in op.inputs}
    outputs = [op.output for op in ops_in_plan if op.output in program.outputs or op.output in read_outside]
    for name in dict.fromkeys(outputs):
        lines.append(f"  {_q('out:' + name)} [label={_q(name)}, shape=plaintext];")
        lines.append(f"  {_q('op:' + program.producer(name).name)} -> {_q('out:' + name)};")
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
    return _inline(svg)


def _inline(svg: str) -> str:
    """An SVG document as an inline element: no XML prologue, no graphviz comments."""
    svg = re.sub(r"^.*?(?=<svg)", "", svg, flags=re.S)
    svg = re.sub(r"<!--.*?-->\s*", "", svg, flags=re.S)
    return svg.replace("<svg ", '<svg class="autocomp-graph" ', 1)


def dots_to_svgs(dots: list[str]) -> list[str]:
    """Many graphs drawn by one `dot` run (one process, not one per graph): inline SVG for
    each, or its DOT source in a <pre> without graphviz."""
    import html
    import subprocess

    fallback = [('<pre class="autocomp-dot">' + html.escape(d) + "</pre>") for d in dots]
    if not dots or not have_dot():
        return fallback
    try:
        done = subprocess.run(["dot", "-Tsvg"], input="\n".join(dots), capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):  # a broken graphviz must not hide the rest of the result
        return fallback
    docs = [d for d in re.split(r"(?=<\?xml )", done.stdout) if "<svg" in d]
    if done.returncode != 0 or len(docs) != len(dots):
        return [dot_to_svg(d) or f for d, f in zip(dots, fallback)]
    return [_inline(d) for d in docs]


def plan_svg_html(plan: Plan, report: dict | None = None, title: str = "") -> str:
    """The graph as inline SVG, or its DOT source in a <pre> if `dot` is missing."""
    import html

    dot = plan_dot(plan, report, title)
    svg = dot_to_svg(dot)
    if svg is not None:  # at its natural size (readable), scrolling inside its box when larger
        return f'<div class="autocomp-graph-box">{svg}</div>'
    return ('<p style="color:#6b6b6b">graphviz\'s <code>dot</code> is not installed '
            '(apt-get install graphviz); DOT source:</p><pre>' + html.escape(dot) + "</pre>")
