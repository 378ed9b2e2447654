"""Throughput of the batch cost model, and how far the simulator and the model disagree.

    python benchmarks/bench_cost_model.py [--n 100000] [--max-steps 200000] [--batch-sizes 1,8,64,512]

Prints schedules/s of `evaluate_batch` on a 1024^3 GEMM per preset (one core, random
tiles and orders); what one call costs by the number of schedules it scores (a fixed cost
per call, then a little per schedule: why the searches score whole batches); then model vs
simulator time on library and hand schedules, and on the
fused (compute_at) kernels the pipeline makes of an inverted residual and of attention (at 1024 keys,
the online-softmax kernel with its key loop tiled).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from autocomp_jupyter import optimize  # noqa: E402
from autocomp_jupyter.accel.cost import kernel_model, library_schedule  # noqa: E402
from autocomp_jupyter.accel.sim import compare  # noqa: E402
from autocomp_jupyter.accel.target import load_target  # noqa: E402
from autocomp_jupyter.ir.schedule import Kernel, Schedule, kernels_unfused  # noqa: E402
from test_compute_at import inverted_residual  # noqa: E402
from test_cost import conv_program, gemm_program  # noqa: E402


def throughput(target_name: str, n: int, batch: int = 10_000, cpu: bool = False) -> float:
    """Schedules per wall-clock second (or per CPU second of this process with cpu=True,
    which a busy shared machine does not distort)."""
    clock = time.process_time if cpu else time.perf_counter
    target = load_target(target_name)
    kernel = kernels_unfused(gemm_program(1024, 1024, 1024))[0]
    model = kernel_model(kernel, target)
    rng = np.random.default_rng(0)
    L = model.n_levels
    tiles = 2 ** rng.integers(0, 11, size=(n, 3, L))
    orders = np.argsort(rng.random((n, L, 3)), axis=2)
    model.evaluate_batch(tiles[:16], orders[:16])  # warm-up
    start = clock()
    for lo in range(0, n, batch):
        model.evaluate_batch(tiles[lo:lo + batch], orders[lo:lo + batch])
    return n / (clock() - start)


def per_call(target_name: str, kernel: Kernel, size: int, calls: int = 20) -> float:
    """CPU seconds of one `evaluate_batch` call scoring `size` distinct random tilings of
    `kernel` (loop orders as the kernel's), median of `calls` calls."""
    target = load_target(target_name)
    model = kernel_model(kernel, target)
    rng = np.random.default_rng(size)
    extents = np.array([l.extent for l in kernel.loops])
    times = []
    for _ in range(calls + 1):
        outer = rng.integers(1, extents + 1, size=(size, len(extents)))
        tiles = np.stack([outer] + [np.minimum(outer, rng.integers(1, extents + 1, size=outer.shape))
                                    for _ in range(model.n_levels - 1)], axis=2)
        orders = np.repeat(np.arange(len(extents))[None, None], size, axis=0).repeat(model.n_levels, axis=1)
        start = time.process_time()
        model.evaluate_batch(tiles, orders)
        times.append(time.process_time() - start)
    return float(np.median(times[1:]))        # (the first call builds the model's tables)


def disagreement(max_steps: int) -> list[tuple]:
    rows = []
    cases = [
        ("tpu", Kernel.from_ops(gemm_program(512, 500, 256, relu=True), ["C", "R"])),
        ("gpu", Kernel.from_ops(gemm_program(512, 500, 256, relu=True), ["C", "R"])),
        ("npu", kernels_unfused(gemm_program(512, 500, 256))[0]),
        ("gemmini", Kernel.from_ops(gemm_program(256, 256, 256, relu=True), ["C", "R"])),
        ("gemmini", kernels_unfused(gemm_program(512, 500, 256))[0]),
        ("npu", kernels_unfused(conv_program(C=16, F=32, H=28, W=28))[0]),
        ("host", kernels_unfused(gemm_program(128, 128, 128))[0]),
    ]
    for target, kernel in cases:
        schedule = library_schedule(kernel, target)
        c = compare(schedule, target, max_steps=max_steps)
        rows.append((target, kernel.name, kernel.loops, c))
    for target, source in FUSED:          # compute_at chains, as the pipeline schedules them
        res = optimize(source, target=target, tune=0)
        for kernel, schedule in zip(res.after.kernels, res.after.schedules):
            if kernel.compute_at:
                rows.append((target, kernel.name, kernel.loops, compare(schedule, target, max_steps=max_steps)))
    return rows


# Fused kernels (issue 22): an inverted residual and attention as comprehensions.
INVERTED_RESIDUAL = inverted_residual(56)
ATTENTION = """input Q: f32[12, 128, 64]
input K: f32[12, 128, 64]
input V: f32[12, 128, 64]
S[b, i, j] += Q[b, i, d] * K[b, j, d]
M[b, i] max= S[b, i, j]
E[b, i, j] = exp((S[b, i, j] - M[b, i]) * 0.125)
Z[b, i] += E[b, i, j]
P[b, i, j] = E[b, i, j] / Z[b, i]
O[b, i, d] += P[b, i, j] * V[b, j, d]
output O
"""
# ... and attention at 1024 keys, where the key loop is tiled (flash_attention: online softmax)
ATTENTION_LONG = ATTENTION.replace("12, 128", "2, 1024")
FUSED = [(t, INVERTED_RESIDUAL) for t in ("npu", "gemmini", "tpu", "gpu")] + [(t, ATTENTION) for t in ("npu", "tpu")] \
    + [(t, ATTENTION_LONG) for t in ("gemmini", "npu", "tpu")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--max-steps", type=int, default=200_000)
    ap.add_argument("--batch-sizes", default="1,8,64,512", help="schedules per call for the per-call table")
    args = ap.parse_args()
    print(f"batch cost model, GEMM 1024x1024x1024, {args.n} random schedules, batches of 10000")
    for name in ("tpu", "gpu", "npu", "gemmini", "host"):
        print(f"  {name:8s} {throughput(name, args.n):12,.0f} schedules/s   "
              f"{throughput(name, args.n, cpu=True):12,.0f} per CPU second")
    sizes = [int(v) for v in args.batch_sizes.split(",")]
    kernels = {"matmul 128x256x512": kernels_unfused(gemm_program(128, 512, 256))[0],
               "conv 32ch 3x3 28x28": kernels_unfused(conv_program(C=32, F=32, H=28, W=28))[0]}
    print("\none call by schedules scored (CPU ms per call; us per schedule)")
    print(f"  {'target':8s} {'kernel':22s} " + " ".join(f"{f'n={n}':>18s}" for n in sizes))
    for target in ("tpu", "npu"):
        for label, kernel in kernels.items():
            cells = []
            for n in sizes:
                seconds = per_call(target, kernel, n)
                cells.append(f"{seconds * 1e3:7.2f} ms {seconds / n * 1e6:5.0f} us")
            print(f"  {target:8s} {label:22s} " + " ".join(f"{c:>18s}" for c in cells))
    print("\nsimulator vs model (library schedules)")
    print(f"  {'target':8s} {'kernel':8s} {'shape':22s} {'model s':>10s} {'sim s':>10s} {'error':>7s}")
    errors = []
    for target, name, loops, c in disagreement(args.max_steps):
        shape = "x".join(str(l.extent) for l in loops)
        errors.append(c["time_error"])
        note = " (sampled)" if c["sampled"] else ""
        print(f"  {target:8s} {name:8s} {shape:22s} {c['model_time_s']:10.3e} {c['sim_time_s']:10.3e} "
              f"{100 * c['time_error']:6.1f}%{note}")
    print(f"  median {100 * float(np.median(errors)):.1f}%, max {100 * max(errors):.1f}%")


if __name__ == "__main__":
    main()
