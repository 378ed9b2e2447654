"""How a packed GEMM reads its operands: packed per cache block, packed once ahead of every
call (`prepacked`: a network's weights; `prepacked_ahead`: which one the microkernel fetches a
panel ahead of), or B read in place, unpacked (`b_in_place`); and the cycles per element
packing each costs (`host_copy_costs`: what the thread split and the host model charge).
"""
from __future__ import annotations

import math

from ..ir.schedule import Kernel
from .access import flat_offsets, in_range, padding
from .gemm import GEMM_NR, PAD_COPY_MAX
from .rows import DIRECT_STEP_MAX


# Cycles to copy one element into a packed panel, by how the copy reads it (calibrated on this
# class of core; the host model in accel/cost/ charges the same).
HOST_COPY_RUN = 0.25            # in a straight run (vectorised)
HOST_COPY_GATHER = 1.5          # through an offset table (scalar)
HOST_COPY_STRIDED = 1.0         # at a constant stride
# A's MR-high row panels where A's rows run along k (A[i, k], k contiguous: an activation times
# weights): the copy walks MR rows at their stride for each k, but the next k reads the same MR
# lines, so it streams MR rows side by side. Measured (one thread, this machine): the copy alone
# 0.23-0.28 cycles an element (128 x 3072 and 1024 x 1024 sources, mc x kc blocks 32 x 512 to
# 256 x 512); inside the BERT FFN's second GEMM (128 x 3072 x 768), 4 against 2 packings of A
# (nc = 224 against 384, kc = 512) 5.58 -> 5.49 ms: ~0.3 an element, not the 1.0 of a strided copy.
HOST_COPY_ROWS = 0.3


def prepacked(kernel: Kernel, pk, operand: str) -> bool:
    """Whether operand `operand` ("a" or "b") of packed contraction `pk` is packed once, ahead
    of the calls that read it, instead of per cache block: a param (a network's weights, the
    same values every call) read in range. codegen/c/packed.py packs it on the first call into panels
    kept for the whole K (per batch item where it varies with one) and re-packs only when the
    buffer's address changes, as onnxruntime pre-packs weights when a session loads; the
    microkernel then streams them straight from that copy (no packing phase that waits for
    DRAM). The host model charges it no copy (`host_copy_costs`)."""
    access = pk.a if operand == "a" else pk.b
    if kernel.tensor(access.tensor).role != "param":
        return False
    return all(in_range(kernel, access, dict(pk.extents)))


def prepacked_ahead(pk, pre_a: bool, pre_b: bool) -> str | None:
    """Which prepacked operand ("b", else "a") the microkernel fetches a panel ahead of
    (codegen/c/packed.py): on a panel's first use — the other operand's first panel — the next
    panel's slice, one line per k step. Weights come from memory (a network's 14 MB do not
    stay in L3 from one call to the next), each slice a short stream the hardware prefetcher
    starts late: MobileNetV2's 960 -> 320 at 7x7 (1.2 MB of weights) 0.315 -> 0.300 ms alone
    with a cold cache, 0.282 either way with a warm one. None without a second panel to fetch."""
    mr, nr = pk.micro
    if pre_b and pk.size("n") > nr:
        return "b"
    if pre_a and pk.size("m") > mr:
        return "a"
    return None


# A packed contraction with few rows (M <= B_IN_PLACE_M_MAX output channels: each B panel feeds
# at most 4 micro-tiles) reads B in place instead of packing it (`b_in_place`) where B's
# columns are one straight run per k and the k steps a constant stride apart: packing was a
# fifth of MobileNetV2's 1x1 32 -> 16 conv at 112x112 (0.166 -> 0.136 ms alone, its input in
# cache), 144 -> 24 at 56x56 0.250 -> 0.210, 192 -> 32 at 28x28 0.102 -> 0.087.
B_IN_PLACE_M_MAX = 32
B_IN_PLACE_K_MAX = 256
# More rows (up to B_IN_PLACE_SWEPT_M_MAX) read B in place where K <= B_IN_PLACE_SWEPT_K_MAX
# (the row panels outside the column panels, `rows_outer`) and B is at most
# B_IN_PLACE_SWEPT_BYTES_MAX: each of their row panels sweeps all of B, from L2 only when B
# leaves room there. In MobileNetV2 (one thread, the same network old and new interleaved):
# 24 -> 144 at 56x56 (B 294 KB) 0.235 -> 0.223 ms, 0.231 -> 0.214; 32 -> 192 at 28x28 (98 KB)
# 0.099 -> 0.095; but 16 -> 96 at 112x112 (784 KB) 0.427 -> 0.498.
B_IN_PLACE_SWEPT_M_MAX = 256
B_IN_PLACE_SWEPT_K_MAX = 64
B_IN_PLACE_SWEPT_BYTES_MAX = 512 * 1024
# The in-place B's K rows are K streams far apart, more than the hardware prefetcher follows:
# the microkernel fetches each row this many panels ahead (codegen/c/packed.py). Without it B in place
# lost where B outgrew L2 (MobileNetV2's 32 -> 16 at 112x112, 1.6 MB, 0.211 -> 0.229 ms in the
# network); with it, alone on one thread, 0.174 -> 0.119 (with GEMM_MR_ONE_PANEL) and 144 -> 24
# at 56x56 (1.8 MB) 0.243 -> 0.128, so B has no size bound.
B_IN_PLACE_AHEAD = 4


