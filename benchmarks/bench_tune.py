"""Benchmarks of the auto-tuner (not a test: prints tables). Run: python benchmarks/bench_tune.py

1. scoring: 1000 GEMM configurations through the batch cost model on one core (goal < 0.1 s);
2. search quality on a space small enough to enumerate (GEMM 256^3, tiles from divisors,
   every loop order at every level, annotations fixed): the tuner's best in <= 1000
   evaluations vs the exhaustive optimum (goal within 1%) and vs random search with the
   same budget (median over 10 seeds);
3. GEMM 1024^3 on tpu, gpu, npu: roofline_fraction after optimize(tune=1000) (goal >= 0.95),
   next to the rules alone and a long search (10000 configurations) as the model's ceiling,
   with the rules' max_spill_ratio and without it.

Options: --quick (fewer seeds, no long search), --target T (for part 2, default gemmini;
on npu this space is easy enough that random search also finds the optimum).
"""
from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import autocomp_jupyter as autocomp  # noqa: E402
from autocomp_jupyter.accel.cost import evaluate, evaluate_batch, kernel_model, naive_schedule  # noqa: E402
from autocomp_jupyter.accel.target import load_target  # noqa: E402
from autocomp_jupyter.dsl import parse  # noqa: E402
from autocomp_jupyter.ir.schedule import kernels_unfused  # noqa: E402
from autocomp_jupyter.passes import PassContext  # noqa: E402
from autocomp_jupyter.report import roofline_fraction  # noqa: E402
from autocomp_jupyter.space import TileSpace  # noqa: E402
from autocomp_jupyter.accel.search_space import SearchSpace  # noqa: E402
from autocomp_jupyter.tune import DEFAULT_MAX_SPILL, legal, search_kernel, tune_plan  # noqa: E402


def gemm(n: int) -> str:
    return f"input A: f32[{n}, {n}]\ninput B: f32[{n}, {n}]\nC = matmul(A, B)\n"


def table(headers, rows) -> str:
    cells = [[str(c) for c in r] for r in [headers] + rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths))
    return "\n".join([line(cells[0]), line(["-" * w for w in widths])] + [line(r) for r in cells[1:]])


# --------------------------------------------------------------------------- 1. scoring throughput


def bench_scoring(repeats: int = 7) -> list:
    kernel = kernels_unfused(parse(gemm(1024), "<gemm>"))[0]
    rows = []
    for name in ("npu", "tpu", "gpu", "gemmini"):
        target = load_target(name)
        rng = np.random.default_rng(0)
        L = len(target.tiling_levels)
        tiles = -np.sort(-(2 ** rng.integers(2, 11, size=(1000, 3, L))), axis=2)
        orders = np.argsort(rng.random((1000, L, 3)), axis=2)
        evaluate_batch(kernel, target, tiles[:8], orders[:8])   # compile the kernel model once
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            evaluate_batch(kernel, target, tiles, orders)
            times.append(time.perf_counter() - t0)
        rows.append([name, 1000, f"{min(times) * 1e3:.1f} ms", f"{statistics.median(times) * 1e3:.1f} ms",
                     "yes" if min(times) < 0.1 else "NO"])
    return rows


# --------------------------------------------------------------------------- 2. search quality


def spill_limit(schedule, target, max_spill: float = DEFAULT_MAX_SPILL) -> float:
    """The spill ratio the tuner allows from `schedule` (the rules' limit, or the
    schedule's own spill if larger)."""
    return SearchSpace.tuner(schedule, target, max_spill=max_spill).max_spill


def exhaustive(schedule, target, max_spill: float = DEFAULT_MAX_SPILL):
    """Every tiling from divisors (inner <= outer) x every order at every level, the
    schedule's annotations, within the tuner's spill limit: (best time, candidates)."""
    kernel = schedule.kernel
    limit = spill_limit(schedule, target, max_spill)
    model = kernel_model(kernel, target)
    _, _, parallel, vectorize = model.normalise(*model.schedule_arrays(schedule))
    L, D = len(target.tiling_levels), len(kernel.loops)
    per_loop = []
    sizes = TileSpace.of(kernel, target)          # the tuner's view, divisors only
    for d in range(D):
        ch = sizes.tuner(d, divisors_only=True)
        per_loop.append([c for c in itertools.product(ch, repeat=L) if list(c) == sorted(c, reverse=True)])
    tilings = np.array([np.array(t) for t in itertools.product(*per_loop)])          # [T, D, L]
    perms = list(itertools.permutations(range(D)))
    order_sets = np.array(list(itertools.product(perms, repeat=L)))                   # [O, L, D]
    best, count = np.inf, 0
    for orders in order_sets:
        cost = evaluate_batch(kernel, target, tilings, np.broadcast_to(orders, (len(tilings), L, D)),
                              np.broadcast_to(parallel[0], (len(tilings), D)),
                              np.broadcast_to(vectorize[0], (len(tilings),)))
        best = min(best, float(np.where(cost.spill_ratio <= limit + 1e-12, cost.time_s, np.inf).min()))
        count += len(tilings)
    return best, count


