"""The Tune tab's response times (not a test: prints a table). Run: python benchmarks/bench_tune_tab.py

For the tutorials' programs (GEMM + relu 128^3 and 256x128x256, conv + batchnorm + relu), on
each preset: building the tab's controls for the first kernel, then every move of every
control (each choice of each decision, one at a time from the kernel's own schedule) scored
as the tab scores it — the variant's trace replayed, priced and proved by isl
(`res.evaluate_variant(kernel, schedule=trace, verify=False)`) — and the check that follows
in the background (`variants.verify_variant`, the tiled run on the scaled twin). Goal: every
modelled answer within 150 ms (the issue's bound); the check is reported apart.

`first move`: as a student meets it — the tab built (`ui.widget(res).tune`, whose own schedule
starts its check in the background thread) and at once a tile slider moved (`tune.set`), the
modelled answer and the redraw timed while that check runs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import autocomp_jupyter as autocomp  # noqa: E402
from autocomp_jupyter import ui  # noqa: E402
from autocomp_jupyter.space import TileSpace  # noqa: E402
from autocomp_jupyter.ui.playground import controls, variant_trace  # noqa: E402
from autocomp_jupyter.heap import collector_paused, settle_heap  # noqa: E402
from autocomp_jupyter.variants import verify_variant  # noqa: E402

PROGRAMS = {
    "gemm_relu_128": "input A: f32[128, 128]\ninput B: f32[128, 128]\nC = matmul(A, B)\nD = relu(C)\n",
    "gemm_relu_256x128": "input A: f32[256, 128]\ninput B: f32[128, 256]\nC = matmul(A, B)\nD = relu(C)\noutput D\n",
    "conv_bn_relu": ("input X: f32[1, 16, 16, 16]\nparam W: f32[16, 16, 3, 3]\nparam g: f32[16]\nparam b: f32[16]\n"
                     "Y = conv2d(X, W, stride=1, padding=1)\nZ = batchnorm(Y, g, b)\nR = relu(Z)\n"),
}


def moves(res, max_choices: int):
    """(seconds per modelled answer, seconds per check, refused count) over every control's choices."""
    kernel = res.after.kernels[0].name
    base = res.after.schedule_of(kernel)
    ctrls = controls(base, TileSpace.of(base.kernel, res.target).slider)
    settle_heap()                          # as the tab does once built
    answers, checks, refused = [], [], 0
    for ctrl in ctrls:
        for choice in ctrl.choices[:max_choices]:
            if choice == ctrl.initial:
                continue
            ctrl.value = choice
            t0 = time.perf_counter()
            with collector_paused():       # as the tab moves: trace and answer with the collector paused
                ev = res.evaluate_variant(kernel, schedule=variant_trace(base, ctrls), verify=False)
            answers.append(time.perf_counter() - t0)
            if ev["legal"]:
                t0 = time.perf_counter()
                verify_variant(res.after, ev["schedule"])
                checks.append(time.perf_counter() - t0)
            else:
                refused += 1
        ctrl.value = ctrl.initial
    return len(ctrls), answers, checks, refused


def first_move(res) -> tuple[float, float]:
    """(seconds of the first slider move after the tab is built, of the move back): what a
    student waits for, with the tab's own check running in the background."""
    tune = ui.widget(res).tune
    ctrl = next(c for c in tune.ctrls if c.primitive == "tile" and len(c.choices) > 1)
    value = next(c for c in ctrl.choices if c != ctrl.initial)
    t0 = time.perf_counter()
    tune.set(ctrl.label(), value)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    tune.set(ctrl.label(), ctrl.initial)
    back = time.perf_counter() - t0
    tune.verifier.wait()
    return first, back


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="tpu,gpu,npu,gemmini")
    parser.add_argument("--max-choices", type=int, default=6, help="choices tried per control")
    parser.add_argument("--programs", default=",".join(PROGRAMS), help=f"of {', '.join(PROGRAMS)}")
    args = parser.parse_args()
    print(f"{'program':20} {'target':8} {'controls':>8} {'moves':>6} {'refused':>7} "
          f"{'answer median':>13} {'answer max':>10} {'check median':>12} {'check max':>9} {'first move':>10} "
          f"{'move back':>9}")
    worst = first_worst = 0.0
    for name in args.programs.split(","):
        src = PROGRAMS[name]
        for target in args.targets.split(","):
            res = autocomp.optimize(src, target=target, tune=0)
            first, back = first_move(res)
            first_worst = max(first_worst, first)
            n, answers, checks, refused = moves(res, args.max_choices)
            worst = max(worst, max(answers))
            ms = lambda xs, f: f"{f(xs) * 1e3:.1f} ms" if xs else "-"  # noqa: E731
            print(f"{name:20} {target:8} {n:8d} {len(answers):6d} {refused:7d} {ms(answers, statistics.median):>13} "
                  f"{ms(answers, max):>10} {ms(checks, statistics.median):>12} {ms(checks, max):>9} "
                  f"{first * 1e3:>7.1f} ms {back * 1e3:>6.1f} ms")
    print(f"\nslowest modelled answer: {worst * 1e3:.1f} ms (goal <= 150 ms)")
    print(f"slowest first move in the tab: {first_worst * 1e3:.1f} ms (goal <= 150 ms)")


if __name__ == "__main__":
    main()
