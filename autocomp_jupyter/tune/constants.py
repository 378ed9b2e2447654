"""The tuner's fixed numbers: population bounds, chunk size, legality prediction."""
from __future__ import annotations

DEFAULT_MAX_SPILL = 0.05   # rules/default.yaml tiling.max_spill_ratio
MEASURED_CANDIDATES = 4   # versions measured (besides the rules' plan) when tune_plan gets `measure`
CHUNK = 128                 # candidates per scoring task (fixed: results do not depend on the executor)
MAX_POPULATION = 48
MIN_POPULATION = 8
TOURNAMENT = 3
MAX_GENERATIONS_PER_CONFIG = 1   # a bound on generations when most children are infeasible
# Each loop order new to a search costs a poly check (0.03-0.5 s: more for deeper nests),
# against ~10 us to score a candidate: new orders are rationed per generation.
NEW_ORDERS_START = 6
# Verdicts a search confirms (the population's leader, each generation) before it trusts
# predicted verdicts for the rest of its population (see `_Legality`).
CONFIRMED_VERDICTS = 4
PREDICT_LEGALITY = True     # False: every nest is checked before it enters a population
NEW_ORDERS_PER_GENERATION = 2

TIES_KEPT = 3                  # candidates within 1% of the fastest kept beyond `top` (latency's ties, objective.py)
