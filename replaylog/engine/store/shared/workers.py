"""Which worker serves what, on either backend: the workers on a database and the workflow names they know.

A pending workflow no live worker knows waits for ever; this is what lets the CLI and
the console say so. A worker writes its row at start, stamps it at each lease renewal
(`Leases.renew(worker=...)`) and deletes it at exit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection

from replaylog.engine.store.shared.base import StoreBase

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
