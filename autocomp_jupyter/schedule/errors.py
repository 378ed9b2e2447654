"""What a refused schedule step raises: which kernel, which step, which primitive, which loop, why.

Every failure is a `ScheduleError` (a `UserError`: exit 2 in the CLI, one message in a
notebook). Argument checks raise `UnknownLoopError` (a loop, level or tensor the kernel does
not have) or `BadArgumentError` (missing, mistyped or out-of-range arguments); isl's verdict
raises `IllegalStepError`, naming the dependence the step breaks.
"""
from __future__ import annotations

from ..errors import Diagnostic, UserError


class ScheduleError(UserError):
    """A schedule primitive refused a step: which kernel, which step, which loop, why."""

    def __init__(self, message: str, *, kernel: str = "", primitive: str = "", loop: str = "",
                 step: int | None = None, hint: str = "", filename: str = "schedule"):
        self.kernel, self.primitive, self.loop, self.step = kernel, primitive, loop, step
        where = [f"kernel {kernel}"] if kernel else []
        if step is not None:
            where.append(f"step {step + 1}")
        if primitive:
            where.append(primitive)
        prefix = ", ".join(where)
        super().__init__(Diagnostic(f"{prefix}: {message}" if prefix else message, hint=hint), filename=filename)

    @property
    def message(self) -> str:
        """The reason alone, without the kernel/step/primitive prefix."""
        text = self.diagnostics[0].message
        return text.split(": ", 1)[1] if self.primitive and text.startswith(self.primitive + ":") else text


class UnknownLoopError(ScheduleError):
    """A step names a loop (or level, or tensor) the kernel does not have."""


class BadArgumentError(ScheduleError):
    """A step's arguments are missing, of the wrong type or out of range."""


class IllegalStepError(ScheduleError):
    """A step breaks a dependence (isl: `poly.check_schedule`)."""
