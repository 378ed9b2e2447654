"""The documentation cannot drift from the code.

- every code block of the user guide runs: Python blocks execute (a page's blocks in order, in one
  namespace where `src` is the GEMM + ReLU of getting started and `res` its result on tpu),
  DSL blocks (```acir) parse — and those marked `<!-- error -->` give exactly the message shown
  in the ```text block after them —, YAML blocks load as the rule or target file they show, and
  every `autocomp ...` command line parses with the CLI's own parser;
- every flag of every `autocomp` command is in the command-line reference, every flag of the
  `%%autocomp` magic in the notebook guide, and every field of a report in the report reference;
- the package cites only documents the repository holds.

The site itself is built in strict mode, and its links checked, by `make test` (`make docs`).
"""
from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
GUIDE_PAGES = sorted([ROOT / "README.md", DOCS / "getting-started.md", *(DOCS / "guide").glob("*.md")])
FENCE = re.compile(r"(?:<!--\s*(?P<mark>[\w-]+)(?::\s*(?P<arg>[^>]*?))?\s*-->\n)?```(?P<lang>\w*)[^\n]*\n(?P<body>.*?)```",
                   re.S)
SRC = "input A: f32[256, 256]\ninput B: f32[256, 256]\nC = matmul(A, B)\nD = relu(C)\n"


def blocks(page: Path) -> list[dict]:
    """The page's fenced code blocks, in order: lang, body, and the `<!-- mark: arg -->` before it."""
    return [m.groupdict() for m in FENCE.finditer(page.read_text())]


