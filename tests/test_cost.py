"""The analytic cost model: hand-computed numbers on a toy target, metamorphic checks,
batch = single evaluation, baselines, kernels and schedules."""
from pathlib import Path

import numpy as np
import pytest

from autocomp_jupyter.accel.cost import (METRIC_NAMES, baseline_costs, evaluate, evaluate_batch,
                                         kernel_model, library_schedule, naive_schedule, textbook_schedule)
from autocomp_jupyter.accel.target import load_target, parse_target
from autocomp_jupyter.ir.program import Access, Affine, BinOp, Call, Loop, Op, Program, Statement, Tensor
from autocomp_jupyter.ir.schedule import Kernel, Schedule, kernels_unfused

# A two-level toy: a 64 KiB buffer in front of DRAM, one core with 4 f32 lanes.
TOY = """
name: toy
clock_ghz: 1.0
compute: {kind: vector, lanes: 4}
energy_pj_per_mac: 1.0
memory:
  - {name: buf, size_bytes: 65536, bandwidth_gbps: 64, latency_cycles: 0, energy_pj_per_byte: 0.5}
  - {name: DRAM, bandwidth_gbps: 8, latency_cycles: 0, energy_pj_per_byte: 10}
"""


def gemm_program(M=64, N=64, K=64, dtype="f32", relu=False):
    i, j, k = Affine.var("i"), Affine.var("j"), Affine.var("k")
    st = Statement("C", (i, j), "+", (Loop("i", M), Loop("j", N), Loop("k", K)),
                   BinOp("*", Access("A", (i, k)), Access("B", (k, j))))
    tensors = [Tensor("A", dtype, (M, K), "input"), Tensor("B", dtype, (K, N), "param"),
               Tensor("C", dtype, (M, N), "intermediate")]
    ops = [Op("matmul", "contraction", ("A", "B"), "C", (), (st,))]
    outputs = ("C",)
    if relu:
        a, b = Affine.var("a"), Affine.var("b")
        r = Statement("R", (a, b), None, (Loop("a", M), Loop("b", N)), Call("relu", (Access("C", (a, b)),)))
        tensors.append(Tensor("R", dtype, (M, N), "intermediate"))
        ops.append(Op("relu", "elementwise", ("C",), "R", (), (r,)))
        outputs = ("R",)
    return Program(tuple(tensors), tuple(ops), outputs)


def conv_program(C=8, F=16, H=14, W=14, R=3, S=3):
    """P[f, h, w] += X[c, h + r, w + s] * K[f, c, r, s] (valid convolution, CHW)."""
    f, c, h, w, r, s = (Affine.var(n) for n in "fchwrs")
    st = Statement("P", (f, h, w), "+",
                   (Loop("f", F), Loop("h", H), Loop("w", W), Loop("c", C), Loop("r", R), Loop("s", S)),
                   BinOp("*", Access("X", (c, h + r, w + s)), Access("K", (f, c, r, s))))
    tensors = (Tensor("X", "f32", (C, H + R - 1, W + S - 1), "input"),
               Tensor("K", "f32", (F, C, R, S), "param"), Tensor("P", "f32", (F, H, W), "intermediate"))
    return Program(tensors, (Op("conv2d", "contraction", ("X", "K"), "P", (), (st,)),), ("P",))


def softmax_program(N=16, D=64):
    i, j = Affine.var("i"), Affine.var("j")
    loops = (Loop("i", N), Loop("j", D))
    stmts = (
        Statement("M", (i,), "max", loops, Access("X", (i, j))),
        Statement("E", (i, j), None, loops, Call("exp", (BinOp("-", Access("X", (i, j)), Access("M", (i,))),))),
        Statement("S", (i,), "+", loops, Access("E", (i, j))),
        Statement("P", (i, j), None, loops, BinOp("/", Access("E", (i, j)), Access("S", (i,)))),
    )
    tensors = (Tensor("X", "f32", (N, D), "input"), Tensor("M", "f32", (N,), "temp"),
               Tensor("E", "f32", (N, D), "temp"), Tensor("S", "f32", (N,), "temp"),
               Tensor("P", "f32", (N, D), "intermediate"))
    op = Op("softmax", "reduction", ("X",), "P", (), stmts, temps=("M", "E", "S"))
    return Program(tensors, (op,), ("P",))


