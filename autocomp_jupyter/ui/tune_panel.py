"""The Tune tab: a schedule playground over every primitive's decisions.

Controls come from `playground.controls` (one per `Decision` of every registered primitive:
a toggle for on/off, a slider for sizes and factors, a dropdown for the rest), so a new
primitive shows up here with no code of its own. A move builds the variant's trace
(`playground.variant_trace`) and scores it with `result.evaluate_variant(kernel,
schedule=trace, verify=False)` — cost and legality at once. A refused variant (a step its
primitive or isl refuses) is said in one line — the step as Python, the primitive, the loop
and the dependence, as the builder's error says it — and the control goes back: the last
legal variant stays on screen and in A/B. A legal one is then checked for equivalence on
the scaled twin in a background thread (`evaluate_variant(..., verify=True)`, the pipeline's check of a
step); its badge says "verified" or "NOT verified" with the reason, and a check whose
variant was replaced meanwhile is dropped (a pending one never starts).

Every legal variant made here joins the A/B pickers, named by its change, beside naive,
library, optimized and the tuner's top-k (compare.version_specs); "keep as version" also
adds it to `result.versions` and saves it with the notebook (`kept_records`).
"""
from __future__ import annotations

import threading

import ipywidgets as W

from ..space import TileSpace
from ..heap import collector_paused, settle_heap
from .compare import ab_html, default_pair, distinct_seconds, kernel_point, schedule_spec, version_specs, versions_html
from .fmt import BAD, GOOD, MUTED, badge, esc, note, ratio, table
from .glossary import legend, th
from .names import kernel_label, kernel_labels
from .playground import Control, change_name, controls, step_of, variant_trace
from .roofline import roofline_data, roofline_svg
from .tables import METRIC_HEADER, _monitor, metric_cells

def unchanged_why(primitive: str, ev: dict) -> str:
    """Why a move of `primitive`'s control left the program time where it was, for the move log."""
    if primitive == "unroll":
        return (ev or {}).get("unroll") or "not unrolled: the body keeps one step of values live, nothing to spill"
    annotation = primitive not in ("tile", "split", "reorder")
    if annotation:
        return ("the cost model does not price this primitive here — it changes the generated code "
                "(see the Code tab), not the modelled time")
    bound = (ev or {}).get("bound")
    return (f"the kernel stays bound by {bound}, which this change does not move" if bound
            else "no term of the cost model moves")


