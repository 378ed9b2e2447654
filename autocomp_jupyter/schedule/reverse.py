"""`reverse(loop)`: the point loop of `loop` runs from its last value down to its first.

Refused (by isl) where the loop carries a dependence in its direction. The search chooses,
per loop, reversed or not.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.schedule import Schedule
from .errors import BadArgumentError
from .primitive import LoopToggle, annotate, known_loop, register


@register
@dataclass(frozen=True)
class Reverse(LoopToggle):
    """The point loop of `loop` runs from its last value down to its first."""

    loop: str
    name = "reverse"
    loop_transform = True
    why_no_gain = "the model prices a tile's traffic and compute, which a loop's direction inside the tile does not change"
    rank = 7
    hint_when_illegal = "a loop that carries a dependence must keep its direction"

    def check(self, schedule: Schedule) -> None:
        known_loop(schedule, self.name, self.loop)
        if self.loop in schedule.reverse:
            raise BadArgumentError(f"loop {self.loop} is already reversed", primitive=self.name, loop=self.loop)

    def rewrite(self, schedule: Schedule) -> Schedule:
        loops = schedule.reverse
        return annotate(schedule, reverse=loops + (self.loop,))
