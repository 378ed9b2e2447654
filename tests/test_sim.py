"""The tile-level simulator against the analytic model: same bytes, time within 10%."""
from pathlib import Path

import pytest

from autocomp_jupyter.accel.cost import evaluate, library_schedule
from autocomp_jupyter.accel.roofline import compulsory_bytes, roofline_fraction, roofline_plot_data
from autocomp_jupyter.accel.sim import compare, simulate
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.ir.schedule import Kernel, Schedule, kernels_unfused

from test_cost import conv_program, gemm_program, softmax_program


CASES = [
    # (target, program, fused ops, tiles, order)
    ("npu", gemm_program(256, 200, 128), None,
     {"i": {"SRAM": 128, "accumulator": 32}, "j": {"SRAM": 100, "accumulator": 32}, "k": {"SRAM": 128, "accumulator": 64}},
     {"SRAM": ("i", "j", "k")}),
    ("tpu", gemm_program(512, 500, 256, relu=True), ["C", "R"], None, None),
    ("gpu", gemm_program(512, 500, 256, relu=True), ["C", "R"], None, None),
    ("gemmini", gemm_program(256, 256, 256, relu=True), ["C", "R"], None, None),
    ("npu", conv_program(C=16, F=32, H=28, W=28), None,
     {"f": {"SRAM": 32, "accumulator": 32}, "h": {"SRAM": 14, "accumulator": 7}, "w": {"SRAM": 28, "accumulator": 14},
      "c": {"SRAM": 16, "accumulator": 16}},
     {"SRAM": ("f", "h", "w", "c", "r", "s")}),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_sim_agrees_with_model(case):
    target, program, fused, tiles, order = CASES[case]
    t = load_target(target)
    k = Kernel.from_ops(program, fused) if fused else kernels_unfused(program)[0]
    s = Schedule(k, tiles=tiles, order=order or {}, levels=t.tiling_levels) if tiles else library_schedule(k, t)
    c = compare(s, t)
    assert not c["sampled"]
    for level, b in c["model_bytes"].items():
        assert c["sim_bytes"][level] == pytest.approx(b, rel=0.01), level
    # Both charge the cold start (first input tiles before any compute): 10% everywhere
    # (the TPU GEMM was 18% apart before the model charged it).
    assert c["time_error"] < 0.10


TPU_LIKE = Path(__file__).resolve().parent.parent / "benchmarks" / "targets" / "tpu_like.yaml"


@pytest.mark.parametrize("tiles", [
    None,   # the textbook tiles
    {"i": {"SRAM": 256, "rf_W": 64, "rf_O": 8}, "j": {"SRAM": 256, "rf_W": 32, "rf_O": 32},
     "k": {"SRAM": 128, "rf_W": 128, "rf_O": 32}},
])
def test_sim_agrees_on_a_weights_only_level(tiles):
    # tpu_like: weights live in per-PE registers fed straight from DRAM (the SRAM holds
    # activations and outputs only). Simulator and model move the same bytes, B never
    # through the SRAM, and agree on time with the cold start charged by both.
    t = load_target(str(TPU_LIKE))
    k = kernels_unfused(gemm_program(256, 256, 256))[0]
    s = Schedule(k, tiles=tiles, levels=t.tiling_levels) if tiles else library_schedule(k, t)
    c = compare(s, t)
    assert not c["sampled"]
    for level, b in c["model_bytes"].items():
        assert c["sim_bytes"][level] == pytest.approx(b, rel=0.01), level
    assert c["time_error"] < 0.10


def test_a_single_tile_loads_before_it_computes():
    # One tile per level: nothing overlaps its loads, so time = the cold start (A and B in
    # from DRAM, then into the inner levels) + compute + writing C back — in both.
    t = load_target("npu")
    k = kernels_unfused(gemm_program(64, 64, 64))[0]
    s = Schedule(k, tiles={}, levels=t.tiling_levels)
    model = evaluate(s, t)
    assert model.limits["cold start"] >= 2 * 64 * 64 * 4 / t.dram_bandwidth
    assert model.time_s >= model.compute_s + model.limits["cold start"]
    assert compare(s, t)["time_error"] < 0.10


def test_sim_caps_huge_nests():
    t = load_target("npu")
    k = kernels_unfused(gemm_program(512, 512, 512))[0]
    s = Schedule(k, tiles={n: {"SRAM": 64, "accumulator": 32} for n in "ijk"}, levels=t.tiling_levels)
    r = simulate(s, t, max_steps=100)
    assert r.sampled and r.steps == 100 and r.total_steps == 16 ** 3
    assert r.time_s == pytest.approx(evaluate(s, t).time_s, rel=0.25)


def test_sim_softmax_runs():
    t = load_target("tpu")
    k = Kernel.from_ops(softmax_program(64, 256), ["P"])
    s = Schedule(k, tiles={"i": {"VMEM": 16, "vregs": 8}}, levels=t.tiling_levels)
    c = compare(s, t)
    assert c["time_error"] < 0.10


def test_roofline():
    t = load_target("tpu")
    p = gemm_program(1024, 1024, 1024)
    flops = p.flops
    comp = compulsory_bytes(p)
    assert comp == 3 * 1024 * 1024 * 4
    # A time that exactly reaches min(peak, AI x bw) scores 1.0.
    best = flops / min(t.peak_flops("f32"), flops / comp * t.dram_bandwidth)
    assert roofline_fraction(flops, best, comp, t) == pytest.approx(1.0)
    assert roofline_fraction(flops, 2 * best, comp, t) == pytest.approx(0.5)
    data = roofline_plot_data(t, {"naive": {"flops": flops, "time_s": 1e-3, "dram_bytes": 1e8}})
    assert data["ceilings"][0]["level"] == "DRAM" and data["points"][0]["ai"] == pytest.approx(flops / 1e8)


def test_sim_overlaps_write_backs_and_prefetches_on_gemmini():
    # Gemmini, 512x500x256 textbook tiles: C accumulates in the (double-buffered) accumulator
    # straight from DRAM while A and B come through the scratchpad. The leaving C tile is
    # written back while the next one computes, the next tile's partial sums are fetched from
    # when the current one came into use, and the scratchpad's next A/B tiles share the DRAM
    # channel's idle time: DRAM traffic overlaps the operand streaming, as the model says.
    # (Before, each write-back stalled its step: simulator 9.15e-4 s vs model 5.06e-4 s.)
    t = load_target("gemmini")
    k = kernels_unfused(gemm_program(512, 500, 256))[0]
    s = library_schedule(k, t)
    c = compare(s, t, max_steps=5000)
    assert not c["sampled"]
    for level, b in c["model_bytes"].items():
        assert c["sim_bytes"][level] == pytest.approx(b, rel=0.01), level
    assert c["time_error"] < 0.10
    model = evaluate(s, t)
    dram = model.bytes["DRAM"] / t.dram_bandwidth
    # Neither adds the DRAM time to the streaming: both are near the larger of the two.
    assert c["sim_time_s"] < 1.15 * max(dram, model.limits["operand streaming"])


def test_posted_write_backs_wait_no_latency():
    # A double-buffered output level: a first visit of an accumulator tile starts from zero
    # and the leaving tile's write-back is posted, so only partial-sum read-backs wait a
    # latency (GPU registers fed from L2 with 2x2 C tiles: latency-bound, k split in two at L2
    # so half the C visits are first visits).
    t = load_target("gpu")
    k = kernels_unfused(gemm_program(256, 200, 128))[0]
    s = Schedule(k, tiles={"i": {"L2": 128, "registers": 2}, "j": {"L2": 16, "registers": 2},
                           "k": {"L2": 64, "registers": 32}},
                 order={"L2": ("i", "k", "j"), "shared": ("j", "k", "i"), "registers": ("i", "j", "k")},
                 levels=t.tiling_levels)
    c = compare(s, t, max_steps=20_000)
    assert c["time_error"] < 0.15


def test_double_buffered_weights_hide_behind_a_block_held_over_several_tiles():
    # tpu (double-buffered MXU weights): the weight block (k 128 x j 2) stays in the array
    # for 4 innermost tiles (i inner), so loading the next block hides behind all 4 tiles'
    # stream (256 cycles), not only the last tile's (was a 39% gap: a partial fill per block).
    t = load_target("tpu")
    k = kernels_unfused(gemm_program(256, 200, 128))[0]
    s = Schedule(k, tiles={"i": {"VMEM": 64, "vregs": 16}, "j": {"VMEM": 16, "vregs": 2}, "k": {"VMEM": 128, "vregs": 128}},
                 order={"VMEM": ("j", "k", "i"), "vregs": ("j", "k", "i")}, levels=t.tiling_levels)
    c = compare(s, t)
    assert not c["sampled"]
    assert c["time_error"] < 0.02
    sim = simulate(s, t)
    assert sim.compute_s == pytest.approx(evaluate(s, t).compute_s, rel=0.02)


@pytest.mark.parametrize("k_shared,shared_order", [(64, ("i", "j", "k")), (24, ("j", "i", "k"))])
def test_first_tiles_wait_a_whole_latency_on_a_latency_bound_gpu_kernel(k_shared, shared_order):
    # gpu GEMM 64^3 with 2-3 row tiles per block: DRAM and L2 latency dominate. Every block
    # requests its first tiles at once (each waits a whole L2 latency, in both), and the
    # shared-memory level's loads start only after DRAM delivered the first L2 tile: the
    # model was 12-33% off the simulator before it charged either.
    t = load_target("gpu")
    k = kernels_unfused(gemm_program(64, 64, 64))[0]
    rows = 3 if k_shared == 64 else 2
    s = Schedule(k, tiles={"i": {"L2": 64, "shared": rows, "registers": rows}, "j": {"L2": 64, "shared": 32, "registers": 32},
                           "k": {"L2": 64, "shared": k_shared, "registers": 8}},
                 order={"L2": ("i", "j", "k"), "shared": shared_order, "registers": ("k", "i", "j")},
                 annotations={"parallel": ("i", "j"), "vectorize": "j"}, levels=t.tiling_levels)
    c = compare(s, t)
    assert not c["sampled"]
    assert c["time_error"] < 0.05
    model = evaluate(s, t)
    assert model.time_s > model.limits["cold start"] + model.compute_s


def test_levels_fed_by_one_source_wait_their_latencies_side_by_side():
    # gemmini, 1x1 accumulator tiles: C's tiles into the accumulator and A/B's into the
    # scratchpad all come from DRAM, each level with its own load in flight; the two wait
    # their 100-cycle latencies together (the model summed them: 0.119 s vs 0.079 s).
    t = load_target("gemmini")
    k = kernels_unfused(gemm_program(256, 200, 128))[0]
    s = Schedule(k, tiles={"i": {"scratchpad": 2, "accumulator": 1}, "j": {"scratchpad": 1, "accumulator": 1},
                           "k": {"scratchpad": 8, "accumulator": 8}},
                 order={"scratchpad": ("i", "k", "j"), "accumulator": ("i", "k", "j")}, levels=t.tiling_levels)
    c = compare(s, t, max_steps=5_000)
    # Two loads in flight per level (a tile's load requested once the tile two before it is
    # used): the model pairs each load's latency with the mean step; here the array refills
    # every other step, so the simulator's pairs are longer (12%).
    assert c["sampled"] and c["time_error"] < 0.13
    model = evaluate(s, t)
    assert model.bound == "DRAM latency"


def test_a_remainder_tile_keeps_its_single_weight_block():
    # npu conv, s tiled 2 of 3: the full s tiles hold two weight blocks and refill both every
    # tile; the remainder tiles (s = 1) hold one, which stays in the array while f is fixed
    # (8 tiles). The model counted the mean 1.5 blocks on every tile (31% over the simulator).
    t = load_target("npu")
    k = kernels_unfused(conv_program(C=16, F=32, H=14, W=14))[0]
    s = Schedule(k, tiles={"f": {"SRAM": 32, "accumulator": 8}, "h": {"SRAM": 8, "accumulator": 4},
                           "w": {"SRAM": 4, "accumulator": 1}, "c": {"SRAM": 2, "accumulator": 2},
                           "r": {"SRAM": 1, "accumulator": 1}, "s": {"SRAM": 2, "accumulator": 2}},
                 order={"SRAM": ("s", "c", "f", "w", "r", "h"), "accumulator": ("f", "w", "h", "s", "r", "c")},
                 levels=t.tiling_levels)
    c = compare(s, t)
    assert not c["sampled"] and c["time_error"] < 0.02
    assert evaluate(s, t).compute_s == pytest.approx(simulate(s, t).compute_s, rel=0.01)


def test_a_loads_latency_overlaps_posted_write_backs():
    # gemmini, k tiled 1 at the scratchpad: every step writes a C tile back to DRAM and reads
    # the next one's partial sums. The read waits its latency while the write-back uses the
    # channel, so the DRAM bound is max(bytes / bw, reads / bw + loads x latency), not the
    # sum of all bytes and all latencies (the model was 21% over the simulator).
    t = load_target("gemmini")
    k = kernels_unfused(gemm_program(64, 200, 64))[0]
    s = Schedule(k, tiles={"i": {"scratchpad": 16, "accumulator": 4}, "j": {"scratchpad": 64, "accumulator": 64},
                           "k": {"scratchpad": 1, "accumulator": 1}},
                 order={"scratchpad": ("j", "i", "k"), "accumulator": ("i", "j", "k")}, levels=t.tiling_levels)
    c = compare(s, t)
    assert not c["sampled"] and c["time_error"] < 0.12
    model = evaluate(s, t)
    loads = (64 // 4) * 4 * (64 - 1)       # C tiles read back: i tiles x j pieces x all k but the first
    latency = t.memory[-1].latency_cycles / (t.clock_ghz * 1e9)
    # The read-backs' chain (one in flight) bounds it; the write-backs hide in its latency.
    assert loads * latency < model.time_s < model.limits["DRAM bandwidth"] + loads * latency


def test_sim_replays_staged_tensors_where_the_model_holds_them():
    # `stage` holds A in gemmini's accumulator (a level for outputs only): the simulator
    # moves A's tiles through it as the model does.
    t = load_target("gemmini")
    k = kernels_unfused(gemm_program(128, 128, 128))[0]
    plain = library_schedule(k, t)
    staged = Schedule(k, tiles=plain.tiles, order=plain.order, levels=plain.levels,
                      annotations={**plain.annotations, "stage": (("A", "accumulator"),)})
    c, before = compare(staged, t), compare(plain, t)
    assert c["model_bytes"]["accumulator"] > before["model_bytes"]["accumulator"]
    for level, b in c["model_bytes"].items():
        assert c["sim_bytes"][level] == pytest.approx(b, rel=0.01), level
    assert c["time_error"] < 0.10


def test_a_dram_bound_kernel_of_four_tiles():
    # npu GEMM 64^3 in four SRAM tiles, DRAM-bound: each tile's loads take longer than its
    # compute. Both charge the loads' chain (bytes + a latency per tile, one in flight), the
    # last tile's compute after its loads, and write-backs posted behind the reads issued
    # before them. What is left (15%) is the granularity of four tiles: a C write-back
    # that is ready only after its tile computed delays the next read in the simulator,
    # while the model lets it share the channel with the reads' latency.
    t = load_target("npu")
    k = kernels_unfused(gemm_program(64, 64, 64))[0]
    s = Schedule(k, tiles={"i": {"SRAM": 64, "accumulator": 32}, "j": {"SRAM": 32, "accumulator": 32},
                           "k": {"SRAM": 32, "accumulator": 32}},
                 order={"SRAM": ("j", "k", "i"), "accumulator": ("k", "i", "j")}, levels=t.tiling_levels)
    c = compare(s, t)
    assert c["time_error"] < 0.16      # was 39%: 2.72e-6 s vs 3.78e-6 s
    model = evaluate(s, t)
    assert model.time_s > model.limits["DRAM bandwidth"]


def test_an_epilogue_streams_its_tile_as_one_flat_run():
    # A fused ReLU over 32x2 output tiles: the vector unit takes the tile's 64 elements in
    # two passes of 32 lanes (the tile is dense on chip), not one pass per 2-wide row — in
    # the simulator as in the model (ResNet-50 conv4 + BN + ReLU on npu was 12% apart).
    t = load_target("npu")
    k = Kernel.from_ops(gemm_program(128, 64, 128, relu=True), ["C", "R"])
    s = Schedule(k, tiles={"i": {"SRAM": 128, "accumulator": 32}, "j": {"SRAM": 64, "accumulator": 2},
                           "k": {"SRAM": 128, "accumulator": 32}}, levels=t.tiling_levels)
    c = compare(s, t)
    assert not c["sampled"] and c["time_error"] < 0.02
    assert simulate(s, t).compute_s == pytest.approx(evaluate(s, t).compute_s, rel=0.01)
