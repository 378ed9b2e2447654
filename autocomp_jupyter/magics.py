"""The notebook surface: `%%autocomp` and the `%autocomp_targets` / `%autocomp_rules` tables.

A thin shell over `autocomp_jupyter.optimize()` (docs/guide/notebook.md): parse the flags, call
optimize with a progress bar, show the result (widget or static HTML). Bad input — the
DSL, a target or rule YAML, the flags themselves — is shown as the formatted message
(line, caret, hint) in red, never as a Python traceback, and the magic returns None.

    %%autocomp --target tpu --tune 1000 --top 3 --seed 0 --out res
    input A: f32[1024, 1024]
    ...

With `--explore "compute.pe_rows=16,32; memory.SRAM.size_bytes=256KiB,1MiB"` the cell sweeps
the target instead (dse.py) and shows the Explore tab (ui/explore.py).

DSL line numbers count the `%%autocomp` line as line 1, as the notebook editor does. A
cell holding just a path to an `.acir` (or `.onnx`) file optimises that file.
"""
from __future__ import annotations

import argparse
import keyword
import re
import shlex
from pathlib import Path

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import HTML, display

from .errors import Diagnostic, UserError, did_you_mean
from .flags import int_at_least, positive_seconds
from .objective import OBJECTIVES

PASSES = ("fusion", "tiling", "scheduling")
CODE_LANGS = ("c", "pseudo")
CELL_FILENAME = "cell"


# --------------------------------------------------------------------------- flag types


def _passes(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    for name in names:
        if name not in PASSES:
            hint = did_you_mean(name, PASSES)
            raise argparse.ArgumentTypeError(f"unknown pass {name!r}" + (f" ({hint})" if hint else ""))
    if not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(PASSES)}")
    return names


def _identifier(text: str) -> str:
    if not text.isidentifier() or keyword.iskeyword(text):
        raise argparse.ArgumentTypeError(f"expected a Python variable name, got {text!r}")
    return text


def _objective(text: str) -> str:
    if text not in OBJECTIVES:
        hint = did_you_mean(text, OBJECTIVES)
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(OBJECTIVES)}, got {text!r}"
                                         + (f" ({hint})" if hint else ""))
    return text


def _code_lang(text: str) -> str:
    if text not in CODE_LANGS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(CODE_LANGS)}, got {text!r}")
    return text


# --------------------------------------------------------------------------- error display


def show_error(err: UserError, out=display) -> None:
    """The formatted message in red (HTML) with the same text as plain text; no traceback.
    `out` displays it (a progress bar's `show` puts it in the bar's place)."""
    out({"text/html": err._repr_html_(), "text/plain": err.format()}, raw=True)


MAGIC = "%%autocomp "


