"""The `autocomp` command line: a thin shell over the Python API.

Exit status: 0 on success, 2 on bad input (with `file:line:col: message` on stderr and
no traceback), 1 when a run fails verification.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import __version__
from .errors import UserError
from .flags import int_at_least, positive_seconds
from .objective import OBJECTIVES


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's default exit code is 2 too; keep its message short
        self.print_usage(sys.stderr)
        self.exit(2, f"autocomp: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autocomp", description="Rule-driven optimiser for tensor programs on tensor accelerators")
    parser.add_argument("--version", action="version", version=f"autocomp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    check = sub.add_parser("check", help="parse a program, infer shapes, print its tensors and ops")
    check.add_argument("file", help="a .acir program")
    check.add_argument("--run", action="store_true", help="also run it in the reference interpreter")
    check.add_argument("--max-extent", type=int_at_least(1, "an integer >= 1"), default=None, metavar="N",
                       help="shrink dimensions above N to N (keeps the structure) before running")
    check.add_argument("--inputs", action="append", default=[], metavar="FILE.npz",
                       help="with --run: arrays named after the inputs (and params); repeatable")
    check.add_argument("--save", metavar="FILE.npz", help="with --run: write every program output")
    opt = sub.add_parser("optimize", help="run the ADRS pipeline and print a summary or the JSON report")
    opt.add_argument("file", help="a .acir program")
    opt.add_argument("--target", default="tpu", help="a preset (see `autocomp targets`) or a target .yaml")
    opt.add_argument("--rules", action="append", default=[], metavar="NAME|FILE.yaml",
                     help="extra rule file or shipped rule set (repeatable)")
    opt.add_argument("--passes", default=None, help="comma-separated passes, e.g. fusion,tiling,scheduling")
    opt.add_argument("--tune", type=int_at_least(0, "an integer >= 0"), default=None, metavar="N",
                     help="configurations the tuner evaluates (0: rules only)")
    opt.add_argument("--top", type=int_at_least(1, "an integer >= 1"), default=None, metavar="K", help="tuned versions to keep")
    opt.add_argument("--seed", type=int_at_least(0, "an integer >= 0"), default=None, metavar="S", help="tuner seed")
    opt.add_argument("--budget", type=positive_seconds, default=None, metavar="SECONDS", help="tuning time limit")
    opt.add_argument("--objective", choices=OBJECTIVES, default=None,
                     help="what every search minimises (default: the target's, latency)")
    opt.add_argument("--executor", default=None, metavar="SPEC",
                     help="where the tuner scores: 'processes[:N]' or a Dask scheduler 'tcp://host:8786'")
    opt.add_argument("--schedule", metavar="REPORT.json",
                     help="replay the kernels' schedules (their `trace`) from a report instead of searching")
    opt.add_argument("--json", action="store_true", help="print the JSON report (docs/guide/report.md)")
    opt.add_argument("--vis-graph", metavar="FILE.dot", help="write the graph, fused groups boxed, as DOT")
    opt.add_argument("--emit-c", metavar="FILE.c", help="write the generated C")
    opt.add_argument("--measure", action="store_true",
                     help="compile and time the generated C on this CPU (target host)")
    opt.add_argument("--threads", type=int_at_least(1, "an integer >= 1"), default=None, metavar="N",
                     help="threads for --measure (default: the cores this process may use)")
    add_import_parser(sub)
    add_explore_parser(sub)
    sub.add_parser("targets", help="list the accelerator presets")
    rules = sub.add_parser("rules", help="list the rules and where they apply")
    rules.add_argument("--target", default=None, help="show the rule set as this target sees it")
    return parser


def _print_table(rows: list[dict], columns: list[str]) -> None:
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def cmd_optimize(args) -> int:
    import json

    from .pipeline import optimize

    progress = None
    if args.tune and sys.stderr.isatty():
        from .tune import tqdm_progress

        progress = tqdm_progress()
    # The command line names a file (never program text): an .onnx model or a DSL program.
    source = args.file if args.file.endswith(".onnx") else Path(args.file)
    result = optimize(source, target=args.target, rules=args.rules, tune=args.tune, top=args.top,
                      seed=args.seed, budget=args.budget, passes=args.passes, progress=progress,
                      executor=args.executor, measure=args.measure, threads=args.threads,
                      schedule=args.schedule, objective=args.objective)
    if args.vis_graph:
        from .ui.graph import plan_dot

        _write(args.vis_graph, plan_dot(result.after, result.report, title=args.file))
    if args.emit_c:
        _write(args.emit_c, result.code("c"))
    if args.json:
        # JSON has no NaN or Infinity: a non-finite number prints as null, never as 'NaN'.
        print(json.dumps(_finite(result.report), indent=2, default=_json_default, allow_nan=False))
    else:
        print(result.summary(cli=True))
        measured = result.report.get("measured")
        if measured:
            # The prediction for the threads the run had (the report's optimized time assumes every core).
            predicted = measured.get("predicted_time_s") or result.report["optimized"]["time_s"]
            print(f"measured {measured['measured_time_s'] * 1e3:.2f} ms ({measured['threads']} threads) vs predicted "
                  f"{predicted * 1e3:.2f} ms on this CPU")
    return 0 if result.verified else 1


def _finite(value):
    """The report with every non-finite float (numpy's too) replaced by None."""
    import math

    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) or type(value).__name__ in ("float64", "float32", "float16"):
        return float(value) if math.isfinite(value) else None
    return value


