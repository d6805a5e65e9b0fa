"""Operator writes on PostgreSQL: starting a workflow and sending it a signal; each one announced (NOTIFY)."""

from __future__ import annotations

import time
from typing import Any

from psycopg import errors as pg_errors

from engine.errors import DuplicateWorkflowIdError, StoreError, UnknownWorkflowIdError, WorkflowClosedError
from engine.store.operations import new_workflow_id
from engine.store.postgres.connection import NOTIFY, Conn, PGConnection


class PGOperatorWrites(PGConnection):
    """Writes an operator makes, each one transaction, refused whole on bad input."""

    def start_workflow(self, workflow: str, input: Any = None, *, has_input: bool = True,
                       workflow_id: str | None = None) -> str:
        """Insert a pending workflow; return its id."""
        input_text = self.encode_payload(input, "the workflow input") if has_input else None
        wid = workflow_id or new_workflow_id()
        if not wid or len(wid) > 200 or any(c.isspace() or not c.isprintable() for c in wid):
            raise StoreError(f"workflow id {wid!r} is not valid: use 1-200 printable characters without spaces")
        now = time.time()

        def insert(conn: Conn, attempt: int) -> None:
            try:
                with conn.transaction():
                    conn.execute(
                        "INSERT INTO workflows (id, workflow, status, input, slots, created_at, updated_at)"
                        " VALUES (%s, %s, 'pending', %s, 0, %s, %s)", (wid, workflow, input_text, now, now))
                    conn.execute(NOTIFY)
            except pg_errors.UniqueViolation:
                if attempt and self._started_by_us(conn, wid, now):
                    return  # our own insert, committed before the connection broke
                raise DuplicateWorkflowIdError(f"a workflow with id {wid!r} already exists") from None

        self._run(insert, write=True)
        return wid

    @staticmethod
    def _started_by_us(conn: Conn, wid: str, created_at: float) -> bool:
        row = conn.execute("SELECT created_at FROM workflows WHERE id = %s", (wid,)).fetchone()
        return row is not None and row[0] == created_at

    def send_signal(self, workflow_id: str, name: str, payload: Any = None) -> int:
        """Append a signal in one transaction; wake the workflow if it waits on `name`.

        Returns the signal's sequence number. Refuses unknown ids, closed workflows and
        payloads over the cap, writing nothing.
        """
        if not name:
            raise StoreError("the signal name must not be empty")
        text = self.encode_payload(payload, f"the payload of signal {name!r}")
        now = time.time()

        def send(conn: Conn, _: int) -> int:
            with conn.transaction():
                # The row lock orders concurrent senders: sequence numbers without gaps or repeats.
                row = conn.execute("SELECT status, blocked_on FROM workflows WHERE id = %s FOR UPDATE",
                                   (workflow_id,)).fetchone()
                if row is None:
                    raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
                status, blocked_on = row
                if status in ("completed", "failed"):
                    raise WorkflowClosedError(f"workflow {workflow_id!r} is {status} and accepts no signals")
                seq_row = conn.execute(
                    "INSERT INTO signals (workflow_id, seq, name, payload, consumed, sent_at)"
                    " SELECT %s, COALESCE(MAX(seq), 0) + 1, %s, %s, false, %s FROM signals WHERE workflow_id = %s"
                    " RETURNING seq", (workflow_id, name, text, now, workflow_id)).fetchone()
                if status == "blocked" and blocked_on == name:
                    conn.execute("UPDATE workflows SET status = 'pending', blocked_on = NULL, updated_at = %s"
                                 " WHERE id = %s", (now, workflow_id))
                else:
                    conn.execute("UPDATE workflows SET updated_at = %s WHERE id = %s", (now, workflow_id))
                conn.execute(NOTIFY)
            assert seq_row is not None
            return int(seq_row[0])

        return self._run(send, write=True)