@pytest.fixture
def toy():
    return parse_target(TOY, "toy.yaml")


def test_gemm_on_toy_by_hand(toy):
    k = kernels_unfused(gemm_program())[0]
    s = Schedule(k, tiles={"i": {"buf": 32}, "j": {"buf": 32}}, order={"buf": ("i", "j", "k")}, levels=("buf",))
    c = evaluate(s, toy)
    # DRAM -> buf, loop order (i:2, j:2, k:1):
    #   A[i,k] 32x64x4 B = 8192 B, stays while j iterates: 2 fetches  -> 16384
    #   B[k,j] 64x32x4 B = 8192 B, indexed by the innermost j: 4 fetches -> 32768
    #   C[i,j] 32x32x4 B = 4096 B, 4 tiles each written once, never read back -> 16384
    assert c.bytes["DRAM"] == 65536
    # buf -> lanes, one 4-wide vector along k (innermost): per (i,j) tile 32x32x16 vectors
    #   A and B: 16 B per vector x 65536 vectors = 1048576 each; C: 4 B written per (i,j)
    #   point (stationary over k) = 16384.
    assert c.bytes["buf"] == 2 * 1048576 + 16384
    # Compute: 64*64*16 vector MACs at 4 MACs/cycle over 4 lanes = 65536 cycles at 1 GHz.
    assert c.compute_s == pytest.approx(65.536e-6)
    # Roofline per level: buf 2113536/64e9 = 33.0 us, DRAM 65536/8e9 = 8.2 us -> compute-bound.
    # buf holds its tiles (40 KiB) twice, so its loads overlap compute, but the first A and B
    # tiles (8192 B each) arrive before anything computes: 16384/8e9 = 2.048 us cold start,
    # and the last C tile (4096 B) leaves after everything computed: 0.512 us drain.
    assert c.limits["cold start"] == pytest.approx(2.048e-6)
    assert c.limits["drain"] == pytest.approx(0.512e-6)
    assert c.time_s == pytest.approx(65.536e-6 + 2.048e-6 + 0.512e-6)
    assert c.bound == "compute (vector lanes)"
    assert c.flops == 2 * 64 ** 3
    assert c.arithmetic_intensity == pytest.approx(524288 / 65536)
    assert c.bw_util == pytest.approx(65536 / c.time_s / 8e9)
    # Energy, every transfer at both its ends: buf reads 2 x 1048576 operand bytes and the
    # 16384 B of C it writes back, and is written 49152 B of A and B tiles and 16384 B of
    # results (2179072 B x 0.5 pJ); DRAM reads 49152 B and is written 16384 B (x 10 pJ);
    # 262144 MACs x 1 pJ.
    assert c.energy_j == pytest.approx((2179072 * 0.5 + 65536 * 10 + 262144) * 1e-12)
    assert c.energy_by_level == pytest.approx({"buf": 2179072 * 0.5e-12, "DRAM": 65536 * 10e-12})
    assert c.pe_util == 1.0 and c.occupancy == 1.0 and c.spill_ratio == 0.0
    assert set(c.metrics()) == set(METRIC_NAMES)


def test_non_dividing_vector_tile_wastes_lanes(toy):
    k = kernels_unfused(gemm_program())[0]
    s = Schedule(k, tiles={"j": {"buf": 6}}, annotations={"vectorize": "j"}, levels=("buf",))
    c = evaluate(s, toy)
    # j = 64 in tiles of 6: ten tiles of 6 (2 vectors each) and a remainder of 4 (1 vector)
    # = 21 vectors where 16 would do.
    assert c.pe_util == pytest.approx(16 / 21)
    assert c.compute_s == pytest.approx(64 * 21 * 64 / 1e9)


