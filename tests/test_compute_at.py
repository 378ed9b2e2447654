"""compute_at: a producer computed in its consumer's tiles over the region each tile reads
(halo recomputed), checked by poly, run by the interpreter, host C and the TVM bridge, costed
with its recompute, and used by the chain rules to fuse conv → conv and MLP chains."""
from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import autocomp_jupyter as autocomp
from autocomp_jupyter import host, poly
from autocomp_jupyter.accel.cost import evaluate
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.interp import random_inputs, run, run_kernel_tiled
from autocomp_jupyter.ir.loopnest import Region, lower, regions
from autocomp_jupyter.ir.plan import Plan
from autocomp_jupyter.ir.schedule import Kernel
from autocomp_jupyter.schedule import BadArgumentError, IllegalStepError, UnknownLoopError, replay

ROOT = Path(__file__).resolve().parent.parent

CHAIN = """input  X: f32[1, 4, 9, 7]
param  W1: f32[8, 4, 1, 1]
param  Wd: f32[8, 1, 3, 3]
param  Wp: f32[4, 8, 1, 1]
E = conv2d(X, W1)
A = relu6(E)
D = depthwise_conv2d(A, Wd, stride=2, padding=1)
P = conv2d(D, Wp)
output P
"""
MLP = """input  X: f32[8, 6]
param  W1: f32[6, 10]
param  b1: f32[10]
param  W2: f32[10, 4]
H[m, n] += X[m, k] * W1[k, n]
G[m, n] = gelu(H[m, n] + b1[n])
O[m, n] += G[m, k] * W2[k, n]
output O
"""
LEVELS = ("L2", "L1")


def _chain():
    program = parse(CHAIN)
    return program, Kernel.from_ops(program, [op.name for op in program.ops], anchor="P")


def _at(size, level="L1", loop="h", tensors=("D", "A", "E"), levels=LEVELS):
    program, kernel = _chain()
    trace = [{"primitive": "tile", "loop": loop, "level": level, "size": size}]
    trace += [{"primitive": "compute_at", "tensor": t, "loop": loop, "level": level} for t in tensors]
    return program, kernel, trace, replay(kernel, trace, levels)


def test_regions_compose_halos_along_the_chain():
    _, kernel, _, schedule = _at(2)
    spans = regions(schedule.kernel)
    index = {st.target: i for i, st in enumerate(kernel.statements)}
    # D follows P's rows exactly; A and E are read at 2*h + r - 1 (stride 2, 3x3, pad 1)
    assert spans[index["D"]]["h"].at({"h": (2, 4), "r": (0, 1)}, 5) == (2, 4)
    assert spans[index["E"]]["h"].at({"h": (2, 4), "r": (0, 1)}, 9) == (3, 8)
    assert spans[index["E"]]["h"].at({"h": (0, 2), "r": (0, 1)}, 9) == (0, 4)        # clipped at the top
    assert spans[index["E"]]["c"] == Region((), 0, 4)                             # its reduction: whole
    program = parse(MLP)
    mlp = Kernel.from_ops(program, ["H", "G", "O"], anchor="O").with_compute_at("G", "k", "L1") \
        .with_compute_at("H", "k", "L1")
    hidden = regions(mlp)[0]["n"]
    assert hidden.exact and hidden.terms == (("k", 1),)                            # the hidden tile itself


@pytest.mark.parametrize("size,level,loop", [(1, "L1", "h"), (2, "L1", "h"), (3, "L2", "h"), (5, "L1", "h"),
                                             (3, "L1", "c")])
def test_tiled_runs_match_the_interpreter_and_halos_are_recomputed(size, level, loop):
    program, kernel, _, schedule = _at(size, level, loop)
    assert poly.check_schedule(schedule).ok
    env = random_inputs(program, 1)
    out = run_kernel_tiled(schedule, env)
    np.testing.assert_allclose(out["P"], run(program, env)["P"], rtol=1e-5, atol=1e-5)
    counts = {}
    for index, _ in lower(schedule).instances():
        counts[index] = counts.get(index, 0) + 1
    index = {st.target: i for i, st in enumerate(kernel.statements)}
    assert counts[index["P"]] == kernel.statements[index["P"]].points                 # the anchor runs once
    if loop == "h" and size < 5:            # row tiles: E's halo rows run again in the next tile
        assert counts[index["E"]] > kernel.statements[index["E"]].points


