"""The pass protocol: what every pipeline stage takes and returns.

A pass is `fn(plan: Plan, ctx: PassContext) -> PassOutcome`: it reads an immutable Plan,
returns a new one, and logs every rule it fired, skipped (and why) and every rollback
(and why). The pipeline (pipeline.py) checks each outcome — legality, equivalence, gain —
and keeps or rolls it back. Users add or replace passes by giving `optimize(passes=[...])`
names or such functions (the ADRS `rewrite_pass` hook).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .accel.cost import ProgramCost
from .accel.target import Target
from .canon import evaluate_program
from .interp import Equivalence, equivalent
from .ir.program import Program
from .ir.plan import Plan
from .rules.engine import RuleSet


@dataclass
class PassContext:
    """What passes may read: the original program, the target, the rules, shared caches."""

    program: Program
    target: Target
    rules: RuleSet
    seed: int = 0
    explain: bool = True    # False: the log is discarded (the library baseline), refusals are not explained
    # False: a pass proves the schedules it keeps legal (isl) but does not also run them tile by
    # tile (the library baseline's own searches: costed, never shown as optimised; a library
    # schedule the pipeline takes is verified whole there)
    tiled_checks: bool = True
    _costs: dict = field(default_factory=dict, repr=False)
    _verdicts: dict = field(default_factory=dict, repr=False)

    def cost(self, plan: Plan) -> ProgramCost:
        """Cost of a plan on the target (cached per plan object)."""
        key = id(plan)
        if key not in self._costs:
            self._costs[key] = (plan, evaluate_program(plan.schedules, self.target))
        return self._costs[key][1]

    def verify(self, candidate: Program) -> Equivalence:
        """Does `candidate` compute what the original program computes? (reference interpreter)"""
        if candidate is self.program or candidate == self.program:
            return Equivalence(True, 0.0, "")
        key = id(candidate)
        if key not in self._verdicts:
            self._verdicts[key] = (candidate, equivalent(self.program, candidate, seed=self.seed))
        return self._verdicts[key][1]


@dataclass(frozen=True)
class PassOutcome:
    plan: Plan
    log: tuple[dict, ...] = ()        # report["rules"] entries: {rule, pass, ops, applied, why}
    rollbacks: tuple[dict, ...] = ()  # report["rollbacks"] entries: {pass, kernel, reason}


Pass = Callable[[Plan, PassContext], PassOutcome]


def rule_entry(rule: str, pass_name: str, ops, applied: bool, why: str = "") -> dict:
    return {"rule": rule, "pass": pass_name, "ops": list(ops), "applied": bool(applied), "why": why}


def rollback_entry(pass_name: str, kernel: str, reason: str) -> dict:
    return {"pass": pass_name, "kernel": kernel, "reason": reason}
