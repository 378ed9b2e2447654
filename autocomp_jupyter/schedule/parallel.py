"""`parallel(loop)`: every tile and point loop over `loop` runs in parallel.

Refused (by isl, through the trace) where the loop carries a dependence, a reduction's
included: a parallel reduction is a race. The search chooses, per loop, parallel or not (`LoopToggle`).

`parallel(loop=None)` says that only the loops its steps name run in parallel: on a target
whose threads run the output loops by default (`implicit_parallel`), a schedule with no
parallel loop at all is that one step.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.schedule import Schedule
from .primitive import LoopToggle, annotate, known_loop, register


@register
@dataclass(frozen=True)
class Parallel(LoopToggle):
    """Run every tile and point loop over `loop` in parallel: it must carry no dependence,
    a reduction's included (a parallel reduction is a race)."""

    loop: str | None
    name = "parallel"
    rank = 8
    hint_when_illegal = ("leave this loop sequential (a reduction loop never runs in parallel, nor one whose "
                         "tiles recompute a shared region)")

    def check(self, schedule: Schedule) -> None:
        if self.loop is not None:
            known_loop(schedule, self.name, self.loop)

    def rewrite(self, schedule: Schedule) -> Schedule:
        loops = schedule.parallel or ()
        return annotate(schedule, parallel=loops + ((self.loop,) if self.loop not in loops and self.loop else ()))

    def describe(self) -> str:
        return "parallel: only the loops named (none by default)" if self.loop is None else super().describe()
