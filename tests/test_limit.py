"""The physical limit (accel/limit.py) and the report's `limit_fraction`: a floor no plan the
model costs goes below, taken at the array fill the loop extents allow."""
from __future__ import annotations

from pathlib import Path

import pytest

import autocomp_jupyter as autocomp
from autocomp_jupyter.accel.limit import physical_limit
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from golden_reports import assert_within_the_limit
from test_gathers import KV_CACHE

ROOT = Path(__file__).resolve().parent.parent


def test_no_plan_beats_the_limit_on_this_host():
    """On the host as detected here (its measured FMA rate: the golden cases pin one host and
    check the limit on every preset, `golden_reports.assert_within_the_limit`)."""
    for path in sorted((ROOT / "examples").glob("*.acir"))[:3]:
        assert_within_the_limit(path.name, autocomp.optimize(path, target="host", tune=0).report)


def test_an_array_half_filled_by_its_loops_doubles_the_compute_floor():
    tpu = load_target("tpu")
    rows, cols = tpu.compute.pe_rows, tpu.compute.pe_cols
    full = parse(f"input A: f32[1024, {rows}]\ninput B: f32[{rows}, {cols}]\nC = matmul(A, B)\n", "<t>")
    half = parse(f"input A: f32[1024, {rows // 2}]\ninput B: f32[{rows // 2}, {cols}]\nC = matmul(A, B)\n", "<t>")
    a, b = physical_limit(full, tpu), physical_limit(half, tpu)
    # half the multiply-adds, the same passes of the array: the same compute floor
    assert a["datapaths_s"]["PE array"] == pytest.approx(b["datapaths_s"]["PE array"])
    assert a["datapaths_s"]["PE array"] >= full.flops / tpu.peak_flops("f32") * 0.999


def test_an_elementwise_program_is_bound_by_its_compulsory_traffic():
    program = parse("input X: f32[1024, 1024]\nY = relu(X)\n", "<t>")
    npu = load_target("npu")
    limit = physical_limit(program, npu)
    assert limit["bound"] == "DRAM"
    assert limit["dram_s"] == pytest.approx(2 * 4 * 1024 * 1024 / npu.dram_bandwidth)


def test_a_strided_conv_must_move_only_the_input_elements_it_reads():
    """A stride-2 1x1 conv reads every other row and column: a quarter of its input is
    compulsory, and the model's best schedule (rows it skips never fetched) stays above the
    floor; a tensor read whole and strided is read whole."""
    from autocomp_jupyter.accel.roofline import compulsory_traffic

    src = ("input X: f32[1, 16, 28, 28]\nparam W: f32[32, 16, 1, 1]\nY = conv2d(X, W, stride=2)\n")
    traffic = compulsory_traffic(parse(src, "<t>"))
    assert traffic["X"] == 4 * 16 * 14 * 14 and traffic["W"] == 4 * 32 * 16 and traffic["Y"] == 4 * 32 * 14 * 14
    both = parse(src + "Z[n, c, h, w] = X[n, c, h, w] * 2\noutput Y, Z\n", "<t>")
    assert compulsory_traffic(both)["X"] == 4 * 16 * 28 * 28
    big = src.replace("16, 28, 28]", "128, 56, 56]").replace("[32, 16,", "[256, 128,")
    r = autocomp.optimize(big, target="gemmini", tune=0).report
    assert r["verified"] and 0 < r["limit_fraction"] <= 1          # was 1.10: all of X counted


def test_on_the_host_a_cache_sized_tensor_moves_at_the_cache_bandwidth_a_larger_one_at_dram():
    """Host runs are timed warm and the model charges a kernel whose tensors fit half the last
    cache level that cache's bandwidth; the limit's memory floor follows, tensor by tensor, so
    a column-normalisation of 4 MB tensors no longer reads 3x past its limit."""
    host = load_target("host")
    cache = [m for m in host.memory if m.size_bytes != float("inf")][-1]
    small = parse("input X: f32[512, 256]\nS[j] += X[i, j]\nM[j] = S[j] * 0.002\n"
                  "D[i, j] = X[i, j] - M[j]\noutput D\n", "<t>")
    assert physical_limit(small, host)["dram_s"] == pytest.approx(2 * 4 * 512 * 256 / (cache.bandwidth_gbps * 1e9))
    rows = int(cache.size_bytes / 2 / 4 / 256) + 1          # a buffer just over half the cache
    large = parse(f"input X: f32[{rows}, 256]\nY = relu(X)\n", "<t>")
    assert physical_limit(large, host)["dram_s"] == pytest.approx(2 * 4 * rows * 256 / host.dram_bandwidth)
    r = autocomp.optimize(small, target="host", tune=0).report
    assert r["verified"] and 0 < r["limit_fraction"] <= 1


