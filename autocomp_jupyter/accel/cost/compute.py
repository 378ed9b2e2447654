"""Compute: where each statement's arithmetic runs and for how many cycles.

`Datapath` / `datapath_of`: the PE array (a systolic contraction on its mapped loops) or
the vector unit / SIMT lanes / host cores, with its width and cycles per pass — the one
per-kind description the model, the simulator, the limit and the tiling search read.
`occupancy`: how the parallel tiles spread over the compute units. `datapath_tile`: a
statement's tile on its datapath and its passes over the run (edge waste included);
`statement_cycles`: those passes in cycles, with the array's fills (fill.py), host C's
issue limits and an online softmax's rescales. `Work` counts the arithmetic for energy
and pe_util.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..host_model import HOST_L1_WAYS, HOST_STRIDED_CONFLICT, HOST_STRIDED_POINT, _host_issue_cycles
from .statements import _StatementModel
from .tiles import TileGrid


@dataclass(frozen=True)
class Datapath:
    """Where one statement's arithmetic runs and at what rate: the per-kind compute
    description every part of the model reads (cost, simulator, roofline, tiling's
    datapath units) instead of testing the target's kind itself.

    on_array: a contraction mapped on the systolic PE array (rows x cols on two loops);
    unit: what `bound` calls it; width: elements one pass covers along the vectorised loop
    (the array: rows x cols); pass_cycles: cycles of one pass per compute unit.
    """

    on_array: bool
    unit: str
    width: int
    pass_cycles: float

    def peak_flops(self, flops_per_point: float, units: int, clock_hz: float) -> float:
        """flop/s this datapath sustains on a statement doing `flops_per_point` per point."""
        return flops_per_point * self.width / self.pass_cycles * units * clock_hz


def datapath_of(compute, st: "_StatementModel") -> Datapath:
    """The datapath statement `st` runs on (see Datapath)."""
    if st.row_loop >= 0:   # mapped only for systolic contractions the array can run
        return Datapath(True, "PE array", compute.pe_rows * compute.pe_cols,
                        compute.spatial_width / compute.macs(st.dtype))
    width = compute.vector_width(st.dtype)
    unit = vector_unit(compute)
    if st.mac and compute.kind != "systolic":   # SIMT / SIMD multiply-add pipes
        return Datapath(False, unit, width, compute.spatial_width / compute.macs(st.dtype))
    # A systolic target's vector unit runs a multiply-add as one FMA; other work costs its
    # operations per point.
    ops = 1.0 if st.mac else max(1, st.flops_per_point)
    return Datapath(False, unit, width, width * ops / compute.vector_ops_per_cycle)


def vector_unit(compute) -> str:
    """The name of the datapath that runs what the PE array does not (`Datapath.unit`)."""
    if compute.kind == "systolic":
        return "vector unit"
    if compute.kind == "simt":
        return "SIMT lanes"
    return "vector lanes" if compute.implicit_parallel else "cores"


# --------------------------------------------------------------------------- public API


def occupancy(compute, parallel: np.ndarray, dist_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(occupancy, active units) [n]: the parallel tiles at the distribution level
    (`dist_counts` [n, D] of them along each loop) spread over the compute units in waves."""
    units = compute.units
    items = np.multiply.reduce(np.where(parallel, dist_counts, 1.0), axis=1)
    waves = np.ceil(items / units)
    share = items / (waves * units)
    return share, units * share


@dataclass
class DatapathTile:
    """One statement's work on its datapath for a batch: the datapath (`dp`), its tile
    ([n, D] points per pass along each loop: the PE array on the mapped loops, or one
    vector on the vectorised loop `vec_loop`), the passes over the whole run, the kept
    fraction of a `where` domain's tiles per level (None: uncut), and the passes along
    each loop over the run (`counts`) and per innermost tile (`rel`)."""

    dp: Datapath
    unit: np.ndarray
    vec_loop: np.ndarray | None
    passes: np.ndarray
    kept: np.ndarray | None
    counts: np.ndarray
    rel: np.ndarray
    shared: tuple = ()      # what it is a function of over its grid (statements alike share it)


