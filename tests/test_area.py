"""The area model (accel/area.py) and the target fields that feed it."""
import pytest
import yaml

from autocomp_jupyter.accel.area import (pe_area_um2, sram_area_um2, sram_energy_pj_per_byte,
                                         target_area)
from autocomp_jupyter.accel.target import PRESET_DIR, TargetError, list_presets, load_target, parse_target


def npu_with(**edits):
    """The npu preset with dotted-path edits (`compute.pe_rows`, `memory.SRAM.size_bytes`)."""
    raw = yaml.safe_load((PRESET_DIR / "npu.yaml").read_text())
    for path, value in edits.items():
        keys = path.split("__")
        node = raw
        for key in keys[:-1]:
            node = next(m for m in node if m["name"] == key) if isinstance(node, list) else node[key]
        node[keys[-1]] = value
    return parse_target(yaml.safe_dump(raw))


def test_published_anchors_at_45nm():
    # Horowitz ISSCC 2014: 64-bit reads of 10 pJ (8 KB) and 100 pJ (1 MB); an i8 MAC's parts.
    assert sram_energy_pj_per_byte(8 * 1024) == pytest.approx(1.25)
    assert sram_energy_pj_per_byte(2**20) == pytest.approx(12.5)
    assert pe_area_um2("i8") == pytest.approx(282 + 137 + 48 * 4.522)
    assert pe_area_um2("i8") < pe_area_um2("bf16") < pe_area_um2("f16") < pe_area_um2("f32")
    # 1 MiB of 45 nm 6T cells (0.346 µm²) over a 0.7 array efficiency: ~4.1 mm² plus periphery.
    assert 4.1e6 < sram_area_um2(2**20) < 4.3e6


def test_area_grows_with_pes_capacity_and_ports_and_shrinks_with_the_node():
    areas = [target_area(npu_with(compute__pe_rows=n, compute__pe_cols=n)).compute_mm2 for n in (8, 16, 32)]
    assert areas[0] < areas[1] < areas[2] and areas[2] == pytest.approx(16 * areas[0])
    sram = [target_area(npu_with(memory__SRAM__size_bytes=s)).memory_mm2["SRAM"] for s in ("256 KiB", "1 MiB", "4 MiB")]
    assert sram[0] < sram[1] < sram[2]
    assert sram_area_um2(2**18, ports=2) > 1.5 * sram_area_um2(2**18, ports=1)
    assert npu_with(technology_nm=7).area_mm2 < npu_with(technology_nm=16).area_mm2 < npu_with(technology_nm=45).area_mm2


def test_auto_energy_follows_capacity_and_presets_keep_their_numbers():
    small = npu_with(memory__SRAM__size_bytes="256 KiB", memory__SRAM__energy_pj_per_byte="auto")
    big = npu_with(memory__SRAM__size_bytes="4 MiB", memory__SRAM__energy_pj_per_byte="auto")
    assert small.level("SRAM").energy_pj_per_byte < big.level("SRAM").energy_pj_per_byte
    # at 16 nm: 45 nm's curve x sqrt(bitcell(16) / bitcell(45))
    assert big.level("SRAM").energy_pj_per_byte == pytest.approx(sram_energy_pj_per_byte(4 * 2**20, 1, 16))
    assert load_target("npu").level("SRAM").energy_pj_per_byte == 0.5
    for name in list_presets():
        target = load_target(name)
        assert target.area_mm2 > 0, name
        assert set(target_area(target).memory_mm2) == {m.name for m in target.memory[:-1]}


@pytest.mark.parametrize("edits, key_path, words", [
    ({"memory__DRAM__energy_pj_per_byte": "auto"}, "memory[2].energy_pj_per_byte", "on-chip"),
    ({"memory__SRAM__energy_pj_per_byte": "cheap"}, "memory[1].energy_pj_per_byte", "a number >= 0, or 'auto'"),
    ({"memory__SRAM__ports": 0}, "memory[1].ports", "a positive integer"),
    ({"technology_nm": 1000}, "technology_nm", "between 3 and 180"),
    ({"compute__pe_dtype": "int8"}, "compute.pe_dtype", "did you mean 'i8'"),
])
def test_area_fields_are_validated_with_their_key_path(edits, key_path, words):
    with pytest.raises(TargetError) as err:
        npu_with(**edits)
    assert err.value.key_path == key_path and words in str(err.value)


def test_a_per_pe_level_is_built_once_per_pe():
    per_pe = npu_with(memory__accumulator__per_pe=True, memory__accumulator__size_bytes=32)       # 32 B in each of 32x32 PEs
    assert per_pe.level("accumulator").size_bytes == 32 * 1024
    assert target_area(per_pe).memory_mm2["accumulator"] == pytest.approx(1024 * sram_area_um2(32, 1, 16) * 1e-6)
