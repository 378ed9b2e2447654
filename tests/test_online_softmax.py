"""Online softmax (FlashAttention): the rewrite, its tiled run, its legality, its cost and the
rule that picks it where the score rows do not fit on chip."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

import pytest

import autocomp_jupyter as autocomp
from autocomp_jupyter import interp, poly
from autocomp_jupyter.accel.cost import evaluate
from autocomp_jupyter.accel.sim import compare
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.interp import check_tiled, equivalent
from autocomp_jupyter.ir.loopnest import lower, whole_loops
from autocomp_jupyter.ir.schedule import Kernel
from autocomp_jupyter.rules.online_softmax import online_softmax
from autocomp_jupyter.schedule import IllegalStepError, replay

COMPREHENSIONS = """input Q: f32[2, 48, 16]
input K: f32[2, 40, 16]
input V: f32[2, 40, 8]
S[h, i, j] += Q[h, i, d] * K[h, j, d]
M[h, i] max= S[h, i, j]
E[h, i, j] = exp(S[h, i, j] * 0.25 - M[h, i] * 0.25)
Z[h, i] += E[h, i, j]
P[h, i, j] = E[h, i, j] / Z[h, i]
O[h, i, e] += P[h, i, j] * V[h, j, e]
output O
"""
LIBRARY = """input Q: f32[2, 48, 16]
input Kt: f32[2, 16, 40]
input V: f32[2, 40, 8]
S = batch_matmul(Q, Kt)
T[b, i, j] = S[b, i, j] * 0.25
P = softmax(T)
O = batch_matmul(P, V)
output O
"""
LEVELS = ("L2", "L1")


def _online(source):
    program = parse(source)
    rewritten, anchor = online_softmax(program, [op.name for op in program.ops])
    kernel = Kernel.from_ops(rewritten, [op.name for op in rewritten.ops], anchor=anchor)
    return program, rewritten, kernel


def _key_tiled(kernel, key_tiles=(16, 4), rows=16):
    key = kernel.loop_names[-1]
    steps = [{"primitive": "tile", "loop": key, "level": lv, "size": t} for lv, t in zip(LEVELS, key_tiles)]
    steps.append({"primitive": "tile", "loop": "i", "level": "L2", "size": rows})
    return replay(kernel, steps, LEVELS)


@pytest.mark.parametrize("source", [COMPREHENSIONS, LIBRARY], ids=["comprehensions", "library"])
def test_the_rewrite_defers_the_division_and_marks_the_running_max(source):
    program, rewritten, kernel = _online(source)
    assert equivalent(program, rewritten).ok
    assert not any(t.name == "P" for t in rewritten.tensors)          # the probabilities are gone
    marked = [st for st in kernel.statements if st.rescale is not None]
    assert [st.reduce for st in marked] == [None, "+", "+"]            # the exp, the row sum, the weighted sum
    assert {st.rescale.scale for st in marked} == ({0.25} if "softmax" not in source else {1.0})
    assert kernel.anchor_statement.rescale is not None                 # the weighted sum anchors the kernel
    last = kernel.statements[-1]
    assert last.target == "O" and last.expr.op == "/"                  # O = O_sum / Z, over the output
    assert kernel.loop_names[-1] not in whole_loops(kernel)            # the key loop may be tiled


def test_a_softmax_read_elsewhere_or_without_a_weighted_sum_is_left_alone():
    alone = parse("""input X: f32[4, 8]
