"""The host CPU model: the time of the C that codegen/c generates, run on this machine's cores.

The host is a compute kind of its own (`runs_generated_c`: a vector target whose loops run
serially unless annotated parallel). Its costs come from what the generated code does, read
from one analysis shared with the generator (`host_strategy`): which kernels run as
a packed GEMM (its microkernel, cache blocks, packing copies, thread partition), which as
Winograd F(2x2, 3x3) (`winograd_cycles`: its transforms and 16 GEMMs), which as
direct rows (depthwise convolutions, pooling: a local row per output row, no packing), and
for the plain loop nest, the issue rate, scalar work and strided accesses of the code and the
lanes an elementwise register tile narrower than a vector leaves empty.
`HostModel` is what the shared cost model (`accel/cost/`) asks at its hook points: the bytes of
an element, the warm bandwidth, the issue-rate bound of a statement and, last, the seconds of
the paths that replace the nest. `replay_packed` walks one schedule's packed code block by
block (what the simulator, accel/sim.py, replays for the host instead of the schedule's tile
loops, which the C does not run).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..host_strategy.access import padding, unit_stride_reads
from ..host_strategy.contraction import packed_contraction
from ..host_strategy.depthwise import BLOCK_CHANNELS, VECTOR_ROWS_PASS, channel_blocks, vector_rows
from ..host_strategy.gemm import GEMM_MIN_BLOCK, GEMM_MR, GEMM_NR, GEMM_PACK_MIN, GEMM_WHOLE_K, last_panel, \
    packed_blocks, swapped_blocks
from ..host_strategy.operands import HOST_COPY_RUN, host_copy_costs
from ..host_strategy.partition import claimed_makespan, packed_partition, partition_ranges
from ..host_strategy.rows import DIRECT_K_MAX, WINDOW_SHARED_COPY_MIN, direct_rows, direct_slab, gemv_split, window_rows
from ..host_strategy.winograd import WINOGRAD_PANEL, winograd
from ..ir.program import Access
from ..ir.schedule import Kernel
from .target import Target

if TYPE_CHECKING:     # the cost model imports this module: only its types, for the annotations
    from .cost.model import KernelModel
    from .cost.statements import _StatementModel

_GEMM_MR, _GEMM_NR, _GEMM_MIN_BLOCK = GEMM_MR, GEMM_NR, GEMM_MIN_BLOCK


def runs_generated_c(target: Target) -> bool:
    """Whether `target` is the host running generated C, the compute kind this module models
    (`Target.runs_generated_c`)."""
    return target.runs_generated_c


class HostModel:
    """The host's part of a kernel's cost model (`cost.KernelModel` holds one for host
    targets): the analysis of the code the kernel becomes, made once per kernel."""

    def __init__(self, kernel: Kernel, target: Target, index: dict):
        self.kernel, self.target = kernel, target
        self.packed_gemm = _host_packed_gemm(kernel, index)
        self.pk = _host_packed(kernel)
        self.direct = direct_rows(kernel, self.pk[0]) if self.pk is not None else None
        self.winograd = winograd(kernel, self.pk[0]) if self.pk is not None and self.direct is None else None
        self.window = window_rows(kernel) if self.pk is None else None
        self.scalar = [_host_scalar_cycles(s) for s in kernel.statements]
        self.strided = [_host_strided_accesses(kernel, si, index) for si in range(len(kernel.statements))]

    elem_bytes = staticmethod(lambda dtype: _host_buffer_bytes(dtype))

    def bandwidth(self, bw: np.ndarray) -> np.ndarray:
        return _host_warm_bandwidth(self.kernel, self.target, bw)

    def seconds(self, model, tiles: np.ndarray, parallel: np.ndarray, time_s: np.ndarray) -> np.ndarray:
        """The kernel's seconds where the C replaces the loop nest (packed GEMM, direct rows,
        window rows: on tiled candidates), else `time_s` (the nest's)."""
        if self.pk is not None:
            if self.direct is not None:
                tiled, seconds = _direct_rows_seconds(model, self.pk[0], self.direct, tiles, parallel)
            else:
                tiled, seconds = _host_packed_seconds(model, tiles, parallel)
                if self.winograd is not None:     # the same kernels (tiled), as Winograd
                    seconds = _winograd_seconds(model, self.pk[0], self.winograd, parallel)
            return np.where(tiled, seconds, time_s)
        if self.window is not None:
            tiled, seconds = _window_rows_seconds(model, *self.window, tiles, parallel)
            return np.where(tiled, seconds, time_s)
        return time_s + _narrow_lanes_seconds(model, tiles, parallel)


def compute_model(kernel: Kernel, target: Target, index: dict) -> HostModel | None:
    """The host model of `kernel` when `target` runs generated C, else None (an accelerator:
    the shared model's datapath alone)."""
    return HostModel(kernel, target, index) if runs_generated_c(target) else None




def _host_packed_gemm(kernel: Kernel, index: dict) -> tuple[int, int, int] | None:
    """(i, j, k) anchor-loop indices when host C runs this kernel's contraction as the packed
    GEMM (`host_strategy.contraction.packed_contraction`: C[i, j] += A * B over plain in-range indices, A by
    {i, k}, B by {k, j}, >= GEMM_PACK_MIN points), for one-statement kernels; else None."""
    if len(kernel.statements) != 1:
        return None
    stmt = kernel.statements[0]
    if stmt.reduce != "+" or len(stmt.target_indices) != 2 or len(stmt.loop_names) != 3:
        return None
    i, j = (idx.single_loop for idx in stmt.target_indices)
    if i is None or j is None or i == j or any(idx.const for idx in stmt.target_indices):
        return None
    ks = [l for l in stmt.loop_names if l not in (i, j)]
    e = stmt.expr
    if len(ks) != 1 or getattr(e, "op", None) != "*":
        return None
    k = ks[0]
    ext = stmt.extents
    if ext[i] * ext[j] * ext[k] < GEMM_PACK_MIN:
        return None
    reads = stmt.reads()
    if len(reads) != 2:
        return None
    sets = []
    for a in reads:
        shape = kernel.tensor(a.tensor).shape
        loops = []
        for d, idx in enumerate(a.indices):
            if idx.const or len(idx.terms) != 1 or idx.terms[0][1] != 1 or ext[idx.terms[0][0]] > shape[d]:
                return None
            loops.append(idx.terms[0][0])
        sets.append(sorted(loops))
    if sorted(sets) != sorted([sorted((i, k)), sorted((k, j))]) or stmt.target in {a.tensor for a in reads}:
        return None
    return index[i], index[j], index[k]


# The packed contraction host C runs (codegen/c/packed.py): its time, from the
# code it emits. Calibrated constants (cycles), measured on this class of core:
HOST_MICRO_EFFICIENCY = 0.7     # the MR x NR microkernel's share of lanes x fma_units (512-bit FMAs
                                # issue as two 256-bit halves on AMD Zen 4: 6x16 runs at ~70%)
HOST_STORE_VECTOR = 2.0         # load + add + store of one output vector in the microkernel's store
HOST_STORE_VECTOR_FAR = 8.0     # the same when the output region swept between visits outgrows L2
HOST_STORE_TRANSPOSED = 1.0     # per output of a transposed microkernel's last store (a column of its tile)
HOST_MICRO_CALL = 20.0          # a microkernel call: zeroing, prefetching, spilling the accumulators
HOST_BLOCK_SPILL = 0.25         # microkernel slow-down per cache block that outgrows L2


def _host_buffer_bytes(dtype: str) -> int:
    """Bytes of one element of a `dtype` tensor's C buffer (codegen/c/layout.py: integers in doubles,
    f16/bf16 in floats)."""
    return 8 if dtype in ("i8", "i32") else 4


def _host_packed(kernel: Kernel):
    """(Packed, the statement's loops as anchor-loop indices, B-copy cycles per element, A-copy
    cycles per element) when host C may run a contraction of this kernel packed; else None."""
    pk = packed_contraction(kernel)
    if pk is None:
        return None
    a_cost, b_cost = host_copy_costs(kernel, pk)
    return pk, b_cost, a_cost


def _l2_bytes(target: Target) -> float:
    """A core's L2 (the host preset's `L2` level; 1 MiB where a target file names none)."""
    return next((m.size_bytes for m in target.memory if m.name == "L2"), 1 << 20)


def _host_packed_seconds(model: "KernelModel", tiles: np.ndarray, parallel: np.ndarray):
    """(packed mask [n], seconds [n]) of candidate schedules run as host C's packed GEMM:
    per thread, the microkernel's reduction steps (MR x NR outputs, one step = MR*NR/lanes
    vector FMAs, never faster than the FMA latency), packing copies (B once per (nc, kc)
    block and batch, A once per (mc, kc) block and nc block), the store of every micro-tile
    per kc block with the fused epilogue, the padded copies; the kernel's other statements
    as one streaming pass each. Threads: the work units the C's threads share
    (`host_strategy.partition.packed_partition`)."""
    pk, b_cost, a_cost = model.host_pk
    kernel, target = model.kernel, model.target
    compute = target.compute
    index = {n: i for i, n in enumerate(model.loop_names)}
    anchors = kernel.loop_map(pk.index)
    ext = dict(pk.extents)
    n = tiles.shape[0]
    E = model.extents
    tiled = tiles < E[None, :, None]                                   # [n, D, L]
    first = np.argmax(tiled, axis=2)
    block = np.where(tiled.any(axis=2), np.take_along_axis(tiles, first[:, :, None], axis=2)[:, :, 0], E[None, :])
    loops = pk.batch + pk.m + pk.n + pk.k
    mapped = [index[anchors[l]] for l in loops if l in anchors]
    packed = tiled[:, mapped, :].any(axis=(1, 2))

    def group_block(group):
        out = np.ones(n)
        for l in getattr(pk, group):
            out *= block[:, index[anchors[l]]] if l in anchors else ext[l]
        return out
    mr, nr = pk.micro
    NB, M, N, K = (float(pk.size(g)) for g in ("batch", "m", "n", "k"))
    MC = np.minimum(np.maximum(group_block("m"), GEMM_MIN_BLOCK[0]), M)
    MC = np.where(MC >= mr, np.minimum(np.ceil(MC / mr) * mr, M), MC)
    NC = np.ceil(np.minimum(np.maximum(group_block("n"), GEMM_MIN_BLOCK[1]), N) / nr) * nr
    KC = np.minimum(np.maximum(group_block("k"), GEMM_MIN_BLOCK[2]), K)
    if K <= GEMM_WHOLE_K:       # one kc block (`packed_blocks`)
        KC = np.full(n, K)
    if pk.swapped:      # its blocks are the analysis's, not the schedule's (`swapped_blocks`)
        MC, NC, KC = (np.full(n, float(b)) for b in swapped_blocks(pk))
    lanes = compute.vector_width("f32")
    mpan, npan = math.ceil(M / mr), math.ceil(N / nr)
    # threads: the work units codegen/c/packed.py chooses for this many threads
    # (`packed_partition`, per cache block nc): on an idle machine the busiest thread's part of
    # them as they are claimed (a short last chunk counted as short), with the packing the cut adds
    par = parallel[:, [index[anchors[l]] for l in pk.batch + pk.m + pk.n if l in anchors]].any(axis=1)
    T = np.where(par, compute.units, 1)
    share, extra, m_rows = np.ones(n), np.zeros(n), np.full(n, M)
    l2 = _l2_bytes(target)
    for t, nc_block in {(int(t), int(c)) for t, c in zip(T, NC)}:
        if t <= 1:
            continue
        # a prepacked operand within half of L2 is re-read by each unit from its core's cache
        part = packed_partition(pk, nc_block, t, a_cost, b_cost, cached_bytes=l2 / 2)
        rows = (T == t) & (NC == nc_block)
        share[rows] = part.share       # the busiest thread's part, its units claimed as the C claims them
        extra[rows] = part.extra_cycles
        if part.mode == "m":
            m_rows[rows] = min(M, part.chunk * mr)
    vfma = mr * math.ceil(nr / lanes)
    step = max(vfma / compute.fma_units / HOST_MICRO_EFFICIENCY, HOST_FMA_LATENCY)
    micro = NB * mpan * (npan - 1 + last_panel(pk)) * K * step    # a narrow last panel costs less
    kblocks = np.ceil(K / KC)
    # The fused epilogue's arithmetic and calls issue as the same statements would in a loop
    # nest (`_epilogue_cycles`), so fusing never looks dearer than the separate passes.
    # The output micro-tile is read and written once per kc block; between two visits the
    # code sweeps this thread's M share x nc of the output: from L2 when that fits, else
    # from L3 (measured: the tall GEMM's C, 4096 x 256, costs ~1 ms per extra kc block).
    c_region = m_rows * NC * 4
    store_vector = np.where(c_region > l2 / 2, HOST_STORE_VECTOR_FAR, HOST_STORE_VECTOR)
    epi = _epilogue_cycles(kernel, pk, compute)
    store = NB * mpan * npan * kblocks * (math.ceil(nr / lanes) * mr * store_vector + HOST_MICRO_CALL) \
        + NB * M * N * epi
    if pk.swapped:      # partial sums in a tile-shaped buffer (near stores); the last block's store by columns
        store = NB * mpan * npan * (kblocks * (math.ceil(nr / lanes) * mr * HOST_STORE_VECTOR + HOST_MICRO_CALL)
                                    + mr * nr * HOST_STORE_TRANSPOSED) \
            + NB * M * N * epi
    b_copies = NB * K * npan * nr
    a_copies = NB * mpan * mr * K * np.ceil(N / NC)
    cycles = (micro + store + a_copies * a_cost + b_copies * b_cost + extra) * share
    # Cache blocks that outgrow L2 (B's kc x nc block, reused by every mc block; A's mc x kc
    # block, reused by every NR-wide panel): the microkernel streams them from L3.
    cycles = cycles + micro * share * HOST_BLOCK_SPILL * ((KC * NC * 4 > l2 / 2) + 1.0 * (MC * KC * 4 > l2 / 2))
    seconds = (cycles + _packed_serial_cycles(kernel, pk, lanes)) / (target.clock_ghz * 1e9)
    return packed, seconds


# Winograd F(2x2, 3x3) convolutions (codegen/c/winograd.py), cycles at the target's clock,
# calibrated on a 3x3 conv of 64 channels at 56x56 (perf: input transform ~20%, its 16 GEMMs ~70%,
# output transform ~9% of 1.44 ms): the input transform of one tile panel (8 tiles) for one
# channel (4 input rows of 18, bounds-checked, 48 adds, 16 stores of 8); the output transform of
# one tile for one output channel (16 loads, 24 adds, 4 scattered stores); per block and phase
# on more than one thread, the barrier that ends it.
HOST_WINOGRAD_INPUT = 105.0
HOST_WINOGRAD_OUTPUT = 6.7
HOST_WINOGRAD_BARRIER = 4000.0


def winograd_cycles(kernel: Kernel, pk, wg, target: Target, threads: int) -> float:
    """Cycles of the busiest of `threads` threads running packed contraction `pk` as
    Winograd `wg`: per block of tile panels the input transform (panels x channels shared),
    16 GEMMs through the 8x16 microkernel (16 x f panels shared) and the output transform
    (tiles shared), with the fused epilogue per output."""
    compute = target.compute
    lanes = compute.vector_width("f32")
    ext = dict(pk.extents)
    NB = pk.size("batch")
    F, C = ext[wg.f], ext[wg.c]
    TH, TWP, TWV = wg.tiles(ext)
    P = WINOGRAD_PANEL
    fpan = math.ceil(F / GEMM_NR)
    np_ = NB * TH * TWP // P
    pb = min(wg.block_panels(ext), np_)
    blocks = math.ceil(np_ / pb)
    step = max(P * math.ceil(GEMM_NR / lanes) / compute.fma_units / HOST_MICRO_EFFICIENCY, HOST_FMA_LATENCY)
    t = max(1, threads)
    gemm = blocks * math.ceil(16 * fpan / t) * pb * (C * step + P * HOST_STORE_VECTOR + HOST_MICRO_CALL)
    inputs = blocks * math.ceil(pb * C / t) * HOST_WINOGRAD_INPUT
    epi_ops = sum(max(1, kernel.statements[s].expr.flops()) for s in pk.epilogue)
    outputs = NB * TH * TWV * math.ceil(F / t) * (HOST_WINOGRAD_OUTPUT + 4 * epi_ops / compute.vector_ops_per_cycle)
    return gemm + inputs + outputs + (3 * blocks * HOST_WINOGRAD_BARRIER if t > 1 else 0.0)


def _winograd_seconds(model, pk, wg, parallel: np.ndarray) -> np.ndarray:
    """Seconds [n] of the candidates run as Winograd `wg` (threads where the schedule
    parallelises a batch, m or n loop, as codegen decides)."""
    kernel, target = model.kernel, model.target
    index = {n: i for i, n in enumerate(model.loop_names)}
    anchors = kernel.loop_map(pk.index)
    cols = [index[anchors[l]] for l in pk.batch + pk.m + pk.n if l in anchors]
    par = parallel[:, cols].any(axis=1) if cols else np.zeros(parallel.shape[0], dtype=bool)
    hz = target.clock_ghz * 1e9
    one, many = winograd_cycles(kernel, pk, wg, target, 1) / hz, winograd_cycles(kernel, pk, wg, target, target.compute.units) / hz
    return np.where(par, many, one)


def _packed_serial_cycles(kernel: Kernel, pk, lanes: int) -> float:
    """Cycles of a packed kernel outside its parallel region: the padded copies of its
    operands, and its statements outside the contraction and its epilogue (one streaming
    pass each)."""
    ext = dict(pk.extents)
    serial = 0.0
    for access in (pk.a, pk.b):
        pads = padding(kernel, access, ext)
        if any(lo or hi for lo, hi in pads):
            t = kernel.tensor(access.tensor)
            serial += math.prod(s + lo + hi for s, (lo, hi) in zip(t.shape, pads)) * 1.0
    for s, st in enumerate(kernel.statements):
        if s != pk.index and s not in pk.epilogue:
            serial += st.points * (1 + st.expr.flops()) / lanes + st.points * 3.0 / lanes
    return serial


def replay_packed(kernel: Kernel, schedule, target: Target) -> float | None:
    """Seconds of `schedule`'s packed GEMM replayed loop by loop as the generated C runs it,
    or None when its C takes another path. Where `_host_packed_seconds` counts blocks, panels
    and thread shares in closed form over a batch of candidates, this walks the one schedule's
    code: its cache blocks (`packed_blocks`, the schedule's outermost tiles, as codegen/c/packed.py
    reads them), each thread's own work units (`packed_partition`, `partition_ranges`), and
    within a unit every (nc, kc) block (B packed), (mc, kc) block (A packed) and micro-tile,
    edge blocks and edge panels at their real sizes; the busiest thread's cycles. The
    simulator (accel/sim.py) uses it as the host's replay: the C does not run the schedule's
    tile loops, so replaying those would time code that never runs."""
    if not runs_generated_c(target):
        return None
    pk = packed_contraction(kernel, schedule)
    if pk is None or direct_rows(kernel, pk) is not None:
        return None
    wg = winograd(kernel, pk)
    if wg is not None:      # not the packed blocks: Winograd's own phases
        anchors = kernel.loop_map(pk.index)
        parallel = set(schedule.parallel or ()) & {anchors.get(l) for l in pk.batch + pk.m + pk.n}
        return winograd_cycles(kernel, pk, wg, target, target.compute.units if parallel else 1) / (target.clock_ghz * 1e9)
    compute = target.compute
    lanes = compute.vector_width("f32")
    a_cost, b_cost = host_copy_costs(kernel, pk)
    stmt = kernel.statements[pk.index]
    anchors = kernel.loop_map(pk.index)
    sizes = schedule.tile_sizes()

    def block_of(l):
        extent = stmt.extents[l]
        anchor = anchors.get(l)
        return next((max(1, t) for t in sizes.get(anchor, ()) if t < extent), extent)
    MC, NC, KC = packed_blocks(pk, block_of)
    mr, nr = pk.micro
    M, N, K = (pk.size(g) for g in ("m", "n", "k"))
    parallel = set(schedule.parallel or ()) & {anchors.get(l) for l in pk.batch + pk.m + pk.n}
    threads = compute.units if parallel else 1
    l2 = _l2_bytes(target)
    part = packed_partition(pk, NC, threads, a_cost, b_cost, cached_bytes=l2 / 2)
    units = partition_ranges(pk, part)
    vfma = mr * math.ceil(nr / lanes)
    step = max(vfma / compute.fma_units / HOST_MICRO_EFFICIENCY, HOST_FMA_LATENCY)
    epi = _epilogue_cycles(kernel, pk, compute)
    spill = HOST_BLOCK_SPILL * ((KC * NC * 4 > l2 / 2) + 1.0 * (MC * KC * 4 > l2 / 2))

    def unit_cycles(m_lo, m_hi, n_lo, n_hi) -> float:
        store_vector = HOST_STORE_VECTOR_FAR if (m_hi - m_lo) * NC * 4 > l2 / 2 and not pk.swapped \
            else HOST_STORE_VECTOR
        cycles = 0.0
        for j0 in range(n_lo, n_hi, NC):
            nc = min(NC, n_hi - j0)
            npan = -(-nc // nr)
            for k0 in range(0, K, KC):
                kc = min(KC, K - k0)
                last = k0 + kc >= K
                cycles += kc * npan * nr * b_cost
                for i0 in range(m_lo, m_hi, MC):
                    mc = min(MC, m_hi - i0)
                    mpan = -(-mc // mr)
                    cycles += mpan * mr * kc * a_cost
                    # the GEMM's last panel, where narrow, at its own cost (`last_panel`)
                    micro = mpan * (npan - 1 + last_panel(pk) if j0 + nc == N else npan) * kc * step
                    cycles += micro * (1.0 + spill)
                    cycles += mpan * npan * (math.ceil(nr / lanes) * mr * store_vector + HOST_MICRO_CALL)
                    if last:
                        cycles += mc * nc * epi + (mpan * npan * mr * nr * HOST_STORE_TRANSPOSED if pk.swapped else 0.0)
        return cycles

    per_unit = [unit_cycles(m_lo, m_hi, n_lo, n_hi) for _, m_lo, m_hi, n_lo, n_hi in units]
    busiest = claimed_makespan(per_unit, threads)       # its units claimed as the C claims them
    # a prepacked operand each unit reads again from L3 (`packed_partition`'s extra less the
    # copies, which the units above pack), the busiest thread's part of it as the closed form
    reread = part.reread_cycles * part.share
    return (busiest + reread + _packed_serial_cycles(kernel, pk, lanes)) / (target.clock_ghz * 1e9)


# Host C's function and scalar work (cycles at the target's clock, per point): exp, tanh,
# sigmoid and GELU are the prelude's inline polynomial forms, vectorised with the loop
# (codegen/c/prelude.py `ac_expf`, `ac_exp_sat`: ~20-30 vector ops per 16 lanes; measured alone in a
# vectorised loop over 128 x 3072 points, with its load and store: exp 1.19 (charged 1.0, as
# calibrated before), tanh 1.29, sigmoid 0.79, GELU 1.29 cycles a point; in a packed GEMM's
# store, `_epilogue_cycles`); erf stays a scalar libm call (sqrt
# is an instruction under -fno-math-errno); and one step of a reduction chained along its
# innermost loop (a row max or sum read across rows, which the generator keeps out of the
# vectorised register tile: `host_strategy.access.unit_stride_reads`).
HOST_LIBM_CYCLES = {"exp": 1.0, "sigmoid": 0.8, "tanh": 1.3, "gelu": 1.3, "erf": 20.0,
                    "log": 8.0, "pow": 30.0}   # log, pow: scalar libm calls (estimates)
HOST_CHAINED_REDUCE = {"max": 1.4, "+": 1.9}
# Of a HOST_LIBM_CYCLES figure, the loop's own load and store (a plain copy of the same 1.5 MB
# measured 0.21 cycles a point): fused into a packed GEMM's store, the BERT FFN's 768 -> 3072
# linear + GELU ran 5.87 ms against 5.72 for the linear alone (one thread, 393K outputs):
# 0.98 cycles a point, the table's 1.3 less 0.3.
HOST_CALL_STREAM = 0.3


def _epilogue_cycles(kernel: Kernel, pk, compute) -> float:
    """Cycles per output point of packed contraction `pk`'s fused epilogue, issued per output
    in the microkernel's store: per statement, its arithmetic at the rate the same statement
    would issue in a loop nest (vector_ops_per_cycle; a lane per op where the output's
    columns are not contiguous) or its calls (GELU, exp, ...: `HOST_LIBM_CYCLES` less
    HOST_CALL_STREAM, the load and store of the loop those figures were measured in: here
    the value is in a register), whichever is larger, as the nest model takes them, so that
    fusing never looks dearer than the separate passes."""
    from ..ir.program import Call

    per_op = (1.0 if pk.n_contiguous or pk.swapped else compute.vector_width("f32")) / compute.vector_ops_per_cycle
    points = max(1, pk.size("batch") * pk.size("m") * pk.size("n"))
    cycles = 0.0
    for s in pk.epilogue:
        st = kernel.statements[s]
        calls = sum(max(0.0, HOST_LIBM_CYCLES[e.fn] - HOST_CALL_STREAM)
                    for e in st.expr.walk() if isinstance(e, Call) and e.fn in HOST_LIBM_CYCLES)
        cycles += st.points / points * max(max(1, st.expr.flops()) * per_op, calls)
    return cycles


def _host_scalar_cycles(stmt) -> float:
    """Cycles of a statement's scalar work on the host (see HOST_LIBM_CYCLES), 0 if none."""
    from ..ir.program import Call

    calls = sum(HOST_LIBM_CYCLES.get(e.fn, 0.0) for e in stmt.expr.walk() if isinstance(e, Call))
    cycles = stmt.points * calls
    if stmt.reduce is not None and stmt.target_indices:
        last = stmt.target_indices[-1].single_loop
        if last is not None and not unit_stride_reads(stmt, last):
            cycles += stmt.points * HOST_CHAINED_REDUCE.get(stmt.reduce, HOST_FMA_LATENCY)
    return cycles


# A loop that walks an access down a column (its index outside the last dimension) as the
# innermost loop: one cache line per point. Rows a power-of-two stride apart share L1 sets,
# so once trip x such accesses exceeds the L1's ways the lines evict each other before the
# next column reuses them (measured, bias + relu on 512 x 1024 walked by column: 4 rows per
# tile ~0.4 cycle a point per statement, 16 or more ~1.2).
HOST_STRIDED_POINT = 0.4
HOST_STRIDED_CONFLICT = 1.2
HOST_L1_WAYS = 8


def _host_strided_accesses(kernel: Kernel, si: int, index: dict) -> np.ndarray:
    """[D]: per anchor loop, how many of statement si's accesses (target and reads) it
    indexes outside their last dimension, i.e. with a stride of a row or more."""
    stmt = kernel.statements[si]
    m = kernel.loop_map(si)
    out = np.zeros(len(index), dtype=float)
    seen = set()
    for access in [Access(stmt.target, stmt.target_indices)] + list(stmt.reads()):
        if (access.tensor, access.indices) in seen:
            continue
        seen.add((access.tensor, access.indices))
        last = len(access.indices) - 1
        for d, idx in enumerate(access.indices):
            if d == last:
                continue
            for loop, c in idx.terms:
                if c and loop in m and not any(dict(i2.terms).get(loop) for i2 in access.indices[last:]):
                    out[index[m[loop]]] += 1
    return out


def _narrow_lanes_seconds(model, tiles: np.ndarray, parallel: np.ndarray) -> np.ndarray:
    """[n]: the seconds a plain nest's elementwise statements lose to register tiles narrower
    than a vector along the output's contiguous loop. The shared model streams an elementwise
    tile through the lanes as one flat run; the C vectorises the register tile's innermost
    loop (codegen/c/nest.py: `#pragma omp simd`), so a tile t wide fills t / ceil(t / lanes) lanes,
    its ops (2 a cycle) and its calls (HOST_LIBM_CYCLES, per point at full lanes) alike.
    Measured: the BERT FFN library's GELU alone, its tile 1 wide along the 3072 columns
    (modelled 0.2 ms as a flat run), 3.3 ms on one thread; BERT's erf GELU alone at 2 wide
    (0.18 modelled) 4.9 ms."""
    from ..ir.program import Call

    kernel, target = model.kernel, model.target
    compute = target.compute
    lanes = compute.vector_width("f32")
    n = tiles.shape[0]
    cycles = np.zeros(n)
    for si, st in enumerate(model.statements):
        if st.reduce or st.mac or st.contig_loop < 0 or si in model.computed:
            continue
        stmt = kernel.statements[si]
        t = np.maximum(1.0, tiles[:, st.contig_loop, -1].astype(float))
        filled = np.minimum(t / np.ceil(t / lanes), lanes)
        ops = 1 + stmt.expr.flops()
        calls = sum(HOST_LIBM_CYCLES.get(e.fn, 0.0) for e in stmt.expr.walk() if isinstance(e, Call))
        per_point = ops * (1.0 / (2.0 * filled) - 1.0 / compute.vector_ops_per_cycle) + calls * (lanes / filled - 1.0)
        cycles += stmt.points * np.maximum(per_point, 0.0)
    if not cycles.any():
        return cycles
    threads = np.where(parallel.any(axis=1), compute.units, 1)
    return cycles / threads / (target.clock_ghz * 1e9)


def _host_warm_bandwidth(kernel: Kernel, target: Target, bw: np.ndarray) -> np.ndarray:
    """Host runs are timed warm (repeated calls on the same buffers): a kernel whose tensors
    all fit the last cache level reads and writes them there, not in DRAM."""
    cache = _warm_cache(target)
    if cache is None or not _fits_warm(kernel.tensors, cache):
        return bw
    out = np.array(bw, copy=True)
    out[-1] = bw[target.memory.index(cache)]
    return out


def _warm_cache(target: Target):
    """The last cache level before DRAM, where warm runs find what fits (None: no such level)."""
    on_chip = [m for m in target.memory if m.size_bytes != float("inf")]
    return on_chip[-1] if 2 <= len(on_chip) < len(target.memory) else None


def _fits_warm(tensors, cache) -> bool:
    """Whether the C buffers of `tensors` fit half of `cache` (they stay there between calls)."""
    return sum(t.size * _host_buffer_bytes(t.dtype) for t in tensors) <= cache.size_bytes / 2


# The host core issuing a generated loop nest (vector targets that run generated C).
HOST_FMA_LATENCY = 4.0      # cycles: a chain of dependent multiply-adds (no -ffast-math reassociation)
HOST_LOOP_OVERHEAD = 8.0    # cycles per trip of an innermost loop (entry, bounds, branch, address setup)
HOST_REGISTER_TILE = 256    # output elements the code keeps in a local accumulator tile
HOST_UNROLLED_TRIP = 16     # innermost work (product of trips) gcc unrolls completely (max-completely-peel-times)


def _host_issue_cycles(st: "_StatementModel", tiles, inner_order, vec_loop, rows, width, fma_units,
                       reduction_steps=None):
    """Cycles a CPU core needs to issue a contraction's innermost work, from the shape of the
    loop nest it runs (the point loops of the innermost tiles):

    * a small output tile (<= HOST_REGISTER_TILE elements) is accumulated in registers with
      the reduction loops outside: each reduction step issues one FMA per vector of the
      contiguous output loop (a scalar op each when that loop is narrower than a vector) per
      other output point, bounded by the FMA chain latency and the operand loads, plus
      loading and storing the output tile once per innermost tile;
    * otherwise the innermost loop really run (inner loops whose trips multiply to <=
      HOST_UNROLLED_TRIP are unrolled into its body by the compiler) decides: a reduction loop chains dependent FMAs (latency per point),
      the vectorised contiguous output loop issues half a cycle per point, anything else one;
      every trip of that loop costs HOST_LOOP_OVERHEAD cycles.

    reduction_steps (where > 0) overrides the reduction steps per register tile: the packed
    GEMM microkernel keeps its outputs in registers over kc steps of a k tile of 1.
    """
    n, D = tiles.shape[0], tiles.shape[1]
    tin = np.where(st.present, tiles[:, :, -1], 1).astype(float)            # [n, D]
    out = st.out_mask
    R = np.prod(np.where(out, tin, 1.0), axis=1)
    K = np.prod(np.where(st.present & ~out, tin, 1.0), axis=1)
    if reduction_steps is not None:
        K = np.where(reduction_steps > 0, reduction_steps, K)
    pts = float(st.points)
    c = st.contig_loop
    tc = tin[:, c] if c >= 0 else np.ones(n)
    other = R / tc
    vops = other * np.where(tc >= width, np.ceil(tc / width), tc)
    per_step = np.maximum(np.maximum(vops / fma_units, HOST_FMA_LATENCY), (other + vops) / 2.0)
    reg = pts / R * per_step + pts / (R * K) * (2.0 * vops + 10.0)
    t_ord = np.take_along_axis(tin, inner_order, axis=1)
    # Innermost loops whose trips multiply to <= HOST_UNROLLED_TRIP are unrolled away: the
    # loop that takes the product past it is the innermost one really run.
    body = np.cumprod(t_ord[:, ::-1], axis=1)[:, ::-1]
    big = body > HOST_UNROLLED_TRIP
    some = t_ord > 1
    pick = np.where(big.any(axis=1), big.sum(axis=1) - 1,
                    np.where(some.any(axis=1), D - 1 - np.argmax(some[:, ::-1], axis=1), D - 1))
    v = inner_order[rows, pick]
    red = st.present[v] & ~out[v]
    per_point = np.where(red, HOST_FMA_LATENCY, np.where((v == c) & (v == vec_loop), 0.5, 1.0))
    plain = pts * per_point + pts / tin[rows, v] * HOST_LOOP_OVERHEAD
    if st.reduce:
        return np.where(R <= HOST_REGISTER_TILE, reg, plain)
    return plain


# Direct rows (codegen/c/direct.py `direct`, `window`): per output row and reduction step, one pass of
# the row's vectors (a load, or two and a permute at step 2, and an FMA or max), plus the row
# loop's overhead; a padded copy of the input, once per call; the fused epilogue per output.
# Calibrated on MobileNetV2's depthwise convs and ResNet-50's max pool (cycles).
HOST_ROW_STEP = 4.0             # one reduction step of a row: loop, address, broadcast
HOST_ROW_VECTOR = 1.0           # one vector of a row, per unit of the read's step
HOST_PAD_COPY = 0.5             # one element of a padded copy (row by row, vectorised)


# A depthwise conv's rows (few reduction steps, codegen's taps unrolled, the row's block in
# registers): the step overhead once per row, the padded slab copied per channel while it is
# in cache, the store one pass. Calibrated alone, one thread (measured / model): 144 channels
# at 56x56 0.165 / 0.196 ms, 32 at 112x112 0.155 / 0.155, 64 at 56x56 0.075 / 0.087 (the
# per-step form above charged 0.40, 0.29, 0.18).
HOST_ROW_PAD_SLAB = 0.15        # one element of a channel's padded slab
HOST_ROW_STORE = 1.0            # the store, per vector of outputs and epilogue op


def _rows_cycles(kernel: Kernel, rows: float, steps: float, dr, epilogue_points: float, epi_ops: float,
                 access: Access, lanes: int, length: int | None = None, unrolled: bool = False) -> float:
    vectors = math.ceil((length or dr.width) / lanes)
    if unrolled:
        cycles = rows * (HOST_ROW_STEP + steps * vectors * HOST_ROW_VECTOR * max(1, dr.step))
    else:
        cycles = rows * steps * (HOST_ROW_STEP + vectors * HOST_ROW_VECTOR * max(1, dr.step))
    if any(lo or hi for lo, hi in dr.pads):
        t = kernel.tensor(access.tensor)
        cycles += math.prod(s + lo + hi for s, (lo, hi) in zip(t.shape, dr.pads)) \
            * (HOST_ROW_PAD_SLAB if unrolled else HOST_PAD_COPY)
    return cycles + epilogue_points * (1.0 + epi_ops) / lanes * (HOST_ROW_STORE if unrolled else 2.0)


# Channel blocks (codegen/c/blocked.py): per block of 16 channels, its input rows transposed
# into the blocked plane (a 16 x 16 transpose: 16 masked loads, 64 shuffles, 16 stores), the
# plane's padding zeroed, per output and tap one vector load and FMA, per output the vector
# stored and transposed back, the epilogue per element along the channels' planes.
# Calibrated on MobileNetV2's depthwise convs in the network (cycles).
HOST_BLOCK_TRANSPOSE = 50.0     # one 16 x 16 transpose (either way)
HOST_BLOCK_TAP = 0.85           # one tap of one output vector
HOST_BLOCK_ZERO = 0.15          # one float of zeroed padding


def _blocks_cycles(kernel: Kernel, pk, cb, epi_ops: float, lanes: int) -> float:
    ext = dict(pk.extents)
    blocks = pk.size("batch") / BLOCK_CHANNELS
    H, W = cb.image
    _, wp = cb.plane
    Ho, Wo = ext[cb.h], ext[cb.w]
    rows = cb.rows                                       # each padded row transposed in once (a ring)
    real = min(rows, H)                                  # rows with input (the others zeroed)
    pack = real * math.ceil(W / BLOCK_CHANNELS) * HOST_BLOCK_TRANSPOSE \
        + ((rows - real) * wp + real * (wp - W)) * BLOCK_CHANNELS * HOST_BLOCK_ZERO
    taps = ext[cb.r] * ext[cb.s]
    compute = Ho * Wo * (taps * HOST_BLOCK_TAP + 1.0) + Ho * (HOST_ROW_STEP + taps)
    back = math.ceil(Ho * Wo / BLOCK_CHANNELS) * (HOST_BLOCK_TRANSPOSE
                                                  + BLOCK_CHANNELS * (2.0 + 1.0 + epi_ops))
    return blocks * (pack + compute + back)


# Vector rows (codegen/c/vector_rows.py): per channel and output row pass, per input row of
# the window inside the plane and tap column, one (masked) load per unit of the read's stride
# (a stride-2 tap: two loads and a permute) and one FMA per output vector; then the row stored
# with the epilogue (HOST_ROW_STORE per vector and op).
HOST_VROW_TAP = 1.0             # one tap of one output vector, per unit of the read's stride


def _vector_rows_cycles(pk, cb, epi_ops: float, lanes: int) -> float:
    ext = dict(pk.extents)
    H, _ = cb.image
    Ho, Wo, KH, KW = ext[cb.h], ext[cb.w], ext[cb.r], ext[cb.s]
    (sh, sw), (dh, _), (oh, _) = cb.stride, cb.dilation, cb.offset
    ch = oh - cb.pads[0]
    nv = math.ceil(Wo / BLOCK_CHANNELS)
    rows_in = sum(1 for h in range(Ho) for r in range(KH) if 0 <= sh * h + dh * r + ch < H)
    per_pass = max(1, min(Ho, VECTOR_ROWS_PASS // nv))
    passes = math.ceil(Ho / per_pass) * math.ceil(nv / VECTOR_ROWS_PASS)
    compute = rows_in * KW * nv * sw * HOST_VROW_TAP + passes * KH * per_pass * HOST_ROW_STEP
    store = Ho * Wo * (1.0 + epi_ops) / lanes * HOST_ROW_STORE
    return pk.size("batch") * (compute + store)


def _tiled(model, tiles: np.ndarray, index_of_stmt: int) -> np.ndarray:
    """[n]: candidates that tile some loop of statement `index_of_stmt` (an untiled, naive
    schedule keeps the plain nest)."""
    kernel = model.kernel
    index = {n: i for i, n in enumerate(model.loop_names)}
    anchors = kernel.loop_map(index_of_stmt)
    mapped = [index[a] for a in anchors.values()]
    return (tiles < model.extents[None, :, None])[:, mapped, :].any(axis=(1, 2))


def _threads(model, parallel: np.ndarray, index_of_stmt: int, loops) -> np.ndarray:
    index = {n: i for i, n in enumerate(model.loop_names)}
    anchors = model.kernel.loop_map(index_of_stmt)
    cols = [index[anchors[l]] for l in loops if l in anchors]
    par = parallel[:, cols].any(axis=1) if cols else np.zeros(parallel.shape[0], dtype=bool)
    return np.where(par, model.target.compute.units, 1)


def _other_statements(kernel: Kernel, skip, lanes: int) -> float:
    """Cycles of the statements outside a replaced one: one streaming pass each."""
    return sum(st.points * (1 + st.expr.flops()) / lanes + st.points * 3.0 / lanes + _host_scalar_cycles(st)
               for s, st in enumerate(kernel.statements) if s not in skip)


def _direct_rows_seconds(model, pk, dr, tiles: np.ndarray, parallel: np.ndarray):
    """Direct rows, or (`dr.dots`) one dot product per output vectorised along k: the
    larger of the issue time and the kernel's tensors streamed once at the warm bandwidth
    (a GEMV reads every weight once: memory-bound)."""
    kernel, target = model.kernel, model.target
    lanes = target.compute.vector_width("f32")
    NB, N, K = (float(pk.size(g)) for g in ("batch", "n", "k"))
    epi_ops = sum(max(1, kernel.statements[s].expr.flops()) for s in pk.epilogue)
    vr = vector_rows(kernel, pk, dr)
    cb = channel_blocks(kernel, pk, dr)
    if vr is not None:
        work = _vector_rows_cycles(pk, vr, epi_ops, lanes)
    elif cb is not None:
        work = _blocks_cycles(kernel, pk, cb, epi_ops, lanes)
    elif dr.dots:
        work = NB * N * (2 * HOST_ROW_STEP + K / dr.width * (HOST_ROW_STEP + math.ceil(dr.width / lanes)
                                                              * HOST_ROW_VECTOR)) + NB * N * (1.0 + epi_ops)
    elif dr.plane:    # the two innermost n loops as one row of (H - 1) * pitch + W
        H = dict(pk.extents)[pk.n[-2]]
        work = _rows_cycles(kernel, NB * N / (dr.width * H), K, dr, NB * N, epi_ops, pk.b, lanes,
                            (H - 1) * dr.plane + dr.width)
    else:
        work = _rows_cycles(kernel, NB * N / dr.width, K, dr, NB * N, epi_ops, pk.b, lanes,
                            unrolled=K <= DIRECT_K_MAX and bool(direct_slab(kernel, pk, dr)))
    work += sum(_host_scalar_cycles(kernel.statements[s]) for s in pk.epilogue)
    threads = _threads(model, parallel, pk.index, pk.batch + pk.n)
    units = NB / BLOCK_CHANNELS if cb is not None else NB * (N if dr.dots else 1)
    # a GEMV's one row shared by the threads (`gemv_split`); it still streams its weights at
    # the DRAM bandwidth of all the cores (below: ResNet-50's 8 MB, 0.45 ms on one, 0.39 on two)
    units = np.where(threads > 1, threads, units) if gemv_split(pk, dr, True) else units
    cycles = work / np.minimum(threads, units) \
        + _other_statements(kernel, {pk.index, *pk.epilogue}, lanes)
    stream = sum(t.size * _host_buffer_bytes(t.dtype) for t in kernel.tensors) / model.bw[-1]
    if K > DIRECT_K_MAX and kernel.tensor(pk.b.tensor).role == "param":
        # a GEMV's weights are read once per call: in a network, from DRAM (the rest of the
        # network evicts them between calls; MobileNetV2's 5 MB classifier took 0.25-0.28 ms
        # there, ResNet-50's 8 MB 0.45, each alone from L3 ~0.1)
        t = kernel.tensor(pk.b.tensor)
        stream = max(stream, t.size * _host_buffer_bytes(t.dtype) / (target.memory[-1].bandwidth_gbps * 1e9))
    return _tiled(model, tiles, pk.index), np.maximum(cycles / (target.clock_ghz * 1e9), stream)


def _window_rows_seconds(model, index: int, dr, tiles: np.ndarray, parallel: np.ndarray):
    kernel, target = model.kernel, model.target
    lanes = target.compute.vector_width("f32")
    stmt = kernel.statements[index]
    ext = stmt.extents
    out = [idx.single_loop for idx in stmt.target_indices]
    rows = math.prod(ext[l] for l in out[:-1])
    steps = math.prod(ext[l] for l in stmt.loop_names if l not in out)
    work = _rows_cycles(kernel, rows, steps, dr, rows * dr.width, 0.0, stmt.expr, lanes)
    threads = _threads(model, parallel, index, out[:-1])
    # the padded copy it reads (a straight vectorised copy, HOST_COPY_RUN an element), its rows shared by
    # the threads when it is large (codegen/c/direct.py `window`)
    t = kernel.tensor(stmt.expr.tensor)
    padded = math.prod(n + lo + hi for n, (lo, hi) in zip(t.shape, dr.pads)) if any(lo or hi for lo, hi in dr.pads) else 0
    copy = padded * HOST_COPY_RUN / np.where(padded >= WINDOW_SHARED_COPY_MIN, threads, 1)
    cycles = work / np.minimum(threads, rows) + copy + _other_statements(kernel, {index}, lanes)
    return _tiled(model, tiles, index), cycles / (target.clock_ghz * 1e9)


def warm_memory_floor(program, target: Target) -> float:
    """Seconds no host run can beat to move what the program must move once
    (`roofline.compulsory_traffic`), timed warm as the model times each kernel
    (`_host_warm_bandwidth`): a tensor whose C buffer fits half the last cache level can be
    served from that cache, a larger one only from DRAM. With DRAM alone for every tensor, a
    program of cache-sized tensors read 3x past its limit."""
    from .roofline import compulsory_traffic

    dram = target.memory[-1].bandwidth_gbps * 1e9
    cache = _warm_cache(target)
    seconds = 0.0
    for name, nbytes in compulsory_traffic(program).items():
        warm = cache is not None and _fits_warm([program.tensor(name)], cache)
        seconds += nbytes / (cache.bandwidth_gbps * 1e9 if warm else dram)
    return seconds
