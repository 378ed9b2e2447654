"""The notebook views (autocomp_jupyter.ui) as pure functions of a Result.

`make_result()` builds a Result by hand — a real Program, Kernels, Schedules and cost-model
numbers, a report shaped exactly like DESIGN §8 — so the renderers are tested without the
pipeline; the last tests render a real `optimize()` result the same way.
"""
from __future__ import annotations

import re

import pytest

from autocomp_jupyter.accel.cost import evaluate, evaluate_program, naive_schedule
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import Kernel, Schedule, kernels_unfused
from autocomp_jupyter.report import kernel_footprints
from autocomp_jupyter.result import Plan, Result

SOURCE = """\
input A: f32[256, 128]
input B: f32[128, 256]
C = matmul(A, B)
D = relu(C)
output D
"""


def make_result(target_name: str = "tpu") -> Result:
    target = load_target(target_name)
    program = parse(SOURCE, filename="<cell>")
    levels = target.tiling_levels
    unfused = kernels_unfused(program)
    before = Plan(program, unfused, tuple(naive_schedule(k, target) for k in unfused), "naive")
    fused = Kernel.from_ops(program, ["C", "D"])
    tiles = {"i": {levels[0]: 128, levels[-1]: 32}, "j": {levels[0]: 128, levels[-1]: 32},
             "k": {levels[0]: 64, levels[-1]: 16}}
    schedule = Schedule(fused, tiles=tiles, order={levels[0]: ("i", "j", "k")},
                        annotations={"parallel": ("i",), "vectorize": "j"}, levels=levels)
    after = Plan(program, (fused,), (schedule,), "optimized")
    naive = evaluate_program(before.schedules, target).total
    optimized = evaluate_program(after.schedules, target).total
    kcost = evaluate(schedule, target)
    flops = float(program.flops)
    dram = target.dram_bandwidth
    report = {
        "version": 1, "target": target.name, "verified": True,
        "naive": naive.summary(), "library": naive.summary(), "optimized": optimized.summary(),
        "speedup_vs_naive": naive.time_s / optimized.time_s, "speedup_vs_library": naive.time_s / optimized.time_s,
        "roofline_fraction": 0.42,
        "kernels": [{"name": fused.name, "ops": list(fused.ops), "loops": list(fused.loop_names),
                     "order": list(schedule.order_at(levels[0])), "annotations": dict(schedule.annotations),
                     "tiles": schedule.tiles, "metrics": kcost.metrics()}],
        "rules": [{"rule": "epilogue", "pass": "fusion", "ops": ["C", "D"], "applied": True, "why": "relu reads only C"},
                  {"rule": "conv_relu", "pass": "fusion", "ops": [], "applied": False, "why": "no conv2d in the program"}],
        "rollbacks": [{"pass": "scheduling", "kernel": fused.name, "reason": "skew broke dependence C[i,j] -> C[i,j]"}],
        "tuning": {"configs_evaluated": 40, "seconds": 0.5, "top": [{"name": "top1", "time_s": optimized.time_s}]},
        "monitor": {"bw_util": 0.7, "occupancy": 0.5},
        "roofline": {"peak_flops": target.peak_flops("f32"), "dram_bw": dram, "points": [
            {"label": "naive", "ai": flops / naive.dram_bytes, "flops_per_s": flops / naive.time_s},
            {"label": "optimized", "ai": flops / optimized.dram_bytes, "flops_per_s": flops / optimized.time_s}]},
    }

    # The views read footprints the pipeline computes; a hand-built Result computes them the same way.
    return Result(program=program, target=target, before=before, library=before, after=after, report=report,
                  versions={"top1": after}, footprints=kernel_footprints(after, target))


# --------------------------------------------------------------------------- static HTML

from autocomp_jupyter import ui  # noqa: E402
from autocomp_jupyter.ui.graph import have_dot, plan_dot  # noqa: E402
from autocomp_jupyter.ui.roofline import roofline_data, roofline_svg  # noqa: E402