M[i] max= X[i, j]
E[i, j] = exp(X[i, j] - M[i])
Z[i] += E[i, j]
P[i, j] = E[i, j] / Z[i]
output P
""")
    assert isinstance(online_softmax(alone, [op.name for op in alone.ops]), str)
    squared = parse(COMPREHENSIONS.replace("O[h, i, e] += P[h, i, j] * V[h, j, e]",
                                           "O[h, i, e] += P[h, i, j] * P[h, i, j] * V[h, j, e]"))
    assert isinstance(online_softmax(squared, [op.name for op in squared.ops]), str)


def test_key_tiles_run_rescaled_match_the_interpreter_and_fail_without_the_rescale(monkeypatch):
    _, rewritten, kernel = _online(COMPREHENSIONS)
    schedule = _key_tiled(kernel)
    nest = lower(schedule)
    # one instance of the key tile loops holds the max, the exp and both sums
    assert nest.pretty().count("for j_L2 in range") + nest.pretty().count("for k_L2 in range") <= 1
    assert poly.check_schedule(schedule).ok
    assert check_tiled(schedule, rewritten).ok
    monkeypatch.setattr(interp, "_rescale", lambda *args: None)
    assert not check_tiled(schedule, rewritten).ok


def test_isl_and_the_placement_check_refuse_what_online_softmax_does_not_allow():
    _, rewritten, kernel = _online(COMPREHENSIONS)
    # a weighted sum that does not rescale, over an exp relative to the running max
    plain = tuple(replace(st, rescale=None) if st is kernel.anchor_statement else st for st in kernel.statements)
    with pytest.raises(IllegalStepError, match="without rescaling its sums"):
        _key_tiled(replace(kernel, statements=plain))
    # with nothing marked, the exp cannot share the key tiles of the max it reads: its own loop
    unmarked = tuple(replace(st, rescale=None) for st in kernel.statements)
    assert kernel.loop_names[-1] in whole_loops(replace(kernel, statements=unmarked))


def _key_tiled_on_gemmini(inner: int):
    """The online-softmax kernel on gemmini, keys tiled 64 then `inner`, S computed at the key tiles."""
    _, _, kernel = _online(COMPREHENSIONS.replace("48", "128").replace("40", "256"))
    target = load_target("gemmini")
    levels = target.tiling_levels
    key = kernel.loop_names[-1]
    steps = [{"primitive": "tile", "loop": key, "level": levels[0], "size": 64},
             {"primitive": "tile", "loop": key, "level": levels[1], "size": inner},
             {"primitive": "compute_at", "tensor": "S", "loop": key, "level": levels[0]}]
    return replay(kernel, steps, levels), target


def test_the_model_charges_each_key_tile_s_rescale_and_the_simulator_agrees():
    (fine_s, target), (coarse_s, _) = _key_tiled_on_gemmini(16), _key_tiled_on_gemmini(64)
    fine, coarse = evaluate(fine_s, target), evaluate(coarse_s, target)
    # four times the key tiles, four times the rescales of the 2x128x8 sums and 2x128 row sums
    extra = 2 * 128 * (8 + 1) * (1 + 1 / 8) * (256 // 16 - 256 // 64)
    assert fine.compute_s - coarse.compute_s == pytest.approx(
        extra / target.compute.vector_ops_per_cycle / (target.clock_ghz * 1e9), rel=0.35)
    for tiled in (fine_s, coarse_s):
        assert compare(tiled, target)["time_error"] < 0.10


def test_long_attention_on_gemmini_runs_online_and_verifies():
    # 1024 keys of f32 scores: 16 rows fill Gemmini's 256 KiB scratchpad, so rows kept whole
    # leave few rows per tile; with the key loop tiled the PE array and the vector unit stay busy.
    source = COMPREHENSIONS.replace("[2, 48, 16]", "[1, 1024, 64]").replace("[2, 40, 16]", "[1, 1024, 64]") \
        .replace("[2, 40, 8]", "[1, 1024, 64]")
    result = autocomp.optimize(parse(source), target="gemmini", tune=0)
    report = result.report
    entries = {e["rule"]: e for e in report["rules"] if e["rule"] in ("flash_attention", "fused_attention")}
    assert entries["flash_attention"]["applied"], entries
    assert report["verified"] and len(report["kernels"]) == 1
    assert report["speedup_vs_library"] > 2.0
    assert "online softmax" in result.code("pseudo")
    assert "online softmax" in result.code("c")


def test_the_c_of_an_online_softmax_rescales_and_matches_the_interpreter(monkeypatch):
    from autocomp_jupyter import host
    from autocomp_jupyter.codegen import c as cgen
    from autocomp_jupyter.interp import random_inputs, run

    source = COMPREHENSIONS.replace("[2, 48, 16]", "[2, 512, 32]").replace("[2, 40, 16]", "[2, 512, 32]") \
        .replace("[2, 40, 8]", "[2, 512, 32]")
    plan = autocomp.optimize(parse(source), target="gemmini", tune=0).after
    assert any(st.rescale for k in plan.kernels for st in k.statements)
    inputs = random_inputs(plan.program, 5)
    want = run(plan.program, inputs)["O"]
    for threads in (1, 2):
        got, _ = host.run_compiled(host.compile_plan(plan), inputs, threads=threads)
        assert np.abs(got["O"] - want).max() < 1e-5 * np.abs(want).max()
    monkeypatch.setattr(cgen._KernelWriter, "rescale_sums", lambda *args: None)
    got, _ = host.run_compiled(host.compile_plan(plan), inputs, threads=1)
    assert np.abs(got["O"] - want).max() > 1e-3 * np.abs(want).max()     # the rescale is what makes it right


def test_an_epilogue_after_the_weighted_sum_keeps_its_shape():
    # ONNX exports end attention with a transpose/reshape of the heads: the deferred sum has
    # the weighted sum's shape, not the epilogue's
    source = LIBRARY.replace("output O", "Y[i, b, e] = O[b, i, e]\noutput Y")
    program = parse(source)
    rewritten, anchor = online_softmax(program, [op.name for op in program.ops])
    assert rewritten.tensor("O_sum").shape == program.tensor("O").shape
    assert equivalent(program, rewritten).ok


def test_a_causal_softmax_s_sums_take_the_domain_of_their_exps():
    # Z sums exps that are 0 above the diagonal: the rewrite gives it the triangle, exactly
    causal = COMPREHENSIONS.replace("[2, 40, 16]", "[2, 48, 16]").replace("[2, 40, 8]", "[2, 48, 8]") \
        .replace("* 0.25)\n", "* 0.25) where j <= i\n", 1)
    assert "where j <= i" in causal
    program, rewritten, kernel = _online(causal)
    sums = [st for st in kernel.statements if st.reduce == "+" and st.rescale is not None]
    assert sums and all(st.domain for st in sums)
    assert equivalent(program, rewritten, seed=3)


def test_the_array_s_rescales_are_the_vector_unit_s_work():
    (fine_s, target), (coarse_s, _) = _key_tiled_on_gemmini(16), _key_tiled_on_gemmini(64)
    fine, coarse = evaluate(fine_s, target), evaluate(coarse_s, target)
    # more key tiles, more rescales: on the vector unit, none on the PE array
    assert fine.limits["compute (PE array)"] == pytest.approx(coarse.limits["compute (PE array)"])
    assert fine.limits["compute (vector unit)"] > coarse.limits["compute (vector unit)"]
