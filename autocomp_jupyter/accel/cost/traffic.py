"""Traffic: the bytes each access moves into every level that holds it and into the datapath.

A tile of X at level h is fetched again each time a loop outside h iterates, except for the
innermost run of outer loops that do not index X (it stays put: stationarity); loops of one
trip are transparent (`_fetches_by_prefix`). Traffic into h = footprint (`_footprint`: per
tensor dimension sum |coeff| * (T - 1) + 1, clipped) x fetches; an accumulated output also
reads back its partial sums on every fetch but the first (`_traffic`). A `where` domain
moves only its non-empty tiles' share (`_kept_share`). An overflowing level's share of its
traffic streams through from its parent instead (spill). Internal tensors of a fused kernel
never cross the DRAM boundary. `statement_traffic` sorts the bytes by source level into what
the ports step times: loads, serial transfers, cold start and drain; and by end into what the
energy step charges: every transfer is a read at the level it leaves and a write at the level
it enters (a DRAM->SRAM fill is a DRAM read and an SRAM write, an output's write-back an SRAM
read and a DRAM write, an operand into the datapath a read of the innermost level holding it,
a result out of the datapath a write there). The vector unit beside a PE array keeps an
innermost tile in its registers from one statement of a tile iteration to the next
(`vector_held`: a softmax's max, exp and row sum read the score tile once): such a read moves
no bytes into the datapath.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .compute import DatapathTile
from .domain import RowTiles, TileDomain
from .statements import _AccessModel, _StatementModel
from .tiles import TileGrid


@dataclass
class LoopSequence:
    """A statement's loops from the outermost level down to its datapath, laid out
    [loop sequence, n] so the running products and maxima over the sequence
    (`_fetches_by_prefix`) run over whole rows of candidates: the tiling levels' loops
    (L x D), then the datapath passes per innermost tile (D). `tiles_at`: its tiles per
    level [n, L]; `counts` / `mean`: the datapath's passes along each loop and their mean
    extent as operands stream (a vector unit's register window along a reduction loop
    keeps its taps: no pass of its own there)."""

    tiles_at: np.ndarray
    loops: np.ndarray        # [S, n]: the loop index at each position
    moving: np.ndarray       # [S, n]: its trip exceeds one
    prefix: np.ndarray       # [S + 1, n]: products of the first k trips
    length: int              # S
    counts: np.ndarray       # [n, D]
    mean: np.ndarray         # [n, D]


def operand_sequence(grid: TileGrid, st: _StatementModel, tile: DatapathTile) -> LoopSequence:
    """The LoopSequence of a statement on its datapath tile (statements on the same datapath
    tile without a register window share it: computed once per grid)."""
    key = ("sequence", tile.shared) if st.window is None and tile.shared else None
    found = grid._shared.get(key) if key else None
    if found is None:
        found = _operand_sequence(grid, st, tile)
        if key:
            grid._shared[key] = found
    return found


def _operand_sequence(grid: TileGrid, st: _StatementModel, tile: DatapathTile) -> LoopSequence:
    n, D, L = grid.tiles.shape
    E, counts, inner_order = grid.E, grid.counts, grid.inner_order
    # its tiles per level [n, L] and the trips of the tiling levels' loops [L * D, n]: the
    # same for every statement over the same loops
    key = ("present", st.present.tobytes())
    found = grid._shared.get(key)
    if found is None:
        found = grid._shared[key] = (np.multiply.reduce(counts[:, :, st.present_loops], axis=2),
                                     np.where(st.present[grid.seq_loops], grid.seq_trips, 1.0).T)
    tiles_at, level_trips = found
    dp_counts, dp_rel = tile.counts, tile.rel
    dp_mean = E / dp_counts
    # Operands reach the datapath per pass; the vector unit beside a PE array keeps a
    # window's taps in registers instead: along a reduction loop that shares an input
    # index with the vector loop (a depthwise conv's s in X[.., w + s]), the lanes shift
    # one loaded row rather than reloading it from the scratchpad, and the partial sums
    # stay in registers across it. (SIMT lanes and the host's cores already read their
    # operands from a register level of their own, which the tiles model.)
    ts_rel, ts_counts, ts_mean = dp_rel, dp_counts, dp_mean
    if st.window is not None:
        wmask = st.window[tile.vec_loop] & st.present                      # [n, D]
        inner = np.where(st.present, counts[:, L - 1, :], 1.0)
        ts_counts = np.where(wmask, inner, dp_counts)
        ts_rel = np.where(wmask, 1.0, dp_rel)
        ts_mean = E / ts_counts
    S = L * D + D
    trips_seq = np.empty((S, n))                          # the levels' trips, then the passes'
    trips_seq[:L * D] = level_trips
    trips_seq[L * D:] = ts_rel[grid.rows, inner_order].T  # ts_rel along inner_order
    dp_prefix = np.ones((S + 1, n))                       # products of its first trips
    np.cumprod(trips_seq, axis=0, out=dp_prefix[1:])
    dp_moving = trips_seq > 1.0                          # loops of one trip don't count
    return LoopSequence(tiles_at, grid.datapath_loops(), dp_moving, dp_prefix, S, ts_counts, ts_mean)


@dataclass
class StatementTraffic:
    """Where a statement's bytes go, per source memory level [n, M]: all of them (`bytes`),
    into the datapath (`datapath`), the reads into double-buffered levels (their load
    chain), the transfers into levels that cannot double-buffer (`serial`), the first input
    tiles (`cold`) and last output tiles (`drain`) of double-buffered levels; per
    tiling level the tile loads that wait a latency (`events` [n, L]) and their source; and
    per memory level, by end, the bytes read out of it (`reads_at`) and written into it
    (`writes_at`): the energy step's view, where each transfer counts at both its ends; and
    the same in whole accesses of each level's port (`port_reads`, `port_writes`, bytes
    rounded up to the port's width per transfer: the ports step's view), with the
    datapath's share of them (`datapath_port`: operands and results streaming)."""

    bytes: np.ndarray
    datapath: np.ndarray
    read: np.ndarray
    serial: np.ndarray
    events: np.ndarray
    cold: np.ndarray
    drain: np.ndarray
    event_src: dict
    reads_at: np.ndarray
    writes_at: np.ndarray
    port_reads: np.ndarray
    port_writes: np.ndarray
    datapath_port: np.ndarray
    datapath_port_reads: np.ndarray

    @classmethod
    def zeros(cls, n: int, M: int, L: int, whole_ports: bool = False) -> "StatementTraffic":
        """All zeros. `whole_ports`: no level's port moves whole accesses (every transfer's
        granularity is 1), so the port views are the byte views themselves (the same
        arrays: `_charge_ends` adds to them once)."""
        out = cls(*(np.zeros((n, M)) for _ in range(4)), np.zeros((n, L)), np.zeros((n, M)), np.zeros((n, M)), {},
                  *(np.zeros((n, M)) for _ in range(2)), *((None,) * 3 if whole_ports else
                                                           (np.zeros((n, M)) for _ in range(3))),
                  np.zeros((n, M)))
        if whole_ports:
            out.port_reads, out.port_writes, out.datapath_port = out.reads_at, out.writes_at, out.datapath
        return out


