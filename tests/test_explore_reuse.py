"""What a sweep reuses from one design to the next is exact: every point's report is the one a
fresh `optimize` on that design's target gives (caches emptied first), and the keys the reused
results are found by change with every field the searches read. Tiny programs, two designs."""
import gc
import json
import re

import pytest

from autocomp_jupyter import baselines, caches
from autocomp_jupyter.dse import _cache_key, _design_target, explore, performance_view, target_mapping
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import kernels_unfused
from autocomp_jupyter.passes import PassContext
from autocomp_jupyter.pipeline import optimize
from autocomp_jupyter.rules.engine import load_rules

# A small residual block: two convolutions of one structure (searched once), batchnorm and
# relu epilogues to fuse, a residual add; fusion, tiling, the library and chains all have work.
SRC = """input X: f32[1, 8, 12, 12]
param W1: f32[8, 8, 3, 3]
param s1: f32[8]
param t1: f32[8]
param W2: f32[8, 8, 3, 3]
Y1 = conv2d(X, W1, stride=1, padding=1)
Z1 = batchnorm(Y1, s1, t1)
A1 = relu(Z1)
Y2 = conv2d(A1, W2, stride=1, padding=1)
S = add(Y2, X)
R = relu(S)
output R
"""
_SECONDS = re.compile(r" in [0-9.]+ s\b")


