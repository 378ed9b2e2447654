"""Views that keep a whole network readable: blocks for the Graph tab, the profiler table.

A network of 150+ ops drawn as one graph is a wall of boxes. Here the optimised plan's
kernels are cut into *blocks*: a block ends where a single tensor carries everything the
rest of the network needs (after a residual block's final ReLU, between encoder layers) —
a property of the dataflow, not of op names. Elementwise steps that follow such a point
and end at one too (the ReLU after a residual add) stay in the block; blocks shorter than
`MIN_BLOCK_OPS` are merged with the next. The Graph tab then lists the blocks, each folded (`<details>`) with
its before | after graphs inside, searchable by op, kernel or op kind; all graphs are drawn
by one `dot` run.

`profiler_html` is the per-layer profile: kernels sorted by modelled time, each with its
share of the total and the running total, and the same by op kind.
"""
from __future__ import annotations

from dataclasses import dataclass

from .fmt import MUTED, esc, note, pct, seconds, table
from .names import kernel_labeller, kernel_labels
from .glossary import th
from .roofline import kernel_point

LARGE_PLAN_OPS = 40   # above this many ops the Graph tab shows blocks instead of one graph
MIN_BLOCK_OPS = 4


@dataclass(frozen=True)
class Block:
    """Consecutive kernels of the optimised plan, and the naive plan's ops that match them."""

    index: int
    kernels: tuple[str, ...]
    ops: tuple[str, ...]          # ops of the optimised program
    before_ops: tuple[str, ...]   # ops of the original program

    @property
    def name(self) -> str:
        return self.ops[0] if len(self.ops) == 1 else f"{self.ops[0]} … {self.ops[-1]}"


def _cuts(groups: list[tuple[str, ...]], program) -> list[bool]:
    """After each group of ops: is exactly one produced tensor still needed later?"""
    position = {}
    for g, ops in enumerate(groups):
        for op in ops:
            position[op] = g
    last_use: dict[str, int] = {}
    for g, ops in enumerate(groups):
        for op in ops:
            for name in program.op(op).inputs:
                last_use[name] = max(last_use.get(name, -1), g)
    for name in program.outputs:
        last_use[name] = len(groups)
    out = []
    live: set[str] = set()
    for g, ops in enumerate(groups):
        live |= {program.op(op).output for op in ops}
        live = {t for t in live if last_use.get(t, -1) > g}
        out.append(len(live) == 1)
    return out


def plan_blocks(after, before=None, min_ops: int = MIN_BLOCK_OPS) -> list[Block]:
    """The optimised plan's kernels in blocks (see the module docstring); each block also
    names the original program's ops that end in it (an op the passes removed, such as a
    batchnorm folded into its conv, goes with the next op that survives)."""
    program = after.program
    groups = [tuple(k.ops) for k in after.kernels]
    if not groups:
        return []
    cuts = _cuts(groups, program)
    spans, start, size = [], 0, 0
    def tail(g: int) -> bool:  # an elementwise step that also ends at a cut (add → relu): keep it in the block
        return g < len(groups) and cuts[g] and all(program.op(op).op_class != "contraction" for op in groups[g])

    for g, ops in enumerate(groups):
        size += len(ops)
        if (cuts[g] and size >= min_ops and not tail(g + 1)) or g == len(groups) - 1:
            spans.append((start, g + 1))
            start, size = g + 1, 0
    if len(spans) > 1 and sum(len(o) for o in groups[spans[-1][0]:]) < min_ops:  # a short tail joins the last block
        spans[-2:] = [(spans[-2][0], spans[-1][1])]
    block_of_op = {}
    blocks = []
    for i, (a, b) in enumerate(spans):
        ops = tuple(op for g in groups[a:b] for op in g)
        block_of_op.update({op: i for op in ops})
        blocks.append([tuple(after.kernels[g].name for g in range(a, b)), ops, []])
    if before is not None:
        pending = []
        for op in before.program.ops:
            pending.append(op.name)
            if op.name in block_of_op:
                blocks[block_of_op[op.name]][2].extend(pending)
                pending = []
        blocks[-1][2].extend(pending)
    return [Block(i, k, o, tuple(b)) for i, (k, o, b) in enumerate(blocks)]


