"""`vectorize(loop)`: the loop the vector unit runs.

The cost model's vector tile; in C, `omp simd` where it is the innermost point loop of an
output. The search chooses one loop, or none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..ir.schedule import Kernel, Schedule
from .primitive import Decision, Primitive, annotate, known_loop, moving_loops, register


@register
@dataclass(frozen=True)
class Vectorize(Primitive):
    """`loop` is the one the vector unit runs (the cost model's vector tile; C's `omp simd`
    where it is the innermost point loop of an output)."""

    loop: str
    name = "vectorize"
    rank = 9

    def check(self, schedule: Schedule) -> None:
        known_loop(schedule, self.name, self.loop)

    def rewrite(self, schedule: Schedule) -> Schedule:
        return annotate(schedule, vectorize=self.loop)

    @classmethod
    def decisions(cls, kernel: Kernel, levels: Sequence[str]) -> tuple[Decision, ...]:
        loops = moving_loops(kernel)
        return (Decision(cls.name, (), (None, *loops)),) if loops else ()

    @classmethod
    def step_for(cls, schedule: Schedule, key: tuple, value):
        return None if value is None else {"primitive": cls.name, "loop": value}
