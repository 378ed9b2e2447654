"""The scheduling pass: loop transformations, then parallel / vector / unroll annotations.

When it applies: to every kernel of the plan, after tiling. Steps, each logged:

1. Loop transformations in the rule file's `priority` order (rules/default.yaml):
   - interchange: every swap of two adjacent loops in each level's order
     (`Schedule.order`), scored by the cost model; the best legal one is applied, repeatedly,
     while it gains. Refusals name the broken dependence; the others say how much slower.
   - every other registered loop-transformation primitive (`schedule/`, `loop_transform`),
     its candidates drawn from the primitive's own decisions and scored in one batch: the
     fastest candidate that gains is applied where isl says legal; a primitive the model
     cannot see gain in says why (`why_no_gain`).
   Legality: every candidate is checked with `poly.check_schedule`, the one policy.
2. `parallel_outer`: the loops that carry no dependence (isl, always strict: a reduction
   loop is never parallel) are marked `parallel`; refused loops are logged with the
   dependence they carry.
3. `vectorize_inner`: the innermost loop is vectorised when it is the contiguous (stride-1,
   last index) loop of the output and carries nothing; if another loop is innermost, moving
   the contiguous loop there is tried (legal and no slower), else nothing is vectorised. On
   SIMT lanes (a GPU's warp) whose stride-1 loop is shorter than a warp, the output loop
   that fills one best takes its place (`space.lane_loop`); so on a vector unit beside a PE
   array for a kernel it runs, with the stride-1 loop still weighed by the cost model.
4. `unroll_factor`: the innermost loop is unrolled by it (capped at its tile).

Each new schedule is re-checked (isl; and, when an order changed, the tiled execution check
of `interp`); a kernel failing either is rolled back to its tiled schedule.

Example (GEMM + relu): `interchange` at vregs `i,j,k -> i,k,j`, `parallel i, j` (k refused:
"loop k cannot run in parallel: it carries the flow dependence S0[i, j, k] -> S0[i, j, k + 1]
on C (reduction over k)"), `vectorize j`, `unroll 8`.
"""
from __future__ import annotations

from dataclasses import replace

from .. import poly
import numpy as np

from ..accel.cost import evaluate, kernel_model
from ..caches import LRU
from ..canon import schedule_key
from ..ir.schedule import Kernel, Schedule
from ..passes import PassContext, PassOutcome, rollback_entry, rule_entry
from ..ir.plan import Plan
from ..verify import verify_schedule
from ..space import contiguous_loop, lane_loop
from ..schedule.primitive import loop_transforms

PASS = "scheduling"
MIN_GAIN = 1e-3          # a transformation must save at least this fraction of the time
MAX_INTERCHANGES = 6


def scheduling_pass(plan: Plan, ctx: PassContext) -> PassOutcome:
    params = ctx.rules.scheduling
    log: list[dict] = []
    rollbacks: list[dict] = []
    schedules = []
    priority = params.get("priority", ["interchange"])          # the rule files give it (rules/default.yaml)
    for kernel, tiled in zip(plan.kernels, plan.schedules):
        schedule = tiled
        for transform in priority:
            if transform in loop_transforms():     # interchange and the registered loop transformations
                schedule = _transform(transform)(schedule, ctx, log)
        if params.get("parallel_outer", True):
            schedule = annotate_parallel(schedule, ctx, log)
        if params.get("vectorize_inner", True):
            schedule = annotate_vectorize(schedule, ctx, log)
        factor = int(params.get("unroll_factor", 1))
        if factor > 1:
            schedule = annotate_unroll(schedule, factor, log, ctx.target)
        if schedule == tiled:
            schedules.append(tiled)
            continue
        before, after = _time(tiled, ctx), _time(schedule, ctx)
        if after > before * (1 + MIN_GAIN):
            log.append(_rule("schedule", kernel, False, f"the scheduled kernel is slower ({before * 1e6:.1f} -> "
                                                        f"{after * 1e6:.1f} us): tiled schedule kept"))
            schedules.append(tiled)
            continue
        reordered = any(schedule.order_at(lv) != tiled.order_at(lv) for lv in schedule.levels)
        problem = verify_schedule(schedule, plan.program, ctx, execute=reordered)
        if problem:
            rollbacks.append(rollback_entry(PASS, kernel.name, problem))
            schedules.append(tiled)
            continue
        schedules.append(schedule)
    return PassOutcome(Plan(plan.program, plan.kernels, tuple(schedules), "scheduled"), tuple(log), tuple(rollbacks))


# --------------------------------------------------------------------------- legality helpers


