"""The kernel model: a kernel compiled against a target, and the batch evaluation that
runs the model's steps in order (the package docstring lists them).

`KernelModel` holds what does not depend on a schedule (the levels' capacities,
bandwidths, latencies and energies; each statement's compiled form, statements.py; the
producer nests, producer.py; host C's model) and turns schedules into batch arrays
(`normalise`, `schedule_arrays`). `_evaluate` is the step sequence: tiles → capacity →
occupancy → per statement (datapath tile, operand sequence, fill, cycles, traffic, port
times, overlap) → producer nests → host C → energy. `kernel_model` caches models by
kernel structure. The baselines' schedules live here too (`naive_schedule`,
`textbook_schedule`): a producer nest falls back to its textbook schedule alone.
"""
from __future__ import annotations

import copy

import numpy as np

from ...caches import LRU, cached
from ...ir.program import DTYPE_BYTES
from ...ir.schedule import Kernel, Schedule, canonical_kernel, canonical_names
from ..host_model import _GEMM_MIN_BLOCK, _GEMM_MR, _GEMM_NR, compute_model
from ..target import Target, load_target
from .capacity import _held_regions, footprints, occupy, unroll_pressure
from .compute import Work, datapath_of, datapath_tile, occupancy, rescale_cycles, statement_cycles, vector_unit
from .energy import kernel_energy, level_energies, register_accumulation
from .fill import array_fill
from .overlap import Timeline, rides_anchor
from .ports import bandwidth, port_shapes, statement_time
from .producer import _ProducerModel, _producer_groups
from .results import BatchCost
from .statements import statement_model
from .tiles import tile_grid
from .traffic import operand_sequence, statement_traffic

SINGLE_SCHEDULES = 1024    # single-schedule costs a kernel model remembers
_INHERIT = np.iinfo(np.int64).max // 4    # a tile <= 0 (inherit): larger than any extent, clipped to it


def _read_only(a: np.ndarray, shape: tuple) -> np.ndarray:
    """`a` broadcast to `shape`, read-only as `np.broadcast_to` returns it (an array already
    of that shape is viewed: cheaper than broadcasting it)."""
    if a.shape != shape:
        return np.broadcast_to(a, shape)
    view = a.view()
    view.flags.writeable = False
    return view