def ipython_shell():
    """The process-wide IPython test shell (started on first use, shared by test modules)."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.testing import globalipapp

    globalipapp.start_ipython()  # returns None after the first call: ask the singleton
    return InteractiveShell.instance()




@pytest.fixture(scope="module")
def result():
    return make_result()


def sections(html: str) -> dict[str, str]:
    """{tab title: section HTML} of a static page; number cells read as plain <td>."""
    html = html.replace('<td class="autocomp-num">', "<td>")
    parts = re.split(r'<section class="autocomp-tab" data-tab="', html)[1:]
    return {p.split('"', 1)[0]: p for p in parts}


def test_static_html_has_every_tab_in_order(result):
    html = ui.static_html(result)
    assert list(sections(html)) == list(ui.TABS)


@pytest.mark.skipif(not have_dot(), reason="graphviz's dot is not installed")
def test_graph_tab_shows_before_and_after_svg_with_fused_cluster(result):
    graph = sections(ui.static_html(result))["Graph"]
    assert graph.count('<svg class="autocomp-graph"') == 2
    after = graph.split("autocomp-graph-after", 1)[1]
    assert "kernel C_D" in after and "fused by epilogue" in after
    assert "C (on chip)" in after


def test_graph_dot_boxes_only_fused_kernels(result):
    assert "cluster_C_D" in plan_dot(result.after, result.report)
    assert "cluster" not in plan_dot(result.before, result.report)


def test_tiles_tab_lists_loop_level_sizes_and_footprints(result):
    tiles = sections(ui.static_html(result))["Tiles"]
    assert "<th>VMEM</th><th>vregs</th>" in tiles
    row_i = re.search(r"<code>i</code></td><td>256</td><td><b>128</b></td><td><b>32</b></td>", tiles)
    assert row_i, tiles
    assert "autocomp-footprint" in tiles and "/ 16 MiB" in tiles


def test_schedule_tab_shows_loop_nests_before_and_after(result):
    sched = sections(ui.static_html(result))["Schedule"]
    before, after = sched.split("autocomp-nest-after")
    assert "for k in range(128)" in before
    assert "for i_VMEM in range(0, 256, 128):" in after


def test_profile_tab_flags_metrics_below_thresholds_and_draws_roofline(result):
    profile = sections(ui.static_html(result))["Profile"]
    bw = result.report["kernels"][0]["metrics"]["bw_util"]
    assert bw < 0.7  # the fixture's kernel is compute-bound: its bandwidth flag must show
    assert "autocomp-flag" in profile and "bw_util below the monitor threshold" in profile
    assert '<svg class="autocomp-roofline"' in profile
    assert profile.count('class="autocomp-point"') == 2
    for label in ("naive", "library", "optimized"):  # each plan's name explained on hover
        assert re.search(rf'<td><span class="autocomp-term" title="[^"]+">{label}</span></td>', profile)


def test_rules_tab_shows_fired_skipped_and_rollbacks_with_reasons(result):
    rules = sections(ui.static_html(result))["Rules"]
    assert "fired" in rules and "skipped" in rules and "rolled back" in rules
    assert "no conv2d in the program" in rules
    assert "skew broke dependence" in rules


def test_code_tab_says_not_available_when_codegen_is_missing(result, monkeypatch):
    def missing(lang):
        raise NotImplementedError("codegen lands later")

    monkeypatch.setattr(result, "code", missing)
    code = sections(ui.static_html(result))["Code"]
    assert "not available yet" in code


def test_unverified_result_says_so(result):
    bad = make_result()
    bad.report["verified"] = False
    assert "NOT VERIFIED" in ui.static_html(bad) and "Verification failed" in ui.static_html(bad)


def test_repr_html_is_the_static_page(result):
    assert result._repr_html_() == ui.static_html(result)


# --------------------------------------------------------------------------- roofline


def test_roofline_is_log_log_with_roof_and_points():
    data = {"peak_flops": 1e12, "dram_bw": 1e11, "compulsory_ai": 60.0,
            "points": [{"label": "naive", "ai": 0.5, "flops_per_s": 2e10},
                       {"label": "optimized", "ai": 40.0, "flops_per_s": 8e11}]}
    svg = roofline_svg(data, [{"label": "variant", "ai": 20.0, "flops_per_s": 5e11}])
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert 'class="autocomp-roof"' in svg and 'class="autocomp-compulsory"' in svg
    assert [m for m in re.findall(r'data-label="(\w+)"', svg)] == ["naive", "optimized", "variant"]
    assert ">1e-1<" in svg and ">1e2<" in svg  # decades on the x axis


def test_roofline_data_derived_when_report_lacks_it(result):
    r = make_result()
    del r.report["roofline"]
    data = roofline_data(r)
    assert data["peak_flops"] == r.target.peak_flops("f32")
    assert [p["label"] for p in data["points"]] == ["naive", "library", "optimized"]


# --------------------------------------------------------------------------- widget


def test_widget_has_seven_tabs_and_static_fallback(result):
    view = ui.widget(result)
    assert view.tabs.titles == ui.TABS
    bundle = view._repr_mimebundle_()
    assert bundle["application/vnd.autocomp.view+json"]["model_id"] == view.widget.model_id
    assert "application/vnd.jupyter.widget-view+json" not in bundle
    assert '<section class="autocomp-tab" data-tab="Tune">' in bundle["text/html"]


def test_slider_move_changes_the_displayed_metric(result):
    view = ui.widget(result)
    tune = view.tune
    before = tune.metrics.value
    slider = tune.sliders[("k", "VMEM")]
    slider.value = 128
    assert tune.metrics.value != before
    assert "program time with this variant" in tune.metrics.value
    assert "legal" in tune.status.value and 'data-label="variant"' in tune.roofline.value


def test_illegal_choice_is_refused_in_one_line_and_the_last_legal_variant_stays():
    tune = ui.widget(make_result()).tune
    tune.background = False
    tune.set("tile k @ VMEM", 32)                     # a legal move first: the variant on screen
    legal_metrics, legal = tune.metrics.value, tune.last_legal
    assert "tile k @ VMEM 32" in tune.ab_a.options
    ev = tune.set("parallel k", True)                 # k is the matmul's reduction: a race
    assert ev["legal"] is False and ev["primitive"] == "parallel" and ev["loop"] == "k"
    line = tune.change.value
    assert line.count("<p") == 1 and "refused" in line and "parallel loop k" in line
    assert "flow dependence" in line and "reduction over k" in line
    # the control went back; the metrics, the badge, A/B and keep are the last legal variant's
    assert tune.widgets and next(w for w, c in tune.widgets.values() if c.label() == "parallel k").value is False
    assert tune.metrics.value == legal_metrics and tune.last_legal is legal and not tune.keep_button.disabled
    assert not any("parallel k" in name for name in tune.ab_a.options)
    assert tune.keep() == "manual1"
    assert "parallel" not in {s["primitive"] for s in tune.kept[0]["variant"]["trace"] if s.get("loop") == "k"}


def test_every_primitive_has_controls_from_its_decisions(result):
    from autocomp_jupyter.schedule import PRIMITIVES
    from autocomp_jupyter.schedule.space import decisions

    tune = ui.widget(result).tune
    schedule = result.after.schedule_of(tune.kernel)
    made = {c.primitive for c in tune.ctrls}
    offered = {d.primitive for d in decisions(schedule.kernel, schedule.levels)}
    assert made == offered and {"tile", "reorder", "parallel", "vectorize", "unroll", "skew", "reverse",
                                "compute_at"} <= made <= set(PRIMITIVES)
    kinds = {c.label(): c.kind for c in tune.ctrls}
    assert kinds["parallel i"] == "toggle" and kinds["unroll"] == "slider" and kinds["reorder VMEM"] == "dropdown"
    # the controls start at the schedule's own values: parallel i on, vectorize j
    assert next(c for c in tune.ctrls if c.label() == "parallel i").value is True
    assert tune.vectorize_picker.value == "j"
    with pytest.raises(KeyError, match="no control 'parallel q'"):
        tune.set("parallel q", True)


def test_a_new_primitive_gets_its_control_with_no_ui_code(result, monkeypatch):
    from dataclasses import dataclass

    from autocomp_jupyter.schedule import PRIMITIVES, Decision, Primitive
    from autocomp_jupyter.schedule.primitive import annotate

    @dataclass(frozen=True)
    class Prefetch(Primitive):
        """Prefetch `loop`'s next tile (a test primitive)."""
        loop: str
        name = "prefetch"
        rank = 7

        def rewrite(self, schedule):
            return annotate(schedule, prefetch=self.loop)

        @classmethod
        def decisions(cls, kernel, levels):
            return (Decision(cls.name, (), (None, *kernel.loop_names)),)

        @classmethod
        def step_for(cls, schedule, key, value):
            return None if value is None else {"primitive": cls.name, "loop": value}

    monkeypatch.setitem(PRIMITIVES, "prefetch", Prefetch)
    tune = ui.widget(result).tune
    ctrl = next(c for c in tune.ctrls if c.primitive == "prefetch")
    assert ctrl.kind == "dropdown" and ctrl.choices == (None, "i", "j", "k")
    widget = next(w for w, c in tune.widgets.values() if c is ctrl)
    assert "autocomp-tune-prefetch" in widget._dom_classes


