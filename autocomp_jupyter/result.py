"""What `optimize()` returns: the plans before and after, the report, and what the views need.

`Result.before` is the naive plan (one kernel per op, untiled), `Result.after` the verified
optimised plan; `Result.report` is the JSON-able dict of docs/guide/report.md (`Result.typed_report`,
the same as frozen dataclasses: report.Report). The pipeline also computes what the
notebook views show — each kernel's tile footprints and the generated code — so the
widgets, the static HTML and the CLI read a Result and never re-run the pipeline, the cost
model or code generation (only the Tune tab scores variants, via `evaluate_variant`).

`Plan` lives in `ir/plan.py`; it is re-exported here for code that imports it from here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .ir.plan import Plan
from .ir.program import Program
from .ir.schedule import Kernel

if TYPE_CHECKING:
    from .accel.target import Target
    from .report import Footprint, Report

__all__ = ["Plan", "Result"]


@dataclass
class Result:
    """The outcome of one `optimize()` call.

    program: the parsed input; target: the Target; before/after: Plans; library: the
    per-op tuned baseline Plan; report: the docs/guide/report.md dict (`typed_report.to_json()`);
    typed_report: the same as a report.Report; versions: top-K tuned alternatives
    (name → Plan) the user can compare and pick from; rules: the RuleSet used;
    footprints: {kernel: report.Footprint} of the optimised plan; codes: {'c' | 'pseudo':
    generated code, or the exception codegen raised} for the optimised plan.
    """

    program: Program
    target: "Target"
    before: Plan
    library: Plan
    after: Plan
    report: dict
    versions: dict[str, Plan] = field(default_factory=dict)
    rules: Any = None  # the RuleSet used, for re-evaluation with the same thresholds
    typed_report: "Report | None" = field(default=None, repr=False)
    footprints: "dict[str, Footprint]" = field(default_factory=dict, repr=False)
    codes: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def speedup(self) -> float:
        """Optimised vs naive time (docs/guide/report.md `speedup_vs_naive`)."""
        return self.report["speedup_vs_naive"]

    @property
    def verified(self) -> bool:
        return bool(self.report["verified"])

    def kernel(self, name: str) -> Kernel:
        for k in self.after.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel named {name!r}")

    def evaluate_variant(self, kernel: str, tiles=None, order=None, annotations=None, *, schedule=None,
                         verify: bool | None = None) -> dict:
        """Re-score one kernel of the optimised plan with other tiles / order / annotations
        (the Tune tab's sliders), or with the schedule a trace or `res.schedule(kernel)`
        builds (`schedule=s`; checked step by step, then run against the interpreter):
        {"legal", "reason", "verified", "metrics", "time_s", "roofline_point", "schedule",
        "plan", "note"} — see variants.evaluate_variant."""
        from .variants import evaluate_variant

        return evaluate_variant(self.after, self.target, kernel, tiles, order, annotations, schedule=schedule,
                                verify=verify)

    def schedule(self, kernel: str):
        """A `schedule.ScheduleBuilder` for `kernel`, from its untiled nest: call primitives on
        it (`s.tile(loop="i", level="VMEM", size=128)`, each checked at once), then pass it
        to `optimize(..., schedule={kernel: s})`."""
        from .schedule import ScheduleBuilder

        return ScheduleBuilder(self.kernel(kernel), self.target.tiling_levels)

    def traces(self) -> dict:
        """{kernel name: its trace} for the optimised plan (what `schedule=` replays)."""
        return {k.name: s.trace for k, s in zip(self.after.kernels, self.after.schedules)}

    def code(self, lang: str = "c") -> str:
        """Generated code for the optimised plan: 'c', 'pseudo' (the pipeline makes the
        pseudo-kernel, and the C on host; the rest is made here when first asked for and
        kept) or 'schedule' (every kernel's trace as Python calls that rebuild it)."""
        if lang == "schedule":
            from .schedule import python_of

            return "\n\n".join(python_of(name, trace) for name, trace in self.traces().items())
        if lang not in self.codes:
            from . import codegen

            self.codes[lang] = codegen.generate_or_reason(self.after, self.target, lang)
        code = self.codes[lang]
        if isinstance(code, BaseException):
            raise code
        return code

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
        import re

        from .report import summary_text

        text = summary_text(self.report)
        if cli:
            return text
        text = re.sub(r"(\d) us\b", r"\1 µs", text)  # in a notebook: one spelling, as the views write it
        return text.replace("(see --json)", "(why: res.report['rules'], or the Rules tab)")