def test_a_region_too_small_is_caught_by_the_tiled_run(monkeypatch):
    """The interpreter poisons what a computed-at tensor holds outside its region: a region
    that misses the halo gives NaN, not a silently right answer from the previous tile."""
    import autocomp_jupyter.ir.loopnest as loopnest

    program, kernel, _, schedule = _at(2)
    real = loopnest.regions(schedule.kernel)
    index = {st.target: i for i, st in enumerate(kernel.statements)}
    shrunk = {i: dict(r) for i, r in real.items()}
    for t in ("E", "A"):
        h = shrunk[index[t]]["h"]
        shrunk[index[t]]["h"] = Region(h.terms, h.lo + 1, h.hi)          # one halo row short
    object.__setattr__(schedule.kernel, "_regions", shrunk)
    try:
        env = random_inputs(program, 1)
        out = run_kernel_tiled(schedule, env)
        assert np.isnan(out["P"]).any()
    finally:
        object.__setattr__(schedule.kernel, "_regions", real)


def test_host_c_and_the_tvm_bridge_match_the_interpreter():
    target = load_target("host")
    program, kernel = _chain()
    level = target.tiling_levels[1]
    trace = [{"primitive": "tile", "loop": "h", "level": level, "size": 2}]
    trace += [{"primitive": "compute_at", "tensor": t, "loop": "h", "level": level} for t in ("D", "A", "E")]
    schedule = replay(kernel, trace, target.tiling_levels)
    plan = Plan(program, (schedule.kernel,), (schedule,))
    measured = host.measure_plan(plan, target, repeats=1, threads=1)
    assert measured["matches_interpreter"], measured["reason"]
    source = Path(measured["source_path"]).read_text()
    assert "AC_MAX(0, 2*" in source                     # the halo rows' bounds
    from autocomp_jupyter import tvm_bridge
    if not tvm_bridge.available():
        pytest.skip("apache-tvm is not installed")
    _, run_tvm = tvm_bridge.to_tvm(plan)
    env = random_inputs(program, 2)
    np.testing.assert_allclose(run_tvm(env)["P"], run(program, env)["P"], rtol=1e-4, atol=1e-4)


def test_steps_round_trip_and_bad_ones_are_refused_by_name():
    program, kernel, trace, schedule = _at(2)
    assert schedule.trace == trace
    assert "computed at this tile" in schedule.loop_nest()
    bad = [
        ([{"primitive": "compute_at", "tensor": "A", "loop": "h", "level": "L1"}], BadArgumentError,
         "neither the kernel's anchor nor computed at its tiles"),
        ([{"primitive": "compute_at", "tensor": "P", "loop": "h", "level": "L1"}], BadArgumentError, "anchor's own"),
        ([{"primitive": "compute_at", "tensor": "Q", "loop": "h", "level": "L1"}], UnknownLoopError, "no tensor 'Q'"),
        ([{"primitive": "compute_at", "tensor": "D", "loop": "z", "level": "L1"}], UnknownLoopError, "no loop 'z'"),
        (trace + [{"primitive": "parallel", "loop": "h"}], IllegalStepError, "would race on"),
    ]
    for steps, error, text in bad:
        with pytest.raises(error) as err:
            replay(kernel, steps, LEVELS)
        assert text in str(err.value)
    # parallel over a loop the regions follow exactly is fine (each tile its own rows)
    program = parse(MLP)
    mlp = Kernel.from_ops(program, ["H", "G", "O"], anchor="O")
    steps = [{"primitive": "tile", "loop": "m", "level": "L1", "size": 4}] + [
        {"primitive": "compute_at", "tensor": t, "loop": "m", "level": "L1"} for t in ("G", "H")]
    assert poly.check_schedule(replay(mlp, steps + [{"primitive": "parallel", "loop": "m"}], LEVELS)).ok