@contextlib.contextmanager
def working_dir(path: Path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _run_python(page: Path, items: list[dict], tmp_path: Path) -> None:
    import autocomp_jupyter as autocomp

    namespace = {"autocomp": autocomp, "src": SRC, "__name__": "__docs__"}
    namespace["res"] = autocomp.optimize(SRC, target="tpu", tune=0)
    for i, block in enumerate(items):
        if block["lang"] != "python" or block["mark"] == "no-run":
            continue
        where = f"{page.relative_to(ROOT)}, python block {i}"
        code = compile(block["body"], where, "exec")
        if block["mark"] == "raises":
            with pytest.raises(Exception) as caught:
                exec(code, namespace)
            names = [c.__name__ for c in type(caught.value).__mro__]
            assert block["arg"].strip() in names, (where, caught.value)
        else:
            exec(code, namespace)


def _check_dsl(page: Path, items: list[dict]) -> None:
    import autocomp_jupyter as autocomp
    from autocomp_jupyter.dsl import parse

    for i, block in enumerate(items):
        if block["lang"] != "acir":
            continue
        where = f"{page.relative_to(ROOT)}, acir block {i}"
        if block["mark"] == "error":
            shown = items[i + 1]
            assert shown["lang"] == "text", f"{where}: an error example is followed by its message in a text block"
            with pytest.raises(autocomp.UserError) as caught:
                parse(block["body"], filename="prog.acir")
            assert str(caught.value).rstrip() == shown["body"].rstrip(), where
        else:
            parse(block["body"], filename="prog.acir")


def _check_yaml(page: Path, items: list[dict], tmp_path: Path) -> None:
    from autocomp_jupyter.accel.target import load_target
    from autocomp_jupyter.rules.engine import load_rules

    for i, block in enumerate(items):
        if block["lang"] != "yaml":
            continue
        path = tmp_path / f"block{i}.yaml"
        path.write_text(block["body"])
        if re.search(r"^memory:", block["body"], re.M):
            load_target(str(path))
        else:
            load_rules([str(path)])


def _check_command_lines(page: Path, items: list[dict]) -> None:
    from autocomp_jupyter.cli import build_parser

    parser = build_parser()
    for i, block in enumerate(items):
        if block["lang"] != "bash":
            continue
        text = block["body"].replace("\\\n", " ")
        for line in text.splitlines():
            line = re.split(r" #| [|>] ", line)[0].strip()   # no comment, pipe or redirection
            if not line.startswith("autocomp "):
                continue
            words = shlex.split(line)[1:]
            try:
                parser.parse_args(words)
            except SystemExit as exit_:
                if words == ["--version"] and exit_.code == 0:
                    continue
                pytest.fail(f"{page.relative_to(ROOT)}, bash block {i}: `{line}` does not parse ({exit_})")


@pytest.mark.parametrize("page", GUIDE_PAGES, ids=[p.stem for p in GUIDE_PAGES])
def test_every_code_block_of_the_user_guide_runs(page, tmp_path):
    items = blocks(page)
    langs = {b["lang"] for b in items}
    assert langs <= {"python", "acir", "text", "yaml", "bash", ""}, (page.name, langs)
    for example in (ROOT / "examples").glob("*.acir"):   # pages name the shipped examples
        (tmp_path / "examples").mkdir(exist_ok=True)
        (tmp_path / "examples" / example.name).write_text(example.read_text())
    with working_dir(tmp_path):
        _check_dsl(page, items)
        _check_yaml(page, items, tmp_path)
        _check_command_lines(page, items)
        _run_python(page, items, tmp_path)


def test_a_wrong_error_example_is_caught(tmp_path, monkeypatch):
    page = tmp_path / "p.md"
    page.write_text("<!-- error -->\n```acir\ninput A: f32[8]\nB = relux(A)\n```\n\n```text\nnot the message\n```\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError):
        _check_dsl(page, blocks(page))


def _option_strings(parser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings if s not in ("-h", "--help")}


def test_every_cli_command_and_flag_is_in_the_reference():
    import argparse

    from autocomp_jupyter.cli import build_parser

    text = (DOCS / "guide" / "cli.md").read_text()
    parser = build_parser()
    missing = [f"autocomp {flag}" for flag in _option_strings(parser) if f"`autocomp {flag}`" not in text]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, subparser in sub.choices.items():
        section = re.search(rf"^## `autocomp {command}\b.*?(?=^## |\Z)", text, re.S | re.M)
        if section is None:
            missing.append(f"the section of `autocomp {command}`")
            continue
        missing += [f"autocomp {command} {flag}" for flag in _option_strings(subparser)
                    if f"`{flag}" not in section.group(0)]
    assert not missing, f"not in docs/guide/cli.md: {missing}"


def test_every_magic_flag_is_in_the_notebook_guide():
    from autocomp_jupyter.magics import AutocompMagics

    text = (DOCS / "guide" / "notebook.md").read_text()
    flags = _option_strings(AutocompMagics.autocomp.parser)
    assert flags, "the magic's parser has flags"
    missing = sorted(f for f in flags if f"`{f}" not in text)
    assert not missing, f"not in docs/guide/notebook.md: {missing}"


# fields whose keys are data (memory levels, loop, kernel, datapath, term or pass names), not a schema
DATA_KEYED = {"bytes", "tiles", "extents", "annotations", "limits_s", "order_by_level", "configs_by_kernel", "energy_by_level",
              "kept_rules_schedule", "kernels", "datapaths_s", "ports_s", "tiled_runs", "points"}


def _fields(value, prefix: str = "") -> set[str]:
    """Every (dotted) field of a report: dict keys, list items' keys (as `name[]`)."""
    out = set()
    if isinstance(value, dict):
        for key, sub in value.items():
            out.add(prefix + key)
            if key not in DATA_KEYED or isinstance(sub, list):
                out |= _fields(sub, prefix + key + ".")
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        out |= _fields(value[0], prefix[:-1] + "[].")
    return out


def test_every_report_field_is_in_the_report_reference():
    import autocomp_jupyter as autocomp

    report = autocomp.optimize(SRC.replace("256", "64"), target="npu", tune=20, top=2).report
    assert report["kernels"] and report["tuning"]["top"] and report["rules"]
    text = (DOCS / "guide" / "report.md").read_text()
    fields = _fields(report)
    assert {"kernels[].metrics.pe_util", "tuning.top[].speedup_vs_rules", "limit.dram_s"} <= fields
    missing = sorted(f for f in fields if f"`{f.rsplit('.', 1)[-1].removesuffix('[]')}`" not in text)
    assert not missing, f"not in docs/guide/report.md: {missing}"


# --------------------------------------------------------------------------- citations


def _package_sources() -> list[Path]:
    """What ships: the package, the rule files, the JupyterLab extension's sources."""
    return sorted([*(ROOT / "autocomp_jupyter").rglob("*.py"), *(ROOT / "rules").glob("*.yaml"),
                   *(ROOT / "labextension" / "src").glob("*.ts")])


def test_the_package_cites_only_documents_the_repository_holds():
    """A comment or docstring that sends the reader to a document (`DESIGN §8`, the README's
    design notes, a docs page) names one this repository has."""
    cited = re.compile(r"\bDESIGN(?:\.md)?\s*§|\bdesign notes\b|docs/[\w/.-]+\.md")
    problems = []
    for path in _package_sources():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for m in cited.finditer(line):
                name = m.group(0)
                target = ROOT / ("DESIGN.md" if name.startswith("DESIGN") else
                                 "README.md#design-notes" if name == "design notes" else name)
                if not target.exists():
                    problems.append(f"{path.relative_to(ROOT)}:{n}: {name}")
    assert not problems, f"{len(problems)} citations of documents the repository lacks: " + "; ".join(problems)
