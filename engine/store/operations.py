"""Operator writes: starting a workflow and sending it a signal (the CLI and the console)."""

from __future__ import annotations

import getpass
import os
import socket
import sqlite3
import time
import uuid
from typing import Any

from engine.core import APPROVAL_PREFIX, CHILD_PREFIX
from engine.errors import DuplicateWorkflowIdError, StoreError, UnknownWorkflowIdError, WorkflowClosedError
from engine.store.connection import SQLiteConnection


class ApprovalRefusedError(StoreError):
    """An approval answer that does not fit: nothing is pending, or another request is."""


def operator_name() -> str:
    """Who answers an approval from this process: user@host."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name in this environment (a container, say)
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


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
        if not wid or len(wid) > 200 or any(c.isspace() or not c.isprintable() for c in wid):
            raise StoreError(f"workflow id {wid!r} is not valid: use 1-200 printable characters without spaces")
        now = time.time()
        with self._write() as conn:
            try:
                # seq numbers workflows in start order (under the write lock): the newest
                # workflow's command rows sort last, where appending to them is cheapest.
                conn.execute(
                    "INSERT INTO workflows (id, workflow, status, input, slots, created_at, updated_at, lease_epoch,"
                    " seq) VALUES (?, ?, 'pending', ?, 0, ?, ?, 0, (SELECT COALESCE(MAX(seq), 0) + 1 FROM workflows))",
                    (wid, workflow, input_text, now, now),
                )
            except sqlite3.IntegrityError:
                raise DuplicateWorkflowIdError(f"a workflow with id {wid!r} already exists") from None
        return wid

    def send_signal(self, workflow_id: str, name: str, payload: Any = None) -> int:
        """Append a signal in one write transaction; wake the workflow if it waits on `name`.

        Returns the signal's sequence number. Refuses unknown ids, closed workflows and
        payloads over the cap, writing nothing.
        """
        if not name:
            raise StoreError("the signal name must not be empty")
        if name.startswith(APPROVAL_PREFIX):
            raise StoreError(f"signal names starting {APPROVAL_PREFIX!r} answer approvals: use `replaylog approve`")
        if name.startswith(CHILD_PREFIX):
            raise StoreError(f"signal names starting {CHILD_PREFIX!r} are sent by child workflows when they finish")
        text = self.encode_payload(payload, f"the payload of signal {name!r}")
        now = time.time()
        with self._write() as conn:
            status, blocked_on = self._open_workflow(conn, workflow_id)
            return append_signal(conn, workflow_id, name, text, now, status, blocked_on)

    def answer_approval(self, workflow_id: str, *, approved: bool, by: str, note: str | None = None,
                        request: str | None = None) -> str:
        """Answer the approval request a workflow waits on, in one write transaction; return its id.

        Refused (ApprovalRefusedError, nothing written) when the workflow waits on no
        approval, or `request` names another request than the pending one: a stale
        answer never unlocks a newer call. An answer is used once: it wakes the
        workflow, which then no longer waits on that request.
        """
        now = time.time()
        with self._write() as conn:
            status, blocked_on = self._open_workflow(conn, workflow_id)
            if status != "blocked" or not blocked_on or not blocked_on.startswith(APPROVAL_PREFIX):
                waits = f"waits for signal {blocked_on!r}" if status == "blocked" else f"is {status}"
                raise ApprovalRefusedError(f"workflow {workflow_id!r} has no pending approval request (it {waits})")
            pending = blocked_on[len(APPROVAL_PREFIX):]
            if request is not None and request != pending:
                raise ApprovalRefusedError(
                    f"request {request!r} is not the pending one: workflow {workflow_id!r} waits on {pending!r}")
            payload = {"approved": bool(approved), "by": by, "note": note, "request": pending}
            text = self.encode_payload(payload, "the approval's answer")
            append_signal(conn, workflow_id, blocked_on, text, now, status, blocked_on)
        return pending

    @staticmethod
    def _open_workflow(conn: sqlite3.Connection, workflow_id: str) -> tuple[str, str | None]:
        """(status, blocked_on) of a workflow that accepts signals; refuse unknown and closed ones."""
        row = conn.execute("SELECT status, blocked_on FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
        if row is None:
            raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
        status, blocked_on = row
        if status in ("completed", "failed"):
            raise WorkflowClosedError(f"workflow {workflow_id!r} is {status} and accepts no signals")
        return status, blocked_on


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
    if status == "blocked" and blocked_on == name:
        conn.execute(
            "UPDATE workflows SET status = 'pending', blocked_on = NULL, updated_at = ? WHERE id = ?",
            (now, workflow_id),
        )
    else:
        conn.execute("UPDATE workflows SET updated_at = ? WHERE id = ?", (now, workflow_id))
    return int(seq)
