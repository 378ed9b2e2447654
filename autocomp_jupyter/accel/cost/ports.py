"""Ports: how long a statement's traffic takes on each level's ports, and what overlaps.

A level whose energy is given per access at a port width (`width_bits`) describes its ports
as ZigZag does, and is timed as ZigZag's latency model times them: every transfer holds a
port at both its ends (a DRAM->SRAM fill is a read on DRAM's port and a write on SRAM's, a
result's write-back a read on the level it leaves and a write on its parent's, an operand
streaming into the datapath a read on the innermost level holding it); one port (`ports: 1`)
carries the level's reads and writes, two or more give them a port each; and a port moves
whole accesses of its width, one a cycle at its bandwidth, so a 32-byte operand vector on a
2048-bit port takes a whole access (`port_shapes`; traffic.py rounds each transfer up). Such
a level is busy for its accesses / bandwidth (`port_time`): where that reaches the compute
time its bound exceeds compute, the stall ZigZag counts on a saturated port. Any other level
is a channel to the levels inside it (`bandwidth_gbps`: the rate it feeds them): its bytes
moved to and from them / bandwidth, fills from its parent riding the parent's channel.

A per-unit level's ports scale with the active units (`bandwidth`). Levels whose tiles fit
twice (double buffering) overlap their transfers with compute; others serialise with it
(`serial`). The first input tiles (cold start) and the last output tiles (drain) overlap
nothing. A level's bound is max(its port time, its reads / bw + loads x latency — one load
in flight per fed level, the fed levels side by side, posted write-backs in the latency's
shadow), after the levels outside it delivered their first tiles (every unit's first load a
whole latency), plus the last tile's compute after its last load. Into a double-buffered
level a load is requested once the tile two before it is used, so two may be in flight
(`two_buffer_latency`): a source streaming large tiles pays about one latency (not on host C). Operands stream into the datapath from
the innermost levels (`stream`), and stop while the array fills.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .traffic import StatementTraffic


def port_shapes(target) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per memory level [M]: the bytes of one access of its port (0 where any number of
    bytes moves), whether it is timed by its ports (a `width_bits` is given), and whether its
    reads and writes have a port each. A per-PE register file's accesses are each PE's own,
    spread over the array: it is taken as moving any number of bytes."""
    width = [m.width_bits / 8 if m.width_bits and not m.per_pe else 0.0 for m in target.memory]
    return (np.array(width), np.array([m.width_bits is not None for m in target.memory]),
            np.array([m.ports >= 2 for m in target.memory]))


def port_time(model, reads: np.ndarray, writes: np.ndarray, channel: np.ndarray, bw: np.ndarray) -> np.ndarray:
    """[n, M] seconds each level is busy: a level timed by its ports with its `reads` /
    `writes` [n, M] (bytes in whole accesses; one port carries both, two ports each their own,
    the busier bounding), any other with the bytes on its `channel` [n, M]."""
    if not model.any_ported:        # every level a channel
        return channel / bw
    ports = np.where(model.split_ports[None, :], np.maximum(reads, writes), reads + writes)
    return np.where(model.ported[None, :], ports, channel) / bw


def bandwidth(model, active: np.ndarray) -> np.ndarray:
    """[n, M] bytes/s of each memory level's channel (per-unit levels: one per active unit)."""
    return model.bw[None, :] * np.where(model.mem_per_unit[None, :], active[:, None], 1.0)


@dataclass
class StatementTime:
    """One statement's times [n] (or per source level [n, M]): each level's bound
    (`level`), its bytes / bandwidth part (`bw_s`) and what latency adds to it
    (`latency_s`), the transfers that wait in line with compute (`serial`), the cold start
    and drain, the operands' streaming into the datapath (`stream`) and the step
    (max(compute, stream): the work cold start and drain cannot overlap)."""

    level: np.ndarray
    bw_s: np.ndarray
    latency_s: np.ndarray
    serial: np.ndarray
    cold: np.ndarray
    drain: np.ndarray
    stream: np.ndarray
    step: np.ndarray


