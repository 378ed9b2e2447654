"""Tuning a whole plan: budgets per kernel, serial or parallel searches, kernel moves, the
top-K whole-program versions, and the public entry points (`tune_plan`, `search_kernel`)."""
from __future__ import annotations

import heapq
import math
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..accel.target import Target, load_target
from ..ir.schedule import Kernel, Schedule
from ..ir.plan import Plan
from .. import objective
from ..canon import evaluate
from .constants import DEFAULT_MAX_SPILL, MEASURED_CANDIDATES, TIES_KEPT
from .scoring import ScoreFn, _Scorer, _arrays, _score_chunk, model_score
from ..accel.search_space import Points, SearchSpace
from .legality import _Legality, legal
from .search import _Search
from .moves import _kernel_moves


# --------------------------------------------------------------------------- versions


def _top_combinations(per_kernel: list[list[tuple[float, bytes]]], k: int) -> list[tuple[float, tuple[int, ...]]]:
    """The k smallest sums picking one entry per list (each list sorted ascending)."""
    if not per_kernel or any(not lst for lst in per_kernel):
        return []
    start = tuple(0 for _ in per_kernel)
    total = lambda idx: sum(per_kernel[i][j][0] for i, j in enumerate(idx))
    heap = [(total(start), start)]
    seen = {start}
    out = []
    while heap and len(out) < k:
        t, idx = heapq.heappop(heap)
        out.append((t, idx))
        for i in range(len(idx)):
            if idx[i] + 1 < len(per_kernel[i]):
                nxt = idx[:i] + (idx[i] + 1,) + idx[i + 1:]
                if nxt not in seen:
                    seen.add(nxt)
                    heapq.heappush(heap, (total(nxt), nxt))
    return out


def _kernel_entry(schedule: Schedule) -> dict:
    from ..schedule import schedule_json

    return schedule_json(schedule)


# --------------------------------------------------------------------------- public API


def expected_gain(kernel: Kernel, time_s: float, target: Target) -> float:
    """What tuning `kernel` can win at most: its time under the rules' schedule minus its
    roofline floor (its flops at peak, or its inputs and outputs moved once through DRAM,
    whichever is slower); at least 5% of its time, so every kernel gets a share."""
    dtype = kernel.tensor(kernel.anchor_statement.target).dtype
    moved = sum(kernel.tensor(t).nbytes for t in kernel.inputs + kernel.outputs)
    floor = max(kernel.flops / target.peak_flops(dtype), moved / target.dram_bandwidth)
    return max(time_s - floor, 0.05 * time_s)


def split_configs(times: Sequence[float], configs: int) -> list[int]:
    """Configurations per kernel, in proportion to kernel time (largest remainders)."""
    total = sum(times)
    if configs <= 0 or not times:
        return [0] * len(times)
    weights = [t / total if total > 0 else 1 / len(times) for t in times]
    raw = [configs * w for w in weights]
    out = [int(math.floor(r)) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: (-(raw[i] - out[i]), i))[: configs - sum(out)]:
        out[i] += 1
    return out


@dataclass
class KernelResult:
    """What tune_plan keeps of one kernel's search: its candidates, checked with their
    exact schedules, fastest first (None stands for the incumbent), and its counts.
    Small and picklable: a search run by an executor sends back this, not itself."""

    entries: list            # [(time, Schedule | None)], None = the incumbent (the rules' schedule)
    evaluated: int
    best_time: float
    legality_checks: int
    legality_seconds: float
    scoring_seconds: float
    rejected: int
    rejected_spill: int

    @staticmethod
    def of(search: "_Search", keep: int, scoring_seconds: float = 0.0) -> "KernelResult":
        inc_key = search.incumbent_key
        entries: list = []
        for t, key in search.iter_verified():
            if len(entries) >= keep:
                break
            if entries and t == entries[-1][0]:
                # The same time as the last kept: an equivalent schedule, not another
                # version; on a tie the rules' own schedule is the one shown.
                if key == inc_key:
                    entries[-1] = (t, None)
                continue
            chosen = None if key == inc_key else search.space.schedule(*search.genomes[key])
            if chosen is not None and not legal(chosen):   # the exact schedule, once more
                continue
            entries.append((t, chosen))
        if entries and objective.of(search.space.target) == "latency" and search.space.tie > 0:
            entries = sorted(entries + _ties(search, entries, inc_key), key=lambda e: e[0])
        return KernelResult(entries, search.evaluated, entries[0][0] if entries else math.inf,
                            len(search.legality.asked), search.legality.seconds, scoring_seconds,
                            search.rejected, len(search.infeasible))