def test_the_model_carries_halos_on_one_unit_and_recomputes_them_across_units():
    from autocomp_jupyter.accel.cost import _tile_counts, kernel_model
    program, kernel = _chain()

    def schedule(target, size):
        level = target.tiling_levels[0]
        trace = [{"primitive": "tile", "loop": "h", "level": level, "size": size}]
        trace += [{"primitive": "compute_at", "tensor": t, "loop": "h", "level": level} for t in ("D", "A", "E")]
        return replay(kernel, trace, target.tiling_levels)

    def recompute(target):
        s = schedule(target, 1)
        model = kernel_model(s.kernel, target)
        tiles, orders, parallel, _ = model.normalise(*model.schedule_arrays(s))
        counts, _, _ = _tile_counts(model.extents[None, :], tiles)
        return {p.kernel.statements[0].target: float(p.evaluate(tiles, orders, counts, parallel)[1][0])
                for p in model.producers}

    # npu (one array): the row loop runs in order, so the rows output row h shares with row
    # h - 1 stay in the buffer (a line buffer): E's 9 rows are computed once.
    npu = load_target("npu")
    one_row, whole = evaluate(schedule(npu, 1), npu), evaluate(schedule(npu, 5), npu)
    assert one_row.compute_s == pytest.approx(whole.compute_s, rel=0.02)
    assert recompute(npu) == pytest.approx({"E": 1.0, "D": 1.0})
    # tpu (4 arrays) spreads the rows over its arrays: each tile recomputes its halo.
    # exactly: output row h reads expand rows 2h-1 .. 2h+1, clipped to 0 .. 8: 13 rows for E's 9
    mult = recompute(load_target("tpu"))
    assert mult["E"] == pytest.approx(13 / 9) and mult["D"] == pytest.approx(1.0)
    assert whole.dram_bytes < sum(t.size * 4 for t in program.tensors)   # E, A, D never reach DRAM


def inverted_residual(size: int) -> str:
    """A MobileNetV2 inverted residual (24 → 144 → 24 channels) on a size x size map."""
    return f"""input  X: f32[1, 24, {size}, {size}]
param  W1: f32[144, 24, 1, 1]
param  Wd: f32[144, 1, 3, 3]
param  W3: f32[24, 144, 1, 1]
E  = conv2d(X, W1)
A1 = relu6(E)
D  = depthwise_conv2d(A1, Wd, stride=1, padding=1)
A2 = relu6(D)
P  = conv2d(A2, W3)
Y  = add(P, X)
output Y
"""


BLOCK = inverted_residual(28)


@functools.lru_cache(maxsize=4)
def _optimized(src: str, target: str):
    """`optimize(src, target, tune=0)` once per worker: the tests below read the same block's
    plan on npu (two tests) and on gemmini (two tests) and change nothing in it."""
    return autocomp.optimize(src, target=target, tune=0)


def test_an_inverted_residual_is_fused_into_one_kernel_and_replays(tmp_path):
    res = _optimized(BLOCK, "npu")
    r = res.report
    assert r["verified"]
    assert [k["name"] for k in r["kernels"]] == ["E_to_Y"]
    rule = next(x for x in r["rules"] if x["rule"] == "depth_first_convs" and x["applied"])
    assert "3 kernels in one" in rule["why"]
    kernel = r["kernels"][0]
    assert {s["primitive"] for s in kernel["trace"]} >= {"tile", "compute_at"}
    assert r["speedup_vs_library"] > 2.0
    path = tmp_path / "block.acir"
    path.write_text(BLOCK)
    report = tmp_path / "report.json"
    report.write_text(json.dumps(r))
    again = subprocess.run([sys.executable, "-m", "autocomp_jupyter.cli", "optimize", str(path), "--target", "npu",
                            "--schedule", str(report), "--json"], capture_output=True, text=True, cwd=ROOT)
    assert again.returncode == 0, again.stderr
    b = json.loads(again.stdout)
    assert b["verified"] and b["optimized"]["time_s"] == r["optimized"]["time_s"]


@pytest.mark.parametrize("target", ["npu", "gemmini"])
def test_the_simulator_replays_the_producer_nests_and_agrees_with_the_model(target):
    from autocomp_jupyter.accel.sim import compare

    res = _optimized(BLOCK, target)
    (schedule,) = [s for k, s in zip(res.after.kernels, res.after.schedules) if k.compute_at]
    c = compare(schedule, target, max_steps=20000)
    assert c["time_error"] < 0.10, c


