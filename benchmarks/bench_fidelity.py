"""Cost-model fidelity on host, with cached measurements (not a test).

    python benchmarks/bench_fidelity.py [--remeasure] [--rounds N] [--cache PATH] [-v]

Builds 80 schedules: 30 GEMM 256^3 with random L2/register tiles and L2 loop order, 30
conv2d 32x32x28x28 3x3 with random L2 tiles and order (`w` vectorised), 20 elementwise /
reduction kernels (a row max then exp; bias + relu) with random row tiles and orders, and
measures each on one thread. Schedules that compile to the same C are one program: it is
measured once (keyed by the hash of the C, so a codegen change re-measures) and its
schedules tie; Spearman ranks ties at their average. On a busy machine one median-of-3 is
noisy (two such runs agreed only to Spearman ~0.5 at load average ~3 on 2 cores), so this
harness runs N rounds (default 3) over all programs, interleaved, each the fastest of 5
runs, and keeps the fastest per program (noise on a shared CPU only adds time). Measured
times are cached in a JSON file, so the model can be iterated on without re-running
anything. Prints Spearman (all / GEMM / conv / elementwise-reduction) of predicted vs
measured time, the median predicted / measured ratio, and with -v the worst-ranked schedules.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from bench_host_schedules import CONV, GEMM, plan_of, spearman  # noqa: E402
from autocomp_jupyter.accel.cost import evaluate  # noqa: E402
from autocomp_jupyter.accel.target import load_target  # noqa: E402
from autocomp_jupyter.dsl import parse  # noqa: E402


def build_plans():
    """The bench_host fidelity schedules (same rng stream), with a printable key each."""
    rng = np.random.default_rng(0)
    small = parse(GEMM.format(n=256))
    conv = parse(CONV)
    plans = []
    sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    while len(plans) < 30:
        ti, tj, tk = (int(rng.choice(sizes)) for _ in range(3))
        ri, rj = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 4, 8, 16]))
        order = tuple(str(x) for x in rng.permutation(["i", "j", "k"]))
        tiles = {"i": {"L2": ti, "registers": min(ri, ti)}, "j": {"L2": tj, "registers": min(rj, tj)}, "k": {"L2": tk}}
        plans.append((f"gemm {tiles} {order}", plan_of(small, tiles, order={"L2": order})))
    loops = ["n", "f", "c", "h", "w", "r", "s"]
    while len(plans) < 60:
        tiles = {"f": {"L2": int(rng.choice([4, 8, 16, 32]))}, "c": {"L2": int(rng.choice([4, 8, 16, 32]))},
                 "h": {"L2": int(rng.choice([2, 7, 14, 28]))}, "w": {"L2": int(rng.choice([4, 7, 14, 28]))}}
        order = tuple(str(x) for x in rng.permutation(loops))
        plans.append((f"conv {tiles} {order}", plan_of(conv, tiles, order={"L2": order}, annotations={"vectorize": "w"})))
    # elementwise / reduction: a row softmax-like pair (row max, then exp) and a bias + relu
    red = parse("input X: f32[512, 512]\nM[i] max= X[i, j]\nE[i, j] = exp(X[i, j] - M[i])\noutput E\n")
    ew = parse("input X: f32[512, 1024]\nparam b: f32[1024]\nY = bias_add(X, b)\nR = relu(Y)\n")
    while len(plans) < 80:
        prog = red if len(plans) % 2 else ew
        loops = ["i", "j"] if prog is red else ["i0", "i1"]
        tiles = {loops[0]: {"L2": int(rng.choice([1, 4, 16, 64, 512]))}}
        order = tuple(str(x) for x in rng.permutation(loops)) if prog is ew else tuple(loops)
        plans.append((f"elementwise/reduction {tiles} {order}", plan_of(prog, tiles, order={"L2": order})))
    return plans


def main(argv):
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--remeasure", action="store_true", help="ignore the cached times")
    ap.add_argument("--rounds", type=int, default=3, help="measuring rounds (the fastest is kept)")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "autocomp_fidelity_cache.json"),
                    help="JSON file of measured times, keyed by the generated C")
    ap.add_argument("-v", action="store_true", help="list the schedules by rank disagreement")
    args = ap.parse_args(argv)
    cache_path = args.cache
    cache = {}
    if os.path.exists(cache_path) and not args.remeasure:
        with open(cache_path) as f:
            cache = json.load(f)
    target = load_target("host")
    from autocomp_jupyter.codegen.c import generate_c
    # Measurements are keyed by the generated C (its program text and hash): schedules that
    # compile to the same code are one program, measured once, and tie.
    plans = [(key, f"{key.split()[0]} c:{hashlib.sha1(generate_c(plan).encode()).hexdigest()[:16]}", plan)
             for key, plan in build_plans()]
    predicted, measured = [], []
    rounds = args.rounds
    missing = list({code: plan for _, code, plan in plans if code not in cache}.items())
    if missing:
        from autocomp_jupyter import host
        for _ in range(rounds):
            for code, plan in missing:
                try:
                    _, timing = host.run_compiled(host.compile_plan(plan), host._inputs_for(plan, 0),
                                                  repeats=5, threads=1)
                    seconds = float(min(timing["times"])) if timing.get("times") else timing["median_s"]
                except host.HostError:
                    seconds = float("inf")
                cache[code] = min(cache.get(code, float("inf")), seconds)
        with open(cache_path, "w") as f:
            json.dump(cache, f, indent=0)
    for _, code, plan in plans:
        measured.append(cache[code])
        predicted.append(evaluate(plan.schedules[0], target).time_s)
    predicted, measured = np.array(predicted), np.array(measured)
    ok = np.isfinite(measured)
    family = np.array([key.split()[0] for key, _, _ in plans])
    print(f"distinct programs: {len({code for _, code, _ in plans})}")
    print(f"schedules: {ok.sum()} measured ({len(plans)} total); load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    line = f"Spearman all: {spearman(predicted[ok], measured[ok]):.3f} (goal >= 0.9)"
    for fam in ("gemm", "conv", "elementwise/reduction"):
        sel = ok & (family == fam)
        line += f"   {fam}: {spearman(predicted[sel], measured[sel]):.3f}"
    print(line + "   (conv goal >= 0.8)")
    ratio = predicted[ok] / measured[ok]
    print(f"median predicted / measured: {np.median(ratio):.2f} (within 2x: {np.mean((ratio > 0.5) & (ratio < 2)):.0%})")
    if args.v:
        rp = np.argsort(np.argsort(predicted))
        rm = np.argsort(np.argsort(measured))
        for i in np.argsort(-np.abs(rp - rm)):
            print(f"  rank pred {rp[i]:3d} meas {rm[i]:3d}  pred {predicted[i] * 1e3:8.3f} ms  "
                  f"meas {measured[i] * 1e3:8.3f} ms  {plans[i][0]} {plans[i][1].split()[-1]}")


if __name__ == "__main__":
    main(sys.argv[1:])
