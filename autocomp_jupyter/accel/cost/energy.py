"""Energy: what a kernel's traffic and arithmetic cost in joules.

Every transfer costs at both its ends (as ZigZag charges it): the bytes read out of memory
level m at its read energy, the bytes written into it at its write energy (`read_pj_per_byte`
/ `write_pj_per_byte` of the target's level: one energy per byte both ways, or a port's read
and write energies per access over its width). A DRAM->SRAM fill is a DRAM read and an SRAM
write; a result's write-back an SRAM read and a DRAM write; an operand into the datapath a
read of the innermost level holding it. Every MAC point and vector operation costs the
target's `energy_pj_per_mac`. A producer nest computed at the anchor's tiles adds its energy
times its recompute.
"""
from __future__ import annotations

import numpy as np


def level_energies(target) -> tuple[np.ndarray, np.ndarray]:
    """([M], [M]) joules per byte read out of / written into each memory level."""
    read = [m.energy_pj_per_byte if m.read_pj_per_byte is None else m.read_pj_per_byte for m in target.memory]
    write = [m.energy_pj_per_byte if m.write_pj_per_byte is None else m.write_pj_per_byte for m in target.memory]
    return np.array(read) * 1e-12, np.array(write) * 1e-12


def kernel_energy(reads: np.ndarray, writes: np.ndarray, read_j: np.ndarray, write_j: np.ndarray,
                  operations: float, energy_pj_per_mac: float, producer_energy: np.ndarray,
                  producer_level_energy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """([n] joules, [n, M] the traffic's joules per level): `reads` / `writes` [n, M] bytes
    at `read_j` / `write_j` [M] (J/B), `operations` MAC points and vector operations, and the
    producers' compute energy [n] and traffic energy per level [n, M]."""
    by_level = reads * read_j[None, :] + writes * write_j[None, :] + producer_level_energy
    energy = by_level.sum(axis=1) + operations * energy_pj_per_mac * 1e-12 + producer_energy
    return energy, by_level


def nest_compute_energy(cost) -> np.ndarray:
    """[n] a nest's compute energy: its BatchCost's energy less its traffic's."""
    return cost.energy_j - cost.energy_by_level.sum(axis=1)
