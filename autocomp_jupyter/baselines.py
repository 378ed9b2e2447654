"""The per-op baselines every report is measured against (docs/guide/report.md).

* `naive`    — one kernel per op, untiled, source order (`accel.cost.naive_schedule`).
* `textbook` — one kernel per op with a fixed textbook tiling (`accel.cost.textbook_schedule`):
               what the project called "library" before it was tuned.
* `library`  — one kernel per op, each tuned alone, as a vendor library ships per-op kernels
               (cuDNN, XLA's per-op kernels, the Gemmini library): the same tiling pass,
               scheduling pass and auto-tuner the pipeline runs, applied to that op's kernel
               alone, fusion off, with a fixed tuner budget (`LIBRARY_CONFIGS` candidates);
               a kernel whose whole schedule space is small (`search_space.EXHAUSTIVE_MAX`) is searched
               exhaustively, so on it the library is the per-op optimum. The fastest of
               those candidates, the naive and the textbook schedules is kept, so the
               library is never slower than either baseline, kernel by kernel.
               What `optimize()` adds over it is fusion, cross-op scheduling and
               target-specific tiles of the fused kernels.

The library schedule of a kernel depends only on its structure (statements, shapes, dtypes;
not its tensor or op names, nor where its source text stands), the target, the rule
parameters the passes read and the seed, so it is cached on that value (the kernel's
`canon.canonical_kernel`) in a bounded LRU (`_CACHE`): a network repeating a layer shape
(ResNet-50: 174 ops, 54 distinct kernels), or a notebook re-running a cell, tunes each
distinct op once.

`gain_breakdown` splits `speedup_vs_library` = t(library) / t(optimized) into three
factors that multiply to it exactly, along a chain of plans:

    library ─fusion→ F ─tiling→ T ─scheduling→ optimized

    F: the optimised plan's kernels (its fusion groups), each scheduled as the library would
       schedule it alone (the same per-kernel procedure and cache) — fusion at library quality;
    T: the optimised plan's tiles and per-level loop orders on those kernels, with F's
       annotations (parallel / vectorize / unroll), or where those are slower than F the
       best of these tiles annotated by the library's scheduling pass or as the tiling
       search scored them (`_tiles_annotated`);
    fusion = t(library) / t(F), tiling = t(F) / t(T), scheduling = t(T) / t(optimized).

A factor below 1 says that step of the optimised plan is worse than what the library's
procedure would have chosen (e.g. a tuner budget spread over more kernels).
"""
from __future__ import annotations

from dataclasses import replace

from . import objective
from .accel.cost import naive_schedule, textbook_schedule
from .accel.target import Target
from .caches import LRU
from .canon import canonical_kernel, evaluate_program
from .ir.program import Program
from .ir.schedule import Kernel, Schedule, kernels_unfused
from .result import Plan
from .schedule import by_position, from_positions

LIBRARY_CONFIGS = 64       # tuner candidates per op: the library's fixed search budget
CACHE_SIZE = 512           # distinct (kernel structure, target, rules, seed) entries kept
_CACHE = LRU("library_schedule", CACHE_SIZE)


def cache_clear() -> None:
    """Forget every cached library schedule (tests, benchmarks timing a cold start)."""
    _CACHE.clear()


def cache_info() -> dict:
    return {"entries": len(_CACHE), "max": CACHE_SIZE}


def naive_plan(program: Program, target: Target) -> Plan:
    kernels = kernels_unfused(program)
    return Plan(program, kernels, tuple(naive_schedule(k, target) for k in kernels), "naive")


def textbook_plan(program: Program, target: Target) -> Plan:
    kernels = kernels_unfused(program)
    return Plan(program, kernels, tuple(textbook_schedule(k, target) for k in kernels), "textbook")


def library_plan(program: Program, ctx, executor=None) -> Plan:
    """Each op's kernel tuned alone (fusion off): the tuned per-op library baseline.
    `executor` (see `prefetch`) tunes the distinct kernels in parallel; the plan is the same."""
    kernels = kernels_unfused(program)
    prefetch(program, kernels, ctx, executor)
    return Plan(program, kernels, tuple(library_schedule(program, k, ctx) for k in kernels), "library")