def _ties(search: "_Search", entries: list, inc_key: bytes) -> list:
    """Under `latency`, the candidates within 1% of the fastest that use less energy than it (the
    ties the objective breaks: `_ranked_candidates`), up to TIES_KEPT of them, least energy
    first; their energies are the model's in one batch, and only those kept are checked for
    legality."""
    space = search.space
    best_time = entries[0][0]
    best = entries[0][1] if entries[0][1] is not None else space.incumbent
    bar = evaluate(best, space.target).energy_j
    band = [key for t, key in search.board if t <= best_time * (1 + space.tie)
            and key != inc_key and key not in search.illegal]
    if not band:
        return []
    times = dict((key, t) for t, key in search.board)
    _, energy, _, _ = space.measure(Points.stack([search.genomes[key] for key in band]))
    out = []
    for i in np.argsort(energy, kind="stable"):
        if len(out) >= TIES_KEPT or energy[i] >= bar * (1 - 1e-9):
            break
        genome = search.genomes[band[i]]
        if not search.legality.admits(*genome[:3], True)[0]:
            continue
        schedule = space.schedule(*genome)
        if legal(schedule):
            out.append((times[band[i]], schedule))
    return out


def _search_task(schedule: Schedule, target: Target, divisors_only: bool, max_spill: float, seed: int,
                 share: int, score_fn: ScoreFn, keep: int) -> KernelResult:
    """One kernel's whole search (what an executor runs when kernels are tuned in parallel):
    the same search tune_plan runs serially, with the same seed and share.

    isl contexts and the caches are not thread-safe: in a worker running tasks in threads
    (a threaded dask worker), searches take turns; processes run them side by side."""
    with _SEARCH_LOCK:
        space = SearchSpace.tuner(schedule, target, divisors_only, max_spill=max_spill)
        search = _Search(space, np.random.default_rng(seed), share, _Legality(space))
        scorer = _Scorer(None, score_fn)
        search.run(scorer)
        return KernelResult.of(search, keep, scorer.seconds)


_SEARCH_LOCK = threading.RLock()   # re-entrant: a search may ask a library schedule, searched alike


def _tune_in_parallel(plan: Plan, target: Target, gains, order, configs: int, keep: int, seed: int,
                      divisors_only: bool, max_spill: float, score_fn: ScoreFn, scorer: "_Scorer",
                      results: dict, over_budget, report) -> bool:
    """Run the kernels' searches on `scorer.executor`, one task per kernel, with exactly the
    shares the serial loop gives them, so the result is the serial one.

    A kernel's share depends on what the kernels before it left unused (an exhausted small
    space passes its rest on), known only once they finish. Kernels ahead are started on
    the prediction that every earlier search uses its whole share; a prediction proved wrong
    is discarded and that kernel run again with its true share. Returns whether the time
    budget stopped the tuning."""
    executor = scorer.executor
    window = 2 * max(1, int(getattr(executor, "_max_workers", 2) or 2))
    running: dict[int, tuple[int, object]] = {}    # position in `order` -> (share, future)
    left_configs, left_time = configs, sum(gains)
    try:
        for pos, i in enumerate(order):
            share = split_configs([gains[i], max(left_time - gains[i], 0.0)], left_configs)[0]
            # Start (or restart) the kernels ahead on the prediction from here.
            lc, lt, ahead = left_configs, left_time, 0
            for q in range(pos, len(order)):
                if ahead >= window:
                    break
                j = order[q]
                predicted = split_configs([gains[j], max(lt - gains[j], 0.0)], lc)[0]
                lt -= gains[j]
                if predicted < 2:
                    continue
                lc -= predicted
                ahead += 1
                if q in running and running[q][0] == predicted:
                    continue
                if q in running:
                    running[q][1].cancel()
                if over_budget():
                    break
                running[q] = (predicted, executor.submit(_search_task, plan.schedules[j], target, divisors_only,
                                                         max_spill, seed + j, predicted, score_fn, keep))
            left_time -= gains[i]
            if share < 2:
                continue     # too small a share to search: the rules' schedule stands (its share goes on)
            if pos not in running or running[pos][0] != share:
                if over_budget():
                    return True
                running[pos] = (share, executor.submit(_search_task, plan.schedules[i], target, divisors_only,
                                                       max_spill, seed + i, share, score_fn, keep))
            result = running.pop(pos)[1].result()
            results[i] = result
            left_configs -= result.evaluated
            report()
            if over_budget() and pos + 1 < len(order):
                return True
        return False
    finally:
        for _, future in running.values():
            future.cancel()


