"""`reorder(level, order)`: the loop order at one memory level, outer to inner.

Loops not listed follow in source order. The search chooses an order per level: every
permutation of the loops that run more than once when there are at most four, otherwise
each loop moved innermost.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Sequence

from ..ir.schedule import Kernel, Schedule
from .errors import BadArgumentError
from .primitive import Decision, Primitive, known_level, known_loop, moving_loops, register

_ALL_ORDERS_UP_TO = 4


@register
@dataclass(frozen=True)
class Reorder(Primitive):
    """The loop order at `level`, outer → inner; loops not listed follow in source order."""

    level: str
    order: Sequence[str]
    name = "reorder"
    rank = 2
    hint_when_illegal = "keep the loop that carries the dependence outside"

    def check(self, schedule: Schedule) -> None:
        known_level(schedule, self.name, self.level)
        if isinstance(self.order, str) or not isinstance(self.order, Sequence):
            raise BadArgumentError(f"order must be a list of loops, got {self.order!r}", primitive=self.name)
        order = tuple(known_loop(schedule, self.name, l) for l in self.order)
        if len(set(order)) != len(order):
            raise BadArgumentError(f"order lists a loop twice: {list(order)}", primitive=self.name)

    def rewrite(self, schedule: Schedule) -> Schedule:
        return replace(schedule, order={**schedule.order, self.level: tuple(self.order)})

    @classmethod
    def decisions(cls, kernel: Kernel, levels: Sequence[str]) -> tuple[Decision, ...]:
        loops = moving_loops(kernel)
        if len(loops) < 2:
            return ()
        if len(loops) <= _ALL_ORDERS_UP_TO:
            orders = [tuple(p) for p in itertools.permutations(loops)]
        else:
            orders = [tuple(l for l in loops if l != last) + (last,) for last in loops]
        return tuple(Decision(cls.name, (level,), (None, *orders)) for level in levels)

    @classmethod
    def step_for(cls, schedule: Schedule, key: tuple, value):
        return None if value is None else {"primitive": cls.name, "level": key[0], "order": list(value)}