def test_overflowing_tile_spills(toy):
    k = kernels_unfused(gemm_program())[0]
    fits = evaluate(Schedule(k, tiles={"i": {"buf": 32}, "j": {"buf": 32}}, levels=("buf",)), toy)
    small = parse_target(TOY.replace("size_bytes: 65536", "size_bytes: 32768"), "small.yaml")
    # Whole matrices (3 x 16 KiB) in a 32 KiB buffer: 50% over.
    over = evaluate(naive_schedule(k, small), small)
    assert fits.spill_ratio == 0 and over.spill_ratio == pytest.approx(0.5)
    assert over.bytes["DRAM"] > 65536 - 16384  # some of the traffic now streams from DRAM


def test_more_bandwidth_is_never_slower(toy):
    k = kernels_unfused(gemm_program(96, 80, 64))[0]
    rng = np.random.default_rng(1)
    tiles = rng.integers(1, 97, size=(500, 3, 1))
    orders = np.argsort(rng.random((500, 3)), axis=1)
    fast = parse_target(TOY.replace("bandwidth_gbps: 8,", "bandwidth_gbps: 16,").replace("bandwidth_gbps: 64,", "bandwidth_gbps: 128,"), "fast.yaml")
    slow_t = evaluate_batch(k, toy, tiles, orders).time_s
    fast_t = evaluate_batch(k, fast, tiles, orders).time_s
    assert np.all(fast_t <= slow_t * (1 + 1e-12))


def test_batch_matches_single(toy):
    k = kernels_unfused(gemm_program(50, 70, 30))[0]
    tpu = load_target("tpu")
    names = k.loop_names
    batch_tiles, batch_orders, singles = [], [], []
    rng = np.random.default_rng(0)
    for _ in range(20):
        t = rng.integers(1, 80, size=(3, 2))
        order = tuple(rng.permutation(3))
        s = Schedule(k, tiles={n: {"VMEM": int(t[d, 0]), "vregs": int(t[d, 1])} for d, n in enumerate(names)},
                     order={"VMEM": tuple(names[o] for o in order)}, levels=tpu.tiling_levels)
        singles.append(evaluate(s, tpu))
        batch_tiles.append(t)
        batch_orders.append(order)
    batch = evaluate_batch(k, tpu, np.array(batch_tiles), np.array(batch_orders))
    for i, c in enumerate(singles):
        assert batch.time_s[i] == pytest.approx(c.time_s)
        assert batch.bytes[i, -1] == pytest.approx(c.bytes["DRAM"])
        assert batch.spill_ratio[i] == pytest.approx(c.spill_ratio)


def test_stationarity_depends_on_order(toy):
    k = kernels_unfused(gemm_program())[0]
    tiles = {"i": {"buf": 16}, "j": {"buf": 16}, "k": {"buf": 16}}
    # k innermost: the C tile stays while k iterates; k outermost: C is written and read back.
    inner_k = evaluate(Schedule(k, tiles=tiles, order={"buf": ("i", "j", "k")}, levels=("buf",)), toy)
    outer_k = evaluate(Schedule(k, tiles=tiles, order={"buf": ("k", "i", "j")}, levels=("buf",)), toy)
    assert outer_k.bytes["DRAM"] > inner_k.bytes["DRAM"]


def test_fused_epilogue_keeps_intermediate_on_chip(toy):
    p = gemm_program(relu=True)
    fused = Kernel.from_ops(p, ["C", "R"])
    assert fused.internals == ("C",) and fused.outputs == ("R",) and fused.inputs == ("A", "B")
    assert fused.loop_map(1) == {"a": "i", "b": "j"}
    tiles = {"i": {"buf": 32}, "j": {"buf": 32}}
    c = evaluate(Schedule(fused, tiles=tiles, levels=("buf",)), toy)
    # A (16 KiB) once, B (16 KiB) twice, R (16 KiB) written once; C never reaches DRAM.
    assert c.bytes["DRAM"] == 16384 + 32768 + 16384
    un = [evaluate(Schedule(k, tiles={n: {"buf": 32} for n in k.loop_names[:2]}, levels=("buf",)), toy)
          for k in kernels_unfused(p)]
    assert sum(u.bytes["DRAM"] for u in un) > c.bytes["DRAM"]


