"""In-flight marks in the database: folding workers' start marks in, and reading what is in flight.

A live worker keeps its start marks in a file beside the database (`engine.marks`);
a dead worker's marks, or a run's that ended abnormally, are folded into the
`inflight` table, one row per workflow, while they still say something.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Sequence
from typing import Any

from replaylog.engine.marks import Mark, read_marks
from replaylog.engine.store.rows import Claim, InflightRow, loads
from replaylog.engine.store.shared.keys import SLOTS_NOW, unrecorded
from replaylog.engine.store.shared.operations import HEARTBEAT
from replaylog.engine.store.sqlite.connection import SQLiteConnection

_FOLD_MARK = (
    "INSERT INTO inflight (workflow_id, slot, name, attempts, started_at) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (workflow_id) DO UPDATE SET slot = excluded.slot, name = excluded.name,"
    " attempts = excluded.attempts, started_at = excluded.started_at, retry_at = NULL, error = NULL"
)
# Ids per `IN (...)` list (SQLite allows 32,766 parameters; batches are far smaller).
IN_CHUNK = 500


class InflightMarks(SQLiteConnection):
    """Start marks kept in the database, and the in-flight activity of a workflow."""

    def inflight(self, workflow_id: str) -> InflightRow | None:
        """The started activity with no recorded outcome, if any (it possibly ran).

        Looks in the inflight table (marks of workers that are gone) and in the mark
        files of the workers (`engine.marks`), and takes the latest slot, then the
        highest attempt count.
        """
        row = self._conn.execute(
            f"SELECT {SLOTS_NOW}, workflows.lease_owner, workflows.lease_epoch, i.slot, i.name, i.attempts,"
            f" i.started_at, i.error, i.retry_at, i.details, i.heartbeat_at, {unrecorded('workflows', 'i.slot')}"
            " FROM workflows LEFT JOIN inflight i ON i.workflow_id = workflows.id"
            " WHERE workflows.id = ?",
            (workflow_id,),
        ).fetchone()
        if row is None:
            return None
        slots, lease = row[0], (row[1], row[2])
        # (A task of a parallel group may run below the last recorded slot: its slot is unrecorded.)
        best = (InflightRow(row[3], row[4], row[5], row[6], row[7], row[8], loads(row[9]), row[10])
                if row[3] is not None and row[11] else None)
        for m in read_marks(self.path, workflow_id):
            # A file's mark counts while the lease it was written under is the workflow's
            # lease (a taken-over workflow's old marks are in the table by then).
            if (m.owner, m.epoch) == lease and m.slot >= slots and (
                    best is None or (m.slot, m.attempts) > (best.slot, best.attempts)):
                # A heartbeat of the slot (written to the table) stays with it.
                beat = (best.details, best.heartbeat_at) if best is not None and best.slot == m.slot else (None, None)
                best = InflightRow(m.slot, m.name, m.attempts, m.started_at, None, None, *beat)
        return best

    @staticmethod
    def _inflight_of(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        """The folded in-flight (slot, attempts, error, retry_at, details) of many workflows, by id (those
        whose slot has no recorded outcome)."""
        out: dict[str, tuple[Any, ...]] = {}
        for i in range(0, len(ids), IN_CHUNK):
            chunk = ids[i:i + IN_CHUNK]
            marks = ", ".join("?" * len(chunk))
            for wid, slot, attempts, error, retry_at, details in conn.execute(
                "SELECT i.workflow_id, i.slot, i.attempts, i.error, i.retry_at, i.details FROM inflight i"
                f" JOIN workflows w ON w.id = i.workflow_id WHERE i.workflow_id IN ({marks})"
                f" AND {unrecorded('w', 'i.slot')}", chunk,
            ):
                out[wid] = (slot, attempts, error, retry_at, loads(details))
        return out

    @staticmethod
    def _fold(conn: sqlite3.Connection, marks: Iterable[Mark]) -> int:
        """Keep marks in the inflight table where they still say something; return how many."""
        kept = 0
        for m in marks:
            wf = conn.execute(f"SELECT {SLOTS_NOW}, lease_owner, lease_epoch FROM workflows WHERE id = ?",
                              (m.workflow_id,)).fetchone()
            if wf is None or (wf[1], wf[2]) != (m.owner, m.epoch):
                # Not under the lease it was written under: another worker took the workflow
                # over (and kept this mark then), or the file is older than this database.
                continue
            if m.slot < wf[0]:
                continue  # its outcome is recorded: nothing is in flight there
            have = conn.execute("SELECT slot, attempts FROM inflight WHERE workflow_id = ?",
                                (m.workflow_id,)).fetchone()
            if have is not None and have[0] >= wf[0] and (have[0], have[1]) >= (m.slot, m.attempts):
                continue  # the table already knows as much
            conn.execute(_FOLD_MARK, (m.workflow_id, m.slot, m.name, m.attempts, m.started_at))
            kept += 1
        return kept

    def mark_started(self, claim: Claim, slot: int, name: str, attempts: int, started_at: float) -> None:
        """Record a start mark in the database; workers on SQLite use the mark files instead (engine.marks)."""
        self.fold_marks([Mark(claim.id, claim.epoch, slot, name, attempts, started_at, claim.owner)])

    def heartbeat(self, claim: Claim, slot: int, name: str, attempts: int, *, details: str | None,
                  beat_at: float | None, expires: float | None) -> bool:
        """Keep an attempt's heartbeat in the table, if the claim holds the lease (see shared.operations.HEARTBEAT)."""
        with self._write() as conn:
            cur = conn.execute(HEARTBEAT, (slot, name, attempts, time.time(), details, beat_at, expires, claim.id,
                                           claim.owner, claim.epoch))
            return cur.rowcount == 1

    def fold_marks(self, marks: Sequence[Mark]) -> int:
        """Keep workers' start marks in the database (a dead worker's, or a run's that ended abnormally).

        Only a mark written under the workflow's current lease (owner and epoch) is
        kept, and only while its slot has no recorded outcome; of two marks for one
        workflow the later slot, then the higher attempt count, wins. Returns how many
        were written.
        """
        if not marks:
            return 0
        with self._write() as conn:
            return self._fold(conn, marks)
