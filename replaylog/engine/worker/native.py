"""The worker's compiled modules, optional: `run.py` and `committer.py` compiled by mypyc where the install could.

The per-slot glue between the replay core and the store (the run's `record` and
`on_start`, the committer's lone-workflow path) is ~210 of the ~670 Python bytecodes a slot
runs. setup.py compiles these two modules with mypyc, from these very sources, where mypy
and a C compiler are at hand at install: callgrind, one workflow of 2,000 and 6,000 slots
(`make bench-instructions`), 55,600 -> 50,800 CPU instructions a slot (docs/performance.md,
"The compiled path").

A compiled module (`run.cpython-311-….so`) sits beside its source and Python's import
prefers it. This module's finder, installed by the worker package before either is
imported, loads the source instead where:

- REPLAYLOG_PURE_PYTHON is set (engine.compiled): the pure-Python path, as for the C files;
- the source changed since it was compiled: setup.py records each source's SHA-256 beside
  the compiled modules (`_native_sources.txt`), and a source that no longer matches runs as
  it is now, never the older compiled code (an edit in a checkout installed with
  `pip install -e .` runs at once; the next install compiles it again).

`worker_path()` says which path runs (`replaylog --version`).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from replaylog.engine.compiled import PURE_ENV, pure_requested

# The modules setup.py compiles (the same list, as paths, is there).
MODULES = ("replaylog.engine.worker.run", "replaylog.engine.worker.committer")
# Written by setup.py beside the compiled modules: "<file name> <SHA-256 of the source compiled>" a line.
MANIFEST = "_native_sources.txt"

# Why a module was loaded from its source where a compiled one was built (for `--version`).
_why: dict[str, str] = {}


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _compiled_beside(directory: str, leaf: str) -> bool:
    return any(os.path.exists(os.path.join(directory, leaf + suffix))
               for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def _recorded(directory: str) -> dict[str, str]:
    try:
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
            return dict(line.split(" ", 1) for line in f.read().splitlines() if " " in line)
    except OSError:
        return {}


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Loads a compiled module's source instead where it must (see the module's docstring); else leaves it."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES or not path:
            return None
        leaf = fullname.rpartition(".")[2]
        for directory in path:
            source = os.path.join(directory, leaf + ".py")
            if not os.path.exists(source):
                continue
            if not _compiled_beside(directory, leaf):
                return None  # nothing was compiled: the ordinary import loads the source
            why = _sources_needed(directory)
            if why is None:
                return None  # the ordinary import loads the compiled module
            _why[fullname] = why
            return importlib.util.spec_from_file_location(fullname, source)
        return None


def _sources_needed(directory: str) -> str | None:
    """Why the modules in `directory` must run from their sources, or None: the compiled ones may run.

    One answer for all of them: a compiled module initialises the others of its build from
    the shared library, without an import, so none may run compiled if one may not.
    """
    if pure_requested():
        return f"{PURE_ENV} is set"
    recorded = _recorded(directory)
    for name in MODULES:
        leaf = name.rpartition(".")[2] + ".py"
        try:
            changed = recorded.get(leaf) != _digest(os.path.join(directory, leaf))
        except OSError:
            changed = True
        if changed:
            return f"{leaf} changed since it was compiled: reinstall to compile it again"
    return None


_FINDER = _SourceFinder()


def install() -> None:
    """Put the finder first on `sys.meta_path`, once per process (the worker package does, before importing)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def worker_path() -> str:
    """Which path the worker's per-slot modules take here: "compiled", or "pure Python (why)" (`--version`)."""
    loaded = [sys.modules.get(name) for name in MODULES]
    if all(m is not None and not (m.__file__ or "").endswith(".py") for m in loaded):
        return "compiled"
    why = next((_why[name] for name in MODULES if name in _why), None)
    return f"pure Python ({why or 'not compiled at install: no mypy or no C compiler then'})"
