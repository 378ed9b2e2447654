"""The scheduling pass: loop transformations, then parallel / vector / unroll annotations.

When it applies: to every kernel of the plan, after tiling. Steps, each logged:

1. Loop transformations in the rule file's `priority` order (default skew > interchange >
   reverse). Each is kept only when isl proves it legal *and* the cost model says it helps:
   - skew (loop' = loop + by): checked by isl on the kernel's tiled nest. A `Schedule`
     holds rectangular tiles only and the cost model prices those, so a skew cannot show a
     gain there: it is logged as tried, with isl's verdict, and not applied.
   - interchange: every swap of two adjacent loops in each level's order
     (`Schedule.order`), scored by the cost model; the best legal one is applied, repeatedly,
     while it gains. Refusals name the broken dependence; the others say how much slower.
   - reverse (a loop run backwards): checked by isl; the cost model is symmetric in loop
     direction, so a legal reversal gains nothing and is logged as such, not applied.
   Legality: interchange and annotations are checked on the tiled nest with reductions
   reorderable (as the pipeline checks tiling); a reversal or skew must in addition keep
   every dependence of the source nest strictly (accumulations included), so a reduction
   loop is never run backwards or skewed against its accumulation.
2. `parallel_outer`: the loops that carry no dependence (isl, always strict: a reduction
   loop is never parallel) are marked `parallel`; refused loops are logged with the
   dependence they carry.
3. `vectorize_inner`: the innermost loop is vectorised when it is the contiguous (stride-1,
   last index) loop of the output and carries nothing; if another loop is innermost, moving
   the contiguous loop there is tried (legal and no slower), else nothing is vectorised.
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
from ..accel.cost import evaluate
from ..ir.schedule import Kernel, Schedule
from ..passes import PassContext, PassOutcome, rollback_entry, rule_entry
from ..result import Plan
from .tiling import contiguous_loop, verify_schedule

PASS = "scheduling"
MIN_GAIN = 1e-3          # a transformation must save at least this fraction of the time
MAX_INTERCHANGES = 6


def scheduling_pass(plan: Plan, ctx: PassContext) -> PassOutcome:
    params = ctx.rules.scheduling
    log: list[dict] = []
    rollbacks: list[dict] = []
    schedules = []
    _TIMES.clear()
    for kernel, tiled in zip(plan.kernels, plan.schedules):
        schedule = tiled
        for transform in params.get("priority", ["skew", "interchange", "reverse"]):
            schedule = TRANSFORMS[transform](schedule, ctx, log)
        if params.get("parallel_outer", True):
            schedule = annotate_parallel(schedule, ctx, log)
        if params.get("vectorize_inner", True):
            schedule = annotate_vectorize(schedule, ctx, log)
        factor = int(params.get("unroll_factor", 1))
        if factor > 1:
            schedule = annotate_unroll(schedule, factor, log)
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


def legality(schedule: Schedule, kernel_schedule: poly.KernelSchedule | None = None, parallel=()):
    """isl's verdict on `schedule`'s tiled nest, or on `kernel_schedule` (a transformation
    of it), with reductions reorderable as in the pipeline's checks (parallel loops are
    always checked against every dependence: a parallel reduction is a race)."""
    ks = poly.from_tiled_schedule(schedule) if kernel_schedule is None else kernel_schedule
    return poly.check_legal(schedule.kernel.statements, ks, parallel=tuple(parallel), reduction_reorderable=True)


def strict_source_legality(kernel: Kernel, transform):
    """isl's strict verdict (every dependence, accumulations included) on `transform`
    applied to the kernel's source nest: a reversal or skew must not turn any dependence
    around, not even a reduction's (its updates would then run backwards)."""
    return poly.check_legal(kernel.statements, transform(poly.original_schedule(kernel.statements)),
                            reduction_reorderable=False)


def loop_dims(schedule: Schedule, loop: str) -> list[str]:
    """The dims of the tiled nest that step along anchor loop `loop`: its tile loops
    (`{loop}_{level}`) and its point loop."""
    ks = poly.from_tiled_schedule(schedule)
    names = ks.loop_dims()
    return [d for d in names if d == loop or (d.startswith(f"{loop}_") and d[len(loop) + 1:] in schedule.levels)]


def reverse_verdict(schedule: Schedule, loop: str):
    """Is running `loop` backwards legal? Strictly on the source nest, then on the tiled
    nest (all its tile loops and its point loop reversed)."""
    verdict = strict_source_legality(schedule.kernel, lambda ks: ks.reverse(loop))
    if not verdict.ok:
        return verdict
    ks = poly.from_tiled_schedule(schedule)
    for dim in loop_dims(schedule, loop):
        ks = ks.reverse(dim)
    return legality(schedule, ks)


def skew_verdict(schedule: Schedule, loop: str, by: str, factor: int = 1):
    """Is skewing `loop` by `by` (loop' = loop + factor*by) legal? Strictly on the source
    nest, then on the point loops of the tiled nest."""
    verdict = strict_source_legality(schedule.kernel, lambda ks: ks.skew(loop, by, factor))
    if not verdict.ok:
        return verdict
    return legality(schedule, poly.from_tiled_schedule(schedule).skew(loop, by, factor))


