"""One run of one claimed workflow: the Context's hooks (record, on_start, sleep, parallel) as methods.

The run replays the workflow's history in memory and executes the rest live; every new
outcome is committed (lease-fenced, `Committer`) before the workflow's next activity runs,
and before its code continues, but on PostgreSQL while another thread leads a commit or
the workflow commits alone: then the code runs on to its next activity while the outcome
waits for the next commit, which that activity's start mark joins (`WorkflowRun.record`,
"marks ride the commit").
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Final

from replaylog.engine.app import Registry
from replaylog.engine.attempt_watch import AttemptWatch
from replaylog.engine.core import (
    EVENT,
    CommandRecord,
    Context,
    Outcome,
    ParallelHooks,
    RunSuspended,
    child_act_refused,
    child_act_target,
    error_text,
    execute,
)
from replaylog.engine.cpu_focus import CpuFocus
from replaylog.engine.errors import (
    ActivityError,
    ChildWorkflowClosedError,
    DuplicateWorkflowIdError,
    LeaseLostError,
    PayloadTooLargeError,
    UnknownWorkflowError,
    UnknownWorkflowIdError,
)
from replaylog.engine.marks import Mark, MarkBoard
from replaylog.engine.store import Claim, PendingRecord, WorkerStore, encode_value, fit_text, over_cap
from replaylog.engine.telemetry import Metrics, RunSpans
from replaylog.engine.vocab import FINISHED, SlotKind, Status
from replaylog.engine.worker.activity_loop import ActivityLoop
from replaylog.engine.worker.committer import ALONE_BELOW, Committer, Request

log = logging.getLogger("replaylog.worker")

# Bound once: compared on every slot (a global is cheaper to read than an enum member).
# Final, so that mypyc keeps each in a C static: any other module global it looks up in the
# module's dict on every read (~130 CPU instructions).
_ACTIVITY: Final = SlotKind.ACTIVITY.value
# Where start marks are not the store's (a mark file, or none), how many of a run's outcomes
# may queue behind a commit in progress (WorkflowRun.record) so that the last of a short run
# carries its verdict (WorkflowRun.ride). Past them a run's outcomes wait at once, as before:
# a queued one cost a long run in a crowd more than it saved (50 workflows x 400 slots on 2 vCPUs,
# five runs each in turns: every outcome queued, median 7,894 slots/s against 8,602).
QUEUED_SLOTS: Final = 8
_STARTS_CHILD: Final = frozenset((SlotKind.CHILD.value, SlotKind.CHILD_START.value))
_CHILD_ACTS: Final = frozenset((SlotKind.CHILD_SIGNAL.value, SlotKind.CHILD_CANCEL.value))
# When a mark says an activity started: the wall clock, whatever clock the workflows read.
_wall_clock: Final = time.time


class PooledThread:
    """What a pooled workflow thread keeps from slot to slot and from run to run.

    A plain object with slots rather than a threading.local: the slot path reads and
    writes these several times per slot, and each access to a threading.local cost
    ~1,000 CPU instructions (README, Performance).
    """

    __slots__ = ("began", "focused", "index", "inflight", "store", "timing")

    def __init__(self, index: int) -> None:
        self.index = index  # the thread's own record in the mark file
        self.focused = False  # moved to the focus CPU (CpuFocus)
        self.timing: str | None = None  # the activity CpuFocus times, and when it began
        self.began = 0.0
        # The run's latest start mark (the thread's record) is of an activity with no
        # recorded outcome yet.
        self.inflight = False
        self.store: WorkerStore | None = None  # the thread's own connection, opened on first use


class StopFlag(threading.Event):
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


# Heartbeats of an attempt without a heartbeat timeout are written at most this often (seconds):
# they only show progress and carry details to the next attempt; nobody is waiting on them.
BEAT_EVERY = 1.0


class GroupBeats:
    """The heartbeats of a parallel group's tasks, handed from their threads to the workflow thread,
    which owns the store connection and writes them (WorkflowRun._flush_beats).

    Each task has its own in-flight record (its lane: the k-th task of the group is lane k): its
    latest heartbeat (slot, attempt, details and time), due when that task's next heartbeat is
    under its heartbeat timeout, so that a frozen worker's group is taken over as soon as any of
    its tasks is overdue, and every task's details reach its next attempt.
    """

    __slots__ = ("base", "changed", "latest", "lock", "subjects", "wake", "watched", "written_at")

    def __init__(self, base: int) -> None:
        self.base = base  # the group's first slot: a task's lane is its slot - base + 1
        self.lock = threading.Lock()
        self.wake = threading.Event()  # set when a task beats, a watch starts or ends, a task ends
        self.latest: dict[int, tuple[int, str, int, Any]] = {}  # by lane: a heartbeat not written yet
        self.subjects: dict[int, tuple[int, str, int]] = {}  # by lane: the (slot, name, attempt) it is of
        # By lane: the attempt watched under a heartbeat timeout, with that timeout.
        self.watched: dict[int, tuple[AttemptWatch, float]] = {}
        self.changed: set[int] = set()  # lanes whose watch started or ended: their due time moves
        self.written_at: dict[int, float] = {}  # by lane: time.monotonic() of the last write

    def lane(self, slot: int) -> int:
        """The lane of the group's task at `slot`."""
        return slot - self.base + 1

    def post(self, slot: int, name: str, attempt: int, details: Any) -> None:
        """A task's heartbeat (from its thread)."""
        with self.lock:
            self.latest[self.lane(slot)] = (slot, name, attempt, details)
        self.wake.set()

    def watch(self, slot: int, name: str, attempt: int, watch: AttemptWatch, heartbeat_timeout: float) -> None:
        """A task's attempt starts under a heartbeat timeout (from its thread)."""
        lane = self.lane(slot)
        with self.lock:
            self.watched[lane] = (watch, heartbeat_timeout)
            self.subjects[lane] = (slot, name, attempt)
            self.changed.add(lane)
        self.wake.set()

    def unwatch(self, slot: int) -> None:
        """A task's attempt under a heartbeat timeout ended (from its thread)."""
        lane = self.lane(slot)
        with self.lock:
            self.watched.pop(lane, None)
            self.changed.add(lane)
        self.wake.set()

    def take(self) -> list[tuple[int, tuple[int, str, int], Any, bool, float | None]]:
        """What to write now, per lane: (lane, (slot, name, attempt), details, beat, due wall time or None).

        A lane is written when its watch started or ended, or when it beat: at once under a
        watch, else at most once a second (progress only); a beat taken too soon stays for later.
        """
        now = time.monotonic()
        out = []
        with self.lock:
            for lane in sorted(self.changed | self.latest.keys()):
                watched = self.watched.get(lane)
                latest = self.latest.get(lane)
                if (lane not in self.changed and watched is None
                        and now - self.written_at.get(lane, -math.inf) < BEAT_EVERY):
                    continue  # progress only, nobody watches: at most once a second
                self.latest.pop(lane, None)
                if latest is not None:
                    self.subjects[lane] = latest[:3]
                subject = self.subjects.get(lane)
                if subject is None:
                    continue
                due = None if watched is None else _wall_clock() + (watched[0].beat_at + watched[1] - now)
                out.append((lane, subject, None if latest is None else latest[3], latest is not None, due))
                self.written_at[lane] = now
            self.changed.clear()
        return out


