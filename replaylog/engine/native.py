"""The per-slot modules compiled by mypyc, optional: the run's cursor, the worker's run and its committer.

A slot's commonest path runs in three modules setup.py compiles with mypyc, from these very
sources, where mypy and a C compiler are at hand at install (docs/performance.md, "The
compiled path", has what it gains): the replay core's cursor (`engine.cursor`: the state
every slot reads and writes, and the commonest activity slot), the worker's run (`record`,
`on_start`) and its committer's lone-workflow path. The rest of the replay core is not
compiled: compiled functions lose their docstrings, their frames (the workflow-thread guard
reads them) and the engine's own one-line errors for bad arguments, so the Context keeps its
public face and hands the cursor only what it checked. Nor is the store's: its classes are
mixins, which mypyc's native classes cannot be, and its commit fence compiled with the lone
slot's statement in it saved ~200 instructions a slot of ~5,000 (the store's lone slot is in
its C file instead, engine.store.sqlite.speedups).

A compiled module (`run.cpython-311-….so`) sits beside its source and Python's import
prefers it. This module's finder, installed by the engine package before any of them is
imported, loads the sources instead where:

- REPLAYLOG_PURE_PYTHON is set (engine.compiled): the pure-Python path, as for the C files;
- a source changed since it was compiled: setup.py records each source's SHA-256 beside
  the compiled modules (`_native_sources.txt`), and a source that no longer matches runs as
  it is now, never the older compiled code (an edit in a checkout installed with
  `pip install -e .` runs at once; the next install compiles it again).

`compiled_path()` says which path runs (`replaylog --version`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from replaylog.engine.compiled import PURE_ENV, path_name, pure_requested

# The modules setup.py compiles (the same list, as paths, is there).
MODULES = ("replaylog.engine.cursor", "replaylog.engine.worker.run", "replaylog.engine.worker.committer")
# Written by setup.py beside the shared library mypyc builds for them (in this package):
# "<path from the package's parent> <SHA-256 of the source compiled>" a line.
MANIFEST = "_native_sources.txt"
# The folder holding the `replaylog` package.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_RECORD = os.path.join(_ROOT, "replaylog", "engine", MANIFEST)

def _digest(path: str) -> str:
    # Imported here: only a process that imports the worker pays for OpenSSL's (~3 ms), not `import replaylog`.
    import hashlib

    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _compiled_beside(directory: str, leaf: str) -> bool:
    return any(os.path.exists(os.path.join(directory, leaf + suffix))
               for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def _recorded() -> dict[str, str]:
    try:
        with open(_RECORD, encoding="utf-8") as f:
            return dict(line.split(" ", 1) for line in f.read().splitlines() if " " in line)
    except OSError:
        return {}


class _SourceFinder:
    """Loads a compiled module's source instead where it must (see the module's docstring); else leaves it.

    A meta path finder (`find_spec` is all one needs); not derived from importlib.abc's, whose
    import `import replaylog` would pay for.
    """

    # Why it loaded the sources where compiled modules were built (for `--version`), if it did.
    why: str | None = None

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
            why = _sources_needed()
            if why is None:
                return None  # the ordinary import loads the compiled module
            self.why = why
            import importlib.util

            return importlib.util.spec_from_file_location(fullname, source)
        return None


@functools.cache
def _sources_needed() -> str | None:
    """Why the compiled modules must not run, their sources instead, or None: they may run.

    One answer for all of them, worked out once per process: a compiled module initialises the
    others of its build from the shared library, without an import, so none may run compiled
    if one may not.
    """
    if pure_requested():
        return f"{PURE_ENV} is set"
    recorded = _recorded()
    for name in MODULES:
        path = name.replace(".", "/") + ".py"
        try:
            changed = recorded.get(path) != _digest(os.path.join(_ROOT, path))
        except OSError:
            changed = True
        if changed:
            return f"{path} changed since it was compiled: reinstall to compile it again"
    return None


_FINDER = _SourceFinder()


def install() -> None:
    """Put the finder first on `sys.meta_path`, once per process (the engine package does, before any import)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def compiled_path() -> str:
    """Which path the per-slot modules take here: "compiled", or "pure Python (why)" (`--version`)."""
    loaded = [importlib.import_module(name) for name in MODULES]
    if any((module.__file__ or "").endswith(".py") for module in loaded):
        return path_name(None, _FINDER.why or "not compiled at install: no mypy or no C compiler then")
    return path_name(loaded[0], "")
