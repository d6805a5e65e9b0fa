"""The SQLite store's compiled path, optional, with the pure-Python path beside it giving the same answers.

`_speedups` (`_speedups.c`, built by setup.py where a C compiler is found) runs SQLite's
own functions on the sqlite3.Connection's database handle, without Python's sqlite3 module
in between, for the two places a slot's CPU goes through that module most: a history's
rows read at resume (`records`, used by engine.store.shared.reads.load_commands) and a lone
workflow's slot (`bind_lone`: each writing store's own commit_record, engine.store.sqlite.commit;
the commit fence's check, the statement's parameters and its step, none of it interpreted;
and, after a slot it wrote with nothing committed to the file since, the row's check itself
left out, on SQLite's data version: see fence.py's CommitFence); and the few statements every
workflow makes beside its slots (its claim's read and write of its row, its first slots in a
group commit, its verdict: `fetch`, `execute_many` and `execute`, through the connection's
`_fetch`, `_execute_many` and `_execute`). Measured under callgrind (`make
bench-instructions`, docs/performance.md "The cost of a slot, by stage" and "Workload 5: the
store's hot statements without the sqlite3 module"): see the figures there.

`COMPILED` is the loaded module, or None where the pure-Python path runs: no compiled
module was built, REPLAYLOG_PURE_PYTHON=1 is set, the Python is not one whose
sqlite3.Connection layout the C file knows (3.11 to 3.13), or the libsqlite3 Python's
sqlite3 loaded could not be found (a statically linked build). tests/test_speedups.py runs
both paths on the same histories and statements.
"""

from __future__ import annotations

import sqlite3
import sys
from types import ModuleType

from replaylog.engine.compiled import PURE_ENV, path_name, pure_requested

# The Pythons whose sqlite3.Connection starts with the database handle (CPython's
# Modules/_sqlite/connection.h), which _speedups.c reads.
_KNOWN_LAYOUT = ((3, 11), (3, 12), (3, 13))
_ERRORS = ("OperationalError", "IntegrityError", "DatabaseError", "ProgrammingError", "InterfaceError",
           "DataError", "InternalError")


def _load() -> tuple[ModuleType | None, str]:
    """The compiled module if it may be used here, else None and why (for `replaylog --version`)."""
    if pure_requested():
        return None, f"{PURE_ENV} is set"
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in _KNOWN_LAYOUT:
        return None, (f"not used on {sys.implementation.name} {sys.version_info[0]}.{sys.version_info[1]},"
                      " whose sqlite3 it has not been checked against")
    try:
        import _sqlite3

        from replaylog.engine.store.sqlite import _speedups
    except ImportError:
        return None, "the C file was not built: no C compiler or Python headers at install"
    library = _speedups.init(_sqlite3.__file__, sqlite3.Connection, {name: getattr(sqlite3, name) for name in _ERRORS})
    # The library found must be the one Python's sqlite3 reports (not another copy in the process).
    major, minor, patch = sqlite3.sqlite_version_info
    if library != major * 1_000_000 + minor * 1_000 + patch or not _handle_works(_speedups):
        return None, "the C file is built but its checks against this Python's sqlite3 failed"
    return _speedups, ""


def _handle_works(module: ModuleType) -> bool:
    """The compiled path reads what Python's sqlite3 wrote, through the handle it takes from the connection."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        conn.execute("CREATE TABLE t (kind, name, ok, value, error, attempts, args)")
        changed = module.execute(conn, {}, "INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?)",
                                 ("activity", "probe", 1, "31", None, 1, "k"))
        rows = module.records(conn, "SELECT * FROM t WHERE attempts = ?", (1,), tuple, str)
        count = conn.execute("SELECT COUNT(*) FROM t").fetchone()[0]
        return bool(changed == 1 and count == 1 and rows == [("activity", "probe", True, 31, None, 1, "k")])
    except (sqlite3.Error, TypeError, ValueError):
        return False
    finally:
        conn.close()


COMPILED, _PURE_BECAUSE = _load()


def slot_path() -> str:
    """Which path the slots take here: "compiled", or "pure Python (why)" (for `replaylog --version`)."""
    return path_name(COMPILED, _PURE_BECAUSE)
