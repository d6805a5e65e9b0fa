"""The SQLite log store: one class, composed of one part per concern.

A `SQLiteStore` holds one connection and must stay on the thread that made it; open
one per thread. The parts are mixins over one connection (`SQLiteConnection`), not
objects that call each other: the per-slot path (`Commits`) reads the connection's
attributes directly, with no call between parts. The reads and the
operator writes are the backend-neutral ones (`engine.store.shared`)
over this connection's primitives (`SQLiteConnection`, engine.store.shared.base).
"""

from __future__ import annotations

from replaylog.engine.store.shared.reads import SharedReads
from replaylog.engine.store.sqlite.commit import Commits
from replaylog.engine.store.sqlite.leases import Leases
from replaylog.engine.store.sqlite.operations import OperatorWrites
from replaylog.engine.store.sqlite.workers import WorkerRegistry


class SQLiteStore(Commits, Leases, WorkerRegistry, OperatorWrites, SharedReads):
    """The log store on one SQLite file: every store protocol of `engine.store.protocols`.

    Args:
        path: the database file; created (mode 0600) unless `readonly`.
        readonly: open with mode=ro; every write raises ReadOnlyError.
        max_payload: cap in bytes on a signal payload's or an input's JSON text.
    """
