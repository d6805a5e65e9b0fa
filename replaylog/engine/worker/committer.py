"""Group commit: one write connection commits every waiting outcome and verdict in one transaction.

Each outcome is durable before its workflow continues (or, queued by `enqueue`, before its
workflow's next activity runs); writes are fenced by the lease epoch (the store refuses a
worker that lost its lease), so no slot is recorded twice.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable

from replaylog.engine.core import CommandRecord, Outcome
from replaylog.engine.errors import StoreBusyError
from replaylog.engine.store import Claim, ClaimAsk, PendingRecord, StartMark, WorkerStore, is_damaged, open_store
from replaylog.engine.telemetry import Metrics

log = logging.getLogger("replaylog.worker")

# How long a thread whose request was committed waits for the baton (Committer.pass_baton)
# before it goes on by itself, beyond two commits' time (its wait spans the commit in progress
# and its own): the bound on a chain held up by a thread that left engine code without
# passing it on (an activity that returned at once its last times, not this time). Python's
# own switch interval: a thread waiting for the GIL is as patient. (Not shorter than a commit,
# or on a slow disk every waiter would wake, and take the GIL, several times a commit.)
BATON_WAIT = 0.005
# The longest an outcome queued by `enqueue` waits for a commit while its thread runs workflow code
# (the worker's loop commits it then: `commit_stale`), in seconds. Two of the loop's looks at most.
DEFERRED_FOR = 0.05
# Outcomes a commit (the moving average, Committer.crowd) below which one workflow is taken to commit
# alone: its outcome waits for its next start mark even with no commit in progress (Committer.enqueue).
ALONE_BELOW = 1.5


class Request:
    """One thing to commit (an outcome or a run's verdict) and its answer.

    A plain class with slots, and a bare lock to wait on instead of an Event: one is
    made per slot, and an Event (a Condition around a lock) cost more than the rest.
    The lock exists only when the request has to wait for another thread's commit.
    """

    __slots__ = ("answered", "ask", "done", "early", "error", "finish", "lead", "mark", "ok", "patient", "record",
                 "taken", "then")

    def __init__(self, record: PendingRecord | None = None, finish: tuple[Claim, Outcome] | None = None,
                 then: Callable[[Request], None] | None = None, ask: ClaimAsk | None = None) -> None:
        self.record = record
        self.finish = finish
        # The worker loop's claim, made in the commit's transaction (Committer.claim).
        self.ask = ask
        # For a request nobody waits for (`submit_later`): called once it was committed or failed.
        self.then = then
        # Held while the request waits; released when it was committed, or when its
        # thread is to commit next (`lead`).
        self.done: threading.Lock | None = None
        self.ok = False
        self.answered = False  # committed (`ok` holds the answer); its thread may not be woken yet
        self.patient = False  # its thread waits with a time limit: it may be woken in turn (the baton)
        self.error: BaseException | None = None
        self.lead = False
        # Queued by `enqueue`: its thread went on and does not wait yet (`wait_for`), so it
        # cannot be handed the lead.
        self.early = False
        # The start mark of its workflow's next activity, written in this request's commit
        # (`add_mark`); `taken`: a leader took the request into a commit (a mark comes too late).
        self.mark: StartMark | None = None
        self.taken = False

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

    While commits are crowded (`baton_at` outcomes a commit) the threads a commit answered
    are woken one at a time, not all at once (`pass_baton`): only one thread runs Python at
    a time anyway (the GIL), and a crowd woken together spent more CPU on wake-ups and on
    waiting for the GIL than on the slots' own work. The leader wakes the first; each woken
    thread wakes the next when it leaves engine code: when it waits for its next commit or
    leads one, before an activity, a wait or its run's end. It pays where the threads share one CPU
    (engine.cpu_focus), which lets the one woken run only once the one before sleeps: 50
    workflows x 1,000 slots on 2 vCPUs, with CpuFocus keeping quick activities on that CPU,
    ~4.2 -> ~1.5 context switches a slot and ~21,000 -> ~31,000 slots/s (docs/performance.md,
    "Crowded commits"). Spread over the CPUs it cost ~0.5 context switches a slot more (the one
    woken runs at once on the other CPU and waits for the GIL): it is off there.
    """

    def __init__(self, path: str | os.PathLike[str], ttl: float, max_payload: int | None = None,
                 metrics: Metrics | None = None, wake_clock: Callable[[], float] | None = None,
                 baton_at: float | None = None) -> None:
        """`baton_at`: outcomes a commit (the moving average, `crowd`) from which the threads a
        commit answered are woken in turn (see the class docstring); None: always all at once."""
        self._path = path
        self._baton_at = math.inf if baton_at is None else baton_at
        self._commit_s = 0.0  # a group commit's time, a moving average (how long a patient wait lasts)
        # The worker's clock, which recorded wake times and deadlines are due by (a child's deadline
        # is set by the commit that starts it).
        self._wake_clock = wake_clock
        self.metrics = metrics  # batch sizes (engine.telemetry), None: not counted
        self._ttl = ttl
        self._max_payload = max_payload
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending: list[Request] = []
        # A commit is in progress (its leader holds the connection). Set and cleared under
        # `_lock`; read without it, only as a hint (`enqueue` looks again under the lock).
        self.leading = False
        self._store: WorkerStore | None = None
        self._stop_waiting = False
        self.cancels: dict[str, str] = {}
        self.batches = 0
        self.commits = 0
        self.marks_ridden = 0  # start marks written in a commit's transaction (`add_mark`)
        self.enqueued = 0  # requests queued by `enqueue`
        self.claims_ridden = 0  # the worker loop's claims made in a group commit (`claim`)
        self.verdicts_ridden = 0  # run verdicts written with their run's last outcome (`add_finish`)
        # Called (once, until `commit_stale` finds commits crowded again) when an outcome is queued
        # with nobody leading: the worker's loop then looks every half of DEFERRED_FOR (`watching`).
        self.on_defer: Callable[[], None] | None = None
        self.watching = False
        self.stale_commits = 0  # commits of queued outcomes whose threads were slow to come back (`commit_stale`)
        # Outcomes per commit, a moving average (updated by the committing thread only;
        # others read it, and a stale read only delays CpuFocus (engine.cpu_focus) by a commit).
        self.crowd = 0.0
        # The requests committed whose threads are not woken yet, oldest first (pass_baton).
        self._baton: deque[Request] = deque()

    def pass_baton(self) -> None:
        """Wake the next thread whose request was committed, if one waits to be (see the class docstring).

        Called by a workflow thread as it leaves engine code (before it waits for its own
        commit, before an activity, a wait or its run's end): the thread woken then finds
        the GIL free instead of taking the CPU from the thread that woke it.
        """
        baton = self._baton
        while baton:
            try:
                r = baton.popleft()
            except IndexError:  # another thread took the last one
                return
            if r.done is not None:  # not gone on by itself (BATON_WAIT)
                r.wake()
                return

    def start(self) -> None:
        """Open the write connection."""
        self._store = open_store(self._path, max_payload=self._max_payload, wake_clock=self._wake_clock)
        # The cancel requests its slot commits come upon (workflow id → reason): the
        # workflow threads take theirs out after each commit.
        self.cancels = self._store.cancels

    def stop(self) -> None:
        """Wait for the commit in progress and what is queued behind it, then close the connection."""
        with self._lock:
            while self.leading or self._pending:
                self._stop_waiting = True
                self._idle.wait()
            store, self._store = self._store, None
        while self._baton:
            self.pass_baton()
        if store is not None:
            store.close()

    def submit(self, req: Request) -> bool:
        """Commit a request (alone, or with others in one transaction); True if it was written."""
        with self._lock:
            lead = not self.leading
            if lead:
                self.leading = True
            else:
                done = req.done = threading.Lock()
                done.acquire()
                req.patient = self.crowd >= self._baton_at and req.ask is None  # (the loop's claim: no baton)
            self._pending.append(req)
        if not lead:
            self._sleep(req, done)
            lead = req.lead
        if lead:
            self._lead()
        if req.error is not None:
            raise req.error
        return req.ok

    def enqueue(self, req: Request, unled: bool = True) -> bool:
        """Queue `req` for the next commit and go on (wait for it with `wait_for`); False: not queued.

        Trick "marks ride the commit" (engine.worker.run, WorkflowRun.record): the workflow
        thread goes on to its next activity while its outcome waits for the commit, adds that
        activity's start mark to the request (`add_mark`) and only then waits (`wait_for`), once
        for both. While another thread leads a commit, the request joins the one after it. While
        nobody does and commits carry one outcome each (`crowd` under `ALONE_BELOW`: one workflow
        commits), it waits for its own thread, which commits it with its mark in one statement
        (`wait_for` leads) unless another commit takes it first: a lone workflow's slot is one
        transaction where it was two (its outcome's, and its next mark's sent alone). In a crowd,
        with nobody leading, the caller commits at once the ordinary way (False): a commit that
        waited for its thread's code there left the server idle meanwhile. An outcome
        whose thread is slow to come back for it (its code runs long between two activities) is
        committed by the worker's loop within `DEFERRED_FOR` (`commit_stale`). Measured numbers:
        docs/performance.md, "One workflow alone: its outcome waits for its next start mark".

        `unled=False` (a worker whose loop does not watch for stale outcomes: its marks are not
        the store's): queued only while another thread leads a commit, which then commits it too.
        """
        lock = self._lock
        lock.acquire()
        wake = None
        if not self.leading:
            if self.crowd >= ALONE_BELOW or not unled:
                lock.release()
                return False
            if not self.watching:
                self.watching = True
                wake = self.on_defer
        done = req.done = threading.Lock()
        done.acquire()
        req.early = True
        self._pending.append(req)
        self.enqueued += 1
        lock.release()
        if wake is not None:
            wake()
        return True

    def commit_stale(self, seen: int) -> int:
        """Commit the queued outcomes nobody leads a commit for, if none was queued since `enqueued` was `seen`.

        Called by the worker's loop every half of `DEFERRED_FOR` while `watching`, with what the
        call before returned: an outcome queued by `enqueue` whose thread has not come back for
        it since (its code runs long) is committed here, so that it is durable within that bound
        whatever the workflow code does. Once commits are crowded again and no outcome waits
        with nobody leading, `watching` ends (the next such outcome calls `on_defer` again).
        Returns `enqueued` now.
        """
        lock = self._lock
        lock.acquire()
        now = self.enqueued
        unled = not self.leading and any(r.early for r in self._pending)
        stale = unled and now == seen and self._store is not None
        if stale:
            self.leading = True
        elif not unled and self.crowd >= ALONE_BELOW:
            self.watching = False  # (under the lock: an outcome queued unled after this wakes the loop)
        lock.release()
        if stale:
            self.stale_commits += 1
            self._lead()
        return now

    def add_mark(self, req: Request, mark: StartMark) -> bool:
        """Write `mark` in the transaction that commits `req` (queued by `enqueue`); False if that commit began."""
        lock = self._lock
        lock.acquire()
        added = not req.taken
        if added:
            req.mark = mark
        lock.release()
        return added

    def add_finish(self, req: Request, verdict: Request) -> bool:
        """Write `verdict` (a run's verdict) in the transaction that commits `req` (its run's last outcome,
        queued by `enqueue`), after that outcome; False if that commit began.

        `req` then carries the verdict: its answer is both writes' (the verdict is written only if
        the outcome was: the lease fences both), and `verdict.then` is called with it. Nobody
        waits for it (WorkflowRun.ride says why the outcome need not be waited for).
        """
        lock = self._lock
        lock.acquire()
        added = not req.taken
        if added:
            req.finish = verdict.finish
            req.then = verdict.then
            self.verdicts_ridden += 1
        lock.release()
        return added

    def lead_queued(self) -> None:
        """Commit what is queued now if nobody leads a commit (this thread leads it); else the leader will.

        For a request queued by `enqueue` with nobody leading whose thread will not wait for it
        (its run's verdict rode it: `add_finish`): a lone workflow's last outcome and its verdict
        are then committed at once, in one transaction.
        """
        lock = self._lock
        lock.acquire()
        lead = not self.leading and bool(self._pending)
        if lead:
            self.leading = True
        lock.release()
        if lead:
            self._lead()

    def wait_for(self, req: Request) -> bool:
        """Wait for a request queued by `enqueue`, as `submit` does (leading the commit if nobody does);
        True if it was written."""
        lock = self._lock
        lock.acquire()
        req.early = False  # from now on it may be handed the lead
        done = req.done
        lead = done is not None and not self.leading
        alone = False
        if done is not None and not lead:
            req.patient = self.crowd >= self._baton_at  # (woken in turn once committed: pass_baton)
        if lead:
            self.leading = True
            pending = self._pending
            alone = len(pending) == 1 and pending[0] is req
            if alone:  # (a lone workflow's outcome, with its mark: the common case, without `_lead`'s loop)
                self._pending = []
                req.taken = True
                req.done = None
        lock.release()
        if alone:
            self._commit_alone(req)
        elif lead:
            self._lead()  # (commits it, with what else is queued: its lock is released unawaited)
        elif done is not None:
            self._sleep(req, done)
            if req.lead:
                self._lead()
        if req.error is not None:
            raise req.error
        return req.ok

    def _sleep(self, req: Request, done: threading.Lock) -> None:
        """Sleep until `req` is committed or its thread is handed the lead (`done` released).

        The next committed thread is woken first (this one sleeps now: it runs). A patient
        request (queued while commits were crowded) whose commit ended but whose thread was
        not woken in time (the baton held up) goes on by itself.
        """
        if self._baton:
            self.pass_baton()
        if req.patient:
            wait = BATON_WAIT + 2 * self._commit_s
            while not done.acquire(timeout=wait):
                if req.answered and req.done is not None:
                    req.done = None  # a later pass_baton skips it
                    break
        else:
            done.acquire()

    def _commit_alone(self, req: Request) -> None:
        """Commit one queued outcome (and the mark on it) by this thread, which leads; then hand over."""
        try:
            store = self._store
            record = req.record
            if store is None or record is None:
                raise RuntimeError("the committer is stopped")
            mark = req.mark
            written, _ = store.commit_batch((record,), ttl=self._ttl, marks=() if mark is None else (mark,))
            req.ok = written[0]
            self._counted(1, 0 if mark is None else 1, 1)
        except BaseException as exc:  # noqa: BLE001 - raised by wait_for, as any commit's failure
            req.error = exc
        finally:
            req.answered = True
            if self._hand_over():
                self._lead()  # verdicts queued meanwhile, with nobody waiting for them

    def _counted(self, records: int, marks: int, requests: int) -> None:
        """Count a commit: its outcomes, the marks that rode it, and its requests (the metrics' batch size)."""
        self.batches += 1
        self.commits += records
        self.marks_ridden += marks
        self.crowd = self.crowd * 0.9 + records * 0.1
        if self.metrics is not None:
            self.metrics.batch.observe(requests)

    def commit_record(self, claim: Claim, slot: int, rec: CommandRecord, text: str | None = None,
                      parallel_group: int | None = None, traceback: str | None = None) -> bool:
        """Commit one outcome, durably, before returning; True if it was written (the lease held).

        `text` is the value's JSON text if the caller encoded it already; `parallel_group`
        (the slot of the group's first task) marks a task of a parallel group (written in
        completion order); `traceback` is a failed activity's.

        The fast path of `submit` for a lone workflow: when no commit is in progress
        and nothing waits, this thread commits its outcome alone without building a
        request; otherwise the outcome joins the group commit.
        """
        lock = self._lock  # bare acquire/release, as in _hand_over: once per slot
        lock.acquire()
        store = self._store
        fast = not self.leading and not self._pending and store is not None
        if fast:
            self.leading = True
        lock.release()
        if not fast or store is None:
            return self.submit(Request(record=PendingRecord(claim, slot, rec, text, parallel_group, traceback)))
        if self._baton:
            self.pass_baton()  # the commit below lets go of the GIL
        try:
            written = store.commit_record(claim, slot, rec, text, ttl=self._ttl, parallel_group=parallel_group,
                                          traceback=traceback)
            self._counted(1, 0, 1)
        finally:
            # _hand_over's common case (nothing queued meanwhile) inline: one call fewer a slot.
            lock.acquire()
            if self._pending:
                lock.release()
                if self._hand_over():
                    self._lead()  # verdicts queued meanwhile, with nobody waiting for them
            else:
                self.leading = False
                if self._stop_waiting:
                    self._idle.notify_all()
                lock.release()
        return written

    def submit_later(self, req: Request) -> None:
        """Queue a request nobody waits for; `req.then` is called once it was committed (or failed).

        If no commit is in progress the caller commits it at once, as `submit` would;
        otherwise it rides in the next commit and the caller goes on.
        """
        with self._lock:
            lead = not self.leading
            self.leading = True
            self._pending.append(req)
        if lead:
            self._lead()

    def claim(self, ask: ClaimAsk) -> list[Claim]:
        """The worker loop's claim, made in a group commit's transaction (the store's `commit_batch(claims=)`).

        It rides the commit in progress's successor, or leads one of its own when nobody
        leads (engine.store.sqlite.commit, `Commits._ride`, says why). Raises the claim's
        own failure, and a failed commit's StoreBusyError or damaged-file error; any other
        failure of the commit it rode is its outcomes' to report (their threads do): nothing
        was claimed, and the loop looks again.
        """
        try:
            self.submit(Request(ask=ask))
        except Exception as exc:
            if isinstance(exc, StoreBusyError) or is_damaged(exc):
                raise
            log.debug("a claim rode a commit that failed (%s): nothing was claimed", exc)
            return []
        if ask.error is not None:
            raise ask.error
        self.claims_ridden += 1
        return ask.claims or []

    def _lead(self) -> None:
        if self._baton:
            self.pass_baton()  # the commit lets go of the GIL: the next committed thread runs
        again = True
        while again:
            with self._lock:
                batch, self._pending = self._pending, []
                for r in batch:
                    r.taken = True  # its mark, if it has none yet, no longer rides (add_mark)
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
                self.leading = False
                if self._stop_waiting:  # notify_all costs a few µs per commit even with nobody waiting
                    self._idle.notify_all()
                return False
            for r in pending:
                if r.done is not None and not r.early:
                    r.lead = True
                    r.wake()
                    return False
            return True  # only requests nobody waits for: this thread commits them too
        finally:
            lock.release()

    @staticmethod
    def _answer(r: Request) -> None:
        r.wake()
        if r.then is not None:
            try:
                r.then(r)
            except Exception:  # another workflow's bookkeeping must not fail this commit
                log.exception("a commit's follow-up failed")

    def _commit(self, store: WorkerStore, batch: list[Request]) -> None:
        records: list[PendingRecord] = []
        finishes: list[tuple[Claim, Outcome]] = []
        marks: list[StartMark] = []
        asks: list[ClaimAsk] = []
        for r in batch:
            if r.record is not None:
                records.append(r.record)
            if r.finish is not None:
                finishes.append(r.finish)
            if r.mark is not None:
                marks.append(r.mark)
            if r.ask is not None:
                asks.append(r.ask)
        began = time.perf_counter()
        try:
            if asks:
                written, finished = store.commit_batch(records, finishes=finishes, ttl=self._ttl, marks=marks,
                                                       claims=asks)
            else:
                written, finished = store.commit_batch(records, finishes=finishes, ttl=self._ttl, marks=marks)
        except BaseException as exc:  # noqa: BLE001 - hand the failure to every waiter
            for r in batch:
                r.error = exc
                self._answer(r)
            return
        self._commit_s = self._commit_s * 0.9 + (time.perf_counter() - began) * 0.1
        self._counted(len(records), len(marks), len(records) + len(finishes))
        answers = iter(written)
        verdicts = iter(finished)
        baton = self._baton
        claimed: list[Request] = []
        for r in batch:
            if r.ask is not None:
                # Answered after every verdict's follow-up: a workflow claimed again in this very
                # commit is then no longer the worker's under its old claim when the loop launches it.
                claimed.append(r)
                continue
            if r.record is None:
                r.ok = next(verdicts)
            elif r.finish is None:
                r.ok = next(answers)
            else:  # an outcome and its run's verdict (add_finish): both written, or neither was
                written_too = next(answers)
                r.ok = next(verdicts) and written_too
            r.answered = True
            if r.patient and r.done is not None:  # (patient: it queued while commits were crowded)
                baton.append(r)  # woken in turn (pass_baton)
            else:
                self._answer(r)
        for r in claimed:
            r.ok = r.answered = True
            self._answer(r)
        self.pass_baton()