def test_a_port_that_feeds_the_array_no_faster_than_it_computes_bounds_the_limit():
    """Gemmini's scratchpad port carries 16 f32 operands a cycle, what its 16x16 array consumes:
    the moving operand crossing once per column block, plus the weights once, floors a GEMM
    above its MACs; the optimised plan stays above that floor."""
    src = "input A: f32[128, 768]\nparam B: f32[768, 3072]\nC[m, n] += A[m, k] * B[k, n]\noutput C\n"
    program = parse(src)
    limit = physical_limit(program, "gemmini")
    target = load_target("gemmini")
    moving = 128 * 768 * 4 * (3072 // 16) + 768 * 3072 * 4           # A per column block, B once
    port = next(m for m in target.memory if m.name == "scratchpad")
    assert limit["ports_s"]["scratchpad port"] == pytest.approx(moving / (port.bandwidth_gbps * 1e9))
    assert limit["bound"] == "scratchpad port" and limit["time_s"] > limit["datapaths_s"]["PE array"]
    res = autocomp.optimize(src, target="gemmini", tune=0)
    assert res.report["optimized"]["time_s"] >= limit["time_s"] * (1 - 1e-9)


def test_the_hosts_compute_floor_is_what_a_core_sustains(monkeypatch):
    """The host preset's lanes x FMA pipes x reported clock is a description, not a limit:
    the floor takes the FMA rate a core sustains, measured by a compiled loop of independent
    FMAs (never above the description)."""
    from autocomp_jupyter.accel import host_peak, limit as limit_module

    host = load_target("host")
    c = host.compute
    described = 2.0 * c.lanes * c.fma_units * host.clock_ghz * 1e9
    measured = host_peak.measured_flops(max(4, min(16, c.lanes)))
    assert measured is not None and 0.05 * described < measured
    src = "input A: f32[256, 256]\nparam B: f32[256, 256]\nC[m, n] += A[m, k] * B[k, n]\noutput C\n"
    program = parse(src)
    monkeypatch.setattr(limit_module, "compute_ceiling", lambda target: 1.0)
    nominal = physical_limit(program, host)["datapaths_s"]["cores"]
    monkeypatch.setattr(limit_module, "compute_ceiling", lambda target: 2.0)
    assert physical_limit(program, host)["datapaths_s"]["cores"] == pytest.approx(2 * nominal)
    monkeypatch.undo()
    assert host_peak.compute_ceiling(host) == pytest.approx(max(1.0, described / measured))


def test_the_vector_unit_beside_the_array_moves_its_operands_through_the_same_ports():
    # a softmax on Gemmini: its max, exp and sums read every score through the scratchpad's
    # one port, the port the PE array's operands cross as well
    gemmini = load_target("gemmini")
    program = parse("input X: f32[256, 512]\nP = softmax(X)\n", "<t>")
    ports = physical_limit(program, gemmini)["ports_s"]
    scratchpad = next(m for m in gemmini.memory if m.name == "scratchpad")
    # at least X read once (the max) through the scratchpad port
    assert ports["scratchpad port"] >= 256 * 512 * 4 / (scratchpad.bandwidth_gbps * 1e9) * 0.999
    # on a target without a PE array no port term is counted for it
    assert physical_limit(program, load_target("gpu"))["ports_s"] == {}


def test_a_sum_of_a_factor_zero_outside_its_domain_counts_that_domain():
    # Z sums E over the whole box, but E is 0 above the diagonal: the limit counts the
    # triangle, as if Z were written over it
    source = """input S: f32[64, 64]
E[s, t] = exp(S[s, t]) where t <= s
Z[s] += E[s, t]
output Z
"""
    explicit = source.replace("E[s, t]\n", "E[s, t] where t <= s\n")
    boxed = source.replace(" where t <= s", "")
    npu = load_target("npu")
    cut, written, box = (physical_limit(parse(s, "<t>"), npu)["datapaths_s"]["vector unit"]
                         for s in (source, explicit, boxed))
    assert explicit != source
    assert cut == pytest.approx(written)
    assert cut == pytest.approx(box * 2080 / 4096, rel=0.05)


MATRIX_VECTOR = {   # one product, three ways to write it: every weight element is used once
    "x[k]": "input x: f32[640]\nparam W: f32[640, 384]\ntensor y: f32[384]\ny[j] += x[k] * W[k, j]\n",
    "x[0, k]": "input x: f32[1, 640]\nparam W: f32[640, 384]\ntensor y: f32[384]\ny[j] += x[0, k] * W[k, j]\n",
    "x[i, k], i < 1": "input x: f32[1, 640]\nparam W: f32[640, 384]\ntensor y: f32[1, 384]\n"
                      "y[i, j] += x[i, k] * W[k, j]\n",
}


@pytest.mark.parametrize("target", ["tpu", "npu", "gemmini"])
def test_a_matrix_vector_product_runs_alike_however_it_is_written_and_never_beats_the_limit(target):
    # A batch-1 classifier's input read through its flatten is x[0, k]: it once ran on the
    # vector unit while x[i, k] ran on the PE array, and the limit (counting the array) was
    # beaten by 4% on VGG. On every systolic preset the vector unit multiplies a weight element
    # faster than the array loads it: all three run there.
    times = {}
    for form, source in MATRIX_VECTOR.items():
        r = autocomp.optimize(source, target=target, tune=0).report
        (kernel,) = r["kernels"]
        assert "compute (vector unit)" in kernel["limits_s"] and "compute (PE array)" not in kernel["limits_s"], form
        assert r["limit"]["datapaths_s"].get("PE array", 0.0) == 0.0, form
        assert 0 < r["limit_fraction"] <= 1, form
        times[form] = kernel["limits_s"]["compute (vector unit)"]
    assert len(set(times.values())) == 1, times


# The cache of test_gathers' decode step, read only through its update: written in place.
KV_UPDATE = KV_CACHE.replace("R[h, d] = Kc[h, pos[0], d]\n", "").replace("output S, R", "output S, K2")


def test_a_cache_written_in_place_is_read_by_its_readers_and_not_by_its_update():
    """K2 is Kc's storage with one row replaced: the update moves that row only, and what
    reads K2 reads Kc (once, however many read it)."""
    from dataclasses import replace as _replace

    from autocomp_jupyter.accel.cost import evaluate
    from autocomp_jupyter.accel.cost.model import textbook_schedule
    from autocomp_jupyter.accel.roofline import compulsory_traffic
    from autocomp_jupyter.ir.program import Program
    from autocomp_jupyter.ir.schedule import Kernel
    from autocomp_jupyter.rules.in_place import mark_in_place_updates

    program, _ = mark_in_place_updates(parse(KV_UPDATE, "<t>"))
    assert program.op("K2").statements[0].in_place is not None
    kc = program.tensor("Kc")
    whole = compulsory_traffic(program)
    assert whole["Kc"] == kc.nbytes and whole["K2"] == kc.nbytes // 16
    update = Program(tuple(_replace(t, role="input") if t.name in ("Kc", "kn", "pos") else t
                           for t in program.tensors if t.name in ("Kc", "kn", "pos", "K2")),
                     (program.op("K2"),), ("K2",))
    alone = compulsory_traffic(update)
    assert alone["Kc"] == 0 and alone["K2"] == kc.nbytes // 16
    for preset in ("npu", "gpu"):
        kernel = Kernel.from_ops(update, ["K2"])
        assert evaluate(textbook_schedule(kernel, preset), load_target(preset)).time_s \
            >= physical_limit(update, preset)["time_s"]