class KernelModel:
    """A kernel compiled against a target: the constant parts of the cost model."""

    def __init__(self, kernel: Kernel, target: Target, staged: tuple[tuple[str, str], ...] = ()):
        self.kernel = kernel
        self.target = target
        self.staged = frozenset(staged)    # (tensor, level): held there whatever the level's roles
        self.loop_names = kernel.loop_names
        self.extents = np.array([l.extent for l in kernel.loops], dtype=np.int64)
        D = len(self.extents)
        on_chip = target.on_chip
        self.n_levels = L = len(on_chip)
        self.level_names = tuple(m.name for m in target.memory)  # memory order
        M = len(target.memory)
        # memory index of tiling level h (outer → inner): on_chip[h] is memory[M-2-h]
        self.mem_index = np.array([M - 2 - h for h in range(L)])
        self.capacity = np.array([m.size_bytes for m in on_chip], dtype=float)
        self.per_unit = np.array([m.per_unit for m in on_chip])
        self.bw = np.array([m.bandwidth_gbps * 1e9 for m in target.memory])
        self.latency_s = np.array([m.latency_cycles for m in target.memory]) / (target.clock_ghz * 1e9)
        self.read_j, self.write_j = level_energies(target)      # J per byte read / written at each level
        self.port_bytes, self.ported, self.split_ports = port_shapes(target)   # ports.py
        self.any_ported = bool(self.ported.any())          # else every level is timed as a channel
        self.whole_ports = not self.port_bytes.any()       # no transfer is rounded up to a port's width
        self.mem_per_unit = np.array([m.per_unit for m in target.memory])
        per_unit_levels = [h for h in range(L) if on_chip[h].per_unit]
        self.dist_level = per_unit_levels[0] if per_unit_levels else L - 1
        anchor = kernel.anchor_statement
        out_loops = {l.name for l in anchor.output_loops}
        self.default_parallel = np.array([n in out_loops and target.compute.implicit_parallel
                                          for n in self.loop_names])
        self.flops = float(kernel.flops)
        index = {n: i for i, n in enumerate(self.loop_names)}
        self.host = compute_model(kernel, target, index)
        host_c = self.host is not None
        if host_c:
            # What host C must move across the DRAM boundary at least once: the kernel's
            # outputs, and of its inputs the elements it reads (a gather's rows, not its table).
            from ..roofline import statements_read_bytes
            self.compulsory_bytes = float(sum(statements_read_bytes(kernel.tensor(t), kernel.statements)
                                              for t in kernel.inputs)
                                          + sum(kernel.tensor(t).nbytes for t in kernel.outputs))
        # Bytes an element of each tensor moves: its dtype's on an accelerator; on host, its C
        # buffer's (codegen/c/ holds integer tensors in doubles, f16/bf16 in floats).
        self.elem_bytes = self.host.elem_bytes if host_c else DTYPE_BYTES.__getitem__
        self.statements = [statement_model(self, i, s, index, D, on_chip)
                           for i, s in enumerate(kernel.statements)]
        # Statements computed at the anchor's tiles: each costed as its own nest (producer.py).
        self.computed = kernel.computed_at()
        self.producers = [_ProducerModel(kernel, group, target, index, kernel_model, _searched_alone)
                          for group in _producer_groups(kernel)]
        self.held = _held_regions(kernel, target, index, self.elem_bytes) if self.computed else []
        # Host C runs a tiled GEMM-like kernel as a packed BLIS-style GEMM, not the tile nest.
        self.host_packed = self.host_pk = self.host_scalar = None
        self._single: dict = {}       # one schedule's cost by its arrays (`evaluate_batch`)
        self._default_arrays: dict = {}   # `normalise`'s default orders and parallel mask by batch size
        if host_c:
            self.host_packed, self.host_pk = self.host.packed_gemm, self.host.pk
            self.host_scalar, self.host_strided = self.host.scalar, self.host.strided
            self.bw = self.host.bandwidth(self.bw)

    # ------------------------------------------------------------------ inputs

    def normalise(self, tiles, orders=None, parallel=None, vectorize=None):
        """Arrays of shape [n, D, L] tiles (<= 0: inherit), [n, L, D] orders, [n, D]
        parallel mask, [n] vectorised loop index (-1: innermost of the innermost order)."""
        D, L = len(self.extents), self.n_levels
        tiles = np.asarray(tiles, dtype=np.int64)
        if tiles.ndim == 2:
            tiles = tiles[None]
        n = tiles.shape[0]
        if tiles.shape[1:] != (D, L):
            raise ValueError(f"tiles must have shape [n, {D} loops, {L} levels], got {tiles.shape}")
        tiles = np.where(tiles <= 0, _INHERIT, tiles)
        tiles = np.minimum(tiles, self.extents[None, :, None])
        tiles = np.minimum.accumulate(tiles, axis=2)
        if orders is None:
            orders = self._defaults(n)[0]
        else:
            orders = np.asarray(orders, dtype=np.int64)
            if orders.ndim == 1:
                orders = orders[None]
            if orders.ndim == 2:
                orders = np.broadcast_to(orders[:, None, :], (orders.shape[0], L, D))
            orders = _read_only(orders, (n, L, D))
        if parallel is None:
            parallel = self._defaults(n)[1]
        else:
            parallel = _read_only(np.asarray(parallel, dtype=bool), (n, D))
        if vectorize is None:
            vectorize = np.full(n, -1, dtype=np.int64)
        else:
            vectorize = _read_only(np.asarray(vectorize, dtype=np.int64), (n,))
        return tiles, orders, parallel, vectorize

    def _defaults(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The default orders [n, L, D] (source order) and parallel mask [n, D] of n
        candidates, as read-only views (kept for the batch sizes seen last)."""
        found = self._default_arrays.get(n)
        if found is None:
            if len(self._default_arrays) >= 64:
                self._default_arrays.clear()
            D, L = len(self.extents), self.n_levels
            found = self._default_arrays[n] = (np.broadcast_to(np.arange(D), (n, L, D)),
                                               np.broadcast_to(self.default_parallel, (n, D)))
        return found

    def schedule_arrays(self, schedule: Schedule):
        """One schedule as batch arrays (tiles at levels the target lacks are an error)."""
        levels = self.target.tiling_levels
        unknown = {lv for per in schedule.tiles.values() for lv in per} - set(levels)
        unknown |= set(schedule.order) - set(levels)
        if unknown:
            raise ValueError(f"schedule for {self.kernel.name} names levels {', '.join(sorted(unknown))} "
                             f"that target {self.target.name!r} lacks (levels: {', '.join(levels)})")
        index = {n: i for i, n in enumerate(self.loop_names)}
        sizes = schedule.tile_sizes(levels)
        tiles = np.array([[sizes[n][h] for h in range(len(levels))] for n in self.loop_names])
        orders = np.array([[index[l] for l in schedule.order_at(lv, levels)] for lv in levels])
        parallel = None                      # not decided: the target's default (`default_parallel`)
        if schedule.parallel is not None:
            parallel = np.array([n in set(schedule.parallel) for n in self.loop_names])
        vec = schedule.vectorize
        vectorize = np.array([index[vec] if vec in index else -1])
        return tiles[None], orders[None], parallel, vectorize

    # ------------------------------------------------------------------ evaluation

    def capacity_footprints(self, tiles, orders=None) -> np.ndarray:
        """Bytes the tiles of every held tensor take at each tiling level: [n, L]."""
        tiles, orders, *_ = self.normalise(tiles, orders)
        return footprints(self, tiles.astype(float), orders=orders)

    def _as_packed(self, tiles, orders, vectorize):
        """What host C runs for a tiled GEMM-like kernel (codegen/c/ packed path): cache
        blocks mc x nc x kc = each loop's outermost tile, raised to GEMM_MIN_BLOCK (mc in
        whole micro-panels), at the outer levels, loops j0, k0, i0; the next-to-innermost
        level holds the micro-panels (MR x kc of A, kc x NR of B); the innermost level is the
        MR x NR microkernel: its outputs stay in registers while p steps through
        kc streaming A and B from the packed buffers (a k tile of 1 there, k the innermost
        loop), loops jr, ir, p; j vectorised. Untiled candidates keep the plain nest. Also
        the cycles spent copying A blocks and B panels, and kc (reduction steps per
        microkernel call; 0 where not packed)."""
        n, D, L = tiles.shape
        i, j, k = self.host_packed
        ext = self.extents
        tiled_at = tiles < ext[None, :, None]                          # [n, D, L]
        packed = tiled_at[:, [i, j, k], :].any(axis=(1, 2))
        if not packed.any():
            return tiles, orders, vectorize, None, None
        first = np.argmax(tiled_at, axis=2)
        block = np.where(tiled_at.any(axis=2), np.take_along_axis(tiles, first[:, :, None], axis=2)[:, :, 0],
                         ext[None, :])
        mc = np.minimum(np.maximum(block[:, i], _GEMM_MIN_BLOCK[0]), ext[i])
        mc = np.minimum(np.where(mc >= _GEMM_MR, -(-mc // _GEMM_MR) * _GEMM_MR, mc), ext[i])
        nc = np.minimum(np.maximum(block[:, j], _GEMM_MIN_BLOCK[1]), ext[j])
        kc = np.minimum(np.maximum(block[:, k], _GEMM_MIN_BLOCK[2]), ext[k])
        new = np.array(tiles, copy=True)
        # Levels outside the innermost two hold the blocks; the one inside them the
        # micro-panels (MR x kc of A, kc x NR of B), the innermost the microkernel.
        panel = L - 2 if L >= 3 else L - 1
        for d, b, micro in ((i, mc, _GEMM_MR), (j, nc, _GEMM_NR), (k, kc, None)):
            new[:, d, :] = b[:, None]
            new[:, d, panel:] = b[:, None] if micro is None else np.minimum(b, micro)[:, None]
            if micro is None:
                new[:, d, L - 1] = 1
        tiles = np.where(packed[:, None, None], new, tiles)
        order = np.array([j, k, i] + [d for d in range(D) if d not in (i, j, k)])
        inner = np.array([j, i, k] + [d for d in range(D) if d not in (i, j, k)])
        packed_orders = np.broadcast_to(np.concatenate([np.broadcast_to(order, (L - 1, D)), inner[None]]), (n, L, D))
        orders = np.where(packed[:, None, None], packed_orders, orders)
        vectorize = np.where(packed, j, vectorize)
        # Copies: B once per (j0, k0) panel (K x N in all), A's block once per (j0, k0, i0).
        M, N, K = float(ext[i]), float(ext[j]), float(ext[k])
        copies = K * N + M * K * np.ceil(N / nc)
        return tiles, orders, vectorize, np.where(packed, copies, 0.0), np.where(packed, kc, 0.0)

    def _epilogue_overlap(self, double_buffered: np.ndarray) -> np.ndarray:
        """[n] bool: whether in-place epilogues may overlap the anchor, i.e. the innermost level
        holding the anchor's output keeps two tiles (the array fills one while the epilogue
        finishes the other). Never on host C, which runs a kernel's statements one after another."""
        n = double_buffered.shape[0]
        chain = self.statements[self.kernel.anchor].accesses[0].chain
        if self.host is not None or not chain:
            return np.zeros(n, dtype=bool)
        return double_buffered[:, chain[-1]]

    def evaluate_batch(self, tiles, orders=None, parallel=None, vectorize=None, unroll=None) -> BatchCost:
        """`unroll`: [n] unroll factors of each candidate's innermost point loop (None: not
        unrolled); the registers' spill it causes is charged (capacity.py, `unroll_pressure`)."""
        return self._costed(tiles, orders, parallel, vectorize, unroll)[0]

    def unroll_pressures(self, tiles, orders=None, parallel=None, vectorize=None, unroll=None) -> list:
        """The `UnrollPressure` of each statement that unrolling may spill (capacity.py), for
        a batch: what `evaluate_batch` charges, for the reasons a report or the Tune tab gives."""
        return self._costed(tiles, orders, parallel, vectorize, unroll)[1]

    def _costed(self, tiles, orders, parallel, vectorize, unroll) -> tuple[BatchCost, list]:
        tiles, orders, parallel, vectorize = self.normalise(tiles, orders, parallel, vectorize)
        unroll = self.unroll_array(unroll, len(tiles))
        if len(tiles) > 1:
            return self._evaluate(tiles, orders, parallel, vectorize, unroll)
        # One schedule: the passes ask the same one again (its tiles under other annotations,
        # a plan re-costed); each is costed once (shared by the kernels sharing this model).
        key = (tiles.tobytes(), orders.tobytes(), parallel.tobytes(), vectorize.tobytes(), unroll.tobytes())
        found = self._single.get(key)
        if found is None:
            if len(self._single) >= SINGLE_SCHEDULES:
                self._single.clear()
            found = self._single[key] = self._evaluate(tiles, orders, parallel, vectorize, unroll)
        return found

    @staticmethod
    def unroll_array(unroll, n: int) -> np.ndarray:
        """[n] unroll factors as floats (None or <= 1: not unrolled)."""
        if unroll is None:
            return np.ones(n)
        unroll = np.broadcast_to(np.asarray(unroll, dtype=float), (n,))
        return np.maximum(unroll, 1.0)

    def _evaluate(self, tiles, orders, parallel, vectorize, unroll) -> tuple[BatchCost, list]:
        """`evaluate_batch` of normalised arrays: the model's steps in order (the package
        docstring), each a function of its own module; and the unrolled bodies' register
        pressures (`unroll_pressures`)."""
        target, compute = self.target, self.target.compute
        pack_cycles = micro_k = None
        schedule_tiles = tiles      # the packed path's blocks come from these (not _as_packed's rewrite)
        if self.host_packed is not None:
            tiles, orders, vectorize, pack_cycles, micro_k = self._as_packed(tiles, orders, vectorize)
        grid = tile_grid(self.extents, tiles, orders)                          # tiles.py
        cap = occupy(self, grid)                                               # capacity.py
        share, active = occupancy(compute, parallel, grid.counts[:, self.dist_level, :])   # compute.py
        bw = bandwidth(self, active)                                           # ports.py
        n, M, L = grid.n, len(self.level_names), self.n_levels
        clock = target.clock_ghz * 1e9
        anchor_unit = datapath_of(compute, self.statements[self.kernel.anchor]).unit
        timeline = Timeline(n, M, anchor_unit, self._epilogue_overlap(cap.double_buffered),
                            pipelined=self.host is None)               # overlap.py (host C: one nest after another)
        work = Work.zeros(n)
        datapath_bytes = np.zeros((n, len(self.statements), M))
        spill = np.zeros(n)                      # bytes unrolled bodies spill out of the registers
        registers = np.zeros((2, n, M))          # partial sums read / written in per-PE registers
        pressures = []
        for si, st in enumerate(self.statements):
            if si in self.computed:
                continue      # computed at the anchor's tiles: its own nest (producer.py)
            tile = datapath_tile(compute, grid, st, vectorize)                  # compute.py
            seq = operand_sequence(grid, st, tile)                             # traffic.py
            fill = array_fill(compute, grid, st, tile, seq)                    # fill.py
            cycles = statement_cycles(self, grid, si, st, tile, fill, pack_cycles, micro_k)
            work.count(st, tile)
            pressure = unroll_pressure(self, grid, cap, si, st, tile, unroll)  # capacity.py
            if pressure is not None:
                pressures.append(pressure)
                spill = spill + pressure.traffic
            # A PE array's online-softmax sums are rescaled by the vector unit beside it: for
            # the anchor that work rides its pipeline (overlap.py), else it waits in line.
            rescale = rescale_cycles(self, grid, st, tile) / active / clock if tile.dp.on_array else 0.0
            anchor = si == self.kernel.anchor
            st_compute = cycles / active / clock + (0.0 if anchor else rescale)
            moved = statement_traffic(self, grid, cap, si, st, tile, seq, active)   # traffic.py
            datapath_bytes[:, si, :] = moved.datapath
            accumulated = register_accumulation(self, st, tile, moved)         # energy.py
            if accumulated is not None:
                m, read, written = accumulated
                registers[0, :, m] += read
                registers[1, :, m] += written
            times = statement_time(self, moved, cap.double_buffered, bw, seq.tiles_at, st_compute, fill,
                                   active)                                     # ports.py
            timeline.add_statement(anchor, rides_anchor(st, anchor), tile.dp.unit, st_compute, moved,
                                   bw, times, seq.tiles_at[:, L - 1])          # overlap.py
            if anchor and np.any(rescale):
                timeline.add_beside(vector_unit(compute), rescale, seq.tiles_at[:, L - 1])
        timeline.close_statements()
        for pressure in pressures:      # the report's spill_ratio: the registers' overflow too
            cap.spill = np.maximum(cap.spill, pressure.ratio)
        producer_energy = timeline.add_producers(self.producers, compute, grid, parallel)
        # An unrolled body's spilled values are stored to the next level out and loaded back
        # in line with its compute (the body waits for them).
        time_s = timeline.time_s + spill / bw[:, 1]
        if self.host is not None:   # host C: the paths that replace the nest (packed, direct rows)
            time_s = self.host.seconds(self, schedule_tiles, parallel, time_s)
            # ... which still move the kernel's inputs and outputs through DRAM once (a GEMV's
            # 64 MB of pre-packed weights do not stay in cache between calls).
            time_s = np.maximum(time_s, self.compulsory_bytes / self.bw[-1])
        bytes_by_level = timeline.bytes_by_level
        reads, writes = timeline.reads_by_level, timeline.writes_by_level
        if spill.any():                 # half stored to the next level out, half loaded back
            bytes_by_level, reads, writes = bytes_by_level.copy(), reads.copy(), writes.copy()
            bytes_by_level[:, 1] += spill
            reads[:, 1] += spill / 2
            writes[:, 1] += spill / 2
        energy, energy_by_level = kernel_energy(
            reads + registers[0], writes + registers[1], self.read_j, self.write_j,
            work.mac_points + work.vector_ops, target.energy_pj_per_mac, producer_energy,
            timeline.producer_level_energy)                                    # energy.py
        return self._batch_cost(time_s, bytes_by_level, energy, energy_by_level, share, work, cap, datapath_bytes,
                                timeline), pressures

    def _batch_cost(self, time_s, bytes_by_level, energy, energy_by_level, share, work, cap, datapath_bytes,
                    timeline) -> BatchCost:
        """The steps' results as a BatchCost, with the utilisations derived from them."""
        clock = self.target.clock_ghz * 1e9
        dram = bytes_by_level[:, -1]
        flops = np.full(len(time_s), self.flops)
        return BatchCost(
            level_names=self.level_names, time_s=time_s, cycles=time_s * clock, flops=flops,
            bytes=bytes_by_level, energy_j=energy, energy_by_level=energy_by_level,
            bw_util=dram / np.maximum(time_s, 1e-30) / self.bw[-1],
            occupancy=share,
            pe_util=np.where(work.offered > 0, work.useful / np.maximum(work.offered, 1e-30), 1.0),
            arithmetic_intensity=flops / np.maximum(dram, 1e-30),
            spill_ratio=cap.spill, compute_s=timeline.compute_s, level_time_s=timeline.level_time,
            double_buffered=cap.double_buffered, datapath_bytes=datapath_bytes,
            level_bw_s=timeline.level_bw_s, level_latency_s=timeline.level_lat_s, serial_s=timeline.serial_total,
            cold_s=timeline.cold_total, drain_s=timeline.drain_total, stream_s=timeline.stream_total,
            compute_by_unit=timeline.compute_by_unit,
        )


