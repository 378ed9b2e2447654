"""User-facing errors: one exception type carrying every diagnostic of an input.

A `Diagnostic` points at the user's text (`file:line:col`), says what is wrong and, where
it can, what was expected (`hint`). `UserError` collects all diagnostics of one input so
the user fixes them in one round; the CLI prints it and exits 2, the notebook shows it
without a Python traceback.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True)
class Diagnostic:
    message: str
    line: int = 0  # 1-based; 0 when the error is about the whole input
    col: int = 0
    length: int = 1
    hint: str = ""

    def format(self, source: str | Sequence[str] = "", filename: str = "<input>") -> str:
        """`file:line:col: error: message`, the source line with a caret, the hint.

        `source` is the text or its lines (pass lines when formatting many diagnostics).
        A long source line is cut to a window around the caret."""
        where = f"{filename}:{self.line}:{self.col}" if self.line else filename
        out = [f"{where}: error: {self.message}"]
        lines = source.splitlines() if isinstance(source, str) else source
        if self.line and 0 < self.line <= len(lines):
            text = lines[self.line - 1].expandtabs(1)
            col, length = self.col, self.length
            if len(text) > _LINE_WINDOW:  # keep the caret in view: a window of the line around it
                start = max(0, min(col - 1 - _LINE_WINDOW // 3, len(text) - _LINE_WINDOW))
                text = ("..." if start else "") + text[start:start + _LINE_WINDOW] + \
                    ("..." if start + _LINE_WINDOW < len(text) else "")
                col = col - start + (3 if start else 0)
                length = min(length, _LINE_WINDOW)
            text = "".join(c if c.isprintable() else "?" for c in text)
            out.append(f"    {text}")
            out.append("    " + " " * (col - 1) + "^" * max(1, min(length, len(text) - col + 1)))
        if self.hint:
            out.append(f"    hint: {self.hint}")
        return "\n".join(out)


# Source lines longer than this are shown as a window around the caret.
_LINE_WINDOW = 120


class UserError(Exception):
    """Bad user input (DSL, YAML, flags): one or more diagnostics, never a crash."""

    def __init__(self, diagnostics: Diagnostic | str | Sequence[Diagnostic], source: str = "",
                 filename: str = "<input>"):
        if isinstance(diagnostics, str):
            diagnostics = [Diagnostic(diagnostics)]
        elif isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics = list(diagnostics)
        self.source = source
        self.filename = filename
        super().__init__(self.format())

    def format(self) -> str:
        """Every diagnostic, up to the 'diagnostics shown' limit (then 'and N more')."""
        from .limits import DIAGNOSTICS

        try:
            shown = DIAGNOSTICS.value()
        except UserError:  # a malformed variable must not stop the error it limits from showing
            shown = DIAGNOSTICS.default
        lines = self.source.splitlines()
        body = "\n".join(d.format(lines, self.filename) for d in self.diagnostics[:shown])
        hidden = len(self.diagnostics) - shown
        if hidden > 0:
            body += (f"\n... and {hidden} more error{'s' if hidden > 1 else ''} not shown "
                     f"({DIAGNOSTICS.hint()})")
        if len(self.diagnostics) > 1:
            body += f"\n{len(self.diagnostics)} errors"
        return body

    def _repr_html_(self) -> str:
        import html

        return ('<pre style="color:#b00020;white-space:pre-wrap">'
                + html.escape(self.format()) + "</pre>")


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """'did you mean 'x'?' for the closest choice, or a list of valid choices."""
    choices = sorted(set(choices))
    if not choices:
        return ""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    if len(choices) <= 12:
        return "expected one of: " + ", ".join(choices)
    return ""
