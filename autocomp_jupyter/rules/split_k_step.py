"""The split-K step of the pipeline: where a decode attention leaves the array idle, the
softmax-weighted reduction split in chunks (`rules/split_k.py`, FlashDecoding), the chunk
count chosen by the cost model.

Tried only where the softmax has fewer rows than the machine takes at once (`row_capacity`);
prefill fills it. For each chunk count (`chunk_counts`), a floor first: the split program's
physical limit (`accel.limit`); a count that cannot beat the plan is not searched. Else the
split program's chunk kernel (anchored at the chunks' weighted sum, the scores computed at its
tiles) and combine kernel are searched and scheduled like a chain (`rules.chains`), the
kernels they replace costed, the combine included. The fastest count is kept where it beats
the plan and verifies: the interpreter on the source vs the split program (`ctx.verify`; a
large one on its scaled twin, the split replayed), isl and tiled runs of the new kernels.
Every decision is a rule-log entry with the model's numbers.
"""
from __future__ import annotations


from ..ir.plan import Plan
from ..ir.program import Program
from ..ir.schedule import Kernel, Schedule
from ..passes import PassContext, rollback_entry, rule_entry, transaction
from .split_k import NO_SOFTMAX, RULE, Match, find, replaced_ops, split_with_names

PASS = "fusion"
MIN_CHUNK = 16           # positions per chunk at least (a shorter chunk is all combine)
MIN_GAIN = 0.01          # the split plan must save at least this fraction of the time


def row_capacity(target) -> int:
    """Softmax rows the machine takes at once: every systolic array's PE rows, or every
    lane of every SIMT / vector unit."""
    spec = target.compute
    return spec.units * (spec.pe_rows if spec.kind == "systolic" else spec.lanes)


