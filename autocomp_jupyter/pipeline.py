"""`optimize()`: the ADRS pipeline, stage by stage, in one place.

    DSL text ─parse→ Program ─baselines→ naive, textbook, library (per-op tuned) plans
      ─fusion→ ─tiling→ ─scheduling→   (each pass checked: legality, equivalence, gain; else rolled back)
      ─tuning→ top-K versions ─verify→ ─cost→ report

Every pass takes an immutable Plan and returns a new one plus its log; the checks that
decide whether a pass's result is kept live here, in `_check_pass`, so no pass can skip them.
Every stage is a transaction (`passes.transaction`): a baseline, a pass, its check, the
chains, the library's search of a kernel, the tuner. An internal fault in one is a rollback
entry and the pipeline goes on from the plan before it; the plan shown is still verified.
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

from .accel.cost import naive_schedule
from . import blas, objective, workers
from .objective import check as check_objective
from .accel.target import Target, load_target
from .baselines import library_plan, prefetch, textbook_plan
from .caches import LRU
from .dsl import load, parse
from .errors import UserError
from .ir.program import Program
from .ir.schedule import kernels_unfused
from .passes import Pass, PassContext, PassOutcome, rollback_entry, rule_entry, transaction
from .ir.plan import Plan
from .result import Result
from .rules.engine import load_rules
from .rules.fusion import fusion_pass
from .rules.in_place import fold_in_place_writes, mark_in_place_updates
from .rules.split_k_step import split_k_step
from .verify import equivalent_at_scale


def _registered_passes() -> dict[str, Pass]:
    """The built-in passes by name, in pipeline order (docs/architecture.md)."""
    passes: dict[str, Pass] = {"fusion": fusion_pass}
    try:
        from .rules.tiling import tiling_pass
        passes["tiling"] = tiling_pass
    except ImportError:  # the tiling pass ships in its own module; absent in minimal builds
        pass
    try:
        from .rules.scheduling import scheduling_pass
        passes["scheduling"] = scheduling_pass
    except ImportError:
        pass
    return passes


def _as_program(src: str | Path | Program) -> Program:
    if isinstance(src, Program):
        return src
    if isinstance(src, (str, Path)) and "\n" not in str(src) and str(src).strip().endswith(".onnx"):
        from .onnx_import import from_onnx                       # an ONNX model file

        return from_onnx(str(src).strip())
    if isinstance(src, Path) or (isinstance(src, str) and "\n" not in src and src.strip().endswith(".acir")):
        return load(src)
    if type(src).__name__ == "ModelProto" and type(src).__module__.startswith("onnx"):
        from .onnx_import import from_onnx                       # an onnx.ModelProto in memory

        return from_onnx(src)
    if not isinstance(src, str):
        raise UserError(f"optimize() takes DSL text, a path to a .acir or .onnx file, an onnx.ModelProto or a "
                        f"Program, got {type(src).__name__}")
    return parse(src, "<cell>")


def _select_passes(passes: str | Sequence[str | Pass] | None) -> list[tuple[str, Pass]]:
    available = _registered_passes()
    if passes is None:
        return list(available.items())
    items = [p.strip() for p in passes.split(",") if p.strip()] if isinstance(passes, str) else list(passes)
    chosen = []
    for item in items:
        if callable(item):
            chosen.append((getattr(item, "__name__", "custom"), item))
        elif item in available:
            chosen.append((item, available[item]))
        else:
            known = ", ".join(available) or "none"
            raise UserError(f"unknown pass '{item}' in --passes; available: {known}", filename="--passes")
    return chosen


def baseline_plan(program: Program, target: Target, schedule_for: Callable, label: str) -> Plan:
    kernels = kernels_unfused(program)
    return Plan(program, kernels, tuple(schedule_for(k, target) for k in kernels), label)


def optimize(src, target: str | Path | Target = "tpu", rules: Iterable | None = None, tune: int | None = None,
             top: int | None = None, seed: int | None = None, budget: float | None = None,
             passes: str | Sequence | None = None, progress: Callable | None = None,
             executor=None, measure: bool = False, threads: int | None = None, schedule=None,
             objective: str | None = None) -> Result:
    """Run the ADRS pipeline on `src` (DSL text, a .acir path or a Program) for `target`.

    rules: extra rule files / registered @adrs_rule names (after default.yaml and the
    target's file); tune: configurations the tuner evaluates (0: rules only; default from
    the rule file); top: versions kept; seed: tuner seed; budget: tuning seconds;
    passes: names ('fusion,tiling,scheduling') or pass functions; progress:
    callback(done, total, best_time_s) during tuning; executor: a concurrent.futures
    Executor (or 'processes[:N]', 'tcp://host:port') for tuning, one kernel per task, and
    for the library baseline's per-op tuning (the results are the serial ones); measure: compile and time
    the generated C on this CPU (target 'host'), with `threads` OpenMP threads (default: the
    cores this process may use); schedule: kernels' schedules to replay instead of searching
    for them — a report (dict, or a JSON file's path) whose kernels carry `trace`, or
    {kernel name: trace | ScheduleBuilder} (schedule/); each is replayed step by step,
    checked, then verified like any plan; objective: what every search minimises —
    'latency' (ties within 1% to less energy, then fewer DRAM bytes), 'energy' or 'edp'
    (default: the target's). Bad input raises `UserError` (a refused step: a
    `schedule.ScheduleError` naming the step, its loop and the dependence).
    """
    run = _Run(src, target, rules, tune, top, seed, budget, passes, progress, executor, measure, threads, schedule,
               objective)
    with blas.one_thread():                                      # small arrays: a second BLAS thread only waits
        for name, stage in STAGES:
            stage(run)
            if name:
                run.lap(name)
    # How the tiled runs were done (twins, kernels checked by isl alone): report["verification"].
    result = run.result
    result.typed_report = replace(result.typed_report, verification=run.checks, seconds_by_pass=run.lap.seconds)
    result.report = result.typed_report.to_json()
    return result


# --------------------------------------------------------------------------- the stages


class _Run:
    """What the stages of one `optimize` call read and write, from the arguments on."""

    def __init__(self, src, target, rules, tune, top, seed, budget, passes, progress, executor, measure, threads,
                 schedule, objective=None):
        self.started = time.perf_counter()
        self.lap = _Laps(self.started)                           # report["seconds_by_pass"]
        self.src, self.target, self.rules, self.tune, self.top, self.seed = src, target, rules, tune, top, seed
        self.budget, self.passes, self.progress, self.executor = budget, passes, progress, executor
        self.measure, self.threads, self.schedule, self.objective = measure, threads, schedule, objective
        self.log: list[dict] = []
        self.rollbacks: list[dict] = []
        self.checks: dict = {}                                   # how the tiled runs were done


def _parse(run: _Run) -> None:
    """The program parsed and shape-checked, the target and rule files loaded and checked,
    the flags and any given traces checked before any work; KV-cache updates marked in place."""
    program = _as_program(run.src)                               # parse and shape-check
    run.target = load_target(run.target)                         # preset or YAML (validated)
    if run.objective is not None:                                # the run's objective over the target's
        run.target = replace(run.target, objective=check_objective(run.objective, "objective"))
    run.ruleset = load_rules(list(run.rules or []), run.target.name)   # default.yaml ← target ← user
    run.tune_cfg = run.ruleset.tune
    run.seed = run.tune_cfg.get("seed", 0) if run.seed is None else run.seed
    _check_flags(run.tune, run.top, run.seed, run.budget)
    workers.spare_cores()                                        # AUTOCOMP_WORKERS checked before any work
    run.traces = _load_traces(run.schedule)                      # --schedule: checked before any work
    run.program, in_place_log = mark_in_place_updates(program)   # KV-cache updates: one row, in place
    run.ctx = PassContext(run.program, run.target, run.ruleset, run.seed,
                          equivalence=remembered_equivalence)    # large programs: on twins
    run.log.extend(in_place_log)


# Equivalence verdicts of rewritten programs (`verify.equivalent_at_scale`) across runs: the
# fusion pass rewrites a program the same way on every target (its inlines and view folds
# read sizes, not the target), so a sweep's designs (`dse.explore`) or a re-run cell check
# each rewrite once. A verdict is kept with the programs' weights (which program equality
# leaves out), its rewrites and the source its twin is built from.
_EQUIVALENCE = LRU("pipeline.equivalence", 16)


def remembered_equivalence(original: Program, candidate: Program, seed: int = 0):
    """`verify.equivalent_at_scale(original, candidate, seed)`, remembered by value."""
    key = (original, candidate, seed, original.source, original.filename, candidate.rewrites)
    try:
        hash(key)
    except TypeError:           # a program holding an unhashable attribute: checked every time
        return equivalent_at_scale(original, candidate, seed)
    hit = _EQUIVALENCE.get(key)
    if hit is not None and hit[0] is original.param_values and hit[1] is candidate.param_values:
        return hit[2]
    verdict = equivalent_at_scale(original, candidate, seed)
    _EQUIVALENCE.put(key, (original.param_values, candidate.param_values, verdict))
    return verdict


def _baselines(run: _Run) -> None:
    """The naive (per-op, untiled), textbook (fixed tiles) and library (each op tuned alone) plans."""
    program, target = run.program, run.target
    run.naive = baseline_plan(program, target, naive_schedule, "naive")
    run.textbook = _baseline("textbook", lambda: textbook_plan(program, target), run.naive, run.rollbacks)
    run.library = _baseline("library", lambda: library_plan(program, run.ctx, run.executor), run.textbook,
                            run.rollbacks)


def _passes(run: _Run) -> None:
    """The passes (fusion → tiling → scheduling), each kept only where it gains and verifies;
    each pass's seconds under its own name."""
    plan = run.library                                           # the passes start from the library
    run.selected = _select_passes(run.passes)
    runs = _PassRuns()
    judged: set[str] = set()                                     # passes whose gain an earlier pass was judged with
    for i, (name, run_pass) in enumerate(run.selected):
        outcome = runs.run(name, run_pass, plan, run.ctx)
        retile = next(((n, fn) for n, fn in run.selected[i + 1:] if n == "tiling"), None)
        kept = _checked(name, plan, outcome, run.ctx, run.log, run.rollbacks, runs, retile,
                        gain_judged=name in judged)
        if retile is not None and kept is not plan:
            judged.add(retile[0])    # fusion was kept for its gain after tiling: tiling is part of that gain
        plan = kept
        run.lap(name)
    run.plan = plan


def _across_layers(run: _Run) -> None:
    """Fusion across layers (compute_at chains), then split-K for decode, then in-place row
    updates folded into the kernel reading them."""
    names = [n for n, _ in run.selected]
    if "fusion" in names and "tiling" in names:
        run.plan = _chains(run.plan, run.ctx, run.log, run.rollbacks)
        run.plan = split_k_step(run.plan, run.ctx, run.log, run.rollbacks)   # the cache split across the array
        run.plan = fold_in_place_writes(run.plan, run.ctx, run.log, run.rollbacks)   # row writes in their reader


def _library_checks(run: _Run) -> None:
    """Never slower than the library: the plan, each fused kernel's search, each fusion."""
    ctx, rollbacks = run.ctx, run.rollbacks
    plan = _never_slower_than(run.library, run.plan, ctx, rollbacks, run.log)
    plan = _searched_as_well_as_the_library(plan, ctx, run.executor, run.log, rollbacks)
    plan = _annotated_as_well_as_the_library(plan, ctx, run.log, rollbacks)
    run.plan = _fusions_that_beat_the_library(plan, ctx, run.log, rollbacks)


def _energy_ties(run: _Run) -> None:
    """Under `latency`, each kernel's ties broken by energy once its structure is settled: its
    tiles searched again around its schedule (`search_tiles(ties=...)`: a climb that lowers
    energy among the tilings within 1% of the fastest) and taken where the objective prefers
    them, legal (isl) and verified. Done once, at the end of the passes: taken inside them,
    a tie would become the next search's starting point and steer it elsewhere."""
    from . import poly
    from .canon import evaluate
    from .passes import rule_entry
    from .accel.tile_search import search_all
    from .rules.tiling import level_mapping, search_tiles
    from .verify import verify_schedule

    ctx, target = run.ctx, run.ctx.target
    tie = objective.ties(target)
    if target.objective != "latency" or tie == 0.0 or "tiling" not in {name for name, _ in run.selected}:
        return
    levels = level_mapping(ctx.rules.tiling.get("levels", ["L2", "L1", "vector"]), target.tiling_levels)
    schedules = list(run.plan.schedules)
    retiled: set[int] = set()       # the kernels whose tiles the tie-break moved
    with transaction(run.rollbacks, "tiling", "breaking latency's ties by energy"):
        # every kernel's search first, side by side on the spare cores (each is asked again below)
        search_all(list(zip(run.plan.kernels, schedules)), target, levels, ctx.rules.tiling, seed=ctx.seed, ties=tie)
    for i, (kernel, schedule) in enumerate(zip(run.plan.kernels, schedules)):
        with transaction(run.rollbacks, "tiling", "breaking latency's ties by energy", kernel=kernel.name,
                         then="the kernel's schedule kept"):
            found = search_tiles(kernel, target, schedule, levels, ctx.rules.tiling, seed=ctx.seed, ties=tie)
            if found is None:
                continue
            tied, cost, _ = found
            old = evaluate(schedule, target)
            if not objective.prefers("latency", old, cost, tie) or not poly.check_schedule(tied).ok \
                    or verify_schedule(tied, run.plan.program, ctx):
                continue
            schedules[i] = tied
            retiled.add(i)
            run.log.append(rule_entry("energy_tie", "tiling", kernel.ops, True,
                                      f"within 1% of the fastest, less energy: {_moved(old, cost)} "
                                      f"(the latency objective breaks ties by energy)"))
    run.plan = Plan(run.plan.program, run.plan.kernels, tuple(schedules), run.plan.label)
    if retiled:     # new tiles under the old annotations: the library's may suit them better
        run.plan = _annotated_as_well_as_the_library(run.plan, ctx, run.log, run.rollbacks, only=retiled)


def _tuning(run: _Run) -> None:
    """The user's traces replayed, then the tuner over what the rules leave open (never
    overriding a given schedule)."""
    replayed: set[str] = set()
    if run.traces is not None:                                   # the user's traces replace the search
        run.plan, replayed = _replay(run.traces, (run.plan, run.library, run.naive), run.target, run.schedule,
                                     run.log)
    configs = run.tune_cfg.get("configs", 0) if run.tune is None else run.tune   # what the rules leave open
    if replayed and replayed >= {k.name for k in run.plan.kernels}:
        configs = 0                                              # every kernel's schedule was given
    given = {k.name: s for k, s in zip(run.plan.kernels, run.plan.schedules) if k.name in replayed}
    run.plan, run.versions, run.tuning = _tune(run.plan, run.ctx, configs, run.top or run.tune_cfg.get("top", 3),
                                               run.budget, run.progress, run.executor, run.rollbacks)
    if given:
        run.plan, run.versions = _keep_replayed(run.plan, given, run.versions)


def _verification(run: _Run) -> None:
    """Only verified versions kept; the plan verified, else the library, else the naive plan."""
    ctx = run.ctx
    run.versions = {name: v for name, v in run.versions.items() if _verify(v, ctx)[0]}
    verified, reason = _verify(run.plan, ctx, run.checks)        # equivalence, legality, tiled runs
    run.fell_back = None
    for fallback in (run.library, run.naive):                    # never show an unverified plan
        if verified:
            break
        run.rollbacks.append(rollback_entry("verify", "", f"the {run.plan.label} plan failed verification "
                                                          f"({reason}): fell back to the {fallback.label} baseline"))
        run.plan, run.versions, run.fell_back = fallback, {}, fallback.label
        verified, reason = _verify(run.plan, ctx, run.checks)
    run.verified = verified


def _report(run: _Run) -> None:
    """The generated C measured on host when asked, the gain breakdown's library tuning,
    then the report (docs/guide/report.md)."""
    run.measured = _measure(run.plan, run.target, run.threads) if run.measure else None
    if run.measured is not None and not run.measured["matches_interpreter"]:
        run.verified = False
    with transaction(run.rollbacks, "pipeline", "the gain breakdown's library tuning"):
        prefetch(run.program, run.plan.kernels, run.ctx, run.executor)
    run.result = _result(run.program, run.target, run.ruleset, run.ctx, run.naive, run.textbook, run.library,
                         run.plan, run.versions, run.log, run.rollbacks, run.tuning, run.verified, run.fell_back,
                         run.measured, run.started)


# The stages of `optimize`, in order, with the name their seconds have in
# report["seconds_by_pass"] (the passes stage names each pass itself: fusion, tiling, scheduling).
STAGES: tuple[tuple[str, Callable[[_Run], None]], ...] = (
    ("parse", _parse),
    ("baselines", _baselines),
    ("", _passes),
    ("chains", _across_layers),
    ("library checks", _library_checks),
    ("energy ties", _energy_ties),
    ("tuning", _tuning),
    ("verify", _verification),
    ("report", _report),
)


class _Laps:
    """Seconds per stage of `optimize` (report["seconds_by_pass"]): each call closes the stage
    that ran since the previous one (a stage met twice adds up)."""

    def __init__(self, started: float):
        self.last, self.seconds = started, {}

    def __call__(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + (now - self.last)
        self.last = now


def _result(program: Program, target: Target, ruleset, ctx: PassContext, naive: Plan, textbook: Plan,
            library: Plan, plan: Plan, versions: dict, log: list, rollbacks: list, tuning: dict, verified: bool,
            fell_back: str | None, measured: dict | None, started: float) -> Result:
    """The report (docs/guide/report.md) from the four plans' costs, and what the views show: the
    optimised plan's tile footprints and its generated code (C and pseudo-kernel)."""
    from .baselines import gain_breakdown
    from .report import build_report, kernel_footprints

    costs = {"naive": ctx.cost(naive), "textbook": ctx.cost(textbook), "library": ctx.cost(library),
             "optimized": ctx.cost(plan)}
    t_library, t_plan = costs["library"].total.time_s, costs["optimized"].total.time_s
    breakdown = {"fusion": t_library / t_plan if t_plan > 0 else 1.0, "tiling": 1.0, "scheduling": 1.0,
                 "plans_time_s": {"library": t_library, "optimized": t_plan}}
    with transaction(rollbacks, "pipeline", "the gain breakdown", then="the whole gain is shown as fusion's"):
        breakdown = gain_breakdown(library, plan, ctx)
    report = build_report(program, target, costs, plan, monitor=ruleset.monitor,
                          gain_breakdown=breakdown, rules=log, rollbacks=rollbacks,
                          tuning=tuning, verified=verified, seconds=time.perf_counter() - started,
                          fell_back=fell_back, measured=measured)
    return Result(program=program, target=target, before=naive, library=library, after=plan,
                  report=report.to_json(), versions=versions, rules=ruleset, typed_report=report,
                  footprints=kernel_footprints(plan, target), codes=_codes(plan, target))


def _codes(plan: Plan, target: Target) -> dict:
    """{'c' | 'pseudo': the generated code, or the exception codegen raised for this plan
    (the Code tab shows why; `Result.code` re-raises it)}: the pseudo-kernel (the Code tab's
    first view), and the C where the target runs it (host); an accelerator plan's C is made
    when first asked for (`Result.code`: 1.6 s of ResNet-50's 43 profiled otherwise)."""
    from . import codegen
    from .accel.host_model import runs_generated_c

    return {lang: codegen.generate_or_reason(plan, target, lang)
            for lang in (("pseudo", "c") if runs_generated_c(target) else ("pseudo",))}


def _tune(plan: Plan, ctx: PassContext, configs: int, top: int, budget, progress, executor, rollbacks: list):
    """The auto-tuner (tune/) over the plan's kernels; with no configurations, or where
    the tuner fails (a rollback entry), the plan as the rules left it."""
    untuned = plan, {}, {"configs_evaluated": 0, "seconds": 0.0, "top": [], "interrupted": False,
                         "budget_exhausted": False}
    if configs <= 0:
        return untuned
    from .tune import tune_plan

    with transaction(rollbacks, "tuning", "the tuner", then="the plan as the rules left it"):
        return tune_plan(plan, ctx, configs=configs, top=top, budget=budget, progress=progress, executor=executor)
    return untuned


def _baseline(label: str, build: Callable[[], Plan], fallback: Plan, rollbacks: list) -> Plan:
    """The `label` baseline plan, or `fallback` in its place where building it fails."""
    with transaction(rollbacks, "baseline", f"the {label} baseline",
                     then=f"the {fallback.label} plan stands in for it"):
        return build()
    return fallback


def _never_slower_than(library: Plan, plan: Plan, ctx: PassContext, rollbacks: list, log: list | None = None) -> Plan:
    """`plan`, or `library` where the objective prefers it (or the plan cannot be costed). A
    library plan within 1% of the passes' time that uses less energy (latency's tie) is the
    objective's choice, logged; one the passes' plan is worse than is a rollback."""
    goal = ctx.target.objective
    with transaction(rollbacks, "pipeline", "costing the passes' plan", then="keeping the library baseline"):
        ours, theirs = ctx.cost(plan).total, ctx.cost(library).total
        if not objective.prefers(goal, ours, theirs, objective.ties(ctx.target)):
            return plan
        numbers = (f"{ours.time_s * 1e6:.1f} us, {ours.energy_j * 1e6:.1f} uJ vs {theirs.time_s * 1e6:.1f} us, "
                   f"{theirs.energy_j * 1e6:.1f} uJ")
        if goal == "latency" and ours.time_s <= theirs.time_s * (1 + objective.ties(ctx.target)) and log is not None:
            log.append(rule_entry("library_check", "pipeline", [op.name for op in plan.program.ops], True,
                                  f"the library baseline ties with the passes' plan on time (within 1%) and uses "
                                  f"less energy ({numbers}): taken, as the latency objective breaks ties"))
            return library
        rollbacks.append(rollback_entry("pipeline", "", f"the passes' plan is worse than the library baseline by the "
                                        f"{goal} objective ({numbers}): keeping the baseline"))
    return library


def _chains(plan: Plan, ctx: PassContext, log: list, rollbacks: list) -> Plan:
    """`rules.chains.chain_fusion` on the scheduled plan, its entries in the rule log."""
    from .rules.chains import chain_fusion

    with transaction(rollbacks, "fusion", "chain fusion", then="the kernels stay as they were"):
        chained, entries, undone = chain_fusion(plan, ctx)    # each chain rule is a transaction inside
        log.extend(entries)
        rollbacks.extend(undone)
        return chained
    return plan


def _searched_as_well_as_the_library(plan: Plan, ctx: PassContext, executor, log: list,
                                     rollbacks: list | None = None) -> Plan:
    """Each kernel's schedule, or the one the library's own procedure finds for that same
    (fused) kernel where that is faster (`baselines.library_schedule`: textbook tiles, the
    tiling and scheduling passes and a short tune on the kernel alone), so the pipeline
    never schedules a kernel worse than the library would (the gain breakdown's F plan
    asks for the same schedules, cached)."""
    from .baselines import library_schedule
    from .canon import evaluate
    from .passes import rule_entry
    from .verify import verify_schedule

    rollbacks = [] if rollbacks is None else rollbacks
    with transaction(rollbacks, "tiling", "the library's search of the plan's kernels"):
        prefetch(plan.program, plan.kernels, ctx, executor)     # (each kernel's own search is retried below)
    schedules = []
    for kernel, schedule in zip(plan.kernels, plan.schedules):
        schedules.append(schedule)
        with transaction(rollbacks, "tiling", "the library's search", kernel=kernel.name,
                         then="the kernel's schedule kept"):
            own = evaluate(schedule, ctx.target)                  # remembered by canonical schedule
            alone = library_schedule(plan.program, kernel, ctx)
            theirs = evaluate(alone, ctx.target)
            # (a legal schedule: `library_schedule` keeps only those; it may split a row whose
            # tiles then run in their own nests, which the tiling pass keeps whole: checked here)
            if objective.prefers(ctx.target.objective, own, theirs, objective.ties(ctx.target)) \
                    and not verify_schedule(alone, plan.program, ctx):
                schedules[-1] = alone
                log.append(rule_entry("library_search", "tiling", kernel.ops, True,
                                      f"the library's own search of kernel {kernel.name} finds a better schedule "
                                      f"by the {ctx.target.objective} objective ({_moved(own, theirs)}): taken"))
    return Plan(plan.program, plan.kernels, tuple(schedules), plan.label)


def _annotated_as_well_as_the_library(plan: Plan, ctx: PassContext, log: list, rollbacks: list,
                                      only: set[int] | None = None) -> Plan:
    """Each kernel's tiles and loop orders annotated as the library annotates the same kernel
    (the gain breakdown's tiled plan: `baselines._tiles_annotated`, its parallel loops, vector
    loop and unroll on these tiles) where that is better by the objective, legal and verified.
    The scheduling pass annotates step by step (a vector loop, then the unroll that suits it)
    and can miss a pair the library's search found: RegNetX-32GF's grouped convolution on gpu
    ran at 88.6 us vectorised along w, 44.8 us unvectorised with the same tiles. `only`: the
    kernels (by index) to check, where the others were checked before."""
    from . import poly
    from .baselines import _tiles_annotated, library_schedule
    from .canon import evaluate
    from .verify import verify_schedule

    schedules = list(plan.schedules)
    for i, (kernel, schedule) in enumerate(zip(plan.kernels, plan.schedules)):
        if only is not None and i not in only:
            continue
        with transaction(rollbacks, "scheduling", "the library's annotations on the kernel's tiles",
                         kernel=kernel.name, then="the kernel's schedule kept"):
            theirs = _tiles_annotated(plan.program, schedule, library_schedule(plan.program, kernel, ctx), ctx)
            if theirs.annotations == schedule.annotations:
                continue
            own, other = evaluate(schedule, ctx.target), evaluate(theirs, ctx.target)
            if objective.prefers(ctx.target.objective, own, other, objective.ties(ctx.target)) \
                    and poly.check_schedule(theirs).ok and not verify_schedule(theirs, plan.program, ctx):
                schedules[i] = theirs
                log.append(rule_entry("library_annotations", "scheduling", kernel.ops, True,
                                      f"the library's annotations on these tiles are better by the "
                                      f"{ctx.target.objective} objective ({_moved(own, other)}): taken"))
    return Plan(plan.program, plan.kernels, tuple(schedules), plan.label)


def _moved(old, new) -> str:
    """'a -> b us, c -> d uJ': a kernel's time and energy before and after (the log's words)."""
    return (f"{old.time_s * 1e6:.1f} -> {new.time_s * 1e6:.1f} us, "
            f"{old.energy_j * 1e6:.1f} -> {new.energy_j * 1e6:.1f} uJ")


# A fused kernel the library's own schedule runs this much slower than its ops (as the
# library schedules each) is explained in the log: the gain chain's fusion step reads below 1.
LIBRARY_QUALITY_SLACK = 0.01


def _fusions_that_beat_the_library(plan: Plan, ctx: PassContext, log: list, rollbacks: list) -> Plan:
    """Each fused kernel judged against its ops as the library schedules each alone
    (`baselines.library_schedule`, the gain chain's measure). Where the plan's schedule of
    the fused kernel is no faster than those ops, the fusion is not kept: the kernel is split
    back into its ops on their library schedules (verified with the plan). Where only the
    library's own schedule of the fused kernel is slower (its search from textbook tiles
    misses tiles the tiling pass finds from the anchor's), the fusion is kept and the log
    says so, with the three times: the gain chain's fusion step then reads below 1 and its
    tiling step makes up for it."""
    from .baselines import library_schedule
    from .canon import evaluate
    from .ir.schedule import Kernel

    kernels, schedules = [], []
    absorbed = _absorbed_ops(ctx.program, plan.program)
    ops_of: dict = {}         # fused kernel name -> its ops, each a kernel of its own
    with transaction(rollbacks, "fusion", "the library's search of the fused kernels and their ops"):
        # all at once, on the spare cores too (each is retried alone below)
        for k in plan.kernels:
            if len(k.ops) > 1:
                ops_of[k.name] = [Kernel.from_ops(plan.program, [op]) for op in k.ops]
        prefetch(plan.program, [op for ops in ops_of.values() for op in ops]
                 + [k for k in plan.kernels if k.name in ops_of], ctx)
    for kernel, schedule in zip(plan.kernels, plan.schedules):
        kernels.append(kernel)
        schedules.append(schedule)
        if len(kernel.ops) < 2:
            if absorbed.get(kernel.ops[0]) and not kernel.compute_at:
                with transaction(rollbacks, "fusion", "judging the inlines against the library", kernel=kernel.name):
                    _explain_inlines(plan, kernel, schedule, absorbed[kernel.ops[0]], ctx, log)
            continue
        with transaction(rollbacks, "fusion", "judging the fusion against the library", kernel=kernel.name,
                         then="kept as it is"):
            ops = ops_of.get(kernel.name) or [Kernel.from_ops(plan.program, [op]) for op in kernel.ops]
            alone = [library_schedule(plan.program, k, ctx) for k in ops]
            apart = [evaluate(s, ctx.target) for s in alone]
            t_alone = sum(c.time_s for c in apart)
            own = evaluate(schedule, ctx.target)
            t_own = own.time_s
            t_library = evaluate(library_schedule(plan.program, kernel, ctx), ctx.target).time_s
            times = (f"{t_own * 1e6:.1f} us as scheduled here, {t_library * 1e6:.1f} us as the library schedules it, "
                     f"{t_alone * 1e6:.1f} us for its ops in the library")
            if not objective.prefers(ctx.target.objective, (t_alone, sum(c.energy_j for c in apart),
                                                            sum(c.dram_bytes for c in apart)), own,
                                     objective.ties(ctx.target)):
                why = (f"fused, it is no better by the {ctx.target.objective} objective than its ops as the library "
                       f"schedules them ({times}): split back")
                kernels[-1:], schedules[-1:] = ops, alone
                rollbacks.append(rollback_entry("fusion", kernel.name, why))
                log.append(rule_entry("library_check", "fusion", kernel.ops, False, why))
            elif t_library > t_alone * (1 + LIBRARY_QUALITY_SLACK):
                log.append(rule_entry("library_check", "fusion", kernel.ops, True,
                                      f"kept although the library's own schedule of the fused kernel is slower than "
                                      f"its ops ({times}): the library's search misses the tiles found here, so the "
                                      f"gain chain counts this fusion below 1 and its tiling above"))
    if len(kernels) == len(plan.kernels):
        return plan
    return Plan(plan.program, tuple(kernels), tuple(schedules), plan.label)


def _absorbed_ops(original: Program, program: Program) -> dict[str, list[str]]:
    """{op of `program`: the ops of `original` the fusion pass inlined or folded into it}
    (an op inlined into several readers is recomputed in each)."""
    present = {op.name for op in program.ops}
    owners: dict[str, set[str]] = {}
    for op in reversed(original.ops):                  # readers first: an inline into an inline lands further on
        if op.name in present:
            continue
        owners[op.name] = {name for r in original.readers(op.output)
                           for name in ({r.name} if r.name in present else owners.get(r.name, set()))}
    absorbed: dict[str, list[str]] = {}
    for op in original.ops:
        for owner in sorted(owners.get(op.name, ())):
            absorbed.setdefault(owner, []).append(op.name)
    return absorbed


def _explain_inlines(plan: Plan, kernel, schedule, inlined: list[str], ctx: PassContext, log: list) -> None:
    """A kernel that recomputes inlined ops, judged as `_fusions_that_beat_the_library`
    judges a fused kernel: where the library's own schedule of it is slower than it and its
    inlined ops in the library (the gain chain's fusion step then reads below 1), the log says
    so, with the times. Inlining is decided by size (`inline_threshold`), so it is kept."""
    from .baselines import library_schedule
    from .canon import evaluate
    from .ir.schedule import Kernel

    ops = [kernel.ops[0]] + inlined
    t_alone = sum(evaluate(library_schedule(ctx.program, Kernel.from_ops(ctx.program, [op]), ctx), ctx.target).time_s
                  for op in ops)
    t_library = evaluate(library_schedule(plan.program, kernel, ctx), ctx.target).time_s
    if t_library <= t_alone * (1 + LIBRARY_QUALITY_SLACK):
        return
    t_own = evaluate(schedule, ctx.target).time_s
    times = (f"{t_own * 1e6:.1f} us as scheduled here, {t_library * 1e6:.1f} us as the library schedules it, "
             f"{t_alone * 1e6:.1f} us for it and those ops in the library")
    then = ("its tiling makes up for it" if t_own < t_alone else
            "as scheduled here it is no faster either: inlines are chosen by size (inline_threshold), not by time")
    log.append(rule_entry("library_check", "fusion", ops, True,
                          f"{kernel.ops[0]} recomputes the inlined {', '.join(inlined)} ({times}): the library's own "
                          f"schedule of it is slower than those ops apart, so the gain chain counts these inlines "
                          f"below 1; {then}"))


def _load_traces(schedule):
    if schedule is None:
        return None
    from .schedule import load_traces

    return load_traces(schedule)


def _replay(traces: dict, plans: Sequence[Plan], target: Target, source, log: list) -> tuple[Plan, set[str]]:
    """The first of `plans` (the passes', the library's, the naive one) naming every kernel
    in `traces`, with those kernels' schedules replayed from their traces."""
    from .passes import rule_entry
    from .schedule import replay_plan

    where = str(source) if isinstance(source, (str, Path)) else "--schedule"
    plan, replayed = replay_plan(plans, traces, target.tiling_levels, filename=where)
    ops = [op for k in plan.kernels if k.name in replayed for op in k.ops]
    log.append(rule_entry("replay", "schedule", ops, True,
                          f"{len(replayed)} kernel schedule{'s' if len(replayed) != 1 else ''} replayed from "
                          f"{where if where != '--schedule' else 'the given traces'}, each step checked"))
    return plan, replayed


def _keep_replayed(plan: Plan, given: dict, versions: dict) -> tuple[Plan, dict]:
    kept = {}
    for name, version in versions.items():
        for kernel_name, s in given.items():
            version = version.with_schedule(kernel_name, s)
        kept[name] = version
    for kernel_name, s in given.items():
        plan = plan.with_schedule(kernel_name, s)
    return plan, kept


def _measure(plan: Plan, target: Target, threads: int | None = None) -> dict:
    if target.name != "host":
        raise UserError("measure=True needs target='host' (the generated C runs on this CPU)",
                        filename="optimize()")
    from .host import measure_plan

    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise UserError(f"threads must be an integer >= 1, got {threads!r}", filename="optimize()")
    return measure_plan(plan, target, repeats=5, threads=threads)


def _check_flags(tune, top, seed, budget) -> None:
    problems = []
    if tune is not None and (not isinstance(tune, int) or isinstance(tune, bool) or tune < 0):
        problems.append(f"tune must be an integer >= 0 (configurations), got {tune!r}")
    if top is not None and (not isinstance(top, int) or isinstance(top, bool) or top < 1):
        problems.append(f"top must be an integer >= 1, got {top!r}")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        problems.append(f"seed must be an integer >= 0, got {seed!r}")
    if budget is not None and (not isinstance(budget, (int, float)) or budget <= 0):
        problems.append(f"budget must be a positive number of seconds, got {budget!r}")
    if problems:
        from .errors import Diagnostic

        raise UserError([Diagnostic(p) for p in problems], filename="optimize()")


class _PassRuns:
    """Pass outcomes by (pass, input plan): a look-ahead run is reused when the pipeline
    reaches that pass with the same plan. Each run is a transaction (`_run_pass`)."""

    def __init__(self):
        self._done: dict[tuple[str, int], tuple[Plan, PassOutcome]] = {}

    def run(self, name: str, fn: Pass, plan: Plan, ctx: PassContext) -> PassOutcome:
        key = (name, id(plan))
        if key not in self._done:
            self._done[key] = (plan, _run_pass(name, fn, plan, ctx))
        return self._done[key][1]


# Passes that decide each kernel on its own (rules/tiling.py, rules/scheduling.py): a fault
# in one is retried kernel by kernel, so that it rolls back only the kernels it happens on.
KERNEL_LOCAL_PASSES = ("tiling", "scheduling")


def _run_pass(name: str, fn: Pass, plan: Plan, ctx: PassContext) -> PassOutcome:
    """The pass's outcome, or, where the pass raises an internal fault, `plan` unchanged
    with a rollback entry naming the fault; a kernel-local pass is then run again kernel by
    kernel, and only the kernels it fails on keep their schedules."""
    faults: list[dict] = []
    with transaction(faults, name, f"the {name} pass", then="pass rolled back"):
        return fn(plan, ctx)
    if name not in KERNEL_LOCAL_PASSES:
        return PassOutcome(plan, (), tuple(faults))
    log: list[dict] = []
    rollbacks: list[dict] = []
    schedules, label, failed = [], plan.label, False
    for kernel, schedule in zip(plan.kernels, plan.schedules):
        schedules.append(schedule)
        with transaction(rollbacks, name, f"the {name} pass", kernel=kernel.name, then="its schedule kept") as step:
            one = fn(Plan(plan.program, (kernel,), (schedule,), plan.label), ctx)
            if one.plan.kernels != (kernel,) or one.plan.program != plan.program:
                raise ValueError("a kernel-local pass changed the kernels or the program")
            schedules[-1], label = one.plan.schedules[0], one.plan.label
            log.extend(one.log)
            rollbacks.extend(one.rollbacks)
        failed = failed or step.failed
    if not failed:
        rollbacks = faults + rollbacks     # the whole pass failed where no kernel alone does: say so
    return PassOutcome(Plan(plan.program, plan.kernels, tuple(schedules), label), tuple(log), tuple(rollbacks))


def _checked(name: str, before: Plan, outcome: PassOutcome, ctx: PassContext, log: list, rollbacks: list,
             runs: _PassRuns, retile: tuple[str, Pass] | None = None, gain_judged: bool = False) -> Plan:
    """`_check_pass` as a transaction: where checking a pass's plan raises an internal fault,
    the pass is rolled back, the rules it fired marked so."""
    entries: list[dict] = []
    undone: list[dict] = []
    with transaction(rollbacks, name, f"checking the {name} pass", then="pass rolled back"):
        kept = _check_pass(name, before, outcome, ctx, entries, undone, runs, retile, gain_judged)
        log.extend(entries)
        rollbacks.extend(undone)
        return kept
    reason = rollbacks[-1]["reason"]
    rollbacks.extend(outcome.rollbacks)
    log.extend(dict(e, applied=False, why=f"rolled back with the {name} pass ({reason}); {e['why']}")
               if e["applied"] else e for e in outcome.log)
    return before


def _check_pass(name: str, before: Plan, outcome: PassOutcome, ctx: PassContext, log: list, rollbacks: list,
                runs: _PassRuns, retile: tuple[str, Pass] | None = None, gain_judged: bool = False) -> Plan:
    """Keep a pass's plan only if it verifies, stays legal and gains `min_speedup`; else
    roll it back, and mark the rules it fired as rolled back with it.

    A pass that runs before tiling (fusion) is judged after tiling both its input and its
    output: fused kernels are re-tiled next, so textbook tiles would misjudge them. The
    tiling of a fusion kept that way is then part of the gain fusion was kept for
    (`gain_judged`): it must still verify and be legal, but its own gain is not re-judged
    (a fused plan keeps the library's per-op tiles until it is re-tiled, so rolling the
    tiling back for gaining 'only' 1.15x would leave fused kernels on tiles chosen for
    other kernels, slower than the library)."""
    rollbacks.extend(outcome.rollbacks)
    after = outcome.plan
    if after is before or (after.program == before.program and after.kernels == before.kernels
                           and after.schedules == before.schedules):
        log.extend(outcome.log)
        return before  # nothing changed: nothing to check or roll back
    entries = list(outcome.log)
    if name == "fusion":                # a group isl refuses is split back; the others stay fused
        after = _illegal_groups_split_back(before, after, ctx, entries, rollbacks)
    if name == "fusion" and retile is not None:                  # each fusion group must pay on its own
        after = _fusion_groups_that_pay(before, after, ctx, runs, retile, entries, rollbacks)
    kernel, reason = _rejection(name, before, after, ctx, runs, retile, gain_judged)
    if not reason:
        log.extend(entries)
        return after
    rollbacks.append(rollback_entry(name, kernel, reason))
    for entry in entries:
        if entry["applied"]:
            entry = dict(entry, applied=False, why=f"rolled back with the {name} pass ({reason}); {entry['why']}")
        log.append(entry)
    return before


def _illegal_groups_split_back(before: Plan, after: Plan, ctx: PassContext, entries: list,
                               rollbacks: list) -> Plan:
    """`after` with every fusion group whose schedule isl cannot prove legal split back into
    its ops (`rules.fusion.split_back`), so that one such group does not undo the others;
    the rules that made it are marked as undone, with isl's reason."""
    from .rules.fusion import split_back

    kernels = {k.name: k for k in after.kernels}
    illegal = {k: why for k, why in _illegal_schedules(after, ctx) if len(kernels[k].ops) > 1}
    if not illegal:
        return after
    for kernel in [kernels[name] for name in illegal]:
        why = f"illegal schedule: {illegal[kernel.name]}: split back (the other groups stay fused)"
        rollbacks.append(rollback_entry("fusion", kernel.name, why))
        for i, entry in enumerate(entries):
            if entry["applied"] and set(entry["ops"]) & set(kernel.ops):
                entries[i] = dict(entry, applied=False, why=f"rolled back: {why}; {entry['why']}")
    return split_back(before, after, set(illegal), ctx)


def _fusion_groups_that_pay(before: Plan, after: Plan, ctx: PassContext, runs: _PassRuns,
                            retile: tuple[str, Pass], entries: list, rollbacks: list) -> Plan:
    """`after` with every fusion group slower (tiled) than its ops tiled alone split back
    (`rules.fusion.groups_that_pay`); the rules that made those groups are marked as undone,
    each with the two times."""
    from .rules.fusion import groups_that_pay

    plan, dropped, shortened = groups_that_pay(before, after, ctx,
                                               lambda p: runs.run(retile[0], retile[1], p, ctx).plan)
    kept = {group.name: (prefix, rule, fused_s, alone_s) for prefix, rule, fused_s, alone_s, group in shortened}
    for kernel, fused_s, alone_s in dropped:
        if kernel.name in kept:
            prefix = kept[kernel.name][0]
            fate = f"shortened to {', '.join(prefix.ops)} (the other groups stay fused)"
        else:
            fate = "split back (the other groups stay fused)"
        worse = "slower" if ctx.target.objective == "latency" else f"worse by the {ctx.target.objective} objective"
        why = (f"this group alone is {worse} fused: {fused_s * 1e6:.1f} us tiled vs {alone_s * 1e6:.1f} us for its "
               f"ops tiled alone: {fate}")
        rollbacks.append(rollback_entry("fusion", kernel.name, why))
        for i, entry in enumerate(entries):
            if entry["applied"] and set(entry["ops"]) & set(kernel.ops):
                entries[i] = dict(entry, applied=False, why=f"rolled back: {why}; {entry['why']}")
        if kernel.name in kept:
            prefix, rule, p_fused, p_alone = kept[kernel.name]
            entries.append(rule_entry(rule, "fusion", prefix.ops, True,
                                      f"the longest part of the slower group {kernel.name} that pays: "
                                      f"{p_fused * 1e6:.1f} us tiled vs {p_alone * 1e6:.1f} us for its ops alone"))
    return plan


def _rejection(name: str, before: Plan, after: Plan, ctx: PassContext, runs: _PassRuns,
               retile: tuple[str, Pass] | None, gain_judged: bool = False) -> tuple[str, str]:
    """(kernel, reason) why a pass's plan must be rolled back, or ("", "") to keep it."""
    verdict = ctx.verify(after.program)
    if not verdict:
        return "", f"the pass changed the program's result: {verdict.reason}"
    illegal = _illegal_schedules(after, ctx)
    if illegal:
        return illegal[0][0], f"illegal schedule: {illegal[0][1]}"
    if gain_judged:
        return "", ""
    judged_before, judged_after = before, after
    if retile is not None:
        judged_before = runs.run(retile[0], retile[1], before, ctx).plan
        judged_after = runs.run(retile[0], retile[1], after, ctx).plan
    goal = ctx.target.objective
    old_cost, new_cost = ctx.cost(judged_before).total, ctx.cost(judged_after).total
    old, new = objective.value(goal, old_cost), objective.value(goal, new_cost)
    gain = old / new if new > 0 else float("inf")
    min_speedup = float(ctx.rules.rollback.get("min_speedup_by_pass", {}).get(
        name, ctx.rules.rollback.get("min_speedup", 1.0)))
    # (a latency within 1% at less energy is a tie the objective breaks: no gain asked of it)
    if gain < min_speedup and not (min_speedup <= 1.0 and objective.prefers(goal, old_cost, new_cost,
                                                                            objective.ties(ctx.target))):
        after_tiling = " after tiling" if retile is not None else ""
        return "", (f"{objective.FIGURES[goal]} gain {gain:.2f}x{after_tiling} < min_speedup {min_speedup:g}x "
                    f"({old_cost.time_s * 1e6:.1f} us, {old_cost.energy_j * 1e6:.1f} uJ -> "
                    f"{new_cost.time_s * 1e6:.1f} us, {new_cost.energy_j * 1e6:.1f} uJ): pass rolled back")
    return "", ""


def _illegal_schedules(plan: Plan, ctx: PassContext) -> list[tuple[str, str]]:
    """(kernel, reason) for each schedule isl cannot prove legal."""
    from . import poly

    bad = []
    for kernel, schedule in zip(plan.kernels, plan.schedules):
        verdict = poly.check_schedule(schedule)
        if not verdict.ok:
            bad.append((kernel.name, verdict.reason))
    return bad


def _verify(plan: Plan, ctx: PassContext, notes: dict | None = None) -> tuple[bool, str]:
    """`_verify_plan`; a check that raises an internal fault does not verify the plan."""
    faults: list[dict] = []
    with transaction(faults, "verify", "the check raised"):
        return _verify_plan(plan, ctx, notes)
    return False, faults[0]["reason"]


def _verify_plan(plan: Plan, ctx: PassContext, notes: dict | None = None) -> tuple[bool, str]:
    """(verified, why not): the plan's program computes the original's (interpreter), its
    kernels run every op once, each after the kernels it reads (`Plan.order_problem`), every
    kernel's schedule is legal (isl) and, run tile by tile (on a scaled twin of a large
    program), computes what the program computes.

    `notes`, when given, receives how the tiled runs were done (report["verification"]):
    {"tiled_runs": {"program"|"twin"|"coarsened"|"none": kernels}, "twin_max_extent",
    "isl_only": kernels with no twin of the same structure (isl's verdict stands alone)}."""
    from .verify import verify_schedule

    verdict = ctx.verify(plan.program)
    if not verdict:
        return False, verdict.reason
    problem = plan.order_problem()
    if problem:
        return False, problem
    runs: dict[str, int] = {}
    isl_only, extent = [], None
    for kernel, schedule in zip(plan.kernels, plan.schedules):
        record: dict = {}
        problem = verify_schedule(schedule, plan.program, ctx, record=record)
        if problem:
            return False, f"kernel {kernel.name}: {problem}"
        how = record.get("tiled_run", "none")
        runs[how] = runs.get(how, 0) + 1
        extent = record.get("twin_max_extent", extent)
        if how == "none":
            isl_only.append(kernel.name)
    if notes is not None:
        notes.update({"tiled_runs": runs, "twin_max_extent": extent, "isl_only": isl_only})
    return True, ""
