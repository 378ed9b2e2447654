"""`unroll(loop, factor)`: unroll the innermost point loop by `factor`.

`loop` names it and must be the innermost loop at the innermost level when the step runs
(reorder first). The search chooses a factor; the loop is whichever is innermost then.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..ir.schedule import Kernel, Schedule
from .errors import BadArgumentError
from .primitive import Decision, Primitive, annotate, innermost_loop, known_loop, positive, register

FACTORS = (1, 2, 4, 8, 16)


@register
@dataclass(frozen=True)
class Unroll(Primitive):
    """Unroll the innermost point loop by `factor`; `loop` names it, and must be the
    innermost loop at the innermost level when the step runs (reorder first)."""

    loop: str
    factor: int
    name = "unroll"
    rank = 10

    def check(self, schedule: Schedule) -> None:
        known_loop(schedule, self.name, self.loop)
        positive(self.name, self.factor, "factor")
        innermost = innermost_loop(schedule)
        if self.loop != innermost:
            raise BadArgumentError(f"loop {self.loop} is not the innermost loop ({innermost} is)", primitive=self.name,
                                   loop=self.loop,
                                   hint=f"reorder the innermost level to end with {self.loop}, or unroll {innermost}")

    def rewrite(self, schedule: Schedule) -> Schedule:
        return annotate(schedule, unroll=self.factor)

    @classmethod
    def decisions(cls, kernel: Kernel, levels: Sequence[str]) -> tuple[Decision, ...]:
        return (Decision(cls.name, (), FACTORS),)

    @classmethod
    def step_for(cls, schedule: Schedule, key: tuple, value):
        return {"primitive": cls.name, "loop": innermost_loop(schedule), "factor": int(value)} if value > 1 else None
