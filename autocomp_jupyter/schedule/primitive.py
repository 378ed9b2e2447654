"""What a schedule primitive is, and the registry of them.

A primitive is a frozen dataclass whose fields are its arguments, in the pattern of Exo's
`Do*` rewrites beside their `Check_*` and TVM's schedule primitives with their instruction
traits. Each subclass, in a file of its own, gives:

  - `check(schedule)`: the argument checks against the schedule it is applied to, raising
    its own `ScheduleError` that names the primitive and the loop;
  - `rewrite(schedule)`: the new, frozen `Schedule` (the lowered loop nest is
    `ir.loopnest.lower` of it);
  - `decisions(kernel, levels)`: what a search may choose for it (`Decision`s), and
    `step_for(schedule, key, value)`: the step a chosen value makes;
  - `hint_when_illegal`: what to try instead when isl refuses it.

Legality is not a primitive's own: `poly.check_schedule` proves a whole schedule, and
`trace.replay` names the first step after which it fails, with the dependence it breaks.
A primitive's JSON form is its step, {"primitive": NAME, ...arguments}; its Python form is
the call a user makes on a `ScheduleBuilder`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

from ..errors import did_you_mean
from ..ir.schedule import Kernel, Schedule
from .errors import BadArgumentError, UnknownLoopError

Step = dict   # {"primitive": NAME, <arg>: value, ...}: a primitive's JSON form


@dataclass(frozen=True)
class Decision:
    """One choice a search makes: `primitive` at `key` (a tile's (loop, level), a loop to run
    in parallel, ...) takes one of `choices`; `choices[0]` leaves the schedule as it is."""

    primitive: str
    key: tuple
    choices: tuple


@dataclass(frozen=True)
class Primitive:
    """A schedule primitive with its arguments (the dataclass fields of a subclass)."""

    name: ClassVar[str] = ""
    rank: ClassVar[int] = 50           # where a trace puts it, and the registry's order (tiles first, unroll last)
    loop_transform: ClassVar[bool] = False   # the scheduling pass tries its decisions (rules' `priority`)
    why_no_gain: ClassVar[str] = ""          # why the cost model may see no gain in it (the rule log)
    tuned: ClassVar[bool] = False            # the tuner tries its decisions on each kernel's best schedule
    hint_when_illegal: ClassVar[str] = ""

    # ---- arguments and rewriting (each subclass)
    def check(self, schedule: Schedule) -> None:
        """Raise a `ScheduleError` if the arguments do not fit `schedule`."""

    def rewrite(self, schedule: Schedule) -> Schedule:
        raise NotImplementedError

    def apply(self, schedule: Schedule) -> Schedule:
        """`schedule` with this step applied (arguments checked; legality is the trace's)."""
        self.check(schedule)
        return self.rewrite(schedule)

    # ---- the search space (each subclass that a search may sample)
    @classmethod
    def decisions(cls, kernel: Kernel, levels: Sequence[str]) -> tuple[Decision, ...]:
        return ()

    @classmethod
    def step_for(cls, schedule: Schedule, key: tuple, value) -> Step | None:
        """The step that choosing `value` for the decision at `key` makes on `schedule` (None: no step)."""
        return None

    # ---- forms
    @classmethod
    def params(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def step(self) -> Step:
        return {"primitive": self.name, **{p: _json_value(getattr(self, p)) for p in self.params()}}

    def python(self) -> str:
        return f"s.{self.name}({', '.join(f'{k}={v!r}' for k, v in self.step().items() if k != 'primitive')})"

    def describe(self) -> str:
        """A few words for the rule log ("reverse k", "split i into 4x8x4")."""
        return " ".join([self.name] + [str(getattr(self, p)) for p in self.params()])

    @classmethod
    def decision_label(cls, key: tuple) -> str:
        """What a control for the decision at `key` is called ('parallel j', 'tile i @ VMEM')."""
        return " ".join([cls.name] + [str(k) for k in key])

    @classmethod
    def doc(cls) -> str:
        return (cls.__doc__ or "").strip()


class LoopToggle(Primitive):
    """A primitive whose one argument is a loop, each loop that runs more than once being a
    decision of its own: on (a step) or off (none) — `parallel`, `reverse`."""

    @classmethod
    def decisions(cls, kernel: Kernel, levels: Sequence[str]) -> tuple[Decision, ...]:
        return tuple(Decision(cls.name, (loop,), (False, True)) for loop in moving_loops(kernel))

    @classmethod
    def step_for(cls, schedule: Schedule, key: tuple, value) -> Step | None:
        return {"primitive": cls.name, "loop": key[0]} if value else None


PRIMITIVES: dict[str, type[Primitive]] = {}


def register(cls: type[Primitive]) -> type[Primitive]:
    """Add a primitive class to the registry under its `name` (trace replay, the builder, the search space)."""
    PRIMITIVES[cls.name] = cls
    return cls


def loop_transforms() -> tuple[str, ...]:
    """What a rule file's `scheduling.priority` may list: interchange, and every registered
    primitive that is a loop transformation (`loop_transform = True`)."""
    return ("interchange",) + tuple(name for name, cls in PRIMITIVES.items() if cls.loop_transform)


def from_step(step: Mapping[str, Any]) -> Primitive:
    """The primitive a JSON step names, with its arguments (names checked; values are `check`'s)."""
    if not isinstance(step, Mapping) or "primitive" not in step:
        raise BadArgumentError(f"a step is {{\"primitive\": NAME, ...arguments}}, got {step!r}")
    name = step["primitive"]
    cls = PRIMITIVES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise BadArgumentError(f"unknown primitive {name!r}; the primitives are {', '.join(PRIMITIVES)}",
                               hint=hint(name, list(PRIMITIVES)))
    params = cls.params()
    args = {k: v for k, v in step.items() if k != "primitive"}
    missing = [p for p in params if p not in args]
    extra = [a for a in args if a not in params]
    if missing or extra:
        said = (f"missing {', '.join(missing)}" if missing else "") + \
               ("; " if missing and extra else "") + (f"unknown {', '.join(extra)}" if extra else "")
        raise BadArgumentError(f"{said} (takes {', '.join(params)})", primitive=name,
                               hint=hint(extra[0], params) if extra else "")
    return cls(**args)


def _json_value(value):
    return [_json_value(v) for v in value] if isinstance(value, (tuple, list)) else value


def hint(name, known: Sequence[str]) -> str:
    return did_you_mean(name, known) if isinstance(name, str) else ""


# --------------------------------------------------------------------------- argument checks


def known_loop(schedule: Schedule, primitive: str, loop, what: str = "loop") -> str:
    names = schedule.kernel.loop_names
    if not isinstance(loop, str) or loop not in names:
        raise UnknownLoopError(f"no loop {loop!r} ({what}); the kernel's loops are {', '.join(names)}",
                               primitive=primitive, loop=str(loop), hint=hint(loop, names))
    return loop


def known_level(schedule: Schedule, primitive: str, level) -> str:
    levels = schedule.levels
    if not isinstance(level, str) or level not in levels:
        raise UnknownLoopError(f"no level {level!r}; the target's tiling levels are {', '.join(levels)}",
                               primitive=primitive, hint=hint(level, levels))
    return level


def positive(primitive: str, value, what: str, loop: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadArgumentError(f"{what} must be a positive integer, got {value!r}", primitive=primitive, loop=loop)
    return value


def annotate(schedule: Schedule, **values) -> Schedule:
    """`schedule` with annotations replaced (the lowered nest reads them)."""
    return dataclasses.replace(schedule, annotations={**schedule.annotations, **values})


def innermost_loop(schedule: Schedule) -> str:
    """The loop innermost at the innermost level (the one `unroll` unrolls)."""
    return schedule.innermost_loop


def moving_loops(kernel: Kernel) -> list[str]:
    """The kernel's loops that run more than once (a search has nothing to decide for the others)."""
    return [l for l in kernel.loop_names if kernel.extents[l] > 1]
