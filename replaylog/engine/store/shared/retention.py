"""Retention, on either backend: finished workflows deleted with everything they own, one batch at a time.

A batch is one write transaction over at most `batch` top-level workflows, taken in start
order (`seq`) after the last one the previous batch looked at, so a long prune lets
workers' commits in between batches and never looks at a workflow twice. A batch walks
the `seq` index through a window of at most `batch * SPAN` numbers: the write lock is held
for that many rows read at most, wherever the old workflows are among the new ones (a walk
of the status index instead would read and sort every match, each batch, to keep 200). A workflow is
deleted together with its child workflows (ctx.call_workflow, at any depth), and only
when every one of them is finished: a parent whose children still run is kept, and a
child is never deleted from under its parent (a child is pruned with its parent).
What a workflow owns: its command rows (its key range), signals, start marks, audit rows,
search attributes and child workflows (its full-text entry goes by a trigger).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from replaylog.engine.errors import StoreError
from replaylog.engine.store.rows import PruneBatch
from replaylog.engine.store.shared.base import StoreBase
from replaylog.engine.store.shared.keys import SLOT_LIMIT, slot_key
from replaylog.engine.store.shared.operations import actor
from replaylog.engine.vocab import FINISHED

# The tables keyed by workflow id whose rows a pruned workflow takes with it.
OWNED_BY_ID = ("signals", "inflight", "audit", "search_attributes", "runs")
# A batch looks at the workflows numbered in its next `batch * SPAN` seqs at most.
SPAN = 8


class SharedRetention(StoreBase):
    """Pruning finished workflows in bounded batches (`replaylog prune`, `worker --retention`)."""

    def prune_batch(self, *, finished_before: float, statuses: Collection[str] = tuple(FINISHED), after: int = 0,
                    batch: int = 500, dry_run: bool = False) -> PruneBatch:
        """Delete (or, with `dry_run`, only find) one batch of finished workflows.

        Looks at up to `batch` top-level workflows (no parent, or a parent no longer
        stored) numbered after `after`, of `statuses` (finished ones only), last updated
        before `finished_before` (epoch seconds). Each is deleted with its children at any
        depth unless one of them is unfinished. `PruneBatch.last` is where the next batch
        starts (None: nothing was left to look at).
        """
        wanted = [str(s) for s in statuses]
        unfinished = sorted(s for s in wanted if s not in FINISHED)
        if unfinished:
            raise StoreError(f"cannot prune {', '.join(unfinished)} workflows: only finished ones"
                             f" ({', '.join(sorted(FINISHED))}) are pruned")
        if not wanted:
            return PruneBatch((), (), 0, None)
        if batch < 1:
            raise StoreError(f"a prune batch holds at least one workflow, not {batch}")
        sql = self.dialect
        # A dry run reads in a snapshot (a read-only session may take no row lock).
        lock = "" if dry_run else sql.lock_of("w")

        def look(conn: Any) -> PruneBatch:
            among, params = sql.in_list(sql.unindexed.format("w.status"), wanted)
            end = after + batch * SPAN
            roots = sql.run(
                conn, f"SELECT w.id, w.seq FROM workflows w WHERE {among}"
                f" AND {sql.unindexed.format('w.updated_at')} < ? AND w.seq > ? AND w.seq <= ?"
                " AND (w.parent IS NULL OR NOT EXISTS (SELECT 1 FROM workflows p WHERE p.id = w.parent))"
                f" ORDER BY w.seq LIMIT ?{lock}", (*params, finished_before, after, end, batch)).fetchall()
            if not roots:
                more = sql.run(conn, "SELECT 1 FROM workflows WHERE seq > ? LIMIT 1", (end,)).fetchone()
                return PruneBatch((), (), 0, end if more else None)
            ids = [r[0] for r in roots]
            top, top_params = sql.in_list("parent", ids)
            # Every descendant, with the top-level workflow it belongs to, locked with it:
            # an operator's retry of a finished child waits for this batch, or goes first.
            below = sql.run(
                conn, f"WITH RECURSIVE tree(root, id) AS (SELECT parent, id FROM workflows WHERE {top}"
                " UNION ALL SELECT tree.root, c.id FROM workflows c JOIN tree ON c.parent = tree.id)"
                f" SELECT tree.root, w.id, w.seq, w.status FROM workflows w JOIN tree ON w.id = tree.id"
                f"{lock}", top_params).fetchall()
            kept = {root for root, _, _, status in below if status not in FINISHED}
            doomed = [(wid, int(seq)) for wid, seq in roots if wid not in kept]
            children = [(wid, int(seq)) for root, wid, seq, _ in below if root not in kept]
            # A full batch stops at its last root; a short one looked at its whole window.
            last = int(roots[-1][1]) if len(roots) == batch else end
            pruned = tuple(wid for wid, _ in doomed)
            held = tuple(r[0] for r in roots if r[0] in kept)
            if not dry_run and doomed:
                _delete(sql, conn, doomed + children)
            return PruneBatch(pruned, held, len(children), last)

        if dry_run:
            return self._snapshot(look)
        # One write transaction; on a server tried again after a lost connection (a batch
        # that committed finds nothing left of what it deleted, so it is never done twice).
        done = self._operate("", "prune", time.time(), actor(), look, lambda _: PruneBatch((), (), 0, after))
        if done.pruned:
            self._after_bulk_delete()
        return done


def _delete(sql: Any, conn: Any, workflows: list[tuple[str, int]]) -> None:
    """Delete these workflows' rows and every row they own, inside the caller's transaction."""
    ids = [wid for wid, _ in workflows]
    among, params = sql.in_list("workflow_id", ids)
    # The slots of their earlier runs (ctx.continue_as_new) too: each run is keyed by a seq of its own.
    earlier = [int(r[0]) for r in sql.run(conn, f"SELECT seq FROM runs WHERE {among}", params)]
    sql.run_many(conn, "DELETE FROM commands WHERE slot_key BETWEEN ? AND ?",
                 [(slot_key(seq), slot_key(seq) + SLOT_LIMIT - 1) for seq in [s for _, s in workflows] + earlier])
    for table in OWNED_BY_ID:
        among, params = sql.in_list("workflow_id", ids)
        sql.run(conn, f"DELETE FROM {table} WHERE {among}", params)
    among, params = sql.in_list("id", ids)
    sql.run(conn, f"DELETE FROM workflows WHERE {among}", params)