def test_bad_control_values_are_refused_before_evaluation(result):
    tune = ui.widget(result).tune
    calls = []
    original = result.evaluate_variant
    result.evaluate_variant = lambda *a, **k: calls.append(k) or original(*a, **k)
    try:
        widget, ctrl = next((w, c) for w, c in tune.widgets.values() if c.label() == "unroll")
        tune._changed({"owner": widget, "new": 3, "old": ctrl.value})     # not a choice of unroll
    finally:
        result.evaluate_variant = original
    assert not calls and "refused" in tune.change.value and "not one of its choices" in tune.change.value
    assert ctrl.value == ctrl.initial


def test_order_picker_reevaluates_as_a_reorder_step(result):
    tune = ui.widget(result).tune
    tune.background = False
    tune.order_pickers["VMEM"].value = ("k", "i", "j")
    assert {"primitive": "reorder", "level": "VMEM", "order": ["k", "i", "j"]} in tune.last["trace"]
    assert "s.reorder(level=&#x27;VMEM&#x27;, order=[&#x27;k&#x27;, &#x27;i&#x27;, &#x27;j&#x27;])" in tune.change.value


def test_legal_variant_is_verified_in_the_background(result):
    tune = ui.widget(result).tune
    tune.set("tile i @ vregs", 8)
    assert tune.wait_verified(60) is True
    assert 'data-verified="yes"' in tune.verify_badge.value and "verified" in tune.verify_badge.value
    assert tune.made[-1]["verified"] is True


def test_a_failed_check_says_not_verified_with_the_reason(result, monkeypatch):
    from autocomp_jupyter import variants

    monkeypatch.setattr(variants, "verify_schedule", lambda *a, **k: "C_D differs from the interpreter at [0, 3]",
                        raising=False)
    import autocomp_jupyter.verify as verify

    monkeypatch.setattr(verify, "verify_schedule", lambda *a, **k: "C_D differs from the interpreter at [0, 3]")
    tune = ui.widget(result).tune
    tune.background = False
    tune.set("tile i @ vregs", 16)
    assert 'data-verified="no"' in tune.verify_badge.value and "NOT verified" in tune.verify_badge.value
    assert "differs from the interpreter at [0, 3]" in tune.verify_badge.value


def test_ab_offers_naive_library_optimized_and_made_variants_at_tune_0(result):
    tune = ui.widget(result).tune
    tune.background = False
    names = list(tune.ab_a.options)
    assert names[:2] == ["optimized", "top1"] and {"naive", "library"} <= set(names)
    tune.set("reverse i", True)
    assert "reverse i on" in tune.ab_b.options
    html = tune.compare("naive", "optimized")
    assert "compared as whole programs" in html and re.search(r"(naive|optimized) is [0-9.]+× faster than", html)


def test_keep_as_version_adds_to_versions_and_ab_table():
    r = make_result()
    tune = ui.widget(r).tune
    tune.sliders[("j", "VMEM")].value = 64
    tune.keep_button.click()
    assert "manual1" in r.versions
    assert r.versions["manual1"].schedule_of("C_D").tiles["j"]["VMEM"] == 64
    assert "<td>manual1</td>" in tune.versions.value and "<td>top1</td>" in tune.versions.value


