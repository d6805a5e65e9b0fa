"""The client: every operation an application, the command line and the console perform on workflows.

    from replaylog import Client

    with Client("app.db") as client:
        handle = client.start(order_workflow, {"order": 42})
        print(handle.result(timeout=60))

Each operation is written once, here, over the store's protocols (`engine.store`): the
command line is a thin layer of arguments and wording over it. A `Client` is safe to share
between threads: its one store connection is used by one thread at a time (a lock), and a
thread that waits (`result`, `get_event`) holds no lock while it waits.

Waiting never busy-polls the workflow: on PostgreSQL a waiting call sleeps until the
store's LISTEN connection hears a change (one listening thread per client, whatever the
number of waiting calls); on SQLite it sleeps in steps of `SQLITE_POLL` seconds and
re-reads the workflow only when `PRAGMA data_version` says another connection committed.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, Literal, TypeVar, cast, overload

from replaylog.engine.app import Registry, load_app
from replaylog.engine.check import Verdict, check_workflow
from replaylog.engine.core import APPROVAL_PREFIX, registered_name
from replaylog.engine.errors import (
    Diagnostic,
    DuplicateWorkflowIdError,
    OperatorRefusedError,
    ReplaylogError,
    StoreError,
    UnknownWorkflowIdError,
    WorkflowCancelled,
)
from replaylog.engine.filters import workflow_filter
from replaylog.engine.history import HistoryDocument, parse_document
from replaylog.engine.queues import DedupIdTakenError, Queue
from replaylog.engine.queues import check_start as check_queue_options
from replaylog.engine.retention import BATCH, PruneReport, parse_cutoff, parse_statuses, prune
from replaylog.engine.store import (
    AuditRow,
    CommandRow,
    InflightRow,
    PruneBatch,
    QueueRow,
    ReaderStore,
    RunRow,
    ScheduleRow,
    SignalRow,
    Store,
    StoreStats,
    WorkflowFilter,
    WorkflowRow,
    WorkflowSummary,
    check_timeout,
    database_path,
    default_max_payload,
    encode_payload,
    is_postgres_url,
    open_store,
    operator_name,
    waiting_reason,
)
from replaylog.engine.telemetry import trace_context_now
from replaylog.engine.text import cancel_state
from replaylog.engine.vocab import SlotKind, Status, status_info

__all__ = [
    "DEFAULT_DB", "Client", "ClientClosedError", "RunInfo", "SignalInfo", "Slot", "UnknownWorkflowError",
    "WorkflowFailed", "WorkflowHandle", "WorkflowInfo", "WorkflowInputError", "WorkflowListing", "WorkflowTerminated",
    "WorkflowView", "app_registry", "resolve_db",
]

DEFAULT_DB = "replaylog.db"
# On SQLite a waiting call looks at the change counter this often (seconds): a PRAGMA that
# reads one number, so 100 waiting calls cost ~10,000 cheap reads a second and no query of
# the workflow until something changed.
SQLITE_POLL = 0.005
# On PostgreSQL a waiting call trusts the notifications, and looks anyway this often
# (seconds) in case one was lost while the listening connection reconnected.
NOTIFY_SAFETY = 5.0

R = TypeVar("R")
T = TypeVar("T")


class _NoInput:
    """The `input` of a workflow started without one (None is a JSON input: null)."""

    def __repr__(self) -> str:
        return "NO_INPUT"


NO_INPUT: Any = _NoInput()

# What `app=` takes: a module, an import string or .py path (as --app), a Registry, or functions.
AppLike = ModuleType | str | os.PathLike[str] | Registry | Iterable[object]


# ---------------------------------------------------------------- errors


class WorkflowFailed(ReplaylogError):
    """The workflow failed: `handle.result()` raises this.

    Attributes:
        workflow_id: the workflow's id.
        error_kind: what failed it: "activity", "nondeterministic", "code" or "engine".
        message: the recorded error text.
        diagnostic: where the replay diverged, for a non-deterministic failure; else None.
    """

    def __init__(self, workflow_id: str, error_kind: str | None, message: str,
                 diagnostic: Diagnostic | None = None) -> None:
        super().__init__(f"workflow {workflow_id!r} failed ({error_kind or 'unknown'}): {message}")
        self.workflow_id = workflow_id
        self.error_kind = error_kind
        self.message = message
        self.diagnostic = diagnostic


class WorkflowTerminated(ReplaylogError):
    """An operator terminated the workflow: `handle.result()` raises this.

    Attributes:
        workflow_id: the workflow's id.
        reason: the operator's reason ("" if none was given).
    """

    def __init__(self, workflow_id: str, reason: str = "") -> None:
        super().__init__(f"workflow {workflow_id!r} was terminated" + (f": {reason}" if reason else ""))
        self.workflow_id = workflow_id
        self.reason = reason


class UnknownWorkflowError(UnknownWorkflowIdError):
    """No workflow has that id: raised on the first use of a handle (or a client call) that names it."""


class WorkflowInputError(ReplaylogError):
    """The input does not fit the workflow's parameters (given to one that takes none, or missing)."""


class ClientClosedError(ReplaylogError):
    """The client was closed: open a new one."""


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class WorkflowInfo:
    """A workflow as it stands: the facts `replaylog show --json` prints at its top.

    `result` is set once `status` is "completed"; `error` and `error_kind` once it failed
    (or the operator's reason once cancelled or terminated). `wake_at` is the recorded
    wake time of a blocked workflow (its timer, or its wait's deadline). The queue fields
    are None for a workflow started on no queue. Times are epoch seconds.
    """

    id: str
    workflow: str
    status: str
    blocked_on: str | None
    wake_at: float | None
    result: Any
    error: str | None
    error_kind: str | None
    slots: int
    parent: str | None
    created_at: float
    updated_at: float
    input: Any = None
    diagnostic: Diagnostic | None = None
    cancel_requested: str | None = None
    forked_from: str | None = None
    # Whether it was started with an input (`input` None then is JSON null), and the slot a fork was made at.
    has_input: bool = False
    forked_slot: int | None = None
    # Its code's traceback when it failed (the user's frames); why its last run stopped without an
    # outcome (a worker failure, an interruption) and when a worker takes it up again.
    traceback: str | None = None
    worker_error: str | None = None
    retry_at: float | None = None
    # Its search attributes (ctx.upsert_search_attributes), values as text; filled by `Client.list`.
    search_attributes: dict[str, str] = field(default_factory=dict)
    # On a queue (docs/flow-control.md): its queue, priority, dedup id, the time before which it
    # is not admitted, when it was admitted, and while queued its place in line (1: next).
    queue: str | None = None
    priority: int | None = None
    dedup_id: str | None = None
    not_before: float | None = None
    admitted_at: float | None = None
    position: int | None = None

    @classmethod
    def from_row(cls, row: WorkflowRow, search_attributes: dict[str, str] | None = None) -> WorkflowInfo:
        """The facts of one stored workflow row."""
        d = row.diagnostic
        return cls(
            id=row.id, workflow=row.workflow, status=row.status, blocked_on=row.blocked_on, wake_at=row.wake_at,
            result=row.result, error=row.error, error_kind=row.error_kind, slots=row.slots, parent=row.parent,
            created_at=row.created_at, updated_at=row.updated_at, input=row.input,
            diagnostic=None if d is None else Diagnostic(int(d["slot"]), d.get("recorded"), d.get("issued"),
                                                         str(d.get("message", ""))),
            cancel_requested=row.cancel_requested, forked_from=row.forked_from, has_input=row.has_input,
            forked_slot=row.forked_slot, traceback=row.traceback, worker_error=row.worker_error,
            retry_at=row.retry_at, search_attributes=dict(search_attributes or {}), queue=row.queue,
            priority=row.priority, dedup_id=row.dedup_id, not_before=row.not_before, admitted_at=row.admitted_at,
            position=row.position)

    @property
    def finished(self) -> bool:
        """True once the workflow is completed, failed, cancelled or terminated: nothing runs it again."""
        return status_info(self.status).finished


