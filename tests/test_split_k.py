"""Split-K decode (FlashDecoding): the rewrite is exact (GQA, a chunk that does not divide the
cache, with and without the cache write), the host C of the split program matches the
interpreter, and the pipeline step splits decode where the cost model gains and never prefill."""
from __future__ import annotations

import numpy as np
import pytest

import autocomp_jupyter as autocomp
from autocomp_jupyter import interp
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.interp import equivalent
from autocomp_jupyter.rules.split_k import find, split_k
from autocomp_jupyter.rules.split_k_step import chunk_counts, row_capacity

# GQA: 2 KV heads, 3 query heads each; 37 cache positions (no chunk count divides it but 37)
DECODE = """input  q:   f32[2, 3, 8]
input  Kc:  f32[2, 37, 8]
input  Vc:  f32[2, 37, 8]
input  pos: i32[1]
S[g, r, t] += q[g, r, d] * Kc[g, t, d] * 0.125
Sm[g, r, t] = select(less_equal(t, pos[0]), S[g, r, t], 0 - 1000000000)
M[g, r] max= Sm[g, r, t]
E[g, r, t] = exp(Sm[g, r, t] - M[g, r])
Z[g, r] += E[g, r, t]
O[g, r, d] += E[g, r, t] * Vc[g, t, d]
Y[g, r, d] = O[g, r, d] / Z[g, r]
output Y
"""
WRITE = """input  q:   f32[2, 3, 8]
input  kn:  f32[2, 8]
input  vn:  f32[2, 8]
input  Kc:  f32[2, 37, 8]
input  Vc:  f32[2, 37, 8]
input  pos: i32[1]
K2[g, t, d] = select(equal(t, pos[0]), kn[g, d], Kc[g, t, d])
V2[g, t, d] = select(equal(t, pos[0]), vn[g, d], Vc[g, t, d])
S[g, r, t] += q[g, r, d] * K2[g, t, d] * 0.125
Sm[g, r, t] = select(less_equal(t, pos[0]), S[g, r, t], 0 - 1000000000)
M[g, r] max= Sm[g, r, t]
E[g, r, t] = exp(Sm[g, r, t] - M[g, r])
Z[g, r] += E[g, r, t]
O[g, r, d] += E[g, r, t] * V2[g, t, d]
Y[g, r, d] = O[g, r, d] / Z[g, r]
output Y, K2, V2
"""


def _reference(inputs: dict) -> np.ndarray:
    s = np.einsum("grd,gtd->grt", inputs["q"], inputs["Kc"]) * 0.125
    s[:, :, inputs["pos"][0] + 1:] = -1e9
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("grt,gtd->grd", p / p.sum(-1, keepdims=True), inputs["Vc"])