# (by kernel object: MaxViT-T asks for ~8,800 models of ~600 structures; each miss finds the
# compiled model in `_MODELS` and copies it)
@cached("cost.kernel_model", 1024)
def kernel_model(kernel: Kernel, target: Target, staged: tuple[tuple[str, str], ...] = ()) -> KernelModel:
    """The compiled cost model of `kernel` on `target` (cached); `staged`: a schedule's
    `stage` annotation, (tensor, level) pairs held at levels their role would bypass.

    The model reads the kernel's structure, not its names: kernels equal up to tensor names
    (a network's repeated layers, a kernel rebuilt by another pass) share one compiled model,
    handed out with `kernel` set to the caller's (ResNet-50 built 754 models of 133 forms);
    not on host C, whose model reads the kernel's tensors by name."""
    names = canonical_names(kernel)
    key = (canonical_kernel(kernel), target, tuple(sorted((names.get(t, t), lv) for t, lv in staged)))
    model = _MODELS.get(key)
    if model is None:
        model = KernelModel(kernel, target, tuple(staged))
        _MODELS.put(key, model)
    elif model.kernel is not kernel:
        if model.host is not None:     # host C's model reads the kernel's tensors by name
            return KernelModel(kernel, target, tuple(staged))
        model = copy.copy(model)       # shares the compiled arrays, which nothing changes
        model.kernel = kernel
    return model