def interchange_verdict(schedule: Schedule, level: str, order: tuple[str, ...]):
    """Is the order `order` at `level` legal (the rest of the schedule unchanged)?"""
    return poly.check_schedule(_with_order(schedule, level, order))


def parallel_verdict(schedule: Schedule, loop: str):
    """Does `loop` carry no dependence in `schedule`'s nest (so it may run in parallel)?"""
    return poly.check_schedule(replace(schedule, annotations={**schedule.annotations, "parallel": (loop,)}))


def _with_order(schedule: Schedule, level: str, order: tuple[str, ...]) -> Schedule:
    orders = {lv: schedule.order_at(lv) for lv in schedule.levels}
    orders[level] = tuple(order)
    return replace(schedule, order=orders)


def _why_not(verdict, ctx: PassContext) -> str:
    """isl's reason for a refusal, for the log; a context that keeps no log (the library
    baseline tuning a kernel alone) skips finding the example pair behind it."""
    return verdict.reason if getattr(ctx, "explain", True) else "illegal (isl)"


def _rule(name: str, kernel: Kernel, applied: bool, why: str) -> dict:
    return rule_entry(f"{name}_{kernel.name}", PASS, kernel.ops, applied, why)


# The interchange search revisits schedules, and a network's repeated layers ask the same
# ones: times by canonical schedule (tensor names by position) and target.
_TIMES = LRU("scheduling.time", 8192)


def _time(schedule: Schedule, ctx: PassContext) -> float:
    key = (schedule_key(schedule), ctx.target)
    found = _TIMES.get(key)
    if found is None:
        found = evaluate(schedule, ctx.target).time_s
        _TIMES.put(key, found)
    return found


def _times(schedules: list[Schedule], ctx: PassContext) -> list[float]:
    """`_time` of schedules of one kernel, the unknown ones scored in one batch (the cost
    model scores each row alone: a batch gives each schedule its own time)."""
    keys = [(schedule_key(s), ctx.target) for s in schedules]
    out = [_TIMES.get(k) for k in keys]
    missing = [i for i, t in enumerate(out) if t is None]
    if len(missing) == 1:
        out[missing[0]] = _time(schedules[missing[0]], ctx)
    elif missing:
        model = kernel_model(schedules[missing[0]].kernel, ctx.target)
        rows = [model.normalise(*model.schedule_arrays(schedules[i])) for i in missing]
        times = model.evaluate_batch(*(np.concatenate([r[j] for r in rows]) for j in range(4))).time_s
        for i, t in zip(missing, times):
            out[i] = float(t)
            _TIMES.put(keys[i], out[i])
    return out


# --------------------------------------------------------------------------- transformations


def try_interchange(schedule: Schedule, ctx: PassContext, log: list) -> Schedule:
    """Apply the best legal adjacent swap at any level (the `interchange` primitive) while
    it saves time."""
    from ..schedule import apply_step

    kernel = schedule.kernel
    current = _time(schedule, ctx)
    for _ in range(MAX_INTERCHANGES):
        candidates = []
        for level in schedule.levels:
            order = list(schedule.order_at(level))
            for p in range(len(order) - 1):
                if kernel.extents[order[p]] == 1 or kernel.extents[order[p + 1]] == 1:
                    continue
                candidate = apply_step(schedule, {"primitive": "interchange", "level": level,
                                                  "loop": order[p], "other": order[p + 1]})
                candidates.append((level, order[p], order[p + 1], candidate))
        times = _times([c[3] for c in candidates], ctx)
        candidates = [(t,) + c for t, c in zip(times, candidates)]
        candidates.sort(key=lambda c: c[0])
        applied = None
        for t, level, a, b, candidate in candidates:
            what = f"interchange {a}<->{b} at {level}"
            if t > current * (1 - MIN_GAIN):
                log.append(_rule("interchange", kernel, False,
                                 f"{what}: no gain: {100 * (t / current - 1):+.1f}% time "
                                 f"({current * 1e6:.1f} -> {t * 1e6:.1f} us)"))
                continue
            verdict = poly.check_schedule(candidate)
            if not verdict.ok:
                log.append(_rule("interchange", kernel, False, f"{what}: illegal: {_why_not(verdict, ctx)}"))
                continue
            log.append(_rule("interchange", kernel, True,
                             f"{what}: legal (isl) and {current / t:.2f}x less time "
                             f"({current * 1e6:.1f} -> {t * 1e6:.1f} us); order at {level} now "
                             f"{','.join(candidate.order_at(level))}"))
            applied = (t, candidate)
            break
        if applied is None:
            break
        current, schedule = applied
    return schedule


