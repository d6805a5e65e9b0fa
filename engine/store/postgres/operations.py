"""Operator writes on PostgreSQL: start, signal, cancel, terminate, retry, fork, import, approve; each NOTIFYs.

Each is one transaction that also appends the action to the audit table, refused whole
(nothing written) on bad input, as on SQLite (engine.store.operations). The workflow's
row is locked first (FOR UPDATE), which orders an operator's write against a worker's
claim, verdict or another operator.

After a connection fault a write is tried again on a new connection (PGConnection._run);
one whose answer was lost may have committed. Its audit row, stamped with this call's
own time and actor, tells: a retry that finds it returns what the first try did instead
of writing (or refusing) a second time.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from psycopg import errors as pg_errors

from engine.core import APPROVAL_PREFIX, CHILD_PREFIX, TIMER
from engine.errors import (
    DuplicateWorkflowIdError,
    OperatorRefusedError,
    UnknownWorkflowIdError,
    WorkflowClosedError,
)
from engine.store.keys import SLOT_LIMIT, slot_key
from engine.store.operations import (
    _check_id,
    actor,
    check_signal_name,
    new_workflow_id,
    pending_request,
)
from engine.store.postgres.connection import NOTIFY, Conn, PGConnection
from engine.store.rows import FINISHED_STATUSES, dumps

if TYPE_CHECKING:
    from engine.history import HistoryDocument


def _audit(conn: Conn, workflow_id: str, action: str, now: float, who: str, reason: str | None = None,
           detail: str | None = None) -> None:
    conn.execute("INSERT INTO audit (workflow_id, action, at, actor, reason, detail) VALUES (%s, %s, %s, %s, %s, %s)",
                 (workflow_id, action, now, who, reason, detail))


def _done_before(conn: Conn, attempt: int, workflow_id: str, action: str, now: float, who: str) -> str | None:
    """After a lost answer (attempt > 0): the detail of this very action's audit row if it committed, else None.

    ("" when it committed without a detail.)
    """
    if not attempt:
        return None
    row = conn.execute("SELECT detail FROM audit WHERE workflow_id = %s AND action = %s AND at = %s AND actor = %s",
                       (workflow_id, action, now, who)).fetchone()
    return None if row is None else (row[0] or "")


def _status_of(conn: Conn, workflow_id: str) -> tuple[str, str | None]:
    row = conn.execute("SELECT status, cancel_requested FROM workflows WHERE id = %s FOR UPDATE",
                       (workflow_id,)).fetchone()
    if row is None:
        raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
    return row[0], row[1]


def _append_signal(conn: Conn, workflow_id: str, name: str, text: str, now: float, status: str,
                   blocked_on: str | None) -> int:
    """Append a signal with the next sequence number; wake the workflow if it waits on `name`.

    The caller holds the workflow's row lock: it orders concurrent senders (sequence numbers
    without gaps or repeats) and a claim of a passed deadline, which cannot take it as well.
    """
    seq_row = conn.execute(
        "INSERT INTO signals (workflow_id, seq, name, payload, consumed, sent_at)"
        " SELECT %s, COALESCE(MAX(seq), 0) + 1, %s, %s, false, %s FROM signals WHERE workflow_id = %s"
        " RETURNING seq", (workflow_id, name, text, now, workflow_id)).fetchone()
    assert seq_row is not None
    if status == "blocked" and blocked_on == name and name != TIMER:
        conn.execute("UPDATE workflows SET status = 'pending', blocked_on = NULL, wake_at = NULL,"
                     " updated_at = %s WHERE id = %s", (now, workflow_id))
    else:
        conn.execute("UPDATE workflows SET updated_at = %s WHERE id = %s", (now, workflow_id))
    return int(seq_row[0])


def tell_parent(conn: Conn, child_id: str, outcome: dict[str, Any], now: float) -> None:
    """A child workflow ended: deliver {"ok", "result", "error"} to its parent, if it has one still open."""
    row = conn.execute(
        "SELECT p.id, p.status, p.blocked_on FROM workflows c JOIN workflows p ON p.id = c.parent"
        " WHERE c.id = %s FOR UPDATE OF p", (child_id,)).fetchone()
    if row is None or row[1] in FINISHED_STATUSES:
        return
    _append_signal(conn, row[0], CHILD_PREFIX + child_id, dumps(outcome), now, row[1], row[2])


def _unfinished_descendants(conn: Conn, workflow_id: str) -> list[tuple[str, str | None]]:
    """(id, cancel_requested) of a workflow's unfinished children, grandchildren, …, in start order, locked."""
    return [(r[0], r[1]) for r in conn.execute(
        "WITH RECURSIVE tree(id) AS (SELECT id FROM workflows WHERE parent = %s"
        " UNION SELECT w.id FROM workflows w JOIN tree ON w.parent = tree.id)"
        " SELECT w.id, w.cancel_requested FROM workflows w JOIN tree ON w.id = tree.id"
        " WHERE w.status IN ('pending', 'running', 'blocked') ORDER BY w.seq FOR UPDATE OF w", (workflow_id,))]


