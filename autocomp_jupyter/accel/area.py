"""Silicon area of a target, and the CACTI-like SRAM energy that `energy_pj_per_byte: auto` means.

    target_area(target) -> Area            # mm², with the compute and per-level parts
    pe_area_um2(dtype, technology_nm)      # one MAC processing element
    sram_area_um2(size_bytes, ports, technology_nm)
    sram_energy_pj_per_byte(size_bytes, ports, technology_nm)

What is counted: the MAC datapaths (multiplier, adder, the operand and partial-sum registers of
every PE, SIMD lane or CUDA-core FMA pipe) and every on-chip memory level. Control, the on-chip
network, the vector unit beside an array and the DRAM interface are left out, so the figure is
the part of the die a design-space sweep changes, a lower bound on the real die. The published
numbers behind the defaults, all for a 45 nm process:

- MAC area — M. Horowitz, "Computing's energy problem (and what we can do about it)", ISSCC
  2014, the table of operation areas at 45 nm: 8-bit integer multiply 282 µm², 32-bit integer
  add 137 µm², 32-bit multiply 3495 µm², 16-bit float multiply 1640 µm², 16-bit float add
  1360 µm², 32-bit float multiply 7700 µm², 32-bit float add 4184 µm². A PE multiplies in its
  dtype and accumulates as accelerators do: i8 into i32, f16/bf16 into f32 (the TPU MXU and
  tensor cores), f32 and i32 in their own width. bf16's multiplier is f16's scaled by the
  square of the mantissa widths (8/11)², since an array multiplier grows with the product of
  its operand widths.
- Registers — a NanGate FreePDK45 flip-flop (DFF_X1, 4.522 µm²) per bit: two operand
  registers and one partial sum per PE.
- SRAM cells — Intel's 45 nm high-density 6T bitcell, 0.346 µm² (Mistry et al., IEDM 2007).
  A macro's area is its bits' cells over CACTI's typical array efficiency (0.7: decoders, sense
  amplifiers and drivers take the rest) plus a periphery term growing with the macro's edge
  (sqrt of its bits), so area grows with capacity, and each extra port adds a wordline and a
  bitline pair to every cell (CACTI's multi-port cell: each side grows by ~35 %).
- SRAM energy (`auto`) — Horowitz's 64-bit SRAM reads at 45 nm: 10 pJ from 8 KB, 20 pJ from
  32 KB, 100 pJ from 1 MB (1.25, 2.5 and 12.5 pJ/byte), interpolated log-log between them and
  extended beyond them with the end slopes: per-byte energy ~ capacity^0.47-0.5, the square-root
  growth of bitline and wordline length CACTI models.

Technology scaling (`technology_nm`, default 45): area scales with the published high-density
6T bitcell of each node (Intel 65/45/32/22/14 nm and TSMC 28/16/7/5 nm disclosures at IEDM and
VLSI), interpolated log-log between nodes; the same factor scales the logic, since one node
field scales both. Energy scales with the square root of that factor (switched capacitance
follows the linear dimension; supply voltage is taken as flat — a modelling assumption, not a
measured curve).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

REFERENCE_NM = 45.0

# Horowitz ISSCC 2014, 45 nm, µm²: (multiplier, accumulator adder) per dtype.
_MULT_UM2 = {"i8": 282.0, "i32": 3495.0, "f16": 1640.0, "bf16": 1640.0 * (8 / 11) ** 2, "f32": 7700.0}
_ADD_UM2 = {"i8": 137.0, "i32": 137.0, "f16": 4184.0, "bf16": 4184.0, "f32": 4184.0}
_OPERAND_BITS = {"i8": 8, "i32": 32, "f16": 16, "bf16": 16, "f32": 32}
_ACCUMULATOR_BITS = {"i8": 32, "i32": 32, "f16": 32, "bf16": 32, "f32": 32}
DFF_UM2_PER_BIT = 4.522          # NanGate FreePDK45 DFF_X1
BITCELL_UM2_45NM = 0.346         # Intel 45 nm HD 6T (IEDM 2007)
ARRAY_EFFICIENCY = 0.7           # cells / macro area, CACTI's typical large-mat value
PERIPHERY_UM2_PER_EDGE_BIT = 2.0  # decoders and sense amplifiers along a sqrt(bits) edge
PORT_PITCH_GROWTH = 0.35         # each extra port widens and heightens the cell by ~35 %

# Published HD 6T bitcell areas (µm²) by node: the area scaling curve.
_BITCELL_UM2 = ((5.0, 0.021), (7.0, 0.027), (14.0, 0.0588), (16.0, 0.070), (22.0, 0.092),
                (28.0, 0.127), (32.0, 0.171), (45.0, 0.346), (65.0, 0.570))

# Horowitz ISSCC 2014, 45 nm: pJ per byte of a 64-bit SRAM read, by capacity in bytes.
_SRAM_PJ_PER_BYTE = ((8 * 1024, 10.0 / 8), (32 * 1024, 20.0 / 8), (1024 * 1024, 100.0 / 8))


def _loglog(points, x: float) -> float:
    """Piecewise log-log interpolation through sorted (x, y) points, the end slopes beyond."""
    lx = math.log(x)
    xs = [math.log(p[0]) for p in points]
    ys = [math.log(p[1]) for p in points]
    i = 1
    while i < len(points) - 1 and lx > xs[i]:
        i += 1
    slope = (ys[i] - ys[i - 1]) / (xs[i] - xs[i - 1])
    return math.exp(ys[i - 1] + slope * (lx - xs[i - 1]))


def area_scale(technology_nm: float) -> float:
    """Area at `technology_nm` relative to 45 nm (the bitcell curve)."""
    return _loglog(_BITCELL_UM2, technology_nm) / BITCELL_UM2_45NM


def energy_scale(technology_nm: float) -> float:
    """Energy per access at `technology_nm` relative to 45 nm."""
    return math.sqrt(area_scale(technology_nm))


def pe_area_um2(dtype: str, technology_nm: float = REFERENCE_NM) -> float:
    """One MAC PE: multiplier, accumulating adder, two operand registers and a partial sum."""
    register_bits = 2 * _OPERAND_BITS[dtype] + _ACCUMULATOR_BITS[dtype]
    um2 = _MULT_UM2[dtype] + _ADD_UM2[dtype] + register_bits * DFF_UM2_PER_BIT
    return um2 * area_scale(technology_nm)


def sram_area_um2(size_bytes: float, ports: int = 1, technology_nm: float = REFERENCE_NM) -> float:
    """An SRAM macro: cells over the array efficiency plus edge periphery; grows with
    capacity and, quadratically in the cell's pitch, with ports."""
    bits = 8.0 * size_bytes
    port_factor = (1.0 + PORT_PITCH_GROWTH * (ports - 1)) ** 2
    cells = bits * BITCELL_UM2_45NM * port_factor / ARRAY_EFFICIENCY
    periphery = PERIPHERY_UM2_PER_EDGE_BIT * math.sqrt(bits) * ports
    return (cells + periphery) * area_scale(technology_nm)


