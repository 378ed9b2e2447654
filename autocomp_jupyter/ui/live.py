"""The live view: one ipywidgets Tab per result, and the Tune tab's hand-tuning controls.

Tabs (docs/guide/notebook.md): Graph, Tiles, Schedule, Profile, Rules, Tune, Code. All but Tune and Code
are the static renderers' HTML. Tune is the schedule playground of tune_panel.py: a control
for every primitive's decisions, each move scored at once and checked in the background;
"keep as version" adds the variant to `result.versions`; the A/B pickers compare any two
versions side by side (compare.py).

Output format: the view's MIME bundle carries the standard ipywidgets view type
`application/vnd.jupyter.widget-view+json` (so Notebook 7, VS Code and any frontend with a
widget manager show the live sliders), `application/vnd.autocomp.view+json` (the same
`{model_id, version_major, version_minor}` plus `kept`: the versions kept from the Tune
tab), `text/html` (every tab's content as static HTML, kept versions included) and
`text/plain`. In JupyterLab the labextension (labextension/src/view.ts) renders the autocomp
type ahead of the widget type: the live widget while its model exists, else the static
HTML under a one-line "snapshot" banner — never "model not found" — and it saves `kept` in
the cell's metadata and hands it back to the kernel when the cell runs again
(`restore_kept`). The widget type is left out for a headless run (nbclient, `nbconvert
--execute`: its execute requests carry no `cellId`), whose stored widget state would
otherwise win over the static HTML in the export; `AUTOCOMP_WIDGET_VIEW=1|0` forces it.
Keeping a version updates the output in place (its display id), so the saved notebook holds it.
"""
from __future__ import annotations

import os
import weakref

import ipywidgets as W

from .fmt import STYLE
from .html import TABS, static_html, tab_contents, tune_static_html
from .network import LARGE_PLAN_OPS, layers_html, network_graph_html
from .tables import code_html
from .tune_panel import TunePanel

VIEW_MIME = "application/vnd.autocomp.view+json"
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"


def widget_view_wanted() -> bool:
    """Whether to offer the ipywidgets view type: yes for an interactive frontend (its
    execute requests carry a `cellId`: JupyterLab, Notebook 7, VS Code), no for a headless
    runner; AUTOCOMP_WIDGET_VIEW=1|0 decides instead."""
    forced = os.environ.get("AUTOCOMP_WIDGET_VIEW", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    try:
        from IPython import get_ipython

        kernel = getattr(get_ipython(), "kernel", None)
        parent = kernel.get_parent() if kernel is not None else {}
    except Exception:  # no kernel, or one without parent headers: no live frontend to offer it to
        return False
    return "cellId" in ((parent or {}).get("metadata") or {})


class LayerSearch:
    """The Graph tab of a network: its blocks, folded, and a search box that keeps the
    blocks holding a matching op, kernel or op kind (and opens them)."""

    def __init__(self, result):
        self.result = result
        self.static, self.blocks, self.svgs = network_graph_html(result)
        self.search = W.Text(placeholder="find a layer: op, kernel or kind (conv2d, add, ...)",
                             continuous_update=True, layout=W.Layout(width="360px"))
        self.list = W.HTML(layers_html(result, self.blocks, self.svgs, search_box=False))
        self.search.observe(lambda ch: self.find(ch["new"]), names="value")
        head = self.static.split('<div class="autocomp-layers"', 1)[0]
        self.box = W.VBox([W.HTML(head), self.search, self.list])

    def find(self, query: str) -> str:
        self.list.value = layers_html(self.result, self.blocks, self.svgs, query, search_box=False)
        return self.list.value


class CodePanel:
    def __init__(self, result, lang: str = "pseudo"):
        self.result = result
        self.picker = W.ToggleButtons(options=["pseudo", "c"], value=lang if lang in ("pseudo", "c") else "pseudo")
        self.output = W.HTML(code_html(result, self.picker.value))
        self.picker.observe(lambda ch: setattr(self.output, "value", code_html(result, ch["new"])), names="value")
        self.box = W.VBox([self.picker, self.output])


class ResultView:
    """The widget for one result: a summary line over the seven tabs."""

    def __init__(self, result, code: str = "pseudo", first_tab: str = "Graph"):
        from .tables import summary_html

        self.result = result
        self.code_lang = code
        self.layers = LayerSearch(result) if len(result.before.program.ops) > LARGE_PLAN_OPS else None
        self.contents = tab_contents(result, code, graph=self.layers.static if self.layers else None)
        self.tune = TunePanel(result)
        self.code = CodePanel(result, code)
        children = []
        for title in TABS:
            if title == "Tune":
                children.append(self.tune.box)
            elif title == "Code":
                children.append(self.code.box)
            elif title == "Graph" and self.layers is not None:
                children.append(self.layers.box)
            else:
                children.append(W.HTML(self.contents[title]))
        self.tabs = W.Tab(children=children, titles=list(TABS))
        self.tabs.selected_index = TABS.index(first_tab) if first_tab in TABS else 0
        self.summary = W.HTML(STYLE + summary_html(result))  # the tables' CSS, once per view
        self.widget = W.VBox([self.summary, self.tabs], layout=W.Layout(width="100%"))
        self.widget.add_class("autocomp-result")
        self.display_id: str | None = None
        self._widget_view: bool | None = None
        self.tune.on_kept = self._kept_changed
        _VIEWS[self.widget.model_id] = self

    def attach_display(self, display_id: str) -> None:
        """The display id this view was shown under: keeping a version updates that output."""
        self.display_id = display_id

    def _kept_changed(self) -> None:
        self.contents["Tune"] = tune_static_html(self.result, self.tune.kept)
        if self.display_id:
            from IPython.display import update_display

            update_display(self._repr_mimebundle_(), raw=True, display_id=self.display_id)

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.widget._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        view = data[WIDGET_VIEW_MIME]
        if self._widget_view is None:  # decided at the first display (an update comes from a click, not a cell)
            self._widget_view = widget_view_wanted()
        out = {WIDGET_VIEW_MIME: view} if self._widget_view else {}
        out.update({
            VIEW_MIME: {**view, "kept": self.tune.kept_records()},
            "text/html": static_html(self.result, self.code_lang, self.contents),
            "text/plain": f"<autocomp result: {self.result.report.get('target')}, "
                          f"{self.result.report.get('speedup_vs_naive', 0):.2f}x vs naive>",
        })
        return out


_VIEWS: "weakref.WeakValueDictionary[str, ResultView]" = weakref.WeakValueDictionary()


def restore_kept(model_id: str, records: list) -> list[str]:
    """Called by the labextension when a cell whose metadata holds kept versions shows a new
    live view: re-evaluate them into that view (its Tune tab, `result.versions`, the output)."""
    view = _VIEWS.get(model_id)
    return view.tune.restore(records) if view is not None else []


def reattach(model_id: str) -> bool:
    """Called by the labextension when a reloaded page shows the live view `model_id` again
    (its output was made in an earlier page, so the kernel's display updates no longer reach
    it): display the view's current bundle under its display id, in reply to that request,
    so the renderer can take this and every later update into its output (kept versions).
    False when the view is gone or was never displayed with an id."""
    view = _VIEWS.get(model_id)
    if view is None or not view.display_id:
        return False
    from IPython.display import display

    display(view._repr_mimebundle_(), raw=True, display_id=view.display_id)
    return True