@pytest.mark.parametrize("chunks", [2, 5, 7, 37])
def test_split_is_exact_for_any_chunk_count(chunks):
    program = parse(DECODE)
    split = split_k(program, chunks)
    rng = np.random.default_rng(chunks)
    inputs = {"q": rng.standard_normal((2, 3, 8)).astype(np.float32),
              "Kc": rng.standard_normal((2, 37, 8)).astype(np.float32),
              "Vc": rng.standard_normal((2, 37, 8)).astype(np.float32), "pos": np.array([20], dtype=np.int32)}
    got = interp.run(split, inputs)["Y"]
    assert np.abs(got - _reference(inputs)).max() < 1e-5
    assert equivalent(program, split).ok
    # the tail chunk is cut by the domain: 37 positions in chunks of ceil(37 / chunks)
    size = -(-37 // chunks)
    chunk_max = next(st for st in split.statements if st.target == "M_chunk_max")
    assert chunk_max.points == 2 * 3 * 37 and chunk_max.extents["u"] == size


def test_split_with_the_cache_write_keeps_the_write_and_is_exact():
    program = parse(WRITE)
    split = split_k(program, 4)
    assert {op.name for op in split.ops} >= {"K2", "V2", "M_chunk_max", "O_chunks", "O_weight"}
    assert equivalent(program, split).ok


def test_a_softmax_normalised_before_the_weighted_sum_is_split_with_the_division_deferred():
    normalised = DECODE.replace("O[g, r, d] += E[g, r, t] * Vc[g, t, d]\nY[g, r, d] = O[g, r, d] / Z[g, r]\n",
                                "P[g, r, t] = E[g, r, t] / Z[g, r]\nY[g, r, d] += P[g, r, t] * Vc[g, t, d]\n")
    program = parse(normalised)
    assert find(program).p.target == "P"
    split = split_k(program, 6)
    assert "P" not in {op.name for op in split.ops}
    assert str(split.op("Y").statements[0]).startswith("Y[g, r, d] = (Y_sum")
    assert equivalent(program, split).ok


def test_find_refuses_what_it_cannot_split():
    no_sum = DECODE.replace("Z[g, r] += E[g, r, t]\n", "").replace("O[g, r, d] / Z[g, r]", "O[g, r, d]")
    assert isinstance(find(parse(no_sum)), str)
    assert "one plain sum and one weighted sum" in find(parse(no_sum))


def test_chunk_counts_fill_the_machine_and_prefill_is_never_split():
    gpu = load_target("gpu")
    match = find(parse(DECODE.replace("37", "4096")))
    counts = chunk_counts(match, gpu)
    assert counts[0] == 2 and max(counts) * match.rows >= gpu.compute.units
    prefill = DECODE.replace("f32[2, 3, 8]", "f32[2, 2048, 8]").replace("37", "64")
    assert find(parse(prefill)).rows >= row_capacity(gpu)


def test_the_pipeline_does_not_split_rows_that_fill_the_array():
    # 2 x 16 query rows on gemmini's 16 PE rows: the array is full unsplit (as at prefill)
    program = DECODE.replace("f32[2, 3, 8]", "f32[2, 16, 8]")
    report = autocomp.optimize(program, target="gemmini", tune=0).report
    entry = next(e for e in report["rules"] if e["rule"] == "split_k")
    assert not entry["applied"] and "32 softmax rows fill the machine (16 rows at once)" in entry["why"]
    assert report["verified"] and not any("chunk" in k["name"] for k in report["kernels"])


def test_host_c_of_the_split_program_matches_the_interpreter():
    split = split_k(parse(DECODE), 5)
    measured = autocomp.optimize(split, target="host", tune=0, measure=True).report["measured"]
    assert measured["matches_interpreter"], measured["reason"]




def test_tutorial_check_split_chunks_accepts_the_solution_and_refuses_the_rest():
    import io
    import sys
    from contextlib import redirect_stdout
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tutorials"))
    import checks

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tutorials" / "solutions"))
    from fill import solutions

    answer: dict = {}
    exec(solutions("09_attention_and_llm_inference")["65ac3e0b"], answer)     # Exercise 4's solution
    for value, ok, says in ((answer["n_chunks"], True, "✓ correct: 16 chunks of 256 positions: 128 blocks"),
                            (14, True, "✓ correct"), (..., False, "✗ not yet: fill in `n_chunks`"),
                            (8, False, "✗ not yet: 8 chunks x 8 heads = 64 blocks leave SMs idle"),
                            (64, False, "✗ not yet: 64 chunks is more than filling")):
        out = io.StringIO()
        with redirect_stdout(out):
            checks.check_split_chunks(value)
        assert checks.LAST.ok is ok and out.getvalue().startswith(says), out.getvalue()


def test_a_large_split_is_checked_on_the_scaled_twin(monkeypatch):
    from autocomp_jupyter import verify

    source = DECODE.replace("37", "4096")
    program = parse(source)
    split = split_k(program, 16)
    monkeypatch.setattr(verify, "EQUIVALENCE_POINTS", 1000)      # as if too large to run whole
    ran = []
    real = verify._equivalent
    monkeypatch.setattr(verify, "_equivalent",
                        lambda a, b, seed=0: ran.append(max(a.tensor("Kc").shape)) or real(a, b, seed))
    assert verify.equivalent_at_scale(program, split).ok
    assert ran and ran[-1] < 4096                # the twin's cache, split by the replayed rewrite


@pytest.mark.parametrize("t_tile", [1, 64, 37 * 4])
def test_the_cache_write_costs_one_round_trip_whatever_its_tiles(t_tile):
    """An in-place row update loads only the tile holding its row (accel/cost.py, RowTiles):
    a tile of one row or the whole cache, the write waits about one DRAM latency, not one per
    tile it skips; so decode with its write costs about what it costs without."""
    from autocomp_jupyter.accel.cost import evaluate
    from autocomp_jupyter.ir.schedule import Kernel, Schedule
    from autocomp_jupyter.rules.in_place import mark_in_place_updates

    program, _ = mark_in_place_updates(parse(WRITE.replace("37", "148")))
    gpu = load_target("gpu")
    kernel = Kernel.from_ops(program, ["K2"])
    levels = gpu.tiling_levels
    tiles = {"g": {lv: 2 for lv in levels}, "t": {lv: t_tile for lv in levels}, "d": {lv: 8 for lv in levels}}
    cost = evaluate(Schedule(kernel, tiles=tiles, order={lv: ("g", "t", "d") for lv in levels}, annotations={},
                             levels=levels), gpu)
    dram_latency = gpu.memory[-1].latency_cycles / (gpu.clock_ghz * 1e9)
    assert cost.time_s < 3 * dram_latency, cost.limits
