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

# package → the top-level packages and modules it must never import (a name or a dotted prefix)
WALLS = {
    # The engine knows nothing above it: not the console, not the command line, not Textual.
    "engine": ("console", "replaylog", "textual"),
    # The console reads and writes through the store; it never runs workflows, and the
    # command line above it (replaylog) is the one place that knows both.
    "console": ("engine.worker", "replaylog"),
    # User code: the public package only (`from replaylog import …`).
    "sample_workflows": ("engine", "console"),
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
    for path in sorted((root / package).rglob("*.py")):
        for line, module in imported_modules(path, root):
            if any(module == bad or module.startswith(bad + ".") for bad in forbidden):
                found.append(f"{path.relative_to(root)}:{line} {module}")
    return sorted(set(found))


@pytest.mark.parametrize("package", sorted(WALLS))
def test_no_package_imports_across_its_wall(package: str) -> None:
    assert (ROOT / package / "__init__.py").exists()
    found = breaches(package, WALLS[package])
    assert not found, f"{package} imports across its wall:\n" + "\n".join(found)


def test_the_scan_finds_imports_at_any_depth(tmp_path: Path) -> None:
    pkg = tmp_path / "engine"
    (pkg / "store").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "store" / "__init__.py").write_text("from ... import console\n")  # relative, past the top
    (pkg / "worker.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import textual.app\n"
        "def later():\n    from replaylog.cli import main\n    return main\n"
        "def dynamic():\n    import importlib\n    return importlib.import_module('console.app')\n"
        "from engine import core\n"
    )
    assert breaches("engine", WALLS["engine"], root=tmp_path) == [
        "engine/store/__init__.py:1 console",
        "engine/worker.py:3 textual.app",
        "engine/worker.py:5 replaylog.cli",
        "engine/worker.py:5 replaylog.cli.main",
        "engine/worker.py:9 console.app",
    ]
    (tmp_path / "console").mkdir()
    (tmp_path / "console" / "data.py").write_text("def run():\n    from engine import worker\n")
    assert breaches("console", WALLS["console"], root=tmp_path) == ["console/data.py:2 engine.worker"]
