"""`interchange(level, loop, other)`: swap two loops in the order at one level.

The scheduling pass's move (one adjacent swap at a time, each priced and proved). Every
other level keeps the order it runs now. A search samples orders through `reorder`, which
covers every interchange, so this primitive adds no decision of its own.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..ir.schedule import Schedule
from .errors import BadArgumentError
from .primitive import Primitive, known_level, known_loop, register


@register
@dataclass(frozen=True)
class Interchange(Primitive):
    """Swap `loop` and `other` in the loop order at `level`; every other level keeps the
    order it runs now (the scheduling pass's move)."""

    level: str
    loop: str
    other: str
    name = "interchange"
    rank = 3
    hint_when_illegal = "keep the loop that carries the dependence outside"

    def check(self, schedule: Schedule) -> None:
        known_level(schedule, self.name, self.level)
        known_loop(schedule, self.name, self.loop)
        known_loop(schedule, self.name, self.other, "other")
        if self.loop == self.other:
            raise BadArgumentError(f"a loop cannot be interchanged with itself ({self.loop})",
                                   primitive=self.name, loop=self.loop)

    def rewrite(self, schedule: Schedule) -> Schedule:
        orders = {lv: list(schedule.order_at(lv)) for lv in schedule.levels}   # other levels keep theirs
        order = orders[self.level]
        a, b = order.index(self.loop), order.index(self.other)
        order[a], order[b] = order[b], order[a]
        return replace(schedule, order={lv: tuple(o) for lv, o in orders.items()})
