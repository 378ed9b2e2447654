"""Ports and energy per end, by hand on a toy (a 64 KiB buffer in front of DRAM, 4 f32 lanes).

The GEMM 64^3 below, tiled 32 x 32 at the buffer (order i, j, k), computes 65536 cycles:
one 4-lane vector MAC a cycle, its A and B vectors (16 B each) read out of the buffer. The
buffer's traffic, in its port's 16-byte accesses (width_bits 128):
  reads:  A and B operands 2 x 65536; C's write-back to DRAM 16384 B = 1024
  writes: A and B tiles from DRAM 49152 B = 3072; C's results, one 4-byte element each, 4096
"""
import pytest

from autocomp_jupyter.accel.cost import evaluate
from autocomp_jupyter.accel.sim import _Channel, simulate
from autocomp_jupyter.accel.target import parse_target
from autocomp_jupyter.ir.schedule import Schedule, kernels_unfused
from test_cost import gemm_program

CYCLE = 1e-9
COMPUTE = 65536
COLD, DRAIN = 2048, 512        # the first A and B tiles (16384 B), the last C tile (4096 B), at 8 B/cycle


def toy(buf: str, dram_gbps: float = 8, dram: str = "energy_pj_per_byte: 10"):
    return parse_target(f"""
name: toyport
clock_ghz: 1.0
compute: {{kind: vector, lanes: 4}}
energy_pj_per_mac: 1.0
memory:
  - {{name: buf, size_bytes: 65536, latency_cycles: 0, {buf}}}
  - {{name: DRAM, bandwidth_gbps: {dram_gbps}, latency_cycles: 0, {dram}}}
""", "toy.yaml")


def ported(gbps: float, ports: int, width: int = 128) -> str:
    return f"bandwidth_gbps: {gbps}, read_pj: 8, write_pj: 16, width_bits: {width}, ports: {ports}"


@pytest.fixture
def schedule():
    k = kernels_unfused(gemm_program())[0]
    return Schedule(k, tiles={"i": {"buf": 32}, "j": {"buf": 32}}, order={"buf": ("i", "j", "k")}, levels=("buf",))


def test_a_saturated_port_stalls_by_the_traffic_it_shares(schedule):
    # 32 GB/s = two 16-byte accesses a cycle: the operand stream alone fills the port. On one
    # port the reads and writes share it: 131072 + 1024 + 3072 + 4096 accesses = 69632 cycles,
    # after the DRAM delivered the first tiles (2048): 3584 cycles past compute and the ends.
    c = evaluate(schedule, toy(ported(32, 1)))
    assert c.limits["buf bandwidth"] == pytest.approx((131072 + 1024 + 3072 + 4096) / 2 * CYCLE)
    assert c.time_s == pytest.approx((69632 + COLD) * CYCLE)
    assert c.time_s - (COMPUTE + COLD + DRAIN) * CYCLE == pytest.approx(3584 * CYCLE)
    assert c.bound == "buf bandwidth"


def test_an_under_subscribed_port_stalls_nothing(schedule):
    # 64 GB/s: the same 139264 accesses take 34816 cycles, half the compute: the time is the
    # compute and the ends (first tiles in, last tile out), as with a buffer timed per byte.
    c = evaluate(schedule, toy(ported(64, 1)))
    assert c.limits["buf bandwidth"] == pytest.approx(34816 * CYCLE)
    assert c.time_s == pytest.approx((COMPUTE + COLD + DRAIN) * CYCLE)
    assert c.bound == "compute (vector lanes)"
    plain = evaluate(schedule, toy("bandwidth_gbps: 64, energy_pj_per_byte: 0.5"))
    assert plain.time_s == pytest.approx(c.time_s)


def test_reads_and_writes_on_ports_of_their_own(schedule):
    # ports: 2: the read port carries 131072 + 1024 accesses (the operands exactly saturate
    # it), the write port 3072 + 4096; the 512 cycles of C's write-back reads hide in the ends.
    c = evaluate(schedule, toy(ported(32, 2)))
    assert c.limits["buf bandwidth"] == pytest.approx((131072 + 1024) / 2 * CYCLE)
    assert c.time_s == pytest.approx((COMPUTE + COLD + DRAIN) * CYCLE)