def test_widget_without_evaluator_disables_tuning():
    r = make_result()
    r.evaluate_variant = None
    tune = ui.widget(r).tune
    assert all(s.disabled for s in tune.sliders.values())
    assert "not available" in tune.box.children[0].value


def test_progress_bar_appears_on_first_call_and_updates():
    from IPython.utils.capture import capture_output

    ipython_shell()  # display() needs a shell to publish to
    bar = ui.TuningProgress(widgets=True, min_interval_s=0)
    with capture_output() as out:
        bar(0, 100, None)
        bar(50, 100, 1e-3)
        bar(100, 100, 5e-4)
    assert len(out.outputs) == 1  # displayed once, then updated in place
    assert bar._bar.value == 100 and "best 500 µs" in bar._label.value
    bar.close()
    assert bar._box is None


# --------------------------------------------------------------------------- a real optimize() result

REAL_SOURCE = """input X: f32[1, 16, 16, 16]
param W: f32[16, 16, 3, 3]
param g: f32[16]
param b: f32[16]
Y = conv2d(X, W, stride=1, padding=1)
Z = batchnorm(Y, g, b)
R = relu(Z)
"""


def test_real_result_renders_statically_and_tunes():
    import autocomp_jupyter

    res = autocomp_jupyter.optimize(REAL_SOURCE, target="tpu", tune=0)
    html = ui.static_html(res)
    assert list(sections(html)) == list(ui.TABS)
    view = ui.widget(res)
    tune = view.tune
    before = tune.metrics.value
    (loop, level), slider = next((key, s) for key, s in tune.sliders.items() if not s.disabled)
    slider.value = next(v for _, v in slider.options if v != slider.value)
    assert tune.metrics.value != before and tune.last is not None


def test_kernel_picker_rebuilds_the_sliders_for_that_kernel():
    import autocomp_jupyter

    res = autocomp_jupyter.optimize(SOURCE, target="tpu", tune=0, passes=[])  # library plan: C, D apart
    tune = ui.widget(res).tune
    assert {loop for loop, _ in tune.sliders} == {"i", "j", "k"}
    other = [k.name for k in res.after.kernels if k.name != tune.kernel][0]
    tune.kernel_picker.value = other
    loops = set(res.after.schedule_of(other).kernel.loop_names)
    assert {loop for loop, _ in tune.sliders} == loops
    assert f"kernel {other}" in tune.metrics.value


def test_vectorize_picker_and_variant_loop_nest_with_the_real_evaluator():
    import autocomp_jupyter

    res = autocomp_jupyter.optimize(SOURCE, target="tpu", tune=0)
    tune = ui.widget(res).tune
    assert tune.vectorize_picker is not None  # the pipeline's evaluate_variant takes annotations
    choice = next(l for l in res.after.kernels[0].loop_names if l != tune.vectorize_picker.value)
    tune.vectorize_picker.value = choice
    assert tune.last["schedule"].annotations.get("vectorize") == choice
    assert "loop nest of this variant" in tune.metrics.value


# --------------------------------------------------------------------------- versions, A/B, words


def test_versions_table_tells_close_times_apart_and_marks_differences():
    from autocomp_jupyter.ui.compare import distinct_seconds

    assert distinct_seconds([1.1601e-3, 1.1604e-3, 1.16e-3]) == ["1.1601 ms", "1.1604 ms", "1.16 ms"]
    assert distinct_seconds([9.13e-7, 1.02e-6]) == ["913 ns", "1.02 µs"]
    import autocomp_jupyter

    res = autocomp_jupyter.optimize(SOURCE, target="tpu", tune=60, top=3, seed=0)
    tune = ui.widget(res).tune
    table = tune.versions.value
    assert 'class="autocomp-scroll"' in table  # scrolls inside the widget instead of being clipped
    names = [s["name"] for s in tune.specs]
    assert names[0] == "optimized" and len(names) >= 2
    times = re.findall(r'<td class="autocomp-num">([^<]+)</td><td class="autocomp-num">[^<]*×', table)
    assert len(set(times)) == len({s["time_s"] for s in tune.specs})  # distinct times read distinct
    differing = [s for s in tune.specs[1:] if s["kernels"] != tune.specs[0]["kernels"]]
    if differing:
        assert 'class="autocomp-diff"' in table


def test_ab_names_the_faster_version_with_its_margin():
    import autocomp_jupyter

    res = autocomp_jupyter.optimize(SOURCE, target="tpu", tune=0)
    tune = ui.widget(res).tune
    tune.sliders[("k", "VMEM")].value = 16  # a worse variant, kept as manual1
    slower = tune.last["time_s"]
    assert slower > res.report["optimized"]["time_s"]
    assert tune.keep() == "manual1"
    out = tune.compare("manual1", "optimized")
    gain = slower / res.report["optimized"]["time_s"]
    assert f"optimized is {gain:.2f}× faster than manual1" in out
    assert 'data-label="manual1"' in out and 'data-label="optimized"' in out  # both on the kernel roofline
    assert "autocomp-code-diff" in out or "same pseudo-kernel" in out
    assert "<td>manual1</td>" in tune.versions.value


