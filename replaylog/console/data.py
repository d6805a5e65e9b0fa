"""The console's one way to the database: what it reads, as plain frozen views, and the writes it makes.

Screens never see the store: `ConsoleData` opens a connection on the calling thread (a
SQLite connection must not cross threads; screens call it from their thread workers),
reads or writes, closes it, and hands back only the view types below, built from the
store's rows. The app watches for commits through `ChangeWatch`, also from here. The
few engine names other console modules need (the signal-name rule, the served console's
address variable, a URL without its password) are handed on from here too, so this
module stays the console's one door to the engine.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from replaylog.client import BULK_PAST, Client
from replaylog.client import BulkAction as BulkAction
from replaylog.engine.app import Registry
from replaylog.engine.check import check_workflow
from replaylog.engine.core import APPROVAL_PREFIX, DIGEST_PREFIX, DryReplay, Reason
from replaylog.engine.core import HISTORY_WARN as HISTORY_WARN
from replaylog.engine.core import signal_name_refusal as signal_name_refusal
from replaylog.engine.errors import ReplaylogError
from replaylog.engine.filters import parse_query
from replaylog.engine.store import REMOTE_ADDR_ENV as REMOTE_ADDR_ENV
from replaylog.engine.store import (
    STATUSES,
    CommandRow,
    InflightRow,
    QueueRow,
    ReaderStore,
    SignalRow,
    WorkflowFilter,
    WorkflowRow,
    WorkflowSummary,
    is_busy,
    is_postgres_url,
    open_store,
    waiting_reason,
)
from replaylog.engine.store import redact_url as redact_url
from replaylog.engine.text import cancel_state, cancel_text, preview, queue_text, utc
from replaylog.engine.vocab import Group, SlotKind, Status, kind_info, status_info

T = TypeVar("T")

# Big enough to fill any terminal, small enough that a page is built in milliseconds;
# the table only ever holds one page (a 100k-row DataTable freezes Textual for seconds).
WORKFLOW_PAGE = 100
SLOT_PAGE = 200
SIGNAL_PAGE = 200
# Slots shown on each side of a divergence in the aligned view.
ALIGN_CONTEXT = 8


# -- the views: what the screens show, built here from the store's rows


@dataclass(frozen=True)
class ListedWorkflow:
    """One row of the workflows list."""

    id: str
    workflow: str
    status: str
    blocked_on: str | None
    slots: int
    updated_at: float
    error: str | None  # the start of a failed workflow's error (the store's preview)
    wake_at: float | None = None  # a blocked workflow's timer or deadline (epoch seconds)
    # What the "blocked on" column shows: blocked_on, or for an approval request
    # "approval: ACTION (request RID)" as `list` and the workflow screen name it.
    waits: str | None = None
    # Why a pending workflow waits for a worker ("no worker running", "no running worker knows 'x'").
    no_worker: str | None = None

    @classmethod
    def of(cls, r: WorkflowSummary, approval: dict[str, Any] | None = None,
           no_worker: str | None = None) -> ListedWorkflow:
        """The view of a store summary (with the approval request it waits on, if any, and why no worker runs it)."""
        waits = r.blocked_on if approval is None else f"approval: {approval['action']} (request {approval['request']})"
        if r.position is not None:  # queued: its queue and its place in line, as `list` shows them
            waits = f"queue {r.queue} #{r.position}"
        return cls(r.id, r.workflow, r.status, r.blocked_on, r.slots, r.updated_at, r.error, r.wake_at, waits,
                   no_worker)


@dataclass(frozen=True)
class WorkflowView:
    """One workflow as the workflow screen shows it."""

    # In the order the summary shows them: what it is, where it stands, its values, its history.
    id: str
    workflow: str
    status: str
    blocked_on: str | None
    lease_expires: float | None  # a running workflow's lease: past it, its in-flight activity is not running
    # The last error that stopped a run without an outcome, and when a worker may run it again.
    worker_error: str | None
    retry_at: float | None
    has_input: bool
    input: Any
    result: Any
    error: str | None
    slots: int
    created_at: float
    updated_at: float
    wake_at: float | None = None  # a blocked workflow's timer or deadline (epoch seconds)
    # An operator's cancel request (its reason, "" if none given), and a fork's origin (id, slot).
    cancel_requested: str | None = None
    forked_from: tuple[str, int] | None = None
    traceback: str | None = None  # a failed workflow's, through its code
    # Its queue, in words (engine.text.queue_text: queue, priority, place in line, delay); None if on none.
    queue: str | None = None

    @classmethod
    def of(cls, r: WorkflowRow) -> WorkflowView:
        """The view of a store row."""
        on_queue = None if r.queue is None else queue_text(
            r.queue, r.position, time.time(), priority=r.priority, not_before=r.not_before, dedup_id=r.dedup_id,
            admitted_at=r.admitted_at)
        return cls(r.id, r.workflow, r.status, r.blocked_on, r.lease_expires, r.worker_error, r.retry_at,
                   r.has_input, r.input, r.result, r.error, r.slots, r.created_at, r.updated_at, r.wake_at,
                   r.cancel_requested, None if r.forked_from is None else (r.forked_from, r.forked_slot or 0),
                   r.traceback, on_queue)


@dataclass(frozen=True)
class Slot:
    """One recorded slot: the command, when it was recorded after how many attempts, and its outcome."""

    slot: int
    kind: str
    name: str
    recorded_at: float
    attempts: int
    ok: bool
    value: Any
    error: str | None
    traceback: str | None = None  # a failed activity's (its last attempt's)

    @property
    def label(self) -> str:
        """The command as the aligned view names it ("activity:charge")."""
        return f"{self.kind}:{self.name}"

    @classmethod
    def of(cls, c: CommandRow) -> Slot:
        """The view of a store command row."""
        return cls(c.slot, c.kind, c.name, c.recorded_at, c.attempts, c.ok, c.value, c.error, c.traceback)


@dataclass(frozen=True)
class Signal:
    """One delivered signal."""

    seq: int
    name: str
    payload: Any
    consumed: bool
    sent_at: float

    @classmethod
    def of(cls, s: SignalRow) -> Signal:
        """The view of a store signal row."""
        return cls(s.seq, s.name, s.payload, s.consumed, s.sent_at)


@dataclass(frozen=True)
class InFlight:
    """An activity started with no recorded outcome (it possibly ran)."""

    slot: int
    name: str
    attempts: int
    started_at: float
    error: str | None = None  # the last attempt's error, when the next waits for its retry time
    retry_at: float | None = None  # when the next attempt may start (a retry policy's wait)
    details: Any = None  # what its latest attempt passed to heartbeat()
    heartbeat_at: float | None = None  # when (None: it never heartbeat)

    @classmethod
    def of(cls, i: InflightRow | None) -> InFlight | None:
        """The view of a store in-flight row (None stays None)."""
        return None if i is None else cls.of_row(i)

    @classmethod
    def of_row(cls, i: InflightRow) -> InFlight:
        """The view of a store in-flight row."""
        return cls(i.slot, i.name, i.attempts, i.started_at, i.error, i.retry_at, i.details, i.heartbeat_at)


@dataclass(frozen=True)
class WorkflowsQuery:
    """What the workflows screen shows: filter, order and page."""

    status: str | None = None
    text: str = ""
    sort: str = "updated"
    descending: bool = True
    offset: int = 0
    limit: int = WORKFLOW_PAGE
    awaiting: str | None = None  # "approval": only workflows waiting for an answer to an approval request


@dataclass(frozen=True)
class WorkflowsPage:
    """One page of workflows with the totals the header shows."""

    query: WorkflowsQuery
    rows: tuple[ListedWorkflow, ...]
    total: int  # -1 while not counted yet
    counts: dict[str, int]
    # The one line saying why the filter box's text was refused (an unknown field): no rows then.
    problem: str | None = None
    # Each declared queue's figures, as `replaylog queues` gives them (`queue_figures`); () if none.
    queues: tuple[str, ...] = ()


def fetch_workflows(store: ReaderStore, query: WorkflowsQuery,
                    counts: dict[str, int] | None = None, *, count: bool = True) -> WorkflowsPage:
    """A page of workflows plus the header's counts: a LIMIT/OFFSET query and an index scan, never every row.

    Args:
        store: a store this thread opened.
        query: filter, order and page.
        counts: status counts to reuse; None counts afresh (about 150 ms at 1,000,000 workflows,
            so the screen reuses them between commits that come faster than once a second).
        count: False reads the page alone, with no counts and a total of -1 (not known yet):
            what the console paints first, before the counts' index scan.
    """
    try:
        where, rest = filter_of(query)
    except ReplaylogError as exc:
        return WorkflowsPage(query, (), 0, counts if counts is not None else store.status_counts(), problem=str(exc))
    if not count:
        return WorkflowsPage(query, _listed(store, query, where, rest), -1, {})
    fresh = counts is None
    if counts is None:
        counts = store.status_counts()
    if query.text or query.awaiting or not fresh:
        total = store.count_workflows(status=query.status, text=rest, awaiting=query.awaiting, where=where)
    elif query.status:
        total = counts.get(query.status, 0)  # the counts already hold it: skip a second scan
    else:
        total = sum(counts.values())
    offset = min(query.offset, max(0, (total - 1) // query.limit * query.limit))
    if offset != query.offset:
        query = replace(query, offset=offset)
    return WorkflowsPage(query, _listed(store, query, where, rest), total, counts,
                         queues=tuple(queue_figures(q) for q in store.queues()))


def queue_figures(q: QueueRow) -> str:
    """A queue's figures on one line: "emails 2/5 running · 3 waiting (1 delayed) · 12/100 per 60s"."""
    running = f"{q.admitted}/{q.concurrency} running" if q.concurrency is not None else f"{q.admitted} running"
    waiting = f"{q.waiting} waiting" + (f" ({q.delayed} delayed)" if q.delayed else "")
    parts = [f"{q.name} {running}", waiting]
    if q.worker_concurrency is not None:
        parts.append(f"{q.worker_concurrency} per worker")
    if q.rate_limit is not None:
        parts.append(f"{q.recent}/{q.rate_limit[0]} per {q.rate_limit[1]:g}s")
    return " · ".join(parts)


