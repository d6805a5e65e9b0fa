"""Reading the log, on either backend: workflows, their slots and signals, pages and counts.

One query each, paged and filtered in SQL, written once over the primitives of
`engine.store.shared.base` (each backend's connection class runs them; its `Dialect` names
the few words that differ). What operators look at: the console, `list`, `show`, `check`.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from replaylog.engine.core import (
    APPROVAL_PREFIX,
    EVENT,
    CommandRecord,
    SignalRecord,
    WorkflowState,
    approval_slot,
    fill_holes,
    new_record,
)
from replaylog.engine.errors import StoreError, UnknownWorkflowIdError
from replaylog.engine.store.rows import (
    SORT_COLUMNS,
    STATUSES,
    AuditRow,
    CommandRow,
    LiveWorker,
    QueueCounts,
    QueueRow,
    SignalRow,
    StoreStats,
    WorkflowFilter,
    WorkflowRow,
    WorkflowSummary,
    loads,
    loads_many,
)
from replaylog.engine.store.shared.base import Dialect, StoreBase
from replaylog.engine.store.shared.keys import (
    FIRST_KEY,
    LAST_KEY,
    SLOT_LIMIT,
    SLOTS_SHOWN,
    first_key_of,
    slot_key,
    slot_of,
)
from replaylog.engine.store.shared.queues import queue_rows
from replaylog.engine.store.shared.workers import LIVE_TTLS
from replaylog.engine.vocab import Status

# The window `stats` counts committed slots over, and the slack on a workflow's updated_at
# (a commit rewrites it at most once a second while the workflow records slots).
RATE_WINDOW = 60.0
_UPDATED_SLACK = 2.0

# Characters of a workflow's error a list row carries: a line on any terminal, while a page
# stays small whatever a stored error (a traceback) holds.
ERROR_PREVIEW = 400
# The wake time is only meaningful while blocked (a claim or a signal leaves it behind).
_WAKE_SHOWN = "CASE WHEN status = 'blocked' THEN wake_at END AS wake_at"
# A queued workflow's place in its queue's line (claim order: priority, then seq), else NULL.
_POSITION = ("CASE WHEN status = 'queued' THEN (SELECT COUNT(*) FROM workflows ahead WHERE ahead.status = 'queued'"
             " AND ahead.queue = workflows.queue AND (ahead.priority < workflows.priority"
             " OR (ahead.priority = workflows.priority AND ahead.seq < workflows.seq))) + 1 END")
_COMMAND_COLUMNS = (f"{slot_of('c.slot_key')}, c.kind, c.name, c.ok, c.value, c.error, c.attempts, c.recorded_at,"
                    " c.args, c.parallel, c.traceback, c.parallel_group")


# The keys of workflow ? (its id, given twice) from slot ?: a range of the commands' key (keys.first_key_of;
# joined to the workflows row instead, one workflow's 10 slots among 192,560 commands took 118 ms).
_BASE = first_key_of("workflows", "id = ?")
_KEYS_FROM = f"c.slot_key BETWEEN {_BASE} + ? AND {_BASE} + {SLOT_LIMIT - 1}"


_WORKFLOW_COLUMNS = ("id, workflow, status, blocked_on, input, result, error, diagnostic, " + SLOTS_SHOWN + ", "
                     "created_at, updated_at, lease_owner, lease_expires, worker_error, retry_at, error_kind, "
                     "cancel_requested, forked_from, forked_slot, " + _WAKE_SHOWN + ", parent, traceback, queue,"
                     " priority, dedup_id, not_before, admitted_at, " + _POSITION)


def _summary_columns(table: str = "") -> str:
    # (`table`: a join names which table's id; the slot count names `workflows.` columns.)
    return (f"{table}id, workflow, status, blocked_on, {SLOTS_SHOWN}, created_at, updated_at,"
            f" substr(error, 1, {ERROR_PREVIEW}), {_WAKE_SHOWN}, parent, queue, {_POSITION}")


def _workflow_row(r: Sequence[Any]) -> WorkflowRow:
    return WorkflowRow(
        id=r[0], workflow=r[1], status=r[2], blocked_on=r[3], input=loads(r[4]), has_input=r[4] is not None,
        result=loads(r[5]), error=r[6], diagnostic=loads(r[7]), slots=int(r[8]), created_at=r[9],
        updated_at=r[10], lease_owner=r[11], lease_expires=r[12], worker_error=r[13], retry_at=r[14],
        error_kind=r[15], cancel_requested=r[16], forked_from=r[17],
        forked_slot=None if r[18] is None else int(r[18]), wake_at=r[19], parent=r[20], traceback=r[21],
        queue=r[22], priority=None if r[23] is None else int(r[23]), dedup_id=r[24], not_before=r[25],
        admitted_at=r[26], position=None if r[27] is None else int(r[27]),
    )


def _summary(r: Sequence[Any]) -> WorkflowSummary:
    return WorkflowSummary(r[0], r[1], r[2], r[3], int(r[4]), r[5], r[6], r[7], r[8], r[9], r[10],
                           None if r[11] is None else int(r[11]))


# A CommandRecord from a tuple of its seven fields (engine.core.new_record), without a Python frame.
_record_of = partial(new_record, CommandRecord)


def _command_row(r: Sequence[Any]) -> CommandRow:
    return CommandRow(int(r[0]), r[1], r[2], bool(r[3]), loads(r[4]), r[5], r[6], r[7], r[8], bool(r[9]), r[10],
                      None if r[11] is None else int(r[11]))


def _named_groups(rows: list[CommandRow]) -> list[CommandRow]:
    """The rows, each task of a parallel group naming its group (CommandRow.parallel_group).

    Tasks recorded before groups were told apart carry the mark alone: each run of them
    on consecutive slots is taken as one group, named by its first slot there.
    """
    start = last = -2
    named = []
    for r in rows:
        if r.parallel and r.parallel_group is None:
            if r.slot != last + 1:
                start = r.slot
            last = r.slot
            r = replace(r, parallel_group=start)
        else:
            last = -2
        named.append(r)
    return named


# A history's rows, in key order, which is slot order (ORDER BY makes it explicit). A NULL
# value (a failure's) is read as the JSON null it means, so every value is JSON text.
_HISTORY = ("SELECT kind, name, ok, COALESCE(value, 'null'), error, attempts, args FROM commands"
            " WHERE slot_key BETWEEN ? AND ? ORDER BY slot_key")


def load_commands(dialect: Dialect, conn: Any, base: int, top: int | None = None) -> tuple[CommandRecord, ...]:
    """The command records of the workflow whose keys start at `base`, in slot order.

    `top`, if the caller read it in the same snapshot: the workflow's last key (None if it has no slot).
    """
    # The cyclic collector is paused while a history's rows and records are built: they are
    # acyclic tuples, and the collections their allocations set off only walked them (and
    # whatever else is alive). Only a collector this call paused is started again.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return _load_commands(dialect, conn, base, top)
    finally:
        if paused:
            gc.enable()


def _load_commands(dialect: Dialect, conn: Any, base: int, top: int | None) -> tuple[CommandRecord, ...]:
    last = base + SLOT_LIMIT - 1
    # Where the store has a compiled path (engine.store.sqlite.speedups), it builds the
    # records from the rows itself; otherwise Python does, with the same answers.
    compiled = dialect.compiled_records(conn, _HISTORY, (base, last), CommandRecord, loads)
    records: tuple[CommandRecord, ...] = ()
    if compiled is not None:
        records = tuple(compiled)
    else:
        rows = dialect.run(conn, _HISTORY, (base, last)).fetchall()
        if rows:
            # Built column by column, every step a C loop (zip, map), no Python frame per slot: a
            # history's columns, its values decoded together, zipped back into records.
            kinds, names, oks, values, errors, attempts, args = zip(*rows, strict=True)
            records = tuple(map(_record_of, zip(kinds, names, map(bool, oks), loads_many(values), errors, attempts,
                                                args, strict=True)))
    if not records:
        return ()
    if top is None:
        top = dialect.run(conn, "SELECT MAX(slot_key) FROM commands WHERE slot_key BETWEEN ? AND ?", (base, last)
                          ).fetchone()[0]
    if int(top) - base + 1 != len(records):
        # A parallel group the worker died in the middle of left a gap (engine.core.HOLE).
        keys = dialect.run(conn, "SELECT slot_key FROM commands WHERE slot_key BETWEEN ? AND ? ORDER BY slot_key",
                           (base, last)).fetchall()
        return fill_holes([(int(key) - base, r) for (key,), r in zip(keys, records, strict=True)])
    return records


class SharedReads(StoreBase):
    """The store's reads: one query each, paged and filtered in SQL."""

    def get_workflow(self, workflow_id: str) -> WorkflowRow:
        """One workflow; UnknownWorkflowIdError if there is none."""
        row = self._query_one(f"SELECT {_WORKFLOW_COLUMNS} FROM workflows WHERE id = ?", (workflow_id,))
        if row is None:
            raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
        return _workflow_row(row)

    def _where(self, status: str | Iterable[str] | None, text: str | None, awaiting: str | None = None,
               top_level: bool = False, workflow: str | None = None,
               parent: str | None = None, where: WorkflowFilter | None = None) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if workflow is not None:
            clauses.append("workflow = ?")
            params.append(workflow)
        if parent is not None:
            clauses.append("parent = ?")
            params.append(parent)
        if awaiting is not None:
            if awaiting != "approval":
                raise StoreError(f"cannot filter on awaiting {awaiting!r}; the one choice is 'approval'")
            # A workflow waits for an approval while blocked on "approval:RID" (engine.core.APPROVAL_PREFIX).
            clauses.append("status = 'blocked' AND substr(blocked_on, 1, ?) = ?")
            params.extend([len(APPROVAL_PREFIX), APPROVAL_PREFIX])
        if top_level:
            clauses.append("parent IS NULL")
        if status:
            clause, statuses = self.dialect.in_list("status", [status] if isinstance(status, str) else status)
            clauses.append(clause)
            params.extend(statuses)
        if text:
            escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            escape = self.dialect.like_escape
            clauses.append(f"(id LIKE ?{escape} OR workflow LIKE ?{escape})")
            params.extend([f"%{escaped}%"] * 2)
        if where:
            self._filter(where, clauses, params)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def _filter(self, where: WorkflowFilter, clauses: list[str], params: list[Any]) -> None:
        """The clauses of a WorkflowFilter, each one an index range or a check of the rows it leaves."""
        for column, values in (("status", where.statuses), ("workflow", where.workflows), ("queue", where.queues),
                               ("error_kind", where.error_kinds)):
            if values:
                clause, listed = self.dialect.in_list(column, values)
                clauses.append(clause)
                params.extend(listed)
        for column, op, value in (("parent", "=", where.parent), ("forked_from", "=", where.forked_from),
                                  ("created_at", ">=", where.created_after), ("created_at", "<", where.created_before),
                                  ("updated_at", ">=", where.updated_after), ("updated_at", "<", where.updated_before)):
            if value is not None:
                clauses.append(f"{column} {op} ?")
                params.append(value)
        if where.error_text and where.error_text.split():
            clauses.append(self.dialect.error_match)
            params.append(self.dialect.error_query(where.error_text))
        for key, value in where.attributes:
            clauses.append("EXISTS (SELECT 1 FROM search_attributes a WHERE a.key = ? AND a.value = ?"
                           " AND a.workflow_id = workflows.id)")
            params.extend([key, value])

    def _page(self, columns: str, status: str | Iterable[str] | None, text: str | None, sort: str,
              descending: bool, limit: int, offset: int, awaiting: str | None = None,
              top_level: bool = False, workflow: str | None = None, parent: str | None = None,
              where: WorkflowFilter | None = None) -> list[Any]:
        if sort not in SORT_COLUMNS:
            raise StoreError(f"cannot sort by {sort!r}; choose one of {', '.join(SORT_COLUMNS)}")
        clause, params = self._where(status, text, awaiting, top_level, workflow, parent, where)
        direction = "DESC" if descending else "ASC"
        sql = (f"SELECT {columns} FROM workflows{clause} ORDER BY {SORT_COLUMNS[sort]} {direction}, "
               f"{self.dialect.tie} {direction} LIMIT ? OFFSET ?")
        return self._query(sql, [*params, self.dialect.limit(limit), int(offset)])

    def list_workflows(self, *, status: str | Iterable[str] | None = None, text: str | None = None,
                       sort: str = "updated", descending: bool = True, limit: int = 100,
                       offset: int = 0, awaiting: str | None = None, top_level: bool = False,
                       workflow: str | None = None, parent: str | None = None,
                       where: WorkflowFilter | None = None) -> list[WorkflowRow]:
        """A page of workflows, filtered and sorted in SQL (never every row).

        `awaiting="approval"` keeps the workflows waiting for an approval; `top_level`
        those no parent started (ctx.call_workflow's children are left out); `workflow`
        those of that name; `parent` the children of that workflow; `where` those its fields
        name (rows.WorkflowFilter).
        """
        rows = self._page(_WORKFLOW_COLUMNS, status, text, sort, descending, limit, offset, awaiting,
                          top_level, workflow, parent, where)
        return [_workflow_row(r) for r in rows]

    def list_workflow_summaries(self, *, status: str | Iterable[str] | None = None, text: str | None = None,
                                sort: str = "updated", descending: bool = True, limit: int = 100,
                                offset: int = 0, awaiting: str | None = None,
                                top_level: bool = False, where: WorkflowFilter | None = None) -> list[WorkflowSummary]:
        """Like `list_workflows`, without the payload columns: a page stays small whatever the inputs hold."""
        rows = self._page(_summary_columns(), status, text, sort, descending, limit, offset, awaiting,
                          top_level, where=where)
        return [_summary(r) for r in rows]

    def list_descendants(self, workflow_ids: Sequence[str]) -> list[WorkflowSummary]:
        """The children of these workflows, their children, and so on (ctx.call_workflow), in start order."""
        if not workflow_ids:
            return []
        among, params = self.dialect.in_list("parent", workflow_ids)
        rows = self._query(
            f"WITH RECURSIVE tree(id) AS (SELECT id FROM workflows WHERE {among}"
            " UNION SELECT w.id FROM workflows w JOIN tree ON w.parent = tree.id)"
            f" SELECT {_summary_columns('workflows.')}"
            " FROM workflows JOIN tree ON workflows.id = tree.id ORDER BY seq", params)
        return [_summary(r) for r in rows]

    def count_workflows(self, *, status: str | Iterable[str] | None = None, text: str | None = None,
                        awaiting: str | None = None, top_level: bool = False, workflow: str | None = None,
                        parent: str | None = None, where: WorkflowFilter | None = None) -> int:
        """How many workflows match a filter."""
        clause, params = self._where(status, text, awaiting, top_level, workflow, parent, where)
        row = self._query_one(f"SELECT COUNT(*) FROM workflows{clause}", params)
        return int(row[0]) if row else 0

    def status_counts(self) -> dict[str, int]:
        """Workflows per status (every status present, zero where none)."""
        counts = dict.fromkeys(STATUSES, 0)
        for status, n in self._query("SELECT status, COUNT(*) FROM workflows GROUP BY status"):
            counts[status] = int(n)
        return counts

    def queues(self) -> list[QueueRow]:
        """Every queue workers have declared, with its limits and figures, read in one snapshot."""
        return self._snapshot(lambda conn: queue_rows(self.dialect, conn, self.wake_clock()))

    def trace_context(self, workflow_id: str) -> str | None:
        """The trace context the workflow was started in (W3C headers as JSON text), if any."""
        row = self._query_one("SELECT trace_context FROM workflows WHERE id = ?", (workflow_id,))
        return None if row is None or row[0] is None else str(row[0])

    def stats(self) -> StoreStats:
        """Counts, the oldest waits, overdue timers, live workers and the last minute's slots, in one snapshot.

        Each part is an index read: the status counts and the oldest waits come from
        (status, updated_at), the overdue ones from the blocked wake-time index. The slots of
        the last minute are counted only in the histories of workflows updated in it (the
        updated_at index, then each one's key range): commands have no time index, and one
        would cost every slot commit a second B-tree write. The counts by queue come from
        the (queue, status) index, which holds only workflows on a queue.
        """
        def read(conn: Any) -> StoreStats:
            now, run = time.time(), self.dialect.run
            counts = dict.fromkeys(STATUSES, 0)
            for status, n in run(conn, "SELECT status, COUNT(*) FROM workflows GROUP BY status"):
                counts[status] = int(n)
            pending = run(conn, "SELECT MIN(updated_at) FROM workflows WHERE status = 'pending'").fetchone()
            blocked = run(conn, "SELECT MIN(updated_at) FROM workflows WHERE status = 'blocked'").fetchone()
            overdue = run(conn, "SELECT COUNT(*) FROM workflows WHERE status = 'blocked' AND wake_at IS NOT NULL"
                          " AND wake_at <= ?", (now,)).fetchone()
            workers = tuple(
                LiveWorker(r[0], r[1], int(r[2]), tuple(json.loads(r[3])), float(r[4]), float(r[5]))
                for r in run(conn, "SELECT owner, host, pid, names, started_at, seen_at FROM workers"
                             " WHERE seen_at >= ? - ? * ttl ORDER BY started_at, owner", (now, LIVE_TTLS)))
            since = now - RATE_WINDOW
            slots = run(conn, "SELECT COUNT(*) FROM workflows w JOIN commands c ON c.slot_key BETWEEN"
                        f" {FIRST_KEY} AND {LAST_KEY} WHERE w.updated_at >= ? AND c.recorded_at >= ?",
                        (since - _UPDATED_SLACK, since)).fetchone()
            limits = {str(r[0]): None if r[1] is None else int(r[1])
                      for r in run(conn, "SELECT name, concurrency FROM queues")}
            by_queue: dict[str, dict[str, int]] = {}
            for queue, status, n in run(conn, "SELECT queue, status, COUNT(*) FROM workflows"
                                        " WHERE queue IS NOT NULL GROUP BY queue, status"):
                by_queue.setdefault(str(queue), dict.fromkeys(STATUSES, 0))[status] = int(n)
            queues = tuple(QueueCounts(name, limits.get(name), by_queue.get(name, dict.fromkeys(STATUSES, 0)))
                           for name in sorted(limits.keys() | by_queue.keys()))
            return StoreStats(
                at=now, counts=counts,
                oldest_pending=None if pending is None or pending[0] is None else float(pending[0]),
                oldest_blocked=None if blocked is None or blocked[0] is None else float(blocked[0]),
                overdue=int(overdue[0]) if overdue else 0, workers=workers,
                slots_last_minute=int(slots[0]) if slots else 0, queues=queues)

        return self._snapshot(read)

    def list_commands(self, workflow_id: str, *, offset: int = 0, limit: int = -1) -> list[CommandRow]:
        """Recorded slots in order, optionally a page of them."""
        rows = self._query(
            f"SELECT {_COMMAND_COLUMNS} FROM commands c WHERE {_KEYS_FROM} ORDER BY c.slot_key LIMIT ?",
            (workflow_id, min(max(int(offset), 0), SLOT_LIMIT), workflow_id, self.dialect.limit(limit)))
        return _named_groups([_command_row(r) for r in rows])

    def last_failed_command(self, workflow_id: str) -> CommandRow | None:
        """The highest recorded slot whose outcome is an error, if any (what failed a workflow)."""
        r = self._query_one(
            f"SELECT {_COMMAND_COLUMNS} FROM commands c WHERE {_KEYS_FROM} AND c.ok = ?"
            " ORDER BY c.slot_key DESC LIMIT 1", (workflow_id, 0, workflow_id, False))
        return None if r is None else _command_row(r)

    def search_attributes(self, workflow_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """The current search attributes (ctx.upsert_search_attributes) of these workflows, as text, by id."""
        if not workflow_ids:
            return {}
        among, params = self.dialect.in_list("workflow_id", workflow_ids)
        found: dict[str, dict[str, str]] = {}
        for wid, key, value in self._query(f"SELECT workflow_id, key, value FROM search_attributes WHERE {among}"
                                           " ORDER BY workflow_id, key", params):
            found.setdefault(wid, {})[key] = value
        return found

    def first_slot(self, workflow_id: str, kind: str, name: str) -> int | None:
        """The first slot of a workflow that recorded a command of this kind and name, if any."""
        r = self._query_one(
            f"SELECT {slot_of('c.slot_key')} FROM commands c WHERE {_KEYS_FROM} AND c.kind = ? AND c.name = ?"
            " ORDER BY c.slot_key LIMIT 1", (workflow_id, 0, workflow_id, kind, name))
        return None if r is None else int(r[0])

    def family(self, workflow_id: str) -> dict[str, Any]:
        """A workflow's parent (ctx.call_workflow) and children: {"parent": id or None, "children": [...]}."""
        run = self.dialect.run

        def read(conn: Any) -> dict[str, Any]:  # one snapshot for both
            row = run(conn, "SELECT parent FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
            children = [{"id": r[0], "workflow": r[1], "status": r[2]} for r in run(
                conn, "SELECT id, workflow, status FROM workflows WHERE parent = ? ORDER BY seq", (workflow_id,))]
            return {"parent": None if row is None else row[0], "children": children}

        return self._snapshot(read)

    def pending_approval(self, workflow_id: str) -> dict[str, Any] | None:
        """The approval request a blocked workflow waits on: {"request", "action", "details"}; else None."""
        row = self._query_one("SELECT status, blocked_on, seq FROM workflows WHERE id = ?", (workflow_id,))
        if row is None or row[0] != Status.BLOCKED or not (row[1] or "").startswith(APPROVAL_PREFIX):
            return None
        rid = row[1][len(APPROVAL_PREFIX):]
        slot = approval_slot(rid)
        value = None if slot is None else self._query_one(
            "SELECT value FROM commands WHERE slot_key = ? AND kind = 'approval'", (slot_key(int(row[2]), slot),))
        if value is None:
            return {"request": rid, "action": "?", "details": None}
        request: dict[str, Any] = loads(value[0])
        return request

    def events(self, workflow_id: str, key: str | None = None) -> dict[str, Any]:
        """A workflow's current events (ctx.set_event): the latest value per key, of one key if given.

        UnknownWorkflowIdError if there is no such workflow.
        """
        dialect = self.dialect

        def read(conn: Any) -> dict[str, Any]:
            wf = dialect.run(conn, "SELECT seq FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
            if wf is None:
                raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
            base = slot_key(int(wf[0]))
            named, params = ("", []) if key is None else (" AND name = ?", [key])
            found: dict[str, Any] = {}
            # In slot order: a later set of a key replaces an earlier one.
            for name, value in dialect.run(
                    conn, f"SELECT name, value FROM commands WHERE slot_key BETWEEN ? AND ? AND kind = ?{named}"
                    " ORDER BY slot_key", (base, base + SLOT_LIMIT - 1, EVENT, *params)):
                found[name] = loads(value)
            return found

        return self._snapshot(read)

    def list_signals(self, workflow_id: str, *, offset: int = 0, limit: int = -1,
                     run: int | None = None) -> list[SignalRow]:
        """Delivered signals of the current run in delivery order (those an earlier run `run` consumed, if
        given), optionally a page of them."""
        which = "run IS NULL" if run is None else "run = ?"
        rows = self._query("SELECT seq, name, payload, consumed, sent_at FROM signals WHERE workflow_id = ?"
                           f" AND {which} ORDER BY seq LIMIT ? OFFSET ?",
                           (workflow_id, *(() if run is None else (run,)), self.dialect.limit(limit), int(offset)))
        return [SignalRow(int(r[0]), r[1], loads(r[2]), bool(r[3]), r[4]) for r in rows]

    def list_audit(self, workflow_id: str) -> list[AuditRow]:
        """The operators' actions on a workflow, oldest first."""
        return [AuditRow(*r) for r in self._query(
            "SELECT action, at, actor, reason, detail FROM audit WHERE workflow_id = ? ORDER BY seq", (workflow_id,))]

    def count_signals(self, workflow_id: str) -> tuple[int, int]:
        """(delivered, still waiting to be consumed) signals of a workflow."""
        row = self._query_one("SELECT COUNT(*), COUNT(*) FILTER (WHERE NOT consumed) FROM signals"
                              " WHERE workflow_id = ? AND run IS NULL", (workflow_id,))
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def load_state(self, workflow_id: str) -> WorkflowState:
        """The whole history of a workflow: one query per table, in one snapshot, never one per slot."""
        dialect = self.dialect

        def load(conn: Any) -> WorkflowState:
            # The workflow's last key beside its row, for load_commands' check for gaps.
            wf = dialect.run(conn, f"SELECT w.input, w.seq, (SELECT MAX(c.slot_key) FROM commands c WHERE c.slot_key"
                             f" BETWEEN {FIRST_KEY} AND {LAST_KEY}) FROM workflows w WHERE w.id = ?",
                             (workflow_id,)).fetchone()
            if wf is None:
                raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
            commands = load_commands(dialect, conn, slot_key(int(wf[1])), wf[2])
            signals = tuple(
                SignalRecord(int(seq), name, loads(payload))
                for seq, name, payload in dialect.run(
                    conn, "SELECT seq, name, payload FROM signals WHERE workflow_id = ? AND run IS NULL ORDER BY seq",
                    (workflow_id,))
            )
            return WorkflowState(input=loads(wf[0]), has_input=wf[0] is not None, commands=commands, signals=signals)

        return self._snapshot(load)
