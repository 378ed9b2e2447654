"""In-place updates: a tensor written functionally as another with one row replaced.

A KV cache is updated by writing the new token's key at its position; a program written in
single assignment says so functionally,

    K2[h, t, d] = select(equal(t, pos[0]), kn[h, d], Kc[h, t, d])

— K2 is Kc with row `pos[0]` of loop t replaced. Where nothing else reads Kc, K2 can live in
Kc's storage and the update writes that one row: `mark_in_place_updates` finds such
statements (the old tensor read at the target's own indices, the row chosen by comparing the
loop with a value that does not depend on it, the old tensor an input no other statement
reads) and marks them `ir.program.InPlace`. The mark changes no value: the interpreter, isl
and the C run the statement as written; the cost model, the simulator and the limit charge
one row of it (every tile but the one holding the row is skipped), and the rule log says so.

Folded into its reader (`fold_in_place_writes`, after the chains and split-K): a row update
alone is a kernel of its own, one DRAM latency for one row. Where a single other kernel reads
the updated tensor (an attention reading the KV cache), the update joins that kernel as a nest
of its own before the reader: one "append and attend" kernel that writes the row in place and
reads the cache, the new row where the loop is the row and the old storage elsewhere. The
program is unchanged (the interpreter and the C run it as written); isl checks the kernel's
schedule (the reader's reads of the row after its write) and the kernel is run tile by tile;
the cost model and the simulator price it as the reader's traffic plus the row, the row's
transfers riding the reader's stream (`cost.overlap.rides_anchor`). It is kept where the
objective prefers it to the kernels it replaces, and the rule log says so with the numbers.
"""
from __future__ import annotations

from dataclasses import replace

from ..ir.program import Access, Call, Expr, IndexValue, InPlace, Program, Statement

RULE = "in_place_update"
FOLD_RULE = "in_place_fold"
PASS = "fusion"


def _row_choice(expr: Expr, target_indices) -> tuple[str, Expr, Expr, Access] | None:
    """(loop, the row's value, the new value, the old read) where `expr` is
    select(equal(loop, value), new, old[target's indices]) (either side of equal)."""
    if not (isinstance(expr, Call) and expr.fn == "select" and isinstance(expr.args[0], Call)
            and expr.args[0].fn == "equal"):
        return None
    test, new, old = expr.args
    a, b = test.args
    if isinstance(b, IndexValue):
        a, b = b, a
    if not isinstance(a, IndexValue) or a.index.single_loop is None:
        return None
    loop = a.index.single_loop
    moves_with_loop = any(isinstance(e, IndexValue) and loop in e.index.loops
                          or isinstance(e, Access) and any(loop in i.loops for i in e.indices) for e in b.walk())
    if moves_with_loop or not isinstance(old, Access) or old.indirect or old.indices != tuple(target_indices):
        return None
    return loop, b, new, old


def mark_in_place_updates(program: Program) -> tuple[Program, list[dict]]:
    """`program` with each functional row update of a tensor nothing else reads marked
    `InPlace`, and the rule log entries that say so."""
    from ..passes import rule_entry

    readers: dict[str, int] = {}
    for st in program.statements:
        for tensor in {a.tensor for a in st.reads()}:
            readers[tensor] = readers.get(tensor, 0) + 1
    log, ops = [], []
    changed = False
    for op in program.ops:
        statements = []
        for st in op.statements:
            found = _row_choice(st.expr, st.target_indices) if st.reduce is None and not st.domain else None
            if found is not None:
                loop, _, _, old = found
                source = program.tensor(old.tensor)
                if source.role in ("input", "param") and readers.get(old.tensor) == 1 \
                        and source.shape == program.tensor(st.target).shape and source.dtype == program.tensor(st.target).dtype:
                    st = replace(st, in_place=InPlace(old.tensor, loop))
                    changed = True
                    extent = st.extents[loop]
                    log.append(rule_entry(RULE, "fusion", [op.name], True,
                                          f"{st.target} is {old.tensor} with one row of {loop} replaced and nothing "
                                          f"else reads {old.tensor}: {st.target} takes {old.tensor}'s storage and the "
                                          f"update writes 1 row of {extent} ({_row_bytes(program, st, loop)} bytes), "
                                          "not a copy"))
            statements.append(st)
        ops.append(replace(op, statements=tuple(statements)) if statements != list(op.statements) else op)
    return (program.with_ops(ops) if changed else program), log