def filter_of(query: WorkflowsQuery) -> tuple[WorkflowFilter | None, str | None]:
    """The filter box's text as fields (`status:failed customer=c-42`, engine.filters.parse_query) and the
    words left, which an id or a workflow name must hold; StoreError for an unknown field."""
    if not query.text:
        return None, None
    where, rest = parse_query(query.text)
    return (where or None), (rest or None)


def _listed(store: ReaderStore, query: WorkflowsQuery, where: WorkflowFilter | None,
            rest: str | None) -> tuple[ListedWorkflow, ...]:
    rows = store.list_workflow_summaries(status=query.status, text=rest, sort=query.sort,
                                         descending=query.descending, limit=query.limit, offset=query.offset,
                                         awaiting=query.awaiting, where=where)
    # One small read per row waiting for an approval, on this page only (a page is
    # bounded; the request's action is in its slot, not in the workflows row).
    def approval(r: WorkflowSummary) -> dict[str, Any] | None:
        waits = r.status == Status.BLOCKED and (r.blocked_on or "").startswith(APPROVAL_PREFIX)
        return store.pending_approval(r.id) if waits else None

    served = functools.cache(store.served_names)  # read once, and only if a pending row asks

    def no_worker(r: WorkflowSummary) -> str | None:
        return waiting_reason(r.workflow, served()) if r.status == "pending" else None

    return tuple(ListedWorkflow.of(r, approval(r), no_worker(r)) for r in rows)


