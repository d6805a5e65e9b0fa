"""The PostgreSQL log store: one class, composed of one part per concern (as the SQLite one)."""

from __future__ import annotations

from replaylog.engine.store.postgres.commit import PGCommits
from replaylog.engine.store.postgres.leases import PGLeases
from replaylog.engine.store.postgres.operations import PGOperatorWrites
from replaylog.engine.store.postgres.reads import PGReads
from replaylog.engine.store.postgres.workers import PGWorkerRegistry
from replaylog.engine.store.shared.retention import SharedRetention
from replaylog.engine.store.shared.runs import SharedRuns
from replaylog.engine.store.shared.schedules import SharedSchedules


class PostgresStore(PGCommits, PGLeases, PGWorkerRegistry, PGOperatorWrites, SharedRetention, SharedSchedules,
                    SharedRuns, PGReads):
    """The log store in a PostgreSQL database (schema `replaylog`): every store protocol.

    A store holds one connection (and, once `data_version` is asked, a listening one) and
    must stay on the thread that made it; open one per thread.

    Args:
        url: a libpq URL, postgresql://… or postgres://….
        readonly: a read-only session; every write raises ReadOnlyError.
        max_payload: cap in bytes on a signal payload's or an input's JSON text.
    """