def sram_energy_pj_per_byte(size_bytes: float, ports: int = 1, technology_nm: float = REFERENCE_NM) -> float:
    """Energy per byte read from an SRAM of `size_bytes` (Horowitz's curve, CACTI-like:
    ~sqrt(capacity)); an extra port lengthens every bitline and wordline by its pitch."""
    port_factor = 1.0 + PORT_PITCH_GROWTH * (ports - 1)
    return _loglog(_SRAM_PJ_PER_BYTE, size_bytes) * port_factor * energy_scale(technology_nm)


def mac_datapaths(compute) -> float:
    """MAC datapaths a ComputeSpec builds: PEs of every array, or lanes x FMA pipes of every core."""
    if compute.kind == "systolic":
        return float(compute.units * compute.pe_rows * compute.pe_cols)
    return float(compute.units * compute.lanes * compute.fma_units)


@dataclass(frozen=True)
class Area:
    """A target's area in mm²: the MAC datapaths and each on-chip memory level (all units)."""

    compute_mm2: float
    memory_mm2: Mapping[str, float]
    technology_nm: float
    pe_dtype: str

    @property
    def total_mm2(self) -> float:
        return self.compute_mm2 + sum(self.memory_mm2.values())

    def to_json(self) -> dict:
        return {"total_mm2": self.total_mm2, "compute_mm2": self.compute_mm2,
                "memory_mm2": dict(self.memory_mm2), "technology_nm": self.technology_nm,
                "pe_dtype": self.pe_dtype}


def target_area(target) -> Area:
    """The area of `target` (accel.target.Target): DRAM is off-chip and not counted; a
    `per_unit` level is built once per unit, a `per_pe` one once per PE of every array (a
    small macro each: its periphery counted in every copy)."""
    nm = target.technology_nm
    compute = mac_datapaths(target.compute) * pe_area_um2(target.pe_dtype, nm) * 1e-6
    memory = {}
    for level in target.on_chip:
        units = target.compute.units if level.per_unit else 1
        # size_bytes is one unit's; a per_pe level's is its array's PEs' together
        pes = target.compute.pe_rows * target.compute.pe_cols if level.per_pe else 1
        memory[level.name] = units * pes * sram_area_um2(level.size_bytes / pes, level.ports, nm) * 1e-6
    return Area(compute, {m.name: memory[m.name] for m in target.memory[:-1]}, nm, target.pe_dtype)
