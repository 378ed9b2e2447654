"""Dependences of a kernel: flow (read after write), anti (write after read), output (write
after write), each kept per (kind, source statement, sink statement, tensor).

Exact (value-based) dependences decide the strict order; memory-based ones (every ordered
pair touching one element) are used when reductions may be reordered. `Dependence.describe`
writes one as a user reads it: `flow dependence S0[i, j, k] -> S0[i, j, k + 1] on C
(reduction over k)`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Mapping, Sequence

import islpy as isl

from autocomp_jupyter.caches import cached
from autocomp_jupyter.poly.polyhedra import KernelPolyhedra, kernel_polyhedra
from autocomp_jupyter.poly.text import Statements, _maps, _point_coordinates, _tuple_str

DEPENDENCE_KINDS = ("flow", "anti", "output")
DEPENDENCE_DESCRIPTIONS = {
    "flow": "read after write",
    "anti": "write after read",
    "output": "write after write",
}


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


# A kernel structure's dependences (isl): MaxViT-T on one preset asks for ~450 structures.
@cached("poly.exact_dependences", 1024)
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


@cached("poly.memory_dependences", 1024)
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