def prefetch(program: Program, kernels, ctx, executor=None) -> int:
    """Tune the library schedules of `kernels` (kernels of `program`) not cached yet, each
    distinct one once, as tasks on `executor` (a concurrent.futures Executor, "processes[:N]"
    or "tcp://host:port"; None: this process and its spare cores, `library_schedules`;
    "serial": nothing is done here, `library_schedule` tunes on demand).
    Each task runs `library_schedule`'s own procedure, which depends only on the kernel's
    structure, the target, the rules and the seed, so the schedules are those a serial run
    finds. Returns how many kernels were tuned."""
    if executor == "serial":
        return 0
    if executor is None:
        before = _CACHE.misses
        library_schedules(program, kernels, ctx)
        return _CACHE.misses - before
    misses: dict = {}
    for kernel in kernels:
        key = _cache_key(kernel, ctx)
        if key not in _CACHE and key not in misses:
            misses[key] = kernel
    if len(misses) < 2:
        return 0
    from .tune import close_executor, open_executor

    pool, owned = open_executor(executor)
    slim = replace(program, param_values={})     # the weights are not needed to tune
    try:
        futures = [(key, pool.submit(_tune_alone_task, slim, kernel, ctx.target, ctx.rules, int(ctx.seed or 0)))
                   for key, kernel in misses.items()]
        for key, future in futures:
            _CACHE.put(key, future.result())
    finally:
        close_executor(owned)
    return len(misses)


def library_schedules(program: Program, kernels, ctx) -> list[Schedule]:
    """`library_schedule` of each of `kernels` (kernels of `program`), those not cached yet
    searched side by side, here and on the spare cores (`workers.run_all`). Each search
    depends only on its kernel's structure, the target, the rules and the seed, so the
    schedules are those a serial run finds, wherever they were searched."""
    from . import workers

    found: dict = {}                       # key -> the schedule by loop position
    todo: dict = {}
    keys = [_cache_key(kernel, ctx) for kernel in kernels]
    for kernel, key in zip(kernels, keys):
        if key not in found and key not in todo:
            hit = _CACHE.get(key)
            if hit is None:
                todo[key] = kernel
            else:
                found[key] = hit
    seed = int(ctx.seed or 0)
    if len(todo) < 2 or workers.spare_cores() < 1:          # one process: each searched here, in order
        done = [by_position(_tune_alone(program, kernel, ctx)) for kernel in todo.values()]
    else:   # (a call a worker cannot take — rules written in a notebook cannot be sent — runs here)
        done = workers.run_all([(_tune_alone_task, _kernel_program(program, kernel), kernel, ctx.target, ctx.rules,
                                 seed) for kernel in todo.values()])
    for key, positions in zip(todo, done):
        found[key] = positions
        _CACHE.put(key, positions)
    return [from_positions(kernel, found[key]) for kernel, key in zip(kernels, keys)]


def _kernel_program(program: Program, kernel: Kernel) -> Program:
    """`program` cut to `kernel`'s ops, without weights or source text: all a library search
    reads of it, and a fiftieth of the whole program to send to a worker (a DenseNet's
    program takes 50 ms to unpickle, more than the search of one of its ops)."""
    names = set(kernel.ops)
    return replace(program, ops=tuple(op for op in program.ops if op.name in names), param_values={}, source="")


def _tune_alone_task(program: Program, kernel: Kernel, target: Target, rules, seed: int) -> tuple:
    """One library kernel tuned where an executor runs it; the schedule by loop position.
    Tasks in threads of one worker take turns (isl and the caches are not thread-safe)."""
    from .passes import PassContext
    from .tune import _SEARCH_LOCK

    with _SEARCH_LOCK:
        return by_position(_tune_alone(program, kernel, PassContext(program, target, rules, seed)))


def library_schedule(program: Program, kernel: Kernel, ctx) -> Schedule:
    """The library's schedule of `kernel` (a kernel of `program`): textbook tiles, then the
    tiling pass, the scheduling pass and LIBRARY_CONFIGS tuner candidates on this kernel
    alone; the fastest legal schedule of those (never slower than the textbook tiles)."""
    key = _cache_key(kernel, ctx)
    hit = _CACHE.get(key)
    if hit is not None:
        return from_positions(kernel, hit)
    schedule = _tune_alone(program, kernel, ctx)
    _CACHE.put(key, by_position(schedule))
    return schedule


