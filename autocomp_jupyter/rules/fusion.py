"""The fusion pass: group producer→consumer chains into kernels by the rule set.

Preconditions a fusion needs (as TVM's FuseOps): each consumer is the only reader of the
tensor before it, and that tensor is not a program output — so it never leaves the chip.
Steps, each logged into the report:

1. Python rules (`@adrs_rule`) returning `Replace` rewrite producer and consumer; each
   rewrite is checked by the interpreter and rolled back, with the reason, if it changes
   the result. The user named these rules, so they go first.
2. Inline: an elementwise/broadcast intermediate with at most `inline_threshold` elements
   is substituted into every reader (recomputed instead of stored), when every read is
   in bounds. The rewritten program is checked by the interpreter. Views (`fold_views`):
   a copy with no arithmetic (reshape, transpose, squeeze: `Y[i, j] = X[j, i]`) is folded
   into its readers whatever its size, which then read X through the copy's index map, as
   TVM fuses injective ops into their consumers; checked once for all views. Joins
   (`fold_joins`): a concat (or any one-statement injective op that is not a view) read
   once per element by one pointwise op is substituted into it, which then reads the
   concat's pieces itself (DenseNet's batchnorm reads its layer's inputs, no concatenated
   copy is made); checked once for all joins. Implied
   domains (`rules.domains`): a sum of a factor that is 0 outside a `where` domain (a causal
   softmax's row sum) reduces over that domain only; checked once.
3. Chains: at each op (program order) every enabled rule for the target is matched against
   the chain starting there; the longest match wins (ties: the rule tried first). A group
   is shortened until its working set fits the fast memory (`shared_mem_kb`, the target's
   buffer) and its intermediates stay under `fusion_threshold_gb`; a fusion whose memory
   pressure exceeds `max_occupancy_after_fusion` is undone.
4. The kernel graph must stay acyclic; a cycle returns the unfused baseline.

Each rewrite, inline, fold and chain match is a transaction (`passes.transaction`): an
internal fault in one is a rollback entry naming the rule and the kernel it was making, and
the pass goes on from the program before it.
"""
from __future__ import annotations

import math
from dataclasses import replace


from .. import objective
from ..accel.cost import kernel_model, library_schedule
from ..caches import LRU
from ..ir.loopnest import whole_loops
from ..ir.program import Access, Op, Program, Statement, relation_text, rename_loops, substitute
from ..ir.schedule import Kernel, Schedule
from ..passes import PassContext, PassOutcome, fault_reason, rollback_entry, rule_entry, transaction
from ..ir.plan import Plan
from .domains import implied_domains
from .merged_views import split_for, splittable, view_digits, view_loops
from .engine import POINTWISE, Fuse, FusionRule, Replace, chain_from, closed_prefix, sole_reader

PASS = "fusion"


def fusion_pass(plan: Plan, ctx: PassContext) -> PassOutcome:
    params = ctx.rules.fusion_params
    log: list[dict] = []
    rollbacks: list[dict] = []
    program = plan.program

    program, fixed_groups = _python_rewrites(program, ctx, log, rollbacks)   # the user's rules first
    taken = {n for g in fixed_groups for n in g}
    program = _inline_small(program, ctx, params.get("inline_threshold", 0), log, rollbacks, taken)
    if params.get("fold_views", True):
        with transaction(rollbacks, PASS, "folding the views", then="views kept as copies"):
            program = _fold_views(program, ctx, log, rollbacks, taken)
    if params.get("fold_joins", True):
        with transaction(rollbacks, PASS, "folding the joins", then="joins kept as copies"):
            program = _fold_joins(program, ctx, log, rollbacks, taken)
    with transaction(rollbacks, PASS, "implied domains", then="the sums keep their boxes"):
        program = _implied_domains(program, ctx, log, rollbacks)
    groups = _chain_groups(program, ctx, fixed_groups, log, rollbacks)

    scheduled = dict(pair for g in groups for pair in _group_kernels(program, g, ctx, plan, rollbacks))
    kernels = _in_dependence_order(tuple(scheduled))
    if kernels is None:
        rollbacks.append(rollback_entry(PASS, "", "the fused kernel graph has a cycle: back to the unfused baseline"))
        return PassOutcome(plan, tuple(log), tuple(rollbacks))
    schedules = tuple(scheduled[k] for k in kernels)
    return PassOutcome(Plan(program, kernels, schedules, "fused"), tuple(log), tuple(rollbacks))


def _group_kernels(program: Program, group: list[str], ctx: PassContext, plan: Plan,
                   rollbacks) -> list[tuple[Kernel, Schedule]]:
    """The group as one kernel with the schedule it inherits (`inherited_schedule`), or its
    ops one kernel each where building that kernel faults."""
    name = _kernel_name(group)
    with transaction(rollbacks, PASS, "building the fused kernel", kernel=name, then="its ops stay one kernel each"):
        kernel = Kernel.from_ops(program, group, name=name)
        return [(kernel, inherited_schedule(program, kernel, ctx, plan))]
    alone = [Kernel.from_ops(program, [op]) for op in group]
    return [(k, inherited_schedule(program, k, ctx, plan)) for k in alone]