def _sub_plan(plan, ops: set[str]):
    """`plan` restricted to the kernels holding `ops` (for drawing one block)."""
    from ..ir.plan import Plan

    keep = [(k, s) for k, s in zip(plan.kernels, plan.schedules) if set(k.ops) & ops]
    return Plan(plan.program, tuple(k for k, _ in keep), tuple(s for _, s in keep), plan.label)


def _kernel_times(result) -> dict[str, float]:
    return {k["name"]: float((k.get("metrics") or {}).get("time_s") or 0.0) for k in result.report.get("kernels", [])}


def _kinds(program, ops) -> list[str]:
    return list(dict.fromkeys(program.op(op).kind for op in ops))


def block_search_text(result, block: Block) -> str:
    """What the layer search matches: op names, kernel names and op kinds, lower case."""
    kinds = _kinds(result.after.program, block.ops)
    return " ".join(block.ops + block.before_ops + block.kernels + tuple(kinds)).lower()


SEARCH_SCRIPT = (
    "var q=this.value.toLowerCase().trim(),root=this.closest('.autocomp-layers'),shown=0;"
    "root.querySelectorAll('details.autocomp-block').forEach(function(d){"
    "var hit=!q||d.dataset.search.indexOf(q)>=0;d.style.display=hit?'':'none';if(hit)shown++;"
    "if(q&&hit&&d.dataset.search.split(' ').indexOf(q)>=0)d.open=true;});"
    "root.querySelector('.autocomp-layer-count').textContent=shown+' of '+root.dataset.blocks+' blocks';")


def layers_html(result, blocks: list[Block], svgs: dict[tuple[int, str], str], query: str = "",
                search_box: bool = True) -> str:
    """The searchable block list: one folded <details> per block (kernels, ops, time and
    share in the summary; before | after graphs and the kernel table inside). `query`
    keeps only blocks whose search text contains it (the live widget's search box)."""
    times = _kernel_times(result)
    total = sum(times.values()) or 1.0
    program = result.after.program
    q = query.lower().strip()
    shown = [b for b in blocks if not q or q in block_search_text(result, b)]
    items = []
    for b in shown:
        t = sum(times.get(k, 0.0) for k in b.kernels)
        kinds = ", ".join(_kinds(program, b.ops))
        summary = (f"<summary><b>block {b.index + 1}</b> <code>{esc(b.name)}</code> · {len(b.ops)} ops in "
                   f"{len(b.kernels)} kernel{'s' if len(b.kernels) != 1 else ''} · {esc(kinds)} · "
                   f"{seconds(t)} ({pct(t / total)})</summary>")
        rows = [[f"<code>{esc(k.name)}</code>", esc(", ".join(k.ops)), seconds(times.get(k.name)),
                 pct(times.get(k.name, 0.0) / total)]
                for k in result.after.kernels if k.name in b.kernels]
        body = ('<div class="autocomp-pair">'
                f'<div class="autocomp-graph-before"><h4>before: {len(b.before_ops)} ops</h4>'
                f'{svgs.get((b.index, "before"), "")}</div>'
                f'<div class="autocomp-graph-after"><h4>after: {len(b.kernels)} kernels</h4>'
                f'{svgs.get((b.index, "after"), "")}</div></div>'
                + table(["kernel", "ops", th("time"), "share"], rows, "autocomp-block-kernels"))
        items.append(f'<details class="autocomp-block" data-block="{b.index + 1}" '
                     f'data-search="{esc(block_search_text(result, b))}"{" open" if q else ""}>{summary}{body}</details>')
    box = (f'<input type="search" class="autocomp-layer-search" placeholder="find a layer: op, kernel or kind '
           f'(conv2d, add, ...)" oninput="{esc(SEARCH_SCRIPT)}" style="width:340px"> ') if search_box else ""
    count = f'<span class="autocomp-layer-count" style="color:{MUTED}">{len(shown)} of {len(blocks)} blocks</span>'
    empty = note(f"no layer matches '{query}'") if not shown else ""
    return (f'<div class="autocomp-layers" data-blocks="{len(blocks)}">{box}{count}{empty}'
            + "".join(items) + "</div>")


