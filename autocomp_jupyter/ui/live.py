"""The live view: one ipywidgets Tab per result, and the Tune tab's hand-tuning controls.

Tabs (docs/guide/notebook.md): Graph, Tiles, Schedule, Profile, Rules, Tune, Code. All but Tune and Code
are the static renderers' HTML. Tune has a kernel picker, a slider per tile size (loop ×
level), a loop-order picker per level and, where the evaluator takes annotations, a
vectorised-loop picker; every change calls `result.evaluate_variant`
(cost and legality in well under a second) and updates the metrics, the legality verdict,
a line saying what changed and by how much, and the kernel's point on its roofline at once.
"keep as version" adds the variant to `result.versions` and to the versions table; the A/B
pickers compare any two versions side by side (compare.py).

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

import inspect
import itertools
import os
import weakref

import ipywidgets as W

from ..space import TileSpace
from .compare import ab_html, default_pair, distinct_seconds, kernel_point, schedule_spec, version_specs, versions_html
from .fmt import BAD, GOOD, STYLE, badge, esc, note, ratio, table
from .glossary import legend, th
from .html import TABS, static_html, tab_contents, tune_static_html
from .names import kernel_label, kernel_labels
from .network import LARGE_PLAN_OPS, layers_html, network_graph_html
from .roofline import roofline_data, roofline_svg
from .tables import METRIC_HEADER, _monitor, code_html, metric_cells

VIEW_MIME = "application/vnd.autocomp.view+json"
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
MAX_PERMUTED_LOOPS = 4  # all orders up to 4 loops (24); beyond, interchanges and moves only


def order_choices(current: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Loop orders to offer: every permutation of few loops; for more, the current order,
    each adjacent interchange, and each loop moved outermost or innermost."""
    if len(current) <= MAX_PERMUTED_LOOPS:
        perms = list(itertools.permutations(current))
        perms.remove(tuple(current))
        return [tuple(current)] + perms
    out = [tuple(current)]
    for i in range(len(current) - 1):
        o = list(current)
        o[i], o[i + 1] = o[i + 1], o[i]
        out.append(tuple(o))
    for loop in current:
        rest = [l for l in current if l != loop]
        out.append(tuple([loop] + rest))
        out.append(tuple(rest + [loop]))
    return list(dict.fromkeys(out))


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


def unchanged_why(annotation: bool, ev: dict) -> str:
    """Why a move left the program time where it was, for the move log."""
    if annotation:
        return ("the cost model does not price this annotation here — it changes the generated code "
                "(see the Code tab), not the modelled time")
    bound = (ev or {}).get("bound")
    return (f"the kernel stays bound by {bound}, which this change does not move" if bound
            else "no term of the cost model moves")


