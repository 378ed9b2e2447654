"""Two loads in flight into a double-buffered level (`cost.ports.two_buffer_latency`, the
simulator's issue rule): a tile's load is requested once the tile two before it has been used,
so a source streaming large tiles pays about one latency, and small loads pair their latencies."""
import numpy as np
import pytest

from autocomp_jupyter.accel.cost import evaluate
from autocomp_jupyter.accel.cost import ports
from autocomp_jupyter.accel.sim import compare
from autocomp_jupyter.accel.target import load_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import Schedule, kernels_unfused

from test_cost import gemm_program


def _pair(src_lat, read_s, busy, loads, latency=1.0):
    """two_buffer_latency for one source (DRAM) feeding one double-buffered level."""
    M = 2
    out = ports.two_buffer_latency(np.array([[0.0, src_lat]]), np.array([[0.0, read_s]]), np.zeros((1, M)),
                                   np.array([busy]), np.array([0.0, latency]), np.array([[loads]]), {0: 1},
                                   np.array([[True]]), np.array([False]), np.array([1.0]), np.array([0]))
    return float(out[0, 1])


def test_large_loads_pay_the_first_latency_only():
    # 10 loads of 3 latencies' transfer each, little compute: the next load is in flight
    # while the current one streams; only the first load's latency is left
    assert _pair(src_lat=10.0, read_s=30.0, busy=1.0, loads=10) == pytest.approx(1.0)


def test_small_loads_pair_their_latencies_with_the_work_on_a_tile():
    # 100 loads of a tenth of a latency, compute 0.2 latency per tile: per load
    # (latency + transfer + compute) / 2 = 0.65, so latency adds 0.55 per load, not 1
    assert _pair(src_lat=100.0, read_s=10.0, busy=20.0, loads=100) == pytest.approx(55.0)
    # ... never more than one load in flight charges
    assert _pair(src_lat=100.0, read_s=10.0, busy=500.0, loads=100) == pytest.approx(100.0)


def test_a_gpu_kernel_streaming_large_tiles_from_dram_overlaps_their_latencies():
    # a row sum reading 8 MB once in 8 L2 tiles of 1 MB (0.67 us each at 1555 GB/s, latency
    # 0.35 us): with one load in flight the model charged 8 latencies beyond the bytes
    # (11.4 us, the simulator 10.1 us). Two in flight, each L2 tile's latency overlaps the
    # other buffer's transfer and the work on its tile, which restarts the shared-memory loads
    # (a whole L2 latency each): 7.37 us, the simulator replaying the same issue rule 7.37 us.
    t = load_target("gpu")
    prog = parse("input X: f32[2048, 1024]\nY[i] += X[i, j]\noutput Y\n")
    kernel = kernels_unfused(prog)[0]
    s = Schedule(kernel, tiles={"i": {"L2": 256, "shared": 8, "registers": 1},
                                "j": {"L2": 1024, "shared": 256, "registers": 32}},
                 annotations={"parallel": ("i", "j"), "vectorize": "j"}, levels=t.tiling_levels)
    cost = evaluate(s, t)
    latency = t.memory[-1].latency_cycles / (t.clock_ghz * 1e9)
    assert cost.limits["DRAM latency"] < 6 * latency
    assert cost.time_s < cost.limits["DRAM bandwidth"] + 6 * latency
    c = compare(s, t)
    assert c["time_error"] < 0.02


def test_host_c_keeps_one_load_in_flight(monkeypatch):
    # host C issues no prefetch of its own: its model does not pair loads
    def refuse(*args, **kwargs):
        raise AssertionError("host C paired its loads")
    monkeypatch.setattr(ports, "two_buffer_latency", refuse)
    t = load_target("host")
    kernel = kernels_unfused(gemm_program(64, 64, 64))[0]
    evaluate(Schedule.default(kernel, t.tiling_levels), t)
