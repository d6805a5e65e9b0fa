"""Reading the log on PostgreSQL: workflows, their slots and signals, pages and counts."""

from __future__ import annotations

import json
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
from engine.store.keys import SLOT_BITS, SLOT_LIMIT, slot_key
from engine.store.postgres.connection import Conn, PGConnection
from engine.store.rows import (
    SORT_COLUMNS,
    STATUSES,
    AuditRow,
    CommandRow,
    InflightRow,
    SignalRow,
    WorkflowRow,
    WorkflowSummary,
    loads,
)

ERROR_PREVIEW = 400
# The wake time is only meaningful while blocked (a claim or a signal leaves it behind).
_WAKE_SHOWN = "CASE WHEN status = 'blocked' THEN wake_at END AS wake_at"
_WF_COLUMNS = ("id, workflow, status, blocked_on, input, result, error, diagnostic, slots, "
               "created_at, updated_at, lease_owner, lease_expires, worker_error, retry_at, error_kind, "
               "cancel_requested, forked_from, forked_slot, " + _WAKE_SHOWN + ", parent")
_COMMAND_COLUMNS = (f"c.slot_key - (w.seq << {SLOT_BITS}), c.kind, c.name, c.ok, c.value, c.error, c.attempts,"
                    " c.recorded_at, c.args, c.parallel")
_JOIN_COMMANDS = (f"workflows w JOIN commands c ON c.slot_key BETWEEN (w.seq << {SLOT_BITS}) + %s"
                  f" AND (w.seq << {SLOT_BITS}) + {SLOT_LIMIT - 1}")


def _workflow_row(r: Sequence[Any]) -> WorkflowRow:
    return WorkflowRow(
        id=r[0], workflow=r[1], status=r[2], blocked_on=r[3], input=loads(r[4]), has_input=r[4] is not None,
        result=loads(r[5]), error=r[6], diagnostic=loads(r[7]), slots=int(r[8]), created_at=r[9],
        updated_at=r[10], lease_owner=r[11], lease_expires=r[12], worker_error=r[13], retry_at=r[14],
        error_kind=r[15], cancel_requested=r[16], forked_from=r[17],
        forked_slot=None if r[18] is None else int(r[18]), wake_at=r[19], parent=r[20],
    )


def _summary(r: Sequence[Any]) -> WorkflowSummary:
    return WorkflowSummary(r[0], r[1], r[2], r[3], int(r[4]), r[5], r[6], r[7], r[8], r[9])


def _limit(limit: int) -> int | None:
    """SQLite's LIMIT -1 (no limit) as PostgreSQL's LIMIT NULL."""
    return None if limit < 0 else int(limit)


def load_commands(conn: Conn, base: int) -> tuple[CommandRecord, ...]:
    """The command records of the workflow whose keys start at `base`, in slot order."""
    json_loads = json.loads
    rec = CommandRecord
    rows = conn.execute(
        "SELECT slot_key, kind, name, ok, value, error, attempts, args FROM commands"
        " WHERE slot_key BETWEEN %s AND %s ORDER BY slot_key", (base, base + SLOT_LIMIT - 1)).fetchall()
    records = tuple(
        new_record(rec, (kind, name, ok, None if value is None else json_loads(value), error, attempts, args))
        for _key, kind, name, ok, value, error, attempts, args in rows
    )
    if rows and rows[-1][0] - base + 1 != len(rows):
        # A parallel group the worker died in the middle of left a gap (engine.core.HOLE).
        return fill_holes([(int(row[0]) - base, r) for row, r in zip(rows, records, strict=True)])
    return records