def _accepts(fn, parameter: str) -> bool:
    try:
        return parameter in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class TunePanel:
    """Sliders and pickers for one kernel at a time, wired to `result.evaluate_variant`."""

    def __init__(self, result):
        self.result = result
        self.kept: list[dict] = []
        self.on_kept = None  # called after a version is kept or restored (the view updates its output)
        self.sliders: dict[tuple[str, str], W.SelectionSlider] = {}
        self.changes = 0  # numbered "what changed" lines: feedback even when a change moves nothing
        self._previous_time = None
        self.order_pickers: dict[str, W.Dropdown] = {}
        self.last: dict | None = None
        names = [k.name for k in result.after.kernels]
        labels = kernel_labels(result)
        # short names in the picker (an imported model's are long); the value stays the full name
        self.kernel_picker = W.Dropdown(options=[(labels.get(n, n), n) for n in names],
                                        value=names[0] if names else None, description="kernel",
                                        layout=W.Layout(width="320px", max_width="100%"))
        self.controls = W.VBox()
        self.status = W.HTML()
        self.metrics = W.HTML()
        self.roofline = W.HTML()
        self.change = W.HTML()
        self.keep_button = W.Button(description="keep as version", icon="bookmark",
                                    tooltip="add this variant to result.versions and the A/B table")
        self.versions = W.HTML()
        self.ab_a = W.Dropdown(description="A", style={"description_width": "20px"}, layout=W.Layout(width="200px"))
        self.ab_b = W.Dropdown(description="B", style={"description_width": "20px"}, layout=W.Layout(width="200px"))
        self.ab = W.HTML()
        self.ab.add_class("autocomp-ab-out")
        self._refresh_versions(default_b=True)
        self.ab_a.observe(lambda _: self.compare(), names="value")
        self.ab_b.observe(lambda _: self.compare(), names="value")
        self.compare()
        self.keep_button.on_click(lambda _: self.keep())
        self.kernel_picker.observe(lambda ch: self.select_kernel(ch["new"]), names="value")
        available = callable(getattr(result, "evaluate_variant", None))
        intro = W.HTML(note("Move a slider or pick an order: cost and legality are re-evaluated at once.")
                       if available else
                       note("Re-evaluation is not available for this result (no evaluate_variant)."))
        self.box = W.VBox([
            intro, self.kernel_picker,
            W.HBox([W.VBox([self.controls, self.change, self.status, self.metrics],
                           layout=W.Layout(min_width="0", flex="1 1 560px", overflow="hidden")),
                    self.roofline], layout=W.Layout(flex_flow="row wrap", width="100%")),
            self.keep_button, W.HTML("<h4>versions</h4>"), self.versions,
            W.HTML("<h4>A/B: compare two versions</h4>"), W.HBox([self.ab_a, self.ab_b]), self.ab,
        ], layout=W.Layout(width="100%", overflow="hidden"))
        self.available = available
        self.accepts_annotations = available and _accepts(result.evaluate_variant, "annotations")
        if names:
            self.select_kernel(names[0])

    # ------------------------------------------------------------------ controls

    @property
    def kernel(self) -> str:
        return self.kernel_picker.value

    def select_kernel(self, name: str) -> None:
        schedule = self.result.after.schedule_of(name)
        kernel = schedule.kernel
        levels = schedule.levels or tuple(self.result.target.tiling_levels)
        sizes = schedule.tile_sizes(levels)
        space = TileSpace.of(kernel, self.result.target)    # the candidate space's slider view
        self.levels = levels
        self.sliders, self.order_pickers = {}, {}
        rows = []
        # the level's whole name fits its label ("accumulator", not "accum…"); 7 px a character
        label_px = max([7 * len(level) + 8 for level in levels] + [40])
        for loop in kernel.loops:
            row = [W.Label(f"{loop.name} ({loop.extent})", tooltip=f"loop {loop.name}, extent {loop.extent}",
                           layout=W.Layout(width="90px"))]
            for h, level in enumerate(levels):
                options = space.slider(loop.name, sizes[loop.name][h])
                slider = W.SelectionSlider(options=options, value=min(sizes[loop.name][h], loop.extent),
                                           description=level, continuous_update=False,
                                           tooltip=f"tile size of loop {loop.name} at {level} (1 to {loop.extent})",
                                           disabled=not self.available or len(options) < 2,
                                           layout=W.Layout(width=f"{label_px + 200}px", max_width="100%"),
                                           style={"description_width": f"{label_px}px"})
                slider.observe(self._changed, names="value")
                self.sliders[(loop.name, level)] = slider
                row.append(slider)
            rows.append(W.HBox(row, layout=W.Layout(flex_flow="row wrap")))
        for level in levels:
            current = schedule.order_at(level, levels)
            picker = W.Dropdown(options=[(" ".join(o), o) for o in order_choices(current)], value=current,
                                description=f"order {level}", disabled=not self.available,
                                tooltip=f"loop order at {level}, outermost first",
                                style={"description_width": f"{label_px + 50}px"},
                                layout=W.Layout(width=f"{label_px + 250}px", max_width="100%"))
            picker.observe(self._changed, names="value")
            self.order_pickers[level] = picker
            rows.append(picker)
        self.vectorize_picker = None
        if self.accepts_annotations:
            current = schedule.vectorize
            # "" rather than None: a Dropdown whose value is None selects nothing and shows blank
            self.vectorize_picker = W.Dropdown(
                options=[("(none)", "")] + [(l, l) for l in kernel.loop_names],
                value=current if current in kernel.loop_names else "", description="vectorize",
                tooltip="the loop the generated code vectorises (innermost at the last level)",
                disabled=not self.available, style={"description_width": f"{label_px + 50}px"},
                layout=W.Layout(width=f"{label_px + 250}px", max_width="100%"))
            self.vectorize_picker.observe(self._changed, names="value")
            rows.append(self.vectorize_picker)
        self.controls.children = rows
        self.change.value = ""
        self._previous_time = None
        self.evaluate()

    def variant(self) -> tuple[dict, dict]:
        """The controls' values as (tiles {loop: {level: size}}, order {level: loops})."""
        tiles: dict[str, dict[str, int]] = {}
        for (loop, level), slider in self.sliders.items():
            tiles.setdefault(loop, {})[level] = int(slider.value)
        order = {level: tuple(p.value) for level, p in self.order_pickers.items()}
        return tiles, order

    def _changed(self, change) -> None:
        owner = change.get("owner")
        label = getattr(owner, "description", "") or "control"
        loop = next((l for (l, _lv), sl in self.sliders.items() if sl is owner), "")
        value = change.get("new")
        shown = " ".join(value) if isinstance(value, tuple) else ("(none)" if value == "" else str(value))
        before = self._previous_time
        ev = self.evaluate()
        t = (ev or {}).get("time_s")
        if not (ev or {}).get("legal", True):
            effect = "illegal: see below"
        elif t and before:
            old, new = distinct_seconds([before, t])
            effect = f"program {old} → {new}" + (f" (unchanged: {unchanged_why(owner is self.vectorize_picker, ev)})"
                                                if old == new else f" ({before / t:.3f}×)")
        else:
            effect = "re-evaluated"
        self.changes += 1
        what = f"{loop} {label}" if loop else label
        step = self._step(owner, value)
        call = f' <code class="autocomp-tune-step">{esc(step)}</code>' if step else ""
        self.change.value = (f'<p class="autocomp-tune-change" data-change="{self.changes}">'
                             f"#{self.changes} {esc(what)} → <b>{esc(shown)}</b>{call}: {esc(effect)}</p>")

    def _step(self, owner, value) -> str:
        """The trace primitive a control's move is (`schedule/`), as the Python call that makes it."""
        from ..schedule import python_of

        step = None
        for (loop, level), slider in self.sliders.items():
            if slider is owner:
                step = {"primitive": "tile", "loop": loop, "level": level, "size": int(value)}
        for level, picker in self.order_pickers.items():
            if picker is owner:
                step = {"primitive": "reorder", "level": level, "order": list(value)}
        if owner is not None and owner is self.vectorize_picker and value:
            step = {"primitive": "vectorize", "loop": value}
        return python_of(self.kernel, [step]).splitlines()[-1] if step else ""

    # ------------------------------------------------------------------ evaluation

    def evaluate(self) -> dict | None:
        """Re-evaluate the variant the controls describe and redraw metrics and roofline."""
        base_kernel = next((k for k in self.result.report.get("kernels", []) if k["name"] == self.kernel), {})
        if not self.available:
            self.last = None
            self._render(base_kernel, None)
            return None
        tiles, order = self.variant()
        extra = {}
        if self.vectorize_picker is not None:
            annotations = dict(self.result.after.schedule_of(self.kernel).annotations)
            annotations.pop("vectorize", None)
            if self.vectorize_picker.value:
                annotations["vectorize"] = self.vectorize_picker.value
            extra["annotations"] = annotations
        try:
            ev = self.result.evaluate_variant(self.kernel, tiles=tiles, order=order, **extra)
        except Exception as err:  # an evaluator refusing a variant is a verdict, not a crash
            ev = {"legal": False, "reason": f"{type(err).__name__}: {err}", "metrics": {}, "time_s": None}
        self.last = ev
        self._render(base_kernel, ev)
        if ev.get("legal", True) and ev.get("time_s"):
            self._previous_time = ev["time_s"]
        return ev

    def _render(self, base_kernel: dict, ev: dict | None) -> None:
        report = self.result.report
        monitor = _monitor(report)
        base_m = base_kernel.get("metrics") or {}
        rows = [["optimized"] + metric_cells(base_m, monitor)]
        variant_times = None
        if ev is not None:
            rows.append(["variant"] + metric_cells(ev.get("metrics") or {}, monitor))
        opt_t = (report.get("optimized") or {}).get("time_s")
        naive_t = (report.get("naive") or {}).get("time_s")
        program = ""
        if ev is not None and ev.get("time_s"):
            t = ev["time_s"]
            variant_times = distinct_seconds([t, opt_t])
            program = (f'<p class="autocomp-variant-time">program time with this variant: <b>{variant_times[0]}</b> '
                       f"({ratio(naive_t / t if naive_t else None)} vs naive, "
                       f"{ratio(opt_t / t if opt_t else None)} vs optimized {variant_times[1]})</p>")
        nest = ""
        schedule = (ev or {}).get("schedule")
        if schedule is not None:
            try:
                from ..schedule import python_of

                nest = ('<details class="autocomp-variant-nest"><summary>loop nest of this variant, and its trace</summary>'
                        f"<pre>{esc(schedule.loop_nest())}</pre>"
                        f'<pre class="autocomp-variant-trace">{esc(python_of(self.kernel, schedule.trace))}</pre>'
                        "</details>")
            except Exception:  # the nest is a convenience; the metrics stand without it
                nest = ""
        self.metrics.value = ('<div class="autocomp-scroll">'
                              + table(["kernel " + esc(kernel_label(self.result, self.kernel))] + [th(h) for h in METRIC_HEADER], rows,
                                      "autocomp-tune-metrics")
                              + "</div>" + program + nest + legend(METRIC_HEADER))
        if ev is None:
            self.status.value = ""
        elif ev.get("legal", True):
            reason = ev.get("reason") or "every dependence stays lexicographically positive (isl)"
            self.status.value = f'<p class="autocomp-legality">{badge("legal", GOOD)} {esc(reason)}</p>'
            if ev.get("note"):
                self.status.value += f'<p class="autocomp-fission">{esc(ev["note"])}</p>'
        else:
            self.status.value = (f'<p class="autocomp-legality">{badge("illegal", BAD)} '
                                 f'<span style="color:{BAD}">{esc(ev.get("reason", ""))}</span></p>')
        self.keep_button.disabled = ev is None or not ev.get("legal", True)
        # The roofline of the selected kernel: its optimised point and the variant's.
        points = [kernel_point("optimized", base_m)]
        if ev is not None and ev.get("legal", True):
            points.append(kernel_point("variant", ev.get("metrics") or {}))
        try:
            data = roofline_data(self.result)
            self.roofline.value = roofline_svg({"peak_flops": data["peak_flops"], "dram_bw": data["dram_bw"],
                                                "points": [p for p in points if p]},
                                               title=f"kernel {kernel_label(self.result, self.kernel)}")
        except Exception as err:  # keep the controls usable without roofline data
            self.roofline.value = note(f"no roofline: {err}")

    # ------------------------------------------------------------------ versions

    def keep(self) -> str | None:
        """Store the current variant in `result.versions` and the A/B table; its name."""
        from ..ir.schedule import Schedule

        ev = self.last
        if not ev or not ev.get("legal", True):
            return None
        tiles, order = self.variant()
        annotations = dict(self.result.after.schedule_of(self.kernel).annotations)
        if self.vectorize_picker is not None:
            annotations.pop("vectorize", None)
            if self.vectorize_picker.value:
                annotations["vectorize"] = self.vectorize_picker.value
        return self._add_kept(self.kernel, tiles, order, annotations, ev)

    def _add_kept(self, kernel: str, tiles: dict, order: dict, annotations: dict, ev: dict,
                  name: str | None = None) -> str:
        """Add a variant of `kernel` (already evaluated: `ev`) as a version; its name."""
        from ..ir.schedule import Schedule

        name = name or f"manual{len(self.kept) + 1}"
        plan = ev.get("plan")
        if plan is None:
            base = self.result.after.schedule_of(kernel)
            schedule = Schedule(base.kernel, tiles=tiles, order=order, annotations=base.annotations,
                                levels=base.levels or self.levels)
            plan = self.result.after.with_schedule(kernel, schedule)
        self.result.versions[name] = plan
        kernels = {k.name: schedule_spec(s) for k, s in zip(plan.kernels, plan.schedules)}
        self.kept.append({"name": name, "time_s": ev.get("time_s"), "legal": True, "kernels": kernels,
                          "plan": plan, "source": "kept from the Tune tab",
                          "variant": {"kernel": kernel, "tiles": tiles,
                                      "order": {lv: list(o) for lv, o in order.items()},
                                      "annotations": {k: (list(v) if isinstance(v, tuple) else v)
                                                      for k, v in annotations.items()}}})
        self._refresh_versions()
        self.ab_b.value = name  # compare what was just kept
        if self.on_kept is not None:
            self.on_kept()
        return name

    def kept_records(self) -> list[dict]:
        """The kept versions as JSON (name, time, the variant): what the notebook saves."""
        return [{"name": k["name"], "time_s": k.get("time_s"), **k["variant"]} for k in self.kept if "variant" in k]

    def restore(self, records: list) -> list[str]:
        """Re-evaluate versions saved with the notebook (`kept_records`) and keep those that
        still apply to this result (same kernel and loops); the names restored."""
        done = []
        known = {k.name for k in self.result.after.kernels}
        for rec in records or []:
            if not isinstance(rec, dict) or rec.get("kernel") not in known or \
                    rec.get("name") in {k["name"] for k in self.kept}:
                continue
            order = {lv: tuple(o) for lv, o in (rec.get("order") or {}).items()} or None
            annotations = {k: (tuple(v) if isinstance(v, list) else v) for k, v in (rec.get("annotations") or {}).items()}
            try:
                ev = self.result.evaluate_variant(rec["kernel"], tiles=rec.get("tiles"), order=order,
                                                  annotations=annotations)
            except Exception:  # a saved variant this result refuses is not restored
                continue
            if not ev.get("legal") or ev.get("error"):
                continue
            on_kept, self.on_kept = self.on_kept, None  # one output update for the lot
            try:
                done.append(self._add_kept(rec["kernel"], rec.get("tiles") or {}, dict(order or {}),
                                           annotations, ev, name=str(rec.get("name") or "")))
            finally:
                self.on_kept = on_kept
        if done and self.on_kept is not None:
            self.on_kept()
        return done

    def _refresh_versions(self, default_b: bool = False) -> None:
        self.specs = version_specs(self.result, self.kept)
        self.versions.value = versions_html(self.specs)
        names = [s["name"] for s in self.specs]
        a, b = self.ab_a.value, self.ab_b.value
        self.ab_a.options, self.ab_b.options = names, names
        self.ab_a.value = a if a in names else names[0]
        if default_b or b not in names:
            b = default_pair(self.specs, self.ab_a.value)[1]
        self.ab_b.value = b

    def compare(self, a: str | None = None, b: str | None = None) -> str:
        """Show versions `a` and `b` (names; default: the pickers') side by side."""
        if a is not None:
            self.ab_a.value = a
        if b is not None:
            self.ab_b.value = b
        by_name = {s["name"]: s for s in self.specs}
        va, vb = by_name.get(self.ab_a.value), by_name.get(self.ab_b.value)
        if va is None or vb is None:
            self.ab.value = note("pick two versions")
        else:
            try:
                self.ab.value = ab_html(self.result, va, vb)
            except Exception as err:  # a comparison that cannot be drawn is reported, not raised
                self.ab.value = note(f"cannot compare {va['name']} and {vb['name']}: {type(err).__name__}: {err}")
        return self.ab.value


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
