"""A tile-level simulator: replays a schedule's tile loops to check the analytic model.

Where the cost model (`accel/cost/`) counts refetches with a closed-form rule, the simulator
walks the actual tiles in the schedule's order (remainder tiles included), keeps for every
memory level the tile of each tensor that is resident in that level's buffer, and moves data
only when the tile a step needs differs from the resident one (an accumulated output is
written back when it leaves and read back when it returns). Time comes from an event
timeline: each step's loads go through the source level's channel; where a level holds its
tiles twice (double buffering) a tile's load starts as soon as the tile two before it was
last used (its buffer free), otherwise only after the step before it ends; a step computes
once its data are in.

What it does not replay: operand streaming inside the PE array / vector lanes (each step
is charged its share, by points, of the model's datapath traffic — so a read the vector unit
finds in its registers from the statement before it, `cost.traffic.vector_held`, moves
nothing in the replay either) and the split of work
over compute units (rates are scaled by the model's occupancy, as in the model). Huge nests
are capped: after `max_steps` innermost tiles the totals are scaled up by the points left
(by points, not steps: the first tiles replayed may all be full ones, and the remainder
tiles that come later smaller), the time past the cold start only (it is paid once).
"""
from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

import numpy as np

from ..ir.schedule import Schedule
from .cost import KernelModel, _chunks, _fill_cycles, _stationary_operand, datapath_of, kernel_model
from .cost.compute import vector_unit
from .cost.domain import RowTiles
from .cost.overlap import hidden_startups, rides_anchor, startup
from .target import load_target


@dataclass
class SimResult:
    time_s: float
    cycles: float
    bytes: dict[str, float]
    compute_s: float
    steps: int              # innermost tiles replayed
    total_steps: int        # innermost tiles in the whole nest
    sampled: bool
    compute_by_unit: dict | None = None   # its own statements' replayed compute by datapath (not its producers')
    cold_s: float = 0.0     # its nest's cold start: when the anchor's first step computes (overlap.py's start-up)


class _Channel:
    """One port's channel. A transfer occupies bytes / bandwidth of it. Transfers are booked in
    the order the replay meets them, but a prefetch is issued at the start of the tile it
    overlaps, earlier than loads already booked for that tile's steps: it then takes the idle
    gaps after its issue time (a DMA engine interleaves its queued requests in bursts) before
    queueing at the end. Only the last `MAX_GAPS` gaps are kept (a finite request queue).

    A transfer nothing waits for (a double-buffered level's write-back) is posted instead: it
    takes the idle time the bookings leave after its issue (`serve`), as ZigZag lets a
    transfer use any cycle of its memory-updating window, and goes in line only when its
    buffer posts the next one (it must be out by then) or at the end (`flush`)."""

    MAX_GAPS = 4096

    def __init__(self):
        self.free = 0.0
        self.starts: list[float] = []   # idle gaps before `free`, sorted and disjoint
        self.ends: list[float] = []
        self.pending: dict = {}         # key -> [issue, seconds left] of posted transfers

    def _fill_gaps(self, issue: float, duration: float) -> tuple[float, float]:
        """Take idle gaps after `issue` for up to `duration`: (seconds left, when the last
        part taken ends)."""
        starts, ends = self.starts, self.ends
        g = bisect.bisect_right(ends, issue)
        done = issue
        while g < len(starts) and duration > 0.0:
            begin = max(starts[g], issue)
            take = min(ends[g] - begin, duration)
            duration -= take
            done = begin + take
            if begin > starts[g]:           # the gap's head stays idle
                if done < ends[g]:          # ... and so does its tail: split it
                    starts.insert(g + 1, done)
                    ends.insert(g + 1, ends[g])
                ends[g] = begin
                g += 1
            elif done < ends[g]:
                starts[g] = done
            else:
                del starts[g], ends[g]
        return duration, done

    def book(self, issue: float, duration: float) -> float:
        """Book `duration` seconds of transfer issued at `issue`; return when it is done."""
        if duration <= 0.0:
            return max(issue, 0.0)
        duration, done = self._fill_gaps(issue, duration)
        if duration > 0.0:
            begin = max(self.free, issue)
            if begin > self.free:
                self.starts.append(self.free)
                self.ends.append(begin)
                if len(self.starts) > self.MAX_GAPS:
                    del self.starts[0], self.ends[0]
            self.free = done = begin + duration
        return done

    def post(self, key, issue: float, duration: float) -> None:
        """Post a transfer nothing waits for (see the class docstring); `key` its buffer."""
        if duration <= 0.0:
            return
        old = self.pending.pop(key, None)
        if old is not None:                 # its buffer's previous one must be out first
            self.book(*old)
        self.pending[key] = [issue, duration]
        self.serve()

    def serve(self) -> None:
        """Give the posted transfers the idle gaps the bookings so far left."""
        for key in list(self.pending):
            job = self.pending[key]
            job[1], _ = self._fill_gaps(job[0], job[1])
            if job[1] <= 0.0:
                del self.pending[key]

    def flush(self) -> None:
        """Book what is still posted in line (the end of the run)."""
        for issue, rest in self.pending.values():
            self.book(issue, rest)
        self.pending.clear()