def chunk_counts(match: Match, target) -> list[int]:
    """The chunk counts the cost model compares: powers of two from 2 while a chunk keeps
    MIN_CHUNK positions, up to what fills the machine's units twice over (more only adds
    combine work and partial results)."""
    units = max(1, target.compute.units)
    most = min(match.extent // MIN_CHUNK, max(2, 2 * units * max(1, row_capacity(target) // max(1, units))
                                            // max(1, match.rows)))
    counts, n = [], 2
    while n <= most:
        counts.append(n)
        n *= 2
    return counts


def split_k_plan(plan: Plan, ctx: PassContext) -> tuple[Plan, list[dict], list[dict]]:
    """(plan, log, rollbacks): `plan` with the decode attention split in chunks where the
    cost model finds that faster (module docstring), else `plan` and why not. A chunk count
    whose split program's physical limit (`accel.limit`) is no faster than the plan is not
    searched (on a systolic array a chunk shorter than the cache fills it no better)."""
    from ..canon import evaluate

    log: list[dict] = []
    rollbacks: list[dict] = []
    program = ctx.program
    match = find(program)
    if isinstance(match, str):
        if match != NO_SOFTMAX:             # a softmax in a form the rewrite does not take: say which
            log.append(rule_entry(RULE, PASS, [], False, f"not applicable: {match}"))
        return plan, log, rollbacks
    ops = list(replaced_ops(match))
    capacity = row_capacity(ctx.target)
    if match.rows >= capacity:
        log.append(rule_entry(RULE, PASS, ops, False,
                              f"{match.rows} softmax rows fill the machine ({capacity} rows at once): not split"))
        return plan, log, rollbacks
    counts = chunk_counts(match, ctx.target)
    if not counts:
        log.append(rule_entry(RULE, PASS, ops, False, f"{match.t_m} has {match.extent} positions: too few for two "
                                                      f"chunks of {MIN_CHUNK}"))
        return plan, log, rollbacks
    best = None
    tried, floors, worse = [], [], 0
    whole = sum(evaluate(s, ctx.target).time_s for s in plan.schedules)
    for chunks in counts:
        floor = _floor(ctx, match, chunks)
        if floor >= whole * (1 - MIN_GAIN):
            # no schedule of the split program beats its physical limit: not searched
            floors.append(f"{chunks}: {floor * 1e6:.1f} us")
            continue
        with transaction(rollbacks, PASS, f"{RULE} with {chunks} chunks", then="that chunk count is not taken") as step:
            found = _planned(plan, ctx, match, chunks)
        if step.failed:
            continue
        if isinstance(found, str):
            log.append(rule_entry(RULE, PASS, ops, False, found))
            return plan, log, rollbacks
        tried.append(f"{chunks}: {found[1] * 1e6:.1f} us")
        if best is None or found[1] < best[1]:
            best, worse = found + (chunks,), 0
        else:
            worse += 1
            if worse == 2:          # twice slower than the best: finer chunks only add combine work
                break
    if best is None:
        if floors:
            log.append(rule_entry(RULE, PASS, ops, False,
                                  f"{match.rows} rows of {capacity}: no gain possible: the plan takes "
                                  f"{whole * 1e6:.1f} us and the split program's physical limit is at least that "
                                  f"for every chunk count ({', '.join(floors)})"))
        return plan, log, rollbacks
    new_plan, seconds, before, replaced, chunks = best
    if seconds >= before * (1 - MIN_GAIN):
        log.append(rule_entry(RULE, PASS, ops, False,
                              f"{match.rows} rows of {capacity}: no gain: {before * 1e6:.1f} us as planned vs "
                              f"split in chunks {', '.join(tried)}"))
        return plan, log, rollbacks
    problem = _verified(new_plan, ctx, replaced)
    if problem:
        rollbacks.append(rollback_entry(PASS, "", f"{RULE}: {problem}"))
        log.append(rule_entry(RULE, PASS, ops, False, f"rolled back: {problem}"))
        return plan, log, rollbacks
    T = match.extent
    log.append(rule_entry(RULE, PASS, ops, True,
                          f"{match.rows} softmax rows of the {capacity} the machine takes at once: {match.t_m} "
                          f"({T}) split in {chunks} chunks of {-(-T // chunks)} ({before / seconds:.2f}x: "
                          f"{before * 1e6:.1f} -> {seconds * 1e6:.1f} us, the combine included; chunks tried "
                          f"{', '.join(tried)})"))
    return new_plan, log, rollbacks


def _floor(ctx: PassContext, match: Match, chunks: int) -> float:
    """The physical limit of the program split in `chunks` (seconds)."""
    from ..accel.limit import physical_limit

    done = split_with_names(ctx.program, chunks, match)
    return float("inf") if isinstance(done, str) else physical_limit(done[0], ctx.target)["time_s"]


def _planned(plan: Plan, ctx: PassContext, match: Match, chunks: int):
    """(plan, seconds, seconds of the kernels it replaces, replaced kernel names) with the
    reduction split in `chunks`, or why it cannot be."""
    from ..canon import evaluate

    done = split_with_names(ctx.program, chunks, match)
    if isinstance(done, str):
        return done
    new, names = done
    by_name = {op.name: op for op in new.ops}
    chunk_ops = _chunk_ops(new, names)
    combine_ops = _combine_ops(new, match, names, set(chunk_ops))
    taken = set(chunk_ops) | set(combine_ops)
    kept_k, kept_s, covered = [], [], set(taken)
    for kernel, schedule in zip(plan.kernels, plan.schedules):
        if all(name in by_name and by_name[name] == _op_of(plan.program, name) for name in kernel.ops) \
                and not set(kernel.ops) & taken:
            kept_k.append(kernel)
            kept_s.append(schedule)
            covered |= set(kernel.ops)
    replaced = [k for k in plan.kernels if k not in kept_k]
    before = sum(evaluate(s, ctx.target).time_s for k, s in zip(plan.kernels, plan.schedules) if k in replaced)
    made = []
    for ops, anchor in ((chunk_ops, names["o"]), (combine_ops, names.get("o_sum", match.o.target))):
        found = _kernel(new, ops, anchor, ctx)
        if isinstance(found, str):
            return found
        made.append(found)
    from ..baselines import library_schedule

    for op in new.ops:                  # what else the replaced kernels ran: one kernel each
        if op.name not in covered:
            kernel = Kernel.from_ops(new, [op.name])
            made.append(library_schedule(new, kernel, ctx))
            covered.add(op.name)
    schedules = kept_s + made
    position = {op.name: i for i, op in enumerate(new.ops)}
    schedules.sort(key=lambda s: min(position[o] for o in s.kernel.ops))
    new_plan = Plan(new, tuple(s.kernel for s in schedules), tuple(schedules), plan.label)
    seconds = sum(evaluate(s, ctx.target).time_s for s in made)
    return new_plan, seconds, before, [s.kernel.name for s in made]


def _op_of(program: Program, name: str):
    return program.op(name) if any(op.name == name for op in program.ops) else None


def _chunk_ops(program: Program, names: dict) -> list[str]:
    """The chunk kernel's ops: Mc, Ec, Oc, Pc and, upstream, each producer of a tensor only
    they read (the scores and their mask), in program order."""
    chosen = {names["m"], names["e"], names["o"], names["packed"]}
    grew = True
    while grew:
        grew = False
        for op in program.ops:
            if op.name in chosen or op.name in program.outputs:
                continue
            readers = {r.name for r in program.readers(op.name)}
            if readers and readers <= chosen and op.statements and not op.statements[0].in_place:
                chosen.add(op.name)
                grew = True
    return [op.name for op in program.ops if op.name in chosen]


def _combine_ops(program: Program, match: Match, names: dict, covered: set[str]) -> list[str]:
    """M, W, Z, O and the elementwise readers of O that read nothing else made outside (Y = O / Z)."""
    chosen = {match.m.target, names["weight"], match.z.target, match.o.target, names.get("o_sum", match.o.target)}
    inputs = {t.name for t in program.inputs}
    for op in program.readers(match.o.target):
        if op.op_class in ("elementwise", "broadcast") and set(op.inputs) <= chosen | inputs:
            chosen.add(op.name)
    return [op.name for op in program.ops if op.name in chosen and op.name not in covered]


def _kernel(program: Program, ops: list[str], anchor: str, ctx: PassContext) -> Schedule | str:
    """The kernel of `ops` anchored at `anchor`, every internal tensor before it computed at
    its tiles, searched and scheduled like a chain (`rules.chains`)."""
    from ..ir.loopnest import ComputeAtError, regions
    from .chains import _scheduled_chain, _search_chain
    from .fusion import _kernel_name

    kernel = Kernel.from_ops(program, ops, name=_kernel_name(ops), anchor=anchor)
    for st in reversed(kernel.statements[:kernel.anchor]):
        if st.target in kernel.internals:
            kernel = kernel.with_compute_at(st.target, kernel.loop_names[0], "")
    try:
        if kernel.compute_at:
            regions(kernel)
    except ComputeAtError as err:
        return f"cannot compute the chunk's scores at its tiles: {err}"
    found = _search_chain(program, kernel, ctx, float("inf"))
    if isinstance(found, str):
        return found
    return _scheduled_chain(program, found[0], ctx)[0]


def _verified(plan: Plan, ctx: PassContext, made: list[str]) -> str:
    """'' where the split program computes what the source does (`ctx.verify`: the
    interpreter) and each new kernel's schedule is legal and runs tile by tile as the
    untiled kernel; else the reason."""
    from ..verify import verify_schedule

    verdict = ctx.verify(plan.program)
    if not verdict:
        return f"the split changes the result: {verdict.reason}"
    for kernel, schedule in zip(plan.kernels, plan.schedules):
        if kernel.name in made:
            problem = verify_schedule(schedule, plan.program, ctx)
            if problem:
                return f"kernel {kernel.name}: {problem}"
    return plan.order_problem() or ""


def split_k_step(plan: Plan, ctx: PassContext, log: list, rollbacks: list) -> Plan:
    """`split_k_plan` as a transaction: an internal fault leaves `plan` with a rollback entry."""
    with transaction(rollbacks, PASS, RULE, then="the attention is not split"):
        new_plan, entries, undone = split_k_plan(plan, ctx)
        log.extend(entries)
        rollbacks.extend(undone)
        return new_plan
    return plan
