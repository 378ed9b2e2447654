"""Minimising a failing program, and writing it down as a reproducer.

    small = shrink(gen.text, lambda text: "wrong" in check_program(text, "tpu", 0).classes())

`shrink` drops statements (with what depends on them), cuts a chain by turning an
intermediate into an input, lowers dimensions and dtypes, keeping each step only if the
program still parses and still fails the same way. `write_reproducer` writes one as an
`.acir` file headed by what was found, where.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

_DECL = re.compile(r"^\s*(input|param|tensor)\s+(\w+)\s*:\s*(\w+)\s*\[([^\]]*)\]\s*$")
_DEF = re.compile(r"^\s*(\w+)\s*(\[|=|\+=|max=)")
_OUTPUT = re.compile(r"^\s*output\s+(.*)$")
_WORD = re.compile(r"[A-Za-z_]\w*")


@dataclass
class _Line:
    kind: str                 # decl, stmt, output
    text: str
    name: str = ""
    reads: tuple[str, ...] = ()


def _lines(text: str) -> list[_Line]:
    lines = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if m := _DECL.match(line):
            lines.append(_Line("decl", line, m.group(2)))
        elif m := _OUTPUT.match(line):
            lines.append(_Line("output", line, "", tuple(n.strip() for n in m.group(1).split(","))))
        elif m := _DEF.match(line):
            rhs = line[m.end(1):]
            lines.append(_Line("stmt", line, m.group(1), tuple(dict.fromkeys(_WORD.findall(rhs)))))
        else:
            lines.append(_Line("other", line))
    return lines


def _render(lines: list[_Line]) -> str:
    """Text of `lines`, after dropping declarations nobody uses and outputs nobody defines."""
    defined = {ln.name for ln in lines if ln.kind == "stmt"}
    read = {r for ln in lines if ln.kind == "stmt" for r in ln.reads}
    out = []
    for ln in lines:
        if ln.kind == "decl":
            role = ln.text.split()[0]
            if (role == "tensor" and ln.name not in defined) or (role != "tensor" and ln.name not in read):
                continue
        if ln.kind == "output":
            names = [n for n in ln.reads if n in defined or n in read]
            if not names:
                continue
            out.append("output " + ", ".join(names))
            continue
        out.append(ln.text)
    return "\n".join(out) + "\n"


def _without(lines: list[_Line], name: str) -> list[_Line]:
    """Drop the statement defining `name` and every statement that (transitively) reads it."""
    gone = {name}
    kept = []
    for ln in lines:
        if ln.kind == "stmt" and (ln.name in gone or gone & set(ln.reads)):
            gone.add(ln.name)
            continue
        kept.append(ln)
    return kept


def _candidates(text: str):
    """Smaller variants of `text`, most reducing first (each may be invalid; the caller checks)."""
    from autocomp_jupyter.dsl import parse

    lines = _lines(text)
    stmts = [ln for ln in lines if ln.kind == "stmt"]
    for ln in reversed(stmts):                           # drop a statement and its dependents
        yield _render(_without(lines, ln.name))
    try:
        program = parse(text, "<shrink>")
    except Exception:  # noqa: BLE001
        program = None
    if program is not None:
        for ln in stmts:                                 # cut upstream: an intermediate becomes an input
            if not program.has_tensor(ln.name):
                continue
            t = program.tensor(ln.name)
            decl = _Line("decl", f"input {t.name}: {t.dtype}[{', '.join(map(str, t.shape))}]", t.name)
            new = [decl] + [l for l in lines if l is not ln and not (l.kind == "decl" and l.name == ln.name)]
            yield _render(new)
    dims = [int(d) for ln in lines if ln.kind == "decl" for d in _DECL.match(ln.text).group(4).split(",")]
    biggest = max(dims, default=1)
    for cap in sorted({1, 2, 3, 4, 6, 8, 12, 16, biggest // 2}, reverse=True):
        if cap < biggest and cap >= 1:
            yield _render([_cap(ln, cap) for ln in lines])
    for i, ln in enumerate(lines):                       # halve one declaration's dimensions
        if ln.kind == "decl":
            smaller = _cap(ln, None)
            if smaller.text != ln.text:
                yield _render(lines[:i] + [smaller] + lines[i + 1:])
    if any(ln.kind == "output" for ln in lines):
        yield _render([ln for ln in lines if ln.kind != "output"])
    if re.search(r":\s*(f16|bf16|i8|i32)\[", text):
        yield re.sub(r":\s*(f16|bf16|i8|i32)\[", ": f32[", text)


def _cap(ln: _Line, cap: int | None) -> _Line:
    """A declaration with every dimension above `cap` lowered to it (None: each halved)."""
    if ln.kind != "decl":
        return ln
    m = _DECL.match(ln.text)
    dims = [int(d) for d in m.group(4).split(",")]
    new = [min(d, cap) if cap is not None else max(1, d // 2) for d in dims]
    return _Line("decl", f"{m.group(1)} {m.group(2)}: {m.group(3)}[{', '.join(map(str, new))}]", ln.name)


def shrink(text: str, still_fails: Callable[[str], bool], max_attempts: int = 80,
           max_seconds: float = 90.0) -> str:
    """A smaller program for which `still_fails` holds (greedy; `text` if nothing smaller does)."""
    from autocomp_jupyter.dsl import parse
    from autocomp_jupyter.errors import UserError

    best, attempts, started, seen = text, 0, time.perf_counter(), {text}
    progress = True
    while progress and attempts < max_attempts and time.perf_counter() - started < max_seconds:
        progress = False
        for candidate in _candidates(best):
            if candidate in seen or len(candidate) > len(best) + 40:
                continue
            seen.add(candidate)
            try:
                parse(candidate, "<shrink>")
            except UserError:
                continue
            attempts += 1
            if still_fails(candidate):
                best, progress = candidate, True
                break
            if attempts >= max_attempts or time.perf_counter() - started >= max_seconds:
                break
    return best


def write_reproducer(out_dir: str | Path, stem: str, text: str, record: dict) -> Path:
    """`<stem>.acir` in `out_dir` with the failure as comments, and the JSON line appended
    to `failures.jsonl`."""
    import json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}.acir"
    header = [f"# fuzz_pipeline: {record['class']} on {record['preset']} at tune {record['tune']}"]
    header += ["# " + line for line in str(record["message"]).splitlines()[:4]]
    if record.get("where"):
        header.append(f"# where: {record['where']}")
    path.write_text("\n".join(header) + "\n" + text)
    with open(out / "failures.jsonl", "a") as f:
        f.write(json.dumps(dict(record, repro=str(path))) + "\n")
    return path
