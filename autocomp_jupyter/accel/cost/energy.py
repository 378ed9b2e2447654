"""Energy: what a kernel's traffic and arithmetic cost in joules.

Every transfer costs at both its ends (as ZigZag charges it): the bytes read out of memory
level m at its read energy, the bytes written into it at its write energy (`read_pj_per_byte`
/ `write_pj_per_byte` of the target's level: one energy per byte both ways, or a port's read
and write energies per access over its width). A DRAM->SRAM fill is a DRAM read and an SRAM
write; a result's write-back an SRAM read and a DRAM write; an operand into the datapath a
read of the innermost level holding it. Every MAC point and vector operation costs the
target's `energy_pj_per_mac`. A producer nest computed at the anchor's tiles adds its energy
times its recompute.

Where a PE array keeps its partial sums in a register in every PE (the innermost level
holding a MAC's output is `per_pe`), each MAC reads its partial sum out of that register and
writes the new one back, as ZigZag charges its rf_O (`register_accumulation`): one access of
the register's port each way per MAC point (the output element rounded up to whole accesses
of `width_bits`; the element itself where no width is given), in place of the traffic the
statement's results stream into that level. Every other output level sees the array's
results as they arrive (traffic.py), one transfer a pass.
"""
from __future__ import annotations

import numpy as np


def level_energies(target) -> tuple[np.ndarray, np.ndarray]:
    """([M], [M]) joules per byte read out of / written into each memory level."""
    read = [m.energy_pj_per_byte if m.read_pj_per_byte is None else m.read_pj_per_byte for m in target.memory]
    write = [m.energy_pj_per_byte if m.write_pj_per_byte is None else m.write_pj_per_byte for m in target.memory]
    return np.array(read) * 1e-12, np.array(write) * 1e-12


def register_accumulation(model, st, tile, moved) -> tuple[int, np.ndarray, np.ndarray] | None:
    """(memory level m, [n] bytes read out of it, [n] written into it) that MAC statement `st`
    adds at the per-PE register holding its partial sums, over what its traffic `moved`
    (a StatementTraffic) streams into it; None where the partial sums live elsewhere (off the
    array, or no per-PE level holds the output innermost)."""
    if not (st.mac and tile.dp.on_array):
        return None
    out = next((a for a in st.accesses if a.kind == "accumulate" and a.chain), None)
    if out is None:
        return None
    m = int(model.mem_index[out.chain[-1]])
    level = model.target.memory[m]
    if not level.per_pe:
        return None
    width = level.width_bits / 8 if level.width_bits else out.elem_bytes
    per_mac = float(np.ceil(out.elem_bytes / width) * width) * st.points   # one read and one write a MAC
    # On the array the results stream into the level as writes only (traffic.py: added as they
    # arrive), and only the output writes there: those writes are what the per-MAC accesses
    # replace; reads there (operands a shared register file feeds) stay. A per-PE level moves
    # any number of bytes an access (ports.py), so its accesses in bytes are its bytes.
    streamed = moved.datapath_port[:, m] - moved.datapath_port_reads[:, m]
    return m, np.full_like(streamed, per_mac), per_mac - streamed


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