def _json_default(value):
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _write(path: str, text: str) -> None:
    from pathlib import Path

    try:
        Path(path).write_text(text)
    except OSError as err:
        raise UserError(f"cannot write '{path}': {err.strerror or err}", filename=path) from None
    print(f"wrote {path}", file=sys.stderr)


def cmd_targets(args) -> int:
    from .accel.target import list_targets

    _print_table(list_targets(), ["name", "compute", "peak_tflops_f32", "on_chip", "dram_gbps"])
    return 0


def cmd_rules(args) -> int:
    from .rules.engine import list_rules

    _print_table(list_rules(args.target), ["rule", "pass", "match", "targets", "enabled", "doc"])
    return 0


def cmd_check(args) -> int:
    from .dsl import load

    if args.file.endswith(".onnx") or args.inputs or args.save:
        return check_with_values(args)
    program = load(args.file, max_extent=args.max_extent)
    print(f"{args.file}: ok, {len(program.ops)} ops, {program.flops:,} flops, outputs {', '.join(program.outputs)}")
    print(program.summary())
    if args.run:
        from . import interp
        from .limits import check_memory_budget

        check_memory_budget(program, what="running this program")  # refuse before allocating
        values = interp.run(program)
        for name in program.outputs:
            v = values[name]
            print(f"{name}: shape {list(v.shape)}, mean {v.mean():.6g}, max |x| {abs(v).max():.6g}")
    return 0


# --------------------------------------------------------------------------- ONNX models


def add_import_parser(sub) -> None:
    imp = sub.add_parser("import", help="import an ONNX model as a DSL program (.acir) and its weights (.npz)")
    imp.add_argument("file", help="a .onnx model")
    imp.add_argument("-o", "--output", metavar="FILE.acir",
                     help="write the program here (its weights beside it as FILE.params.npz); default: print it")
    imp.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                     help="static shape for an input with symbolic dimensions (repeatable)")