def _row_bytes(program: Program, st: Statement, loop: str) -> int:
    tensor = program.tensor(st.target)
    return tensor.nbytes // max(1, st.extents[loop])


# --------------------------------------------------------------------------- folding into the reader


def fold_in_place_writes(plan, ctx, log: list, rollbacks: list):
    """`plan` with each in-place row update that is a kernel of its own folded into the one
    kernel reading its tensor (module docstring), where legal, verified and preferred by the
    objective; a transaction: an internal fault leaves `plan` with a rollback entry."""
    from ..accel.host_model import runs_generated_c
    from ..passes import rule_entry, transaction

    if runs_generated_c(ctx.target):
        rows = [k for k in plan.kernels if _row_update(k) is not None]
        if rows:    # the C writes the update as the program does (a copy): nothing to fold
            log.append(rule_entry(FOLD_RULE, PASS, [op for k in rows for op in k.ops], False,
                                  f"{ctx.target.name} runs the generated C, which writes each update as written "
                                  "(a whole copy), not one row in place: kept as kernels of their own"))
        return plan
    with transaction(rollbacks, PASS, FOLD_RULE, then="the row updates stay kernels of their own"):
        for consumer, producers in _foldable(plan).items():
            plan = _fold(plan, consumer, producers, ctx, log)
        alone = [k for k in plan.kernels if _row_update(k) is not None]
        if len(alone) > 1:
            plan = _merged_rows(plan, alone, ctx, log)
        return plan
    return plan


def _row_update(kernel):
    """The in-place row update `kernel` runs alone, else None."""
    return kernel.statements[0] if len(kernel.statements) == 1 and kernel.statements[0].in_place else None


def _foldable(plan) -> dict:
    """{reader kernel name: [row update kernels it alone reads]}: each row update alone in
    its kernel whose tensor exactly one other kernel reads."""
    out: dict[str, list] = {}
    for kernel in plan.kernels:
        if _row_update(kernel) is None:
            continue
        target = kernel.statements[0].target
        readers = [k for k in plan.kernels if k is not kernel and target in k.inputs]
        if len(readers) == 1:
            out.setdefault(readers[0].name, []).append(kernel)
    return out


def _fold(plan, consumer_name: str, producers: list, ctx, log: list):
    """`plan` with `producers` (row update kernels) folded into kernel `consumer_name`, or
    `plan` and a log entry saying why not."""
    from ..ir.schedule import Kernel
    from ..passes import rule_entry
    from .fusion import _kernel_name

    consumer, schedule = next((k, s) for k, s in zip(plan.kernels, plan.schedules) if k.name == consumer_name)
    updates = [k.statements[0] for k in producers]
    ops = [op for k in producers for op in k.ops] + list(consumer.ops)
    anchor = next(op.name for op in plan.program.ops if op.name in consumer.ops
                  and consumer.anchor_statement.target in {s.target for s in op.statements})
    kernel = Kernel.from_ops(plan.program, ops, name=_kernel_name(ops), anchor=anchor)
    for placed in consumer.compute_at:
        kernel = kernel.with_compute_at(*placed)
    where = f"{', '.join(st.target for st in updates)} not written inside {consumer.name}"
    done = _priced_and_checked(plan, kernel, replace(schedule, kernel=kernel), producers + [consumer], ctx, log,
                               where)
    if done is None:
        return plan
    new_plan, before, after, costs = done
    reader = costs[[k.name for k in producers + [consumer]].index(consumer.name)]
    row_bytes = sum(_row_bytes(plan.program, st, st.in_place.loop) for st in updates)
    log.append(rule_entry(FOLD_RULE, PASS, ops, True, _folded_why(updates, consumer, kernel, before, after,
                                                                  reader, row_bytes, len(producers) + 1)))
    return new_plan


def _merged_rows(plan, alone: list, ctx, log: list):
    """`plan` with the row updates still alone in their kernels (`alone`, independent: each
    reads only what is written before them all) run as one kernel, one DRAM latency instead
    of one each; or `plan` and a log entry saying why not."""
    from ..ir.schedule import Kernel
    from ..passes import rule_entry
    from .fusion import _kernel_name

    ops = [op for k in alone for op in k.ops]
    kernel = Kernel.from_ops(plan.program, ops, name=_kernel_name(ops), anchor=alone[0].ops[0])
    schedule = next(s for k, s in zip(plan.kernels, plan.schedules) if k is alone[0])
    where = f"{', '.join(ops)} not run as one kernel"
    done = _priced_and_checked(plan, kernel, replace(schedule, kernel=kernel), alone, ctx, log, where)
    if done is None:
        return plan
    new_plan, before, after, _ = done
    log.append(rule_entry(FOLD_RULE, PASS, ops, True,
                          f"{', '.join(ops)}: independent row updates in place, not folded into a reader "
                          f"({'; '.join(_readers(plan, alone))}), run as one kernel {kernel.name}: one DRAM "
                          f"latency instead of {len(alone)} ({before[0] * 1e6:.2f} -> {after.time_s * 1e6:.2f} us, "
                          f"{after.dram_bytes:.0f} bytes of DRAM)"))
    return new_plan


