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
from typing import Mapping

from .accel.cost import evaluate, evaluate_program
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


def evaluate_variant(plan: Plan, target: Target, kernel_name: str, tiles=None, order=None,
                     annotations=None) -> dict:
    """Re-score kernel `kernel_name` of `plan` with other tiles / order / annotations.

    Returns {"legal", "reason", "metrics", "time_s", "roofline_point", "schedule", "plan"}:
    legality from isl (with the reason when illegal), the kernel's metrics from the cost
    model, the program's total time with this variant, its point on the program's roofline,
    the variant's Schedule and Plan. A variant the schedule refuses outright is illegal
    with that reason (and no plan)."""
    from . import poly
    from .report import roofline_point

    current = plan.schedule_of(kernel_name)
    try:
        schedule = variant_schedule(current, tiles, order, annotations)
        cost = evaluate(schedule, target)
    except (ValueError, TypeError, AttributeError) as err:
        return {"legal": False, "reason": str(err), "metrics": {}, "time_s": float("nan"),
                "roofline_point": None, "schedule": current}
    verdict = poly.check_schedule(schedule)
    variant = plan.with_schedule(kernel_name, schedule)
    total = evaluate_program(variant.schedules, target).total
    return {"legal": verdict.ok, "reason": verdict.reason if not verdict.ok else "",
            "metrics": cost.metrics(), "time_s": total.time_s,
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
