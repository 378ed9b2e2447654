"""Host benchmark (not a test): generated C vs numpy, and the cost model's rank fidelity.

    python benchmarks/bench_host.py [--quick]

1. GEMM 1024^3 f32, one thread: the best (measured) of the schedules the optimiser produces
   (`optimize(target="host", tune=N)`: the tuned plan and its top versions), numpy's matmul
   with one BLAS thread, the naive loop nest compiled with the same flags, and TVM's build of the same schedule where TVM is installed.
   Goal: generated >= 50% of numpy.
2. Cost-model fidelity: Spearman rank correlation between predicted
   (autocomp_jupyter.accel.cost.evaluate) and measured time over >= 50 schedules of GEMM and
   conv2d on host, one thread. Goal >= 0.8.
"""
from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from autocomp_jupyter import host  # noqa: E402
from autocomp_jupyter.accel.cost import evaluate  # noqa: E402
from autocomp_jupyter.accel.target import load_target  # noqa: E402
from autocomp_jupyter.dsl import parse  # noqa: E402
from autocomp_jupyter.ir.schedule import Kernel, Schedule  # noqa: E402
from autocomp_jupyter.result import Plan  # noqa: E402

GEMM = "input A: f32[{n}, {n}]\ninput B: f32[{n}, {n}]\nC = matmul(A, B)\n"
CONV = "input X: f32[1, 32, 28, 28]\nparam W: f32[32, 32, 3, 3]\nY = conv2d(X, W, stride=1, padding=1)\n"


def plan_of(program, tiles, order=None, annotations=None, levels=("L2", "registers")):
    kernel = Kernel.from_ops(program, [op.name for op in program.ops])
    schedule = Schedule(kernel, tiles={l: t for l, t in tiles.items() if l in kernel.loop_names},
                        order=order or {}, annotations=annotations or {}, levels=levels)
    return Plan(program, (kernel,), (schedule,))


def numpy_time(n, repeats=5):
    try:
        from threadpoolctl import threadpool_limits
        limiter = threadpool_limits(1)
    except ImportError:
        limiter = None
    a = np.random.rand(n, n).astype(np.float32)
    b = np.random.rand(n, n).astype(np.float32)
    a @ b
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t)
    del limiter
    return float(np.median(times))


def spearman(x, y):
    rx = np.argsort(np.argsort(x))
    ry = np.argsort(np.argsort(y))
    return float(np.corrcoef(rx, ry)[0, 1])


def main(quick: bool = False):
    target = load_target("host")
    n = 1024
    gemm = parse(GEMM.format(n=n))
    flops = 2 * n ** 3
    print(f"== GEMM {n}^3 f32, one thread ==")
    t_np = numpy_time(n)
    print(f"numpy matmul (1 BLAS thread): {t_np * 1e3:8.1f} ms  {flops / t_np / 1e9:6.1f} GFLOP/s")
    # the optimiser's own schedules: the tuned plan and its top versions, best measured wins
    import autocomp_jupyter as autocomp
    res = autocomp.optimize(GEMM.format(n=n), target="host", tune=100 if quick else 300, seed=0)
    candidates = {"tuned": res.after, **{k: v for k, v in res.versions.items()}}
    best = None
    for name, p in candidates.items():
        seconds = host.measured_time(p, repeats=3, threads=1)
        s = p.schedules[0]
        print(f"  {name}: tiles {s.tile_sizes()} order {dict(s.order)}: {seconds * 1e3:8.1f} ms")
        if best is None or seconds < best[0]:
            best = (seconds, name)
    best_plan = candidates[best[1]]
    report = host.measure_plan(best_plan, target, repeats=5, threads=1)
    t_gen = report["measured_time_s"]
    print(f"generated C (best schedule {best[1]}): {t_gen * 1e3:8.1f} ms  {flops / t_gen / 1e9:6.1f} GFLOP/s  "
          f"matches interpreter: {report['matches_interpreter']}")
    naive = plan_of(gemm, {}, levels=())
    t_naive = host.measured_time(naive, repeats=1, threads=1, timeout=600)
    print(f"naive loop nest, same flags: {t_naive * 1e3:8.1f} ms  {flops / t_naive / 1e9:6.1f} GFLOP/s")
    try:
        from autocomp_jupyter import tvm_bridge
        if tvm_bridge.available():
            from autocomp_jupyter.interp import random_inputs
            _, execute = tvm_bridge.to_tvm(best_plan)
            inputs = random_inputs(gemm)
            execute(inputs)
            ts = []
            for _ in range(3):
                t = time.perf_counter()
                execute(inputs)
                ts.append(time.perf_counter() - t)
            t_tvm = float(np.median(ts))
            print(f"TVM (same schedule, LLVM; includes numpy<->TVM copies): {t_tvm * 1e3:8.1f} ms  "
                  f"{flops / t_tvm / 1e9:6.1f} GFLOP/s")
        else:
            print("TVM: not installed")
    except Exception as err:  # the bench reports, it does not stop
        print(f"TVM: failed ({type(err).__name__}: {err})")
    print(f"ratio generated / numpy: {t_np / t_gen:.2f} (goal >= 0.50); generated vs naive: {t_naive / t_gen:.1f}x")

    print("\n== cost-model fidelity (Spearman, predicted vs measured, one thread) ==")
    rng = np.random.default_rng(0)
    small = parse(GEMM.format(n=256))
    conv = parse(CONV)
    plans = []
    sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    while len(plans) < (20 if quick else 30):
        ti, tj, tk = (int(rng.choice(sizes)) for _ in range(3))
        ri, rj = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 4, 8, 16]))
        order = tuple(rng.permutation(["i", "j", "k"]))
        plans.append(plan_of(small, {"i": {"L2": ti, "registers": min(ri, ti)}, "j": {"L2": tj, "registers": min(rj, tj)},
                                     "k": {"L2": tk}}, order={"L2": order}))
    loops = ["n", "f", "c", "h", "w", "r", "s"]
    while len(plans) < (40 if quick else 60):
        tiles = {"f": {"L2": int(rng.choice([4, 8, 16, 32]))}, "c": {"L2": int(rng.choice([4, 8, 16, 32]))},
                 "h": {"L2": int(rng.choice([2, 7, 14, 28]))}, "w": {"L2": int(rng.choice([4, 7, 14, 28]))}}
        order = tuple(rng.permutation(loops))
        plans.append(plan_of(conv, tiles, order={"L2": order}, annotations={"vectorize": "w"}))
    predicted, measured = [], []
    for p in plans:
        predicted.append(evaluate(p.schedules[0], target).time_s)
        measured.append(host.measured_time(p, repeats=3, threads=1))
    predicted, measured = np.array(predicted), np.array(measured)
    ok = np.isfinite(measured)
    g = slice(0, 20 if quick else 30)
    print(f"schedules: {ok.sum()} measured ({len(plans)} total)")
    print(f"Spearman all: {spearman(predicted[ok], measured[ok]):.3f}   GEMM only: "
          f"{spearman(predicted[g], measured[g]):.3f}   conv only: "
          f"{spearman(predicted[g.stop:], measured[g.stop:]):.3f}   (goal >= 0.8)")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
