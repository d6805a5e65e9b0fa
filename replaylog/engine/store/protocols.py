"""What each caller needs of a store, as typed protocols: the seam a second backend plugs into.

- `ReaderStore`: what the console and the read-only commands read (`list`, `show`,
  `check`, the console's screens).
- `OperatorStore`: a reader that also starts workflows and sends signals (`start`,
  `signal`, the console's signal dialog, the demo).
- `WorkerStore`: what the worker needs to run workflows: claim, the lease-fenced
  commits, renew, release, in-flight marks, history, and upkeep of the file.
- `Store`: all of them; what `open_store` returns.

A store object holds one connection and stays on the thread that opened it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol, Self

from replaylog.engine.core import CommandRecord, Outcome, WorkflowState
from replaylog.engine.history import HistoryDocument
from replaylog.engine.marks import Mark, MarkBoard
from replaylog.engine.queues import Queue
from replaylog.engine.store import rows


class _Closable(Protocol):
    # The clock a recorded wake time is due by (see StoreBase.wake_clock).
    wake_clock: Callable[[], float]
    # The schema version the database had when this store opened it, and the one it has
    # now: different when this open took migrations (`replaylog migrate` says which).
    schema_upgrade: tuple[int, int]

    def close(self) -> None:
        """Close the store's connection."""

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...

    def data_version(self) -> int:
        """A change token: it changes whenever another connection commits to the store."""

    def wake_on_change(self, wake: Callable[[], None]) -> bool:
        """Call `wake` (from another thread) when the change token may have changed; True if it
        will. A store that learns of changes only when asked (SQLite) never calls it: False."""