@dataclass
class _LevelTraffic:
    """One access at each level holding it (lists by position in its chain): the bytes
    moved into it if it fits, the loads that wait a latency, the share of its bytes that
    are reads (what a double-buffered level's load chain carries)."""

    fits: list
    fetch_counts: list
    read_share: list
    row_share: list        # an in-place row update: the share of a tile its one row is (cold start, drain)
    down_share: list       # the share of its bytes moving parent -> level (loads, partial sums read back)
    footprint: list        # [n] bytes of one tile (one transfer) at each level


def statement_traffic(model, grid: TileGrid, capacity, si: int, st: _StatementModel, tile: DatapathTile,
                      seq: LoopSequence, active: np.ndarray) -> StatementTraffic:
    """The traffic of statement `si`'s accesses at every level and into its datapath, with
    spill (an overflowing level's share streams through from its parent) and each level's
    cold start and drain."""
    n, D, L = grid.tiles.shape
    out = StatementTraffic.zeros(n, len(model.level_names), L, model.whole_ports)
    held = vector_held(model, grid, capacity, si, st, tile)
    for ai, a in enumerate(st.accesses):
        # the tile fetches into each holding level (the loops outside it), then the datapath
        by_level = _fetches_by_prefix(a.index_mask[seq.loops], seq.moving, seq.prefix,
                                      [(h + 1) * D for h in a.chain] + [seq.length])
        levels = _level_traffic(a, st, grid, capacity.double_buffered, tile.kept, by_level, model.extents)
        datapath, datapath_reads, granule = _datapath_traffic(a, st, model.target.compute.kind,
                                                              _datapath_kept(a, st, grid, tile, seq), seq,
                                                              by_level[:, -1])
        if ai in held:      # the vector unit still holds it from the statement before: no read
            datapath = np.where(held[ai], 0.0, datapath)
            datapath_reads = np.where(held[ai], 0.0, datapath_reads)
        # Spill: blend each level's traffic toward what streams through it.
        through = datapath
        eff = [None] * len(a.chain)
        for pos in range(len(a.chain) - 1, -1, -1):
            h = a.chain[pos]
            # (no candidate overflowing it: its own traffic, fits + 0 x (...) exactly)
            eff[pos] = (levels.fits[pos] + capacity.overflow[:, h] * (through - levels.fits[pos])
                        if capacity.overflowing[h] else levels.fits[pos])
            through = eff[pos]
        _charge(model, out, a, capacity, levels, datapath, eff, capacity.tile_bytes[si, ai], active)
        _charge_ends(model, out, a, levels, datapath, datapath_reads, granule, eff)
    return out