# Compiled models by (kernel structure, target, staging). MaxViT-T on one preset compiles ~850
# (its library, fused, chain and producer kernels): at 512 a third were evicted and compiled
# again. A model is ~0.1 MB.
_MODELS = LRU("cost.kernel_model_by_structure", 1024)


def naive_schedule(kernel: Kernel, target) -> Schedule:
    """No tiling, source order: every level holds the whole problem or streams it."""
    return Schedule.default(kernel, load_target(target).tiling_levels)


LIBRARY_TILE = 256  # the textbook tile at the outermost on-chip level, / 4 per level inward


def textbook_schedule(kernel: Kernel, target) -> Schedule:
    """A fixed textbook tiling of one op (the report's `textbook` baseline; the tuned
    per-op `library` baseline starts from it, see baselines.py).

    Every loop is tiled 256 at the outermost on-chip level, then 64, 16, 8 inward; at the innermost level a systolic contraction gets exactly one PE array
    (pe_rows x pe_cols) and a vector target one vector on the innermost loop. Tiles are then
    halved, largest first, until each level holds them twice (double buffering). Source
    order, output loops parallel.
    """
    target = load_target(target)
    # The tiles depend on the kernel's structure, not its names (a network's repeated layers,
    # every search's seed and every library candidate ask for them again): computed once.
    key = (canonical_kernel(kernel), target)
    tiles = _TEXTBOOK_TILES.get(key)
    if tiles is None:
        tiles = _textbook_tiles(kernel, target)
        tiles.setflags(write=False)
        _TEXTBOOK_TILES.put(key, tiles)
    outputs = {l.name for l in kernel.anchor_statement.output_loops}
    return Schedule.of_arrays(kernel, target.tiling_levels, tiles,
                              parallel=[n in outputs for n in kernel.loop_names])


