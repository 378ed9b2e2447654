"""Layer fusion against an external scheduler: Stream (stream-dse, optional extra `stream`).

The same blocks of layers — a ResNet-50 bottleneck (conv2_x: 1x1 256->64, 3x3 64->64, 1x1
64->256 at 56x56), a MobileNetV2 inverted residual (1x1 24->144, 3x3 depthwise, 1x1 144->24
at 56x56) and a BERT-base FFN (128x768 -> 3072 -> 768) — are scheduled by Stream on a
one-core Stream architecture matched to the `npu` preset, and by autocomp on `npu` (rules
only, `optimize(..., tune=0)`). Stream runs twice: layer by layer (each layer one
computation node) and layer-fused (every layer split into computation nodes along the
rows — OY for convolutions, B for GEMMs — scheduled depth-first, intermediates kept on chip
when they fit). All tensors are 8-bit, as on Stream's own examples; activations (ReLU, GELU)
are left out on both sides, since Stream's workload holds only the contractions.

The matched architecture (`npu_core`): a 32x32 MAC array (K on one side, C on the other; the
depthwise layer's G on one side, as the npu's 32-lane vector unit runs it), per-PE
registers, a 32 KiB accumulator for outputs at 256 B/cycle, a 1 MiB SRAM for everything at
128 B/cycle, DRAM at 25.6 B/cycle behind it, 1 GHz; energy per byte and per MAC as the
preset's (0.1 / 0.5 / 40 pJ/B, 0.2 pJ/MAC; the per-PE registers cost nothing, as the preset
has no such level).

stream-dse on Python 3.11 is 0.0.8, which imports the zigzag-dse 2.x API (`zigzag.classes`),
while benchmarks/bench_zigzag.py needs zigzag-dse >= 3.9: the two cannot share a venv. Give
this bench an interpreter that has Stream with `--stream-python PATH` (or $STREAM_PYTHON);
it then runs Stream's half there (this file with `--worker`, JSON on stdout):

    python -m venv /tmp/stream-venv
    /tmp/stream-venv/bin/pip install 'stream-dse>=0.0.8' 'zigzag-dse<3' plotly pandas seaborn
    python benchmarks/bench_stream.py --stream-python /tmp/stream-venv/bin/python

Without Stream it prints what is missing and how to add it, and exits 0.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLOCK_HZ = 1e9          # npu's clock_ghz


# --------------------------------------------------------------------------- the blocks


def _conv(K, C, OY, OX, F, src, pad, depthwise=False, producer_channels="K") -> dict:
    """One layer in Stream's user-defined workload format (8-bit operands and outputs);
    `producer_channels`: the producing layer's output-channel dimension (G after a depthwise)."""
    channel = "G" if depthwise else "C"
    if depthwise:
        eq, dims = "O[b][g][oy][ox]+=W[g][fy][fx]*I[b][g][iy][ix]", {"B": 1, "G": K}
    else:
        eq, dims = "O[b][k][oy][ox]+=W[k][c][fy][fx]*I[b][c][iy][ix]", {"B": 1, "K": K, "C": C}
    layer = {"operator_type": "layer_on_core0", "equation": eq,
             "dimension_relations": ["ix=1*ox+1*fx", "iy=1*oy+1*fy"],
             "loop_dim_size": {**dims, "OY": OY, "OX": OX, "FY": F, "FX": F},
             "operand_precision": {"O": 8, "O_final": 8, "W": 8, "I": 8},
             "operand_source": {"W": [], "I": src}, "constant_operands": ["W"] + ([] if src else ["I"]),
             "memory_operand_links": {"O": "O", "W": "I2", "I": "I1"}, "padding": {"IY": (pad, pad), "IX": (pad, pad)}}
    if src:
        layer["operand_source_dimension_mapping"] = {"I": {"IX": "OX", "IY": "OY", channel: producer_channels}}
    return layer


def _gemm(M, K, N, src) -> dict:
    layer = {"operator_type": "layer_on_core0", "equation": "O[b][k]+=W[k][c]*I[b][c]",
             "loop_dim_size": {"B": M, "K": N, "C": K},
             "operand_precision": {"O": 8, "O_final": 8, "W": 8, "I": 8},
             "operand_source": {"W": [], "I": src}, "constant_operands": ["W"] + ([] if src else ["I"]),
             "memory_operand_links": {"O": "O", "W": "I2", "I": "I1"}}
    if src:
        layer["operand_source_dimension_mapping"] = {"I": {"C": "K"}}
    return layer