def interchange_verdict(schedule: Schedule, level: str, order: tuple[str, ...]):
    """Is the order `order` at `level` legal (the rest of the schedule unchanged)?"""
    return legality(_with_order(schedule, level, order))


def parallel_verdict(schedule: Schedule, loop: str):
    """Does `loop` carry no dependence in `schedule`'s nest (so it may run in parallel)?"""
    marked = replace(schedule, annotations={**schedule.annotations, "parallel": (loop,)})
    return legality(marked, parallel=poly.parallel_dims(marked))


def _with_order(schedule: Schedule, level: str, order: tuple[str, ...]) -> Schedule:
    orders = {lv: schedule.order_at(lv) for lv in schedule.levels}
    orders[level] = tuple(order)
    return replace(schedule, order=orders)


def _rule(name: str, kernel: Kernel, applied: bool, why: str) -> dict:
    return rule_entry(f"{name}_{kernel.name}", PASS, kernel.ops, applied, why)


_TIMES: dict = {}  # per pass run: the interchange search revisits schedules


def _time(schedule: Schedule, ctx: PassContext) -> float:
    key = (id(schedule.kernel), ctx.target.name, repr(schedule.tiles), repr(sorted(schedule.order.items())),
           repr(sorted(schedule.annotations.items())), schedule.levels)
    if key not in _TIMES:
        _TIMES[key] = evaluate(schedule, ctx.target).time_s
    return _TIMES[key]


# --------------------------------------------------------------------------- transformations


def try_skew(schedule: Schedule, ctx: PassContext, log: list) -> Schedule:
    """Skew the innermost point loop by the one outside it (both directions), checked by isl.

    Rectangular tiles cannot express a skewed nest and the cost model prices rectangular
    tiles, so a skew shows no gain: it is logged, with isl's verdict, and not applied."""
    kernel = schedule.kernel
    order = [l for l in schedule.order_at(schedule.levels[-1]) if kernel.extents[l] > 1] \
        if schedule.levels else list(kernel.loop_names)
    if len(order) < 2:
        return schedule
    inner, outer = order[-1], order[-2]
    for factor in (1, -1):
        verdict = skew_verdict(schedule, inner, outer, factor)
        what = f"skew {inner} by {'+' if factor > 0 else '-'}{outer}"
        if not verdict.ok:
            log.append(_rule("skew", kernel, False, f"{what}: illegal: {verdict.reason}"))
        else:
            log.append(_rule("skew", kernel, False, f"{what}: legal, not applied: the cost model (rectangular "
                                                    f"tiles) shows no gain (0.0%)"))
    return schedule


def try_interchange(schedule: Schedule, ctx: PassContext, log: list) -> Schedule:
    """Apply the best legal adjacent swap at any level while it saves time."""
    kernel = schedule.kernel
    current = _time(schedule, ctx)
    for _ in range(MAX_INTERCHANGES):
        candidates = []
        for level in schedule.levels:
            order = list(schedule.order_at(level))
            for p in range(len(order) - 1):
                if kernel.extents[order[p]] == 1 or kernel.extents[order[p + 1]] == 1:
                    continue
                swapped = order[:]
                swapped[p], swapped[p + 1] = swapped[p + 1], swapped[p]
                candidate = _with_order(schedule, level, tuple(swapped))
                candidates.append((_time(candidate, ctx), level, order[p], order[p + 1], candidate))
        candidates.sort(key=lambda c: c[0])
        applied = None
        for t, level, a, b, candidate in candidates:
            what = f"interchange {a}<->{b} at {level}"
            if t > current * (1 - MIN_GAIN):
                log.append(_rule("interchange", kernel, False,
                                 f"{what}: no gain: {100 * (t / current - 1):+.1f}% time "
                                 f"({current * 1e6:.1f} -> {t * 1e6:.1f} us)"))
                continue
            verdict = legality(candidate)
            if not verdict.ok:
                log.append(_rule("interchange", kernel, False, f"{what}: illegal: {verdict.reason}"))
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


def try_reverse(schedule: Schedule, ctx: PassContext, log: list) -> Schedule:
    """Check running each loop backwards; the cost model is symmetric in loop direction,
    so a legal reversal gains nothing and is not applied."""
    kernel = schedule.kernel
    for loop in kernel.loop_names:
        if kernel.extents[loop] == 1:
            continue
        verdict = reverse_verdict(schedule, loop)
        if not verdict.ok:
            log.append(_rule("reverse", kernel, False, f"reverse {loop}: illegal: {verdict.reason}"))
        else:
            log.append(_rule("reverse", kernel, False, f"reverse {loop}: legal, not applied: no gain (0.0%: "
                                                       f"traffic and compute do not depend on loop direction)"))
    return schedule


TRANSFORMS = {"skew": try_skew, "interchange": try_interchange, "reverse": try_reverse}


# --------------------------------------------------------------------------- annotations


