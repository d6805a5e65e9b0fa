"""Operator writes, on either backend: start, signal, cancel, terminate, retry, fork, import, approve.

Each is one write transaction (`StoreBase._operate`: on PostgreSQL also NOTIFYed, and
tried again after a connection fault without writing twice) that also appends the
action to the audit table, refused whole (nothing written) on bad input. The rows a
write changes are read under the backend's lock (`Dialect.lock`: SQLite's single writer
holds the whole file; a server locks the row), which orders an operator's write against
a worker's claim, verdict or another operator.

Written once over the primitives of `engine.store.shared.base`; inserting a workflow row is
the one step each backend spells itself (`_insert_workflow`: how `seq` is numbered, how
a taken id is told).
"""

from __future__ import annotations

import getpass
import os
import socket
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from replaylog.engine.core import (
    APPROVAL_PREFIX,
    CANCEL_NOT_DELIVERED,
    CHILD_CANCEL,
    CHILD_PREFIX,
    CHILD_SIGNAL,
    CommandRecord,
    Outcome,
    RetryWait,
    WorkflowState,
    args_key,
    child_act_refused,
    child_act_target,
    signal_name_refusal,
)
from replaylog.engine.errors import OperatorRefusedError, StoreError, UnknownWorkflowIdError, WorkflowClosedError
from replaylog.engine.queues import DedupIdTakenError, Queue
from replaylog.engine.queues import check_start as check_queue_options
from replaylog.engine.store.rows import dumps, loads
from replaylog.engine.store.shared import attributes
from replaylog.engine.store.shared.base import Dialect, StoreBase
from replaylog.engine.store.shared.keys import SLOT_LIMIT, SLOTS_NOW, slot_key
from replaylog.engine.store.shared.queues import check_start
from replaylog.engine.store.shared.reads import load_commands
from replaylog.engine.text import utc
from replaylog.engine.vocab import FINISHED, UNFINISHED, SlotKind, Status, Wait

if TYPE_CHECKING:
    from replaylog.engine.history import HistoryDocument


class ApprovalRefusedError(OperatorRefusedError):
    """An approval answer that does not fit: nothing is pending, or another request is."""


# Set by the console's web server in each browser session's process: the browser's address.
REMOTE_ADDR_ENV = "REPLAYLOG_REMOTE_ADDR"


def actor() -> str:
    """Who acts, as the audit trail records it: user@host, and the browser's address in a served console."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container): its number says who
        user = f"uid {os.getuid()}"
    remote = os.environ.get(REMOTE_ADDR_ENV)
    return f"{user}@{socket.gethostname()}" + (f" for browser {remote}" if remote else "")


def operator_name() -> str:
    """Who answers an approval from this process: user@host."""
    return actor()


def new_workflow_id() -> str:
    """A fresh, unguessable workflow id."""
    return "wf-" + uuid.uuid4().hex[:16]


def _check_id(wid: str) -> None:
    if not wid or len(wid) > 200 or any(c.isspace() or not c.isprintable() for c in wid):
        raise StoreError(f"workflow id {wid!r} is not valid: use 1-200 printable characters without spaces")


def pending_request(workflow_id: str, status: str, blocked_on: str | None, wake_at: float | None,
                    request: str | None, now: float, timed_out: Callable[[], tuple[str, float] | None]) -> str:
    """The request id an answer may unlock, read under the backend's write lock; else ApprovalRefusedError.

    Refused when the workflow waits on no approval, when `request` names another one,
    or when the pending one's deadline has passed. `timed_out` finds the last request
    that timed out (asked only to word a refusal).
    """
    waiting = status == Status.BLOCKED and bool(blocked_on) and str(blocked_on).startswith(APPROVAL_PREFIX)
    pending = str(blocked_on)[len(APPROVAL_PREFIX):] if waiting else None
    if waiting and wake_at is not None and now >= wake_at and request in (None, pending):
        raise ApprovalRefusedError(f"request {pending!r} of workflow {workflow_id!r} timed out at"
                                   f" {utc(wake_at)}: it is closed, the answer was not recorded")
    if pending is None or (request is not None and request != pending):
        closed = timed_out()
        late = "" if closed is None else f"; request {closed[0]!r} timed out at {utc(closed[1])} and is closed"
        if pending is not None:
            raise ApprovalRefusedError(f"request {request!r} is not the pending one: workflow"
                                       f" {workflow_id!r} waits on {pending!r}{late}")
        waits = f"waits for signal {blocked_on!r}" if status == Status.BLOCKED else f"is {status}"
        raise ApprovalRefusedError(f"workflow {workflow_id!r} has no pending approval request (it {waits}){late}")
    return pending


# -- statements inside an operator's (or a verdict's) transaction, on either backend


def _audit(sql: Dialect, conn: Any, workflow_id: str, action: str, now: float, who: str,
           reason: str | None = None, detail: str | None = None) -> None:
    sql.run(conn, "INSERT INTO audit (workflow_id, action, at, actor, reason, detail) VALUES (?, ?, ?, ?, ?, ?)",
            (workflow_id, action, now, who, reason, detail))


def _workflow(sql: Dialect, conn: Any, workflow_id: str, columns: str, lock: str) -> Any:
    """`columns` of a workflow's row, read under `lock`; UnknownWorkflowIdError if there is none."""
    row = sql.run(conn, f"SELECT {columns} FROM workflows WHERE id = ?{lock}", (workflow_id,)).fetchone()
    if row is None:
        raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
    return row


def _status_of(sql: Dialect, conn: Any, workflow_id: str) -> tuple[str, str | None]:
    """(status, cancel_requested) of a workflow, locked; UnknownWorkflowIdError if there is none."""
    status, requested = _workflow(sql, conn, workflow_id, "status, cancel_requested", sql.lock)
    return status, requested


