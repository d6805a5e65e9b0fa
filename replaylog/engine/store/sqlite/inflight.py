"""In-flight marks in the database: folding workers' start marks in, and reading what is in flight.

A live worker keeps its start marks in a file beside the database (`engine.marks`);
a dead worker's marks, or a run's that ended abnormally, are folded into the
`inflight` table, one row per lane of a workflow (its own thread; each task of the parallel
group running), while they still say something.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Sequence
from typing import Any

from replaylog.engine.core import Attempts
from replaylog.engine.marks import Mark, read_marks
from replaylog.engine.store.rows import Claim, InflightRow, loads
from replaylog.engine.store.shared.keys import slot_key, unrecorded
from replaylog.engine.store.shared.operations import HEARTBEAT
from replaylog.engine.store.sqlite.connection import SQLiteConnection

_FOLD_MARK = (
    "INSERT INTO inflight (workflow_id, lane, slot, name, attempts, started_at) VALUES (?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (workflow_id, lane) DO UPDATE SET slot = excluded.slot, name = excluded.name,"
    " attempts = excluded.attempts, started_at = excluded.started_at, retry_at = NULL, error = NULL"
)
# Ids per `IN (...)` list (SQLite allows 32,766 parameters; batches are far smaller).
IN_CHUNK = 500


def in_list(ids: Sequence[str]) -> tuple[tuple[str, ...], str]:
    """`ids` (at most IN_CHUNK, at least one) padded to a power of two with the last id again, and its `?, ?` marks.

    A claim's reads take lists of every length from 1 to the claim's size: each length is another
    statement text, prepared again whenever it has left the sqlite3 module's cache (128 texts), or
    kept for ever by the compiled path's (connection.py's `_fetch`). Padded, each read has a
    few texts, each prepared once: 2,000 three-slot workflows in one worker, callgrind, preparing
    statements 18,000 -> ~1,000 CPU instructions a workflow.
    """
    padded = (*ids, *(ids[-1],) * (min(IN_CHUNK, 1 << (len(ids) - 1).bit_length()) - len(ids)))
    return padded, ", ".join("?" * len(padded))


def _row(r: Sequence[Any]) -> InflightRow:
    """An InflightRow from (lane, slot, name, attempts, started_at, error, retry_at, details, heartbeat_at)."""
    return InflightRow(r[1], r[2], r[3], r[4], r[5], r[6], loads(r[7]), r[8], r[0])


class InflightMarks(SQLiteConnection):
    """Start marks kept in the database, and the in-flight activities of a workflow."""

    def inflight(self, workflow_id: str) -> InflightRow | None:
        """The started activity with no recorded outcome, if any (it possibly ran): of several (the tasks
        of a parallel group), the latest slot, then the highest attempt count (see `inflight_tasks`)."""
        rows = self.inflight_tasks(workflow_id)
        return max(rows, key=lambda r: (r.slot, r.attempts)) if rows else None

    def inflight_tasks(self, workflow_id: str) -> list[InflightRow]:
        """Every started activity with no recorded outcome (each possibly ran), by slot: one per lane (the
        workflow's own thread, each task of a parallel group).

        Looks in the inflight table (marks of workers that are gone, heartbeats, retry waits) and
        in the mark files of the workers (`engine.marks`); of the two, a lane's later slot, then
        its higher attempt count.
        """
        with self._read() as conn:
            wf = conn.execute("SELECT lease_owner, lease_epoch, seq FROM workflows WHERE id = ?",
                              (workflow_id,)).fetchone()
            if wf is None:
                return []
            lanes = {r[0]: _row(r) for r in conn.execute(
                "SELECT i.lane, i.slot, i.name, i.attempts, i.started_at, i.error, i.retry_at, i.details,"
                f" i.heartbeat_at FROM workflows JOIN inflight i ON i.workflow_id = workflows.id"
                f" WHERE workflows.id = ? AND {unrecorded('workflows', 'i.slot')}", (workflow_id,))}
            for m in read_marks(self.path, workflow_id):
                # A file's mark counts while the lease it was written under is the workflow's
                # lease (a taken-over workflow's old marks are in the table by then).
                best = lanes.get(m.lane)
                if (m.owner, m.epoch) != (wf[0], wf[1]) or (
                        best is not None and (m.slot, m.attempts) <= (best.slot, best.attempts)):
                    continue
                if conn.execute("SELECT 1 FROM commands WHERE slot_key = ?", (slot_key(wf[2], m.slot),)).fetchone():
                    continue  # its outcome is recorded
                # A heartbeat of the slot (written to the table) stays with it.
                same = best is not None and best.slot == m.slot
                lanes[m.lane] = InflightRow(m.slot, m.name, m.attempts, m.started_at, None, None,
                                            best.details if same and best else None,
                                            best.heartbeat_at if same and best else None, m.lane)
        return sorted(lanes.values(), key=lambda r: r.slot)

    @staticmethod
    def _inflight_of(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, list[Attempts]]:
        """The folded in-flight activities of many workflows (those whose slot has no recorded outcome), by id."""
        out: dict[str, list[Attempts]] = {}
        for i in range(0, len(ids), IN_CHUNK):
            chunk, marks = in_list(ids[i:i + IN_CHUNK])
            for wid, slot, attempts, error, retry_at, details in conn.execute(
                "SELECT i.workflow_id, i.slot, i.attempts, i.error, i.retry_at, i.details FROM inflight i"
                f" JOIN workflows w ON w.id = i.workflow_id WHERE i.workflow_id IN ({marks})"
                f" AND {unrecorded('w', 'i.slot')}", chunk,
            ):
                out.setdefault(wid, []).append(Attempts(slot, attempts, error, retry_at, loads(details)))
        return out

    @staticmethod
    def _fold(conn: sqlite3.Connection, marks: Iterable[Mark]) -> int:
        """Keep marks in the inflight table, each in its lane, where they still say something; return how many."""
        kept = 0
        for m in marks:
            wf = conn.execute("SELECT seq, lease_owner, lease_epoch FROM workflows WHERE id = ?",
                              (m.workflow_id,)).fetchone()
            if wf is None or (wf[1], wf[2]) != (m.owner, m.epoch):
                # Not under the lease it was written under: another worker took the workflow
                # over (and kept this mark then), or the file is older than this database.
                continue
            if conn.execute("SELECT 1 FROM commands WHERE slot_key = ?", (slot_key(wf[0], m.slot),)).fetchone():
                continue  # its outcome is recorded: nothing is in flight there
            have = conn.execute("SELECT slot, attempts FROM inflight WHERE workflow_id = ? AND lane = ?",
                                (m.workflow_id, m.lane)).fetchone()
            if have is not None and (have[0], have[1]) >= (m.slot, m.attempts):
                continue  # the table already knows as much
            conn.execute(_FOLD_MARK, (m.workflow_id, m.lane, m.slot, m.name, m.attempts, m.started_at))
            kept += 1
        return kept

    def mark_started(self, claim: Claim, slot: int, name: str, attempts: int, started_at: float,
                     lane: int = 0) -> None:
        """Record a start mark in the database; workers on SQLite use the mark files instead (engine.marks)."""
        self.fold_marks([Mark(claim.id, claim.epoch, slot, name, attempts, started_at, claim.owner, lane)])

    def heartbeat(self, claim: Claim, slot: int, name: str, attempts: int, *, details: str | None,
                  beat_at: float | None, expires: float | None, lane: int = 0) -> bool:
        """Keep an attempt's heartbeat in its lane, if the claim holds the lease (see shared.operations.HEARTBEAT)."""
        with self._write() as conn:
            cur = conn.execute(HEARTBEAT, (lane, slot, name, attempts, time.time(), details, beat_at, expires,
                                           claim.id, claim.owner, claim.epoch))
            return cur.rowcount == 1

    def fold_marks(self, marks: Sequence[Mark]) -> int:
        """Keep workers' start marks in the database (a dead worker's, or a run's that ended abnormally).

        Only a mark written under the workflow's current lease (owner and epoch) is
        kept, and only while its slot has no recorded outcome; of two marks in one lane
        of a workflow the later slot, then the higher attempt count, wins. Returns how
        many were written.
        """
        if not marks:
            return 0
        with self._write() as conn:
            return self._fold(conn, marks)