def _request_cancel(conn: Conn, workflow_id: str, reason: str | None, now: float, who: str,
                    detail: str | None = None) -> None:
    """Set an unfinished workflow's cancel request; a blocked one is made runnable so that its wait raises it."""
    conn.execute(
        "UPDATE workflows SET cancel_requested = %s, updated_at = %s,"
        " status = CASE WHEN status = 'blocked' THEN 'pending' ELSE status END,"
        " blocked_on = CASE WHEN status = 'blocked' THEN NULL ELSE blocked_on END,"
        " wake_at = CASE WHEN status = 'blocked' THEN NULL ELSE wake_at END WHERE id = %s",
        (reason or "", now, workflow_id))
    _audit(conn, workflow_id, "cancel", now, who, reason, detail)


def _terminate(conn: Conn, workflow_id: str, error: str, reason: str | None, now: float, who: str,
               detail: str | None = None) -> None:
    """End an unfinished workflow `terminated`, its lease epoch moved on (its worker fenced out)."""
    conn.execute(
        "UPDATE workflows SET status = 'terminated', error = %s, blocked_on = NULL, wake_at = NULL,"
        " lease_owner = NULL, lease_expires = NULL, lease_epoch = lease_epoch + 1, retry_at = NULL,"
        " updated_at = %s WHERE id = %s", (error, now, workflow_id))
    _audit(conn, workflow_id, "terminate", now, who, reason, detail)


def _approval_timeout(conn: Conn, seq: int, request: str | None) -> tuple[str, float] | None:
    """(request id, deadline) of the named approval request if it timed out, else of the latest that did; or None.

    A timed-out approval leaves a `timeout` slot named "approval:RID" holding the time it
    was decided, after the wait's `deadline` slot holding the deadline itself.
    """
    base = slot_key(seq)
    which, param = (("left(t.name, %s) = %s", [len(APPROVAL_PREFIX), APPROVAL_PREFIX]) if request is None
                    else ("t.name = %s", [APPROVAL_PREFIX + request]))
    row = conn.execute(
        "SELECT t.name, d.value FROM commands t JOIN commands d ON d.slot_key = t.slot_key - 1"
        f" WHERE t.slot_key BETWEEN %s AND %s AND t.kind = 'timeout' AND d.kind = 'deadline' AND {which}"
        " ORDER BY t.slot_key DESC LIMIT 1", (base, base + SLOT_LIMIT - 1, *param)).fetchone()
    if row is None:
        return None
    return row[0][len(APPROVAL_PREFIX):], float(row[1])


def _insert_workflow(conn: Conn, wid: str, workflow: str, input_text: str | None, now: float,
                     *, status: str = "pending", slots: int = 0, result: str | None = None,
                     error: str | None = None, diagnostic: str | None = None, error_kind: str | None = None,
                     forked_from: str | None = None, forked_slot: int | None = None) -> int:
    """Insert a workflow row; return its seq. DuplicateWorkflowIdError if the id is taken."""
    try:
        # A savepoint: the unique violation must not abort the caller's transaction.
        with conn.transaction():
            row = conn.execute(
                "INSERT INTO workflows (id, workflow, status, input, result, error, diagnostic, error_kind, slots,"
                " created_at, updated_at, forked_from, forked_slot)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING seq",
                (wid, workflow, status, input_text, result, error, diagnostic, error_kind, slots, now, now,
                 forked_from, forked_slot)).fetchone()
    except pg_errors.UniqueViolation:
        raise DuplicateWorkflowIdError(f"a workflow with id {wid!r} already exists") from None
    assert row is not None
    return int(row[0])


