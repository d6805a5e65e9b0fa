"""The background worker: claim (lease) → load history once → run core → commit each outcome.

One worker process runs many workflows at once, one thread each; one write connection
commits the outcomes of every thread that is waiting in one transaction (group commit,
led by whichever waiting thread finds the connection free). Each outcome is durable before its
workflow continues. Writes are fenced by the lease epoch: a worker that lost its
lease has its writes refused, so no slot is ever recorded twice.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from replaylog.engine.app import Registry
from replaylog.engine.core import EVENT, CommandRecord, Context, Outcome, ParallelHooks, error_text, execute
from replaylog.engine.cpu_focus import CpuFocus
from replaylog.engine.errors import (
    ActivityError,
    DuplicateWorkflowIdError,
    LeaseLostError,
    NotADatabaseError,
    PayloadTooLargeError,
    ReplaylogError,
    StoreBusyError,
    UnknownWorkflowError,
    UnknownWorkflowIdError,
)
from replaylog.engine.marks import MarkBoard
from replaylog.engine.store import (
    Claim,
    PendingRecord,
    WorkerStore,
    default_max_payload,
    encode_value,
    fit_text,
    is_damaged,
    is_postgres_url,
    open_store,
    over_cap,
    redact_url,
)
from replaylog.engine.telemetry import Metrics, RunSpans, Tracing
from replaylog.engine.vocab import SlotKind, Status

log = logging.getLogger("replaylog.worker")

DEFAULT_LEASE_TTL = 5.0
DEFAULT_CONCURRENCY = 64
# How often the idle loop looks at PRAGMA data_version: a read of shared memory, so a
# few milliseconds costs nothing and a signal wakes its workflow in milliseconds.
DEFAULT_POLL = 0.002
# Leases lapse with time, not with a commit, so look for lapsed ones on a timer too.
LAPSE_CHECK = 0.25
# How often a worker with workflows running looks for new work (seconds): a new start or
# a signal waits at most this long, and the running workflows are not disturbed for it.
BUSY_POLL = 0.01
# With fewer than a quarter of its slots free, a busy worker claims at most this often
# (seconds), so claims come in batches; an idle worker claims at once.
CLAIM_COALESCE = 0.01
# A run stopped by a BaseException from workflow or activity code (KeyboardInterrupt,
# SystemExit, …) or by a worker error hands its workflow back, claimable again after this
# many seconds, doubled for each such run in a row up to the maximum: code that is
# interrupted every time costs a claim and a replay a minute, not a spinning worker.
INTERRUPTED_BACKOFF = 1.0
INTERRUPTED_BACKOFF_MAX = 60.0


class _Thread:
    """What a pooled workflow thread keeps from slot to slot and from run to run.

    A plain object with slots rather than a threading.local: the slot path reads and
    writes these several times per slot, and each access to a threading.local cost
    ~1,000 CPU instructions (README, Performance).
    """

    __slots__ = ("focused", "index", "inflight", "store")

    def __init__(self, index: int) -> None:
        self.index = index  # the thread's own record in the mark file
        self.focused = False  # moved to the focus CPU (CpuFocus)
        # The run's latest start mark (the thread's record) is of an activity with no
        # recorded outcome yet.
        self.inflight = False
        self.store: WorkerStore | None = None  # the thread's own connection, opened on first use


class _StopFlag(threading.Event):
    """An Event whose state is also a plain attribute, `up`.

    Workflow threads look at it twice per slot; reading an attribute costs a tenth of
    calling is_set() (a Python method). `up` turns True before the Event is set.
    """

    up = False

    def set(self) -> None:
        """Raise the flag and wake every waiter."""
        self.up = True
        super().set()

    def clear(self) -> None:
        """Lower the flag."""
        super().clear()
        self.up = False


class WorkerStopping(BaseException):
    """Raised in a workflow thread when the worker stops: the workflow is handed back."""


class _CommitFailed(BaseException):
    """A commit of an outcome raised (the store failed): a BaseException, so that workflow code
    cannot catch it and the core cannot take it for the workflow's own failure."""

    def __init__(self, exc: Exception) -> None:
        super().__init__(exc)
        self.exc = exc


