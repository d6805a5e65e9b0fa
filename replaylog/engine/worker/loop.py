"""The worker: the claim/renew loop, its pool of workflow threads, and the store's upkeep on this host.

The loop claims runnable workflows (a lease with an epoch), hands each to a pooled thread
that runs it (`WorkflowRun`), renews the leases of the running ones, and hands a run's
verdict to the committer; on a database file of this host it also folds dead workers'
marks, finds dead owners by pid and keeps the WAL bounded.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import threading
import time
import types
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from replaylog.engine.app import Registry
from replaylog.engine.core import DEFAULT_MAX_SLOTS, HISTORY_WARN, Outcome, RunSuspended, error_text
from replaylog.engine.cpu_focus import CpuFocus, LoopThread
from replaylog.engine.errors import (
    LeaseLostError,
    NotADatabaseError,
    ReplaylogError,
    StoreBusyError,
)
from replaylog.engine.marks import Mark, MarkBoard
from replaylog.engine.store import (
    Claim,
    ClaimAsk,
    WorkerStore,
    default_max_payload,
    is_damaged,
    is_postgres_url,
    load_backend,
    open_store,
)
from replaylog.engine.telemetry import Metrics, Tracing
from replaylog.engine.vocab import Status
from replaylog.engine.worker.activity_loop import ActivityLoop
from replaylog.engine.worker.committer import DEFERRED_FOR, Committer, Request
from replaylog.engine.worker.pruner import Pruner
from replaylog.engine.worker.run import (
    PooledThread,
    RunInterrupted,
    RunParts,
    StopFlag,
    WorkerStopping,
    WorkflowRun,
)

log = logging.getLogger("replaylog.worker")
# A library's logger: with no handler of the application's anywhere above it, Python's
# last-resort handler would print its warnings raw to stderr (a failure's text unescaped,
# beside the command line's own escaped line). The application's handlers still get them.
log.addHandler(logging.NullHandler())

DEFAULT_LEASE_TTL = 5.0
DEFAULT_CONCURRENCY = 64
# Workflows suspended on async activities hold a task on the worker's event loop and no thread:
# a worker keeps this many beside its running ones.
DEFAULT_MAX_SUSPENDED = 10_000
# Records of the mark file (engine.marks) beyond one a thread, for the marks of workflows suspended
# on async activities: a thread's own record serves its next workflow, and moving the mark to a
# spare record is a few stores, where keeping it in the database was a write transaction per
# suspension (1,000 workflows awaiting a 1 s activity: 4.6 s against 3.5 s without marks, on a
# loaded 2-core machine). With none spare, the mark goes to the database. The tasks of parallel
# groups borrow them too, one a running task (with none spare, the thread's own record).
PARKED_MARKS = 1024
# How often the idle loop looks at PRAGMA data_version: a read of shared memory, so a
# few milliseconds costs nothing and a signal wakes its workflow in milliseconds.
DEFAULT_POLL = 0.002
# Leases lapse with time, not with a commit, so look for lapsed ones on a timer too.
LAPSE_CHECK = 0.25
# How often a worker looks for blocked parents waiting for a child that has no row (a lost row: a
# restore, a hand edit), which nothing else would claim again: at its start, then this often.
ORPHANS_CHECK = 60.0
# How often a worker with workflows running looks for new work (seconds): a new start or
# a signal waits at most this long, and the running workflows are not disturbed for it.
BUSY_POLL = 0.01
# ...doubled after each look that found nothing to claim, up to this, and back to BUSY_POLL
# once a look finds work. While workflows run, every commit of the worker's own changes the
# data version, so each look queries for claimable work: at 10 ms, 100 looks a second cost a
# lone workflow ~1% of its slots on a fast disk (workload 1, median 0.917 against 0.928 of
# the floor backed off to 40 ms, four alternated runs each); new work waits at most this
# long while busy.
BUSY_POLL_MAX = 0.04
# With fewer than a quarter of its slots free, a busy worker claims at most this often
# (seconds), so claims come in batches; an idle worker claims at once.
CLAIM_COALESCE = 0.01
# A run stopped by a BaseException from workflow or activity code (KeyboardInterrupt,
# SystemExit, …) or by a worker error hands its workflow back, claimable again after this
# many seconds, doubled for each such run in a row up to the maximum: code that is
# interrupted every time costs a claim and a replay a minute, not a spinning worker.
INTERRUPTED_BACKOFF = 1.0
INTERRUPTED_BACKOFF_MAX = 60.0
# How often (seconds, on the worker's clock) the loop looks for due schedule ticks when it
# knows of none sooner: a schedule added or resumed elsewhere is seen within this.
SCHEDULE_LOOK = 1.0

def _owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Wake:
    """Trick "bare-lock wake": the main loop's wake-up, set from any thread, waited on with a timeout.

    The idle loop waits up to DEFAULT_POLL (2 ms) about 460 times a second. A
    `threading.Event`'s wait is a Condition's: a lock made and a dozen Python-level calls
    each time; this holds one lock, released by `set` and taken back by `wait`. Measured
    on 2 vCPUs: a loop of bare 2 ms waits cost 41-53 µs of CPU a pass with an Event, 29-33
    µs with this. An idle worker's CPU (user + sys over 10 s, three pairs in turns; row 8 of
    `make bench` is this figure with 10,000 sleepers): `replaylog worker` 6.9, 6.4, 5.3% of
    a core before, 4.8, 4.8, 5.4% after; a Worker in a thread (~2-3.5%), six pairs: lower
    after in five, by 0.04-0.3 points, higher in one by 0.2.
    """

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()  # held: not set

    def set(self) -> None:
        """Wake the waiter (now, or at its next wait); setting it twice is setting it once."""
        with contextlib.suppress(RuntimeError):  # already set
            self._lock.release()

    def wait(self, timeout: float) -> bool:
        """Wait until set, at most `timeout` seconds (none if it is 0 or less); True if it was set. Clear after."""
        if timeout <= 0:
            return self._lock.acquire(blocking=False)
        return self._lock.acquire(timeout=timeout)

    def clear(self) -> None:
        """Forget a set that came after the last wait."""
        self._lock.acquire(blocking=False)


class _OpenedOnUse:
    """A pooled thread's own store connection, opened at its first use, not at its first run.

    Most runs never use it: a short history comes with the claim, and outcomes and
    verdicts go through the committer's connection. Opening one per pooled thread as it
    took its first claim (the schema read, the pragmas, a page cache) cost 2,000 three-slot
    workflows in one worker with 64 threads ~20% of their throughput (workload 5: ~2,800 ->
    ~3,300 workflows/s, 7 December), and the memory of connections nobody used.
    Once open, each of the store's methods is kept on this object when first read, so
    later calls find it without the look-up (other attributes are read through each time).
    """

    def __init__(self, path: str | os.PathLike[str], max_payload: int | None) -> None:
        self._path = path
        self._max_payload = max_payload
        self._store: WorkerStore | None = None
        # A parallel group's task threads may be the first to use it, at once: one opens it.
        self._opening = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        store = self._store
        if store is None:
            with self._opening:
                store = self._store
                if store is None:
                    store = self._store = open_store(self._path, max_payload=self._max_payload)
        value = getattr(store, name)
        if isinstance(value, types.MethodType):
            setattr(self, name, value)
        return value

    def close(self) -> None:
        """Close the connection, if it was opened."""
        if self._store is not None:
            self._store.close()


class Worker:
    """Runs every runnable workflow of one database with the functions of one app.

    Args:
        path: the database file, or a PostgreSQL URL.
        registry: the app's workflows and activities.
        concurrency: workflows run at once (one thread each).
        ttl: lease length in seconds; renewed while a workflow runs.
        track_inflight: record that an activity started before running it.
        focus_cpu: while commits are crowded, run engine code on one CPU (engine.cpu_focus),
            and this loop's thread, the caller's, with it (as it was once `run` returns).
        clock: the live clock for `ctx.now()`.
        max_payload: the cap in bytes on every value recorded (else $REPLAYLOG_MAX_PAYLOAD, else
            1 MiB): an activity result over it is recorded as that activity's failure, a
            workflow result over it fails the workflow.
        on_event: called with (workflow id, event text) for the CLI's log.
        metrics: where to count latencies, batches and attempts (engine.telemetry; the
            caller serves them); None: nothing is counted.
        tracing: an OpenTelemetry span per run and per live activity attempt (needs
            opentelemetry-api; the application configures the provider).
        max_slots: the most slots one run's history may hold: a workflow that passes it fails,
            told to use ctx.continue_as_new (None: no cap). The worker's log warns when a run's
            history passes HISTORY_WARN (10,000) slots.
        max_suspended: workflows awaiting async activities kept at most beside the running
            ones (they hold no thread: engine.worker.activity_loop).
        retention: prune workflows finished more than this many seconds ago, at start and
            every few minutes (engine.worker.pruner); None: never.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        registry: Registry,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        ttl: float = DEFAULT_LEASE_TTL,
        poll: float = DEFAULT_POLL,
        track_inflight: bool = True,
        focus_cpu: bool = True,
        clock: Callable[[], float] = time.time,
        max_payload: int | None = None,
        on_event: Callable[[str, str], None] | None = None,
        metrics: Metrics | None = None,
        tracing: bool = False,
        max_suspended: int = DEFAULT_MAX_SUSPENDED,
        retention: float | None = None,
        max_slots: int | None = DEFAULT_MAX_SLOTS,
    ) -> None:
        # A URL stays a string (a Path would fold its `//`).
        self.path: str | Path = path if isinstance(path, str) and is_postgres_url(path) else Path(path)
        self.registry = registry
        # The store's module is imported now: its ~30 ms fall in the process's start-up, not in
        # the first moments of run() (and a missing psycopg is told before anything starts).
        load_backend(self.path)
        # The workflows this worker claims: one whose name its app lacks stays pending for a
        # worker that knows it (claiming it here could only fail it).
        self.names = frozenset(registry.workflows)
        self.concurrency = max(1, concurrency)
        self.ttl = ttl
        self.poll = poll
        self.track_inflight = track_inflight
        # Engine code on one CPU while commits are crowded; None when off or not possible.
        # Not on a server's store: its commits are the server's work, not this process's,
        # and pinning the engine cost 50 workflows at once on PostgreSQL ~10% of their slots/s
        # (2 vCPUs, the server on the same machine: 3,230-3,540 pinned, 3,550-3,910 not) and
        # a sched_setaffinity call per slot.
        self.focus = CpuFocus.create(focus_cpu and isinstance(self.path, Path))
        self.clock = clock
        # The cap on every value recorded (activity results, the workflow's result), as on inputs.
        self.max_payload = max_payload if max_payload is not None else default_max_payload()
        self.on_event = on_event
        # Off (None), each costs one test at its hooks (engine.telemetry).
        self.metrics = metrics
        self.tracing = Tracing() if tracing else None
        # Finished workflows older than this many seconds are pruned by a thread of their own.
        self.retention = retention
        self.owner = _owner_id()
        self._host = socket.gethostname()
        self._stopping = StopFlag()
        self._wake = Wake()
        self._lock = threading.Lock()
        self._active: dict[str, Claim] = {}
        self._threads: list[threading.Thread] = []
        self._ready: queue.SimpleQueue[Claim | None] = queue.SimpleQueue()
        self._idle = 0  # pooled threads waiting on _ready with no claim promised to them
        self._backlog = 0  # claims queued on _ready with no thread promised to them (all are busy)
        self._freed = False  # a run suspended on async activities: its thread is free for a claim
        # Runs that ended whose verdicts are not answered yet: still active (their leases are
        # renewed until the verdict is written), but their threads are free (see `_loop`).
        self._finishing: set[str] = set()
        # The spare mark records (PARKED_MARKS) free, and the one each suspended workflow's mark is in.
        self._spare_marks = list(range(self.concurrency, self.concurrency + PARKED_MARKS))
        self._parked_marks: dict[str, int] = {}
        self._claim_batch = max(1, self.concurrency // 4)
        # On this host's file the loop's claims ride the group commits (engine.worker.committer,
        # Committer.claim); a server's store claims on the loop's own connection.
        self._claims_ride = isinstance(self.path, Path)
        # Woken in turn while commits are crowded enough for CpuFocus to gather the threads on one CPU.
        self.committer = Committer(self.path, ttl, self.max_payload, metrics, wake_clock=clock,
                                   baton_at=None if self.focus is None else self.focus.crowded_at)
        self._board: MarkBoard | None = None
        # What every run shares; run() adds where the marks go once it has opened the store.
        self._parts = RunParts(registry, self.committer, self._stopping, clock, self.max_payload, self._event,
                               self.focus, metrics=metrics, activities=ActivityLoop(self._resume),
                               max_slots=max_slots)
        # How many workflows suspended on async activities (holding no thread) it keeps at most,
        # beside the `concurrency` that run on threads.
        self.max_suspended = max_suspended
        self.completed = 0
        # The workflows given back to the store unfinished because this worker stopped (in order).
        self.handed_back: list[str] = []
        self._stop_requested = False  # set by request_stop (a signal handler)
        self._busy_quiet_until = 0.0  # a busy database is logged at most once a minute
        # After run(until_idle=True): the pending workflows left because this app lacks their names, per name.
        self.left_unknown: dict[str, int] = {}
        # Set when the database turns out to be damaged: run() raises it after stopping.
        self.fatal: NotADatabaseError | None = None

    # -- control

    def stop(self) -> None:
        """Ask the worker to stop: each workflow finishes its current slot and is handed back."""
        self._stopping.set()
        self._wake.set()

    def request_stop(self) -> None:
        """stop(), safe to call from a signal handler: it takes no lock.

        A handler runs in the main thread between two bytecodes, possibly while that thread
        holds the wake event's (non-reentrant) lock in the main loop; stop() would then wait
        for it for ever. The main loop sees this flag within one poll and stops itself.
        """
        self._stop_requested = True

    @property
    def stop_requested(self) -> bool:
        """True once request_stop() or stop() was called."""
        return self._stop_requested or self._stopping.is_set()

    @property
    def stopping(self) -> bool:
        """True once stop() was called."""
        return self._stopping.is_set()

    def _event(self, workflow_id: str, text: str, event: str = "", error: str | None = None) -> None:
        # `event` and `error` are for structured logs (--log-format json): the event's kind
        # (its text's first word unless given) and a failure's error.
        kind = event or text.split(" ", 1)[0]
        log.log(logging.WARNING if error is not None else logging.INFO, "%s %s", workflow_id, text,
                extra={"workflow_id": workflow_id, "event": kind, "error": error})
        if self.on_event is not None:
            self.on_event(workflow_id, text)

    # -- the main loop

    def run(self, *, until_idle: bool = False) -> None:
        """Serve until stop() (or, with until_idle, until nothing of its names is pending or running)."""
        store = open_store(self.path, max_payload=self.max_payload, wake_clock=self.clock)
        try:
            # A store on this host's file keeps start marks in a file beside it; a server's, as rows.
            records = self.concurrency + PARKED_MARKS
            self._board = store.open_marks(self.owner, records) if self.track_inflight else None
            store.worker_started(self.owner, host=self._host, pid=os.getpid(), app=self.registry.spec,
                                 names=self.names, ttl=self.ttl)
            for name in store.sync_app_schedules(self.registry.schedules):
                self._event(f"schedule:{name}", f"schedule {name} set from the app"
                            f" ({self.registry.schedules[name]})", "schedule")
            if self.registry.queues:
                # Every worker's claim reads the limits from the store: the newest declaration
                # of a queue is the one enforced everywhere (docs/flow-control.md says why).
                for change in store.declare_queues(self.registry.queues.values(),
                                                   by=f"app {self.registry.spec} ({self.owner})"):
                    log.warning("%s; this worker's declaration now applies to every worker", change)
        except BaseException:
            if self._board is not None:
                self._board.close(remove=True)
            store.close()
            raise
        # Without a mark file (a server's store) each mark is a row, where every host sees it.
        self._parts = replace(self._parts, board=self._board,
                              marks_in_store=self.track_inflight and self._board is None,
                              lend_mark=self._lend_mark, return_mark=self._return_mark,
                              fold_marks=self._fold_elsewhere)
        self.committer.start()
        pruner = None if self.retention is None else Pruner(self.path, self.retention, self._stopping)
        if pruner is not None:
            pruner.start()
        # This thread follows the workflow threads to the focus CPU while commits are crowded, and
        # is as it was once the loop ends (engine.cpu_focus: "The worker's loop thread").
        follower = None if self.focus is None else self.focus.follows()
        try:
            self._loop(store, until_idle, follower)
        except NotADatabaseError as exc:
            self._damaged(exc)
        finally:
            if follower is not None:
                follower.unfollow()
            self._stopping.set()
            # Async activities finish their attempt, as sync ones do, and their workflows are
            # queued to record it (and be handed back).
            self._parts.activities.drain()
            # Claims still queued run first (and are handed back); then one None per thread.
            for _ in self._threads:
                self._ready.put(None)
            for t in list(self._threads):
                t.join()
            if pruner is not None:
                pruner.join()
            self.committer.stop()
            self._parts.activities.close()
            if self.tracing is not None:
                self.tracing.close()
            try:
                store.worker_stopped(self.owner)
            except ReplaylogError as exc:  # the row goes stale and is ignored
                log.warning("could not remove this worker's row: %s", exc)
            store.close()
            if self._board is not None:
                # Every run has ended, and a run that ended with an activity in flight
                # folded its mark into the database: the file says nothing more.
                self._board.close(remove=True)
        if self.fatal is not None:
            raise self.fatal

    def _loop(self, store: WorkerStore, until_idle: bool, follower: LoopThread | None) -> None:
        # A store that is told of changes (PostgreSQL's LISTEN) ends the idle wait at once.
        told = store.wake_on_change(self._wake.set)
        last_version = -1
        next_lapse_check = 0.0
        next_renew = time.monotonic() + self.ttl / 3
        next_small_claim = 0.0
        next_schedule = 0.0  # on self.clock: when to look for due schedule ticks
        next_expiry = 0.0  # when to look for workflows past their timeout (client.start(timeout=...))
        next_orphans = 0.0  # when to look for parents waiting for a child with no row
        dead: list[str] = []
        # The earliest wake time (epoch seconds) of a sleeping workflow of ours: one seek in the
        # store's wake index whenever we look, so the loop wakes at that time and never asks
        # after each sleeper. None: nobody sleeps on a timer or a deadline.
        next_wake: float | None = None
        busy_poll = BUSY_POLL  # the wait between looks while workflows run (see BUSY_POLL_MAX)
        # Outcomes queued for a commit while their threads run on (Committer.enqueue, on a store
        # that writes marks itself): this loop commits one whose thread is slow to come back.
        deferring = self._parts.marks_in_store
        if deferring:
            self.committer.on_defer = self._wake.set  # (once, as it starts: Committer.watching)
        queued_seen = -1
        next_stale_look = 0.0
        while not self._stopping.is_set():
            if follower is not None:
                follower.follow(self.committer.crowd)
            if self._stop_requested:
                self.stop()
                break
            now = time.monotonic()
            version = store.data_version()
            due = next_wake is not None and self.clock() >= next_wake
            # A run that suspended freed its thread without a commit (the data version did not move).
            freed, self._freed = self._freed, False
            look = version != last_version or now >= next_lapse_check or due or freed
            # (The next wake time is read after the claim below: a woken workflow is claimed
            # one round trip sooner, and the time read then is of those still asleep.)
            seek_wake = look
            # The store's upkeep when due (on one host's file: dead workers' marks kept, the
            # WAL bounded); it names the dead owners whenever it looked for them.
            found = store.upkeep(self.owner)
            if found is not None:
                dead = found
                look = look or bool(dead)
            last_version = version
            if self.clock() >= next_schedule:
                next_schedule, started = self._schedules(store)
                look = look or started  # this connection's own commit leaves data_version as it was
            # Suspended workflows hold no thread, and neither do finished ones whose verdicts are on
            # their way: the free threads, up to the cap of those kept. (Counting a workflow as busy
            # until its verdict was answered left its thread idle for a commit or two. 2,000
            # three-slot workflows on 2 vCPUs, `Worker.run` in turns, 32 runs each: outcomes a
            # commit 21.7 -> 26, median 1,653 -> 1,752 workflows/s, the runs' own spread ±20%;
            # docs/performance.md, "Workload 5: a finished run's thread is free at once".)
            with self._lock:
                active = len(self._active) - len(self._finishing)
            free = min(self.concurrency - active + self._parts.activities.parked,
                       self.concurrency + self.max_suspended - active)
            if look and 0 < free < self._claim_batch and now < next_small_claim:
                # Under load, claim in batches: every claim is a durable write that holds
                # the write lock, and one per finished workflow starved the commits.
                last_version = -1  # look again on a later pass
                look = False
            if look and free > 0:
                next_lapse_check = now + LAPSE_CHECK
                next_small_claim = now + CLAIM_COALESCE
                if store.has_claimable(dead, self.names):
                    try:
                        began = time.perf_counter()
                        if self._claims_ride:
                            claims = self.committer.claim(ClaimAsk(self.owner, ttl=self.ttl, limit=free,
                                                                   dead_owners=dead, names=self.names))
                        else:
                            claims = store.claim(self.owner, ttl=self.ttl, limit=free, dead_owners=dead,
                                                 names=self.names)
                        if self.metrics is not None:
                            self.metrics.claim.observe(time.perf_counter() - began)
                    except StoreBusyError as exc:
                        self._busy(exc)  # nothing was claimed: look again on a later pass
                        claims, last_version = [], -1
                    for claim in claims:
                        self._launch(claim)
                    busy_poll = BUSY_POLL
                else:
                    busy_poll = min(busy_poll * 2, BUSY_POLL_MAX)
            if seek_wake:
                next_wake = store.next_wake(self.names)
            if now >= next_orphans:
                next_orphans = now + ORPHANS_CHECK
                self._start_orphaned_children(store)
            if now >= next_expiry:
                next_expiry = now + LAPSE_CHECK
                try:
                    for wid in store.expire_deadlines():
                        self._event(wid, "cancel requested: its timeout passed", "timeout")
                except StoreBusyError as exc:
                    self._busy(exc)  # looked for again on a later pass
            if now >= next_renew:
                try:
                    self._renew(store)
                    next_renew = now + self.ttl / 3
                except StoreBusyError as exc:
                    # Commits kept the write lock past the busy timeout (a burst of them can
                    # starve this connection): the leases stand until they lapse, try again soon.
                    self._busy(exc)
                    next_renew = now + min(self.ttl / 10, 1.0)
            watching = deferring and self._active and self.committer.watching
            if watching and now >= next_stale_look:
                # (At most every half of DEFERRED_FOR: a queued outcome is stale after a whole half.)
                next_stale_look = now + DEFERRED_FOR / 2
                queued_seen = self.committer.commit_stale(queued_seen)
            if until_idle and not self._active and not store.has_runnable(self.names):
                self.left_unknown = store.pending_unknown(self.names)
                return
            # While workflows run here, every commit of this worker's own changes the data
            # version: looking every 2 ms then is mostly work for nothing, and each look
            # takes the GIL from the workflow threads (it cost a lone workflow ~4% of its
            # slots). A run that ends sets _wake, so a finished slot is refilled at once.
            wait = self.poll if not self._active else max(self.poll, busy_poll)
            if told and last_version != -1:
                wait = max(wait, self._quiet_wait(now, next_renew, next_expiry, next_schedule, next_wake))
            if watching:
                wait = min(wait, DEFERRED_FOR / 2)  # (two looks: an outcome queued just after one)
            self._wake.wait(wait)
            self._wake.clear()

    def _start_orphaned_children(self, store: WorkerStore) -> None:
        """Start the lost children that blocked parents of this worker's names wait for (see ORPHANS_CHECK)."""
        try:
            started = store.start_orphaned_children(self.names)
        except StoreBusyError as exc:
            self._busy(exc)  # looked for again at the next check
            return
        for parent, children in started.items():
            self._event(parent, f"started child workflow(s) it waits for that had no row: {', '.join(children)}",
                        "children_started")

    def _quiet_wait(self, now: float, next_renew: float, next_expiry: float, next_schedule: float,
                    next_wake: float | None) -> float:
        """How long the loop may sleep on a store that wakes it on every change (PostgreSQL's LISTEN).

        Starts, signals, verdicts and hand-backs wake it, and so do a run's end and stop(): it
        sleeps until its next timed look (lapsed leases, renewals, timeouts, schedules, the next
        wake time), at most LAPSE_CHECK. Polling every few milliseconds there looked for what
        the notification already says: ~100-500 passes a second, each a GIL hand-off, cost a
        lone workflow's worker ~15 ms of CPU a second (2 vCPUs) and an idle worker as much.
        A stop asked from a signal handler (request_stop) is seen within LAPSE_CHECK.
        """
        clock = self.clock()
        wait = min(LAPSE_CHECK, next_renew - now, next_expiry - now, next_schedule - clock)
        if next_wake is not None:
            wait = min(wait, next_wake - clock)
        return wait

    def _schedules(self, store: WorkerStore) -> tuple[float, bool]:
        """Start the workflows of due schedule ticks (any worker may: each tick starts once).

        Returns when to look next (on the worker's clock) and whether anything started.
        """
        started: list[str] = []
        try:
            started = store.fire_schedules(self.clock())
            for wid in started:
                self._event(wid, "started by its schedule", "scheduled")
            upcoming = store.next_schedule_at()
        except StoreBusyError as exc:
            self._busy(exc)
            upcoming = None
        look = self.clock() + SCHEDULE_LOOK
        return (look if upcoming is None else min(look, upcoming)), bool(started)

    def _damaged(self, exc: BaseException) -> None:
        """Stop the worker on a damaged database file, instead of retrying its workflows forever."""
        if self.fatal is None:
            # The store's line says what is wrong with the file and what to do about it.
            self.fatal = NotADatabaseError(f"{exc}; the worker stopped")
        self.stop()

    def _busy(self, exc: StoreBusyError) -> None:
        """A claim or renewal found the database locked too long: say so once a streak, go on."""
        now = time.monotonic()
        if now >= self._busy_quiet_until:
            log.warning("%s; the worker goes on and tries again", exc)
        self._busy_quiet_until = now + 60.0

    def _renew(self, store: WorkerStore) -> None:
        with self._lock:
            claims = list(self._active.values())
        # Also when idle: the worker's row says it is alive (store.served_names).
        held = store.renew(claims, ttl=self.ttl, worker=self.owner)
        for claim, kept in zip(claims, held, strict=True):
            if not kept:
                # Terminated, or taken over: its async activities are cancelled at their next await.
                self._parts.activities.cancel(claim.id)

    def _launch(self, claim: Claim) -> None:
        # Workflow threads are pooled: a thread and its connection outlive one workflow,
        # because starting a thread and opening a connection per workflow cost more than
        # running a short workflow does.
        with self._lock:
            self._active[claim.id] = claim
            spawn = self._promise()
        if spawn is not None:
            spawn.start()
        self._ready.put(claim)

    def _promise(self) -> threading.Thread | None:
        """Promise a queued claim a thread (the caller holds _lock): a new one to start, or None."""
        if self._idle > 0:
            self._idle -= 1
            return None
        if len(self._threads) < self.concurrency:
            index = len(self._threads)
            t = threading.Thread(target=self._serve, args=(index,), name=f"replaylog-wf-{index}", daemon=True)
            self._threads.append(t)
            return t
        self._backlog += 1  # the next thread that finishes takes it
        return None

    def _resume(self, workflow_id: str) -> None:
        """A workflow suspended on async activities has their outcomes: run it again (from the loop's thread)."""
        with self._lock:
            # Its run marks the attempt again in its thread's record before it records the outcome
            # (a mark of a slot with an outcome is dropped when marks are folded): the spare is free.
            index = self._parked_marks.pop(workflow_id, None)
            if index is not None:
                self._spare_marks.append(index)
            claim = self._active.get(workflow_id)
            if claim is None:
                return
            spawn = self._promise()
        if spawn is not None:
            spawn.start()
        # Its history has grown since the claim: the run loads it again.
        self._ready.put(replace(claim, state=None))

    def _serve(self, index: int) -> None:
        """A pooled workflow thread: run claims one at a time until handed None.

        `index` is the thread's own record in the mark file (there are at most
        `concurrency` threads, and as many records).
        """
        me = PooledThread(index)
        if self.focus is not None:
            self.focus.adopt(me)  # started from a focused thread, it is on the focus CPU
        try:
            while (claim := self._ready.get()) is not None:
                try:
                    self._run_one(claim, me)
                except BaseException:  # the pool counts on this thread: it keeps serving
                    # _run_one accounts for its claim whatever happens; only a second
                    # interruption inside its own handlers gets here.
                    log.exception("%s: the workflow thread was interrupted while handing it back", claim.id)
        finally:
            if me.store is not None:
                me.store.close()

    # -- one workflow

    def _run_one(self, claim: Claim, me: PooledThread) -> None:
        store = me.store
        if store is None:
            store = me.store = cast(WorkerStore, _OpenedOnUse(self.path, self.max_payload))
        finishing = suspended = False
        me.inflight = False
        spans = None if self.tracing is None else self.tracing.run(claim.id, claim.workflow,
                                                                   store.trace_context(claim.id))
        ended: tuple[str, str | None] = ("interrupted", None)  # the run span's status, unless an outcome comes
        try:
            run = WorkflowRun(self._parts, store, claim, me, spans)
            outcome = run.execute()
            # The verdict needs no wait: this thread takes its next workflow while the
            # verdict rides in the next group commit (with the run's last outcome, if that
            # one is still queued: `ride`). The workflow stays active (its lease renewed)
            # until `_finished` hears that the verdict was written.
            verdict = Request(finish=(claim, outcome), then=lambda r: self._finished(claim, outcome, r))
            with self._lock:
                self._finishing.add(claim.id)  # (before the verdict can be answered: `_finished` drops it)
            try:
                rides = run.ride(verdict)
            except BaseException:
                with self._lock:
                    self._finishing.discard(claim.id)  # not sent: the workflow is handed back below
                raise
            finishing = True
            ended = (str(outcome.status), outcome.error)
            self._keep_mark(store, me)  # an activity that ran and returned no JSON value, say
            if not rides:
                self.committer.submit_later(verdict)
        except RunSuspended:
            # Its async activities run on the worker's loop; it comes back through _resume.
            # This thread's record serves its next workflow: the mark moves to a spare one.
            self._park_mark(store, me, claim.id)
            ended = ("suspended", None)
            suspended = True
            self._freed = True
        except WorkerStopping:
            self._keep_mark(store, me)  # stopped in a retry's backoff: that attempt ran
            try:
                store.release(claim)
            except Exception as exc:  # noqa: BLE001 - the lease lapses on its own anyway
                log.warning("%s could not be released: %s", claim.id, exc)
            self.handed_back.append(claim.id)
            self._event(claim.id, "handed back (worker stopping)", "handed_back")
        except LeaseLostError:
            self._keep_mark(store, me)
            self._event(claim.id, "lease lost to another worker; its writes were refused", "lease_lost")
        except RunInterrupted as stop:
            # Not an outcome: nothing is recorded and the workflow runs again. The started
            # activity's mark is kept, so the interrupted attempt counts towards max_retries.
            self._keep_mark(store, me)
            self._hand_back(store, claim, f"{error_text(stop.exc)} raised in {stop.where}", stop.exc)
        except Exception as exc:  # noqa: BLE001 - logged; the workflow is handed back for another try
            self._keep_mark(store, me)
            if is_damaged(exc):
                self._damaged(exc)
            else:
                self._hand_back(store, claim, f"the worker failed: {error_text(exc)}", exc)
        finally:
            if spans is not None:
                spans.end(*ended)
            if not suspended:
                self._parts.activities.forget(claim.id)
            with self._lock:
                if not finishing and not suspended:
                    self._active.pop(claim.id, None)
                if self._backlog:
                    self._backlog -= 1  # this pooled thread takes a claim queued with no promise
                else:
                    self._idle += 1  # this pooled thread is free for the next claim
            if not finishing:
                self._wake.set()
            if suspended and self._parts.activities.park(claim.id):
                self._resume(claim.id)  # its activities finished before the run had unwound
            self.committer.pass_baton()  # this thread leaves engine code (Committer.pass_baton)

    def _park_mark(self, store: WorkerStore, me: PooledThread, workflow_id: str) -> None:
        """A run suspended with an activity started: move its mark to a spare record (else keep it in the database)."""
        board = self._board
        mark = board.read(me.index) if me.inflight and board is not None else None
        if board is None or mark is None:
            return
        with self._lock:
            index = self._spare_marks.pop() if self._spare_marks else None
            if index is not None:
                self._parked_marks[workflow_id] = index
        if index is None:
            self._keep_mark(store, me)
            return
        me.inflight = False
        board.write(index, mark.workflow_id, mark.epoch, mark.slot, mark.name, mark.attempts, mark.started_at,
                    mark.lane)

    def _lend_mark(self) -> int | None:
        """A spare record of the mark file for a task of a parallel group (None: none is free)."""
        with self._lock:
            return self._spare_marks.pop() if self._spare_marks else None

    def _return_mark(self, index: int) -> None:
        """A spare record a parallel group's task is done with."""
        with self._lock:
            self._spare_marks.append(index)

    def _fold_elsewhere(self, marks: list[Mark]) -> None:
        """Keep `marks` in the database from any thread, on a connection of its own (RunParts.fold_marks).

        For the mark of an outcome whose commit, with its run's verdict, failed after its thread
        went on (WorkflowRun.ride): rare, so a connection is opened for it.
        """
        try:
            with open_store(self.path, max_payload=self.max_payload) as store:
                store.fold_marks(marks)
        except Exception as exc:  # noqa: BLE001 - only attempt counts and a hint are lost
            log.warning("%s: could not keep the in-flight mark of slot %s: %s", marks[0].workflow_id,
                        marks[0].slot, exc)

    def _keep_mark(self, store: WorkerStore, me: PooledThread) -> None:
        """A run ended with an activity started and no outcome: keep its mark in the database.

        The thread's record in the mark file is overwritten by its next activity, and
        the mark must outlive that: the next run of the workflow counts attempts on from
        it, and the operator sees that the activity possibly ran.
        """
        board = self._board
        inflight, me.inflight = me.inflight, False
        mark = board.read(me.index) if inflight and board is not None else None
        if mark is None:
            return
        try:
            store.fold_marks([mark])
        except Exception as exc:  # noqa: BLE001 - only the attempt count and a hint are lost
            log.warning("%s: could not keep the in-flight mark of slot %s: %s", mark.workflow_id, mark.slot, exc)

    def _finished(self, claim: Claim, outcome: Outcome, req: Request) -> None:
        """A workflow's verdict was committed (or refused, or failed): report it, let the workflow go."""
        try:
            if req.error is not None:
                self._worker_error(claim, req.error)
            elif not req.ok:
                self._event(claim.id, "lease lost to another worker; its writes were refused", "lease_lost")
            else:
                if outcome.status == Status.COMPLETED:
                    self.completed += 1
                detail = outcome.blocked_on if outcome.status == Status.BLOCKED else (outcome.error or "")
                slots = outcome.replayed_commands + outcome.executed_commands
                if slots > HISTORY_WARN and outcome.status != Status.CONTINUED:
                    log.warning("%s has %d slots in its history, past %d: use ctx.continue_as_new(input) to go on"
                                " in a fresh history before it reaches the cap", claim.id, slots, HISTORY_WARN,
                                extra={"workflow_id": claim.id, "event": "long_history", "error": None})
                # A failure's traceback follows on the lines after (the CLI indents them).
                shown = f"\n{outcome.traceback}" if outcome.status == Status.FAILED and outcome.traceback else ""
                self._event(claim.id, f"{outcome.status} {detail}".rstrip() + shown, str(outcome.status),
                            outcome.error if outcome.status == Status.FAILED else None)
        finally:
            with self._lock:
                self._active.pop(claim.id, None)
                self._finishing.discard(claim.id)
            self._wake.set()

    def _worker_error(self, claim: Claim, exc: BaseException) -> None:
        if is_damaged(exc):
            self._damaged(exc)
        else:
            log.error("%s crashed in the worker", claim.id, exc_info=exc)
            self._event(claim.id, f"left for another try after a worker error: {error_text(exc)}", "worker_error",
                        error_text(exc))

    def _hand_back(self, store: WorkerStore, claim: Claim, error: str, exc: BaseException) -> None:
        """Give a workflow whose run stopped without an outcome back, with `error` as its worker error."""
        log.error("%s: %s; handing it back", claim.id, error, exc_info=exc)
        try:
            wait = store.hand_back(claim, error, backoff=INTERRUPTED_BACKOFF, backoff_max=INTERRUPTED_BACKOFF_MAX)
        except Exception as err:  # noqa: BLE001 - its lease is no longer renewed and lapses on its own
            log.warning("%s could not be handed back: %s", claim.id, err)
            self._event(claim.id, f"{error}; left for another try when its lease lapses", "handed_back", error)
            return
        if wait is None:
            self._event(claim.id, "lease lost to another worker; its writes were refused", "lease_lost")
        else:
            self._event(claim.id, f"{error}; handed back, runs again in {wait:.0f} s", "handed_back", error)
