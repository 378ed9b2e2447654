"""One kernel's search space as the tuner's genome: tile sizes per loop and level, an order
per level, parallel marks, the vectorised loop (the arrays the cost model scores), and the
repair that keeps a genome inside its enclosing tiles."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..accel.cost import fitting_unroll, kernel_model
from ..accel.target import Target
from ..ir.schedule import Kernel, Schedule
from ..space import TileSpace


# --------------------------------------------------------------------------- the space of one kernel


@dataclass
class KernelSpace:
    """What may vary in one kernel's schedule, and the incumbent it starts from.

    Genomes are arrays: tiles [n, D, L] (sizes, inner <= outer), orders [n, L, D]
    (permutations per level), parallel [n, D] bool, vectorize [n] (loop index, -1 = the
    innermost loop). `unroll` is carried from the incumbent, capped where a candidate's
    registers would spill it (`schedule`): a fitting unroll costs nothing in the model, so
    the genome's unroll-free score is the schedule's.
    """

    kernel: Kernel
    target: Target
    levels: tuple[str, ...]
    choices: list[np.ndarray]                 # per loop, sorted tile sizes
    incumbent: Schedule
    incumbent_genome: tuple                   # (tiles[D, L], orders[L, D], parallel[D], vectorize)
    tune_orders: bool = True
    tune_annotations: bool = True
    max_spill: float = math.inf               # the rules' max_spill_ratio (or the incumbent's, if larger)

    @property
    def D(self) -> int:
        return len(self.kernel.loops)

    @property
    def L(self) -> int:
        return len(self.levels)

    @staticmethod
    def of(schedule: Schedule, target: Target, divisors_only: bool = False, tune_orders: bool = True,
           tune_annotations: bool = True, max_spill: float = math.inf) -> "KernelSpace":
        kernel = schedule.kernel
        model = kernel_model(kernel, target)
        levels = target.tiling_levels
        tiles, orders, parallel, vectorize = model.normalise(*model.schedule_arrays(schedule))
        sizes = TileSpace.of(kernel, target)  # the candidate space's tuner view (a whole loop: its extent)
        choices = [np.union1d(sizes.tuner(d, divisors_only), tiles[0, d])   # the incumbent's sizes stay reachable
                   for d in range(len(kernel.loops))]
        space = KernelSpace(kernel, target, levels, choices, schedule, (), tune_orders, tune_annotations)
        space.max_spill = max(max_spill, float(space.spill(tiles)[0]))
        rt, ro = space.repair(tiles[:1], np.array(orders[:1]))
        space.incumbent_genome = (rt[0], ro[0], np.array(parallel[0]), int(vectorize[0]))
        return space

    def spill(self, tiles) -> np.ndarray:
        """Spill ratio of each tiling (as the cost model defines it): the worst level's
        footprint overflow, a fraction of its capacity."""
        model = kernel_model(self.kernel, self.target)
        footprint = model.capacity_footprints(tiles)
        return np.clip(footprint / model.capacity[None, :] - 1.0, 0.0, None).max(axis=1)

    # ------------------------------------------------------------------ genomes ↔ schedules

    def schedule(self, tiles, orders, parallel, vectorize) -> Schedule:
        # what the genome does not hold (unroll, point-loop order, staging) is the incumbent's;
        # its unroll capped at what these tiles' registers hold (the genome's score prices none)
        return unroll_fitted(Schedule.of_arrays(self.kernel, self.levels, tiles, orders, parallel, int(vectorize),
                                                keep=self.incumbent), self.target)

    def repair(self, tiles, orders):
        """Clip tiles inside their enclosing tile; at levels where no loop iterates, keep the
        next inner order (the order there changes nothing); order loops that run once at a
        level by index after the iterating ones (so equivalent genomes coincide), but for a
        compute point's loop, which keeps its place."""
        extents = np.array([l.extent for l in self.kernel.loops])
        tiles = np.minimum(np.minimum.accumulate(np.minimum(tiles, extents[None, :, None]), axis=2), extents[None, :, None])
        tiles = np.maximum(tiles, 1)
        n, D, L = tiles.shape
        enclosing = np.concatenate([np.broadcast_to(extents[None, :, None], (n, D, 1)), tiles[:, :, :-1]], axis=2)
        iterates = tiles < enclosing                                  # [n, D, L]
        # A compute point's loop keeps its place at its level even where it runs once: which
        # tile loops come before it decides the region its producers compute.
        names = self.kernel.loop_names
        for _, loop, level in self.kernel.compute_at:
            if level in self.levels and loop in names:
                iterates[:, names.index(loop), self.levels.index(level)] = True
        orders = orders.copy()
        for h in range(L - 1):   # the innermost level's order also orders the point loops: keep it
            it = np.take_along_axis(iterates[:, :, h], orders[:, h, :], axis=1)   # in order position
            # stable sort: iterating loops first in their order, then the others by index
            key = np.where(it, np.arange(D)[None, :], D + orders[:, h, :])
            pos = np.argsort(key, axis=1, kind="stable")
            orders[:, h, :] = np.take_along_axis(orders[:, h, :], pos, axis=1)
        return tiles, orders


def unroll_fitted(schedule: Schedule, target: Target) -> Schedule:
    """`schedule` with its unroll capped at what its registers hold (`accel.cost.fitting_unroll`):
    the tuner scores candidates without unroll, which is exact once no unroll spills."""
    fits = fitting_unroll(schedule, target) if schedule.unroll > 1 else schedule.unroll
    return schedule if fits == schedule.unroll else replace(schedule, annotations={**schedule.annotations,
                                                                                   "unroll": fits})


def _genome_keys(tiles, orders, parallel, vectorize) -> list[bytes]:
    n = len(tiles)
    flat = np.concatenate([tiles.reshape(n, -1), orders.reshape(n, -1), parallel.reshape(n, -1).astype(np.int64),
                           vectorize.reshape(n, 1)], axis=1).astype(np.int64)
    return [row.tobytes() for row in flat]


Batch = tuple  # (tiles [n, D, L], orders [n, L, D], parallel [n, D] bool, vectorize [n])


def _stack(genomes: list) -> Batch:
    return (np.stack([g[0] for g in genomes]), np.stack([g[1] for g in genomes]),
            np.stack([np.asarray(g[2], dtype=bool) for g in genomes]),
            np.array([int(g[3]) for g in genomes], dtype=np.int64))


def _concat(*batches: Batch) -> Batch:
    batches = [b for b in batches if b is not None and len(b[0])]
    return tuple(np.concatenate([b[i] for b in batches]) for i in range(4))