def simulate(schedule: Schedule, target, max_steps: int = 200_000) -> SimResult:
    """Replay `schedule` on `target` tile by tile (see the module docstring)."""
    target = load_target(target)
    # The same compiled model `cost.evaluate` uses (its level chains include `stage`d tensors).
    model = kernel_model(schedule.kernel, target, schedule.stage)
    tiles, orders, parallel, vectorize = model.normalise(*model.schedule_arrays(schedule))
    analytic = model.evaluate_batch(tiles, orders, parallel, vectorize)
    # Host C runs a packed contraction as its own blocked loops, not the schedule's tiles:
    # its replay is the host model's walk of that code (`host_model.replay_packed`).
    from .host_model import replay_packed
    replayed = replay_packed(schedule.kernel, schedule, target)
    if replayed is not None:
        return SimResult(time_s=replayed, cycles=replayed * target.clock_ghz * 1e9,
                         bytes={n: float(b) for n, b in zip(model.level_names, analytic.bytes[0])},
                         compute_s=float(analytic.compute_s[0]), steps=0, total_steps=0, sampled=False)
    active = target.compute.units * float(analytic.occupancy[0])
    total_bytes = np.zeros(len(model.level_names))
    time_s = compute_s = 0.0
    steps_done = total_steps = 0
    sampled = False
    bw = np.array([m.bandwidth_gbps * 1e9 for m in target.memory]) * np.where(model.mem_per_unit, active, 1.0)
    group_time, group_bytes = 0.0, np.zeros(len(model.level_names))
    # In-place epilogues on another datapath overlap the anchor's next tile (as the model).
    from .cost import _tile_counts

    all_counts = _tile_counts(model.extents[None, :], tiles)[0]     # [1, L, D]
    counts = all_counts[0]
    anchor_unit = datapath_of(target.compute, model.statements[schedule.kernel.anchor]).unit
    overlap = bool(model._epilogue_overlap(analytic.double_buffered[:1])[0])
    beside: dict[str, float] = {}
    beside_tail = 0.0
    by_unit: dict[str, float] = {}
    apart: dict[str, float] = {}      # nests of their own on other datapaths: time beyond compute
    apart_total = 0.0
    anchor_cold = 0.0
    for si in range(len(model.statements)):
        if si in model.computed:
            continue         # computed at the anchor's tiles: its own nest, replayed below
        r = _replay_statement(model, si, tiles[0], orders[0], int(vectorize[0]), active,
                              analytic.double_buffered[0], analytic.datapath_bytes[0, si], max_steps)
        st = model.statements[si]
        unit = datapath_of(target.compute, st).unit
        by_unit[unit] = by_unit.get(unit, 0.0) + r["compute_s"]
        total_bytes += r["bytes"]
        if si == schedule.kernel.anchor:
            group_time, group_bytes = r["time_s"], group_bytes + r["bytes"]
            anchor_cold = r["cold_s"]
            if r["rescale_s"]:        # its sums' rescales on the vector unit (as the model's `add_beside`)
                vector = vector_unit(target.compute)
                by_unit[vector] = by_unit.get(vector, 0.0) + r["rescale_s"]
                compute_s += r["rescale_s"]
                if overlap and vector != anchor_unit:
                    out_tiles = float(np.prod(np.where(st.present, counts[-1], 1.0)))
                    beside[vector] = beside.get(vector, 0.0) + r["rescale_s"]
                    beside_tail += r["rescale_s"] / out_tiles
                else:
                    group_time += r["rescale_s"]
        elif rides_anchor(st, False):
            # An in-place epilogue, or a row written in place beside the anchor (a folded
            # KV-cache write): runs on each anchor tile as it completes (as the model); its
            # compute and its last tiles' write-back add to the anchor's, its traffic shares
            # its channels; on another datapath its compute hides behind the anchor's but the
            # last tile's.
            if overlap and unit != anchor_unit:
                out_tiles = float(np.prod(np.where(st.present, counts[-1], 1.0)))
                beside[unit] = beside.get(unit, 0.0) + r["compute_s"]
                beside_tail += r["compute_s"] / out_tiles
                group_time += r["drain_s"]
            else:
                group_time += r["compute_s"] + r["drain_s"]
            group_bytes = group_bytes + r["bytes"]
        else:
            time_s += r["time_s"]
            if unit != anchor_unit:      # a nest of its own on another datapath (as the model)
                apart[unit] = apart.get(unit, 0.0) + r["time_s"] - r["compute_s"]
                apart_total += r["time_s"]
        compute_s += r["compute_s"]
        steps_done += r["steps"]
        total_steps += r["total_steps"]
        sampled |= r["sampled"]
    anchor_only = time_s + max(group_time, float(np.max(group_bytes / bw)))
    if beside:
        group_time = max(group_time, max(beside.values())) + beside_tail
    group_total = max(group_time, float(np.max(group_bytes / bw)))
    time_s += group_total
    result = SimResult(time_s=time_s, cycles=time_s * target.clock_ghz * 1e9,
                       bytes={n: float(b) for n, b in zip(model.level_names, total_bytes)},
                       compute_s=compute_s, steps=steps_done, total_steps=total_steps, sampled=sampled,
                       compute_by_unit=by_unit, cold_s=anchor_cold)
    if not model.producers:
        return result
    # its statements on other datapaths keep those busy
    busy = {anchor_unit: anchor_only - apart_total}
    for u, v in by_unit.items():
        if u != anchor_unit:
            busy[u] = busy.get(u, 0.0) + v + apart.get(u, 0.0)
    # nests on one datapath overlap their start-ups, as the model's (overlap.py)
    startups = {anchor_unit: [startup(group_total, anchor_cold, float(np.max(group_bytes / bw)))]}
    return _with_producers(result, model, target, (tiles, orders, all_counts, parallel), busy, bw, max_steps,
                           startups)


