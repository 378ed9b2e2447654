"""Variant evaluation: one kernel of a plan re-scored with another schedule — what the Tune
tab's sliders and `Result.evaluate_variant` call.

    evaluate_variant(plan, target, kernel, tiles=..., order=..., annotations=...) -> dict
    evaluate_variant(plan, target, kernel, schedule=trace or ScheduleBuilder) -> dict

A variant is either changes to the kernel's current schedule (tiles, orders, annotations) or
a whole schedule given as its trace (replayed from the untiled nest, each step checked: a
refused step is illegal with the primitive's own message, naming the loop and the
dependence). The answer comes from the same sources every pass uses: legality from isl
(`poly.check_schedule`), time from the cost model (`accel.cost`), for the kernel alone (its
metrics) and for the whole plan with this variant in place (its program time), and, when
asked (by default for a trace), equivalence from running it tile by tile against the
interpreter, on the scaled twin when the program is large (`verify.verify_schedule`, the
check every pass's step gets). It never changes the plan it is given; the variant's plan
is returned for keeping.
"""
from __future__ import annotations

from dataclasses import replace
from numbers import Integral
from typing import Mapping

from .accel.cost import evaluate, unroll_note
from .canon import evaluate_program
from .heap import collector_paused
from .accel.target import Target
from .ir.plan import Plan
from .ir.schedule import Schedule


def variant_schedule(current: Schedule, tiles: Mapping | None = None, order=None,
                     annotations: Mapping | None = None) -> Schedule:
    """`current` with the given changes, made as trace steps (the Tune tab makes traces):
    `tiles` is a partial {loop: {level: size}} table over the current one (`tile` steps);
    `order` a {level: loops} map or one sequence for every level (`reorder` steps);
    `annotations` replaces the current ones ({"parallel": loops, "vectorize": loop,
    "unroll": factor, ...}: their primitives' steps on
    the schedule without them). Raises a `ScheduleError` (a ValueError for a malformed
    table) for a variant the primitives refuse (an unknown loop or level, a size out of range)."""
    from .schedule import apply_step

    steps = [{"primitive": "tile", "loop": loop, "level": level, "size": size}
             for loop, per_level in (tiles or {}).items() for level, size in per_level.items()]
    if order is not None:  # a list is the order at every level
        if not isinstance(order, Mapping):
            order = {level: tuple(order) for level in current.levels}
        steps += [{"primitive": "reorder", "level": level, "order": list(loops)} for level, loops in order.items()]
    schedule = current
    for step in steps:
        schedule = apply_step(schedule, step)
    if annotations is not None:
        bare = replace(schedule, annotations={})
        wanted = replace(bare, annotations=dict(annotations))     # its normal form: bare's steps, then these
        schedule = bare
        for step in wanted.trace[len(bare.trace):]:
            schedule = apply_step(schedule, step)
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
                     annotations=None, *, schedule=None, verify: bool | None = None) -> dict:
    """Re-score kernel `kernel_name` of `plan` with other tiles / order / annotations, or with
    the schedule `schedule` builds (a trace, a `ScheduleBuilder` or a Schedule of this kernel).

    Returns {"legal", "reason", "verified", "metrics", "bound", "limits_s", "time_s",
    "roofline_point", "schedule", "plan", "note", "unroll"}: legality from isl (with the
    reason when illegal), the kernel's metrics, binding term and every term it compares
    (`limits_s`) from the cost model, what its unroll costs in registers (`unroll`: the
    values its unrolled body keeps live, the spill charged and why; '' when it does not
    unroll), the program's total time with this variant, its point on the program's
    roofline, the variant's Schedule and Plan; `verified` is True when the variant ran tile
    by tile and matched the interpreter (on the scaled twin of a large program), False
    with the reason when it did not, None when not asked (`verify`; by default asked for a
    `schedule`, not for slider changes). Bad input — an unknown loop or
    level, a tile outside 1..extent, an order that is not a permutation (`variant_problems`),
    a trace step its primitive refuses — or a variant the schedule refuses outright is
    illegal with every reason, `"error": True` and no plan; a refused step also gives its
    `primitive`, `loop` and `step`."""
    with collector_paused():      # the modelled answer at once: no cyclic collection in the middle of it
        answer = _modelled(plan, target, kernel_name, tiles, order, annotations, schedule)
    if answer.get("error"):
        return answer
    verify = (schedule is not None) if verify is None else verify
    if verify and answer["legal"]:
        answer["verified"], answer["reason"] = verify_variant(plan, answer["schedule"])
    elif verify:
        answer["verified"] = False
    return answer


