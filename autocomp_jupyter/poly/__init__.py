"""Polyhedral legality: what a kernel's loop transformations may and may not do.

`poly` owns the isl view of one kernel (a sequence of fused `Statement`s in program order) and
every legality question the passes ask about it. The passes in `rules/` decide what to try;
this package only answers whether it is legal. Its modules, bottom up:

- `text`: isl names and strings (`S{k}` for statement k, tuples, domains), reading isl back;
- `schedules`: `KernelSchedule` and its loop transformations (interchange, reverse, affine shifts,
  strip-mine, tile), the original (2d+1) and fused schedules, a schedule's validity;
- `polyhedra`: iteration domains (`S0[i, j, k] : 0 <= i < M ...`), read and write access
  relations (in-bounds reads only: an out-of-range read yields the access's pad value, not
  memory) and the original schedule, cached on the (frozen, hashable) statements;
- `dependences`: flow (read after write), anti (write after read) and output (write after
  write), each kept per (kind, source statement, sink statement, tensor);
- `violations`: the verdict (`Legality`) and each broken dependence (`Violation`), whose
  example pair and message are only worked out (from the full relations) when read;
- `legality`: `check_legal`, which says whether a new schedule keeps every dependence's
  source strictly before its sink, naming the dependences it breaks;
- `parallelism`: a loop is parallel iff it carries no dependence (`parallel_loops`,
  `is_parallel`), and dependence distances for the report (`dependence_distances`);
- `policy`: `check_schedule`, the one legality entry point for an `ir.schedule.Schedule`
  (its loop nest as a 2d+1 `KernelSchedule`, compute_at and running-max placements).

How a verdict is reached (exactly, not approximately): for each dependence, isl computes
the set of time differences (sink time - source time) of its pairs under the new schedule.
The dependence is broken iff that set holds a lexicographically non-positive vector, and
carried at a position iff it holds a vector zero on every outer position and non-zero
there. Differences are cached per dependence and per schedule of its two statements, so a
tuner changing one statement's nest recomputes only the dependences that touch it, and a
loop-by-loop parallel query reuses them. A legality check on an already-seen kernel costs a
few milliseconds.

Statement `k` of a kernel is named `S{k}` in isl and in every message.
"""
from __future__ import annotations

from autocomp_jupyter.poly.dependences import (DEPENDENCE_DESCRIPTIONS, DEPENDENCE_KINDS, Dependence,
                                               dependences)
from autocomp_jupyter.poly.legality import check_legal
from autocomp_jupyter.poly.parallelism import (DependenceDistance, dependence_distances, is_parallel,
                                               parallel_loops)
from autocomp_jupyter.poly.policy import check_schedule, from_tiled_schedule, parallel_dims, rescale_violations
from autocomp_jupyter.poly.polyhedra import KernelPolyhedra, kernel_polyhedra
from autocomp_jupyter.poly.schedules import (KernelSchedule, ScheduleDim, ScheduleLike, StatementSchedule,
                                             fused_schedule, original_schedule)
from autocomp_jupyter.poly.text import Statements, statement_name
from autocomp_jupyter.poly.violations import Legality, Violation

__all__ = [
    "DEPENDENCE_DESCRIPTIONS", "DEPENDENCE_KINDS", "Dependence", "DependenceDistance", "KernelPolyhedra",
    "KernelSchedule", "Legality", "ScheduleDim", "ScheduleLike", "StatementSchedule", "Statements", "Violation",
    "check_legal", "check_schedule", "dependence_distances", "dependences", "from_tiled_schedule",
    "fused_schedule", "is_parallel", "kernel_polyhedra", "original_schedule", "parallel_dims", "parallel_loops",
    "rescale_violations", "statement_name",
]
# Read by the tuner (`_isl_names_ok`, part of its legality cache key) and by tests that
# recompute a verdict by hand.
from autocomp_jupyter.poly.legality import _loop_positions, _position_for  # noqa: E402, F401
from autocomp_jupyter.poly.schedules import _schedule_map  # noqa: E402, F401
from autocomp_jupyter.poly.text import _isl_names_ok, _maps  # noqa: E402, F401
from autocomp_jupyter.poly.violations import _carried_at  # noqa: E402, F401