def statement_time(model, traffic: StatementTraffic, double_buffered: np.ndarray, bw: np.ndarray,
                   tiles_at: np.ndarray, st_compute: np.ndarray, fill, active: np.ndarray) -> StatementTime:
    """The StatementTime of a statement's traffic, given its compute seconds and its array
    fill cycles (`fill`, 0.0 off the array)."""
    clock = model.target.clock_ghz * 1e9
    bw_s = port_time(model, traffic.port_reads, traffic.port_writes, traffic.bytes, bw)
    st_level_time = bw_s
    serial_time = np.add.reduce(traffic.serial / bw, axis=1)
    first_wait, src_lat, tail, serial_time = _latency(model, traffic, double_buffered, tiles_at, st_compute,
                                                      active, serial_time)
    # Loads into double-buffered levels overlap the previous tile's compute, but the
    # first tiles have nothing to overlap: a source's cold loads queue on its channel
    # (bytes / bandwidth + one latency), and an inner level waits for its parent's.
    # Likewise the last output tiles drain after the last step (inner level to outer).
    cold_by_source = traffic.cold / bw + (traffic.cold > 0) * model.latency_s[None, :]
    cold = np.add.reduce(cold_by_source, axis=1)
    # A level's loads begin once the levels outside it delivered their first tiles:
    # its bound waits for the cold start of every source outside it (memory order is
    # inner first, so the sources after it).
    outer_cold = np.cumsum(cold_by_source[:, ::-1], axis=1)[:, ::-1] - cold_by_source
    drain = np.add.reduce(traffic.drain / bw, axis=1)
    # Likewise the last tile computes after its loads are in (its drain is in the bytes).
    tail = np.where(np.isfinite(tail), tail, 0.0)
    if model.host is None:      # host C issues no prefetch of its own: one load in flight
        src_lat = two_buffer_latency(src_lat, traffic.read / bw, bw_s, st_compute + serial_time, model.latency_s,
                                     traffic.events, traffic.event_src, double_buffered, model.per_unit, active,
                                     model.mem_index)
    # ... and a load's latency overlaps the channel's other traffic (posted write-backs,
    # other levels' loads): a level's loads in a chain, its channel shared by all.
    st_level_time = np.maximum(st_level_time, traffic.read / bw + src_lat)
    st_level_time = st_level_time + np.where(st_level_time > 0, outer_cold + first_wait + tail, 0.0)
    # `<level> latency`: what the level's bound adds to its bytes / bandwidth.
    latency_s = st_level_time - bw_s
    # A step lasts as long as its compute or its operands' streaming into the datapath
    # (the innermost levels' channels), whichever is longer: the part of the work
    # the cold start and the drain cannot overlap.
    stream = np.maximum.reduce(port_time(model, traffic.datapath_port_reads,
                                         traffic.datapath_port - traffic.datapath_port_reads, traffic.datapath, bw)
                               if model.any_ported else traffic.datapath / bw, axis=1)
    # While the array fills (the part no double buffering hides) nothing streams: the
    # operands' streaming waits through the fills.
    stream = stream + fill / active / clock
    step = np.maximum(st_compute, stream)
    return StatementTime(st_level_time, bw_s, latency_s, serial_time, cold, drain, stream, step)


def two_buffer_latency(src_lat, read_s, bw_s, busy, latency_s, events, event_src, double_buffered,
                       per_unit, active, mem_index) -> np.ndarray:
    """[n, M] what latency adds to each source's loads into double-buffered levels, two
    buffers deep: a load is requested as soon as the tile two before it has been used (its
    buffer is then free), not when the tile before it arrived, so each load's latency overlaps
    the other buffer's transfer and the work on its tile — the compute with the transfers in
    line with it (`busy`), or the levels inside (their loads of the tile's pieces), whichever
    takes longer. Per load the channel then takes
    max(transfer, (latency + transfer + work) / 2): over the run, at most the loads x latency
    of one load in flight (`src_lat`), at least the first load's latency (nothing before it to
    overlap). A source streaming large tiles pays its latency about once. Sources are taken
    inner first (memory order): a level's channel time bounds the work of the loads outside it,
    and each of their tiles restarts the pipeline inside (its first load from the new tile
    waits that level's whole latency: nothing of it was there to prefetch).
    Where compute alternates between short and long steps (an array refilled every other
    tile) the mean step is taken: the simulator's pairs are up to ~12% longer there."""
    out = np.array(src_lat, copy=True)
    n, M = out.shape
    first = np.zeros_like(out)
    restart = np.zeros_like(out)
    for h, src in event_src.items():
        par = active if per_unit[h] else 1.0
        first[:, src] = np.maximum(first[:, src], np.where(double_buffered[:, h] & (events[:, h] > 0),
                                                           latency_s[src] / par, 0.0))
        inner = event_src.get(h + 1)
        if inner is not None and inner == mem_index[h]:
            restart[:, src] = np.maximum(restart[:, src], events[:, h] * latency_s[inner])
    work = np.array(busy, dtype=float, copy=True)
    for m in range(M):
        waits = out[:, m] > 0
        if waits.any():           # (a source without such loads keeps its zeros)
            paired = (out[:, m] + work + restart[:, m] - read_s[:, m]) / 2.0
            out[:, m] = np.where(waits, np.minimum(out[:, m], np.maximum(first[:, m], paired)), out[:, m])
        work = np.maximum(work, np.maximum(bw_s[:, m], read_s[:, m] + out[:, m]))
    return out


def _latency(model, traffic: StatementTraffic, double_buffered, tiles_at, st_compute, active, serial_time):
    """Latency: one load in flight per level. Double-buffered loads hide it behind the
    previous tile's work, so it only bounds the level's time (bytes/bw + loads x latency);
    other loads wait in line with compute (added to `serial_time`). Each level keeps its
    own load in flight: levels fed by one source wait their latencies side by side (the
    largest bounds), while their bytes share its channel. Returns (the units' first wait,
    the latency bound, the compute after a source's last load, serial_time) per source."""
    n, M = traffic.bytes.shape
    events = traffic.events
    first_wait = np.zeros((n, M))
    src_lat = np.zeros((n, M))
    tail = np.full((n, M), np.inf)   # compute after a source's last load: its last tile's
    for h, src in traffic.event_src.items():
        per_unit = model.per_unit[h]
        lat = events[:, h] * model.latency_s[src]
        if per_unit:
            lat = lat / active
        double = double_buffered[:, h]
        waits = double & (events[:, h] > 0)
        src_lat[:, src] = np.maximum(src_lat[:, src], np.where(double, lat, 0.0))
        # The units' first tiles are requested together, each waiting a whole latency;
        # only later loads overlap across units (latency / units each). (One unit: none.)
        if per_unit:
            first_wait[:, src] = np.maximum(first_wait[:, src], np.where(
                waits, model.latency_s[src] * (1.0 - 1.0 / active), 0.0))
        serial_time += np.where(double, 0.0, lat)
        tiles_h = tiles_at[:, h]
        tail[:, src] = np.where(waits, np.minimum(tail[:, src], st_compute / tiles_h), tail[:, src])
    return first_wait, src_lat, tail, serial_time
