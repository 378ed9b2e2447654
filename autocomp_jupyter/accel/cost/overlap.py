"""Overlap: how a kernel's statements and producer nests combine into its time.

Statements run as a sequence of nests over the same tiles; their times add (each its
max(step + serial transfers + cold start + drain, its levels' bounds)). An in-place
epilogue instead runs on each anchor tile as it completes, so its work and traffic overlap
the anchor's: the two share one max(busy, transfers) bound (as does a row written in place
beside the anchor: `rides_anchor`); on another datapath (the vector
unit beside a PE array) it works on each finished output tile while the anchor computes the
next, where the output's innermost level holds two: then only the last tile's epilogue adds.
Producer nests computed at the anchor's tiles (`producer.py`) alternate with the consumer
tile by tile: on different datapaths one tile's producer overlaps the previous tile's
consumer, so the kernel takes its busiest datapath's nests' times added up, or its busiest
channel's traffic, whichever is longer (the simulator combines its replays the same way).
Nests on one datapath form one pipeline: a nest's first tiles load while the nest before it
computes (a consumer starts on the producer's first finished tile, not after its whole
nest), so of their start-ups (`startup`: the cold start a nest waits before its first step,
no more than its time beyond its busiest channel's bytes) only the longest is paid; the
channels' idle time while the others start is the nests before them streaming, so each level's
bound loses the same, down to its bytes / bandwidth. Host C runs one nest after another.
`Timeline` accumulates these and the totals the report shows.
"""
from __future__ import annotations

import numpy as np

from .compute import datapath_of
from .domain import RowTiles
from .energy import nest_compute_energy
from .ports import StatementTime
from .traffic import StatementTraffic


