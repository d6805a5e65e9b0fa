"""The one switch for replaylog's optional compiled parts: REPLAYLOG_PURE_PYTHON.

Two C files are built by the install where a compiler is found: the SQLite store's
(engine.store.sqlite.speedups) and the mark file's writer (engine.marks). Each has a
pure-Python path beside it that gives the same answers; setting this variable to anything
but "" or "0" runs the pure-Python paths even where the compiled ones are built.
"""

from __future__ import annotations

import os
from types import ModuleType

PURE_ENV = "REPLAYLOG_PURE_PYTHON"


def pure_requested() -> bool:
    """Whether REPLAYLOG_PURE_PYTHON asks for the pure-Python paths in this process."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def path_name(module: ModuleType | None, why: str) -> str:
    """How `--version` names a part's path: "compiled" (`module` loaded), or "pure Python (why)"."""
    if module is not None:
        return "compiled"
    return f"pure Python ({why or 'the compiled path is turned off in this process'})"