class ReaderStore(_Closable, Protocol):
    """Reads: workflows, their slots and signals, counts, what is in flight."""

    def get_workflow(self, workflow_id: str) -> rows.WorkflowRow:
        """One workflow; UnknownWorkflowIdError if there is none."""

    def list_workflows(self, *, status: str | Iterable[str] | None = None, text: str | None = None,
                       sort: str = "updated", descending: bool = True, limit: int = 100,
                       offset: int = 0, awaiting: str | None = None, top_level: bool = False,
                       workflow: str | None = None, parent: str | None = None,
                       where: rows.WorkflowFilter | None = None) -> list[rows.WorkflowRow]:
        """A page of workflows, filtered and sorted by the store (awaiting="approval", top_level: no parent,
        workflow: of that name, parent: children of that workflow, where: every field it names)."""

    def list_workflow_summaries(self, *, status: str | Iterable[str] | None = None, text: str | None = None,
                                sort: str = "updated", descending: bool = True, limit: int = 100,
                                offset: int = 0, awaiting: str | None = None, top_level: bool = False,
                                where: rows.WorkflowFilter | None = None) -> list[rows.WorkflowSummary]:
        """Like `list_workflows`, without the payload columns."""

    def list_descendants(self, workflow_ids: Sequence[str]) -> list[rows.WorkflowSummary]:
        """The children of these workflows at any depth (ctx.call_workflow), in start order."""

    def count_workflows(self, *, status: str | Iterable[str] | None = None, text: str | None = None,
                        awaiting: str | None = None, top_level: bool = False, workflow: str | None = None,
                        parent: str | None = None, where: rows.WorkflowFilter | None = None) -> int:
        """How many workflows match a filter."""

    def status_counts(self) -> dict[str, int]:
        """Workflows per status (every status present, zero where none)."""

    def list_commands(self, workflow_id: str, *, offset: int = 0, limit: int = -1) -> list[rows.CommandRow]:
        """Recorded slots in order, optionally a page of them."""

    def search_attributes(self, workflow_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """The current search attributes (ctx.upsert_search_attributes) of these workflows, as text, by id."""

    def first_slot(self, workflow_id: str, kind: str, name: str) -> int | None:
        """The first slot of a workflow that recorded a command of this kind and name, if any."""

    def family(self, workflow_id: str) -> dict[str, Any]:
        """A workflow's parent and children: {"parent": id or None, "children": [{"id", "workflow", "status"}]}."""

    def pending_approval(self, workflow_id: str) -> dict[str, Any] | None:
        """The approval request a blocked workflow waits on: {"request", "action", "details"}; else None."""

    def last_failed_command(self, workflow_id: str) -> rows.CommandRow | None:
        """The highest recorded slot whose outcome is an error, if any."""

    def events(self, workflow_id: str, key: str | None = None) -> dict[str, Any]:
        """The current events of a workflow (ctx.set_event): the latest value per key, of one key if given."""

    def list_signals(self, workflow_id: str, *, offset: int = 0, limit: int = -1,
                     run: int | None = None) -> list[rows.SignalRow]:
        """Delivered signals of the current run in delivery order (of earlier run `run`), optionally a page."""

    def list_runs(self, workflow_id: str) -> list[rows.RunRow]:
        """Every run of a workflow (ctx.continue_as_new), oldest first: the last one is current."""

    def run_commands(self, workflow_id: str, run: int, *, offset: int = 0, limit: int = -1) -> list[rows.CommandRow]:
        """The recorded slots of run `run` of a workflow, while it is kept."""

    def count_signals(self, workflow_id: str) -> tuple[int, int]:
        """(delivered, still waiting to be consumed) signals of a workflow."""

    def inflight(self, workflow_id: str) -> rows.InflightRow | None:
        """The started activity with no recorded outcome, if any (it possibly ran): the latest, of several."""

    def inflight_tasks(self, workflow_id: str) -> list[rows.InflightRow]:
        """Every started activity with no recorded outcome (the tasks of a parallel group), by slot."""

    def load_state(self, workflow_id: str) -> WorkflowState:
        """The whole history of a workflow (for a dry replay)."""

    def served_names(self) -> frozenset[str] | None:
        """The workflow names live workers know; None when no worker is live."""

    def list_audit(self, workflow_id: str) -> list[rows.AuditRow]:
        """The operators' actions on a workflow, oldest first."""

    def queues(self) -> list[rows.QueueRow]:
        """Every queue workers have declared, with its limits and what it holds now."""

    def stats(self) -> rows.StoreStats:
        """Counts, the oldest waits, overdue timers, live workers and the last minute's slots, in one snapshot."""

    def list_schedules(self) -> list[rows.ScheduleRow]:
        """Every schedule, by name."""

    def get_schedule(self, name: str) -> rows.ScheduleRow:
        """One schedule; ScheduleRefusedError if there is none of that name."""

    def next_schedule_at(self) -> float | None:
        """The earliest next tick of a schedule that is not paused, None if none."""


class OperatorStore(ReaderStore, Protocol):
    """A reader that also makes the operator's writes."""

    def start_workflow(self, workflow: str, input: Any = None, *, has_input: bool = True,
                       workflow_id: str | None = None, trace_context: str | None = None,
                       queue: str | Queue | None = None, priority: int = 0, dedup_id: str | None = None,
                       delay: float | None = None, timeout: float | None = None) -> str:
        """Insert a pending workflow (with the caller's trace context, if any), or a queued one on
        `queue` (engine.queues); cancelled with reason "timeout" `timeout` seconds from now,
        if given; return its id."""

    def send_signal(self, workflow_id: str, name: str, payload: Any = None) -> int:
        """Append a signal, waking the workflow if it waits on `name`; return its sequence number."""

    def cancel_workflow(self, workflow_id: str, reason: str | None = None) -> str:
        """Ask a pending, running or blocked workflow to cancel (WorkflowCancelled in its code); the old status."""

    def terminate_workflow(self, workflow_id: str, reason: str | None = None) -> str:
        """Stop an unfinished workflow at once, fencing out its worker; the old status."""

    def retry_workflow(self, workflow_id: str, reason: str | None = None) -> None:
        """Make a failed workflow pending again, history kept."""

    def fork_workflow(self, workflow_id: str, from_slot: int, *, new_id: str | None = None) -> str:
        """A new workflow with slots 0..from_slot-1 and every signal copied; its id."""

    def import_history(self, doc: HistoryDocument, *, new_id: str | None = None) -> str:
        """Write an exported history as a new workflow; its id."""
    def answer_approval(self, workflow_id: str, *, approved: bool, by: str, note: str | None = None,
                        request: str | None = None) -> str:
        """Answer the pending approval request (only it, once); return its id."""

    def add_schedule(self, name: str, workflow: str, cron_expr: str, *, input: Any = None, has_input: bool = False,
                     timezone: str = "UTC", overlap: str = "skip", catch_up: str = "last",
                     start_at: float | None = None, origin: str = "operator") -> rows.ScheduleRow:
        """Add a schedule (engine.schedules), everything checked before anything is written."""

    def pause_schedule(self, name: str, paused: bool = True, reason: str | None = None) -> rows.ScheduleRow:
        """Pause a schedule, or resume it from its next tick after now."""

    def delete_schedule(self, name: str, reason: str | None = None) -> None:
        """Delete a schedule; the workflows it started are untouched."""

    def trigger_schedule(self, name: str) -> str:
        """Start the schedule's workflow now; its id."""

    def prune_batch(self, *, finished_before: float, statuses: Collection[str] = ..., after: int = 0,
                    batch: int = 500, dry_run: bool = False) -> rows.PruneBatch:
        """Delete (dry: find) one batch of finished top-level workflows with their children and all they own."""

    def reclaim_space(self, *, full: bool = False) -> str:
        """Give pruned space back where the backend does that on request (SQLite); what was done, in a line."""


class WorkerStore(_Closable, Protocol):
    """What a worker needs: leases, fenced commits, in-flight marks, history, upkeep."""

    def get_workflow(self, workflow_id: str) -> rows.WorkflowRow:
        """One workflow; UnknownWorkflowIdError if there is none (a child's id is checked with it)."""

    def trace_context(self, workflow_id: str) -> str | None:
        """The trace context the workflow was started in (W3C headers as JSON text), if any."""

    def claim(self, owner: str, *, ttl: float, limit: int = 1, dead_owners: Sequence[str] = (),
              names: Collection[str] | None = None) -> list[rows.Claim]:
        """Take the lease of up to `limit` runnable workflows (of `names` only, unless None)."""

    def has_claimable(self, dead_owners: Sequence[str] = (), names: Collection[str] | None = None) -> bool:
        """Whether `claim` would find anything (of `names`): a cheap read before taking the write lock."""

    def has_runnable(self, names: Collection[str] | None = None) -> bool:
        """Whether anything (of `names`) is pending, running or past its wake time."""

    def next_wake(self, names: Collection[str] | None = None) -> float | None:
        """The earliest wake time of a blocked workflow (of `names`), None if none sleeps."""

    def pending_unknown(self, names: Collection[str]) -> dict[str, int]:
        """Pending workflows per name, of the names not in `names`."""

    def worker_started(self, owner: str, *, host: str, pid: int, app: str, names: Collection[str],
                       ttl: float) -> None:
        """Say that a worker runs, and the workflow names its app knows."""

    def declare_queues(self, queues: Iterable[Queue], *, by: str) -> list[str]:
        """Record an app's queues and their limits for every worker's claims; say which stored limits changed."""

    def worker_stopped(self, owner: str) -> None:
        """A worker exits cleanly: it serves nothing any more."""

    def commit_record(self, claim: rows.Claim, slot: int, rec: CommandRecord, text: str | None = None, *,
                      ttl: float, parallel_group: int | None = None, traceback: str | None = None) -> bool:
        """Commit one outcome (`text`: its JSON if already encoded; `traceback`: a failure's) if the lease
        holds and `slot` is next (any slot not yet written, for a task of a parallel group: `parallel_group`,
        the slot of the group's first task)."""

    def commit_batch(self, records: Sequence[rows.PendingRecord] = (), *,
                     finishes: Sequence[tuple[rows.Claim, Outcome]] = (), ttl: float,
                     marks: Sequence[rows.StartMark] = (),
                     claims: Sequence[rows.ClaimAsk] = ()) -> tuple[list[bool], list[bool]]:
        """Commit outcomes and run verdicts of many workflows in one transaction; say which were written.

        `marks`: start marks to write in the same transaction, each fenced by its claim's lease
        (only to a store that writes marks itself: `mark_started`; a store with a mark file refuses them).
        `claims`: the worker's claims, made in the same transaction, each answered on its ask
        (only to a store on this host's file; a server's store claims on the loop's connection)."""

    @property
    def cancels(self) -> dict[str, str]:
        """Cancel requests the slot commits came upon (workflow id → reason); the worker takes them out."""

    def renew(self, claims: Sequence[rows.Claim], *, ttl: float, worker: str | None = None) -> list[bool]:
        """Extend leases still held; say which are. `worker`: stamp that worker as seen too."""

    def release(self, claim: rows.Claim) -> None:
        """Give a workflow back: pending again, lease dropped."""

    def hand_back(self, claim: rows.Claim, error: str, *, backoff: float, backoff_max: float) -> float | None:
        """Give a workflow back after a run stopped by an error that is no outcome; the seconds it waits."""

    def expire_deadlines(self) -> list[str]:
        """Ask the unfinished workflows whose timeout passed to cancel (reason "timeout"); their ids."""

    def next_deadline(self) -> float | None:
        """The earliest deadline (on the wake clock) of an unfinished workflow not yet asked to cancel, or None."""

    def start_missing_children(self, parent_id: str, state: WorkflowState) -> list[str]:
        """Start, pending, the children a parent's history records as started that have no row; their ids."""

    def start_orphaned_children(self, names: Collection[str] | None = None) -> dict[str, list[str]]:
        """Start the missing children of blocked parents (of `names`) that wait for a child with no row; by parent."""

    def heartbeat(self, claim: rows.Claim, slot: int, name: str, attempts: int, *, details: str | None,
                  beat_at: float | None, expires: float | None, lane: int = 0) -> bool:
        """Keep an attempt's heartbeat in its lane (details as JSON text, None: keep the last; when it beat,
        None: keep; when the next is due, None: nobody watches), if the claim holds the lease; True if written.

        Lane 0 is the workflow's own thread, lane k the k-th task of the parallel group running."""

    def open_marks(self, owner: str, records: int) -> MarkBoard | None:
        """A file for this worker's start marks, `records` workflow threads' worth (a store on this
        host's file keeps them beside it); None where marks go through `mark_started` (a server)."""

    def mark_started(self, claim: rows.Claim, slot: int, name: str, attempts: int, started_at: float,
                     lane: int = 0) -> None:
        """Record in the store, before an activity runs, that it started, in its lane (a store with no
        `open_marks` file)."""

    def fold_marks(self, marks: Sequence[Mark]) -> int:
        """Keep workers' start marks in the store; return how many were written."""

    def load_state(self, workflow_id: str) -> WorkflowState:
        """The whole history of a workflow."""

    def sync_app_schedules(self, schedules: Mapping[str, str]) -> list[str]:
        """Make the app's schedules (workflow name → cron) rows; the names added or changed."""

    def fire_schedules(self, now: float | None = None) -> list[str]:
        """Start the workflows of every due tick; their ids."""

    def next_schedule_at(self) -> float | None:
        """The earliest next tick of a schedule that is not paused, None if none."""

    def upkeep(self, owner: str) -> list[str] | None:
        """Upkeep the worker's loop asks for on every pass, done only when due; the owners whose
        process is known gone when it looked (a claim need not wait out their leases), else None.

        On one host's file: dead workers' mark files folded into the store, dead owners found
        by pid, the write-ahead log kept bounded. On a server: nothing (None).
        """


class Store(WorkerStore, OperatorStore, Protocol):
    """Every protocol at once: what `open_store` returns."""
