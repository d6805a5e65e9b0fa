"""Operator writes: start, signal, cancel, terminate, retry, fork, import (the CLI and the console).

Each is one write transaction that also appends the action to the audit table, refused
whole (nothing written) on bad input.
"""

from __future__ import annotations

import getpass
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.core import APPROVAL_PREFIX, CHILD_PREFIX, TIMER
from engine.errors import (
    DuplicateWorkflowIdError,
    OperatorRefusedError,
    StoreError,
    UnknownWorkflowIdError,
    WorkflowClosedError,
)
from engine.store.connection import SQLiteConnection
from engine.store.keys import SLOT_LIMIT, SLOTS_NOW, slot_key
from engine.store.rows import FINISHED_STATUSES, dumps

if TYPE_CHECKING:
    from engine.history import HistoryDocument


def actor() -> str:
    """Who acts: user@host, as the audit trail records it."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container): its number says who
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def _audit(conn: sqlite3.Connection, workflow_id: str, action: str, now: float, reason: str | None = None,
           detail: str | None = None) -> None:
    conn.execute("INSERT INTO audit (workflow_id, action, at, actor, reason, detail) VALUES (?, ?, ?, ?, ?, ?)",
                 (workflow_id, action, now, actor(), reason, detail))


def _status_of(conn: sqlite3.Connection, workflow_id: str) -> tuple[str, str | None]:
    row = conn.execute("SELECT status, cancel_requested FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
    if row is None:
        raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
    return row[0], row[1]


def _request_cancel(conn: sqlite3.Connection, workflow_id: str, reason: str | None, now: float,
                    detail: str | None = None) -> None:
    """Set an unfinished workflow's cancel request; a blocked one is made runnable so that its wait raises it."""
    conn.execute(
        "UPDATE workflows SET cancel_requested = ?, updated_at = ?,"
        " status = CASE WHEN status = 'blocked' THEN 'pending' ELSE status END,"
        " blocked_on = CASE WHEN status = 'blocked' THEN NULL ELSE blocked_on END,"
        " wake_at = CASE WHEN status = 'blocked' THEN NULL ELSE wake_at END WHERE id = ?",
        (reason or "", now, workflow_id))
    _audit(conn, workflow_id, "cancel", now, reason, detail)


def _terminate(conn: sqlite3.Connection, workflow_id: str, error: str, reason: str | None, now: float,
               detail: str | None = None) -> None:
    """End an unfinished workflow `terminated`, its lease epoch moved on (its worker fenced out)."""
    # slots: a running workflow's column may lag its last slot (commit fence); take the true count.
    conn.execute(
        "UPDATE workflows SET status = 'terminated', error = ?, blocked_on = NULL, wake_at = NULL,"
        " lease_owner = NULL, lease_expires = NULL, lease_epoch = lease_epoch + 1, retry_at = NULL,"
        f" slots = {SLOTS_NOW}, updated_at = ? WHERE id = ?", (error, now, workflow_id))
    _audit(conn, workflow_id, "terminate", now, reason, detail)


def _unfinished_descendants(conn: sqlite3.Connection, workflow_id: str) -> list[tuple[str, str, str | None]]:
    """(id, status, cancel_requested) of a workflow's unfinished children, grandchildren, …, in start order."""
    return [(r[0], r[1], r[2]) for r in conn.execute(
        "WITH RECURSIVE tree(id) AS (SELECT id FROM workflows WHERE parent = ?"
        " UNION SELECT w.id FROM workflows w JOIN tree ON w.parent = tree.id)"
        " SELECT w.id, w.status, w.cancel_requested FROM workflows w JOIN tree ON w.id = tree.id"
        " WHERE w.status IN ('pending', 'running', 'blocked') ORDER BY w.seq", (workflow_id,))]


def tell_parent(conn: sqlite3.Connection, child_id: str, outcome: dict[str, Any], now: float) -> None:
    """A child workflow ended: deliver {"ok", "result", "error"} to its parent, if it has one still open."""
    parent = conn.execute("SELECT parent FROM workflows WHERE id = ?", (child_id,)).fetchone()
    if parent is None or parent[0] is None:
        return
    row = conn.execute("SELECT status, blocked_on FROM workflows WHERE id = ?", (parent[0],)).fetchone()
    if row is None or row[0] in FINISHED_STATUSES:
        return
    append_signal(conn, parent[0], CHILD_PREFIX + child_id, dumps(outcome), now, row[0], row[1])