def _tokens(line: str) -> list[tuple[str, int]]:
    """The magic line's words (shell quoting) with the column each starts at in `line`."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=False)
    lexer.whitespace_split = True
    out, at = [], 0
    for word in lexer:
        start = line.find(word, at)
        if start < 0:  # a quoted word: find its first character after the previous word
            start = at + len(line[at:]) - len(line[at:].lstrip())
        out.append((word, start))
        at = start + len(word)
    return out


def flag_errors(parser: argparse.ArgumentParser, line: str) -> UserError | None:
    """Every problem of the magic line at once, each with a caret: unknown flags, missing
    values, values a flag's type refuses, stray words. None when the line is fine (as far
    as the flags' own types can tell). The table of flags is the parser's: a flag added
    with one more @argument is checked here with no change."""
    actions = {opt: a for a in parser._actions for opt in a.option_strings if opt.startswith("--")}
    try:
        tokens = _tokens(line)
    except ValueError as err:  # an unclosed quote
        return UserError(Diagnostic(f"cannot read the flags: {err}", 1, len(MAGIC) + 1, max(1, len(line)),
                                    "close the quote"), source=MAGIC + line, filename=CELL_FILENAME)
    diagnostics: list[Diagnostic] = []

    def at(col: int, length: int, message: str, hint: str = "") -> None:
        diagnostics.append(Diagnostic(message, 1, len(MAGIC) + col + 1, max(1, length), hint))

    i = 0
    while i < len(tokens):
        word, col = tokens[i]
        i += 1
        if not word.startswith("--"):
            at(col, len(word), f"unexpected value {word!r}: a value follows its flag",
               "flags are --name value, e.g. --target tpu")
            continue
        flag, eq, inline = word.partition("=")
        matches = [a for opt, a in actions.items() if opt == flag] or \
            list({id(a): a for opt, a in actions.items() if opt.startswith(flag)}.values())
        if len(matches) > 1:
            at(col, len(flag), f"flag {flag!r} is ambiguous",
               "one of " + ", ".join(sorted(a.option_strings[0] for a in matches)))
        if len(matches) != 1:
            if not matches:
                at(col, len(flag), f"unknown flag {flag!r}", did_you_mean(flag, actions) or "")
            if not eq and i < len(tokens) and not tokens[i][0].startswith("--"):
                i += 1  # its value goes with it
            continue
        action = matches[0]
        name = action.option_strings[0]
        if action.nargs == 0:
            if eq:
                at(col, len(word), f"argument {name}: takes no value")
            continue
        if eq:
            value, vcol = inline, col + len(flag) + 1
        elif i < len(tokens) and not tokens[i][0].startswith("--"):
            (value, vcol), i = tokens[i], i + 1
        else:
            if action.nargs != "?":
                at(col, len(flag), f"argument {name}: expected a value ({action.metavar or 'one argument'})")
            continue
        if action.type is not None:
            try:
                action.type(value)
            except (argparse.ArgumentTypeError, ValueError, TypeError) as err:
                # the caret under the part of the value the message names ('tilling' of fusion,tilling)
                named = [q for q in re.findall(r"'([^']+)'", str(err)) if q in value]
                part = named[0] if named else value
                at(vcol + value.find(part), len(part), f"argument {name}: {err}")
    if not diagnostics:
        return None
    return UserError(diagnostics, source=MAGIC + line, filename=CELL_FILENAME)


def _flag_error(message: str, line: str) -> UserError:
    """A UserError for a bad magic line, with a caret under the offending flag or value."""
    source = "%%autocomp " + line
    where, hint = None, ""
    unknown = re.search(r"unrecognized arguments: (\S+)", message)
    if unknown:
        where = unknown.group(1)
        if where.startswith("-"):
            hint = did_you_mean(where, FLAGS)
    else:  # the first quoted value the message names that the line contains, else the flag
        quoted = [q for q in re.findall(r"'([^']+)'", message) if q in line]
        flag = re.search(r"argument (--[\w-]+)", message)
        where = quoted[-1] if quoted else (flag.group(1) if flag else None)
    col = source.find(where, len("%%autocomp ")) + 1 if where else 0
    if col <= 0:
        return UserError(Diagnostic(message, hint=hint), source=source, filename=CELL_FILENAME)
    return UserError(Diagnostic(message, 1, col, len(where), hint), source=source, filename=CELL_FILENAME)


def _value_error_on_line(err: UserError, line: str, args) -> UserError | None:
    """An error about a flag's value that only optimize() can judge (a target or rule set
    name or file), as diagnostics on the magic line with a caret under that value; None when
    the error is not about a value written on the line."""
    values = {"--target": [args.target] if args.target else [], "--rules": list(args.rules or [])}
    filename = str(getattr(err, "filename", "") or "")
    flag = value = None
    if filename in values:
        flag = filename
        value = next((v for v in values[flag] if f"'{v}'" in str(err)), values[flag][0] if values[flag] else None)
    else:
        flag = next((f for f, vs in values.items() if filename in vs), None)
        value = filename if flag else None
    if not flag or not value:
        return None
    at = line.find(flag)
    at = line.find(value, at + len(flag)) if at >= 0 else -1
    if at < 0:
        return None
    col = len("%%autocomp ") + at + 1
    diagnostics = [Diagnostic(f"{flag} {value}: {d.message}", 1, col, len(value), d.hint)
                   for d in getattr(err, "diagnostics", [])] or [Diagnostic(f"{flag} {value}: {err}", 1, col, len(value))]
    return UserError(diagnostics, source="%%autocomp " + line, filename=CELL_FILENAME)


FLAGS = ("--target", "--rules", "--tune", "--top", "--seed", "--budget", "--objective", "--passes", "--vis-graph",
         "--out", "--static", "--code", "--explore", "--workers", "--scheduler")


def user_error_types() -> tuple[type, ...]:
    """Exceptions that mean bad input: UserError, target YAML errors, rule-set errors."""
    types: list[type] = [UserError]
    try:
        from .accel.target import TargetError
        types.append(TargetError)
    except ImportError:  # accel is optional for the error path only
        pass
    try:
        from .rules import engine
        for name in dir(engine):
            obj = getattr(engine, name)
            if isinstance(obj, type) and issubclass(obj, Exception) and name.endswith("Error") \
                    and obj.__module__.startswith("autocomp_jupyter"):
                types.append(obj)
    except ImportError:  # rules/ not present: no rule-set errors to catch
        pass
    return tuple(dict.fromkeys(types))


def as_user_error(err: Exception) -> UserError:
    """A UserError for display; a TargetError keeps its file and key path in the message."""
    if isinstance(err, UserError):
        return err
    detail, filename = getattr(err, "detail", None), getattr(err, "filename", None)
    if detail and filename:
        key_path = getattr(err, "key_path", "")
        return UserError(f"{key_path}: {detail}" if key_path else detail, filename=filename)
    return UserError(str(err))


def _cell_program(cell: str):
    """The cell's program: its DSL text, or the .acir file a one-line cell names.

    DSL text is parsed here, with a blank first line, so diagnostics count the %%autocomp
    line as line 1, as the notebook editor numbers the cell.
    """
    from .dsl import load, parse

    text = cell.strip()
    if "\n" not in text and text.endswith(".acir"):
        return load(text)
    if "\n" not in text and text.endswith(".onnx"):
        from .onnx_import import from_onnx

        return from_onnx(text)
    return parse("\n" + cell, filename=CELL_FILENAME)


def _optimize():
    import autocomp_jupyter

    fn = getattr(autocomp_jupyter, "optimize", None)
    if fn is None:
        from .pipeline import optimize as fn
    return fn


# --------------------------------------------------------------------------- magics


@magics_class
class AutocompMagics(Magics):
    """`%%autocomp`, `%autocomp_targets`, `%autocomp_rules`."""

    @magic_arguments()
    @argument("--target", default="tpu", metavar="NAME|FILE.yaml",
              help="accelerator preset (gpu, tpu, npu, gemmini, host) or a target YAML file")
    @argument("--rules", action="append", metavar="NAME|FILE.yaml",
              help="a rule set file or a rule registered with @adrs_rule (repeatable)")
    @argument("--tune", type=int_at_least(0, "a non-negative integer"), metavar="N",
              help="configurations the tuner evaluates (0: rules only)")
    @argument("--top", type=int_at_least(1, "a positive integer"), metavar="K", help="keep the K best versions")
    @argument("--seed", type=int_at_least(0, "a non-negative integer"), metavar="S", help="tuner seed")
    @argument("--budget", type=positive_seconds, metavar="SECONDS", help="tuning time limit")
    @argument("--objective", type=_objective, metavar="latency|energy|edp",
              help="what every search minimises (default: the target's, latency)")
    @argument("--passes", type=_passes, metavar="fusion,tiling,scheduling", help="passes to run")
    @argument("--vis-graph", nargs="?", const="", default=None, metavar="FILE.dot",
              help="show the before/after graph at once; with FILE.dot also write the optimised graph there")
    @argument("--out", type=_identifier, metavar="VAR", help="store the Result in this variable")
    @argument("--static", action="store_true", help="static HTML only (no live widgets)")
    @argument("--code", type=_code_lang, metavar="c|pseudo", help="open the Code tab in this language")
    @argument("--schedule", metavar="REPORT.json", help="replay the kernels' traces from a report instead of searching")
    @argument("--explore", metavar="PATH=V,...; PATH=V,...",
              help="sweep the target's fields (a grid; tied paths P1,P2=AxB) and show the Explore tab")
    @argument("--workers", type=int_at_least(1, "a positive integer"), metavar="N",
              help="with --explore: run the designs on a local Dask cluster of N processes")
    @argument("--scheduler", metavar="ADDRESS", help="with --explore: run the designs on this Dask scheduler")
    @cell_magic
    def autocomp(self, line: str, cell: str):
        """Optimise the tensor program in the cell for a simulated accelerator (docs/guide/notebook.md)."""
        try:
            args = parse_argstring(self.autocomp, line)
        except UsageError as err:  # every bad flag at once, each with its caret (else argparse's one)
            show_error(flag_errors(self.autocomp.parser, line) or _flag_error(str(err), line))
            return None
        from . import ui

        if args.explore is not None:
            return self._explore(args, line, cell)
        if args.workers is not None or args.scheduler is not None:
            show_error(_flag_error("argument --workers/--scheduler: runs the designs of --explore; add --explore "
                                   "\"PATH=V,...\" (optimize's tuner takes no Dask flag here)", line))
            return None
        errors = user_error_types()
        # The first output after tuning takes the progress bar's place (progress.py).
        progress = ui.TuningProgress(widgets=not args.static)
        try:
            program = _cell_program(cell)
            result = _optimize()(program, target=args.target, rules=args.rules, tune=args.tune, top=args.top,
                                 seed=args.seed, budget=args.budget, passes=args.passes, progress=progress,
                                 **({"schedule": args.schedule} if args.schedule else {}),
                                 **({"objective": args.objective} if args.objective else {}))
        except errors as err:
            user_error = as_user_error(err)
            show_error(_value_error_on_line(user_error, line, args) or user_error, progress.show)
            return None
        except BaseException:
            progress.close()
            raise
        if args.out:
            self.shell.user_ns[args.out] = result
        try:
            if args.vis_graph is not None:
                self._vis_graph(result, args.vis_graph, progress.show)
            code = args.code or "pseudo"
            progress.show(ui.view(result, static=args.static, code=code,
                                  first_tab="Code" if args.code else "Graph"))
        finally:
            progress.close()
        return None

    def _explore(self, args, line: str, cell: str):
        """--explore: every design of the sweep optimised, the Explore tab shown (live or static)."""
        from .dse import explore
        from .ui.explore import ExploreProgress, ExploreView, explore_static_html

        progress = ExploreProgress()
        try:
            text = args.explore
            if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":  # IPython keeps a value's quotes
                text = text[1:-1]
            result = explore(_cell_program(cell), args.target, text, tune=args.tune or 0, seed=args.seed,
                             workers=args.workers, scheduler=args.scheduler, progress=progress)
        except user_error_types() as err:
            user_error = as_user_error(err)
            show_error(_value_error_on_line(user_error, line, args) or user_error, progress.show)
            return None
        if args.out:
            self.shell.user_ns[args.out] = result
        progress.show(HTML(explore_static_html(result)) if args.static else ExploreView(result))
        return None

    def _vis_graph(self, result, path: str, out=display) -> None:
        from .ui.graph import plan_dot
        from .ui.html import graph_html

        if path:
            try:
                Path(path).write_text(plan_dot(result.after, result.report) + "\n")
            except OSError as err:
                show_error(UserError(f"cannot write the graph to '{path}': {err.strerror or err}"), out)
            else:
                out(HTML(f"<p>wrote the optimised graph to <code>{shlex.quote(path)}</code></p>"))
        out(HTML(graph_html(result)))

    @line_magic
    def autocomp_targets(self, line: str = ""):
        """The accelerator presets, as a table."""
        from .accel.target import list_targets
        from .ui.fmt import esc, table

        rows = [[f"<code>{esc(r['name'])}</code>", esc(r["compute"]), esc(r["peak_tflops_f32"]), esc(r["on_chip"]),
                 esc(r["dram_gbps"])] for r in list_targets()]
        display(HTML(table(["target", "compute", "peak TFLOP/s (f32)", "on-chip memory", "DRAM GB/s"], rows)))
        return None

    @line_magic
    def autocomp_rules(self, line: str = ""):
        """The rules available to --rules: the default rule set and @adrs_rule rules."""
        from .ui.fmt import esc, note, table

        rows = rule_rows()
        if not rows:
            display(HTML(note("no rules available yet (autocomp_jupyter.rules is not installed)")))
            return None
        header = ["rule", "pass", "match", "targets", "enabled", "doc"]
        body = [[f"<code>{esc(r.get('rule', ''))}</code>"] + [esc(r.get(k, "")) for k in header[1:]] for r in rows]
        display(HTML(table(header, body, "autocomp-rules")))
        return None


def rule_rows() -> list[dict]:
    """Rows {rule, pass, match, targets, enabled, doc} from the rule engine."""
    try:
        from .rules import engine
    except ImportError:
        return []
    lister = getattr(engine, "list_rules", None)
    if callable(lister):
        return [dict(r) for r in lister()]
    return []


def _show_user_error(shell, etype, value, tb, tb_offset=None):
    """A UserError raised by a Python call in a cell (optimize(...), from_onnx(...)): its
    message, like the magic's errors, not a traceback."""
    show_error(as_user_error(value))
    return None


def load_ipython_extension(ipython) -> None:
    ipython.register_magics(AutocompMagics)
    ipython.set_custom_exc((UserError,), _show_user_error)