def _input_shapes(specs: list[str]) -> dict:
    shapes = {}
    for spec in specs:
        name, _, dims = spec.partition("=")
        try:
            shapes[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            raise UserError(f"--shape {spec!r}: expected NAME=D0,D1,... with integer dimensions",
                            filename="--shape") from None
        if not name or any(d <= 0 for d in shapes[name]):
            raise UserError(f"--shape {spec!r}: expected NAME=D0,D1,... with positive dimensions", filename="--shape")
    return shapes


def cmd_import(args) -> int:
    import numpy as np

    from .onnx_import import from_onnx

    program = from_onnx(args.file, input_shapes=_input_shapes(args.shape))
    if not args.output:
        print(program.source, end="")
        return 0
    _write(args.output, program.source)
    weights = str(args.output).removesuffix(".acir") + ".params.npz"
    try:
        np.savez(weights, **program.param_values)
    except OSError as err:
        raise UserError(f"cannot write '{weights}': {err.strerror or err}", filename=weights) from None
    print(f"wrote {weights} ({len(program.param_values)} weights; `autocomp check {args.output} --run "
          f"--inputs {weights} --inputs x.npz` runs it)", file=sys.stderr)
    return 0


def _read_npz(path: str) -> dict:
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read '{path}' as .npz arrays: {err}", filename=path) from None


def check_with_values(args) -> int:
    """`check` of an .onnx model, or of a program with --inputs/--save: run the reference
    interpreter on the given arrays (named after the graph's inputs; ONNX names or their
    DSL spelling) with the model's weights, and write every output."""
    import numpy as np

    from .dsl import load
    from .onnx_import import from_onnx, run_with_values, sanitize

    if args.file.endswith(".onnx"):
        if args.max_extent is not None:
            raise UserError("--max-extent applies to .acir programs, not to ONNX models", filename="--max-extent")
        program = from_onnx(args.file)
    else:
        program = load(args.file, max_extent=args.max_extent)
    print(f"{args.file}: ok, {len(program.ops)} ops, {program.flops:,} flops, outputs {', '.join(program.outputs)}")
    print(program.summary())
    if not args.run:
        if args.inputs or args.save:
            raise UserError("--inputs and --save need --run", filename="check")
        return 0
    given = {}
    for path in args.inputs:
        for name, value in _read_npz(path).items():
            given[name if program.has_tensor(name) else sanitize(name)] = value
    values = run_with_values(program, given)
    random = [t.name for t in program.inputs if t.name not in given and t.name not in program.param_values]
    if random:
        print(f"random values (seed 0) for: {', '.join(random)}", file=sys.stderr)
    for name in program.outputs:
        v = values[name]
        print(f"{name}: shape {list(v.shape)}, mean {v.mean():.6g}, max |x| {abs(v).max():.6g}")
    if args.save:
        dtype = {"f16": np.float16, "i8": np.int8, "i32": np.int32}
        arrays = {n: values[n].astype(dtype.get(program.tensor(n).dtype, np.float32)) for n in program.outputs}
        try:
            np.savez(args.save, **arrays)
        except OSError as err:
            raise UserError(f"cannot write '{args.save}': {err.strerror or err}", filename=args.save) from None
        print(f"wrote {args.save} ({', '.join(arrays)})", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- design-space exploration


def add_explore_parser(sub) -> None:
    exp = sub.add_parser("explore", help="sweep the target's fields, optimise on every design, print the Pareto front")
    exp.add_argument("file", help="a .acir program or an .onnx model")
    exp.add_argument("--target", default="tpu", help="a preset or a target .yaml (the design swept from)")
    exp.add_argument("--sweep", action="append", default=[], metavar="PATH=V1,V2,...",
                     help="a dotted path into the target and its values (memory.SRAM.size_bytes=256KiB,1MiB); "
                          "tied paths: 'compute.pe_rows,compute.pe_cols=16x16,32x32' (repeatable: a grid)")
    exp.add_argument("--tune", type=int_at_least(0, "an integer >= 0"), default=0, metavar="N",
                     help="configurations the tuner evaluates per design (default 0: rules only)")
    exp.add_argument("--seed", type=int_at_least(0, "an integer >= 0"), default=None, metavar="S", help="tuner seed")
    exp.add_argument("--objective", choices=OBJECTIVES, default=None,
                     help="what every design's searches minimise (default: the target's, latency)")
    where = exp.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int_at_least(1, "an integer >= 1"), default=None, metavar="N",
                       help="run designs on a local Dask cluster of N processes")
    where.add_argument("--scheduler", default=None, metavar="ADDRESS", help="run designs on this Dask scheduler")
    exp.add_argument("--max-points", type=int_at_least(1, "an integer >= 1"), default=None, metavar="N",
                     help="allow up to N designs (default 1000)")
    exp.add_argument("--cache", default=None, metavar="DIR", help="keep finished designs here; a rerun resumes")
    exp.add_argument("--json", action="store_true", help="print points, pareto and seconds as JSON")
    exp.add_argument("--csv", default=None, metavar="FILE", help="also write the points as CSV")


def cmd_explore(args) -> int:
    import json

    from .dse import explore

    def counted(done, total, point):
        print(f"\r{done}/{total} designs", end="" if done < total else "\n", file=sys.stderr, flush=True)

    progress = counted if sys.stderr.isatty() and not args.json else None
    source = args.file if args.file.endswith(".onnx") else Path(args.file)
    result = explore(source, args.target, args.sweep, tune=args.tune, seed=args.seed, workers=args.workers,
                     scheduler=args.scheduler, max_points=args.max_points, cache=args.cache, progress=progress,
                     objective=args.objective)
    if args.csv:
        _write(args.csv, result.to_csv())
    if args.json:
        print(json.dumps(_finite(result.to_json()), indent=2, default=_json_default, allow_nan=False))
    else:
        _print_explore(result)
    return 0 if all(p["verified"] for p in result.points if p["valid"]) else 1


def _print_explore(result) -> None:
    paths = [p for s in result.sweeps for p in s.paths]
    front = set(result.pareto)
    rows = []
    for i, p in enumerate(result.points):
        row = {"#": i, "pareto": "*" if i in front else "", **{k: p["params"][k] for k in paths}}
        if p["valid"]:
            row.update(time_us=f"{p['time_s'] * 1e6:.3g}", energy_uj=f"{p['energy_j'] * 1e6:.3g}",
                       area_mm2=f"{p['area_mm2']:.3g}", verified=p["verified"], bound=p["bound"])
        else:
            row.update(time_us="invalid", bound=p["reason"].splitlines()[0])
        rows.append(row)
    _print_table(rows, ["#", "pareto", *paths, "time_us", "energy_uj", "area_mm2", "verified", "bound"])
    print(f"{len(result.points)} designs ({result.cached} from the cache), Pareto front {result.pareto}, "
          f"{result.seconds:.1f} s")


COMMANDS = {"check": cmd_check, "optimize": cmd_optimize, "targets": cmd_targets, "rules": cmd_rules,
            "import": cmd_import, "explore": cmd_explore}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return COMMANDS[args.command](args)
    except UserError as err:
        print(err.format(), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("autocomp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`autocomp optimize ... --json | head`): stop quietly, as Unix tools do.
        sys.stdout = open(os.devnull, "w")
        return 0


if __name__ == "__main__":
    sys.exit(main())
