"""Which worker serves what: the workers running on a database and the workflow names they know.

A pending workflow no live worker knows waits for ever; this is what lets the CLI and
the console say so. A worker writes its row at start, stamps it at each lease renewal
(`Leases.renew(worker=...)`) and deletes it at exit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection

from replaylog.engine.store.base import StoreBase
from replaylog.engine.store.connection import SQLiteConnection
from replaylog.engine.store.rows import dumps

# A worker not seen for this many of its lease lengths counts as gone (served_names).
LIVE_TTLS = 3


def waiting_reason(workflow: str, served: frozenset[str] | None) -> str | None:
    """Why a pending workflow waits for a worker (from `served_names`), or None if a live one knows it."""
    if served is None:
        return "no worker running"
    if workflow in served:
        return None
    return f"no running worker knows {workflow!r}"


class WorkerReads(StoreBase):
    """What the `workers` table says, on either backend: the names live workers serve, what they leave."""

    def served_names(self) -> frozenset[str] | None:
        """The workflow names live workers know; None when no worker is live.

        Live: seen within LIVE_TTLS of its lease length (workers stamp their row at
        every lease renewal, a third of a lease apart).
        """
        rows = self._query("SELECT names FROM workers WHERE seen_at >= ? - ? * ttl", (time.time(), LIVE_TTLS))
        if not rows:
            return None
        return frozenset(name for (text,) in rows for name in json.loads(text))

    def pending_unknown(self, names: Collection[str]) -> dict[str, int]:
        """Pending workflows per name, of the names not in `names` (what a worker of those names leaves)."""
        known, params = self.dialect.in_list("workflow", names)
        rows = self._query(f"SELECT workflow, COUNT(*) FROM workflows WHERE status = 'pending' AND NOT ({known})"
                           " GROUP BY workflow ORDER BY COUNT(*) DESC, workflow", params)
        return {name: int(n) for name, n in rows}


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
