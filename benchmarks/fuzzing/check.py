"""The differential check of one program on one preset at one tuning budget.

    outcome = check_program(gen.text, "host", tune=0, seed=3)
    outcome.classes()                          # e.g. ["not_verified", "fell_back"]

`check_program` runs `optimize`, then sorts what happened into the classes a run can fall in
(`CLASSES`): a crash (any exception but a `UserError`; a `UserError` is recorded as
`refused`), `not_verified`, `fell_back` (a rollback by the `verify` or `pipeline` stage),
`wrong` (verified, yet the optimised plan or a kept version disagrees with the reference on
fresh inputs: program-level equivalence plus every kernel run tile by tile in the
interpreter), and on host `host_c_1t` / `host_c_2t` (the generated C, run with 1 or 2 OpenMP
threads, disagrees with the interpreter); with `replay=True`, `replay` (the report's kernel
traces, replayed, are refused, do not verify or cost another time). Class `import` is
`models`' (an imported model that disagrees with onnxruntime).
"""
from __future__ import annotations

import signal
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

PRESETS = ("tpu", "gpu", "npu", "gemmini", "host")
CLASSES = ("crash", "refused", "not_verified", "fell_back", "wrong", "host_c_1t", "host_c_2t", "replay", "import")


@dataclass
class Outcome:
    """What happened to one program on one preset at one tuning budget."""

    preset: str
    tune: int
    seconds: float = 0.0
    verified: bool | None = None
    problems: dict = field(default_factory=dict)   # class -> (message, where)
    notes: list = field(default_factory=list)       # skipped checks and why

    def classes(self) -> list[str]:
        return [c for c in CLASSES if c in self.problems]

    def add(self, cls: str, message: str, where: str = "") -> None:
        self.problems.setdefault(cls, (message, where))


class _Timeout(Exception):
    pass


def _where(err: BaseException) -> str:
    """file:function:line of the innermost frame inside the package (where it went wrong)."""
    import autocomp_jupyter

    package = str(Path(autocomp_jupyter.__file__).parent)
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename.startswith(package)]
    if not frames:
        return ""
    f = frames[-1]
    path = f.filename[f.filename.rindex("autocomp_jupyter"):]
    return f"{path}:{f.name}:{f.lineno}"


def _describe(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300] if text else ''}"


def _plans(res) -> list:
    """The optimised plan and every kept version, each once."""
    plans, seen = [], []
    for label, plan in [("after", res.after)] + list(res.versions.items()):
        key = (plan.kernels, plan.schedules)
        if key in seen:
            continue
        seen.append(key)
        plans.append((label, plan))
    return plans