# name -> (Stream layers, Stream's outer-CN loops of the fused schedule, autocomp program)
BLOCKS = {
    "resnet50 bottleneck (conv2_x)": (
        {0: _conv(64, 256, 56, 56, 1, [], 0), 1: _conv(64, 64, 56, 56, 3, [0], 1), 2: _conv(256, 64, 56, 56, 1, [1], 0)},
        [("OY", "all")],
        """input  X: i8[1, 256, 56, 56]
param  W1: i8[64, 256, 1, 1]
param  W2: i8[64, 64, 3, 3]
param  W3: i8[256, 64, 1, 1]
A = conv2d(X, W1)
B = conv2d(A, W2, stride=1, padding=1)
C = conv2d(B, W3)
output C
"""),
    "mobilenetv2 inverted residual": (
        {0: _conv(144, 24, 56, 56, 1, [], 0), 1: _conv(144, 144, 56, 56, 3, [0], 1, depthwise=True),
         2: _conv(24, 144, 56, 56, 1, [1], 0, producer_channels="G")},
        [("OY", "all")],
        """input  X: i8[1, 24, 56, 56]
param  W1: i8[144, 24, 1, 1]
param  Wd: i8[144, 1, 3, 3]
param  W2: i8[24, 144, 1, 1]
E = conv2d(X, W1)
D = depthwise_conv2d(E, Wd, stride=1, padding=1)
P = conv2d(D, W2)
output P
"""),
    "bert-base ffn (seq 128)": (
        {0: _gemm(128, 768, 3072, []), 1: _gemm(128, 3072, 768, [0])},
        [("B", 16)],
        """input  X: i8[128, 768]
param  W1: i8[768, 3072]
param  W2: i8[3072, 768]
H = matmul(X, W1)
O = matmul(H, W2)
output O
"""),
}


# --------------------------------------------------------------------------- Stream's half


def stream_available() -> str | None:
    """None when Stream (with the zigzag API it imports) loads here, else why not."""
    try:
        import stream.api  # noqa: F401
        from stream.classes.hardware.architecture.accelerator import Accelerator  # noqa: F401
    except Exception as err:   # ImportError, or a zigzag-dse too new for it (ModuleNotFoundError)
        return f"{type(err).__name__}: {err}"
    return None


def npu_accelerator():
    """A one-core Stream accelerator matched to accel/presets/npu.yaml (module docstring)."""
    from stream.classes.hardware.architecture.accelerator import Accelerator
    from stream.inputs.examples.hardware.nocs.mesh_2d import get_2d_mesh
    from zigzag.classes.hardware.architecture.core import Core
    from zigzag.classes.hardware.architecture.memory_hierarchy import MemoryHierarchy
    from zigzag.classes.hardware.architecture.memory_instance import MemoryInstance
    from zigzag.classes.hardware.architecture.operational_array import MultiplierArray
    from zigzag.classes.hardware.architecture.operational_unit import Multiplier

    def mem(name, size_bytes, bytes_per_cycle, pj_per_byte, ports=1):
        bits = int(round(bytes_per_cycle * 8))
        return MemoryInstance(name=name, size=int(size_bytes * 8), r_bw=bits, w_bw=bits,
                              r_cost=pj_per_byte * bits / 8, w_cost=pj_per_byte * bits / 8, area=0,
                              r_port=ports, w_port=ports, rw_port=0, latency=1)

    rd = {"fh": "w_port_1", "tl": "r_port_1", "fl": None, "th": None}
    rw = {"fh": "w_port_1", "tl": "r_port_1", "fl": "w_port_1", "th": "r_port_1"}
    array = MultiplierArray(Multiplier([8, 8], 0.2, 1), {"D1": 32, "D2": 32})
    h = MemoryHierarchy(operational_array=array)
    # The input row broadcast along D1 holds 32 bytes: a depthwise layer (G on D1) needs a
    # different input per PE there, as the npu's vector lanes read one vector of 32.
    h.add_memory(memory_instance=mem("rf_I", 32, 32, 0.0), operands=("I1",), port_alloc=(rd,), served_dimensions={(1, 0)})
    h.add_memory(memory_instance=mem("rf_W", 1, 1, 0.0), operands=("I2",), port_alloc=(rd,), served_dimensions={(0, 0)})
    h.add_memory(memory_instance=mem("rf_O", 2, 2, 0.0, ports=2), operands=("O",),
                 port_alloc=({"fh": "w_port_1", "tl": "r_port_1", "fl": "w_port_2", "th": "r_port_2"},),
                 served_dimensions={(0, 1)})
    h.add_memory(memory_instance=mem("accumulator", 32 * 1024, 256, 0.1), operands=("O",), port_alloc=(rw,),
                 served_dimensions="all")
    h.add_memory(memory_instance=mem("SRAM", 1024 * 1024, 128, 0.5), operands=("I1", "I2", "O"),
                 port_alloc=(rd, rd, rw), served_dimensions="all")
    core = Core(0, array, h, [{"D1": ("K", 32), "D2": ("C", 32)}, {"D1": ("G", 32)}])

    off_array = MultiplierArray(Multiplier([8, 8], float("inf"), 0), {"D1": 1, "D2": 1})
    off = MemoryHierarchy(operational_array=off_array)
    off.add_memory(memory_instance=mem("DRAM", 10 ** 10, 25.6, 40.0), operands=("I1", "I2", "O"),
                   port_alloc=(rd, rd, rw), served_dimensions="all")
    offchip = Core(1, off_array, off)
    graph = get_2d_mesh([core], nb_rows=1, nb_cols=1, bandwidth=int(round(25.6 * 8)), unit_energy_cost=0,
                        offchip_core=offchip)
    return Accelerator("npu-matched", graph, offchip_core_id=1)