class PGOperatorWrites(PGConnection):
    """Writes an operator makes, each one transaction, refused whole on bad input."""

    def start_workflow(self, workflow: str, input: Any = None, *, has_input: bool = True,
                       workflow_id: str | None = None) -> str:
        """Insert a pending workflow; return its id."""
        input_text = self.encode_payload(input, "the workflow input") if has_input else None
        wid = workflow_id or new_workflow_id()
        _check_id(wid)
        now, who = time.time(), actor()

        def insert(conn: Conn, attempt: int) -> None:
            with conn.transaction():
                if _done_before(conn, attempt, wid, "start", now, who) is not None:
                    return  # our own insert, committed before the connection broke
                _insert_workflow(conn, wid, workflow, input_text, now)
                _audit(conn, wid, "start", now, who, detail=workflow)
                conn.execute(NOTIFY)

        self._run(insert, write=True)
        return wid

    def send_signal(self, workflow_id: str, name: str, payload: Any = None) -> int:
        """Append a signal in one transaction; wake the workflow if it waits on `name`.

        Returns the signal's sequence number. Refuses unknown ids, closed workflows and
        payloads over the cap, writing nothing.
        """
        check_signal_name(name)
        text = self.encode_payload(payload, f"the payload of signal {name!r}")
        now, who = time.time(), actor()

        def send(conn: Conn, attempt: int) -> int:
            with conn.transaction():
                done = _done_before(conn, attempt, workflow_id, "signal", now, who)
                if done is not None:
                    return int(done.rsplit("#", 1)[1])  # detail: "name #seq"
                # The row lock orders concurrent senders: sequence numbers without gaps or repeats.
                row = conn.execute("SELECT status, blocked_on FROM workflows WHERE id = %s FOR UPDATE",
                                   (workflow_id,)).fetchone()
                if row is None:
                    raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
                status, blocked_on = row
                if status in FINISHED_STATUSES:
                    raise WorkflowClosedError(f"workflow {workflow_id!r} is {status} and accepts no signals")
                seq = _append_signal(conn, workflow_id, name, text, now, status, blocked_on)
                _audit(conn, workflow_id, "signal", now, who, detail=f"{name} #{seq}")
                conn.execute(NOTIFY)
            return seq

        return self._run(send, write=True)

    def cancel_workflow(self, workflow_id: str, reason: str | None = None) -> str:
        """Ask a pending, running or blocked workflow to cancel; return the status it had (see the SQLite store).

        Its unfinished child workflows (at any depth) are asked to cancel in the same
        transaction, each with an audit row.
        """
        now, who = time.time(), actor()
        first: list[str] = []  # the status the first try read, for a retry that finds it committed

        def cancel(conn: Conn, attempt: int) -> str:
            with conn.transaction():
                if first and _done_before(conn, attempt, workflow_id, "cancel", now, who) is not None:
                    return first[0]
                status, requested = _status_of(conn, workflow_id)
                if status in FINISHED_STATUSES:
                    raise OperatorRefusedError(f"workflow {workflow_id!r} is {status}: only a pending, running or"
                                               " blocked workflow can be cancelled")
                if requested is not None:
                    raise OperatorRefusedError(f"workflow {workflow_id!r} was already asked to cancel")
                first[:] = [status]
                _request_cancel(conn, workflow_id, reason, now, who)
                for child, child_requested in _unfinished_descendants(conn, workflow_id):
                    if child_requested is None:  # a child already asked keeps its own request
                        _request_cancel(conn, child, reason, now, who, detail=f"with its parent, from {workflow_id}")
                conn.execute(NOTIFY)
            return status

        return self._run(cancel, write=True)

    def terminate_workflow(self, workflow_id: str, reason: str | None = None) -> str:
        """Stop a pending, running or blocked workflow at once, fencing out its worker; the status it had.

        Its unfinished child workflows (at any depth) are terminated with it, each with an
        audit row; a child terminated on its own has its parent told, as when a child fails.
        """
        now, who = time.time(), actor()
        error = f"terminated by an operator: {reason}" if reason else "terminated by an operator"
        first: list[str] = []

        def terminate(conn: Conn, attempt: int) -> str:
            with conn.transaction():
                if first and _done_before(conn, attempt, workflow_id, "terminate", now, who) is not None:
                    return first[0]
                status, _ = _status_of(conn, workflow_id)
                if status in FINISHED_STATUSES:
                    raise OperatorRefusedError(f"workflow {workflow_id!r} is {status}: only a pending, running or"
                                               " blocked workflow can be terminated")
                first[:] = [status]
                descendants = _unfinished_descendants(conn, workflow_id)
                # The epoch moves on: every later write of the worker holding the lease is refused.
                _terminate(conn, workflow_id, error, reason, now, who)
                for child, _ in descendants:
                    _terminate(conn, child, error, reason, now, who, detail=f"with its parent, from {workflow_id}")
                tell_parent(conn, workflow_id, {"ok": False, "result": None, "error": error}, now)
                conn.execute(NOTIFY)
            return status

        return self._run(terminate, write=True)

    def retry_workflow(self, workflow_id: str, reason: str | None = None) -> None:
        """Make a failed workflow pending again, history kept (the caller dry-replays it first)."""
        now, who = time.time(), actor()

        def retry(conn: Conn, attempt: int) -> None:
            with conn.transaction():
                if _done_before(conn, attempt, workflow_id, "retry", now, who) is not None:
                    return
                status, _ = _status_of(conn, workflow_id)
                if status != "failed":
                    raise OperatorRefusedError(f"workflow {workflow_id!r} is {status}: only a failed workflow can"
                                               " be retried")
                conn.execute(
                    "UPDATE workflows SET status = 'pending', result = NULL, error = NULL, diagnostic = NULL,"
                    " error_kind = NULL, worker_error = NULL, interruptions = 0, retry_at = NULL, updated_at = %s"
                    " WHERE id = %s AND status = 'failed'", (now, workflow_id))
                _audit(conn, workflow_id, "retry", now, who, reason)
                conn.execute(NOTIFY)

        self._run(retry, write=True)

    def fork_workflow(self, workflow_id: str, from_slot: int, *, new_id: str | None = None) -> str:
        """A new pending workflow of the same name and input, with slots 0..from_slot-1 and every signal copied."""
        wid = new_id or new_workflow_id()
        _check_id(wid)
        now, who = time.time(), actor()

        def fork(conn: Conn, attempt: int) -> None:
            with conn.transaction():
                if _done_before(conn, attempt, wid, "fork", now, who) is not None:
                    return
                row = conn.execute("SELECT workflow, input, seq FROM workflows WHERE id = %s FOR SHARE",
                                   (workflow_id,)).fetchone()
                if row is None:
                    raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
                workflow, input_text, seq = row
                old = slot_key(int(seq))
                counted = conn.execute("SELECT COUNT(*) FROM commands WHERE slot_key BETWEEN %s AND %s",
                                       (old, old + SLOT_LIMIT - 1)).fetchone()
                recorded = int(counted[0]) if counted else 0
                if not 0 <= from_slot <= recorded:
                    raise OperatorRefusedError(f"--from-slot {from_slot} is outside 0..{recorded}: workflow"
                                               f" {workflow_id!r} has {recorded} recorded slot(s)")
                new = slot_key(_insert_workflow(conn, wid, workflow, input_text, now, slots=from_slot,
                                                forked_from=workflow_id, forked_slot=from_slot))
                conn.execute(
                    "INSERT INTO commands (slot_key, kind, name, ok, value, error, attempts, recorded_at, args)"
                    " SELECT slot_key - %s + %s, kind, name, ok, value, error, attempts, recorded_at, args"
                    " FROM commands"
                    " WHERE slot_key BETWEEN %s AND %s", (old, new, old, old + from_slot - 1))
                conn.execute(
                    "INSERT INTO signals (workflow_id, seq, name, payload, consumed, sent_at)"
                    " SELECT %s, seq, name, payload, false, sent_at FROM signals WHERE workflow_id = %s",
                    (wid, workflow_id))
                _audit(conn, wid, "fork", now, who, detail=f"from {workflow_id} at slot {from_slot}")
                conn.execute(NOTIFY)

        self._run(fork, write=True)
        return wid

    def import_history(self, doc: HistoryDocument, *, new_id: str | None = None) -> str:
        """Write an exported history as a new workflow; return its id (see the SQLite store)."""
        wid = new_id or doc.id
        _check_id(wid)
        status = "pending" if doc.status in ("running", "blocked") else doc.status
        input_text = self.encode_payload(doc.input, "the workflow input") if doc.has_input else None
        result = self.encode_payload(doc.result, "the workflow's result") if status == "completed" else None
        commands = [(c.kind, c.name, bool(c.ok), self.encode_payload(c.value, f"slot {i}'s value") if c.ok else None,
                     c.error, c.attempts, at, c.args)
                    for i, (c, at) in enumerate(zip(doc.commands, doc.recorded_at, strict=True))]
        consumed = status != "pending"
        signals = [(wid, s.seq, s.name, self.encode_payload(s.payload, f"the payload of signal {s.name!r}"),
                    consumed, at) for s, at in zip(doc.signals, doc.sent_at, strict=True)]
        now, who = time.time(), actor()

        def write(conn: Conn, attempt: int) -> None:
            with conn.transaction():
                if _done_before(conn, attempt, wid, "import", now, who) is not None:
                    return
                base = slot_key(_insert_workflow(
                    conn, wid, doc.workflow, input_text, now, status=status, slots=len(doc.commands),
                    result=result, error=doc.error,
                    diagnostic=None if doc.diagnostic is None else dumps(doc.diagnostic),
                    error_kind=doc.error_kind if status == "failed" else None,
                    forked_from=doc.forked_from, forked_slot=doc.forked_slot))
                with conn.cursor() as cur:
                    if commands:
                        cur.executemany(
                            "INSERT INTO commands (slot_key, kind, name, ok, value, error, attempts, recorded_at,"
                            " args) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                            [(base + i, *c) for i, c in enumerate(commands)])
                    if signals:
                        cur.executemany(
                            "INSERT INTO signals (workflow_id, seq, name, payload, consumed, sent_at)"
                            " VALUES (%s, %s, %s, %s, %s, %s)", signals)
                _audit(conn, wid, "import", now, who, detail=f"from an export of {doc.id}")
                conn.execute(NOTIFY)

        self._run(write, write=True)
        return wid

    def answer_approval(self, workflow_id: str, *, approved: bool, by: str, note: str | None = None,
                        request: str | None = None) -> str:
        """Answer the approval request a workflow waits on, in one transaction; return its id (see the SQLite store).

        Refused (ApprovalRefusedError, nothing written) when the workflow waits on no
        approval, `request` names another request than the pending one, or the pending
        one's deadline has passed (decided under the row lock, so a claim recording the
        timeout and an answer cannot both win).
        """
        now, who = time.time(), actor()
        action = "approve" if approved else "reject"

        def answer(conn: Conn, attempt: int) -> str:
            with conn.transaction():
                done = _done_before(conn, attempt, workflow_id, action, now, who)
                if done is not None:
                    return done  # detail: the request id answered
                row = conn.execute("SELECT status, blocked_on, wake_at, seq FROM workflows WHERE id = %s FOR UPDATE",
                                   (workflow_id,)).fetchone()
                if row is None:
                    raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
                status, blocked_on, wake_at, seq = row
                pending = pending_request(workflow_id, status, blocked_on, wake_at, request, now,
                                          lambda: _approval_timeout(conn, int(seq), request))
                payload = {"approved": bool(approved), "by": by, "note": note, "request": pending}
                text = self.encode_payload(payload, "the approval's answer")
                _append_signal(conn, workflow_id, blocked_on, text, now, status, blocked_on)
                _audit(conn, workflow_id, action, now, who, note, detail=pending)
                conn.execute(NOTIFY)
            return str(pending)

        return self._run(answer, write=True)
