"""The worker's modules compiled by mypyc (engine.worker.native), and the sources run where they must.

The rest of the suite runs on whichever path the install built (compiled, where `make test`
installed with mypy and a C compiler); test_speedups.py runs the worker's tests again with
REPLAYLOG_PURE_PYTHON=1, on the sources.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import replaylog
from replaylog.engine.compiled import PURE_ENV
from replaylog.engine.worker import committer, native, run

PACKAGE = Path(replaylog.__file__).resolve().parent
WORKER = PACKAGE / "engine" / "worker"
# Where the modules are loaded from, and the path `--version` names, in a process of its own.
_PROBE = ("import replaylog.engine.worker.run as r, replaylog.engine.worker.committer as c;"
          " from replaylog.engine.worker.native import worker_path;"
          " print(r.__file__.endswith('.py'), c.__file__.endswith('.py'), worker_path(), sep='|')")


def _can_build() -> bool:
    """What setup.py needs to compile them: a C compiler and Python's headers (mypy is a build requirement)."""
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return headers.exists() and any(shutil.which(cc) for cc in ("cc", "gcc", "clang"))


def _built() -> bool:
    return (WORKER / native.MANIFEST).exists()


def _probe(pythonpath: Path | None = None, pure: str = "") -> list[str]:
    env = {**os.environ, PURE_ENV: pure}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, cwd=pythonpath or PACKAGE.parent,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip().split("|")


def test_the_worker_modules_are_compiled_where_a_compiler_is() -> None:
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        pytest.skip(f"{PURE_ENV} turns the compiled paths off in this run")
    if not _can_build():
        pytest.skip("no C compiler or no Python headers on this machine: the worker's modules stay pure Python")
    # `make test` installs with mypy and a compiler: a build that silently fell back would
    # leave the compiled worker untested here.
    assert native.worker_path() == "compiled", native.worker_path()
    assert not (run.__file__ or "").endswith(".py") and not (committer.__file__ or "").endswith(".py")


def test_the_environment_runs_the_sources() -> None:
    if not _built():
        pytest.skip("the worker's modules were not compiled at install")
    assert _probe(pure="1") == ["True", "True", f"pure Python ({PURE_ENV} is set)"]
    assert _probe(pure="") == ["False", "False", "compiled"]


def test_a_changed_source_runs_instead_of_the_compiled_module_and_so_do_the_others(tmp_path: Path) -> None:
    if not _built():
        pytest.skip("the worker's modules were not compiled at install")
    # A copy of the installed package, built modules and all, whose committer.py is then edited.
    shutil.copytree(PACKAGE, tmp_path / "replaylog", ignore=shutil.ignore_patterns("__pycache__"))
    assert _probe(tmp_path) == ["False", "False", "compiled"]
    source = tmp_path / "replaylog" / "engine" / "worker" / "committer.py"
    source.write_text(source.read_text() + "\n# an edit after the install\n")
    # run.py is unchanged, but its compiled module would start the compiled committer: both run from source.
    assert _probe(tmp_path) == [
        "True", "True", "pure Python (committer.py changed since it was compiled: reinstall to compile it again)"]


def test_without_the_record_of_what_was_compiled_the_sources_run(tmp_path: Path) -> None:
    if not _built():
        pytest.skip("the worker's modules were not compiled at install")
    shutil.copytree(PACKAGE, tmp_path / "replaylog", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "replaylog" / "engine" / "worker" / native.MANIFEST).unlink()
    assert _probe(tmp_path)[:2] == ["True", "True"]


def test_with_nothing_compiled_the_sources_run_without_a_reason_invented(tmp_path: Path) -> None:
    shutil.copytree(PACKAGE, tmp_path / "replaylog",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", native.MANIFEST))
    assert _probe(tmp_path) == [
        "True", "True", "pure Python (not compiled at install: no mypy or no C compiler then)"]