def run_stream(block: str, fused: bool) -> dict:
    """Stream's schedule of one block: latency (cycles), energy (pJ), search seconds."""
    import logging

    logging.disable(logging.CRITICAL)
    from stream.classes.stages import (GenerateCNWorkloadHybridStage, InterCoreMappingStage,
                                       IntraCoreMappingStage, UserDefinedModelParserStage)
    from zigzag.classes.stages import AcceleratorParserStage, MainStage

    layers, outer_cn, _ = BLOCKS[block]
    started = time.perf_counter()
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as d:
        # Stream imports its workload and mapping as modules by name.
        Path(d, "ac_stream_workload.py").write_text("workload = " + repr(layers) + "\n")
        Path(d, "ac_stream_mapping.py").write_text(
            "mapping = {'default': {'core_allocation': [0]}, 'layer_on_core0': {'core_allocation': [0]}}\n")
        sys.path.insert(0, d)
        os.chdir(d)                                   # it writes outputs/ next to the caller
        try:
            stage = MainStage(
                [AcceleratorParserStage, UserDefinedModelParserStage, GenerateCNWorkloadHybridStage,
                 IntraCoreMappingStage, InterCoreMappingStage],
                accelerator=npu_accelerator(), workload_path="ac_stream_workload", mapping_path="ac_stream_mapping",
                loma_lpf_limit=6, nb_ga_individuals=4, nb_ga_generations=1,   # one core: no allocation to search
                node_hw_performances_path=str(Path(d, "node_hw_performances.pickle")), plot_hof=False,
                plot_file_name=False, plot_full_schedule=False, plot_data_transfer=False,
                cn_define_mode=1, hint_loops=outer_cn if fused else [],
                scheduler_candidate_selection="memory", operands_to_prefetch=[])
            scme = stage.run()[0][0]
        finally:
            os.chdir(cwd)
            sys.path.remove(d)
            for name in ("ac_stream_workload", "ac_stream_mapping"):
                sys.modules.pop(name, None)
    offchip = sum(float(getattr(scme, name) or 0.0) for name in (
        "total_cn_offchip_memory_energy", "total_eviction_to_offchip_memory_energy",
        "total_sink_layer_output_offchip_memory_energy"))
    return {"cycles": float(scme.latency), "energy_pj": float(scme.energy), "dram_pj": offchip,
            "onchip_pj": float(scme.total_cn_onchip_energy or 0.0),
            "nodes": scme.workload.number_of_nodes(), "seconds": time.perf_counter() - started}


def stream_rows(blocks, python: str | None) -> dict:
    """{block: {"lbl": ..., "fused": ...}} from Stream, here or in `python` (a subprocess)."""
    out = {}
    for block in blocks:
        if python is None:
            out[block] = {"lbl": run_stream(block, False), "fused": run_stream(block, True)}
            continue
        proc = subprocess.run([python, str(Path(__file__).resolve()), "--worker", block],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"Stream worker ({python}) failed on {block!r}:\n{proc.stderr[-2000:]}")
        out[block] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


# --------------------------------------------------------------------------- autocomp's half


def run_autocomp(block: str) -> dict:
    sys.path.insert(0, str(ROOT))
    import autocomp_jupyter as ac

    started = time.perf_counter()
    res = ac.optimize(BLOCKS[block][2], target="npu", tune=0)
    rep = res.report
    pj = {m.name: m.energy_pj_per_byte for m in res.target.memory}
    return {"library_s": rep["library"]["time_s"], "library_j": rep["library"]["energy_j"],
            "optimized_s": rep["optimized"]["time_s"], "optimized_j": rep["optimized"]["energy_j"],
            "dram_bytes": rep["optimized"]["bytes"]["DRAM"], "kernels": len(rep["kernels"]),
            "dram_j": rep["optimized"]["bytes"]["DRAM"] * pj["DRAM"] * 1e-12,
            "onchip_mem_j": sum(b * pj[m] for m, b in rep["optimized"]["bytes"].items() if m != "DRAM") * 1e-12,
            "fused": [k.get("ops") for k in rep["kernels"]],
            "limit_fraction": rep.get("limit_fraction"), "seconds": time.perf_counter() - started}


