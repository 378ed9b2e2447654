"""MkDocs hooks: the pages generated from the code at build time, so they cannot drift.

- the API reference: one page per module of `autocomp_jupyter`, found by walking the package
  (a module moved or added shows up without editing a list), rendered by mkdocstrings;
- the tutorials: the course notebooks as a student sees them after Run All, blank exercises and
  all. tests/test_tutorials.py keeps an executed copy of each in build/tutorials/; a copy that is
  missing or older than its notebook is executed here (tutorials/solutions/fill.py);
- the ONNX op table, from the importer's handlers (`<!-- onnx-op-table -->` in a page);
- diagrams: every `docs/**/*.dot` (Graphviz) rendered to the `.svg` beside it.
"""
from __future__ import annotations

import importlib
import inspect
import logging
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "autocomp_jupyter"
API_TITLE = "API reference"
TUTORIALS_TITLE = "Tutorials"
log = logging.getLogger("mkdocs.hooks.autocomp")

sys.path.insert(0, str(ROOT / "tutorials" / "solutions"))
import fill  # noqa: E402  (tutorials/solutions/fill.py)


# --------------------------------------------------------------------------- API reference


def package_modules() -> list[str]:
    """Every module of the package, dotted, in path order (private modules and data left out)."""
    base = ROOT / PACKAGE
    names = []
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if any(p.startswith("_") and p != "__init__" for p in parts) or "labextension" in parts:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


def api_page(module: str) -> str:
    return f"reference/{module.replace('.', '/')}.md"


def api_nav(modules: list[str]) -> list:
    """Nested navigation: a package's page first, then its modules."""
    tree: dict = {}
    for module in modules:
        node = tree
        for part in module.split(".")[1:]:
            node = node.setdefault(part, {})
    def walk(prefix: str, node: dict) -> list:
        items = []
        for name, children in node.items():
            dotted = f"{prefix}.{name}"
            if children:
                items.append({name: [{f"{name} (package)": api_page(dotted)}] + walk(dotted, children)})
            else:
                items.append({name: api_page(dotted)})
        return items
    return ["reference/index.md", {PACKAGE: api_page(PACKAGE)}] + walk(PACKAGE, tree)


# --------------------------------------------------------------------------- tutorials


def tutorial_paths() -> list[Path]:
    return sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.ipynb"))


def execute_blank(path: Path) -> None:
    """Run tutorial `path` blank and keep the executed copy in build/tutorials/."""
    import nbformat

    log.info("executing %s for the docs (no up-to-date copy in build/tutorials/)", path.name)
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as scratch:
        fill.execute(nb, Path(scratch) / "tutorials")
    fill.save_executed(nb, path)


def executed_tutorials(paths: list[Path]) -> list[Path]:
    """The executed blank copies of the tutorials; the missing or stale ones run now, side by
    side (each in its own kernel)."""
    stale = [p for p in paths if fill.fresh_executed(p) is None]
    if stale:
        fill.kernel_path()
        with ThreadPoolExecutor(max_workers=max(1, min(len(stale), os.cpu_count() or 1))) as pool:
            list(pool.map(execute_blank, stale))
    return [fill.executed_path(p) for p in paths]


def tutorial_title(path: Path) -> str:
    import nbformat

    first = nbformat.read(path, as_version=4).cells[0].source.splitlines()[0]
    return first.lstrip("# ").strip()


# --------------------------------------------------------------------------- ONNX op table


def onnx_op_table() -> str:
    """The ONNX op types the importer handles (one `op_<OpType>` method each), grouped by the
    family module that holds the handler, with what that module's docstring says it imports."""
    from autocomp_jupyter.onnx_importer.importer import SUPPORTED_OPS, _Importer

    families: dict[str, list[str]] = {}
    for op in SUPPORTED_OPS:
        families.setdefault(getattr(_Importer, "op_" + op).__module__, []).append(op)
    rows = [f"{len(SUPPORTED_OPS)} op types in {len(families)} families.", "",
            "| family | what it imports | ONNX op types |", "|---|---|---|"]
    for module, ops in sorted(families.items()):
        doc = inspect.getdoc(importlib.import_module(module)) or ""
        summary = " ".join(doc.split("\n\n")[0].split()).replace("|", "/")
        rows.append(f"| `{module.rsplit('.', 1)[-1]}` | {summary} | {', '.join(f'`{o}`' for o in ops)} |")
    return "\n".join(rows)


# --------------------------------------------------------------------------- hooks


def on_config(config):
    """Fill the navigation's API reference and Tutorials sections from the code."""
    modules = package_modules()
    config["extra"]["api_modules"] = modules
    for item in config["nav"]:
        if isinstance(item, dict) and API_TITLE in item:
            item[API_TITLE] = api_nav(modules)
        if isinstance(item, dict) and TUTORIALS_TITLE in item:
            given = [x for x in item[TUTORIALS_TITLE] if not (isinstance(x, str) and x.endswith(".ipynb"))]
            item[TUTORIALS_TITLE] = given + [{tutorial_title(p): f"tutorials/{p.name}"} for p in tutorial_paths()]
    return config


@event_priority(50)  # before mkdocs-jupyter turns .ipynb files into pages
def on_files(files, config):
    for module in config["extra"]["api_modules"]:
        files.append(File.generated(config, api_page(module), content=api_markdown(module)))
    files.append(File.generated(config, "reference/index.md", content=api_index(config["extra"]["api_modules"])))
    for dot in sorted(Path(config["docs_dir"]).rglob("*.dot")):
        svg = subprocess.run(["dot", "-Tsvg", str(dot)], check=True, capture_output=True, text=True).stdout
        uri = dot.relative_to(config["docs_dir"]).with_suffix(".svg").as_posix()
        files.append(File.generated(config, uri, content=svg))
    paths = tutorial_paths()
    for path, executed in zip(paths, executed_tutorials(paths)):  # build/tutorials/NAME.ipynb as tutorials/NAME.ipynb
        # a File rooted in build/, not File.generated: mkdocs-jupyter's wrapper finds the source
        # through src_dir, which a generated file lacks
        files.append(File(f"tutorials/{path.name}", src_dir=str(executed.parent.parent),
                          dest_dir=config["site_dir"], use_directory_urls=config["use_directory_urls"]))
    return files


def api_markdown(module: str) -> str:
    return f"# `{module}`\n\n::: {module}\n"


def api_index(modules: list[str]) -> str:
    lines = ["# API reference", "",
             "Generated from the docstrings of every module of the package at build time. The public entry",
             "points are `autocomp_jupyter.optimize`, `autocomp_jupyter.explore`, the `Result` they return and",
             "`autocomp_jupyter.adrs_rule`; the [Python API](../guide/python-api.md) page shows them in use.", "",
             "| module | what it owns |", "|---|---|"]
    for module in modules:
        try:
            doc = inspect.getdoc(importlib.import_module(module)) or ""
        except Exception as err:  # an optional dependency missing: the page still lists it
            doc = f"(not importable here: {type(err).__name__})"
        summary = " ".join(doc.split("\n\n")[0].split()).replace("|", "/")
        lines.append(f"| [`{module}`]({api_page(module).removeprefix('reference/')}) | {summary} |")
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown, page, config, files):
    if "<!-- onnx-op-table -->" in markdown:
        markdown = markdown.replace("<!-- onnx-op-table -->", onnx_op_table())
    return markdown