def test_a_port_moves_whole_accesses(schedule):
    # A 256-bit port at 32 GB/s: one 32-byte access a cycle. A 16-byte operand vector still
    # takes a whole one, so the read port is busy twice what its bytes / bandwidth say:
    # 131072 + 16384 / 32 accesses, one a cycle.
    c = evaluate(schedule, toy(ported(32, 2, width=256)))
    assert c.limits["buf bandwidth"] == pytest.approx((131072 + 512) * CYCLE)
    assert c.time_s == pytest.approx((131072 + 512 + COLD) * CYCLE)
    assert c.bytes["buf"] == 2 * 1048576 + 16384      # the bytes moved do not change


def test_an_exactly_saturated_dram_port_pays_its_ends(schedule):
    # DRAM at 1 GB/s moves the 65536 B of the run in exactly its 65536 compute cycles: nothing
    # stalls in between (each tile's loads overlap the previous tile's compute, C's write-backs
    # the idle time after them), but the first A and B tiles arrive before anything computes
    # (16384 cycles) and the last C tile leaves after (4096), as ZigZag's on- and off-loading.
    # The simulator replays the same.
    t = toy("bandwidth_gbps: 64, energy_pj_per_byte: 0.5", dram_gbps=1)
    c = evaluate(schedule, t)
    assert c.limits["DRAM bandwidth"] == pytest.approx(COMPUTE * CYCLE)
    assert c.time_s == pytest.approx((COMPUTE + 16384 + 4096) * CYCLE)
    assert simulate(schedule, t).time_s == pytest.approx(c.time_s, rel=0.01)
    # Over-subscribed (0.9 GB/s): the port bounds it, 72818 cycles and the last tile's compute.
    t = toy("bandwidth_gbps: 64, energy_pj_per_byte: 0.5", dram_gbps=0.9)
    c = evaluate(schedule, t)
    assert c.bound == "DRAM bandwidth"
    assert c.time_s == pytest.approx((65536 / 0.9 + COMPUTE / 4) * CYCLE)
    assert simulate(schedule, t).time_s == pytest.approx(c.time_s, rel=0.10)


def test_energy_is_charged_at_both_ends_of_every_transfer(schedule):
    # buf: 8 pJ per 16-byte read (0.5 pJ/B), 16 pJ per write (1 pJ/B); DRAM: 80 / 160 pJ per
    # 8-byte access (10 / 20 pJ/B). buf reads its operands (2097152 B) and C's write-back
    # (16384 B); it is written the A and B tiles (49152 B) and C's results (16384 B). DRAM
    # reads the tiles and is written C.
    t = toy(ported(64, 1), dram="read_pj: 80, write_pj: 160, width_bits: 64")
    c = evaluate(schedule, t)
    buf = (2097152 + 16384) * 0.5 + (49152 + 16384) * 1.0
    dram = 49152 * 10 + 16384 * 20
    assert c.energy_by_level == pytest.approx({"buf": buf * 1e-12, "DRAM": dram * 1e-12})
    assert c.energy_j == pytest.approx((buf + dram + 262144 * 1.0) * 1e-12)


def test_a_posted_write_back_takes_idle_time_not_a_place_in_line():
    ch = _Channel()
    ch.book(0.0, 1.0)
    ch.book(2.0, 1.0)                    # idle from 1 to 2
    ch.post("C", 0.5, 0.5)               # a write-back: into the idle time
    assert ch.pending == {} and ch.starts == [1.5] and ch.ends == [2.0]
    ch.post("C", 3.0, 2.0)               # no idle time left after 3: it waits ...
    assert ch.book(3.0, 1.0) == 4.0      # ... and the next load goes first
    ch.flush()                           # the end of the run: it goes in line
    assert ch.free == 6.0


def test_a_sweep_keeps_the_ports_of_a_level_timed_by_them():
    # `explore` runs once for designs that differ only in area fields; `ports` is one of them
    # unless the level is timed by its ports (width_bits), where 1 and 2 ports time apart.
    from autocomp_jupyter.dse import performance_view

    assert performance_view(toy(ported(32, 2))).level("buf").ports == 2
    assert performance_view(toy("bandwidth_gbps: 64, energy_pj_per_byte: 0.5, ports: 2")).level("buf").ports == 1
