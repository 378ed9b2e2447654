"""Polyhedral legality: what a kernel's loop transformations may and may not do.

poly.py owns the isl view of one kernel (a sequence of fused `Statement`s in program
order) and every legality question the passes ask about it:

- iteration domains (`S0[i, j, k] : 0 <= i < M ...`), read and write access relations
  (in-bounds reads only: an out-of-range read yields the access's pad value, not memory),
  and the original schedule (statement order, then loop order: 2d+1 form);
- dependences: flow (read after write), anti (write after read) and output (write after
  write), each kept per (kind, source statement, sink statement, tensor);
- schedules built from loop transformations (`KernelSchedule`: interchange, reverse,
  skew, strip-mine, tile), and `check_legal`, which says whether a new schedule keeps
  every dependence's source strictly before its sink, naming the dependences it breaks;
- parallelism: a loop is parallel iff it carries no dependence (`parallel_loops`,
  `is_parallel`), and dependence distances for the report (`dependence_distances`).

The passes in `rules/` decide what to try; this module only answers whether it is legal.
Everything built from a kernel is cached on the (frozen, hashable) statements, so a
legality check on an already-seen kernel costs a few milliseconds.

How a verdict is reached (exactly, not approximately): for each dependence, isl computes
the set of time differences (sink time - source time) of its pairs under the new schedule.
The dependence is broken iff that set holds a lexicographically non-positive vector, and
carried at a position iff it holds a vector zero on every outer position and non-zero
there. Differences are cached per dependence and per schedule of its two statements, so a
tuner changing one statement's nest recomputes only the dependences that touch it, and a
loop-by-loop parallel query reuses them. The example pair and message of a violation are
only worked out (from the full relations) when read.

Statement `k` of a kernel is named `S{k}` in isl and in every message.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import Iterable, Mapping, Sequence, Union

import islpy as isl

from autocomp_jupyter.caches import LRU, cached
from autocomp_jupyter.canon import schedule_key
from autocomp_jupyter.ir.program import Affine, Statement

DEPENDENCE_KINDS = ("flow", "anti", "output")
DEPENDENCE_DESCRIPTIONS = {
    "flow": "read after write",
    "anti": "write after read",
    "output": "write after write",
}
# Words isl's parser reserves; a loop or tensor with one of these names cannot be
# written into an isl string.
_ISL_RESERVED = frozenset(
    "and or not exists floor ceil mod min max true false infty NaN domain range".split()
)

Statements = Sequence[Statement]
ScheduleLike = Union["KernelSchedule", Mapping[str, Union[str, isl.Map]], isl.UnionMap]


def statement_name(index: int) -> str:
    """The isl tuple name of the kernel's `index`-th statement."""
    return f"S{index}"


# --------------------------------------------------------------------------- domains and accesses


def _maps(relation: isl.UnionMap) -> list[isl.Map]:
    """The maps of a union map, one per (domain tuple, range tuple) pair."""
    out: list[isl.Map] = []
    relation.foreach_map(out.append)
    return out


def _check_name(name: str, what: str) -> None:
    if name in _ISL_RESERVED or not name.isidentifier():
        raise ValueError(f"{what} name {name!r} cannot be used in isl (reserved or not an identifier)")


def _affine_str(index: Affine) -> str:
    return str(index)


def _tuple_str(name: str, loops: Sequence[str]) -> str:
    return f"{name}[{', '.join(loops)}]"


def _bounds_str(statement: Statement) -> str:
    """The statement's iteration domain in isl syntax: its box, cut by its `where` relations."""
    box = [f"0 <= {l.name} < {l.extent}" for l in statement.loops]
    return " and ".join(box + [f"{_affine_str(a)} >= 0" for a in statement.domain]) or "true"


@dataclass(frozen=True, eq=False)
class KernelPolyhedra:
    """The isl objects of one kernel: domains, accesses, original schedule.

    `reads` and `writes` map statement instances to tensor elements (`C[i, j]`);
    `reads` holds only in-bounds reads, and the accumulation read of a reduction
    statement (`C[i, j] += ...` reads C[i, j] before writing it).
    """

    statements: tuple[Statement, ...]
    names: tuple[str, ...]
    domain: isl.UnionSet
    reads: isl.UnionMap
    writes: isl.UnionMap
    original: "KernelSchedule"
    original_map: isl.UnionMap
    tensor_shapes: Mapping[str, tuple[int, ...]]

    def statement(self, name: str) -> Statement:
        return self.statements[self.names.index(name)]


def _written_shapes(statements: Sequence[Statement]) -> dict[str, tuple[int, ...]]:
    """Shape of each tensor the kernel writes, as the bounding box of its write footprint.

    Single assignment: each tensor is written by one statement, in full, so the footprint
    box is the tensor's shape (as far as dependences can see).
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for s in statements:
        extents = s.extents
        box = []
        for index in s.target_indices:
            top = index.const + sum(c * (extents[l] - 1) for l, c in index.terms if c > 0)
            box.append(top + 1)
        previous = shapes.get(s.target, ())
        shapes[s.target] = tuple(max(a, b) for a, b in zip(previous, box)) if previous else tuple(box)
    return shapes


def _access_map(stmt_tuple: str, bounds: str, tensor: str, indices: Sequence[Affine],
                shape: tuple[int, ...] | None, indirect: Sequence[int] = ()) -> isl.Map:
    """The access relation; an indirect dimension (`W[ids[s], c]`) may be any element of the
    dimension, so it is an unconstrained variable within the tensor's bounds."""
    coords = [f"ind{d}_" if d in indirect else _affine_str(i) for d, i in enumerate(indices)]
    element = f"{tensor}[{', '.join(coords)}]"
    constraints = [bounds]
    if shape is not None:
        # Out-of-range reads yield the pad value: they touch no memory, so no dependence.
        constraints += [f"0 <= {c} < {n}" for c, n in zip(coords, shape)]
    return isl.Map(f"{{ {stmt_tuple} -> {element} : {' and '.join(constraints)} }}")


@cached("poly.polyhedra", 256)
def _polyhedra(statements: tuple[Statement, ...],
               shapes: tuple[tuple[str, tuple[int, ...]], ...]) -> KernelPolyhedra:
    names = tuple(statement_name(k) for k in range(len(statements)))
    tensor_shapes = _written_shapes(statements)
    tensor_shapes.update(dict(shapes))
    domain = isl.UnionSet("{ }")
    reads = isl.UnionMap("{ }")
    writes = isl.UnionMap("{ }")
    for name, s in zip(names, statements):
        for loop in s.loop_names:
            _check_name(loop, "loop")
        _check_name(s.target, "tensor")
        stmt_tuple = _tuple_str(name, s.loop_names)
        bounds = _bounds_str(s)
        domain = domain.union(isl.UnionSet(isl.Set(f"{{ {stmt_tuple} : {bounds} }}")))
        write = _access_map(stmt_tuple, bounds, s.target, s.target_indices, None)
        writes = writes.union(isl.UnionMap(write))
        if s.reduce is not None:
            reads = reads.union(isl.UnionMap(write))
        for access in s.reads():
            _check_name(access.tensor, "tensor")
            shape = tensor_shapes.get(access.tensor)
            reads = reads.union(isl.UnionMap(
                _access_map(stmt_tuple, bounds, access.tensor, access.indices, shape, access.indirect_dims)))
    original = original_schedule(statements)
    return KernelPolyhedra(statements, names, domain, reads, writes, original,
                           original.to_isl(), tensor_shapes)