def _check_id(wid: str) -> None:
    if not wid or len(wid) > 200 or any(c.isspace() or not c.isprintable() for c in wid):
        raise StoreError(f"workflow id {wid!r} is not valid: use 1-200 printable characters without spaces")


def _insert_workflow(conn: sqlite3.Connection, wid: str, workflow: str, input_text: str | None, now: float,
                     *, status: str = "pending", slots: int = 0, result: str | None = None,
                     error: str | None = None, diagnostic: str | None = None, error_kind: str | None = None,
                     forked_from: str | None = None, forked_slot: int | None = None) -> int:
    """Insert a workflow row; return its seq. DuplicateWorkflowIdError if the id is taken."""
    try:
        # seq numbers workflows in start order (under the write lock): the newest
        # workflow's command rows sort last, where appending to them is cheapest.
        row = conn.execute(
            "INSERT INTO workflows (id, workflow, status, input, result, error, diagnostic, error_kind, slots,"
            " created_at, updated_at, lease_epoch, seq, forked_from, forked_slot) VALUES (?, ?, ?, ?, ?, ?, ?, ?,"
            " ?, ?, ?, 0, (SELECT COALESCE(MAX(seq), 0) + 1 FROM workflows), ?, ?) RETURNING seq",
            (wid, workflow, status, input_text, result, error, diagnostic, error_kind, slots, now, now, forked_from,
             forked_slot),
        ).fetchone()
    except sqlite3.IntegrityError:
        raise DuplicateWorkflowIdError(f"a workflow with id {wid!r} already exists") from None
    return int(row[0])


class ApprovalRefusedError(OperatorRefusedError):
    """An approval answer that does not fit: nothing is pending, or another request is."""


def operator_name() -> str:
    """Who answers an approval from this process: user@host."""
    return actor()


def new_workflow_id() -> str:
    """A fresh, unguessable workflow id."""
    return "wf-" + uuid.uuid4().hex[:16]


