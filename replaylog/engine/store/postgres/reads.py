"""Reading the log on PostgreSQL: the shared reads (engine.store.shared.reads), and what is in flight."""

from __future__ import annotations

from replaylog.engine.store.postgres.connection import PGConnection
from replaylog.engine.store.rows import InflightRow, loads
from replaylog.engine.store.shared.keys import unrecorded
from replaylog.engine.store.shared.reads import SharedReads


class PGReads(PGConnection, SharedReads):
    """The store's reads: the shared ones over this connection, and the in-flight activity of a workflow."""

    def inflight(self, workflow_id: str) -> InflightRow | None:
        """The started activity with no recorded outcome, if any (it possibly ran): of several (the tasks
        of a parallel group), the latest slot, then the highest attempt count (see `inflight_tasks`)."""
        rows = self.inflight_tasks(workflow_id)
        return max(rows, key=lambda r: (r.slot, r.attempts)) if rows else None

    def inflight_tasks(self, workflow_id: str) -> list[InflightRow]:
        """Every started activity with no recorded outcome (each possibly ran), by slot: one per lane.

        On PostgreSQL every worker writes its start marks to the inflight table, so the
        table alone answers.
        """
        return [InflightRow(int(r[0]), r[1], int(r[2]), r[3], r[4], r[5], loads(r[6]), r[7], int(r[8]))
                for r in self._query(
            "SELECT i.slot, i.name, i.attempts, i.started_at, i.error, i.retry_at, i.details, i.heartbeat_at, i.lane"
            " FROM workflows w"
            f" JOIN inflight i ON i.workflow_id = w.id WHERE w.id = ? AND {unrecorded('w', 'i.slot')}"
            " ORDER BY i.slot", (workflow_id,))]
