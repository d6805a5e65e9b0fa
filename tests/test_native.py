"""The per-slot modules compiled by mypyc (engine.native), and their sources run where they must.

The rest of the suite runs on whichever path the install built (compiled, where `make test`
installed with mypy and a C compiler); test_speedups.py runs the store's, the mark file's and
the worker's tests again with REPLAYLOG_PURE_PYTHON=1, on the sources.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import replaylog
from conftest import can_build
from replaylog.engine import native
from replaylog.engine.compiled import PURE_ENV

PACKAGE = Path(replaylog.__file__).resolve().parent
RECORD = PACKAGE / "engine" / native.MANIFEST
# Whether each module was loaded from its source, then the path `--version` names, in a process of its own.
_PROBE = ("import importlib, replaylog.engine.native as n;"
          f" mods = [importlib.import_module(m) for m in {native.MODULES!r}];"
          " print(*[m.__file__.endswith('.py') for m in mods], n.compiled_path(), sep='|')")
ALL_SOURCES = ["True"] * len(native.MODULES)
ALL_COMPILED = ["False"] * len(native.MODULES)



def _probe(pythonpath: Path | None = None, pure: str = "") -> list[str]:
    env = {**os.environ, PURE_ENV: pure}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, cwd=pythonpath or PACKAGE.parent,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip().split("|")


def _copy(tmp_path: Path, *ignore: str) -> Path:
    """A copy of the installed package (its compiled modules too, unless ignored) to import from `tmp_path`."""
    shutil.copytree(PACKAGE, tmp_path / "replaylog", ignore=shutil.ignore_patterns("__pycache__", *ignore))
    return tmp_path


needs_built = pytest.mark.skipif(not RECORD.exists(), reason="the per-slot modules were not compiled at install")


def test_the_per_slot_modules_are_compiled_where_a_compiler_is() -> None:
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        pytest.skip(f"{PURE_ENV} turns the compiled paths off in this run")
    if not can_build():
        pytest.skip("no C compiler or no Python headers on this machine: the per-slot modules stay pure Python")
    # `make test` installs with mypy and a compiler: a build that silently fell back would
    # leave the compiled modules untested here.
    assert native.compiled_path() == "compiled"
    for name in native.MODULES:
        assert not (importlib.import_module(name).__file__ or "").endswith(".py"), name


@needs_built
def test_the_environment_runs_the_sources() -> None:
    assert _probe(pure="1") == [*ALL_SOURCES, f"pure Python ({PURE_ENV} is set)"]
    assert _probe(pure="") == [*ALL_COMPILED, "compiled"]


@needs_built
def test_a_changed_source_runs_instead_of_its_compiled_module_and_so_do_the_others(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    assert _probe(root) == [*ALL_COMPILED, "compiled"]
    source = root / "replaylog" / "engine" / "worker" / "committer.py"
    source.write_text(source.read_text() + "\n# an edit after the install\n")
    # run.py is unchanged, but its compiled module would start the compiled committer: all run from source.
    assert _probe(root) == [*ALL_SOURCES, "pure Python (replaylog/engine/worker/committer.py changed since it"
                                          " was compiled: reinstall to compile it again)"]


@needs_built
def test_without_the_record_of_what_was_compiled_the_sources_run(tmp_path: Path) -> None:
    root = _copy(tmp_path, native.MANIFEST)
    assert _probe(root)[:-1] == ALL_SOURCES


def test_with_nothing_compiled_the_sources_run_without_a_reason_invented(tmp_path: Path) -> None:
    root = _copy(tmp_path, "*.so", "*.pyd", native.MANIFEST)
    assert _probe(root) == [*ALL_SOURCES, "pure Python (not compiled at install: no mypy or no C compiler then)"]
