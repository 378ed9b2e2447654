"""The search space of a kernel's schedules: every primitive's decisions, in trace order.

A point of the space is one value per `Decision`; `trace_from` turns it into the trace that
builds the schedule (each primitive's `step_for` makes its step on the schedule built so
far, so `unroll` unrolls whichever loop the chosen order leaves innermost). A primitive
registered in `PRIMITIVES` adds its decisions here with no change to any search.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..ir.schedule import Kernel, Schedule
from .errors import ScheduleError
from .primitive import PRIMITIVES, Decision, Step, from_step


def decisions(kernel: Kernel, levels: Sequence[str]) -> tuple[Decision, ...]:
    """Every decision a search may make for `kernel`, primitives in trace order (tiles first)."""
    kernel = kernel.without_compute_at()
    ordered = sorted(PRIMITIVES.values(), key=lambda cls: cls.rank)
    return tuple(d for cls in ordered for d in cls.decisions(kernel, tuple(levels)))


def trace_from(kernel: Kernel, levels: Sequence[str], space: Sequence[Decision], values: Sequence) -> list[Step]:
    """The trace a point of the space builds: one value per decision of `space` (in its
    order). A value whose step does not fit what the earlier steps built (a compute point
    the region rules refuse) is left out, as choosing the first value would."""
    return _built(kernel, levels, space, values)[1]


def schedule_from(kernel: Kernel, levels: Sequence[str], space: Sequence[Decision], values: Sequence) -> Schedule:
    """The schedule a point of the space builds (`trace_from`'s steps applied; legality is
    the caller's to ask)."""
    return _built(kernel, levels, space, values)[0]


def _built(kernel: Kernel, levels: Sequence[str], space: Sequence[Decision], values: Sequence):
    if len(values) != len(space):
        raise ValueError(f"{len(values)} values for {len(space)} decisions")
    schedule = Schedule.default(kernel.without_compute_at(), levels)
    steps: list[Step] = []
    for decision, value in zip(space, values):
        step = PRIMITIVES[decision.primitive].step_for(schedule, decision.key, value)
        if step is None:
            continue
        try:
            schedule = from_step(step).apply(schedule)
        except ScheduleError:
            continue
        steps.append(step)
    return schedule, steps


def sample(space: Sequence[Decision], rng: np.random.Generator, keep: float = 0.5) -> list:
    """A random point of the space: each decision keeps its first value with probability `keep`."""
    return [d.choices[0] if rng.random() < keep else d.choices[int(rng.integers(len(d.choices)))] for d in space]