@dataclass(frozen=True)
class Slot:
    """One recorded slot of a workflow's history.

    `kind` is the command's kind ("activity", "now", "timer", "event", …), `name` its name
    (an activity's, a signal's, an event's key); `value` is its recorded value when `ok`,
    else `error` is the recorded error text.
    """

    slot: int
    kind: str
    name: str
    ok: bool
    value: Any
    error: str | None
    attempts: int
    recorded_at: float
    # A failed activity's traceback, where one was kept (the user's frames of its last attempt).
    traceback: str | None = None
    # A task of a ctx.parallel group: the slot of the group's first task (None outside a group).
    parallel_group: int | None = None

    @classmethod
    def from_row(cls, c: CommandRow) -> Slot:
        """The slot of one stored command row."""
        return cls(c.slot, c.kind, c.name, c.ok, c.value, c.error, c.attempts, c.recorded_at, c.traceback,
                   c.parallel_group)


@dataclass(frozen=True)
class RunInfo:
    """One run of a workflow: `ctx.continue_as_new` ends a run and starts the next, numbered from 1.

    `current` is True for the latest run (the one `describe()` and `history()` read by
    default); an earlier run has its `ended_at` (epoch seconds) and stays readable while it
    is kept. `input` is the run's input (`has_input` False: it took none); `slots` how many
    slots it recorded.
    """

    run: int
    slots: int
    ended_at: float | None
    current: bool
    input: Any = None
    has_input: bool = False

    @classmethod
    def from_row(cls, r: RunRow) -> RunInfo:
        """The run of one stored run row."""
        return cls(r.run, r.slots, r.ended_at, r.current, None if r.input_text is None else json.loads(r.input_text),
                   r.input_text is not None)


@dataclass(frozen=True)
class SignalInfo:
    """One signal delivered to a workflow: its sequence number, name and payload, whether a run consumed it
    (`ctx.wait_signal`), and when it was sent (epoch seconds)."""

    seq: int
    name: str
    payload: Any
    consumed: bool
    sent_at: float


# ---------------------------------------------------------------- resolving a database and an app


def resolve_db(db: str | os.PathLike[str] | None = None) -> Path | str:
    """Where the database is: `db`, else $REPLAYLOG_DB, else ./replaylog.db (as the CLI's --db).

    A file path or `sqlite:///path` URL comes back as a Path, a PostgreSQL URL as given.
    StoreError with one line for any other URL scheme.
    """
    location = db or os.environ.get("REPLAYLOG_DB") or DEFAULT_DB
    if not isinstance(location, str):
        return Path(location)
    if is_postgres_url(location):
        return location
    return database_path(location)


def app_registry(app: AppLike) -> Registry:
    """The workflows and activities of an app: a module, an import string or .py path, or functions.

    AppImportError (one line) if it cannot be imported, or defines a name twice.
    """
    if isinstance(app, Registry):
        return app
    if isinstance(app, str):
        return load_app(app)
    if isinstance(app, os.PathLike):
        return load_app(os.fspath(app))
    if isinstance(app, ModuleType):
        return Registry.from_module(app)
    functions = list(app)
    names = [str(getattr(fn, "_replaylog_name", None) or getattr(fn, "__name__", fn)) for fn in functions[:4]]
    spec = ", ".join(names) + (", …" if len(functions) > 4 else "")
    return Registry.from_functions(functions, f"[{spec}]")


def _workflow_name(workflow: Callable[..., Any] | str) -> tuple[str, Callable[..., Any] | None]:
    """The recorded name of a workflow given as its function or its name, and its function if given."""
    if isinstance(workflow, str):
        return workflow, None
    if getattr(workflow, "_replaylog_kind", None) != "workflow":
        raise TypeError(f"{getattr(workflow, '__qualname__', workflow)!r} is not a @workflow function;"
                        " give an @workflow function or a workflow's name")
    return registered_name(workflow), workflow


def history_document(store: ReaderStore, workflow_id: str) -> HistoryDocument:
    """A stored workflow's whole history as an export document."""
    row = store.get_workflow(workflow_id)
    state = store.load_state(workflow_id)
    commands = store.list_commands(workflow_id)
    signals = store.list_signals(workflow_id)
    # Separate reads: a running workflow may have recorded more in between; keep the common prefix.
    n, m = min(len(state.commands), len(commands)), min(len(state.signals), len(signals))
    return HistoryDocument(
        id=row.id, workflow=row.workflow, input=row.input, has_input=row.has_input, status=row.status,
        result=row.result, error=row.error, diagnostic=row.diagnostic, commands=state.commands[:n],
        recorded_at=tuple(c.recorded_at for c in commands[:n]), signals=state.signals[:m],
        sent_at=tuple(s.sent_at for s in signals[:m]), forked_from=row.forked_from, forked_slot=row.forked_slot,
        error_kind=row.error_kind)


def command_json(c: CommandRow) -> dict[str, Any]:
    """One slot as `show --json` gives it."""
    return {"slot": c.slot, "kind": c.kind, "name": c.name, "ok": c.ok, "value": c.value, "error": c.error,
            "traceback": c.traceback, "attempts": c.attempts, "recorded_at": c.recorded_at,
            "parallel_group": c.parallel_group}


def signal_json(s: SignalRow) -> dict[str, Any]:
    """One signal as `show --json` gives it."""
    return {"seq": s.seq, "name": s.name, "payload": s.payload, "consumed": s.consumed, "sent_at": s.sent_at}


