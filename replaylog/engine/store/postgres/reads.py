"""Reading the log on PostgreSQL: the shared reads (engine.store.shared.reads), and what is in flight."""

from __future__ import annotations

from replaylog.engine.store.postgres.connection import PGConnection
from replaylog.engine.store.rows import InflightRow, loads
from replaylog.engine.store.shared.keys import unrecorded
from replaylog.engine.store.shared.reads import SharedReads


class PGReads(PGConnection, SharedReads):
    """The store's reads: the shared ones over this connection, and the in-flight activity of a workflow."""

    def inflight(self, workflow_id: str) -> InflightRow | None:
        """The started activity with no recorded outcome, if any (it possibly ran).

        On PostgreSQL every worker writes its start marks to the inflight table, so the
        table alone answers.
        """
        row = self._query_one(
            "SELECT i.slot, i.name, i.attempts, i.started_at, i.error, i.retry_at, i.details, i.heartbeat_at"
            " FROM workflows w"
            f" JOIN inflight i ON i.workflow_id = w.id WHERE w.id = ? AND {unrecorded('w', 'i.slot')}",
            (workflow_id,))
        if row is None:
            return None
        return InflightRow(int(row[0]), row[1], int(row[2]), row[3], row[4], row[5], loads(row[6]), row[7])