def groups_that_pay(before: Plan, after: Plan, ctx: PassContext, tiled):
    """(plan, dropped, shortened): `after` (the fusion pass's plan) with every fusion group
    that, tiled, is slower than its ops tiled alone replaced by its longest prefix that a rule
    also matches and that pays (a GEMM's bias and residual epilogue when the layernorm after
    them does not), else split back into its ops, so that one slower group never undoes
    the others nor its own shorter fusion. `tiled(plan)` is the plan the tiling pass makes of
    `plan`. dropped: (group kernel, its tiled time, its ops' tiled time alone) for each slower
    group; shortened: (prefix kernel, rule name, its tiled time, alone, group kernel) for each
    prefix kept in its place."""
    groups = [k for k in after.kernels if len(k.ops) > 1]
    if not groups:
        return after, [], []
    program = after.program
    by_op = _ops_alone(program, ctx, before)
    unfused = Plan(program, tuple(k for k, _ in by_op.values()), tuple(s for _, s in by_op.values()), "unfused")
    fused_tiled, alone_tiled = tiled(after), tiled(unfused)
    # (time, energy, DRAM bytes) per kernel: a group pays where the objective prefers it to its ops
    goal = ctx.target.objective
    fused_c = {k.name: _triple(c) for k, c in zip(fused_tiled.kernels, ctx.cost(fused_tiled).kernels)}
    alone_c = {k.ops[0]: _triple(c) for k, c in zip(alone_tiled.kernels, ctx.cost(alone_tiled).kernels)}
    apart = lambda ops: tuple(sum(alone_c[op][j] for op in ops) for j in range(3))   # noqa: E731
    dropped = [(k, fused_c[k.name][0], apart(k.ops)[0]) for k in groups
               if objective.prefers(goal, fused_c[k.name], apart(k.ops), objective.ties(ctx.target))]
    if not dropped:
        return after, [], []
    slower = {k.name for k, _, _ in dropped}
    # Each slower group's prefixes a rule matches, longest first; tried a round at a time
    # (one tiling of the whole plan per round) until one pays or none is left.
    candidates = {k.name: [(ops, rule) for n in range(len(k.ops) - 1, 1, -1)
                           if closed_prefix(program, [program.op(o) for o in k.ops], n) == n
                           for ops, rule in [(k.ops[:n], _rule_matching(program, k.ops[:n], ctx))] if rule]
                  for k, _, _ in dropped}
    chosen: dict[str, tuple] = {}
    shortened = []
    pending = {name for name, c in candidates.items() if c}
    while pending:
        trial = {name: candidates[name][0] for name in pending}
        plan = _with_groups(after, program, slower, {**chosen, **trial}, by_op, ctx, before)
        trial_tiled = tiled(plan)
        costs = {k.name: _triple(c) for k, c in zip(trial_tiled.kernels, ctx.cost(trial_tiled).kernels)}
        for name, (ops, rule) in trial.items():
            fused_cost = costs[_kernel_name(ops)]
            fused, alone_time = fused_cost[0], apart(ops)[0]
            if not objective.prefers(goal, fused_cost, apart(ops), objective.ties(ctx.target)):
                chosen[name] = (ops, rule)
                group = next(k for k, _, _ in dropped if k.name == name)
                shortened.append((Kernel.from_ops(program, list(ops), name=_kernel_name(ops)), rule.name, fused,
                                  alone_time, group))
                pending.discard(name)
            else:
                candidates[name] = candidates[name][1:]
                if not candidates[name]:
                    pending.discard(name)
    return _with_groups(after, program, slower, chosen, by_op, ctx, before), dropped, shortened


def _triple(cost) -> tuple[float, float, float]:
    return (cost.time_s, cost.energy_j, cost.dram_bytes)


def split_back(before: Plan, after: Plan, names: set[str], ctx: PassContext) -> Plan:
    """`after` with the fusion groups named in `names` split back into their ops, each with
    the schedule it has in `before` (the others stay as they are)."""
    return _with_groups(after, after.program, names, {}, _ops_alone(after.program, ctx, before), ctx, before)


def _ops_alone(program: Program, ctx: PassContext, before: Plan) -> dict[str, tuple[Kernel, Schedule]]:
    """{op: (its kernel alone, the schedule it inherits from `before`)}, in program order."""
    out = {}
    for op in program.ops:
        kernel = Kernel.from_ops(program, [op.name])
        out[op.name] = (kernel, inherited_schedule(program, kernel, ctx, before))
    return out


def _rule_matching(program: Program, ops, ctx: PassContext):
    """The first enabled epilogue rule for the target that matches exactly `ops`, or None."""
    chain = [program.op(o) for o in ops]
    for rule in ctx.rules.fusion_rules:
        if (rule.lower == "epilogue" and rule.applies_to(ctx.target.name) and rule.match is not None
                and rule.match.match_chain(chain) == len(chain)):
            return rule
    return None


def _with_groups(after: Plan, program: Program, slower: set[str], prefixes: dict, by_op: dict, ctx: PassContext,
                 before: Plan) -> Plan:
    """`after` with each slower group (named in `slower`) replaced by its chosen prefix kernel
    plus its other ops alone, or by its ops alone when `prefixes` has none for it."""
    kernels, schedules = [], []
    for k, s in zip(after.kernels, after.schedules):
        if k.name in prefixes:
            ops = list(prefixes[k.name][0])
            head = Kernel.from_ops(program, ops, name=_kernel_name(ops))
            pieces = [(head, inherited_schedule(program, head, ctx, before))] + [by_op[op] for op in k.ops[len(ops):]]
        elif k.name in slower:
            pieces = [by_op[op] for op in k.ops]
        else:
            pieces = [(k, s)]
        kernels += [p[0] for p in pieces]
        schedules += [p[1] for p in pieces]
    return Plan(program, tuple(kernels), tuple(schedules), after.label)


