"""The auto-tuner: an evolutionary search over what the rules leave open.

This package owns the evolution strategy over each kernel's search space
(`accel.search_space.SearchSpace.tuner`) — tile sizes per level
(the candidate space's tuner view, `space.TileSpace.tuner`: divisors and non-divisors,
each tile inside the enclosing one), a loop order per level,
and annotations (parallel loops, the vectorised loop; `unroll` is carried from the rules,
capped where a candidate's registers would spill it) — and the assembly of the best whole-program versions.
It decides nothing about legality or cost itself: candidates are scored in batches by the
cost model (`accel.cost.evaluate_batch`, or any `score_fn`), legality is asked of
`poly.check_schedule`.

The search, per kernel (most to win first, each with a share of the `configs` budget
proportional to its expected gain — its time under the rules' schedule above its roofline
floor, `expected_gain` — what a small, exhausted space leaves goes to the kernels after it; numpy Generator seeded ctx.seed + the kernel's index):

1. The population starts from the incumbent — the schedule the rules chose — plus
   mutations of it and random samples; the incumbent never leaves the population (elitism),
   so tuning is never worse than the rules alone.
2. Each generation breeds children by tournament selection, uniform crossover (per loop
   for tiles and parallel marks, per level for orders) and mutation (a tile a step up or
   down its list of sizes or anywhere in it; two loops of one level's order swapped; a
   parallel mark toggled; the vectorised loop moved). Children are repaired (tiles clipped
   inside the enclosing tile; at outer levels, loops that do not iterate ordered
   canonically), deduplicated against everything seen, and dropped without scoring if
   their footprint overflows a level beyond the rules' `tiling.max_spill_ratio` (the limit
   the tiling pass obeys).
3. Legality. Tile sizes do not change which dependences a plain tiling breaks: the DSL's
   kernels are single-assignment, their only self-dependences are reductions, and what
   breaks legality is reordering a non-reorderable reduction or running a reduction loop in
   parallel — neither depends on a size, only on which loops iterate at which level (that
   shapes the loop nest `ir.loopnest.lower` builds). Loops a later statement needs whole
   (`ir.loopnest.whole_loops`: a softmax row) are never tiled. poly checks parallel loops
   one by one, so one check (`poly.check_schedule`) per loop orders, with every loop
   marked parallel, answers both "are these orders legal" and "which loops may be
   parallel": the cache is keyed by (kernel, levels, orders, which loops iterate where)
   and shared across calls.
   A poly check costs 10-100 ms against ~10 us per scored candidate, so legality is asked
   lazily — before a candidate can become a version or the population's leader; while
   every verdict a search has obtained agrees (orders legal, one parallel set: on a
   network's kernels, always), a nest it has not asked about enters the rest of the
   population on that predicted verdict; the leader is checked each generation until
   `CONFIRMED_VERDICTS` nests agree, and a checked verdict that disagrees ends prediction
   for the search (`_Legality`). An illegal candidate never counts as a result:
   it leaves the board and its repair (the parallel marks its orders forbid dropped, else
   the incumbent's orders and parallel set) is scored instead. Versions are checked once
   more with their exact schedule.
4. Scoring is vectorised over fixed-size chunks of the generation; a chunk is a picklable
   task (score_fn, kernel, target, arrays → times), so any `concurrent.futures.Executor`
   can run it and the result is identical whatever the executor.

The top-K versions combine per-kernel candidates into the K fastest whole programs
(kernel times add), distinct in time. With `measure` (plan → seconds, e.g. a host run) the
model's best few are measured and re-ranked. `tune_plan` returns (best plan, versions,
tuning summary); a KeyboardInterrupt or the time budget ends the search with the best so far.

Modules: `constants` (fixed numbers), `scoring` (scoring chunks on any executor), `legality`
(isl verdicts, predicted),
`search` (the evolutionary search and its mutators), `moves` (compute_at placements and
the tuned primitives' steps, beyond the genome), `plan` (budgets, versions, the entry points).
"""
from __future__ import annotations

from .constants import DEFAULT_MAX_SPILL
from .scoring import _Scorer, _arrays, _score_chunk, close_executor, model_score, open_executor
from .legality import _LEGALITY_CACHE, _Legality, legal
from .search import MUTATORS, Mutator, _Search, population_size
from .moves import KERNEL_MOVES, KernelMove, _compute_at_placements, _kernel_moves, _primitive_moves
from .plan import (KernelResult, _SEARCH_LOCK, _search_task, _top_combinations, expected_gain, search_kernel,
                   split_configs, tqdm_progress, tune_plan)

__all__ = [
    'DEFAULT_MAX_SPILL', 'KERNEL_MOVES', 'KernelMove', 'KernelResult', 'MUTATORS', 'Mutator',
    '_LEGALITY_CACHE', '_Legality', '_SEARCH_LOCK', '_Scorer', '_Search', '_arrays',
    '_compute_at_placements', '_kernel_moves', '_primitive_moves', '_score_chunk', '_search_task',
    '_top_combinations', 'close_executor', 'expected_gain', 'legal', 'model_score', 'open_executor',
    'population_size', 'search_kernel', 'split_configs', 'tqdm_progress', 'tune_plan'
]
