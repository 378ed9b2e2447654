"""The host analysis sits below both of its readers: `host_strategy` imports only the IR, and
the cost model (`accel`) imports nothing from code generation — it times the C through the same
analysis the generator writes it from (import graph: tests/test_structure.py)."""
from __future__ import annotations

from test_structure import NAME, import_graph


def test_accel_imports_nothing_from_codegen():
    graph = import_graph(deferred=True)
    accel = {m: targets for m, targets in graph.items() if m.startswith(f"{NAME}.accel")}
    assert f"{NAME}.accel.host_model" in accel
    for module, targets in accel.items():
        assert not {t for t in targets if t.startswith(f"{NAME}.codegen")}, module


def test_host_strategy_imports_only_the_ir():
    graph = import_graph(deferred=True)
    strategy = {m: targets for m, targets in graph.items() if m.startswith(f"{NAME}.host_strategy")}
    assert f"{NAME}.host_strategy.contraction" in strategy
    for module, targets in strategy.items():
        outside = {t for t in targets if not t.startswith((f"{NAME}.host_strategy", f"{NAME}.ir"))}
        assert not outside, (module, sorted(outside))
    # and both readers take it from there
    assert any(t.startswith(f"{NAME}.host_strategy") for t in graph[f"{NAME}.accel.host_model"])
    assert any(t.startswith(f"{NAME}.host_strategy") for t in graph[f"{NAME}.codegen.c.kernel"])