def inherited_schedule(program: Program, kernel: Kernel, ctx: PassContext, plan: Plan) -> Schedule:
    """A fused kernel keeps its anchor op's schedule in the plan being fused (the library's,
    each op tuned alone), so the fusion's gain is the DRAM traffic it removes, not a change
    of tiling (the tiling pass re-tiles it next); textbook tiles where there is none."""
    anchor_op = next(op.name for op in program.ops if kernel.anchor_statement in op.statements)
    alone = Kernel.from_ops(program, [anchor_op])
    own = next((s for k, s in zip(plan.kernels, plan.schedules)
                if k.ops == (anchor_op,) and k.loop_names == kernel.loop_names), None)
    if own is None:
        if len(kernel.ops) == 1 or alone.loop_names != kernel.loop_names:
            return library_schedule(kernel, ctx.target)
        own = library_schedule(alone, ctx.target)
    # A loop the anchor ran in parallel may be a reduction of a fused statement (a softmax's
    # row): such a loop is never parallel.
    reduced = {a for i, st in enumerate(kernel.statements) for own, a in kernel.loop_map(i).items()
               if own in {l.name for l in st.reduction_loops}}
    annotations = dict(own.annotations)
    if "parallel" in annotations:
        annotations["parallel"] = tuple(l for l in annotations["parallel"] if l not in reduced)
    # ... and such a row stays whole (untiled), as the tiling pass would keep it.
    whole = whole_loops(kernel)
    tiles = {loop: sizes for loop, sizes in own.tiles.items() if loop not in whole}
    return _without_racing_loops(Schedule(kernel, tiles=tiles, order=own.order, annotations=annotations,
                                          levels=own.levels))


def _without_racing_loops(schedule: Schedule) -> Schedule:
    """`schedule` without the parallel loops isl refuses in the fused kernel. A fused
    statement that does not follow a loop the anchor ran in parallel runs in that loop's last
    tile, after every tile's update (a grouped conv's relu reads channels g*F/groups + f, no
    loop of the anchor's alone), so the loop carries a dependence once fused."""
    from ..ir.loopnest import lower
    from ..poly import check_schedule

    parallel = schedule.parallel or ()
    while parallel:
        verdict = check_schedule(schedule)
        if verdict.ok:
            break
        anchor_of = lower(schedule).anchor_of
        racing = {anchor_of.get(v.loop, v.loop) for v in verdict.violated if v.loop} & set(parallel)
        if not racing:
            break            # illegal for another reason: the pass's own check reports it
        parallel = tuple(loop for loop in parallel if loop not in racing)
        schedule = replace(schedule, annotations={**schedule.annotations, "parallel": parallel})
    return schedule


def _kernel_name(ops) -> str:
    return "_".join(ops) if len(ops) <= 4 else f"{ops[0]}_to_{ops[-1]}"


# --------------------------------------------------------------------------- inlining


def read_through_indices(program: Program, name: str) -> bool:
    """Whether a reader of `name` reads it at an index taken from an integer tensor
    (`Y[ids[s]]`, an ONNX Gather or as_strided). Substitution maps the producer's loops to the
    reader's affine indices, and such an index is none: an op read so is never inlined or
    folded (folding Swin's `Y[a0] = mean[0, a0, 0, 0]` into `Y[index[j]]` read mean[0, 0, 0, 0])."""
    return any(a.tensor == name and a.indirect for r in program.readers(name) for s in r.statements
               for a in s.reads())


def _in_bounds(acc: Access, extents: dict[str, int], shape: tuple[int, ...]) -> bool:
    box = {l: (0, e) for l, e in extents.items()}
    return all(0 <= lo and hi < dim for (lo, hi), dim in ((idx.bounds(box), dim) for idx, dim in zip(acc.indices, shape)))


def _inline_into(stmt: Statement, producer: Statement) -> Statement:
    """`stmt` with every read of producer's target replaced by producer's expression (its
    loops split first where the producer's target merges loops: `merged_views`)."""
    stmt = split_for(stmt, producer)
    extents = stmt.extents

    def fn(e):
        if isinstance(e, Access) and e.tensor == producer.target:
            # the producer's domain goes along (its element outside it is 0)
            return rename_loops(producer.guarded_expr, view_loops(e, producer, extents))
        return None
    return replace(stmt, expr=substitute(stmt.expr, fn))


def inline(program: Program, op: Op) -> Program:
    """`program` with `op` (one elementwise statement) substituted into every reader and its
    output tensor gone: the rewrite of step 2, unchecked (the caller checks or replays)."""
    producer = op.statements[0]
    readers = program.readers(op.output)
    new_ops = []
    for other in program.ops:
        if other is op:
            continue
        if other in readers:
            statements = tuple(_inline_into(s, producer) for s in other.statements)
            inputs = tuple(dict.fromkeys([i for i in other.inputs if i != op.output] +
                                         [i for i in op.inputs])) if other.kind == "comprehension" else \
                tuple(dict.fromkeys([x for i in other.inputs for x in ([*op.inputs] if i == op.output else [i])]))
            other = Op(other.kind, other.op_class, inputs, other.output, other.attrs, statements, other.temps,
                       other.span)
        new_ops.append(other)
    return replace(program, tensors=tuple(x for x in program.tensors if x.name != op.output), ops=tuple(new_ops))


