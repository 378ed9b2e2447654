"""Whole networks at scale: a network's repeated layers cost the work of its distinct ones.

Counts, not timings: the per-structure caches (`caches`, keyed by `canon`) make the library tuning, the
tiling searches, the isl verdicts and the tiled runs of a 20-layer network exactly as many
as those of a 10-layer one (the layers beyond the first few repeat), and every verdict
reached through the cache is the one a fresh check gives (in the kernel's own names).
"""
from __future__ import annotations

import pytest

import autocomp_jupyter as ac
from autocomp_jupyter import caches, canon, poly
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import Kernel, Schedule

# Tiled runs are keyed by their inputs' values too (a verdict may depend on them), so each
# layer's run is its own; everything else is structural.
WORK = ("library_schedule", "tiling.search_tiles", "poly.check_schedule", "tune.legality")


def network(layers: int) -> str:
    """An MLP of `layers` identical matmul + bias + relu layers."""
    lines = ["input X: f32[8, 32]"]
    prev = "X"
    for n in range(1, layers + 1):
        lines += [f"param W{n}: f32[32, 32]", f"param B{n}: f32[32]", f"H{n} = matmul({prev}, W{n})",
                  f"Y{n} = add(H{n}, B{n})", f"R{n} = relu(Y{n})"]
        prev = f"R{n}"
    return "\n".join(lines + [f"output {prev}"]) + "\n"


def distinct_work(layers: int) -> tuple[dict, dict]:
    caches.clear_all()
    res = ac.optimize(network(layers), target="tpu", tune=0)
    assert res.report["verified"] is True
    stats = caches.stats()
    return {name: stats[name]["misses"] for name in WORK}, {name: stats[name]["hits"] for name in WORK}, res


def test_repeated_layers_cost_the_work_of_the_distinct_ones():
    misses_10, hits_10, res_10 = distinct_work(10)
    misses_20, hits_20, res_20 = distinct_work(20)
    assert misses_20 == misses_10                          # no new library tune, search or isl check
    assert all(misses_10[name] > 0 for name in WORK)
    assert hits_20["library_schedule"] > hits_10["library_schedule"]
    assert hits_20["poly.check_schedule"] > hits_10["poly.check_schedule"]
    # The same decisions for the same layers: every middle layer gets the same schedule.
    assert res_20.report["speedup_vs_library"] > 1
    middle = [k for k in res_20.report["kernels"] if k["ops"] and k["ops"][0] in ("H5", "H12")]
    assert len(middle) == 2 and middle[0]["tiles"] == middle[1]["tiles"] and middle[0]["order"] == middle[1]["order"]


def test_the_report_says_how_kernels_were_run_tile_by_tile():
    res = ac.optimize(network(3), target="tpu", tune=0)
    checks = res.report["verification"]
    assert sum(checks["tiled_runs"].values()) == len(res.report["kernels"])
    # The fused plan's program is rewritten (the bias add inlined into the relu); the twin,
    # built from the source text, has the same inlines replayed, so every kernel runs tile
    # by tile on it: none is left to isl's verdict alone.
    assert any(e["rule"] == "inline" and e["applied"] for e in res.report["rules"])
    assert checks["tiled_runs"] == {"twin": len(res.report["kernels"])} and checks["isl_only"] == []
    assert checks["twin_max_extent"] == 16


def test_an_average_pool_runs_on_its_twin_although_its_divisor_is_the_twins():
    # The twin's mean divides by its own (smaller) window: constants may differ, accesses may not.
    src = ("input x: f32[1, 64, 56, 56]\nparam w: f32[32, 64, 1, 1]\ny = conv2d(x, w)\n"
           "z = global_avgpool(y)\na = avgpool2d(y, kernel=2)\noutput z\noutput a\n")
    res = ac.optimize(src, target="tpu", tune=0)
    checks = res.report["verification"]
    assert res.report["verified"] is True
    assert checks["isl_only"] == [] and checks["tiled_runs"] == {"twin": len(res.report["kernels"])}


def gemm_kernel(a: str, b: str, c: str) -> Kernel:
    # with its relu: two statements, which isl proves (one alone is `_plainly_legal`)
    program = parse(f"input {a}: f32[16, 8]\ninput {b}: f32[8, 12]\n{c} = matmul({a}, {b})\nR = relu({c})\n", "<t>")
    return Kernel.from_ops(program, [c, "R"])


@pytest.mark.parametrize("loop", ["k", "i"])
def test_a_cached_verdict_is_the_fresh_verdict_in_the_kernels_own_names(loop):
    first, second = gemm_kernel("A", "B", "C"), gemm_kernel("P", "Q", "OUT")
    assert canon.canonical_kernel(first) is canon.canonical_kernel(second)
    tiles = {"i": {"L2": 8, "L1": 4}, "j": {"L2": 12, "L1": 4}, "k": {"L2": 8, "L1": 4}}

    def schedule(kernel):
        return Schedule(kernel, tiles=tiles, annotations={"parallel": (loop,)}, levels=("L2", "L1"))

    caches.clear_all()
    fresh = poly.check_schedule(schedule(second))
    fresh_message = fresh.reason
    caches.clear_all()
    poly.check_schedule(schedule(first))                       # proved under the first kernel's names
    cached = poly.check_schedule(schedule(second))            # answered from the cache
    assert caches.stats()["poly.check_schedule"]["hits"] == 1
    assert cached.ok == fresh.ok == (loop == "i")
    assert cached.reason == fresh_message
    if not cached.ok:
        assert "OUT" in cached.reason and " on C" not in cached.reason
        assert [v.tensor for v in cached.violated] == [v.tensor for v in fresh.violated]


def test_library_tuned_on_an_executor_is_the_serial_library():
    src = network(3).replace("input X: f32[8, 32]", "input X: f32[8, 32]\nparam V: f32[32, 48]") + \
        "Z = matmul(R3, V)\noutput Z\n"
    caches.clear_all()
    serial = ac.optimize(src, target="npu", tune=0).report
    caches.clear_all()
    pooled = ac.optimize(src, target="npu", tune=0, executor="processes:2").report
    assert caches.stats()["library_schedule"]["entries"] >= 3        # tuned in the pool, cached here
    for field in ("library", "optimized", "kernels", "gain_breakdown", "speedup_vs_library"):
        assert pooled[field] == serial[field]