def random_search(schedule, target, budget: int, seed: int, max_spill: float = DEFAULT_MAX_SPILL) -> float:
    """The best of `budget` uniform samples of the same space (legal by construction:
    orders only, reductions reorderable, the schedule's parallel set); samples beyond the
    spill limit count against the budget (random search cannot know in advance)."""
    limit = spill_limit(schedule, target, max_spill)
    space = SearchSpace.tuner(schedule, target, divisors_only=True, tune_annotations=False)
    kernel = schedule.kernel
    model = kernel_model(kernel, target)
    _, _, parallel, vectorize = model.normalise(*model.schedule_arrays(schedule))
    rng = np.random.default_rng(seed)
    D, L = space.D, space.L
    tiles = np.empty((budget, D, L), dtype=np.int64)
    sizes = TileSpace.of(kernel, target)
    for d in range(D):
        ch = sizes.tuner(d, divisors_only=True)
        tiles[:, d, :] = ch[rng.integers(0, len(ch), size=(budget, L))]
    tiles = -np.sort(-tiles, axis=2)
    orders = np.argsort(rng.random((budget, L, D)), axis=2)
    cost = evaluate_batch(kernel, target, tiles, orders, np.broadcast_to(parallel[0], (budget, D)),
                          np.broadcast_to(vectorize[0], (budget,)))
    return float(np.where(cost.spill_ratio <= limit + 1e-12, cost.time_s, np.inf).min())


def bench_quality(target_name: str, seeds: int) -> tuple[list, dict]:
    target = load_target(target_name)
    program = parse(gemm(256), "<gemm256>")
    kernel = kernels_unfused(program)[0]
    start = naive_schedule(kernel, target)                  # search from scratch, not from the rules
    rules = autocomp.optimize(program, target=target, tune=0).after.schedules[0]
    t0 = time.perf_counter()
    optimum, size = exhaustive(start, target)
    t_exh = time.perf_counter() - t0
    rows = []
    summary = {}
    for label, begin in (("tuner from naive", start), ("tuner from rules", rules)):
        results, evals, secs = [], [], []
        for seed in range(seeds):
            t0 = time.perf_counter()
            best, schedule, n = search_kernel(begin, target, 1000, seed, divisors_only=True, tune_annotations=False)
            secs.append(time.perf_counter() - t0)
            assert legal(schedule)
            results.append(best)
            evals.append(n)
        summary[label] = statistics.median(results)
        rows.append([label, max(evals), f"{statistics.median(results) * 1e6:.3f} us",
                     f"{(statistics.median(results) / optimum - 1) * 100:.2f} %",
                     f"{(max(results) / optimum - 1) * 100:.2f} %", f"{statistics.median(secs):.2f} s"])
    randoms = [random_search(start, target, 1000, seed) for seed in range(seeds)]
    summary["random"] = statistics.median(randoms)
    rows.append(["random search", 1000, f"{statistics.median(randoms) * 1e6:.3f} us",
                 f"{(statistics.median(randoms) / optimum - 1) * 100:.2f} %",
                 f"{(max(randoms) / optimum - 1) * 100:.2f} %", ""])
    rows.append(["exhaustive", size, f"{optimum * 1e6:.3f} us", "0.00 %", "", f"{t_exh:.1f} s"])
    summary["optimum"] = optimum
    return rows, summary


# --------------------------------------------------------------------------- 3. roofline after tuning


def bench_roofline(long_configs: int | None) -> list:
    rows = []
    for name in ("tpu", "gpu", "npu"):
        t0 = time.perf_counter()
        res = autocomp.optimize(gemm(1024), target=name, tune=1000)
        secs = time.perf_counter() - t0
        rules = autocomp.optimize(gemm(1024), target=name, tune=0)
        row = [name, f"{rules.report['roofline_fraction']:.3f}", f"{res.report['roofline_fraction']:.3f}",
               res.report["tuning"]["configs_evaluated"], f"{secs:.1f} s"]
        if long_configs:
            ctx = PassContext(rules.program, rules.target, rules.rules, 0)
            for max_spill in (None, float("inf")):   # the rules' spill limit, then none
                best, _, tuning = tune_plan(rules.after, ctx, configs=long_configs, top=1, max_spill=max_spill)
                t = sum(evaluate(s, rules.target).time_s for s in best.schedules)
                spill = max(evaluate(s, rules.target).spill_ratio for s in best.schedules)
                row.append(f"{roofline_fraction(rules.program, rules.target, t):.3f} (spill {spill:.2g})")
        row.append("yes" if res.report["roofline_fraction"] >= 0.95 else "no")
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--target", default="gemmini")
    args = parser.parse_args()
    seeds = 3 if args.quick else 10

    print("1. scoring 1000 GEMM 1024^3 configurations with the batch cost model (one core)")
    print(table(["target", "configs", "best of 7", "median", "< 0.1 s"], bench_scoring()))
    print()
    print(f"2. GEMM 256^3 on {args.target}: tiles from divisors, all orders per level, "
          f"<= 1000 evaluations, {seeds} seeds")
    rows, s = bench_quality(args.target, seeds)
    print(table(["search", "evaluations", "median best", "median gap", "worst gap", "time/run"], rows))
    gap = s["tuner from naive"] / s["optimum"] - 1
    print(f"   tuner within 1% of the optimum: {'yes' if gap <= 0.01 else 'NO'} ({gap * 100:.2f} %); "
          f"better than random: {'yes' if s['tuner from naive'] < s['random'] else 'NO'}")
    print()
    long_configs = None if args.quick else 10000
    print("3. GEMM 1024^3: roofline_fraction (optimize(src, target=T, tune=1000))")
    headers = ["target", "rules only", "tuned (1000)", "configs", "optimize() time"]
    headers += ["long search (10000)", "long search, no spill limit"] if long_configs else []
    print(table(headers + [">= 0.95"], bench_roofline(long_configs)))


if __name__ == "__main__":
    main()
