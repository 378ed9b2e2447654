"""The Tune tab's model: one control per decision of every registered primitive, and the
variant trace the controls' values build — no widgets here (live.py draws them).

    space.decisions(kernel, levels)  ──▶  Control (primitive, key, choices, value)  ──▶  trace

A control is a `schedule.space.Decision` with the value the kernel's current schedule has
for it. Which steps of the current trace a control *owns* is read off the primitive's own
`step_for`: the arguments every choice's step shares are the decision's key (a tile's loop
and level, a parallel loop), the others its value (the size); a step of the current trace
with the same primitive and key arguments is the control's. The variant's trace is the
current trace without the steps of the controls that moved, plus the steps those controls
make, in the primitives' rank order (the order a search's traces use). So a primitive added
to the registry gets its controls here, with no code of its own.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..ir.schedule import Schedule
from ..schedule import PRIMITIVES, Decision
from ..schedule.space import decisions as space_decisions

MAX_DROPDOWN = 256     # choices a dropdown lists (split's perfect factorisations are capped there too)


@dataclass
class Control:
    """One decision with the value the current schedule has (`initial`) and the chosen one."""

    decision: Decision
    choices: tuple
    initial: object
    value: object = None
    key_args: tuple = ()
    owned: tuple = field(default_factory=tuple)    # the current trace's steps this control stands for
    probe: dict = field(default_factory=dict)      # a step of this decision (its key arguments' values)

    def makes(self, step: dict) -> bool:
        """Is `step` one of this decision's steps (same primitive, same key arguments)?"""
        return bool(self.probe) and step.get("primitive") == self.primitive and \
            all(step.get(a) == self.probe.get(a) for a in self.key_args)

    @property
    def primitive(self) -> str:
        return self.decision.primitive

    @property
    def key(self) -> tuple:
        return self.decision.key

    @property
    def kind(self) -> str:
        """'toggle' (two boolean choices), 'slider' (integers in order) or 'dropdown'."""
        if len(self.choices) == 2 and all(isinstance(c, bool) for c in self.choices):
            return "toggle"
        numbers = [c for c in self.choices if c is not None]
        if len(numbers) > 2 and all(isinstance(c, int) and not isinstance(c, bool) for c in numbers):
            return "slider"
        return "dropdown"

    @property
    def moved(self) -> bool:
        return self.value != self.initial

    def label(self) -> str:
        """'tile i @ VMEM', 'parallel j', 'vectorize', 'compute_at T': the primitive's own words."""
        from ..schedule import PRIMITIVES

        return PRIMITIVES[self.primitive].decision_label(self.key)

    def text(self, value) -> str:
        """How a choice reads in a picker: None is the current schedule's own value."""
        if value is None:
            now = self._now() if self.initial is None else ""
            return f"(as now: {now})" if now else "(none)"
        if isinstance(value, bool):
            return "on" if value else "off"
        if value == self.choices[0] and self.kind == "dropdown":     # the choice that leaves the schedule be
            return "off"
        if isinstance(value, tuple):
            return " ".join(str(v) for v in value)
        return str(value)

    def _now(self) -> str:
        shown = []
        for step in self.owned:
            shown.append(" ".join(str(v if not isinstance(v, list) else " ".join(map(str, v)))
                                  for k, v in step.items() if k != "primitive" and k not in self.key_args))
        return "; ".join(s for s in shown if s)

    def check(self, value) -> str:
        """'' if `value` is one of this control's choices, else why not (bad input)."""
        if any(value == c and type(value) is type(c) for c in self.choices) or \
                (isinstance(value, list) and tuple(value) in self.choices):
            return ""
        return (f"{self.label()}: {value!r} is not one of its choices "
                f"({', '.join(self.text(c) for c in self.choices[:8])}{' ...' if len(self.choices) > 8 else ''})")


def controls(schedule: Schedule, slider_sizes=None) -> list[Control]:
    """A control per decision of every registered primitive for `schedule`'s kernel, each
    set to the value `schedule` has. `slider_sizes(loop, current)` gives a tile's choices
    (the tile space's slider stops) in place of the primitive's own."""
    kernel, levels = schedule.kernel, schedule.levels
    trace = schedule.trace
    out = []
    for decision in space_decisions(kernel, levels):
        cls = PRIMITIVES[decision.primitive]
        choices = tuple(decision.choices)
        probes = [s for s in (cls.step_for(schedule, decision.key, c) for c in choices) if s is not None]
        key_args = _shared_args(probes) if decision.key else ()   # a keyless decision owns its primitive's step
        probe = probes[0] if probes else {}
        owned = tuple(s for s in trace if probe and s["primitive"] == decision.primitive
                      and all(s.get(a) == probe.get(a) for a in key_args))
        if decision.primitive == "tile" and slider_sizes is not None and owned:
            loop, _level = decision.key
            choices = tuple(slider_sizes(loop, owned[0]["size"]))     # a size, never "untiled"
        if len(choices) > MAX_DROPDOWN:
            choices = choices[:MAX_DROPDOWN]
        choices = _with_own_value(cls, schedule, decision.key, choices, owned)
        initial = _current_value(cls, schedule, decision.key, choices, owned)
        out.append(Control(decision, choices, initial, initial, key_args, owned, probe))
    return out