def tune_plan(plan: Plan, ctx, configs: int, top: int = 3, budget: float | None = None,
              progress: Callable[[int, int, float], None] | None = None, executor=None,
              score_fn: ScoreFn = model_score, divisors_only: bool = False,
              max_spill: float | None = None,
              measure: Callable[[Plan], float] | None = None) -> tuple[Plan, dict, dict]:
    """Tune every kernel of `plan` and return (best plan, versions, tuning summary).

    plan: the plan the rules produced (its schedules are the incumbents, kept in every
    population: the result is never slower than `plan` under `score_fn`); ctx: a
    PassContext (target, seed); configs: candidate schedules to score in all, split over
    kernels by their time; top: whole-program versions kept; budget: seconds, checked
    between generations; progress: callback(done, total, best_time_s) after each
    generation; executor: None (serial), a concurrent.futures.Executor, "processes[:N]"
    or "tcp://host:port" (a dask scheduler) — the result does not depend on it; score_fn:
    the scorer (default: the cost model's time); divisors_only: tile sizes from divisors;
    max_spill: the largest spill ratio a tuned tiling may have (default: the rules'
    tiling.max_spill_ratio, as the tiling pass obeys; never below the incumbent's own);
    measure: `measure(plan) -> seconds` for expensive measured scoring (e.g.
    `host.measured_scorer()`): the model ranks, then the best MEASURED_CANDIDATES
    whole-program versions and the rules' plan are measured and the versions re-ranked by
    measured time (entries gain "measured_s").

    A KeyboardInterrupt (^C, or raised by `progress`) stops the search: the best found so
    far is returned with tuning["interrupted"] = True.
    """
    target = load_target(ctx.target)
    started = time.perf_counter()
    if max_spill is None:
        rules = getattr(ctx, "rules", None)
        max_spill = float((getattr(rules, "tiling", None) or {}).get("max_spill_ratio", DEFAULT_MAX_SPILL))
    seed = int(getattr(ctx, "seed", 0) or 0)
    kernels = list(plan.kernels)
    incumbent_times = [float(_score_chunk(score_fn, *((s.kernel, target) + _arrays(s, target)))[0])
                       for s in plan.schedules]
    rules_time = sum(incumbent_times)
    # The budget follows the expected gain: a kernel's headroom above its own roofline
    # floor (a kernel already at the physical limit has nothing to win), not its time alone.
    gains = [expected_gain(k, t, target) for k, t in zip(kernels, incumbent_times)]
    order = sorted(range(len(kernels)), key=lambda i: (-gains[i], i))   # most to win first
    searches: dict[int, _Search] = {}
    interrupted = budget_exhausted = False
    scorer = _Scorer(executor, score_fn)

    results: dict[int, KernelResult] = {}     # searches run elsewhere (an executor), and finished ones

    def best_time(i: int) -> float:
        if i in searches:
            return min(searches[i].best_time(), incumbent_times[i])
        if i in results:
            return min(results[i].best_time, incumbent_times[i])
        return incumbent_times[i]

    def best_total() -> float:
        return sum(best_time(i) for i in range(len(kernels)))

    def over_budget() -> bool:
        return budget is not None and time.perf_counter() - started > budget

    def report() -> None:
        if progress:
            progress(sum(s.evaluated for s in searches.values()) + sum(r.evaluated for r in results.values()),
                     configs, best_total())

    keep = max(top, 1) if measure is None else max(top, MEASURED_CANDIDATES)
    try:
        if scorer.executor is not None and sum(1 for g in gains if g > 0) > 1:
            budget_exhausted = _tune_in_parallel(plan, target, gains, order, configs, keep, seed, divisors_only,
                                                 max_spill, score_fn, scorer, results, over_budget, report)
        else:
            budget_exhausted = _tune_serially(plan, target, gains, order, configs, seed, divisors_only, max_spill,
                                              scorer, searches, over_budget, report)
        done = sum(s.evaluated for s in searches.values()) + sum(r.evaluated for r in results.values())
        if progress and done < configs:
            progress(done, done, best_total())   # finished early (small or exhausted spaces): close the bar
    except KeyboardInterrupt:
        interrupted = True
    finally:
        scorer.close()
    for i, search in searches.items():
        results[i] = KernelResult.of(search, keep)

    per_kernel = _per_kernel_candidates(plan, results, incumbent_times, target, score_fn, max_spill)
    candidates, measured = _ranked_candidates(plan, per_kernel, keep, rules_time, target,
                                              None if interrupted else measure)
    versions, top_entries = _versions(plan, candidates, measured, top, rules_time)
    best_plan = versions["v1"] if versions else plan
    tuning = _tuning_summary(kernels, results, incumbent_times, top_entries, scorer, max_spill,
                             seconds=time.perf_counter() - started, interrupted=interrupted,
                             budget_exhausted=budget_exhausted, rules_time=rules_time)
    return best_plan, versions, tuning


