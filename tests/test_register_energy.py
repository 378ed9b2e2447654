"""Partial sums in a register in every PE: each MAC reads its partial sum and writes it back.

A GEMM 8^3 (512 MACs) on a 4x4 weight-stationary array whose outputs live in `rf_O` (read 1 pJ,
write 2 pJ per 16-bit access), tiled 1 x 4 x 4 at rf_O inside 8^3 at the SRAM: the 64 results
leave rf_O once each (64 B read out at 0.5 pJ/B = 32 pJ). Per PE, every MAC pays one read and
one write of rf_O (512 x 3 pJ); a shared output buffer (not per PE) sees the array's results
as they arrive instead, one write each (64 B at 1 pJ/B).
"""
import pytest

from autocomp_jupyter.accel.cost import evaluate
from autocomp_jupyter.accel.target import parse_target
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.ir.schedule import Schedule, kernels_unfused


def target(rf_o: str, width_bits: int = 16, dtype: str = "i8", holds: str = "[outputs]"):
    return parse_target(f"""
name: toyarray
clock_ghz: 1.0
compute: {{kind: systolic, pe_rows: 4, pe_cols: 4, pe_dtype: {dtype}, dataflow: weight_stationary, fill_cycles: 0}}
energy_pj_per_mac: 0.5
memory:
  - {{name: rf_O, {rf_o}, holds: {holds}, latency_cycles: 1, ports: 2, read_pj: 1, write_pj: 2,
      width_bits: {width_bits}}}
  - {{name: SRAM, size_bytes: 64 KiB, bandwidth_gbps: 64, latency_cycles: 1, energy_pj_per_byte: 1}}
  - {{name: DRAM, bandwidth_gbps: 8, latency_cycles: 1, energy_pj_per_byte: 10}}
""", "toy.yaml")


def evaluated(t, dtype: str = "i8"):
    k = kernels_unfused(parse(f"input A: {dtype}[8, 8]\nparam B: {dtype}[8, 8]\nC = matmul(A, B)\n"))[0]
    s = Schedule(k, tiles={"i": {"SRAM": 8, "rf_O": 1}, "j": {"SRAM": 8, "rf_O": 4}, "k": {"SRAM": 8, "rf_O": 4}},
                 order={"SRAM": ("i", "j", "k"), "rf_O": ("i", "j", "k")}, levels=t.tiling_levels)
    return evaluate(s, t)


PER_PE = "per_pe: true, size_bytes: 4, bandwidth_gbps: 4"
SHARED = "size_bytes: 64, bandwidth_gbps: 64"


def test_each_mac_reads_and_writes_its_partial_sum_in_a_per_pe_register():
    c = evaluated(target(PER_PE))
    assert c.energy_by_level["rf_O"] * 1e12 == pytest.approx(512 * (1 + 2) + 64 * 0.5)
    assert c.energy_j == pytest.approx(sum(c.energy_by_level.values()) + 512 * 0.5e-12)


def test_a_shared_output_buffer_takes_the_results_as_they_arrive():
    c = evaluated(target(SHARED))
    assert c.energy_by_level["rf_O"] * 1e12 == pytest.approx(64 * 1.0 + 64 * 0.5)


def test_a_partial_sum_wider_than_the_port_takes_whole_accesses():
    # f32 results on an i8 array: partial sums through a 16-bit port take two accesses each way
    # per MAC.
    c = evaluated(target(PER_PE.replace("size_bytes: 4", "size_bytes: 8")), dtype="f32")
    by_hand = 512 * 2 * (1 + 2) + 64 * 4 * 0.5
    assert c.energy_by_level["rf_O"] * 1e12 == pytest.approx(by_hand)
    assert c.energy_j * 1e12 == pytest.approx(by_hand + c.energy_by_level["SRAM"] * 1e12
                                              + c.energy_by_level["DRAM"] * 1e12 + 512 * 0.5)



def test_a_per_pe_register_file_shared_with_weights_still_pays_per_mac():
    # Weights stream out of the same register file: their reads stay, the per-MAC accesses of
    # the partial sums come on top of them.
    mixed = evaluated(target(PER_PE.replace("size_bytes: 4", "size_bytes: 16"), holds="[outputs, weights]"))
    weights = mixed.energy_by_level["rf_O"] * 1e12 - (512 * (1 + 2) + 64 * 0.5)
    # B (64 B) comes in again for each of the 8 rows of A (i tiles of 1), and out into the array
    assert weights == pytest.approx(512 * 1.0 + 512 * 0.5)
    assert mixed.energy_j * 1e12 == pytest.approx(sum(mixed.energy_by_level.values()) * 1e12 + 512 * 0.5)