class Timeline:
    """A batch's kernel time being put together, statement by statement (see the module
    docstring), and the per-kernel totals: compute by unit, bytes and time per level, and
    the parts `KernelCost.bound` names."""

    def __init__(self, n: int, M: int, anchor_unit: str, epilogue_overlap: np.ndarray, pipelined: bool = True):
        self.n = n
        self.pipelined = pipelined      # nests on one datapath overlap their start-ups (not on host C)
        self.anchor_unit = anchor_unit
        self.epilogue_overlap = epilogue_overlap     # [n] bool (KernelModel._epilogue_overlap)
        self.time_s = np.zeros(n)
        self.compute_s = np.zeros(n)
        self.compute_by_unit: dict[str, np.ndarray] = {}
        self.bytes_by_level = np.zeros((n, M))
        # bytes read out of / written into each level (each transfer at both its ends), and
        # the producers' traffic energy per level (energy.py)
        self.reads_by_level = np.zeros((n, M))
        self.writes_by_level = np.zeros((n, M))
        self.producer_level_energy = np.zeros((n, M))
        self.level_time = np.zeros((n, M))
        self.level_bw_s = np.zeros((n, M))
        self.level_lat_s = np.zeros((n, M))
        self.serial_total = np.zeros(n)
        self.cold_total = np.zeros(n)
        self.drain_total = np.zeros(n)
        self.stream_total = np.zeros(n)
        # The anchor and its in-place epilogues: one max(busy, transfers) bound.
        self.group_busy = np.zeros(n)
        self.group_levels = np.zeros((n, M))
        self.group_bw = np.zeros((n, M))           # ... its bytes / bandwidth per level
        self.anchor_cold = np.zeros(n)             # ... the anchor's cold start (`startup`)
        self.group_time = np.zeros(n)              # ... their bound (close_statements)
        self.beside: dict[str, np.ndarray] = {}    # in-place epilogues' compute on other datapaths
        self.beside_tail = np.zeros(n)             # ... their last output tile's, which nothing hides
        # nests of their own on other datapaths (online softmax's exp): their time beyond their
        # compute per datapath, and their whole time
        self.apart: dict[str, np.ndarray] = {}
        self.apart_total = np.zeros(n)
        self.anchor_only = None

    def add_statement(self, anchor: bool, in_place: str, unit: str, st_compute: np.ndarray, traffic: StatementTraffic,
                      bw: np.ndarray, t: StatementTime, out_tiles: np.ndarray) -> None:
        """One statement of the kernel's own nest (not computed at the anchor's tiles):
        `in_place` how it rides the anchor's pipeline (`rides_anchor`), `unit` its datapath,
        `out_tiles` [n] its innermost tiles."""
        st_bytes = traffic.bytes
        self.reads_by_level += traffic.reads_at
        self.writes_by_level += traffic.writes_at
        self.level_bw_s += t.bw_s
        self.serial_total += t.serial
        if not in_place:   # an in-place epilogue's loads ride the anchor's (below)
            self.level_lat_s += t.latency_s
        if anchor:
            self.group_busy += t.step + t.serial + t.cold + t.drain
            self.stream_total += t.stream
            self.group_levels += t.level
            self.group_bw += t.bw_s
            self.anchor_cold += t.cold
            self.cold_total += t.cold
            self.drain_total += t.drain
        elif in_place:
            # Its transfers ride the anchor's pipeline (latency hidden, first tiles loaded
            # while the anchor's first tile computes). On the anchor's own datapath its
            # compute adds; on another one it overlaps the anchor's next tile (module docstring).
            other = self.epilogue_overlap & (unit != self.anchor_unit)
            self.beside[unit] = self.beside.get(unit, 0.0) + np.where(other, st_compute, 0.0)
            self.beside_tail += np.where(other, st_compute / out_tiles, 0.0)
            self.group_busy += np.where(other, 0.0, st_compute) + t.drain
            self.group_levels += t.bw_s
            self.group_bw += t.bw_s
            self.drain_total += t.drain
        else:
            st_time = np.maximum(t.step + t.serial + t.cold + t.drain, np.maximum.reduce(t.level, axis=1))
            self.time_s += st_time
            if unit != self.anchor_unit:     # its own nest on another datapath (see `apart`)
                self.apart[unit] = self.apart.get(unit, 0.0) + st_time - st_compute
                self.apart_total += st_time
            self.stream_total += t.stream
            self.cold_total += t.cold
            self.drain_total += t.drain
        self.compute_s += st_compute
        self.compute_by_unit[unit] = self.compute_by_unit.get(unit, 0.0) + st_compute
        self.bytes_by_level += st_bytes
        # a row beside the anchor waits on no latency of its own: its bytes alone
        self.level_time += t.bw_s if in_place == "row" else t.level

    def add_beside(self, unit: str, seconds: np.ndarray, out_tiles: np.ndarray) -> None:
        """Work another datapath does on each of the anchor's tiles as it runs (an online
        softmax's rescales of the PE array's sums by the vector unit): where the anchor's
        output keeps two tiles, one tile's runs while the anchor computes the other, as an
        in-place epilogue's; else it adds to the anchor's busy time."""
        other = self.epilogue_overlap & (unit != self.anchor_unit)
        self.beside[unit] = self.beside.get(unit, 0.0) + np.where(other, seconds, 0.0)
        self.beside_tail += np.where(other, seconds / out_tiles, 0.0)
        self.group_busy += np.where(other, 0.0, seconds)
        self.compute_s += seconds
        self.compute_by_unit[unit] = self.compute_by_unit.get(unit, 0.0) + seconds

    def close_statements(self) -> None:
        """The kernel's own nest done: the anchor's group bound joins the time."""
        n = self.n
        # The anchor's datapath alone (what producers on other datapaths overlap) ...
        self.anchor_only = self.time_s + np.maximum(self.group_busy, np.maximum.reduce(self.group_levels, axis=1))
        group_busy = self.group_busy
        if self.beside:
            group_busy = np.maximum(group_busy, np.max(np.stack([np.broadcast_to(v, (n,))
                                                                 for v in self.beside.values()]), axis=0)) \
                + self.beside_tail
        self.group_time = np.maximum(group_busy, np.maximum.reduce(self.group_levels, axis=1))
        self.time_s += self.group_time

    def add_producers(self, producers, compute, grid, parallel) -> np.ndarray:
        """Producer nests computed at the anchor's tiles, each costed over its region and
        recomputed (`producer.py`); returns their compute energy [n] (their traffic's joins
        `producer_level_energy`)."""
        n = self.n
        producer_energy = np.zeros(n)
        if not producers:
            return producer_energy
        # The kernel's statements on other datapaths (epilogues beside it or after it) keep
        # those busy too: a producer there adds to them. A statement running a nest of its
        # own in the tiles on another datapath (the max, exp and sums of an online softmax
        # on the vector unit between the PE array's scores and weighted sum) is in that
        # pipeline too: it keeps its datapath busy for its whole nest, not the anchor's.
        anchor_unit = self.anchor_unit
        busy = {anchor_unit: self.anchor_only - self.apart_total}
        # each datapath's nests' start-ups (module docstring): the anchor group's, the producers'
        startups = {anchor_unit: [startup(self.group_time, self.anchor_cold, self.group_bw.max(axis=1))]}
        for u, v in self.compute_by_unit.items():
            if u != anchor_unit:
                busy[u] = busy.get(u, 0.0) + v + self.apart.get(u, 0.0)
        level_bw = self.level_bw_s.copy()       # the channels' bytes / bandwidth, all nests
        for producer in producers:      # computed at the anchor's tiles: its own nest, recomputed
            cost, mult = producer.evaluate(grid.tiles, grid.orders, grid.counts, parallel)
            unit = datapath_of(compute, producer.model.statements[0]).unit
            busy[unit] = busy.get(unit, 0.0) + cost.time_s * mult
            startups.setdefault(unit, []).append(startup(cost.time_s, cost.cold_s, cost.level_bw_s.max(axis=1)) * mult)
            for u, v in (cost.compute_by_unit or {}).items():
                self.compute_by_unit[u] = self.compute_by_unit.get(u, 0.0) + v * mult
                if u != unit:           # its own statements on other datapaths (epilogues beside it)
                    busy[u] = busy.get(u, 0.0) + v * mult
            self.compute_s += cost.compute_s * mult
            self.bytes_by_level += cost.bytes * mult[:, None]
            self.level_time += cost.level_time_s * mult[:, None]
            level_bw += cost.level_bw_s * mult[:, None]
            producer_energy += nest_compute_energy(cost) * mult
            self.producer_level_energy += cost.energy_by_level * mult[:, None]
        if self.pipelined:
            hidden = np.zeros(n)
            for unit, parts in startups.items():
                hidden_here = hidden_startups(parts, n)
                busy[unit] = busy[unit] - hidden_here
                hidden += hidden_here
            # ... and the channels' idle time while those nests started is the nests before
            # them streaming: each level's bound loses it, down to its bytes / bandwidth
            self.level_time = self.level_time - np.minimum(hidden[:, None], np.maximum(self.level_time - level_bw, 0.0))
        self.time_s = np.maximum(np.max(np.stack([np.broadcast_to(v, (n,)) for v in busy.values()]), axis=0),
                                 self.level_time.max(axis=1))
        return producer_energy


