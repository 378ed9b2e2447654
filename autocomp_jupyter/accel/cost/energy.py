"""Energy: what a kernel's traffic and arithmetic cost in joules.

Every byte out of memory level m costs that level's `energy_pj_per_byte`; every MAC point
and vector operation the target's `energy_pj_per_mac`. A producer nest computed at the
anchor's tiles adds its compute energy times its recompute (its traffic is in the kernel's
bytes, charged with them).
"""
from __future__ import annotations

import numpy as np


def kernel_energy(bytes_by_level: np.ndarray, energy_per_byte: np.ndarray, operations: float,
                  energy_pj_per_mac: float, producer_energy: np.ndarray) -> np.ndarray:
    """[n] joules: `bytes_by_level` [n, M] at `energy_per_byte` [M] (J/B), `operations`
    MAC points and vector operations, and the producers' compute energy."""
    energy = (bytes_by_level * energy_per_byte[None, :]).sum(axis=1) \
        + operations * energy_pj_per_mac * 1e-12
    return energy + producer_energy


def nest_compute_energy(cost, energy_per_byte: np.ndarray) -> np.ndarray:
    """[n] a nest's compute energy: its BatchCost's energy less its traffic's."""
    return cost.energy_j - (cost.bytes * energy_per_byte[None, :]).sum(axis=1)