class _RunInterrupted(BaseException):
    """A run stopped by a BaseException that is not the engine's own, and where it was raised."""

    def __init__(self, exc: BaseException, where: str) -> None:
        super().__init__(exc, where)
        self.exc = exc
        self.where = where


class _Request:
    """One thing to commit (an outcome or a run's verdict) and its answer.

    A plain class with slots, and a bare lock to wait on instead of an Event: one is
    made per slot, and an Event (a Condition around a lock) cost more than the rest.
    The lock exists only when the request has to wait for another thread's commit.
    """

    __slots__ = ("done", "error", "finish", "lead", "ok", "record", "then")

    def __init__(self, record: PendingRecord | None = None, finish: tuple[Claim, Outcome] | None = None,
                 then: Callable[[_Request], None] | None = None) -> None:
        self.record = record
        self.finish = finish
        # For a request nobody waits for (`submit_later`): called once it was committed or failed.
        self.then = then
        # Held while the request waits; released when it was committed, or when its
        # thread is to commit next (`lead`).
        self.done: threading.Lock | None = None
        self.ok = False
        self.error: BaseException | None = None
        self.lead = False

    def wake(self) -> None:
        """Let the waiting thread go on (a request committed by its own thread has no lock)."""
        done = self.done
        if done is not None:
            self.done = None
            done.release()