def vector_held(model, grid: TileGrid, capacity, si: int, st: _StatementModel, tile: DatapathTile) -> dict:
    """{access index: [n] bool}: the reads of statement `si` that the vector unit beside a PE
    array still holds in its registers from the statement before it in the tile iteration,
    so they do not cross the innermost level's port again (the max, exp and row sum of a
    softmax each reading the same score tile: read once, kept across the three).

    The statements of a kernel's own nest run one after another on each innermost tile.
    Where statement `si` and the one before it there (not computed at the anchor's tiles)
    both run on the vector unit of a systolic target over the same anchor loops (so the same
    tiles, vectorised along the same loop), a read of `si` of a tensor that statement read at
    the same indices, or wrote there, finds that innermost tile in the registers — when the
    tiles so kept fit in the room the register level (the innermost level: registers, vregs,
    an accumulator) leaves beside its own tiles (twice those where it double-buffers them).
    SIMT lanes and host cores read every operand from a register level the tiles model."""
    compute = model.target.compute
    if compute.kind != "systolic" or tile.dp.on_array or isinstance(st.domain, RowTiles):
        return {}
    before = [i for i in range(si) if i not in model.computed]
    if not before:
        return {}
    prev = model.statements[before[-1]]
    if prev.row_loop >= 0 or not np.array_equal(prev.present, st.present) or isinstance(prev.domain, RowTiles):
        return {}
    seen = [(a.tensor, a.coeff.tobytes(), a.local_add.tobytes()) for a in prev.accesses]
    found = [ai for ai, a in enumerate(st.accesses)
             if ai and a.kind == "read" and (a.tensor, a.coeff.tobytes(), a.local_add.tobytes()) in seen]
    if not found:
        return {}
    L = grid.tiles.shape[2]
    inner = grid.T[:, :, L - 1]
    kept = sum(_footprint(st.accesses[ai], inner) for ai in found)
    reg = L - 1
    used = capacity.footprint[:, reg] * np.where(capacity.double_buffered[:, reg], 2.0, 1.0)
    fits = used + kept <= model.capacity[reg]
    return {ai: fits for ai in found}


