"""Reading the log on PostgreSQL: the shared reads (engine.store.shared.reads), and what is in flight."""

from __future__ import annotations

from replaylog.engine.store.postgres.connection import PGConnection
from replaylog.engine.store.rows import InflightRow, loads
from replaylog.engine.store.shared.reads import SharedReads


class PGReads(PGConnection, SharedReads):
    """The store's reads: the shared ones over this connection, and the in-flight activity of a workflow."""

    def inflight(self, workflow_id: str) -> InflightRow | None:
        """The started activity with no recorded outcome, if any (it possibly ran).

        On PostgreSQL every worker writes its start marks to the inflight table, so the
        table alone answers.
        """
        row = self._query_one(
            "SELECT w.slots, i.slot, i.name, i.attempts, i.started_at, i.error, i.retry_at, i.details, i.heartbeat_at"
            " FROM workflows w"
            " JOIN inflight i ON i.workflow_id = w.id WHERE w.id = ?", (workflow_id,))
        if row is None or row[1] < row[0]:
            return None
        return InflightRow(int(row[1]), row[2], int(row[3]), row[4], row[5], row[6], loads(row[7]), row[8])
