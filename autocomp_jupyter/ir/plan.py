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
        return Plan(self.program, self.kernels, schedules, self.label)

    def group_of(self) -> dict[str, str]:
        """{op name: kernel name}."""
        return {op: k.name for k in self.kernels for op in k.ops}
