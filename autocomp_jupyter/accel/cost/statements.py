"""A kernel's statements compiled against a target: what every step of the model reads.

`_StatementModel` is one statement: the anchor loops it iterates, its accesses
(`_AccessModel`: coefficients, the levels holding each, internal or not), where its
arithmetic runs (`_systolic_mapping`: the PE array's rows and columns, or the vector unit),
its `where` domain and its online-softmax rescale. `statement_model` builds it once per
kernel and target; nothing here depends on a schedule.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...ir.schedule import is_mac_statement
from .domain import RowTiles, TileDomain


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
        # `traffic._footprint`'s rows: (terms, 1 + halo, dimension size) as Python floats
        self.rows = tuple((terms, float(self.local_add[r] + 1.0), float(self.dims[r]))
                          for r, terms in enumerate(self.terms))
        # ... and stacked over its rows (`traffic._footprint`, several rows with terms): per term
        # depth k, each row's k-th loop and coefficient (a row with fewer terms adds 0 x a loop),
        # whether all are 1 (no multiply); each row's 1 + halo and dimension size.
        depth = max((len(t) for t in self.terms), default=0)
        self.stacked = None
        if len(self.terms) >= 2 and depth:
            by_depth = []
            for k in range(depth):
                picked = [t[k] if k < len(t) else (0, 0.0) for t in self.terms]
                loops = np.array([d for d, _ in picked], dtype=np.intp)
                coeff = np.array([c for _, c in picked])
                by_depth.append((loops, coeff, coeff[:, None], bool((coeff == 1.0).all())))
            base = np.array([b for _, b, _ in self.rows])
            dims = np.array([m for _, _, m in self.rows])
            self.stacked = (tuple(by_depth), base, base[:, None], dims, dims[:, None])
        # what its footprint over a tile depends on: accesses equal in it share footprints
        self.region_key = (self.coeff.tobytes(), self.local_add.tobytes(), self.dims.tobytes(), self.elem_bytes)


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


def statement_model(model, si: int, stmt, index, D: int, on_chip) -> _StatementModel:
    """Statement `si` of `model.kernel` compiled against its target: which anchor loops it
    iterates, its accesses (each with the levels holding it), its datapath mapping, its
    `where` domain and its rescale (online softmax)."""
    kernel, compute = model.kernel, model.target.compute
    m = kernel.loop_map(si)
    present = np.zeros(D, dtype=bool)
    for loop, anchor_loop in m.items():
        present[index[anchor_loop]] = True
    local = {l.name: l.extent for l in stmt.loops if l.name not in m}
    mac = is_mac_statement(stmt)
    accesses = _accesses(model, stmt, m, local, index, D, on_chip, present, mac)
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
    window = _window(stmt, accesses, present, row, compute, D)
    last_row = target_access.coeff[-1] if len(target_access.coeff) else np.zeros(D)
    contig = int(np.argmax(last_row)) if last_row.any() else -1
    rescale_key, rescale_per_elem = _rescale(kernel, stmt, m, index)
    domain = _domain(stmt, m, local, index, D, model.extents)
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


def _accesses(model, stmt, m, local, index, D, on_chip, present, mac) -> list[_AccessModel]:
    """The statement's target (first) and distinct reads, each with its |coefficients| on
    the anchor loops, its halo from local loops and the tiling levels that hold its role."""
    kernel = model.kernel
    accesses: list[_AccessModel] = []
    seen = set()
    kind = "accumulate" if stmt.reduce else "write"
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
        chain = tuple(h for h, lv in enumerate(on_chip) if role in lv.roles or (tensor, lv.name) in model.staged)
        index_mask = coeff.sum(axis=0) > 0
        accesses.append(_AccessModel(
            tensor=tensor, coeff=coeff, local_add=local_add,
            dims=np.array(t.shape if len(t.shape) == len(indices) else [1 << 62] * len(indices), dtype=float),
            elem_bytes=model.elem_bytes(t.dtype), kind=akind, index_mask=index_mask,
            chain=chain, internal=tensor in kernel.internals, counted=np.nonzero(index_mask & present)[0]))
    return accesses


def _window(stmt, accesses, present, row, compute, D) -> np.ndarray | None:
    """window[d]: reduction loops sharing an input index row with loop d (X[.., w + s]),
    for a reduction on a systolic target's vector unit (what it keeps in registers)."""
    if not (stmt.reduce and row < 0 and compute.kind == "systolic"):
        return None
    reduction = present & ~(accesses[0].index_mask)
    window = np.zeros((D, D), dtype=bool)
    for a in accesses[1:]:
        for coeff_row in a.coeff:
            used = np.nonzero(coeff_row)[0]
            for d in used:
                window[d, used] |= reduction[used] & (used != d)
    return window if window.any() else None


