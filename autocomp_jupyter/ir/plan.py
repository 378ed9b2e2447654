"""A Plan: how a Program runs — its kernels (fused op groups) in order, one Schedule each.

Plans are immutable values; every pass reads one and returns a new one, so a before/after
view is two references. `Result.before` / `.library` / `.after` and every tuned version
are Plans. (Re-exported as `autocomp_jupyter.result.Plan` for existing user code.)
"""
from __future__ import annotations

from dataclasses import dataclass

from .program import Program
from .schedule import Kernel, Schedule


@dataclass(frozen=True)
class Plan:
    """A Program's execution plan: kernels in order, each with its schedule."""

    program: Program
    kernels: tuple[Kernel, ...]
    schedules: tuple[Schedule, ...]
    label: str = ""

    def schedule_of(self, kernel_name: str) -> Schedule:
        for k, s in zip(self.kernels, self.schedules):
            if k.name == kernel_name:
                return s
        raise KeyError(f"no kernel named {kernel_name!r} (kernels: {', '.join(k.name for k in self.kernels)})")

    def with_schedule(self, kernel_name: str, schedule: Schedule) -> "Plan":
        schedules = tuple(schedule if k.name == kernel_name else s for k, s in zip(self.kernels, self.schedules))
        # A schedule's kernel may differ from the one it replaces in where its producers are
        # computed (`compute_at`); the plan runs the schedule's.
        kernels = tuple(schedule.kernel if k.name == kernel_name else k for k in self.kernels)
        return Plan(self.program, kernels, schedules, self.label)

    def group_of(self) -> dict[str, str]:
        """{op name: kernel name}."""
        return {op: k.name for k in self.kernels for op in k.ops}

    def order_problem(self) -> str:
        """'' if every op of the program runs in exactly one kernel and each kernel runs after
        the kernels whose outputs it reads; else what is wrong. (The interpreter's check runs
        the program's ops in program order, and a tiled run takes a kernel's inputs from it:
        neither would see kernels run in an order that reads a tensor before it is written.)"""
        ran: dict[str, str] = {}
        for k in self.kernels:
            for op in k.ops:
                if op in ran:
                    return f"op '{op}' runs in two kernels ({ran[op]}, {k.name})"
                ran[op] = k.name
        missing = [op.name for op in self.program.ops if op.name not in ran]
        if missing:
            return f"op(s) {', '.join(missing)} run in no kernel"
        written: set[str] = {t.name for t in self.program.inputs}
        producer = {t: k.name for k in self.kernels for t in k.outputs + k.internals}
        for k in self.kernels:
            for t in k.inputs:
                if t not in written and t in producer and producer[t] != k.name:
                    return f"kernel {k.name} reads '{t}' before kernel {producer[t]} writes it"
            written.update(k.outputs)
            written.update(k.internals)
        return ""