def _with_producers(result: SimResult, model: KernelModel, target, arrays: tuple, busy: dict, bw: np.ndarray,
                    max_steps: int, startups: dict) -> SimResult:
    """`result` with each producer nest (compute_at) replayed over its region as a kernel of its
    own, times its recompute; nests on different datapaths overlap tile by tile, so the kernel
    takes its busiest datapath's replayed time (`busy`: seconds per datapath so far), or its
    busiest channel's; the nests on one datapath pay only their longest start-up (`startups`:
    seconds per datapath so far, as overlap.py's)."""
    tiles, orders, all_counts, parallel = arrays
    total_bytes = np.array([result.bytes[n] for n in model.level_names])
    compute_s, steps, total_steps, sampled = result.compute_s, result.steps, result.total_steps, result.sampled
    for producer in model.producers:
        sub, mult = producer.region_tiles(tiles, orders, all_counts, parallel)
        r = simulate(producer.schedule(sub[0]), target, max_steps)
        unit = datapath_of(target.compute, producer.model.statements[0]).unit
        busy[unit] = busy.get(unit, 0.0) + r.time_s * float(mult[0])
        channel = float(np.max(np.array([r.bytes[n] for n in model.level_names]) / bw))
        startups.setdefault(unit, []).append(startup(r.time_s, r.cold_s, channel) * float(mult[0]))
        for u, v in (r.compute_by_unit or {}).items():   # its own statements on other datapaths
            if u != unit:
                busy[u] = busy.get(u, 0.0) + v * float(mult[0])
        total_bytes += np.array([r.bytes[n] for n in model.level_names]) * float(mult[0])
        compute_s += r.compute_s * float(mult[0])
        steps += r.steps
        total_steps += r.total_steps
        sampled |= r.sampled
    if model.host is None:           # host C runs one nest after another
        for unit, parts in startups.items():
            busy[unit] -= float(hidden_startups([np.atleast_1d(p) for p in parts], 1)[0])
    time_s = max(max(busy.values()), float(np.max(total_bytes / bw)))
    return SimResult(time_s=time_s, cycles=time_s * target.clock_ghz * 1e9,
                     bytes={n: float(b) for n, b in zip(model.level_names, total_bytes)},
                     compute_s=compute_s, steps=steps, total_steps=total_steps, sampled=sampled,
                     compute_by_unit=result.compute_by_unit)


