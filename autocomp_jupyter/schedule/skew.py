"""`skew(loop, by, factor)`: the point loop of `loop` runs over loop + factor*by.

In every statement with both loops; with `loop` outside `by` at the innermost level this is
a wavefront. One skew per pair of loops that no other skew touches. The lowered nest gives
the skewed loop affine bounds (`ir.loopnest`); isl proves the result.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..ir.schedule import Kernel, Schedule
from .errors import BadArgumentError
from .primitive import Decision, Primitive, annotate, known_loop, moving_loops, positive, register


MAX_FACTOR = 3     # skew factors a search or the Tune tab offers (a trace may give any positive factor)


def factors(extent: int) -> tuple[int, ...]:
    """The skew factors offered for a loop of `extent` points: 1 .. min(MAX_FACTOR, extent - 1)."""
    return tuple(range(1, max(2, min(MAX_FACTOR, extent - 1) + 1)))


@register
@dataclass(frozen=True)
class Skew(Primitive):
    """The point loop of `loop` runs over loop + factor*by in every statement with both
    loops; with `loop` outside `by` at the innermost level this is a wavefront."""

    loop: str
    by: str
    factor: int
    name = "skew"
    loop_transform = True
    why_no_gain = ("the model prices a tile's traffic and compute, which a loop's direction or skew inside "
                   "the tile does not change")
    rank = 6
    hint_when_illegal = "try the other order of the two loops, or a different factor"

    def check(self, schedule: Schedule) -> None:
        known_loop(schedule, self.name, self.loop)
        known_loop(schedule, self.name, self.by, "by")
        positive(self.name, self.factor, "factor", self.loop)
        if self.loop == self.by:
            raise BadArgumentError(f"a loop cannot be skewed by itself ({self.loop})", primitive=self.name,
                                   loop=self.loop)
        clash = _clash(schedule, self.loop, self.by)
        if clash:
            other, other_by = clash
            raise BadArgumentError(f"loop {self.loop} by {self.by}: {other} is already skewed by {other_by} "
                                   "(one skew per pair of loops that no other skew touches)",
                                   primitive=self.name, loop=self.loop)

    def describe(self) -> str:
        return f"skew {self.loop} by {self.by}" + (f" x{self.factor}" if self.factor != 1 else "")

    def rewrite(self, schedule: Schedule) -> Schedule:
        skews = schedule.skew
        return annotate(schedule, skew=skews + ((self.loop, self.by, self.factor),))

    @classmethod
    def decision_label(cls, key: tuple) -> str:
        return f"{cls.name} {key[0]} by {key[1]}"

    @classmethod
    def decisions(cls, kernel: Kernel, levels: Sequence[str]) -> tuple[Decision, ...]:
        """Per ordered pair of loops that run more than once: no skew (0), or a factor from 1
        to MAX_FACTOR below `loop`'s extent — from there on the skewed ranges of successive
        `by` iterations no longer overlap, so a larger factor orders nothing new."""
        loops = moving_loops(kernel)
        return tuple(Decision(cls.name, (a, b), (0,) + factors(kernel.extents[a]))
                     for a in loops for b in loops if a != b)

    @classmethod
    def step_for(cls, schedule: Schedule, key: tuple, value):
        loop, by = key
        if not value or _clash(schedule, loop, by):
            return None              # a pair another chosen skew touches: this one stays out
        return {"primitive": cls.name, "loop": loop, "by": by, "factor": int(value)}


def _clash(schedule: Schedule, loop: str, by: str):
    for other, other_by, _ in schedule.skew:
        if loop in (other, other_by) or by == other:
            return other, other_by
    return None
