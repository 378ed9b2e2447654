"""Moves that change a kernel beyond its genome, tried on each kernel's best schedule:
compute_at placements and every step a tuned primitive's decisions offer."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from .. import poly
from ..ir.schedule import Schedule
from ..accel.search_space import unroll_fitted
from .scoring import _arrays, _score_chunk


@dataclass(frozen=True)
class KernelMove:
    """A move that changes the kernel itself, and so its cost model (the genome is one
    model's arrays): tried on each kernel's best schedule after its search, kept where the
    scorer says it is faster, legal and within the spill limit. `candidates(schedule)` are
    the schedules it proposes. A new kind of kernel move is one more entry in `KERNEL_MOVES`."""

    name: str
    step: str                                   # the trace primitive it varies
    candidates: Callable[[Schedule], list]


def _compute_at_placements(schedule: Schedule) -> list[Schedule]:
    """The kernel's computed-at tensors moved together to another compute point: every
    loop their regions follow, at every level but the innermost."""
    from ..ir.loopnest import regions

    kernel = schedule.kernel
    if not kernel.compute_at:
        return []
    spans = regions(kernel)
    followed = {a for loops in spans.values() for r in loops.values() for a, _ in r.terms}
    loops = [l for l in kernel.loop_names if l in followed and kernel.extents[l] > 1]
    out = []
    for level in schedule.levels[:-1] or schedule.levels:
        for loop in loops:
            if all((l, lv) == (loop, level) for _, l, lv in kernel.compute_at):
                continue
            moved = kernel
            for tensor, _, _ in kernel.compute_at:
                moved = moved.with_compute_at(tensor, loop, level)
            out.append(replace(schedule, kernel=moved))
    return out


KERNEL_MOVES: tuple[KernelMove, ...] = (
    KernelMove("compute_at placement", "compute_at", _compute_at_placements),
)
PRIMITIVE_MOVES_CHECKED = 4     # of a primitive's candidates, the fastest few checked (spill, isl)


def _kernel_moves(entry: tuple[float, Schedule], target, score_fn, max_spill: float):
    """(time, schedule) of the best kernel move from `entry`, or None when none beats it:
    the KERNEL_MOVES, then every step a tuned primitive's decisions offer (`_primitive_moves`)."""
    from ..canon import evaluate

    best_time, best = entry
    found = None
    for move in KERNEL_MOVES:
        for candidate in move.candidates(best):
            candidate = unroll_fitted(candidate, target)     # scored without unroll: none may spill
            if evaluate(candidate, target).spill_ratio > max_spill or not poly.check_schedule(candidate).ok:
                continue
            t = float(_score_chunk(score_fn, *((candidate.kernel, target) + _arrays(candidate, target)))[0])
            if t < best_time * (1 - 1e-9):
                found, best_time = (t, candidate), t
    moved = _primitive_moves((best_time, found[1] if found else best), target, score_fn, max_spill)
    return moved or found


def _primitive_moves(entry: tuple[float, Schedule], target, score_fn, max_spill: float):
    """(time, schedule) of the fastest step a `tuned` primitive's decisions offer on `entry`'s
    schedule (schedule/: `split`'s perfect tilings, and any primitive registered later with
    `tuned = True`), scored in one batch; the fastest few that gain are checked for spill and
    legality. None when none beats it. A new primitive is searched here with no change."""
    from ..accel.search_space import refinements
    from ..canon import evaluate

    best_time, best = entry
    candidates = [unroll_fitted(c, target) for c in refinements(best)]
    if not candidates:
        return None
    arrays = [_arrays(c, target) for c in candidates]
    times = _score_chunk(score_fn, best.kernel, target, *(np.concatenate([a[j] for a in arrays]) for j in range(4)))
    for i in np.argsort(times, kind="stable")[:PRIMITIVE_MOVES_CHECKED]:
        t, candidate = float(times[i]), candidates[int(i)]
        if t >= best_time * (1 - 1e-9):
            break
        if evaluate(candidate, target).spill_ratio <= max_spill and poly.check_schedule(candidate).ok:
            return t, candidate
    return None