class Committer:
    """Owns the write connection; commits every waiting request in one transaction.

    Group commit by leader hand-off rather than by a commit thread: a thread that
    submits while no commit is in progress commits its own request at once (a lone
    workflow pays no thread switch per slot, which cost as much as the fsync); a thread
    that submits during a commit queues its request and sleeps, and when that commit
    ends the first queued thread commits everything queued by then in one transaction.
    The connection is used by one thread at a time: only the leader touches it.
    """

    def __init__(self, path: str | os.PathLike[str], ttl: float, max_payload: int | None = None,
                 metrics: Metrics | None = None) -> None:
        self._path = path
        self.metrics = metrics
        self._ttl = ttl
        self._max_payload = max_payload
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending: list[_Request] = []
        self._leading = False
        self._store: WorkerStore | None = None
        self._stop_waiting = False
        self.cancels: dict[str, str] = {}
        self.batches = 0
        self.commits = 0
        # Outcomes per commit, a moving average (updated by the committing thread only;
        # others read it, and a stale read only delays CpuFocus (engine.cpu_focus) by a commit).
        self.crowd = 0.0

    def start(self) -> None:
        """Open the write connection."""
        self._store = open_store(self._path, max_payload=self._max_payload)
        # The cancel requests its slot commits come upon (workflow id → reason): the
        # workflow threads take theirs out after each commit.
        self.cancels = self._store.cancels

    def stop(self) -> None:
        """Wait for the commit in progress and what is queued behind it, then close the connection."""
        with self._lock:
            while self._leading or self._pending:
                self._stop_waiting = True
                self._idle.wait()
            store, self._store = self._store, None
        if store is not None:
            store.close()

    def submit(self, req: _Request) -> bool:
        """Commit a request (alone, or with others in one transaction); True if it was written."""
        with self._lock:
            lead = not self._leading
            if lead:
                self._leading = True
            else:
                done = req.done = threading.Lock()
                done.acquire()
            self._pending.append(req)
        if not lead:
            done.acquire()  # until committed, or handed the lead
            lead = req.lead
        if lead:
            self._lead()
        if req.error is not None:
            raise req.error
        return req.ok

    def commit_record(self, claim: Claim, slot: int, rec: CommandRecord, text: str | None = None,
                      parallel: bool = False) -> bool:
        """Commit one outcome, durably, before returning; True if it was written (the lease held).

        `text` is the value's JSON text if the caller encoded it already; `parallel`
        marks a task of a parallel group (written in completion order).

        The fast path of `submit` for a lone workflow: when no commit is in progress
        and nothing waits, this thread commits its outcome alone without building a
        request; otherwise the outcome joins the group commit.
        """
        lock = self._lock  # bare acquire/release, as in _hand_over: once per slot
        lock.acquire()
        store = self._store
        fast = not self._leading and not self._pending and store is not None
        if fast:
            self._leading = True
        lock.release()
        if not fast or store is None:
            return self.submit(_Request(record=PendingRecord(claim, slot, rec, text, parallel)))
        try:
            written = store.commit_record(claim, slot, rec, text, ttl=self._ttl, parallel=parallel)
            self.batches += 1
            self.commits += 1
            self.crowd = self.crowd * 0.9 + 0.1
            if self.metrics is not None:
                self.metrics.batch.observe(1)
        finally:
            if self._hand_over():
                self._lead()  # verdicts queued meanwhile, with nobody waiting for them
        return written

    def submit_later(self, req: _Request) -> None:
        """Queue a request nobody waits for; `req.then` is called once it was committed (or failed).

        If no commit is in progress the caller commits it at once, as `submit` would;
        otherwise it rides in the next commit and the caller goes on.
        """
        with self._lock:
            lead = not self._leading
            self._leading = True
            self._pending.append(req)
        if lead:
            self._lead()

    def _lead(self) -> None:
        again = True
        while again:
            with self._lock:
                batch, self._pending = self._pending, []
            try:
                store = self._store
                if store is None:
                    err = RuntimeError("the committer is stopped")
                    for r in batch:
                        r.error = err
                        self._answer(r)
                else:
                    self._commit(store, batch)
            finally:
                again = self._hand_over()

    def _hand_over(self) -> bool:
        """After a commit: wake the oldest waiter to commit what queued up; True if nobody waits for it."""
        # Bare acquire/release, and the common case (nothing queued) first: this runs
        # after every commit, a lone workflow's included, and a `with` block here cost
        # ~1,500 CPU instructions a slot (README, Performance).
        lock = self._lock
        lock.acquire()
        try:
            pending = self._pending
            if not pending:
                self._leading = False
                if self._stop_waiting:  # notify_all costs a few µs per commit even with nobody waiting
                    self._idle.notify_all()
                return False
            for r in pending:
                if r.done is not None:
                    r.lead = True
                    r.wake()
                    return False
            return True  # only requests nobody waits for: this thread commits them too
        finally:
            lock.release()

    @staticmethod
    def _answer(r: _Request) -> None:
        r.wake()
        if r.then is not None:
            try:
                r.then(r)
            except Exception:  # another workflow's bookkeeping must not fail this commit
                log.exception("a commit's follow-up failed")

    def _commit(self, store: WorkerStore, batch: list[_Request]) -> None:
        records: list[PendingRecord] = []
        finishes: list[tuple[Claim, Outcome]] = []
        for r in batch:
            if r.record is not None:
                records.append(r.record)
            if r.finish is not None:
                finishes.append(r.finish)
        try:
            written, finished = store.commit_batch(records, finishes=finishes, ttl=self._ttl)
        except BaseException as exc:  # noqa: BLE001 - hand the failure to every waiter
            for r in batch:
                r.error = exc
                self._answer(r)
            return
        self.batches += 1
        self.commits += len(records)
        self.crowd = self.crowd * 0.9 + len(records) * 0.1
        if self.metrics is not None:
            self.metrics.batch.observe(len(records) + len(finishes))
        answers = iter(written)
        verdicts = iter(finished)
        for r in batch:
            r.ok = next(answers) if r.record is not None else next(verdicts)
            self._answer(r)


def _store_marks(store: WorkerStore, claim: Claim) -> Callable[[int, str, int, float], None]:
    """A mark writer for a store without local files: each mark one write to the database."""

    def write_mark(slot: int, name: str, attempts: int, started_at: float) -> None:
        store.mark_started(claim, slot, name, attempts, started_at)

    return write_mark


