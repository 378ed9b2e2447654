"""Fusion across layers: chains of contractions in one kernel, lowered with `compute_at`.

After fusion, tiling and scheduling have made one kernel per contraction and its epilogue,
the rules with `lower: compute_at` (default.yaml: conv → conv chains, matmul → matmul
chains) are matched against the anchors of consecutive kernels. A match K1 → K2 → ... → Kn,
each kernel's outputs read only by the next one's anchor, becomes one kernel anchored at
Kn's contraction, every tensor of K1 .. Kn-1 computed at Kn's tiles over the region it reads
(`ir.loopnest.regions`: a convolution's rows with their halo, a hidden dimension's tile), so
no intermediate goes to DRAM. Its schedule is searched like any kernel's (the tiling
search, then the scheduling pass) at each candidate compute point — every anchor loop a
region follows, at each level but the innermost — and the fastest is kept. A chain is kept
only if, so tiled and verified (isl, tiled runs on twins), it beats its kernels as they are;
each chain is decided on its own, and a longer chain only where it beats the shorter one.
An online-softmax chain's searched schedule may then tile a loop the searches keep whole at
the innermost level, innermost there, where the nest stays one pass
(`whole_loops_tiled_innermost`: attention's head dimension, one block of PE columns at a time;
latency's ties then broken by energy, as the searches break them). Its scores are computed at
the key tiles; an elementwise step between them and the softmax (a mask table's add) runs in
the softmax's own tile iteration instead (`_elementwise_in_nest`).

The chains are found by one walk over the plan, left to right, each step the best chain
from one kernel; on a large plan a spare core walks segments of it from the back, and this
process takes their steps where both walks start a step at one kernel (`_scanned`): the
result is the serial walk's.
"""
from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, replace

import numpy as np

from .. import objective
from ..accel.cost import kernel_model
from ..accel.host_model import runs_generated_c
from ..accel.search_space import SearchSpace
from ..caches import LRU
from ..canon import canonical_kernel, evaluate, schedule_key
from ..ir.loopnest import ComputeAtError, in_tile_iteration, regions, single_pass, whole_loops
from ..ir.plan import Plan
from ..ir.program import Program
from ..ir.schedule import Kernel, Schedule
from ..schedule import by_position, from_positions
from ..passes import PassContext, rollback_entry, rule_entry, transaction
from ..interp import equivalent
from ..ir.twin import kernel_twin
from ..verify import EQUIVALENCE_POINTS, TWIN_EXTENT, scaled_points, verify_schedule
from .fusion import _kernel_name
from .online_softmax import online_softmax
from ..accel.tile_search import CHAIN_CANDIDATES, CHAIN_ROUNDS, chain_tiles, search_all, size_moves
from .tiling import level_mapping

PASS = "fusion"
MAX_CHAIN = 8            # kernels in one chain (attention as comprehensions: six; with a mask table and a scale, eight)
MAX_POINTS = 2           # compute points searched per chain (the longest loops, outer levels first)
MIN_GAIN = 0.01          # a chain must save at least this fraction of its kernels' time
# The scheduling pass (parallel loops, the vector loop) runs on a searched chain only when
# its tiles alone come within this fraction of what it must beat: on the networks it changed
# a chain's time in 1 case of 40 (by 6%), and it is a fifth of a chain's search.
UNSCHEDULED_SLACK = 0.10
# Past a chain this much slower fused than its kernels, longer chains from the same kernel
# are not tried (on ResNet-50 no such longer chain paid on any preset; MobileNetV2's 3-kernel
# inverted residuals follow 2-kernel chains that pay). At 0.10 rather than 0.20 the three
# networks on the four accelerator presets keep every result, and ResNet-50 on gpu searches
# 2 s less.
LONGER_SLACK = 0.10
# ... and past this at its first compute point, its second is not searched (on ResNet-50 and
# MobileNetV2 no chain that far off paid at the second).
POINT_SLACK = 0.15
# The library's search of a chain at its other compute points (besides the one its own search
# chose) only where it could gain this fraction of the whole plan's time: where the chain's
# time less its floor is below it. On the networks that search took half the chain pass
# (DenseNet-121: 25 of 50 s) to gain 0.1-0.2% of their time; on a program of a few kernels a
# chain is a large part of the time and every point is searched.
OTHER_POINTS_SHARE = 0.01


def chain_fusion(plan: Plan, ctx: PassContext) -> tuple[Plan, list[dict], list[dict]]:
    """(plan, log, rollbacks): `plan` with every chain the rules match that pays fused.
    Each chain a rule tries is a transaction: an internal fault while searching, scheduling
    or verifying it is a rollback entry naming the rule and the chain, and the kernels stay
    as the chains tried before it left them."""
    rules_all = [r for group in _chain_rules(ctx) for r in group]
    log: list[dict] = []
    rollbacks: list[dict] = []
    if not rules_all:
        return plan, log, rollbacks
    program = plan.program
    if runs_generated_c(ctx.target):
        # Host C runs a chain's tree as plain nests, its contractions off the packed paths
        # that make them fast there: not worth it until those paths take regions.
        log.append(rule_entry(rules_all[0].name, PASS, [], False, "host C: chains stay per kernel (packed paths)"))
        return plan, log, rollbacks
    out_k: list[Kernel] = []
    out_s: list[Schedule] = []
    for step in _scanned(program, list(plan.kernels), list(plan.schedules), ctx):
        log.extend(step.log)
        rollbacks.extend(step.rollbacks)
        program = step.program or program
        out_k.append(step.kernel)
        out_s.append(step.schedule)
    return Plan(program, tuple(out_k), tuple(out_s), plan.label), log, rollbacks