def rides_anchor(st, anchor: bool) -> str:
    """How statement `st` (a `statements._StatementModel`) of the kernel's own nest rides the
    anchor's pipeline (`Timeline.add_statement`'s in-place branch): "epilogue" for an in-place
    epilogue; "row" for a row update written in place beside the anchor (a KV-cache row folded
    into the attention reading the cache: `rules/in_place.py`), its one row loaded and written
    while the anchor streams, so its latency hides under the anchor's and only its bytes and
    compute add; "" for neither."""
    if anchor:
        return ""
    return "epilogue" if st.in_place else "row" if isinstance(st.domain, RowTiles) else ""


def startup(time_s, cold_s, channel_s) -> np.ndarray:
    """[n] seconds of a nest's time before its first step computes that a nest before it on
    the same datapath can hide: its cold start, but no more than its time beyond its busiest
    channel's bytes (`channel_s`; once started it still moves those)."""
    return np.minimum(np.asarray(cold_s, dtype=float), np.maximum(np.asarray(time_s) - channel_s, 0.0))


def hidden_startups(parts: list, n: int) -> np.ndarray:
    """[n] seconds of start-up hidden when nests with start-ups `parts` run as one pipeline on
    one datapath: all but the longest (the first nest's cold start waits for nothing to
    overlap; the longest is kept, so a plan is never charged less than its first nest's)."""
    if len(parts) < 2:
        return np.zeros(n)
    stacked = np.stack([np.broadcast_to(p, (n,)) for p in parts])
    return stacked.sum(axis=0) - stacked.max(axis=0)
