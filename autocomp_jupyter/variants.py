"""Variant evaluation: one kernel of a plan re-scored with other tiles, loop orders or
annotations — what the Tune tab's sliders and `Result.evaluate_variant` call.

    evaluate_variant(plan, target, kernel, tiles=..., order=..., annotations=...) -> dict

The answer comes from the same two sources every pass uses: legality from isl
(`poly.check_schedule`) and time from the cost model (`accel.cost`), for the kernel alone
(its metrics) and for the whole plan with this variant in place (its program time). It
never changes the plan it is given; the variant's plan is returned for keeping.
"""
from __future__ import annotations

from dataclasses import replace
from numbers import Integral
from typing import Mapping

from .accel.cost import evaluate
from .canon import evaluate_program
from .accel.target import Target
from .ir.plan import Plan
from .ir.schedule import Schedule


def variant_schedule(current: Schedule, tiles: Mapping | None = None, order=None,
                     annotations: Mapping | None = None) -> Schedule:
    """`current` with the given changes: `tiles` is a partial {loop: {level: size}} table
    over the current one; `order` a {level: loops} map or one sequence for every level;
    `annotations` replaces the current ones. Raises ValueError / TypeError for a variant
    the schedule refuses (an unknown loop or level, a size out of range)."""
    schedule = current
    if tiles is not None:  # a partial table updates the current one
        merged = {loop: dict(per_level) for loop, per_level in current.tiles.items()}
        for loop, per_level in tiles.items():
            merged.setdefault(loop, {}).update(per_level)
        schedule = schedule.with_tiles(merged)
    if order is not None:  # a list is the order at every level
        if not isinstance(order, Mapping):
            order = {level: tuple(order) for level in current.levels}
        schedule = schedule.with_order(order)
    if annotations is not None:
        schedule = replace(schedule, annotations=annotations)
    return schedule


def variant_problems(current: Schedule, tiles: Mapping | None = None, order=None) -> list[str]:
    """What is wrong with a variant's input, one sentence each (empty when nothing): an
    unknown loop or level, a tile size that is not an integer from 1 to its loop's extent,
    an order that is not a permutation of the kernel's loops. The schedule itself would clip
    a too-large tile silently, so a typo (300 on a loop of 256) must be caught here."""
    kernel = current.kernel
    extents = {loop.name: loop.extent for loop in kernel.loops}
    levels = tuple(current.levels)
    problems = []
    if tiles is not None and not isinstance(tiles, Mapping):
        return [f"tiles is a dict {{loop: {{level: size}}}}, got {type(tiles).__name__}"]
    for loop, per_level in (tiles or {}).items():
        if loop not in extents:
            problems.append(f"unknown loop {loop!r} in tiles (kernel {kernel.name} has loops "
                            f"{', '.join(extents)})")
            continue
        if not isinstance(per_level, Mapping):
            problems.append(f"tiles[{loop!r}] is a dict {{level: size}}, got {per_level!r}")
            continue
        for level, size in per_level.items():
            if levels and level not in levels:
                problems.append(f"unknown level {level!r} for loop {loop} (the levels are {', '.join(levels)})")
            elif not isinstance(size, Integral) or isinstance(size, bool):
                problems.append(f"tile {loop} = {size!r} at {level} is not an integer")
            elif not 1 <= size <= extents[loop]:
                problems.append(f"tile {loop} = {size} at {level} is " + (f"larger than loop {loop} (extent {extents[loop]})"
                                if size > 0 else "below 1") + f": a tile size is from 1 to {extents[loop]}")
    if order is not None:
        per_level = order if isinstance(order, Mapping) else {None: order}
        for level, loops in per_level.items():
            where = f" at {level}" if level is not None else ""
            if level is not None and levels and level not in levels:
                problems.append(f"unknown level {level!r} in order (the levels are {', '.join(levels)})")
            elif isinstance(loops, str) or sorted(map(str, loops)) != sorted(extents):
                problems.append(f"order{where} {list(loops) if not isinstance(loops, str) else loops!r} is not "
                                f"a permutation of the loops {', '.join(extents)}")
    return problems


def evaluate_variant(plan: Plan, target: Target, kernel_name: str, tiles=None, order=None,
                     annotations=None) -> dict:
    """Re-score kernel `kernel_name` of `plan` with other tiles / order / annotations.

    Returns {"legal", "reason", "metrics", "bound", "limits_s", "time_s", "roofline_point",
    "schedule", "plan"}: legality from isl (with the reason when illegal), the kernel's
    metrics, binding term and every term it compares (`limits_s`) from the cost model, the program's total time with this variant, its point on the program's roofline,
    the variant's Schedule and Plan. Bad input — an unknown loop or level, a tile outside
    1..extent, an order that is not a permutation (`variant_problems`) — or a variant the
    schedule refuses outright is illegal with every reason, `"error": True` and no plan."""
    from . import poly
    from .report import roofline_point

    current = plan.schedule_of(kernel_name)
    problems = variant_problems(current, tiles, order)
    if problems:
        return {"legal": False, "reason": "; ".join(problems), "metrics": {}, "time_s": float("nan"),
                "roofline_point": None, "schedule": current, "error": True}
    try:
        schedule = variant_schedule(current, tiles, order, annotations)
        cost = evaluate(schedule, target)
    except (ValueError, TypeError, AttributeError) as err:
        return {"legal": False, "reason": str(err), "metrics": {}, "time_s": float("nan"),
                "roofline_point": None, "schedule": current, "error": True}
    verdict = poly.check_schedule(schedule)
    variant = plan.with_schedule(kernel_name, schedule)
    total = evaluate_program(variant.schedules, target).total
    return {"legal": verdict.ok, "reason": verdict.reason if not verdict.ok else "",
            "metrics": cost.metrics(), "bound": cost.bound, "limits_s": dict(cost.limits), "time_s": total.time_s,
            "roofline_point": roofline_point(plan.program, total, "variant"), "schedule": schedule,
            "plan": variant, "note": fission_note(schedule)}


def fission_note(schedule) -> str:
    """'' unless `schedule` tiles a loop the searches keep whole (`loopnest.whole_loops`):
    the nest then makes one pass over that loop per statement group (fission), which the
    cost model, scoring one pass, does not charge — say so next to the time."""
    from .ir.loopnest import whole_loops

    kernel = schedule.kernel
    sizes = schedule.tile_sizes()
    split = sorted(l for l in whole_loops(kernel) if any(t < kernel.extents[l] for t in sizes[l]))
    if not split:
        return ""
    return (f"tiling {', '.join(split)} splits the kernel into one pass over {'them' if len(split) > 1 else 'it'} "
            "per statement group (a later statement reads a reduction over it or across its tiles: see the loop "
            "nest); the cost model scores a single pass, so this time is optimistic (the searches keep "
            f"{', '.join(split)} whole)")
