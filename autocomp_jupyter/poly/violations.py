"""Verdicts and their messages: `Legality` (ok, or the dependences broken) and `Violation`.

The verdict is decided in `legality` from time differences alone; a violation's example pair
of instances, its time distance and its message are worked out here, from the full relations,
only when first read (`_explain_order` for a dependence run out of order, `_explain_parallel`
for one a parallel loop carries).
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from autocomp_jupyter.poly.dependences import Dependence
from autocomp_jupyter.poly.polyhedra import KernelPolyhedra
from autocomp_jupyter.poly.schedules import ScheduleLike, _schedule_map
from autocomp_jupyter.poly.text import _maps, _point_coordinates


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