def table(blocks, python: str | None) -> list[dict]:
    streams = stream_rows(blocks, python)
    rows = []
    for block in blocks:
        a, s = run_autocomp(block), streams[block]
        lbl_s, fused_s = s["lbl"]["cycles"] / CLOCK_HZ, s["fused"]["cycles"] / CLOCK_HZ
        rows.append({"block": block, "stream_lbl_s": lbl_s, "stream_lbl_j": s["lbl"]["energy_pj"] * 1e-12,
                     "stream_fused_s": fused_s, "stream_fused_j": s["fused"]["energy_pj"] * 1e-12,
                     "stream_nodes": s["fused"]["nodes"], "stream_fused_dram_j": s["fused"]["dram_pj"] * 1e-12,
                     "stream_fused_onchip_j": s["fused"]["onchip_pj"] * 1e-12, "stream_seconds": s["lbl"]["seconds"] + s["fused"]["seconds"],
                     **a, "time_ratio": a["optimized_s"] / fused_s,
                     "energy_ratio": a["optimized_j"] / (s["fused"]["energy_pj"] * 1e-12)})
    return rows


def markdown(rows: list[dict]) -> str:
    out = ["| block | Stream layer-by-layer s / µJ | Stream fused s / µJ | autocomp library s / µJ | "
           "autocomp optimised s / µJ | time ours / Stream fused | energy ours / Stream fused | kernels | "
           "Stream s | autocomp s |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['block']} | {r['stream_lbl_s']:.3e} / {1e6 * r['stream_lbl_j']:.1f} | "
                   f"{r['stream_fused_s']:.3e} / {1e6 * r['stream_fused_j']:.1f} | "
                   f"{r['library_s']:.3e} / {1e6 * r['library_j']:.1f} | "
                   f"{r['optimized_s']:.3e} / {1e6 * r['optimized_j']:.1f} | {r['time_ratio']:.2f} | "
                   f"{r['energy_ratio']:.2f} | {r['kernels']} | {r['stream_seconds']:.1f} | {r['seconds']:.2f} |")
    out += ["", "| block | DRAM µJ Stream fused / ours | on-chip µJ Stream fused (memories + MACs) / ours (memories) |",
            "|---|---:|---:|"]
    for r in rows:
        out.append(f"| {r['block']} | {1e6 * r['stream_fused_dram_j']:.1f} / {1e6 * r['dram_j']:.1f} | "
                   f"{1e6 * r['stream_fused_onchip_j']:.1f} / {1e6 * r['onchip_mem_j']:.1f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stream-python", default=os.environ.get("STREAM_PYTHON"),
                    help="an interpreter that has stream-dse (and the zigzag-dse 2.x it imports)")
    ap.add_argument("--blocks", nargs="+", choices=list(BLOCKS), default=list(BLOCKS))
    ap.add_argument("--worker", help=argparse.SUPPRESS)   # run Stream's half of one block, print JSON
    args = ap.parse_args(argv)
    if args.worker:
        if args.worker not in BLOCKS:
            print(f"bench_stream --worker: unknown block {args.worker!r} (blocks: {', '.join(BLOCKS)})", file=sys.stderr)
            return 2
        why = stream_available()
        if why:
            print(f"bench_stream --worker: Stream does not load in {sys.executable} ({why})", file=sys.stderr)
            return 2
        print(json.dumps({"lbl": run_stream(args.worker, False), "fused": run_stream(args.worker, True)}))
        return 0
    python = None
    why = stream_available()
    if why:
        if not args.stream_python:
            print("Stream comparison skipped: stream-dse does not load in this interpreter "
                  f"({why}). stream-dse 0.0.8 (the newest for Python 3.11) needs zigzag-dse < 3, which "
                  "bench_zigzag.py's zigzag-dse >= 3.9 excludes: install it in its own venv "
                  "(pip install 'autocomp-jupyter[stream]' there, or 'stream-dse>=0.0.8' 'zigzag-dse<3' plotly "
                  "pandas seaborn) and pass --stream-python PATH (or set STREAM_PYTHON).")
            return 0
        if not Path(args.stream_python).exists():
            print(f"bench_stream: --stream-python {args.stream_python}: no such interpreter", file=sys.stderr)
            return 2
        python = args.stream_python
    rows = table(args.blocks, python)
    print("Stream (layer-fused, depth-first) vs autocomp (rules only) on npu, 8-bit; s at 1 GHz, µJ")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
