"""Operator writes: starting a workflow and sending it a signal (the CLI and the console)."""

from __future__ import annotations

import sqlite3
import time
import uuid
from typing import Any

from engine.core import TIMER
from engine.errors import DuplicateWorkflowIdError, StoreError, UnknownWorkflowIdError, WorkflowClosedError
from engine.store.connection import SQLiteConnection


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
        text = self.encode_payload(payload, f"the payload of signal {name!r}")
        now = time.time()
        with self._write() as conn:
            row = conn.execute("SELECT status, blocked_on FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
            if row is None:
                raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
            status, blocked_on = row
            if status in ("completed", "failed"):
                raise WorkflowClosedError(f"workflow {workflow_id!r} is {status} and accepts no signals")
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