def check_program(src: str, preset: str, tune: int = 0, seed: int = 0, fresh_seed: int | None = None,
                  deep: bool = True, host_threads=(1, 2), max_boxes: int = 20_000,
                  timeout: float = 120.0, replay: bool = False) -> Outcome:
    """Run `src` through `optimize` on `preset` and classify the outcome (see module doc).

    replay: also replay the report's kernel traces (`optimize(schedule=report)`): a replay
    that is refused, does not verify or costs another time is class "replay".

    deep: also run the plans tile by tile and (on host) as C on fresh inputs (seed
    `fresh_seed`, by default one the pipeline does not use); timeout: seconds before the
    whole check counts as a crash (a hang), where SIGALRM is available.
    """
    from autocomp_jupyter import interp, optimize
    from autocomp_jupyter.passes import raise_faults
    from autocomp_jupyter.dsl import parse
    from autocomp_jupyter.errors import UserError

    fresh_seed = seed + 104_729 if fresh_seed is None else fresh_seed
    outcome = Outcome(preset, tune)
    started = time.perf_counter()
    alarm = hasattr(signal, "SIGALRM") and timeout

    def on_alarm(signum, frame):
        raise _Timeout(f"no result within {timeout:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm) if alarm else None
    if alarm:
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        program = parse(src, "<fuzz>")
        try:
            # internal faults propagate (a transaction would make them rollbacks): a crash here
            with raise_faults():
                res = optimize(src, target=preset, tune=tune, seed=seed)
        except UserError as err:
            outcome.add("refused", _describe(err), _where(err))
            return outcome
        except _Timeout as err:
            outcome.add("crash", f"hang: {err}", _where(err))
            return outcome
        except Exception as err:  # noqa: BLE001 - any traceback from a valid program is the finding
            outcome.add("crash", _describe(err), _where(err))
            return outcome
        report = res.report
        outcome.verified = bool(report["verified"])
        rollbacks = report.get("rollbacks", [])
        if not outcome.verified:
            reasons = [r["reason"] for r in rollbacks if r["pass"] == "verify"] or \
                      [r["reason"] for r in rollbacks] or ["(no rollback says why)"]
            outcome.add("not_verified", reasons[0][:400])
        fell = [r for r in rollbacks if r["pass"] in ("verify", "pipeline")]
        if fell:
            outcome.add("fell_back", f"{fell[0]['pass']}: {fell[0]['reason'][:400]}")
        for lang in ("c", "pseudo"):
            try:
                res.code(lang)
            except Exception as err:  # noqa: BLE001
                outcome.add("crash", f"res.code({lang!r}): {_describe(err)}", _where(err))
        if replay and outcome.verified:
            _check_replay(outcome, src, preset, seed, report)
        if not deep:
            return outcome
        inputs = interp.random_inputs(program, fresh_seed)
        expected = interp.run(program, inputs)
        for label, plan in _plans(res):
            _check_plan(outcome, label, plan, program, inputs, expected, fresh_seed, max_boxes, res.target,
                        host_threads if preset == "host" else ())
    except _Timeout as err:
        outcome.add("crash", f"hang: {err}", _where(err))
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        outcome.seconds = time.perf_counter() - started
    return outcome


def _check_replay(outcome: Outcome, src: str, preset: str, seed: int, report: dict) -> None:
    from autocomp_jupyter import optimize
    from autocomp_jupyter.errors import UserError

    try:
        again = optimize(src, target=preset, seed=seed, schedule=report)
    except UserError as err:
        outcome.add("replay", f"refused: {_describe(err)}", _where(err))
        return
    if not again.verified:
        outcome.add("replay", "the replayed plan did not verify")
    elif again.report["optimized"]["time_s"] != report["optimized"]["time_s"]:
        outcome.add("replay", f"replayed time {again.report['optimized']['time_s']:.6g} s vs "
                              f"{report['optimized']['time_s']:.6g} s")


def _check_plan(outcome: Outcome, label: str, plan, program, inputs, expected, fresh_seed: int,
                max_boxes: int, target, host_threads) -> None:
    """One plan against the reference: program-level, kernel by kernel tile by tile, and as C."""
    from autocomp_jupyter import interp

    wrong = "wrong" if outcome.verified else None
    try:
        verdict = interp.compare_outputs(program, expected, interp.run(plan.program, inputs))
        if not verdict.ok and wrong:
            outcome.add(wrong, f"rewritten program: {verdict.reason} (plan {label})")
        for kernel, schedule in zip(plan.kernels, plan.schedules):
            try:
                tiled = interp.check_tiled(schedule, plan.program, seed=fresh_seed, max_boxes=max_boxes)
            except interp.TooManyTiles as err:
                outcome.notes.append(f"{label}/{kernel.name}: tiled check skipped ({err})")
                continue
            if not tiled.ok and wrong:
                outcome.add(wrong, f"kernel {kernel.name} ({'+'.join(kernel.ops)}) tile by tile: "
                                   f"{tiled.reason} (plan {label})")
    except _Timeout:
        raise
    except Exception as err:  # noqa: BLE001
        outcome.add("crash", f"interpreter on the plan: {_describe(err)} (plan {label})", _where(err))
    if not host_threads:
        return
    from autocomp_jupyter.host import HostError, compile_plan, run_compiled

    try:
        compiled = compile_plan(plan, target)
    except _Timeout:
        raise
    except HostError as err:
        outcome.add("crash", f"compiling the C: {_describe(err)} (plan {label})", _where(err))
        return
    except Exception as err:  # noqa: BLE001
        outcome.add("crash", f"generating the C: {_describe(err)} (plan {label})", _where(err))
        return
    for threads in host_threads:
        cls = f"host_c_{threads}t"
        try:
            outputs, _ = run_compiled(compiled, inputs, repeats=0, threads=threads, timeout=60)
        except HostError as err:
            outcome.add(cls, f"running the C: {_describe(err)} (plan {label})", _where(err))
            continue
        verdict = interp.compare_outputs(program, expected, outputs)
        if not verdict.ok:
            outcome.add(cls, f"C with {threads} thread(s): {verdict.reason} (plan {label}; C file "
                             f"{compiled.source_path})")