def _level_traffic(a: _AccessModel, st: _StatementModel, grid: TileGrid, double_buffered, kept,
                   by_level, extents) -> _LevelTraffic:
    """Fetches and traffic of one access at each level holding it (see _LevelTraffic)."""
    n = grid.n
    fits, fetch_counts, read_share, down_share = [], [], [], []
    rows = st.domain.loops[0] if isinstance(st.domain, RowTiles) else None
    # an in-place row update touches one row of its tile (its cold start and drain)
    row_share = [grid.counts[:, h, rows] / extents[rows] if rows is not None else 1.0 for h in a.chain]
    fps = grid.mean_footprint(a, _footprint) if a.chain else None
    # its distinct tiles at each holding level
    key = ("distinct", a.chain, a.counted.tobytes())
    distinct_at = grid._shared.get(key)
    if distinct_at is None:
        distinct_at = grid._shared[key] = np.multiply.reduce(grid.counts_at(a.chain)[:, :, a.counted], axis=2)
    for pos, h in enumerate(a.chain):
        fetches = by_level[:, pos]
        distinct = distinct_at[:, pos]
        fp = fps[:, pos]
        moved = _traffic(a.kind, fp, fetches, distinct)
        if kept is not None:
            moved = moved * _kept_share(a, st.domain, kept[:, h], fetches, distinct)
        if a.internal and (not fits or a.kind != "accumulate"):
            # Internal tensors never cross the DRAM boundary; an epilogue reads (and
            # a non-accumulating statement writes) them where the anchor left them,
            # in the innermost level, so they move between no levels at all.
            # Only partial sums of an accumulation travel between on-chip levels.
            moved, fetches = np.zeros(n), np.zeros(n)
        fits.append(moved)
        down_share.append(1.0 if a.kind == "read" else _read_back_share(fetches, distinct)
                          if a.kind == "accumulate" else 0.0)
        # Loads that wait a latency: into a double-buffered level only the reads
        # (an output's write-back is posted, and its first visit starts from zero,
        # so only partial sums are read back); into others, every transfer.
        loads = fetches if a.kind == "read" else fetches - distinct if a.kind == "accumulate" else 0.0
        if rows is not None:          # an in-place row update loads only the tile holding its row
            along = grid.counts[:, h, rows]
            loads, fetches = loads / along, fetches / along
        # (a read's loads are its fetches, >= 0: the same either way)
        fetch_counts.append(fetches if a.kind == "read" else
                            np.where(double_buffered[:, h], np.maximum(loads, 0.0), fetches))
        read_share.append(1.0 if a.kind == "read" else np.maximum(loads, 0.0) / np.maximum(
            2.0 * fetches - distinct, 1e-30) if a.kind == "accumulate" else 0.0)
    return _LevelTraffic(fits, fetch_counts, read_share, row_share, down_share,
                         [fps[:, pos] for pos in range(len(a.chain))])


def _datapath_kept(a: _AccessModel, st: _StatementModel, grid: TileGrid, tile: DatapathTile,
                   seq: LoopSequence) -> np.ndarray | None:
    """[n] the kept fraction of a `where` domain's boxes one transfer of access `a` into the
    datapath serves (None: no domain). Along each loop the domain cuts, a transfer covers one
    pass where the access is fetched again as that loop's passes step (it indexes the loop,
    or it is indexed by a loop the datapath steps inside it), else the whole innermost tile
    (it stays put across those passes: a stationary block, a row's running max). A transfer
    whose box misses the domain is skipped with its passes (`TileDomain.passes_meeting`)."""
    if tile.kept is None:
        return None
    L = grid.tiles.shape[2]
    if isinstance(st.domain, RowTiles):
        return tile.kept[:, L - 1]
    D = grid.tiles.shape[1]
    S = seq.length
    indexing = a.index_mask[seq.loops] & seq.moving                             # [S, n]
    last = np.where(indexing.any(axis=0), S - 1 - np.argmax(indexing[::-1], axis=0), -1)
    inner = grid.T[:, :, L - 1]
    sizes = inner.copy()
    for d in st.domain.loops:
        at = S - D + np.argmax(seq.loops[S - D:] == d, axis=0)                 # its pass loop's position
        again = a.index_mask[d] | (at < last)
        sizes[:, d] = np.where(again, np.minimum(tile.unit[:, d], inner[:, d]), inner[:, d])
    return np.minimum(st.domain.kept_at(sizes), tile.kept[:, L - 1])