def _rescale(kernel, stmt, m, index) -> tuple[int, float]:
    """(key loop, vector ops per target element) of a sum against a running max (`Rescale`),
    else (-1, 0.0)."""
    if stmt.rescale is not None and stmt.reduce == "+":
        keys = [index[m[l.name]] for l in stmt.reduction_loops if l.name in m]
        if keys:
            out_points = math.prod(l.extent for l in stmt.output_loops)
            return keys[0], 1.0 + kernel.tensor(stmt.rescale.tensor).size / max(1, out_points)
    return -1, 0.0


def _domain(stmt, m, local, index, D, extents) -> TileDomain | None:
    """The statement's `where` relations on the anchor loops (a local loop runs whole in
    every tile: at its most favourable value), as a TileDomain; None when uncut."""
    if not stmt.domain:
        return None
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
        return TileDomain(relations, np.asarray(extents, dtype=float))
    return None


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
    if not any(l in outs for a in reads[weight_idx].indices for l in a.loops):
        # An operand with no output loop is a vector, not the weight (no column loop to put it
        # on): x[k] · W[k, j], or x[0, k] · W[k, j] where a batch-1 flatten was read through.
        weight_idx = 1 - weight_idx
    if _matrix_vector(stmt, reads[1 - weight_idx], outs) and _vector_unit_faster_per_weight(compute):
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


def _matrix_vector(stmt, streamed, outs) -> bool:
    """Whether a contraction is a matrix-vector product: the operand streamed past the weight
    indexes no output loop longer than 1 (x[k], x[0, k], x[i, k] with i < 1, a 1x1 conv of a
    pooled 1x1 map), so each weight element is used once."""
    ext = stmt.extents
    return not any(l in outs and ext[l] > 1 for a in streamed.indices for l in a.loops)


def _vector_unit_faster_per_weight(compute) -> bool:
    """Whether the vector unit multiplies a weight element in fewer cycles than the PE array
    takes to load it: a matrix-vector product streams one row past each weight block, so the
    array is filling for all of its time (`fill_cycles` per pe_rows x pe_cols block; the next
    fill hides behind no stream), while the vector unit makes `vector_ops_per_cycle`
    multiply-adds a cycle. On the presets it is faster (tpu 16x, npu and gemmini 2x): the
    three ways to write one matrix-vector product (x[k], x[0, k], x[i, k] with i < 1) run on
    it alike, and the physical limit (accel/limit.py) counts them there too."""
    array_cycles = compute.fill_cycles / (compute.pe_rows * compute.pe_cols)
    return 1.0 / compute.vector_ops_per_cycle < array_cycles


def _weight_read(stmt) -> int | None:
    """Which of a contraction's two reads is its weight (target role `weights`): the one with
    fewer output loops (B[k, j] of A·B, W[f, c, r, s] of a conv), the second on a tie."""
    outs = {l.name for l in stmt.output_loops}
    reads = stmt.reads()
    if len(reads) != 2:
        return None
    return min(range(2), key=lambda i: (len([l for a in reads[i].indices for l in a.loops if l in outs]), -i))