class PGReads(PGConnection):
    """The store's reads: one query each, paged and filtered in SQL."""

    def get_workflow(self, workflow_id: str) -> WorkflowRow:
        """One workflow; UnknownWorkflowIdError if there is none."""
        row = self._run(lambda c, _: c.execute(
            f"SELECT {_WF_COLUMNS} FROM workflows WHERE id = %s", (workflow_id,)).fetchone())
        if row is None:
            raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
        return _workflow_row(row)

    @staticmethod
    def _where(status: str | Iterable[str] | None, text: str | None, awaiting: str | None = None,
               top_level: bool = False) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if awaiting is not None:
            if awaiting != "approval":
                raise StoreError(f"cannot filter on awaiting {awaiting!r}; the one choice is 'approval'")
            # A workflow waits for an approval while blocked on "approval:RID" (engine.core.APPROVAL_PREFIX).
            clauses.append("status = 'blocked' AND left(blocked_on, %s) = %s")
            params.extend([len(APPROVAL_PREFIX), APPROVAL_PREFIX])
        if top_level:
            clauses.append("parent IS NULL")
        if status:
            clauses.append("status = ANY(%s)")
            params.append([status] if isinstance(status, str) else list(status))
        if text:
            escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            clauses.append("(id LIKE %s OR workflow LIKE %s)")
            params.extend([f"%{escaped}%"] * 2)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def _page(self, columns: str, status: str | Iterable[str] | None, text: str | None, sort: str,
              descending: bool, limit: int, offset: int, awaiting: str | None = None,
              top_level: bool = False) -> list[tuple[Any, ...]]:
        if sort not in SORT_COLUMNS:
            raise StoreError(f"cannot sort by {sort!r}; choose one of {', '.join(SORT_COLUMNS)}")
        where, params = self._where(status, text, awaiting, top_level)
        direction = "DESC" if descending else "ASC"
        sql = (f"SELECT {columns} FROM workflows{where} ORDER BY {SORT_COLUMNS[sort]} {direction}, "
               f"seq {direction} LIMIT %s OFFSET %s")
        return self._run(lambda c, _: c.execute(sql, [*params, _limit(limit), int(offset)]).fetchall())

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
        """Like `list_workflows`, without the payload columns."""
        rows = self._page(f"id, workflow, status, blocked_on, slots, created_at, updated_at,"
                          f" substr(error, 1, {ERROR_PREVIEW}), {_WAKE_SHOWN}, parent",
                          status, text, sort, descending, limit, offset, awaiting, top_level)
        return [_summary(r) for r in rows]

    def list_descendants(self, workflow_ids: Sequence[str]) -> list[WorkflowSummary]:
        """The children of these workflows, their children, and so on (ctx.call_workflow), in start order."""
        if not workflow_ids:
            return []
        rows = self._run(lambda c, _: c.execute(
            "WITH RECURSIVE tree(id) AS (SELECT id FROM workflows WHERE parent = ANY(%s)"
            " UNION SELECT w.id FROM workflows w JOIN tree ON w.parent = tree.id)"
            " SELECT workflows.id, workflow, status, blocked_on, slots, created_at, updated_at,"
            f" substr(error, 1, {ERROR_PREVIEW}), {_WAKE_SHOWN}, parent"
            " FROM workflows JOIN tree ON workflows.id = tree.id ORDER BY seq", (list(workflow_ids),)).fetchall())
        return [_summary(r) for r in rows]

    def count_workflows(self, *, status: str | Iterable[str] | None = None, text: str | None = None,
                        awaiting: str | None = None, top_level: bool = False) -> int:
        """How many workflows match a filter."""
        where, params = self._where(status, text, awaiting, top_level)
        row = self._run(lambda c, _: c.execute(f"SELECT COUNT(*) FROM workflows{where}", params).fetchone())
        return int(row[0]) if row else 0

    def status_counts(self) -> dict[str, int]:
        """Workflows per status (every status present, zero where none)."""
        counts = dict.fromkeys(STATUSES, 0)
        rows = self._run(lambda c, _: c.execute("SELECT status, COUNT(*) FROM workflows GROUP BY status").fetchall())
        for status, n in rows:
            counts[status] = int(n)
        return counts

    def list_commands(self, workflow_id: str, *, offset: int = 0, limit: int = -1) -> list[CommandRow]:
        """Recorded slots in order, optionally a page of them."""
        rows = self._run(lambda c, _: c.execute(
            f"SELECT {_COMMAND_COLUMNS} FROM {_JOIN_COMMANDS} WHERE w.id = %s ORDER BY c.slot_key LIMIT %s",
            (min(max(int(offset), 0), SLOT_LIMIT), workflow_id, _limit(limit))).fetchall())
        return [CommandRow(int(r[0]), r[1], r[2], bool(r[3]), loads(r[4]), r[5], r[6], r[7], r[8], bool(r[9]))
                for r in rows]

    def last_failed_command(self, workflow_id: str) -> CommandRow | None:
        """The highest recorded slot whose outcome is an error, if any."""
        r = self._run(lambda c, _: c.execute(
            f"SELECT {_COMMAND_COLUMNS} FROM {_JOIN_COMMANDS} WHERE w.id = %s AND NOT c.ok"
            " ORDER BY c.slot_key DESC LIMIT 1", (0, workflow_id)).fetchone())
        return None if r is None else CommandRow(int(r[0]), r[1], r[2], bool(r[3]), loads(r[4]), r[5], r[6], r[7],
                                                 r[8], bool(r[9]))

    def family(self, workflow_id: str) -> dict[str, Any]:
        """A workflow's parent (ctx.call_workflow) and children: {"parent": id or None, "children": [...]}."""

        def read(conn: Conn, _: int) -> dict[str, Any]:
            with conn.transaction():  # one snapshot for both
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                row = conn.execute("SELECT parent FROM workflows WHERE id = %s", (workflow_id,)).fetchone()
                children = [{"id": r[0], "workflow": r[1], "status": r[2]} for r in conn.execute(
                    "SELECT id, workflow, status FROM workflows WHERE parent = %s ORDER BY seq", (workflow_id,))]
            return {"parent": None if row is None else row[0], "children": children}

        return self._run(read)

    def pending_approval(self, workflow_id: str) -> dict[str, Any] | None:
        """The approval request a blocked workflow waits on: {"request", "action", "details"}; else None."""
        row = self._run(lambda c, _: c.execute(
            "SELECT status, blocked_on, seq FROM workflows WHERE id = %s", (workflow_id,)).fetchone())
        if row is None or row[0] != "blocked" or not (row[1] or "").startswith(APPROVAL_PREFIX):
            return None
        rid = row[1][len(APPROVAL_PREFIX):]
        slot = approval_slot(rid)
        value = None if slot is None else self._run(lambda c, _: c.execute(
            "SELECT value FROM commands WHERE slot_key = %s AND kind = 'approval'",
            (slot_key(int(row[2]), slot),)).fetchone())
        if value is None:
            return {"request": rid, "action": "?", "details": None}
        request: dict[str, Any] = loads(value[0])
        return request

    def list_signals(self, workflow_id: str, *, offset: int = 0, limit: int = -1) -> list[SignalRow]:
        """Delivered signals in delivery order, optionally a page of them."""
        rows = self._run(lambda c, _: c.execute(
            "SELECT seq, name, payload, consumed, sent_at FROM signals WHERE workflow_id = %s ORDER BY seq"
            " LIMIT %s OFFSET %s", (workflow_id, _limit(limit), int(offset))).fetchall())
        return [SignalRow(int(r[0]), r[1], loads(r[2]), bool(r[3]), r[4]) for r in rows]

    def list_audit(self, workflow_id: str) -> list[AuditRow]:
        """The operators' actions on a workflow, oldest first."""
        rows = self._run(lambda c, _: c.execute(
            "SELECT action, at, actor, reason, detail FROM audit WHERE workflow_id = %s ORDER BY seq",
            (workflow_id,)).fetchall())
        return [AuditRow(*r) for r in rows]

    def count_signals(self, workflow_id: str) -> tuple[int, int]:
        """(delivered, still waiting to be consumed) signals of a workflow."""
        row = self._run(lambda c, _: c.execute(
            "SELECT COUNT(*), COUNT(*) FILTER (WHERE NOT consumed) FROM signals WHERE workflow_id = %s",
            (workflow_id,)).fetchone())
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def inflight(self, workflow_id: str) -> InflightRow | None:
        """The started activity with no recorded outcome, if any (it possibly ran).

        On PostgreSQL every worker writes its start marks to the inflight table, so the
        table alone answers.
        """
        row = self._run(lambda c, _: c.execute(
            "SELECT w.slots, i.slot, i.name, i.attempts, i.started_at FROM workflows w"
            " JOIN inflight i ON i.workflow_id = w.id WHERE w.id = %s", (workflow_id,)).fetchone())
        if row is None or row[1] < row[0]:
            return None
        return InflightRow(int(row[1]), row[2], int(row[3]), row[4])

    def load_state(self, workflow_id: str) -> WorkflowState:
        """The whole history of a workflow: one query per table, in one snapshot."""

        def load(conn: Conn, _: int) -> WorkflowState:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                wf = conn.execute("SELECT input, seq FROM workflows WHERE id = %s", (workflow_id,)).fetchone()
                if wf is None:
                    raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
                commands = load_commands(conn, int(wf[1]) << SLOT_BITS)
                signals = tuple(
                    SignalRecord(int(seq), name, loads(payload))
                    for seq, name, payload in conn.execute(
                        "SELECT seq, name, payload FROM signals WHERE workflow_id = %s ORDER BY seq", (workflow_id,))
                )
            return WorkflowState(input=loads(wf[0]), has_input=wf[0] is not None, commands=commands, signals=signals)

        return self._run(load)