def _timeless(value):
    """A report without what a run's clock decides (seconds by pass, a search's seconds)."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k not in ("seconds_by_pass", "seconds", "elapsed_s")}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    if isinstance(value, str):
        return _SECONDS.sub(" in ? s", value)
    return value


def _same(report) -> str:
    return json.dumps(_timeless(report), sort_keys=True, default=str)


def test_each_point_of_a_warm_sweep_is_the_report_a_fresh_optimize_gives():
    caches.clear_all()
    thresholds = gc.get_threshold()
    # The second design runs on the caches the first left (isl verdicts, twins, reference runs).
    res = explore(SRC, "npu", ["compute.pe_rows,compute.pe_cols=8x8,16x16", "memory.SRAM.size_bytes=64KiB"])
    assert gc.get_threshold() == thresholds            # the collector's thresholds restored
    assert len(res.points) == 2 and all(p["verified"] for p in res.points)
    assert res.points[0]["time_s"] != res.points[1]["time_s"]
    for i in range(2):
        caches.clear_all()
        fresh = optimize(SRC, target=res.design_target(i), tune=0).report
        assert _same(res.reports[i]) == _same(fresh), f"design {i} differs from a fresh optimize"


@pytest.mark.parametrize("path, value", [
    ("compute.pe_rows", 16), ("compute.vector_lanes", 64), ("memory.SRAM.size_bytes", 2 << 20),
    ("memory.SRAM.bandwidth_gbps", 64), ("memory.DRAM.bandwidth_gbps", 51.2),
    ("memory.DRAM.latency_cycles", 100), ("memory.accumulator.energy_pj_per_byte", 0.2), ("clock_ghz", 2.0),
])
def test_a_field_the_searches_read_changes_every_key_a_result_is_reused_by(path, value):
    program = parse(SRC, "<test>")
    raw, filename = target_mapping("npu")
    base, moved = _design_target(raw, filename, {}), _design_target(raw, filename, {path: value})
    kernel = kernels_unfused(program)[0]
    rules = load_rules([], "npu")
    key = lambda target: baselines._cache_key(kernel, PassContext(program, target, rules, 0))
    assert key(base) != key(moved)                                   # the library schedule
    assert performance_view(base) != performance_view(moved)         # one pipeline run per view
    assert _cache_key(program, raw, {}, 0, None) != _cache_key(program, raw, {path: value}, 0, None)   # --cache


def test_an_area_only_field_keeps_the_performance_view_but_not_the_point_cache_key():
    program = parse(SRC, "<test>")
    raw, filename = target_mapping("npu")
    base, moved = _design_target(raw, filename, {}), _design_target(raw, filename, {"technology_nm": 7})
    assert performance_view(base) == performance_view(moved) and base.area_mm2 != moved.area_mm2
    assert _cache_key(program, raw, {}, 0, None) != _cache_key(program, raw, {"technology_nm": 7}, 0, None)


def test_designs_run_with_the_array_outermost_and_are_reported_in_sweep_order():
    from autocomp_jupyter.dse import design_points, parse_sweep, path_kinds, run_order, typed_sweep

    raw, _ = target_mapping("npu")
    kinds = path_kinds(raw)
    designs = lambda *sweeps: design_points([typed_sweep(parse_sweep(s), kinds) for s in sweeps])
    bandwidth, array = "memory.DRAM.bandwidth_gbps=12.8,25.6", "compute.pe_rows=16,8"
    sram = "memory.SRAM.size_bytes=1MiB,256KiB"
    usual = designs(array, sram, bandwidth)
    assert run_order(usual, list(range(8))) == list(range(8))        # already array, then SRAM, outermost
    inverted = designs(bandwidth, sram, array)
    order = run_order(inverted, list(range(8)))
    assert [(inverted[i]["compute.pe_rows"], inverted[i]["memory.SRAM.size_bytes"]) for i in order] == \
        [(r, s) for r in (16, 8) for s in (1 << 20, 256 << 10) for _ in range(2)]
    assert run_order(inverted, [5, 2]) == [2, 5]                       # pending ones only (a resumed sweep)
    tiny = "input A: f32[16, 16]\ninput B: f32[16, 16]\nC = matmul(A, B)\noutput C\n"
    res = explore(tiny, "npu", ["clock_ghz=2.0,1.0", "compute.pe_rows=16,8"])
    assert [p["params"] for p in res.points] == [{"clock_ghz": c, "compute.pe_rows": r}
                                                 for c in (2.0, 1.0) for r in (16, 8)]


def test_each_worker_runs_a_contiguous_lane_of_the_run_order_and_takes_the_far_half_of_the_longest_when_done():
    from autocomp_jupyter.dse import _next_design, lanes

    assert lanes(list(range(10)), 2) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert lanes(list(range(7)), 3) == [[0, 1], [2, 3, 4], [5, 6]]
    assert lanes([4, 9], 5) == [[4], [9]]                              # no more lanes than designs
    queues = lanes(list(range(10)), 2)
    ran = {0: [], 1: []}
    for k in (1, 1, 1, 1, 1):          # the second worker is fast: it finishes its lane ...
        ran[k].append(_next_design(queues[k], queues))
    assert ran[1] == [5, 6, 7, 8, 9]
    ran[0].append(_next_design(queues[0], queues))
    ran[1].append(_next_design(queues[1], queues))  # ... then takes the far end of the other's
    assert ran == {0: [0], 1: [5, 6, 7, 8, 9, 3]} and queues == [[1, 2], [4]]
    while (i := _next_design(queues[0], queues)) is not None:
        ran[0].append(i)
    assert sorted(ran[0] + ran[1]) == list(range(10)) and _next_design(queues[1], queues) is None


def test_dask_workers_keep_glibcs_adaptive_mmap_threshold_and_the_rest_of_dasks_environment():
    pytest.importorskip("dask.distributed")
    import dask

    from autocomp_jupyter.dse import _worker_environ

    with dask.config.set({"distributed.nanny.pre-spawn-environ": {"MALLOC_TRIM_THRESHOLD_": 65536,
                                                                  "OMP_NUM_THREADS": 1}}):
        # (and no spare-core workers of their own: the sweep's workers are its cores)
        assert _worker_environ() == {"OMP_NUM_THREADS": 1, "AUTOCOMP_WORKERS": "0"}


def test_a_local_sweeps_workers_run_without_dasks_frequent_wakes():
    """The workers `--workers N` starts have Dask's 20 ms tick, 500 ms system monitor, 100 ms
    memory poll and 10 ms profiler slowed or off: each wake takes the GIL from a design."""
    pytest.importorskip("dask.distributed")
    import dask

    from autocomp_jupyter.dse import _QUIET_WORKERS, _open_dask

    client, owned = _open_dask(1, None)
    try:
        keys = sorted(_QUIET_WORKERS)
        seen = client.run(lambda: [dask.config.get(k) for k in keys])
        assert list(seen.values()) == [[_QUIET_WORKERS[k] for k in keys]]
        assert _QUIET_WORKERS["distributed.admin.tick.interval"] != dask.config.get("distributed.admin.tick.interval")
    finally:
        for thing in owned:
            thing.close()