class WorkerStopping(BaseException):
    """Raised in a workflow thread when the worker stops: the workflow is handed back."""


class CommitFailed(BaseException):
    """A commit of an outcome raised (the store failed): a BaseException, so that workflow code
    cannot catch it and the core cannot take it for the workflow's own failure."""

    def __init__(self, exc: Exception) -> None:
        super().__init__(exc)
        self.exc = exc


class RunInterrupted(BaseException):
    """A run stopped by a BaseException that is not the engine's own, and where it was raised."""

    def __init__(self, exc: BaseException, where: str) -> None:
        super().__init__(exc, where)
        self.exc = exc
        self.where = where


@dataclass(frozen=True, slots=True)
class RunParts:
    """What every run of one worker shares.

    Attributes:
        registry: the app's workflows and activities.
        committer: the worker's group commit.
        stopping: raised when the worker stops: a run stops after its current slot.
        clock: the live clock for `ctx.now()`.
        max_payload: the cap in bytes on every value recorded.
        event: says what happened to a workflow, (workflow id, text, event kind, error), for the CLI's log.
        focus: CPU focus of engine code while commits are crowded (engine.cpu_focus), or None.
        board: the mark file of this host's database (engine.marks), or None.
        marks_in_store: in-flight marks are tracked and there is no mark file (a server's
            store): each mark is one write to the database, where every host sees it.
        metrics: commit latencies and activity attempts are counted there (engine.telemetry), or None.
        activities: the worker's event loop for `async def` activities.
        max_slots: the most slots one run's history may hold (engine.core.HistoryTooLongError past it), or None.
        lend_mark, return_mark: borrow a spare record of `board` (for a parallel group's task, or the
            mark of an outcome whose commit nobody waits for: WorkflowRun.ride) (None: none free), and
            give it back.
        fold_marks: keeps marks in the database from any thread (on a connection of its own), or None.
    """

    registry: Registry
    committer: Committer
    stopping: StopFlag
    clock: Callable[[], float]
    max_payload: int
    event: Callable[[str, str, str, str | None], None]
    focus: CpuFocus | None = None
    board: MarkBoard | None = None
    marks_in_store: bool = False
    metrics: Metrics | None = None
    activities: ActivityLoop = field(default_factory=ActivityLoop)
    max_slots: int | None = None
    lend_mark: Callable[[], int | None] | None = None
    return_mark: Callable[[int], None] | None = None
    fold_marks: Callable[[list[Mark]], None] | None = None


