"""Target descriptions: presets load, and wrong YAML gives messages naming file, key path
and what was expected."""
import math

import pytest

from autocomp_jupyter.accel.target import TargetError, list_presets, list_targets, load_target, parse_target

TOY = """
name: toy
clock_ghz: 1.0
compute: {kind: vector, lanes: 4}
energy_pj_per_mac: 1.0
memory:
  - {name: buf, size_bytes: 64 KiB, bandwidth_gbps: 64, latency_cycles: 0, energy_pj_per_byte: 0.5}
  - {name: DRAM, bandwidth_gbps: 8, latency_cycles: 0, energy_pj_per_byte: 10}
"""


@pytest.mark.parametrize("name", ["gpu", "tpu", "npu", "gemmini", "host"])
def test_every_preset_loads(name):
    t = load_target(name)
    assert t.name == name
    assert t.memory[-1].is_unbounded and t.memory[-1].name == "DRAM"
    assert t.tiling_levels == tuple(m.name for m in reversed(t.memory[:-1]))
    assert t.peak_flops("f32") > 0


def test_preset_facts():
    gpu, tpu, gemmini = load_target("gpu"), load_target("tpu"), load_target("gemmini")
    assert gpu.shared_mem_kb == 48 and gpu.sm_count == 108
    assert (tpu.compute.pe_rows, tpu.compute.pe_cols) == (128, 128)
    assert gemmini.level("scratchpad").size_bytes == 256 * 1024
    assert gemmini.level("accumulator").size_bytes == 64 * 1024
    assert gemmini.level("accumulator").holds == ("outputs",)


def test_list_targets_rows():
    rows = list_targets()
    assert {r["name"] for r in rows} == set(list_presets())
    assert set(rows[0]) == {"name", "compute", "peak_tflops_f32", "on_chip", "dram_gbps"}


def test_toy_builds_with_derived_peak():
    t = parse_target(TOY, "toy.yaml")
    assert t.compute.macs("f32") == 4 and t.compute.macs("i8") == 16
    assert t.level("buf").size_bytes == 65536 and math.isinf(t.dram.size_bytes)
    assert t.peak_flops("f32") == 8e9


def test_unknown_key_gets_hint():
    with pytest.raises(TargetError) as err:
        parse_target(TOY.replace("bandwidth_gbps: 64", "bandwith_gbps: 64"), "toy.yaml")
    msg = str(err.value)
    assert "toy.yaml" in msg and "memory[0].bandwith_gbps" in msg and "did you mean 'bandwidth_gbps'" in msg


def test_negative_number_names_key_and_expectation():
    with pytest.raises(TargetError) as err:
        parse_target(TOY.replace("bandwidth_gbps: 8", "bandwidth_gbps: -4"), "toy.yaml")
    assert "memory[1].bandwidth_gbps: expected a positive number, got -4" in str(err.value)


def test_negative_size():
    with pytest.raises(TargetError, match=r"memory\[0\].size_bytes: expected a positive size"):
        parse_target(TOY.replace("64 KiB", "-5"), "toy.yaml")


def test_hierarchy_must_grow_outward():
    text = TOY.replace("  - {name: DRAM", "  - {name: L2, size_bytes: 1 KiB, bandwidth_gbps: 32, latency_cycles: 1, energy_pj_per_byte: 1}\n  - {name: DRAM")
    with pytest.raises(TargetError, match=r"memory\[1\].size_bytes: level 'L2' .* smaller than inner level 'buf'"):
        parse_target(text, "toy.yaml")


def test_dram_must_be_last_and_unbounded():
    text = TOY.replace("{name: buf, size_bytes: 64 KiB,", "{name: buf,")
    with pytest.raises(TargetError, match=r"memory\[0\].size_bytes: on-chip level 'buf' needs a finite size"):
        parse_target(text, "toy.yaml")


def test_compute_kind_fields():
    with pytest.raises(TargetError, match="compute.pe_rows: missing"):
        parse_target(TOY.replace("kind: vector, lanes: 4", "kind: systolic, pe_cols: 4"), "toy.yaml")
    with pytest.raises(TargetError, match="compute.kind: expected one of .*did you mean 'systolic'"):
        parse_target(TOY.replace("kind: vector", "kind: systolc"), "toy.yaml")


def test_unknown_preset():
    with pytest.raises(TargetError, match="unknown target; presets are .*did you mean 'tpu'"):
        load_target("tpuu")