def runs_json(runs: list[RunRow]) -> list[dict[str, Any]]:
    """A workflow's runs as `show --json` gives them."""
    return [{"run": r.run, "slots": r.slots, "ended_at": r.ended_at, "current": r.current} for r in runs]


def workflow_details(store: ReaderStore, row: WorkflowRow, runs: list[RunRow] | None = None) -> dict[str, Any]:
    """The `show --json` object of the latest run (`WorkflowHandle.details()`); `runs` if already read."""
    tasks = store.inflight_tasks(row.id)
    inflight = max(tasks, key=lambda i: (i.slot, i.attempts)) if tasks else None
    audit = store.list_audit(row.id)
    runs = runs if runs is not None else store.list_runs(row.id)
    return {
        "id": row.id, "workflow": row.workflow, "status": row.status, "blocked_on": row.blocked_on,
        "run": runs[-1].run, "runs": runs_json(runs),
        "wake_at": row.wake_at, "waiting_for_worker": waiting_for_worker(store, row.workflow, row.status),
        "input": row.input, "result": row.result, "error": row.error, "traceback": row.traceback,
        "diagnostic": row.diagnostic,
        "created_at": row.created_at, "updated_at": row.updated_at, "slots": row.slots,
        "worker_error": row.worker_error, "retry_at": row.retry_at, "error_kind": row.error_kind,
        "cancel_requested": row.cancel_requested, "cancel": _cancel_json(row, audit),
        "queue": None if row.queue is None else {
            "name": row.queue, "priority": row.priority, "position": row.position, "dedup_id": row.dedup_id,
            "not_before": row.not_before, "admitted_at": row.admitted_at},
        "forked_from": None if row.forked_from is None else {"id": row.forked_from, "slot": row.forked_slot},
        "audit": [{"action": a.action, "at": a.at, "actor": a.actor, "reason": a.reason, "detail": a.detail}
                  for a in audit],
        "approval": store.pending_approval(row.id),
        **store.family(row.id),
        "commands": [command_json(c) for c in store.list_commands(row.id)],
        "signals": [signal_json(s) for s in store.list_signals(row.id)],
        # The latest activity in flight, and every one (the tasks of a parallel group), by slot.
        "inflight": None if inflight is None else inflight_json(inflight),
        "inflight_tasks": [inflight_json(i) for i in tasks],
    }


def inflight_json(i: InflightRow) -> dict[str, Any]:
    """An activity in flight as `show --json` gives it (lane 0: the workflow's own thread; k: a group's k-th task)."""
    return {"slot": i.slot, "name": i.name, "attempts": i.attempts, "started_at": i.started_at, "error": i.error,
            "retry_at": i.retry_at, "details": i.details, "heartbeat_at": i.heartbeat_at, "lane": i.lane}


def _check_run(workflow_id: str, runs: list[RunRow], run: int) -> None:
    """OperatorRefusedError, naming the runs kept, for a run the workflow does not have."""
    if not any(r.run == run for r in runs):
        kept = ", ".join(str(r.run) for r in runs)
        raise OperatorRefusedError(f"workflow {workflow_id!r} has no run {run} (its runs: {kept})")


def earlier_run_details(store: ReaderStore, row: WorkflowRow, runs: list[RunRow], run: int) -> dict[str, Any]:
    """The `show --run N --json` object of an earlier run (OperatorRefusedError for a run not kept)."""
    commands = store.run_commands(row.id, run)
    this = next(r for r in runs if r.run == run)
    return {
        "id": row.id, "workflow": row.workflow, "run": run, "status": Status.CONTINUED.value,
        "input": None if this.input_text is None else json.loads(this.input_text), "has_input": this.input_text
        is not None, "slots": this.slots, "ended_at": this.ended_at, "runs": runs_json(runs),
        "commands": [command_json(c) for c in commands],
        "signals": [signal_json(s) for s in store.list_signals(row.id, run=run)],
    }


def _cancel_json(row: WorkflowRow, audit: list[AuditRow]) -> dict[str, Any] | None:
    """`show --json`'s "cancel": the request's reason, and whether it reached the workflow's code."""
    state = cancel_state(row.status, row.cancel_requested, audit)
    return None if state is None else {"reason": row.cancel_requested, "state": state[0], "why": state[1]}


def waiting_for_worker(store: ReaderStore, workflow: str, status: str,
                       served: Callable[[], frozenset[str] | None] | None = None) -> str | None:
    """Why a pending workflow waits for a worker (no live worker knows its name), else None."""
    if status != Status.PENDING:
        return None
    return waiting_reason(workflow, served() if served is not None else store.served_names())


def _as_tree(top: list[WorkflowRow], descendants: list[WorkflowSummary]
             ) -> tuple[list[WorkflowRow | WorkflowSummary], dict[str, int]]:
    """Each top-level row followed by its children, depth first in start order; and each child's depth."""
    children: dict[str, list[WorkflowSummary]] = {}
    for d in descendants:
        children.setdefault(d.parent or "", []).append(d)
    ordered: list[WorkflowRow | WorkflowSummary] = []
    depth: dict[str, int] = {}

    def walk(row: WorkflowRow | WorkflowSummary, level: int) -> None:
        ordered.append(row)
        depth[row.id] = level
        for child in children.get(row.id, []):
            walk(child, level + 1)

    for row in top:
        walk(row, 0)
    return ordered, depth


@dataclass(frozen=True)
class WorkflowListing:
    """A page of workflows as `replaylog list` shows it (`Client.listing`).

    `top` are the workflows the filters and the limit chose, `total` how many the filters
    take; `rows` are what is shown (with `tree`, each top-level one followed by its
    children, `depth` giving each child's level). Per row id: `waiting` says why a pending
    one waits for a worker, `approvals` the request a blocked one waits on, `attributes`
    its search attributes.
    """

    top: list[WorkflowRow]
    total: int
    rows: list[WorkflowRow | WorkflowSummary]
    depth: dict[str, int]
    waiting: dict[str, str | None]
    approvals: dict[str, dict[str, Any] | None]
    attributes: dict[str, dict[str, str]]


@dataclass(frozen=True)
class WorkflowView:
    """One run of a workflow as `replaylog show` prints it, read in one go (`WorkflowHandle.view`).

    `info` is the workflow as it stands (its latest run); `run` the run shown, `runs` every
    run kept, oldest first. `history` and `signals` are the run's: for the latest run every
    signal delivered, consumed or waiting; for an earlier one, those it consumed. `details`
    is the object `show --json` prints for that run (`WorkflowHandle.details`), which also
    holds what has no record type: the audit trail, the pending approval, the family, the
    activity in flight, the cancel request's state.
    """

    info: WorkflowInfo
    run: RunInfo
    runs: list[RunInfo]
    history: list[Slot]
    signals: list[SignalInfo]
    details: dict[str, Any]