def replay_inlines(program: Program, fused: Program, keep=()) -> Program:
    """`program` (the original, or its scaled twin) with the inlines and view folds that made
    `fused` from it replayed: every single-statement elementwise op whose output `fused` no
    longer has is substituted into its readers, in program order (as step 2 did), then every
    view `fused` no longer has. Lets a fused program's kernels be rebuilt on the twin of its
    source. Ops in `keep` stay (a later rewrite, `Program.rewrites`, removed them).

    The replay depends only on `program` and which of its tensors `fused` lacks: remembered
    so (each equivalence check and tiled run of a pass asks for the same twin; a network's
    replay is hundreds of rewrites of the whole program)."""
    gone = tuple(op.output for op in program.ops if not fused.has_tensor(op.output) and op.output not in keep)
    return _REPLAYED.of(program, gone, lambda: _replay(program, fused, keep))


# Replayed programs by (the program replayed on, the tensors the fused program lacks).
_REPLAYED = LRU("fusion.replay_inlines", 32)


def _replay(program: Program, fused: Program, keep) -> Program:
    """`replay_inlines`' rewrites, done."""
    for name in [op.output for op in program.ops]:
        op = program.producer(name)         # as rewritten by the inlines before it
        if (not fused.has_tensor(name) and name not in keep and op is not None and op.op_class in ("elementwise", "broadcast")
                and len(op.statements) == 1 and not op.statements[0].reduce
                and all(i.single_loop is not None for i in op.statements[0].target_indices)
                and program.readers(name) and not read_through_indices(program, name)):
            program = inline(program, op)
    for name in [op.output for op in program.ops]:
        op = program.producer(name)
        if not fused.has_tensor(name) and name not in keep and op is not None and is_view(program, op):
            program = inline(program, op)
    for name in [op.output for op in program.ops]:
        op = program.producer(name)
        if not fused.has_tensor(name) and name not in keep and op is not None and is_join(program, op):
            program = inline(program, op)
    return program


def is_view(program: Program, op: Op) -> bool:
    """Whether `op` is a view its readers can read through: one statement copying its input
    (`Y[loops] = X[affine]`, no arithmetic, in bounds, no rounding), each loop one target
    dimension or a digit of one (a reshape merging loops: `Y[2*a0 + a1] = X[a0 + 58*a1]`,
    its readers' loops split to match, `merged_views`; not of a contraction's result, which
    its epilogue stores in the merged layout instead), its output not a program output,
    and every read of it in bounds (a padded read outside Y could land inside X). A copy at the same indices (the first part of an
    ONNX Split, `q[i, j] = qkv[i, j] where j < 768`) is classed elementwise, and is one too."""
    if op.op_class not in ("injective", "elementwise") or len(op.statements) != 1 or op.output in program.outputs \
            or read_through_indices(program, op.output):
        return False
    st = op.statements[0]
    if st.reduce or not isinstance(st.expr, Access) or not program.has_tensor(st.expr.tensor):
        return False
    digits = view_digits(st)
    if digits is None:
        return False
    source = program.producer(st.expr.tensor)
    if any(len(d) > 1 for d in digits) and source is not None and source.op_class == "contraction":
        return False    # the contraction's epilogue stores its tiles in this layout: no loop of a reader split
    y, x = program.tensor(op.output), program.tensor(st.expr.tensor)
    if y.dtype != x.dtype or not _in_bounds(st.expr, st.extents, x.shape):
        return False
    readers = program.readers(op.output)
    return bool(readers) and all(_in_bounds(a, r_st.extents, y.shape) for r in readers for r_st in r.statements
                                 for a in r_st.reads() if a.tensor == op.output) \
        and all(splittable(r_st, st) for r in readers for r_st in r.statements)


def _fold_views(program: Program, ctx: PassContext, log, rollbacks, keep: set[str]) -> Program:
    """Step 2's views: each folded into its readers, in program order (a transpose of a
    reshape folds twice); the result checked once by the interpreter, all undone if it differs."""
    folded, entries = program, []
    for name in [op.output for op in program.ops]:
        op = _unkept_producer(folded, name, keep)
        if op is None or not is_view(folded, op):
            continue
        if any(isinstance(_call_rule(rule, op, r, [], rollbacks), Fuse)
               for rule in _python_rules(ctx) for r in folded.readers(name)):
            continue          # a rule the user named fuses it: theirs goes first
        readers = [r.name for r in folded.readers(name)]
        entries.append(rule_entry("fold_views", PASS, [op.name] + readers, True,
                                  f"'{name}' is a {op.kind} of '{op.statements[0].expr.tensor}' (no arithmetic): "
                                  f"{', '.join(readers)} read{'s' if len(readers) == 1 else ''} through its index map, "
                                  "no copy is made"))
        folded = inline(folded, op)
    return _checked_folds(program, folded, entries, "fold_views", "views", ctx, log, rollbacks)


def _unkept_producer(program: Program, name: str, keep: set[str]):
    """The op writing `name` in `program`, unless it or one of its readers is in `keep` (a
    group the user's rules fixed) or it is gone (folded already): what a fold may take."""
    op = program.producer(name)
    if op is None or op.name in keep or any(r.name in keep for r in program.readers(name)):
        return None
    return op