def test_the_tuner_moves_a_poorly_placed_compute_point():
    """compute_at placement is a kernel move of the tuner (tune.KERNEL_MOVES): from a chain
    computed at a worse point, the move finds a faster one, legal; tuning keeps the plan's
    kernels those of its schedules. (On the first block and preset where some placement is
    slower than the chosen one: on some every placement is as fast, bound by a datapath.)"""
    from autocomp_jupyter.canon import evaluate as cost
    from autocomp_jupyter.passes import PassContext
    from autocomp_jupyter.rules.engine import load_rules
    from autocomp_jupyter.tune import KERNEL_MOVES, _compute_at_placements, _kernel_moves, model_score, tune_plan

    assert [m.step for m in KERNEL_MOVES] == ["compute_at"]
    for block, target in ((inverted_residual(56), "npu"), (inverted_residual(14), "gemmini"), (BLOCK, "gemmini")):
        res = _optimized(block, target)
        if len(res.after.schedules) != 1:
            continue                     # not fused into one kernel there
        (schedule,) = res.after.schedules
        moves = sorted(_compute_at_placements(schedule), key=lambda s: -cost(s, target).time_s)
        worse = next((s for s in moves if poly.check_schedule(s).ok
                      and cost(s, target).time_s > cost(schedule, target).time_s), None)
        if worse is not None:
            break
    assert worse is not None, "no preset has a slower placement of the block"
    found = _kernel_moves((cost(worse, target).time_s, worse), res.target, model_score, 0.05)
    assert found is not None
    seconds, moved = found
    assert moved.kernel.compute_at != worse.kernel.compute_at and poly.check_schedule(moved).ok
    assert seconds < cost(worse, target).time_s
    plan = Plan(res.after.program, (worse.kernel,), (worse,))
    tuned, versions, _ = tune_plan(plan, PassContext(plan.program, res.target, load_rules([], target), 0), configs=8)
    assert cost(tuned.schedules[0], target).time_s < cost(worse, target).time_s
    assert all(k is s.kernel for v in versions.values() for k, s in zip(v.kernels, v.schedules))


def test_integer_chains_fuse_their_sums_complete_in_each_region():
    """An i8 inverted residual: each region's sums run whole inside the consumer's tile, so
    an integer producer is rounded (saturated) when read, as unfused; the chain fuses on npu,
    verifies, and the plan's C, run on this CPU, equals the interpreter exactly."""
    src = ("input X: i8[1, 8, 16, 16]\nparam W1: i8[24, 8, 1, 1]\nparam Wd: i8[24, 1, 3, 3]\n"
           "param W2: i8[8, 24, 1, 1]\nE = conv2d(X, W1)\nR = relu(E)\n"
           "D = depthwise_conv2d(R, Wd, stride=1, padding=1)\nP = conv2d(D, W2)\noutput P\n")
    res = autocomp.optimize(src, target="npu", tune=0)
    (kernel,) = res.after.kernels
    assert {t for t, _, _ in kernel.compute_at} == {"E", "R", "D"}
    assert res.report["verified"] and res.report["speedup_vs_library"] > 1.2
    inputs = random_inputs(res.program, 7)
    expected = run(res.program, inputs)
    compiled = host.compile_plan(res.after, load_target("host"))
    outputs, _ = host.run_compiled(compiled, inputs, repeats=0, threads=2)
    np.testing.assert_array_equal(outputs["P"], expected["P"])


def test_a_layernorm_is_computed_at_the_contraction_that_reads_it(tmp_path):
    """Pre-LN (GPT-2's ln → c_attn): the library layernorm is a prologue of the projection,
    each row tile normalised on chip where the projection reads it (norm_prologue), and kept
    only because it is faster than the two kernels (with the rule off: two kernels, slower)."""
    src = ("input X: f32[64, 256]\nparam g: f32[256]\nparam b: f32[256]\nparam W: f32[256, 768]\n"
           "param c: f32[768]\nN = layernorm(X, g, b)\nQ = linear(N, W, c)\noutput Q\n")
    res = autocomp.optimize(src, target="npu", tune=0)
    (kernel,) = res.after.kernels
    assert {"N", "Q"} <= set(kernel.ops)
    assert {t for t, _, _ in kernel.compute_at} >= {"N"}
    assert res.report["verified"] and res.report["speedup_vs_library"] > 1.02
    entry = next(e for e in res.report["rules"] if e["rule"] == "norm_prologue")
    assert entry["applied"] and entry["ops"] == ["N", "Q"]
    rules = tmp_path / "off.yaml"
    rules.write_text("fusion:\n  rules:\n    - name: norm_prologue\n      enabled: false\n")
    off = autocomp.optimize(src, target="npu", tune=0, rules=[str(rules)])
    assert len(off.after.kernels) == 2
    assert off.report["optimized"]["time_s"] > res.report["optimized"]["time_s"]