def _tune_serially(plan: Plan, target: Target, gains, order, configs: int, seed: int, divisors_only: bool,
                   max_spill: float, scorer: "_Scorer", searches: dict, over_budget, report) -> bool:
    """Search the kernels one after another, most to win first, into `searches`; returns
    whether the time budget stopped the tuning."""
    left_configs, left_time = configs, sum(gains)
    for i in order:
        # This kernel's share of what is left: configurations a smaller (exhausted)
        # space did not use go to the kernels after it.
        share = split_configs([gains[i], max(left_time - gains[i], 0.0)], left_configs)[0]
        left_time -= gains[i]
        if share < 2:
            continue     # too small a share to search: the rules' schedule stands (its share goes on)
        if over_budget():
            return True
        space = SearchSpace.tuner(plan.schedules[i], target, divisors_only, max_spill=max_spill)
        search = _Search(space, np.random.default_rng(seed + i), share, _Legality(space))
        searches[i] = search
        budget_exhausted = search.run(scorer, over_budget, report)
        left_configs -= search.evaluated
        if budget_exhausted:
            return True
    return False


def _per_kernel_candidates(plan: Plan, results: dict, incumbent_times: list, target: Target, score_fn: ScoreFn,
                           max_spill: float) -> list[list[tuple[float, Schedule]]]:
    """Per kernel: its candidates, fastest first, each checked with its exact schedule; a
    kernel move's best first when one beats them."""
    per_kernel: list[list[tuple[float, Schedule]]] = []
    for i, schedule in enumerate(plan.schedules):
        result = results.get(i)
        entries = [(t, schedule if chosen is None else chosen) for t, chosen in result.entries] if result else []
        per_kernel.append(entries or [(incumbent_times[i], schedule)])

    # Moves that change the kernel itself (KERNEL_MOVES), on each kernel's best schedule and
    # on the rules' one (a tie of tiles may hide the move that pays from the other).
    for i, entries in enumerate(per_kernel):
        starts = [entries[0]] + ([(incumbent_times[i], plan.schedules[i])] if entries[0][1] is not plan.schedules[i]
                                 else [])
        moves = [m for m in (_kernel_moves(e, target, score_fn, max_spill) for e in starts) if m is not None]
        if moves:
            per_kernel[i] = [min(moves, key=lambda m: m[0])] + entries
    return per_kernel


def _ranked_candidates(plan: Plan, per_kernel: list, keep: int, rules_time: float, target: Target,
                       measure: Callable[[Plan], float] | None) -> tuple[list, list]:
    """The `keep` best whole-program combinations [(time, schedules)] by the objective, and
    their measured times: with `measure`, the rules' plan joins them and all are re-ranked by
    measured time. Under `latency` the combinations within 1% of the fastest are ties, the
    least energy first, then the fewest DRAM bytes (`objective.order`); under `energy` or
    `edp` the kernels' scores add up and the times are the model's."""
    goal = objective.of(target)
    extra = TIES_KEPT if goal == "latency" and measure is None else 0
    combos = _top_combinations([[(t, b"") for t, _ in entries] for entries in per_kernel], keep + extra)
    candidates = [(total, tuple(per_kernel[k][j][1] for k, j in enumerate(idx))) for total, idx in combos]
    if measure is None and candidates:
        costs = [[evaluate(s, target) for s in schedules] for _, schedules in candidates]
        times = [sum(c.time_s for c in cs) for cs in costs]
        ranked = objective.order(goal, [t for t, _ in candidates] if goal == "latency" else times,
                                 [sum(c.energy_j for c in cs) for cs in costs],
                                 [sum(c.bytes.get(target.dram.name, 0.0) for c in cs) for cs in costs],
                                 objective.ties(target))
        candidates = [(candidates[i][0] if goal == "latency" else times[i], candidates[i][1])
                      for i in ranked[:keep]]
    measured: list[float | None] = [None] * len(candidates)
    if measure is not None:
        if not any(all(a is b for a, b in zip(sch, plan.schedules)) for _, sch in candidates):
            candidates.append((rules_time, tuple(plan.schedules)))   # measured tuning never loses to the rules
        measured = [float(measure(Plan(plan.program, plan.kernels, sch, plan.label))) for _, sch in candidates]
        ranking = sorted(range(len(candidates)), key=lambda c: (measured[c], candidates[c][0], c))
        candidates = [candidates[c] for c in ranking]
        measured = [measured[c] for c in ranking]
    return candidates, measured


