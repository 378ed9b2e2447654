"""The cost model against an external one: ZigZag (zigzag-dse, optional extra `zigzag`).

Both tools map the same layers onto ZigZag's bundled `tpu_like` accelerator — ZigZag from its
own inputs/hardware/tpu_like.yaml and inputs/mapping/tpu_like.yaml (`opt="latency"`),
autocomp from benchmarks/targets/tpu_like.yaml (the closest description its schema allows) —
and the tables show predicted cycles and energy side by side (energy also per memory level
on ZigZag's mapping), the mapping each picks and each one's search time. Then the GEMMs'
stalls on a 32x32 array with 256 KiB, where their ports saturate (each tool's count on
ZigZag's mapping, our model against our simulator), and the sweep of 9 designs (PE array
8x8, 16x16, 32x32 by SRAM 256 KiB, 1 MiB, 4 MiB), once with both tools minimising latency and
once energy (`explore --objective` on our side, ZigZag's opt): totals side by side with Spearman
for latency and energy, each design's energy ratio, whether a bigger buffer lowers each tool's
energy, where each design's cycles go in each tool (compute, first tiles in, last tiles out,
stalls), and per layer ZigZag's mapping priced by our model over ZigZag's own price.

    python benchmarks/bench_zigzag.py [--only default|ports|sweep] [--objective latency|energy|both]

(prints a note when ZigZag is absent).
"""
from __future__ import annotations

import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

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


def _zigzag_inputs(tmp: Path, n: int, sram_kib: int | None) -> tuple[str, str]:
    """ZigZag's bundled tpu_like hardware and mapping files, with an n x n array (its spatial
    unrolling follows) and the SRAM resized (None: its own 2 MiB)."""
    import yaml
    import zigzag

    inputs = Path(zigzag.__file__).parent / "inputs"
    if n == 32 and sram_kib is None:
        return str(inputs / "hardware" / "tpu_like.yaml"), str(inputs / "mapping" / "tpu_like.yaml")
    hardware = yaml.safe_load((inputs / "hardware" / "tpu_like.yaml").read_text())
    hardware["operational_array"]["sizes"] = [n, n]
    if sram_kib is not None:
        hardware["memories"]["sram_2MB"]["size"] = sram_kib * 1024 * 8      # ZigZag sizes are bits
    mapping = yaml.safe_load((inputs / "mapping" / "tpu_like.yaml").read_text())
    for entry in mapping:  # the unrolling over the 32-wide dimensions follows the array
        entry["spatial_mapping"] = {d: [_unrolled(item, n) for item in dims]
                                    for d, dims in entry["spatial_mapping"].items()}
    hw, mp = tmp / "hw.yaml", tmp / "map.yaml"
    hw.write_text(yaml.safe_dump(hardware, sort_keys=False))  # memories innermost first
    mp.write_text(yaml.safe_dump(mapping, sort_keys=False))
    return str(hw), str(mp)


def _unrolled(item: str, n: int) -> str:
    """'K, 32' -> 'K, n': a spatial unrolling of ZigZag's mapping file over an n-wide array."""
    dim, size = (x.strip() for x in item.split(","))
    return f"{dim}, {n if int(size) == 32 else size}"