def test_softmax_sequence_of_nests(toy):
    p = softmax_program()
    k = Kernel.from_ops(p, ["P"])
    assert set(k.internals) == {"M", "E", "S"} and k.outputs == ("P",)
    c = evaluate(Schedule(k, tiles={"i": {"buf": 4}}, levels=("buf",)), toy)
    # X is read by two statements (max and exp), P written once; temps stay on chip.
    assert c.bytes["DRAM"] == 2 * 16 * 64 * 4 + 16 * 64 * 4
    assert c.spill_ratio == 0


def test_conv_halo_footprint(toy):
    k = kernels_unfused(conv_program())[0]
    model = kernel_model(k, toy)
    tiles = np.array([[4], [7], [7], [8], [3], [3]])  # f, h, w, c, r, s
    fp = model.capacity_footprints(tiles[None])[0, 0]
    # X tile 8 x (7+3-1) x (7+3-1), K tile 4x8x3x3, P tile 4x7x7, all f32.
    assert fp == 4 * (8 * 9 * 9 + 4 * 8 * 3 * 3 + 4 * 7 * 7)


@pytest.mark.parametrize("target", ["gpu", "tpu", "npu", "gemmini", "host"])
def test_baselines_on_presets(target):
    p = gemm_program(256, 256, 256, relu=True)
    b = baseline_costs(p, target)
    naive, library = b["naive"].total, b["textbook"].total
    assert library.time_s < naive.time_s
    assert library.spill_ratio <= 0.0 + 1e-12
    for k in kernels_unfused(p):
        s = library_schedule(k, target)
        assert set(s.levels) == set(load_target(target).tiling_levels)


def test_schedule_printing():
    k = kernels_unfused(gemm_program(100, 64, 64))[0]
    s = Schedule(k, tiles={"i": {"L2": 32, "L1": 8}, "j": {"L2": 64, "L1": 16}},
                 order={"L1": ("j", "i", "k")}, annotations={"parallel": ("i",), "vectorize": "j"},
                 levels=("L2", "L1"))
    text = s.loop_nest()
    assert "for i_L2 in range(0, 100, 32):    # parallel" in text
    assert "for j_L1 in range(0, 64, 16):" in text
    assert "for i_L1 in range(i_L2, min(i_L2 + 32, 100), 8):" in text
    assert "C[i, j] += (A[i, k] * B[k, j])" in text
    assert "# vectorize" not in text          # j is not the innermost point loop here (k is)
    inner_j = s.with_order({"L1": ("i", "k", "j")}).loop_nest()
    assert inner_j.splitlines()[-2].strip() == "for j in range(j_L1, j_L1 + 16):    # vectorize"
    assert Schedule.default(k).loop_nest().startswith("for i in range(100):")


def test_tile_counts_match_recursive_chunks():
    """The one-pass tile counter equals the recursive `_chunks` at every level and for the
    datapath split, non-dividing tiles included."""
    from autocomp_jupyter.accel.cost import _chunks, _tile_counts
    rng = np.random.default_rng(3)
    for L in (1, 2, 4):
        E = rng.integers(1, 3000, size=(1, 3))
        t = np.minimum(rng.integers(1, 3000, size=(500, 3, L)), E[:, :, None])
        t = np.minimum.accumulate(t, axis=2)
        counts, lengths, mult = _tile_counts(E, t)
        for h in range(L):
            assert np.array_equal(counts[:, h, :], _chunks(E, t[:, :, :h], t[:, :, h]))
        unit = rng.integers(1, 17, size=(500, 3))
        dp = sum(m * np.ceil(x / unit - 1e-9) for x, m in zip(lengths, mult))
        assert np.array_equal(dp, _chunks(E, t, unit))


