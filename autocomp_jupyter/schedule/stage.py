"""`stage(tensor, level)`: hold a tensor's tiles at a memory level.

They are copied in before that level's loops run and reused from there, even where the
level's roles (weights, activations, outputs) would let the tensor stream past it (a
Gemmini accumulator holding inputs, a register file holding activations). The cost model
charges the copies and the footprint; the pseudo-kernel shows the DMA. The search chooses,
per tensor and level, staged or not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..ir.schedule import Kernel, Schedule
from .errors import BadArgumentError, UnknownLoopError
from .primitive import Decision, Primitive, annotate, hint, known_level, register


@register
@dataclass(frozen=True)
class Stage(Primitive):
    """Hold `tensor`'s tiles at `level`: they are copied in before the loops of that level
    run, and reused from there, even where the level's roles (weights, activations,
    outputs) would let the tensor stream past it (a Gemmini accumulator holding inputs, a
    register file holding activations). The cost model charges the copies and the
    footprint; the pseudo-kernel shows the DMA."""

    tensor: str
    level: str
    name = "stage"
    rank = 5

    def check(self, schedule: Schedule) -> None:
        known_level(schedule, self.name, self.level)
        names = [t.name for t in schedule.kernel.tensors]
        if not isinstance(self.tensor, str) or self.tensor not in names:
            raise UnknownLoopError(f"no tensor {self.tensor!r} in this kernel; it uses {', '.join(names)}",
                                   primitive=self.name, hint=hint(self.tensor, names))
        if (self.tensor, self.level) in _staged(schedule):
            raise BadArgumentError(f"{self.tensor} is already staged at {self.level}", primitive=self.name)

    def rewrite(self, schedule: Schedule) -> Schedule:
        return annotate(schedule, stage=_staged(schedule) + ((self.tensor, self.level),))

    @classmethod
    def decision_label(cls, key: tuple) -> str:
        return f"{cls.name} {key[0]} @ {key[1]}"

    @classmethod
    def decisions(cls, kernel: Kernel, levels: Sequence[str]) -> tuple[Decision, ...]:
        return tuple(Decision(cls.name, (t.name, level), (False, True)) for t in kernel.tensors for level in levels)

    @classmethod
    def step_for(cls, schedule: Schedule, key: tuple, value):
        return {"primitive": cls.name, "tensor": key[0], "level": key[1]} if value else None


def _staged(schedule: Schedule) -> tuple:
    return schedule.stage