@dataclass(frozen=True)
class WorkflowDetail:
    """One workflow, a page of its slots, a page of its signals and its in-flight activity."""

    row: WorkflowView
    offset: int
    commands: tuple[Slot, ...]
    signals: tuple[Signal, ...]
    inflight: InFlight | None  # the latest activity in flight
    signal_total: int = 0
    signal_waiting: int = 0
    signal_offset: int = 0
    waiting: str | None = None  # a pending workflow's reason to wait for a worker (no live one knows it)
    approval: dict[str, Any] | None = None  # the approval request it waits on: request, action, details
    # ctx.call_workflow's links: the parent that started it, and its children as (id, workflow, status).
    parent: str | None = None
    children: tuple[tuple[str, str, str], ...] = ()
    # What its code published with ctx.set_event: (key, latest value), in the order first set.
    events: tuple[tuple[str, Any], ...] = ()
    # What became of an operator's cancel request, in words (engine.text.cancel_text); None if none was made.
    cancel: str | None = None
    # Its runs (ctx.continue_as_new), oldest first, the current one last: (run, slots, ended_at or None).
    runs: tuple[tuple[int, int, float | None], ...] = ()
    # Its search attributes (ctx.upsert_search_attributes): (key, value as text), by key.
    attributes: tuple[tuple[str, str], ...] = ()
    # Every activity in flight, by slot: `inflight` alone, or each task of a parallel group.
    inflight_tasks: tuple[InFlight, ...] = ()


