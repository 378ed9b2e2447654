"""The analytic cost model: time, traffic, energy and utilisation of scheduled kernels.

Everything is evaluated for a *batch* of candidate schedules of one kernel at once, with
numpy arrays whose first axis is the candidate (the tuner scores thousands per second);
`evaluate(schedule, target)` is the one-candidate view of the same code.

The model (Timeloop / ZigZag style):

* Tiles. Level h of `target.tiling_levels` (outer → inner) holds a tile of T[d, h] points of
  each kernel loop d. Tiles need not divide: along d the number of level-h tiles over the
  whole run, n[d, h], counts remainder tiles (`_chunks`), and the mean tile is E[d]/n[d, h].
* Footprint. An access X[f(i)] over a tile covers, per tensor dimension, sum |coeff|*(T-1)+1
  elements (a conv input row: h + r - 1), clipped to the dimension.
* Reuse. The level-h tile of X is fetched again each time a loop outside level h iterates,
  except for the innermost run of outer loops that do not index X (the tile stays put:
  stationarity). Loops that iterate once are transparent. Traffic into h = footprint ×
  fetches; an accumulated output also reads back its partial sums on every fetch but the
  first. Internal tensors of a fused kernel never cross the DRAM boundary.
* Levels may hold only some roles (`holds`: weights, activations, outputs; e.g. Gemmini's
  accumulator outputs, a per-PE register file weights); a tensor bypasses levels that do
  not hold its role. After the innermost level comes the datapath:
  operands stream from the innermost level into the PE array (tile: pe_rows x pe_cols on
  the mapped loops; with im2col several reduction loops share the rows) or the vector lanes
  (tile: one vector on the vectorised loop; on a systolic target's vector unit, along a
  reduction loop sharing that loop's input index, a depthwise conv's s in X[.., w + s], its
  registers keep the row: no reload per tap).
* Spill. If a level's tiles overflow it by a fraction s of their footprint, that fraction
  of its traffic instead streams through from the parent as the inner level asks for it.
* Compute. Passes of the PE array / vectors over the whole run, with edge waste of
  non-dividing tiles (ceil), divided over the compute units the parallel tile loops keep
  busy (occupancy, wave quantisation), plus systolic fill/drain per innermost tile.
* Compute at. A statement computed at the anchor's tiles (`Kernel.compute_at`) is costed
  as its own nest over its region: its model alone (`_ProducerModel`), with tiles of the
  region a tile at the compute point reads (`ir.loopnest.regions`: the halo included) at
  that level and outside it, the textbook tiling of it alone inside, clipped to the region;
  its work, traffic and energy are then scaled by the recompute: the regions' total over
  every tile at the compute point (halos counted in each) over the statement's own points,
  times the tiles of loops its region does not follow (it runs again in each). Along the
  compute loop itself the halo is carried where that loop runs in order on one unit (the
  rows the next tile shares with this one stay in its buffer, a line buffer: only new rows
  are computed, the halo once per sweep); where the loop is spread over several units it is
  recomputed in every tile (`_ProducerModel.carries`). Its tensor
  is internal: no DRAM traffic, its region on chip where the consumer reads it — held at the
  compute point's level from its writer to its last reader, in that level's capacity
  (`_held_regions`: a row of scores too long for the level spills; an elementwise step
  over a region read last there overwrites it in place). Producer
  and consumer run one after the other in each tile: their times add.
* Time. Levels whose tiles fit twice (double buffering) overlap their transfers with
  compute; others serialise with it. The first input tiles (cold start) and the last output
  tiles (drain) overlap nothing: time = max(max(compute, operand streaming) + serial
  transfers + cold start + drain, each level L's bound). A level's bound is
  max(traffic_L / bw_L, its reads / bw_L + loads x latency — one load in flight per fed
  level, the fed levels side by side, posted write-backs in the latency's shadow), after the
  levels outside it delivered their first tiles (every unit's first load a whole latency),
  plus the last tile's compute after its last load. Operand streaming stops while the
  array fills.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..caches import LRU, cached
from ..ir.program import DTYPE_BYTES, Access, Program
from ..ir.schedule import Kernel, Schedule, canonical_kernel, canonical_names, is_mac_statement, kernels_unfused
from .host_model import (HOST_L1_WAYS, HOST_STRIDED_CONFLICT, HOST_STRIDED_POINT, _GEMM_MIN_BLOCK, _GEMM_MR,
                         _GEMM_NR, _host_issue_cycles, compute_model)
from .target import Target, load_target

# The per-kernel metric names of the report (DESIGN §8, kernels[*].metrics).
METRIC_NAMES = ("time_s", "flops", "bw_util", "occupancy", "pe_util",
                "arithmetic_intensity", "spill_ratio", "energy_j")


# --------------------------------------------------------------------------- results


@dataclass
class BatchCost:
    """Costs of n candidate schedules of one kernel: each field an array of length n.

    bytes[:, m] is the traffic out of memory level `level_names[m]` (memory order, innermost
    first) toward the level inside it or, for the innermost level holding a tensor, into
    the datapath.
    """

    level_names: tuple[str, ...]
    time_s: np.ndarray
    cycles: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    energy_j: np.ndarray
    bw_util: np.ndarray
    occupancy: np.ndarray
    pe_util: np.ndarray
    arithmetic_intensity: np.ndarray
    spill_ratio: np.ndarray
    compute_s: np.ndarray
    level_time_s: np.ndarray  # [n, levels]: traffic / bandwidth per source level
    double_buffered: np.ndarray  # [n, tiling levels] bool
    datapath_bytes: np.ndarray | None = None  # [n, statements, levels]: operand streaming
    # What `bound` reads: the parts of each level's time (bandwidth, latency), the transfers
    # that wait in line with compute, and compute time per unit (PE array / vector unit).
    level_bw_s: np.ndarray | None = None       # [n, levels]
    level_latency_s: np.ndarray | None = None  # [n, levels]
    serial_s: np.ndarray | None = None         # [n]
    cold_s: np.ndarray | None = None           # [n]: first input tiles, before any compute
    drain_s: np.ndarray | None = None          # [n]: last output tiles, after all compute
    stream_s: np.ndarray | None = None         # [n]: operands streaming into the datapath
    compute_by_unit: dict | None = None        # {unit name: [n]}

    def __len__(self) -> int:
        return len(self.time_s)

    def row(self, i: int, kernel_name: str = "") -> "KernelCost":
        return KernelCost(
            kernel=kernel_name, time_s=float(self.time_s[i]), cycles=float(self.cycles[i]),
            flops=float(self.flops[i]),
            bytes={n: float(b) for n, b in zip(self.level_names, self.bytes[i])},
            energy_j=float(self.energy_j[i]), bw_util=float(self.bw_util[i]),
            occupancy=float(self.occupancy[i]), pe_util=float(self.pe_util[i]),
            arithmetic_intensity=float(self.arithmetic_intensity[i]),
            spill_ratio=float(self.spill_ratio[i]), compute_s=float(self.compute_s[i]),
            level_time_s={n: float(t) for n, t in zip(self.level_names, self.level_time_s[i])},
            limits=self._limits(i),
        )

    def _limits(self, i: int) -> dict:
        """{what: seconds} for every candidate limit of row i (see KernelCost.bound)."""
        if self.level_bw_s is None:
            return {}
        out = {f"compute ({unit})": float(v[i]) for unit, v in (self.compute_by_unit or {}).items()}
        for m, name in enumerate(self.level_names):
            out[f"{name} bandwidth"] = float(self.level_bw_s[i, m])
            out[f"{name} latency"] = float(self.level_latency_s[i, m])
        out["serial transfers"] = float(self.serial_s[i])
        out["cold start"] = float(self.cold_s[i]) if self.cold_s is not None else 0.0
        out["drain"] = float(self.drain_s[i]) if self.drain_s is not None else 0.0
        out["operand streaming"] = float(self.stream_s[i]) if self.stream_s is not None else 0.0
        return out


@dataclass
class KernelCost:
    """The cost of one scheduled kernel (or, from `ProgramCost.total`, a whole program)."""

    kernel: str
    time_s: float
    cycles: float
    flops: float
    bytes: dict[str, float]
    energy_j: float
    bw_util: float
    occupancy: float
    pe_util: float
    arithmetic_intensity: float
    spill_ratio: float
    compute_s: float = 0.0
    level_time_s: dict[str, float] = field(default_factory=dict)
    limits: dict[str, float] = field(default_factory=dict)

    @property
    def dram_bytes(self) -> float:
        return list(self.bytes.values())[-1]

    @property
    def bound(self) -> str:
        """What limits the time, in the model's own terms: the time is max(max(compute,
        operand streaming) + serial transfers + cold start + drain, each level's bytes /
        bandwidth + its 'latency' part — what its bound adds to that, module docstring), so the binding term is the busy chain — named by its
        largest part, 'compute (<unit>)' (the PE array, the vector unit, ...), 'operand
        streaming' (operands into the datapath), 'serial transfers' (loads that cannot double-
        buffer), 'cold start' (the first input tiles, loaded before anything computes) or
        'drain' (the last output tiles, written back after everything computed),
        with '+ <part>' for each other part above a quarter of it — or '<level> bandwidth' /
        '<level> latency' for the level whose time is largest (by its larger part). The
        roofline's slope is the DRAM bandwidth term alone: a kernel right of the ridge can
        still be bound by DRAM latency (many small loads), its cold start or an inner level."""
        lim = self.limits
        if not lim:
            worst = max(self.level_time_s.items(), key=lambda kv: kv[1], default=("compute", 0.0))
            return "compute" if self.compute_s >= worst[1] else worst[0]
        units = {k: v for k, v in lim.items() if k.startswith("compute")}
        unit = max(units, key=units.get) if units else "compute"
        stream = lim.get("operand streaming", 0.0)
        lead = (unit, self.compute_s) if self.compute_s >= stream else ("operand streaming", stream)
        parts = {lead[0]: lead[1], "serial transfers": lim.get("serial transfers", 0.0),
                 "cold start": lim.get("cold start", 0.0), "drain": lim.get("drain", 0.0)}
        busy = sum(parts.values())
        levels = {name: lim.get(f"{name} bandwidth", 0.0) + lim.get(f"{name} latency", 0.0)
                  for name in self.level_time_s}
        worst = max(levels, key=levels.get, default=None)
        if worst is None or busy >= levels[worst]:
            ranked = sorted(parts, key=lambda p: -parts[p])   # stable: compute first on ties
            return " + ".join([ranked[0]] + [p for p in ranked[1:] if parts[p] > 0.25 * busy])
        part = "bandwidth" if lim[f"{worst} bandwidth"] >= lim[f"{worst} latency"] else "latency"
        return f"{worst} {part}"

    def metrics(self) -> dict:
        """The report's kernels[*].metrics (DESIGN §8), names exactly as there."""
        return {name: getattr(self, name) for name in METRIC_NAMES}

    def summary(self) -> dict:
        """The report's naive / library / optimized block: time, cycles, energy, bytes."""
        return {"time_s": self.time_s, "cycles": self.cycles, "energy_j": self.energy_j,
                "bytes": dict(self.bytes)}