def test_every_control_leaves_a_visible_change_line():
    import autocomp_jupyter

    res = autocomp_jupyter.optimize(SOURCE, target="tpu", tune=0)
    tune = ui.widget(res).tune
    assert tune.vectorize_picker.label != "" and "(none)" in [o[0] for o in tune.vectorize_picker.options]
    level = next(iter(tune.order_pickers))
    picker = tune.order_pickers[level]
    picker.value = next(v for _, v in picker.options if v and v != picker.value)    # another order
    assert f"reorder {level}" in tune.change.value and 'data-change="1"' in tune.change.value
    # each move is shown as the trace primitive it is, a call a user can paste back
    assert f"s.reorder(level={level!r}, order=" in tune.change.value.replace("&#x27;", "'")
    assert "s.tile(loop=" in tune.metrics.value.replace("&#x27;", "'")     # the variant's whole trace
    tune.vectorize_picker.value = ""
    assert tune.vectorize_picker.label == "(none)" and 'data-change="2"' in tune.change.value
    assert "(none)" in tune.change.value
    # the Tune roofline is the selected kernel's, with its variant point
    assert f"kernel {tune.kernel}" in tune.roofline.value and 'data-label="variant"' in tune.roofline.value


def test_terms_are_explained_and_no_gain_rules_are_not_fired():
    from autocomp_jupyter.ui.glossary import explain_why
    from autocomp_jupyter.ui.tables import gains_nothing

    why = explain_why("VMEM 1x16 (nxfxhxwxcxrxs); spill 0.000; moved 2.3 us, in_place 2.3 us, none 5.9 us")
    assert why.count('class="autocomp-term"') == 5 and "n × f × h × w × c × r × s" in why
    assert gains_nothing({"applied": True, "why": "parallel i, j: no dependence carried (isl); 0.9 -> 0.9 us"})
    assert not gains_nothing({"applied": True, "why": "4.0x less time (9.1 -> 2.3 us)"})
    r = make_result()
    r.report["rules"].append({"rule": "parallel_outer_C_D", "pass": "scheduling", "ops": ["C", "D"],
                              "applied": True, "why": "parallel i: 0.9 -> 0.9 us"})
    rules = sections(ui.static_html(r))["Rules"]
    assert "rules fired (2)" in rules and "fired · no modelled gain" in rules  # as res.summary() counts it
    assert "1 of them fired with no modelled gain" in rules
    profile = sections(ui.static_html(r))["Profile"]
    for term in ("bw_util", "occupancy", "pe_util", "spill"):
        assert re.search(rf'title="[^"]+">{term}</span>', profile), term
    import autocomp_jupyter

    real = autocomp_jupyter.optimize(SOURCE, target="tpu", tune=0)
    assert "--json" not in ui.static_html(real) and "--json" not in real.summary()
    assert "res.report['rules']" in real.summary() and "--json" in real.summary(cli=True)


def test_static_html_reads_well():
    html = ui.static_html(make_result())
    assert "text-align:left" in html and "monospace" in html
    sizes = [float(x) for x in re.findall(r'font-size="([\d.]+)"', html)]
    assert sizes and min(sizes) >= 11
    assert '<td class="autocomp-num">' in html  # numbers right-aligned, text left


def test_roofline_labels_do_not_overlap():
    from autocomp_jupyter.ui.roofline import FONT_PX, roofline_svg

    points = [{"label": name, "ai": 10.0 * (1 + i * 0.01), "flops_per_s": 1e12 * (1 + i * 0.01)}
              for i, name in enumerate(["naive", "library", "optimized", "variant"])]
    svg = roofline_svg({"peak_flops": 1e14, "dram_bw": 1e11, "points": points})
    boxes = []
    for x, y, anchor, text in re.findall(
            r'<text x="([\d.]+)" y="([\d.]+)" text-anchor="(start|end)" fill="#\w+">(\w+)</text></g>', svg):
        w = 0.6 * FONT_PX * len(text)
        x0 = float(x) - w if anchor == "end" else float(x)
        boxes.append((x0, float(y) - FONT_PX, x0 + w, float(y)))
    assert len(boxes) == 4
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)


# --------------------------------------------------------------------------- a whole network


def resnet_dsl(blocks=(2, 2, 2, 2), width=4, image=16, classes=10, bottleneck=False) -> str:
    """A ResNet as DSL text: conv → batchnorm → relu, basic (ResNet-18) or bottleneck
    (ResNet-50) residual blocks with projection shortcuts, global average pool, linear."""
    lines, count = [f"input x: f32[1, 3, {image}, {image}]"], [0]

    def fresh(base):
        count[0] += 1
        return f"{base}{count[0]}"

    def conv_bn(x, cin, cout, k, stride=1, relu=True):
        w, g, b, y, z = fresh("w"), fresh("g"), fresh("b"), fresh("conv"), fresh("bn")
        lines.extend([f"param {w}: f32[{cout}, {cin}, {k}, {k}]", f"param {g}: f32[{cout}]", f"param {b}: f32[{cout}]",
                      f"{y} = conv2d({x}, {w}, stride={stride}, padding={k // 2})", f"{z} = batchnorm({y}, {g}, {b})"])
        if not relu:
            return z
        r = fresh("relu")
        lines.append(f"{r} = relu({z})")
        return r

    x = conv_bn("x", 3, width, 3)
    pool = fresh("pool")
    lines.append(f"{pool} = maxpool2d({x}, kernel=2)")
    x, cin = pool, width
    for stage, n in enumerate(blocks):
        w = width * 2 ** stage
        out = w * 4 if bottleneck else w
        for i in range(n):
            stride = 2 if i == 0 and stage > 0 else 1
            if bottleneck:
                y = conv_bn(conv_bn(conv_bn(x, cin, w, 1), w, w, 3, stride), w, out, 1, relu=False)
            else:
                y = conv_bn(conv_bn(x, cin, w, 3, stride), w, w, 3, relu=False)
            skip = conv_bn(x, cin, out, 1, stride, relu=False) if (stride != 1 or cin != out) else x
            s, r = fresh("add"), fresh("relu")
            lines.extend([f"{s} = add({y}, {skip})", f"{r} = relu({s})"])
            x, cin = r, out
    gap, fw, fb, logits = fresh("gap"), fresh("fc_w"), fresh("fc_b"), fresh("logits")
    lines.extend([f"{gap} = global_avgpool({x})", f"param {fw}: f32[{cin}, {classes}]", f"param {fb}: f32[{classes}]",
                  f"{logits} = linear({gap}, {fw}, {fb})", f"output {logits}"])
    return "\n".join(lines) + "\n"


