"""The cost model against an external one: ZigZag (zigzag-dse, optional extra `zigzag`).

Both tools map the same layers onto ZigZag's bundled `tpu_like` accelerator — ZigZag from its
own inputs/hardware/tpu_like.yaml and inputs/mapping/tpu_like.yaml (`opt="latency"`),
autocomp from benchmarks/targets/tpu_like.yaml (the closest description its schema allows) —
and the table shows predicted cycles side by side, the mapping each picks and each one's
search time. Run: `python benchmarks/bench_zigzag.py` (prints a note when ZigZag is absent).
"""
from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET = ROOT / "benchmarks" / "targets" / "tpu_like.yaml"
# (name, kind, sizes): GEMM B x C -> K (M x K x N), ResNet-50 3x3 convs (K, C, OY, OX).
LAYERS = [
    ("gemm 1024^3", "gemm", (1024, 1024, 1024)),
    ("gemm 512^3", "gemm", (512, 512, 512)),
    ("gemm 256x1024x4096", "gemm", (256, 1024, 4096)),
    ("resnet50 conv2 3x3", "conv", (64, 64, 56, 56)),
    ("resnet50 conv4 3x3", "conv", (256, 256, 14, 14)),
]


def zigzag_available() -> bool:
    try:
        import zigzag.api  # noqa: F401
    except ImportError:
        return False
    return True


def _zigzag_layer(kind: str, sizes) -> list[dict]:
    prec = {"I": 8, "W": 8, "O": 16, "O_final": 8}
    if kind == "gemm":
        m, k, n = sizes
        return [{"id": 0, "name": "gemm", "operator_type": "Gemm", "equation": "O[b][k]+=W[k][c]*I[b][c]",
                 "loop_dims": ["B", "K", "C"], "loop_sizes": [m, n, k], "operand_precision": prec,
                 "operand_source": {"I": 0, "W": 0}}]
    kk, c, oy, ox = sizes
    return [{"id": 0, "name": "conv", "operator_type": "Conv",
             "equation": "O[b][k][oy][ox]+=W[k][c][fy][fx]*I[b][c][iy][ix]",
             "dimension_relations": ["ix=1*ox+1*fx", "iy=1*oy+1*fy"],
             "loop_dims": ["B", "K", "C", "OY", "OX", "FY", "FX"], "loop_sizes": [1, kk, c, oy, ox, 3, 3],
             "operand_precision": prec, "operand_source": {"I": 0, "W": 0}}]


def run_zigzag(kind: str, sizes) -> dict:
    import zigzag
    from zigzag.api import get_hardware_performance_zigzag

    inputs = Path(zigzag.__file__).parent / "inputs"
    logging.disable(logging.CRITICAL)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as dump:
        _, latency, cmes = get_hardware_performance_zigzag(
            _zigzag_layer(kind, sizes), str(inputs / "hardware" / "tpu_like.yaml"),
            str(inputs / "mapping" / "tpu_like.yaml"), opt="latency", dump_folder=dump,
            loma_show_progress_bar=False)
    seconds = time.perf_counter() - started
    cme = cmes[0][1][0][0]
    return {"cycles": float(latency), "ideal": float(cme.ideal_cycle),
            "onloading": float(getattr(cme, "data_onloading_cycle", 0.0)),
            "mapping": f"spatial {cme.spatial_mapping}; temporal {cme.temporal_mapping}", "seconds": seconds}


def _program(kind: str, sizes) -> str:
    if kind == "gemm":
        m, k, n = sizes
        return f"input A: i8[{m}, {k}]\nparam B: i8[{k}, {n}]\nC = matmul(A, B)\n"
    kk, c, oy, ox = sizes
    return (f"input X: i8[1, {c}, {oy + 2}, {ox + 2}]\nparam W: i8[{kk}, {c}, 3, 3]\n"
            "Y = conv2d(X, W, stride=1, padding=0)\n")


def run_autocomp(kind: str, sizes, tune: int = 0) -> dict:
    import autocomp_jupyter as ac

    started = time.perf_counter()
    res = ac.optimize(_program(kind, sizes), target=str(TARGET), tune=tune)
    seconds = time.perf_counter() - started
    k = res.report["kernels"][0]
    tiles = ", ".join(f"{loop} {'/'.join(str(v) for v in lv.values())}" for loop, lv in k["tiles"].items())
    return {"cycles": res.report["optimized"]["cycles"], "mapping": f"tiles {tiles}; order {' '.join(k['order'])}",
            "seconds": seconds, "bound": k["bound"]}


def table(tune: int = 0) -> list[dict]:
    rows = []
    for name, kind, sizes in LAYERS:
        z, a = run_zigzag(kind, sizes), run_autocomp(kind, sizes, tune)
        rows.append({"layer": name, "zigzag_cycles": z["cycles"], "zigzag_ideal": z["ideal"],
                     "zigzag_onloading": z["onloading"], "autocomp_cycles": a["cycles"],
                     "ratio": a["cycles"] / z["cycles"], "zigzag_s": z["seconds"], "autocomp_s": a["seconds"],
                     "zigzag_mapping": z["mapping"], "autocomp_mapping": a["mapping"], "autocomp_bound": a["bound"]})
    return rows


def markdown(rows: list[dict]) -> str:
    out = ["| layer | ZigZag cycles | autocomp cycles | autocomp / ZigZag | ZigZag search s | autocomp s | autocomp bound by |",
           "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r['layer']} | {r['zigzag_cycles']:,.0f} | {r['autocomp_cycles']:,.0f} | {r['ratio']:.2f} | "
                   f"{r['zigzag_s']:.1f} | {r['autocomp_s']:.2f} | {r['autocomp_bound']} |")
    out.append("")
    for r in rows:
        out.append(f"- {r['layer']}: ZigZag {r['zigzag_mapping']} (ideal {r['zigzag_ideal']:,.0f}, "
                   f"on-loading {r['zigzag_onloading']:,.0f}); autocomp {r['autocomp_mapping']}")
    return "\n".join(out)


def main() -> int:
    if not zigzag_available():
        print("ZigZag comparison skipped: zigzag-dse is not installed (pip install 'autocomp-jupyter[zigzag]').")
        return 0
    print(markdown(table()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
