"""Operator writes on PostgreSQL: the shared ones (engine.store.shared.operations) over this connection.

The workflow's row is locked first (FOR UPDATE), which orders an operator's write
against a worker's claim, verdict or another operator; each write NOTIFYs, and one
whose answer was lost is not made twice (see PGConnection._operate). What this backend
spells itself is how a new workflow row is numbered (an identity column) and a taken
id told without aborting the transaction.
"""

from __future__ import annotations

from psycopg import errors as pg_errors

from replaylog.engine.core import Outcome
from replaylog.engine.errors import DuplicateWorkflowIdError
from replaylog.engine.store.postgres.connection import POSTGRES, Conn, PGConnection
from replaylog.engine.store.shared import operations as shared_operations
from replaylog.engine.store.shared.operations import SharedOperatorWrites
from replaylog.engine.vocab import Status


def code_ended(conn: Conn, workflow_id: str, outcome: Outcome, status: str, cancel_requested: str | None,
               now: float) -> None:
    """A verdict ended the workflow: tell its parent, audit a cancel request it never reached (shared.operations)."""
    shared_operations.code_ended(POSTGRES, conn, workflow_id, outcome, status, cancel_requested, now)


class PGOperatorWrites(PGConnection, SharedOperatorWrites):
    """Writes an operator makes, each one transaction, refused whole on bad input."""

    def _insert_workflow(self, conn: Conn, wid: str, workflow: str, input_text: str | None, now: float,
                         *, status: str = Status.PENDING.value, slots: int = 0, result: str | None = None,
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