def network_result(**shape) -> Result:
    """A network's Result without the optimiser's search (fast): the naive plan before;
    after, each conv fused with its batchnorm (and relu) — the kernels fusion forms — with
    naive schedules. The report is the real one, built by report.build_report from the
    cost model's costs of these plans."""
    from autocomp_jupyter.baselines import textbook_plan
    from autocomp_jupyter.report import build_report

    target = load_target("tpu")
    program = parse(resnet_dsl(**shape), filename="resnet.acir")
    unfused = kernels_unfused(program)
    before = Plan(program, unfused, tuple(naive_schedule(k, target) for k in unfused), "naive")
    groups, taken = [], set()
    for op in program.ops:
        if op.name in taken:
            continue
        group = [op.name]
        while True:
            readers = [o for o in program.ops if program.op(group[-1]).output in o.inputs]
            if (len(readers) == 1 and readers[0].kind in ("batchnorm", "relu") and program.op(group[0]).kind == "conv2d"
                    and program.op(group[-1]).output not in program.outputs):
                group.append(readers[0].name)
            else:
                break
        taken.update(group)
        groups.append(group)
    kernels = tuple(Kernel.from_ops(program, g) for g in groups)
    after = Plan(program, kernels, tuple(naive_schedule(k, target) for k in kernels), "optimized")
    costs = {"naive": evaluate_program(before.schedules, target), "textbook": evaluate_program(
        textbook_plan(program, target).schedules, target), "library": evaluate_program(before.schedules, target),
        "optimized": evaluate_program(after.schedules, target)}
    fused = [{"rule": "conv_bn_relu", "pass": "fusion", "ops": list(k.ops), "applied": True, "why": "a chain"}
             for k in kernels if len(k.ops) > 1]
    report = build_report(program, target, costs, after, monitor={"bw_util": 0.7, "occupancy": 0.5},
                          gain_breakdown={"fusion": 1.0, "tiling": 1.0, "scheduling": 1.0}, rules=fused, rollbacks=[],
                          tuning={}, verified=True, seconds=0.0)
    return Result(program=program, target=target, before=before, library=before, after=after,
                  report=report.to_json(), typed_report=report, footprints=kernel_footprints(after, target))


@pytest.fixture(scope="module")
def resnet50():
    return network_result(blocks=(3, 4, 6, 3), bottleneck=True)


def test_network_blocks_end_where_one_tensor_carries_everything(resnet50):
    from autocomp_jupyter.ui.network import plan_blocks

    blocks = plan_blocks(resnet50.after, resnet50.before)
    kernels = [k for b in blocks for k in b.kernels]
    assert kernels == [k.name for k in resnet50.after.kernels]          # every kernel once, in order
    assert sorted(op for b in blocks for op in b.before_ops) == sorted(o.name for o in resnet50.program.ops)
    # ResNet-50: 16 residual blocks, the stem (conv, batchnorm, relu, maxpool) one more; the
    # classifier joins the last.
    assert len(blocks) == 17 and resnet50.program.op(blocks[0].ops[-1]).kind == "maxpool2d"
    assert all(resnet50.program.op(b.ops[-1]).kind in ("relu", "linear") for b in blocks[1:])
    assert max(len(b.ops) for b in blocks) <= 20


@pytest.mark.skipif(not have_dot(), reason="graphviz's dot is not installed")
def test_network_static_html_stays_readable_and_small(resnet50):
    html = ui.static_html(resnet50)
    n_ops = len(resnet50.program.ops)
    assert n_ops >= 170 and len(resnet50.after.kernels) >= 50
    assert len(html) < 1_500_000, len(html)
    graph = sections(html)["Graph"]
    assert graph.count('<details class="autocomp-block"') == 17
    assert 'class="autocomp-layer-search"' in graph and "17 of 17 blocks" in graph
    # Per block a before and an after graph, each small; weights are hidden, counted in labels.
    svgs = re.findall(r'<svg class="autocomp-graph".*?</svg>', graph, re.S)
    assert len(svgs) == 34
    assert max(s.count('class="node"') for s in svgs) <= 40
    drawn = set(re.findall(r"<title>op:(\w+)</title>", graph))
    assert drawn == {op.name for op in resnet50.program.ops}              # every op drawn (before and after)
    assert "<title>t:w1</title>" not in graph and "+ 2 params" in graph
    # the search text of a block names its ops' kinds
    assert re.search(r'data-search="[^"]*\bconv2d\b[^"]*\badd\b', graph)