def append_signal(sql: Dialect, conn: Any, workflow_id: str, name: str, text: str, now: float, status: str,
                  blocked_on: str | None) -> int:
    """Append a signal with the next sequence number; wake the workflow if it waits on `name`.

    The caller holds the workflow's lock: it orders concurrent senders (sequence numbers
    without gaps or repeats) and a claim of a passed deadline, which cannot take it as well.
    """
    seq_row = sql.run(
        conn, "INSERT INTO signals (workflow_id, seq, name, payload, consumed, sent_at)"
        " SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ?, false, ? FROM signals WHERE workflow_id = ?"
        " RETURNING seq", (workflow_id, name, text, now, workflow_id)).fetchone()
    if status == Status.BLOCKED and blocked_on == name and name not in TIME_WAITS:
        sql.run(conn, "UPDATE workflows SET status = 'pending', blocked_on = NULL, wake_at = NULL, updated_at = ?"
                " WHERE id = ?", (now, workflow_id))
    else:
        sql.run(conn, "UPDATE workflows SET updated_at = ? WHERE id = ?", (now, workflow_id))
    return int(seq_row[0])


# The detail of an import's audit row, before the id the export was made of.
IMPORTED_FROM = "from an export of "


# The blocked-on words only time ends: no signal wakes them, whatever its name (engine.vocab.Wait).
TIME_WAITS = frozenset(w.value for w in Wait)


def keep_retry(sql: Dialect, conn: Any, workflow_id: str, waits: Sequence[RetryWait], now: float) -> None:
    """A verdict blocked on a retry: keep each waiting activity's attempts, last error and next attempt's
    time, in its lane (one, or the waiting tasks of a parallel group).

    The run that wakes at the earliest `retry_at` reads them with its claim (Claim.inflight) and
    counts their attempts on from there, whichever worker it is and whatever died in between.
    """
    for wait in waits:
        sql.run(conn, "INSERT INTO inflight (workflow_id, lane, slot, name, attempts, started_at, error, retry_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (workflow_id, lane) DO UPDATE SET slot = excluded.slot,"
                " name = excluded.name, attempts = excluded.attempts, started_at = excluded.started_at,"
                " error = excluded.error, retry_at = excluded.retry_at",
                (workflow_id, wait.lane, wait.slot, wait.name, wait.attempts, now, wait.error, wait.retry_at))


# An attempt's heartbeat in its lane, fenced by the lease: its details (NULL keeps the slot's last ones),
# when it beat (NULL keeps), and when the next is due (NULL: nobody watches). A beat means an attempt
# runs: no retry wait is pending and no earlier attempt's error waits for its backoff. Parameters:
# lane, slot, name, attempts, now, details, beat_at, expires, id, owner, epoch.
HEARTBEAT = (
    "INSERT INTO inflight (workflow_id, lane, slot, name, attempts, started_at, details, heartbeat_at,"
    " heartbeat_expires)"
    " SELECT id, ?, ?, ?, ?, ?, ?, ?, ? FROM workflows WHERE id = ? AND lease_owner = ? AND lease_epoch = ?"
    " ON CONFLICT (workflow_id, lane) DO UPDATE SET slot = excluded.slot, name = excluded.name,"
    " attempts = excluded.attempts, retry_at = NULL, error = NULL,"
    " started_at = CASE WHEN inflight.slot = excluded.slot AND inflight.attempts = excluded.attempts"
    " THEN inflight.started_at ELSE excluded.started_at END,"
    " details = CASE WHEN excluded.details IS NOT NULL OR inflight.slot <> excluded.slot THEN excluded.details"
    " ELSE inflight.details END,"
    " heartbeat_at = CASE WHEN excluded.heartbeat_at IS NOT NULL OR inflight.slot <> excluded.slot"
    " THEN excluded.heartbeat_at ELSE inflight.heartbeat_at END,"
    " heartbeat_expires = excluded.heartbeat_expires"
)


BEATLESS = (" sent no heartbeat within its heartbeat timeout (its worker stopped answering);"
            " another worker took the workflow over")


LOST = (" lost its worker (it died, or its lease lapsed) while it ran under a heartbeat timeout;"
        " another worker took the workflow over")

# A claim that takes a running workflow over from another worker fails the attempt that worker ran
# under a heartbeat timeout (its `heartbeat_expires` is set while one is watched): the error is
# kept with no retry_at, so the run the claim starts waits the policy's backoff before the next
# attempt (engine.core: a failed attempt whose wait no run has taken yet), as after any failure.
# Parameters: now, BEATLESS, LOST, then the workflow ids (`{ids}`: the backend's list of them).
TAKEN_OVER = (
    "UPDATE inflight SET error = 'ActivityTimeout: attempt ' || attempts"
    " || CASE WHEN heartbeat_expires < ? THEN ? ELSE ? END, heartbeat_expires = NULL"
    " WHERE heartbeat_expires IS NOT NULL AND workflow_id {ids}"
)


# The cancel reason of a workflow whose timeout passed (client.start(..., timeout=...)).
TIMEOUT_REASON = "timeout"