def block_svgs(result, blocks: list[Block]) -> dict[tuple[int, str], str]:
    """{(block index, 'before' | 'after'): inline SVG (or DOT source without graphviz)}, all
    drawn by one `dot` run."""
    from .graph import dots_to_svgs, plan_dot

    keys, dots = [], []
    for b in blocks:
        for side, plan, ops in (("before", result.before, b.before_ops), ("after", result.after, b.ops)):
            keys.append((b.index, side))
            dots.append(plan_dot(_sub_plan(plan, set(ops)), result.report, params=False))
    return dict(zip(keys, dots_to_svgs(dots)))


def network_graph_html(result) -> tuple[str, list[Block], dict]:
    """(the Graph tab of a large plan, its blocks, their SVGs)."""
    blocks = plan_blocks(result.after, result.before)
    svgs = block_svgs(result, blocks)
    n_ops, n_before = len(result.after.program.ops), len(result.before.program.ops)
    head = note(f"{n_before} ops before, {len(result.after.kernels)} kernels ({n_ops} ops) after, in "
                f"{len(blocks)} blocks: a block ends where one tensor carries everything to the rest of the "
                "network. Click a block to see its graphs; type in the box to find a layer.")
    return head + layers_html(result, blocks, svgs), blocks, svgs


# --------------------------------------------------------------------------- profiler


def profiler_html(result, max_rows: int = 400) -> str:
    """Per-layer profile: kernels by modelled time (slowest first) with their share of the
    total and the running total, then the time by op kind."""
    kernels = result.report.get("kernels", [])
    times = _kernel_times(result)
    total = sum(times.values())
    if not kernels or not total:
        return ""
    program = result.after.program
    ranked = sorted(kernels, key=lambda k: -times[k["name"]])
    rows, running = [], 0.0
    label = kernel_labeller(result)
    for rank, k in enumerate(ranked[:max_rows], 1):
        t = times[k["name"]]
        running += t
        share = t / total
        bar = (f'<span class="autocomp-share-bar" style="display:inline-block;height:9px;width:{share * 120:.1f}px;'
               f'background:#5c6bc0;margin-right:4px"></span>')
        rows.append([str(rank), label(k["name"]), esc(", ".join(k.get("ops", []))),
                     esc(", ".join(_kinds(program, k.get("ops", [])))), seconds(t), bar + pct(share),
                     pct(running / total), esc(k.get("bound", ""))])
    by_kind: dict[str, list[float]] = {}
    for k in kernels:
        kind = "+".join(_kinds(program, k.get("ops", [])))
        entry = by_kind.setdefault(kind, [0, 0.0])
        entry[0] += 1
        entry[1] += times[k["name"]]
    kind_rows = [[esc(kind), str(n), seconds(t), pct(t / total)]
                 for kind, (n, t) in sorted(by_kind.items(), key=lambda kv: -kv[1][1])]
    more = note(f"… {len(ranked) - max_rows} faster kernels not listed") if len(ranked) > max_rows else ""
    return ('<div class="autocomp-profiler">'
            f"<h4>profile: {len(kernels)} kernels by time (total {seconds(total)})</h4>"
            '<div class="autocomp-scroll" style="max-height:420px;overflow-y:auto">'
            + table(["#", "kernel", "layers (ops)", "kind", th("time"), "share", "cumulative", th("bound by")],
                    rows, "autocomp-profile-table") + "</div>" + more
            + "<h4>time by op kind</h4>"
            + table(["kernel kind (its ops' kinds)", "kernels", th("time"), "share"], kind_rows, "autocomp-by-kind")
            + "</div>")


def kernel_roofline_points(result, labelled: int = 5) -> list[dict]:
    """One roofline point per kernel (its flop per DRAM byte and flop/s); the `labelled`
    slowest carry their name on the plot, the rest in their tooltip only."""
    times = _kernel_times(result)
    top = set(sorted(times, key=lambda k: -times[k])[:labelled])
    out = []
    short = kernel_labels(result)
    for k in result.report.get("kernels", []):
        p = kernel_point(short.get(k["name"], k["name"]), k.get("metrics") or {})
        if p:
            out.append(dict(p, kind="kernel", labelled=k["name"] in top))
    return out