def _versions(plan: Plan, candidates: list, measured: list, top: int, rules_time: float) -> tuple[dict, list]:
    """The top versions as plans ({"v1": ...}) and their entries in the tuning summary."""
    versions: dict[str, Plan] = {}
    top_entries = []
    for rank, ((total, schedules), seconds) in enumerate(zip(candidates[:max(top, 1)], measured), start=1):
        name = f"v{rank}"
        # (a kernel move may have changed a kernel: where its producers are computed)
        versions[name] = Plan(plan.program, tuple(s.kernel for s in schedules), schedules, label=f"tuned {name}")
        entry = {
            "name": name, "time_s": total,
            "speedup_vs_rules": rules_time / total if total > 0 else math.inf,
            "legal": True,
            "kernels": {k.name: _kernel_entry(s) for k, s in zip(plan.kernels, schedules)},
        }
        if seconds is not None:
            entry["measured_s"] = seconds
        top_entries.append(entry)
    return versions, top_entries


def _tuning_summary(kernels: list, results: dict, incumbent_times: list, top_entries: list, scorer: "_Scorer",
                    max_spill: float, *, seconds: float, interrupted: bool, budget_exhausted: bool,
                    rules_time: float) -> dict:
    """The tuning summary: the versions, how the search ended, its counts over every kernel."""
    return {
        "configs_evaluated": int(sum(r.evaluated for r in results.values())),
        "seconds": seconds,
        "top": top_entries,
        "interrupted": interrupted,
        "budget_exhausted": budget_exhausted,
        "rules_time_s": rules_time,
        "legality_checks": sum(r.legality_checks for r in results.values()),
        "legality_seconds": sum(r.legality_seconds for r in results.values()),
        "scoring_seconds": scorer.seconds + sum(r.scoring_seconds for r in results.values()),
        "rejected_illegal": sum(r.rejected for r in results.values()),
        "rejected_spill": sum(r.rejected_spill for r in results.values()),
        "max_spill_ratio": max_spill,
        "configs_by_kernel": {kernels[i].name: r.evaluated for i, r in sorted(results.items())},
        # Kernels where nothing legal beat the rules' schedule (a tiny, exhausted or entirely
        # illegal space): the rules' schedule is kept, and said so.
        "kept_rules_schedule": {kernels[i].name: f"no legal candidate beat the rules' schedule "
                                                 f"({r.evaluated} scored, {r.rejected} illegal)"
                                for i, r in sorted(results.items())
                                if r.best_time >= incumbent_times[i] * (1 - 1e-9)},
    }


def search_kernel(schedule: Schedule, target, configs: int, seed: int = 0, *, divisors_only: bool = False,
                  tune_orders: bool = True, tune_annotations: bool = True,
                  max_spill: float = DEFAULT_MAX_SPILL, score_fn: ScoreFn = model_score) -> tuple[float, Schedule, int]:
    """Tune one kernel from `schedule` (serially): (best legal time, its schedule, candidates
    scored). The building block of `tune_plan`, for benchmarks and experiments on one
    kernel's space (tiles from divisors only, orders or annotations held fixed)."""
    target = load_target(target)
    space = SearchSpace.tuner(schedule, target, divisors_only, tune_orders, tune_annotations, max_spill)
    search = _Search(space, np.random.default_rng(seed), configs, _Legality(space))
    scorer = _Scorer(None, score_fn)
    search.run(scorer)
    t, key = search.verified(1)[0]
    best = schedule if key == search.incumbent_key else space.schedule(*search.genomes[key])
    return t, best, search.evaluated


def tqdm_progress(**tqdm_kwargs) -> Callable[[int, int, float], None]:
    """A `progress=` callback drawing a tqdm bar in a terminal (closes itself at the end)."""
    from tqdm.auto import tqdm

    state = {"bar": None}

    def callback(done: int, total: int, best_time_s: float) -> None:
        bar = state["bar"]
        if bar is None:
            bar = state["bar"] = tqdm(total=total, desc="tuning", unit="cfg", **tqdm_kwargs)
        bar.total = max(total, done)
        bar.n = done
        bar.set_postfix_str(f"best {best_time_s * 1e6:.2f} us", refresh=False)
        bar.refresh()
        if done >= total:
            bar.close()

    return callback