def test_host_runs_unannotated_schedules_on_one_core():
    """Generated host C parallelises only annotated loops: without `parallel` the model uses
    one core; with it, the output tiles spread over the cores."""
    host = load_target("host")
    kernel = kernels_unfused(gemm_program(256, 256, 256))[0]
    tiles = {"i": {"L2": 64}, "j": {"L2": 64}, "k": {"L2": 64}}
    serial = evaluate(Schedule(kernel, tiles=tiles, levels=("L2",)), host)
    par = evaluate(Schedule(kernel, tiles=tiles, annotations={"parallel": ("i", "j")}, levels=("L2",)), host)
    assert serial.occupancy * host.compute.units == pytest.approx(1.0)
    if host.compute.units > 1:
        assert par.time_s < serial.time_s
    assert load_target("tpu").compute.implicit_parallel


@pytest.mark.parametrize("target", ["tpu", "npu", "gpu"])
def test_bound_names_the_term_that_sets_the_time(target):
    # One statement: time = max(max(compute, operand streaming) + serial transfers + cold
    # start + drain, each level's bandwidth + latency time); `bound` must name the term that
    # attains it, with its unit or level and part — the cold start when loading the first
    # tiles outweighs the rest.
    k = kernels_unfused(gemm_program(256, 256, 256))[0]
    t = load_target(target)
    for schedule in (naive_schedule(k, t), library_schedule(k, t)):
        c = evaluate(schedule, t)
        lim = c.limits
        step = max(c.compute_s, lim["operand streaming"])
        busy = step + lim["serial transfers"] + lim["cold start"] + lim["drain"]
        levels = {m.name: lim[f"{m.name} bandwidth"] + lim[f"{m.name} latency"] for m in t.memory}
        worst = max(levels, key=levels.get)
        assert c.time_s == pytest.approx(max(busy, levels[worst]), rel=1e-9)
        if busy >= levels[worst]:
            unit = "compute (PE array)" if t.compute.kind == "systolic" else "compute (SIMT"
            if lim["operand streaming"] > c.compute_s:
                unit = "operand streaming"
            parts = {unit: step, "serial transfers": lim["serial transfers"], "cold start": lim["cold start"],
                     "drain": lim["drain"]}
            assert c.bound.startswith(max(parts, key=parts.get))
        else:
            part = "bandwidth" if lim[f"{worst} bandwidth"] >= lim[f"{worst} latency"] else "latency"
            assert c.bound == f"{worst} {part}"


DEPTHWISE_LAYER = """
input  X: f32[1, {C}, {H}, {H}]
param  W: f32[{C}, 1, 3, 3]
param  s: f32[{C}]
param  t: f32[{C}]
D = depthwise_conv2d(X, W, stride=1, padding=1)
B = batchnorm(D, s, t)
R = relu(B)
output R
"""
DEPTHWISE = DEPTHWISE_LAYER.format(C=64, H=28)


# MobileNetV2's 3x3 depthwise layers at 56x56 (144 channels) and 28x28 (192 channels).
@pytest.mark.parametrize("target,layer", [(t, l) for t in ("tpu", "npu", "gemmini") for l in ((144, 56), (192, 28))])
def test_depthwise_runs_on_the_vector_unit_of_systolic_targets(target, layer):
    # Depthwise convolution has no column loop for the array (every output loop of its weight
    # also indexes the input): it runs on the vector unit, contractions on the PE array.
    import autocomp_jupyter as ac
    from autocomp_jupyter.accel.cost import datapath_of
    from autocomp_jupyter.dsl import parse

    t = load_target(target)
    program = parse(DEPTHWISE_LAYER.format(C=layer[0], H=layer[1]))
    dw = kernel_model(kernels_unfused(program)[0], t)
    assert not datapath_of(t.compute, dw.statements[0]).on_array
    gemm = kernel_model(kernels_unfused(gemm_program(64, 64, 64))[0], t)
    assert datapath_of(t.compute, gemm.statements[0]).on_array
    r = ac.optimize(program, target=target, tune=0).report
    assert r["verified"]
    assert r["roofline_fraction"] >= 0.3
    assert all("PE array" not in k["bound"] for k in r["kernels"])