@dataclass
class ProgramCost:
    """Kernels run one after another: times, bytes and energy add up."""

    target: str
    kernels: list[KernelCost]
    total: KernelCost


# --------------------------------------------------------------------------- helpers


def _chunks(extent: np.ndarray, tiles: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """Pieces of size `unit` after splitting `extent` by tiles[..., 0], tiles[..., 1], ...

    Each split leaves full tiles and one remainder tile; each is split further. With no
    tiles this is ceil(extent / unit). All arguments broadcast; tiles are non-increasing.
    """
    levels = tiles.shape[-1]

    def split(x, k):
        if k == levels:
            return -(-x // unit)
        t = tiles[..., k]
        full = x // t
        rest = x - full * t
        return full * split(t, k + 1) + split(rest, k + 1)

    return split(extent, 0)


def _tile_counts(extent: np.ndarray, tiles: np.ndarray):
    """`_chunks` for every tiling level in one pass: counts [n, L, D] of level-h tiles along
    each loop over the whole run, and the innermost tiles as L + 1 lengths with
    multiplicities (lists of [n, D] arrays; zero multiplicities are padding).

    A level splits each parent tile of length x into floor(x / t) tiles of t and one
    remainder of x mod t. Full tiles of every parent have the same length t, so after level
    h there are at most h + 2 distinct lengths: the remainders of the extent and of each
    outer tile size, and t itself. Floats: x * (1/t) is within 1e-9 relative of the exact
    quotient and all lengths are integers far below 2^53, so floor / ceil with a 1e-9 margin
    are exact.
    """
    n, D, L = tiles.shape
    T = tiles.astype(float)
    lengths = [np.broadcast_to(extent.astype(float), (n, D))]
    mult = [np.ones((n, D))]
    counts = np.empty((n, L, D))
    for h in range(L):
        t = T[:, :, h]
        inv = 1.0 / t
        fulls = 0.0
        for q, (x, m) in enumerate(zip(lengths, mult)):
            full = np.floor(x * inv + 1e-9)
            rest = x - full * t
            fulls = fulls + full * m
            lengths[q] = rest
            mult[q] = np.where(rest > 0.5, m, 0.0)
        lengths.append(t)
        mult.append(fulls)
        counts[:, h, :] = sum(mult)
    return counts, lengths, mult


@dataclass
class _AccessModel:
    tensor: str
    coeff: np.ndarray        # [R, D] |coefficients| on anchor loops
    local_add: np.ndarray    # [R] halo from loops local to the statement (full extent)
    dims: np.ndarray         # [R] tensor dimension sizes
    elem_bytes: int
    kind: str                # 'read', 'write' or 'accumulate'
    index_mask: np.ndarray   # [D] bool: anchor loops this access's indices use
    chain: tuple[int, ...]   # tiling levels (outer → inner) that hold it
    internal: bool
    terms: tuple = ()        # per index row: ((loop, |coeff|), ...) of its nonzero coefficients
    counted: np.ndarray | None = None   # anchor loops indexing it that its statement iterates

    def __post_init__(self):
        self.terms = tuple(tuple((int(d), float(c)) for d, c in enumerate(row) if c != 0.0) for row in self.coeff)


@dataclass
class _StatementModel:
    present: np.ndarray      # [D] bool: anchor loops this statement iterates
    present_loops: np.ndarray  # their indices
    local_points: int        # product of local loop extents
    points: int
    flops_per_point: int
    mac: bool
    dtype: str
    row_loop: int            # anchor loop on pe rows (systolic mac), else -1
    col_loop: int
    accesses: list[_AccessModel]
    # ((anchor loop, PE units along it), ...): the rows' loops (several with im2col), then the
    # column loop; what one pass of the array covers. Empty off the array.
    array_units: tuple[tuple[int, int], ...] = ()
    window: np.ndarray | None = None   # [D, D] bool: see _statement_model
    in_place: bool = False   # an epilogue computing over an internal tile it may overwrite
    reduce: bool = False     # accumulates into its target (a reduction)
    out_mask: np.ndarray | None = None  # [D] bool: anchor loops indexing the target
    contig_loop: int = -1    # anchor loop of the target's last (contiguous) dimension
    # A sum against a running max (online softmax, `Rescale`): at every innermost tile along
    # this anchor (key) loop it rescales the partial sums it holds, `rescale_per_elem`
    # vector operations per element of its target (a multiply, and the max's exp per row).
    rescale_key: int = -1
    rescale_per_elem: float = 0.0
    # A domain cut by `where` relations: each as (coefficients on anchor loops [D], constant
    # with the statement's local loops at their most favourable value); `TileDomain` counts
    # the tiles it leaves non-empty, which are the only ones computed and fetched.
    domain: "TileDomain | RowTiles | None" = None


class TileDomain:
    """The tiles of a statement's `where` domain (`Statement.domain`) that are not empty.

    A tile of T[d] points along each anchor loop d (tile b covers x_d = T_d b_d + r_d with
    0 <= r_d < T_d) meets a relation sum a_d x_d + c >= 0 iff sum a_d T_d b_d + c + sum over
    a_d > 0 of a_d (T_d - 1) >= 0: a relation on the tile coordinates, whose points
    `ir.program.domain_points` counts exactly (several relations: each checked on its own,
    an upper bound). Empty tiles are skipped: the model charges the work and fetches of the
    non-empty ones, as the simulator replays and the C runs them."""

    def __init__(self, relations: list[tuple[np.ndarray, float]], extents: np.ndarray):
        self.relations = relations
        self.loops = sorted({int(d) for coeff, _ in relations for d in np.nonzero(coeff)[0]})
        self.extents = extents
        self._kept: dict[tuple, float] = {}

    def kept_fraction(self, sizes: tuple[int, ...]) -> float:
        """The fraction of tiles of `sizes` (along `self.loops`) that meet the domain."""
        cached = self._kept.get(sizes)
        if cached is not None:
            return cached
        from ..ir.program import Affine, domain_points

        tiles = {f"b{d}": int(math.ceil(self.extents[d] / t)) for d, t in zip(self.loops, sizes)}
        size = dict(zip(self.loops, sizes))
        constraints = []
        for coeff, const in self.relations:
            terms = {f"b{d}": int(round(coeff[d] * size[d])) for d in self.loops if coeff[d]}
            slack = sum(coeff[d] * (size[d] - 1) for d in self.loops if coeff[d] > 0)
            constraints.append(Affine.of(terms, int(math.floor(const + slack))))
        kept = domain_points(tiles, tuple(constraints)) / max(1, math.prod(tiles.values()))
        self._kept[sizes] = kept
        return kept

    def meets(self, box) -> bool:
        """Whether a tile, box[d] = (first point, points) along each anchor loop d, holds a
        point of the domain (each relation checked on its own, as `kept_fraction`)."""
        for coeff, const in self.relations:
            top = const + sum(c * (box[d][0] + (box[d][1] - 1 if c > 0 else 0)) for d, c in enumerate(coeff) if c)
            if top < 0:
                return False
        return True

    def kept(self, T: np.ndarray) -> np.ndarray:
        """[n, L]: the kept fraction of each level's tiles, for full tiles T [n, D, L]."""
        n, _, L = T.shape
        sizes = np.clip(T[:, self.loops, :], 1, None).astype(np.int64).transpose(0, 2, 1)   # [n, L, k]
        flat = sizes.reshape(n * L, len(self.loops))
        unique, inverse = np.unique(flat, axis=0, return_inverse=True)
        values = np.array([self.kept_fraction(tuple(int(v) for v in row)) for row in unique])
        return values[inverse.reshape(-1)].reshape(n, L)


class RowTiles:
    """What an in-place row update (`ir.program.InPlace`) runs: the one row it writes,
    addressed directly (which row is known when it runs), whatever the tiles along its loop;
    `TileDomain`'s interface, so the model, the limit and the simulator charge that row alone
    (the simulator replays the first tile's first row for it)."""

    def __init__(self, loop: int, extent: int):
        self.loops = [loop]
        self.extent = extent

    def kept_fraction(self, sizes: tuple[int, ...]) -> float:
        return 1.0 / self.extent

    def meets(self, box) -> bool:
        return box[self.loops[0]][0] == 0

    def kept(self, T: np.ndarray) -> np.ndarray:
        return np.full((T.shape[0], T.shape[2]), 1.0 / self.extent)


SINGLE_SCHEDULES = 1024    # single-schedule costs a kernel model remembers


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
        self.energy_per_byte = np.array([m.energy_pj_per_byte for m in target.memory]) * 1e-12
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
            from .roofline import statements_read_bytes
            self.compulsory_bytes = float(sum(statements_read_bytes(kernel.tensor(t), kernel.statements)
                                              for t in kernel.inputs)
                                          + sum(kernel.tensor(t).nbytes for t in kernel.outputs))
        # Bytes an element of each tensor moves: its dtype's on an accelerator; on host, its C
        # buffer's (codegen/c.py holds integer tensors in doubles, f16/bf16 in floats).
        self.elem_bytes = self.host.elem_bytes if host_c else DTYPE_BYTES.__getitem__
        self.statements = [self._statement_model(i, s, index, D, on_chip)
                           for i, s in enumerate(kernel.statements)]
        # Statements computed at the anchor's tiles: each costed as its own nest (above).
        self.computed = kernel.computed_at()
        self.producers = [_ProducerModel(kernel, group, target, index) for group in _producer_groups(kernel)]
        self.held = _held_regions(kernel, target, index, self.elem_bytes) if self.computed else []
        # Host C runs a tiled GEMM-like kernel as a packed BLIS-style GEMM, not the tile nest.
        self.host_packed = self.host_pk = self.host_scalar = None
        self._single: dict = {}       # one schedule's cost by its arrays (`evaluate_batch`)
        if host_c:
            self.host_packed, self.host_pk = self.host.packed_gemm, self.host.pk
            self.host_scalar, self.host_strided = self.host.scalar, self.host.strided
            self.bw = self.host.bandwidth(self.bw)

    def _statement_model(self, si, stmt, index, D, on_chip) -> _StatementModel:
        kernel, compute = self.kernel, self.target.compute
        m = kernel.loop_map(si)
        present = np.zeros(D, dtype=bool)
        for loop, anchor_loop in m.items():
            present[index[anchor_loop]] = True
        local = {l.name: l.extent for l in stmt.loops if l.name not in m}
        accesses: list[_AccessModel] = []
        seen = set()
        kind = "accumulate" if stmt.reduce else "write"
        mac = is_mac_statement(stmt)
        weight = _weight_read(stmt) if mac else None
        items = [(stmt.target, stmt.target_indices, kind, "outputs")] + [
            (a.tensor, a.indices, "read", "weights" if r == weight else "activations")
            for r, a in enumerate(stmt.reads())]
        for tensor, indices, akind, role in items:
            key = (tensor, indices, akind == "read")
            if key in seen:
                continue
            seen.add(key)
            t = kernel.tensor(tensor)
            coeff = np.zeros((len(indices), D))
            local_add = np.zeros(len(indices))
            for r, idx in enumerate(indices):
                for loop, c in idx.terms:
                    if loop in m:
                        coeff[r, index[m[loop]]] += abs(c)
                    else:
                        local_add[r] += abs(c) * (local[loop] - 1)
            # Levels that do not hold the access's role are bypassed (target.ROLES).
            chain = tuple(h for h, lv in enumerate(on_chip) if role in lv.roles or (tensor, lv.name) in self.staged)
            index_mask = coeff.sum(axis=0) > 0
            accesses.append(_AccessModel(
                tensor=tensor, coeff=coeff, local_add=local_add,
                dims=np.array(t.shape if len(t.shape) == len(indices) else [1 << 62] * len(indices), dtype=float),
                elem_bytes=self.elem_bytes(t.dtype), kind=akind, index_mask=index_mask,
                chain=chain, internal=tensor in kernel.internals, counted=np.nonzero(index_mask & present)[0]))
        reads = stmt.reads()
        dtype = kernel.tensor(reads[0].tensor).dtype if reads else kernel.tensor(stmt.target).dtype
        row = col = -1
        array_units = ()
        if mac and compute.kind == "systolic":   # on the PE array if it is a contraction it can run
            rows_on, col = _systolic_mapping(stmt, m, index, compute) or ((), -1)
            row = rows_on[0][0] if rows_on else -1
            array_units = rows_on + ((col, compute.pe_cols),) if rows_on else ()
        # An elementwise epilogue (no reduction, no local loops) over an internal tile the
        # anchor left on chip writes its result over that tile: it needs no buffer of its own.
        in_place = (si != kernel.anchor and not stmt.reduce and not local
                    and any(a.internal and a.kind == "read" for a in accesses))
        target_access = accesses[0]
        # window[d]: reduction loops sharing an input index row with loop d (X[.., w + s]),
        # for a reduction on a systolic target's vector unit (what it keeps in registers)
        window = None
        if stmt.reduce and row < 0 and compute.kind == "systolic":
            reduction = present & ~(target_access.index_mask)
            window = np.zeros((D, D), dtype=bool)
            for a in accesses[1:]:
                for coeff_row in a.coeff:
                    used = np.nonzero(coeff_row)[0]
                    for d in used:
                        window[d, used] |= reduction[used] & (used != d)
            window = window if window.any() else None
        last_row = target_access.coeff[-1] if len(target_access.coeff) else np.zeros(D)
        contig = int(np.argmax(last_row)) if last_row.any() else -1
        rescale_key, rescale_per_elem = -1, 0.0
        if stmt.rescale is not None and stmt.reduce == "+":
            keys = [index[m[l.name]] for l in stmt.reduction_loops if l.name in m]
            if keys:
                out_points = math.prod(l.extent for l in stmt.output_loops)
                rescale_key = keys[0]
                rescale_per_elem = 1.0 + kernel.tensor(stmt.rescale.tensor).size / max(1, out_points)
        domain = None
        if stmt.domain:
            relations = []
            for a in stmt.domain:
                coeff = np.zeros(D)
                const = float(a.const)
                for loop, c in a.terms:
                    if loop in m:
                        coeff[index[m[loop]]] += c
                    elif c > 0:                 # a local loop runs whole in every tile
                        const += c * (local[loop] - 1)
                relations.append((coeff, const))
            if any(coeff.any() for coeff, _ in relations):
                domain = TileDomain(relations, np.asarray(self.extents, dtype=float))
        points = stmt.points
        if stmt.in_place is not None and stmt.in_place.loop in m:
            extent = stmt.extents[stmt.in_place.loop]
            domain = RowTiles(index[m[stmt.in_place.loop]], extent)
            points = points // max(1, extent)          # one row is written
        return _StatementModel(in_place=in_place, present=present, present_loops=np.nonzero(present)[0],
                               domain=domain,
                               reduce=bool(stmt.reduce),
                               rescale_key=rescale_key, rescale_per_elem=rescale_per_elem,
                               out_mask=target_access.index_mask & present, contig_loop=contig,
                               local_points=math.prod(local.values()) if local else 1,
                               points=points, flops_per_point=stmt.expr.flops() + (1 if stmt.reduce else 0),
                               mac=mac, dtype=dtype, row_loop=row, col_loop=col, accesses=accesses,
                               array_units=array_units, window=window)

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
        big = np.iinfo(np.int64).max // 4
        tiles = np.where(tiles <= 0, big, tiles)
        tiles = np.minimum(tiles, self.extents[None, :, None])
        tiles = np.minimum.accumulate(tiles, axis=2)
        if orders is None:
            orders = np.broadcast_to(np.arange(D), (n, L, D))
        else:
            orders = np.asarray(orders, dtype=np.int64)
            if orders.ndim == 1:
                orders = orders[None]
            if orders.ndim == 2:
                orders = np.broadcast_to(orders[:, None, :], (orders.shape[0], L, D))
            orders = np.broadcast_to(orders, (n, L, D))
        if parallel is None:
            parallel = np.broadcast_to(self.default_parallel, (n, D))
        else:
            parallel = np.broadcast_to(np.asarray(parallel, dtype=bool), (n, D))
        if vectorize is None:
            vectorize = np.full(n, -1, dtype=np.int64)
        else:
            vectorize = np.broadcast_to(np.asarray(vectorize, dtype=np.int64), (n,))
        return tiles, orders, parallel, vectorize

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
        ann = schedule.annotations
        parallel = None
        if "parallel" in ann:
            parallel = np.array([n in set(ann["parallel"]) for n in self.loop_names])
        vec = ann.get("vectorize")
        vectorize = np.array([index[vec] if vec in index else -1])
        return tiles[None], orders[None], parallel, vectorize

    # ------------------------------------------------------------------ evaluation

    def capacity_footprints(self, tiles, orders=None) -> np.ndarray:
        """Bytes the tiles of every held tensor take at each tiling level: [n, L]."""
        tiles, orders, *_ = self.normalise(tiles, orders)
        return self._capacity(tiles.astype(float), orders=orders)

    def _capacity(self, T: np.ndarray, tile_bytes: dict | None = None, orders=None) -> np.ndarray:
        """[n, L] bytes held per level; fills `tile_bytes[(statement, access)]` with each
        access's full tile at the levels holding it ([n, L]) when given. A computed-at
        tensor's region is held at its compute point's level while it is live (`_held_regions`);
        the anchor's tiles of it are part of that region."""
        n, L = T.shape[0], self.n_levels
        per_tensor: dict[str, np.ndarray] = {}
        held = {h.tensor for h in self.held}
        for si, st in enumerate(self.statements):
            if si in self.computed:
                continue      # its own nest's buffers (`_ProducerModel`)
            for ai, a in enumerate(st.accesses):
                skip = st.in_place and (a.internal or a.kind != "read") or a.tensor in held
                if skip and tile_bytes is None:
                    continue  # reuses the buffer of the internal tile it reads
                fp = np.zeros((n, L))
                if a.chain:   # every holding level at once (the same arithmetic per level)
                    fp[:, list(a.chain)] = _footprint(a, T[:, :, list(a.chain)])
                if tile_bytes is not None:
                    tile_bytes[si, ai] = fp
                if skip:
                    continue
                prev = per_tensor.get(a.tensor)
                per_tensor[a.tensor] = fp if prev is None else np.maximum(prev, fp)
        total = sum(per_tensor.values()) if per_tensor else np.zeros((n, L))
        if self.held:
            total = total + _held_peak(self.held, T, orders, self.extents)
        return total

    def _as_packed(self, tiles, orders, vectorize):
        """What host C runs for a tiled GEMM-like kernel (codegen/c.py packed path): cache
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

    def evaluate_batch(self, tiles, orders=None, parallel=None, vectorize=None) -> BatchCost:
        tiles, orders, parallel, vectorize = self.normalise(tiles, orders, parallel, vectorize)
        if len(tiles) > 1:
            return self._evaluate(tiles, orders, parallel, vectorize)
        # One schedule: the passes ask the same one again (its tiles under other annotations,
        # a plan re-costed); each is costed once (shared by the kernels sharing this model).
        key = (tiles.tobytes(), orders.tobytes(), parallel.tobytes(), vectorize.tobytes())
        cost = self._single.get(key)
        if cost is None:
            if len(self._single) >= SINGLE_SCHEDULES:
                self._single.clear()
            cost = self._single[key] = self._evaluate(tiles, orders, parallel, vectorize)
        return cost

    def _evaluate(self, tiles, orders, parallel, vectorize) -> BatchCost:
        """`evaluate_batch` of normalised arrays."""
        target, compute = self.target, self.target.compute
        n, D, L = tiles.shape
        pack_cycles = micro_k = None
        schedule_tiles = tiles      # the packed path's blocks come from these (not _as_packed's rewrite)
        if self.host_packed is not None:
            tiles, orders, vectorize, pack_cycles, micro_k = self._as_packed(tiles, orders, vectorize)
        M = len(self.level_names)
        E = self.extents[None, :].astype(np.int64)
        # Tiles of each level along each loop over the whole run, and per enclosing tile.
        counts, piece_len, piece_mult = _tile_counts(E, tiles)
        rel = counts.copy()
        rel[:, 1:, :] /= counts[:, :-1, :]
        mean_tile = E[:, None, :] / counts                    # [n, L, D]
        T = tiles.astype(float)                               # [n, D, L] full tiles
        # Loop order seen from inside level h: the orders of levels 0..h, outer → inner.
        seq_loops = orders.reshape(n, L * D)
        seq_trips = np.take_along_axis(rel, orders, axis=2).reshape(n, L * D)

        tile_bytes: dict = {}
        capacity_fp = self._capacity(T, tile_bytes, orders)   # [n, L]
        overflow = np.clip(1.0 - self.capacity[None, :] / np.maximum(capacity_fp, 1e-30), 0.0, None)
        spill = np.clip(capacity_fp / self.capacity[None, :] - 1.0, 0.0, None).max(axis=1)
        double_buffered = 2.0 * capacity_fp <= self.capacity[None, :]

        # Occupancy: parallel tiles at the distribution level spread over the units.
        units = compute.units
        items = np.prod(np.where(parallel, counts[:, self.dist_level, :], 1.0), axis=1)
        waves = np.ceil(items / units)
        occupancy = items / (waves * units)
        active = units * occupancy

        inner_order = orders[:, L - 1, :]
        rows = np.arange(n)
        clock = target.clock_ghz * 1e9
        bw = self.bw[None, :] * np.where(self.mem_per_unit[None, :], active[:, None], 1.0)
        bytes_by_level = np.zeros((n, M))
        level_time = np.zeros((n, M))
        time_s = np.zeros(n)
        compute_s = np.zeros(n)
        mac_points = 0.0
        useful = np.zeros(n)                  # MAC positions doing work, for pe_util
        offered = np.zeros(n)
        vector_ops = 0.0
        datapath_bytes = np.zeros((n, len(self.statements), M))
        # Statements run as a sequence of nests over the same tiles; their times add. An
        # in-place epilogue instead runs on each anchor tile as it completes, so its work and
        # traffic overlap the anchor's: the two share one max(busy, transfers) bound.
        group_busy = np.zeros(n)
        group_levels = np.zeros((n, M))
        level_bw_s = np.zeros((n, M))
        level_lat_s = np.zeros((n, M))
        serial_total = np.zeros(n)
        cold_total = np.zeros(n)
        drain_total = np.zeros(n)
        stream_total = np.zeros(n)
        compute_by_unit: dict[str, np.ndarray] = {}
        anchor_unit = datapath_of(compute, self.statements[self.kernel.anchor]).unit
        overlap = self._epilogue_overlap(double_buffered)      # [n] bool
        beside: dict[str, np.ndarray] = {}    # in-place epilogues' compute on other datapaths
        beside_tail = np.zeros(n)             # ... their last output tile's, which nothing hides
        # nests of their own on other datapaths (online softmax's exp): their time beyond their
        # compute per datapath, and their whole time
        apart: dict[str, np.ndarray] = {}
        apart_total = np.zeros(n)
        for si, st in enumerate(self.statements):
            if si in self.computed:
                continue      # costed as its own nest below
            st_bytes = np.zeros((n, M))
            read_bytes = np.zeros((n, M))     # reads into double-buffered levels (their load chain)
            serial_bytes = np.zeros((n, M))   # traffic into levels that cannot double-buffer
            events = np.zeros((n, L))         # tile loads into each level (a latency each)
            cold_bytes = np.zeros((n, M))     # first input tiles into double-buffered levels
            drain_bytes = np.zeros((n, M))    # last output tiles out of them, per destination
            event_src = {}
            present_seq = st.present[seq_loops]
            tiles_at = np.prod(counts[:, :, st.present_loops], axis=2)       # [n, L] its tiles per level
            trips = np.where(present_seq, seq_trips, 1.0)
            # The datapath tile: PE array on the mapped loops, or one vector on the
            # vectorised loop (the innermost present loop unless annotated).
            unit = np.ones((n, D), dtype=np.int64)
            dp = datapath_of(compute, st)
            width = dp.width
            if dp.on_array:
                for loop, along in st.array_units:
                    unit[:, loop] = along
            else:
                pres_inner = st.present[inner_order]
                last = D - 1 - np.argmax(pres_inner[:, ::-1], axis=1)
                vec_loop = inner_order[rows, last]
                ok = (vectorize >= 0) & st.present[np.clip(vectorize, 0, D - 1)]
                vec_loop = np.where(ok, vectorize, vec_loop)
                unit[rows, vec_loop] = width
            dp_pieces = sum(m * np.ceil(x / unit - 1e-9) for x, m in zip(piece_len, piece_mult))
            dp_counts = np.where(st.present, dp_pieces, 1.0)  # [n, D]
            passes = np.prod(dp_counts, axis=1) * st.local_points
            if not dp.on_array and not st.reduce and not st.mac:
                # An elementwise statement streams its tile's elements through the lanes as
                # one flat run (a fused epilogue over a 2-wide output tile still fills them):
                # ceil(tile points / lanes) passes per tile, not per innermost row.
                inner_counts = np.where(st.present, counts[:, L - 1, :], 1.0)
                tile_points = np.prod(np.where(st.present, E / inner_counts, 1.0), axis=1)
                passes = np.prod(inner_counts, axis=1) * np.ceil(tile_points / width - 1e-9) * st.local_points
            # A `where` domain: only its non-empty tiles run (their fraction per level)
            kept = st.domain.kept(T) if st.domain is not None else None
            if kept is not None:
                passes = passes * kept[:, L - 1]
            dp_rel = dp_counts / np.where(st.present, counts[:, L - 1, :], 1.0)
            dp_loops = np.concatenate([seq_loops, inner_order], axis=1)
            dp_mean = E / dp_counts
            # Operands reach the datapath per pass; the vector unit beside a PE array keeps a
            # window's taps in registers instead: along a reduction loop that shares an input
            # index with the vector loop (a depthwise conv's s in X[.., w + s]), the lanes shift
            # one loaded row rather than reloading it from the scratchpad, and the partial sums
            # stay in registers across it. (SIMT lanes and the host's cores already read their
            # operands from a register level of their own, which the tiles model.)
            ts_rel, ts_counts, ts_mean = dp_rel, dp_counts, dp_mean
            if st.window is not None:
                wmask = st.window[vec_loop] & st.present                      # [n, D]
                inner = np.where(st.present, counts[:, L - 1, :], 1.0)
                ts_counts = np.where(wmask, inner, dp_counts)
                ts_rel = np.where(wmask, 1.0, dp_rel)
                ts_mean = E / ts_counts
            dp_trips = np.concatenate([trips, np.take_along_axis(ts_rel, inner_order, axis=1)], axis=1)
            # Laid out [loop sequence, n]: the running products and maxima over the sequence
            # (`_fetches_by_prefix`) then run over whole rows of candidates.
            trips_seq = np.ascontiguousarray(dp_trips.T)
            dp_prefix = np.ones((trips_seq.shape[0] + 1, n))      # products of its first trips
            np.cumprod(trips_seq, axis=0, out=dp_prefix[1:])
            dp_moving = trips_seq > 1.0                          # loops of one trip don't count
            dp_loops_seq = np.ascontiguousarray(dp_loops.T)
            cycles = passes * dp.pass_cycles
            fill = 0.0                        # cycles the array fills, nothing streaming
            if st.mac:
                if dp.on_array:
                    # The array fills and drains when its stationary operand (indexed by both
                    # mapped loops) changes. Inside an innermost tile the microkernel streams
                    # the other loops past each stationary block, so a tile costs one fill per
                    # distinct block it holds; across tiles a block that stays put costs none.
                    inner_tiles = tiles_at[:, L - 1]
                    fills = inner_tiles
                    stationary = _stationary_operand(st)
                    if stationary is not None:
                        weight = stationary.index_mask & st.present
                        blocks = np.prod(np.where(weight, dp_rel, 1.0), axis=1)
                        # Only a tile holding a single block (a piece no longer than the array
                        # along every weight loop: remainder tiles may, full ones not) can
                        # keep it for the next tile; a tile of several refills each.
                        one = sum(m * (x <= unit + 1e-9) for x, m in zip(piece_len, piece_mult)) \
                            / sum(piece_mult)
                        single = np.prod(np.where(weight, one, 1.0), axis=1)
                        kept_blocks = np.minimum(inner_tiles, _fetches_by_prefix(
                            stationary.index_mask[dp_loops_seq], dp_moving, dp_prefix, [L * D])[:, 0])
                        fills = inner_tiles * np.maximum(blocks - single, 0.0) + kept_blocks * single
                    if kept is not None:
                        fills = fills * kept[:, L - 1]
                    fill = _fill_cycles(compute, fills, cycles)
                    cycles = cycles + fill
                mac_points += st.points
                useful += st.points
                offered += passes * width
            else:
                vector_ops += st.points * max(1, st.flops_per_point)
            if not st.mac and self.host_scalar is not None:
                # Host C: libm calls run scalar (no -ffast-math, so no vector libm) and a
                # reduction read across rows runs as a chain of dependent ops.
                cycles = np.maximum(cycles, self.host_scalar[si])
                # An innermost loop that walks some access down a column: a cache line per point.
                trip = tiles[rows, vec_loop, L - 1].astype(float)
                strided = np.where(trip > 1, self.host_strided[si][vec_loop], 0.0)   # a trip of 1 is no loop
                if strided.any():
                    per_point = np.where(trip * strided <= HOST_L1_WAYS, HOST_STRIDED_POINT, HOST_STRIDED_CONFLICT)
                    cycles = np.where(strided > 0, np.maximum(cycles, st.points * per_point), cycles)
            if st.mac and compute.kind == "vector" and not compute.implicit_parallel:
                # A CPU running generated C (host): the nest's issue rate, not only the lanes.
                cycles = np.maximum(cycles, _host_issue_cycles(st, tiles, inner_order, vec_loop, rows, width,
                                                               compute.fma_units, micro_k))
                if pack_cycles is not None:
                    cycles = cycles + pack_cycles  # one element copied per cycle
            if st.rescale_key >= 0:
                # Online softmax: each innermost key tile first rescales the sums it holds
                # (every element of the target once per key tile over the run).
                elems = float(np.prod(E[0, np.asarray(st.out_mask, dtype=bool)]))
                cycles = cycles + elems * st.rescale_per_elem * counts[:, L - 1, st.rescale_key] \
                    / compute.vector_ops_per_cycle * (kept[:, L - 1] if kept is not None else 1.0)
            st_compute = cycles / active / clock

            for ai, a in enumerate(st.accesses):
                # Fetches and traffic at each holding level, then the datapath.
                fits, fetch_counts, read_share = [], [], []
                # an in-place row update touches one row of its tile (cold start, drain)
                row_share = [counts[:, h, st.domain.loops[0]] / self.extents[st.domain.loops[0]]
                             if isinstance(st.domain, RowTiles) else 1.0 for h in a.chain]
                fps = _footprint(a, mean_tile[:, list(a.chain), :].transpose(0, 2, 1)) if a.chain else None
                # the tile fetches into each holding level (the loops outside it), then the datapath
                by_level = _fetches_by_prefix(a.index_mask[dp_loops_seq], dp_moving, dp_prefix,
                                              [(h + 1) * D for h in a.chain] + [dp_trips.shape[1]])
                # its distinct tiles at each holding level
                distinct_at = np.prod(counts[:, list(a.chain), :][:, :, a.counted], axis=2)
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
                    # Loads that wait a latency: into a double-buffered level only the reads
                    # (an output's write-back is posted, and its first visit starts from zero,
                    # so only partial sums are read back); into others, every transfer.
                    loads = fetches if a.kind == "read" else np.where(a.kind == "accumulate", fetches - distinct, 0.0)
                    if isinstance(st.domain, RowTiles):   # only the tile holding the row is loaded
                        along = counts[:, h, st.domain.loops[0]]
                        loads, fetches = loads / along, fetches / along
                    fetch_counts.append(np.where(double_buffered[:, h], np.maximum(loads, 0.0), fetches))
                    read_share.append(1.0 if a.kind == "read" else np.maximum(loads, 0.0) / np.maximum(
                        2.0 * fetches - distinct, 1e-30) if a.kind == "accumulate" else 0.0)
                fetches = by_level[:, -1]
                distinct = np.prod(ts_counts[:, a.counted], axis=1)
                # A systolic array's partial sums are added into its accumulator as they arrive
                # (the banks read-modify-write in place: Gemmini's accumulate-on-write, the MXU's
                # result buffers): one transfer each on the port, none read back out.
                dp_kind = "write" if a.kind == "accumulate" and compute.kind == "systolic" else a.kind
                datapath = _traffic(dp_kind, _footprint(a, ts_mean), fetches, distinct)
                if kept is not None:
                    datapath = datapath * _kept_share(a, st.domain, kept[:, L - 1], fetches, distinct)
                # Spill: blend each level's traffic toward what streams through it.
                through = datapath
                eff = [None] * len(a.chain)
                for pos in range(len(a.chain) - 1, -1, -1):
                    h = a.chain[pos]
                    eff[pos] = fits[pos] + overflow[:, h] * (through - fits[pos])
                    through = eff[pos]
                inner_src = self.mem_index[a.chain[-1]] if a.chain else M - 1
                st_bytes[:, inner_src] += datapath
                datapath_bytes[:, si, inner_src] += datapath
                for pos, h in enumerate(a.chain):
                    src = M - 1 if pos == 0 else self.mem_index[a.chain[pos - 1]]
                    moved = eff[pos]
                    st_bytes[:, src] += moved
                    read_bytes[:, src] += np.where(double_buffered[:, h], moved * read_share[pos], 0.0)
                    serial_bytes[:, src] += np.where(double_buffered[:, h], 0.0, moved)
                    if a.kind == "read" and not a.internal:
                        # Cold start: the first tile of every input reaches every level
                        # before the first step computes (each active unit loads its own).
                        first = tile_bytes[si, ai][:, h] * (active if self.per_unit[h] else 1.0) * row_share[pos]
                        cold_bytes[:, src] += np.where(double_buffered[:, h], first, 0.0)
                    elif a.kind != "read" and not (a.internal and (pos == 0 or a.kind != "accumulate")):
                        # Drain: the last output tile leaves after the last step computes.
                        last = tile_bytes[si, ai][:, h] * (active if self.per_unit[h] else 1.0) * row_share[pos]
                        drain_bytes[:, src] += np.where(double_buffered[:, h], last, 0.0)
                    events[:, h] = np.maximum(events[:, h], fetch_counts[pos])
                    event_src[h] = src

            st_level_time = st_bytes / bw
            level_bw_s += st_level_time
            serial_time = (serial_bytes / bw).sum(axis=1)
            # Latency: one load in flight per level. Double-buffered loads hide it behind the
            # previous tile's work, so it only bounds the level's time (bytes/bw + loads x
            # latency); other loads wait in line with compute.
            # Each level keeps its own load in flight: levels fed by one source wait their
            # latencies side by side (the largest bounds), while their bytes share its channel.
            first_wait = np.zeros((n, M))
            src_lat = np.zeros((n, M))
            tail = np.full((n, M), np.inf)   # compute after a source's last load: its last tile's
            for h, src in event_src.items():
                par = active if self.per_unit[h] else 1.0
                lat = events[:, h] * self.latency_s[src] / par
                src_lat[:, src] = np.maximum(src_lat[:, src], np.where(double_buffered[:, h], lat, 0.0))
                # The units' first tiles are requested together, each waiting a whole latency;
                # only later loads overlap across units (latency / units each).
                first_wait[:, src] = np.maximum(first_wait[:, src], np.where(
                    double_buffered[:, h] & (events[:, h] > 0), self.latency_s[src] * (1.0 - 1.0 / par), 0.0))
                serial_time += np.where(double_buffered[:, h], 0.0, lat)
                tiles_h = tiles_at[:, h]
                tail[:, src] = np.where(double_buffered[:, h] & (events[:, h] > 0),
                                        np.minimum(tail[:, src], st_compute / tiles_h), tail[:, src])
            # ... and a load's latency overlaps the channel's other traffic (posted write-backs,
            # other levels' loads): a level's loads in a chain, its channel shared by all.
            st_level_time = np.maximum(st_level_time, read_bytes / bw + src_lat)
            serial_total += serial_time
            # Loads into double-buffered levels overlap the previous tile's compute, but the
            # first tiles have nothing to overlap: a source's cold loads queue on its channel
            # (bytes / bandwidth + one latency), and an inner level waits for its parent's.
            # Likewise the last output tiles drain after the last step (inner level to outer).
            cold_by_source = cold_bytes / bw + (cold_bytes > 0) * self.latency_s[None, :]
            cold = cold_by_source.sum(axis=1)
            # A level's loads begin once the levels outside it delivered their first tiles:
            # its bound waits for the cold start of every source outside it (memory order is
            # inner first, so the sources after it).
            outer_cold = np.cumsum(cold_by_source[:, ::-1], axis=1)[:, ::-1] - cold_by_source
            drain = (drain_bytes / bw).sum(axis=1)
            # Likewise the last tile computes after its loads are in (its drain is in the bytes).
            tail = np.where(np.isfinite(tail), tail, 0.0)
            st_level_time = st_level_time + np.where(st_level_time > 0, outer_cold + first_wait + tail, 0.0)
            if not st.in_place:   # an in-place epilogue's loads ride the anchor's (below)
                # `<level> latency`: what the level's bound adds to its bytes / bandwidth.
                level_lat_s += st_level_time - st_bytes / bw
            # A step lasts as long as its compute or its operands' streaming into the datapath
            # (the innermost levels' channels), whichever is longer: the part of the work
            # the cold start and the drain cannot overlap.
            stream = (datapath_bytes[:, si, :] / bw).max(axis=1)
            # While the array fills (the part no double buffering hides) nothing streams: the
            # operands' streaming waits through the fills.
            stream = stream + fill / active / clock
            step = np.maximum(st_compute, stream)
            if si == self.kernel.anchor:
                group_busy += step + serial_time + cold + drain
                stream_total += stream
                group_levels += st_level_time
                cold_total += cold
                drain_total += drain
            elif st.in_place:
                # Its transfers ride the anchor's pipeline (latency hidden, first tiles loaded
                # while the anchor's first tile computes). On the anchor's own datapath its
                # compute adds; on another one (the vector unit beside a PE array) it works on
                # each finished output tile while the anchor computes the next, where the
                # output's innermost level holds two: then only the last tile's epilogue adds.
                other = overlap & (dp.unit != anchor_unit)
                out_tiles = tiles_at[:, L - 1]
                beside[dp.unit] = beside.get(dp.unit, 0.0) + np.where(other, st_compute, 0.0)
                beside_tail += np.where(other, st_compute / out_tiles, 0.0)
                group_busy += np.where(other, 0.0, st_compute) + drain
                group_levels += st_bytes / bw
                drain_total += drain
            else:
                st_time = np.maximum(step + serial_time + cold + drain, st_level_time.max(axis=1))
                time_s += st_time
                if dp.unit != anchor_unit:     # its own nest on another datapath (see `apart` below)
                    apart[dp.unit] = apart.get(dp.unit, 0.0) + st_time - st_compute
                    apart_total += st_time
                stream_total += stream
                cold_total += cold
                drain_total += drain
            compute_s += st_compute
            compute_by_unit[dp.unit] = compute_by_unit.get(dp.unit, 0.0) + st_compute
            bytes_by_level += st_bytes
            level_time += st_level_time
        # The anchor's datapath alone (what producers on other datapaths overlap, below) ...
        anchor_only = time_s + np.maximum(group_busy, group_levels.max(axis=1))
        if beside:
            group_busy = np.maximum(group_busy, np.max(np.stack([np.broadcast_to(v, (n,)) for v in beside.values()]),
                                                       axis=0)) + beside_tail
        time_s += np.maximum(group_busy, group_levels.max(axis=1))
        producer_energy = np.zeros(n)
        if self.producers:
            # Producer and consumer nests alternate tile by tile: where they run on different
            # datapaths (a PE array, a vector unit) one tile's producer overlaps the previous
            # tile's consumer, so the kernel takes its busiest datapath's nests' times added
            # up, or its busiest channel's traffic, whichever is longer (the simulator replays
            # each nest and combines them the same way).
            # ... and its statements on other datapaths (epilogues beside it or after it) keep
            # those busy too: a producer there adds to them. A statement running a nest of its
            # own in the tiles on another datapath (the max, exp and sums of an online softmax
            # on the vector unit between the PE array's scores and weighted sum) is in that
            # pipeline too: it keeps its datapath busy for its whole nest, not the anchor's.
            busy = {anchor_unit: anchor_only - apart_total}
            for u, v in compute_by_unit.items():
                if u != anchor_unit:
                    busy[u] = busy.get(u, 0.0) + v + apart.get(u, 0.0)
        for producer in self.producers:      # computed at the anchor's tiles: its own nest, recomputed
            cost, mult = producer.evaluate(tiles, orders, counts, parallel)
            unit = datapath_of(compute, producer.model.statements[0]).unit
            busy[unit] = busy.get(unit, 0.0) + cost.time_s * mult
            for u, v in (cost.compute_by_unit or {}).items():
                compute_by_unit[u] = compute_by_unit.get(u, 0.0) + v * mult
                if u != unit:           # its own statements on other datapaths (epilogues beside it)
                    busy[u] = busy.get(u, 0.0) + v * mult
            compute_s += cost.compute_s * mult
            bytes_by_level += cost.bytes * mult[:, None]
            level_time += cost.level_time_s * mult[:, None]
            # its compute energy (its traffic's is in bytes_by_level's, below)
            producer_energy += (cost.energy_j - (cost.bytes * self.energy_per_byte[None, :]).sum(axis=1)) * mult
        if self.producers:
            time_s = np.maximum(np.max(np.stack([np.broadcast_to(v, (n,)) for v in busy.values()]), axis=0),
                                level_time.max(axis=1))
        if self.host is not None:   # host C: the paths that replace the nest (packed, direct rows)
            time_s = self.host.seconds(self, schedule_tiles, parallel, time_s)
            # ... which still move the kernel's inputs and outputs through DRAM once (a GEMV's
            # 64 MB of pre-packed weights do not stay in cache between calls).
            time_s = np.maximum(time_s, self.compulsory_bytes / self.bw[-1])
        energy = (bytes_by_level * self.energy_per_byte[None, :]).sum(axis=1) \
            + (mac_points + vector_ops) * target.energy_pj_per_mac * 1e-12
        energy = energy + producer_energy
        dram = bytes_by_level[:, -1]
        flops = np.full(n, self.flops)
        return BatchCost(
            level_names=self.level_names, time_s=time_s, cycles=time_s * clock, flops=flops,
            bytes=bytes_by_level, energy_j=energy,
            bw_util=dram / np.maximum(time_s, 1e-30) / self.bw[-1],
            occupancy=occupancy,
            pe_util=np.where(offered > 0, useful / np.maximum(offered, 1e-30), 1.0),
            arithmetic_intensity=flops / np.maximum(dram, 1e-30),
            spill_ratio=spill, compute_s=compute_s, level_time_s=level_time,
            double_buffered=double_buffered, datapath_bytes=datapath_bytes,
            level_bw_s=level_bw_s, level_latency_s=level_lat_s, serial_s=serial_total, cold_s=cold_total,
            drain_s=drain_total, stream_s=stream_total,
            compute_by_unit=compute_by_unit,
        )


@dataclass(frozen=True)
class _HeldRegion:
    """A computed-at tensor's region, held on chip at its compute point's level `level` from
    the statement that writes it (`start`) to its last reader (`end`, statement indices).
    `dims`: per dimension, (anchor loop indices, their scales, fixed length) — its length in
    a tile is sum(scale * tile) + fixed, clipped to [1, extent]. `buffer` names the tensor
    whose buffer it overwrites (an elementwise step over a same-shaped region read last
    there: exp(S - M) in place of S), or None."""

    tensor: str
    level: int
    loop: int               # the compute loop (an anchor loop index)
    start: int
    end: int
    dims: tuple[tuple[tuple[int, ...], tuple[int, ...], int, int], ...]
    elem_bytes: int
    buffer: str | None


def _held_regions(kernel: Kernel, target: Target, index: Mapping[str, int], elem_bytes) -> list[_HeldRegion]:
    """The computed-at tensors of `kernel` as regions held on chip (see `_HeldRegion`): where
    a consumer reads a whole row of scores, that row stays on chip at the compute point, and
    a tile too large for the level spills (the model's spill, the search's capacity bound)."""
    from ..ir.loopnest import regions

    levels = target.tiling_levels
    computed = kernel.computed_at()
    reach = regions(kernel)
    statements = kernel.statements
    last_read = {}
    for c, st in enumerate(statements):
        for a in st.reads():
            last_read[a.tensor] = c
    out: list[_HeldRegion] = []
    owner: dict[str, str] = {}       # tensor -> the buffer it lives in
    for si in sorted(computed):         # one writer each (`regions` refuses more)
        st = statements[si]
        loop, level = computed[si]
        h = levels.index(level) if level in levels else len(levels) - 1
        dims = []
        for idx in st.target_indices:
            r = reach[si][idx.single_loop]
            ext = st.extents[idx.single_loop]
            if not r.terms:
                dims.append(((), (), max(1, min(ext, r.hi) - max(0, r.lo)), ext))
            else:
                dims.append((tuple(index[a] for a, _ in r.terms), tuple(k for _, k in r.terms), r.hi - r.lo, ext))
        buffer = None
        if st.reduce is None:
            for a in st.reads():
                if a.tensor in owner and a.indices == st.target_indices and last_read.get(a.tensor) == si \
                        and kernel.tensor(a.tensor).shape == kernel.tensor(st.target).shape:
                    buffer = owner[a.tensor]
                    break
        owner[st.target] = buffer or st.target
        out.append(_HeldRegion(st.target, h, index[loop], si, last_read.get(st.target, si), tuple(dims),
                               elem_bytes(kernel.tensor(st.target).dtype), buffer))
    return out


def _held_peak(held: list[_HeldRegion], T: np.ndarray, orders, extents) -> np.ndarray:
    """[n, L] the most bytes the held regions take at once at each level, statement by
    statement (a region from its writer to its last reader; one written in place of another
    takes no new bytes). A region's loop that comes after the compute point in the order at
    its level spans the tile one level out (the producers run over all of it there)."""
    n, D, L = T.shape
    sizes: dict[str, np.ndarray] = {}
    at_point: dict[tuple[int, int], np.ndarray] = {}     # (level, compute loop) -> [n, D] tiles there
    for r in held:
        if (r.level, r.loop) not in at_point:
            at_point[r.level, r.loop] = (T[:, :, r.level] if orders is None
                                         else _tiles_at_point(T, _inside_point(orders, r.level, r.loop), r.level,
                                                              extents))
        point = at_point[r.level, r.loop]
        length = np.ones(n)
        for loops, scales, fixed, ext in r.dims:
            span = np.full(n, float(fixed))
            for a, k in zip(loops, scales):
                span = span + k * point[:, a]
            length = length * np.clip(span, 1.0, ext)
        sizes[r.tensor] = length * r.elem_bytes
    out = np.zeros((n, L))
    steps = sorted({r.start for r in held})
    for s in steps:
        live = [r for r in held if r.start <= s <= r.end]
        buffers: dict[tuple[str, int], np.ndarray] = {}
        for r in live:
            key = (r.buffer or r.tensor, r.level)
            buffers[key] = np.maximum(buffers.get(key, 0.0), sizes[r.tensor])
        now = np.zeros((n, L))
        for (_, level), b in buffers.items():
            now[:, level] += b
        out = np.maximum(out, now)
    return out


def _inside_point(orders: np.ndarray, at: int, loop: int) -> np.ndarray:
    """[n, D] each anchor loop comes at or before the compute loop `loop` in the order at level `at`."""
    position = np.argsort(orders[:, at, :], axis=1)
    return position <= position[:, [loop]]


def _tiles_at_point(tiles: np.ndarray, inside: np.ndarray, at: int, extents) -> np.ndarray:
    """[n, D] each anchor loop's tile at a compute point at level `at`: its tile at that level
    where it comes at or before the compute loop in the order there (`inside`, from
    `_inside_point`), else one level out (its whole extent above the outermost level)."""
    outer = tiles[:, :, at - 1] if at else np.asarray(extents, dtype=float)[None, :]
    return np.where(inside, tiles[:, :, at], outer)


def _producer_groups(kernel: Kernel) -> list[tuple[int, ...]]:
    """The computed-at statements as nests: each contraction (or first statement) with the
    elementwise statements after it that read it (its epilogue: applied to its tile on chip,
    as in any fused kernel), in program order."""
    groups: list[list[int]] = []
    for i in sorted(kernel.computed_at()):
        st = kernel.statements[i]
        previous = groups[-1] if groups else None
        reads = {a.tensor for a in st.reads()}
        if (previous is not None and st.reduce is None and not st.reduction_loops and previous[-1] == i - 1
                and kernel.statements[previous[-1]].target in reads):
            previous.append(i)
        else:
            groups.append([i])
    return [tuple(g) for g in groups]


class _ProducerModel:
    """Statements computed at the anchor's tiles (a contraction and its epilogue), costed as
    their own nest over their region (see the module docstring, "Compute at")."""

    def __init__(self, kernel: Kernel, group: tuple[int, ...], target: Target, anchor_index: Mapping[str, int]):
        from ..ir.loopnest import regions

        index = group[0]
        self.group = group
        stmt = kernel.statements[index]
        self.loop, self.level = kernel.computed_at()[index]
        self.levels = target.tiling_levels
        self.units = target.compute.units
        self.kernel = _producer_kernel(kernel, group)
        self.model = kernel_model(self.kernel, target)
        self.extents = np.array([l.extent for l in stmt.loops], dtype=float)
        self.anchor_extents = np.array([l.extent for l in kernel.loops], dtype=float)
        self.anchor_index = dict(anchor_index)
        # Per own loop: (primary anchor index or -1, its scale, lo, hi) — other region terms
        # run whole (an untiled 1x1 kernel window): they widen the region by scale*extent.
        self.spans = []
        for l in stmt.loops:
            r = regions(kernel)[index][l.name]
            if not r.terms:
                self.spans.append((-1, 0, r.lo, r.hi))
                continue
            primary = max(r.terms, key=lambda t: t[1] * kernel.extents[t[0]])
            hi = r.hi + sum(k * kernel.extents[a] for a, k in r.terms if (a, k) != primary)
            self.spans.append((anchor_index[primary[0]], primary[1], r.lo, hi))
        self.followed = {a for a, _, _, _ in self.spans if a >= 0}
        # Inside the region it runs as the tiling search schedules it alone (cached by structure).
        own = self.own = _searched_alone(self.kernel, target)
        inner = own.tile_sizes(self.levels)
        self.inner_tiles = np.array([inner[l.name] for l in stmt.loops], dtype=float)   # [D_P, L]
        _, orders, self.parallel, self.vectorize = self.model.schedule_arrays(own)
        # A region is not the whole nest: fewer rows may stream past each weight block, so the
        # loop order alone may refill the PE array at every tile. Its inner orders are its own
        # and, at the innermost level, each loop the region follows moved innermost; each
        # candidate takes the fastest (the simulator replays the same choice).
        # (Only on a PE array, whose stationary blocks refill: elsewhere the order moves no work.)
        on_array = datapath_of(target.compute, self.model.statements[0]).on_array
        followed_own = [d for d, (a, _, _, _) in enumerate(self.spans) if a >= 0 and self.extents[d] > 1 and on_array]
        self.orders = _order_variants(orders[0], followed_own, MAX_PRODUCER_ORDERS)   # [K, L, D_P]
        alone = self.model.evaluate_batch(*self.model.schedule_arrays(own))
        self.alone_compute = float(alone.compute_s[0])

    def _cost(self, sub: np.ndarray, order: np.ndarray) -> "BatchCost":
        n = len(sub)
        return self.model.evaluate_batch(sub, np.broadcast_to(order, (n,) + order.shape), self.parallel,
                                         np.broadcast_to(self.vectorize, (n,)))

    def _choose(self, sub: np.ndarray) -> tuple["BatchCost", np.ndarray]:
        """(cost, index into self.orders) per row of `sub`: its own order, or where that
        computes much slower than it does alone (the order refills the array over this
        region), the fastest of the variants. Each row's choice depends on that row alone."""
        own = self._cost(sub, self.orders[0])
        choice = np.zeros(len(sub), dtype=np.int64)
        if len(self.orders) == 1:
            return own, choice
        # (a region's nest is costed over the producer's whole extents, as alone: the two compare)
        poor = np.nonzero(own.compute_s > POOR_ORDER * self.alone_compute)[0]
        if not len(poor):
            return own, choice
        costs = [_rows(own, poor)] + [self._cost(sub[poor], o) for o in self.orders[1:]]
        best = np.argmin(np.stack([c.time_s for c in costs]), axis=0)
        choice[poor] = best
        return _merge(own, _pick(costs, best), poor), choice

    def evaluate(self, tiles, orders, counts, parallel=None) -> tuple["BatchCost", np.ndarray]:
        """(its cost over its whole region once, the recompute factor) per candidate.
        Candidates that differ only outside its region (the anchor's inner tiles, its
        orders) give it the same region tiles: each distinct one is costed once (a chain's
        tiling search asks ~5x as many rows as there are distinct regions)."""
        sub, mult = self.region_tiles(tiles, orders, counts, parallel)
        n = len(sub)
        if n < 2:
            return self._choose(sub)[0], mult
        distinct, first, inverse = np.unique(sub.reshape(n, -1), axis=0, return_index=True, return_inverse=True)
        if len(distinct) == n:
            return self._choose(sub)[0], mult
        return _rows(self._choose(sub[first])[0], inverse.reshape(-1)), mult

    def schedule(self, sub: np.ndarray) -> Schedule:
        """Its nest as a schedule of its own kernel, tiles `sub` [loops, levels], in the inner
        order the model picks for them (what the simulator replays)."""
        best = int(self._choose(sub[None])[1][0])
        order = {lv: tuple(self.kernel.loops[d].name for d in self.orders[best][h]) for h, lv in enumerate(self.levels)}
        return Schedule(self.kernel, tiles={l.name: {lv: int(sub[d, h]) for h, lv in enumerate(self.levels)}
                                            for d, l in enumerate(self.kernel.loops)},
                        order=order, annotations=self.own.annotations, levels=self.levels)


    def carries(self, parallel) -> np.ndarray:
        """[n] bool: whether its halo along the compute loop is carried from tile to tile —
        where that loop runs in order on one unit; spread over several units, each tile
        recomputes its halo (`parallel` [n, D] as the model normalises it; None: carried)."""
        loop = self.anchor_index[self.loop]
        if parallel is None or self.units <= 1:
            return np.ones(len(parallel) if parallel is not None else 1, dtype=bool)
        return ~np.asarray(parallel, dtype=bool)[:, loop]

    def region_tiles(self, tiles, orders, counts, parallel=None) -> tuple[np.ndarray, np.ndarray]:
        """Its tiles [n, loops, levels] over the region of each candidate, and the recompute."""
        n, D, L = tiles.shape
        carried = np.broadcast_to(self.carries(parallel), (n,))
        levels = self.levels
        at = levels.index(self.level) if self.level in levels else L - 1
        loop = self.anchor_index[self.loop]
        # Each anchor loop's tile (and tile count) at the compute point: at its level when it
        # comes at or before the compute loop in the order there, else one level out.
        inside = _inside_point(orders, at, loop)                               # [n, D]
        outer = max(at - 1, 0)
        T_point = _tiles_at_point(tiles, inside, at, self.anchor_extents)
        n_point = np.where(inside, counts[:, at, :], counts[:, outer, :] if at else 1.0)
        sub = np.empty((n, len(self.spans), L))
        mult = np.ones(n)
        for d, (a, k, lo, hi) in enumerate(self.spans):
            ext = self.extents[d]
            if a < 0:
                length = np.full(n, float(max(0, min(ext, hi) - max(0, lo))))
                # not split by the consumer's tiles: tiled inside as it is alone
                sub[:, d, :] = np.minimum(length[:, None], self.inner_tiles[d][None, :])
                continue
            region = lambda t: np.clip(k * t + hi - lo, 1, ext)               # noqa: E731
            sub[:, d, :] = np.minimum(region(tiles[:, a, :].astype(float)), self.inner_tiles[d][None, :])
            sub[:, d, : at + 1] = region(T_point[:, a])[:, None]
            # Rows computed over all tiles at the point: each tile's region, the borders clipped;
            # a carried halo once per sweep of the compute loop (its parent tiles).
            Ea = self.anchor_extents[a]
            halos = n_point[:, a]
            if a == loop:
                sweeps = counts[:, at - 1, a] if at else np.ones(n)
                halos = np.where(carried, sweeps, halos)
            total = k * Ea + halos * (hi - lo) - max(0, -lo) - np.maximum(0.0, k * Ea + hi - ext)
            mult *= np.clip(total, 1.0, None) / ext
        for a in range(D):       # loops its region does not follow: it runs again in each of their tiles
            if a not in self.followed:
                mult *= n_point[:, a]
        sub = np.maximum(np.minimum.accumulate(np.floor(sub), axis=2), 1).astype(np.int64)
        return sub, mult


def carried_halos(schedule: Schedule, target) -> set[int]:
    """Statements of `schedule`'s kernel computed at its tiles whose halo along the compute
    loop is carried from tile to tile (`_ProducerModel.carries`), for the code listings."""
    target = load_target(target)
    model = kernel_model(schedule.kernel, target)
    if not model.producers:
        return set()
    _, _, parallel, _ = model.normalise(*model.schedule_arrays(schedule))
    return {i for p in model.producers if bool(p.carries(parallel)[0]) for i in p.group}


MAX_PRODUCER_ORDERS = 4     # inner orders tried for a producer nest over its region
POOR_ORDER = 1.5            # ... where its own order computes this much slower than alone


def _order_variants(order: np.ndarray, loops: list[int], limit: int) -> np.ndarray:
    """[K, L, D] orders: `order` [L, D] itself, then each of `loops` moved innermost at the
    innermost level; at most `limit`, no repeats."""
    out = [order]
    seen = {order.tobytes()}
    h = order.shape[0] - 1
    for d in loops:
        v = order.copy()
        v[h] = np.concatenate([[x for x in order[h] if x != d], [d]])
        if v.tobytes() not in seen and len(out) < limit:
            seen.add(v.tobytes())
            out.append(v)
    return np.stack(out)


def _rows(cost: "BatchCost", idx: np.ndarray) -> "BatchCost":
    """The BatchCost of candidates `idx` of `cost`."""
    out = {}
    for f in BatchCost.__dataclass_fields__:
        v = getattr(cost, f)
        if isinstance(v, np.ndarray):
            out[f] = v[idx]
        elif isinstance(v, dict):
            out[f] = {k: np.broadcast_to(x, (len(cost.time_s),))[idx] for k, x in v.items()}
        else:
            out[f] = v
    return BatchCost(**out)


def _merge(cost: "BatchCost", part: "BatchCost", idx: np.ndarray) -> "BatchCost":
    """`cost` with candidates `idx` replaced by the rows of `part`."""
    n = len(cost.time_s)
    out = {}
    for f in BatchCost.__dataclass_fields__:
        v, w = getattr(cost, f), getattr(part, f)
        if isinstance(v, np.ndarray):
            v = v.copy()
            v[idx] = w
            out[f] = v
        elif isinstance(v, dict):
            merged = {}
            for k, x in v.items():
                x = np.array(np.broadcast_to(x, (n,)), dtype=float)
                x[idx] = w[k]
                merged[k] = x
            out[f] = merged
        else:
            out[f] = v
    return BatchCost(**out)


def _pick(costs: list["BatchCost"], best: np.ndarray) -> "BatchCost":
    """One BatchCost of candidate i's row from costs[best[i]]."""
    rows = np.arange(len(best))
    out = {}
    for f in BatchCost.__dataclass_fields__:
        first = getattr(costs[0], f)
        if isinstance(first, np.ndarray):
            out[f] = np.stack([getattr(c, f) for c in costs])[best, rows]
        elif isinstance(first, dict):
            out[f] = {k: np.stack([np.broadcast_to(getattr(c, f)[k], (len(best),)) for c in costs])[best, rows]
                      for k in first}
        else:
            out[f] = first
    return BatchCost(**out)


# The tiling search (rules/tiling.py, a layer above) registers itself here: a producer nest
# is scheduled inside its region as that search schedules it alone.
_PRODUCER_SEARCH = []


def register_producer_search(fn) -> None:
    """`fn(kernel, target) -> Schedule | None`: how producer nests are scheduled alone."""
    _PRODUCER_SEARCH[:] = [fn]


@cached("cost.producer_alone", 256)
def _searched_alone(kernel: Kernel, target: Target) -> Schedule:
    """A producer nest's schedule alone: the registered search's (the package imports it),
    the textbook tiles where it finds none that fits."""
    found = _PRODUCER_SEARCH[0](kernel, target) if _PRODUCER_SEARCH else None
    return found if found is not None else textbook_schedule(kernel, target)


def _producer_kernel(kernel: Kernel, group: tuple[int, ...]) -> Kernel:
    """Statements `group` of `kernel` as a kernel of their own, anchored at the first; what
    they write and the kernel's own tensors they read are internal (never in DRAM)."""
    from ..ir.schedule import _map_loops

    statements = tuple(kernel.statements[i] for i in group)
    written = [st.target for st in statements]
    reads = [a.tensor for st in statements for a in st.reads()]
    names = tuple(dict.fromkeys(reads + written))
    on_chip = set(kernel.internals) | set(written)
    maps = _map_loops(statements, 0)
    return Kernel(name=f"{kernel.name}.{'_'.join(written)}", ops=tuple(written), statements=statements,
                  loops=statements[0].loops, inputs=tuple(t for t in dict.fromkeys(reads) if t not in written),
                  outputs=(), internals=tuple(t for t in names if t in on_chip),
                  tensors=tuple(kernel.tensor(t) for t in names), anchor=0,
                  loop_maps=tuple(tuple(sorted(m.items())) for m in maps))


def _fill_cycles(compute, fills, stream_cycles):
    """Cycles a systolic array spends filling/draining its stationary blocks (the target's
    `fill_cycles` each). With double-buffered weights each fill hides behind the previous
    block's stream, but the first."""
    fill = compute.fill_cycles
    if not compute.double_buffered_weights:
        return fills * fill
    per_block = stream_cycles / np.maximum(fills, 1.0)
    return np.where(fills > 0, fill + np.maximum(fills - 1.0, 0.0) * np.maximum(fill - per_block, 0.0), 0.0)


def _stationary_operand(st: "_StatementModel") -> "_AccessModel | None":
    """The operand held in a systolic array: the read indexed by both mapped loops."""
    if st.row_loop < 0:
        return None
    return next((a for a in st.accesses if a.kind == "read" and a.index_mask[st.row_loop]
                 and a.index_mask[st.col_loop]), None)


def _fetches_by_prefix(index_seq: np.ndarray, moving: np.ndarray, upto: np.ndarray,
                       prefixes: list[int]) -> np.ndarray:
    """Times a tile is fetched at the level holding each prefix of the loop sequence (its first
    S loops, for each S in `prefixes`): the product of the prefix's trips except the innermost
    run of loops that do not index the tensor (loops of one trip don't count), i.e. its trips
    up to its last loop indexing the tensor. All [sequence, n]: `index_seq` whether each loop
    indexes the tensor, `moving` whether its trip exceeds one, `upto[k]` the product of the
    first k trips (shared by a statement's accesses). Returns [n, len(prefixes)]."""
    S, n = moving.shape
    position = np.where(index_seq & moving, np.arange(1, S + 1, dtype=np.int32)[:, None], np.int32(0))
    out = np.ones((n, len(prefixes)))
    last = np.zeros(n, dtype=np.int32)     # the last breaking loop (1-based) seen so far
    seen = 0
    candidates = np.arange(n)
    for k in sorted(range(len(prefixes)), key=prefixes.__getitem__):
        p = prefixes[k]
        if p > seen:
            last = np.maximum(last, position[seen:p].max(axis=0))
            seen = p
        if p:
            out[:, k] = upto[last, candidates]
    return out


def _footprint(a: _AccessModel, tile: np.ndarray) -> np.ndarray:
    """Bytes of X's region an access touches over a tile ([n, D] sizes; or [n, D, H]: H
    tiles per row, one footprint each, [n, H])."""
    # Row by row over the (few) loops each index uses: cheaper than a matmul on [n, D].
    out = None
    less = tile - 1.0          # each loop's span past its first point
    for r, terms in enumerate(a.terms):
        extent = None
        for d, c in terms:
            part = less[:, d] if c == 1.0 else c * less[:, d]
            extent = part if extent is None else extent + part
        base = a.local_add[r] + 1.0
        if extent is None:
            extent = np.full(tile.shape[:1] + tile.shape[2:], min(base, a.dims[r]))
        else:
            extent = np.minimum(extent + base, a.dims[r])
        out = extent if out is None else out * extent
    if out is None:
        return np.full(tile.shape[:1] + tile.shape[2:], float(a.elem_bytes))
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


def _systolic_mapping(stmt, loop_map, index, compute) -> tuple[tuple[tuple[int, int], ...], int] | None:
    """((anchor loop, PE rows it takes), ...) for the rows, and the anchor loop on the PE
    columns, for a contraction; None when the array cannot run it (it then runs on the
    vector unit).

    The weight is the operand with the fewest output loops (B[k, j], W[f, c, r, s]); its
    largest output loop that the other operand does not index goes on the columns (each
    column holds its own weights and sees the same streamed input). Weight-stationary puts
    its largest reduction loop shared with the other operand on the rows (the TPU and
    Gemmini default); output-stationary puts the other operand's largest output loop there.
    Where that loop is shorter than the rows and the target has `im2col`, the next longest
    loops of the same kind share the rows (a 3-channel stem conv's (c, r, s): 27 rows of 32,
    where c alone fills 3; a 16-channel 3x3 conv's (c, r) 16 x 2).
    A depthwise convolution (P[c, h, w] += X[c, h + r, w + s] * W[c, r, s]) has no such
    column loop: every output loop of the weight also indexes the input, so a column would
    need its own input stream — systolic accelerators run it on their vector unit.
    """
    ext = stmt.extents
    # (ordered: on a tie in extent the first loop in program order wins, in every process —
    # a set's order follows the string hash seed)
    outs = dict.fromkeys(l.name for l in stmt.output_loops)
    reads = stmt.reads()
    weight_idx = _weight_read(stmt)
    if weight_idx is None:
        return None
    weight_loops = [l for a in reads[weight_idx].indices for l in a.loops]
    other_loops = dict.fromkeys(l for a in reads[1 - weight_idx].indices for l in a.loops)
    col_choices = [l for l in weight_loops if l in outs and l not in other_loops]
    shared_reductions = [l for l in weight_loops if l not in outs and l in other_loops]
    if not col_choices or not shared_reductions:
        return None
    col = max(col_choices, key=lambda l: ext[l])
    if compute.dataflow == "output_stationary":
        choices = [l for l in other_loops if l in outs and l != col and l not in weight_loops]
        choices = choices or [l for l in outs if l != col]
    else:
        choices = shared_reductions
    choices = choices or [l for l in ext if l != col] or [col]
    ranked = sorted(dict.fromkeys(choices), key=lambda l: -ext[l])   # stable: first listed on ties
    row = ranked[0]
    if row not in loop_map or col not in loop_map:
        return None     # a loop local to this statement (no kernel loop to tile): not on the array
    rows = [(index[loop_map[row]], compute.pe_rows)]
    if compute.im2col and ext[row] < compute.pe_rows:
        free = compute.pe_rows // ext[row]
        rows = [(index[loop_map[row]], ext[row])]
        for loop in ranked[1:]:
            if free < 2:
                break
            if loop not in loop_map or ext[loop] < 2:
                continue
            take = min(ext[loop], free)
            rows.append((index[loop_map[loop]], take))
            free //= take
    return tuple(rows), index[loop_map[col]]


def _weight_read(stmt) -> int | None:
    """Which of a contraction's two reads is its weight (target role `weights`): the one with
    fewer output loops (B[k, j] of A·B, W[f, c, r, s] of a conv), the second on a tie."""
    outs = {l.name for l in stmt.output_loops}
    reads = stmt.reads()
    if len(reads) != 2:
        return None
    return min(range(2), key=lambda i: (len([l for a in reads[i].indices for l in a.loops if l in outs]), -i))


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
    if compute.kind == "systolic":
        unit = "vector unit"
    elif compute.kind == "simt":
        unit = "SIMT lanes"
    else:
        unit = "vector lanes" if compute.implicit_parallel else "cores"
    if st.mac and compute.kind != "systolic":   # SIMT / SIMD multiply-add pipes
        return Datapath(False, unit, width, compute.spatial_width / compute.macs(st.dtype))
    # A systolic target's vector unit runs a multiply-add as one FMA; other work costs its
    # operations per point.
    ops = 1.0 if st.mac else max(1, st.flops_per_point)
    return Datapath(False, unit, width, width * ops / compute.vector_ops_per_cycle)


# --------------------------------------------------------------------------- public API


@cached("cost.kernel_model", 256)
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


_MODELS = LRU("cost.kernel_model_by_structure", 512)


def evaluate_batch(kernel: Kernel, target, tiles, orders=None, parallel=None, vectorize=None) -> BatchCost:
    """Score many schedules of one kernel at once.

    tiles: int [n, loops, levels] (kernel.loops order × target.tiling_levels, outer → inner;
    a value <= 0 keeps the enclosing tile); orders: int [n, loops] (one permutation of loop
    indices, outer → inner, for every level) or [n, levels, loops]; parallel: bool [n, loops]
    (default: the anchor's output loops); vectorize: int [n] loop index (-1: innermost loop).
    """
    return kernel_model(kernel, load_target(target)).evaluate_batch(tiles, orders, parallel, vectorize)


def evaluate(schedule: Schedule, target) -> KernelCost:
    """The cost of one scheduled kernel."""
    target = load_target(target)
    model = kernel_model(schedule.kernel, target, tuple(schedule.annotations.get("stage", ()) or ()))
    return model.evaluate_batch(*model.schedule_arrays(schedule)).row(0, schedule.kernel.name)


def evaluate_program(schedules: Sequence[Schedule], target, evaluate_kernel=None) -> ProgramCost:
    """Costs of kernels run in sequence, and their total (each kernel's from
    `evaluate_kernel(schedule, target)`, default `evaluate`)."""
    target = load_target(target)
    kernels = [(evaluate_kernel or evaluate)(s, target) for s in schedules]
    return ProgramCost(target=target.name, kernels=kernels, total=combine(kernels, target))


def combine(costs: Sequence[KernelCost], target: Target) -> KernelCost:
    """Totals of kernels run one after another (utilisations weighted by time)."""
    time_s = sum(c.time_s for c in costs)
    names = [m.name for m in target.memory]
    bytes_ = {n: sum(c.bytes.get(n, 0.0) for c in costs) for n in names}
    weight = lambda attr: sum(getattr(c, attr) * c.time_s for c in costs) / time_s if time_s else 0.0
    flops = sum(c.flops for c in costs)
    dram = bytes_[names[-1]]
    return KernelCost(
        kernel="total", time_s=time_s, cycles=time_s * target.clock_ghz * 1e9, flops=flops, bytes=bytes_,
        energy_j=sum(c.energy_j for c in costs),
        bw_util=dram / time_s / target.dram_bandwidth if time_s else 0.0,
        occupancy=weight("occupancy"), pe_util=weight("pe_util"),
        arithmetic_intensity=flops / dram if dram else math.inf,
        spill_ratio=max((c.spill_ratio for c in costs), default=0.0),
        compute_s=sum(c.compute_s for c in costs),
        level_time_s={n: sum(c.level_time_s.get(n, 0.0) for c in costs) for n in names},
        limits={k: sum(c.limits.get(k, 0.0) for c in costs) for k in dict.fromkeys(k for c in costs for k in c.limits)},
    )


# --------------------------------------------------------------------------- baselines


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
    tiles = np.minimum.accumulate(tiles, axis=1)
    return Schedule(kernel, tiles={l.name: {lv: int(tiles[d, h]) for h, lv in enumerate(levels)}
                                   for d, l in enumerate(kernel.loops)},
                    annotations={"parallel": tuple(l.name for l in kernel.anchor_statement.output_loops)},
                    levels=levels)


# The passes' starting tiles (rules/tiling.py, rules/fusion.py) keep their old name.
library_schedule = textbook_schedule


def baseline_costs(program: Program, target) -> dict[str, ProgramCost]:
    """The untuned baselines (unfused kernels): naive and textbook. The tuned `library`
    baseline needs the passes and the tuner: `baselines.library_plan`."""
    target = load_target(target)
    kernels = kernels_unfused(program)
    return {
        "naive": evaluate_program([naive_schedule(k, target) for k in kernels], target),
        "textbook": evaluate_program([textbook_schedule(k, target) for k in kernels], target),
    }
