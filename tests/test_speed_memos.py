"""What the pipeline remembers to optimise whole networks faster gives what computing again
gives: producer nests' costs by region tiles, equivalence runs sharing the original's values,
isl verdicts without the vectorize/unroll flags, one kernel list per program, and BLAS on
one thread while `optimize` runs."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autocomp_jupyter import interp, poly, verify
from autocomp_jupyter.accel.cost.tiles import _tile_counts
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import Kernel, kernels_unfused
from autocomp_jupyter.schedule import replay
from test_compute_at import causal_row_sum_producer

MLP = """input  X: f32[8, 6]
param  W1: f32[6, 10]
param  b1: f32[10]
param  W2: f32[10, 4]
H[m, n] += X[m, k] * W1[k, n]
G[m, n] = gelu(H[m, n] + b1[n])
O[m, n] += G[m, k] * W2[k, n]
output O
"""


def _producer_regions():
    kernel, target, model, producer = causal_row_sum_producer()
    rows = [model.normalise(*model.schedule_arrays(replay(kernel, [
        {"primitive": "tile", "loop": "s", "level": "L2", "size": size},
        {"primitive": "tile", "loop": "t", "level": "L2", "size": 64}], target.tiling_levels)))
        for size in (4, 8, 16, 8)]
    tiles, orders, parallel, _ = (np.concatenate([r[j] for r in rows]) for j in range(4))
    sub, _ = producer.region_tiles(tiles, orders, _tile_counts(model.extents[None, :], tiles)[0], parallel)
    return producer, sub


def test_a_producer_nest_costs_each_region_once_and_as_computing_it_again(monkeypatch):
    from autocomp_jupyter.accel.cost import producer as producers

    producer, sub = _producer_regions()
    producers._BANKS.data.clear()
    fresh = producer._choose(sub)[0]
    remembered = producer._remembered(sub)
    for field in ("time_s", "energy_j", "bytes", "compute_s", "spill_ratio"):
        assert np.array_equal(getattr(remembered, field), getattr(fresh, field)), field
    assert len(producers._BANKS.get(producer._bank_key)[0]) == 3     # the repeated tiling costed once

    def refused(_):
        raise AssertionError("a remembered region costed again")

    # every row known: read back, in the batch's order (the model is cached: patched for this test only)
    monkeypatch.setattr(producer, "_choose", refused)
    again = producer._remembered(sub[::-1])
    assert np.array_equal(again.time_s, fresh.time_s[::-1])
    assert np.array_equal(again.bytes, fresh.bytes[::-1])


def test_equivalence_checks_share_the_original_run_and_give_its_verdicts(monkeypatch):
    original = parse(MLP)
    inlined = parse(MLP.replace("G[m, n] = gelu(H[m, n] + b1[n])\nO[m, n] += G[m, k] * W2[k, n]",
                                "O[m, n] += gelu(H[m, k] + b1[k]) * W2[k, n]"))
    wrong = parse(MLP.replace("gelu(H[m, n] + b1[n])", "gelu(H[m, n] - b1[n])"))
    ran = []
    real = interp.run_statement
    monkeypatch.setattr(interp, "run_statement", lambda st, env, t: ran.append(st.target) or real(st, env, t))
    verify._REFERENCE_RUNS.clear()
    for candidate in (inlined, wrong):
        ours = verify._equivalent(original, candidate, 0)
        theirs = interp.equivalent(original, candidate, seed=0)
        assert ours == theirs
    assert not verify._equivalent(original, wrong, 0).ok
    ran.clear()
    assert verify._equivalent(original, inlined, 0).ok
    assert ran == []                                 # every statement met before on the same values
    # the inlined program's H is the original's statement on the same inputs: not run for it
    verify._REFERENCE_RUNS.clear()
    verify._equivalent(original, original, 0)
    ran.clear()
    verify._equivalent(original, inlined, 0)
    assert ran == ["O"]


def test_isl_verdicts_are_shared_by_a_schedule_and_its_vectorised_unrolled_variant():
    program = parse(MLP)
    kernel = Kernel.from_ops(program, ["H", "G"])    # two statements: isl's to prove (not `_plainly_legal`)
    schedule = replay(kernel, [{"primitive": "tile", "loop": "m", "level": "L1", "size": 4}], ("L2", "L1"))
    flagged = replace(schedule, annotations={**schedule.annotations, "vectorize": "n", "unroll": 4})
    poly.policy._VERDICTS.clear()
    assert poly.check_schedule(schedule).ok
    hits = poly.policy._VERDICTS.hits
    assert poly.check_schedule(flagged).ok
    assert poly.policy._VERDICTS.hits == hits + 1
    racing = replace(flagged, annotations={**flagged.annotations, "parallel": ("k",)})
    assert not poly.check_schedule(racing).ok     # parallel is not a flag: proved on its own


def test_kernels_unfused_are_made_once_per_program():
    program = parse(MLP)
    kernels = kernels_unfused(program)
    assert kernels_unfused(program) is kernels
    assert kernels == tuple(Kernel.from_ops(program, [op.name]) for op in program.ops)
    assert [op.name for op in program.readers("H")] == ["G"]


def test_blas_runs_on_one_thread_inside_and_as_before_after():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from autocomp_jupyter import blas

    before = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    if not before:
        pytest.skip("numpy loaded no BLAS library threadpoolctl knows")
    with blas.one_thread():
        assert all(p["num_threads"] == 1 for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas")
    assert [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"] == before


def test_textbook_tiles_are_computed_once_per_structure_and_as_computing_them_again(monkeypatch):
    from autocomp_jupyter.accel.cost import model as cost_model

    program = parse(MLP)
    first, second = (k for k in kernels_unfused(program) if k.anchor_statement.target in ("H", "O"))
    target = load_target("npu")
    cost_model._TEXTBOOK_TILES.clear()
    fresh = [cost_model.textbook_schedule(k, target) for k in (first, second)]
    assert len(cost_model._TEXTBOOK_TILES) == 2     # [8, 6] x [6, 10] and [8, 10] x [10, 4] differ
    monkeypatch.setattr(cost_model, "_textbook_tiles", lambda *a: pytest.fail("textbook tiles computed again"))
    again = [cost_model.textbook_schedule(k, target) for k in (first, second)]
    assert again == fresh and again[0].kernel is first
    renamed = parse(MLP.replace("W1", "Wa").replace("H", "Q"))   # the same structure, other names
    kernel = next(k for k in kernels_unfused(renamed) if k.anchor_statement.target == "Q")
    schedule = cost_model.textbook_schedule(kernel, target)
    assert schedule.kernel is kernel and schedule.tiles == fresh[0].tiles
    assert schedule.annotations == fresh[0].annotations


def test_statement_schedules_hash_once_and_compare_by_value():
    from autocomp_jupyter.poly.schedules import ScheduleDim, StatementSchedule

    dims = (ScheduleDim("i_o", "floor(i/4)"), ScheduleDim("i", "i mod 4"))
    a, b = StatementSchedule("S0", ("i",), dims), StatementSchedule("S0", ("i",), tuple(dims))
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert "_hash" in a.__dict__ and a != a._replace(dims[:1])
    import pickle
    assert pickle.loads(pickle.dumps(a)) == a and "_hash" not in pickle.loads(pickle.dumps(a)).__dict__
