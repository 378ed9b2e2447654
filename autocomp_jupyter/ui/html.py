"""Static HTML for a Result: every tab's content as one document, no widgets.

`static_html(result)` is what `--static`, `Result._repr_html_` and a notebook without a
live kernel show (nbconvert, GitHub): the same renderers as the widget's tabs, stacked as
sections in tab order, with graphs and the roofline as inline SVG.
"""
from __future__ import annotations

from .fmt import STYLE, esc, note
from .graph import plan_svg_html
from .network import LARGE_PLAN_OPS, kernel_roofline_points, network_graph_html
from .roofline import roofline_data, roofline_svg
from .compare import ab_html, default_pair, version_specs, versions_html
from .tables import code_html, profile_html, rules_html, schedule_html, summary_html, tiles_html

TABS = ("Graph", "Tiles", "Schedule", "Profile", "Rules", "Tune", "Code")


def graph_html(result) -> str:
    """Before | after graphs side by side; for a network (more than LARGE_PLAN_OPS ops),
    a searchable list of blocks, each folded with its before | after graphs inside."""
    if len(result.before.program.ops) > LARGE_PLAN_OPS:
        return network_graph_html(result)[0]

    def kernels(plan) -> str:
        n = len(plan.kernels)
        return f"{n} kernel" + ("" if n == 1 else "s")

    before = plan_svg_html(result.before, result.report, "")
    after = plan_svg_html(result.after, result.report, "")
    return ('<div class="autocomp-pair">'
            f'<div class="autocomp-graph-before"><h4>before: {kernels(result.before)}</h4>{before}</div>'
            f'<div class="autocomp-graph-after"><h4>after: {kernels(result.after)}</h4>{after}</div>'
            "</div>")


def profile_tab_html(result) -> str:
    try:
        svg = roofline_svg(roofline_data(result), kernel_roofline_points(result))
    except Exception as err:  # a report without roofline data still shows its tables
        svg = note(f"no roofline: {err}")
    return profile_html(result, svg)


def tune_static_html(result, kept: list[dict] = ()) -> str:
    """Without a kernel there are no sliders: the versions (with those `kept` from the Tune
    tab), the optimised plan against the fastest version that differs (A/B), and how to
    tune live."""
    specs = version_specs(result, list(kept))
    out = ["<h4>versions</h4>", versions_html(specs)]
    if len(specs) > 1:
        a, b = default_pair(specs)
        by_name = {s["name"]: s for s in specs}
        out.append(f"<h4>A/B: {esc(a)} vs {esc(b)}</h4>")
        try:
            out.append(ab_html(result, by_name[a], by_name[b]))
        except Exception as err:  # the comparison is an extra; the table stands without it
            out.append(note(f"no A/B comparison: {type(err).__name__}: {err}"))
    out.append(note("Run the cell in a live kernel for a control per schedule primitive, "
                    "and to compare any two versions."))
    return "".join(out)


def tab_contents(result, code: str = "pseudo", graph: str | None = None) -> dict[str, str]:
    """{tab title: HTML} in tab order; `graph` reuses a Graph tab already rendered."""
    return {
        "Graph": graph if graph is not None else graph_html(result),
        "Tiles": tiles_html(result),
        "Schedule": schedule_html(result),
        "Profile": profile_tab_html(result),
        "Rules": rules_html(result),
        "Tune": tune_static_html(result),
        "Code": code_html(result, code),
    }


def static_html(result, code: str = "pseudo", contents: dict[str, str] | None = None) -> str:
    """The whole result as one HTML fragment (sections in tab order); `contents` reuses
    tab HTML already rendered (the widget renders each graph once for both views)."""
    contents = contents if contents is not None else tab_contents(result, code)
    sections = "".join(
        f'<section class="autocomp-tab" data-tab="{esc(title)}"><h3>{esc(title)}</h3>{body}</section>'
        for title, body in contents.items())
    return f'{STYLE}<div class="autocomp-result">{summary_html(result)}{sections}</div>'