def _tune_alone(program: Program, kernel: Kernel, ctx) -> Schedule:
    from .rules.scheduling import scheduling_pass
    from .rules.tiling import tiling_pass
    from .tune import tune_plan

    target = ctx.target
    # The passes' logs are not kept here, and the schedules they keep are proved legal by isl
    # without tiled runs: the baseline is costed, never run or shown as optimised (a library
    # schedule the pipeline takes is verified whole: `pipeline._searched_as_well_as_the_library`).
    ctx = replace(ctx, explain=False, tiled_checks=False)
    plan = Plan(program, (kernel,), (textbook_schedule(kernel, target),), "textbook")
    candidates = [Plan(program, (kernel,), (naive_schedule(kernel, target),), "naive"), plan]
    # The textbook tiles' default annotations can be illegal on a fused kernel (a layernorm's
    # row loop marked parallel across its mean): only legal schedules compete.
    bare = _from_bare_textbook(program, kernel, ctx)
    if bare:
        # The passes from the annotated tiles would inherit the illegal annotations and roll
        # them back at every step: the tuner starts from the bare tiles' passes instead (on
        # the networks' chain kernels it found as fast a schedule, in two thirds the time).
        plan = bare[-1]
    else:
        for run in (tiling_pass, scheduling_pass):   # each pass checks (isl, tiled execution) what it keeps
            plan = run(plan, ctx).plan
            candidates.append(plan)
    tuned, _, _ = tune_plan(plan, ctx, configs=LIBRARY_CONFIGS, top=1)   # legal schedules only
    candidates.append(tuned)
    exhaustive = _exhaustive(kernel, ctx)          # a space small enough to score whole
    if exhaustive is not None:
        candidates.append(Plan(program, (kernel,), (exhaustive,), "exhaustive"))
    if kernel.compute_at:
        # A chain computed at its last kernel's tiles: the chain pass's own tiling search of
        # it at that compute point as well, then the scheduling pass. From textbook tiles the
        # passes and the tuner can miss the tiles a fused nest needs by far (VGG's conv →
        # relu → maxpool on gemmini: 16.0 ms against the 3.9 ms that search finds), and the
        # gain chain's fusion step would then read the library's miss as fusion's loss.
        plan = _chain_searched(program, kernel, ctx)
        if plan is not None:
            candidates.append(plan)
            candidates.append(scheduling_pass(plan, ctx).plan)
    if len(kernel.ops) > 1 and not kernel.compute_at:
        # A fused epilogue searched from its anchor op's own library schedule as well (the
        # search from textbook tiles alone can miss the good tiles: a grouped conv + batchnorm
        # + relu ran 1.8x slower than its ops).
        plan = Plan(program, (kernel,), (_on_the_anchors_schedule(program, kernel, ctx),), "anchored")
        candidates.append(plan)
        for run in (tiling_pass, scheduling_pass):
            plan = run(plan, ctx).plan
            candidates.append(plan)
    from . import poly
    candidates = bare + candidates
    totals = [evaluate_program(p.schedules, target).total if poly.check_schedule(p.schedules[0]).ok else None
              for p in candidates]
    legal = [i for i, c in enumerate(totals) if c is not None]
    # the objective's choice (objective.py); on a tie, the later candidate (the searched one)
    legal.reverse()
    best = legal[objective.pick(target.objective, [totals[i].time_s for i in legal],
                                [totals[i].energy_j for i in legal],
                                [totals[i].bytes.get(target.dram.name, 0.0) for i in legal],
                                objective.ties(target))]
    return candidates[best].schedules[0]


def _from_bare_textbook(program: Program, kernel: Kernel, ctx) -> list[Plan]:
    """Where the textbook schedule is illegal (its default parallel loops race: a chain's
    producer computed at each tile over a halo), every tiled candidate inherits its
    annotations and the tiling pass rolls each back: the tiling and scheduling passes run
    from its tiles without annotations instead, and the tuner from theirs. Empty where the
    textbook schedule is legal. (Listed before the other candidates: on a tie those win.)"""
    from . import poly
    from .rules.scheduling import scheduling_pass
    from .rules.tiling import tiling_pass

    textbook = textbook_schedule(kernel, ctx.target)
    if poly.check_schedule(textbook).ok:
        return []
    plan = Plan(program, (kernel,), (replace(textbook, annotations={}),), "textbook")
    found = []
    for run in (tiling_pass, scheduling_pass):
        plan = run(plan, ctx).plan
        found.append(plan)
    return found


def _chain_searched(program: Program, kernel: Kernel, ctx) -> Plan | None:
    """`kernel` (a chain with its compute point) with the tiles the chain pass's search finds
    at that point (`rules.chains`: its random candidates and local rounds; remembered, so
    the chain the pipeline searched is not searched again), or None where none fits."""
    from .accel.tile_search import chain_tiles

    found = chain_tiles(kernel, ctx.target, ctx.rules.tiling, ctx.seed)
    return Plan(program, (kernel,), (found[0],), "chain search") if found is not None else None


