"""Operator writes on SQLite: the shared ones (engine.store.shared.operations) over this connection.

SQLite's single writer (BEGIN IMMEDIATE) orders them against workers and other
operators; what it spells itself is how a new workflow row is numbered.
"""

from __future__ import annotations

import sqlite3

from replaylog.engine.core import Outcome
from replaylog.engine.errors import DuplicateWorkflowIdError
from replaylog.engine.store.shared import operations as shared_operations
from replaylog.engine.store.shared.operations import SharedOperatorWrites
from replaylog.engine.store.sqlite.connection import SQLITE, SQLiteConnection
from replaylog.engine.vocab import Status


def code_ended(conn: sqlite3.Connection, workflow_id: str, outcome: Outcome, status: str, cancel_requested: str | None,
               now: float, *, parent: bool = True, children: bool = True) -> None:
    """A verdict ended the workflow: tell its parent, audit a cancel request it never reached (shared.operations)."""
    shared_operations.code_ended(SQLITE, conn, workflow_id, outcome, status, cancel_requested, now, parent=parent,
                                 children=children)


class OperatorWrites(SQLiteConnection, SharedOperatorWrites):
    """Writes an operator makes, each one write transaction, refused whole on bad input."""

    def _insert_workflow(self, conn: sqlite3.Connection, wid: str, workflow: str, input_text: str | None,
                         now: float, *, status: str = Status.PENDING.value, slots: int = 0, result: str | None = None,
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