class OperatorWrites(SQLiteConnection):
    """Writes an operator makes, each one write transaction, refused whole on bad input."""

    def start_workflow(self, workflow: str, input: Any = None, *, has_input: bool = True,
                       workflow_id: str | None = None) -> str:
        """Insert a pending workflow; return its id."""
        input_text = self.encode_payload(input, "the workflow input") if has_input else None
        wid = workflow_id or new_workflow_id()
        _check_id(wid)
        now = time.time()
        with self._write() as conn:
            _insert_workflow(conn, wid, workflow, input_text, now)
            _audit(conn, wid, "start", now, detail=workflow)
        return wid

    def send_signal(self, workflow_id: str, name: str, payload: Any = None) -> int:
        """Append a signal in one write transaction; wake the workflow if it waits on `name`.

        Returns the signal's sequence number. Refuses unknown ids, closed workflows and
        payloads over the cap, writing nothing.
        """
        check_signal_name(name)
        text = self.encode_payload(payload, f"the payload of signal {name!r}")
        now = time.time()
        with self._write() as conn:
            status, blocked_on = self._open_workflow(conn, workflow_id)
            seq = append_signal(conn, workflow_id, name, text, now, status, blocked_on)
            _audit(conn, workflow_id, "signal", now, detail=f"{name} #{seq}")
        return seq

    def cancel_workflow(self, workflow_id: str, reason: str | None = None) -> str:
        """Ask a pending, running or blocked workflow to cancel; return the status it had.

        Only a request: its code sees WorkflowCancelled at its current or next ctx call
        (a running worker learns of it through the commit fence). A blocked workflow is
        made runnable so that its wait raises it. The lease is untouched: nothing a
        worker holding it writes is lost. Its unfinished child workflows (ctx.call_workflow,
        at any depth) are asked to cancel in the same transaction, each with an audit row.
        """
        now = time.time()
        with self._write() as conn:
            status, requested = _status_of(conn, workflow_id)
            if status in FINISHED_STATUSES:
                raise OperatorRefusedError(f"workflow {workflow_id!r} is {status}: only a pending, running or"
                                           " blocked workflow can be cancelled")
            if requested is not None:
                raise OperatorRefusedError(f"workflow {workflow_id!r} was already asked to cancel")
            _request_cancel(conn, workflow_id, reason, now)
            for child, _, child_requested in _unfinished_descendants(conn, workflow_id):
                if child_requested is None:  # a child already asked keeps its own request
                    _request_cancel(conn, child, reason, now, detail=f"with its parent, from {workflow_id}")
        return status

    def terminate_workflow(self, workflow_id: str, reason: str | None = None) -> str:
        """Stop a pending, running or blocked workflow at once; return the status it had.

        Its status becomes `terminated` and its lease epoch moves on, so a worker running
        it has every later write refused (fenced out): no workflow code runs again and an
        activity in flight has its outcome dropped. Its unfinished child workflows (at any
        depth) are terminated with it, each with an audit row; a child terminated on its
        own has its parent told (ChildWorkflowError there), as when a child fails.
        """
        now = time.time()
        error = f"terminated by an operator: {reason}" if reason else "terminated by an operator"
        with self._write() as conn:
            status, _ = _status_of(conn, workflow_id)
            if status in FINISHED_STATUSES:
                raise OperatorRefusedError(f"workflow {workflow_id!r} is {status}: only a pending, running or"
                                           " blocked workflow can be terminated")
            descendants = _unfinished_descendants(conn, workflow_id)
            _terminate(conn, workflow_id, error, reason, now)
            for child, _, _ in descendants:
                _terminate(conn, child, error, reason, now, detail=f"with its parent, from {workflow_id}")
            tell_parent(conn, workflow_id, {"ok": False, "result": None, "error": error}, now)
        return status

    def retry_workflow(self, workflow_id: str, reason: str | None = None) -> None:
        """Make a failed workflow pending again, history kept: the worker replays it and goes on.

        The caller dry-replays it against the current code first (engine.check.retry_verdict).
        """
        now = time.time()
        with self._write() as conn:
            status, _ = _status_of(conn, workflow_id)
            if status != "failed":
                raise OperatorRefusedError(f"workflow {workflow_id!r} is {status}: only a failed workflow can be"
                                           " retried")
            conn.execute(
                "UPDATE workflows SET status = 'pending', result = NULL, error = NULL, diagnostic = NULL,"
                " error_kind = NULL, worker_error = NULL, interruptions = 0, retry_at = NULL, updated_at = ?"
                " WHERE id = ? AND status = 'failed'", (now, workflow_id))
            _audit(conn, workflow_id, "retry", now, reason)

    def fork_workflow(self, workflow_id: str, from_slot: int, *, new_id: str | None = None) -> str:
        """A new pending workflow of the same name and input, with slots 0..from_slot-1 and every signal copied.

        From slot `from_slot` its code runs live (under its own id, so with new
        idempotency keys). The original is untouched. Returns the new id.
        """
        wid = new_id or new_workflow_id()
        _check_id(wid)
        now = time.time()
        with self._write() as conn:
            row = conn.execute("SELECT workflow, input, seq, status FROM workflows WHERE id = ?",
                               (workflow_id,)).fetchone()
            if row is None:
                raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
            workflow, input_text, seq, _ = row
            old = slot_key(seq)
            recorded = conn.execute("SELECT COUNT(*) FROM commands WHERE slot_key BETWEEN ? AND ?",
                                    (old, old + SLOT_LIMIT - 1)).fetchone()[0]
            if not 0 <= from_slot <= recorded:
                raise OperatorRefusedError(f"--from-slot {from_slot} is outside 0..{recorded}: workflow"
                                           f" {workflow_id!r} has {recorded} recorded slot(s)")
            new = slot_key(_insert_workflow(conn, wid, workflow, input_text, now, slots=from_slot,
                                            forked_from=workflow_id, forked_slot=from_slot))
            conn.execute(
                "INSERT INTO commands (slot_key, kind, name, ok, value, error, attempts, recorded_at, args)"
                " SELECT slot_key - ? + ?, kind, name, ok, value, error, attempts, recorded_at, args FROM commands"
                " WHERE slot_key BETWEEN ? AND ?", (old, new, old, old + from_slot - 1))
            conn.execute(
                "INSERT INTO signals (workflow_id, seq, name, payload, consumed, sent_at)"
                " SELECT ?, seq, name, payload, 0, sent_at FROM signals WHERE workflow_id = ?", (wid, workflow_id))
            _audit(conn, wid, "fork", now, detail=f"from {workflow_id} at slot {from_slot}")
        return wid

    def import_history(self, doc: HistoryDocument, *, new_id: str | None = None) -> str:
        """Write an exported history as a new workflow; return its id.

        A workflow that was running or blocked is imported pending (a worker replays it
        and blocks it again if it still waits); a finished one keeps its status.
        """
        wid = new_id or doc.id
        _check_id(wid)
        status = "pending" if doc.status in ("running", "blocked") else doc.status
        input_text = self.encode_payload(doc.input, "the workflow input") if doc.has_input else None
        result = self.encode_payload(doc.result, "the workflow's result") if status == "completed" else None
        now = time.time()
        with self._write() as conn:
            base = slot_key(_insert_workflow(
                conn, wid, doc.workflow, input_text, now, status=status, slots=len(doc.commands), result=result,
                error=doc.error, diagnostic=None if doc.diagnostic is None else dumps(doc.diagnostic),
                error_kind=doc.error_kind if status == "failed" else None,
                forked_from=doc.forked_from, forked_slot=doc.forked_slot))
            conn.executemany(
                "INSERT INTO commands (slot_key, kind, name, ok, value, error, attempts, recorded_at, args)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(base + i, c.kind, c.name, int(c.ok), self.encode_payload(c.value, f"slot {i}'s value")
                  if c.ok else None, c.error, c.attempts, at, c.args)
                 for i, (c, at) in enumerate(zip(doc.commands, doc.recorded_at, strict=True))])
            consumed = status != "pending"
            conn.executemany(
                "INSERT INTO signals (workflow_id, seq, name, payload, consumed, sent_at) VALUES (?, ?, ?, ?, ?, ?)",
                [(wid, s.seq, s.name, self.encode_payload(s.payload, f"the payload of signal {s.name!r}"),
                  int(consumed), at) for s, at in zip(doc.signals, doc.sent_at, strict=True)])
            _audit(conn, wid, "import", now, detail=f"from an export of {doc.id}")
        return wid

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
        now = time.time()
        with self._write() as conn:
            row = conn.execute("SELECT status, blocked_on, wake_at, seq FROM workflows WHERE id = ?",
                               (workflow_id,)).fetchone()
            if row is None:
                raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
            status, blocked_on, wake_at, seq = row
            pending = pending_request(workflow_id, status, blocked_on, wake_at, request, now,
                                      lambda: _approval_timeout(conn, seq, request))
            payload = {"approved": bool(approved), "by": by, "note": note, "request": pending}
            text = self.encode_payload(payload, "the approval's answer")
            append_signal(conn, workflow_id, blocked_on, text, now, status, blocked_on)
            _audit(conn, workflow_id, "approve" if approved else "reject", now, note, detail=pending)
        return str(pending)

    @staticmethod
    def _open_workflow(conn: sqlite3.Connection, workflow_id: str) -> tuple[str, str | None]:
        """(status, blocked_on) of a workflow that accepts signals; refuse unknown and closed ones."""
        row = conn.execute("SELECT status, blocked_on FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
        if row is None:
            raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
        status, blocked_on = row
        if status in FINISHED_STATUSES:
            raise WorkflowClosedError(f"workflow {workflow_id!r} is {status} and accepts no signals")
        return status, blocked_on


def check_signal_name(name: str) -> None:
    """Refuse a signal name an operator may not send: empty, or one the store sends itself."""
    if not name:
        raise StoreError("the signal name must not be empty")
    if name.startswith(APPROVAL_PREFIX):
        raise StoreError(f"signal names starting {APPROVAL_PREFIX!r} answer approvals: use `replaylog approve`")
    if name.startswith(CHILD_PREFIX):
        raise StoreError(f"signal names starting {CHILD_PREFIX!r} are sent by child workflows when they finish")


def pending_request(workflow_id: str, status: str, blocked_on: str | None, wake_at: float | None,
                    request: str | None, now: float, timed_out: Callable[[], tuple[str, float] | None]) -> str:
    """The request id an answer may unlock, read under the backend's write lock; else ApprovalRefusedError.

    Refused when the workflow waits on no approval, when `request` names another one,
    or when the pending one's deadline has passed. `timed_out` finds the last request
    that timed out (asked only to word a refusal).
    """
    waiting = status == "blocked" and bool(blocked_on) and str(blocked_on).startswith(APPROVAL_PREFIX)
    pending = str(blocked_on)[len(APPROVAL_PREFIX):] if waiting else None
    if waiting and wake_at is not None and now >= wake_at and request in (None, pending):
        raise ApprovalRefusedError(f"request {pending!r} of workflow {workflow_id!r} timed out at"
                                   f" {_utc(wake_at)}: it is closed, the answer was not recorded")
    if pending is None or (request is not None and request != pending):
        closed = timed_out()
        late = "" if closed is None else f"; request {closed[0]!r} timed out at {_utc(closed[1])} and is closed"
        if pending is not None:
            raise ApprovalRefusedError(f"request {request!r} is not the pending one: workflow"
                                       f" {workflow_id!r} waits on {pending!r}{late}")
        waits = f"waits for signal {blocked_on!r}" if status == "blocked" else f"is {status}"
        raise ApprovalRefusedError(f"workflow {workflow_id!r} has no pending approval request (it {waits}){late}")
    return pending


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _approval_timeout(conn: sqlite3.Connection, seq: int, request: str | None) -> tuple[str, float] | None:
    """(request id, deadline) of the named approval request if it timed out, else of the latest that did; or None.

    A timed-out approval leaves a `timeout` slot named "approval:RID" holding the time it
    was decided, after the wait's `deadline` slot holding the deadline itself.
    """
    base = slot_key(seq)
    name = "" if request is None else APPROVAL_PREFIX + request
    row = conn.execute(
        "SELECT t.name, d.value FROM commands t JOIN commands d ON d.slot_key = t.slot_key - 1"
        " WHERE t.slot_key BETWEEN ? AND ? AND t.kind = 'timeout' AND d.kind = 'deadline'"
        " AND (t.name = ? OR (? = '' AND substr(t.name, 1, ?) = ?)) ORDER BY t.slot_key DESC LIMIT 1",
        (base, base + SLOT_LIMIT - 1, name, name, len(APPROVAL_PREFIX), APPROVAL_PREFIX)).fetchone()
    if row is None:
        return None
    return row[0][len(APPROVAL_PREFIX):], float(row[1])


def append_signal(conn: sqlite3.Connection, workflow_id: str, name: str, text: str, now: float, status: str,
                   blocked_on: str | None) -> int:
    """Append a signal with the next sequence number; wake the workflow if it waits on `name`."""
    seq = conn.execute(
        "SELECT COALESCE(MAX(seq), 0) + 1 FROM signals WHERE workflow_id = ?", (workflow_id,)
    ).fetchone()[0]
    conn.execute(
        "INSERT INTO signals (workflow_id, seq, name, payload, consumed, sent_at) VALUES (?, ?, ?, ?, 0, ?)",
        (workflow_id, seq, name, text, now),
    )
    if status == "blocked" and blocked_on == name and name != TIMER:
        # Under the write lock: a claim of its passed deadline cannot take it as well.
        conn.execute(
            "UPDATE workflows SET status = 'pending', blocked_on = NULL, wake_at = NULL, updated_at = ?"
            " WHERE id = ?",
            (now, workflow_id),
        )
    else:
        conn.execute("UPDATE workflows SET updated_at = ? WHERE id = ?", (now, workflow_id))
    return int(seq)