def test_missing_field_and_bad_yaml():
    with pytest.raises(TargetError, match="toy.yaml: error: clock_ghz: missing required field"):
        parse_target(TOY.replace("clock_ghz: 1.0\n", ""), "toy.yaml")
    with pytest.raises(TargetError, match="not valid YAML"):
        parse_target("name: [", "bad.yaml")


WEIGHTS_LEVEL = """
name: wl
clock_ghz: 1.0
compute: {kind: systolic, pe_rows: 4, pe_cols: 4, fill_cycles: 0}
energy_pj_per_mac: 1.0
memory:
  - {name: acc, size_bytes: 1 KiB, holds: [outputs], bandwidth_gbps: 64, latency_cycles: 1, energy_pj_per_byte: 0.1}
  - {name: wregs, size_bytes: 4 KiB, holds: [weights], bandwidth_gbps: 64, latency_cycles: 1, energy_pj_per_byte: 0.1}
  - {name: sram, size_bytes: 64 KiB, holds: [activations, outputs], bandwidth_gbps: 32, latency_cycles: 1, energy_pj_per_byte: 1}
  - {name: DRAM, bandwidth_gbps: 8, latency_cycles: 10, energy_pj_per_byte: 10}
"""


def test_weights_only_level_and_bypass():
    t = parse_target(WEIGHTS_LEVEL, "wl.yaml")
    assert t.level("wregs").roles == ("weights",) and t.level("sram").roles == ("activations", "outputs")
    assert t.level("sram").holds == ("inputs", "outputs")       # the coarse view
    assert t.level("DRAM").roles == ("weights", "activations", "outputs")
    assert t.compute.fill_cycles == 0
    assert parse_target(TOY, "toy.yaml").level("buf").roles == ("weights", "activations", "outputs")


def test_weights_bypass_the_level_that_does_not_hold_them():
    # B (the weight of A·B) goes DRAM -> wregs, never through sram; A goes DRAM -> sram.
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from test_cost import gemm_program
    from autocomp_jupyter.accel.cost import evaluate
    from autocomp_jupyter.ir.schedule import Schedule, kernels_unfused

    t = parse_target(WEIGHTS_LEVEL, "wl.yaml")
    k = kernels_unfused(gemm_program(64, 64, 64))[0]
    s = Schedule(k, tiles={"i": {"sram": 64, "wregs": 64, "acc": 4}, "j": {"sram": 64, "wregs": 16, "acc": 4},
                           "k": {"sram": 64, "wregs": 64, "acc": 64}},
                 order={lv: ("j", "i", "k") for lv in t.tiling_levels}, levels=t.tiling_levels)
    c = evaluate(s, t)
    # DRAM: A once (16 KiB), B once (16 KiB, straight into wregs), C written once (16 KiB).
    assert c.bytes["DRAM"] == 3 * 64 * 64 * 4
    # wregs feeds B to the array; sram feeds only A (and C's partial sums), never B: with
    # sram holding weights too, B would pass through it (DRAM -> sram -> wregs).
    through = parse_target(WEIGHTS_LEVEL.replace("holds: [activations, outputs]", "holds: [inputs, outputs]"), "wl2.yaml")
    c2 = evaluate(Schedule(k, tiles=s.tiles, order=s.order, levels=t.tiling_levels), through)
    assert c.bytes["wregs"] > 0
    assert c2.bytes["sram"] - c.bytes["sram"] == 64 * 64 * 4      # B once, sram -> wregs
    assert c2.bytes["DRAM"] == c.bytes["DRAM"]


def test_holds_errors_name_the_item_and_the_missing_role():
    with pytest.raises(TargetError, match=r"wl.yaml: error: memory\[1\].holds\[0\]: expected one of inputs, "
                                          r"weights, activations, outputs \(did you mean 'weights'\?\), got 'weight'"):
        parse_target(WEIGHTS_LEVEL.replace("holds: [weights]", "holds: [weight]"), "wl.yaml")
    with pytest.raises(TargetError, match=r"memory: no on-chip level holds weights; add 'weights' \(or inputs\)"):
        parse_target(WEIGHTS_LEVEL.replace("holds: [weights]", "holds: [outputs]").replace("size_bytes: 4 KiB", "size_bytes: 1 KiB"), "wl.yaml")
    with pytest.raises(TargetError, match=r"memory\[3\].holds: the last level \(DRAM\) holds every tensor"):
        parse_target(WEIGHTS_LEVEL.replace("{name: DRAM,", "{name: DRAM, holds: [activations, outputs],"), "wl.yaml")
    with pytest.raises(TargetError, match=r"compute.fill_cycles: does not apply to a vector target"):
        parse_target(TOY.replace("lanes: 4}", "lanes: 4, fill_cycles: 3}"), "toy.yaml")