def test_systolic_vector_unit_is_declared_in_the_target():
    # vector_lanes and vector_ops_per_cycle set the vector unit: halving its rate doubles a
    # compute-bound elementwise kernel's compute time.
    base = load_target("npu")
    text = (Path(base.source).read_text().replace("vector_ops_per_cycle: 32", "vector_ops_per_cycle: 16")
            .replace("vector_lanes: 32", "vector_lanes: 16"))
    slow = parse_target(text, "npu-slow.yaml")
    assert slow.compute.lanes == 16 and base.compute.lanes == 32
    i, j = Affine.var("i"), Affine.var("j")
    st = Statement("Y", (i, j), None, (Loop("i", 64), Loop("j", 64)), Call("exp", (Access("X", (i, j)),)))
    program = Program((Tensor("X", "f32", (64, 64), "input"), Tensor("Y", "f32", (64, 64), "intermediate")),
                      (Op("exp", "elementwise", ("X",), "Y", (), (st,)),), ("Y",))
    k = kernels_unfused(program)[0]
    fast_c, slow_c = evaluate(naive_schedule(k, base), base), evaluate(naive_schedule(k, slow), slow)
    assert slow_c.compute_s == pytest.approx(2 * fast_c.compute_s)


def test_a_tiny_layer_on_tpu_is_bound_by_dram_latency():
    # 64x28x28 depthwise on tpu computes for 0.25 us (its lanes along the 64 channels), but
    # its first input tile waits 500 cycles (0.48 us) of DRAM latency, and every later tile
    # as long with one load in flight: the cold start alone is over a third of the time, so
    # the layer stays below 0.35 of the (latency-free) roofline, and `bound` says so.
    import autocomp_jupyter as ac

    res = ac.optimize(DEPTHWISE, target="tpu", tune=0)
    c = evaluate(res.after.schedules[0], "tpu")
    assert c.limits["cold start"] > 0.35 * c.time_s
    assert c.bound.startswith("cold start") or c.bound == "DRAM latency"
    assert res.report["kernels"][0]["bound"] == c.bound
    assert res.report["roofline_fraction"] < 0.35


def test_host_charges_integer_tensors_the_bytes_of_their_c_buffers():
    # codegen/c/ holds i8/i32 tensors in doubles: on host an i8 GEMM moves 8-byte elements,
    # on an accelerator 1-byte ones.
    from autocomp_jupyter.accel.cost import kernel_model
    from autocomp_jupyter.dsl import parse

    program = parse("input A: i8[64, 32]\ninput B: i8[32, 48]\nC = matmul(A, B)\noutput C\n")
    kernel = Kernel.from_ops(program, ["C"])
    host = kernel_model(kernel, load_target("host"))
    tpu = kernel_model(kernel, load_target("tpu"))
    assert {a.elem_bytes for st in host.statements for a in st.accesses} == {8}
    assert {a.elem_bytes for st in tpu.statements for a in st.accesses} == {1}


STEM = """input X: f32[1, 3, 226, 226]
param W: f32[32, 3, 3, 3]
tensor Y: f32[1, 32, 112, 112]
Y[n, f, h, w] += X[n, c, 2*h + r, 2*w + s] * W[f, c, r, s]
output Y
"""


