"""The pass protocol: what every pipeline stage takes and returns.

A pass is `fn(plan: Plan, ctx: PassContext) -> PassOutcome`: it reads an immutable Plan,
returns a new one, and logs every rule it fired, skipped (and why) and every rollback
(and why). The pipeline (pipeline.py) checks each outcome — legality, equivalence, gain —
and keeps or rolls it back. Users add or replace passes by giving `optimize(passes=[...])`
names or such functions (the ADRS `rewrite_pass` hook).

Every rule, pass and pipeline step runs as a transaction (`transaction`): an internal fault
inside one (any exception but a `UserError`, which is the user's input and reaches the
user) becomes a rollback entry naming the step, its kernel and the exception, and the
caller goes on from the state before the step. The fault's traceback goes to the
`autocomp_jupyter` logger (debug); inside `with raise_faults():` (a fuzzer, a developer
chasing one) faults propagate instead, traceback and all.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable, Iterator

from .accel.cost import ProgramCost
from .accel.target import Target
from .canon import evaluate_program
from .errors import UserError
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
    # How a rewritten program is checked against the original: (original, candidate, seed)
    # -> Equivalence; the pipeline's checks large programs on their scaled twins
    # (`verify.equivalent_at_scale`), the default runs both whole.
    equivalence: Callable = equivalent
    _costs: dict = field(default_factory=dict, repr=False)
    _verdicts: dict = field(default_factory=dict, repr=False)

    def cost(self, plan: Plan) -> ProgramCost:
        """Cost of a plan on the target (cached per plan object)."""
        key = id(plan)
        if key not in self._costs:
            self._costs[key] = (plan, evaluate_program(plan.schedules, self.target))
        return self._costs[key][1]

    def verify(self, candidate: Program) -> Equivalence:
        """Does `candidate` compute what the original program computes? (`equivalence`)"""
        if candidate is self.program or candidate == self.program:
            return Equivalence(True, 0.0, "")
        key = id(candidate)
        if key not in self._verdicts:
            self._verdicts[key] = (candidate, self.equivalence(self.program, candidate, seed=self.seed))
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


# A fault's message in a rollback reason: one line, at most this many characters.
FAULT_MESSAGE_CHARS = 240


def fault_reason(what: str, kernel: str, err: BaseException) -> str:
    """One line naming what failed, on which kernel, and the exception: "chain rule
    depth_first_convs on kernel conv_3_to_relu_8: ValueError: could not broadcast ..."."""
    message = " ".join(str(err).split())
    if len(message) > FAULT_MESSAGE_CHARS:
        message = message[:FAULT_MESSAGE_CHARS - 3] + "..."
    where = f"{what} on kernel {kernel}" if kernel else what
    return f"{where}: {type(err).__name__}: {message}" if message else f"{where}: {type(err).__name__}"


_RAISE_FAULTS: ContextVar[bool] = ContextVar("autocomp_raise_faults", default=False)
_LOG = logging.getLogger("autocomp_jupyter")


@contextmanager
def raise_faults() -> Iterator[None]:
    """Inside this block transactions do not catch internal faults: they propagate as they
    were raised (the differential fuzzer counts them as crashes; a developer gets the
    traceback)."""
    token = _RAISE_FAULTS.set(True)
    try:
        yield
    finally:
        _RAISE_FAULTS.reset(token)


@dataclass
class Step:
    """A transaction's state: what runs and on which kernel (the body may name the kernel
    once it knows it), `failed` once a fault rolled it back, and `then`: what the caller
    does instead, said at the end of the reason."""

    pass_name: str
    what: str
    kernel: str = ""
    then: str = ""
    failed: bool = False


@contextmanager
def transaction(rollbacks: list, pass_name: str, what: str, kernel: str = "", then: str = "") -> Iterator[Step]:
    """Run the `with` body as a transaction. An internal fault inside it is caught and
    becomes a rollback entry ({"pass", "kernel", "reason"}, the reason from `fault_reason`);
    `step.failed` tells the caller to keep the state from before the body. The body commits
    its results last, so a fault leaves nothing half-done. A `UserError` is the user's input
    (a bad program, rule file or trace): it propagates, as does a KeyboardInterrupt.

        with transaction(rollbacks, "fusion", f"chain rule {rule.name}", kernel=name) as step:
            found = _fused(program, chain, ctx, alone)
        if step.failed:
            break
    """
    step = Step(pass_name, what, kernel, then)
    try:
        yield step
    except UserError:
        raise
    except Exception as err:       # noqa: BLE001 - an internal fault: rolled back, never fatal
        if _RAISE_FAULTS.get():
            raise
        step.failed = True
        reason = fault_reason(step.what, step.kernel, err)
        _LOG.debug("rolled back: %s", reason, exc_info=True)
        rollbacks.append(rollback_entry(step.pass_name, step.kernel, f"{reason}; {step.then}" if step.then else reason))
