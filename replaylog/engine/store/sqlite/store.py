"""The SQLite log store: one class, composed of one part per concern.

A `SQLiteStore` holds one connection and must stay on the thread that made it; open
one per thread. The parts are mixins over one connection (`SQLiteConnection`), not
objects that call each other: the per-slot path (`Commits`) reads the connection's
attributes directly, with no call between parts. The reads and the
operator writes are the backend-neutral ones (`engine.store.shared`)
over this connection's primitives (`SQLiteConnection`, engine.store.shared.base).
"""

from __future__ import annotations

import functools
import inspect
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from replaylog.engine.store.shared.reads import SharedReads
from replaylog.engine.store.shared.retention import SharedRetention
from replaylog.engine.store.shared.runs import SharedRuns
from replaylog.engine.store.shared.schedules import SharedSchedules
from replaylog.engine.store.sqlite.commit import Commits
from replaylog.engine.store.sqlite.connection import store_error
from replaylog.engine.store.sqlite.leases import Leases
from replaylog.engine.store.sqlite.operations import OperatorWrites
from replaylog.engine.store.sqlite.upkeep import Upkeep
from replaylog.engine.store.sqlite.workers import WorkerRegistry

C = TypeVar("C", bound=type)
# The per-slot and per-poll methods translate SQLite's errors themselves, with a try that
# costs nothing until it catches: a wrapper's extra call would be paid on every slot.
_TRANSLATING = frozenset({"commit_record", "commit_batch", "data_version", "close"})


def _speaking_store_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(self: SQLiteStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise store_error(exc, self.path) from exc
    return call


def _store_errors_only(cls: C) -> C:
    """Every public method raises the store's errors (engine.errors), never sqlite3's: the boundary."""
    for name in dir(cls):
        if name.startswith("_") or name in _TRANSLATING:
            continue
        member = inspect.getattr_static(cls, name)
        if inspect.isfunction(member):
            setattr(cls, name, _speaking_store_errors(member))
    return cls


@_store_errors_only
class SQLiteStore(Commits, Upkeep, Leases, WorkerRegistry, OperatorWrites, SharedRetention, SharedSchedules,
                  SharedRuns, SharedReads):
    """The log store on one SQLite file: every store protocol of `engine.store.protocols`.

    Args:
        path: the database file; created (mode 0600) unless `readonly`.
        readonly: open with mode=ro; every write raises ReadOnlyError.
        max_payload: cap in bytes on a signal payload's or an input's JSON text.
    """