def _owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    """Runs every runnable workflow of one database with the functions of one app.

    Args:
        path: the database file, or a PostgreSQL URL.
        registry: the app's workflows and activities.
        concurrency: workflows run at once (one thread each).
        ttl: lease length in seconds; renewed while a workflow runs.
        track_inflight: record that an activity started before running it.
        focus_cpu: while commits are crowded, run engine code on one CPU (engine.cpu_focus).
        clock: the live clock for `ctx.now()`.
        max_payload: the cap in bytes on every value recorded (else $REPLAYLOG_MAX_PAYLOAD, else
            1 MiB): an activity result over it is recorded as that activity's failure, a
            workflow result over it fails the workflow.
        on_event: called with (workflow id, event text) for the CLI's log.
        metrics: where to count latencies, batches and attempts (engine.telemetry; the
            caller serves them); None: nothing is counted.
        tracing: an OpenTelemetry span per run and per live activity attempt (needs
            opentelemetry-api; the application configures the provider).
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
    ) -> None:
        # A URL stays a string (a Path would fold its `//`).
        self.path: str | Path = path if isinstance(path, str) and is_postgres_url(path) else Path(path)
        self.registry = registry
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
        self.owner = _owner_id()
        self._host = socket.gethostname()
        self._stopping = _StopFlag()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._active: dict[str, Claim] = {}
        self._threads: list[threading.Thread] = []
        self._ready: queue.SimpleQueue[Claim | None] = queue.SimpleQueue()
        self._idle = 0  # pooled threads waiting on _ready with no claim promised to them
        self._claim_batch = max(1, self.concurrency // 4)
        self.committer = Committer(self.path, ttl, self.max_payload, metrics)
        self._board: MarkBoard | None = None
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
    def _where(self) -> str:
        """The database as messages may show it (a URL without its password)."""
        return redact_url(str(self.path)) if isinstance(self.path, str) else str(self.path)

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
            self._board = store.open_marks(self.owner, self.concurrency) if self.track_inflight else None
            store.worker_started(self.owner, host=self._host, pid=os.getpid(), app=self.registry.spec,
                                 names=self.names, ttl=self.ttl)
        except BaseException:
            if self._board is not None:
                self._board.close(remove=True)
            store.close()
            raise
        self.committer.start()
        try:
            self._loop(store, until_idle)
        except NotADatabaseError as exc:
            self._damaged(exc)
        finally:
            self._stopping.set()
            # Claims still queued run first (and are handed back); then one None per thread.
            for _ in self._threads:
                self._ready.put(None)
            for t in list(self._threads):
                t.join()
            self.committer.stop()
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

    def _loop(self, store: WorkerStore, until_idle: bool) -> None:
        # A store that is told of changes (PostgreSQL's LISTEN) ends the idle wait at once.
        store.wake_on_change(self._wake.set)
        last_version = -1
        next_lapse_check = 0.0
        next_renew = time.monotonic() + self.ttl / 3
        next_small_claim = 0.0
        dead: list[str] = []
        # The earliest wake time (epoch seconds) of a sleeping workflow of ours: one seek in the
        # store's wake index whenever we look, so the loop wakes at that time and never asks
        # after each sleeper. None: nobody sleeps on a timer or a deadline.
        next_wake: float | None = None
        while not self._stopping.is_set():
            if self._stop_requested:
                self.stop()
                break
            now = time.monotonic()
            version = store.data_version()
            due = next_wake is not None and self.clock() >= next_wake
            look = version != last_version or now >= next_lapse_check or due
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
            free = self.concurrency - len(self._active)
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
                        claims = store.claim(self.owner, ttl=self.ttl, limit=free, dead_owners=dead,
                                             names=self.names)
                        if self.metrics is not None:
                            self.metrics.claim.observe(time.perf_counter() - began)
                    except StoreBusyError as exc:
                        self._busy(exc)  # nothing was claimed: look again on a later pass
                        claims, last_version = [], -1
                    for claim in claims:
                        self._launch(claim)
            if seek_wake:
                next_wake = store.next_wake(self.names)
            if now >= next_renew:
                try:
                    self._renew(store)
                    next_renew = now + self.ttl / 3
                except StoreBusyError as exc:
                    # Commits kept the write lock past the busy timeout (a burst of them can
                    # starve this connection): the leases stand until they lapse, try again soon.
                    self._busy(exc)
                    next_renew = now + min(self.ttl / 10, 1.0)
            if until_idle and not self._active and not store.has_runnable(self.names):
                self.left_unknown = store.pending_unknown(self.names)
                return
            # While workflows run here, every commit of this worker's own changes the data
            # version: looking every 2 ms then is mostly work for nothing, and each look
            # takes the GIL from the workflow threads (it cost a lone workflow ~4% of its
            # slots). A run that ends sets _wake, so a finished slot is refilled at once.
            self._wake.wait(self.poll if not self._active else max(self.poll, BUSY_POLL))
            self._wake.clear()

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
        store.renew(claims, ttl=self.ttl, worker=self.owner)

    def _launch(self, claim: Claim) -> None:
        # Workflow threads are pooled: a thread and its connection outlive one workflow,
        # because starting a thread and opening a connection per workflow cost more than
        # running a short workflow does.
        with self._lock:
            self._active[claim.id] = claim
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
        if spawn:
            index = len(self._threads)
            t = threading.Thread(target=self._serve, args=(index,), name=f"replaylog-wf-{index}", daemon=True)
            self._threads.append(t)
            t.start()
        self._ready.put(claim)

    def _serve(self, index: int) -> None:
        """A pooled workflow thread: run claims one at a time until handed None.

        `index` is the thread's own record in the mark file (there are at most
        `concurrency` threads, and as many records).
        """
        me = _Thread(index)
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

    def _run_one(self, claim: Claim, me: _Thread) -> None:
        store = me.store
        if store is None:
            store = me.store = open_store(self.path, max_payload=self.max_payload)
        finishing = False
        me.inflight = False
        spans = None if self.tracing is None else self.tracing.run(claim.id, claim.workflow,
                                                                   store.trace_context(claim.id))
        ended: tuple[str, str | None] = ("interrupted", None)  # the run span's status, unless an outcome comes
        try:
            outcome = self._execute(store, claim, me, spans)
            self._keep_mark(store, me)  # an activity that ran and returned no JSON value, say
            if outcome is None:
                return
            ended = (str(outcome.status), outcome.error)
            # The verdict needs no wait: this thread takes its next workflow while the
            # verdict rides in the next group commit. The workflow stays active (its lease
            # renewed) until `_finished` hears that the verdict was written.
            finishing = True
            self.committer.submit_later(
                _Request(finish=(claim, outcome), then=lambda r: self._finished(claim, outcome, r)))
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
        except _RunInterrupted as stop:
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
            with self._lock:
                if not finishing:
                    self._active.pop(claim.id, None)
                self._idle += 1  # this pooled thread is free for the next claim
            if not finishing:
                self._wake.set()

    def _check_child(self, store: WorkerStore, slot: int, rec: CommandRecord) -> None:
        """Refuse a child workflow this app does not know, or whose id another workflow has, before it is recorded."""
        self.registry.workflow(rec.name)  # UnknownWorkflowError naming the known ones
        child_id = rec.value["id"]
        try:
            store.get_workflow(child_id)
        except UnknownWorkflowIdError:
            return
        raise DuplicateWorkflowIdError(f"slot {slot}: a workflow with id {child_id!r} already exists")

    def _keep_mark(self, store: WorkerStore, me: _Thread) -> None:
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

    def _finished(self, claim: Claim, outcome: Outcome, req: _Request) -> None:
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
                self._event(claim.id, f"{outcome.status} {detail}".rstrip(), str(outcome.status),
                            outcome.error if outcome.status == Status.FAILED else None)
        finally:
            with self._lock:
                self._active.pop(claim.id, None)
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

    def _execute(self, store: WorkerStore, claim: Claim, me: _Thread, spans: RunSpans | None) -> Outcome | None:
        try:
            fn = self.registry.workflow(claim.workflow)
        except UnknownWorkflowError as exc:
            return Outcome(status=Status.FAILED, error=f"UnknownWorkflowError: {exc}", error_kind="engine")
        # The claim loaded a short history along with its batch; a long one is loaded here.
        state = claim.state if claim.state is not None else store.load_state(claim.id)
        if self._stopping.is_set():
            raise WorkerStopping()
        committer = self.committer
        board = self._board
        metrics = self.metrics
        # Bound once: record and on_start run once per slot each.
        stopping = self._stopping
        commit = committer.commit_record
        write_mark: Callable[[int, str, int, float], None] | None = None
        if board is not None:
            write_mark = board.writer(me.index, claim.id, claim.epoch)
        elif self.track_inflight:
            write_mark = _store_marks(store, claim)  # a server's store: where every host sees it
        prior = None if claim.inflight_slot is None else (claim.inflight_slot, claim.inflight_attempts)
        clock = time.time
        focus = self.focus
        cap = self.max_payload
        cancels = committer.cancels
        wid = claim.id
        activity = SlotKind.ACTIVITY.value

        def record(slot: int, rec: CommandRecord, parallel: bool = False) -> None:
            # From a task thread (parallel) the workflow thread's CPU focus is not its to move.
            if focus is not None and not parallel:
                focus.engine_code(me, committer.crowd)
            # The value is encoded here, once: its size is checked against the cap before
            # anything is committed, and the store writes this text without encoding again.
            # (A clock read is a float: never near a cap, and the store encodes it.)
            text = None
            refused = None
            if rec.ok and rec.kind == activity:
                value = rec.value
                if type(value) is int:  # encode_value's int case, inline: the common value on this path
                    text = int.__repr__(value)
                    size = len(text)
                else:
                    text, size = encode_value(value)
                if size > cap:
                    # Retrying would not make the value smaller: the failure is recorded at once.
                    refused = error_text(PayloadTooLargeError(
                        over_cap(f"slot {slot}: the value activity {rec.name!r} returned", size, cap)))
                    rec = CommandRecord(activity, rec.name, False, None, refused, rec.attempts, rec.args)
                    text = None
            elif rec.kind == SlotKind.CHILD and rec.ok:
                self._check_child(store, slot, rec)
            elif rec.kind == EVENT:
                text, size = encode_value(rec.value)
                if size > cap:
                    # Refused before anything is written: ctx.set_event raises it, its slot stays free.
                    raise PayloadTooLargeError(over_cap(f"slot {slot}: the value of event {rec.name!r}", size, cap))
            elif not rec.ok:
                # An error text is stored too: cut to the cap, and made UTF-8 (an exception
                # may carry a lone surrogate, from a file name say), or the commit would fail.
                error = rec.error or ""
                fitted = fit_text(error, cap, f"slot {slot}: the error text of activity {rec.name!r}")
                if fitted is not error:
                    refused = fitted
                    rec = rec._replace(error=fitted)
            try:
                if metrics is None:
                    written = commit(claim, slot, rec, text, parallel)
                else:
                    began = time.perf_counter()
                    written = commit(claim, slot, rec, text, parallel)
                    metrics.slot_commit.observe(time.perf_counter() - began)
            except Exception as exc:  # the store failed: not the workflow's outcome
                raise _CommitFailed(exc) from exc
            if not written:
                raise LeaseLostError(claim.id)
            if not parallel:
                me.inflight = False  # the slot's outcome is recorded: nothing of it is in flight
            else:
                with group_lock:
                    if marked[0] == slot:
                        me.inflight = False  # the thread's mark is this task's
            if cancels and wid in cancels:
                # The commit came upon an operator's cancel request: the next ctx call raises it
                # (a parallel group's tasks run on; the call after the group raises it).
                reason = cancels.pop(wid)
                if ctx.cancel_requested is None:
                    ctx.cancel_requested = reason
            if stopping.up:
                raise WorkerStopping()  # the current slot is committed: stop here
            if refused is not None:
                # The workflow code sees what a replay of this slot will show it.
                raise ActivityError(slot, rec.name, refused, rec.attempts)

        def on_start(slot: int, name: str, attempt: int) -> None:
            # Stop between slots: the slot before this one is already committed.
            if stopping.up:
                raise WorkerStopping()
            if me.focused and focus is not None:
                focus.activity(me)  # the activity, and whatever it starts, may use every CPU
            if write_mark is not None:
                # Before the activity runs; `attempt` counts on from the starts of earlier
                # runs (crashed workers included). No commit and no wait (engine.marks).
                write_mark(slot, name, attempt, clock())
                me.inflight = True
            if spans is not None:
                spans.attempt_started(slot, name, attempt)

        def sleep(seconds: float) -> None:
            if self._stopping.wait(seconds):
                raise WorkerStopping()

        # A parallel group's tasks share the workflow thread's one mark record (engine.marks):
        # it holds the latest task started, written under this lock so two tasks never tear
        # it. After a crash that task counts its attempts on and shows as possibly run; the
        # group's other unrecorded tasks run again from their first attempt.
        group_lock = threading.Lock()
        marked = [-1]  # the slot the thread's mark is of

        def on_task_start(slot: int, name: str, attempt: int) -> None:
            if stopping.up:
                raise WorkerStopping()
            if spans is not None:
                spans.attempt_started(slot, name, attempt)
            if write_mark is not None:
                with group_lock:
                    write_mark(slot, name, attempt, clock())
                    marked[0] = slot
                    me.inflight = True

        def run_group(thunks: Sequence[Callable[[], None]], max_concurrency: int) -> None:
            if me.focused and focus is not None:
                focus.activity(me)  # the task threads inherit this thread's CPUs: all of them
            with ThreadPoolExecutor(max_workers=min(max_concurrency, len(thunks)),
                                    thread_name_prefix=f"replaylog-task-{me.index}") as pool:
                for future in [pool.submit(thunk) for thunk in thunks]:
                    future.result()

        def on_attempt_end(slot: int, name: str, attempt: int, error: str | None) -> None:
            if metrics is not None:
                metrics.attempt_ended(name, error is not None)
            if spans is not None:
                spans.attempt_ended(slot, attempt, error)

        hooks = ParallelHooks(run_group, functools.partial(record, parallel=True), on_task_start)
        ctx = Context(
            state, workflow_id=claim.id, activities=self.registry.activities, clock=self.clock,
            sleep=sleep, record=record, on_start=on_start, prior=prior, cancel=claim.cancel,
            parallel=hooks, on_attempt_end=None if metrics is None and spans is None else on_attempt_end,
        )
        try:
            outcome = execute(fn, ctx, state)
        except _CommitFailed as failed:
            raise failed.exc from None  # a worker error: the workflow is handed back (_run_one)
        except (WorkerStopping, LeaseLostError, Exception):
            raise
        except BaseException as exc:  # KeyboardInterrupt, SystemExit, …: hand the workflow back
            raise _RunInterrupted(exc, ctx.interrupted_in or "workflow code") from exc
        if outcome.status == Status.FAILED and outcome.error:
            error = fit_text(outcome.error, cap, "the workflow's error text")
            if error is not outcome.error:
                return replace(outcome, error=error)
        elif outcome.status == Status.COMPLETED:
            # The store encodes the result again when it writes the verdict: once per
            # workflow, not per slot.
            size = encode_value(outcome.result)[1]
            if size > cap:
                error = error_text(PayloadTooLargeError(over_cap("the workflow's result", size, cap)))
                return replace(outcome, status=Status.FAILED, result=None, error=error, error_kind="engine")
        return outcome
