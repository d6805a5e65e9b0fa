"""Leases: a worker claims runnable workflows, renews what it holds, and gives them back.

Each claim bumps the workflow's lease epoch; every write a worker makes under a lease
is fenced by (owner, epoch), so a worker that lost its lease has its writes refused.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Collection, Sequence
from typing import Any

from replaylog.engine.core import HOLE, CommandRecord, SignalRecord, WorkflowState, new_record
from replaylog.engine.marks import Mark, board_path, read_board
from replaylog.engine.store.rows import Claim, loads
from replaylog.engine.store.shared.keys import (
    CLAIM_LOAD_SLOTS,
    FIRST_KEY,
    LAST_KEY,
    SLOTS_NOW,
    slot_key,
    unrecorded,
)
from replaylog.engine.store.shared.operations import BEATLESS, LOST, TAKEN_OVER
from replaylog.engine.store.shared.queues import DELAYED, admit, earliest, room_sql
from replaylog.engine.store.sqlite.connection import SQLITE
from replaylog.engine.store.sqlite.inflight import IN_CHUNK, InflightMarks, in_list

# Without ANALYZE statistics SQLite picks workflows_status_updated for `status = 'pending'
# AND workflow IN (...)` and walks every pending row, those of other names included (a
# worker that lacks their code leaves them there): name the partial index instead.
_BY_NAME = " INDEXED BY workflows_pending"
# Named for the same reason: the due range of blocked workflows, whatever the statistics say.
_BY_WAKE = " INDEXED BY workflows_wake"
# Running workflows and their in-flight attempt, for heartbeats past due.
_BEATLESS_JOIN = " JOIN inflight i ON i.workflow_id = workflows.id"
_TAKEN_OVER = TAKEN_OVER.format(ids="= ?")


def _names_clause(names: Collection[str] | None) -> tuple[str, list[str]]:
    """` AND workflow IN (?, ...)` and its parameters; nothing for None (every name)."""
    if names is None:
        return "", []
    named = list(names)
    return f" AND workflow IN ({', '.join('?' * len(named))})", named


class Leases(InflightMarks):
    """Claiming, renewing and releasing workflow leases."""

    def claim(self, owner: str, *, ttl: float, limit: int = 1, dead_owners: Sequence[str] = (),
              names: Collection[str] | None = None) -> list[Claim]:
        """Take the lease of up to `limit` runnable workflows (of `names` only, unless None).

        Runnable: blocked past its recorded wake time (a timer or a wait's deadline), pending,
        or running under a lease that has lapsed or whose owner is known dead. Each claim
        bumps the lease epoch, which fences out the old owner.
        A workflow whose name the worker's app lacks is left alone: it would only fail there.
        """
        with self._write() as conn:
            return self._claim_in(conn, owner, ttl, limit, dead_owners, names)

    def _claim_in(self, conn: sqlite3.Connection, owner: str, ttl: float, limit: int,
                  dead_owners: Sequence[str], names: Collection[str] | None,
                  written: dict[str, tuple[int, int]] | None = None) -> list[Claim]:
        """`claim`'s reads and writes, in the caller's write transaction (its own, or a group commit's).

        `written`, if given, is filled with what the claim wrote on each row it took: its
        `slots` column and its rowid, by workflow id (for the commit fence: `Commits._ride`).
        """
        now = time.time()
        claims: list[Claim] = []
        only, named = _names_clause(names)
        # Blocked workflows whose timer or deadline has come, first and earliest first: they
        # are waited for at a time. One range of workflows_wake, the due entries only; taken
        # under the write lock, so a signal that wakes the same workflow is taken once.
        rows: list[tuple[str, str | None]] = conn.execute(
            f"SELECT id, NULL FROM workflows{_BY_WAKE} WHERE status = 'blocked' AND wake_at <= ?{only}"
            " ORDER BY wake_at LIMIT ?", (self.wake_clock(), *named, limit)).fetchall()
        if len(rows) < limit and names is None:
            rows += conn.execute(
                "SELECT id, NULL FROM workflows WHERE status = 'pending' AND (retry_at IS NULL OR retry_at <= ?)"
                " ORDER BY updated_at LIMIT ?", (now, limit - len(rows))
            ).fetchall()
        elif len(rows) < limit and names is not None:
            # One ordered range of workflows_pending per name, merged here: a single
            # `workflow IN (...) ORDER BY updated_at` sorts every pending row of those names.
            oldest: list[tuple[float, int, str]] = []
            for name in names:
                oldest += self._fetch(  # (the compiled path where it runs: connection.py's _fetch)
                    f"SELECT updated_at, rowid, id FROM workflows{_BY_NAME}"
                    " WHERE status = 'pending' AND workflow = ? AND (retry_at IS NULL OR retry_at <= ?)"
                    " ORDER BY updated_at LIMIT ?",
                    (name, now, limit))
            rows += [(wid, None) for _, _, wid in sorted(oldest)[:limit - len(rows)]]
        if len(rows) < limit:
            rows += conn.execute(
                f"SELECT id, lease_owner FROM workflows WHERE status = 'running' AND lease_expires < ?{only}"
                " LIMIT ?",
                (now, *named, limit - len(rows)),
            ).fetchall()
        if len(rows) < limit:
            # Queued workflows their queues have room for (engine.store.shared.queues): last,
            # so an unqueued claim pays one look at the (small) queues table and no more.
            rows += [(wid, None) for wid in admit(SQLITE, conn, owner, names, limit - len(rows),
                                                  self.wake_clock())]
        if len(rows) < limit and dead_owners:
            # Only leases that have not lapsed: the query above took every lapsed one (it
            # was not cut by its LIMIT, or we would not be here). Taking one twice would
            # claim it twice, and run it in two threads, one of them fenced out.
            marks = ", ".join("?" * len(dead_owners))
            rows += conn.execute(
                f"SELECT id, lease_owner FROM workflows WHERE status = 'running' AND lease_owner IN ({marks})"
                f" AND (lease_expires >= ? OR lease_expires IS NULL){only} LIMIT ?",
                (*dead_owners, now, *named, limit - len(rows)),
            ).fetchall()
        if len(rows) < limit:
            # An attempt under a heartbeat timeout that stopped heartbeating: its worker stopped
            # answering (frozen, cut off) though its lease stands. Taken over (the epoch fences
            # that worker out), its attempt failed with the error kept below. Not our own: this
            # worker watches its attempts itself (engine.attempt_watch) and fails an overdue one
            # with the right error; the stored expiry, on the wall clock, may pass a moment before
            # the watch's, and taking our own workflow over then said another worker had.
            taken_ids = {wid for wid, _ in rows}
            beatless = [(wid, prev) for wid, prev in conn.execute(
                # (DISTINCT: several tasks of a parallel group may be overdue at once.)
                f"SELECT DISTINCT workflows.id, workflows.lease_owner FROM workflows{_BEATLESS_JOIN}"
                f" WHERE workflows.status = 'running' AND i.heartbeat_expires < ?"
                f" AND {unrecorded('workflows', 'i.slot')}"
                f" AND workflows.lease_expires >= ? AND workflows.lease_owner IS NOT ?{only} LIMIT ?",
                (now, now, owner, *named, limit)).fetchall() if wid not in taken_ids][:limit - len(rows)]
            rows += beatless
        # A workflow taken over from another worker may have an activity in flight
        # there: fold that worker's mark in first, so the attempts count on.
        boards: dict[str, list[Mark]] = {}
        for wid, previous in rows:
            if previous is not None:
                if previous not in boards:
                    path = board_path(self.path, previous)
                    boards[previous] = (read_board(path) or []) if path is not None else []
                self._fold(conn, [m for m in boards[previous] if m.workflow_id == wid])
                # The attempt it ran under a heartbeat timeout failed: its backoff is waited next.
                conn.execute(_TAKEN_OVER, (now, BEATLESS, LOST, wid))
        taken = self._take([wid for wid, _ in rows], owner, now, ttl)
        if written is not None:
            for wid, row in taken:
                written[wid] = (row[3], row[6])
        short = [wid for wid, row in taken if row[3] <= CLAIM_LOAD_SLOTS]
        histories = self._load_histories(conn, short) if short else {}
        started = self._inflight_of(conn, [wid for wid, _ in taken])
        for wid, row in taken:
            inp, has_input = loads(row[2]), row[2] is not None
            logs = histories.get(wid)
            state = None if logs is None else WorkflowState(
                input=inp, has_input=has_input, commands=tuple(logs[0]), signals=tuple(logs[1]))
            claims.append(Claim(wid, row[0], owner, row[1], slot_key(row[4]), inp, has_input, state,
                                cancel=row[5], inflight=tuple(started.get(wid, ()))))
        return claims

    def _take(self, ids: Sequence[str], owner: str, now: float, ttl: float) -> list[tuple[str, tuple[Any, ...]]]:
        """Lease the workflows `ids` to `owner`: (id, (workflow, epoch, input, slots, seq, cancel, rowid)) each.

        Read in one query per chunk and written in one executemany, not an UPDATE … RETURNING
        each: RETURNING gathers its rows in a temporary b-tree (a 4 KiB page zeroed, opened and
        closed), and each statement sent from Python costs ~15,000 instructions of its own.
        Counted under callgrind on many short workflows (claims of 16), this took 33,000
        instructions a workflow off its claim. The write lock is held (the caller's
        transaction), so what is read is what is written. Both on the compiled path where it runs
        (connection.py's `_fetch`, `_execute_many`).
        """
        found: dict[str, tuple[Any, ...]] = {}
        unique = list(dict.fromkeys(ids))  # a workflow found twice is claimed once
        for i in range(0, len(unique), IN_CHUNK):
            chunk, marks = in_list(unique[i:i + IN_CHUNK])
            for wid, *row in self._fetch(
                f"SELECT id, workflow, lease_epoch + 1, input, {SLOTS_NOW}, seq, cancel_requested, rowid"
                f" FROM workflows WHERE id IN ({marks})", chunk):
                found[wid] = tuple(row)
        taken = [(wid, found[wid]) for wid in unique if wid in found]
        self._execute_many(
            "UPDATE workflows SET status = 'running', lease_owner = ?, lease_epoch = ?, lease_expires = ?,"
            " updated_at = ?, slots = ?, blocked_on = NULL, wake_at = NULL WHERE id = ?",
            [(owner, row[1], now + ttl, now, row[3], wid) for wid, row in taken])
        return taken

    @staticmethod
    def _load_histories(
        conn: sqlite3.Connection, ids: Sequence[str]
    ) -> dict[str, tuple[list[CommandRecord], list[SignalRecord]]]:
        """The commands and signals of many workflows: one query per table (per chunk of ids)."""
        json_loads = json.loads
        rec = CommandRecord
        out: dict[str, tuple[list[CommandRecord], list[SignalRecord]]] = {wid: ([], []) for wid in ids}
        for i in range(0, len(ids), IN_CHUNK):
            chunk, marks = in_list(ids[i:i + IN_CHUNK])
            for wid, slot, kind, name, ok, value, error, attempts, args in conn.execute(
                f"SELECT w.id, c.slot_key - {FIRST_KEY}, kind, name, ok, value, c.error, attempts, c.args"
                f" FROM workflows w JOIN commands c ON c.slot_key BETWEEN {FIRST_KEY} AND {LAST_KEY}"
                f" WHERE w.id IN ({marks}) ORDER BY w.id, c.slot_key",
                chunk,
            ):
                commands = out[wid][0]
                if slot != len(commands):
                    # A parallel group the worker died in the middle of left a gap (engine.core.HOLE).
                    commands.extend([HOLE] * (slot - len(commands)))
                commands.append(
                    new_record(rec, (kind, name, bool(ok), None if value is None else json_loads(value), error,
                                     attempts, args)))
            for wid, seq, name, payload in conn.execute(
                f"SELECT workflow_id, seq, name, payload FROM signals WHERE workflow_id IN ({marks}) AND run IS NULL"
                " ORDER BY workflow_id, seq",
                chunk,
            ):
                out[wid][1].append(SignalRecord(seq, name, loads(payload)))
        return out

    def has_claimable(self, dead_owners: Sequence[str] = (), names: Collection[str] | None = None) -> bool:
        """Whether `claim` would find anything (of `names`): a cheap read before taking the write lock."""
        marks = ", ".join("?" * len(dead_owners)) or "NULL"
        only, named = _names_clause(names)
        now = time.time()
        found: int = self._conn.execute(
            f"SELECT EXISTS (SELECT 1 FROM workflows{_BY_NAME if only else ''} WHERE status = 'pending'{only}"
            " AND (retry_at IS NULL OR retry_at <= ?))"
            f" OR EXISTS (SELECT 1 FROM workflows WHERE status = 'running' AND lease_expires < ?{only})"
            f" OR EXISTS (SELECT 1 FROM workflows WHERE status = 'running' AND lease_owner IN ({marks}){only})"
            f" OR EXISTS (SELECT 1 FROM workflows{_BY_WAKE} WHERE status = 'blocked' AND wake_at <= ?{only})"
            f" OR EXISTS (SELECT 1 FROM workflows{_BEATLESS_JOIN} WHERE status = 'running'"
            f" AND i.heartbeat_expires < ?{only})"
            f" OR {room_sql('?', only)}",
            (*named, now, now, *named, *dead_owners, *named, self.wake_clock(), *named, now, *named,
             self.wake_clock(), *named, now),
        ).fetchone()[0]
        return found == 1

    def next_wake(self, names: Collection[str] | None = None) -> float | None:
        """The earliest wake time of a blocked workflow (of `names`), or the end of a queued one's delay;
        None if none sleeps.

        A seek to the first entry of workflows_wake (and of workflows_delayed): the worker's idle
        loop sleeps until then.
        (With `names`, due entries of other names come first in the range and are stepped over;
        the workers that serve them claim them.)
        """
        only, named = _names_clause(names)
        row = self._conn.execute(
            f"SELECT (SELECT wake_at FROM workflows{_BY_WAKE} WHERE status = 'blocked' AND wake_at IS NOT NULL{only}"
            f" ORDER BY wake_at LIMIT 1), ({DELAYED.format(only=only)})", (*named, *named)).fetchone()
        return earliest(row)

    def has_runnable(self, names: Collection[str] | None = None) -> bool:
        """Whether anything (of `names`) is pending, running, queued (its delay over) or past its wake time:
        what `--until-idle` waits out."""
        only, named = _names_clause(names)
        found: int = self._conn.execute(
            f"SELECT EXISTS (SELECT 1 FROM workflows{_BY_NAME if only else ''} WHERE status = 'pending'{only})"
            " OR EXISTS (SELECT 1 FROM workflows WHERE status = 'queued'"
            f" AND (not_before IS NULL OR not_before <= ?){only})"
            f" OR EXISTS (SELECT 1 FROM workflows WHERE status = 'running'{only})"
            f" OR EXISTS (SELECT 1 FROM workflows{_BY_WAKE} WHERE status = 'blocked' AND wake_at <= ?{only})",
            (*named, self.wake_clock(), *named, *named, self.wake_clock(), *named),
        ).fetchone()[0]
        return found == 1

    def renew(self, claims: Sequence[Claim], *, ttl: float, worker: str | None = None) -> list[bool]:
        """Extend leases still held; say which are. `worker`: stamp that worker's row as seen too."""
        now = time.time()
        with self._write() as conn:
            if worker is not None:
                conn.execute("UPDATE workers SET seen_at = ? WHERE owner = ?", (now, worker))
            return [
                conn.execute(
                    "UPDATE workflows SET lease_expires = ? WHERE id = ? AND lease_owner = ? AND lease_epoch = ?",
                    (now + ttl, c.id, c.owner, c.epoch),
                ).rowcount == 1
                for c in claims
            ]

    def release(self, claim: Claim) -> None:
        """Give a workflow back (worker stopping): pending again, lease dropped."""
        with self._write() as conn:
            conn.execute(
                "UPDATE workflows SET status = 'pending', lease_owner = NULL, lease_expires = NULL, updated_at = ?,"
                f" slots = {SLOTS_NOW} WHERE id = ? AND lease_owner = ? AND lease_epoch = ?",
                (time.time(), claim.id, claim.owner, claim.epoch),
            )

    def hand_back(self, claim: Claim, error: str, *, backoff: float, backoff_max: float) -> float | None:
        """Give a workflow back after a run stopped by an error that is no outcome.

        Pending again, lease dropped, `error` kept as its worker error; it is not claimed
        for `backoff` seconds, doubled for each such run in a row up to `backoff_max`, so
        code that is interrupted every time does not keep a worker spinning. Returns the
        seconds it waits, or None if the lease was no longer held (nothing written).
        """
        now = time.time()
        with self._write() as conn:
            row = conn.execute(
                "UPDATE workflows SET status = 'pending', lease_owner = NULL, lease_expires = NULL, updated_at = ?,"
                f" slots = {SLOTS_NOW}, worker_error = ?, interruptions = interruptions + 1,"
                " retry_at = ? + MIN(?, ? * (1 << MIN(interruptions, 30)))"
                " WHERE id = ? AND lease_owner = ? AND lease_epoch = ? RETURNING retry_at",
                (now, error, now, backoff_max, backoff, claim.id, claim.owner, claim.epoch),
            ).fetchone()
        return None if row is None else float(row[0]) - now