def datapath_tile(compute, grid: TileGrid, st: "_StatementModel", vectorize: np.ndarray) -> DatapathTile:
    """The statement's datapath tile and its passes (edge waste of non-dividing tiles
    included), and the non-empty share of a `where` domain's tiles."""
    n, D, L = grid.tiles.shape
    E, counts = grid.E, grid.counts
    dp = datapath_of(compute, st)
    width = dp.width
    # Statements over the same loops on the same datapath tile share it and its passes per
    # loop and per innermost tile (a fused kernel's epilogues): computed once per grid.
    annotated = bool((vectorize >= 0).any())
    key = ("tile", dp.on_array, st.array_units, width, st.present.tobytes(),
           vectorize.tobytes() if annotated else None)
    found = grid._shared.get(key)
    if found is None:
        found = grid._shared[key] = _datapath_unit(grid, st, dp, vectorize, annotated)
    unit, vec_loop, dp_counts, dp_rel = found
    if not dp.on_array and not st.reduce and not st.mac:
        # An elementwise statement streams its tile's elements through the lanes as
        # one flat run (a fused epilogue over a 2-wide output tile still fills them):
        # ceil(tile points / lanes) passes per tile, not per innermost row.
        inner_counts = np.where(st.present, counts[:, L - 1, :], 1.0)
        tile_points = np.multiply.reduce(np.where(st.present, E / inner_counts, 1.0), axis=1)
        passes = np.multiply.reduce(inner_counts, axis=1) * np.ceil(tile_points / width - 1e-9) * st.local_points
    else:
        passes = np.multiply.reduce(dp_counts, axis=1) * st.local_points
    # A `where` domain: only its non-empty tiles run (their fraction per level), and of a tile
    # on its edge only the passes that meet it (`TileDomain.passes_meeting`)
    kept = st.domain.kept(grid.T) if st.domain is not None else None
    if kept is not None:
        inner = grid.T[:, :, L - 1]
        passes = passes * np.minimum(st.domain.kept_at(np.minimum(unit, inner)), kept[:, L - 1])
    return DatapathTile(dp, unit, vec_loop, passes, kept, dp_counts, dp_rel, key)


def _datapath_unit(grid: TileGrid, st: "_StatementModel", dp: Datapath, vectorize: np.ndarray, annotated: bool):
    """(the datapath tile [n, D], the vectorised loop [n] or None, the passes along each
    loop over the run [n, D] and per innermost tile [n, D]) of `datapath_tile`."""
    n, D, L = grid.tiles.shape
    rows = np.arange(n)
    # The datapath tile: PE array on the mapped loops, or one vector on the
    # vectorised loop (the innermost present loop unless annotated).
    unit = np.ones((n, D), dtype=np.int64)
    width = dp.width
    vec_loop = None
    if dp.on_array:
        for loop, along in st.array_units:
            unit[:, loop] = along
    else:
        inner_order = grid.inner_order
        pres_inner = st.present[inner_order]
        last = D - 1 - np.argmax(pres_inner[:, ::-1], axis=1)
        vec_loop = inner_order[rows, last]
        if annotated:       # (else the innermost present loop)
            ok = (vectorize >= 0) & st.present[np.clip(vectorize, 0, D - 1)]
            vec_loop = np.where(ok, vectorize, vec_loop)
        unit[rows, vec_loop] = width
    # its passes along each loop: the same for statements with the same datapath tile
    key = ("passes", st.array_units) if dp.on_array else ("passes", width, vec_loop.tobytes())
    dp_pieces = grid._shared.get(key)
    if dp_pieces is None:
        dp_pieces = grid._shared[key] = sum(m * np.ceil(x / unit - 1e-9)
                                            for x, m in zip(grid.piece_len, grid.piece_mult))
    dp_counts = np.where(st.present, dp_pieces, 1.0)  # [n, D]
    dp_rel = dp_counts / np.where(st.present, grid.counts[:, L - 1, :], 1.0)
    return unit, vec_loop, dp_counts, dp_rel