@dataclass(frozen=True)
class _Step:
    """One step of the left-to-right scan: from kernel `at`, `length` kernels became `kernel`
    (1: the kernel as it was), with the log and rollback entries deciding it made, and the
    program an online-softmax chain rewrote (else None)."""
    at: int
    length: int
    kernel: Kernel
    schedule: Schedule
    program: Program | None
    log: tuple
    rollbacks: tuple


def _scanned(program: Program, kernels: list[Kernel], schedules: list[Schedule], ctx: PassContext) -> list[_Step]:
    """The walk's steps over the whole plan: this process walks it from the first kernel and,
    where a spare core is free and the plan has SPLIT_KERNELS kernels or more, the spare core
    walks segments of it from the back (`_Shared`). A step depends only on the kernel it
    starts at and the ops of the program it reads, which an online-softmax rewrite of
    another chain leaves as they were, so where this process reaches a kernel a segment's
    walk started a step at, that walk's steps from there are the serial walk's (their
    rewrites made again on this walk's program: `_taken`)."""
    from .. import workers

    whole_s = sum(evaluate(s, ctx.target).time_s for s in schedules)
    n = len(kernels)
    if n < SPLIT_KERNELS or workers.spare_cores() < 1:
        return _scan(program, kernels, schedules, 0, n, whole_s, ctx)
    shared = _Shared(program, kernels, schedules, whole_s, ctx)
    steps: list[_Step] = []
    at = 0
    with workers.held():            # the spare core is the walk's while it lasts
        try:
            while at < n:
                taken = _taken(program, kernels, shared.steps_at(at) or [])
                if taken:           # the rest of a segment the spare core walked
                    steps.extend(taken)
                    program = next((s.program for s in reversed(taken) if s.program is not None), program)
                    at = taken[-1].at + taken[-1].length
                    continue
                step = _step(program, kernels, schedules, at, whole_s, ctx)
                steps.append(step)
                program = step.program or program
                at += step.length
        finally:
            shared.close()
    return steps


def _taken(program: Program, kernels: list[Kernel], theirs: list[_Step]) -> list[_Step]:
    """The steps of a segment walked elsewhere as this walk takes them, on its own program:
    an online-softmax step's rewrite (made there on the program as that walk had it) made
    again here on this walk's, in the walk's order; its kernel and schedule stand, as every
    other step's do (a rewrite replaces only its chain's ops by one op computing the
    chain's output, read by the same readers: no other chain sees a difference). Up to a
    rewrite that does not give the same op here (this walk then makes that step itself)."""
    out = []
    for step in theirs:
        if step.program is not None:
            ops = [op for k in kernels[step.at:step.at + step.length] for op in k.ops]
            found = online_softmax(program, ops)
            if isinstance(found, str) or _op(found[0], found[1]) != _op(step.program, found[1]):
                break
            program = found[0]
            step = replace(step, program=program)
        out.append(step)
    return out


def _op(program: Program, output: str):
    """The op of `program` writing `output` (None: none)."""
    return next((op for op in program.ops if op.output == output), None)


# A plan of this many kernels or more has its walk shared with a spare core (`_scanned`); a
# smaller one's is not worth sending a program for.
SPLIT_KERNELS = 16
# The segments a shared walk is cut into: at most this many, each at least MAX_CHAIN kernels
# long (no chain spans a whole one). The spare core takes them from the back, one at a time,
# while this process walks from the front: they meet with at most a segment's work to one.
SEGMENTS = 8
# The fewest kernels of this process's own segment the spare core is given (`_Shared`):
# fewer are walked here (sent, a segment costs a pickled program; its first step is often
# wasted).
MIN_SPLIT = 2
# The caches a segment walked on a spare core sends back: the library's searches of the chains
# (the library checks and the gain breakdown ask for them again) and the chains' searches.
_CARRIED = ("library_schedule", "chains.search", "chains.scheduled", "tiling.random_draw", "tiling.local_scores")


