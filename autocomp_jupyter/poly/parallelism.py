"""Parallelism and distances: a loop is parallel iff it carries no (exact) dependence
(`is_parallel`, `parallel_loops`), and each dependence's distance along each loop of a
schedule, for the report (`dependence_distances`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import islpy as isl

from autocomp_jupyter.poly.dependences import _exact_dependences
from autocomp_jupyter.poly.legality import _delta_levels, _levels_under, _loop_positions, _position_for
from autocomp_jupyter.poly.polyhedra import KernelPolyhedra, kernel_polyhedra
from autocomp_jupyter.poly.schedules import KernelSchedule, ScheduleLike, _schedule_map
from autocomp_jupyter.poly.text import Statements, _maps


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