def kernel_polyhedra(statements: Statements,
                     tensor_shapes: Mapping[str, Sequence[int]] | None = None) -> KernelPolyhedra:
    """Domains, accesses and original schedule of a kernel (cached on the statements).

    `tensor_shapes` bounds reads of tensors the kernel does not write (inputs); tensors it
    writes are bounded by their write footprint. Dependences only involve written tensors.
    """
    shapes = tuple(sorted((k, tuple(v)) for k, v in (tensor_shapes or {}).items()))
    return _polyhedra(tuple(statements), shapes)


# --------------------------------------------------------------------------- schedules


@dataclass(frozen=True)
class ScheduleDim:
    """One dimension of a statement's schedule (one loop of the transformed nest).

    `expr` is an isl quasi-affine expression over the statement's original loops
    (`"i"`, `"-j"`, `"i + 2*j"`, `"floor(i/32)"`, `"i mod 32"`) or a constant for
    the statement-order dimensions of the 2d+1 form, whose names start with `seq`.
    """

    name: str
    expr: str

    @property
    def is_sequence(self) -> bool:
        return self.name.startswith("seq")


@dataclass(frozen=True)
class StatementSchedule:
    """The schedule of one statement: its instance `name[loops]` runs at time `dims`."""

    name: str
    loops: tuple[str, ...]
    dims: tuple[ScheduleDim, ...]

    def dim_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dims)

    def position(self, dim: str) -> int | None:
        names = self.dim_names()
        return names.index(dim) if dim in names else None

    def to_isl(self, width: int | None = None) -> isl.Map:
        exprs = [d.expr for d in self.dims]
        exprs += ["0"] * ((width or len(exprs)) - len(exprs))
        return _parse_schedule(f"{{ {_tuple_str(self.name, self.loops)} -> [{', '.join(exprs)}] }}")[0]

    def _replace(self, dims: Iterable[ScheduleDim]) -> "StatementSchedule":
        return replace(self, dims=tuple(dims))


@cached("poly.parse_schedule", 8192)   # the check of a schedule and its map parse the same text (isl objects are immutable)
def _parse_schedule(text: str) -> tuple[isl.Map, bool]:
    """A statement's schedule map, and whether it is known to be a total function.

    A schedule is normally a quasi-affine function: parsing it as a multi-affine expression
    is several times faster than parsing a relation (floor/mod make isl's relation parser
    slow), and the result is single-valued and defined everywhere by construction."""
    try:
        return isl.Map.from_multi_aff(isl.MultiAff(text)), True
    except isl.Error:
        return isl.Map(text), False


def _require_dims(names: Iterable[str], have: set[str], transform: str) -> None:
    missing = [n for n in names if n not in have]
    if missing:
        raise ValueError(f"{transform}: no loop named {', '.join(map(repr, missing))} "
                         f"(loops: {', '.join(sorted(have))})")


@dataclass(frozen=True)
class KernelSchedule:
    """A schedule for every statement of a kernel, built by loop transformations.

    Dimensions align by position across statements (shorter ones are padded with 0);
    a transformation names loops and applies to every statement that has them, so a
    fused nest is transformed as one. Every transformation returns a new schedule;
    none checks legality — `check_legal` does.

    Example (GEMM, one statement S0[i, j, k]):

        original_schedule([gemm])                       # [0, i, 0, j, 0, k, 0]
          .tile({"i": 32, "j": 32})                      # i_outer, j_outer, i_inner, j_inner
          .interchange("j_inner", "i_inner")
    """

    statements: tuple[StatementSchedule, ...]

    # ---------------------------------------------------------------- queries
    @property
    def width(self) -> int:
        return max((len(s.dims) for s in self.statements), default=0)

    def loop_dims(self) -> tuple[str, ...]:
        """Names of loop (non-sequence) dimensions, outermost first."""
        seen: dict[str, int] = {}
        for s in self.statements:
            for position, d in enumerate(s.dims):
                if not d.is_sequence:
                    seen.setdefault(d.name, position)
        return tuple(sorted(seen, key=seen.__getitem__))

    def position(self, dim: str) -> int:
        """The time position of loop `dim`; it must be the same in every statement."""
        positions = {s.position(dim) for s in self.statements} - {None}
        if not positions:
            raise ValueError(f"no loop named {dim!r} (loops: {', '.join(self.loop_dims())})")
        if len(positions) > 1:
            raise ValueError(f"loop {dim!r} sits at different depths in different statements")
        return positions.pop()

    def to_isl(self) -> isl.UnionMap:
        width = self.width
        out = isl.UnionMap("{ }")
        for s in self.statements:
            out = out.union(isl.UnionMap(s.to_isl(width)))
        return out

    def __str__(self) -> str:
        lines = []
        for s in self.statements:
            dims = ", ".join(d.expr if d.is_sequence else f"{d.name}={d.expr}" for d in s.dims)
            lines.append(f"{_tuple_str(s.name, s.loops)} -> [{dims}]")
        return "\n".join(lines)

    def _map(self, fn) -> "KernelSchedule":
        return KernelSchedule(tuple(fn(s) for s in self.statements))

    def _all_dims(self) -> set[str]:
        return {d.name for s in self.statements for d in s.dims}

    # ---------------------------------------------------------------- transformations
    def interchange(self, *order: str) -> "KernelSchedule":
        """Permute loops: the positions the named loops hold get them in `order`.

        `interchange("j", "i")` on [i, j, k] gives [j, i, k]. A statement holding only
        some of the loops permutes those among their own positions.
        """
        _require_dims(order, self._all_dims(), "interchange")

        def permute(s: StatementSchedule) -> StatementSchedule:
            present = [n for n in order if s.position(n) is not None]
            slots = sorted(s.position(n) for n in present)
            dims = list(s.dims)
            by_name = {d.name: d for d in s.dims}
            for slot, n in zip(slots, present):
                dims[slot] = by_name[n]
            return s._replace(dims)

        return self._map(permute)

    def reverse(self, loop: str) -> "KernelSchedule":
        """Run `loop` backwards: its time expression e becomes -(e)."""
        _require_dims([loop], self._all_dims(), "reverse")
        return self._map(lambda s: s._replace(
            ScheduleDim(d.name, f"-({d.expr})") if d.name == loop else d for d in s.dims))

    def skew(self, loop: str, by: str, factor: int = 1) -> "KernelSchedule":
        """Skew `loop` by `by`: loop' = loop + factor * by (in statements having both)."""
        _require_dims([loop, by], self._all_dims(), "skew")

        def skewed(s: StatementSchedule) -> StatementSchedule:
            if s.position(loop) is None or s.position(by) is None:
                return s
            other = s.dims[s.position(by)].expr
            return s._replace(ScheduleDim(d.name, f"({d.expr}) + {factor}*({other})")
                              if d.name == loop else d for d in s.dims)

        return self._map(skewed)

    def strip_mine(self, loop: str, size: int) -> "KernelSchedule":
        """Split `loop` (time e) into `{loop}_outer` = floor(e/size), `{loop}_inner` = e mod size."""
        _require_dims([loop], self._all_dims(), "strip_mine")
        if size < 1:
            raise ValueError(f"strip_mine: tile size of {loop!r} must be >= 1, got {size}")

        def split(s: StatementSchedule) -> StatementSchedule:
            dims: list[ScheduleDim] = []
            for d in s.dims:
                if d.name == loop:
                    dims.append(ScheduleDim(f"{loop}_outer", f"floor(({d.expr})/{size})"))
                    dims.append(ScheduleDim(f"{loop}_inner", f"({d.expr}) mod {size}"))
                else:
                    dims.append(d)
            return s._replace(dims)

        return self._map(split)

    def tile(self, sizes: Mapping[str, int]) -> "KernelSchedule":
        """Rectangular tiling: strip-mine each loop, then all tile loops outside all point loops.

        `tile({"i": 32, "j": 16})` on [i, j, k] gives [i_outer, j_outer, i_inner, j_inner, k].
        """
        out = self
        for loop, size in sizes.items():
            out = out.strip_mine(loop, size)
        order = [f"{l}_outer" for l in sizes] + [f"{l}_inner" for l in sizes]
        return out.interchange(*order)

    def with_statement(self, name: str, dims: Sequence[tuple[str, str]]) -> "KernelSchedule":
        """Replace one statement's dimensions by (name, isl expression) pairs."""
        return self._map(lambda s: s._replace(ScheduleDim(n, e) for n, e in dims)
                         if s.name == name else s)


