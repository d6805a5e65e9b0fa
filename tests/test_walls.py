"""The walls of the house, proven statically: every import in the source, at any depth.

A scan of the syntax tree, not of `sys.modules` after an import: an import inside a
function body, an `if TYPE_CHECKING:` block or a branch that never runs in the test is
still found, and so is `importlib.import_module("…")` with a literal name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT

# package → the modules it must never import (a name or a dotted prefix; "=name" is that
# module alone, not its submodules)
WALLS = {
    # The engine knows nothing above it: not the console, not the public package's top
    # (`from replaylog import …`), not the client or the command line, not Textual.
    "replaylog.engine": ("=replaylog", "replaylog.console", "replaylog.cli", "replaylog.client",
                         "replaylog.worker", "replaylog.demo", "replaylog.testing", "replaylog.samples", "textual"),
    # The console reads and writes through the store; it never runs workflows, and the
    # command line above it is the one place that knows both.
    "replaylog.console": ("replaylog.engine.worker", "replaylog.cli", "replaylog.demo"),
    # A backend is a package beside the other, never built on it; what both need is in shared/.
    "replaylog.engine.store.postgres": ("replaylog.engine.store.sqlite",),
    "replaylog.engine.store.sqlite": ("replaylog.engine.store.postgres",),
    "replaylog.engine.store.shared": ("replaylog.engine.store.sqlite", "replaylog.engine.store.postgres"),
    # User code: the public package only (`from replaylog import …`).
    "replaylog.samples": ("replaylog.engine", "replaylog.console"),
}


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _literal_import(call: ast.Call) -> str | None:
    """The module of `importlib.import_module("a.b")` or `__import__("a")` with a literal name."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    first = call.args[0] if call.args else None
    if name in ("import_module", "__import__") and isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def imported_modules(path: Path, root: Path = ROOT) -> Iterator[tuple[int, str]]:
    """Yield (line, absolute module name) for every import in a file, at any depth.

    `from a import b` yields both `a` and `a.b` (b may be a submodule); relative
    imports are resolved against the file's package.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path, root)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(p for p in [*parts[: len(parts) - (node.level - 1)], base] if p)
            if base:
                yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}" if base else alias.name
        elif isinstance(node, ast.Call) and (module := _literal_import(node)) is not None:
            yield node.lineno, module


def breaches(package: str, forbidden: tuple[str, ...], root: Path = ROOT) -> list[str]:
    """Every import in `package` of a forbidden module, as "file:line module"."""
    found = []
    for path in sorted((root / package.replace(".", "/")).rglob("*.py")):
        for line, module in imported_modules(path, root):
            if any(module == bad.lstrip("=") or (not bad.startswith("=") and module.startswith(bad + "."))
                   for bad in forbidden):
                found.append(f"{path.relative_to(root)}:{line} {module}")
    return sorted(set(found))


@pytest.mark.parametrize("package", sorted(WALLS))
def test_no_package_imports_across_its_wall(package: str) -> None:
    assert (ROOT / package.replace(".", "/") / "__init__.py").exists()
    found = breaches(package, WALLS[package])
    assert not found, f"{package} imports across its wall:\n" + "\n".join(found)


def test_the_scan_finds_imports_at_any_depth(tmp_path: Path) -> None:
    pkg = tmp_path / "replaylog" / "engine"
    (pkg / "store").mkdir(parents=True)
    (tmp_path / "replaylog" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "store" / "__init__.py").write_text("from ...console import app\n")  # relative, past the top
    (pkg / "worker.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import textual.app\n"
        "def later():\n    from replaylog.cli import main\n    return main\n"
        "def dynamic():\n    import importlib\n    return importlib.import_module('replaylog.console.app')\n"
        "from replaylog.engine import core\n"
        "from replaylog import workflow\n"
    )
    assert breaches("replaylog.engine", WALLS["replaylog.engine"], root=tmp_path) == [
        "replaylog/engine/store/__init__.py:1 replaylog.console",
        "replaylog/engine/store/__init__.py:1 replaylog.console.app",
        "replaylog/engine/worker.py:11 replaylog",
        "replaylog/engine/worker.py:3 textual.app",
        "replaylog/engine/worker.py:5 replaylog.cli",
        "replaylog/engine/worker.py:5 replaylog.cli.main",
        "replaylog/engine/worker.py:9 replaylog.console.app",
    ]
    (pkg.parent / "console").mkdir()
    (pkg.parent / "console" / "data.py").write_text("def run():\n    from replaylog.engine import worker\n")
    assert breaches("replaylog.console", WALLS["replaylog.console"], root=tmp_path) == [
        "replaylog/console/data.py:2 replaylog.engine.worker"]


# The database drivers: named only inside the store, which turns their errors into its own.
DRIVERS = ("sqlite3", "psycopg", "psycopg_pool")


def driver_names(root: Path = ROOT) -> list[str]:
    """Every import or use of a driver's name in replaylog/ outside replaylog/engine/store/, as "file:line name"."""
    found = []
    store = root / "replaylog" / "engine" / "store"
    for path in sorted((root / "replaylog").rglob("*.py")):
        if store in path.parents:
            continue
        for line, module in imported_modules(path, root):
            if module.split(".")[0] in DRIVERS:
                found.append(f"{path.relative_to(root)}:{line} {module}")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name) and node.id in DRIVERS:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.id}")
    return sorted(set(found))


def test_no_code_outside_the_store_names_a_database_driver() -> None:
    found = driver_names()
    assert not found, "a driver named outside replaylog/engine/store:\n" + "\n".join(found)


def test_the_driver_scan_finds_imports_and_names(tmp_path: Path) -> None:
    (tmp_path / "replaylog" / "engine" / "store").mkdir(parents=True)
    (tmp_path / "replaylog" / "engine" / "store" / "ok.py").write_text("import sqlite3\n")
    (tmp_path / "replaylog" / "worker.py").write_text(
        "def f(sqlite3):\n    try:\n        pass\n    except sqlite3.Error:\n        pass\n"
        "def g():\n    from psycopg import errors\n")
    assert driver_names(tmp_path) == ["replaylog/worker.py:4 sqlite3", "replaylog/worker.py:7 psycopg",
                                      "replaylog/worker.py:7 psycopg.errors"]