class _Shared:
    """The segments of a plan's walk a spare core makes: it is given the last segment this
    process has not reached, one at a time, the next as soon as it finishes one (from the
    pool's thread: `_next`); with none left, the back half of the rest of this process's
    own segment (a network's first layers cost several times its last: the spare core
    would wait while this process walks its segment). This process takes a segment's steps
    where its own walk lands on one of their starts: once the segment is done, or waiting
    for it where it lands on the segment's first kernel (the spare core's walk from there is
    its own, begun earlier); elsewhere it walks on meanwhile. It walks the segments the
    spare core never got to itself. What a segment sends back is taken in here, in this
    thread. Segments are named by their first kernel."""

    def __init__(self, program: Program, kernels, schedules, whole_s: float, ctx: PassContext):
        self.args = (replace(program, param_values={}), kernels, schedules)   # (no walk reads the weights)
        self.whole_s = whole_s
        self.ctx = replace(ctx, program=replace(ctx.program, param_values={}), _costs={}, _verdicts={})
        self.n = n = len(kernels)
        count = max(1, min(SEGMENTS, n // max(MAX_CHAIN, 1)))
        self.starts = [n * j // count for j in range(count)]     # each segment's first kernel, in order
        self.lock = threading.RLock()      # this thread and the pool's (a segment done) give segments
        self.stopped = False
        self.at = 0                        # the kernel this process's walk is at
        self.given: dict[int, object] = {}           # segment -> its future
        self.walked: dict[int, list | None] = {}     # segment -> its steps (None: it failed there)

    def _segment(self, at: int) -> tuple[int, int]:
        """(first kernel, end) of the segment holding kernel `at`."""
        j = bisect.bisect_right(self.starts, at) - 1
        return self.starts[j], self.starts[j + 1] if j + 1 < len(self.starts) else self.n

    def steps_at(self, at: int) -> list[_Step] | None:
        """The spare core's steps from kernel `at` to the end of its segment, where its walk
        started a step there; else None (this process makes the step)."""
        from .. import workers

        with self.lock:
            self.at = at
            here = self._segment(at)[0]
            self._next()
            if here not in self.given or (here not in self.walked and here != at and not self.given[here].done()):
                return None
        if here not in self.walked:
            self.walked[here] = workers.value_carried(self.given[here], lambda: None)
        steps = self.walked[here]
        if not steps:
            return None
        starts = [k for k, s in enumerate(steps) if s.at == at]
        return steps[starts[0]:] if starts else None

    def _next(self, _done=None) -> None:
        """Give the spare core the last segment past the one this process walks, or else the
        back half of the rest of this process's own, where it has none (also called from the
        pool's thread as a segment finishes)."""
        with self.lock:
            if self.stopped or any(not f.done() for f in self.given.values()):
                return
            here, end = self._segment(self.at)
            later = [j for j in self.starts if j > here and j not in self.given]
            if later:
                self._give(later[-1])
                return
            mid = max((self.at + end) // 2, self.at + 1)
            if here not in self.given and end - mid >= MIN_SPLIT:
                bisect.insort(self.starts, mid)
                self._give(mid)

    def _give(self, j: int) -> None:
        from .. import workers

        future = workers.submit_carrying(_scan, *self.args, j, self._segment(j)[1], self.whole_s, self.ctx,
                                         carried=_CARRIED)
        if future is None:                 # no worker after all: this process walks on
            self.stopped = True
            return
        self.given[j] = future
        future.add_done_callback(self._next)

    def stop(self) -> None:
        """No more segments given."""
        with self.lock:
            self.stopped = True

    def close(self) -> None:
        """No more segments given; those given, waited for and taken in (their caches are
        wanted later)."""
        from .. import workers

        self.stop()
        for j, future in list(self.given.items()):
            if j not in self.walked:
                self.walked[j] = workers.value_carried(future, lambda: None)


def _scan(program: Program, kernels: list[Kernel], schedules: list[Schedule], start: int, stop: int,
          whole_s: float, ctx: PassContext) -> list[_Step]:
    """The scan's steps from kernel `start` until one ends at or past `stop`: at each kernel
    the best chain from it that pays, or the kernel as it is. `whole_s`: the whole plan's time."""
    steps: list[_Step] = []
    i = start
    while i < stop:
        step = _step(program, kernels, schedules, i, whole_s, ctx)
        program = step.program or program
        steps.append(step)
        i += step.length
    return steps


def _step(program: Program, kernels: list[Kernel], schedules: list[Schedule], i: int, whole_s: float,
          ctx: PassContext) -> _Step:
    """The scan's step at kernel `i`: the best chain from it that pays, or the kernel as it is."""
    rules, online = _chain_rules(ctx)
    log: list[dict] = []
    rollbacks: list[dict] = []
    times = [evaluate(s, ctx.target).time_s for s in schedules[i:i + MAX_CHAIN]]
    # best: (length, kernel, schedule, time, rule, time unfused)
    best = _best_compute_at(program, kernels[i:i + MAX_CHAIN], schedules[i:i + MAX_CHAIN], times, whole_s,
                            rules, ctx, log, rollbacks)
    best, rewritten = _best_online(program, kernels[i:i + MAX_CHAIN], times, best, online, ctx, log, rollbacks)
    if best is None:
        return _Step(i, 1, kernels[i], schedules[i], None, tuple(log), tuple(rollbacks))
    length, kernel, schedule, seconds, rule, alone = best
    if rewritten is not None:
        log.append(rule_entry(rule.name, PASS, [op for k in kernels[i:i + length] for op in k.ops], True,
                              f"{length} kernels in one ({alone / seconds:.2f}x: {alone * 1e6:.1f} -> "
                              f"{seconds * 1e6:.1f} us): the softmax against a running max, the key loop "
                              f"tiled; no score row stays whole on chip"))
    else:
        points = ", ".join(f"{t} at {loop}@{level}" for t, loop, level in kernel.compute_at)
        log.append(rule_entry(rule.name, PASS, list(kernel.ops), True,
                              f"{length} kernels in one ({alone / seconds:.2f}x: {alone * 1e6:.1f} -> "
                              f"{seconds * 1e6:.1f} us): {points}; no intermediate leaves the chip"))
    return _Step(i, length, kernel, schedule, rewritten, tuple(log), tuple(rollbacks))


def _chain_rules(ctx: PassContext) -> tuple[list, list]:
    """(the `compute_at` chain rules, the `online_softmax` ones), in the rules' order."""
    rules = ctx.rules.fusion_rules
    return [r for r in rules if r.lower == "compute_at"], [r for r in rules if r.lower == "online_softmax"]


def _best_compute_at(program: Program, kernels: list[Kernel], schedules: list[Schedule], times: list[float],
                     whole_s: float, rules, ctx: PassContext, log: list, rollbacks: list):
    """The best chain from the first of `kernels` computed at its last kernel's tiles, as
    (length, kernel, schedule, seconds, rule, seconds unfused), or None where none pays;
    `whole_s`: the whole plan's time."""
    best = None
    tried = None
    for rule in rules:
        with transaction(rollbacks, PASS, f"chain rule {rule.name}", kernel=kernels[0].name,
                         then="the kernels stay as they were") as step:
            lengths = _applicable(rule, program, kernels, ctx, log)
        if step.failed or not lengths:
            continue
        if tried is not None:      # the first rule that matches decides (the rules' order)
            continue
        tried = rule.name
        if not any(_anchor_op(program, k).op_class == "contraction" for k in kernels[:lengths[-1]]):
            # A normalisation written out (mean, centre, variance, divide): its first steps
            # save almost nothing fused, so step-by-step pruning would stop before the
            # whole row pays; only the whole chain is tried.
            lengths = lengths[-1:]
        for length in lengths:
            chain = kernels[:length]
            # The state before this chain is `best`: a fault leaves it, and tries no longer chain.
            with transaction(rollbacks, PASS, f"chain rule {rule.name}", kernel=_kernel_name(_ops(chain)),
                             then="the chain is not fused") as step:
                found, stop = _tried_chain(program, chain, schedules[:length], times, whole_s, best, rule, ctx, log,
                                           rollbacks)
            if step.failed:
                break
            if found is not None:
                best = found
            if stop:
                break
    return best


def _tried_chain(program: Program, chain: list[Kernel], schedules: list[Schedule], times: list[float],
                 whole_s: float, best, rule, ctx: PassContext, log: list, rollbacks: list):
    """(the chain as a new best or None, whether to stop trying longer chains): `chain`
    searched, scheduled and verified, kept where it beats `best` (the shorter chain fused,
    the rest as they are) or its kernels as they are."""
    length = len(chain)
    alone = sum(times[:length])
    bound, why = _floor(chain, schedules, ctx)
    if bound >= alone * (1 - MIN_GAIN):
        # fused, the work still runs on the same datapaths (recomputed halos only
        # add) and only the intermediates' DRAM traffic goes: not enough to gain
        log.append(rule_entry(rule.name, PASS, _ops(chain), False,
                              f"no gain possible: fused it still needs {bound * 1e6:.1f} us ({why}) "
                              f"of its kernels' {alone * 1e6:.1f} us"))
        return None, best is not None
    found = _fused(program, chain, ctx, alone)
    if isinstance(found, str):
        log.append(rule_entry(rule.name, PASS, _ops(chain), False, found))
        return None, True
    schedule, seconds, searched = found
    # against the best so far: the shorter chain fused, the rest as they are
    floor = best[3] + sum(times[best[0]:length]) if best is not None else alone
    if seconds < floor * (1 + UNSCHEDULED_SLACK):
        schedule, seconds = _scheduled_chain(program, schedule, ctx)
        # the pipeline takes a kernel's library search where it is faster: a chain that
        # comes close is judged at that time too (its kernels alone already are), at the
        # compute point where it is fastest. One LONGER_SLACK off is not rescued by it (it
        # gained a chain 0-8% on the networks).
        if seconds < floor * (1 + LONGER_SLACK):
            others = seconds - bound >= OTHER_POINTS_SHARE * whole_s
            schedule, seconds = _library_at_points(program, schedule, seconds, ctx, others)
    if seconds >= floor * (1 - MIN_GAIN):
        log.append(rule_entry(rule.name, PASS, _ops(chain), False,
                              f"no gain: {seconds * 1e6:.1f} us fused vs {floor * 1e6:.1f} us "
                              f"({'the shorter chain' if best else 'its kernels as they are'}; "
                              f"{searched} compute points searched)"))
        # a longer chain is tried only while each step pays, or came close: it recomputes
        # more (wider halos) and only removes what the shorter did and more
        return None, best is not None or seconds >= floor * (1 + LONGER_SLACK)
    problem = verify_schedule(schedule, program, ctx)
    if problem:
        rollbacks.append(rollback_entry(PASS, schedule.kernel.name, problem))
        log.append(rule_entry(rule.name, PASS, _ops(chain), False, f"rolled back: {problem}"))
        return None, True
    return (length, schedule.kernel, schedule, seconds, rule, alone), False


def _best_online(program: Program, kernels: list[Kernel], times: list[float], best, online, ctx: PassContext,
                 log: list, rollbacks: list):
    """(best, rewritten program or None): the first online-softmax rule whose rewrite of the
    chain from the first of `kernels` beats `best` (or its kernels as they are)."""
    for rule in online:
        with transaction(rollbacks, PASS, f"chain rule {rule.name}", kernel=kernels[0].name,
                         then="the kernels stay as they were") as step:
            found = _online_chain(program, kernels, times, best, rule, ctx, log, rollbacks)
        if not step.failed and found is not None:
            return found
    return best, None


def _online_chain(program: Program, kernels: list[Kernel], times: list[float], best, rule, ctx: PassContext,
                  log: list, rollbacks: list):
    """(best, rewritten program) where `rule` rewrites the chain from the first of `kernels`
    with its softmax against a running max and that beats `best`; else None."""
    lengths = _applicable(rule, program, kernels, ctx, log)
    if not lengths:
        return None
    n = lengths[-1]
    alone = sum(times[:n])
    floor = best[3] + sum(times[best[0]:n]) if best is not None else alone
    found = _online(program, kernels[:n], ctx)
    if isinstance(found, str):
        log.append(rule_entry(rule.name, PASS, _ops(kernels[:n]), False, found))
        return None
    new_program, schedule, seconds = found
    # The pipeline also asks the library's own search of the kept kernel
    # (`pipeline._searched_as_well_as_the_library`): compare so, and keep the faster
    # schedule (verified below); both lowerings fused, compare the other one so too.
    schedule, seconds = _library_searched(new_program, schedule, seconds, ctx)
    if best is not None:
        floor = _with_library_search(program, best[2], best[3], ctx) + sum(times[best[0]:n])
    if seconds >= floor * (1 - MIN_GAIN):
        log.append(rule_entry(rule.name, PASS, _ops(kernels[:n]), False,
                              f"no gain: {seconds * 1e6:.1f} us with the key loop tiled vs {floor * 1e6:.1f} us "
                              f"({'the chain computed at its tiles' if best else 'its kernels as they are'})"))
        return None
    problem = verify_schedule(schedule, new_program, ctx)
    if problem:
        rollbacks.append(rollback_entry(PASS, schedule.kernel.name, problem))
        log.append(rule_entry(rule.name, PASS, _ops(kernels[:n]), False, f"rolled back: {problem}"))
        return None
    if best is not None:
        log.append(rule_entry(best[4].name, PASS, list(best[1].ops), False,
                              f"{rule.name} is faster: {seconds * 1e6:.1f} us vs {floor * 1e6:.1f} us"))
    return (n, schedule.kernel, schedule, seconds, rule, alone), new_program


def _applicable(rule, program: Program, kernels: list[Kernel], ctx: PassContext, log: list) -> list[int]:
    """The chain lengths `rule` matches from the first of `kernels` (`_matched`), or none
    where it is disabled or not for this target (logged so)."""
    lengths = _matched(rule, program, kernels)
    if lengths and not rule.applies_to(ctx.target.name):
        why = "disabled" if not rule.enabled else f"not for target '{ctx.target.name}' (targets: {rule.where()})"
        log.append(rule_entry(rule.name, PASS, _ops(kernels[:lengths[-1]]), False, why))
        return []
    return lengths


def _floor(chain: list[Kernel], schedules, ctx: PassContext) -> tuple[float, str]:
    """(seconds, what bounds them): a floor on the chain's time fused — the work of its
    busiest datapath (fusing moves no work off a datapath) or its DRAM traffic without the
    intermediates' round trips, whichever is longer."""
    busy: dict[str, float] = {}
    dram = 0.0
    for schedule in schedules:
        cost = evaluate(schedule, ctx.target)
        dram += cost.dram_bytes
        for what, seconds in cost.limits.items():
            if what.startswith("compute ("):
                busy[what] = busy.get(what, 0.0) + seconds
    saved = sum(2 * k.tensor(t).nbytes for k in chain[:-1] for t in k.outputs)
    traffic = max(dram - saved, 0.0) / ctx.target.dram_bandwidth
    work = max(busy.values(), default=0.0)
    if work >= traffic:
        return work, f"the {max(busy, key=busy.get)[len('compute ('):-1]}'s work" if busy else "its work"
    return traffic, "DRAM traffic without the intermediates"


def _ops(kernels) -> list[str]:
    return [op for k in kernels for op in k.ops]


def _anchor_op(program: Program, kernel: Kernel):
    """The first op of `program` (in its order) of `kernel`'s that holds the kernel's anchor
    statement (StopIteration where none does)."""
    places = _op_places(program)
    found = sorted(places[name] for name in kernel.ops if name in places)
    return next(op for _, op in ((i, program.ops[i]) for i in found) if kernel.anchor_statement in op.statements)


def _op_places(program: Program) -> dict[str, int]:
    """{op name: its index in `program.ops}` (the first of a name), made once per program: the
    chains ask every kernel's anchor op at each kernel of a network (MaxViT-T: 27,000 times)."""
    def places() -> dict[str, int]:
        found: dict[str, int] = {}
        for i, op in enumerate(program.ops):
            found.setdefault(op.name, i)
        return found

    return _PLACES.of(program, None, places)


_PLACES = LRU("chains.op_places", 8)


def _matched(rule, program: Program, kernels: list[Kernel]) -> list[int]:
    """The chain lengths (>= 2, ascending) of `kernels` (consecutive) whose anchor ops the
    rule's pattern matches whole, every tensor of all but the last read only inside."""
    if rule.match is None:
        return []
    anchors = [_anchor_op(program, k) for k in kernels]
    return [n for n in range(2, len(kernels) + 1)
            if rule.match.match_chain(anchors[:n]) == n and _closed(program, kernels[:n])]


def _closed(program: Program, chain: list[Kernel]) -> bool:
    """Every output of the chain's kernels but the last is read inside the chain alone and
    is not a program output (it can stay on chip)."""
    inside = {op for k in chain for op in k.ops}
    return all(t not in program.outputs and {op.name for op in program.readers(t)} <= inside
               for k in chain[:-1] for t in k.outputs)


def chain_kernel(program: Program, chain: list[Kernel]) -> Kernel:
    """The kernels of `chain` as one, anchored at the last one's anchor (a contraction, a
    layernorm's row mean), every tensor of the others computed at its tiles (at a
    placeholder point; the search moves it)."""
    ops = [op for k in chain for op in k.ops]
    anchor = _anchor_op(program, chain[-1]).name
    kernel = Kernel.from_ops(program, ops, name=_kernel_name(ops), anchor=anchor)
    loop, level = kernel.loop_names[0], ""
    for k in reversed(chain[:-1]):
        for st in reversed(k.statements):
            if not any(t == st.target for t, _, _ in kernel.compute_at):
                kernel = kernel.with_compute_at(st.target, loop, level)
    # The last kernel's statements before its anchor (a normalisation's 1/sqrt(var + eps)
    # before the elementwise divide that anchors it) read the computed-at tensors too: they
    # are computed at the same tiles.
    for st in reversed(kernel.statements[:kernel.anchor]):
        if not any(t == st.target for t, _, _ in kernel.compute_at):
            kernel = kernel.with_compute_at(st.target, loop, level)
    return kernel


def _fused(program: Program, chain: list[Kernel], ctx: PassContext, alone: float):
    """(schedule, seconds, compute points searched) of the chain fused, or why it cannot be.
    Remembered by the fused kernel's structure: a network's repeated blocks search once."""
    try:
        kernel = chain_kernel(program, chain)
        regions(kernel)
    except (ComputeAtError, KeyError) as err:
        return f"cannot compute at the last kernel's tiles: {err}"
    key = (canonical_kernel(kernel), round(alone * 1e12), ctx.target, repr(sorted(ctx.rules.tiling.items())),
           repr(sorted(ctx.rules.scheduling.items())), ctx.seed)
    hit = _SEARCHED.get(key)
    if hit is None:
        hit = _search_chain(program, kernel, ctx, alone)
        if not isinstance(hit, str):
            schedule, seconds, searched = hit
            hit = (by_position(schedule), seconds, searched)     # its compute points are steps of it
        _SEARCHED.put(key, hit)
    if isinstance(hit, str):
        return hit
    record, seconds, searched = hit
    return from_positions(kernel, record), seconds, searched


# Chain searches by the fused kernel's canonical form, target, rule parameters and seed.
_SEARCHED = LRU("chains.search", 512)


def _search_chain(program: Program, kernel: Kernel, ctx: PassContext, alone: float):
    target = ctx.target
    points = _compute_points(kernel, target)
    if not points:
        return "no loop of the last kernel tiles the regions it reads"
    mapping = level_mapping(ctx.rules.tiling.get("levels", ["L2", "L1", "vector"]), target.tiling_levels)

    def searched(point):
        found = chain_tiles(_at_point(kernel, *point), target, ctx.rules.tiling, ctx.seed)
        return (found[0], found[1].time_s) if found is not None else None

    # every point's search at once, side by side on the spare cores (a point the walk below
    # does not reach costs a spare core's time only)
    search_all([(_at_point(kernel, *point), None) for point in points], target, mapping, ctx.rules.tiling,
               seed=ctx.seed, n_random=CHAIN_CANDIDATES, rounds=CHAIN_ROUNDS)
    best, tried = None, 0
    for point in points:
        if best is not None and best[1] >= alone * (1 + POINT_SLACK):
            break       # far from paying at the longest loop: the next point is not searched
        found = searched(point)
        tried += 1
        if found is not None and (best is None or found[1] < best[1]):
            best = found
    if best is None:
        return "no tiling of the fused chain fits on chip"
    return best[0], best[1], tried


def _compute_points(kernel: Kernel, target) -> list[tuple[str, str]]:
    """The (loop, level) compute points a chain is searched at: the anchor loops its regions
    follow, longest first, at each level but the innermost (at most MAX_POINTS)."""
    spans = regions(kernel)
    followed = {a for loops in spans.values() for r in loops.values() for a, _ in r.terms}
    extents = kernel.extents
    order = kernel.loop_names      # ties by the kernel's loop order (a set has none)
    loops = sorted((l for l in followed if extents[l] > 1), key=lambda l: (-extents[l], order.index(l)))
    levels = target.tiling_levels[:-1] or target.tiling_levels
    return [(loop, level) for level in levels for loop in loops][:MAX_POINTS]


def _at_point(kernel: Kernel, loop: str, level: str) -> Kernel:
    """The chain kernel with every tensor it computes at (loop, level)."""
    at = kernel
    for t, _, _ in kernel.compute_at:
        at = at.with_compute_at(t, loop, level)
    return at


def _library_at_points(program: Program, schedule: Schedule, seconds: float, ctx: PassContext, others: bool = True
                       ) -> tuple[Schedule, float]:
    """(schedule, seconds): the searched chain, or the library's search of the chain at any
    of its compute points (`others`; else at the searched one's only) where that is faster.
    The pipeline takes a kernel's library search where it beats the passes'
    (`_searched_as_well_as_the_library`), so a chain is judged at that time too; the
    search's best point need not be the library's. (The searched point's library search is
    the one the library checks and the gain breakdown ask of the kept chain anyway.)"""
    from ..baselines import library_schedules

    # every point's search at once: on a machine with a spare core they run side by side
    points = [_at_point(schedule.kernel, *point) for point in _compute_points(schedule.kernel, ctx.target)] \
        if others else [schedule.kernel]
    for theirs in library_schedules(program, points, ctx):
        time_s = evaluate(theirs, ctx.target).time_s
        if time_s < seconds:
            schedule, seconds = theirs, time_s
    return schedule, seconds


def _with_library_search(program: Program, schedule: Schedule, seconds: float, ctx: PassContext) -> float:
    """The fused kernel's time, or its library search's where that is faster (as the
    pipeline takes it where it verifies)."""
    return _library_searched(program, schedule, seconds, ctx)[1]


def _library_searched(program: Program, schedule: Schedule, seconds: float, ctx: PassContext
                      ) -> tuple[Schedule, float]:
    """(schedule, seconds): the fused kernel's, or its library search's where that is faster."""
    from ..baselines import library_schedule

    theirs = library_schedule(program, schedule.kernel, ctx)
    time_s = evaluate(theirs, ctx.target).time_s
    return (theirs, time_s) if time_s < seconds else (schedule, seconds)


def _online(program: Program, chain: list[Kernel], ctx: PassContext):
    """(rewritten program, schedule, seconds) of the chain as one kernel with its softmax
    against a running max (`online_softmax`), searched and scheduled like any kernel; or why
    it does not apply. The rewrite must compute what the program does (the interpreter)."""
    ops = [op for k in chain for op in k.ops]
    found = online_softmax(program, ops)
    if isinstance(found, str):
        return found
    rewritten, merged = found
    names = {op.name for op in rewritten.ops}
    kernel_ops = [op for op in ops if op in names]
    kernel = Kernel.from_ops(rewritten, kernel_ops, name=_kernel_name(kernel_ops), anchor=merged)
    if kernel.anchor_statement.rescale is None:
        return "the weighted sum is not the fused kernel's largest statement"
    # The scores (and their epilogue) are computed at the anchor's tiles, each tile's block of
    # Q·Kᵀ on the datapath of contractions; the max, the exp and the sums run in those tiles.
    first = next(i for i, st in enumerate(kernel.statements)
                 if st.rescale is not None or any(x.rescale and x.rescale.tensor == st.target
                                                  for x in kernel.statements))
    for st in reversed(kernel.statements[:first]):
        kernel = kernel.with_compute_at(st.target, kernel.loop_names[0], "")
    kernel = _elementwise_in_nest(kernel, first)
    if not kernel.compute_at:
        return "no scores before the softmax to compute at the key tiles"
    try:
        regions(kernel)
    except ComputeAtError as err:
        return f"cannot compute the scores at the key tiles: {err}"
    verdict = _rewrite_verdict(program, ops, rewritten, ctx)
    if not verdict:
        return f"the rewrite changes the result: {verdict.reason}"
    # every compute point is searched (the first often keeps the key loop whole)
    found = _search_chain(rewritten, kernel, ctx, float("inf"))
    if isinstance(found, str):
        return found
    searched = whole_loops_tiled_innermost(found[0], ctx.target, ctx.rules.tiling)
    schedule, seconds = _scheduled_chain(rewritten, searched, ctx)
    return rewritten, schedule, seconds


def _elementwise_in_nest(kernel: Kernel, first: int) -> Kernel:
    """`kernel` with the elementwise steps just before the softmax (statement `first`) that
    may run in its tile iteration (`loopnest.in_tile_iteration`: a mask table's add) taken
    out of `compute_at`: they then run in the max's tiles, on the same tile as the max and
    the exp, where the vector unit keeps their result (`cost.traffic.vector_held`), rather
    than as one more pass over the key tile's region that the max reads back."""
    for i in reversed(range(first)):
        target = kernel.statements[i].target
        loose = replace(kernel, compute_at=tuple(c for c in kernel.compute_at if c[0] != target))
        if not in_tile_iteration(loose, i):
            break
        kernel = loose
    return kernel


def _rewrite_verdict(program: Program, ops: list[str], rewritten: Program, ctx: PassContext):
    """Whether the online-softmax rewrite computes what the program does: `ctx.verify` where
    the program is small or its scaled twin is (the twin replays the rewrite:
    `verify.equivalent_at_scale`); else (a large imported model, whose literal reshapes can
    pin its twin near full size) the same rewrite of the chain's ops alone, cut to a small
    twin (`ir.twin.kernel_twin`) — the rewrite reads only the chain's structure, which the
    twin keeps — or the whole program where no twin has it."""
    if scaled_points(program) <= EQUIVALENCE_POINTS:
        return ctx.verify(rewritten)
    small = kernel_twin(program, ops, TWIN_EXTENT)
    found = online_softmax(small, ops) if small is not None else "no twin"
    if isinstance(found, str):
        return ctx.verify(rewritten)
    return equivalent(small, found[0], seed=ctx.seed)


def _scheduled_chain(program: Program, schedule: Schedule, ctx: PassContext):
    """(schedule, seconds): the searched chain after the scheduling pass, remembered like
    its search."""
    key = (canonical_kernel(schedule.kernel), schedule_key(schedule), ctx.target,
           repr(sorted(ctx.rules.scheduling.items())), ctx.seed)
    hit = _SCHEDULED.get(key)
    if hit is None:
        done = _scheduled(program, schedule, ctx)
        hit = (dict(done.tiles), dict(done.order), dict(done.annotations), done.levels)
        _SCHEDULED.put(key, hit)
    tiles, order, annotations, levels = hit
    done = Schedule(schedule.kernel, tiles=tiles, order=order, annotations=annotations, levels=levels)
    return done, evaluate(done, ctx.target).time_s


_SCHEDULED = LRU("chains.scheduled", 512)


def _scheduled(program: Program, schedule: Schedule, ctx: PassContext) -> Schedule:
    """The scheduling pass's schedule of the fused kernel (parallel loops, vector loop), or
    the searched one where that pass keeps nothing."""
    from .scheduling import scheduling_pass

    outcome = scheduling_pass(Plan(program, (schedule.kernel,), (schedule,), "chain"), ctx)
    return outcome.plan.schedules[0]


INNERMOST_ROUNDS = 4     # rounds of one-size moves around a whole loop tiled innermost
INNERMOST_STARTS = 2     # ... from its best sizes there
TIED_CANDIDATES = 2      # least-energy moves checked for one pass per round of the ties' climb


def whole_loops_tiled_innermost(schedule: Schedule, target, tiling: dict) -> Schedule:
    """`schedule`, or a better one by the target's objective that tiles a loop the searches keep whole at the innermost
    level, innermost in that level's order (and the other tiles then moved to suit it).

    The searches keep a loop whole where tiling it could split the nest into one pass per
    statement group (`loopnest.whole_loops`: an attention kernel's head dimension d, which
    the max, exp and row sum lack). Tiled at the innermost level as the innermost loop there,
    it splits nothing: the statements without it run in each tile just outside its tile loop,
    once, as the cost model scores them; those with it (the weighted sum: one block of PE
    columns at a time, its accumulator tile a fraction of the row) inside. A candidate is kept
    only where its nest is one pass (`loopnest.single_pass`), so the model's time is the
    nest's; the chain then verifies it like any schedule (isl, tiled runs). `tiling`: the rule file's
    tiling parameters (levels, max_spill_ratio)."""
    kernel = schedule.kernel
    key = (canonical_kernel(kernel), schedule_key(schedule), target, repr(sorted(tiling.items())))
    hit = _INNERMOST.get(key)
    if hit is None:
        hit = _tiled_innermost(schedule, target, tiling)
        _INNERMOST.put(key, hit)
    if hit == ():
        return schedule
    return Schedule.of_arrays(kernel, target.tiling_levels, hit[0], hit[1], keep=schedule)


# The refinements by the searched schedule's kernel structure, schedule, target and rule parameters.
_INNERMOST = LRU("chains.whole_loops_innermost", 512)


def _tiled_innermost(schedule: Schedule, target, tiling: dict) -> tuple:
    """`whole_loops_tiled_innermost`'s (tiles [D, L], orders [L, D]), or () where nothing scores better."""
    kernel = schedule.kernel
    names = kernel.loop_names
    extents = kernel.extents
    pinned = [names.index(l) for l in sorted(whole_loops(kernel)) if extents[l] > 1]
    if not pinned:
        return ()
    model = kernel_model(kernel, target)
    tiles, orders, parallel, vectorize = model.normalise(*model.schedule_arrays(schedule))
    levels = target.tiling_levels
    L = len(levels)
    mapping = level_mapping(tiling.get("levels", ["L2", "L1", "vector"]), levels)
    space = SearchSpace.tiling(kernel, target, mapping, tiling)
    max_spill = float(tiling.get("max_spill_ratio", 0.05))

    def measured(t, o):    # (time, energy, within the spill limit) of a batch
        cost = model.evaluate_batch(t, o, parallel[:1], vectorize[:1])
        return cost.time_s, cost.energy_j, cost.spill_ratio <= max_spill + 1e-12

    def scored(t, o):      # by the target's objective, as the searches score (inf past the spill limit)
        return space.rank(*measured(t, o))

    def one_pass(t, o) -> bool:
        return single_pass(Schedule.of_arrays(kernel, levels, t, o, keep=schedule))

    best_t, best_o = tiles[0], orders[0]
    best = float(scored(best_t[None], best_o[None])[0])
    start = best
    fixed = None
    for d in pinned:
        # each size of the loop at the innermost level, the loop innermost there; the others
        # then climb from the best few
        sizes = [v for v in space.sizes[L - 1][d] if 1 <= v < extents[names[d]]]
        if not sizes:
            continue
        starts = np.repeat(tiles[:1], len(sizes), axis=0)
        starts[:, d, L - 1] = sizes
        order = orders[0].copy()
        order[L - 1] = np.concatenate([order[L - 1][order[L - 1] != d], [d]])
        first = scored(starts, np.broadcast_to(order, (len(sizes),) + order.shape))
        for i in np.argsort(first, kind="stable")[:INNERMOST_STARTS]:
            if not np.isfinite(first[i]):
                break
            t, score = _climb_around(space, starts[i], order, d, scored)
            if score < best and one_pass(t, order):
                best_t, best_o, best, fixed = t, order, score, d
    if best >= start:
        return ()
    tie = objective.ties(target)
    if space.objective == "latency" and tie > 0.0:
        best_t = _energy_tied(space, best_t, best_o, fixed, measured, one_pass, tie)
    return best_t, best_o


def _moves(space: SearchSpace, tiles, fixed: int) -> np.ndarray | None:
    """[m, D, L] one-size moves of every loop but `fixed` at every searched level (inner
    tiles shrinking inside, outer ones growing to hold them); `fixed` keeps its tiles."""
    whole = np.asarray(space.whole, dtype=bool)
    moves = []
    for h in space.searched:
        batch, moved = size_moves(space, tiles, h)
        moves.append(batch[(moved != fixed) & ~whole[moved]])
    if not sum(len(m) for m in moves):
        return None
    batch = space.monotone(np.concatenate(moves))
    batch[:, fixed, :] = tiles[fixed]
    return batch


def _climb_around(space: SearchSpace, tiles, order, fixed: int, scored):
    """(tiles, score): one-size moves of every loop but `fixed` (`_moves`), the best kept, for a few
    rounds; `order` stays."""
    L = tiles.shape[1]
    best_t = tiles
    best = float(scored(tiles[None], order[None])[0])
    for _ in range(INNERMOST_ROUNDS):
        batch = _moves(space, best_t, fixed)
        if batch is None:
            break
        times = scored(batch, np.broadcast_to(order, (len(batch), L, tiles.shape[0])))
        i = int(np.argmin(times))
        if not times[i] < best:
            break
        best_t, best = batch[i], float(times[i])
    return best_t, best


def _energy_tied(space: SearchSpace, tiles, order, fixed: int, measured, one_pass, tie: float):
    """`tiles`, or tiles within `tie` of its time that use less energy (the latency objective's
    rule, as the searches and the pipeline's energy-ties stage decide): the same one-size
    moves, each round the least energy among the one-pass candidates within `tie` of the
    time found (fixed: the band does not drift), for a few rounds. (The fastest tiling of an
    attention kernel may step through one head per tile where two cost 0.01% more time and
    reread the mask table half as often.)"""
    D, L = tiles.shape
    time0, energy0, _ = measured(tiles[None], order[None])
    band = float(time0[0]) * (1.0 + tie)
    best_t, best_e = tiles, float(energy0[0])
    for _ in range(INNERMOST_ROUNDS):
        batch = _moves(space, best_t, fixed)
        if batch is None:
            break
        time_s, energy_j, ok = measured(batch, np.broadcast_to(order, (len(batch), L, D)))
        energy_j = np.where(ok & (time_s <= band) & (energy_j < best_e * (1 - 1e-9)), energy_j, np.inf)
        picked = None
        for i in np.argsort(energy_j, kind="stable")[:TIED_CANDIDATES]:
            if np.isfinite(energy_j[i]) and one_pass(batch[i], order):
                picked = i
                break
        if picked is None:
            break
        best_t, best_e = batch[picked], float(energy_j[picked])
    return best_t
