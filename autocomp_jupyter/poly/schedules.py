"""Schedules: when each statement instance runs, built by loop transformations.

`KernelSchedule` gives every statement of a kernel a time vector (`StatementSchedule`, one
`ScheduleDim` per time dimension, an isl quasi-affine expression over the statement's loops);
its transformations (interchange, reverse, skew, strip-mine, tile) return new schedules and
check nothing. `original_schedule` (program order, 2d+1 form) and `fused_schedule` (one nest)
build the usual starting points. A schedule in any accepted form (`ScheduleLike`: a
`KernelSchedule`, isl maps per statement, one union map) becomes one union map
(`_schedule_map`), and is valid only if it gives each instance exactly one time and distinct
instances of a statement distinct times (`_check_schedule`, `_statement_schedule_error`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence, Union

import islpy as isl

from autocomp_jupyter.caches import cached, hash_once, state_without_hash
from autocomp_jupyter.ir.program import Statement
from autocomp_jupyter.poly.text import Statements, _bounds_str, _maps, _tuple_str, statement_name

if TYPE_CHECKING:
    from autocomp_jupyter.poly.polyhedra import KernelPolyhedra

ScheduleLike = Union["KernelSchedule", Mapping[str, Union[str, isl.Map]], isl.UnionMap]


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

    # It keys isl's caches (a dependence's levels under two statements' schedules, each
    # statement's map): hashed once, not once per dimension at every lookup.
    __hash__ = hash_once
    __getstate__ = state_without_hash

    def dim_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dims)

    def position(self, dim: str) -> int | None:
        names = self.dim_names()
        return names.index(dim) if dim in names else None

    def to_isl(self, width: int | None = None) -> isl.Map:
        return _parse_schedule(self.isl_text(width))[0]

    def exprs(self, width: int | None = None) -> tuple[str, ...]:
        """Its time expressions, padded with zeros to `width` time dimensions."""
        exprs = tuple(d.expr for d in self.dims)
        return exprs + ("0",) * ((width or len(exprs)) - len(exprs))

    def isl_text(self, width: int | None = None) -> str:
        """Its map as isl text, padded with zeros to `width` time dimensions."""
        return f"{{ {_tuple_str(self.name, self.loops)} -> [{', '.join(self.exprs(width))}] }}"

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


def _statement_schedule_error(statement: Statement, name: str, schedule: StatementSchedule | None,
                               width: int | None = None) -> str | None:
    """`_check_schedule` for one statement of a `KernelSchedule` (cached on its schedule).
    `width`: the kernel schedule's, to which the map is padded (zeros change no verdict; the
    legality check then parses the same text once)."""
    # Only the statement's domain matters (its loops and extents), not what it reads or
    # writes: equal domains in other kernels share the answer.
    return _domain_schedule_error(statement.loops, name, schedule, width)


@cached("poly.domain_schedule_error", 8192)
def _domain_schedule_error(loops: tuple, name: str, schedule: StatementSchedule | None,
                           width: int | None = None) -> str | None:
    if schedule is None:
        return f"the schedule does not cover every instance of {name}"
    if _valid_by_form(tuple(l.name for l in loops), schedule):
        return None
    m, function = _parse_schedule(schedule.isl_text(width))
    return _schedule_error(Statement("", (), None, loops, None), name, isl.UnionMap(m), function)


_TOKEN = re.compile(r"\d+|[A-Za-z_]\w*|\S")
_OPERAND_END = re.compile(r"\d+$|[A-Za-z_]\w*$|\)$")


def _valid_by_form(loops: tuple[str, ...], schedule: StatementSchedule) -> bool:
    """Whether the schedule is valid by its form alone, as the transformations write it:
    each of the statement's loops is a time position of its own (so distinct instances run
    at distinct times), and every position is an expression of its loops in isl's syntax
    with `floor(.../n)`, `mod n` and `n*(...)` by integer constants, a quasi-affine function
    defined on every instance. Anything else is parsed and checked by isl."""
    if schedule.loops != loops or not {d.expr for d in schedule.dims} >= set(loops):
        return False
    for d in schedule.dims:
        tokens = _TOKEN.findall(d.expr)
        depth = 0
        for i, t in enumerate(tokens):
            after = tokens[i + 1] if i + 1 < len(tokens) else ""
            if t == "(":
                depth += 1
            elif t == ")":
                depth -= 1
                if depth < 0:
                    return False
            elif t in ("/", "mod"):
                if not after.isdigit() or int(after) == 0:
                    return False
            elif t == "*":
                if not (i and tokens[i - 1].isdigit()):
                    return False
            elif t == "floor":
                if after != "(":
                    return False
            elif not (t.isdigit() or t in loops or t in "+-"):
                return False
            # two operands side by side (`i j`, `2 (i)`) are no expression
            if _OPERAND_END.match(t) and t not in ("floor", "mod") and after \
                    and (after[0].isalnum() or after in ("(", "_")) and after != "mod":
                return False
        if depth:
            return False
    return True


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
