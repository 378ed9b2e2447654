"""`check_legal`: whether a new schedule keeps every dependence, and which loops carry one.

Decided exactly: for each dependence, isl computes the set of time differences (sink time -
source time) of its pairs under the new schedule. The dependence is broken iff that set holds
a lexicographically non-positive vector, and carried at a position iff it holds a vector zero
on every outer position and non-zero there (`_delta_levels`). Differences are cached per
dependence and per schedule of its two statements, so a tuner changing one statement's nest
recomputes only the dependences that touch it, and a loop-by-loop parallel query reuses them.
Where the relation and the two time vectors split into groups of loops (a tiled nest's
digits), the same answer comes group by group from small sets, each group's kept
(`poly.separable`).
"""
from __future__ import annotations

from functools import partial
from typing import Iterable, Mapping, Sequence

import islpy as isl

from autocomp_jupyter.caches import LRU, cached
from autocomp_jupyter.poly.dependences import (Dependence, _dependences_of, _exact_dependences,
                                               _memory_dependences)
from autocomp_jupyter.poly.polyhedra import KernelPolyhedra, kernel_polyhedra
from autocomp_jupyter.poly.separable import dependence_levels
from autocomp_jupyter.poly.schedules import (KernelSchedule, ScheduleLike, StatementSchedule, _check_schedule,
                                             _schedule_map, _statement_schedule_error)
from autocomp_jupyter.poly.text import Statements, _maps
from autocomp_jupyter.poly.violations import Legality, Violation, _explain_order, _explain_parallel


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


@cached("poly.check_legal_cached", 16384)
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


Levels = tuple[bool, frozenset]


def _levels_under(poly: KernelPolyhedra, schedule: ScheduleLike, validate: bool = True):
    """Validate `schedule` (unless told not to) and return dep -> (broken, positions carrying it) under it.

    A `KernelSchedule` is checked statement by statement, and each dependence's levels are
    cached on its two statements' schedules (a tuner varying one nest reuses the rest)."""
    if isinstance(schedule, KernelSchedule):
        by_name = {s.name: s for s in schedule.statements}
        width = schedule.width
        for name, statement in zip(poly.names, poly.statements):
            error = _statement_schedule_error(statement, name, by_name.get(name), width) if validate else None
            if error:
                raise ValueError(error)
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
        # group of loops by group where the relation and the two time vectors split (a tiled
        # nest's digits): the same answer from sets of a few dimensions, each group's kept
        levels = dependence_levels(dep.relation, dep.relation_text, source.loops, source.exprs(width),
                                   sink.loops, sink.exprs(width))
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