def original_schedule(statements: Statements) -> KernelSchedule:
    """Program order, each statement its own loop nest: S_k -> [k, l1, 0, l2, 0, ..., 0].

    The textbook 2d+1 schedule: sequence dimensions (`seq0`, `seq1`, ...) interleave the
    loops; the first orders the statements, the others are 0 (one statement per nest).
    """
    return KernelSchedule(tuple(
        _two_d_plus_one(statement_name(k), s.loop_names, [k] + [0] * len(s.loops))
        for k, s in enumerate(statements)))


def fused_schedule(statements: Statements) -> KernelSchedule:
    """One loop nest: statements share the leading loops they have in common (by name and
    extent) with the statement before them, and run in program order inside the deepest
    shared loop. For S0[i, j, k] (C += A*B) then S1[i, j] (D = relu(C)):
    S0 -> [0, i, 0, j, 0, k, 0] and S1 -> [0, i, 0, j, 1, 0, 0]: D[i, j] right after C[i, j]
    is complete.
    """
    schedules: list[StatementSchedule] = []
    previous: Statement | None = None
    previous_seq: list[int] = []
    for k, s in enumerate(statements):
        if previous is None:
            seq = [0] * (len(s.loops) + 1)
        else:
            shared = 0
            for a, b in zip(previous.loops, s.loops):
                if a != b:
                    break
                shared += 1
            seq = previous_seq[:shared] + [previous_seq[shared] + 1] + [0] * (len(s.loops) - shared)
        schedules.append(_two_d_plus_one(statement_name(k), s.loop_names, seq))
        previous, previous_seq = s, seq
    return KernelSchedule(tuple(schedules))