def _checked_folds(program: Program, folded: Program, entries: list, rule: str, what: str, ctx: PassContext,
                   log, rollbacks) -> Program:
    """`folded` if the interpreter finds it equal to `program` (the folds' `entries` logged),
    else `program`, with one rollback: the folds of one step are checked, and undone, together."""
    if not entries:
        return program
    verdict = ctx.verify(folded)
    if not verdict:
        log.append(rule_entry(rule, PASS, [e["ops"][0] for e in entries], False, f"rolled back: {verdict.reason}"))
        rollbacks.append(rollback_entry(PASS, entries[0]["ops"][0], f"folding the {what} changed the result: {verdict.reason}"))
        return program
    log.extend(entries)
    return folded


def is_join(program: Program, op: Op) -> bool:
    """Whether `op` is a join its one reader can read through: one injective statement that
    is not a view (a concat: `C[n, c, h, w] = A[n, c, h, w] + B[n, c - 64, h, w]`, each piece
    0 outside its range), each loop one target dimension, no rounding, its output not a
    program output, and one pointwise reader of one statement reading it once at the same
    indices as it writes its own target, over the same extents: each element read once, in
    bounds, so substituting computes the same values with no work repeated."""
    if op.op_class != "injective" or len(op.statements) != 1 or op.output in program.outputs or is_view(program, op) \
            or read_through_indices(program, op.output):
        return False
    st = op.statements[0]
    lhs = [i.single_loop for i in st.target_indices]
    if st.reduce or None in lhs or len(set(lhs)) != len(lhs):
        return False
    y = program.tensor(op.output)
    if any(program.tensor(a.tensor).dtype != y.dtype for a in st.reads() if program.has_tensor(a.tensor)):
        return False
    readers = program.readers(op.output)
    if len(readers) != 1 or readers[0].op_class not in ("elementwise", "broadcast") or len(readers[0].statements) != 1:
        return False
    reader = readers[0].statements[0]
    reads = [a for a in reader.reads() if a.tensor == op.output]
    if reader.reduce or len(reads) != 1 or tuple(reads[0].indices) != tuple(reader.target_indices):
        return False
    return all(i.single_loop is not None and reader.extents[i.single_loop] == dim
               for i, dim in zip(reader.target_indices, y.shape))


def _fold_joins(program: Program, ctx: PassContext, log, rollbacks, keep: set[str]) -> Program:
    """Step 2's joins: each substituted into its one reader; the result checked once by the
    interpreter, all undone if it differs."""
    folded, entries = program, []
    for name in [op.output for op in program.ops]:
        op = _unkept_producer(folded, name, keep)
        if op is None or not is_join(folded, op):
            continue
        reader = folded.readers(name)[0]
        pieces = ", ".join(dict.fromkeys(a.tensor for a in op.statements[0].reads()))
        entries.append(rule_entry("fold_joins", PASS, [op.name, reader.name], True,
                                  f"'{name}' is a {op.kind} of {pieces} read once by {reader.name}: it reads the "
                                  "pieces itself, no joined copy is made"))
        folded = inline(folded, op)
    return _checked_folds(program, folded, entries, "fold_joins", "joins", ctx, log, rollbacks)


def _implied_domains(program: Program, ctx: PassContext, log, rollbacks) -> Program:
    """Step 2's implied domains (`rules.domains`): each sum of a factor that is 0 outside its
    domain reduces over that domain only; checked once by the interpreter, undone if it differs."""
    found = implied_domains(program)
    if isinstance(found, str):
        return program
    rewritten, changed = found
    verdict = ctx.verify(rewritten)
    if not verdict:
        log.append(rule_entry("implied_domain", PASS, changed, False, f"rolled back: {verdict.reason}"))
        rollbacks.append(rollback_entry(PASS, changed[0], f"an implied domain changed the result: {verdict.reason}"))
        return program
    for name in changed:
        before, after = program.op(name), rewritten.op(name)
        for old, new in zip(before.statements, after.statements):
            if new.domain != old.domain:
                cut = ", ".join(relation_text(a) for a in new.domain if a not in old.domain)
                log.append(rule_entry("implied_domain", PASS, [name], True,
                                      f"{new.target} sums a factor that is 0 outside `where {cut}`: it reduces over "
                                      f"that domain only ({new.points} of {new.box_points} points; empty tiles skipped)"))
    return rewritten


def _inline_small(program: Program, ctx: PassContext, threshold: int, log, rollbacks, keep: set[str]) -> Program:
    """Every small elementwise intermediate inlined into its readers. All are checked at once
    (one interpreter run of the rewritten program: a network has dozens, and each check runs
    the whole program); only when that check fails are they checked one by one, each kept
    or rolled back on its own."""
    if threshold <= 0:
        return program
    trial_log: list[dict] = []
    trial_rollbacks: list[dict] = []
    inlined = _inline_each(program, ctx, threshold, trial_log, trial_rollbacks, keep, check=None)
    if inlined is program or ctx.verify(inlined):
        log.extend(trial_log)
        rollbacks.extend(trial_rollbacks)
        return inlined
    return _inline_each(program, ctx, threshold, log, rollbacks, keep, check=ctx.verify)