@dataclass
class Work:
    """The arithmetic a batch's statements do: MAC points and vector operations (what
    compute energy charges), and the array positions busy and offered (pe_util)."""

    mac_points: float
    vector_ops: float
    useful: np.ndarray
    offered: np.ndarray

    @classmethod
    def zeros(cls, n: int) -> "Work":
        return cls(0.0, 0.0, np.zeros(n), np.zeros(n))

    def count(self, st: "_StatementModel", tile: DatapathTile) -> None:
        if st.mac:
            self.mac_points += st.points
            self.useful += st.points
            self.offered += tile.passes * tile.dp.width
        else:
            self.vector_ops += st.points * max(1, st.flops_per_point)


def statement_cycles(model, grid: TileGrid, si: int, st: "_StatementModel", tile: DatapathTile, fill,
                     pack_cycles, micro_k) -> np.ndarray:
    """[n] cycles the statement's datapath works over the whole run (all units together):
    its passes, the array's fills (`fill`, from fill.py), host C's issue limits, and an
    online softmax's rescales where they run on the statement's own datapath (a sum on the
    vector lanes; a PE array's sums are rescaled by the vector unit beside it: `rescale_cycles`,
    which model.py charges there)."""
    cycles = tile.passes * tile.dp.pass_cycles
    if st.mac and tile.dp.on_array:
        cycles = cycles + fill
    cycles = _host_cycles(model, grid, si, st, tile, cycles, pack_cycles, micro_k)
    if not tile.dp.on_array:
        cycles = cycles + rescale_cycles(model, grid, st, tile)
    return cycles


def rescale_cycles(model, grid: TileGrid, st: "_StatementModel", tile: DatapathTile) -> np.ndarray | float:
    """[n] vector-unit cycles of an online softmax's rescales over the whole run (0.0 for a
    statement without one): each innermost key tile first rescales the sums it holds (every
    element of the target once per key tile over the run, in the domain's non-empty tiles)."""
    if st.rescale_key < 0:
        return 0.0
    L = grid.tiles.shape[2]
    kept = tile.kept
    elems = float(np.prod(grid.E[0, np.asarray(st.out_mask, dtype=bool)]))
    return elems * st.rescale_per_elem * grid.counts[:, L - 1, st.rescale_key] \
        / model.target.compute.vector_ops_per_cycle * (kept[:, L - 1] if kept is not None else 1.0)


def _host_cycles(model, grid: TileGrid, si: int, st: "_StatementModel", tile: DatapathTile, cycles,
                 pack_cycles, micro_k) -> np.ndarray:
    """Host C's limits on a statement's cycles: scalar libm calls, dependent reductions and
    strided walks (off the vector path), and the nest's issue rate (a multiply-add nest)."""
    compute = model.target.compute
    tiles, vec_loop = grid.tiles, tile.vec_loop
    n, L = tiles.shape[0], tiles.shape[2]
    rows = np.arange(n)
    if not st.mac and model.host_scalar is not None:
        # Host C: libm calls run scalar (no -ffast-math, so no vector libm) and a
        # reduction read across rows runs as a chain of dependent ops.
        cycles = np.maximum(cycles, model.host_scalar[si])
        # An innermost loop that walks some access down a column: a cache line per point.
        trip = tiles[rows, vec_loop, L - 1].astype(float)
        strided = np.where(trip > 1, model.host_strided[si][vec_loop], 0.0)   # a trip of 1 is no loop
        if strided.any():
            per_point = np.where(trip * strided <= HOST_L1_WAYS, HOST_STRIDED_POINT, HOST_STRIDED_CONFLICT)
            cycles = np.where(strided > 0, np.maximum(cycles, st.points * per_point), cycles)
    if st.mac and compute.kind == "vector" and not compute.implicit_parallel:
        # A CPU running generated C (host): the nest's issue rate, not only the lanes.
        cycles = np.maximum(cycles, _host_issue_cycles(st, tiles, grid.inner_order, vec_loop, rows, tile.dp.width,
                                                       compute.fma_units, micro_k))
        if pack_cycles is not None:
            cycles = cycles + pack_cycles  # one element copied per cycle
    return cycles
