"""What every search minimises: the target's or the run's objective.

  * `latency` (the default): time; candidates within 1% of the fastest are ties, broken by
    less energy, then fewer DRAM bytes (so a tile that keeps more on chip wins at equal time);
  * `energy`: joules (ties in energy broken by time);
  * `edp`: energy x time.

Two forms, one rule. `score` is the scalar a search ranks a batch by (lower is better; the
same candidate scores the same in every batch, so pools built over several rounds compare
fairly): under `latency` it is the time, its ties broken by energy, as the tiling search
always ranked. `pick` is the rule applied where a search decides — the tiling search's result,
the tuner's versions, the library baseline's candidates, the enumeration — exactly: the least
energy among the candidates within 1% of the fastest, then the fewest DRAM bytes.
"""
from __future__ import annotations

import numpy as np

from .errors import UserError

OBJECTIVES = ("latency", "energy", "edp")
FIGURES = {"latency": "time", "energy": "energy", "edp": "energy-delay"}   # what a gain is a ratio of
LATENCY_TIES = 0.01          # candidates within 1% of the fastest tie under `latency`


class ObjectiveError(UserError, ValueError):
    """An objective that is not one of OBJECTIVES."""


def check(objective, where: str = "objective") -> str:
    """`objective` if it is one of OBJECTIVES, else an error naming `where` and the three."""
    if objective not in OBJECTIVES:
        raise ObjectiveError(f"{where}: unknown objective {objective!r}; expected one of {', '.join(OBJECTIVES)}")
    return objective


def score(objective: str, time_s, energy_j) -> np.ndarray:
    """[n] what a search ranks by, lower is better: time (ties in time to less energy, by
    at most 0.1%), energy, or energy x time."""
    time_s, energy_j = np.asarray(time_s, dtype=float), np.asarray(energy_j, dtype=float)
    if objective == "energy":
        return energy_j
    if objective == "edp":
        return energy_j * time_s
    return time_s * (1.0 + 1e-3 * energy_j / max(float(energy_j.max(initial=0.0)), 1e-30))


def ties(target) -> float:
    """How close to the fastest a time ties under `latency` on `target`: LATENCY_TIES, but none
    on the host, whose generated C is measured: its model floors a kernel's time at its DRAM
    traffic, so schedules tie there that the machine tells apart (the threads a row is split
    among), and energy is not what the host is judged on."""
    return 0.0 if target.runs_generated_c else LATENCY_TIES


def order(objective: str, time_s, energy_j, dram_bytes, tie: float = LATENCY_TIES) -> np.ndarray:
    """Candidate indices, best first, by the objective's rule: under `latency` the candidates
    within LATENCY_TIES of the fastest come first, by energy then DRAM bytes, then the rest by
    time; under `energy` and `edp`, by their score (ties by time, then DRAM bytes).
    Infinite entries (refused candidates) come last."""
    time_s = np.asarray(time_s, dtype=float)
    energy_j = np.asarray(energy_j, dtype=float)
    dram = np.asarray(dram_bytes, dtype=float)
    if not len(time_s):
        return np.zeros(0, dtype=np.int64)
    if objective == "latency":
        best = float(np.min(time_s))
        tied = np.isfinite(time_s) & (time_s <= best * (1.0 + tie))
        # lexsort: the last key is the primary one
        return np.lexsort((time_s, dram, np.where(tied, energy_j, time_s), ~tied))
    primary = energy_j if objective == "energy" else energy_j * time_s
    return np.lexsort((dram, time_s, primary, ~np.isfinite(time_s)))


def pick(objective: str, time_s, energy_j, dram_bytes, tie: float = LATENCY_TIES) -> int:
    """The index `order` puts first."""
    return int(order(objective, time_s, energy_j, dram_bytes, tie)[0])


def of(target) -> str:
    """The objective a target carries (its YAML's `objective`, or the run's)."""
    return getattr(target, "objective", "latency") or "latency"


def prefers(objective: str, current, candidate, tie: float = LATENCY_TIES) -> bool:
    """Does the objective's rule put `candidate` before `current`? Each is (time, energy,
    DRAM bytes) or a cost with `time_s`, `energy_j` and `dram_bytes`; a tie keeps `current`
    (with `tie` 0, an equal time keeps `current` whatever its energy)."""
    a, b = _triple(current), _triple(candidate)
    if objective == "latency" and tie == 0.0:
        return b[0] < a[0] * (1 - 1e-9)
    return pick(objective, [a[0], b[0]], [a[1], b[1]], [a[2], b[2]], tie) == 1 and a != b


def _triple(cost) -> tuple:
    if isinstance(cost, tuple):
        return cost
    return (float(cost.time_s), float(cost.energy_j), float(getattr(cost, "dram_bytes", 0.0)))


def value(objective: str, cost) -> float:
    """The figure a gain is a ratio of: time, energy, or energy x time."""
    if objective == "energy":
        return float(cost.energy_j)
    if objective == "edp":
        return float(cost.energy_j) * float(cost.time_s)
    return float(cost.time_s)