def _on_the_anchors_schedule(program: Program, kernel: Kernel, ctx) -> Schedule:
    """`kernel` (fused) on the library schedule of its anchor op alone."""
    from .rules.fusion import inherited_schedule

    anchor = next(op.name for op in program.ops if kernel.anchor_statement in op.statements)
    alone = Kernel.from_ops(program, [anchor])
    return inherited_schedule(program, kernel, ctx, Plan(program, (alone,), (library_schedule(program, alone, ctx),),
                                                          "library"))


def _exhaustive(kernel: Kernel, ctx) -> Schedule | None:
    """The fastest legal schedule of a kernel whose whole space — every tile size of every loop
    at every level (inner within outer), every loop order per level, every parallel set, every
    vectorised loop — is small enough to score whole (spill within the rules'
    `max_spill_ratio`, as the tuner); None for a larger space. A vendor library tunes small
    ops exhaustively; so does this baseline."""
    from . import poly
    from .accel.search_space import exhaustive

    return exhaustive(kernel, ctx.target, float(ctx.rules.tiling.get("max_spill_ratio", 0.05)),
                      lambda schedule: poly.check_schedule(schedule).ok)


# --------------------------------------------------------------------------- the cache key


def _cache_key(kernel: Kernel, ctx) -> tuple:
    """The kernel's canonical form (tensor and op names by position: two convs of the same
    shapes share an entry), the target, the rule parameters the passes read, the seed."""
    rules = ctx.rules
    params = repr((sorted(rules.tiling.items()), sorted(rules.scheduling.items()),
                   sorted(rules.rollback.items()) if hasattr(rules, "rollback") else ()))
    return (canonical_kernel(kernel), ctx.target, params, int(ctx.seed or 0), LIBRARY_CONFIGS)


# --------------------------------------------------------------------------- gain breakdown


def _tiles_annotated(program: Program, optimized: Schedule, fused: Schedule, ctx) -> Schedule:
    """T's schedule of a kernel: the optimised tiles and orders with F's annotations, or,
    where those do not fit these tiles (slower than F: F vectorised a loop these tiles cut
    short), the fastest of that, these tiles annotated as the library's scheduling pass
    annotates them, and these tiles as the tiling search scored them (its vector loop, where
    that is legal: the pass refuses a vector loop a computed-at producer's halo follows,
    which the search scores vectorised and isl accepts)."""
    from . import poly
    from .rules.scheduling import scheduling_pass
    from .accel.search_space import vector_loop_index

    transplanted = replace(optimized, annotations=fused.annotations)
    time_s = lambda s: evaluate_program((s,), ctx.target).total.time_s
    if time_s(transplanted) <= time_s(fused):
        return transplanted
    bare = replace(optimized, annotations={})
    ctx = replace(ctx, explain=False, tiled_checks=False)
    annotated = scheduling_pass(Plan(program, (optimized.kernel,), (bare,), "tiled"), ctx).plan.schedules[0]
    candidates = [transplanted, annotated]
    vector = vector_loop_index(optimized.kernel, ctx.target)
    if vector >= 0:
        searched = replace(optimized, annotations={"vectorize": optimized.kernel.loop_names[vector]})
        if poly.check_schedule(searched).ok:
            candidates.append(searched)
    return min(candidates, key=time_s)


def gain_breakdown(library: Plan, optimized: Plan, ctx) -> dict:
    """{fusion, tiling, scheduling}: factors multiplying to t(library) / t(optimized) (see
    the module docstring for the chain of plans), plus the intermediate plans' times."""
    program = optimized.program
    fused = Plan(program, optimized.kernels,
                 tuple(library_schedule(program, k, ctx) for k in optimized.kernels), "library-fused")
    tiled = Plan(program, optimized.kernels,
                 tuple(_tiles_annotated(program, s, f, ctx) for s, f in zip(optimized.schedules, fused.schedules)),
                 "library-fused-tiled")
    t = [ctx.cost(p).total.time_s for p in (library, fused, tiled, optimized)]
    ratio = lambda a, b: a / b if b > 0 else 1.0
    return {"fusion": ratio(t[0], t[1]), "tiling": ratio(t[1], t[2]), "scheduling": ratio(t[2], t[3]),
            "plans_time_s": {"library": t[0], "fused": t[1], "fused_tiled": t[2], "optimized": t[3]}}