PER_PE = """
name: pp
clock_ghz: 1.0
compute: {kind: systolic, pe_rows: 4, pe_cols: 8, pe_dtype: i8, fill_cycles: 0}
energy_pj_per_mac: 0.04
memory:
  - {name: rf, per_pe: true, size_bytes: 16, holds: [weights], bandwidth_gbps: 1, latency_cycles: 1,
     read_pj: 0.1, write_pj: 0.3, width_bits: 8}
  - {name: sram, size_bytes: 64 KiB, bandwidth_gbps: 32, latency_cycles: 1, read_pj: 256, width_bits: 1024}
  - {name: DRAM, bandwidth_gbps: 8, latency_cycles: 10, read_pj: 640, write_pj: 704, width_bits: 64}
"""


def test_per_pe_levels_and_energies_per_access_become_what_the_model_reads():
    t = parse_target(PER_PE, "pp.yaml")
    rf, sram, dram = t.memory
    # 16 B and 1 GB/s in each of the 4x8 PEs: the array's register file, in every array
    assert (rf.size_bytes, rf.bandwidth_gbps, rf.per_unit, rf.per_pe) == (512, 32, True, True)
    # an access's energy over the port's bytes; the model's one number is the mean of both ways
    assert (rf.read_pj_per_byte, rf.write_pj_per_byte) == pytest.approx((0.1, 0.3))
    assert rf.energy_pj_per_byte == pytest.approx(0.2)
    assert sram.energy_pj_per_byte == sram.read_pj_per_byte == sram.write_pj_per_byte == 2.0  # write_pj: read's
    assert (dram.read_pj_per_byte, dram.write_pj_per_byte, dram.energy_pj_per_byte) == (80, 88, 84)
    assert t.compute.macs("i8") == 32 and not sram.per_pe


@pytest.mark.parametrize("old, new, message", [
    ("size_bytes: 16,", "size_bytes: 1.5,", r"memory\[0\].size_bytes: a per_pe level's size is per PE and must divide "
     r"into whole bytes among the 32 PEs \(4x8\), got 1.5 B per PE"),
    ("pe_dtype: i8", "pe_dtype: f32", r"memory\[0\].width_bits: expected a multiple of the 32-bit f32 element the PEs "
     r"are built for \(compute.pe_dtype\), got 8"),
    ("read_pj: 256,", "energy_pj_per_byte: 1, read_pj: 256,", r"memory\[1\].read_pj: give the energy per byte .* not both"),
    (", read_pj: 256, width_bits: 1024", "", r"memory\[1\].energy_pj_per_byte: missing required field"),
    ("read_pj: 256, width_bits: 1024", "read_pj: 256", r"memory\[1\].width_bits: missing"),
    ("{name: DRAM,", "{name: DRAM, per_pe: true,", r"memory\[2\].per_pe: the last level \(DRAM\) is shared"),
    ("per_pe: true,", "per_pe: true, per_unit: true,", r"memory\[0\].per_unit: a per_pe level is already in every"),
    ("kind: systolic, pe_rows: 4, pe_cols: 8, pe_dtype: i8, fill_cycles: 0", "kind: vector, lanes: 8",
     r"memory\[0\].per_pe: only a systolic array has PEs"),
])
def test_per_pe_and_per_access_mistakes_name_the_field(old, new, message):
    assert old in PER_PE
    with pytest.raises(TargetError, match=r"pp.yaml: error: " + message):
        parse_target(PER_PE.replace(old, new), "pp.yaml")


def test_tpu_like_describes_zigzag_per_pe_and_per_access():
    from pathlib import Path

    t = load_target(str(Path(__file__).parent.parent / "benchmarks" / "targets" / "tpu_like.yaml"))
    assert t.level("rf_W").size_bytes == 32 * 32 * 128 and t.level("rf_O").size_bytes == 32 * 32 * 2
    assert t.level("SRAM").read_pj_per_byte == pytest.approx(416.16 / 256)      # ZigZag: per 2048-bit access
    assert t.level("DRAM").write_pj_per_byte == pytest.approx(750 / 8)
    assert t.compute.macs("i8") == 1024 and t.pe_dtype == "i8"