class Verifier:
    """One background thread checking the latest variant; a newer request replaces a
    pending one (a stale check never starts) and a finished check reports only if its
    variant is still the one on screen (`current()` says which)."""

    def __init__(self, current, report):
        self.current, self.report = current, report
        self._lock = threading.Condition()
        self._job = None
        self._thread: threading.Thread | None = None
        self.busy = False

    def submit(self, token, check) -> None:
        """Run `check()` -> (verified, reason) for variant `token`, unless a newer one comes first."""
        with self._lock:
            self._job = (token, check)
            self._lock.notify()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="autocomp-verify", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._job is None:
                    self._thread = None
                    self._lock.notify_all()
                    return
                token, check = self._job
                self._job, self.busy = None, True
            if token == self.current():          # replaced before it started: never run
                verdict = check()
                if token == self.current():
                    self.report(token, *verdict)
            with self._lock:
                self.busy = False

    def wait(self, timeout: float = 60.0) -> bool:
        """Block until no check is pending or running (tests, scripts); False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self._thread is None, timeout)


class TunePanel:
    """The controls of one kernel at a time, wired to `result.evaluate_variant`."""

    def __init__(self, result, background: bool = True):
        self.result = result
        self.background = background
        self.kept: list[dict] = []
        self.made: list[dict] = []
        self.on_kept = None  # called after a version is kept or restored (the view updates its output)
        self.changes = 0
        self.generation = 0
        self.last: dict | None = None
        self.ctrls: list[Control] = []
        self.widgets: dict = {}
        self.sliders: dict[tuple[str, str], W.Widget] = {}
        self.order_pickers: dict[str, W.Widget] = {}
        self.vectorize_picker = None
        self._quiet = False
        self._previous_time = None
        self._previous_unroll = ""
        self.verifier = Verifier(lambda: self.generation, self._verified)
        names = [k.name for k in result.after.kernels]
        labels = kernel_labels(result)
        self.kernel_picker = W.Dropdown(options=[(labels.get(n, n), n) for n in names],
                                        value=names[0] if names else None, description="kernel",
                                        layout=W.Layout(width="320px", max_width="100%"))
        self.controls = W.VBox(layout=W.Layout(width="100%", overflow="hidden"))
        self.status, self.verify_badge, self.metrics = W.HTML(), W.HTML(), W.HTML()
        self.roofline, self.change = W.HTML(), W.HTML()
        self.keep_button = W.Button(description="keep as version", icon="bookmark",
                                    tooltip="add this variant to result.versions and save it with the notebook")
        self.versions = W.HTML()
        self.ab_a = W.Dropdown(description="A", style={"description_width": "20px"}, layout=W.Layout(width="240px"))
        self.ab_b = W.Dropdown(description="B", style={"description_width": "20px"}, layout=W.Layout(width="240px"))
        self.ab = W.HTML()
        self.ab.add_class("autocomp-ab-out")
        self._quiet_ab, self._shown_pair = False, None
        self._refresh_versions(default_b=True)
        self.ab_a.observe(lambda _: self._quiet_ab or self.compare(), names="value")
        self.ab_b.observe(lambda _: self._quiet_ab or self.compare(), names="value")
        self.keep_button.on_click(lambda _: self.keep())
        self.kernel_picker.observe(lambda ch: self.select_kernel(ch["new"]), names="value")
        self.available = callable(getattr(result, "evaluate_variant", None))
        intro = W.HTML(note("Every primitive's choices: a move re-evaluates cost and legality at once; an illegal "
                            "one is refused with its reason, and each legal variant is checked on the scaled twin.")
                       if self.available else
                       note("Re-evaluation is not available for this result (no evaluate_variant)."))
        self.box = W.VBox([
            intro, self.kernel_picker,
            W.HBox([W.VBox([self.controls, self.change, self.status, self.verify_badge, self.metrics],
                           layout=W.Layout(min_width="0", flex="1 1 560px", overflow="hidden")),
                    self.roofline], layout=W.Layout(flex_flow="row wrap", width="100%")),
            self.keep_button, W.HTML("<h4>versions</h4>"), self.versions,
            W.HTML("<h4>A/B: compare two versions</h4>"), W.HBox([self.ab_a, self.ab_b],
                                                                  layout=W.Layout(flex_flow="row wrap")), self.ab,
        ], layout=W.Layout(width="100%", overflow="hidden"))
        if names:
            self.select_kernel(names[0])
        settle_heap()       # moves then never wait for a full scan of the session's heap

    # ------------------------------------------------------------------ controls

    @property
    def kernel(self) -> str:
        return self.kernel_picker.value

    def select_kernel(self, name: str) -> None:
        self.base = self.result.after.schedule_of(name)
        if not self.base.levels:
            self.base = self.base.with_levels(self.result.target.tiling_levels)
        space = TileSpace.of(self.base.kernel, self.result.target)
        self.ctrls = controls(self.base, space.slider)
        self.widgets, self.sliders, self.order_pickers, self.vectorize_picker = {}, {}, {}, None
        groups: dict[str, list] = {}
        for ctrl in self.ctrls:
            widget = self._widget(ctrl)
            self.widgets[id(widget)] = (widget, ctrl)
            groups.setdefault(ctrl.primitive, []).append(widget)
            if ctrl.primitive == "tile":
                self.sliders[tuple(ctrl.key)] = widget
            elif ctrl.primitive == "reorder":
                self.order_pickers[ctrl.key[0]] = widget
            elif ctrl.primitive == "vectorize":
                self.vectorize_picker = widget
        rows = []
        for primitive, widgets in groups.items():
            head = W.HTML(f'<span class="autocomp-tune-primitive" title="{esc(_doc(primitive))}">{esc(primitive)}</span>',
                          layout=W.Layout(width="90px"))
            rows.append(W.HBox([head, W.HBox(widgets, layout=W.Layout(flex_flow="row wrap", min_width="0",
                                                                      flex="1 1 auto"))],
                               layout=W.Layout(width="100%", min_width="0")))
        self.controls.children = rows
        self.change.value = ""
        self._previous_time = None
        self.last_legal = None
        self.evaluate()

    def _widget(self, ctrl: Control):
        options = [(ctrl.text(c), _shown(c)) for c in ctrl.choices]
        common = dict(description=_short(ctrl), disabled=not self.available or len(ctrl.choices) < 2,
                      tooltip=f"{ctrl.label()}: {_doc(ctrl.primitive).splitlines()[0] if _doc(ctrl.primitive) else ''}")
        label = max(40, 7 * len(common["description"]) + 14)    # the whole label ("k @ accumulator"): ~7 px a character
        if ctrl.kind == "toggle":
            widget = W.ToggleButton(value=bool(ctrl.initial), layout=W.Layout(width="auto"), **common)
        elif ctrl.kind == "slider":
            widget = W.SelectionSlider(options=options, value=_shown(ctrl.initial), continuous_update=False,
                                       layout=W.Layout(width=f"{label + 190}px", max_width="100%"),
                                       style={"description_width": f"{label}px"}, **common)
        else:
            widget = W.Dropdown(options=options, value=_shown(ctrl.initial),
                                layout=W.Layout(width=f"{label + 180}px", max_width="100%"),
                                style={"description_width": f"{label}px"}, **common)
        widget.add_class("autocomp-tune-control")
        widget.add_class(f"autocomp-tune-{ctrl.primitive}")
        widget.observe(self._changed, names="value")
        return widget

    def control_of(self, widget) -> Control | None:
        return self.widgets.get(id(widget), (None, None))[1]

    def set(self, label: str, value) -> dict | None:
        """Set the control labelled `label` ('parallel k', 'tile i @ VMEM', 'unroll') to `value`,
        as a click would; the evaluation (or the refusal) it gave."""
        for widget, ctrl in self.widgets.values():
            if ctrl.label() == label:
                offered = [_shown(c) for c in ctrl.choices]
                value = tuple(value) if isinstance(value, list) else value
                if _shown(value) not in offered:      # bad input: refused in one line, nothing changes
                    refusal = {"legal": False, "primitive": ctrl.primitive,
                               "reason": f"{value!r} is not a value this control offers "
                                         f"({', '.join(ctrl.text(_chosen(v)) for v in offered[:8])}"
                                         f"{', ...' if len(offered) > 8 else ''})"}
                    self._say_refused(ctrl, value, refusal)
                    return refusal
                widget.value = _shown(value)
                return self.last
        raise KeyError(f"no control {label!r}; the controls are {', '.join(c.label() for c in self.ctrls)}")

    def _changed(self, change) -> None:
        if self._quiet:
            return
        widget = change.get("owner")
        ctrl = self.control_of(widget)
        if ctrl is None:
            return
        new, old = _chosen(change.get("new")), ctrl.value
        problem = ctrl.check(new)
        if problem:                     # bad input: said, and the control goes back
            self._revert(widget, ctrl, old)
            self._say_refused(ctrl, new, {"reason": problem})
            return
        try:
            with collector_paused():      # the answer and its redraw first; a due collection after
                self._move(widget, ctrl, new, old)
        except Exception as err:  # never into the notebook: the control goes back, the last legal variant stays
            ctrl.value = old
            self._revert(widget, ctrl, old)
            self._say_refused(ctrl, new, {"reason": f"could not evaluate it: {type(err).__name__}: {err}"})

    def _move(self, widget, ctrl: Control, new, old) -> None:
        ctrl.value = tuple(new) if isinstance(new, list) else new
        before = self._previous_time
        previous_unroll = (self.last_legal or {}).get("unroll") or ""
        ev = self.evaluate()
        if ev is None:
            return
        self._previous_unroll = previous_unroll
        if not ev.get("legal"):
            ctrl.value = old
            self._revert(widget, ctrl, old)
            self._say_refused(ctrl, new, ev)
            return
        t = ev.get("time_s")
        if t and before:
            o, n = distinct_seconds([before, t])
            effect = f"program {o} → {n}" + (f" (unchanged: {unchanged_why(ctrl.primitive, ev)})" if o == n else
                                             f" ({before / t:.3f}×)" + _unroll_why(ctrl, ev, self._previous_unroll))
        else:
            effect = "re-evaluated"
        self._previous_unroll = ev.get("unroll") or ""
        self.changes += 1
        name = self._remember(ctrl, new, ev)
        step = step_python(ctrl, ev)
        call = f' <code class="autocomp-tune-step">{esc(step)}</code>' if step else ""
        self.change.value = (f'<p class="autocomp-tune-change" data-change="{self.changes}">'
                             f"#{self.changes} {esc(ctrl.label())} → <b>{esc(ctrl.text(new))}</b>{call}: {esc(effect)}"
                             f' <span style="color:{MUTED}">(in A/B as “{esc(name)}”)</span></p>')

    def _revert(self, widget, ctrl: Control, value) -> None:
        self._quiet = True
        try:
            widget.value = bool(value) if ctrl.kind == "toggle" else _shown(value)
        finally:
            self._quiet = False

    def _say_refused(self, ctrl: Control, value, ev: dict) -> None:
        """One line: what was refused, by which primitive on which loop, and why (the builder's words)."""
        self.changes += 1
        where = " ".join(x for x in (ev.get("primitive") or ctrl.primitive,
                                     f"loop {ev['loop']}" if ev.get("loop") else "") if x)
        self.change.value = (f'<p class="autocomp-tune-change autocomp-refusal" data-change="{self.changes}" '
                             f'style="color:{BAD}">#{self.changes} {esc(ctrl.label())} → {esc(ctrl.text(value))}: '
                             f"<b>refused</b> ({esc(where)}): {esc(ev.get('reason') or '')} — the last legal variant "
                             "stays</p>")

    # ------------------------------------------------------------------ evaluation

    def evaluate(self) -> dict | None:
        """Score the variant the controls describe. Legal: metrics, roofline and badge redrawn
        and a check started; refused: nothing redrawn (the caller says why)."""
        base_kernel = next((k for k in self.result.report.get("kernels", []) if k["name"] == self.kernel), {})
        if not self.available:
            self.last = None
            self._render(base_kernel, None)
            return None
        trace = variant_trace(self.base, self.ctrls)
        try:
            ev = self.result.evaluate_variant(self.kernel, schedule=trace, verify=False)
        except Exception as err:  # an evaluator refusing a variant is a verdict, not a crash
            ev = {"legal": False, "reason": f"{type(err).__name__}: {err}", "metrics": {}, "time_s": None}
        self.last = ev
        if not ev.get("legal"):
            if self.last_legal is None:           # the kernel's own schedule refused: say so, nothing to keep
                self._render(base_kernel, ev)
            return ev
        ev["trace"] = trace
        self.last_legal = ev
        self._render(base_kernel, ev)
        if ev.get("time_s"):
            self._previous_time = ev["time_s"]
        self._check(ev)
        return ev

    def _check(self, ev: dict) -> None:
        self.generation += 1
        ev["verified"] = None
        if ev.get("schedule") is None or ev.get("plan") is None:
            self.verify_badge.value = ""
            return
        self.verify_badge.value = (f'<p class="autocomp-verify" data-verified="pending">{badge("checking", MUTED)} '
                                   "running it tile by tile against the interpreter (scaled twin)…</p>")
        check = self._checker(self.kernel, ev["schedule"])
        if self.background:
            self.verifier.submit(self.generation, check)
        else:
            self._verified(self.generation, *check())

    def _checker(self, kernel: str, schedule):
        """The check of a variant: `evaluate_variant` with `verify` (the tiled run on the scaled twin)."""
        def check() -> tuple[bool, str]:
            try:
                ev = self.result.evaluate_variant(kernel, schedule=schedule, verify=True)
            except Exception as err:  # a check that cannot run is a failed check, said with its reason
                return False, f"the check could not run: {type(err).__name__}: {err}"
            return bool(ev.get("verified")), ev.get("reason") or ""
        return check

    def _verified(self, token, ok: bool, reason: str) -> None:
        """The check's verdict on variant `token` (the latest): the badge, and its A/B entry."""
        if token != self.generation or self.last_legal is None:
            return
        self.last_legal["verified"] = ok
        self.last_legal["verified_reason"] = reason
        for rec in self.made + self.kept:
            if rec.get("ev") is self.last_legal:
                rec["verified"] = ok
        if ok:
            self.verify_badge.value = (f'<p class="autocomp-verify" data-verified="yes">{badge("verified", GOOD)} '
                                       "its tiled run matches the interpreter on the scaled twin</p>")
        else:
            self.verify_badge.value = (f'<p class="autocomp-verify" data-verified="no">{badge("NOT verified", BAD)} '
                                       f'<span style="color:{BAD}">{esc(reason)}</span></p>')

    def wait_verified(self, timeout: float = 60.0) -> bool | None:
        """Wait for the current variant's check; its verdict (None if none ran)."""
        self.verifier.wait(timeout)
        return (self.last_legal or {}).get("verified")

    def _render(self, base_kernel: dict, ev: dict | None) -> None:
        report = self.result.report
        monitor = _monitor(report)
        base_m = base_kernel.get("metrics") or {}
        rows = [["optimized"] + metric_cells(base_m, monitor)]
        legal = ev is not None and ev.get("legal")
        if legal:
            rows.append(["variant"] + metric_cells(ev.get("metrics") or {}, monitor))
        opt_t = (report.get("optimized") or {}).get("time_s")
        naive_t = (report.get("naive") or {}).get("time_s")
        program = ""
        if legal and ev.get("time_s"):
            t = ev["time_s"]
            shown = distinct_seconds([t, opt_t])
            program = (f'<p class="autocomp-variant-time">program time with this variant: <b>{shown[0]}</b> '
                       f"({ratio(naive_t / t if naive_t else None)} vs naive, "
                       f"{ratio(opt_t / t if opt_t else None)} vs optimized {shown[1]})</p>")
        nest = ""
        if legal and ev.get("schedule") is not None:
            try:
                from ..schedule import python_of

                nest = ('<details class="autocomp-variant-nest"><summary>loop nest of this variant, and its trace</summary>'
                        f"<pre>{esc(ev['schedule'].loop_nest())}</pre>"
                        f'<pre class="autocomp-variant-trace">{esc(python_of(self.kernel, ev["schedule"].trace))}</pre>'
                        "</details>")
            except Exception:  # the nest is a convenience; the metrics stand without it
                nest = ""
        self.metrics.value = ('<div class="autocomp-scroll">'
                              + table(["kernel " + esc(kernel_label(self.result, self.kernel))] + [th(h) for h in METRIC_HEADER],
                                      rows, "autocomp-tune-metrics")
                              + "</div>" + program + nest + legend(METRIC_HEADER))
        if ev is None:
            self.status.value = ""
        elif legal:
            reason = ev.get("reason") or "every dependence stays lexicographically positive (isl)"
            self.status.value = f'<p class="autocomp-legality">{badge("legal", GOOD)} {esc(reason)}</p>'
            if ev.get("note"):
                self.status.value += f'<p class="autocomp-fission">{esc(ev["note"])}</p>'
        else:
            self.status.value = (f'<p class="autocomp-legality">{badge("illegal", BAD)} '
                                 f'<span style="color:{BAD}">{esc(ev.get("reason", ""))}</span></p>')
        self.keep_button.disabled = not legal
        points = [kernel_point("optimized", base_m)]
        if legal:
            points.append(kernel_point("variant", ev.get("metrics") or {}))
        try:
            data = roofline_data(self.result)
            self.roofline.value = roofline_svg({"peak_flops": data["peak_flops"], "dram_bw": data["dram_bw"],
                                                "points": [p for p in points if p]},
                                               title=f"kernel {kernel_label(self.result, self.kernel)}")
        except Exception as err:  # keep the controls usable without roofline data
            self.roofline.value = note(f"no roofline: {err}")

    # ------------------------------------------------------------------ versions

    def _remember(self, ctrl: Control, value, ev: dict) -> str:
        """Add a legal variant made here to the A/B pickers, named by its change."""
        trace = ev.get("trace")
        same = next((m for m in self.made if m["variant"] == {"kernel": self.kernel, "trace": trace}), None)
        if same is not None:          # made before (a control moved back and forth): one entry
            same["ev"] = ev
            return same["name"]
        taken = {s["name"] for s in self.specs}
        base = change_name(ctrl, value)
        name, n = base, 2
        while name in taken:
            name, n = f"{base} ({n})", n + 1
        self.made.append(self._record(name, ev, "made in the Tune tab"))
        self._refresh_versions()
        return name

    def _record(self, name: str, ev: dict, source: str) -> dict:
        plan = ev["plan"]
        return {"name": name, "time_s": ev.get("time_s"), "legal": True, "plan": plan, "source": source, "ev": ev,
                "kernels": {k.name: schedule_spec(s) for k, s in zip(plan.kernels, plan.schedules)},
                "variant": {"kernel": self.kernel, "trace": list(ev.get("trace") or ev["schedule"].trace)}}

    def keep(self) -> str | None:
        """Store the variant on screen in `result.versions` (saved with the notebook); its name."""
        ev = self.last_legal
        if not ev or ev.get("plan") is None:
            return None
        return self._add_kept(ev)

    def _add_kept(self, ev: dict, name: str | None = None) -> str:
        name = name or f"manual{len(self.kept) + 1}"
        self.result.versions[name] = ev["plan"]
        self.kept.append(self._record(name, ev, "kept from the Tune tab"))
        self._refresh_versions()
        self.ab_b.value = name
        if self.on_kept is not None:
            self.on_kept()
        return name

    def kept_records(self) -> list[dict]:
        """The kept versions as JSON (name, time, kernel, trace): what the notebook saves."""
        return [{"name": k["name"], "time_s": k.get("time_s"), **k["variant"]} for k in self.kept]

    def restore(self, records: list) -> list[str]:
        """Replay versions saved with the notebook (`kept_records`) and keep those this result
        still accepts (same kernel, a trace its primitives and isl accept); the names restored."""
        done = []
        known = {k.name for k in self.result.after.kernels}
        on_kept, self.on_kept = self.on_kept, None  # one output update for the lot
        try:
            for rec in records or []:
                if not isinstance(rec, dict) or rec.get("kernel") not in known or \
                        rec.get("name") in {k["name"] for k in self.kept}:
                    continue
                ev = self._saved_variant(rec)
                if ev is None or not ev.get("legal") or ev.get("error") or ev.get("plan") is None:
                    continue
                self.kernel_picker.value = rec["kernel"]      # its controls, and `_record` names it
                done.append(self._add_kept(ev, name=str(rec.get("name") or "")))
        finally:
            self.on_kept = on_kept
        if done and self.on_kept is not None:
            self.on_kept()
        return done

    def _saved_variant(self, rec: dict) -> dict | None:
        try:
            if isinstance(rec.get("trace"), list):
                ev = self.result.evaluate_variant(rec["kernel"], schedule=rec["trace"], verify=False)
                ev["trace"] = rec["trace"]
                return ev
            order = {lv: tuple(o) for lv, o in (rec.get("order") or {}).items()} or None   # an older record
            annotations = {k: (tuple(v) if isinstance(v, list) else v) for k, v in (rec.get("annotations") or {}).items()}
            return self.result.evaluate_variant(rec["kernel"], tiles=rec.get("tiles"), order=order,
                                                annotations=annotations)
        except Exception:  # a saved variant this result refuses is not restored
            return None

    def _refresh_versions(self, default_b: bool = False) -> None:
        """The versions table (naive, library, optimized, top-k, kept) and the A/B pickers
        (those and every variant made here); the comparison is redrawn only if its pair changed."""
        listed = version_specs(self.result, self.kept)
        if len(self.kept) != getattr(self, "_table_kept", None):
            self.versions.value = versions_html(listed)
            self._table_kept = len(self.kept)
        self.specs = listed + list(self.made)
        names = [s["name"] for s in self.specs]
        a, b = self.ab_a.value, self.ab_b.value
        self._quiet_ab = True           # options and values change together: one comparison after
        try:
            self.ab_a.options, self.ab_b.options = names, names
            self.ab_a.value = a if a in names else names[0]
            if default_b or b not in names:
                b = default_pair(self.specs, self.ab_a.value)[1]
            self.ab_b.value = b
        finally:
            self._quiet_ab = False
        self.compare()

    def compare(self, a: str | None = None, b: str | None = None) -> str:
        """Show versions `a` and `b` (names; default: the pickers') side by side."""
        if a is not None:
            self.ab_a.value = a
        if b is not None:
            self.ab_b.value = b
        pair = (self.ab_a.value, self.ab_b.value)
        if pair == self._shown_pair and a is None and b is None:
            return self.ab.value          # a version's spec never changes under its name
        self._shown_pair = pair
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


def step_python(ctrl: Control, ev: dict) -> str:
    """The move as the builder call it adds (the primitive's Python form), '' when it removes one."""
    from ..schedule import from_step

    step = step_of(ctrl, ev.get("trace") or [])
    return from_step(step).python() if step else ""


def _unroll_why(ctrl: Control, ev: dict, before: str) -> str:
    """Why a move that changed the time did, where unroll is the reason: the cost model's
    note on the variant's unroll (the values kept live, the spill charged), after an unroll
    move or any move that changed what the unroll costs (a reorder it now follows)."""
    note = ev.get("unroll") or ""
    charged = ("spill to" in note) or ("spill to" in before)
    if note and (ctrl.primitive == "unroll" or (note != before and charged)):
        return f": {note}"
    return ""


def _shown(choice):
    """A choice as a picker holds it: "" for None (a picker whose value is None selects nothing)."""
    return "" if choice is None else choice


def _chosen(value):
    return None if value == "" else value


def _short(ctrl: Control) -> str:
    """The control's label without its primitive (its row names that)."""
    label = ctrl.label()
    return label[len(ctrl.primitive):].strip() or ctrl.primitive


def _doc(primitive: str) -> str:
    from ..schedule import PRIMITIVES

    cls = PRIMITIVES.get(primitive)
    return " ".join(cls.doc().split()) if cls else ""