# Textbook tiles [loop, level] by (kernel structure, target).
_TEXTBOOK_TILES = LRU("cost.textbook_tiles", 2048)


def _textbook_tiles(kernel: Kernel, target: Target) -> np.ndarray:
    """`textbook_schedule`'s tiles [loop, level]."""
    model = kernel_model(kernel, target)
    levels = target.tiling_levels
    L, D = len(levels), len(kernel.loops)
    tiles = np.zeros((D, L), dtype=np.int64)
    for h in range(L):
        tiles[:, h] = max(8, LIBRARY_TILE >> (2 * h))
    anchor = model.statements[kernel.anchor]
    compute = target.compute
    if datapath_of(compute, anchor).on_array:
        for loop, along in anchor.array_units:
            tiles[loop, L - 1] = along
            tiles[loop, : L - 1] = np.maximum(tiles[loop, : L - 1], along)
    else:
        tiles[D - 1, L - 1] = max(tiles[D - 1, L - 1], compute.vector_width(anchor.dtype))
    tiles = np.minimum(tiles, model.extents[:, None])
    tiles = np.minimum.accumulate(tiles, axis=1)
    for h in range(L - 1, -1, -1):
        for _ in range(64):
            fp = model.capacity_footprints(tiles[None])[0]
            if 2 * fp[h] <= model.capacity[h] or tiles[:, h].max() <= 1:
                break
            d = int(np.argmax(tiles[:, h]))
            tiles[d, h] = max(1, tiles[d, h] // 2)
            tiles[d, h + 1:] = np.minimum(tiles[d, h + 1:], tiles[d, h])
        # Inner levels must fit inside the (possibly shrunk) outer tile.
    return np.minimum.accumulate(tiles, axis=1)


# The passes' starting tiles (rules/tiling.py, rules/fusion.py) keep their old name.
library_schedule = textbook_schedule


# How a producer nest is scheduled alone inside its region: as the tile search schedules it
# (`accel.tile_search`). The search scores its candidates with this model, so neither module
# can import the other: the accel package connects them when it is imported.
_PRODUCER_SEARCH = []


def register_producer_search(fn) -> None:
    """`fn(kernel, target) -> Schedule | None`: how producer nests are scheduled alone."""
    _PRODUCER_SEARCH[:] = [fn]


@cached("cost.producer_alone", 256)
def _searched_alone(kernel: Kernel, target: Target) -> Schedule:
    """A producer nest's schedule alone: the search's, the textbook tiles where it finds
    none that fits."""
    found = _PRODUCER_SEARCH[0](kernel, target) if _PRODUCER_SEARCH else None
    return found if found is not None else textbook_schedule(kernel, target)