def try_primitive(name: str, schedule: Schedule, ctx: PassContext, log: list) -> Schedule:
    """Every step the primitive `name`'s decisions offer on `schedule`, scored in one batch;
    the fastest that gains is applied if isl says legal."""
    from ..schedule import PRIMITIVES

    cls = PRIMITIVES[name]
    steps = [step for decision in cls.decisions(schedule.kernel, schedule.levels)
             for value in decision.choices[1:]
             for step in [cls.step_for(schedule, decision.key, value)] if step is not None]
    return _try_steps(name, schedule, steps, ctx, log)


def _try_steps(name: str, schedule: Schedule, steps: list[dict], ctx: PassContext, log: list) -> Schedule:
    """Score the schedules the candidate `steps` build (one batch), then apply the fastest
    that gains MIN_GAIN and is legal (isl); log one line either way."""
    from ..schedule import ScheduleError, apply_step

    kernel = schedule.kernel
    candidates = []
    for step in steps:
        try:
            candidates.append((step, apply_step(schedule, step)))
        except ScheduleError:          # e.g. a pair of loops a user's trace already transformed
            continue
    if not candidates:
        return schedule
    current = _time(schedule, ctx)
    times = _times([c for _, c in candidates], ctx)
    ranked = sorted(zip(times, range(len(candidates))))
    for t, i in ranked:
        if t > current * (1 - MIN_GAIN):
            break
        step, candidate = candidates[i]
        what = _describe(step)
        verdict = poly.check_schedule(candidate)
        if not verdict.ok:
            log.append(_rule(name, kernel, False, f"{what}: illegal: {_why_not(verdict, ctx)}"))
            continue
        log.append(_rule(name, kernel, True, f"{what}: legal (isl) and {current / t:.2f}x less time "
                                             f"({current * 1e6:.1f} -> {t * 1e6:.1f} us)"))
        return candidate
    from ..schedule import PRIMITIVES

    best = ranked[0][0]
    why = PRIMITIVES[name].why_no_gain
    log.append(_rule(name, kernel, False,
                     f"{len(candidates)} candidates ({', '.join(_describe(c[0]) for c in candidates[:3])}"
                     f"{', ...' if len(candidates) > 3 else ''}): no gain, best {100 * (best / current - 1):+.1f}% "
                     f"time{f' ({why})' if why else ''}"))
    return schedule


def _describe(step: dict) -> str:
    from ..schedule import from_step

    return from_step(step).describe()


def _transform(name: str):
    if name == "interchange":
        return try_interchange
    return lambda schedule, ctx, log: try_primitive(name, schedule, ctx, log)


# --------------------------------------------------------------------------- annotations


def annotate_parallel(schedule: Schedule, ctx: PassContext, log: list) -> Schedule:
    """Mark every loop that carries no dependence parallel (outermost first); log the
    refused ones with the dependence they carry."""
    kernel = schedule.kernel
    outer_order = schedule.order_at(schedule.levels[0]) if schedule.levels else kernel.loop_names
    legal, refused = [], []
    for loop in outer_order:
        if kernel.extents[loop] == 1:
            continue
        verdict = parallel_verdict(schedule, loop)
        (legal if verdict.ok else refused).append((loop, verdict))
    for loop, verdict in refused:
        log.append(_rule("parallel_outer", kernel, False, f"{loop}: {_why_not(verdict, ctx)}"))
    loops = tuple(l for l, _ in legal)
    if not loops:
        return schedule
    candidate = replace(schedule, annotations={**schedule.annotations, "parallel": loops})
    joint = poly.check_schedule(candidate)
    if not joint.ok:
        log.append(_rule("parallel_outer", kernel, False, f"{', '.join(loops)} together: {_why_not(joint, ctx)}"))
        return schedule
    before, after = _time(schedule, ctx), _time(candidate, ctx)
    log.append(_rule("parallel_outer", kernel, True,
                     f"parallel {', '.join(loops)}: no dependence carried (isl); "
                     f"{before * 1e6:.1f} -> {after * 1e6:.1f} us"))
    return candidate


