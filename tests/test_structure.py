"""The package's import structure: no import cycles, and the layers import downwards only.

The graph is built by walking every module's AST (no imports are executed): an edge
`a -> b` for each `import` / `from ... import` of a package module in `a`, at module level
or inside a function (a deferred import runs too, only later). Imports under
`if TYPE_CHECKING:` are left out: they never run. `from .x import name` is an edge to
`x.name` when that is a module, else to `x`.

Layers, bottom up: `ir` (Program, Kernel, Schedule, loop nest, Plan) ← `accel` (targets,
cost model) ← `passes`, `report`, `variants` ← `rules`, `tune`, `baselines` ← `result` ←
`pipeline`; `ui` reads a Result (duck-typed) and the report, and never runs the pipeline.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "autocomp_jupyter"
NAME = PACKAGE.name

# Cycles through deferred imports that are known and deliberate (each closes only at call
# time, never while a module is being imported):
KNOWN_DEFERRED_CYCLES = {
    # Schedule.loop_nest() lowers through loopnest, which builds on Schedule.
    frozenset({f"{NAME}.ir.schedule", f"{NAME}.ir.loopnest"}),
    # UserError's rendering reads the diagnostic limits; limits raise UserError.
    frozenset({f"{NAME}.errors", f"{NAME}.limits"}),
    # load_ipython_extension imports the magics; the magic calls `autocomp_jupyter.optimize`
    # at run time, so a wrapped optimize (tests, users) is the one it runs.
    frozenset({NAME, f"{NAME}.magics"}),
}
# The modules issue 15 untangled: they may be in no cycle at all, deferred imports included.
LAYERED = ("result", "report", "passes", "variants", "pipeline", "ir.plan", "ui")


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _targets(module: str, is_package: bool, node: ast.AST, modules: dict) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[:len(base) - node.level + 1]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix for a in node.names]
    out = []
    for name in names:
        if name.split(".")[0] != NAME:
            continue
        while name not in modules and "." in name:  # `import pkg.mod.attr` → pkg.mod
            name = name.rsplit(".", 1)[0]
        out.append(name)
    return out


def import_graph(deferred: bool) -> dict[str, set[str]]:
    """{module: modules it imports}; with `deferred`, imports inside functions count too."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        type_only = {id(n) for top in ast.walk(tree)
                     if isinstance(top, ast.If) and "TYPE_CHECKING" in ast.unparse(top.test)
                     for n in ast.walk(top)}
        nodes = []
        pending = list(tree.body)
        while pending:  # module level: top statements and the bodies of if / try / with blocks
            stmt = pending.pop()
            if deferred or not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                nodes.append(stmt)
                pending.extend(ast.iter_child_nodes(stmt))
            elif isinstance(stmt, ast.ClassDef):  # a class body runs at import; its methods do not
                pending.extend(s for s in stmt.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)))
        graph[module] = {t for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in type_only
                         for t in _targets(module, is_package, n, modules) if t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _layered(module: str) -> bool:
    return any(module == f"{NAME}.{m}" or module.startswith(f"{NAME}.{m}.") for m in LAYERED)


def test_the_graph_sees_known_edges():
    """The walker itself: it finds module-level, deferred and `from . import x` edges."""
    top, every = import_graph(deferred=False), import_graph(deferred=True)
    assert f"{NAME}.ir.plan" in top[f"{NAME}.result"]
    assert f"{NAME}.ui" in every[f"{NAME}.result"] and f"{NAME}.ui" not in top[f"{NAME}.result"]
    assert f"{NAME}.variants" in every[f"{NAME}.result"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]


def test_no_import_cycle_at_module_level():
    assert cycles(import_graph(deferred=False)) == []


def test_no_import_cycle_with_deferred_imports_beyond_the_known_ones():
    found = cycles(import_graph(deferred=True))
    assert set(found) <= KNOWN_DEFERRED_CYCLES, [sorted(c) for c in found if c not in KNOWN_DEFERRED_CYCLES]
    assert not [sorted(c) for c in found if any(_layered(m) for m in c)]


def test_layers_import_downwards():
    graph = import_graph(deferred=True)
    ui = {m for m in graph if m == f"{NAME}.ui" or m.startswith(f"{NAME}.ui.")}
    for low in ("ir.plan", "ir.program", "ir.schedule", "passes", "report", "variants"):
        up = graph[f"{NAME}.{low}"] & ({f"{NAME}.result", f"{NAME}.pipeline"} | ui)
        assert not up, f"{low} imports {sorted(up)}"
    for module in ui:
        assert not graph[module] & {f"{NAME}.pipeline", f"{NAME}.passes", f"{NAME}.result"}, module
    # Only the Tune tab scores variants and generates their code (compare.py: A/B); every other
    # view reads what the pipeline computed.
    for module in ui - {f"{NAME}.ui.compare", f"{NAME}.ui.live"}:
        assert not graph[module] & {f"{NAME}.accel.cost", f"{NAME}.codegen", f"{NAME}.variants"}, module


def test_importing_the_ir_does_not_import_the_ui():
    code = ("import sys, autocomp_jupyter.ir as ir; "
            "assert ir.Plan and ir.Program and ir.Schedule; "
            "ui = [m for m in sys.modules if m.startswith('autocomp_jupyter.ui')]; "
            "assert not ui, ui")
    done = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_plan_is_still_importable_from_result():
    from autocomp_jupyter.ir.plan import Plan
    from autocomp_jupyter.result import Plan as FromResult

    assert FromResult is Plan


@pytest.mark.parametrize("module", ["result", "report", "passes", "variants"])
def test_each_layered_module_has_a_docstring_saying_what_it_owns(module):
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    assert len(ast.get_docstring(tree) or "") > 80