def test_im2col_puts_a_stem_convs_channels_and_taps_on_the_rows():
    # A 3-channel stem conv: c alone fills 3 of npu's 32 PE rows; with im2col (the default) c,
    # r and s share them (27 rows), so the array passes drop 9x. The model, the simulator and
    # the physical limit read the same mapping; `im2col: false` restores rows = c.
    from autocomp_jupyter.accel.limit import physical_limit
    from autocomp_jupyter.accel.sim import simulate
    from autocomp_jupyter.dsl import parse

    npu = load_target("npu")
    flat = parse_target(Path(npu.source).read_text().replace("dataflow: weight_stationary",
                                                             "dataflow: weight_stationary\n  im2col: false"), "flat.yaml")
    assert npu.compute.im2col and not flat.compute.im2col
    program = parse(STEM)
    kernel = kernels_unfused(program)[0]
    rows = {id(t): dict(kernel_model(kernel, t).statements[0].array_units) for t in (npu, flat)}
    names = kernel.loop_names
    assert {names[i]: u for i, u in rows[id(npu)].items()} == {"c": 3, "r": 3, "s": 3, "f": 32}
    assert {names[i]: u for i, u in rows[id(flat)].items()} == {"c": 32, "f": 32}
    floor = [physical_limit(program, t)["datapaths_s"]["PE array"] for t in (npu, flat)]
    assert floor[1] == pytest.approx(9 * floor[0], rel=0.05)
    schedule = naive_schedule(kernel, npu)
    model = evaluate(schedule, npu)
    assert model.pe_util == pytest.approx(27 / 32)
    assert simulate(schedule, npu).time_s == pytest.approx(model.time_s, rel=0.10)


def _depthwise_taps(r: int, s: int) -> str:
    return f"""input X: f32[64, {26 + r}, {30 + s}]
param W: f32[64, {r}, {s}]
tensor Y: f32[64, 28, 32]
Y[c, h, w] += X[c, h + i, w + j] * W[c, i, j]
output Y
"""


@pytest.mark.parametrize("target", ["npu", "gemmini"])
def test_a_vector_unit_keeps_a_windows_taps_in_registers(target):
    # Along the tap loop that shares the vector loop's input index (j in X[c, h + i, w + j]),
    # the lanes shift one loaded row instead of reloading it, and the partial sums stay in
    # registers: 3 taps along w move about what 1 does into the datapath, not 3x; taps along
    # h (i) still reload rows.
    from autocomp_jupyter.dsl import parse

    t = load_target(target)
    moved = {}
    for taps in ((1, 1), (1, 3), (3, 1)):
        kernel = kernels_unfused(parse(_depthwise_taps(*taps)))[0]
        model = kernel_model(kernel, t)
        schedule = textbook_schedule(kernel, t)          # each innermost tile holds all taps
        schedule = Schedule(kernel, tiles=schedule.tiles, order=schedule.order, levels=schedule.levels,
                            annotations={**schedule.annotations, "vectorize": "w"})
        assert model.statements[0].row_loop < 0         # off the PE array
        cost = model.evaluate_batch(*model.schedule_arrays(schedule))
        moved[taps] = float(cost.datapath_bytes[0, 0].sum())
    assert moved[(1, 3)] < 1.25 * moved[(1, 1)]
    assert moved[(3, 1)] > 2.0 * moved[(1, 1)]


def test_the_cost_model_reads_downwards_and_finds_its_producer_search_below():
    """A compute_at producer is scheduled alone by the tile search beside the model
    (accel/tile_search.py), connected when the accel package is imported: importing the cost
    model alone wires it, without the tiling pass (rules/) being imported. And no module of
    accel/ imports rules/, ui/, the pipeline or codegen/ (but host_model's shared analysis)."""
    import ast
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    code = ("import sys, autocomp_jupyter.accel.cost; "
            "from autocomp_jupyter.accel.cost import model; "
            "from autocomp_jupyter.accel.tile_search import producer_schedule; "
            "assert model._PRODUCER_SEARCH == [producer_schedule], model._PRODUCER_SEARCH; "
            "assert 'autocomp_jupyter.rules.tiling' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    upward = []
    for path in (root / "autocomp_jupyter" / "accel").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                depth = len(path.relative_to(root / "autocomp_jupyter").parts) - 1
                if node.level <= depth:
                    continue          # within accel/
                module = node.module or ""
                if module.split(".")[0] in ("rules", "ui", "pipeline", "codegen"):
                    upward.append(f"{path.name}: {module}")
    assert not upward, upward