def _readers(plan, alone: list) -> list[str]:
    """The kernels reading each row update in `alone` (for the log)."""
    out = []
    for k in alone:
        target = k.statements[0].target
        readers = [r.name for r in plan.kernels if r is not k and target in r.inputs]
        out.append(f"{target} read by {', '.join(readers)}" if readers else f"{target} read by no kernel")
    return out


def _priced_and_checked(plan, kernel, schedule, replaced: list, ctx, log: list, where: str):
    """(plan, before, after, costs): `plan` with the kernels `replaced` run as `kernel` on
    `schedule` (at the last one's place), where each row update's row loop follows a loop of
    the nest (its row addressed there), the objective prefers it to them (before: their
    (time, energy, DRAM bytes) summed; after: its cost; costs: theirs), isl finds it legal and
    it runs tile by tile as the untiled kernel; else None and a log entry `where`: why not."""
    from .. import objective, poly
    from ..canon import evaluate
    from ..ir.plan import Plan
    from ..passes import rule_entry
    from ..verify import verify_schedule

    def refused(why: str):
        log.append(rule_entry(FOLD_RULE, PASS, list(kernel.ops), False, f"{where}: {why}"))

    for i, st in enumerate(kernel.statements):
        if st.in_place is not None and st.in_place.loop not in kernel.loop_map(i):
            return refused(f"{st.target}'s row loop {st.in_place.loop} follows no loop of the nest "
                           f"({', '.join(kernel.loop_names)}), so its row cannot be addressed there")
    by_name = dict(zip((k.name for k in plan.kernels), plan.schedules))
    costs = [evaluate(by_name[k.name], ctx.target) for k in replaced]
    before = tuple(sum(v) for v in zip(*[(c.time_s, c.energy_j, c.dram_bytes) for c in costs]))
    after = evaluate(schedule, ctx.target)
    if not objective.prefers(ctx.target.objective, before, after, objective.ties(ctx.target)):
        return refused(f"no better by the {ctx.target.objective} objective ({before[0] * 1e6:.2f} us in "
                       f"{len(replaced)} kernels vs {after.time_s * 1e6:.2f} us in one)")
    names = {k.name for k in replaced}
    last = max(i for i, k in enumerate(plan.kernels) if k.name in names)
    pairs = [(kernel, schedule) if i == last else (k, s) for i, (k, s) in enumerate(zip(plan.kernels, plan.schedules))
             if i == last or k.name not in names]
    new_plan = Plan(plan.program, tuple(k for k, _ in pairs), tuple(s for _, s in pairs), plan.label)
    legal = poly.check_schedule(schedule)
    if not legal.ok:
        return refused(f"the kernel's schedule is not legal (isl): {legal}")
    problem = new_plan.order_problem() or verify_schedule(schedule, plan.program, ctx)
    if problem:
        return refused(problem)
    return new_plan, before, after, costs


def _folded_why(updates, consumer, kernel, before, after, consumer_cost, row_bytes: int, replaced: int) -> str:
    """The log line of a fold: what the kernel reads and writes, and the model's numbers."""
    reads = "; ".join(f"{st.target} in {st.in_place.source}'s storage, the new row "
                      f"({_row_choice(st.expr, st.target_indices)[2]}) where {st.in_place.loop} is "
                      f"{_row_choice(st.expr, st.target_indices)[1]}, the old elsewhere" for st in updates)
    return (f"{', '.join(st.target for st in updates)} written in place inside {consumer.name}, which reads "
            f"them: one kernel {kernel.name} writes the rows and reads {reads} (isl: each row written before "
            f"it is read); {replaced} kernels -> 1 ({before[0] * 1e6:.2f} -> {after.time_s * 1e6:.2f} us); DRAM "
            f"{consumer_cost.dram_bytes:.0f} bytes of the reader plus "
            f"{after.dram_bytes - consumer_cost.dram_bytes:.0f} for the rows ({row_bytes} bytes written)")
