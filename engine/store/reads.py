"""Reading the log: workflows, their slots and signals, pages and counts (what operators look at)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from engine.core import (
    APPROVAL_PREFIX,
    CommandRecord,
    SignalRecord,
    WorkflowState,
    approval_slot,
    fill_holes,
    new_record,
)
from engine.errors import StoreError, UnknownWorkflowIdError
from engine.store.connection import SQLiteConnection
from engine.store.keys import FIRST_KEY, LAST_KEY, SLOT_LIMIT, SLOTS_SHOWN, slot_key
from engine.store.rows import (
    SORT_COLUMNS,
    STATUSES,
    AuditRow,
    CommandRow,
    SignalRow,
    WorkflowRow,
    WorkflowSummary,
    loads,
)

# Characters of a workflow's error a list row carries: a line on any terminal, while a page
# stays small whatever a stored error (a traceback) holds.
ERROR_PREVIEW = 400
# The wake time is only meaningful while blocked (a claim or a signal leaves it behind).
_WAKE_SHOWN = "CASE WHEN status = 'blocked' THEN wake_at END AS wake_at"
_WF_COLUMNS = ("id, workflow, status, blocked_on, input, result, error, diagnostic, " + SLOTS_SHOWN + ", "
               "created_at, updated_at, lease_owner, lease_expires, worker_error, retry_at, error_kind, "
               "cancel_requested, forked_from, forked_slot, "
               + _WAKE_SHOWN + ", parent")


def _workflow_row(r: Sequence[Any]) -> WorkflowRow:
    return WorkflowRow(
        id=r[0], workflow=r[1], status=r[2], blocked_on=r[3], input=loads(r[4]), has_input=r[4] is not None,
        result=loads(r[5]), error=r[6], diagnostic=loads(r[7]), slots=r[8], created_at=r[9],
        updated_at=r[10], lease_owner=r[11], lease_expires=r[12], worker_error=r[13], retry_at=r[14],
        error_kind=r[15], cancel_requested=r[16], forked_from=r[17], forked_slot=r[18], wake_at=r[19],
        parent=r[20],
    )


class Reads(SQLiteConnection):
    """The store's reads: one query each, paged and filtered in SQL."""

    def get_workflow(self, workflow_id: str) -> WorkflowRow:
        """One workflow; UnknownWorkflowIdError if there is none."""
        row = self._conn.execute(f"SELECT {_WF_COLUMNS} FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
        if row is None:
            raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
        return _workflow_row(row)

    def _where(self, status: str | Iterable[str] | None, text: str | None, awaiting: str | None = None,
               top_level: bool = False) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if awaiting is not None:
            if awaiting != "approval":
                raise StoreError(f"cannot filter on awaiting {awaiting!r}; the one choice is 'approval'")
            # A workflow waits for an approval while blocked on "approval:RID" (engine.core.APPROVAL_PREFIX).
            clauses.append("status = 'blocked' AND substr(blocked_on, 1, ?) = ?")
            params.extend([len(APPROVAL_PREFIX), APPROVAL_PREFIX])
        if top_level:
            clauses.append("parent IS NULL")
        if status:
            statuses = [status] if isinstance(status, str) else list(status)
            clauses.append(f"status IN ({', '.join('?' * len(statuses))})")
            params.extend(statuses)
        if text:
            escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            clauses.append("(id LIKE ? ESCAPE '\\' OR workflow LIKE ? ESCAPE '\\')")
            params.extend([f"%{escaped}%"] * 2)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def _page(self, columns: str, status: str | Iterable[str] | None, text: str | None, sort: str,
              descending: bool, limit: int, offset: int, awaiting: str | None = None,
              top_level: bool = False) -> sqlite3.Cursor:
        if sort not in SORT_COLUMNS:
            raise StoreError(f"cannot sort by {sort!r}; choose one of {', '.join(SORT_COLUMNS)}")
        where, params = self._where(status, text, awaiting, top_level)
        direction = "DESC" if descending else "ASC"
        sql = (f"SELECT {columns} FROM workflows{where} ORDER BY {SORT_COLUMNS[sort]} {direction}, "
               f"rowid {direction} LIMIT ? OFFSET ?")
        return self._conn.execute(sql, [*params, int(limit), int(offset)])

    def list_workflows(self, *, status: str | Iterable[str] | None = None, text: str | None = None,
                       sort: str = "updated", descending: bool = True, limit: int = 100,
                       offset: int = 0, awaiting: str | None = None, top_level: bool = False) -> list[WorkflowRow]:
        """A page of workflows, filtered and sorted in SQL (never every row).

        `awaiting="approval"` keeps the workflows waiting for an approval; `top_level`
        those no parent started (ctx.call_workflow's children are left out).
        """
        return [_workflow_row(r) for r in self._page(_WF_COLUMNS, status, text, sort, descending, limit, offset,
                                                     awaiting, top_level)]

    def list_workflow_summaries(self, *, status: str | Iterable[str] | None = None, text: str | None = None,
                                sort: str = "updated", descending: bool = True, limit: int = 100,
                                offset: int = 0, awaiting: str | None = None,
                                top_level: bool = False) -> list[WorkflowSummary]:
        """Like `list_workflows`, without the payload columns: a page stays small whatever the inputs hold."""
        cursor = self._page(f"id, workflow, status, blocked_on, {SLOTS_SHOWN}, created_at, updated_at,"
                            f" substr(error, 1, {ERROR_PREVIEW}), {_WAKE_SHOWN}, parent",
                            status, text, sort, descending, limit, offset, awaiting, top_level)
        return [WorkflowSummary(*r) for r in cursor]

    def list_descendants(self, workflow_ids: Sequence[str]) -> list[WorkflowSummary]:
        """The children of these workflows, their children, and so on (ctx.call_workflow), in start order."""
        if not workflow_ids:
            return []
        marks = ", ".join("?" * len(workflow_ids))
        cursor = self._conn.execute(
            f"WITH RECURSIVE tree(id) AS (SELECT id FROM workflows WHERE parent IN ({marks})"
            " UNION SELECT w.id FROM workflows w JOIN tree ON w.parent = tree.id)"
            # (tree has only `id`; SLOTS_SHOWN names `workflows.` columns, so no alias.)
            f" SELECT workflows.id, workflow, status, blocked_on, {SLOTS_SHOWN}, created_at, updated_at,"
            f" substr(error, 1, {ERROR_PREVIEW}), {_WAKE_SHOWN}, parent"
            " FROM workflows JOIN tree ON workflows.id = tree.id ORDER BY seq", list(workflow_ids))
        return [WorkflowSummary(*r) for r in cursor]

    def count_workflows(self, *, status: str | Iterable[str] | None = None, text: str | None = None,
                        awaiting: str | None = None, top_level: bool = False) -> int:
        """How many workflows match a filter."""
        where, params = self._where(status, text, awaiting, top_level)
        return int(self._conn.execute(f"SELECT COUNT(*) FROM workflows{where}", params).fetchone()[0])

    def status_counts(self) -> dict[str, int]:
        """Workflows per status (every status present, zero where none)."""
        counts = dict.fromkeys(STATUSES, 0)
        for status, n in self._conn.execute("SELECT status, COUNT(*) FROM workflows GROUP BY status"):
            counts[status] = n
        return counts

    def list_commands(self, workflow_id: str, *, offset: int = 0, limit: int = -1) -> list[CommandRow]:
        """Recorded slots in order, optionally a page of them."""
        rows = self._conn.execute(
            f"SELECT c.slot_key - {FIRST_KEY}, kind, name, ok, value, c.error, attempts, recorded_at, c.args,"
            " c.parallel"
            f" FROM workflows w JOIN commands c ON c.slot_key BETWEEN {FIRST_KEY} + ? AND {LAST_KEY}"
            " WHERE w.id = ? ORDER BY c.slot_key LIMIT ?",
            (min(max(int(offset), 0), SLOT_LIMIT), workflow_id, int(limit)),
        )
        return [CommandRow(r[0], r[1], r[2], bool(r[3]), loads(r[4]), r[5], r[6], r[7], r[8], bool(r[9])) for r in rows]

    def last_failed_command(self, workflow_id: str) -> CommandRow | None:
        """The highest recorded slot whose outcome is an error, if any (what failed a workflow)."""
        r = self._conn.execute(
            f"SELECT c.slot_key - {FIRST_KEY}, kind, name, ok, value, c.error, attempts, recorded_at, c.args,"
            " c.parallel"
            f" FROM workflows w JOIN commands c ON c.slot_key BETWEEN {FIRST_KEY} AND {LAST_KEY}"
            " WHERE w.id = ? AND ok = 0 ORDER BY c.slot_key DESC LIMIT 1",
            (workflow_id,),
        ).fetchone()
        return None if r is None else CommandRow(r[0], r[1], r[2], bool(r[3]), loads(r[4]), r[5], r[6], r[7], r[8],
                                                 bool(r[9]))

    def family(self, workflow_id: str) -> dict[str, Any]:
        """A workflow's parent (ctx.call_workflow) and children: {"parent": id or None, "children": [...]}."""
        row = self._conn.execute("SELECT parent FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
        children = [{"id": r[0], "workflow": r[1], "status": r[2]} for r in self._conn.execute(
            "SELECT id, workflow, status FROM workflows WHERE parent = ? ORDER BY seq", (workflow_id,))]
        return {"parent": None if row is None else row[0], "children": children}

    def pending_approval(self, workflow_id: str) -> dict[str, Any] | None:
        """The approval request a blocked workflow waits on: {"request", "action", "details"}; else None."""
        row = self._conn.execute(
            "SELECT status, blocked_on, seq FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
        if row is None or row[0] != "blocked" or not (row[1] or "").startswith(APPROVAL_PREFIX):
            return None
        rid = row[1][len(APPROVAL_PREFIX):]
        slot = approval_slot(rid)
        value = None if slot is None else self._conn.execute(
            "SELECT value FROM commands WHERE slot_key = ? AND kind = 'approval'", (slot_key(row[2], slot),)).fetchone()
        if value is None:
            return {"request": rid, "action": "?", "details": None}
        request: dict[str, Any] = loads(value[0])
        return request

    def list_signals(self, workflow_id: str, *, offset: int = 0, limit: int = -1) -> list[SignalRow]:
        """Delivered signals in delivery order, optionally a page of them."""
        rows = self._conn.execute(
            "SELECT seq, name, payload, consumed, sent_at FROM signals WHERE workflow_id = ? ORDER BY seq"
            " LIMIT ? OFFSET ?",
            (workflow_id, int(limit), int(offset)),
        )
        return [SignalRow(r[0], r[1], loads(r[2]), bool(r[3]), r[4]) for r in rows]

    def list_audit(self, workflow_id: str) -> list[AuditRow]:
        """The operators' actions on a workflow, oldest first."""
        return [AuditRow(*r) for r in self._conn.execute(
            "SELECT action, at, actor, reason, detail FROM audit WHERE workflow_id = ? ORDER BY seq", (workflow_id,))]

    def count_signals(self, workflow_id: str) -> tuple[int, int]:
        """(delivered, still waiting to be consumed) signals of a workflow."""
        total, waiting = self._conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(consumed = 0), 0) FROM signals WHERE workflow_id = ?", (workflow_id,)
        ).fetchone()
        return int(total), int(waiting)

    def load_state(self, workflow_id: str) -> WorkflowState:
        """The whole history of a workflow: one query per table, never one per slot."""
        with self._read() as conn:
            wf = conn.execute("SELECT input, seq FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
            if wf is None:
                raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
            commands = self._load_commands(conn, slot_key(wf[1]))
            signals = tuple(
                SignalRecord(seq, name, loads(payload))
                for seq, name, payload in conn.execute(
                    "SELECT seq, name, payload FROM signals WHERE workflow_id = ? ORDER BY seq", (workflow_id,)
                )
            )
        return WorkflowState(input=loads(wf[0]), has_input=wf[0] is not None, commands=commands, signals=signals)

    @staticmethod
    def _load_commands(conn: sqlite3.Connection, base: int) -> tuple[CommandRecord, ...]:
        """The command records of the workflow whose keys start at `base`, in slot order."""
        json_loads = json.loads
        rec = CommandRecord
        # Rows come back in key order, which is slot order; ORDER BY makes it explicit.
        rows = conn.execute(
            "SELECT slot_key, kind, name, ok, value, error, attempts, args FROM commands"
            " WHERE slot_key BETWEEN ? AND ? ORDER BY slot_key",
            (base, base + SLOT_LIMIT - 1),
        ).fetchall()
        records = tuple(
            new_record(rec, (kind, name, bool(ok), None if value is None else json_loads(value), error, attempts,
                             args))
            for _key, kind, name, ok, value, error, attempts, args in rows
        )
        if rows and rows[-1][0] - base + 1 != len(rows):
            # A parallel group the worker died in the middle of left a gap (engine.core.HOLE).
            return fill_holes([(row[0] - base, r) for row, r in zip(rows, records, strict=True)])
        return records