def _modelled(plan: Plan, target: Target, kernel_name: str, tiles, order, annotations, schedule) -> dict:
    """`evaluate_variant`'s answer before any equivalence check (`verified` None)."""
    from . import poly
    from .report import roofline_point
    from .schedule import ScheduleError

    current = plan.schedule_of(kernel_name)
    if schedule is not None:
        new = _replayed(current, schedule)
        if isinstance(new, dict):
            return new
    else:
        problems = variant_problems(current, tiles, order)
        if problems:
            return _refused(current, "; ".join(problems))
        try:
            new = variant_schedule(current, tiles, order, annotations)
        except ScheduleError as err:
            return _refused(current, err.diagnostics[0].message, primitive=err.primitive, loop=err.loop)
        except (ValueError, TypeError, AttributeError) as err:
            return _refused(current, str(err))
    try:
        cost = evaluate(new, target)
    except (ValueError, TypeError, AttributeError) as err:
        return _refused(current, str(err))
    verdict = poly.check_schedule(new)
    variant = plan.with_schedule(kernel_name, new)
    total = evaluate_program(variant.schedules, target).total
    return {"legal": verdict.ok, "reason": verdict.reason if not verdict.ok else "",
            "verified": None, "metrics": cost.metrics(), "bound": cost.bound, "limits_s": dict(cost.limits),
            "time_s": total.time_s, "roofline_point": roofline_point(plan.program, total, "variant"),
            "schedule": new, "plan": variant, "note": fission_note(new), "unroll": unroll_note(new, target)}


def _refused(current: Schedule, reason: str, **where) -> dict:
    return {"legal": False, "reason": reason, "verified": None, "metrics": {}, "time_s": float("nan"),
            "roofline_point": None, "schedule": current, "error": True, **where}


def _replayed(current: Schedule, schedule):
    """The Schedule a trace / builder / Schedule gives for `current`'s kernel, or the refusal."""
    from .schedule import ScheduleBuilder, ScheduleError, replay

    if isinstance(schedule, Schedule):
        if schedule.kernel.without_compute_at() != current.kernel.without_compute_at():
            return _refused(current, f"that schedule is for kernel {schedule.kernel.name}, not {current.kernel.name}")
        return schedule
    trace = schedule.trace if isinstance(schedule, ScheduleBuilder) else schedule
    if not isinstance(trace, (list, tuple)) or not all(isinstance(s, Mapping) for s in trace):
        return _refused(current, "a schedule is a trace (a list of steps {\"primitive\": NAME, ...}), "
                                 "a ScheduleBuilder (res.schedule(kernel)) or a Schedule")
    try:
        return replay(current.kernel, trace, current.levels, filename="schedule")
    except ScheduleError as err:
        return _refused(current, err.diagnostics[0].message, primitive=err.primitive, loop=err.loop, step=err.step)


def verify_variant(plan: Plan, schedule: Schedule) -> tuple[bool, str]:
    """(True, '') when `schedule` (a variant of one of `plan`'s kernels) is legal and its
    tiled run matches the interpreter — on the scaled twin of a large program, as the
    pipeline checks each step — else (False, the reason). What the Tune tab runs in the
    background after showing a variant's modelled numbers."""
    from .verify import verify_schedule

    try:
        problem = verify_schedule(schedule, plan.program, execute=True)
    except Exception as err:  # a check that cannot run is a failed check, said with its reason
        problem = f"the check could not run: {type(err).__name__}: {err}"
    return (not problem), problem


def fission_note(schedule) -> str:
    """'' unless `schedule` tiles a loop the searches keep whole (`loopnest.whole_loops`):
    the nest then makes one pass over that loop per statement group (fission), which the
    cost model, scoring one pass, does not charge — say so next to the time."""
    from .ir.loopnest import single_pass, whole_loops

    kernel = schedule.kernel
    sizes = schedule.tile_sizes()
    split = sorted(l for l in whole_loops(kernel) if any(t < kernel.extents[l] for t in sizes[l]))
    if not split or single_pass(schedule):      # tiled innermost there, it splits nothing
        return ""
    return (f"tiling {', '.join(split)} splits the kernel into one pass over {'them' if len(split) > 1 else 'it'} "
            "per statement group (a later statement reads a reduction over it or across its tiles: see the loop "
            "nest); the cost model scores a single pass, so this time is optimistic (the searches keep "
            f"{', '.join(split)} whole)")