def from_tiled_schedule(schedule) -> KernelSchedule:
    """The `KernelSchedule` of an `ir.schedule.Schedule`: the tree `ir.loopnest.lower` builds,
    in 2d+1 form. Along each statement's path from the root, every tree level adds a
    sequence dimension (its position among its siblings) and, for a tile loop, the tile
    index `floor(offset / size)`, the offset taken inside the enclosing tile over the same
    loop, so remainder tiles are exact; the statement's point loops follow, named after the
    anchor loops they follow (local loops keep their names).

    A statement in a tile loop over a loop it does not follow runs only in that loop's last
    tile (`Compute.last_of`): its dimension there is that tile's index, a constant (named
    `seq_...`, a sequence dimension). Then `check_legal` proves the epilogue sees every
    update of its input.
    """
    from autocomp_jupyter.ir.loopnest import lower

    nest = lower(schedule)
    extents = schedule.kernel.extents
    computed = schedule.kernel.computed_at()
    statements: list[StatementSchedule] = [None] * len(schedule.kernel.statements)  # type: ignore[list-item]
    for path, compute in nest.paths():
        if compute.index in computed:
            continue    # recomputed per tile: `_compute_at_violations` proves it instead
        follows = schedule.kernel.loop_map(compute.index)
        own_of = {anchor: own for own, anchor in follows.items()}
        enclosing: dict[str, list[int]] = {}
        dims = []
        for depth, (position, node) in enumerate(path):
            dims.append(ScheduleDim(f"seq{depth}", str(position)))
            if node is compute:
                break
            sizes = enclosing.setdefault(node.anchor, [])
            if node.anchor in own_of:
                offset = own_of[node.anchor]
                for outer in sizes:
                    offset = f"(({offset}) mod {outer})"
                dims.append(ScheduleDim(node.var, f"floor({offset}/{node.size})"))
            else:
                last = extents[node.anchor] - 1
                for outer in sizes:
                    last %= outer
                dims.append(ScheduleDim(f"seq_{node.var}", str(last // node.size)))
            sizes.append(node.size)
        dims += [ScheduleDim(p.anchor or p.name, p.time()) for p in compute.loops]
        statements[compute.index] = StatementSchedule(statement_name(compute.index), compute.statement.loop_names,
                                                      tuple(dims))
    if computed:   # the other statements, named by their place among themselves
        kept = [st for i, st in enumerate(statements) if i not in computed]
        statements = [replace(st, name=statement_name(k)) for k, st in enumerate(kept)]
    return KernelSchedule(tuple(statements))


def parallel_dims(schedule) -> tuple[str, ...]:
    """The time dimensions of `from_tiled_schedule(schedule)` that run the loops its
    "parallel" annotation marks: every tile loop over such a loop and its point loops.
    Checking them all is what makes a parallel annotation legal wherever C puts the pragma."""
    from autocomp_jupyter.ir.loopnest import loop_dims, lower

    nest = lower(schedule)
    return tuple(dim for loop in schedule.annotations.get("parallel", ()) or () for dim in loop_dims(nest, loop))


def check_schedule(schedule) -> "Legality":
    """The one legality policy for a tiled, ordered, annotated `ir.schedule.Schedule`, asked by
    every pass, the tuner, variant evaluation and the final verification: its loop nest must
    keep every dependence (reductions may be reassociated: '+' and 'max' are treated as
    associative and commutative), and every loop marked parallel must carry no dependence in
    any statement, reductions included (a parallel reduction is a race). Statements computed
    against a running max (`Rescale`) are ordered by their placement in the loop nest
    (`rescale_violations`), every other dependence by isl. A schedule isl
    cannot even represent (ValueError) is illegal, with that reason.

    Verdicts are remembered by the schedule's canonical form (`canon.schedule_key`: tensor
    names by position), so the repeated layers of a network are proved once: a verdict
    depends on structure alone (dependences are between statement instances; names only
    label them) as long as every name can be written in isl, which is part of the key. An
    illegal verdict reached through another kernel's names is given back in this kernel's
    names (the violated dependence's tensor; its example pair, distances and message are
    the same but for that name)."""
    key = (schedule_key(schedule), _isl_names_ok(schedule.kernel))
    hit = _VERDICTS.get(key)
    if hit is not None:
        verdict, names = hit
        return verdict if verdict.ok else _renamed(verdict, names, tuple(t.name for t in schedule.kernel.tensors))
    try:
        computed = schedule.kernel.computed_at()
        violations = (_compute_at_violations(schedule) if computed else ()) + rescale_violations(schedule)
        if violations:
            verdict = Legality(False, violations)
        else:
            rest = tuple(st for i, st in enumerate(schedule.kernel.statements) if i not in computed)
            verdict = check_legal(rest, from_tiled_schedule(schedule),
                                  parallel=parallel_dims(schedule), reduction_reorderable=True)
    except ValueError as err:
        return Legality(False, (Violation("schedule", "", "", "", message=f"not a valid schedule: {err}"),))
    _VERDICTS.put(key, (Legality(True) if verdict.ok else verdict, tuple(t.name for t in schedule.kernel.tensors)))
    return verdict


def _compute_at_violations(schedule) -> tuple["Violation", ...]:
    """Why the kernel's `compute_at`s are illegal in `schedule` (empty: legal).

    A computed-at statement reads only the kernel's inputs, other computed-at tensors and
    tensors whose nest ran whole before its instance (`ir.loopnest.placement`), so each
    recomputation in a tile gives the values a single run would, and its region is the interval hull of what the tile's
    consumers read: the consumers see complete values (the interpreter's tiled check
    poisons everything outside the region, so a region too small fails verification).
    What is left is parallelism: parallel tiles writing overlapping regions (a halo, or a
    region that does not follow the loop) would race on the buffer, so a parallel loop
    may enclose a compute point only where the region follows that loop's tile exactly."""
    from autocomp_jupyter.ir.loopnest import ComputeAtError, compute_depth, regions, tile_steps

    kernel = schedule.kernel
    try:
        spans = regions(kernel)
    except ComputeAtError as err:
        return (Violation("compute_at", "", "", "", message=str(err)),)
    steps = tile_steps(schedule)
    parallel = set(schedule.annotations.get("parallel", ()) or ())
    out = []
    for index, (loop, level) in kernel.computed_at().items():
        stmt = kernel.statements[index]
        depth = compute_depth(schedule, steps, loop, level)
        for a in sorted({steps[p].anchor for p in range(depth)} & parallel):
            own = [spans[index][idx.single_loop] for idx in stmt.target_indices]
            if not any(r.terms == ((a, 1),) and (r.lo, r.hi) == (0, 0) for r in own):
                out.append(Violation("compute_at", statement_name(index), statement_name(index), stmt.target, loop=a,
                                     message=f"parallel tiles over {a} would race on {stmt.target}: it is computed "
                                             f"at each tile over a region that does not follow {a}'s tile alone "
                                             "(a halo, or recomputed in every tile)"))
    return tuple(out)


def _renamed(verdict: "Legality", old: tuple[str, ...], new: tuple[str, ...]) -> "Legality":
    """`verdict`, found on a kernel whose tensors are `old`, for the same kernel with tensors
    `new` (by position)."""
    if old == new:
        return verdict
    rename = dict(zip(old, new))
    return Legality(False, tuple(
        Violation(v.kind, v.source, v.sink, rename.get(v.tensor, v.tensor), reduction=v.reduction, loop=v.loop,
                  explain=partial(_renamed_details, v, v.tensor, rename.get(v.tensor, v.tensor)))
        for v in verdict.violated))


def _renamed_details(violation: "Violation", old: str, new: str) -> tuple:
    # The tensor is named once, in the dependence's description ("... on C (reduction over
    # k)", "... on C would be reversed: ..."); nothing after it says " on ".
    message = violation.message
    at = message.rfind(f" on {old}")
    end = at + len(old) + 4
    if at >= 0 and (end == len(message) or message[end] == " "):
        message = message[:at] + f" on {new}" + message[end:]
    return violation.example_source, violation.example_sink, violation.distance, message


def _isl_names_ok(kernel) -> bool:
    """Can every tensor and loop name of `kernel` be written in an isl string?"""
    names = {t.name for t in kernel.tensors} | {l.name for s in kernel.statements for l in s.loops}
    return all(name not in _ISL_RESERVED and name.isidentifier() for name in names)


# Verdicts by canonical schedule key, with the tensor names they were found under (see check_schedule).
_VERDICTS = LRU("poly.check_schedule", 8192)


def _two_d_plus_one(name: str, loops: Sequence[str], seq: Sequence[int]) -> StatementSchedule:
    dims = [ScheduleDim("seq0", str(seq[0]))]
    for depth, loop in enumerate(loops, start=1):
        dims.append(ScheduleDim(loop, loop))
        dims.append(ScheduleDim(f"seq{depth}", str(seq[depth])))
    return StatementSchedule(name, tuple(loops), tuple(dims))


def _schedule_map(poly: KernelPolyhedra, schedule: ScheduleLike) -> isl.UnionMap:
    """Any accepted schedule form as one union map into a single anonymous time space."""
    if isinstance(schedule, KernelSchedule):
        return _kernel_schedule_map(schedule)
    if isinstance(schedule, isl.UnionMap):
        maps = _maps(schedule)
    else:
        maps = [isl.Map(m) if isinstance(m, str) else m for m in schedule.values()]
    width = max(m.dim(isl.dim_type.out) for m in maps)
    out = isl.UnionMap("{ }")
    for m in maps:
        extra = width - m.dim(isl.dim_type.out)
        padded = m.add_dims(isl.dim_type.out, extra)
        for position in range(width - extra, width):
            padded = padded.fix_val(isl.dim_type.out, position, 0)
        out = out.union(isl.UnionMap(padded.reset_tuple_id(isl.dim_type.out)))
    return out


@cached("poly.kernel_schedule_map", 1024)
def _kernel_schedule_map(schedule: KernelSchedule) -> isl.UnionMap:
    return schedule.to_isl()


def _check_schedule(poly: KernelPolyhedra, schedule_map: isl.UnionMap) -> None:
    """A schedule must give every instance exactly one time, and distinct instances of a
    statement distinct times (else it silently makes them run concurrently)."""
    for name, s in zip(poly.names, poly.statements):
        error = _schedule_error(s, name, schedule_map)
        if error:
            raise ValueError(error)


def _statement_schedule_error(statement: Statement, name: str, schedule: StatementSchedule | None) -> str | None:
    """`_check_schedule` for one statement of a `KernelSchedule` (cached on its schedule)."""
    # Only the statement's domain matters (its loops and extents), not what it reads or
    # writes: equal domains in other kernels share the answer.
    return _domain_schedule_error(statement.loops, name, schedule)


@cached("poly.domain_schedule_error", 8192)
def _domain_schedule_error(loops: tuple, name: str, schedule: StatementSchedule | None) -> str | None:
    if schedule is None:
        return f"the schedule does not cover every instance of {name}"
    exprs = ", ".join(d.expr for d in schedule.dims)
    m, function = _parse_schedule(f"{{ {_tuple_str(schedule.name, schedule.loops)} -> [{exprs}] }}")
    return _schedule_error(Statement("", (), None, loops, None), name, isl.UnionMap(m), function)


def _schedule_error(s: Statement, name: str, schedule_map: isl.UnionMap, function: bool = False) -> str | None:
    """Why `schedule_map` is not a valid schedule of statement `name`, or None.
    `function`: the map is known to be a total function (only injectivity is left to check)."""
    domain = isl.Set(f"{{ {_tuple_str(name, s.loop_names)} : {_bounds_str(s)} }}")
    restricted = schedule_map.intersect_domain(isl.UnionSet(domain))
    maps = _maps(restricted)
    if not maps or not (function or domain.is_subset(maps[0].domain())):
        return f"the schedule does not cover every instance of {name}"
    m = maps[0]
    if not function and not m.is_single_valued():
        return f"the schedule gives some instance of {name} more than one time"
    if not m.is_injective():
        return (f"the schedule runs two instances of {name} at the same time; "
                f"mark loops parallel instead (check_legal(..., parallel=...))")
    return None


# --------------------------------------------------------------------------- dependences


@dataclass(frozen=True, eq=False)
class Dependence:
    """Instances of `sink` that must run after instances of `source`, through `tensor`.

    `relation` maps source instances to sink instances (`S0[i, j, k] -> S0[i, j, k + 1]`).
    `reduction_loops` is non-empty for the accumulation dependences of a '+=' / 'max='
    statement on its own target (the ones an associative, commutative reduction may
    reorder) and names the loops they are carried along.
    """

    kind: str
    source: str
    sink: str
    tensor: str
    relation: isl.Map = field(repr=False)
    reduction_loops: tuple[str, ...] = ()

    @property
    def reduction(self) -> bool:
        return bool(self.reduction_loops)

    @cached_property
    def relation_text(self) -> str:
        """The relation as isl prints it: equal for equal relations built alike (a single
        `+=` statement's flow, anti and output dependences; the same layer in another
        kernel), so their time differences under a schedule are computed once."""
        return str(self.relation)

    def describe(self, poly: KernelPolyhedra) -> str:
        """`flow dependence S0[i, j, k] -> S0[i, j, k + 1] on C (reduction over k)`."""
        text = f"{self.kind} dependence {self._pattern(poly)} on {self.tensor}"
        if self.reduction_loops:
            text += f" (reduction over {', '.join(self.reduction_loops)})"
        return text

    def _pattern(self, poly: KernelPolyhedra) -> str:
        source_loops = poly.statement(self.source).loop_names
        sink_loops = poly.statement(self.sink).loop_names
        if self.source == self.sink:
            distance = _uniform_distance(self.relation)
            if distance is not None:
                shifted = [_shift_str(l, d) for l, d in zip(source_loops, distance)]
                return f"{_tuple_str(self.source, source_loops)} -> {_tuple_str(self.sink, shifted)}"
        # Name each source coordinate by what it is across the relation: the same-named
        # sink loop when equal to it, a constant (the last k of a reduction feeding a
        # consumer), or a primed name when it is some other function of the sink.
        sources = self.relation.domain()
        shown = []
        for position, loop in enumerate(source_loops):
            lo, hi = sources.dim_min_val(position), sources.dim_max_val(position)
            if loop in sink_loops and _equal_coordinates(self.relation, position, sink_loops.index(loop)):
                shown.append(loop)
            elif lo.eq(hi):
                shown.append(str(lo.to_python()))
            else:
                shown.append(f"{loop}'" if loop in sink_loops else loop)
        return f"{_tuple_str(self.source, shown)} -> {_tuple_str(self.sink, sink_loops)}"


def _equal_coordinates(relation: isl.Map, source_position: int, sink_position: int) -> bool:
    """Whether every pair of `relation` has source[source_position] == sink[sink_position]."""
    equal = isl.Map.universe(relation.get_space()).equate(
        isl.dim_type.in_, source_position, isl.dim_type.out, sink_position)
    return relation.is_subset(equal)


def _shift_str(loop: str, by: int) -> str:
    return loop if by == 0 else f"{loop} + {by}" if by > 0 else f"{loop} - {-by}"


def _uniform_distance(relation: isl.Map) -> tuple[int, ...] | None:
    """sink - source if it is the same vector for every pair, else None."""
    deltas = relation.deltas()
    if not deltas.is_singleton():
        return None
    point = deltas.sample_point()
    return _point_coordinates(point, deltas.dim(isl.dim_type.set))


def _point_coordinates(point: isl.Point, n: int, offset: int = 0) -> tuple[int, ...]:
    return tuple(point.get_coordinate_val(isl.dim_type.set, offset + d).to_python() for d in range(n))


def _split(poly: KernelPolyhedra, kind: str, tensor: str, relation: isl.UnionMap) -> list[Dependence]:
    out = []
    for m in _maps(relation.coalesce()):
        if m.is_empty():
            continue
        source = m.get_tuple_name(isl.dim_type.in_)
        sink = m.get_tuple_name(isl.dim_type.out)
        reduction_loops: tuple[str, ...] = ()
        statement = poly.statement(source)
        if source == sink and statement.reduce is not None and tensor == statement.target:
            # An accumulation dependence; name the loops along which it is carried
            # (k for GEMM; both i and j for a wavefront like T[i + j] += X[i, j]).
            deltas = m.deltas()
            reduction_loops = tuple(
                l.name for position, l in enumerate(statement.loops)
                if not (deltas.dim_min_val(position).is_zero() and deltas.dim_max_val(position).is_zero()))
        out.append(Dependence(kind, source, sink, tensor, m, reduction_loops))
    return out


@cached("poly.exact_dependences", 256)
def _exact_dependences(poly: KernelPolyhedra) -> tuple[Dependence, ...]:
    """Value-based dependences: each read's last writer, each write's previous writer, and
    the reads since the previous write for anti. Enough for legality under any schedule,
    because lexicographic order is transitive and the omitted pairs are chains of these."""
    schedule = poly.original_map
    out: list[Dependence] = []
    for tensor in sorted({s.target for s in poly.statements}):
        writes = _restrict_range_to(poly.writes, tensor)
        reads = _restrict_range_to(poly.reads, tensor)
        flow = (isl.UnionAccessInfo.from_sink(reads).set_must_source(writes)
                .set_schedule_map(schedule).compute_flow().get_must_dependence())
        output = (isl.UnionAccessInfo.from_sink(writes).set_must_source(writes)
                  .set_schedule_map(schedule).compute_flow().get_must_dependence())
        anti = (isl.UnionAccessInfo.from_sink(writes).set_may_source(reads).set_kill(writes)
                .set_schedule_map(schedule).compute_flow().get_may_dependence())
        for kind, relation in (("flow", flow), ("anti", anti), ("output", output)):
            out += _split(poly, kind, tensor, relation)
    return tuple(out)


@cached("poly.memory_dependences", 256)
def _memory_dependences(poly: KernelPolyhedra) -> tuple[Dependence, ...]:
    """Memory-based dependences: every ordered pair touching the same element.

    Used when reductions may be reordered: their accumulation dependences are dropped,
    so chains through them no longer order e.g. a consumer after *every* update of an
    accumulator; these all-pairs relations do."""
    before = poly.original_map.lex_lt_union_map(poly.original_map)
    out: list[Dependence] = []
    for tensor in sorted({s.target for s in poly.statements}):
        writes = _restrict_range_to(poly.writes, tensor)
        reads = _restrict_range_to(poly.reads, tensor)
        pairs = {
            "flow": writes.apply_range(reads.reverse()),
            "anti": reads.apply_range(writes.reverse()),
            "output": writes.apply_range(writes.reverse()),
        }
        for kind, relation in pairs.items():
            out += _split(poly, kind, tensor, relation.intersect(before))
    return tuple(out)


def _restrict_range_to(accesses: isl.UnionMap, tensor: str) -> isl.UnionMap:
    out = isl.UnionMap("{ }")
    for m in _maps(accesses):
        if m.get_tuple_name(isl.dim_type.out) == tensor:
            out = out.union(isl.UnionMap(m))
    return out


def dependences(statements: Statements, *, reduction_reorderable: bool = False,
                tensor_shapes: Mapping[str, Sequence[int]] | None = None) -> tuple[Dependence, ...]:
    """The dependences a schedule of the kernel must respect.

    Strict (default): exact value-based flow, anti and output dependences, including the
    accumulation chain of every reduction (`C += ...` at k before k + 1).

    `reduction_reorderable=True`: '+' and 'max' are treated as associative and
    commutative, so updates of one reduction to one element may run in any order; the
    accumulation dependences are left out and every other dependence is taken
    memory-based. Floating-point '+' then rounds differently; the equivalence check
    compares with a per-dtype tolerance, which absorbs that. Concurrent updates are still
    a race: parallel loops are checked against all dependences in either mode.
    """
    return _dependences_of(kernel_polyhedra(statements, tensor_shapes), reduction_reorderable)


def _dependences_of(poly: KernelPolyhedra, reduction_reorderable: bool) -> tuple[Dependence, ...]:
    if not reduction_reorderable:
        return tuple(d for d in _exact_dependences(poly) if not _on_running_max(poly, d))
    return tuple(d for d in _memory_dependences(poly) if not d.reduction and not _on_running_max(poly, d))


def _on_running_max(poly: KernelPolyhedra, dep: Dependence) -> bool:
    """A dependence between a `max=` statement and a statement computed against that running
    max (`ir.program.Rescale`, the online softmax): it reads the max so far by design, so the
    order that matters is the loop nest's (`rescale_violations`), not every update's."""
    ends = (poly.statement(dep.source), poly.statement(dep.sink))
    return any(a.reduce == "max" and a.target == dep.tensor and b.rescale is not None and b.rescale.tensor == dep.tensor
               for a, b in (ends, ends[::-1]))


def rescale_violations(schedule) -> tuple["Violation", ...]:
    """Why statements computed against a running max (`Rescale`) are misplaced in `schedule`'s
    loop nest (empty: placed right). Over the max's reduction (key) loops, either every one
    of them runs in the max's own tile loops — after the max's update of each tile (program
    order) and before the next, so each sum rescales by the growth it saw — or none does:
    they run after the max is complete. Anything in between would add terms computed
    against different maxima into one sum."""
    from autocomp_jupyter.ir.loopnest import Compute, TileLoop, lower

    kernel = schedule.kernel
    groups: dict[int, list[int]] = {}
    for c, st in enumerate(kernel.statements):
        if st.rescale is not None:
            writer = next((i for i, w in enumerate(kernel.statements)
                           if w.target == st.rescale.tensor and w.reduce == "max"), None)
            if writer is None:
                return (Violation("schedule", statement_name(c), "", st.rescale.tensor,
                                  message=f"{st.target} is rescaled by {st.rescale.tensor}, which no max= "
                                          "statement of the kernel writes"),)
            groups.setdefault(writer, []).append(c)
    if not groups:
        return ()
    for e, st in enumerate(kernel.statements):      # values relative to the running max ...
        if st.rescale is None or st.reduce is not None:
            continue
        for c, reader in enumerate(kernel.statements):
            if any(a.tensor == st.target for a in reader.reads()) and (
                    reader.rescale is None or reader.rescale.tensor != st.rescale.tensor or reader.reduce != "+"):
                return (Violation("schedule", statement_name(e), statement_name(c), st.target,
                                  message=f"{reader.target} reads {st.target}, which is relative to the running "
                                          f"{st.rescale.tensor}, without rescaling its sums as it grows"),)
    paths: dict[int, list] = {}

    def walk(nodes, around):
        for node in nodes:
            if isinstance(node, TileLoop):
                walk(node.body, around + [node])
            elif isinstance(node, Compute):
                paths[node.index] = around
    walk(lower(schedule).body, [])
    out = []
    for m, members in groups.items():
        keys = {kernel.loop_map(m)[l.name] for l in kernel.statements[m].reduction_loops
                if l.name in kernel.loop_map(m)}
        over = lambda i: tuple(id(t) for t in paths[i] if t.anchor in keys)    # noqa: E731
        shared = [c for c in members if over(c) == over(m)]
        mixed = [c for c in members if c not in shared and set(over(c)) & set(over(m))]
        if (shared and len(shared) != len(members)) or mixed:
            apart = [c for c in members if c not in shared]
            out.append(Violation(
                "schedule", statement_name(m), statement_name(apart[0]), kernel.statements[m].target,
                message=f"{kernel.statements[apart[0]].target} is computed against the running "
                        f"{kernel.statements[m].target} but runs outside its key tiles while "
                        f"{', '.join(kernel.statements[c].target for c in shared)} run inside them"))
    return tuple(out)


# --------------------------------------------------------------------------- legality


class Violation:
    """One dependence the new schedule breaks, with an example pair of instances.

    `distance` is sink - source in the new schedule's time space for the example pair
    (lexicographically non-positive, which is what makes it a violation).

    The verdict itself is decided from dependence distances; the example pair, distance
    and message are worked out by isl only when first read (a tuner that only asks which
    loops were refused never pays for them).
    """

    __slots__ = ("kind", "source", "sink", "tensor", "reduction", "loop", "_explained", "_explain")
    _LAZY = ("example_source", "example_sink", "distance", "message")

    def __init__(self, kind: str, source: str, sink: str, tensor: str,
                 example_source: tuple[int, ...] | None = None,
                 example_sink: tuple[int, ...] | None = None,
                 distance: tuple[int, ...] | None = None, message: str | None = None,
                 reduction: bool = False, loop: str | None = None, *, explain=None):
        self.kind, self.source, self.sink, self.tensor = kind, source, sink, tensor
        self.reduction, self.loop = reduction, loop
        self._explain = explain
        self._explained = None if explain is not None else (
            example_source, example_sink, distance, message)

    def _details(self) -> tuple:
        if self._explained is None:
            self._explained = self._explain()
            self._explain = None
        return self._explained

    example_source = property(lambda self: self._details()[0])
    example_sink = property(lambda self: self._details()[1])
    distance = property(lambda self: self._details()[2])
    message = property(lambda self: self._details()[3])

    def _key(self) -> tuple:
        return (self.kind, self.source, self.sink, self.tensor, *self._details(), self.reduction, self.loop)

    def __eq__(self, other) -> bool:
        return isinstance(other, Violation) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self):  # pickles and copies explained (isl objects do not pickle)
        return (Violation, self._key())

    def __repr__(self) -> str:
        fields = zip(("kind", "source", "sink", "tensor", *self._LAZY, "reduction", "loop"), self._key())
        return f"Violation({', '.join(f'{k}={v!r}' for k, v in fields)})"

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Legality:
    """The verdict of `check_legal`: `ok`, or the dependences broken (`violated`)."""

    ok: bool
    violated: tuple[Violation, ...] = ()

    def __bool__(self) -> bool:
        return self.ok

    @property
    def reason(self) -> str:
        """One line for a rollback log: the first violation, and how many more."""
        if self.ok:
            return ""
        more = len(self.violated) - 1
        return self.violated[0].message + (f" (and {more} more)" if more else "")


def _time_of(schedule_map: isl.UnionMap, name: str, instance: tuple[int, ...]) -> tuple[int, ...]:
    point = isl.Set(f"{{ {name}[{', '.join(map(str, instance))}] }}")
    image = isl.Set.from_union_set(isl.UnionSet(point).apply(schedule_map))
    return _point_coordinates(image.sample_point(), image.dim(isl.dim_type.set))


def _example(relation: isl.Map) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The lexicographically first (source, sink) pair of a relation."""
    n_in = relation.dim(isl.dim_type.in_)
    n_out = relation.dim(isl.dim_type.out)
    point = relation.wrap().lexmin().sample_point()
    coords = _point_coordinates(point, n_in + n_out)
    return coords[:n_in], coords[n_in:]


def _format_instance(name: str, instance: tuple[int, ...]) -> str:
    return f"{name}[{', '.join(map(str, instance))}]"


def check_legal(statements: Statements, new_schedule: ScheduleLike, *,
                reduction_reorderable: bool = False, parallel: Iterable[str] = (),
                tensor_shapes: Mapping[str, Sequence[int]] | None = None) -> Legality:
    """Is `new_schedule` a legal reordering of the kernel?

    Legal iff every dependence's sink runs strictly after its source (a lexicographically
    positive time difference), and every loop named in `parallel` carries no dependence.

    `new_schedule`: a `KernelSchedule` (from `original_schedule` / `fused_schedule` and
    its transformations), a mapping `{"S0": "{ S0[i, j, k] -> [j, i, k] }", ...}`, or an
    isl union map. Time vectors of different lengths are padded with zeros. A schedule must
    give distinct instances of a statement distinct times (ValueError otherwise).

    `reduction_reorderable`: see `dependences`. Parallel loops are always checked against
    every dependence, reductions included: a parallel reduction loop is a race.

    Example: `check_legal([gemm], original_schedule([gemm]).reverse("k")).reason` reads
    "flow dependence S0[i, j, k] -> S0[i, j, k + 1] on C (reduction over k) would be
    reversed: S0[0, 0, 1] would run at [...], not after S0[0, 0, 0] at [...] (and 2 more)".
    """
    poly = kernel_polyhedra(statements, tensor_shapes)
    if isinstance(new_schedule, KernelSchedule):
        # Tuners and sliders revisit schedules: remember verdicts per kernel and schedule.
        return _check_legal_cached(poly, new_schedule, reduction_reorderable, tuple(parallel))
    return _check_legal(poly, new_schedule, reduction_reorderable, tuple(parallel))


@cached("poly.check_legal_cached", 4096)
def _check_legal_cached(poly: KernelPolyhedra, schedule: KernelSchedule, reduction_reorderable: bool,
                        parallel: tuple[str | int, ...]) -> Legality:
    return _check_legal(poly, schedule, reduction_reorderable, parallel)


def _check_legal(poly: KernelPolyhedra, new_schedule: ScheduleLike, reduction_reorderable: bool,
                 parallel: tuple[str | int, ...]) -> Legality:
    # Decided exactly from each dependence's time differences (sink time - source time of
    # every dependent pair, as an isl set): a dependence is broken iff one difference is
    # lexicographically non-positive, and carried at a position iff one difference is zero
    # on every outer position and non-zero there. Examples and messages come later, lazily.
    levels = _levels_under(poly, new_schedule)
    violations: list[Violation] = []
    for dep in _dependences_of(poly, reduction_reorderable):
        if levels(dep)[0]:
            violations.append(Violation(dep.kind, dep.source, dep.sink, dep.tensor, reduction=dep.reduction,
                                        explain=partial(_explain_order, poly, new_schedule, dep)))
    # Parallel loops: with reductions reorderable, an accumulation may run in any order, so
    # every pair of instances updating one element must stay in one iteration of a parallel
    # loop (memory-based pairs: the original order's chain k -> k + 1 does not name the pair
    # (r, s) -> (r + 1, s) that races once the order is (s, r)).
    parallel_deps = _memory_dependences(poly) if reduction_reorderable else _exact_dependences(poly)
    for loop in parallel:
        positions = _loop_positions(new_schedule, loop)
        for dep in parallel_deps:
            position = _position_for(dep, positions)
            if position is not None and position in levels(dep)[1]:
                violations.append(Violation(
                    dep.kind, dep.source, dep.sink, dep.tensor, reduction=dep.reduction, loop=str(loop),
                    explain=partial(_explain_parallel, poly, new_schedule, dep, loop, position)))
    return Legality(not violations, tuple(violations))


def _explain_order(poly: KernelPolyhedra, new_schedule: ScheduleLike, dep: "Dependence") -> tuple:
    """(example source, example sink, time distance, message) of a dependence the schedule breaks."""
    schedule_map = _schedule_map(poly, new_schedule)
    not_after = schedule_map.lex_ge_union_map(schedule_map)  # x -> y: y runs no later than x
    broken = isl.UnionMap(dep.relation).intersect(not_after)
    source, sink = _example(_maps(broken)[0])
    source_time = _time_of(schedule_map, dep.source, source)
    sink_time = _time_of(schedule_map, dep.sink, sink)
    distance = tuple(b - a for a, b in zip(source_time, sink_time))
    how = "reversed" if any(distance) else "run at the same time"
    message = (f"{dep.describe(poly)} would be {how}: {_format_instance(dep.sink, sink)} "
               f"would run at {list(sink_time)}, not after {_format_instance(dep.source, source)} "
               f"at {list(source_time)}")
    return source, sink, distance, message


def _explain_parallel(poly: KernelPolyhedra, new_schedule: ScheduleLike, dep: "Dependence",
                      loop: str | int, position: int) -> tuple:
    """(example source, example sink, time distance, message) of a dependence `loop` carries."""
    schedule_map = _schedule_map(poly, new_schedule)
    pairs = _maps(isl.UnionMap(dep.relation).apply_domain(schedule_map).apply_range(schedule_map))[0]
    carried_times = _carried_at(pairs, position)
    # An instance pair behind a carried time pair, for the message.
    instance_pairs = (isl.UnionMap(dep.relation)
                      .intersect(schedule_map.apply_range(isl.UnionMap(carried_times))
                                 .apply_range(schedule_map.reverse())))
    source, sink = _example(_maps(instance_pairs)[0])
    distance = tuple(b - a for a, b in zip(_time_of(schedule_map, dep.source, source),
                                           _time_of(schedule_map, dep.sink, sink)))
    message = (f"loop {loop} cannot run in parallel: it carries the {dep.describe(poly)} "
               f"(e.g. {_format_instance(dep.source, source)} -> {_format_instance(dep.sink, sink)})")
    return source, sink, distance, message


Levels = tuple[bool, frozenset]


def _levels_under(poly: KernelPolyhedra, schedule: ScheduleLike, validate: bool = True):
    """Validate `schedule` (unless told not to) and return dep -> (broken, positions carrying it) under it.

    A `KernelSchedule` is checked statement by statement, and each dependence's levels are
    cached on its two statements' schedules (a tuner varying one nest reuses the rest)."""
    if isinstance(schedule, KernelSchedule):
        by_name = {s.name: s for s in schedule.statements}
        for name, statement in zip(poly.names, poly.statements):
            error = _statement_schedule_error(statement, name, by_name.get(name)) if validate else None
            if error:
                raise ValueError(error)
        width = schedule.width
        memo: dict = {}   # per check: each dependence is asked once per parallel loop

        def kernel_levels(dep: "Dependence") -> Levels:
            found = memo.get(dep)   # Dependence compares by identity
            if found is None:
                found = memo[dep] = _kernel_levels(dep, by_name[dep.source], by_name[dep.sink], width)
            return found

        return kernel_levels
    schedule_map = _schedule_map(poly, schedule)
    if validate:
        _check_schedule(poly, schedule_map)
    cache: dict = {}

    def levels(dep: "Dependence") -> Levels:
        if dep not in cache:
            pairs = _maps(isl.UnionMap(dep.relation).apply_domain(schedule_map).apply_range(schedule_map))
            cache[dep] = _delta_levels(pairs[0].deltas()) if pairs else (False, frozenset())
        return cache[dep]

    return levels


@cached("poly.statement_map", 8192)
def _statement_map(schedule: StatementSchedule, width: int) -> isl.Map:
    return schedule.to_isl(width)


def _kernel_levels(dep: "Dependence", source: StatementSchedule, sink: StatementSchedule,
                   width: int) -> Levels:
    # Keyed by the relation's value, not the Dependence object: dependences with equal
    # relations (flow/anti/output of one reduction, repeated layers) share the result.
    key = (dep.relation_text, source, sink, width)
    levels = _RELATION_LEVELS.get(key)
    if levels is None:
        pairs = dep.relation.apply_domain(_statement_map(source, width)).apply_range(_statement_map(sink, width))
        levels = _delta_levels(pairs.deltas())
        _RELATION_LEVELS.put(key, levels)
    return levels


_RELATION_LEVELS = LRU("poly.relation_levels", 16384)


def _delta_levels(deltas: isl.Set) -> Levels:
    """From the time differences (sink - source) of a dependence's pairs: whether some pair
    runs its sink no later than its source (a lexicographically non-positive difference),
    and the positions carrying it (a difference zero outside the position, non-zero at it)."""
    broken = False
    carried = []
    rest = deltas  # differences zero on every position so far
    for position in range(deltas.dim(isl.dim_type.set)):
        if rest.is_empty():
            return broken, frozenset(carried)
        negative = not rest.upper_bound_val(isl.dim_type.set, position, -1).is_empty()
        positive = not rest.lower_bound_val(isl.dim_type.set, position, 1).is_empty()
        broken = broken or negative
        if negative or positive:
            carried.append(position)
        rest = rest.fix_val(isl.dim_type.set, position, 0)
    return broken or not rest.is_empty(), frozenset(carried)


# --------------------------------------------------------------------------- parallelism and distances


def _loop_positions(schedule: ScheduleLike, loop: str | int) -> dict[str, int] | int:
    """Where `loop` sits in time: one position, or one per statement that has it (point
    loops of different statements may sit at different depths)."""
    if isinstance(loop, int):
        return loop
    if not isinstance(schedule, KernelSchedule):
        raise ValueError(f"name loops by time position (int) for a schedule given as isl maps, not {loop!r}")
    positions = {s.name: s.position(loop) for s in schedule.statements if s.position(loop) is not None}
    if not positions:
        raise ValueError(f"no loop named {loop!r} (loops: {', '.join(schedule.loop_dims())})")
    return positions


def _position_for(dep: "Dependence", positions: dict[str, int] | int) -> int | None:
    if isinstance(positions, int):
        return positions
    # Statements apart in the nest are ordered by a sequence dim outside the loop, so the
    # outermost of the two positions is the one that can carry the dependence.
    candidates = [positions[n] for n in (dep.source, dep.sink) if n in positions]
    return min(candidates) if candidates else None


def _carried_at(time_pairs: isl.Map, position: int) -> isl.Map:
    """The pairs of `time_pairs` (source time -> sink time) carried at `position`: equal
    on every outer dimension, different at `position`."""
    width = time_pairs.dim(isl.dim_type.in_)
    ins = [f"t{d}" for d in range(width)]
    outs = [f"u{d}" for d in range(width)]
    equal = [f"u{d} = t{d}" for d in range(position)] or ["true"]
    carried = isl.Map(f"{{ [{', '.join(ins)}] -> [{', '.join(outs)}] : "
                      f"{' and '.join(equal)} and (u{position} < t{position} or u{position} > t{position}) }}")
    return time_pairs.intersect(carried)


def _is_carried(poly: KernelPolyhedra, levels, positions: dict[str, int] | int) -> bool:
    for dep in _exact_dependences(poly):
        position = _position_for(dep, positions)
        if position is not None and position in levels(dep)[1]:
            return True
    return False


def is_parallel(statements: Statements, loop: str | int, schedule: ScheduleLike | None = None,
                *, tensor_shapes: Mapping[str, Sequence[int]] | None = None) -> bool:
    """Whether `loop` (a name in a KernelSchedule, or a time position) carries no
    dependence under `schedule` (default: the original schedule).

    Always strict: a reduction loop carries its accumulation, so it is never parallel.
    """
    poly = kernel_polyhedra(statements, tensor_shapes)
    schedule = poly.original if schedule is None else schedule
    return not _is_carried(poly, _levels_under(poly, schedule, validate=False), _loop_positions(schedule, loop))


def parallel_loops(statements: Statements, schedule: KernelSchedule | None = None, *,
                   tensor_shapes: Mapping[str, Sequence[int]] | None = None) -> tuple[str, ...]:
    """Loops of `schedule` (default: the original schedule) that carry no dependence,
    outermost first. Always strict, like `is_parallel`."""
    poly = kernel_polyhedra(statements, tensor_shapes)
    schedule = poly.original if schedule is None else schedule
    if not isinstance(schedule, KernelSchedule):
        raise ValueError("parallel_loops needs a KernelSchedule (loops are named there)")
    levels = _levels_under(poly, schedule, validate=False)
    return tuple(l for l in schedule.loop_dims() if not _is_carried(poly, levels, _loop_positions(schedule, l)))


@dataclass(frozen=True)
class DependenceDistance:
    """A dependence's distance per loop of a schedule, for the report.

    `distance[n]` is the (min, max) of sink time - source time along loop `loops[n]`
    (equal when uniform); `carried_by` is the loop that carries it, or the statement
    order (`seq...`) when it is loop-independent.
    """

    kind: str
    source: str
    sink: str
    tensor: str
    loops: tuple[str, ...]
    distance: tuple[tuple[int, int], ...]
    carried_by: str | None
    reduction: bool

    @property
    def uniform(self) -> tuple[int, ...] | None:
        if all(lo == hi for lo, hi in self.distance):
            return tuple(lo for lo, _ in self.distance)
        return None

    def __str__(self) -> str:
        parts = [str(lo) if lo == hi else f"{lo}..{hi}" for lo, hi in self.distance]
        carried = f" carried by {self.carried_by}" if self.carried_by else ""
        return (f"{self.kind} {self.source}->{self.sink} on {self.tensor}: "
                f"({', '.join(parts)}) over ({', '.join(self.loops)}){carried}")


def dependence_distances(statements: Statements, schedule: KernelSchedule | None = None, *,
                         tensor_shapes: Mapping[str, Sequence[int]] | None = None
                         ) -> tuple[DependenceDistance, ...]:
    """Every (exact) dependence with its distance along each loop of `schedule`.

    GEMM under its original schedule: flow S0->S0 on C, (0, 0, 1) over (i, j, k), carried by k.
    """
    poly = kernel_polyhedra(statements, tensor_shapes)
    schedule = poly.original if schedule is None else schedule
    schedule_map = _schedule_map(poly, schedule)
    names = [d.name for d in max(schedule.statements, key=lambda s: len(s.dims)).dims]
    names += [f"seq_pad{n}" for n in range(schedule.width - len(names))]
    dims_of = {s.name: set(s.dim_names()) for s in schedule.statements}
    out = []
    for dep in _exact_dependences(poly):
        # Distances along the loops both ends run in (a consumer has no k to differ along).
        shared = dims_of[dep.source] & dims_of[dep.sink]
        loop_positions = [p for p, n in enumerate(names)
                          if n in shared and n in schedule.loop_dims()]
        pairs = _maps(isl.UnionMap(dep.relation).apply_domain(schedule_map)
                      .apply_range(schedule_map))[0]
        deltas = pairs.deltas()
        bounds = [(deltas.dim_min_val(p).to_python(), deltas.dim_max_val(p).to_python())
                  for p in range(schedule.width)]
        carried = _delta_levels(deltas)[1]
        carried_by = names[min(carried)] if carried else None
        out.append(DependenceDistance(dep.kind, dep.source, dep.sink, dep.tensor,
                                      tuple(names[p] for p in loop_positions),
                                      tuple(bounds[p] for p in loop_positions),
                                      carried_by, dep.reduction))
    return tuple(out)