def _inline_each(program: Program, ctx: PassContext, threshold: int, log, rollbacks, keep: set[str],
                 check) -> Program:
    """`_inline_small`'s rewrites one after another; each candidate is kept if `check` (the
    interpreter's verdict on the program so far) holds, or unchecked when `check` is None."""
    for op in program.ops:
        with transaction(rollbacks, PASS, "inline", kernel=op.name, then="not inlined"):
            if program.producer(op.output) is not op:
                continue  # already inlined away by an earlier step
            if op.name in keep or any(r.name in keep for r in program.readers(op.output)):
                continue
            t = program.tensor(op.output)
            readers = program.readers(op.output)
            if (op.op_class not in ("elementwise", "broadcast") or len(op.statements) != 1 or t.size > threshold
                    or op.output in program.outputs or not readers or read_through_indices(program, op.output)):
                continue
            producer = op.statements[0]
            if producer.reduce or any(i.single_loop is None for i in producer.target_indices):
                continue
            if t.dtype != "f32":
                # Its values are rounded (integers saturate) when stored; recomputed inside the
                # reader they would not be, and the DSL has no rounding to write around it.
                log.append(rule_entry("inline", PASS, [op.name] + [r.name for r in readers], False,
                                      f"'{op.output}' is {t.dtype}: its stored values are rounded to {t.dtype}, "
                                      "which inlining would skip"))
                continue
            if not all(_in_bounds(a, s.extents, t.shape) for r in readers for s in r.statements
                       for a in s.reads() if a.tensor == op.output):
                log.append(rule_entry("inline", PASS, [op.name] + [r.name for r in readers], False,
                                      f"'{op.output}' is read out of bounds (padding) by a reader; inlining would change it"))
                continue
            candidate = inline(program, op)
            verdict = check(candidate) if check is not None else True
            ops = [op.name] + [r.name for r in readers]
            if verdict:
                log.append(rule_entry("inline", PASS, ops, True,
                                      f"'{op.output}' has {t.size} elements (<= inline_threshold {threshold}): "
                                      f"recomputed in {', '.join(r.name for r in readers)}"))
                program = candidate
            else:
                log.append(rule_entry("inline", PASS, ops, False, f"rolled back: {verdict.reason}"))
                rollbacks.append(rollback_entry(PASS, op.name, f"inline of '{op.output}' changed the result: {verdict.reason}"))
    return program


# --------------------------------------------------------------------------- Python rewrites


def _python_rules(ctx: PassContext) -> list[FusionRule]:
    return [r for r in ctx.rules.fusion_rules if r.python is not None and r.applies_to(ctx.target.name)]


def _call_rule(rule: FusionRule, producer: Op, consumer: Op, log, rollbacks) -> object:
    """The rule's verdict on producer → consumer. A rule that raises (any exception: a user's
    rule must not take the pipeline down) leaves the edge alone: None, logged as not applied
    and rolled back, once per rule and edge."""
    try:
        return rule.python(producer, consumer)
    except Exception as err:  # noqa: BLE001
        ops = [producer.name, consumer.name]
        entry = rule_entry(rule.name, PASS, ops, False, f"the rule raised {type(err).__name__}: {err}")
        kernel = _kernel_name(ops)
        fault = rollback_entry(PASS, kernel, fault_reason(f"fusion rule {rule.name}", kernel, err))
        if fault not in rollbacks:
            log.append(entry)
            rollbacks.append(fault)
        return None


def _python_rewrites(program: Program, ctx: PassContext, log, rollbacks) -> tuple[Program, list[list[str]]]:
    """Apply `Replace` rewrites of Python rules (verified); returns fixed groups they made."""
    groups: list[list[str]] = []
    for rule in _python_rules(ctx):
        for producer in list(program.ops):
            if not any(o is producer for o in program.ops):
                continue
            consumer = sole_reader(program, producer)
            if consumer is None or any(producer.name in g or consumer.name in g for g in groups):
                continue
            rewrite = _call_rule(rule, producer, consumer, log, rollbacks)
            if not isinstance(rewrite, Replace):
                continue
            kernel = _kernel_name([producer.name, consumer.name])
            with transaction(rollbacks, PASS, f"fusion rule {rule.name}", kernel=kernel, then="rewrite rolled back"):
                program = _checked_rewrite(program, producer, consumer, rule, rewrite, ctx, log, rollbacks, groups)
    return program, groups


def _checked_rewrite(program: Program, producer: Op, consumer: Op, rule: FusionRule, rewrite: Replace,
                     ctx: PassContext, log, rollbacks, groups: list[list[str]]) -> Program:
    """`program` with `rewrite` of producer → consumer where it is well formed and computes
    what the program does (the interpreter); else `program`, the reason logged."""
    ops_named = [producer.name, consumer.name]
    problem = _check_replacement(program, producer, consumer, rewrite)
    if problem:
        log.append(rule_entry(rule.name, PASS, ops_named, False, problem))
        rollbacks.append(rollback_entry(PASS, "_".join(ops_named), f"rule '{rule.name}': {problem}"))
        return program
    candidate = _replace(program, producer, consumer, rewrite)
    verdict = ctx.verify(candidate)
    if not verdict:
        why = f"rolled back: the rewrite changes the result ({verdict.reason})"
        log.append(rule_entry(rule.name, PASS, ops_named, False, why))
        rollbacks.append(rollback_entry(PASS, "_".join(ops_named),
                                        f"rule '{rule.name}' failed verification: {verdict.reason}"))
        return program
    log.append(rule_entry(rule.name, PASS, ops_named, True,
                          rewrite.why or "rewritten by the Python rule; verified by the interpreter"))
    if rewrite.fuse:
        groups.append([o.name for o in rewrite.ops])
    return candidate


def _check_replacement(program: Program, producer: Op, consumer: Op, rewrite: Replace) -> str:
    ops = tuple(rewrite.ops)
    if not ops or not all(isinstance(o, Op) for o in ops):
        return "Replace(ops) needs a non-empty sequence of Op"
    if ops[-1].output != consumer.output:
        return f"the replacement must end by defining '{consumer.output}', got '{ops[-1].output}'"
    defined = {t.name for t in program.tensors} - {producer.output, consumer.output}
    for o in ops:
        if o.output in defined:
            return f"the replacement redefines '{o.output}'"
        defined.add(o.output)
    return ""