def annotate_parallel(schedule: Schedule, ctx: PassContext, log: list) -> Schedule:
    """Mark every loop that carries no dependence parallel (outermost first); log the
    refused ones with the dependence they carry."""
    kernel = schedule.kernel
    outer_order = schedule.order_at(schedule.levels[0]) if schedule.levels else kernel.loop_names
    legal, refused = [], []
    anchor = kernel.anchor_statement
    reduction_loops = {l.name for l in anchor.reduction_loops}
    for loop in outer_order:
        if kernel.extents[loop] == 1:
            continue
        verdict = parallel_verdict(schedule, loop)
        if verdict.ok and loop in reduction_loops:
            # Its tile loop iterates once (isl sees nothing carried there), but the points
            # inside the tile still accumulate into one element: never parallel.
            log.append(_rule("parallel_outer", kernel, False,
                             f"{loop}: a reduction loop of {anchor.target} (its iterations accumulate into the "
                             "same elements: parallel iterations would race)"))
            continue
        (legal if verdict.ok else refused).append((loop, verdict))
    for loop, verdict in refused:
        log.append(_rule("parallel_outer", kernel, False, f"{loop}: {verdict.reason}"))
    loops = tuple(l for l, _ in legal)
    if not loops:
        return schedule
    candidate = replace(schedule, annotations={**schedule.annotations, "parallel": loops})
    joint = legality(candidate, parallel=poly.parallel_dims(candidate))
    if not joint.ok:
        log.append(_rule("parallel_outer", kernel, False, f"{', '.join(loops)} together: {joint.reason}"))
        return schedule
    before, after = _time(schedule, ctx), _time(candidate, ctx)
    log.append(_rule("parallel_outer", kernel, True,
                     f"parallel {', '.join(loops)}: no dependence carried (isl); "
                     f"{before * 1e6:.1f} -> {after * 1e6:.1f} us"))
    return candidate


def annotate_vectorize(schedule: Schedule, ctx: PassContext, log: list) -> Schedule:
    """Vectorise the output's stride-1 loop when it carries nothing.

    If it is the innermost loop, it is vectorised there. Otherwise moving it innermost is
    tried (isl-legal); the cost model then picks the cheapest of: moved and vectorised,
    vectorised where it is (outer-loop vectorisation), or not vectorised."""
    kernel = schedule.kernel
    contiguous = contiguous_loop(kernel)
    annotations = {k: v for k, v in schedule.annotations.items() if k != "vectorize"}
    without = replace(schedule, annotations=annotations)
    if contiguous is None or not schedule.levels:
        log.append(_rule("vectorize_inner", kernel, False, "the output has no stride-1 loop"))
        return without
    verdict = parallel_verdict(schedule, contiguous)
    if not verdict.ok:
        log.append(_rule("vectorize_inner", kernel, False, f"{contiguous}: {verdict.reason}"))
        return without
    level = schedule.levels[-1]
    order = list(schedule.order_at(level))
    target = kernel.anchor_statement.target
    in_place = replace(schedule, annotations={**annotations, "vectorize": contiguous})
    if order[-1] == contiguous:
        log.append(_rule("vectorize_inner", kernel, True,
                         f"vectorize {contiguous}: the innermost loop, stride-1 in {target}, carries no dependence (isl)"))
        return in_place
    options = [(_time(in_place, ctx), "in_place", in_place), (_time(without, ctx), "none", without)]
    moved = _with_order(in_place, level, tuple([l for l in order if l != contiguous] + [contiguous]))
    moved_verdict = legality(moved)
    if moved_verdict.ok:
        options.append((_time(moved, ctx), "moved", moved))
    options.sort(key=lambda o: (o[0], o[1] != "moved"))
    best_time, how, best = options[0]
    times = {h: t for t, h, _ in options}
    detail = ", ".join(f"{h} {t * 1e6:.1f} us" for h, t in times.items())
    if how == "moved":
        why = f"vectorize {contiguous} (stride-1 in {target}), moved innermost at {level}: legal (isl); {detail}"
    elif how == "in_place":
        why = (f"vectorize {contiguous} (stride-1 in {target}) where it is, not innermost ({order[-1]} is): "
               + ("moving it innermost is illegal: " + moved_verdict.reason if not moved_verdict.ok
                  else "moving it innermost is slower") + f"; {detail}")
    else:
        why = f"not vectorised: innermost loop {order[-1]} is not the stride-1 loop {contiguous}; {detail}"
    log.append(_rule("vectorize_inner", kernel, how != "none", why))
    return best


def annotate_unroll(schedule: Schedule, factor: int, log: list) -> Schedule:
    """Unroll the innermost loop by `factor`, capped at its innermost tile."""
    kernel = schedule.kernel
    if not schedule.levels:
        return schedule
    inner = schedule.order_at(schedule.levels[-1])[-1]
    tile = schedule.tile_sizes()[inner][-1]
    unroll = max(1, min(factor, tile))
    if unroll <= 1:
        log.append(_rule("unroll", kernel, False, f"innermost loop {inner} has a tile of 1"))
        return schedule
    log.append(_rule("unroll", kernel, True, f"unroll {inner} by {unroll} (unroll_factor {factor}, tile {tile})"))
    return replace(schedule, annotations={**schedule.annotations, "unroll": unroll})