def _with_own_value(cls, schedule: Schedule, key: tuple, choices: tuple, owned: tuple) -> tuple:
    """`choices`, plus the value the schedule's own step has where it is not one of them (an
    unroll the scheduling pass capped at a tile of 3), so the control shows what the schedule
    does: the value is the step argument whose choice makes that very step."""
    if len(owned) != 1 or any(cls.step_for(schedule, key, c) == owned[0] for c in choices[1:]):
        return choices
    for value in owned[0].values():
        value = tuple(value) if isinstance(value, list) else value
        if value in choices or type(value) not in {type(c) for c in choices if c is not None}:
            continue
        try:
            made = cls.step_for(schedule, key, value)
        except (TypeError, ValueError):
            continue
        if made == owned[0]:
            ordered = all(isinstance(c, int) and not isinstance(c, bool) for c in choices)
            return tuple(sorted(choices + (value,))) if ordered else choices + (value,)
    return choices


def _shared_args(probes: Sequence[dict]) -> tuple:
    """The arguments every probe step agrees on (the decision's key)."""
    if not probes:
        return ()
    first = probes[0]
    return tuple(a for a in first if a != "primitive" and all(p.get(a) == first[a] for p in probes))


def _current_value(cls, schedule: Schedule, key: tuple, choices: tuple, owned: tuple):
    """The choice whose step is the one the schedule already has; else the 'leave it' choice."""
    for choice in choices[1:]:
        step = cls.step_for(schedule, key, choice)
        if step is not None and owned and step in owned:
            return choice
    return None if None in choices else choices[0]


def variant_trace(schedule: Schedule, ctrls: Sequence[Control]) -> list[dict]:
    """The trace of the variant the controls describe: `schedule`'s trace with the steps of
    the controls that moved replaced by theirs, primitives in rank order. The steps are made
    one by one on the schedule built so far (an `unroll` unrolls what the order leaves
    innermost); a kept step that no longer fits is made again by its primitive for what
    stands (`_remade`), else kept — replay refuses it, naming it."""
    from ..schedule import apply_step
    from ..schedule.errors import ScheduleError

    moved = [c for c in ctrls if c.moved]
    dropped = [s for c in moved for s in c.owned]
    kept = [s for s in schedule.trace if s not in dropped]     # `trace` makes new dicts: equal, not identical
    steps: list[dict] = []
    built = Schedule.default(schedule.kernel.without_compute_at(), schedule.levels)
    pending = sorted(kept + [("control", c) for c in moved],
                     key=lambda s: PRIMITIVES[s[1].primitive if isinstance(s, tuple) else s["primitive"]].rank)
    for item in pending:
        if isinstance(item, tuple):
            c = item[1]
            step = PRIMITIVES[c.primitive].step_for(built, c.key, c.value)
            if step is None:
                continue
        else:
            step = item
        try:
            built = apply_step(built, step)
        except ScheduleError:
            remade = _remade(item, built, ctrls)
            if remade is not None:   # a kept step the earlier moves unsettled, made anew by its primitive
                step, built = remade
            # else: replay names this step; later steps are made on what stands
        steps.append(step)
    return steps


def _remade(step, built: Schedule, ctrls: Sequence[Control]):
    """(step, schedule) for a kept `step` that no longer fits `built`, made again by its
    primitive's `step_for` with its control's value on what the earlier steps built (an
    `unroll` follows the loop a new order leaves innermost); None when that fails too."""
    from ..schedule import apply_step
    from ..schedule.errors import ScheduleError

    if isinstance(step, tuple):
        return None
    ctrl = next((c for c in ctrls if c.makes(step)), None)
    if ctrl is None or ctrl.value is None:
        return None
    again = PRIMITIVES[ctrl.primitive].step_for(built, ctrl.key, ctrl.value)
    if again is None or again == step:
        return None
    try:
        return again, apply_step(built, again)
    except ScheduleError:
        return None


def change_name(ctrl: Control, value) -> str:
    """A variant's name by its change: 'parallel i on', 'tile i @ VMEM 64'."""
    return f"{ctrl.label()} {ctrl.text(value)}"


def step_of(ctrl: Control, trace: Sequence[dict]) -> dict | None:
    """The step `ctrl` adds to `trace` (None when its value removes its step)."""
    return next((s for s in trace if ctrl.makes(s) and s not in ctrl.owned), None)
