"""Group commit: the outcomes of one or many workflows, lease-fenced, in one transaction.

This is the per-slot path: every statement here runs once per recorded slot, so it is
written for CPU instructions (README, Performance), and measured with
`python -m bench.instructions`.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from engine.core import CommandRecord, Outcome
from engine.errors import ReadOnlyError, StoreError
from engine.store.connection import SQLiteConnection
from engine.store.fence import FAST, REFUSE
from engine.store.keys import SLOT_LIMIT, SLOTS_NOW
from engine.store.rows import Claim, PendingRecord, dumps

_INSERT_COMMAND = ("INSERT INTO commands (slot_key, kind, name, ok, value, error, attempts, recorded_at)"
                   " VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
# A successful slot, the common case, binds no None and no bool: Python's sqlite3 binds
# only exact int, float and str directly and sends anything else (None included) through
# its adapter lookup, two failed attribute lookups with their exceptions: ~4,000 CPU
# instructions a slot, a twentieth of all the engine spent on one.
_INSERT_OK = ("INSERT INTO commands (slot_key, kind, name, ok, value, attempts, recorded_at)"
              " VALUES (?, ?, ?, 1, ?, ?, ?)")
# The commonest of all: an activity that succeeded at its first attempt. Every parameter
# bound costs ~500 instructions; these two are constants here.
_INSERT_FIRST_TRY = ("INSERT INTO commands (slot_key, kind, name, ok, value, attempts, recorded_at)"
                     " VALUES (?, 'activity', ?, 1, ?, 1, ?)")


class Commits(SQLiteConnection):
    """The worker's lease-fenced writes of outcomes and run verdicts."""

    def commit_batch(self, records: Sequence[PendingRecord] = (), *,
                     finishes: Sequence[tuple[Claim, Outcome]] = (), ttl: float) -> tuple[list[bool], list[bool]]:
        """Commit outcomes and run verdicts of one or many workflows in one transaction: group commit.

        Each slot is written only if its claim still holds the lease and the slot is
        the next one (fencing); each finish only if the lease still holds. The answer
        says, per record and per finish, whether it was written.
        """
        now = time.time()
        conn = self._begin_immediate()
        try:
            version = self._cur.execute("PRAGMA data_version").fetchone()[0] if records else 0
            write_record = self._write_record
            written = [write_record(item.claim, item.slot, item.record, now, ttl, version, item.text)
                       for item in records]
            finished = [self._write_finish(conn, claim, outcome, now) for claim, outcome in finishes]
        except BaseException:
            self._fence.clear()
            conn.execute("ROLLBACK")
            raise
        self._end(conn)
        for claim, _ in finishes:
            self._fence.finished(claim.id)
        return written, finished

    def commit_record(self, claim: Claim, slot: int, rec: CommandRecord, text: str | None = None, *,
                      ttl: float) -> bool:
        """`commit_batch` for one outcome alone: what a lone workflow does once per slot.

        The same transaction and fencing, without the batch's lists; True if written.
        `text` is the value's JSON text if the caller encoded it already.
        """
        conn = self._begin_immediate()
        try:
            version = self._cur.execute("PRAGMA data_version").fetchone()[0]
            written = self._write_record(claim, slot, rec, time.time(), ttl, version, text)
        except BaseException:
            self._fence.clear()
            conn.execute("ROLLBACK")
            raise
        self._end(conn)
        return written

    # The per-slot transactions are spelled out with these two rather than taken from
    # `_write`: they run once per slot, and a context manager cost as much as a statement.

    def _begin_immediate(self) -> sqlite3.Connection:
        if self.readonly:
            raise ReadOnlyError(f"database {self.path} is open read-only")
        try:
            self._cur.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise self._translate(exc) from None
        return self._conn

    def _end(self, conn: sqlite3.Connection) -> None:
        try:
            self._cur.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            self._fence.clear()  # what they say was written was not
            conn.execute("ROLLBACK")
            raise self._translate(exc) from None

    def _write_record(self, claim: Claim, slot: int, rec: CommandRecord, now: float, ttl: float,
                      version: int, text: str | None = None) -> bool:
        """Write one slot's outcome if the claim still holds the lease and `slot` is next.

        The workflow's row is fenced and rewritten only when the commit fence cannot
        tell that nothing changed (see CommitFence).
        """
        key = claim.id
        fence = self._fence
        column = fence.check(claim, slot, version, now)
        if column == REFUSE:
            return False
        if column != FAST:
            if fence.restamp_due(key, now):
                # updated_at is in two indexes, so setting it rewrites two more pages: at most once a second.
                cur = self._cur.execute(
                    "UPDATE workflows SET slots = ?, updated_at = ?, lease_expires = ? "
                    "WHERE id = ? AND lease_owner = ? AND lease_epoch = ? AND slots = ?",
                    (slot + 1, now, now + ttl, key, claim.owner, claim.epoch, column),
                )
                fence.stamped(key, now)
            else:
                cur = self._cur.execute(
                    "UPDATE workflows SET slots = ?, lease_expires = ? "
                    "WHERE id = ? AND lease_owner = ? AND lease_epoch = ? AND slots = ?",
                    (slot + 1, now + ttl, key, claim.owner, claim.epoch, column),
                )
            if cur.rowcount != 1:
                fence.forget(key)
                return False
            fence.note(claim, version, slot + 1)
        if slot >= SLOT_LIMIT:  # its key would be the next workflow's
            raise StoreError(f"workflow {key!r} has recorded {SLOT_LIMIT} slots, the most one workflow can")
        row_key = claim.base + slot
        kind, name, ok, value, error, attempts = rec
        if ok and error is None:
            if text is None:
                text = int.__repr__(value) if type(value) is int else dumps(value)  # dumps's int case, inline
            if attempts == 1 and kind == "activity":
                self._cur.execute(_INSERT_FIRST_TRY, (row_key, name, text, now))
            else:
                self._cur.execute(_INSERT_OK, (row_key, kind, name, text, attempts, now))
        else:
            self._cur.execute(_INSERT_COMMAND, (row_key, kind, name, int(ok), dumps(value) if ok else None,
                                                error, attempts, now))
        return True

    @staticmethod
    def _write_finish(conn: sqlite3.Connection, claim: Claim, outcome: Outcome, now: float) -> bool:
        status: str = outcome.status  # may become "pending" below
        blocked_on = outcome.blocked_on
        consumed = ",".join(map(str, outcome.consumed_signals))
        if status == "blocked":
            # A signal of this name that arrived during the run makes it runnable, not blocked.
            # (NOT IN (NULL) is never true in SQL, so leave the clause out when nothing was consumed.)
            unconsumed = f" AND seq NOT IN ({consumed})" if consumed else ""
            arrived = conn.execute(
                f"SELECT COUNT(*) FROM signals WHERE workflow_id = ? AND name = ?{unconsumed}",
                (claim.id, blocked_on),
            ).fetchone()[0]
            if arrived:
                status, blocked_on = "pending", None
        cur = conn.execute(
            "UPDATE workflows SET status = ?, blocked_on = ?, result = ?, error = ?, diagnostic = ?, error_kind = ?,"
            f" lease_owner = NULL, lease_expires = NULL, updated_at = ?, slots = {SLOTS_NOW},"
            # A run that came to a verdict was not interrupted; one that ended the workflow
            # makes the last worker error history.
            " interruptions = 0, retry_at = NULL,"
            # ?1 is the status written (SET sees the old row's columns); the `?` after it are 8-10.
            " worker_error = CASE WHEN ?1 IN ('completed', 'failed') THEN NULL ELSE worker_error END"
            " WHERE id = ? AND lease_owner = ? AND lease_epoch = ?",
            (status, blocked_on, dumps(outcome.result) if status == "completed" else None, outcome.error,
             dumps(outcome.diagnostic.to_dict()) if outcome.diagnostic else None,
             outcome.error_kind if status == "failed" else None, now, claim.id, claim.owner, claim.epoch),
        )
        if cur.rowcount != 1:
            return False
        if consumed:
            conn.execute(
                f"UPDATE signals SET consumed = 1 WHERE workflow_id = ? AND consumed = 0 AND seq IN ({consumed})",
                (claim.id,),
            )
        return True