def _replace(program: Program, producer: Op, consumer: Op, rewrite: Replace) -> Program:
    from ..ir.program import Tensor

    ops: list[Op] = []
    for o in program.ops:
        if o is producer:
            continue
        if o is consumer:
            ops.extend(rewrite.ops)
        else:
            ops.append(o)
    known = {t.name: t for t in program.tensors if t.name != producer.output}
    ctemp = program.tensor(consumer.output)
    tensors = list(known.values())
    for o in rewrite.ops:
        for s in o.statements:
            if s.target not in known:
                shape = tuple(max(int(i.evaluate({l.name: l.extent - 1 for l in s.loops})) + 1, 1)
                              for i in s.target_indices)
                t = Tensor(s.target, ctemp.dtype, shape, "temp" if s.target != o.output else "intermediate")
                known[s.target] = t
                tensors.append(t)
    return replace(program, tensors=tuple(tensors), ops=tuple(ops))   # keeps param_values


# --------------------------------------------------------------------------- chains


def _fast_level(ctx: PassContext) -> tuple[int, float]:
    """(tiling-level index, capacity bytes) of the memory fused tiles must fit in."""
    levels = ctx.target.on_chip
    index = len(levels) - 2 if len(levels) >= 2 else len(levels) - 1
    limit = levels[index].size_bytes
    shared = ctx.rules.fusion_params.get("shared_mem_kb")
    if shared and ctx.target.shared_mem_kb is not None:  # per-block shared memory (GPU)
        limit = min(limit, shared * 1024)
    return index, float(limit)


def working_set(kernel: Kernel, ctx: PassContext) -> float:
    """Bytes a fused kernel's tiles need in the fast memory under the textbook tiling."""
    level, _ = _fast_level(ctx)
    model = kernel_model(kernel, ctx.target)
    schedule = library_schedule(kernel, ctx.target)
    tiles = model.schedule_arrays(schedule)[0]
    return float(model.capacity_footprints(tiles)[0][level])


def _group_bytes(program: Program, ops: list[Op]) -> int:
    """Bytes of the intermediates a fused group keeps off DRAM (each op's output but the
    last's). Not its inputs and output: those move the same fused or not, and a tiled fused
    kernel's reuse does not depend on how large they are (attention at 2,048 tokens touches
    0.3 GB and fuses like attention at 256)."""
    return sum(program.tensor(o.output).nbytes for o in ops[:-1])


def _chain_groups(program: Program, ctx: PassContext, fixed: list[list[str]], log, rollbacks) -> list[list[str]]:
    params, target = ctx.rules.fusion_params, ctx.target.name
    depth = int(params.get("max_fusion_depth", 4))
    threshold_bytes = float(params.get("fusion_threshold_gb", math.inf)) * 1e9
    _, fast_limit = _fast_level(ctx)
    max_pressure = float(ctx.rules.rollback.get("max_occupancy_after_fusion", 1.0))
    taken: set[str] = {n for g in fixed for n in g}
    groups_by_first: dict[str, list[str]] = {g[0]: g for g in fixed}
    order_index = {r.name: i for i, r in enumerate(ctx.rules.fusion_rules)}
    for op in program.ops:
        if op.name in taken:
            continue
        group = [op.name]
        with transaction(rollbacks, PASS, "fusion rules", kernel=op.name, then="the op stays alone") as step:
            whole = chain_from(program, op, depth, taken - {op.name})
            chain = _within_output(program, whole)
            if len(chain) == 1:
                _log_blocked(program, op, ctx, log, larger=whole[1] if len(whole) > 1 else None)
            matches: list[tuple[FusionRule, int]] = []
            for rule in ctx.rules.fusion_rules:
                if rule.lower != "epilogue":
                    continue                      # chains of kernels: rules/chains.py
                step.what = f"fusion rule {rule.name}"
                n = closed_prefix(program, chain, _rule_match(rule, chain, log, rollbacks))
                if n < 2:
                    continue
                if not rule.applies_to(target):
                    why = "disabled" if not rule.enabled else f"not for target '{target}' (targets: {rule.where()})"
                    log.append(rule_entry(rule.name, PASS, [o.name for o in chain[:n]], False, why))
                    continue
                matches.append((rule, n))
            if matches:
                matches.sort(key=lambda m: (-m[1], order_index[m[0].name]))
                winner, n = matches[0]
                for rule, m in matches[1:]:
                    log.append(rule_entry(rule.name, PASS, [o.name for o in chain[:m]], False,
                                          f"subsumed by '{winner.name}' ({n} ops)"))
                step.what, step.kernel = f"fusion rule {winner.name}", _kernel_name([o.name for o in chain[:n]])
                group = _fit(program, chain[:n], winner, ctx, threshold_bytes, fast_limit, max_pressure, log,
                             rollbacks)
        taken.update(group)
        groups_by_first[group[0]] = group
    # kernels in program order of their first op
    position = {o.name: i for i, o in enumerate(program.ops)}
    return sorted(groups_by_first.values(), key=lambda g: position[g[0]])


