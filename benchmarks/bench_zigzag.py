"""The cost model against an external one: ZigZag (zigzag-dse, optional extra `zigzag`).

Both tools map the same layers onto ZigZag's bundled `tpu_like` accelerator — ZigZag from its
own inputs/hardware/tpu_like.yaml and inputs/mapping/tpu_like.yaml (`opt="latency"`),
autocomp from benchmarks/targets/tpu_like.yaml (the closest description its schema allows) —
and the tables show predicted cycles and energy side by side (energy also per memory level
on ZigZag's mapping), the mapping each picks and each one's search time. Run: `python benchmarks/bench_zigzag.py` (prints a note when ZigZag is absent).
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
        energy, latency, cmes = get_hardware_performance_zigzag(
            _zigzag_layer(kind, sizes), str(inputs / "hardware" / "tpu_like.yaml"),
            str(inputs / "mapping" / "tpu_like.yaml"), opt="latency", dump_folder=dump,
            loma_show_progress_bar=False)
    seconds = time.perf_counter() - started
    cme = cmes[0][1][0][0]
    temporal = {str(op): [[(str(d), int(n)) for d, n in level] for level in levels]
                for op, levels in cme.temporal_mapping.mapping_dic_stationary.items()}
    spatial = [(str(d), int(n)) for d, n in cme.spatial_mapping.spatial_loop_dim_size]
    return {"cycles": float(latency), "ideal": float(cme.ideal_cycle), "pj": float(energy),
            "pj_by_level": {**_zigzag_level_energy(cme), "MAC": float(cme.mac_energy)},
            "onloading": float(getattr(cme, "data_onloading_cycle", 0.0)),
            "temporal": temporal, "spatial": spatial,
            "mapping": f"spatial {cme.spatial_mapping}; temporal {cme.temporal_mapping}", "seconds": seconds}


# ZigZag's tpu_like memories -> the levels of benchmarks/targets/tpu_like.yaml.
LEVEL_NAME = {"rf_2B": "rf_O", "rf_128B": "rf_W", "sram_2MB": "SRAM", "dram": "DRAM"}
ENERGY_PARTS = ("rf_O", "rf_W", "SRAM", "DRAM", "MAC")


def _zigzag_level_energy(cme) -> dict[str, float]:
    """ZigZag's memory energy (pJ) per level, summed over the operands it serves."""
    out = {name: 0.0 for name in LEVEL_NAME.values()}
    hierarchy = cme.accelerator.memory_hierarchy
    for layer_op, per_level in cme.mem_energy_breakdown.items():
        levels = hierarchy.get_memory_levels(mem_op=cme.memory_operand_links.layer_to_mem_op(layer_op))
        for level, pj in zip(levels, per_level):
            out[LEVEL_NAME[level.name]] += float(pj)
    return out


# ZigZag's layer dimensions -> the loops of autocomp's matmul / conv2d kernels.
LOOP_OF = {"gemm": {"B": "i", "K": "j", "C": "k"},
           "conv": {"B": "n", "K": "f", "C": "c", "OY": "h", "OX": "w", "FY": "r", "FX": "s"}}
# Which ZigZag operand and memory level (its temporal mapping, innermost level first) bounds
# each of autocomp's tiling levels on tpu_like: SRAM = I's sram, rf_W = W's rf_128B, rf_O =
# O's rf_2B.
LEVEL_OF = {"SRAM": ("I", 0), "rf_W": ("W", 0), "rf_O": ("O", 0)}


def zigzag_schedule(kind: str, sizes, zz: dict):
    """ZigZag's chosen mapping as an autocomp Schedule on benchmarks/targets/tpu_like.yaml, so
    the two cost models can be compared on one mapping. A level's tile along a loop is the
    spatial unrolling times the temporal loops ZigZag keeps at or below the matching
    operand level (LEVEL_OF), nested inside the tile outside it; each level's loop order
    follows ZigZag's order (operand I lists every temporal loop) by each loop's outermost
    occurrence among the loops that iterate that level's tiles. ZigZag may split one
    dimension into several loops with others between (K 4, B 16, B 32, K 4): autocomp has one
    loop per dimension per level, which keeps the outer occurrence's place."""
    import autocomp_jupyter as ac
    from autocomp_jupyter.accel.target import load_target
    from autocomp_jupyter.dsl import parse
    from autocomp_jupyter.ir.schedule import Schedule, kernels_unfused

    target = load_target(str(TARGET))
    kernel = kernels_unfused(parse(_program(kind, sizes)))[0]
    names = LOOP_OF[kind]
    extents = {l.name: l.extent for l in kernel.loops}
    spatial = {names[d]: n for d, n in zz["spatial"]}
    levels = target.tiling_levels                     # outer -> inner
    tiles: dict[str, list[int]] = {}
    for loop, extent in extents.items():
        outer = extent
        per_level = []
        for lv in levels:
            op, idx = LEVEL_OF[lv]
            size = spatial.get(loop, 1)
            for level in zz["temporal"][op][:idx + 1]:
                for d, n in level:
                    if names[d] == loop:
                        size *= n
            outer = min(outer, size)
            per_level.append(outer)
        tiles[loop] = per_level
    order_seq = [(names[d], n) for level in zz["temporal"]["I"] for d, n in level]   # inner -> outer
    orders = {}
    for h, lv in enumerate(levels):
        cum = {loop: spatial.get(loop, 1) for loop in extents}
        where = {}
        for pos, (loop, n) in enumerate(order_seq):
            inside_parent = h == 0 or cum[loop] * n <= tiles[loop][h - 1]
            if cum[loop] >= tiles[loop][h] and inside_parent:
                where[loop] = pos          # iterates level-h tiles; the last seen is outermost
            cum[loop] *= n
        orders[lv] = tuple(sorted(extents, key=lambda l: -where.get(l, -1)))
    return Schedule(kernel, tiles={l: dict(zip(levels, t)) for l, t in tiles.items()}, order=orders,
                    levels=levels), target