def _check_key(key: object, what: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"{what}: the event key must be a string, got {type(key).__name__}")
    return key


BulkAction = Literal["retry", "cancel", "terminate"]
BULK_ACTIONS: tuple[BulkAction, ...] = ("retry", "cancel", "terminate")
# Each bulk action as its summary says it was done ("retried 35 of 37 workflow(s)").
BULK_PAST: dict[BulkAction, str] = {"retry": "retried", "cancel": "asked to cancel", "terminate": "terminated"}


@dataclass(frozen=True)
class BulkOutcome:
    """One workflow of a bulk action: done, or refused and why."""

    id: str
    ok: bool
    error: str | None


@dataclass
class BulkReport:
    """What a bulk action took (`ids`, in the order done) and what came of each."""

    action: BulkAction
    ids: list[str]
    outcomes: list[BulkOutcome] = field(default_factory=list)

    @property
    def done(self) -> int:
        """How many were done."""
        return sum(o.ok for o in self.outcomes)

    @property
    def refused(self) -> list[BulkOutcome]:
        """The ones refused, with why."""
        return [o for o in self.outcomes if not o.ok]


# ---------------------------------------------------------------- the client


class Client:
    """A connection to one replaylog database, for starting, waiting for and steering workflows.

    Args:
        db: a SQLite file path, a `sqlite:///path` URL or a `postgresql://` URL; else
            $REPLAYLOG_DB, else ./replaylog.db.
        max_payload: the cap in bytes on inputs and signal payloads (else
            $REPLAYLOG_MAX_PAYLOAD, else 1 MiB).
        app: the application's workflows (a module, an import string or .py path, or a
            list of functions). Optional: with it, `start` by name checks the name and the
            input against the code, and `retry` dry-replays the history first.
        readonly: open the database read-only: every write raises ReadOnlyError.

    The database is opened on first use. `start` and `import_history` create a missing
    SQLite file; any other call on a path that holds none raises StoreError naming it.
    Thread-safe; a context manager; `close()` ends it.
    """

    def __init__(self, db: str | os.PathLike[str] | None = None, *, max_payload: int | None = None,
                 app: AppLike | None = None, readonly: bool = False) -> None:
        self.db = resolve_db(db)
        self.readonly = readonly
        self.max_payload = max_payload if max_payload is not None else default_max_payload()
        self.registry: Registry | None = None if app is None else app_registry(app)
        self._lock = threading.RLock()
        self._store: Store | None = None
        self._closed = False
        # The change counter waiting calls sleep on: bumped by the store's notifications
        # (PostgreSQL) or by a waiter that saw PRAGMA data_version move (SQLite).
        self._changed = threading.Condition()
        self._version = 0
        self._data_version: int | None = None
        self._notified = False
        # How many calls wait right now (replaylog.testing skips time only while one does).
        self.waiting = 0
        # The clock recorded wake times are due by (replaylog.testing gives its own).
        self._wake_clock: Callable[[], float] | None = None
        # Called on each change of the counter (from any thread): AsyncClient's waits wake their loops so.
        self._listeners: set[Callable[[], None]] = set()

    # -- life

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the database connection; waiting calls raise ClientClosedError. Closing twice is harmless."""
        with self._lock:
            self._closed = True
            store, self._store = self._store, None
            if store is not None:
                store.close()
        self._bump()

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self._closed

    def _open(self, create: bool = False) -> Store:
        with self._lock:
            if self._closed:
                raise ClientClosedError("this client is closed: open a new Client")
            if self._store is None:
                if not create and isinstance(self.db, Path) and not self.db.exists():
                    raise StoreError(f"no database at {self.db}")
                store = open_store(self.db, readonly=self.readonly, max_payload=self.max_payload,
                                   wake_clock=self._wake_clock)
                # A server tells of its changes; a file's are learned by asking.
                self._notified = store.wake_on_change(self._notify)
                self._store = store
            return self._store

    def _call(self, op: Callable[[Store], T], *, create: bool = False) -> T:
        """Run one operation on the store, under the lock; an unknown id is an UnknownWorkflowError."""
        with self._lock:
            store = self._open(create)
            try:
                return op(store)
            except UnknownWorkflowIdError as exc:
                if isinstance(exc, UnknownWorkflowError):
                    raise
                raise UnknownWorkflowError(str(exc)) from None

    # -- waiting for a change

    def _notify(self) -> None:
        self._bump()

    def _bump(self) -> None:
        with self._changed:
            self._version += 1
            self._changed.notify_all()
            listeners = list(self._listeners)
        for wake in listeners:
            wake()

    def _look(self) -> None:
        """SQLite: bump the change counter if another connection committed since the last look."""
        with self._lock:
            if self._store is None:
                return
            version = self._store.data_version()
        with self._changed:
            moved = version != self._data_version
            self._data_version = version
        if moved:
            self._bump()

    @contextlib.contextmanager
    def _waiting(self) -> Iterator[None]:
        with self._changed:
            self.waiting += 1
        try:
            yield
        finally:
            with self._changed:
                self.waiting -= 1

    def _wait(self, check: Callable[[Store], T | None], timeout: float | None) -> T | None:
        """Call `check` until it returns something, after each change of the store; None after `timeout`."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        # A call that may not wait (timeout 0) is only a look: it must not count as waiting,
        # or a test environment would skip time while the test merely looked.
        with self._waiting() if timeout is None or timeout > 0 else contextlib.nullcontext():
            while True:
                self._open()
                if not self._notified:
                    self._look()  # the counter as of now: a commit after the check below moves it
                seen = self._version
                found = self._call(check)
                if found is not None:
                    return found
                while self._version == seen:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return None
                    step = NOTIFY_SAFETY if self._notified else SQLITE_POLL
                    with self._changed:
                        if self._version == seen:
                            self._changed.wait(step if left is None else min(left, step))
                    if self._version == seen:
                        if self._closed:
                            raise ClientClosedError("this client was closed while a call waited")
                        if self._notified:
                            break  # the safety look: read the workflow again
                        self._look()

    # -- operations on workflows

    @overload
    def start(self, workflow: Callable[..., R], input: Any = NO_INPUT, *, id: str | None = None,
              if_exists: Literal["fail", "return"] = "fail", queue: str | Queue | None = None, priority: int = 0,
              dedup_id: str | None = None, delay: float | None = None,
              timeout: float | None = None) -> WorkflowHandle[R]: ...

    @overload
    def start(self, workflow: str, input: Any = NO_INPUT, *, id: str | None = None,
              if_exists: Literal["fail", "return"] = "fail", queue: str | Queue | None = None, priority: int = 0,
              dedup_id: str | None = None, delay: float | None = None,
              timeout: float | None = None) -> WorkflowHandle[Any]: ...

    def start(self, workflow: Callable[..., Any] | str, input: Any = NO_INPUT, *, id: str | None = None,
              if_exists: Literal["fail", "return"] = "fail", queue: str | Queue | None = None, priority: int = 0,
              dedup_id: str | None = None, delay: float | None = None,
              timeout: float | None = None) -> WorkflowHandle[Any]:
        """Start a workflow; return its handle.

        Args:
            workflow: an @workflow function, or a workflow's name (a worker that knows it runs it).
            input: the workflow's input (any JSON value; None is JSON null). Leave it out
                to start a workflow that takes none.
            id: the workflow's id (else a generated one).
            if_exists: with `id`, when a workflow of that id exists: "fail" raises
                DuplicateWorkflowIdError, "return" returns its handle and writes nothing
                (a request retried after a lost answer gets the same workflow). With
                `dedup_id`, the same for an unfinished workflow holding that dedup id.
            queue: start it queued on this queue (a Queue, or the name of one a worker
                declared): a worker's claim admits it only while the queue is under its
                limits (docs/flow-control.md). A Queue the store does not know yet is recorded.
            priority: on a queue, lower is admitted first (0 or more); first started first within one.
            dedup_id: on a queue, refuse the start (DedupIdTakenError) while an unfinished
                workflow on the queue was started with the same dedup id.
            delay: on a queue, not admitted before this many seconds from now.
            timeout: seconds after which the workflow is cancelled with reason "timeout"
                (WorkflowCancelled at its next ctx call; it may compensate); its children
                inherit what is left of it unless started with a timeout of their own.

        Raises:
            WorkflowInputError: the input does not fit the function's parameters.
            ValueNotJSONError, PayloadTooLargeError: the input cannot be stored.
            DuplicateWorkflowIdError: the id is taken (if_exists="fail").
            QueueError: an unknown queue, a negative priority or delay, a queue option without a queue.
            DedupIdTakenError: the dedup id is taken (if_exists="fail").
        Nothing is written when it raises. A missing SQLite database is created.
        """
        if if_exists not in ("fail", "return"):
            raise ValueError(f"if_exists must be 'fail' or 'return', not {if_exists!r}")
        check_timeout(timeout, "the workflow timeout")
        check_queue_options(queue.name if isinstance(queue, Queue) else queue, priority, dedup_id, delay)
        if isinstance(queue, str) and self.registry is not None and queue in self.registry.queues:
            queue = self.registry.queues[queue]  # the app's own queue: recorded if no worker has yet
        name, fn = _workflow_name(workflow)
        if fn is None and self.registry is not None:
            fn = self.registry.workflow(name)  # UnknownWorkflowError (of the app) for a name it lacks
        given = input is not NO_INPUT
        if fn is not None:
            refusal = Registry("", {name: fn}).input_refusal(name, given)
            if refusal is not None:
                raise WorkflowInputError(refusal)
        if given:
            encode_payload(input, "the workflow input", self.max_payload)  # refused before the database is touched

        def start(store: Store) -> str:
            try:
                return store.start_workflow(name, input if given else None, has_input=given, workflow_id=id,
                                            trace_context=trace_context_now(), queue=queue, priority=priority,
                                            dedup_id=dedup_id, delay=delay, timeout=timeout)
            except DuplicateWorkflowIdError:
                if if_exists != "return" or id is None:
                    raise
                return id
            except DedupIdTakenError as taken:
                if if_exists != "return":
                    raise
                return taken.workflow_id

        return WorkflowHandle(self, self._call(start, create=True))

    def get_handle(self, workflow_id: str) -> WorkflowHandle[Any]:
        """The handle of a workflow by its id: nothing is read until it is used (an unknown id raises then)."""
        if not isinstance(workflow_id, str):
            raise TypeError(f"a workflow id is a string, got {type(workflow_id).__name__}")
        return WorkflowHandle(self, workflow_id)

    def list(self, *, status: str | Iterable[str] | None = None, workflow: Callable[..., Any] | str | None = None,
             parent: str | None = None, limit: int | None = 100, attributes: Mapping[str, Any] | None = None,
             **filters: Any) -> list[WorkflowInfo]:
        """Workflows, most recently updated first, that match every filter given.

        `status` (one or several), `workflow` (a function or a name), `parent`, `attributes`
        (search attributes, each equal: {"customer": "c-42"}), and any field of
        engine.filters.FIELDS as a keyword (`error_text="card declined"`,
        `updated_after="2h"`, `forked_from=…`, `error_kind="activity"`). An unknown keyword
        is refused (StoreError naming the fields). `limit` None (or 0) lists them all.
        """
        where = self.filter(status=status, workflow=workflow, parent=parent, attributes=attributes, **filters)

        def read(store: Store) -> list[WorkflowInfo]:
            rows = store.list_workflows(where=where, limit=limit or -1)
            found = store.search_attributes([r.id for r in rows])
            return [WorkflowInfo.from_row(r, found.get(r.id)) for r in rows]

        return self._call(read)

    def listing(self, where: WorkflowFilter | None = None, *, limit: int = 200, awaiting: str | None = None,
                tree: bool = False) -> WorkflowListing:
        """The page `replaylog list` shows: the workflows `where` takes (most recently updated
        first, at most `limit`, 0 for all; `awaiting="approval"` those waiting for one; `tree`
        top-level ones, each with all its children), read in one go (see WorkflowListing)."""
        def read(store: Store) -> WorkflowListing:
            top = store.list_workflows(where=where, limit=limit or -1, awaiting=awaiting, top_level=tree)
            total = (store.count_workflows(where=where, awaiting=awaiting, top_level=tree)
                     if limit and len(top) == limit else len(top))
            rows: builtins.list[WorkflowRow | WorkflowSummary] = builtins.list(top)
            depth: dict[str, int] = {}
            if tree:
                rows, depth = _as_tree(top, store.list_descendants([r.id for r in top]))
            served = functools.cache(store.served_names)  # read once, and only if a pending row asks
            return WorkflowListing(
                top, total, rows, depth,
                {r.id: waiting_for_worker(store, r.workflow, r.status, served) for r in rows},
                {r.id: store.pending_approval(r.id) for r in rows
                 if r.status == Status.BLOCKED and (r.blocked_on or "").startswith(APPROVAL_PREFIX)},
                store.search_attributes([r.id for r in rows]))

        return self._call(read)

    def filter(self, *, status: str | Iterable[str] | None = None, workflow: Callable[..., Any] | str | None = None,
               attributes: Mapping[str, Any] | Iterable[str] | None = None, **fields: Any) -> WorkflowFilter:
        """The WorkflowFilter `list` and the bulk actions take, from the same keywords (checked here)."""
        if workflow is not None and not isinstance(workflow, str):
            workflow = _workflow_name(workflow)[0]
        return workflow_filter({"status": status, "workflow": workflow, **fields}, attributes or ())

    def count(self, where: WorkflowFilter) -> int:
        """How many workflows a filter takes."""
        return self._call(lambda s: s.count_workflows(where=where))

    def matching(self, where: WorkflowFilter) -> builtins.list[str]:
        """The ids of every workflow a filter takes, oldest first: what a bulk action acts on."""
        if not where:
            raise OperatorRefusedError("a bulk action needs at least one filter: every workflow is no set to act on")
        return self._call(lambda s: [r.id for r in s.list_workflow_summaries(where=where, sort="created",
                                                                             descending=False, limit=-1)])

    def bulk(self, action: BulkAction, ids: Iterable[str], *, reason: str | None = None, force: bool = False,
             on_each: Callable[[BulkOutcome], None] | None = None) -> BulkReport:
        """Retry, cancel or terminate these workflows (`matching` finds them) one by one, each its own action.

        Each is done exactly as `handle.retry/cancel/terminate` would (audited alike; a
        retry dry-replayed against `app` unless `force`), and one refusal does not stop
        the rest: each outcome goes to `on_each` as it comes, and the report counts them.
        """
        report = BulkReport(action, list(ids))
        for wid in report.ids:
            handle = self.get_handle(wid)
            try:
                if action == "retry":
                    handle.retry(reason, force=force)
                elif action == "cancel":
                    handle.cancel(reason)
                else:
                    handle.terminate(reason)
                outcome = BulkOutcome(wid, True, None)
            except ReplaylogError as exc:
                outcome = BulkOutcome(wid, False, str(exc))
            report.outcomes.append(outcome)
            if on_each is not None:
                on_each(outcome)
        return report

    def signal(self, workflow_id: str, name: str, payload: Any = None) -> int:
        """Send a signal to a workflow; return its sequence number.

        Raises UnknownWorkflowError, WorkflowClosedError (it finished), ValueNotJSONError or
        PayloadTooLargeError (the payload), StoreError (a reserved or empty name); nothing
        is written then.
        """
        if not isinstance(name, str):
            raise TypeError(f"a signal name is a string, got {type(name).__name__}")
        return self._call(lambda s: s.send_signal(workflow_id, name, payload))

    def get_event(self, workflow_id: str, key: str, timeout: float | None = None) -> Any:
        """The latest value the workflow set under `key` (ctx.set_event); see `WorkflowHandle.get_event`."""
        return self.get_handle(workflow_id).get_event(key, timeout)

    def events(self, workflow_id: str) -> dict[str, Any]:
        """Every event key the workflow set, with its latest value."""
        return self._call(lambda s: s.events(workflow_id))

    def import_history(self, doc: dict[str, Any] | HistoryDocument, *, id: str | None = None) -> WorkflowHandle[Any]:
        """Write an exported history (`handle.export()`) as a new workflow; return its handle.

        A workflow exported running or blocked is imported pending; a finished one keeps
        its status. HistoryFormatError if `doc` is not an export; DuplicateWorkflowIdError
        if the id is taken. A missing SQLite database is created.
        """
        document = doc if isinstance(doc, HistoryDocument) else parse_document(doc, "the document")
        return WorkflowHandle(self, self._call(lambda s: s.import_history(document, new_id=id), create=True))

    # -- the database as a whole

    def stats(self) -> StoreStats:
        """How the database stands, as `replaylog stats` prints it: counts by status, the oldest pending and
        blocked workflows, blocked ones past their wake time, slots committed in the last minute, live workers."""
        return self._call(lambda s: s.stats())

    def queues(self) -> builtins.list[QueueRow]:
        """Each queue workers declared, as `replaylog queues` prints it: running, waiting, limits, rate window."""
        return self._call(lambda s: s.queues())

    def migrate(self) -> tuple[int, int]:
        """Bring the database's schema up to this replaylog's (the client's opening of it does, in one
        transaction, every workflow kept); the schema version it had when this client opened it, and the one it
        has now (equal: it was up to date). A missing SQLite database is an error, not created."""
        return self._call(lambda s: s.schema_upgrade)

    # -- schedules (engine.schedules, docs/schedules.md)

    def add_schedule(self, name: str, workflow: Callable[..., Any] | str, cron: str, input: Any = NO_INPUT, *,
                     timezone: str = "UTC", overlap: str = "skip", catch_up: str = "last") -> ScheduleRow:
        """Add a schedule that starts `workflow` at each tick of `cron` in `timezone`; return it.

        Each tick starts one workflow, id "NAME@<tick in UTC>", with `input` (leave it out
        for a workflow that takes none). `overlap`: skip, buffer-one or allow; `catch_up`:
        none, last or all (docs/schedules.md). Raises ScheduleRefusedError (a malformed
        cron expression, an unknown time zone or policy, a name taken), WorkflowInputError,
        ValueNotJSONError; nothing is written then. A missing SQLite database is created.
        """
        wf_name, fn = _workflow_name(workflow)
        if fn is None and self.registry is not None:
            fn = self.registry.workflow(wf_name)
        given = input is not NO_INPUT
        if fn is not None:
            refusal = Registry("", {wf_name: fn}).input_refusal(wf_name, given)
            if refusal is not None:
                raise WorkflowInputError(refusal)
        return self._call(lambda s: s.add_schedule(name, wf_name, cron, input=input if given else None,
                                                   has_input=given, timezone=timezone, overlap=overlap,
                                                   catch_up=catch_up), create=True)

    def schedules(self) -> builtins.list[ScheduleRow]:
        """Every schedule, by name, with its next tick (`next_at`)."""
        return self._call(lambda s: s.list_schedules())

    def pause_schedule(self, name: str, reason: str | None = None) -> ScheduleRow:
        """Pause a schedule: its ticks start nothing until it is resumed."""
        return self._call(lambda s: s.pause_schedule(name, True, reason))

    def resume_schedule(self, name: str, reason: str | None = None) -> ScheduleRow:
        """Resume a paused schedule from its next tick after now (the ticks it missed paused are not caught up)."""
        return self._call(lambda s: s.pause_schedule(name, False, reason))

    def delete_schedule(self, name: str, reason: str | None = None) -> None:
        """Delete a schedule; the workflows it started are untouched."""
        self._call(lambda s: s.delete_schedule(name, reason))

    def trigger_schedule(self, name: str) -> WorkflowHandle[Any]:
        """Start the schedule's workflow now (whatever its policies, even paused); its handle."""
        return WorkflowHandle(self, self._call(lambda s: s.trigger_schedule(name)))

    def prune(self, finished_before: float | str | datetime | timedelta, *,
              statuses: str | Iterable[str] | None = None, dry_run: bool = False, vacuum: bool = False,
              batch: int = BATCH) -> PruneReport:
        """Delete finished workflows last updated before `finished_before`, with all they own, batch by batch.

        `finished_before`: an age ("30d", a timedelta: that long ago), a time (an ISO
        string, a datetime, epoch seconds); a time in the future is refused (StoreError),
        nothing written. `statuses`: of these finished statuses only (default: all). A
        workflow is deleted with its child workflows, and kept while one of them is
        unfinished. `dry_run`: count only, write nothing. `vacuum` (SQLite): give the
        space back to the file system afterwards (a VACUUM: see `reclaim_space`).
        """
        cutoff = parse_cutoff(finished_before, time.time(), "finished_before")
        wanted = parse_statuses(statuses)

        def one(after: int) -> PruneBatch:
            return self._call(lambda s: s.prune_batch(finished_before=cutoff, statuses=wanted, after=after,
                                                      batch=batch, dry_run=dry_run))

        report = prune(one, finished_before=cutoff, dry_run=dry_run)
        if not dry_run:
            report.space = self._call(lambda s: s.reclaim_space(full=vacuum))
        return report


