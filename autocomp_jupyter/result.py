"""What `optimize()` returns: the plans before and after, the report, and views of them.

A `Plan` is how a Program runs: its kernels (fused op groups) and one Schedule per kernel.
`Result.before` is the naive plan (one kernel per op, untiled), `Result.after` the verified
optimised plan; `Result.report` is the JSON-able dict of DESIGN §8. The notebook widgets,
static HTML and the CLI all read a Result; none of them recompute the pipeline.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from .ir.program import Program
from .ir.schedule import Kernel, Schedule

if TYPE_CHECKING:
    from .accel.target import Target


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


@dataclass
class Result:
    """The outcome of one `optimize()` call.

    program: the parsed input; target: the Target; before/after: Plans; library: the
    per-op textbook-tiled baseline Plan; report: DESIGN §8 dict; versions: top-K tuned
    alternatives (name → Plan) the user can compare and pick from.
    """

    program: Program
    target: "Target"
    before: Plan
    library: Plan
    after: Plan
    report: dict
    versions: dict[str, Plan] = field(default_factory=dict)
    rules: Any = None  # the RuleSet used, for re-evaluation with the same thresholds
    evaluate_variant: Callable[..., dict] | None = field(default=None, repr=False)

    @property
    def speedup(self) -> float:
        """Optimised vs naive time (DESIGN §8 `speedup_vs_naive`)."""
        return self.report["speedup_vs_naive"]

    @property
    def verified(self) -> bool:
        return bool(self.report["verified"])

    def kernel(self, name: str) -> Kernel:
        for k in self.after.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel named {name!r}")

    def code(self, lang: str = "c") -> str:
        """Generated code for the optimised plan: 'c' or 'pseudo'."""
        from . import codegen

        return codegen.generate(self.after, self.target, lang)

    def to_tvm(self):
        """The optimised plan in TVM's tensor expressions with its schedule applied
        (split, reorder, parallel, vectorize, unroll); needs `pip install autocomp-jupyter[tvm]`."""
        from .tvm_bridge import to_tvm

        return to_tvm(self)

    def show(self, static: bool = False):
        """Display the result: live widgets in a notebook, or static HTML."""
        from . import ui

        return ui.show(self, static=static)

    def _repr_html_(self) -> str:
        from . import ui

        return ui.static_html(self)

    def summary(self, cli: bool = False) -> str:
        """A readable plain-text summary (what `autocomp optimize` prints with `cli=True`;
        without it, pointers to more detail name the Python object, not a CLI flag)."""
        from .report import summary_text

        text = summary_text(self.report)
        return text if cli else text.replace("(see --json)", "(why: res.report['rules'], or the Rules tab)")
