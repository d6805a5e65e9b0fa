"""Which worker serves what, on SQLite: a worker's row in the workers table (see engine.store.shared.workers)."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable

from replaylog.engine.queues import Queue
from replaylog.engine.store.rows import dumps
from replaylog.engine.store.shared.queues import declare
from replaylog.engine.store.shared.workers import WorkerReads
from replaylog.engine.store.sqlite.connection import SQLiteConnection


class WorkerRegistry(SQLiteConnection, WorkerReads):
    """The `workers` table: who runs, with which names, and what is left for nobody."""

    def worker_started(self, owner: str, *, host: str, pid: int, app: str, names: Collection[str],
                       ttl: float) -> None:
        """Say that a worker runs, and the workflow names its app knows (see `served_names`)."""
        now = time.time()
        with self._write() as conn:
            # Rows of workers that died without a word, long gone: keep the table small.
            conn.execute("DELETE FROM workers WHERE seen_at < ? - 10 * ttl", (now,))
            conn.execute(
                "INSERT OR REPLACE INTO workers (owner, host, pid, app, names, ttl, started_at, seen_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (owner, host, pid, app, dumps(sorted(names)), ttl, now, now))

    def worker_stopped(self, owner: str) -> None:
        """A worker exits cleanly: it serves nothing any more."""
        with self._write() as conn:
            conn.execute("DELETE FROM workers WHERE owner = ?", (owner,))

    def declare_queues(self, queues: Iterable[Queue], *, by: str) -> list[str]:
        """Record an app's queues and their limits for every worker's claims; one line per queue whose
        stored limits this changed (see engine.store.shared.queues.declare)."""
        with self._write() as conn:
            return declare(self.dialect, conn, queues, by, time.time())