def b_in_place(kernel: Kernel, pk) -> int:
    """The stride (elements) between B's k steps when the packed contraction `pk` reads B in
    place (no packing): not transposed, B f32, not prepacked, in range, its n loops one
    straight run (offset n) over whole 16-column panels (N a multiple of GEMM_NR), its k
    loops linear, K <= B_IN_PLACE_K_MAX and M <= B_IN_PLACE_M_MAX (or M <=
    B_IN_PLACE_SWEPT_M_MAX with K <= B_IN_PLACE_SWEPT_K_MAX and B, the K x N it reads, at most
    B_IN_PLACE_SWEPT_BYTES_MAX); else 0."""
    m, k, kn_bytes = pk.size("m"), pk.size("k"), pk.size("k") * pk.size("n") * 4
    few = m <= B_IN_PLACE_M_MAX or (m <= B_IN_PLACE_SWEPT_M_MAX and k <= B_IN_PLACE_SWEPT_K_MAX
                                    and kn_bytes <= B_IN_PLACE_SWEPT_BYTES_MAX)
    if pk.swapped or not few or pk.size("k") > B_IN_PLACE_K_MAX \
            or pk.size("n") % GEMM_NR or kernel.tensor(pk.b.tensor).dtype != "f32" or prepacked(kernel, pk, "b"):
        return 0
    ext = dict(pk.extents)
    if any(lo or hi for lo, hi in padding(kernel, pk.b, ext)):
        return 0
    coeff, _ = flat_offsets(kernel, pk.b)

    def linear_step(loops) -> int:
        live = [(l, coeff.get(l, 0)) for l in loops if ext[l] > 1]
        if not live:
            return 0
        step = live[-1][1]
        ok = all(c == step * math.prod(ext[x] for x, _ in live[i + 1:]) for i, (_, c) in enumerate(live))
        return step if ok else -1
    if linear_step(pk.n) != 1:
        return 0
    ks = linear_step(pk.k)
    return ks if ks >= pk.size("n") else 0


def host_copy_costs(kernel: Kernel, pk) -> tuple[float, float]:
    """Cycles to pack one element of the packed contraction `pk`'s A and B operands: straight
    runs, a constant stride, or offset-table panels (NR consecutive offsets copy as runs,
    the rest element-wise). What the thread split weighs its repacking by, and what the host
    model (accel/cost/) charges for packing."""
    import numpy as np

    ext = dict(pk.extents)

    def copy_cost(access, inner_group: str, rows_along: str | None = None) -> float:
        # the offsets the packing reads: in the padded copy where codegen makes one
        pads = padding(kernel, access, ext)
        t = kernel.tensor(access.tensor)
        pshape = tuple(n + lo + hi for n, (lo, hi) in zip(t.shape, pads))
        if any(lo or hi for lo, hi in pads) and math.prod(pshape) <= PAD_COPY_MAX * t.size:
            coeff, _ = flat_offsets(kernel, access, pshape, [lo for lo, _ in pads])
        else:
            coeff, _ = flat_offsets(kernel, access)
        loops = list(getattr(pk, inner_group))
        if not loops:
            return HOST_COPY_STRIDED
        cs = [coeff.get(l, 0) for l in loops]
        live = [(l, c) for l, c in zip(loops, cs) if ext[l] > 1]
        step = live[-1][1] if live else 0
        linear = all(c == step * math.prod(ext[x] for x, _ in live[i + 1:]) for i, (_, c) in enumerate(live))
        if linear:
            if step == 1:
                return HOST_COPY_RUN
            # rows side by side, each a straight run along `rows_along`'s innermost live loop
            along = [l for l in getattr(pk, rows_along) if ext[l] > 1] if rows_along else []
            return HOST_COPY_ROWS if along and coeff.get(along[-1], 0) == 1 else HOST_COPY_STRIDED
        # an offset table: panels of NR evenly spaced offsets copy as runs, the rest element-wise
        grids = np.meshgrid(*[np.arange(ext[l]) for l in loops], indexing="ij")
        table = sum(c * g for c, g in zip(cs, grids)).reshape(-1)
        nr = pk.micro[1]
        full = len(table) // nr
        if full == 0:
            return HOST_COPY_GATHER
        panels = table[:full * nr].reshape(full, nr)
        # panels evenly spaced at the innermost loop's step (1, or 2: codegen copies those as
        # vectors too)
        step = cs[-1] if 1 <= cs[-1] <= DIRECT_STEP_MAX else 1
        runs = np.mean(np.all(np.diff(panels, axis=1) == step, axis=1))
        return runs * HOST_COPY_RUN + (1 - runs) * HOST_COPY_GATHER

    b_cost = 0.0 if prepacked(kernel, pk, "b") or b_in_place(kernel, pk) else copy_cost(pk.b, "n")
    # A's panels are copied MR rows at a time for each k (codegen/c/packed.py packs r innermost):
    # the copy walks A along its m loops
    a_cost = 0.0 if prepacked(kernel, pk, "a") else copy_cost(pk.a, "m", "k") if pk.m else HOST_COPY_STRIDED
    return float(a_cost), float(b_cost)
