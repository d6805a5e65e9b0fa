"""Which worker serves what, on PostgreSQL: the workers table (see engine.store.shared.workers)."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable

from replaylog.engine.queues import Queue
from replaylog.engine.store.postgres.connection import Conn, PGConnection
from replaylog.engine.store.rows import dumps
from replaylog.engine.store.shared.queues import declare
from replaylog.engine.store.shared.workers import WorkerReads


class PGWorkerRegistry(PGConnection, WorkerReads):
    """The `workers` table: who runs, with which names, and what is left for nobody."""

    def worker_started(self, owner: str, *, host: str, pid: int, app: str, names: Collection[str],
                       ttl: float) -> None:
        """Say that a worker runs, and the workflow names its app knows."""
        now = time.time()

        def write(conn: Conn, _: int) -> None:
            with conn.transaction():
                conn.execute("DELETE FROM workers WHERE seen_at < %s - 10 * ttl", (now,))
                conn.execute(
                    "INSERT INTO workers (owner, host, pid, app, names, ttl, started_at, seen_at)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (owner) DO UPDATE SET host = excluded.host,"
                    " pid = excluded.pid, app = excluded.app, names = excluded.names, ttl = excluded.ttl,"
                    " started_at = excluded.started_at, seen_at = excluded.seen_at",
                    (owner, host, pid, app, dumps(sorted(names)), ttl, now, now))

        self._run(write, write=True)

    def worker_stopped(self, owner: str) -> None:
        """A worker exits cleanly: it serves nothing any more."""
        self._run(lambda c, _: c.execute("DELETE FROM workers WHERE owner = %s", (owner,)), write=True)

    def declare_queues(self, queues: Iterable[Queue], *, by: str) -> list[str]:
        """Record an app's queues and their limits for every worker's claims; one line per queue whose
        stored limits this changed (see engine.store.shared.queues.declare)."""
        declared = list(queues)
        now = time.time()

        def write(conn: Conn, _: int) -> list[str]:
            with conn.transaction():
                return declare(self.dialect, conn, declared, by, now)

        return self._run(write, write=True)
