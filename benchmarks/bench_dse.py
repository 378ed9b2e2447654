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
    python benchmarks/bench_dse.py --zigzag --out docs/results/dse_zigzag.md   # in ZigZag too (extra `zigzag`)

A 100-design sweep of an exported ResNet-50 (torchvision, rules only) on two Dask workers:

    python -m autocomp_jupyter.cli explore ~/.cache/autocomp-exports/tv__resnet50.onnx --target npu \
        --sweep "compute.pe_rows,compute.pe_cols=8x8,16x16,32x32,64x64,128x128" \
        --sweep "memory.SRAM.size_bytes=256KiB,512KiB,1MiB,2MiB,4MiB" \
        --sweep "memory.DRAM.bandwidth_gbps=12.8,25.6,51.2,102.4" --workers 2 --json

ran 100 valid designs, all verified, 69 on the Pareto front, in 654 s of wall time on an
otherwise idle 2-core machine (1,279 CPU s, 12.8 a design). Every design's searches read its
whole performance view, so what a design reuses from the ones before it is what does not read
the target (dse.py's docstring); the rest is the cost of one optimize (benchmarks/bench_speed.py
--explore).

`--zigzag` sweeps ZigZag's bundled tpu_like (PE array 16x16, 32x32, 64x64 by SRAM 512 KiB,
2 MiB, 8 MiB) over five ResNet-50 layers in both tools — ZigZag from its own hardware and
mapping YAML with the array, its spatial unrolling and the SRAM edited, autocomp from
benchmarks/targets/tpu_like.yaml through `explore` (its per-PE register files follow the
array) — sums each design's latency and energy over the layers, and prints both rankings and
their Spearman rank correlations, once with both tools minimising latency and once minimising
energy. The designs are compared by latency under the latency objectives and by energy under
the energy objectives, as benchmarks/bench_zigzag.py does.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_onnx import MODELS  # noqa: E402

from autocomp_jupyter.dse import explore  # noqa: E402
from autocomp_jupyter.onnx_import import from_onnx  # noqa: E402

DEFAULT_SWEEPS = ["compute.pe_rows,compute.pe_cols=16x16,32x32", "memory.SRAM.size_bytes=1MiB,4MiB"]


ARRAYS = (16, 32, 64)
SRAM_KIB = (512, 2048, 8192)
# (name, kind, sizes) as bench_zigzag.py writes layers: conv (K, C, OY, OX) 3x3, gemm (M, K, N).
ZIGZAG_LAYERS = [("conv2 3x3", "conv", (64, 64, 56, 56)), ("conv3 3x3", "conv", (128, 128, 28, 28)),
                 ("conv4 3x3", "conv", (256, 256, 14, 14)), ("conv5 3x3", "conv", (512, 512, 7, 7)),
                 ("conv2 1x1 256->64", "gemm", (3136, 256, 64))]


def _unrolled(item: str, n: int) -> str:
    """'K, 32' -> 'K, n': a spatial unrolling of ZigZag's mapping file over an n-wide array."""
    dim, size = (x.strip() for x in item.split(","))
    return f"{dim}, {n if int(size) == 32 else size}"


def zigzag_design(n: int, sram_kib: int, kind: str, sizes, opt: str = "latency") -> tuple[float, float]:
    """(cycles, pJ) of one layer on ZigZag's tpu_like with an n x n array and the SRAM resized,
    ZigZag's mapper minimising `opt` (latency or energy)."""
    import logging
    import tempfile

    import yaml
    import zigzag
    from bench_zigzag import _zigzag_layer
    from zigzag.api import get_hardware_performance_zigzag

    inputs = Path(zigzag.__file__).parent / "inputs"
    hardware = yaml.safe_load((inputs / "hardware" / "tpu_like.yaml").read_text())
    hardware["operational_array"]["sizes"] = [n, n]
    hardware["memories"]["sram_2MB"]["size"] = sram_kib * 1024 * 8      # ZigZag sizes are bits
    mapping = yaml.safe_load((inputs / "mapping" / "tpu_like.yaml").read_text())
    for entry in mapping:  # the unrolling over the 32-wide dimensions follows the array
        entry["spatial_mapping"] = {d: [_unrolled(item, n) for item in dims] for d, dims in entry["spatial_mapping"].items()}
    logging.disable(logging.CRITICAL)
    with tempfile.TemporaryDirectory() as tmp:
        hw, mp = Path(tmp) / "hw.yaml", Path(tmp) / "map.yaml"
        hw.write_text(yaml.safe_dump(hardware, sort_keys=False))  # memories innermost first
        mp.write_text(yaml.safe_dump(mapping, sort_keys=False))
        energy, latency, _ = get_hardware_performance_zigzag(_zigzag_layer(kind, sizes), str(hw), str(mp),
                                                             opt=opt, dump_folder=str(Path(tmp) / "dump"),
                                                             loma_show_progress_bar=False)
    return float(latency), float(energy)


def autocomp_designs(kind: str, sizes, objective: str = "latency") -> list[dict]:
    """One layer through `explore` on benchmarks/targets/tpu_like.yaml, the same 3 x 3 designs:
    the per-PE register files (`per_pe`: 2 B of outputs, 128 B of weights in each PE) and the
    peak MACs follow the array; every search minimising `objective`."""
    from bench_zigzag import TARGET, _program

    sweeps = ["compute.pe_rows,compute.pe_cols=" + ",".join(f"{n}x{n}" for n in ARRAYS),
              "memory.SRAM.size_bytes=" + ",".join(f"{k}KiB" for k in SRAM_KIB)]
    return explore(_program(kind, sizes), str(TARGET), sweeps, objective=objective).points


def ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank (Spearman's convention)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return cov / var if var else 1.0


def zigzag_side_by_side(out: str | None = None) -> int:
    """Both tools minimising latency, then both minimising energy: the designs ranked by latency
    under the latency objectives and by energy under the energy objectives (a design's energy is
    what its mapping costs when the mapping is chosen for energy), each with its Spearman.
    `out`: also write the tables as a Markdown page."""
    try:
        import zigzag.api  # noqa: F401
    except ImportError:
        print("ZigZag comparison skipped: zigzag-dse is not installed (pip install 'autocomp-jupyter[zigzag]').")
        return 0
    found = {objective: _side_by_side(objective) for objective in ("latency", "energy")}
    lines = []
    for objective, (ours, theirs, seconds) in found.items():
        lines += _side_by_side_lines(objective, ours, theirs, seconds)
    (lat, zlat, _), (en, zen, _) = found["latency"], found["energy"]
    lines.append(f"Designs ranked by latency (latency objectives): Spearman "
                 f"{spearman(lat['cycles'], zlat['cycles']):+.3f}; by energy (energy objectives): "
                 f"{spearman(en['pj'], zen['pj']):+.3f}.")
    print("\n".join(lines))
    if out:
        Path(out).write_text("# Design-space exploration side by side with ZigZag\n\n"
                             "Generated by one run of `python benchmarks/bench_dse.py --zigzag --out "
                             f"{out}`.\n\n" + "\n".join(lines) + "\n")
    return 0


DESIGNS = [(n, k) for n in ARRAYS for k in SRAM_KIB]           # explore's order: array outer, SRAM inner


def _side_by_side(objective: str) -> tuple[dict, dict, dict]:
    """(ours, ZigZag's, seconds): each design's cycles and pJ summed over ZIGZAG_LAYERS, both
    tools minimising `objective`."""
    ours = {"cycles": [0.0] * len(DESIGNS), "pj": [0.0] * len(DESIGNS)}
    theirs = {"cycles": [0.0] * len(DESIGNS), "pj": [0.0] * len(DESIGNS)}
    seconds = {"autocomp": 0.0, "zigzag": 0.0}
    for name, kind, sizes in ZIGZAG_LAYERS:
        started = time.perf_counter()
        points = autocomp_designs(kind, sizes, objective)
        seconds["autocomp"] += time.perf_counter() - started
        started = time.perf_counter()
        for d, (n, k) in enumerate(DESIGNS):
            assert points[d]["valid"] and points[d]["verified"], (name, n, k, points[d].get("reason"))
            ours["cycles"][d] += points[d]["time_s"] * 1e9              # tpu_like runs at 1 GHz
            ours["pj"][d] += points[d]["energy_j"] * 1e12
            cycles, pj = zigzag_design(n, k, kind, sizes, objective)
            theirs["cycles"][d] += cycles
            theirs["pj"][d] += pj
        seconds["zigzag"] += time.perf_counter() - started
        print(f"  {objective}: {name}: done", file=sys.stderr, flush=True)
    return ours, theirs, seconds


def _side_by_side_lines(objective: str, ours: dict, theirs: dict, seconds: dict) -> list[str]:
    out = [f"PE array x SRAM on tpu_like over {len(ZIGZAG_LAYERS)} ResNet-50 layers, both minimising {objective} "
           f"(autocomp {seconds['autocomp']:.0f} s, ZigZag {seconds['zigzag']:.0f} s)", "",
           "| array | SRAM | autocomp cycles | ZigZag cycles | rank a/z | autocomp µJ | ZigZag µJ | a/z | rank a/z |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    rc = [ranks(ours["cycles"]), ranks(theirs["cycles"]), ranks(ours["pj"]), ranks(theirs["pj"])]
    for d, (n, k) in enumerate(DESIGNS):
        out.append(f"| {n}x{n} | {k} KiB | {ours['cycles'][d]:,.0f} | {theirs['cycles'][d]:,.0f} | "
                   f"{rc[0][d]:g}/{rc[1][d]:g} | {ours['pj'][d] / 1e6:,.1f} | {theirs['pj'][d] / 1e6:,.1f} | "
                   f"{ours['pj'][d] / theirs['pj'][d]:.2f} | {rc[2][d]:g}/{rc[3][d]:g} |")
    return out + ["", f"Spearman by latency {spearman(ours['cycles'], theirs['cycles']):+.3f}, "
                      f"by energy {spearman(ours['pj'], theirs['pj']):+.3f}", ""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    ap.add_argument("--target", default="npu")
    ap.add_argument("--sweep", action="append", default=None, metavar="PATH=V1,V2,...")
    ap.add_argument("--tune", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--cache", default=None, metavar="DIR")
    ap.add_argument("--zigzag", action="store_true", help="the PE array x SRAM sweep side by side with ZigZag")
    ap.add_argument("--out", default=None, metavar="FILE.md", help="with --zigzag: also write the tables here")
    args = ap.parse_args(argv)
    if args.zigzag:
        return zigzag_side_by_side(args.out)
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
