"""The tiling pass: multi-level tiles and a loop order per level for every kernel.

When it applies: to every kernel of the plan (after fusion), with `tiling.tile_heuristic:
model-driven` (with `fixed`, the textbook tiles stay and the pass only logs that).

What it produces: a new Schedule per kernel whose tiles `{loop: {level: size}}` and
per-level orders are chosen by the cost model:

1. Levels. The rule file's generic levels (`levels: [L2, L1, vector]`) map onto the target's
   on-chip levels outer → inner (`Target.tiling_levels`); a target with fewer on-chip
   levels uses the first names (tpu: L2 → VMEM, L1 → vregs).
2. Candidates per loop, from the kernel's one candidate space (`space.TileSpace`: the
   `tiling` view — powers of two, the extent, its divisors, balanced non-divisors
   ceil(E / q) (remainder tiles), multiples of the PE array / vector width on the loops the
   datapath maps; at the generic `vector` level the `register` view — register tiles of
   `register_tile_factor` (min..max) datapath units). Orders per level: every permutation for up to 4 loops, else
   the stationary orders (each tensor's non-indexing loops innermost) and the source order.
3. Search (`accel.tile_search`, beside the cost model, which schedules compute_at producer
   nests alone with it too): a few thousand random candidates (inner tiles never larger than outer ones)
   plus the current and textbook tiles, scored at once by `accel.cost.evaluate_batch`;
   candidates whose `spill_ratio` exceeds `max_spill_ratio` are rejected; then rounds of
   local moves (one tile size, one order, a factor of 2 moved between two loops) from the
   best few until nothing improves.
4. Checks (`verify.verify_schedule`): isl legality of the chosen schedule, then the tiled
   execution check (`interp.check_tiled`, on a scaled-down twin of a large program); a
   kernel whose schedule fails is rolled back to its previous schedule and logged.

Searches and passing tiled runs are remembered by the kernel's canonical form
(`canon.canonical_kernel`: tensor names by position), so a network's repeated layers are
searched and run once. Searches of one kernel from different schedules (the library
baseline's from textbook tiles, the pipeline's from the library's) share the random draw
and the measured candidates: each candidate is costed once, and every search returns
what it would alone.

Example (GEMM 1024³ + relu on tpu): the textbook 256/128 tiles become e.g.
`i: VMEM 1024 / vregs 64, j: 512 / 128, k: 1024 / 128`, logged as
"2.0x less time than the textbook tiles: VMEM 1024x512x1024, vregs 64x128x128; ...".
"""
from __future__ import annotations

import math
import time

from .. import objective
from ..accel.cost import library_schedule
from ..accel.tile_search import level_mapping, search_all, search_tiles
from ..canon import evaluate
from ..ir.schedule import Schedule
from ..passes import PassContext, PassOutcome, rollback_entry, rule_entry
from ..ir.plan import Plan
from ..verify import verify_schedule

PASS = "tiling"


def tiling_pass(plan: Plan, ctx: PassContext) -> PassOutcome:
    params = ctx.rules.tiling
    log: list[dict] = []
    rollbacks: list[dict] = []
    if params.get("tile_heuristic", "model-driven") != "model-driven":
        log.append(rule_entry("multi_level_tiling", PASS, [op.name for op in plan.program.ops], False,
                              f"tile_heuristic is {params.get('tile_heuristic')!r}: textbook tiles kept"))
        return PassOutcome(plan, tuple(log), ())
    levels = level_mapping(params.get("levels", ["L2", "L1", "vector"]), ctx.target.tiling_levels)
    # every kernel's search first, side by side on the spare cores; then each is judged alone
    search_all(list(zip(plan.kernels, plan.schedules)), ctx.target, levels, params, seed=ctx.seed)
    schedules = []
    for kernel, current in zip(plan.kernels, plan.schedules):
        started = time.perf_counter()
        choice = search_tiles(kernel, ctx.target, current, levels, params, seed=ctx.seed)
        seconds = time.perf_counter() - started
        rule = f"tile_{kernel.name}"
        if choice is None:
            log.append(rule_entry(rule, PASS, kernel.ops, False,
                                  f"no tiling within max_spill_ratio {params.get('max_spill_ratio', 0.05):g} "
                                  f"beats the current tiles"))
            schedules.append(current)
            continue
        schedule, cost, evaluated = choice
        old = evaluate(current, ctx.target)
        if not objective.prefers(ctx.target.objective, old, cost, objective.ties(ctx.target)):
            log.append(rule_entry(rule, PASS, kernel.ops, False,
                                  f"the current tiles are already the best found ({evaluated} candidates)"))
            schedules.append(current)
            continue
        problem = verify_schedule(schedule, plan.program, ctx)
        if problem:
            rollbacks.append(rollback_entry(PASS, kernel.name, problem))
            log.append(rule_entry(rule, PASS, kernel.ops, False, f"rolled back: {problem}"))
            schedules.append(current)
            continue
        textbook = evaluate(library_schedule(kernel, ctx.target), ctx.target)
        log.append(rule_entry(rule, PASS, kernel.ops, True,
                              _why(schedule, cost, textbook, old, levels, evaluated, seconds)))
        schedules.append(schedule)
    return PassOutcome(Plan(plan.program, plan.kernels, tuple(schedules), "tiled"), tuple(log), tuple(rollbacks))



def _why(schedule: Schedule, cost, textbook, old, levels: dict[str, str], evaluated: int, seconds: float) -> str:
    sizes = schedule.tile_sizes()
    parts = []
    for h, level in enumerate(schedule.levels):
        parts.append(f"{level} " + "x".join(str(sizes[l][h]) for l in schedule.kernel.loop_names))
    orders = "; ".join(f"order@{lv} {','.join(schedule.order_at(lv))}" for lv in schedule.levels)
    gain = textbook.time_s / cost.time_s if cost.time_s else math.inf
    mapping = ", ".join(f"{g}→{t}" for g, t in levels.items())
    than = f"{gain:.1f}x less time" if gain >= 1 else f"{1 / gain:.1f}x more time (for less energy)"
    return (f"{than} than the textbook tiles ({textbook.time_s * 1e6:.1f} -> "
            f"{cost.time_s * 1e6:.1f} us; {old.time_s / cost.time_s:.2f}x over the tiles before): "
            f"{', '.join(parts)} ({'x'.join(schedule.kernel.loop_names)}); {orders}; "
            f"energy {old.energy_j * 1e6:.1f} -> {cost.energy_j * 1e6:.1f} uJ; "
            f"spill {cost.spill_ratio:.3f}, pe_util {cost.pe_util:.2f}, {cost.bound}-bound; "
            f"levels {mapping}; {evaluated} candidates in {seconds:.2f} s")