ATTENTION_ROWS = """input  Q: f32[1, 512, 16]
input  K: f32[1, 512, 16]
input  V: f32[1, 512, 16]
S[h, i, j] += Q[h, i, d] * K[h, j, d]
M[h, i] max= S[h, i, j]
E[h, i, j] = exp(S[h, i, j] - M[h, i])
Z[h, i] += E[h, i, j]
P[h, i, j] = E[h, i, j] / Z[h, i]
O[h, i, d] += P[h, i, j] * V[h, j, d]
output O
"""


def test_computed_at_score_rows_are_held_on_chip_and_overflow_it():
    # Whole rows of scores computed at a row tile of the output live at the compute level:
    # one buffer of rows x 512 (E and P written in place of S), plus the row max and sum.
    # Too many rows for the level spill, so the search cannot pick them for free.
    from autocomp_jupyter.accel.cost import kernel_model
    program = parse(ATTENTION_ROWS)
    kernel = Kernel.from_ops(program, [op.name for op in program.ops], anchor="O")
    target = load_target("gemmini")
    levels = target.tiling_levels
    at = [{"primitive": "compute_at", "tensor": t, "loop": "i", "level": levels[0]} for t in "PZEMS"]

    def schedule(rows):
        return replay(kernel, [{"primitive": "tile", "loop": "i", "level": lv, "size": rows} for lv in levels] + at,
                      levels)

    def held(rows):
        s = schedule(rows)
        model = kernel_model(s.kernel, target)
        tiles, orders, *_ = model.normalise(*model.schedule_arrays(s))
        return model.capacity_footprints(tiles, orders)[0][0]

    grown = held(64) - held(8)
    assert 56 * 512 * 4 <= grown < 2 * 56 * 512 * 4      # one row buffer, not one per tensor
    assert evaluate(schedule(8), target).spill_ratio == 0.0
    assert evaluate(schedule(512), target).spill_ratio > 1.0   # 1 MiB of scores in 256 KiB


def causal_row_sum_producer():
    """(kernel, target, kernel model, producer): a causal softmax's row sum computed at the
    scores' row tiles on gpu, the producer nest the memo and region tests cost."""
    from autocomp_jupyter.accel.cost import kernel_model

    program = parse("""input S: f32[64, 256]
E[s, t] = exp(S[s, t]) where t <= s
Z[s] += E[s, t] where t <= s
Y[s, t] = E[s, t] / Z[s]
output Y
""")
    kernel = Kernel.from_ops(program, [op.name for op in program.ops], anchor="Y").with_compute_at("Z", "s", "L2")
    target = load_target("gpu")
    model = kernel_model(kernel, target)
    (producer,) = model.producers
    return kernel, target, model, producer


def test_a_producer_runs_its_unfollowed_loops_whole_where_that_is_faster():
    # the causal row sum computed at the scores' row tiles: alone its schedule tiles the keys
    # (its domain skips more with small tiles); in a region of rows it may run them whole
    kernel, target, model, producer = causal_row_sum_producer()
    tiles, orders, parallel, _ = model.normalise(*model.schedule_arrays(replay(kernel, [
        {"primitive": "tile", "loop": "s", "level": "L2", "size": 8}], target.tiling_levels)))
    from autocomp_jupyter.accel.cost.tiles import _tile_counts
    sub, _ = producer.region_tiles(tiles, orders, _tile_counts(model.extents[None, :], tiles)[0], parallel)
    cost, _, whole = producer._choose(sub)
    assert producer.whole and whole[0]          # the keys tiled alone, whole in the region
    own = producer._choose_order(sub)[0].time_s
    alt = producer._choose_order(producer._whole(sub))[0].time_s if producer.whole else own
    assert cost.time_s[0] == pytest.approx(min(own[0], alt[0]))
    chosen = producer.schedule(sub[0])          # what the simulator replays: the same choice
    assert evaluate(chosen, target).time_s == pytest.approx(cost.time_s[0])
