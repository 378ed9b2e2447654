"""Rules alone (no tuning): how close the tiling and scheduling passes get.

    python benchmarks/bench_passes.py [--targets tpu,gpu,npu,...]

Goals (issue 5): GEMM 1024³ at roofline_fraction >= 0.9 on tpu, gpu and npu;
speedup_vs_library >= 1.5 on resnet_basic_block and mlp (tpu at least; every preset shown).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import autocomp_jupyter as autocomp
from autocomp_jupyter.accel.target import list_presets

ROOT = Path(__file__).resolve().parent.parent
CASES = [("gemm_relu", "roofline_fraction", 0.9), ("resnet_basic_block", "speedup_vs_library", 1.5),
         ("mlp", "speedup_vs_library", 1.5)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default=",".join(p for p in list_presets() if p != "host"))
    args = parser.parse_args()
    header = f"{'program':<20} {'target':<8} {'roofline':>9} {'vs lib':>7} {'vs naive':>9} " \
             f"{'time us':>10} {'kernels':>7} {'verified':>8} {'secs':>6}  goal"
    print(header)
    print("-" * len(header))
    for name, metric, goal in CASES:
        for target in args.targets.split(","):
            started = time.perf_counter()
            report = autocomp.optimize(str(ROOT / "examples" / f"{name}.acir"), target=target, tune=0).report
            seconds = time.perf_counter() - started
            met = report[metric] >= goal
            print(f"{name:<20} {target:<8} {report['roofline_fraction']:>9.3f} {report['speedup_vs_library']:>7.2f} "
                  f"{report['speedup_vs_naive']:>9.1f} {report['optimized']['time_s'] * 1e6:>10.1f} "
                  f"{len(report['kernels']):>7} {str(report['verified']):>8} {seconds:>6.2f}  "
                  f"{metric} >= {goal}: {'met' if met else 'NOT met'}")
            for rb in report["rollbacks"]:
                if rb["pass"] in ("tiling", "scheduling"):
                    print(f"{'':<29}rollback {rb['pass']} {rb['kernel']}: {rb['reason'][:110]}")


if __name__ == "__main__":
    main()