def fetch_detail(store: ReaderStore, workflow_id: str, offset: int, limit: int = SLOT_PAGE,
                 signal_offset: int | None = None) -> WorkflowDetail:
    """A workflow with one page of its slots and one page of its signals (never a whole log).

    Args:
        store: a store this thread opened.
        workflow_id: the workflow.
        offset: the first slot of the slot page (clamped to the history).
        limit: slots per page.
        signal_offset: the first signal of the signal page, by delivery order; None for the
            latest page (the signals an operator acts on; older ones are consumed history).
    """
    row = store.get_workflow(workflow_id)
    offset = max(0, min(offset, max(0, (row.slots - 1) // limit * limit)))
    commands = tuple(map(Slot.of, store.list_commands(workflow_id, offset=offset, limit=limit)))
    total, waiting = store.count_signals(workflow_id)
    latest = max(0, total - SIGNAL_PAGE)
    signal_offset = latest if signal_offset is None else max(0, min(signal_offset, latest))
    signals = tuple(map(Signal.of, store.list_signals(workflow_id, offset=signal_offset, limit=SIGNAL_PAGE)))
    worker = waiting_reason(row.workflow, store.served_names()) if row.status == Status.PENDING else None
    family = store.family(workflow_id)
    children = tuple((c["id"], c["workflow"], c["status"]) for c in family["children"])
    attributes = tuple(store.search_attributes([workflow_id]).get(workflow_id, {}).items())
    tasks = tuple(InFlight.of_row(i) for i in store.inflight_tasks(workflow_id))
    newest = max(tasks, key=lambda i: (i.slot, i.attempts)) if tasks else None
    return WorkflowDetail(WorkflowView.of(row), offset, commands, signals, newest,
                          total, waiting, signal_offset, worker, store.pending_approval(workflow_id),
                          family["parent"], children, tuple(store.events(workflow_id).items()),
                          _cancel(store, row),
                          tuple((r.run, r.slots, r.ended_at) for r in store.list_runs(workflow_id)), attributes,
                          tasks)


def _cancel(store: ReaderStore, row: WorkflowRow) -> str | None:
    """What became of the workflow's cancel request (its audit trail says whether it was not delivered)."""
    if row.cancel_requested is None:
        return None
    # Only a finished workflow's trail can say so: an unfinished one's request is still on its way.
    state = cancel_state(row.status, row.cancel_requested,
                         store.list_audit(row.id) if status_info(row.status).finished else ())
    return None if state is None else cancel_text(*state, row.cancel_requested)


# The transcript shows at most this many slots: it is read whole, not paged.
TRANSCRIPT_SLOTS = 500


@dataclass(frozen=True)
class TranscriptEntry:
    """One line of a workflow's transcript: a model or tool call, an approval and its answer, a child."""

    slot: int
    group: Group  # how it is shown: a call, an approval, a child, a clock read or another slot
    title: str  # what was done: the activity and its arguments, the action, the child
    outcome: str  # what came of it
    ok: bool
    parallel_group: int | None = None  # a task of a ctx.parallel group: the slot of its first task


def fetch_transcript(store: ReaderStore, workflow_id: str) -> tuple[list[TranscriptEntry], int]:
    """A workflow's slots as a conversation (at most TRANSCRIPT_SLOTS of them), and how many it has."""
    row = store.get_workflow(workflow_id)
    commands = store.list_commands(workflow_id, limit=TRANSCRIPT_SLOTS)
    answers = {s.name: s.payload for s in store.list_signals(workflow_id) if s.name.startswith(APPROVAL_PREFIX)}
    children = {c["id"]: c for c in store.family(workflow_id)["children"]}
    entries = []
    for c in commands:
        group = kind_info(c.kind).group
        if group is Group.CALL:
            args = c.args if c.args and not c.args.startswith(DIGEST_PREFIX) else "(…)"
            outcome = preview(c.value, 200) if c.ok else (c.error or "")
            entries.append(TranscriptEntry(c.slot, group, f"{c.name}{_call_args(args)}", outcome, c.ok,
                                           c.parallel_group))
        elif group is Group.APPROVAL:
            rid = (c.value or {}).get("request", "")
            answer = answers.get(APPROVAL_PREFIX + str(rid))
            if isinstance(answer, dict):
                verdict = "approved" if answer.get("approved") else "rejected"
                note = f": {answer['note']}" if answer.get("note") else ""
                outcome, ok = f"{verdict} by {answer.get('by')}{note}", bool(answer.get("approved"))
            else:
                outcome, ok = "waiting for an answer", True
            details = preview((c.value or {}).get("details"), 120)
            entries.append(TranscriptEntry(c.slot, group, f"{c.name} {details} (request {rid})", outcome, ok))
        elif group is Group.CHILD and not c.ok:  # the child's id was taken: none was started
            entries.append(TranscriptEntry(c.slot, group, c.name, c.error or "", False))
        elif group is Group.CHILD:
            child_id = str((c.value or {}).get("id"))
            child = children.get(child_id, {})
            status = str(child.get("status", "not started"))
            entries.append(TranscriptEntry(c.slot, group, f"{c.name} {child_id}", status, status != Status.FAILED))
        elif group is Group.CLOCK:
            entries.append(TranscriptEntry(c.slot, group, "clock read", preview(c.value), True))
        else:
            entries.append(TranscriptEntry(c.slot, group, f"{c.kind}:{c.name}", preview(c.value), c.ok))
    return entries, row.slots


def _call_args(args: str) -> str:
    """An argument key as call arguments: [1,"a"] → (1,"a")."""
    if args.startswith("[") and args.endswith("]"):
        return f"({args[1:-1]})"
    return f"({args})"


@dataclass(frozen=True)
class AlignedRow:
    """One slot of the aligned view: what history holds beside what the code issues.

    The issued side is the current code's (a dry replay) when the console has the code,
    else what the code issued when the workflow failed (the stored diagnostic).
    """

    slot: int
    recorded: str | None
    issued: str | None
    # "match", "diverges" (the first divergence), "after" (past it, or past where the dry
    # replay stopped), "live" (history ends: the code would run this now) or "unknown"
    verdict: str
    failed_here: bool = False  # the slot the stored diagnostic names (where the workflow failed)


@dataclass(frozen=True)
class Diagnosis:
    """What the diagnosis tab shows for one workflow, in two parts kept apart.

    At failure (stored when the workflow failed): `message`, `slot`, `recorded`, `issued`,
    `failed_command`. The current code (a dry replay of the code loaded now): `verdict`,
    `verdict_ok`, `current_slot`, and the aligned view when `aligned_current` is true.
    """

    workflow_id: str
    kind: str  # "nondeterministic", "activity", "other" or "none"
    source: str  # where the issued side of the aligned view came from
    message: str = ""
    slot: int | None = None
    recorded: str | None = None
    issued: str | None = None
    aligned: tuple[AlignedRow, ...] = ()
    failed_command: Slot | None = None
    verdict: str | None = None
    verdict_ok: bool | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    code: str | None = None  # the app the current code was loaded from (None: no code loaded)
    aligned_current: bool = False  # the aligned view's issued side is the current code's
    current_slot: int | None = None  # where the current code first diverges (None: it does not, or unknown)
    checked: bool = False  # made for a `c` (check) press
    traceback: str | None = None  # the failed workflow's, through its code (stored when it failed)


def _labels(commands: list[CommandRow]) -> dict[int, str]:
    return {c.slot: Slot.of(c).label for c in commands}


def _window(store: ReaderStore, workflow_id: str, slot: int) -> tuple[int, int, dict[int, str]]:
    start = max(0, slot - ALIGN_CONTEXT)
    end = max(slot + ALIGN_CONTEXT + 1, start + 1)
    return start, end, _labels(store.list_commands(workflow_id, offset=start, limit=end - start))


def _align_stored(store: ReaderStore, workflow_id: str, total_slots: int, slot: int,
                  stored_issued: str | None) -> tuple[AlignedRow, ...]:
    """History beside what the code issued when the workflow failed: all the stored diagnostic knows."""
    start, end, recorded = _window(store, workflow_id, slot)
    rows: list[AlignedRow] = []
    for i in range(start, min(end, max(total_slots, slot + 1))):
        rec = recorded.get(i)
        # The slots before the divergence matched by definition; nothing is known after it.
        iss = rec if i < slot else (stored_issued if i == slot else None)
        verdict = "match" if i < slot else ("diverges" if i == slot else "unknown")
        rows.append(AlignedRow(i, rec, iss, verdict, failed_here=i == slot))
    return tuple(rows)


def _align_current(store: ReaderStore, workflow_id: str, total_slots: int, issued: tuple[str, ...],
                   current: int | None, stored: int | None) -> tuple[AlignedRow, ...]:
    """History beside what the current code issues (a dry replay), around its first divergence.

    Every mark comes from this replay: a slot where the workflow once failed but the code
    now matches shows as a match (with `failed_here`), never as a divergence.
    """
    center = current if current is not None else (stored if stored is not None else 0)
    start, end, recorded = _window(store, workflow_id, center)
    rows: list[AlignedRow] = []
    for i in range(start, min(end, max(total_slots, center + 1, len(issued)))):
        rec = recorded.get(i)
        iss = issued[i] if i < len(issued) else None
        if current is not None:
            verdict = "match" if i < current else ("diverges" if i == current else "after")
        elif rec is not None and rec == iss:
            verdict = "match"
        else:
            verdict = "live" if rec is None and iss is not None else "after"
        rows.append(AlignedRow(i, rec, iss, verdict, failed_here=i == stored))
    return tuple(rows)


def diagnose(store: ReaderStore, workflow_id: str, registry: Registry | None, *, check: bool = False) -> Diagnosis:
    """Explain why a workflow failed; with `check` (or a registry for a divergence) dry-replay it too.

    What was stored when the workflow failed and what the current code does now are kept
    apart: the summary's "when it failed" rows come from the stored diagnostic only, the
    verdict and the aligned view's marks from the dry replay only (or, with no code
    loaded, the aligned view is the stored diagnostic's and says so). The verdict is
    `check_workflow`'s, the one `replaylog check` gives: judged by the workflow's status.
    """
    row = store.get_workflow(workflow_id)
    verdict: str | None = None
    verdict_ok: bool | None = None
    replay: DryReplay | None = None
    code = registry.spec if registry is not None else None
    if registry is not None and (check or row.diagnostic):
        checked = check_workflow(store, registry, workflow_id)
        verdict, verdict_ok = checked.text, checked.ok
        replay = None if checked.replay.reason is Reason.NO_CODE else checked.replay
    elif check:
        verdict, verdict_ok = "no workflow code loaded: start the console with --app to check", None
    current = replay.diagnostic.slot if replay is not None and replay.diagnostic is not None else None
    if row.diagnostic:
        d = row.diagnostic
        slot = int(d.get("slot", 0))
        if replay is not None:
            source = f"dry replay of the current code ({code})"
            aligned = _align_current(store, workflow_id, row.slots, replay.issued, current, slot)
        else:
            source = "the diagnostic stored when it failed (start the console with --app to replay the current code)"
            aligned = _align_stored(store, workflow_id, row.slots, slot, d.get("issued"))
        return Diagnosis(workflow_id, "nondeterministic", source, str(d.get("message", "")), slot,
                         d.get("recorded"), d.get("issued"), aligned, None, verdict, verdict_ok, (), code,
                         replay is not None, current, check)
    if row.status == Status.FAILED:
        failed = store.last_failed_command(workflow_id)
        kind = "activity" if failed is not None and row.error_kind == "activity" else "other"
        return Diagnosis(workflow_id, kind, "the stored error", row.error or "", failed.slot if failed else None,
                         failed_command=Slot.of(failed) if failed is not None and kind == "activity" else None,
                         verdict=verdict, verdict_ok=verdict_ok, code=code, current_slot=current, checked=check,
                         traceback=row.traceback)
    return Diagnosis(workflow_id, "none", "", verdict=verdict, verdict_ok=verdict_ok, code=code,
                     current_slot=current, checked=check)


def find_workflow_ids(store: ReaderStore, text: str, limit: int = 20) -> list[tuple[str, str, str]]:
    """(id, workflow, status) of workflows whose id or name contains `text`, for the palette."""
    return [(r.id, r.workflow, r.status) for r in store.list_workflow_summaries(text=text or None, limit=limit)]


class SignalRefused(Exception):
    """The signal was not sent (the store refused it, or could not be reached); nothing was written."""


class ActionRefused(Exception):
    """An operator action was not taken (the store refused it, or could not be reached); nothing was written."""


# The screens' actions that write: a read-only console hides them and refuses them if invoked.
WRITE_ACTIONS = frozenset({"signal", "cancel_workflow", "terminate_workflow", "retry_workflow", "fork_workflow",
                           "answer", "bulk", "pause_schedule", "resume_schedule", "trigger_schedule"})


@dataclass(frozen=True)
class ListedSchedule:
    """One row of the schedules screen: a schedule and its next run (None while paused)."""

    name: str
    workflow: str
    cron: str
    timezone: str
    next_at: float | None
    overlap: str
    catch_up: str
    last_id: str | None
    skipped: int


# How many ids a bulk action's dialog names (the rest are counted).
BULK_SHOWN = 10


@dataclass(frozen=True)
class BulkPreview:
    """What a bulk action would act on: the marked workflows, or every one the screen's filters take."""

    action: BulkAction
    ids: tuple[str, ...]
    marked: bool  # the marked set (else the filtered one)


@dataclass(frozen=True)
class RetryPreview:
    """What a retry would do: `check`'s verdict on it (the one `replaylog retry` gives), whether it may go
    ahead, and the slot to fork from instead when it would fail again on a recorded activity error."""

    verdict: str
    allowed: bool
    fork_from: int | None = None


@dataclass(frozen=True)
class ForkPreview:
    """What a fork from `slot` would run again: the recorded activities from there, as "name (slot K)"."""

    slot: int
    slots: int
    again: tuple[str, ...]
class ApprovalRefused(Exception):
    """The approval answer was not recorded (another request is pending, none is, read-only…); nothing was written."""


class ConsoleData:
    """Every read and write the console makes, each on the calling thread's own connection.

    Screens call these from thread workers (never the UI thread) and get back frozen views.

    Args:
        db_path: the SQLite file the worker writes, or a PostgreSQL URL.
        readonly: the console may not write: `send_signal` opens the store read-only and is refused.
        registry: the workflow code (from --app), for dry replays; None shows stored diagnostics only.
        clock: the wall clock for "4s ago" and lease times; tests inject a fixed one.
    """

    def __init__(self, db_path: str | os.PathLike[str], *, readonly: bool = False, registry: Registry | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        # A URL stays a string (a Path would fold its `//`).
        self.db_path: Path | str = db_path if isinstance(db_path, str) and is_postgres_url(db_path) else Path(db_path)
        self.readonly = readonly
        self.registry = registry
        self.clock = clock

    @property
    def label(self) -> str:
        """The database as the title bar names it: the file's name, or the URL without its password."""
        return self.db_path.name if isinstance(self.db_path, Path) else redact_url(self.db_path)

    @property
    def code(self) -> str | None:
        """The app the workflow code was loaded from (None: none loaded)."""
        return self.registry.spec if self.registry is not None else None

    def _reader(self) -> ReaderStore:
        # Read-only even when the console may write: a read must never create an empty
        # database where the real one was moved away or deleted.
        return open_store(self.db_path, readonly=True)

    def workflows(self, query: WorkflowsQuery, counts: dict[str, int] | None = None, *,
                  count: bool = True) -> WorkflowsPage:
        """A page of workflows and the header's counts (see `fetch_workflows`)."""
        with self._reader() as store:
            return fetch_workflows(store, query, counts, count=count)

    def detail(self, workflow_id: str, offset: int, signal_offset: int | None = None) -> WorkflowDetail:
        """A workflow with a page of its slots and of its signals (see `fetch_detail`)."""
        with self._reader() as store:
            return fetch_detail(store, workflow_id, offset, signal_offset=signal_offset)

    def diagnose(self, workflow_id: str, *, check: bool = False) -> Diagnosis:
        """Why a workflow failed and what the current code does now (see `diagnose`)."""
        with self._reader() as store:
            return diagnose(store, workflow_id, self.registry, check=check)

    def find_workflow_ids(self, text: str, limit: int = 20) -> list[tuple[str, str, str]]:
        """(id, workflow, status) of workflows whose id or name contains `text`."""
        with self._reader() as store:
            return find_workflow_ids(store, text, limit)

    def send_signal(self, workflow_id: str, name: str, payload: Any) -> int:
        """Send a signal through the store's `send_signal` (what `replaylog signal` uses); its sequence number.

        Raises:
            SignalRefused: with the one line to show (a closed workflow, an unknown id, a
                payload over the cap, a read-only console, an unreachable database).
        """
        try:
            with self._client() as client:
                return client.signal(workflow_id, name, payload)
        except ReplaylogError as exc:
            raise SignalRefused(str(exc)) from exc
        except Exception as exc:  # any failure is a refusal to show, never a crash
            raise SignalRefused(f"could not send: {exc}") from exc

    # -- the operator's actions: the client's (replaylog.client), as the command line and an application make them

    def _client(self) -> Client:
        # One per write: a write is rare, and a client's connection stays off the UI thread.
        return Client(self.db_path, readonly=self.readonly, app=self.registry)

    def _act(self, act: Callable[[Client], str]) -> str:
        return self._act_on(act)

    def _act_on(self, act: Callable[[Client], T]) -> T:
        if self.readonly:
            raise ActionRefused("the console is read-only: no write actions")
        try:
            with self._client() as client:
                return act(client)
        except ReplaylogError as exc:
            raise ActionRefused(str(exc)) from exc
        except Exception as exc:  # any failure is a refusal to show, never a crash
            raise ActionRefused(f"could not act: {exc}") from exc

    def cancel(self, workflow_id: str, reason: str) -> str:
        """Ask the workflow to cancel (`replaylog cancel`); the line to show. ActionRefused if not."""
        was = self._act(lambda c: c.get_handle(workflow_id).cancel(reason or None))
        return f"cancel requested for {workflow_id} (was {was}): its code sees WorkflowCancelled at its next ctx call"

    def terminate(self, workflow_id: str, reason: str) -> str:
        """Terminate the workflow (`replaylog terminate`); the line to show. ActionRefused if not."""
        was = self._act(lambda c: c.get_handle(workflow_id).terminate(reason or None))
        return f"{workflow_id} terminated (was {was})"

    def run_slots(self, workflow_id: str, run: int, limit: int = SLOT_PAGE) -> tuple[Slot, ...]:
        """The first `limit` slots of run `run` of a workflow (an earlier one, ctx.continue_as_new, or the current)."""
        with self._reader() as store:
            return tuple(map(Slot.of, store.run_commands(workflow_id, run, limit=limit)))

    # -- schedules (replaylog.engine.schedules): listed with their next run; paused, resumed, triggered

    def schedules(self) -> list[ListedSchedule]:
        """Every schedule, by name."""
        with self._reader() as store:
            return [ListedSchedule(s.name, s.workflow, s.cron, s.timezone, None if s.paused else s.next_at,
                                   s.overlap, s.catch_up, s.last_id, s.skipped) for s in store.list_schedules()]

    def pause_schedule(self, name: str) -> str:
        """Pause a schedule (`replaylog schedule pause`); the line to show. ActionRefused if not."""
        self._act(lambda c: c.pause_schedule(name).name)
        return f"schedule {name} paused: its ticks start nothing until it is resumed"

    def resume_schedule(self, name: str) -> str:
        """Resume a schedule from its next tick after now (`replaylog schedule resume`); the line to show."""
        row = self._act_on(lambda c: c.resume_schedule(name))
        return f"schedule {name} resumed: next run {utc(row.next_at)}"

    def trigger_schedule(self, name: str) -> str:
        """Start the schedule's workflow now (`replaylog schedule trigger`); the line to show."""
        wid = self._act(lambda c: c.trigger_schedule(name).id)
        return f"schedule {name} started {wid}"

    def retry_preview(self, workflow_id: str) -> RetryPreview:
        """Dry-replay a failed workflow against the loaded code, as `replaylog retry` does first."""
        if self.registry is None:
            return RetryPreview("no workflow code loaded: a retry dry-replays the history against the code first",
                                False)
        with self._reader() as store:
            row = store.get_workflow(workflow_id)
            if row.status != Status.FAILED:
                return RetryPreview(f"workflow {workflow_id!r} is {row.status}: only a failed workflow can be retried",
                                    False)
            verdict = check_workflow(store, self.registry, workflow_id)
        return RetryPreview(verdict.text, verdict.ok, verdict.fork_from)

    def retry(self, workflow_id: str) -> str:
        """Set a failed workflow pending again (after `retry_preview`); the line to show."""
        def go(client: Client) -> str:
            client.get_handle(workflow_id).retry()  # dry-replayed again, under the write: the code may have moved
            return f"{workflow_id} is pending again"
        return self._act(go)

    def bulk_preview(self, action: BulkAction, query: WorkflowsQuery, marked: tuple[str, ...]) -> BulkPreview:
        """The workflows a bulk action takes: the marked ones if any, else all the screen's filters take
        (every page, oldest first). ActionRefused for a read-only console, a retry without the code
        loaded (each retry is dry-replayed against it), a bad filter, or no filter at all."""
        if self.readonly:
            raise ActionRefused("the console is read-only: no write actions")
        if action == "retry" and self.registry is None:
            raise ActionRefused("no workflow code loaded: each retry dry-replays its history against the code first"
                                " (open the console with --app)")
        if marked:
            return BulkPreview(action, marked, True)
        if not (query.text or query.status or query.awaiting):
            raise ActionRefused("filter first (/ or a status key), or mark workflows with space: a bulk action"
                                " never takes every workflow")
        try:
            where, rest = filter_of(query)
            with self._reader() as store:
                rows = store.list_workflow_summaries(status=query.status, text=rest, awaiting=query.awaiting,
                                                     where=where, sort="created", descending=False, limit=-1)
        except ReplaylogError as exc:
            raise ActionRefused(str(exc)) from exc
        return BulkPreview(action, tuple(r.id for r in rows), False)

    def bulk(self, preview: BulkPreview, reason: str) -> str:
        """Take the action on each workflow of a preview, one by one (`Client.bulk`); the summary line."""
        report = self._act_on(lambda c: c.bulk(preview.action, preview.ids, reason=reason or None))
        said = f"{BULK_PAST[preview.action]} {report.done} of {len(preview.ids)} workflow(s)"
        if report.refused:
            first = report.refused[0]
            said += f"; {len(report.refused)} refused, the first {first.id}: {first.error}"
        return said

    def fork_preview(self, workflow_id: str, slot: int) -> ForkPreview:
        """Which recorded activities a fork from `slot` runs again."""
        with self._reader() as store:
            total = store.get_workflow(workflow_id).slots
            again = tuple(f"{c.name} (slot {c.slot})" for c in store.list_commands(workflow_id, offset=slot)
                          if c.kind == SlotKind.ACTIVITY)
        return ForkPreview(slot, total, again)

    def fork(self, workflow_id: str, slot: int) -> str:
        """Fork the workflow from `slot` (`replaylog fork`); the line to show, naming the new id."""
        new = self._act(lambda c: c.get_handle(workflow_id).fork(slot).id)
        return f"forked {workflow_id} at slot {slot} as {new}"
    def answer_approval(self, workflow_id: str, request: str, *, approved: bool, note: str | None) -> None:
        """Answer the approval request `request` through the store's `answer_approval` (what `replaylog approve` uses).

        Raises:
            ApprovalRefused: with the one line to show (the workflow moved on to another
                request or none, a read-only console, an unreachable database).
        """
        try:
            with self._client() as client:
                client.get_handle(workflow_id).approve(note=note, reject=not approved, request=request)
        except ReplaylogError as exc:
            raise ApprovalRefused(str(exc)) from exc
        except Exception as exc:  # any failure is a refusal to show, never a crash
            raise ApprovalRefused(f"could not answer: {exc}") from exc

    def transcript(self, workflow_id: str) -> tuple[list[TranscriptEntry], int]:
        """A workflow's slots as a conversation (see `fetch_transcript`)."""
        with self._reader() as store:
            return fetch_transcript(store, workflow_id)

    def watch(self) -> ChangeWatch:
        """A new change detector on the database (for one thread)."""
        return ChangeWatch(self.db_path)


def is_transient(exc: BaseException) -> bool:
    """Whether a read failed only because a writer holds a lock (by the error's SQLite code, not its text)."""
    return is_busy(exc)


# On a server, how often (seconds) what is shown is read again with no notification: a running
# workflow's slots are committed without a NOTIFY (one a slot would wake every listener of every
# worker), so without this its count and "updated" stood still until something else changed.
SERVER_RESCAN = 2.0


class ChangeWatch:
    """One read-only connection polling `PRAGMA data_version`, reopened when the file is replaced.

    A connection keeps reading the file it opened even after that file was deleted or
    replaced (a restore from backup), and would then report "no change" for ever; so each
    poll also compares the file's identity, and a new file counts as a change. On a
    PostgreSQL server the token counts notifications, and every SERVER_RESCAN seconds
    counts as a change too (running workflows' slots send none).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = path
        self.store: ReaderStore | None = None
        self.identity: tuple[int, int] | None = None
        self.version: int | None = None
        self._rescan_at = 0.0  # on a server: when what is shown is read again, notified or not

    def poll(self) -> bool:
        """Whether the database changed since the last poll; raises when it cannot be read."""
        if isinstance(self.path, str):  # a server: its change token counts NOTIFYs (no file to replace)
            now = time.monotonic()
            if self.store is None:
                self.store = open_store(self.path, readonly=True)
                self.version = self.store.data_version()
                self._rescan_at = now + SERVER_RESCAN
                return False
            version = self.store.data_version()
            changed, self.version = version != self.version, version
            if changed or now >= self._rescan_at:
                self._rescan_at = now + SERVER_RESCAN
                return True
            return False
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise FileNotFoundError(f"no database file at {self.path}") from None
        identity = (st.st_dev, st.st_ino)
        if self.store is not None and identity != self.identity:
            self.close()
        if self.store is None:
            # Read-only: the watcher must never create or touch the file it watches.
            self.store = open_store(self.path, readonly=True)
            self.identity = identity
            first = self.version is None
            self.version = self.store.data_version()
            return not first  # a reopened (maybe replaced) file: re-query what is shown
        version = self.store.data_version()
        changed, self.version = version != self.version, version
        return changed

    def close(self) -> None:
        """Drop the connection (the next poll reopens it)."""
        if self.store is not None:
            store, self.store = self.store, None
            with contextlib.suppress(Exception):  # a broken connection is being dropped anyway
                store.close()


__all__ = ["STATUSES", "WRITE_ACTIONS", "ActionRefused", "AlignedRow", "ChangeWatch", "ConsoleData", "Diagnosis",
           "ForkPreview", "InFlight", "ListedSchedule", "ListedWorkflow", "RetryPreview", "Signal", "SignalRefused",
           "Slot", "WorkflowDetail", "WorkflowView", "WorkflowsPage", "WorkflowsQuery", "diagnose", "fetch_detail",
           "fetch_workflows", "find_workflow_ids", "is_transient"]
