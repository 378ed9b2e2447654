"""Design-space exploration of a whole network: seconds per design, and the table of designs.

Builds ResNet-50 (or another `bench_onnx.py` model) with onnx.helper (random weights, no
downloads), imports it once, and runs `autocomp_jupyter.explore` over a sweep of the target:
by default the npu's PE array (16x16, 32x32) by its SRAM (1 MiB, 4 MiB), rules only. Every
design runs the whole pipeline and is verified. Prints one row per design (time, energy, area,
EDP, limit fraction, what bounds it, whether it is on the Pareto front) and the wall seconds
per design; `--workers N` runs the designs on a local Dask cluster of N processes.

    python benchmarks/bench_dse.py
    python benchmarks/bench_dse.py --workers 2
    python benchmarks/bench_dse.py --model mobilenetv2 --target gemmini \\
        --sweep "compute.pe_rows,compute.pe_cols=8x8,16x16,32x32" --sweep "memory.scratchpad.size_bytes=128KiB,512KiB"
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_onnx import MODELS  # noqa: E402

from autocomp_jupyter.dse import explore  # noqa: E402
from autocomp_jupyter.onnx_import import from_onnx  # noqa: E402

DEFAULT_SWEEPS = ["compute.pe_rows,compute.pe_cols=16x16,32x32", "memory.SRAM.size_bytes=1MiB,4MiB"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    ap.add_argument("--target", default="npu")
    ap.add_argument("--sweep", action="append", default=None, metavar="PATH=V1,V2,...")
    ap.add_argument("--tune", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--cache", default=None, metavar="DIR")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    program = from_onnx(MODELS[args.model]())
    imported = time.perf_counter() - started
    times: list[float] = []
    last = [time.perf_counter()]

    def progress(done, total, point):
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now
        print(f"  design {done}/{total}: {times[-1]:.1f} s", file=sys.stderr, flush=True)

    res = explore(program, args.target, args.sweep or DEFAULT_SWEEPS, tune=args.tune, workers=args.workers,
                  cache=args.cache, progress=progress)
    paths = [p for s in res.sweeps for p in s.paths]
    front = set(res.pareto)
    print(f"{args.model} on {args.target} (tune {args.tune}, workers {args.workers or 'serial'}): "
          f"import {imported:.1f} s, {len(res.points)} designs in {res.seconds:.1f} s, "
          f"{res.seconds / max(1, len(res.points) - res.cached):.1f} s per design")
    header = ["#", *paths, "time_ms", "energy_mJ", "area_mm2", "edp_uJs", "limit", "verified", "pareto", "bound"]
    print(" | ".join(header))
    for i, p in enumerate(res.points):
        if not p["valid"]:
            print(" | ".join([str(i), *(str(p["params"][k]) for k in paths), "invalid: " + p["reason"].splitlines()[0]]))
            continue
        print(" | ".join([str(i), *(str(p["params"][k]) for k in paths), f"{p['time_s'] * 1e3:.3f}",
                          f"{p['energy_j'] * 1e3:.3f}", f"{p['area_mm2']:.2f}", f"{p['edp'] * 1e6:.4g}",
                          f"{p['limit_fraction']:.2f}", str(p["verified"]), "*" if i in front else "", p["bound"]]))
    return 0 if all(p["verified"] for p in res.points if p["valid"]) else 1


if __name__ == "__main__":
    sys.exit(main())