class WorkflowRun:
    """One run of a claimed workflow on a pooled thread, from its history to its outcome.

    The Context calls `record` with each live outcome (committed before it returns, or
    before anything else happens: `_settle`),
    `on_start` before each live activity attempt and `sleep` between attempts; a parallel
    group's task threads call `record_task` and `on_task_start`. Each task keeps its start
    marks in a lane of its own (engine.marks: a spare record borrowed for the group; on a
    server's store, a row): after a crash every unrecorded task of the group counts its
    attempts on and shows as possibly run.
    """

    __slots__ = ("_beats", "_cancels", "_claim", "_commit", "_group_beats", "_group_lock", "_lent_marks", "_marked",
                 "_me", "_owner", "_parts", "_queue_left", "_recorded_tasks", "_spans", "_store", "_task_marks",
                 "_unsettled", "_watches", "_write_mark", "ctx")

    def __init__(self, parts: RunParts, store: WorkerStore, claim: Claim, me: PooledThread,
                 spans: RunSpans | None = None) -> None:
        self._parts = parts
        self._spans = spans  # this run's OpenTelemetry spans (engine.telemetry), None: not traced
        self._store = store
        self._claim = claim
        self._me = me
        # Bound once: record and on_start run once per slot each.
        self._commit = parts.committer.commit_record
        self._cancels = parts.committer.cancels
        self._write_mark: Callable[[int, str, int, float], None] | None = None
        if parts.board is not None:
            self._write_mark = parts.board.writer(me.index, claim.id, claim.epoch)
        elif parts.marks_in_store:
            self._write_mark = self._store_mark
        self._group_lock = threading.Lock()
        self._marked = -1  # the slot the thread's mark is of
        self.ctx: Context | None = None
        # The attempts running under a timeout, by (slot, attempt) (see run_attempt).
        self._watches: dict[tuple[int, int], AttemptWatch] = {}
        # When each slot's heartbeat was last written, for heartbeats outside any watch.
        self._beats: dict[int, float] = {}
        self._owner = threading.get_ident()  # the workflow thread: the one that may use `_store`
        self._group_beats: GroupBeats | None = None  # while a parallel group's tasks run
        # While a group runs: its tasks' mark writers by lane, the spare records they borrowed,
        # and the slots of its tasks whose outcomes are recorded.
        self._task_marks: dict[int, Callable[[int, str, int, float], None]] = {}
        self._lent_marks: dict[int, int] = {}
        self._recorded_tasks: set[int] = set()
        # The outcome queued for the commit in progress's successor, not waited for yet, with
        # its slot, record and traceback (`record`, trick "marks ride the commit"): waited for
        # before anything else happens (`_settle`). Only where marks are written by the store.
        self._unsettled: tuple[Request, int, CommandRecord, str | None, float] | None = None
        # How many more of this run's outcomes may queue behind a commit in progress where marks are
        # not the store's (QUEUED_SLOTS, `record`); where they are, every one may.
        self._queue_left = QUEUED_SLOTS

    def execute(self) -> Outcome:
        """Replay the history and run the rest live; the outcome to commit as the run's verdict.

        Raises:
            WorkerStopping: the worker stops (the slot before is committed).
            LeaseLostError: another worker holds the lease: this run's writes were refused.
            RunInterrupted: a BaseException from workflow or activity code.
            Exception: the store failed (a worker error: the workflow is handed back).
        """
        parts, claim = self._parts, self._claim
        try:
            fn = parts.registry.workflow(claim.workflow)
        except UnknownWorkflowError as exc:
            return Outcome(status=Status.FAILED, error=f"UnknownWorkflowError: {exc}", error_kind="engine")
        # The claim loaded a short history along with its batch; a long one is loaded here.
        state = claim.state if claim.state is not None else self._store.load_state(claim.id)
        if any(c.kind in _STARTS_CHILD and c.ok for c in state.commands):
            # A child whose start is recorded but that has no row would leave this run waiting
            # for it forever: the store starts it (see start_missing_children).
            started = self._store.start_missing_children(claim.id, state)
            if started:
                parts.event(claim.id, f"started child workflow(s) recorded as started but missing: "
                                      f"{', '.join(started)}", "children_started", None)
        if parts.stopping.up and not parts.activities.holds(claim.id):
            # (A workflow back from its async activities records what they did first.)
            raise WorkerStopping()
        prior = claim.inflight or None
        hooks = ParallelHooks(self._run_group, self.record_task, self.on_task_start)
        observed = parts.metrics is not None or self._spans is not None
        ctx = self.ctx = Context(
            state, workflow_id=claim.id, activities=parts.registry.activities, clock=parts.clock,
            sleep=self.sleep, record=self.record, on_start=self.on_start, prior=prior, cancel=claim.cancel,
            parallel=hooks, on_attempt_end=self.on_attempt_end if observed else None,
            retry=parts.registry.retry, durable_retry=True, timed=self,
            run_coroutine=functools.partial(parts.activities.run, claim.id), max_slots=parts.max_slots,
        )
        try:
            try:
                outcome = execute(fn, ctx, state)
            except BaseException:
                if self._unsettled is not None:
                    # The last outcome, before the run's end: a failed commit or a lost lease
                    # outranks whatever the workflow code did after it.
                    self._settle()
                raise
        except CommitFailed as failed:
            raise failed.exc from None  # a worker error: the workflow is handed back
        except (WorkerStopping, LeaseLostError, RunSuspended, Exception):
            raise
        except BaseException as exc:  # KeyboardInterrupt, SystemExit, …: hand the workflow back
            raise RunInterrupted(exc, ctx.interrupted_in or "workflow code") from exc
        finally:
            # The Context holds this run's bound hooks, so run -> Context -> run was a cycle: ~21
            # objects a workflow left to the cyclic collector, whose passes then walked them (2,000
            # short workflows: ~40,000 objects, 90-170 ms of collection in a ~1.8 s run).
            # Dropped here, they are freed as the run ends (`_settle` and `ride` need no Context).
            self.ctx = None
        # A last outcome still queued is committed with the verdict, or before it (`ride`).
        return self._capped(outcome)

    def ride(self, verdict: Request) -> bool:
        """Trick "the verdict rides the last outcome": queue the run's verdict in the commit of its last
        outcome, if `record` queued that one and its commit has not begun; True if it was queued.

        Then this thread waits for neither (its next workflow runs meanwhile): the verdict is
        written in that outcome's transaction, after it, only if the outcome was (the lease fences
        both), and `verdict.then` hears the answer, as for any verdict. A wait is a slot's most
        costly part in a crowd (the thread's sleep, its wake-up, the GIL taken back): 2,000
        three-slot workflows on 2 vCPUs, with the outcomes queued (`record`), `Worker.run` in
        turns with the tree before, seven runs each: medians 1,109 -> 1,262 workflows/s, CPU
        1.65 -> 1.45 s (docs/performance.md, "Workload 5: a run's verdict rides its last outcome").

        The thread's record in the mark file keeps the start mark of that outcome's activity until
        the commit is answered (kept in the database should the commit fail), and the thread takes a
        spare record for its next marks; the kept one is the spare then. With no spare record free,
        or with an activity's failure to report once the outcome is written, the outcome is waited
        for here and False returned: the caller submits the verdict (as with no outcome queued).
        """
        unsettled = self._unsettled
        if unsettled is None:
            return False
        req, _, _, failure_tb, began = unsettled
        parts, me = self._parts, self._me
        board, lend, give_back = parts.board, parts.lend_mark, parts.return_mark
        marked = board is not None and me.inflight
        spare = lend() if failure_tb is None and marked and lend is not None and give_back is not None else None
        if failure_tb is None and (spare is not None or not marked):
            kept = me.index  # the record with the outcome's start mark
            then, metrics, fold = verdict.then, parts.metrics, parts.fold_marks

            def answered(r: Request) -> None:
                try:
                    if metrics is not None:
                        metrics.slot_commit.observe(time.perf_counter() - began)
                    if then is not None:
                        then(r)
                finally:
                    if spare is not None and board is not None and give_back is not None:
                        if (r.error is not None or not r.ok) and fold is not None:
                            mark = board.read(kept)
                            if mark is not None:
                                fold([mark])  # the activity possibly ran, and its outcome is not recorded
                        give_back(kept)

            verdict.then = answered
            committer = parts.committer
            if committer.add_finish(req, verdict):
                self._unsettled = None
                if spare is not None:
                    # The thread's next marks go to the spare record: its own keeps this mark until
                    # the commit is answered (then it is the spare one).
                    me.index = spare
                    me.inflight = False
                committer.lead_queued()  # (queued with nobody leading, a lone workflow's: committed now)
                return True
            verdict.then = then
        if spare is not None and give_back is not None:
            give_back(spare)
        try:
            self._settle()
        except CommitFailed as failed:
            raise failed.exc from None  # a worker error: the workflow is handed back
        return False

    def _capped(self, outcome: Outcome) -> Outcome:
        """The outcome with its error text cut to the cap, or failed if its result is over the cap."""
        cap = self._parts.max_payload
        if outcome.status == Status.FAILED and outcome.error:
            error = fit_text(outcome.error, cap, "the workflow's error text")
            shown = outcome.traceback and fit_text(outcome.traceback, cap, "the workflow's traceback", tail=True)
            if error is not outcome.error or shown is not outcome.traceback:
                return replace(outcome, error=error, traceback=shown)
        elif outcome.retry:
            waits = tuple(w._replace(error=fit_text(w.error, cap, f"slot {w.slot}: the error text of activity"
                                                                  f" {w.name!r}")) for w in outcome.retry)
            if any(w.error is not o.error for w, o in zip(waits, outcome.retry, strict=True)):
                return replace(outcome, retry=waits)
        elif outcome.status == Status.COMPLETED or (outcome.status == Status.CONTINUED and outcome.next_has_input):
            # The store encodes the result (or the next run's input) again when it writes the
            # verdict: once per workflow, not per slot.
            size = encode_value(outcome.result)[1]
            if size > cap:
                what = ("the workflow's result" if outcome.status == Status.COMPLETED
                        else "the input of ctx.continue_as_new")
                error = error_text(PayloadTooLargeError(over_cap(what, size, cap)))
                return replace(outcome, status=Status.FAILED, result=None, error=error, error_kind="engine")
        return outcome

    # -- the Context's hooks

    def record(self, slot: int, rec: CommandRecord, parallel_group: int | None = None) -> None:
        """Commit one live outcome before the workflow goes on (the Context's `record`).

        `parallel_group` is the slot of its group's first task, for a task of a parallel group.
        """
        parallel = parallel_group is not None
        if self._unsettled is not None:
            self._settle()
        me = self._me
        parts = self._parts
        focus = parts.focus
        # From a task thread (parallel) the workflow thread's CPU focus is not its to move. Its
        # first test here, not only in engine_code: a lone workflow's commits are never
        # crowded, and the call it skips cost ~500 CPU instructions a slot (bench.instructions).
        if focus is not None and not parallel and parts.committer.crowd >= focus.crowded_at:
            focus.engine_code(me, parts.committer.crowd)
        # The value is encoded here, once: its size is checked against the cap before
        # anything is committed, and the store writes this text without encoding again.
        # (A clock read is a float: never near a cap, and the store encodes it.)
        text = None
        refused = None
        failure_tb = None
        if rec.ok and rec.kind == _ACTIVITY:
            value = rec.value
            if type(value) is int:  # encode_value's int case, inline: the common value on this path
                text = int.__repr__(value)
                size = len(text)
            else:
                text, size = encode_value(value)
            cap = parts.max_payload
            if size > cap:
                # Retrying would not make the value smaller: the failure is recorded at once.
                refused = error_text(PayloadTooLargeError(
                    over_cap(f"slot {slot}: the value activity {rec.name!r} returned", size, cap)))
                rec = CommandRecord(_ACTIVITY, rec.name, False, None, refused, rec.attempts, rec.args)
                text = None
        elif rec.ok and (rec.kind == SlotKind.CHILD or rec.kind == SlotKind.CHILD_START):
            self._check_child(slot, rec)
        elif rec.ok and rec.kind in _CHILD_ACTS:
            self._check_child_open(rec)
        elif rec.kind == EVENT:
            text, size = encode_value(rec.value)
            if size > parts.max_payload:
                # Refused before anything is written: ctx.set_event raises it, its slot stays free.
                raise PayloadTooLargeError(
                    over_cap(f"slot {slot}: the value of event {rec.name!r}", size, parts.max_payload))
        elif not rec.ok:
            # An error text is stored too: cut to the cap, and made UTF-8 (an exception
            # may carry a lone surrogate, from a file name say), or the commit would fail.
            error = rec.error or ""
            fitted = fit_text(error, parts.max_payload, f"slot {slot}: the error text of activity {rec.name!r}")
            if fitted is not error:
                refused = fitted
                rec = rec._replace(error=fitted)
            ctx = self.ctx
            failure_tb = ctx.tracebacks.pop(slot, None) if ctx is not None else None
            if failure_tb is not None:
                failure_tb = fit_text(failure_tb, parts.max_payload,
                                      f"slot {slot}: the traceback of activity {rec.name!r}", tail=True)
        claim = self._claim
        metrics = parts.metrics
        committer = parts.committer
        in_store = parts.marks_in_store
        if (not parallel and refused is None and rec.kind == _ACTIVITY
                and (committer.leading or (in_store and committer.crowd < ALONE_BELOW))
                and (in_store or self._queue_left > 0)):
            # Trick "marks ride the commit": this outcome is queued for the next commit (another
            # thread's, or this one's if it commits alone) and the workflow goes on to its next
            # activity, whose start mark then rides in the same transaction (on_start); one wait
            # for both, where the mark cost a transaction and a wait of its own on its connection.
            # With marks in a mark file (or none), only while another thread leads a commit, which
            # commits it too, and only a run's first QUEUED_SLOTS outcomes: the thread runs its
            # workflow code meanwhile, and a run that ends there sends its verdict in the same
            # commit without waiting at all (`ride`).
            # Nothing of the next slot runs before this outcome is durable: every way on from here
            # waits for it (`_settle`), and the worker's loop commits it if this thread is slow to
            # come back. (`leading` and `crowd` are read as hints first, so that a crowd's outcome
            # with nobody leading builds no request for nothing; `enqueue` looks again.)
            req = Request(record=PendingRecord(claim, slot, rec, text, None, failure_tb))
            if committer.enqueue(req, in_store):
                self._queue_left -= 1
                self._unsettled = (req, slot, rec, failure_tb, 0.0 if metrics is None else time.perf_counter())
                return
        try:
            if metrics is None:
                written = self._commit(claim, slot, rec, text, parallel_group, failure_tb)
            else:
                began = time.perf_counter()
                written = self._commit(claim, slot, rec, text, parallel_group, failure_tb)
                metrics.slot_commit.observe(time.perf_counter() - began)
        except ChildWorkflowClosedError as exc:
            if rec.ok and rec.kind in _CHILD_ACTS and exc.child_id == child_act_target(rec.kind, rec.name, rec.value):
                raise  # this slot's child finished before its commit: the core records the refusal
            raise CommitFailed(exc) from exc  # another workflow's, committed in the same batch
        except Exception as exc:  # the store failed: not the workflow's outcome
            raise CommitFailed(exc) from exc
        if not written:
            raise LeaseLostError(claim.id)
        self._committed(slot, rec, parallel, failure_tb)
        if refused is not None:
            # The workflow code sees what a replay of this slot will show it.
            raise ActivityError(slot, rec.name, refused, rec.attempts)

    def _settle(self, *, marked: bool = False) -> None:
        """Wait for the outcome `record` queued without waiting (`_unsettled`), then do what its commit brings.

        `marked`: the next activity's start mark rode in that commit (that activity then runs
        even if the worker is stopping: its mark says it started).
        """
        unsettled = self._unsettled
        assert unsettled is not None
        self._unsettled = None
        req, slot, rec, failure_tb, began = unsettled
        parts = self._parts
        try:
            written = parts.committer.wait_for(req)
        except ChildWorkflowClosedError as exc:  # another workflow's, committed in the same batch
            raise CommitFailed(exc) from exc
        except Exception as exc:  # the store failed: not the workflow's outcome
            raise CommitFailed(exc) from exc
        if parts.metrics is not None:
            parts.metrics.slot_commit.observe(time.perf_counter() - began)
        if not written:
            raise LeaseLostError(self._claim.id)
        self._committed(slot, rec, False, failure_tb, stop=not marked)

    def _committed(self, slot: int, rec: CommandRecord, parallel: bool, failure_tb: str | None,
                   stop: bool = True) -> None:
        """What a written outcome brings: its failure told, the thread's mark cleared, a cancel request
        noted, and (`stop`) the run stopped here if the worker stops."""
        parts = self._parts
        claim = self._claim
        me = self._me
        if failure_tb is not None:
            # Recorded: said once, whether or not the workflow code goes on to handle it.
            parts.event(claim.id, f"slot {slot}: activity {rec.name!r} failed after {rec.attempts} attempt(s): "
                                  f"{rec.error}\n{failure_tb}", "activity_failed", f"{rec.error}\n{failure_tb}")
        if not parallel:
            me.inflight = False  # the slot's outcome is recorded: nothing of it is in flight
        else:
            with self._group_lock:
                self._recorded_tasks.add(slot)
                if self._marked == slot:
                    me.inflight = False  # the thread's mark is this task's
        cancels = self._cancels
        if cancels and claim.id in cancels:
            # The commit came upon an operator's cancel request: the next ctx call raises it
            # (a parallel group's tasks run on; the call after the group raises it).
            reason = cancels.pop(claim.id)
            ctx = self.ctx
            if ctx is not None and ctx.cancel_requested is None:
                ctx.cancel_requested = reason
        if stop and parts.stopping.up:
            raise WorkerStopping()  # the current slot is committed: stop here

    def record_task(self, slot: int, rec: CommandRecord) -> None:
        """`record` for a task of a parallel group, from its task thread."""
        ctx = self.ctx
        group = ctx.parallel_group if ctx is not None else None
        self.record(slot, rec, slot if group is None else group)

    def on_start(self, slot: int, name: str, attempt: int) -> None:
        """Before each live attempt of an activity: stop if the worker stops, else mark it started."""
        # Stop between slots: the slot before this one is already committed. (Not where an
        # async activity's finished attempt waits to be recorded: it ran, so it is recorded.)
        parts = self._parts
        write_mark = self._write_mark
        marked = False
        if self._unsettled is not None:
            # The outcome before is not committed yet (`record`): a store's start mark rides in its
            # commit if that has not begun, and this thread waits once, for both. (A mark file's
            # mark is written once the outcome is committed.)
            marked = (parts.marks_in_store and write_mark is not None and not parts.stopping.up
                      and parts.committer.add_mark(self._unsettled[0],
                                                   (self._claim, slot, name, attempt, _wall_clock(), 0)))
            self._settle(marked=marked)
            if marked:
                write_mark = None
                self._me.inflight = True
        if not marked and parts.stopping.up and not parts.activities.has_outcome(self._claim.id, slot):
            raise WorkerStopping()
        me = self._me
        if me.focused and parts.focus is not None:
            # The activity, and whatever it starts, may use every CPU (unless it is a quick one).
            parts.focus.activity(me, name, parts.committer.crowd)
        if not me.focused:
            parts.committer.pass_baton()  # leaving engine code: the next committed thread runs
        if write_mark is not None:
            # Before the activity runs; `attempt` counts on from the starts of earlier
            # runs (crashed workers included). No commit and no wait (engine.marks).
            write_mark(slot, name, attempt, _wall_clock())
            me.inflight = True
        if self._spans is not None and not parts.activities.reported(self._claim.id, slot, attempt):
            self._spans.attempt_started(slot, name, attempt)

    def on_task_start(self, slot: int, name: str, attempt: int) -> None:
        """`on_start` for a task of a parallel group, from its task thread."""
        parts = self._parts
        if parts.stopping.up and not parts.activities.has_outcome(self._claim.id, slot):
            raise WorkerStopping()
        if self._write_mark is not None:
            ctx = self.ctx
            group = ctx.parallel_group if ctx is not None else None
            self._task_mark(slot - (slot if group is None else group) + 1)(slot, name, attempt, _wall_clock())
        if self._spans is not None and not parts.activities.reported(self._claim.id, slot, attempt):
            self._spans.attempt_started(slot, name, attempt)

    def _task_mark(self, lane: int) -> Callable[[int, str, int, float], None]:
        """What writes the start marks of the group's task in `lane`: a mark of its own, so that after a
        crash every task of the group counts its attempts on (a spare record of the mark file, or a
        row on a server's store); with no record spare, the thread's record (its latest task)."""
        with self._group_lock:
            mark = self._task_marks.get(lane)
            if mark is not None:
                return mark
            parts, claim = self._parts, self._claim
            index = None
            if parts.board is not None and parts.lend_mark is not None:
                index = parts.lend_mark()
            if index is not None and parts.board is not None:
                self._lent_marks[lane] = index
                mark = parts.board.writer(index, claim.id, claim.epoch, lane)
            elif parts.board is None:
                store = self._store

                def mark(slot: int, name: str, attempts: int, started_at: float) -> None:
                    store.mark_started(claim, slot, name, attempts, started_at, lane=lane)
            else:
                mark = self._thread_mark
            self._task_marks[lane] = mark
            return mark

    def _thread_mark(self, slot: int, name: str, attempts: int, started_at: float) -> None:
        """A task's mark in the thread's own record (no spare record was free): the group's latest."""
        write_mark = self._write_mark
        assert write_mark is not None
        with self._group_lock:
            write_mark(slot, name, attempts, started_at)
            self._marked = slot
            self._me.inflight = True

    def _return_task_marks(self) -> None:
        """A group ended: give back the records its tasks borrowed; keep in the database the marks of
        tasks that recorded no outcome (the run ends without one: a retry wait, the worker stopping)."""
        lent, self._lent_marks, self._task_marks = self._lent_marks, {}, {}
        board, give_back = self._parts.board, self._parts.return_mark
        if board is None or give_back is None:
            return
        unrecorded = []
        for index in lent.values():
            mark = board.read(index)
            if mark is not None and mark.slot not in self._recorded_tasks:
                unrecorded.append(mark)
        try:
            if unrecorded:
                self._store.fold_marks(unrecorded)
        except Exception as exc:  # noqa: BLE001 - only attempt counts and a hint are lost
            log.warning("%s: could not keep the in-flight marks of a parallel group: %s", self._claim.id, exc)
        finally:
            for index in lent.values():
                give_back(index)

    def on_attempt_end(self, slot: int, name: str, attempt: int, error: str | None) -> None:
        """After each live attempt (given to the Context only when metrics or traces are on).

        An async attempt's end reaches here in every run that replays it before its slot is
        recorded; it is counted, and its span ended, once.
        """
        if not self._parts.activities.report(self._claim.id, slot, attempt):
            return
        metrics = self._parts.metrics
        if metrics is not None:
            metrics.attempt_ended(name, error is not None)
        if self._spans is not None:
            self._spans.attempt_ended(slot, attempt, error)

    def _leave_engine_code(self) -> None:
        """Before this workflow thread starts threads or waits: its last outcome committed, every CPU for it,
        and the baton passed on."""
        if self._unsettled is not None:
            self._settle()
        parts = self._parts
        if parts.focus is not None and threading.get_ident() == self._owner:
            parts.focus.spread(self._me)  # (a task thread's CPUs are its workflow thread's: every CPU)
        parts.committer.pass_baton()

    def sleep(self, seconds: float) -> None:
        """Wait between live attempts of an activity; stop at once if the worker stops."""
        self._leave_engine_code()
        if self._parts.stopping.wait(seconds):
            raise WorkerStopping()

    # -- timeouts and heartbeats (the Context's TimedHooks)

    def run_attempt(self, call: Callable[[], Any], slot: int, name: str, attempt: int, timeout: float | None,
                    heartbeat_timeout: float | None) -> Any:
        """Run one attempt on a thread of its own and wait for it, at most until a limit passes.

        At `timeout` seconds after it started, or `heartbeat_timeout` seconds after its last
        heartbeat, the attempt is abandoned (engine.attempt_watch): ActivityTimeout here (the
        Context retries under its policy), and whatever it returns discarded.
        Heartbeats are written to the store from the workflow's thread, which owns the
        connection: under a heartbeat timeout the store knows when the next is due, so
        that another worker takes the workflow over if this process stops answering. A
        parallel task's attempt is watched on its task thread, which hands its heartbeats
        to the workflow thread (GroupBeats).
        """
        self._leave_engine_code()  # the attempt's thread inherits this thread's CPUs: all of them
        watch = AttemptWatch()
        key = (slot, attempt)
        self._watches[key] = watch
        own = threading.get_ident() == self._owner
        group = None if own else self._group_beats

        def on_beat(details: Any) -> None:
            if group is not None:
                group.post(slot, name, attempt, details)
            elif own and heartbeat_timeout is not None:
                self._write_beat(slot, name, attempt, details, heartbeat_timeout, beat=True)
            elif own:
                self._progress(slot, name, attempt, details)

        try:
            if heartbeat_timeout is not None and own:
                self._write_beat(slot, name, attempt, None, heartbeat_timeout, beat=False)
            elif heartbeat_timeout is not None and group is not None:
                group.watch(slot, name, attempt, watch, heartbeat_timeout)
            return watch.outcome(call, slot, attempt, timeout, heartbeat_timeout, on_beat)
        finally:
            self._watches.pop(key, None)
            # Nobody watches this attempt any more: no other worker may take the workflow for it.
            if heartbeat_timeout is not None and own:
                self._write_beat(slot, name, attempt, watch.details if watch.fresh else None, None, beat=False)
            elif heartbeat_timeout is not None and group is not None:
                group.unwatch(slot)

    def heartbeat(self, slot: int, name: str, attempt: int, details: Any) -> None:
        """An attempt's heartbeat (from its own thread): note it for its watch, or write it, at most once a second."""
        watch = self._watches.get((slot, attempt))
        if watch is not None:
            watch.beat(name, attempt, details)
            return
        if threading.get_ident() != self._owner:
            group = self._group_beats
            if group is not None:  # a parallel task without a timeout: the workflow thread writes it
                group.post(slot, name, attempt, details)
            return
        self._progress(slot, name, attempt, details)

    def _progress(self, slot: int, name: str, attempt: int, details: Any) -> None:
        """Write a heartbeat nobody watches (it shows progress, carries details), at most once a second a slot."""
        now = time.monotonic()
        if now - self._beats.get(slot, -math.inf) >= BEAT_EVERY:
            self._beats[slot] = now
            self._write_beat(slot, name, attempt, details, None, beat=True)

    def _write_beat(self, slot: int, name: str, attempt: int, details: Any, heartbeat_timeout: float | None,
                    *, beat: bool, due: float | None = None, lane: int = 0) -> None:
        """Write a heartbeat (or, with beat=False, only when the next is due) to the store; lost lease: stop.

        The next is due `heartbeat_timeout` seconds from now, or at the wall time `due`, or never (None).
        """
        text = None if details is None else encode_value(details)[0]
        if text is not None and len(text) > self._parts.max_payload:
            text = None  # over the cap: the last details that fit stay
        wall = _wall_clock()
        if not self._store.heartbeat(self._claim, slot, name, attempt, details=text, beat_at=wall if beat else None,
                                     expires=due if heartbeat_timeout is None else wall + heartbeat_timeout,
                                     lane=lane):
            raise LeaseLostError(self._claim.id)

    def _flush_beats(self, beats: GroupBeats) -> None:
        """Write what a parallel group's tasks handed over: each task's latest heartbeat, and when its next is due."""
        for lane, (slot, name, attempt), details, beat, due in beats.take():
            self._write_beat(slot, name, attempt, details, None, beat=beat, due=due, lane=lane)

    def _run_group(self, thunks: Sequence[Callable[[], None]], max_concurrency: int) -> None:
        """Run a parallel group's live tasks on threads of their own, at most `max_concurrency` at once."""
        me = self._me
        self._leave_engine_code()  # the task threads inherit this thread's CPUs: all of them
        ctx = self.ctx
        beats = self._group_beats = GroupBeats(ctx.parallel_group if ctx is not None and
                                               ctx.parallel_group is not None else 0)
        try:
            with ThreadPoolExecutor(max_workers=min(max_concurrency, len(thunks)),
                                    thread_name_prefix=f"replaylog-task-{me.index}") as pool:
                futures = [pool.submit(thunk) for thunk in thunks]
                for future in futures:
                    future.add_done_callback(lambda _: beats.wake.set())
                # This thread owns the store connection: it writes the tasks' heartbeats until they end.
                while not all(future.done() for future in futures):
                    beats.wake.wait(BEAT_EVERY)
                    beats.wake.clear()
                    self._flush_beats(beats)
                self._flush_beats(beats)
                for future in futures:
                    future.result()
        finally:
            self._group_beats = None
            self._return_task_marks()

    def _store_mark(self, slot: int, name: str, attempts: int, started_at: float) -> None:
        """A mark on a store without local files: one write to the database."""
        self._store.mark_started(self._claim, slot, name, attempts, started_at)

    def _check_child_open(self, rec: CommandRecord) -> None:
        """Refuse a child handle's signal or cancel to a child that has finished, before it is recorded.

        (The store checks again in the commit's transaction: a child that finishes in between
        refuses the commit, and the refusal is recorded in its place.)
        """
        child_id = child_act_target(rec.kind, rec.name, rec.value)
        try:
            row = self._store.get_workflow(child_id)
        except UnknownWorkflowIdError:
            raise child_act_refused(rec.kind, rec.name, rec.value, "missing") from None
        if row.parent != self._claim.id:
            raise child_act_refused(rec.kind, rec.name, rec.value, "missing")
        if row.status in FINISHED:
            raise child_act_refused(rec.kind, rec.name, rec.value, row.status)

    def _check_child(self, slot: int, rec: CommandRecord) -> None:
        """Refuse a child workflow this app does not know, or whose id another workflow has, before it is recorded."""
        self._parts.registry.workflow(rec.name)  # UnknownWorkflowError naming the known ones
        child_id = rec.value["id"]
        try:
            self._store.get_workflow(child_id)
        except UnknownWorkflowIdError:
            return
        raise DuplicateWorkflowIdError(f"slot {slot}: a workflow with id {child_id!r} already exists")