def test_network_profile_lists_kernels_by_time_with_shares(resnet50):
    profile = sections(ui.static_html(resnet50))["Profile"]
    table = profile.split('autocomp-profile-table">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td>(\d+)</td><td><code>(\w+)</code>", table)
    assert [int(r[0]) for r in rows] == list(range(1, len(resnet50.after.kernels) + 1))
    times = {k["name"]: k["metrics"]["time_s"] for k in resnet50.report["kernels"]}
    ranked = [times[name] for _, name in rows]
    assert ranked == sorted(ranked, reverse=True)
    shares = [float(s) for s in re.findall(r"</span>([\d.]+)%", table)]
    assert sum(shares) == pytest.approx(100, abs=0.1 * len(shares))
    last_row = re.findall(r"<tr>(.*?)</tr>", table, re.S)[-1]
    cumulative = re.findall(r"<td[^>]*>(.*?)</td>", last_row, re.S)[6]
    assert cumulative == "100.0%" or len(rows) < len(resnet50.after.kernels)   # the column runs to 100%
    assert "time by op kind" in profile and "conv2d+batchnorm" in profile
    # the roofline: one small point per kernel, the five slowest named
    kernel_points = re.findall(r'<g class="autocomp-point autocomp-kernel-point" data-label="(\w+)">(.*?)</g>',
                               profile, re.S)
    assert len(kernel_points) == len(resnet50.after.kernels)
    assert sum(1 for _, body in kernel_points if "<text" in body) == 5


def test_network_graph_search_in_the_live_widget(resnet50):
    view = ui.widget(resnet50)
    layers = view.layers
    assert view.tabs.children[0] is layers.box
    assert layers.list.value.count('<details class="autocomp-block"') == 17
    add_block = next(b for b in layers.blocks if any(o.startswith("add") for o in b.ops))
    name = next(o for o in add_block.ops if o.startswith("add"))
    layers.search.value = name
    assert layers.list.value.count('<details class="autocomp-block"') == 1
    assert "1 of 17 blocks" in layers.list.value and " open>" in layers.list.value
    layers.search.value = "no-such-layer"
    assert "no layer matches" in layers.list.value
    # the static fallback beside the widget keeps the searchable list
    assert 'class="autocomp-layer-search"' in view._repr_mimebundle_()["text/html"]


def test_small_program_keeps_one_before_after_graph(result):
    graph = sections(ui.static_html(result))["Graph"]
    assert "autocomp-block" not in graph and "autocomp-layer-search" not in graph


def test_tiling_a_row_a_softmax_reduces_over_says_the_time_is_optimistic():
    import autocomp_jupyter

    res = autocomp_jupyter.optimize("input x: f32[64, 256]\ny = softmax(x)\noutput y\n", target="tpu", tune=0)
    tune = ui.widget(res).tune
    kernel = res.after.kernels[0]
    row = kernel.loop_names[-1]
    assert "autocomp-fission" not in tune.status.value          # the searches keep the row whole
    level = res.target.tiling_levels[0]
    tune.sliders[(row, level)].value = 64
    assert tune.last["legal"] and row in tune.last["note"] and "optimistic" in tune.status.value


def test_live_output_carries_the_standard_widget_view_type_beside_the_static_html(result, monkeypatch):
    monkeypatch.setenv("AUTOCOMP_WIDGET_VIEW", "1")  # an interactive frontend (its requests carry a cellId)
    view = ui.widget(result)
    bundle = view._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == view.widget.model_id
    assert bundle["application/vnd.autocomp.view+json"]["model_id"] == view.widget.model_id
    assert bundle["application/vnd.autocomp.view+json"]["kept"] == []
    assert '<section class="autocomp-tab" data-tab="Tune">' in bundle["text/html"]


def test_kept_versions_are_saved_in_the_output_and_restored_into_a_new_view(result):
    from autocomp_jupyter.ui import live

    view = ui.widget(result)
    tune = view.tune
    loop, level = next(iter(tune.sliders))
    slider = tune.sliders[(loop, level)]
    slider.value = slider.options[0][1]
    name = tune.keep()
    records = view._repr_mimebundle_()["application/vnd.autocomp.view+json"]["kept"]
    step = {"primitive": "tile", "loop": loop, "level": level, "size": slider.options[0][1]}
    assert [r["name"] for r in records] == [name] and step in records[0]["trace"]
    import json
    json.dumps(records)  # saved in the notebook: plain JSON
    assert f"<td>{name}</td>" in view._repr_mimebundle_()["text/html"]  # the static Tune tab lists it
    result.versions.pop(name)
    fresh = ui.widget(result)  # the cell run again: the labextension hands the saved records back
    assert live.restore_kept(fresh.widget.model_id, records) == [name]
    assert name in result.versions and name in [s["name"] for s in fresh.tune.specs]
    assert fresh.tune.kept[0]["time_s"] == records[0]["time_s"]
    assert live.restore_kept(fresh.widget.model_id, records) == []  # restored once
    assert live.restore_kept("no-such-model", records) == []


@pytest.fixture(scope="module")
def tuned_result():
    import autocomp_jupyter

    src = "input A: f32[256, 256]\ninput B: f32[256, 256]\nC = matmul(A, B)\nD = relu(C)\n"
    return autocomp_jupyter.optimize(src, target="tpu", tune=300, top=3, seed=0)


def test_ab_opens_on_a_version_that_differs_and_says_why(tuned_result):
    from autocomp_jupyter.ui.compare import ab_html, default_pair, same_plan, version_specs

    specs = version_specs(tuned_result)
    by_name = {s["name"]: s for s in specs}
    a, b = default_pair(specs)
    assert a == "optimized" and not same_plan(by_name[a], by_name[b])
    twins = [s["name"] for s in specs[1:] if same_plan(s, by_name["optimized"])]
    text = re.sub("<[^>]+>", " ", ab_html(tuned_result, by_name[a], by_name[b]))
    assert "Why: " in text and "bound by" in text and "changes most" in text
    if twins:  # the tuner's best is the optimised plan: said, not compared as if different
        assert "the same plan as optimized" in ui.static_html(tuned_result)
        same = re.sub("<[^>]+>", " ", ab_html(tuned_result, by_name["optimized"], by_name[twins[0]]))
        assert "are the same plan" in same and "Why:" not in same
    assert f"A/B: optimized vs {b}" in ui.static_html(tuned_result)
    view = ui.widget(tuned_result)
    assert (view.tune.ab_a.value, view.tune.ab_b.value) == (a, b)


def test_ab_highlights_exactly_what_differs():
    from autocomp_jupyter.ui.compare import kernel_detail_html

    a = {"tiles": {"i": {"VMEM": 128, "vregs": 24}}, "order_by_level": {"VMEM": ["i", "j", "k"], "vregs": ["k", "i", "j"]},
         "annotations": {"parallel": ["i", "j"], "unroll": 8, "vectorize": "j"}}
    b = {"tiles": {"i": {"VMEM": 128, "vregs": 24}}, "order_by_level": {"VMEM": ["i", "j", "k"], "vregs": ["j", "k", "i"]},
         "annotations": {"parallel": ("i", "j"), "unroll": 8, "vectorize": "j"}}
    for spec, other in ((a, b), (b, a)):
        html = kernel_detail_html(spec, other)
        marked = re.findall(r'<mark class="autocomp-diff"[^>]*>([^<]*)</mark>', html)
        assert marked == [" ".join(spec["order_by_level"]["vregs"])], marked  # the vregs order, nothing else
    assert "<mark" not in kernel_detail_html(a, None)


def test_short_kernel_names_for_long_ones_full_names_on_hover():
    from autocomp_jupyter.ui.names import MAX_NAME, kernel_labeller, kernel_labels

    r = make_result()
    assert all(k == v for k, v in kernel_labels(r).items())  # short DSL names stay
    long_name = "block_conv2_Conv_output_0_conv_block_conv2_Conv_block_Add_block_Relu_1"
    from dataclasses import replace
    first = r.after.kernels[0]
    r.after = replace(r.after, kernels=(replace(first, name=long_name),) + tuple(r.after.kernels[1:]))
    labels = kernel_labels(r)
    kind = r.after.program.op(first.ops[0]).kind
    assert labels[long_name] == f"{kind}_1" and len(labels[long_name]) <= MAX_NAME
    assert f'title="{long_name}"' in kernel_labeller(r)(long_name)


def test_rules_tab_says_what_a_rolled_back_tiling_kept_and_moves_explain_no_change(tuned_result):
    rules = sections(ui.static_html(tuned_result))["Rules"]
    tiles = sections(ui.static_html(tuned_result))["Tiles"]
    if any(e["pass"] == "tiling" for e in tuned_result.report["rollbacks"]):
        assert "keeps the tiles it had before this pass" in rules and "tiling pass was rolled back" in tiles
    text = re.sub("<[^>]+>", " ", rules)
    assert not re.search(r"\d us\b", text) and re.search(r"\d µs\b", text)  # one spelling: µs
    tune = ui.widget(tuned_result).tune
    if tune.vectorize_picker is not None:
        options = [v for _, v in tune.vectorize_picker.options]
        tune.vectorize_picker.value = next(v for v in options if v != tune.vectorize_picker.value)
        if "(unchanged" in tune.change.value:
            assert "does not price this primitive" in tune.change.value


def test_moving_a_control_back_and_forth_is_one_ab_entry_and_a_crash_is_a_refusal():
    r = make_result()
    tune = ui.widget(r).tune
    tune.background = False
    for value in (True, False, True):
        tune.set("reverse j", value)
    names = list(tune.ab_a.options)
    assert names.count("reverse j on") == 1 and "reverse j off" in names and "reverse j on (2)" not in names
    legal = tune.last_legal

    def broken(*args, **kwargs):
        raise RuntimeError("the evaluator is down")
    r.evaluate_variant = broken
    tune.set("tile i @ VMEM", 64)                     # raises inside: said in one line, nothing lost
    assert "refused" in tune.change.value and "the evaluator is down" in tune.change.value
    assert tune.last_legal is legal and tune.sliders[("i", "VMEM")].value == 128


def test_a_reloaded_view_is_displayed_again_under_its_display_id(result):
    from IPython.utils.capture import capture_output

    from autocomp_jupyter.ui import live

    ipython_shell()
    view = ui.widget(result)
    assert live.reattach(view.widget.model_id) is False      # never displayed with an id: nothing to reattach
    view.attach_display("d-1")
    with capture_output() as out:
        assert live.reattach(view.widget.model_id) is True
    assert out.outputs and "application/vnd.autocomp.view+json" in out.outputs[0].data
    assert live.reattach("no-such-model") is False