def run_zigzag(kind: str, sizes, n: int = 32, sram_kib: int | None = None, opt: str = "latency") -> dict:
    """ZigZag (`opt`: latency or energy) on one layer of tpu_like with an n x n array and the SRAM resized."""
    from zigzag.api import get_hardware_performance_zigzag

    logging.disable(logging.CRITICAL)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        hw, mp = _zigzag_inputs(Path(tmp), n, sram_kib)
        energy, latency, cmes = get_hardware_performance_zigzag(
            _zigzag_layer(kind, sizes), hw, mp, opt=opt, dump_folder=str(Path(tmp) / "dump"),
            loma_show_progress_bar=False)
    seconds = time.perf_counter() - started
    cme = cmes[0][1][0][0]
    temporal = {str(op): [[(str(d), int(n)) for d, n in level] for level in levels]
                for op, levels in cme.temporal_mapping.mapping_dic_stationary.items()}
    spatial = [(str(d), int(n)) for d, n in cme.spatial_mapping.spatial_loop_dim_size]
    return {"cycles": float(latency), "ideal": float(cme.ideal_cycle), "pj": float(energy),
            "pj_by_level": {**_zigzag_level_energy(cme), "MAC": float(cme.mac_energy)},
            "onloading": float(getattr(cme, "data_onloading_cycle", 0.0)),
            "offloading": float(getattr(cme, "data_offloading_cycle", 0.0)),
            "stall": float(cme.stall_slack_comb), "temporal_cycles": float(cme.ideal_temporal_cycle),
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
# Which ZigZag operands and memory levels (their temporal mappings, innermost level first)
# bound each of autocomp's tiling levels on tpu_like: SRAM = I's and O's sram, rf_W = W's
# rf_128B, rf_O = O's rf_2B.
LEVEL_OF = {"SRAM": (("I", 0), ("O", 1)), "rf_W": (("W", 0),), "rf_O": (("O", 0),)}
# The dimensions indexing each ZigZag operand: a level shared by two operands takes, along a
# loop, the tile of the operands the loop indexes (the others keep their tile whatever it
# iterates, ZigZag's stationarity).
RELEVANT = {"gemm": {"I": {"B", "C"}, "W": {"K", "C"}, "O": {"B", "K"}},
            "conv": {"I": {"B", "C", "OY", "OX", "FY", "FX"}, "W": {"K", "C", "FY", "FX"},
                     "O": {"B", "K", "OY", "OX"}}}


def zigzag_schedule(kind: str, sizes, zz: dict, target=None):
    """ZigZag's chosen mapping as an autocomp Schedule on benchmarks/targets/tpu_like.yaml, so
    the two cost models can be compared on one mapping. A level's tile along a loop is the
    spatial unrolling times the temporal loops ZigZag keeps at or below the matching
    operand level (LEVEL_OF; at a level two operands share, the smaller tile of the operands
    the loop indexes), nested inside the tile outside it; each level's loop order
    follows ZigZag's order (operand I lists every temporal loop) by each loop's outermost
    occurrence among the loops that iterate that level's tiles. ZigZag may split one
    dimension into several loops with others between (K 4, B 16, B 32, K 4): autocomp has one
    loop per dimension per level, which keeps the outer occurrence's place. `target`: the
    design (default benchmarks/targets/tpu_like.yaml)."""
    from autocomp_jupyter.accel.target import load_target
    from autocomp_jupyter.dsl import parse
    from autocomp_jupyter.ir.schedule import Schedule, kernels_unfused

    target = load_target(str(TARGET) if target is None else target)
    kernel = kernels_unfused(parse(_program(kind, sizes)))[0]
    names = LOOP_OF[kind]
    dims = {loop: d for d, loop in names.items()}
    extents = {l.name: l.extent for l in kernel.loops}
    spatial = {names[d]: n for d, n in zz["spatial"]}
    levels = target.tiling_levels                     # outer -> inner
    tiles: dict[str, list[int]] = {}
    for loop, extent in extents.items():
        outer = extent
        per_level = []
        for lv in levels:
            sizes_at = {}
            for op, idx in LEVEL_OF[lv]:
                size = spatial.get(loop, 1)
                for level in zz["temporal"][op][:idx + 1]:
                    for d, n in level:
                        if names[d] == loop:
                            size *= n
                sizes_at[op] = size
            indexed = [size for op, size in sizes_at.items() if dims[loop] in RELEVANT[kind][op]]
            outer = min(outer, min(indexed) if indexed else max(sizes_at.values()))
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


def autocomp_on_zigzag_mapping(kind: str, sizes, zz: dict, target=None) -> dict:
    """autocomp's cost model on ZigZag's mapping: cycles, cold start and the bound."""
    from autocomp_jupyter.accel.cost import evaluate

    schedule, target = zigzag_schedule(kind, sizes, zz, target)
    c = evaluate(schedule, target)
    clock = target.clock_ghz * 1e9
    tiles = ", ".join(f"{loop} {'/'.join(str(v) for v in lv.values())}" for loop, lv in schedule.tiles.items())
    by_level = {name: pj * 1e12 for name, pj in c.energy_by_level.items()}   # reads and writes at both ends
    by_level["MAC"] = c.energy_j * 1e12 - sum(by_level.values())   # MACs and vector ops
    return {"cycles": c.cycles, "cold": c.limits.get("cold start", 0.0) * clock, "bound": c.bound,
            "compute_cycles": c.compute_s * clock, "schedule": schedule,
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


# ------------------------------------------------------------------ the design sweep

ARRAYS = (8, 16, 32)
SRAM_KIB = (256, 1024, 4096)
DESIGNS = [(n, k) for n in ARRAYS for k in SRAM_KIB]       # explore's order: array outer, SRAM inner


def design_target(n: int, sram_kib: int):
    """benchmarks/targets/tpu_like.yaml with an n x n array and the SRAM resized, as `explore`
    builds it (the per-PE register files and the peak MACs follow the array)."""
    from autocomp_jupyter.dse import _design_target, target_mapping

    raw, filename = target_mapping(str(TARGET))
    return _design_target(raw, filename, {"compute.pe_rows": n, "compute.pe_cols": n,
                                          "memory.SRAM.size_bytes": f"{sram_kib}KiB"})


def sweep(objective: str = "latency") -> dict:
    """The 9 designs over LAYERS in both tools, both minimising `objective` (`explore
    --objective` on ours, ZigZag's opt), and ZigZag's mapping of every layer priced by our model."""
    from autocomp_jupyter.dse import explore

    sweeps = ["compute.pe_rows,compute.pe_cols=" + ",".join(f"{n}x{n}" for n in ARRAYS),
              "memory.SRAM.size_bytes=" + ",".join(f"{k}KiB" for k in SRAM_KIB)]
    targets = [design_target(n, k) for n, k in DESIGNS]
    rows = []          # one per (layer, design)
    seconds = {"autocomp": 0.0, "zigzag": 0.0}
    for name, kind, sizes in LAYERS:
        started = time.perf_counter()
        found = explore(_program(kind, sizes), str(TARGET), sweeps, objective=objective)
        seconds["autocomp"] += time.perf_counter() - started
        for d, (n, k) in enumerate(DESIGNS):
            point = found.points[d]
            assert point["valid"] and point["verified"], (name, n, k, point.get("reason"))
            z = run_zigzag(kind, sizes, n, k, opt=objective)
            seconds["zigzag"] += z["seconds"]
            same = autocomp_on_zigzag_mapping(kind, sizes, z, targets[d])
            rows.append({"layer": name, "design": (n, k), "cycles": point["time_s"] * 1e9,   # 1 GHz
                         "pj": point["energy_j"] * 1e12, "zigzag_cycles": z["cycles"], "zigzag_pj": z["pj"],
                         "same_cycles": same["cycles"], "same_pj": same["pj"],
                         **_cycle_parts(found.reports[d], z)})
        print(f"  {name}: done", file=sys.stderr, flush=True)
    return {"rows": rows, "seconds": seconds, "objective": objective, "points": len(DESIGNS) * len(LAYERS)}


def _cycle_parts(report: dict, z: dict) -> dict:
    """Where one layer's cycles go in each tool on its own mapping: ours the compute, the cold
    start (first input tiles in before any compute) and the drain (last output tiles out
    after it), the rest stalls; ZigZag's its temporal cycles, its stall (SS), on-loading and
    off-loading (with its systolic drain)."""
    lim = {}
    for kernel in report["kernels"]:
        for key, seconds in kernel["limits_s"].items():
            lim[key] = lim.get(key, 0.0) + seconds * 1e9
    return {"compute": max(v for key, v in lim.items() if key.startswith("compute")),
            "cold": lim.get("cold start", 0.0), "drain": lim.get("drain", 0.0),
            "zigzag_temporal": z["temporal_cycles"], "zigzag_stall": z["stall"],
            "zigzag_onloading": z["onloading"],
            "zigzag_offloading": z["cycles"] - z["temporal_cycles"] - z["stall"] - z["onloading"]}


def sweep_markdown(result: dict) -> str:
    from bench_dse import ranks, spearman

    rows = result["rows"]
    total = {key: [sum(r[key] for r in rows if r["design"] == d) for d in DESIGNS]
             for key in ("cycles", "pj", "zigzag_cycles", "zigzag_pj", "same_cycles")}
    rc, rz = ranks(total["cycles"]), ranks(total["zigzag_cycles"])
    ec, ez = ranks(total["pj"]), ranks(total["zigzag_pj"])
    seconds = result["seconds"]
    out = [f"Designs (PE array x SRAM) over the {len(LAYERS)} layers, {result['objective']} objectives "
           f"(autocomp `explore` {seconds['autocomp']:.0f} s, {seconds['autocomp'] / result['points']:.2f} s a "
           f"layer x design point; ZigZag {seconds['zigzag']:.0f} s)", "",
           "| array | SRAM | autocomp cycles | ZigZag cycles | rank a/z | autocomp µJ | ZigZag µJ | "
           "energy a/z | rank a/z |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for d, (n, k) in enumerate(DESIGNS):
        out.append(f"| {n}x{n} | {k} KiB | {total['cycles'][d]:,.0f} | {total['zigzag_cycles'][d]:,.0f} | "
                   f"{rc[d]:g}/{rz[d]:g} | {total['pj'][d] / 1e6:,.1f} | {total['zigzag_pj'][d] / 1e6:,.1f} | "
                   f"{total['pj'][d] / total['zigzag_pj'][d]:.2f} | {ec[d]:g}/{ez[d]:g} |")
    ratios = [total["pj"][d] / total["zigzag_pj"][d] for d in range(len(DESIGNS))]
    out += ["", f"Spearman, total latency: {spearman(total['cycles'], total['zigzag_cycles']):+.3f}; "
            f"total energy: {spearman(total['pj'], total['zigzag_pj']):+.3f}. "
            f"Energy autocomp / ZigZag per design: {min(ratios):.2f}-{max(ratios):.2f} "
            f"({sum(0.5 <= r <= 2.0 for r in ratios)} of {len(ratios)} within 2x). {_buffer_trend(total)}", "",
            _mapper_or_model(rows, total, result['objective']), "",
            *_parts_markdown(rows), "",
            "Like for like: ZigZag's mapping of each layer priced by autocomp's model, over ZigZag's own "
            "price (cycles / energy):", "",
            "| array | SRAM | " + " | ".join(name for name, _, _ in LAYERS) + " |",
            "|---|---|" + "---:|" * len(LAYERS)]
    for n, k in DESIGNS:
        cells = [f"{r['same_cycles'] / r['zigzag_cycles']:.2f} / {r['same_pj'] / r['zigzag_pj']:.2f}"
                 for r in rows if r["design"] == (n, k)]
        out.append(f"| {n}x{n} | {k} KiB | " + " | ".join(cells) + " |")
    lat = [r["same_cycles"] / r["zigzag_cycles"] for r in rows]
    en = [r["same_pj"] / r["zigzag_pj"] for r in rows]
    within = sum(abs(a - 1) <= 0.15 and abs(b - 1) <= 0.15 for a, b in zip(lat, en))
    out += ["", f"Like-for-like ratios: cycles {min(lat):.2f}-{max(lat):.2f}, energy {min(en):.2f}-{max(en):.2f}; "
            f"{within} of {len(rows)} layer x design points within 15% on both."]
    return "\n".join(out)


def _mapper_or_model(rows: list[dict], total: dict, objective: str) -> str:
    """Whether a difference in the latency ranks is the cost model's or the mapper's: ZigZag's
    own mappings priced by our model, ranked against ZigZag's price of them; how far latency
    moves with the buffer within each array in each tool (against the 1% within which the
    latency objective calls times equal); and on how many layer x design points our mapping
    is at least as good by the objective (faster, or less energy), by our model, as ZigZag's."""
    from bench_dse import spearman

    def spread(key):
        return ", ".join(f"{a}x{a} {100 * (max(row) / min(row) - 1):.1f}%"
                         for a, row in zip(ARRAYS, _per_array(total[key])))
    mine, theirs, better = (("cycles", "same_cycles", "fast") if objective == "latency" else
                            ("pj", "same_pj", "low in energy"))
    good = sum(r[mine] <= r[theirs] * (1 + 1e-9) for r in rows)
    return (f"Model or mapper: ZigZag's own mappings priced by our model rank the designs' latency with "
            f"Spearman {spearman(total['same_cycles'], total['zigzag_cycles']):+.3f} against ZigZag's price of them. Latency "
            f"spread over the buffer sizes within an array, autocomp: {spread('cycles')}; ZigZag: "
            f"{spread('zigzag_cycles')}. Our mapping is at least as {better} as ZigZag's (both priced by our "
            f"model) on {good} of {len(rows)} layer x design points.")


PARTS = ("compute", "cold", "drain", "zigzag_temporal", "zigzag_stall", "zigzag_onloading", "zigzag_offloading")


def _parts_markdown(rows: list[dict]) -> list[str]:
    """Where each design's cycles go in each tool (`_cycle_parts`), summed over the layers."""
    out = [f"Where the cycles go, over the {len(LAYERS)} layers on each tool's own mapping (autocomp: stall = "
           "cycles past compute, cold start and drain; ZigZag: off-loading includes its systolic drain):", "",
           "| array | SRAM | autocomp compute | cold start | drain | stall | ZigZag temporal | stall (SS) | "
           "on-loading | off-loading |", "|---|---|" + "---:|" * 8]
    for n, k in DESIGNS:
        mine = [r for r in rows if r["design"] == (n, k)]
        part = {key: sum(r[key] for r in mine) for key in PARTS + ("cycles",)}
        stall = part["cycles"] - part["compute"] - part["cold"] - part["drain"]
        stall = stall if abs(stall) >= 0.5 else 0.0        # rounding, not a stall
        cells = [part["compute"], part["cold"], part["drain"], stall] + [part[key] for key in PARTS[3:]]
        out.append(f"| {n}x{n} | {k} KiB | " + " | ".join(f"{v:,.0f}" for v in cells) + " |")
    return out


def _per_array(values: list) -> list[list]:
    """Per-design values (DESIGNS order) grouped by array, the buffer sizes in order."""
    return [[v for v, (n, _) in zip(values, DESIGNS) if n == a] for a in ARRAYS]


def _buffer_trend(total: dict) -> str:
    """Whether a bigger buffer lowers (or keeps) each tool's energy at every array size."""
    def trend(key):
        per_array = _per_array(total[key])
        lower = sum(all(b < a * (1 - 1e-9) for a, b in zip(row, row[1:])) for row in per_array)
        never_higher = sum(all(b <= a * (1 + 1e-9) for a, b in zip(row, row[1:])) for row in per_array)
        return f"{lower} of {len(ARRAYS)} arrays strictly lower, {never_higher} never higher"
    return f"A bigger buffer's energy, autocomp: {trend('pj')}; ZigZag: {trend('zigzag_pj')}."


# ------------------------------------------------------------------ saturated ports

GEMMS = [layer for layer in LAYERS if layer[1] == "gemm"]


def saturated_ports(n: int = 32, sram_kib: int = 256) -> list[dict]:
    """The GEMMs on one design (default 32x32 with 256 KiB, where their ports saturate): the
    stall each tool counts on ZigZag's mapping (cycles past the compute: ZigZag's stall,
    on- and off-loading and systolic drain; ours the same on the translated schedule), and
    our model against our simulator on ZigZag's mapping and on our own."""
    import autocomp_jupyter as ac
    from autocomp_jupyter.accel.cost import evaluate
    from autocomp_jupyter.accel.sim import simulate

    target = design_target(n, sram_kib)
    rows = []
    for name, kind, sizes in GEMMS:
        z = run_zigzag(kind, sizes, n, sram_kib)
        same = autocomp_on_zigzag_mapping(kind, sizes, z, target)
        own = ac.optimize(_program(kind, sizes), target=target, tune=0).after.schedules[0]
        c = evaluate(own, target)
        rows.append({"layer": name, "zigzag_stall": z["cycles"] - z["temporal_cycles"],
                     "zigzag_ss": z["stall"], "zigzag_on_off": z["onloading"] + z["offloading"],
                     "same_stall": same["cycles"] - same["compute_cycles"], "same_cycles": same["cycles"],
                     "zigzag_cycles": z["cycles"], "same_sim": simulate(same["schedule"], target).cycles,
                     "own_cycles": c.cycles, "own_stall": c.cycles - c.compute_s * 1e9, "own_bound": c.bound,
                     "own_sim": simulate(own, target).cycles})
    return rows


def saturated_markdown(rows: list[dict], n: int = 32, sram_kib: int = 256) -> str:
    out = [f"Stalls on {n}x{n} with {sram_kib} KiB (cycles past the compute), and model against simulator:", "",
           "| layer | ZigZag stall (SS + on/off-loading) | autocomp on ZigZag's mapping | ratio | its sim / model | "
           "autocomp's own mapping: stall | bound | sim / model |", "|---|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        out.append(f"| {r['layer']} | {r['zigzag_stall']:,.0f} ({r['zigzag_ss']:,.0f} + {r['zigzag_on_off']:,.0f}) | "
                   f"{r['same_stall']:,.0f} | {r['same_stall'] / r['zigzag_stall']:.2f} | "
                   f"{r['same_sim'] / r['same_cycles']:.3f} | {r['own_stall']:,.0f} | {r['own_bound']} | "
                   f"{r['own_sim'] / r['own_cycles']:.3f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("default", "sweep", "ports"), default=None,
                    help="one part: tpu_like as bundled, the 9-design sweep, or the saturated ports")
    ap.add_argument("--objective", choices=("latency", "energy", "both"), default="both",
                    help="the sweep's objective in both tools (default: both, one table each)")
    ap.add_argument("--out", default=None, metavar="FILE.md",
                    help="also write what is printed to this Markdown file (docs/results/zigzag.md)")
    args = ap.parse_args(argv)
    if not zigzag_available():
        print("ZigZag comparison skipped: zigzag-dse is not installed (pip install 'autocomp-jupyter[zigzag]').")
        return 0
    parts = []
    if args.only in (None, "default"):
        parts.append(markdown(table()))
    if args.only in (None, "ports"):
        parts.append(saturated_markdown(saturated_ports()))
    if args.only in (None, "sweep"):
        for objective in (("latency", "energy") if args.objective == "both" else (args.objective,)):
            parts.append(sweep_markdown(sweep(objective)))
    text = "\n\n".join(parts) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text("# autocomp and ZigZag side by side\n\nGenerated by one run of "
                                  f"`python benchmarks/bench_zigzag.py{' '.join([''] + (argv or sys.argv[1:]))}`.\n\n"
                                  + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