def _replay_statement(model: KernelModel, si: int, tiles: np.ndarray, orders: np.ndarray,
                      vectorize: int, active: float, double_buffered: np.ndarray,
                      datapath: np.ndarray, max_steps: int) -> dict:
    """Replay statement `si`'s tiles in order (`_StatementReplay`): its bytes, time, compute
    and drain, scaled up by the points left where `max_steps` cut it."""
    return _StatementReplay(model, si, tiles, orders, vectorize, active, double_buffered, datapath).run(max_steps)


class _StatementReplay:
    """One statement's replay, step by step over its innermost tiles: which tiles each
    level's buffer must load (`moves`: residency and traffic), the step's compute with the
    array's fills (`cycles`, `_fill`), and when its transfers are done on each source
    level's channel (`book`: the timeline); the last output tiles drain at the end."""

    def __init__(self, model: KernelModel, si: int, tiles: np.ndarray, orders: np.ndarray, vectorize: int,
                 active: float, double_buffered: np.ndarray, datapath: np.ndarray):
        target = model.target
        self.model, self.st, self.tiles, self.orders = model, model.statements[si], tiles, orders
        self.active, self.double_buffered = active, double_buffered
        self.E = model.extents
        self.D, self.L = tiles.shape
        self.M = M = len(model.level_names)
        self.clock = clock = target.clock_ghz * 1e9
        self.bw = np.array([m.bandwidth_gbps * 1e9 * (active if m.per_unit else 1.0) for m in target.memory])
        self.latency = np.array([m.latency_cycles for m in target.memory]) / clock
        # Each unit has its own stream of requests to a level that feeds per-unit buffers.
        self.lat_par = np.ones(M)
        for h, lv in enumerate(target.on_chip):
            if lv.per_unit:
                self.lat_par[M - 1 if h == 0 else int(model.mem_index[h - 1])] = active
        self.level_of_source = {int(model.mem_index[h]): h for h in range(self.L)}   # memory index -> tiling level
        self.dp, self.unit = self._datapath_unit(vectorize)
        # The anchor's PE-array sums are rescaled by the vector unit beside it (as the model):
        # replayed apart, their seconds in `rescale_s`.
        self.rescale_beside = self.dp.on_array and si == model.kernel.anchor
        self.rescale_s = 0.0
        self.datapath_per_point = datapath / max(self._mapped_points(), 1.0)
        # resident[(access, level)] = (tile key, box): the tile that level's buffer holds;
        # visited: tile keys seen before (their partial sums exist outside).
        self.resident: dict[tuple[int, int], tuple] = {}
        self.visited: dict[tuple[int, int], set] = {}
        self.channels = [_Channel() for _ in range(M)]
        self.since: dict[tuple[int, int], float] = {}   # (access, level) -> when its tile came into use
        self.last_weight_box = None
        self.weights_streaming = False         # a stationary block is already in the array
        self.block_stream = 0.0                # cycles the block now in the array has streamed

    def _datapath_unit(self, vectorize: int):
        """The datapath and its unit along each loop (PE array or one vector), as in the model."""
        st, D, L = self.st, self.D, self.L
        unit = np.ones(D, dtype=np.int64)
        dp = datapath_of(self.model.target.compute, st)
        if dp.on_array:
            for loop, along in st.array_units:
                unit[loop] = along
        else:
            inner = [d for d in self.orders[L - 1] if st.present[d]]
            vec = vectorize if vectorize >= 0 and st.present[vectorize] else (inner[-1] if inner else 0)
            unit[vec] = dp.width
        return dp, unit

    def _mapped_points(self) -> float:
        st, E, D, L = self.st, self.E, self.D, self.L
        mapped_points = st.points / st.local_points
        if st.domain is not None:
            # the model's datapath traffic is that of the non-empty tiles, each run whole: per point
            # of those tiles (a domain's own points are fewer: charging them would count the cut twice)
            mapped_points = float(np.prod([E[d] for d in range(D) if st.present[d]])) \
                * st.domain.kept_fraction(tuple(int(self.tiles[d, L - 1]) for d in st.domain.loops))
        return mapped_points

    def footprint(self, a, box) -> float:
        sizes = np.array([box[d][1] for d in range(self.D)], dtype=float)
        extent = (sizes - 1.0) @ a.coeff.T + a.local_add + 1.0
        return float(np.prod(np.minimum(extent, a.dims))) * a.elem_bytes

    def source_of(self, a, pos) -> int:
        return self.M - 1 if pos == 0 else int(self.model.mem_index[a.chain[pos - 1]])

    def walk(self, level, parent_box, boxes):
        """Yield, for every innermost tile in order, the box of each level's tile."""
        st = self.st
        if level == self.L:
            yield boxes
            return
        order = [d for d in self.orders[level] if st.present[d]]
        ranges = []
        for d in order:
            start, size = parent_box[d]
            t = int(min(self.tiles[d, level], size))
            ranges.append([(s, min(t, start + size - s)) for s in range(start, start + size, t)])
        for combo in itertools.product(*ranges):
            box = list(parent_box)
            for d, piece in zip(order, combo):
                box[d] = piece
            if st.domain is not None and not st.domain.meets(box):
                continue            # a tile the `where` domain leaves empty: skipped, as in the model
            if isinstance(st.domain, RowTiles):
                # an in-place row update addresses its one row directly (as the model): of
                # the tile holding it, that row alone is loaded, computed and written
                row = st.domain.loops[0]
                box[row] = (box[row][0], 1)
            yield from self.walk(level + 1, box, boxes + [box])

    def run(self, max_steps: int) -> dict:
        st, E, D, L, M = self.st, self.E, self.D, self.L, self.M
        total_steps = 1
        for d in range(D):
            if st.present[d]:
                total_steps *= int(_chunks(np.int64(E[d]), self.tiles[d, :L - 1], np.int64(self.tiles[d, L - 1])))
        moved = np.zeros(M)
        prev_end = 0.0
        compute_total = 0.0
        points_done = 0.0
        steps = 0
        full_box = [(0, int(E[d])) if st.present[d] else (0, 1) for d in range(D)]
        cut = False
        first_ready = None      # when the first step computes: the cold start
        for boxes in self.walk(0, full_box, []):
            if steps >= max_steps:
                cut = True
                break
            steps += 1
            load, changes = self.moves(boxes)
            cycles, passes, points, rescale = self.cycles(boxes[L - 1])
            step_compute = cycles / self.clock / self.active
            fill_s = (cycles - rescale - passes * self.dp.pass_cycles) / self.clock / self.active   # the array filling
            operands = self.datapath_per_point * points
            moved += load + operands
            busy = fill_s + max(step_compute - fill_s, float(np.max(operands / self.bw)))   # no stream while it fills
            ready = self.book(changes, prev_end)
            first_ready = ready if first_ready is None else first_ready
            prev_end = ready + busy
            compute_total += step_compute
            points_done += points
        for channel in self.channels:
            channel.flush()
        drain = self.drain()
        moved += drain
        # An inner level's last tile reaches its parent before the parent's can leave.
        drain_s = float(np.sum(drain / self.bw))
        end = max([prev_end] + [c.free for c in self.channels]) + drain_s   # after write-backs still queued
        sampled = cut
        all_points = float(np.prod([E[d] for d in range(D) if st.present[d]]))
        if st.domain is not None:     # the points of the tiles the domain leaves non-empty
            all_points *= st.domain.kept_fraction(tuple(int(self.tiles[d, L - 1]) for d in st.domain.loops))
        scale = all_points / points_done if sampled and points_done else 1.0
        # a cut replay is scaled up past its cold start, which the whole run waits for once
        cold = first_ready or 0.0
        return {"bytes": moved * scale, "time_s": cold + (end - cold) * scale, "compute_s": compute_total * scale,
                "drain_s": drain_s, "cold_s": cold, "steps": steps, "total_steps": total_steps, "sampled": sampled,
                "rescale_s": self.rescale_s * scale}

    def moves(self, boxes) -> tuple[np.ndarray, list]:
        """Residency and traffic of one step: bytes per source level [M], and the tiles that
        change, (level, source, slot, bytes written back, bytes fetched) each."""
        st, D = self.st, self.D
        load = np.zeros(self.M)
        changes = []
        for ai, a in enumerate(st.accesses):
            for pos, h in enumerate(a.chain):
                box = boxes[h]
                key = tuple(box[d] for d in range(D) if a.index_mask[d])
                slot = (ai, h)
                old = self.resident.get(slot)
                if old is not None and old[0] == key:
                    continue
                seen = self.visited.setdefault(slot, set())
                back = fetch = 0.0
                if a.kind == "read":
                    fetch = self.footprint(a, box)
                else:
                    if old is not None:
                        back = self.footprint(a, old[1])    # write the leaving tile back
                    if a.kind == "accumulate" and key in seen:
                        fetch = self.footprint(a, box)      # read its partial sums back
                seen.add(key)
                self.resident[slot] = (key, box)
                if a.internal and (pos == 0 or a.kind != "accumulate"):
                    continue  # internal tensors stay on chip, where the anchor left them
                src = self.source_of(a, pos)
                load[src] += back + fetch
                changes.append((h, src, slot, back, fetch))
        return load, changes

    def cycles(self, inner) -> tuple[float, float, float, float]:
        """Compute of one innermost tile, with edge waste of partial PE passes / vectors:
        (cycles, passes, points, rescale cycles)."""
        st, dp, unit, compute = self.st, self.dp, self.unit, self.model.target.compute
        passes = float(st.local_points)
        points = 1.0
        for d in range(self.D):
            if st.present[d]:
                passes *= -(-inner[d][1] // int(unit[d]))
                points *= inner[d][1]
        # a tile on a `where` domain's edge runs only its passes that meet it (as the model)
        meeting = 1.0
        if st.domain is not None:
            cut = st.domain.loops
            meeting = st.domain.passes_meeting(inner, unit) \
                / float(np.prod([-(-inner[d][1] // int(unit[d])) for d in cut]))
            passes *= meeting
        if not dp.on_array and not st.reduce and not st.mac:
            # An elementwise statement streams its tile through the lanes as one flat run
            # (its tile is dense in the on-chip buffer), as the model.
            passes = float(st.local_points) * -(-int(points) // int(dp.width)) * meeting
        cycles = passes * dp.pass_cycles    # the statement's datapath (cost.datapath), as the model
        if st.mac and dp.on_array:
            cycles = self._fill(cycles, inner)
        rescale = 0.0
        if st.rescale_key >= 0:    # online softmax: the sums this tile holds rescaled first (as the model)
            rescale = float(np.prod([inner[d][1] for d in range(self.D) if st.out_mask[d]])) * st.rescale_per_elem \
                / compute.vector_ops_per_cycle
            if self.rescale_beside:
                self.rescale_s += rescale / self.clock / self.active
                rescale = 0.0       # the vector unit's, beside the anchor's array (`simulate`)
            cycles += rescale
        return cycles, passes, points, rescale

    def _fill(self, cycles: float, inner) -> float:
        """The step's cycles with the array's fill/drain: once per stationary block this tile
        holds, none when the single block of the previous tile stays put (as the model)."""
        st, unit, compute = self.st, self.unit, self.model.target.compute
        stationary = _stationary_operand(st)
        fills = 1.0
        if stationary is not None:
            weight_dims = [d for d in range(self.D) if stationary.index_mask[d] and st.present[d]]
            fills = float(np.prod([-(-inner[d][1] // int(unit[d])) for d in weight_dims]))
            weight_box = tuple(inner[d] for d in weight_dims)
            if fills == 1.0 and weight_box == self.last_weight_box:
                fills = 0.0
            self.last_weight_box = weight_box
        stream = cycles
        if fills and compute.double_buffered_weights and self.weights_streaming:
            # The pipeline is running: each fill hides behind the previous block's
            # stream — for this tile's first block, the stream of the block before it
            # over every step it stayed in the array.
            per_block = cycles / fills
            cycles += max(0.0, compute.fill_cycles - self.block_stream) \
                + (fills - 1.0) * max(0.0, compute.fill_cycles - per_block)
        elif fills:
            cycles += float(_fill_cycles(compute, np.float64(fills), np.float64(cycles)))
        self.block_stream = stream / fills if fills else self.block_stream + stream
        self.weights_streaming = True
        return cycles

    def book(self, changes: list, prev_end: float) -> float:
        """Book one step's transfers on the source levels' channels; returns when its data
        are in (the step may compute from then).

        A double-buffered level holds each tensor's next tile beside its current one: the
        next tile is fetched from the moment the tile before the current one was last used
        (its buffer is then free: two loads may be in flight), and the tile
        leaving is written back (after the step that last used it) while the next computes.
        A level that holds its tiles once waits for the write-back, then the fetch, after
        the previous step. Each source level is one channel; a double-buffered level's
        write-back is posted on it (`_Channel.post`): it waits for idle time, not in line."""
        bw, channels, double_buffered = self.bw, self.channels, self.double_buffered
        ready = prev_end
        arrived: dict[int, float] = {}   # tiling level -> when its new tiles of this step are in
        posted = []     # write-backs out of double-buffered levels: they gate nothing
        for h, src, slot, back, fetch in sorted(changes, key=lambda c: c[0]):
            issue = self.since.get(slot, 0.0) if double_buffered[h] else prev_end
            # A tile copied from an on-chip level that is itself loading this step's tile
            # waits for it (the first steps of a run: the cold start).
            issue = max(issue, arrived.get(self.level_of_source.get(src, -1), 0.0))
            wait = []
            if back and double_buffered[h]:
                posted.append((src, back, slot))     # after this step's fetches, issued earlier
            elif back:
                done = channels[src].book(prev_end, back / bw[src])
                wait.append(done)
                issue = max(issue, done)
            if fetch:
                wait.append(channels[src].book(issue, fetch / bw[src]))
            if wait:
                # Requests are pipelined: latency delays the data, not the channel; units
                # wait for their own loads side by side, so one stream sees latency / units.
                # The first tiles of all units are requested together: each waits a whole latency.
                par = self.lat_par[src] if slot in self.since else 1.0
                arrived[h] = max(arrived.get(h, 0.0), max(wait) + self.latency[src] / par)
                ready = max(ready, arrived[h])
        for src, back, slot in posted:
            channels[src].post(slot, prev_end, back / bw[src])
        for channel in channels:
            channel.serve()
        for _, _, slot, _, _ in changes:
            # the tile it replaced was last used by the step before: its buffer takes the next
            # (host C issues no prefetch of its own: the next load waits for this tile's use)
            self.since[slot] = ready if self.model.host is not None else prev_end
        return ready

    def drain(self) -> np.ndarray:
        """Bytes per source level of the outputs still resident at the end, going back out."""
        drain = np.zeros(self.M)
        for (ai, h), (key, box) in self.resident.items():
            a = self.st.accesses[ai]
            pos = a.chain.index(h)
            if a.kind != "read" and not (a.internal and (pos == 0 or a.kind != "accumulate")):
                drain[self.source_of(a, pos)] += self.footprint(a, box)
        return drain


def compare(schedule: Schedule, target, max_steps: int = 200_000) -> dict:
    """Model vs simulator for one schedule: both times, bytes and the relative gap."""
    from .cost import evaluate

    model = evaluate(schedule, target)
    sim = simulate(schedule, target, max_steps=max_steps)
    return {"model_time_s": model.time_s, "sim_time_s": sim.time_s,
            "time_error": abs(model.time_s - sim.time_s) / max(sim.time_s, 1e-30),
            "model_bytes": model.bytes, "sim_bytes": sim.bytes, "sampled": sim.sampled}
