"""`compute_at(tensor, loop, level)`: a producer computed inside the anchor's tiles.

The statements writing `tensor` run inside the anchor's tile loop over `loop` at `level`,
over the region of it that tile reads: a convolution's rows with their halo, a contraction's
hidden-dimension tile (`ir.loopnest.regions`). It is then never held whole; a halo shared by
neighbouring tiles is recomputed in each. A chain's tensors are computed consumer first (the
region of each follows what the next reads). The search chooses, per producer, a compute
point (loop and level) or none.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from ..ir.schedule import Kernel, Schedule
from .errors import BadArgumentError, UnknownLoopError
from .primitive import Decision, Primitive, hint, known_level, known_loop, register


@register
@dataclass(frozen=True)
class ComputeAt(Primitive):
    """Compute `tensor` (produced and consumed inside the kernel) in every tile of `loop` at
    `level`, over the region of it that tile reads: a convolution's rows with their halo,
    a contraction's hidden-dimension tile. It is then never held whole; a halo shared by
    neighbouring tiles is recomputed in each. Compute a chain's tensors consumer first (the
    region of each follows what the next reads)."""

    tensor: str
    loop: str
    level: str
    name = "compute_at"
    rank = 4
    hint_when_illegal = ("leave the loops around the compute point sequential, or compute it at a loop "
                         "its region follows")

    def check(self, schedule: Schedule) -> None:
        from ..ir.loopnest import ComputeAtError, regions

        known_loop(schedule, self.name, self.loop)
        known_level(schedule, self.name, self.level)
        kernel = schedule.kernel
        names = _computed(kernel)
        if not isinstance(self.tensor, str) or self.tensor not in names:
            raise UnknownLoopError(f"no tensor {self.tensor!r} computed in this kernel; it computes {', '.join(names)}",
                                   primitive=self.name, hint=hint(self.tensor, names))
        if self.tensor == kernel.anchor_statement.target:
            raise BadArgumentError(f"{self.tensor} is the anchor's own tensor: compute its producers at its tiles",
                                   primitive=self.name, loop=self.loop)
        try:
            regions(kernel.with_compute_at(self.tensor, self.loop, self.level))
        except ComputeAtError as err:
            raise BadArgumentError(str(err), primitive=self.name, loop=self.loop,
                                   hint="only a tensor the kernel's anchor (or a tensor computed at its tiles) "
                                        "reads can be computed at the anchor's tiles") from None

    def rewrite(self, schedule: Schedule) -> Schedule:
        return replace(schedule, kernel=schedule.kernel.with_compute_at(self.tensor, self.loop, self.level))

    @classmethod
    def decisions(cls, kernel: Kernel, levels: Sequence[str]) -> tuple[Decision, ...]:
        anchor = kernel.anchor_statement.target
        points = tuple((loop, level) for level in levels for loop in kernel.loop_names)
        written = {st.target: i for i, st in enumerate(kernel.statements)}
        producers = sorted((t for t in _computed(kernel) if t != anchor), key=lambda t: -written[t])
        return tuple(Decision(cls.name, (tensor,), (None, *points)) for tensor in producers)

    @classmethod
    def step_for(cls, schedule: Schedule, key: tuple, value):
        if value is None:
            return None
        loop, level = value
        return {"primitive": cls.name, "tensor": key[0], "loop": loop, "level": level}


def _computed(kernel: Kernel) -> list[str]:
    return list(dict.fromkeys(st.target for st in kernel.statements))