def _within_output(program: Program, chain: list[Op]) -> list[Op]:
    """`chain` up to its first op that writes more elements than the contraction starting it
    has points and reads an operand that large. An epilogue runs on each tile of its
    contraction (an RMSNorm's scale on its sum of squares' rows stays); such an op (a
    squeeze-excite's channel scale over the whole activation after its 1x1 conv) would
    instead become the kernel's anchor and read its large operand from DRAM: it is left to
    the contraction that reads it (`pointwise_prologue`)."""
    if chain[0].op_class != "contraction":
        return chain
    size = max(st.points for st in chain[0].statements)     # the points its tiles cover
    made = set()
    for n, op in enumerate(chain[1:], start=1):
        made.add(chain[n - 1].output)
        larger = op.op_class != "contraction" and program.tensor(op.output).size > size
        # ... reading a large operand of its own (a broadcast of the chain alone, GQA's repeated
        # keys, stays: it reads nothing more from DRAM)
        if larger and any(program.tensor(t).size > size for t in op.inputs if t not in made):
            return chain[:n]
    return chain


def _log_blocked(program: Program, op: Op, ctx: PassContext, log, larger: Op | None = None) -> None:
    """Say why a rule that would match op → reader does not fire: the precondition failed,
    or the reader (`larger`) writes more elements than op (`_within_output`)."""
    readers = program.readers(op.output)
    for reader in readers:
        for rule in ctx.rules.fusion_rules:
            if rule.match is not None and rule.applies_to(ctx.target.name) and rule.match.match_chain([op, reader]) >= 2:
                if reader is larger:
                    why = (f"'{reader.output}' has more elements than '{op.output}': not an epilogue of it (it would "
                           "anchor the kernel); left to the contraction that reads it")
                elif op.output in program.outputs:
                    why = f"'{op.output}' is a program output, so it must be written to memory anyway"
                elif len(readers) > 1 and all(r.op_class in POINTWISE for r in readers):
                    why = (f"'{op.output}' has {len(readers)} readers ({', '.join(r.name for r in readers)}), a "
                           "pointwise region that does not meet again within max_fusion_depth, or whose result "
                           "one contraction alone reads (its prologue then: pointwise_prologue)")
                else:
                    why = (f"'{op.output}' has {len(readers)} readers ({', '.join(r.name for r in readers)}): "
                           "fusing it into one would leave the others reading it from memory")
                log.append(rule_entry(rule.name, PASS, [op.name, reader.name], False, why))
                return


def _rule_match(rule: FusionRule, chain: list[Op], log, rollbacks) -> int:
    if rule.match is not None:
        return rule.match.match_chain(chain)
    if len(chain) < 2:
        return 0
    return 2 if isinstance(_call_rule(rule, chain[0], chain[1], log, rollbacks), Fuse) else 0


def _fit(program: Program, chain: list[Op], rule: FusionRule, ctx: PassContext, threshold_bytes: float,
         fast_limit: float, max_pressure: float, log, rollbacks) -> list[str]:
    """The longest prefix of `chain` (>= 2 ops) within the memory limits, logged; else [first]."""
    names = [o.name for o in chain]
    reasons = []
    for n in range(len(chain), 1, -1):
        ops = chain[:n]
        total = _group_bytes(program, ops)
        if total > threshold_bytes:
            reasons.append(f"{n} ops keep {total / 1e9:.3g} GB of intermediates off DRAM > fusion_threshold_gb "
                           f"{threshold_bytes / 1e9:g}")
            continue
        kernel = Kernel.from_ops(program, [o.name for o in ops])
        ws = working_set(kernel, ctx)
        if ws > fast_limit:
            reasons.append(f"{n} ops need {ws / 1024:.1f} KiB of fast memory > {fast_limit / 1024:.0f} KiB")
            continue
        pressure = ws / fast_limit
        if pressure > max_pressure:
            rollbacks.append(rollback_entry(PASS, _kernel_name(names[:n]),
                                            f"fusion by '{rule.name}' undone: memory pressure {pressure:.2f} > "
                                            f"max_occupancy_after_fusion {max_pressure:g}"))
            reasons.append(f"{n} ops: pressure {pressure:.2f} > {max_pressure:g}")
            continue
        why = f"{rule.match or 'python rule'}; working set {ws / 1024:.1f} KiB of {fast_limit / 1024:.0f} KiB"
        if reasons:
            why += f" (shortened: {reasons[0]})"
        log.append(rule_entry(rule.name, PASS, names[:n], True, why))
        return names[:n]
    log.append(rule_entry(rule.name, PASS, names, False, "; ".join(reasons)))
    return [names[0]]


def _in_dependence_order(kernels: tuple[Kernel, ...]) -> tuple[Kernel, ...] | None:
    """The kernels in an order where each runs after every kernel whose output it reads
    (Kahn's algorithm, the earliest ready kernel first, so an order that already works is
    kept), or None when the kernel graph is cyclic. A group keeps its first op's place, so
    a conv fused with the add of a later branch (`e = add(conv(x), conv_1x1(x))`) must move
    after that branch's kernel: run in group order, it would read the branch unwritten."""
    import heapq

    owner = {t: i for i, k in enumerate(kernels) for t in k.outputs + k.internals}
    readers: list[set[int]] = [set() for _ in kernels]
    indegree = [0] * len(kernels)
    for i, k in enumerate(kernels):
        for source in {owner[t] for t in k.inputs if t in owner} - {i}:
            readers[source].add(i)
            indegree[i] += 1
    ready = [i for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(kernels[i])
        for j in readers[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(ready, j)
    return tuple(order) if len(order) == len(kernels) else None
