"""Leases on PostgreSQL: claims with FOR UPDATE SKIP LOCKED, renewals, hand-backs, start marks.

Each claim bumps the workflow's lease epoch; every write under a lease is fenced by
(owner, epoch) in the statement that makes it. Workers on other hosts cannot be judged
by their pids, so a dead worker's workflows are taken over when their leases lapse.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Collection, Sequence
from typing import Any

from replaylog.engine.core import HOLE, Attempts, CommandRecord, SignalRecord, WorkflowState, new_record
from replaylog.engine.errors import ReadOnlyError
from replaylog.engine.marks import Mark
from replaylog.engine.store.postgres.connection import NOTIFY, POSTGRES, Conn, Cursor, PGConnection
from replaylog.engine.store.postgres.marks import MarkSender
from replaylog.engine.store.rows import Claim, loads
from replaylog.engine.store.shared.keys import (
    CLAIM_LOAD_SLOTS,
    SLOT_BITS,
    SLOT_LIMIT,
    SLOTS_NOW,
    slot_key,
    slots_now,
    unrecorded,
)
from replaylog.engine.store.shared.operations import BEATLESS, HEARTBEAT, LOST, TAKEN_OVER
from replaylog.engine.store.shared.queues import DELAYED, admit, earliest, room_sql

# Taken when a store first sends a mark: its workflow thread and its event loop's thread may
# both send one first, and each taking a share of the sender would leave one share never
# released (the sender's connection open after the store closed).
_FIRST_MARK = threading.Lock()

_MARK = (
    "INSERT INTO inflight (workflow_id, lane, slot, name, attempts, started_at)"
    " SELECT id, %s, %s, %s, %s, %s FROM workflows WHERE id = %s AND lease_owner = %s AND lease_epoch = %s"
    " ON CONFLICT (workflow_id, lane) DO UPDATE SET slot = excluded.slot, name = excluded.name,"
    " attempts = excluded.attempts, started_at = excluded.started_at, retry_at = NULL, error = NULL"
)

def _names(names: Collection[str] | None) -> tuple[str, list[Any]]:
    """` AND workflow = ANY(%s)` and its parameter; nothing for None (every name)."""
    if names is None:
        return "", []
    return " AND workflow = ANY(%s)", [list(names)]


# The claim's sources of runnable workflows, in the order they are served: blocked past
# the wake time (a timer or a wait's deadline; earliest first), pending (oldest first),
# running under a lapsed lease, and (when named) running under a dead owner. Each is one
# index range locked with SKIP LOCKED; the first `limit` of them all are leased.
_DUE = ("SELECT id, 0 AS k, wake_at AS o FROM workflows WHERE status = 'blocked' AND wake_at <= %s{only}"
        " ORDER BY wake_at LIMIT %s FOR UPDATE SKIP LOCKED")
_PENDING = ("SELECT id, 1, updated_at FROM workflows WHERE status = 'pending'{only}"
            " AND (retry_at IS NULL OR retry_at <= %s) ORDER BY updated_at LIMIT %s FOR UPDATE SKIP LOCKED")
_LAPSED = ("SELECT id, 2, lease_expires FROM workflows WHERE status = 'running' AND lease_expires < %s{only}"
           " LIMIT %s FOR UPDATE SKIP LOCKED")
_DEAD = ("SELECT id, 3, 0::double precision FROM workflows WHERE status = 'running' AND lease_owner = ANY(%s)"
         " AND (lease_expires >= %s OR lease_expires IS NULL){only} LIMIT %s FOR UPDATE SKIP LOCKED")
# Running under a lease that stands, with an attempt whose heartbeat is past due: its worker stopped
# answering (frozen, cut off). Taken over, the epoch fences that worker out; never by that worker
# itself, which watches its own attempts (see the SQLite store).
# (EXISTS: several tasks of a parallel group may be overdue at once; the workflow is taken once.)
_BEATLESS = ("SELECT w.id, 4, 0::double precision FROM workflows w WHERE w.status = 'running'"
             " AND EXISTS (SELECT 1 FROM inflight i WHERE i.workflow_id = w.id AND i.heartbeat_expires < %s"
             f" AND {unrecorded('w', 'i.slot')})"
             " AND w.lease_expires >= %s AND w.lease_owner IS DISTINCT FROM %s{only} LIMIT %s"
             " FOR UPDATE OF w SKIP LOCKED")


_TAKEN_OVER = TAKEN_OVER.format(ids="= ANY(%s)").replace("?", "%s")

# The rows a claim leased (its answer lost): this owner's, stamped with the claim's time.
_CLAIMED = ("SELECT id, workflow, lease_epoch, input, slots, seq, cancel_requested, 0, 0::double precision"
            " FROM workflows WHERE status = 'running' AND lease_owner = %s AND updated_at = %s AND lease_expires = %s")


def _claim_sql(only: str, dead: bool) -> str:
    """The claim: pick from every source, keep the first `limit`, lease them; returns their rows and order.

    A last row of NULLs says that a queue has a queued workflow due and room for it: the
    claim then admits in a transaction of its own (`_admit`), so an unqueued claim stays one
    statement, one round trip.
    """
    sources = [_DUE, _PENDING, _LAPSED, *([_DEAD] if dead else []), _BEATLESS]
    ctes = ", ".join(f"s{i} AS ({sql.format(only=only)})" for i, sql in enumerate(sources))
    union = " UNION ALL ".join(f"SELECT * FROM s{i}" for i in range(len(sources)))
    # A dead owner's workflow may also have a heartbeat past due: each row is picked once.
    return (f"WITH {ctes}, pick AS (SELECT * FROM (SELECT DISTINCT ON (id) * FROM ({union}) u ORDER BY id, k) d"
            " ORDER BY k, o LIMIT %s),"
            " leased AS (UPDATE workflows w SET status = 'running', lease_owner = %s,"
            " lease_epoch = w.lease_epoch + 1, lease_expires = %s, updated_at = %s, blocked_on = NULL, wake_at = NULL,"
            # (The row of a lease that lapsed lags its slots: the count decides how its history is read.)
            f" slots = {slots_now('w')}"
            " FROM pick WHERE w.id = pick.id RETURNING w.id, w.workflow, w.lease_epoch, w.input, w.slots, w.seq,"
            " w.cancel_requested, pick.k, pick.o)"
            " SELECT * FROM leased UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL"
            f" WHERE {room_sql('%s', only)}")


# Admitted queued workflows leased (in the admission's transaction), as the claim leases.
_LEASE = ("UPDATE workflows SET status = 'running', lease_owner = %s, lease_epoch = lease_epoch + 1,"
          " lease_expires = %s, updated_at = %s WHERE id = ANY(%s)"
          " RETURNING id, workflow, lease_epoch, input, slots, seq, cancel_requested, 4, admitted_at")


def _claim_params(now: float, due_by: float, named: list[Any], limit: int, dead_owners: Sequence[str], owner: str,
                  expires: float) -> list[Any]:
    """The parameters of `_claim_sql`, in its order (`due_by`: the wake clock's time)."""
    params: list[Any] = [due_by, *named, limit, *named, now, limit, now, *named, limit]
    if dead_owners:
        params += [list(dead_owners), now, *named, limit]
    params += [now, now, owner, *named, limit]
    return [*params, limit, owner, expires, now, due_by, *named, now]


class PGLeases(PGConnection):
    """Claiming, renewing and releasing workflow leases; start marks kept in the database."""

    _mark_sender: MarkSender | None  # set by the first `mark`

    def claim(self, owner: str, *, ttl: float, limit: int = 1, dead_owners: Sequence[str] = (),
              names: Collection[str] | None = None) -> list[Claim]:
        """Take the lease of up to `limit` runnable workflows (of `names` only, unless None).

        Runnable: blocked past its recorded wake time (a timer or a wait's deadline), pending,
        or running under a lease that has lapsed (or whose owner is named dead). Rows another
        worker is claiming right now are skipped, not waited for.
        """
        only, named = _names(names)

        now = time.time()
        statement = _claim_sql(only, bool(dead_owners))
        params = _claim_params(now, self.wake_clock(), named, limit, dead_owners, owner, now + ttl)

        def take(conn: Conn, attempt: int) -> list[tuple[Any, ...]]:
            # One statement in autocommit: the rows are picked (under FOR UPDATE SKIP LOCKED)
            # and leased at once, one round trip and one flush, because a claim is on the path
            # of every signal's wake-up (docs/postgres.md). A claim that finds nothing writes
            # nothing and flushes nothing.
            if attempt:
                # The answer of a claim made before may have been lost: the rows it leased
                # carry this owner and this claim's time.
                mine = conn.execute(_CLAIMED, (owner, now, now + ttl)).fetchall()
                if mine:
                    return mine
            return conn.execute(statement, params).fetchall()

        taken = self._run(take, write=True)
        queued_due = bool(taken) and taken[-1][0] is None
        taken = [r for r in taken if r[0] is not None]
        if queued_due and len(taken) < limit:
            seen = {r[0] for r in taken}
            taken += [r for r in self._admit(owner, names, limit - len(taken), now, now + ttl) if r[0] not in seen]
        if not taken:
            return []
        taken.sort(key=lambda r: (r[7], r[8]))
        # Taken over (a lapsed lease, a dead owner, an overdue heartbeat): the attempt run there under a
        # heartbeat timeout failed, and its backoff is waited next (shared.operations.TAKEN_OVER).
        taken_over = [r[0] for r in taken if r[7] in (2, 3, 4)]
        if taken_over:
            self._run(lambda conn, _: conn.execute(_TAKEN_OVER, (now, BEATLESS, LOST, taken_over)), write=True)
        # The leases are ours from here: only their holder writes a workflow's commands and
        # marks, so those are read after the claim's commit, retried on their own after a
        # fault (signals sent meanwhile are read too, as a later claim would). One round trip.
        short = [r[0] for r in taken if r[4] <= CLAIM_LOAD_SLOTS]
        ids = [r[0] for r in taken]

        def read(conn: Conn, _: int) -> tuple[dict[str, tuple[list[CommandRecord], list[SignalRecord]]],
                                              list[tuple[Any, ...]]]:
            with conn.pipeline():
                history = self._send_histories(conn, short) if short else None
                marks = conn.execute("SELECT i.workflow_id, i.slot, i.attempts, i.error, i.retry_at, i.details"
                                     " FROM inflight i JOIN workflows w ON w.id = i.workflow_id"
                                     f" WHERE i.workflow_id = ANY(%s) AND {unrecorded('w', 'i.slot')}", (ids,))
            return (self._read_histories(short, *history) if history else {}), marks.fetchall()

        histories, marks = self._run(read)
        started: dict[str, list[Attempts]] = {}
        for wid, slot, attempts, error, retry_at, details in marks:
            started.setdefault(wid, []).append(Attempts(int(slot), int(attempts), error, retry_at, loads(details)))
        claims = []
        for wid, workflow, epoch, input_text, _, seq, cancel, _, _ in taken:
            inp, has_input = loads(input_text), input_text is not None
            logs = histories.get(wid)
            state = None if logs is None else WorkflowState(
                input=inp, has_input=has_input, commands=tuple(logs[0]), signals=tuple(logs[1]))
            claims.append(Claim(wid, workflow, owner, int(epoch), slot_key(int(seq)), inp, has_input, state,
                                cancel=cancel, inflight=tuple(started.get(wid, ()))))
        return claims

    def _admit(self, owner: str, names: Collection[str] | None, limit: int, now: float,
               expires: float) -> list[tuple[Any, ...]]:
        """Admit and lease queued workflows their queues have room for (engine.store.shared.queues).

        One transaction: the queues' rows locked, their counts read after the locks are
        held (a statement of its own, so it sees every admission committed before), the
        chosen workflows leased. After a lost answer, the rows it leased carry this owner
        and the claim's time.
        """
        due_by = self.wake_clock()

        def take(conn: Conn, attempt: int) -> list[tuple[Any, ...]]:
            if attempt:
                mine = conn.execute(_CLAIMED, (owner, now, expires)).fetchall()
                if mine:
                    return mine
            with conn.transaction():
                ids = admit(POSTGRES, conn, owner, names, limit, due_by)
                if not ids:
                    return []
                return conn.execute(_LEASE, (owner, expires, now, ids)).fetchall()

        return self._run(take, write=True)

    @staticmethod
    def _send_histories(conn: Conn, ids: Sequence[str]) -> tuple[Cursor, Cursor]:
        """Send the queries of the commands and signals of many workflows (one per table); read by `_read_histories`."""
        commands = conn.execute(
            f"SELECT w.id, c.slot_key - (w.seq << {SLOT_BITS}), c.kind, c.name, c.ok, c.value, c.error, c.attempts,"
            " c.args FROM workflows w JOIN commands c"
            f" ON c.slot_key BETWEEN (w.seq << {SLOT_BITS}) AND (w.seq << {SLOT_BITS}) + {SLOT_LIMIT - 1}"
            " WHERE w.id = ANY(%s) ORDER BY w.id, c.slot_key", (list(ids),))
        signals = conn.execute(
            "SELECT workflow_id, seq, name, payload FROM signals WHERE workflow_id = ANY(%s) AND run IS NULL"
            " ORDER BY workflow_id, seq", (list(ids),))
        return commands, signals

    @staticmethod
    def _read_histories(ids: Sequence[str], commands: Cursor, signals: Cursor
                        ) -> dict[str, tuple[list[CommandRecord], list[SignalRecord]]]:
        """The commands and signals of the workflows `ids`, from the cursors `_send_histories` returned."""
        json_loads = json.loads
        rec = CommandRecord
        out: dict[str, tuple[list[CommandRecord], list[SignalRecord]]] = {wid: ([], []) for wid in ids}
        for wid, slot, kind, name, ok, value, error, attempts, args in commands.fetchall():
            logs = out[wid][0]
            if slot != len(logs):
                # A parallel group the worker died in the middle of left a gap (engine.core.HOLE).
                logs.extend([HOLE] * (int(slot) - len(logs)))
            logs.append(new_record(rec, (kind, name, ok, None if value is None else json_loads(value),
                                         error, attempts, args)))
        for wid, seq, name, payload in signals.fetchall():
            out[wid][1].append(SignalRecord(int(seq), name, loads(payload)))
        return out

    def has_claimable(self, dead_owners: Sequence[str] = (), names: Collection[str] | None = None) -> bool:
        """Whether `claim` would find anything (of `names`): a cheap read before the claim's transaction."""
        only, named = _names(names)
        now = time.time()
        row = self._run(lambda c, _: c.execute(
            f"SELECT EXISTS (SELECT 1 FROM workflows WHERE status = 'pending'{only}"
            " AND (retry_at IS NULL OR retry_at <= %s))"
            f" OR EXISTS (SELECT 1 FROM workflows WHERE status = 'running' AND lease_expires < %s{only})"
            f" OR EXISTS (SELECT 1 FROM workflows WHERE status = 'running' AND lease_owner = ANY(%s){only})"
            f" OR EXISTS (SELECT 1 FROM workflows WHERE status = 'blocked' AND wake_at <= %s{only})"
            " OR EXISTS (SELECT 1 FROM workflows w JOIN inflight i ON i.workflow_id = w.id WHERE w.status = 'running'"
            f" AND i.heartbeat_expires < %s{only})"
            f" OR {room_sql('%s', only)}",
            (*named, now, now, *named, list(dead_owners), *named, self.wake_clock(), *named, now, *named,
             self.wake_clock(), *named, now)).fetchone())
        return bool(row and row[0])

    def has_runnable(self, names: Collection[str] | None = None) -> bool:
        """Whether anything (of `names`) is pending, running, queued (its delay over) or past its wake time:
        what `--until-idle` waits out."""
        only, named = _names(names)
        row = self._run(lambda c, _: c.execute(
            f"SELECT EXISTS (SELECT 1 FROM workflows WHERE status IN ('pending', 'running'){only})"
            f" OR EXISTS (SELECT 1 FROM workflows WHERE status = 'queued' AND (not_before IS NULL OR not_before <= %s)"
            f"{only})"
            f" OR EXISTS (SELECT 1 FROM workflows WHERE status = 'blocked' AND wake_at <= %s{only})",
            (*named, self.wake_clock(), *named, self.wake_clock(), *named)).fetchone())
        return bool(row and row[0])

    def next_wake(self, names: Collection[str] | None = None) -> float | None:
        """The earliest wake time of a blocked workflow (of `names`), or the end of a queued one's delay;
        None if none sleeps.

        The first entry of the workflows_wake index (and of workflows_delayed): the worker's idle
        loop sleeps until then.
        """
        only, named = _names(names)
        row = self._run(lambda c, _: c.execute(
            f"SELECT (SELECT wake_at FROM workflows WHERE status = 'blocked' AND wake_at IS NOT NULL{only}"
            f" ORDER BY wake_at LIMIT 1), ({DELAYED.format(only=only)})", (*named, *named)).fetchone())
        return earliest(row)

    def renew(self, claims: Sequence[Claim], *, ttl: float, worker: str | None = None) -> list[bool]:
        """Extend leases still held; say which are. `worker`: stamp that worker's row as seen too."""
        ordered = sorted(claims, key=lambda c: c.id)  # rows locked in one order by every writer

        def extend(conn: Conn, _: int) -> set[str]:
            now = time.time()
            with conn.transaction():
                if worker is not None:
                    conn.execute("UPDATE workers SET seen_at = %s WHERE owner = %s", (now, worker))
                if not ordered:
                    return set()
                rows = conn.execute(
                    "UPDATE workflows w SET lease_expires = %s FROM unnest(%s::text[], %s::text[], %s::bigint[])"
                    " AS c(id, owner, epoch) WHERE w.id = c.id AND w.lease_owner = c.owner AND w.lease_epoch = c.epoch"
                    " RETURNING w.id",
                    (now + ttl, [c.id for c in ordered], [c.owner for c in ordered], [c.epoch for c in ordered]),
                ).fetchall()
            return {r[0] for r in rows}

        held = self._run(extend, write=True)
        return [c.id in held for c in claims]

    def release(self, claim: Claim) -> None:
        """Give a workflow back (worker stopping): pending again, lease dropped."""

        def give(conn: Conn, _: int) -> None:
            with conn.transaction():
                conn.execute(
                    "UPDATE workflows SET status = 'pending', lease_owner = NULL, lease_expires = NULL,"
                    f" updated_at = %s, slots = {SLOTS_NOW} WHERE id = %s AND lease_owner = %s AND lease_epoch = %s",
                    (time.time(), claim.id, claim.owner, claim.epoch))
                conn.execute(NOTIFY)

        self._run(give, write=True)

    def hand_back(self, claim: Claim, error: str, *, backoff: float, backoff_max: float) -> float | None:
        """Give a workflow back after a run stopped by an error that is no outcome (see the SQLite store)."""
        now = time.time()

        def give(conn: Conn, _: int) -> Any:
            with conn.transaction():
                row = conn.execute(
                    "UPDATE workflows SET status = 'pending', lease_owner = NULL, lease_expires = NULL,"
                    f" updated_at = %s, slots = {SLOTS_NOW}, worker_error = %s, interruptions = interruptions + 1,"
                    " retry_at = %s + LEAST(%s, %s * power(2, LEAST(interruptions, 30)))"
                    " WHERE id = %s AND lease_owner = %s AND lease_epoch = %s RETURNING retry_at",
                    (now, error, now, backoff_max, backoff, claim.id, claim.owner, claim.epoch)).fetchone()
                conn.execute(NOTIFY)
            return row

        row = self._run(give, write=True)
        return None if row is None else float(row[0]) - now

    # -- start marks: in the database, where every host sees them

    def mark_started(self, claim: Claim, slot: int, name: str, attempts: int, started_at: float,
                     lane: int = 0) -> None:
        """Record, before an activity runs, that it started (if the claim still holds the lease), in `lane`.

        Handed to the process's mark sender for this database (engine.store.postgres.marks):
        batched with the marks of other workflow threads, committed without waiting for the
        WAL flush, and returned from once sent, without waiting for the answer. A mark
        survives the worker's death, as the mmap marks do on SQLite, and like them may be
        lost with a server crash (it only ever says "possibly ran"). Waiting for the flush
        halved a lone workflow's slots/s (107 against 397 slots/s with and without marks,
        measured on 2 vCPUs); so did waiting for the answer (see PGConnection._send_unanswered).
        """
        if self.readonly:
            raise ReadOnlyError(f"database {self.where} is open read-only")
        # An attribute read, not `self.__dict__`'s: see SeenCancels.cancels (engine.store.shared.base).
        sender: MarkSender | None = getattr(self, "_mark_sender", None)
        if sender is None:
            with _FIRST_MARK:
                sender = getattr(self, "_mark_sender", None)
                if sender is None:
                    sender = self._mark_sender = MarkSender.shared(self.url)
        sender.mark((claim, slot, name, attempts, started_at, lane))

    def heartbeat(self, claim: Claim, slot: int, name: str, attempts: int, *, details: str | None,
                  beat_at: float | None, expires: float | None, lane: int = 0) -> bool:
        """Keep an attempt's heartbeat in its lane, if the claim holds the lease (see shared.operations.HEARTBEAT)."""
        params = (lane, slot, name, attempts, time.time(), details, beat_at, expires, claim.id, claim.owner,
                  claim.epoch)
        return bool(self._run(lambda conn, _: conn.execute(HEARTBEAT.replace("?", "%s"), params).rowcount == 1,
                              write=True))

    def close(self) -> None:
        """Close the connection; let go of the mark sender if this store used it."""
        sender: MarkSender | None = getattr(self, "_mark_sender", None)
        if sender is not None:
            self._mark_sender = None
            sender.release()
        super().close()

    def fold_marks(self, marks: Sequence[Mark]) -> int:
        """Keep start marks in the inflight table, each in its lane, where they still say something; return how many."""
        if not marks:
            return 0

        def fold(conn: Conn, _: int) -> int:
            kept = 0
            with conn.transaction():
                for m in marks:
                    wf = conn.execute("SELECT lease_owner, lease_epoch, EXISTS (SELECT 1 FROM commands"
                                      f" WHERE slot_key = (w.seq << {SLOT_BITS}) + %s) FROM workflows w WHERE id = %s",
                                      (m.slot, m.workflow_id)).fetchone()
                    if wf is None or (wf[0], wf[1]) != (m.owner, m.epoch) or wf[2]:
                        continue  # another lease's, or its outcome is recorded
                    have = conn.execute("SELECT slot, attempts FROM inflight WHERE workflow_id = %s AND lane = %s",
                                        (m.workflow_id, m.lane)).fetchone()
                    if have is not None and (have[0], have[1]) >= (m.slot, m.attempts):
                        continue
                    conn.execute(_MARK, (m.lane, m.slot, m.name, m.attempts, m.started_at, m.workflow_id, m.owner,
                                         m.epoch))
                    kept += 1
            return kept

        return self._run(fold, write=True)
