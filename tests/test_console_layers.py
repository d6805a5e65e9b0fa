"""The console's layers, read from its source: one data layer, and imports that only point one way."""

from __future__ import annotations

import ast
from pathlib import Path

CONSOLE = Path(__file__).resolve().parent.parent / "replaylog" / "console"


def _imports(path: Path) -> set[str]:
    """Every module a file imports, wherever the import stands (functions and TYPE_CHECKING blocks too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _console_graph() -> dict[str, set[str]]:
    modules = {f"replaylog.console.{p.stem}": p for p in CONSOLE.glob("*.py") if p.stem != "__init__"}
    return {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}


STORE_SIDE = ("replaylog.engine.store.", "replaylog.engine.check", "replaylog.engine.core")


def test_only_the_data_layer_touches_the_store() -> None:
    touching = sorted(name for name, path in ((f"replaylog.console.{p.stem}", p) for p in CONSOLE.glob("*.py"))
                      if any(m == "replaylog.engine.store" or m.startswith(STORE_SIDE) for m in _imports(path)))
    assert touching == ["replaylog.console.data"]


def test_no_screen_imports_the_app_and_console_imports_have_no_circle() -> None:
    graph = _console_graph()
    assert sorted(name for name, deps in graph.items() if "replaylog.console.app" in deps) == []
    # A depth-first walk: a module met again while its own imports are being walked closes a circle.
    state: dict[str, str] = {}
    circles: list[str] = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for dep in sorted(graph[name]):
            if state.get(dep) == "open":
                circles.append(" -> ".join([*path[path.index(dep):], dep]))
            elif dep not in state:
                visit(dep, [*path, dep])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert circles == []