class WorkflowHandle(Generic[R]):
    """One workflow, by its id: wait for its result, read its events, signal and steer it.

    Typed by the workflow's result: `client.start(fn, …)` of a function returning R gives
    a WorkflowHandle[R], whose `result()` returns R. Nothing is read when a handle is made:
    an unknown id raises UnknownWorkflowError at its first use.
    """

    def __init__(self, client: Client, workflow_id: str) -> None:
        self._client = client
        self._id = workflow_id

    @property
    def id(self) -> str:
        """The workflow's id."""
        return self._id

    def __repr__(self) -> str:
        return f"WorkflowHandle({self._id!r})"

    def describe(self) -> WorkflowInfo:
        """The workflow as it stands now."""
        return WorkflowInfo.from_row(self._client._call(lambda s: s.get_workflow(self._id)))

    def result(self, timeout: float | None = None) -> R:
        """Wait until the workflow finishes and return its result.

        Raises:
            WorkflowFailed: it failed (with its error kind, message, and diagnostic).
            WorkflowCancelled: an operator cancelled it (`reason`, `workflow_id`).
            WorkflowTerminated: an operator terminated it.
            TimeoutError: `timeout` seconds passed first; the workflow is untouched.
        """
        return self._ended(self._client._wait(self._finished, timeout), timeout)

    def _finished(self, store: Store) -> WorkflowRow | None:
        return _finished(store.get_workflow(self._id))

    def _ended(self, row: WorkflowRow | None, timeout: float | None) -> R:
        """`result`'s answer from the row its wait found (None: the wait timed out)."""
        if row is None:
            info = self.describe()
            raise TimeoutError(f"workflow {self._id!r} did not finish within {timeout} s (it is {info.status})")
        if row.status == Status.COMPLETED:
            return cast(R, row.result)
        info = WorkflowInfo.from_row(row)
        if row.status == Status.CANCELLED:
            raise WorkflowCancelled(row.cancel_requested or "", workflow_id=self._id)
        if row.status == Status.TERMINATED:
            said = [a.reason for a in self._client._call(lambda s: s.list_audit(self._id)) if a.action == "terminate"]
            raise WorkflowTerminated(self._id, (said[-1] if said else None) or "")
        raise WorkflowFailed(self._id, row.error_kind, row.error or "", info.diagnostic)

    def get_event(self, key: str, timeout: float | None = None) -> Any:
        """The latest value the workflow set under `key` with ctx.set_event.

        Waits until the key is set: up to `timeout` seconds (0: do not wait), or with
        None until it is set or the workflow finishes. Returns None if the key is not set
        by then.
        """
        answer = self._client._wait(self._event_look(key, timeout), timeout)
        return None if answer is None else answer[1]

    def _event_look(self, key: str, timeout: float | None) -> Callable[[Store], tuple[bool, Any] | None]:
        """`get_event`'s check of the store, for its wait: (set?, value), or None to wait on."""
        key = _check_key(key, "get_event")

        def look(store: Store) -> tuple[bool, Any] | None:
            found = store.events(self._id, key)
            if key in found:
                return True, found[key]
            if timeout is None and status_info(store.get_workflow(self._id).status).finished:
                return False, None  # it never will be set
            return None

        return look

    def events(self) -> dict[str, Any]:
        """Every event key the workflow set, with its latest value."""
        return self._client.events(self._id)

    def signal(self, name: str, payload: Any = None) -> int:
        """Send the workflow a signal; return its sequence number (see `Client.signal`)."""
        return self._client.signal(self._id, name, payload)

    def approve(self, note: str | None = None, reject: bool = False, request: str | None = None) -> str:
        """Answer the approval request the workflow waits on (approve, or reject); return the request's id.

        `request`: answer only if that is the pending request (a stale answer is refused).
        ApprovalRefusedError when it waits on no approval, another one, or the request timed out.
        """
        return self._client._call(lambda s: s.answer_approval(self._id, approved=not reject, by=operator_name(),
                                                              note=note, request=request))

    def cancel(self, reason: str | None = None) -> str:
        """Ask the workflow to cancel: its code sees WorkflowCancelled at its next ctx call.

        Returns its status before the request.
        """
        return self._client._call(lambda s: s.cancel_workflow(self._id, reason))

    def terminate(self, reason: str | None = None) -> str:
        """Stop the workflow at once: no code of it runs again. Returns its status before."""
        return self._client._call(lambda s: s.terminate_workflow(self._id, reason))

    def details(self, run: int | None = None) -> dict[str, Any]:
        """Everything known of the workflow, as `replaylog show --json` prints it (docs/cli.md, "show").

        Its latest run: status, input, result or error, runs, queue, cancel, audit trail,
        approval, family, every slot, every signal, the activity in flight. With `run`, an
        earlier run while it is kept, as `show --run N --json` prints it (its input, slots,
        end, and the signals it consumed); the latest run's number gives the latest's object.
        OperatorRefusedError names the runs kept when the workflow has no run `run`.
        """
        return self._client._call(lambda store: self._read_details(store, run)[2])

    def _read_details(self, store: Store, run: int | None) -> tuple[WorkflowRow, list[RunRow], dict[str, Any]]:
        """The workflow's row, its runs, and the `show --json` object of run `run` (None: the latest)."""
        row = store.get_workflow(self._id)
        runs = store.list_runs(self._id)
        if run is not None and run != runs[-1].run:
            return row, runs, earlier_run_details(store, row, runs, run)
        return row, runs, workflow_details(store, row, runs)

    def view(self, run: int | None = None) -> WorkflowView:
        """One run of the workflow (the latest, else `run`), read in one go: what `replaylog show` prints.

        Typed facts (`info`, `run`, `runs`, `history`, `signals`) and the `show --json`
        object of the same read (`details`). OperatorRefusedError for a run it does not have.
        """

        def read(store: Store) -> WorkflowView:
            row, runs, data = self._read_details(store, run)
            typed = [RunInfo.from_row(r) for r in runs]
            return WorkflowView(WorkflowInfo.from_row(row), next(r for r in typed if r.run == data["run"]), typed,
                                [Slot(**c) for c in data["commands"]], [SignalInfo(**s) for s in data["signals"]],
                                data)

        return self._client._call(read)

    def runs(self) -> list[RunInfo]:
        """The workflow's runs kept, oldest first; the last is the current one (ctx.continue_as_new numbers them)."""
        return self._client._call(lambda s: [RunInfo.from_row(r) for r in s.list_runs(self._id)])

    def check(self) -> Verdict:
        """Dry-replay this workflow's history against the client's `app`, with no side effects.

        The verdict `replaylog check` prints (`.ok`, `.text`, `.replays`, `.fork_from`):
        whether the recorded history replays, and for a failed workflow whether a retry
        would now succeed. Raises OperatorRefusedError if the client has no `app`.
        """
        registry = self._client.registry
        if registry is None:
            raise OperatorRefusedError("check replays a history against the workflows' code: give the Client an app")
        return self._client._call(lambda store: check_workflow(store, registry, self._id))

    def retry(self, reason: str | None = None, *, force: bool = False) -> Verdict | None:
        """Set a failed workflow going again, history kept.

        With the client's `app`, its history is dry-replayed against the code first and the
        retry refused (OperatorRefusedError, with `check`'s line) if it diverges or would end
        in the same recorded activity failure; `check`'s verdict is returned (`.ok`, `.text`,
        `.replays`, `.fork_from`). Without an app, or with `force`, no replay is made and
        None is returned.
        """
        registry = self._client.registry

        def retry(store: Store) -> Verdict | None:
            row = store.get_workflow(self._id)
            if row.status != Status.FAILED:
                raise OperatorRefusedError(f"workflow {self._id!r} is {row.status}: only a failed workflow"
                                           " can be retried")
            verdict = None
            if registry is not None and not force:
                verdict = check_workflow(store, registry, self._id)
                if not verdict.ok:
                    raise OperatorRefusedError(f"{self._id!r} cannot be retried: {verdict.text}")
            store.retry_workflow(self._id, reason)
            return verdict

        return self._client._call(retry)

    def fork(self, from_slot: int | None = None, id: str | None = None, *, from_failure: bool = False,
             from_activity: str | None = None) -> WorkflowHandle[R]:
        """A new workflow from a copy of this one's slots 0..K-1 and every signal; its handle.

        K is `from_slot`, or the slot `fork_slot` finds (`from_failure`: the last failed
        slot; `from_activity`: the first slot of that activity): give exactly one. This
        workflow is untouched; activities from K on run again under the fork's keys.
        """
        slot = self.fork_slot(from_slot, from_failure=from_failure, from_activity=from_activity)
        return WorkflowHandle(self._client, self._client._call(lambda s: s.fork_workflow(self._id, slot, new_id=id)))

    def fork_slot(self, from_slot: int | None = None, *, from_failure: bool = False,
                  from_activity: str | None = None) -> int:
        """The slot a fork starts from, named one of three ways (exactly one; else OperatorRefusedError).

        `from_failure`: the highest slot whose recorded outcome is an error, so the activity
        that failed runs again; refused when no slot failed (a workflow its own code failed
        is retried once the code is fixed). `from_activity`: the first slot of the activity
        of that name.
        """
        named = [from_slot is not None, from_failure, from_activity is not None]
        if sum(named) != 1:
            raise OperatorRefusedError("name the fork's first live slot one way: --from-slot K, --from-failure"
                                       " or --from-activity NAME")
        if from_slot is not None:
            return from_slot

        def find(store: Store) -> int:
            row = store.get_workflow(self._id)
            if from_failure:
                failed = store.last_failed_command(self._id)
                if failed is None:
                    raise OperatorRefusedError(
                        f"workflow {self._id!r} ({row.status}) has no failed slot to fork from"
                        + (": its code failed, not an activity; fix the code and retry it" if row.error_kind
                           and row.status == Status.FAILED else ""))
                return failed.slot
            found = store.first_slot(self._id, SlotKind.ACTIVITY, str(from_activity))
            if found is None:
                raise OperatorRefusedError(f"workflow {self._id!r} recorded no activity {from_activity!r}")
            return found
        return self._client._call(find)

    def export(self) -> dict[str, Any]:
        """The workflow's whole history as one versioned JSON document (`Client.import_history` takes it)."""
        return self._client._call(lambda s: history_document(s, self._id)).to_json()

    def history(self, from_slot: int = 0, *, run: int | None = None) -> list[Slot]:
        """The recorded slots in order, from `from_slot` on: of the latest run, or of run `run` while it is kept.

        OperatorRefusedError names the runs kept when the workflow has no run `run`.
        """

        def read(store: Store) -> list[Slot]:
            if run is None:
                store.get_workflow(self._id)  # an unknown id is an error, not an empty history
                rows = store.list_commands(self._id, offset=from_slot)
            else:
                rows = store.run_commands(self._id, run, offset=from_slot)
            return [Slot.from_row(c) for c in rows]

        return self._client._call(read)

    def signals(self, *, run: int | None = None) -> list[SignalInfo]:
        """The signals of the latest run in delivery order, consumed or waiting; of an earlier run `run`,
        those it consumed. OperatorRefusedError names the runs kept when the workflow has no run `run`."""

        def read(store: Store) -> list[SignalInfo]:
            runs = store.list_runs(self._id)  # an unknown id is an error, not an empty list
            if run is not None and run != runs[-1].run:
                _check_run(self._id, runs, run)
                rows = store.list_signals(self._id, run=run)
            else:
                rows = store.list_signals(self._id)
            return [SignalInfo(s.seq, s.name, s.payload, s.consumed, s.sent_at) for s in rows]

        return self._client._call(read)


def _finished(row: WorkflowRow) -> WorkflowRow | None:
    return row if status_info(row.status).finished else None