def check_timeout(timeout: object, what: str) -> None:
    """Refuse a timeout that is not a positive, finite number of seconds (StoreError, one line)."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (0 < timeout < 1e12):
        raise StoreError(f"{what} must be a positive number of seconds, not {timeout!r}")


def child_deadline(sql: Dialect, conn: Any, child_id: str, parent_id: str, value: dict[str, Any], now: float) -> None:
    """A child just started: its own timeout's deadline, else its parent's remaining one (if any); and
    what happens to it when its parent finishes first (ctx.start_workflow's parent_close).

    `now` is on the store's wake clock (StoreBase.wake_clock), which deadlines are due by."""
    own = value.get("timeout")
    sql.run(conn, "UPDATE workflows SET deadline = COALESCE(?, (SELECT p.deadline FROM workflows p WHERE p.id = ?)),"
            " parent_close = ? WHERE id = ?",
            (None if own is None else now + float(own), parent_id, value.get("parent_close"), child_id))


# The slot kinds whose commit acts on a child (besides starting one), in the same transaction.
CHILD_ACTS = frozenset((CHILD_SIGNAL, CHILD_CANCEL))
# The slot kinds whose commit starts a child (ctx.call_workflow, ctx.start_workflow).
_STARTS_CHILD = frozenset((SlotKind.CHILD.value, SlotKind.CHILD_START.value))


def child_act(sql: Dialect, conn: Any, parent_id: str, kind: str, name: str, value: Any, now: float) -> None:
    """A parent's recorded signal to, or cancel of, a child it started: done now, in the slot's transaction.

    A child that has finished (or is not this parent's) refuses the whole commit with
    ChildWorkflowClosedError, so nothing is sent; the worker records the refusal in the
    slot instead (it checks before committing too, so this only meets a child that
    finished in between).
    """
    child_id = child_act_target(kind, name, value)
    row = sql.run(conn, "SELECT status, blocked_on, cancel_requested FROM workflows WHERE id = ? AND parent = ?"
                  f"{sql.lock}", (child_id, parent_id)).fetchone()
    if row is None or row[0] in FINISHED:
        raise child_act_refused(kind, name, value, "missing" if row is None else str(row[0]))
    who = f"workflow {parent_id}"
    if kind == CHILD_SIGNAL:
        seq = append_signal(sql, conn, child_id, name, dumps(value.get("payload")), now, row[0], row[1])
        _audit(sql, conn, child_id, "signal", now, who, detail=f"{name} #{seq}")
    elif row[2] is None:
        _request_cancel(sql, conn, child_id, value, now, who, detail=f"by its parent, {parent_id}")


def _recorded_children(commands: Sequence[CommandRecord], answered: Collection[str]) -> list[tuple[int, CommandRecord]]:
    """(slot, record) of each child a history records as started (not refused) whose outcome is not in `answered`."""
    return [(slot, c) for slot, c in enumerate(commands)
            if c.ok and c.kind in _STARTS_CHILD and isinstance(c.value, dict) and "id" in c.value
            and CHILD_PREFIX + str(c.value["id"]) not in answered]


def close_children(sql: Dialect, conn: Any, parent_id: str, status: str, now: float) -> None:
    """A parent ended: apply each unfinished child's parent-close policy (ctx.start_workflow), audited."""
    unfinished, statuses = sql.in_list("status", UNFINISHED)
    children = sql.run(conn, "SELECT id, parent_close, cancel_requested FROM workflows WHERE parent = ?"
                       f" AND parent_close IS NOT NULL AND {unfinished} ORDER BY seq{sql.lock}",
                       (parent_id, *statuses)).fetchall()
    for child_id, policy, requested in children:
        why = f"parent-close policy {policy}: its parent {parent_id} {status}"
        if policy == "terminate":
            _terminate(sql, conn, child_id, f"terminated: its parent {parent_id} {status}", "parent closed", now,
                       f"workflow {parent_id}", detail=why)
        elif policy == "cancel":
            if requested is None:
                _request_cancel(sql, conn, child_id, "parent closed", now, f"workflow {parent_id}", detail=why)
        else:
            _audit(sql, conn, child_id, "abandon", now, f"workflow {parent_id}", "parent closed", why)


def tell_parent(sql: Dialect, conn: Any, child_id: str, outcome: dict[str, Any], now: float) -> None:
    """A child workflow ended: deliver {"ok", "result", "error"} to its parent, if it has one still open."""
    row = sql.run(conn, "SELECT p.id, p.status, p.blocked_on FROM workflows c JOIN workflows p ON p.id = c.parent"
                  f" WHERE c.id = ?{sql.lock_of('p')}", (child_id,)).fetchone()
    if row is None or row[1] in FINISHED:
        return
    append_signal(sql, conn, row[0], CHILD_PREFIX + child_id, dumps(outcome), now, row[1], row[2])


def code_ended(sql: Dialect, conn: Any, workflow_id: str, outcome: Outcome, status: str,
               cancel_requested: str | None, now: float, *, parent: bool = True, children: bool = True) -> None:
    """A run's verdict ended the workflow (completed, failed, cancelled): what follows, in its transaction.

    Its parent, if it has one open, is told ({"ok", "result", "error"}); a cancel request the
    run never raised (it came after the code's last ctx call) goes in the audit trail as
    not delivered, by the worker's user, with its reason. `parent` False says it has no
    parent, `children` False that no child of it has a parent-close policy (read in the
    same transaction by the caller): their queries are not made.
    """
    ok = status == Status.COMPLETED
    if parent:
        tell_parent(sql, conn, workflow_id, {"ok": ok, "result": outcome.result if ok else None,
                                             "error": None if ok else outcome.error}, now)
    if children:
        close_children(sql, conn, workflow_id, status, now)
    if cancel_requested is not None and not outcome.cancel_delivered:
        _audit(sql, conn, workflow_id, CANCEL_NOT_DELIVERED, now, actor(), cancel_requested or None,
               f"the workflow {status} first")


def _unfinished_descendants(sql: Dialect, conn: Any, workflow_id: str) -> list[tuple[str, str | None]]:
    """(id, cancel_requested) of a workflow's unfinished children, grandchildren, …, in start order, locked."""
    return [(r[0], r[1]) for r in sql.run(
        conn, "WITH RECURSIVE tree(id) AS (SELECT id FROM workflows WHERE parent = ?"
        " UNION SELECT w.id FROM workflows w JOIN tree ON w.parent = tree.id)"
        " SELECT w.id, w.cancel_requested FROM workflows w JOIN tree ON w.id = tree.id"
        f" WHERE w.status IN ('queued', 'pending', 'running', 'blocked') ORDER BY w.seq{sql.lock_of('w')}",
        (workflow_id,))]


def _request_cancel(sql: Dialect, conn: Any, workflow_id: str, reason: str | None, now: float, who: str,
                    detail: str | None = None) -> None:
    """Set an unfinished workflow's cancel request; a blocked one is made runnable so that its wait raises it.

    A queued one leaves its queue's line at once (pending): its code sees the request at its
    first ctx call, without waiting for room in the queue.
    """
    sql.run(
        conn, "UPDATE workflows SET cancel_requested = ?, updated_at = ?,"
        " status = CASE WHEN status IN ('blocked', 'queued') THEN 'pending' ELSE status END,"
        " blocked_on = CASE WHEN status = 'blocked' THEN NULL ELSE blocked_on END,"
        " wake_at = CASE WHEN status = 'blocked' THEN NULL ELSE wake_at END WHERE id = ?",
        (reason or "", now, workflow_id))
    _audit(sql, conn, workflow_id, "cancel", now, who, reason, detail)


def _terminate(sql: Dialect, conn: Any, workflow_id: str, error: str, reason: str | None, now: float, who: str,
               detail: str | None = None) -> None:
    """End an unfinished workflow `terminated`, its lease epoch moved on (its worker fenced out)."""
    # slots: on SQLite a running workflow's column may lag its last slot (commit fence); take the true count.
    sql.run(
        conn, "UPDATE workflows SET status = 'terminated', error = ?, blocked_on = NULL, wake_at = NULL,"
        " lease_owner = NULL, lease_expires = NULL, lease_epoch = lease_epoch + 1, retry_at = NULL,"
        f" slots = {SLOTS_NOW}, updated_at = ? WHERE id = ?", (error, now, workflow_id))
    _audit(sql, conn, workflow_id, "terminate", now, who, reason, detail)


def _approval_timeout(sql: Dialect, conn: Any, seq: int, request: str | None) -> tuple[str, float] | None:
    """(request id, deadline) of the named approval request if it timed out, else of the latest that did; or None.

    A timed-out approval leaves a `timeout` slot named "approval:RID" holding the time it
    was decided, after the wait's `deadline` slot holding the deadline itself.
    """
    base = slot_key(seq)
    which, param = (("substr(t.name, 1, ?) = ?", [len(APPROVAL_PREFIX), APPROVAL_PREFIX]) if request is None
                    else ("t.name = ?", [APPROVAL_PREFIX + request]))
    row = sql.run(
        conn, "SELECT t.name, d.value FROM commands t JOIN commands d ON d.slot_key = t.slot_key - 1"
        f" WHERE t.slot_key BETWEEN ? AND ? AND t.kind = 'timeout' AND d.kind = 'deadline' AND {which}"
        " ORDER BY t.slot_key DESC LIMIT 1", (base, base + SLOT_LIMIT - 1, *param)).fetchone()
    if row is None:
        return None
    return row[0][len(APPROVAL_PREFIX):], float(row[1])


class SharedOperatorWrites(StoreBase):
    """Writes an operator makes, each one write transaction, refused whole on bad input."""

    def start_workflow(self, workflow: str, input: Any = None, *, has_input: bool = True,
                       workflow_id: str | None = None, trace_context: str | None = None,
                       queue: str | Queue | None = None, priority: int = 0, dedup_id: str | None = None,
                       delay: float | None = None, timeout: float | None = None) -> str:
        """Insert a pending workflow (queued, on a queue); return its id.

        `trace_context` is the caller's trace context (W3C headers as JSON text), kept for
        the worker's spans of this workflow. `queue` (a declared queue's name, or a Queue,
        which is recorded if the store has no queue of its name yet), `priority`, `dedup_id`
        and `delay` (seconds by the wake clock) start it queued: see engine.queues.
        QueueError (nothing written) for an unknown queue or a bad option;
        DedupIdTakenError when an unfinished workflow on the queue holds `dedup_id`. `timeout`: seconds
        from now after which the workflow is cancelled with reason "timeout" (StoreError if not a
        positive number).
        """
        declared = queue if isinstance(queue, Queue) else None
        queue_name = queue.name if isinstance(queue, Queue) else queue
        check_queue_options(queue_name, priority, dedup_id, delay)
        check_timeout(timeout, "the workflow timeout")
        input_text = self.encode_payload(input, "the workflow input") if has_input else None
        wid = workflow_id or new_workflow_id()
        _check_id(wid)
        now, who, sql = time.time(), actor(), self.dialect
        not_before = None if delay is None or delay <= 0 else self.wake_clock() + delay

        def start(conn: Any) -> None:
            if queue_name is not None:
                if declared is not None:
                    sql.run(conn, "INSERT INTO queues (name, concurrency, worker_concurrency, rate_limit, rate_period,"
                            " declared_by, declared_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING",
                            (declared.name, declared.concurrency, declared.worker_concurrency,
                             *(declared.rate_limit or (None, None)), f"a start by {who}", now))
                holder = check_start(sql, conn, queue_name, dedup_id)
                if holder is not None and dedup_id is not None:
                    raise DedupIdTakenError(queue_name, dedup_id, holder)
                self._insert_workflow(conn, wid, workflow, input_text, now, status=Status.QUEUED.value)
                sql.run(conn, "UPDATE workflows SET queue = ?, priority = ?, dedup_id = ?, not_before = ? WHERE id = ?",
                        (queue_name, priority, dedup_id, not_before, wid))
            else:
                self._insert_workflow(conn, wid, workflow, input_text, now)
            if trace_context is not None:
                sql.run(conn, "UPDATE workflows SET trace_context = ? WHERE id = ?", (trace_context, wid))
            if timeout is not None:
                # A deadline is a recorded wake time: due by the wake clock (see StoreBase.wake_clock).
                sql.run(conn, "UPDATE workflows SET deadline = ? WHERE id = ?", (self.wake_clock() + timeout, wid))
            _audit(sql, conn, wid, "start", now, who,
                   detail=workflow if queue_name is None else f"{workflow} on queue {queue_name}")

        self._operate(wid, "start", now, who, start, lambda _: None)
        return wid

    def send_signal(self, workflow_id: str, name: str, payload: Any = None) -> int:
        """Append a signal in one write transaction; wake the workflow if it waits on `name`.

        Returns the signal's sequence number. Refuses unknown ids, closed workflows and
        payloads over the cap, writing nothing.
        """
        refusal = signal_name_refusal(name)  # the engine's own names: timer, approval:…, child:…
        if refusal is not None:
            raise StoreError(refusal)
        text = self.encode_payload(payload, f"the payload of signal {name!r}")
        now, who, sql = time.time(), actor(), self.dialect

        def send(conn: Any) -> int:
            # Locked: the lock orders concurrent senders (sequence numbers without gaps or repeats).
            status, blocked_on = _workflow(sql, conn, workflow_id, "status, blocked_on", sql.lock)
            if status in FINISHED:
                raise WorkflowClosedError(f"workflow {workflow_id!r} is {status} and accepts no signals")
            seq = append_signal(sql, conn, workflow_id, name, text, now, status, blocked_on)
            _audit(sql, conn, workflow_id, "signal", now, who, detail=f"{name} #{seq}")
            return seq

        # A retry that finds the signal committed reads its number from the audit row's "name #seq".
        return self._operate(workflow_id, "signal", now, who, send, lambda done: int(done.rsplit("#", 1)[1]))

    def expire_deadlines(self) -> list[str]:
        """Ask every unfinished workflow whose timeout has passed to cancel, reason "timeout"; their ids.

        One write transaction each, audited like an operator's cancel (detail "its timeout
        passed"); a workflow already asked to cancel keeps its request. Children are not
        cancelled with it: each has its own deadline (its parent's, unless given its own).
        """
        now, sql = time.time(), self.dialect
        unfinished, statuses = sql.in_list("status", UNFINISHED)
        due = [str(r[0]) for r in self._query(
            f"SELECT id FROM workflows WHERE deadline <= ? AND cancel_requested IS NULL AND {unfinished}"
            " ORDER BY deadline LIMIT 100", (self.wake_clock(), *statuses))]
        if not due:
            return []
        who = actor()
        expired = []
        for wid in due:
            def expire(conn: Any, wid: str = wid) -> bool:
                status, requested = _status_of(sql, conn, wid)
                if status in FINISHED or requested is not None:
                    return False
                _request_cancel(sql, conn, wid, TIMEOUT_REASON, now, who, detail="its timeout passed")
                return True

            if self._operate(wid, "cancel", now, who, expire, lambda _: True):
                expired.append(wid)
        return expired


    def next_deadline(self) -> float | None:
        """The earliest deadline of an unfinished workflow not yet asked to cancel (on the wake clock), or None."""
        unfinished, statuses = self.dialect.in_list("status", UNFINISHED)
        rows = self._query(f"SELECT deadline FROM workflows WHERE deadline IS NOT NULL AND cancel_requested IS NULL"
                           f" AND {unfinished} ORDER BY deadline LIMIT 1", tuple(statuses))
        return None if not rows else float(rows[0][0])
    def cancel_workflow(self, workflow_id: str, reason: str | None = None) -> str:
        """Ask a pending, running or blocked workflow to cancel; return the status it had.

        Only a request: its code sees WorkflowCancelled at its current or next ctx call
        (a running worker learns of it through the commit fence). A blocked workflow is
        made runnable so that its wait raises it. The lease is untouched: nothing a
        worker holding it writes is lost. Its unfinished child workflows (ctx.call_workflow,
        at any depth) are asked to cancel in the same transaction, each with an audit row.
        """
        now, who, sql = time.time(), actor(), self.dialect
        first: list[str] = []  # the status the first try read, for a retry that finds it committed

        def cancel(conn: Any) -> str:
            status, requested = _status_of(sql, conn, workflow_id)
            if status in FINISHED:
                raise OperatorRefusedError(f"workflow {workflow_id!r} is {status}: only a pending, running or"
                                           " blocked workflow can be cancelled")
            if requested is not None:
                raise OperatorRefusedError(f"workflow {workflow_id!r} was already asked to cancel")
            first[:] = [status]
            _request_cancel(sql, conn, workflow_id, reason, now, who)
            for child, child_requested in _unfinished_descendants(sql, conn, workflow_id):
                if child_requested is None:  # a child already asked keeps its own request
                    _request_cancel(sql, conn, child, reason, now, who, detail=f"with its parent, from {workflow_id}")
            return status

        return self._operate(workflow_id, "cancel", now, who, cancel, lambda _: first[0])

    def terminate_workflow(self, workflow_id: str, reason: str | None = None) -> str:
        """Stop a pending, running or blocked workflow at once; return the status it had.

        Its status becomes `terminated` and its lease epoch moves on, so a worker running
        it has every later write refused (fenced out): no workflow code runs again and an
        activity in flight has its outcome dropped. Its unfinished child workflows (at any
        depth) are terminated with it, each with an audit row; a child terminated on its
        own has its parent told (ChildWorkflowError there), as when a child fails.
        """
        now, who, sql = time.time(), actor(), self.dialect
        error = f"terminated by an operator: {reason}" if reason else "terminated by an operator"
        first: list[str] = []

        def terminate(conn: Any) -> str:
            status, _ = _status_of(sql, conn, workflow_id)
            if status in FINISHED:
                raise OperatorRefusedError(f"workflow {workflow_id!r} is {status}: only a pending, running or"
                                           " blocked workflow can be terminated")
            first[:] = [status]
            descendants = _unfinished_descendants(sql, conn, workflow_id)
            _terminate(sql, conn, workflow_id, error, reason, now, who)
            for child, _ in descendants:
                _terminate(sql, conn, child, error, reason, now, who, detail=f"with its parent, from {workflow_id}")
            tell_parent(sql, conn, workflow_id, {"ok": False, "result": None, "error": error}, now)
            return status

        return self._operate(workflow_id, "terminate", now, who, terminate, lambda _: first[0])

    def retry_workflow(self, workflow_id: str, reason: str | None = None) -> None:
        """Make a failed workflow pending again, history kept: the worker replays it and goes on.

        The caller dry-replays it against the current code first (engine.check.check_workflow).
        """
        now, who, sql = time.time(), actor(), self.dialect

        def retry(conn: Any) -> None:
            status, _ = _status_of(sql, conn, workflow_id)
            if status != Status.FAILED:
                raise OperatorRefusedError(f"workflow {workflow_id!r} is {status}: only a failed workflow can be"
                                           " retried")
            sql.run(
                conn, "UPDATE workflows SET status = 'pending', result = NULL, error = NULL, diagnostic = NULL,"
                " error_kind = NULL, traceback = NULL, worker_error = NULL, interruptions = 0, retry_at = NULL,"
                " updated_at = ?"
                " WHERE id = ? AND status = 'failed'", (now, workflow_id))
            _audit(sql, conn, workflow_id, "retry", now, who, reason)

        self._operate(workflow_id, "retry", now, who, retry, lambda _: None)

    def fork_workflow(self, workflow_id: str, from_slot: int, *, new_id: str | None = None) -> str:
        """A new pending workflow of the same name and input, with slots 0..from_slot-1 and every signal copied.

        From slot `from_slot` its code runs live (under its own id, so with new
        idempotency keys). The original is untouched. Returns the new id.

        A child the copied slots start whose outcome is not among the copied signals is
        the fork's own (see `_fork_children`): the original's child reports to the original.
        """
        wid = new_id or new_workflow_id()
        _check_id(wid)
        now, who, sql = time.time(), actor(), self.dialect

        def fork(conn: Any) -> None:
            workflow, input_text, seq = _workflow(sql, conn, workflow_id, "workflow, input, seq", sql.share_lock)
            old = slot_key(int(seq))
            counted = sql.run(conn, "SELECT COUNT(*) FROM commands WHERE slot_key BETWEEN ? AND ?",
                              (old, old + SLOT_LIMIT - 1)).fetchone()
            recorded = int(counted[0]) if counted else 0
            if not 0 <= from_slot <= recorded:
                raise OperatorRefusedError(f"--from-slot {from_slot} is outside 0..{recorded}: workflow"
                                           f" {workflow_id!r} has {recorded} recorded slot(s)")
            new = slot_key(self._insert_workflow(conn, wid, workflow, input_text, now, slots=from_slot,
                                                 forked_from=workflow_id, forked_slot=from_slot))
            sql.run(
                conn, "INSERT INTO commands (slot_key, kind, name, ok, value, error, attempts, recorded_at, args,"
                " traceback, parallel, parallel_group) SELECT slot_key - ? + ?, kind, name, ok, value, error,"
                " attempts, recorded_at, args, traceback, parallel, parallel_group FROM commands"
                " WHERE slot_key BETWEEN ? AND ?",
                (old, new, old, old + from_slot - 1))
            attributes.rebuild(sql, conn, wid, new, new + from_slot - 1)
            sql.run(
                conn, "INSERT INTO signals (workflow_id, seq, name, payload, consumed, sent_at)"
                " SELECT ?, seq, name, payload, false, sent_at FROM signals WHERE workflow_id = ? AND run IS NULL",
                (wid, workflow_id))
            self._fork_children(conn, workflow_id, wid, new, now, who)
            _audit(sql, conn, wid, "fork", now, who, detail=f"from {workflow_id} at slot {from_slot}")

        self._operate(wid, "fork", now, who, fork, lambda _: None)
        return wid

    def import_history(self, doc: HistoryDocument, *, new_id: str | None = None) -> str:
        """Write an exported history as a new workflow; return its id.

        A workflow that was running or blocked is imported pending (a worker replays it
        and blocks it again if it still waits); a finished one keeps its status.
        """
        wid = new_id or doc.id
        _check_id(wid)
        # (A queued one too: the export does not carry its queue.)
        status = Status.PENDING if doc.status in (Status.RUNNING, Status.BLOCKED, Status.QUEUED) else doc.status
        input_text = self.encode_payload(doc.input, "the workflow input") if doc.has_input else None
        result = self.encode_payload(doc.result, "the workflow's result") if status == Status.COMPLETED else None
        commands = [(c.kind, c.name, bool(c.ok), self.encode_payload(c.value, f"slot {i}'s value") if c.ok else None,
                     c.error, c.attempts, at, c.args)
                    for i, (c, at) in enumerate(zip(doc.commands, doc.recorded_at, strict=True))]
        consumed = status != Status.PENDING
        signals = [(wid, s.seq, s.name, self.encode_payload(s.payload, f"the payload of signal {s.name!r}"),
                    consumed, at) for s, at in zip(doc.signals, doc.sent_at, strict=True)]
        now, who, sql = time.time(), actor(), self.dialect

        def write(conn: Any) -> None:
            base = slot_key(self._insert_workflow(
                conn, wid, doc.workflow, input_text, now, status=status, slots=len(doc.commands), result=result,
                error=doc.error, diagnostic=None if doc.diagnostic is None else dumps(doc.diagnostic),
                error_kind=doc.error_kind if status == Status.FAILED else None,
                forked_from=doc.forked_from, forked_slot=doc.forked_slot))
            sql.run_many(conn, "INSERT INTO commands (slot_key, kind, name, ok, value, error, attempts, recorded_at,"
                         " args) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [(base + i, *c) for i, c in enumerate(commands)])
            attributes.rebuild(sql, conn, wid, base, base + len(commands) - 1)
            sql.run_many(conn, "INSERT INTO signals (workflow_id, seq, name, payload, consumed, sent_at)"
                         " VALUES (?, ?, ?, ?, ?, ?)", signals)
            if status == Status.PENDING:
                # A worker starts a child only when it records the child's slot, and an imported
                # slot is replayed, not recorded. A finished parent's children are not run again.
                self._start_recorded_children(conn, wid, doc.commands, {s.name for s in doc.signals}, now, who)
            _audit(sql, conn, wid, "import", now, who, detail=f"{IMPORTED_FROM}{doc.id}")

        self._operate(wid, "import", now, who, write, lambda _: None)
        return wid

    def start_missing_children(self, parent_id: str, state: WorkflowState) -> list[str]:
        """Start the children `state` (the parent's history) records as started that have no row; their ids.

        A worker calls it as it resumes a parent: every child whose start the parent recorded
        (ctx.call_workflow, ctx.start_workflow) and whose outcome has not reached it must
        exist, or the parent would wait for it forever. A worker's commit of the start slot
        inserts the child in the same transaction, so this finds nothing missing unless the
        row was lost (a history written by an older replaylog, a restore, a hand edit); the
        common case costs one read of the unanswered children's ids (by primary key), nothing written.
        """
        answered = {s.name for s in state.signals if s.name.startswith(CHILD_PREFIX)}
        wanted = [c for _, c in _recorded_children(state.commands, answered)]
        if not wanted:
            return []
        found: set[str] = set()
        for i in range(0, len(wanted), 500):
            ids, params = self.dialect.in_list("id", [str(c.value["id"]) for c in wanted[i:i + 500]])
            found.update(str(r[0]) for r in self._query(f"SELECT id FROM workflows WHERE {ids}", params))
        if len(found) == len(wanted):
            return []
        now, who = time.time(), actor()
        return self._operate(parent_id, "start", now, who, lambda conn: self._start_recorded_children(
            conn, parent_id, state.commands, answered, now, who), lambda _: [])

    def start_orphaned_children(self, names: Collection[str] | None = None) -> dict[str, list[str]]:
        """Start the missing children of blocked parents (of `names`, None: any) that wait for a child with no row.

        Such a parent is claimed by nothing (it waits for its child's outcome, which no workflow
        will send), so `start_missing_children` would never run for it: a worker calls this as
        it starts and then now and again. The child is started as the worker's commit of its
        start slot would have (`_start_recorded_children`, with an audit row saying so); the
        parent stays blocked and hears from it as from any child. One read of the blocked
        parents' waits (by status) when none is missing. Returns the children started, by parent.
        """
        sql = self.dialect
        wait = f"status = 'blocked' AND SUBSTR(blocked_on, 1, {len(CHILD_PREFIX)}) = '{CHILD_PREFIX}'"
        orphaned = (f" AND NOT EXISTS (SELECT 1 FROM workflows c"
                    f" WHERE c.id = SUBSTR(workflows.blocked_on, {len(CHILD_PREFIX) + 1}))")
        among, params = ("", []) if names is None else sql.in_list("workflow", list(names))
        parents = [str(r[0]) for r in self._query(
            f"SELECT id FROM workflows WHERE {wait}{orphaned}{' AND ' + among if among else ''}", params)]
        started: dict[str, list[str]] = {}
        for parent in parents:
            now, who = time.time(), actor()

            def start(conn: Any, parent: str = parent, now: float = now, who: str = who) -> list[str]:
                row = sql.run(conn, f"SELECT seq FROM workflows WHERE id = ? AND {wait}{orphaned}{sql.lock}",
                              (parent,)).fetchone()
                if row is None:
                    return []  # woken, or its child started, meanwhile
                answered = {str(r[0]) for r in sql.run(
                    conn, "SELECT name FROM signals WHERE workflow_id = ? AND run IS NULL", (parent,))}
                return self._start_recorded_children(conn, parent, load_commands(sql, conn, slot_key(int(row[0]))),
                                                     answered, now, who)

            children = self._operate(parent, "start", now, who, start, lambda _: [])
            if children:
                started[parent] = children
        return started

    def _fork_children(self, conn: Any, source: str, wid: str, base: int, now: float, who: str) -> None:
        """Give a fork, in its own transaction, its own child for each copied child start still unanswered.

        The copied start slot holds the original's child id (`source`.slot), and that child
        tells only the original its outcome: a fork replaying the slot would wait for it
        forever. Its code, run live at that slot, would have derived `wid`.slot, so that is
        the id written into the fork's slot (and into the copied signals to and cancels of
        that child), and the child is started as the worker's commit would have: its recorded
        input, deadline and parent-close policy, then those signals and cancels. Replay reads
        the id from the slot, so the fork stays deterministic; the original's child is not
        touched. A child the code gave its own id cannot be had twice: the fork is refused.
        """
        sql = self.dialect
        commands = load_commands(sql, conn, base)
        answered = {str(r[0]) for r in sql.run(conn, "SELECT name FROM signals WHERE workflow_id = ?", (wid,))}
        # The ids the source's code derived its children's from: its own, and, if it was imported under
        # a new id, the one it had where it ran (its children's ids were derived from that there).
        derived = {source} | {str(r[0])[len(IMPORTED_FROM):] for r in sql.run(
            conn, "SELECT detail FROM audit WHERE workflow_id = ? AND action = 'import'", (source,))
            if str(r[0]).startswith(IMPORTED_FROM)}
        renamed: dict[str, str] = {}
        for slot, c in _recorded_children(commands, answered):
            old, mine = str(c.value["id"]), f"{wid}.{slot}"
            if old not in {f"{d}.{slot}" for d in derived}:
                raise OperatorRefusedError(
                    f"slot {slot} of {source!r} started child workflow {old!r} under an id its code gave, and its"
                    f" result has not arrived: a fork can neither wait for it (it reports to {source!r}) nor start"
                    f" a second {old!r}; fork from slot {slot} or earlier, or once it has finished")
            if sql.run(conn, "SELECT 1 FROM workflows WHERE id = ?", (mine,)).fetchone():
                raise OperatorRefusedError(f"the fork's child at slot {slot} would be {mine!r}, and a workflow has"
                                           " that id already: fork under another id")
            renamed[old] = mine
        if not renamed:
            return
        rewritten = list(commands)
        for slot, c in enumerate(commands):
            if not c.ok:
                continue
            if (c.kind in _STARTS_CHILD or c.kind == CHILD_SIGNAL) and isinstance(c.value, dict) and \
                    str(c.value.get("id")) in renamed:
                mine = renamed[str(c.value["id"])]
                c = c._replace(value={**c.value, "id": mine},
                               args=args_key((mine,), {}) if c.kind == CHILD_SIGNAL else c.args)
            elif c.kind == CHILD_CANCEL and c.name in renamed:
                c = c._replace(name=renamed[c.name])
            else:
                continue
            rewritten[slot] = c
            sql.run(conn, "UPDATE commands SET name = ?, value = ?, args = ? WHERE slot_key = ?",
                    (c.name, dumps(c.value), c.args, base + slot))
        self._start_recorded_children(conn, wid, rewritten, answered, now, who,
                                      lambda slot: f"its own child, for the copy of slot {slot} of {source}")

    def _start_recorded_children(self, conn: Any, parent_id: str, commands: Sequence[CommandRecord],
                                 answered: Collection[str], now: float, who: str,
                                 why: Callable[[int], str] | None = None) -> list[str]:
        """Insert, pending, each child `commands` record as started, not answered and with no row; their ids.

        As the worker's commit of its start slot would have: its recorded input, its parent,
        its deadline and parent-close policy; then the parent's later recorded signals to it
        and cancels of it are applied, in slot order. A workflow that has the id already is
        left as it is, but one with no parent (a child imported before its parent) is adopted:
        its outcome, if it has finished, is delivered to the parent. Each child started here
        has an audit row saying so (`why(slot)`, by default that its row was missing).
        """
        sql = self.dialect
        started: set[str] = set()
        for slot, c in _recorded_children(commands, answered):
            child_id = str(c.value["id"])
            row = sql.run(conn, f"SELECT parent, status, result, error FROM workflows WHERE id = ?{sql.lock}",
                          (child_id,)).fetchone()
            if row is not None:
                if row[0] is None:
                    # The child imported on its own before its parent: it is adopted, keeping its
                    # progress, and a finished one tells its parent its outcome now.
                    sql.run(conn, "UPDATE workflows SET parent = ?, parent_close = ? WHERE id = ?",
                            (parent_id, c.value.get("parent_close"), child_id))
                    if row[1] in FINISHED:
                        ok = row[1] == Status.COMPLETED
                        tell_parent(sql, conn, child_id, {"ok": ok, "result": loads(row[2]) if ok else None,
                                                          "error": None if ok else row[3]}, now)
                continue
            child_input = c.value.get("input")
            self._insert_workflow(conn, child_id, c.name, None if child_input is None else self.encode_payload(
                child_input, f"the input of child workflow {child_id!r}"), now)
            sql.run(conn, "UPDATE workflows SET parent = ? WHERE id = ?", (parent_id, child_id))
            child_deadline(sql, conn, child_id, parent_id, c.value, self.wake_clock())
            reason = f"recorded as started by {parent_id} at slot {slot}, which had no row of it" if why is None \
                else f"started by {parent_id}: {why(slot)}"
            _audit(sql, conn, child_id, "start", now, who, detail=f"{c.name}: {reason}")
            started.add(child_id)
        for c in commands:
            if c.ok and c.kind in CHILD_ACTS and (c.kind != CHILD_SIGNAL or isinstance(c.value, dict)) and \
                    child_act_target(c.kind, c.name, c.value) in started:
                child_act(sql, conn, parent_id, c.kind, c.name, c.value, now)
        return sorted(started)

    def answer_approval(self, workflow_id: str, *, approved: bool, by: str, note: str | None = None,
                        request: str | None = None) -> str:
        """Answer the approval request a workflow waits on, in one write transaction; return its id.

        Refused (ApprovalRefusedError, nothing written) when the workflow waits on no
        approval, or `request` names another request than the pending one: a stale
        answer never unlocks a newer call. An answer is used once: it wakes the
        workflow, which then no longer waits on that request. A request with a timeout
        is closed once its deadline has passed (decided here, under the write lock, so a
        worker recording the timeout and an answer cannot both win): the refusal says
        it timed out, and when.
        """
        now, who, sql = time.time(), actor(), self.dialect
        action = "approve" if approved else "reject"

        def answer(conn: Any) -> str:
            status, blocked_on, wake_at, seq = _workflow(sql, conn, workflow_id, "status, blocked_on, wake_at, seq",
                                                         sql.lock)
            # The deadline is a recorded wake time: due by the wake clock (see StoreBase.wake_clock).
            pending = pending_request(workflow_id, status, blocked_on, wake_at, request, self.wake_clock(),
                                      lambda: _approval_timeout(sql, conn, int(seq), request))
            payload = {"approved": bool(approved), "by": by, "note": note, "request": pending}
            text = self.encode_payload(payload, "the approval's answer")
            append_signal(sql, conn, workflow_id, blocked_on, text, now, status, blocked_on)
            _audit(sql, conn, workflow_id, action, now, who, note, detail=pending)
            return str(pending)

        # A retry that finds the answer committed: the audit row's detail is the request id answered.
        return self._operate(workflow_id, action, now, who, answer, lambda done: done)