def autocomp_on_zigzag_mapping(kind: str, sizes, zz: dict) -> dict:
    """autocomp's cost model on ZigZag's mapping: cycles, cold start and the bound."""
    from autocomp_jupyter.accel.cost import evaluate

    schedule, target = zigzag_schedule(kind, sizes, zz)
    c = evaluate(schedule, target)
    clock = target.clock_ghz * 1e9
    tiles = ", ".join(f"{loop} {'/'.join(str(v) for v in lv.values())}" for loop, lv in schedule.tiles.items())
    by_level = {m.name: c.bytes[m.name] * m.energy_pj_per_byte for m in target.memory}
    by_level["MAC"] = c.energy_j * 1e12 - sum(by_level.values())   # MACs and vector ops
    return {"cycles": c.cycles, "cold": c.limits.get("cold start", 0.0) * clock, "bound": c.bound,
            "pj": c.energy_j * 1e12, "pj_by_level": by_level,
            "mapping": f"tiles {tiles}; orders " + "; ".join(f"{lv} {' '.join(o)}" for lv, o in schedule.order.items())}


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
    return {"cycles": res.report["optimized"]["cycles"], "pj": res.report["optimized"]["energy_j"] * 1e12,
            "mapping": f"tiles {tiles}; order {' '.join(k['order'])}",
            "seconds": seconds, "bound": k["bound"]}


def table(tune: int = 0) -> list[dict]:
    rows = []
    for name, kind, sizes in LAYERS:
        z, a = run_zigzag(kind, sizes), run_autocomp(kind, sizes, tune)
        same = autocomp_on_zigzag_mapping(kind, sizes, z)
        rows.append({"layer": name, "zigzag_cycles": z["cycles"], "zigzag_ideal": z["ideal"],
                     "zigzag_onloading": z["onloading"], "autocomp_cycles": a["cycles"],
                     "ratio": a["cycles"] / z["cycles"], "zigzag_s": z["seconds"], "autocomp_s": a["seconds"],
                     "zigzag_mapping": z["mapping"], "autocomp_mapping": a["mapping"], "autocomp_bound": a["bound"],
                     "same_mapping_cycles": same["cycles"], "same_mapping_ratio": same["cycles"] / z["cycles"],
                     "same_mapping_cold": same["cold"], "same_mapping": same["mapping"],
                     "zigzag_pj": z["pj"], "autocomp_pj": a["pj"], "same_mapping_pj": same["pj"],
                     "zigzag_pj_by_level": z["pj_by_level"], "same_mapping_pj_by_level": same["pj_by_level"]})
    return rows


def markdown(rows: list[dict]) -> str:
    out = ["| layer | ZigZag cycles | ZigZag on-loading | autocomp cycles | autocomp / ZigZag | "
           "autocomp on ZigZag's mapping | ratio | its cold start | ZigZag search s | autocomp s | autocomp bound by |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r['layer']} | {r['zigzag_cycles']:,.0f} | {r['zigzag_onloading']:,.0f} | "
                   f"{r['autocomp_cycles']:,.0f} | {r['ratio']:.2f} | {r['same_mapping_cycles']:,.0f} | "
                   f"{r['same_mapping_ratio']:.2f} | {r['same_mapping_cold']:,.0f} | "
                   f"{r['zigzag_s']:.1f} | {r['autocomp_s']:.2f} | {r['autocomp_bound']} |")
    out += ["", "Energy (µJ): each tool's own mapping, then autocomp on ZigZag's mapping, and both by level "
            f"on that mapping ({' / '.join(ENERGY_PARTS)}).", "",
            "| layer | ZigZag | autocomp | autocomp / ZigZag | autocomp on ZigZag's mapping | ratio | "
            "ZigZag by level | autocomp by level |", "|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        zz, ours = r["zigzag_pj_by_level"], r["same_mapping_pj_by_level"]
        out.append(f"| {r['layer']} | {r['zigzag_pj'] / 1e6:,.1f} | {r['autocomp_pj'] / 1e6:,.1f} | "
                   f"{r['autocomp_pj'] / r['zigzag_pj']:.2f} | {r['same_mapping_pj'] / 1e6:,.1f} | "
                   f"{r['same_mapping_pj'] / r['zigzag_pj']:.2f} | "
                   f"{' / '.join(f'{zz[p] / 1e6:,.1f}' for p in ENERGY_PARTS)} | "
                   f"{' / '.join(f'{ours[p] / 1e6:,.1f}' for p in ENERGY_PARTS)} |")
    out.append("")
    for r in rows:
        out.append(f"- {r['layer']}: ZigZag {r['zigzag_mapping']} (ideal {r['zigzag_ideal']:,.0f}, "
                   f"on-loading {r['zigzag_onloading']:,.0f}); as autocomp tiles {r['same_mapping']}; "
                   f"autocomp's own {r['autocomp_mapping']}")
    return "\n".join(out)


def main() -> int:
    if not zigzag_available():
        print("ZigZag comparison skipped: zigzag-dse is not installed (pip install 'autocomp-jupyter[zigzag]').")
        return 0
    print(markdown(table()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
