"""`tile(loop, level, size)`: tiles of `size` over `loop` at a memory level.

A tile loop steps through the tiles; the last tile of a size that does not divide the
extent is a remainder tile. A level a loop is not tiled at keeps the enclosing tile. The
search chooses a size per loop and level: powers of two below the extent, and the extent.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from ..ir.schedule import Kernel, Schedule
from .errors import BadArgumentError
from .primitive import Decision, Primitive, known_level, known_loop, moving_loops, positive, register


@register
@dataclass(frozen=True)
class Tile(Primitive):
    """Tile `loop` at `level` with tiles of `size` (at most the loop's extent; a size that
    does not divide leaves a remainder tile)."""

    loop: str
    level: str
    size: int
    name = "tile"
    rank = 0

    def check(self, schedule: Schedule) -> None:
        known_loop(schedule, self.name, self.loop)
        known_level(schedule, self.name, self.level)
        positive(self.name, self.size, "size", self.loop)
        extent = schedule.kernel.extents[self.loop]
        if self.size > extent:
            raise BadArgumentError(f"tile size {self.size} is larger than loop {self.loop} (extent {extent})",
                                   primitive=self.name, loop=self.loop, hint=f"use a size from 1 to {extent}")

    def rewrite(self, schedule: Schedule) -> Schedule:
        tiles = {l: dict(per) for l, per in schedule.tiles.items()}
        tiles.setdefault(self.loop, {})[self.level] = self.size
        return replace(schedule, tiles=tiles)

    @classmethod
    def decision_label(cls, key: tuple) -> str:
        return f"{cls.name} {key[0]} @ {key[1]}"

    @classmethod
    def decisions(cls, kernel: Kernel, levels: Sequence[str]) -> tuple[Decision, ...]:
        out = []
        for level in levels:
            for loop in moving_loops(kernel):
                extent = kernel.extents[loop]
                sizes = [1 << p for p in range(extent.bit_length()) if (1 << p) < extent] + [extent]
                out.append(Decision(cls.name, (loop, level), (None, *sizes)))
        return tuple(out)

    @classmethod
    def step_for(cls, schedule: Schedule, key: tuple, value):
        loop, level = key
        if value is None:
            return None
        return {"primitive": cls.name, "loop": loop, "level": level,
                "size": min(int(value), schedule.kernel.extents[loop])}
