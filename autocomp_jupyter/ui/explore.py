"""The Explore tab: a design-space sweep (dse.Exploration) as a scatter and a table.

    explore_svg(points, pareto) -> str          # time against energy, area as size, the front joined
    explore_table_html(exploration, sort="time_s") -> str
    explore_static_html(exploration) -> str     # what a reopened notebook shows (no kernel)
    ExploreProgress                             # the bar and the scatter growing as designs finish
    ExploreView(exploration)                    # live: sort the table, click a design to open its report

Every design is a circle at (time, energy) whose area follows the design's silicon area;
designs on the Pareto front (no other beats them on time, energy and area at once) are
green and joined in time order; hovering a circle shows its parameters and numbers. Invalid
designs are listed in the table with their reason and not drawn.
"""
from __future__ import annotations

import functools
import math
from typing import Mapping, Sequence

from .fmt import BAD, GOOD, MUTED, STYLE, esc, joules, note, seconds, table

SORT_KEYS = {"time": "time_s", "energy": "energy_j", "area": "area_mm2", "EDP": "edp"}


def _label(point: Mapping) -> str:
    return ", ".join(f"{k}={v}" for k, v in point["params"].items())


def _axis(values: Sequence[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0
    # times, energies and areas are never negative: the axis does not pad below 0
    return (max(lo - pad, 0.0) if lo >= 0 else lo - pad), hi + pad


def explore_svg(points: Sequence[Mapping], pareto: Sequence[int], width: int = 520, height: int = 320,
                selected: int | None = None) -> str:
    """The scatter as an <svg> string (linear axes: a sweep's designs often differ by percents)."""
    drawn = [(i, p) for i, p in enumerate(points) if p.get("valid")]
    if not drawn:
        return note("no valid design to plot yet")
    left, right, top, bottom = 70, 16, 14, 42
    pw, ph = width - left - right, height - top - bottom
    x0, x1 = _axis([p["time_s"] for _, p in drawn])
    y0, y1 = _axis([p["energy_j"] for _, p in drawn])
    areas = [p["area_mm2"] for _, p in drawn]
    a_max = max(areas) or 1.0

    def X(t):
        return left + (t - x0) / (x1 - x0) * pw

    def Y(e):
        return top + ph - (e - y0) / (y1 - y0) * ph

    # as wide as its pane up to `width` (beside an open report the pane is narrower)
    out = [f'<svg class="autocomp-explore" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'style="width:100%;max-width:{width}px;height:auto" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fff" stroke="#999"/>']
    for k in range(5):
        t, e = x0 + (x1 - x0) * k / 4, y0 + (y1 - y0) * k / 4
        out.append(f'<text x="{X(t):.1f}" y="{top + ph + 15}" text-anchor="middle">{esc(seconds(t))}</text>')
        out.append(f'<text x="{left - 4}" y="{Y(e) + 3:.1f}" text-anchor="end">{esc(joules(e))}</text>')
    out.append(f'<text x="{left + pw / 2:.0f}" y="{height - 6}" text-anchor="middle">time (circle size: area)</text>')
    out.append(f'<text x="12" y="{top + ph / 2:.0f}" transform="rotate(-90 12 {top + ph / 2:.0f})" '
               f'text-anchor="middle">energy</text>')
    front = sorted((i for i in pareto if points[i].get("valid")), key=lambda i: points[i]["time_s"])
    if len(front) > 1:
        path = " ".join(f"{X(points[i]['time_s']):.1f},{Y(points[i]['energy_j']):.1f}" for i in front)
        out.append(f'<polyline class="autocomp-pareto" points="{path}" fill="none" stroke="{GOOD}" stroke-width="1.5"/>')
    on_front = set(front)
    for i, p in sorted(drawn, key=lambda ip: -ip[1]["area_mm2"]):  # small circles on top
        r = 4 + 10 * math.sqrt(p["area_mm2"] / a_max)
        color = GOOD if i in on_front else (BAD if not p.get("verified") else MUTED)
        ring = ' stroke="#000" stroke-width="2"' if i == selected else ' stroke="#fff"'
        tip = (f"#{i} {_label(p)}\ntime {seconds(p['time_s'])}, energy {joules(p['energy_j'])}, "
               f"area {p['area_mm2']:.3g} mm², {p.get('bound', '')}" + ("" if p.get("verified") else ", NOT verified"))
        out.append(f'<circle data-point="{i}" cx="{X(p["time_s"]):.1f}" cy="{Y(p["energy_j"]):.1f}" r="{r:.1f}" '
                   f'fill="{color}" fill-opacity="0.6"{ring}><title>{esc(tip)}</title></circle>')
        out.append(f'<text x="{X(p["time_s"]):.1f}" y="{Y(p["energy_j"]) + 3:.1f}" text-anchor="middle" '
                   f'font-size="9" pointer-events="none">{i}</text>')   # a click on it is the circle's
    out.append("</svg>")
    return "".join(out)


def explore_table_html(exploration, sort: str = "time_s") -> str:
    """One row per design, valid ones sorted by `sort` (time_s, energy_j, area_mm2, edp), invalid last."""
    paths = exploration.paths
    front = set(exploration.pareto)
    order = sorted(range(len(exploration.points)),
                   key=lambda i: (not exploration.points[i].get("valid"), exploration.points[i].get(sort) or 0.0, i))
    rows = []
    for i in order:
        p = exploration.points[i]
        params = [esc(p["params"][k]) for k in paths]
        if not p.get("valid"):
            rows.append([str(i), *params, "invalid", "", "", "", "", "", "", esc(p.get("reason", "").splitlines()[0])])
            continue
        rows.append([str(i), *params, esc(seconds(p["time_s"])), esc(joules(p["energy_j"])), f"{p['area_mm2']:.3g} mm²",
                     f"{p['edp']:.3g} J·s", f"{p['limit_fraction']:.2f}" if p.get("limit_fraction") is not None else "–",
                     "✓" if p["verified"] else f'<span style="color:{BAD}">✗</span>', "★" if i in front else "",
                     esc(p.get("bound", ""))])
    header = ["#", *paths, "time", "energy", "area", "EDP", "limit", "verified", "Pareto", "bound"]
    return table(header, rows, "autocomp-explore-table")


def _summary(exploration) -> str:
    valid = sum(1 for p in exploration.points if p.get("valid"))
    return (f"<p><b>{len(exploration.points)} designs</b> of <code>{esc(exploration.target)}</code> "
            f"({valid} valid, {len(exploration.pareto)} on the Pareto front), {exploration.seconds:.1f} s</p>")


def explore_static_html(exploration) -> str:
    return (f'{STYLE}<div class="autocomp-result"><section class="autocomp-tab" data-tab="Explore"><h3>Explore</h3>'
            f"{_summary(exploration)}{explore_svg(exploration.points, exploration.pareto)}"
            f"{explore_table_html(exploration)}"
            f"{note('Run the cell in a live kernel to open a design’s full report.')}</section></div>")


class ExploreProgress:
    """`explore(progress=...)`: a bar and the designs finished so far, updated in one output
    (at most every `min_interval_s`); `show(obj)` then puts the result in its place."""

    def __init__(self, min_interval_s: float = 0.5):
        self.min_interval_s = min_interval_s
        self.points: list[dict] = []
        self._handle = None
        self._last = 0.0

    def __call__(self, done: int, total: int, point: dict) -> None:
        import time

        from IPython.display import HTML, display

        self.points.append(point)
        now = time.monotonic()
        if self._handle is not None and done < total and now - self._last < self.min_interval_s:
            return
        self._last = now
        html = (f'<div><progress value="{done}" max="{total}"></progress> {done}/{total} designs</div>'
                + explore_svg(self.points, ()))  # the front is drawn once every design is in
        if self._handle is None:
            self._handle = display(HTML(html), display_id=True)
        else:
            self._handle.update(HTML(html))

    def show(self, obj, raw: bool = False) -> None:
        from IPython.display import display

        if self._handle is not None:
            handle, self._handle = self._handle, None
            handle.update(obj, raw=raw)
        else:
            display(obj, raw=raw)


# The scatter's browser side (an anywidget module): draw the SVG the kernel sends and, on a
# click on a design's circle, send its index back. ipywidgets' HTML runs no script, so a click
# on an SVG drawn there could not reach the kernel.
_SCATTER_ESM = """
function render({ model, el }) {
  // marks the live scatter apart from the progress bar's static one, which takes no clicks
  el.classList.add("autocomp-explore-live");
  const draw = () => {
    el.innerHTML = model.get("svg");
    for (const circle of el.querySelectorAll("circle[data-point]")) {
      circle.style.cursor = "pointer";
      circle.addEventListener("click", () => {
        model.set("picked", Number(circle.dataset.point));
        model.save_changes();
      });
    }
  };
  draw();
  model.on("change:svg", draw);
}
export default { render };
"""


@functools.cache
def _scatter_class():
    import anywidget
    import traitlets

    class ExploreScatter(anywidget.AnyWidget):
        _esm = _SCATTER_ESM
        svg = traitlets.Unicode("").tag(sync=True)
        picked = traitlets.Int(-1).tag(sync=True)

    return ExploreScatter


def scatter_widget(svg: str):
    """The live scatter: an anywidget holding `svg`, whose `picked` trait is the index of the
    design last clicked (-1: none)."""
    return _scatter_class()(svg=svg)


class ExploreView:
    """The live Explore tab: the scatter and the sortable table on the left, a design's full
    report (every tab of `ui.view`) on the right once it is clicked in the scatter or picked
    from the menu under the table."""

    def __init__(self, exploration):
        import ipywidgets as W

        self.exploration = exploration
        self.plot = scatter_widget(explore_svg(exploration.points, exploration.pareto))
        self.sort = W.ToggleButtons(options=list(SORT_KEYS), description="sort by")
        self.table = W.HTML(explore_table_html(exploration))
        valid = [i for i, p in enumerate(exploration.points) if p.get("valid")]
        self.pick = W.Dropdown(options=[("—", None)] + [(f"#{i} {_label(exploration.points[i])}", i) for i in valid],
                               description="open design")
        self.report = W.VBox([])
        self.sort.observe(lambda change: self._sorted(change["new"]), names="value")
        self.pick.observe(lambda change: self.open(change["new"]), names="value")
        # a click on a circle picks that design, as the menu below does (the menu follows)
        self.plot.observe(lambda change: self._clicked(change["new"]), names="picked")
        left = W.VBox([W.HTML(STYLE + _summary(exploration)), self.plot, self.sort, self.table, self.pick],
                      layout=W.Layout(min_width="0", flex="1 1 50%", overflow="auto"))
        self.widget = W.HBox([left, self.report], layout=W.Layout(width="100%"))
        self.widget.add_class("autocomp-result")

    def _clicked(self, i: int) -> None:
        if i >= 0 and self.exploration.points[i].get("valid") and self.pick.value != i:
            self.pick.value = i         # opens it (the menu's observer)

    def _sorted(self, key: str) -> None:
        self.table.value = explore_table_html(self.exploration, SORT_KEYS[key])

    def open(self, i: int | None) -> None:
        """Show design i's full report beside the plot (None closes it)."""
        import ipywidgets as W

        from . import view

        if i is None:
            self.report.children = ()
            self.plot.picked = -1
            return
        self.plot.picked = i
        self.plot.svg = explore_svg(self.exploration.points, self.exploration.pareto, selected=i)
        self.report.children = (W.HTML(f"<p>optimising design #{i}…</p>"),)
        result = self.exploration.result(i)
        shown = view(result)
        self.report.children = (W.HTML(f"<h4>design #{i}: {esc(_label(self.exploration.points[i]))}</h4>"),
                                shown.widget if hasattr(shown, "widget") else W.HTML(shown.data))

    def _repr_mimebundle_(self, **kwargs):
        """The widget for a live frontend (as ResultView decides), and the static tab always:
        what a reopened notebook or nbconvert shows."""
        from .live import WIDGET_VIEW_MIME, widget_view_wanted

        bundle = self.widget._repr_mimebundle_(**kwargs)
        data = dict(bundle[0] if isinstance(bundle, tuple) else bundle)
        if not widget_view_wanted():
            data.pop(WIDGET_VIEW_MIME, None)
        data["text/html"] = explore_static_html(self.exploration)
        data["text/plain"] = f"<autocomp explore: {len(self.exploration.points)} designs of {self.exploration.target}>"
        return data