def _datapath_traffic(a: _AccessModel, st: _StatementModel, compute_kind: str, kept, seq: LoopSequence,
                      fetches) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[n] bytes of one access streaming between its innermost level and the datapath, [n]
    the part of them read out of that level (an operand; an accumulation's partial sums read
    back; the rest are results written into it), and [n] the bytes of one transfer (a pass's).
    `kept`: the share of its transfers a `where` domain leaves (`_datapath_kept`), or None."""
    distinct = np.multiply.reduce(seq.counts[:, a.counted], axis=1)
    # A systolic array's partial sums are added into its accumulator as they arrive
    # (the banks read-modify-write in place: Gemmini's accumulate-on-write, the MXU's
    # result buffers): one transfer each on the port, none read back out.
    dp_kind = "write" if a.kind == "accumulate" and compute_kind == "systolic" else a.kind
    granule = _footprint(a, seq.mean)
    datapath = _traffic(dp_kind, granule, fetches, distinct)
    if kept is not None:
        datapath = datapath * _kept_share(a, st.domain, kept, fetches, distinct)
    if dp_kind == "read":
        return datapath, datapath, granule
    if dp_kind == "write":
        return datapath, np.zeros_like(datapath), granule
    return datapath, datapath * _read_back_share(fetches, distinct), granule


def _charge(model, out: StatementTraffic, a: _AccessModel, capacity, levels: _LevelTraffic, datapath,
            eff: list, tile_bytes: np.ndarray, active: np.ndarray) -> None:
    """Add one access's bytes to the statement's buckets, by source memory level. A level
    every candidate double-buffers (or none does) takes each transfer whole (or not at all)
    with no mask: the same sums, fewer array operations."""
    M = len(model.level_names)
    inner_src = model.mem_index[a.chain[-1]] if a.chain else M - 1
    out.bytes[:, inner_src] += datapath
    out.datapath[:, inner_src] += datapath
    kind = a.kind
    cold = kind == "read" and not a.internal
    for pos, h in enumerate(a.chain):
        src = M - 1 if pos == 0 else model.mem_index[a.chain[pos - 1]]
        moved = eff[pos]
        out.bytes[:, src] += moved
        every, none = capacity.buffered_all[h], capacity.buffered_none[h]
        db = None if every or none else capacity.double_buffered[:, h]
        # (a read's share is 1, a write's 0: it adds nothing)
        if kind != "write" and not none:
            share = moved if kind == "read" else moved * levels.read_share[pos]
            out.read[:, src] += share if every else np.where(db, share, 0.0)
        if not every:
            out.serial[:, src] += moved if none else np.where(db, 0.0, moved)
        if cold:
            # Cold start: the first tile of every input reaches every level
            # before the first step computes (each active unit loads its own).
            if not none:
                first = _unit_tile(model, tile_bytes, h, active, levels, pos)
                out.cold[:, src] += first if every else np.where(db, first, 0.0)
        elif kind != "read" and not (a.internal and (pos == 0 or kind != "accumulate")):
            # Drain: the last output tile leaves after the last step computes.
            if not none:
                last = _unit_tile(model, tile_bytes, h, active, levels, pos)
                out.drain[:, src] += last if every else np.where(db, last, 0.0)
        np.maximum(out.events[:, h], levels.fetch_counts[pos], out=out.events[:, h])
        out.event_src[h] = src


def _unit_tile(model, tile_bytes: np.ndarray, h: int, active: np.ndarray, levels: _LevelTraffic, pos: int):
    """[n] bytes of one access's first (or last) tile at level h: each active unit's own at a
    per-unit level, one row's of an in-place row update (x 1.0 otherwise: left out)."""
    out = tile_bytes[:, h]
    if model.per_unit[h]:
        out = out * active
    share = levels.row_share[pos]
    if not (isinstance(share, float) and share == 1.0):
        out = out * share
    return out


def _charge_ends(model, out: StatementTraffic, a: _AccessModel, levels: _LevelTraffic, datapath, datapath_reads,
                 granule, eff: list) -> None:
    """Add one access's bytes to the statement's reads and writes at each end: a load is
    read out of its source and written into the level it fills; a result's write-back is
    read out of the level it leaves and written into its parent. In bytes (`reads_at`,
    `writes_at`: energy) and in whole accesses of each end's port (`port_reads`,
    `port_writes`: time), each transfer of `granule` / the tile footprint bytes rounded up."""
    M = len(model.level_names)
    inner = model.mem_index[a.chain[-1]] if a.chain else M - 1
    datapath_writes = datapath - datapath_reads
    out.reads_at[:, inner] += datapath_reads
    out.writes_at[:, inner] += datapath_writes
    if model.whole_ports:       # every granularity 1: the port views are the byte views (`zeros`)
        out.datapath_port_reads[:, inner] += datapath_reads
        for pos, h in enumerate(a.chain):
            src = M - 1 if pos == 0 else model.mem_index[a.chain[pos - 1]]
            dst = model.mem_index[h]
            # a read's bytes all move down, a write's all up (the other way adds zeros)
            if a.kind != "write":
                down = eff[pos] if a.kind == "read" else eff[pos] * levels.down_share[pos]   # parent -> this level
                out.reads_at[:, src] += down
                out.writes_at[:, dst] += down
            if a.kind != "read":
                up = eff[pos] if a.kind == "write" else eff[pos] - down                     # this level -> parent
                out.reads_at[:, dst] += up
                out.writes_at[:, src] += up
        return
    g = _granularity(granule, model.port_bytes[inner])
    out.port_reads[:, inner] += datapath_reads * g
    out.port_writes[:, inner] += datapath_writes * g
    out.datapath_port[:, inner] += datapath * g
    out.datapath_port_reads[:, inner] += datapath_reads * g
    for pos, h in enumerate(a.chain):
        src = M - 1 if pos == 0 else model.mem_index[a.chain[pos - 1]]
        dst = model.mem_index[h]
        down = eff[pos] * levels.down_share[pos]          # parent -> this level
        up = eff[pos] - down                              # this level -> parent
        g_src = _granularity(levels.footprint[pos], model.port_bytes[src])
        g_dst = _granularity(levels.footprint[pos], model.port_bytes[dst])
        out.reads_at[:, src] += down
        out.writes_at[:, dst] += down
        out.reads_at[:, dst] += up
        out.writes_at[:, src] += up
        out.port_reads[:, src] += down * g_src
        out.port_writes[:, dst] += down * g_dst
        out.port_reads[:, dst] += up * g_dst
        out.port_writes[:, src] += up * g_src


def _granularity(transfer, port_bytes: float):
    """How much longer than its bytes a transfer of `transfer` bytes [n] holds a port that
    moves whole accesses of `port_bytes` (0: any number of bytes): ceil(b / w) * w / b.
    A 32-byte operand vector on a 2048-bit SRAM port takes a whole access, as ZigZag counts
    it (its ports' accesses per period are ceil(bits / bandwidth))."""
    if not port_bytes:
        return 1.0
    transfer = np.maximum(transfer, 1e-30)
    return np.ceil(transfer / port_bytes - 1e-9) * port_bytes / transfer


def _read_back_share(fetches, distinct):
    """The share of an accumulation's traffic that reads partial sums back (all visits but
    the first of each tile), the rest writing them out: (f - d) / (2f - d)."""
    return np.maximum(fetches - distinct, 0.0) / np.maximum(2.0 * fetches - distinct, 1e-30)


def _fetches_by_prefix(index_seq: np.ndarray, moving: np.ndarray, upto: np.ndarray,
                       prefixes: list[int]) -> np.ndarray:
    """Times a tile is fetched at the level holding each prefix of the loop sequence (its first
    S loops, for each S in `prefixes`): the product of the prefix's trips except the innermost
    run of loops that do not index the tensor (loops of one trip don't count), i.e. its trips
    up to its last loop indexing the tensor. All [sequence, n]: `index_seq` whether each loop
    indexes the tensor, `moving` whether its trip exceeds one, `upto[k]` the product of the
    first k trips (shared by a statement's accesses). Returns [n, len(prefixes)]."""
    S, n = moving.shape
    position = (index_seq & moving) * _positions(S)       # its 1-based position where it breaks, else 0
    out = np.ones((n, len(prefixes)))
    last = np.zeros(n, dtype=np.int32)     # the last breaking loop (1-based) seen so far
    seen = 0
    candidates = np.arange(n)
    for k in sorted(range(len(prefixes)), key=prefixes.__getitem__):
        p = prefixes[k]
        if p > seen:
            last = np.maximum(last, np.maximum.reduce(position[seen:p], axis=0))
            seen = p
        if p:
            out[:, k] = upto[last, candidates]
    return out


_POSITIONS: dict[int, np.ndarray] = {}


def _positions(S: int) -> np.ndarray:
    """[S, 1] int32: 1, 2, ..., S (the loop sequence's 1-based positions)."""
    found = _POSITIONS.get(S)
    if found is None:
        found = _POSITIONS[S] = np.arange(1, S + 1, dtype=np.int32)[:, None]
    return found


def _footprint(a: _AccessModel, tile: np.ndarray) -> np.ndarray:
    """Bytes of X's region an access touches over a tile ([n, D] sizes; or [n, D, H]: H
    tiles per row, one footprint each, [n, H])."""
    # Row by row over the (few) loops each index uses: cheaper than a matmul on [n, D].
    less = tile - 1.0          # each loop's span past its first point
    if a.stacked is not None:
        return _stacked_footprint(a, less)
    out = None
    for terms, base, dim in a.rows:
        extent = None
        for d, c in terms:
            part = less[:, d] if c == 1.0 else c * less[:, d]
            extent = part if extent is None else extent + part
        if extent is None:
            extent = np.full(tile.shape[:1] + tile.shape[2:], min(base, dim))
        else:
            extent = np.minimum(extent + base, dim)
        out = extent if out is None else out * extent
    if out is None:
        return np.full(tile.shape[:1] + tile.shape[2:], float(a.elem_bytes))
    return out * a.elem_bytes


def _stacked_footprint(a: _AccessModel, less: np.ndarray) -> np.ndarray:
    """`_footprint` with its rows side by side ([n, R] or [n, R, H]): the same sums in the same
    order per row (a row's missing terms add 0 x a span, exactly 0), the same product over rows."""
    by_depth, base, base_h, dims, dims_h = a.stacked
    flat = less.ndim == 2
    extent = None
    for loops, coeff, coeff_h, plain in by_depth:
        part = less[:, loops]
        if not plain:
            part = part * (coeff if flat else coeff_h)
        extent = part if extent is None else extent + part
    extent = np.minimum(extent + (base if flat else base_h), dims if flat else dims_h)
    out = extent[:, 0]
    for r in range(1, extent.shape[1]):
        out = out * extent[:, r]
    return out * a.elem_bytes


def _kept_share(a: _AccessModel, domain: TileDomain, kept: np.ndarray, fetches, distinct) -> np.ndarray:
    """The share of an access's traffic that the non-empty tiles of a `where` domain move.
    An access indexed by every loop the domain cuts fetches only non-empty tiles; one
    missing some of them keeps its distinct tiles (a query row meets some key tile) and
    loses only its re-fetches across the missing loops in empty tiles."""
    if all(a.index_mask[d] for d in domain.loops):
        return kept
    fetches = np.maximum(fetches, 1e-30)
    return np.minimum(1.0, (distinct + np.maximum(fetches - distinct, 0.0) * kept) / fetches)


def _traffic(kind: str, footprint, fetches, distinct):
    if kind == "accumulate":
        # Written back on every fetch; partial sums read back on all but the first visit.
        return footprint * (2.0 * fetches - distinct)
    return footprint * fetches