def annotate_vectorize(schedule: Schedule, ctx: PassContext, log: list) -> Schedule:
    """Vectorise the output's stride-1 loop when it carries nothing (where that loop is
    shorter than the lanes, on SIMT lanes or a vector unit beside a PE array, the output loop
    that fills them best: `space.lane_loop`; beside a PE array the stride-1 loop stays a
    candidate, and the cost model picks the faster).

    If it is the innermost loop, it is vectorised there. Otherwise moving it innermost is
    tried (isl-legal); the cost model then picks the cheapest of: moved and vectorised,
    vectorised where it is (outer-loop vectorisation), or not vectorised."""
    kernel = schedule.kernel
    lanes = lane_loop(kernel, ctx.target)
    stride_one = contiguous_loop(kernel)
    annotations = {k: v for k, v in schedule.annotations.items() if k != "vectorize"}
    without = replace(schedule, annotations=annotations)
    if lanes is None or not schedule.levels:
        log.append(_rule("vectorize_inner", kernel, False, "the output has no stride-1 loop"))
        return without
    found = [_vectorized(schedule, ctx, lanes, stride_one)]
    if ctx.target.compute.kind == "systolic" and stride_one is not None and stride_one != lanes:
        found.append(_vectorized(schedule, ctx, stride_one, stride_one))
    if len(found) > 1:
        found.sort(key=lambda f: _time(f[0], ctx))     # stable: the fuller lanes on a tie
    best, applied, why = found[0]
    log.append(_rule("vectorize_inner", kernel, applied, why))
    return best


def _vectorized(schedule: Schedule, ctx: PassContext, lanes: str, stride_one: str | None
                ) -> tuple[Schedule, bool, str]:
    """(schedule, vectorised, why) with `lanes` vectorised where the cost model finds it
    cheapest (innermost, where it is, or not at all), legal by isl."""
    kernel = schedule.kernel
    target = kernel.anchor_statement.target
    along = (f"stride-1 in {target}" if lanes == stride_one else
             f"{'a warp' if ctx.target.compute.kind == 'simt' else 'the vector lanes'} along it: "
             f"{target}'s stride-1 loop {stride_one} has {kernel.extents.get(stride_one)} points")
    annotations = {k: v for k, v in schedule.annotations.items() if k != "vectorize"}
    without = replace(schedule, annotations=annotations)
    verdict = parallel_verdict(schedule, lanes)
    if not verdict.ok:
        return without, False, f"{lanes}: {_why_not(verdict, ctx)}"
    level = schedule.levels[-1]
    order = list(schedule.order_at(level))
    in_place = replace(schedule, annotations={**annotations, "vectorize": lanes})
    if order[-1] == lanes:
        return in_place, True, f"vectorize {lanes}: the innermost loop, {along}, carries no dependence (isl)"
    options = [(_time(in_place, ctx), "in_place", in_place), (_time(without, ctx), "none", without)]
    moved = _with_order(in_place, level, tuple([l for l in order if l != lanes] + [lanes]))
    moved_verdict = poly.check_schedule(moved)
    if moved_verdict.ok:
        options.append((_time(moved, ctx), "moved", moved))
    options.sort(key=lambda o: (o[0], o[1] != "moved"))
    best_time, how, best = options[0]
    times = {h: t for t, h, _ in options}
    detail = ", ".join(f"{h} {t * 1e6:.1f} us" for h, t in times.items())
    if how == "moved":
        why = f"vectorize {lanes} ({along}), moved innermost at {level}: legal (isl); {detail}"
    elif how == "in_place":
        why = (f"vectorize {lanes} ({along}) where it is, not innermost ({order[-1]} is): "
               + ("moving it innermost is illegal: " + _why_not(moved_verdict, ctx) if not moved_verdict.ok
                  else "moving it innermost is slower") + f"; {detail}")
    else:
        why = f"not vectorised: innermost loop {order[-1]} is not the lanes' loop {lanes} ({along}); {detail}"
    return best, how != "none", why


def annotate_unroll(schedule: Schedule, factor: int, log: list, target=None) -> Schedule:
    """Unroll the innermost loop by `factor`, capped at its innermost tile and at what the
    registers hold (`accel.cost.fitting_unroll`: past them the cost model charges the spill)."""
    from ..accel.cost import fitting_unroll

    kernel = schedule.kernel
    if not schedule.levels:
        return schedule
    inner = schedule.order_at(schedule.levels[-1])[-1]
    tile = schedule.tile_sizes()[inner][-1]
    unroll = max(1, min(factor, tile))
    fits = fitting_unroll(schedule, target, unroll) if target is not None and unroll > 1 else unroll
    if fits <= 1:
        log.append(_rule("unroll", kernel, False, f"innermost loop {inner} has a tile of 1" if unroll <= 1 else
                         f"unroll {inner} by 2 would spill the registers ({unroll_note(schedule, target, 2)})"))
        return schedule
    capped = f", {unroll} would spill the registers" if fits < unroll else ""
    log.append(_rule("unroll", kernel, True, f"unroll {inner} by {fits} (unroll_factor {factor}, tile {tile}{capped})"))
    return replace(schedule, annotations={**schedule.annotations, "unroll": fits})


def unroll_note(schedule: Schedule, target, factor: int) -> str:
    from ..accel.cost import unroll_note as note

    return note(replace(schedule, annotations={**schedule.annotations, "unroll": factor}), target)
