"""The pure replay core: history records, the Context with its cursor and guard, run().

No SQL, no threads, no clock of its own: time and sleeping come in as functions,
outcomes go out through a `record` callback. Everything here can run in memory.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import inspect
import json
import math
import random
import sys
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import CoroutineType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, NoReturn, Protocol, TypeVar, overload

from replaylog.engine import thread_guard
from replaylog.engine.attempt_watch import LocalTimed
from replaylog.engine.cursor import DECLINED, Cursor, Handback
from replaylog.engine.errors import (
    ActivityError,
    ActivityTimeout,
    ChildWorkflowClosedError,
    ChildWorkflowError,
    Diagnostic,
    DuplicateWorkflowIdError,
    NonDeterministicError,
    ParallelError,
    ReplaylogError,
    SignalTimeout,
    UnknownActivityError,
    ValueNotJSONError,
    WorkflowCancelled,
)
from replaylog.engine.retry import DURABLE_AFTER, RetryPolicy
from replaylog.engine.tracebacks import user_traceback
from replaylog.engine.vocab import SlotKind, Status, Wait, status_info
from replaylog.engine.workflow_log import WorkflowLog

# `replaylog.engine.aio` (the loop async workflows run on) imports asyncio, about a seventh
# of `import replaylog.cli` (~40 ms of ~275 ms under -X importtime): the core reaches for it
# only once a workflow or activity is `async def`, so sync-only programs, the command line
# and worker subprocesses of sync apps never load asyncio.


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether a workflow or activity function is `async def` (a coroutine function).

    The answer of `asyncio.iscoroutinefunction`, which adds to `inspect`'s a marker that only
    asyncio's own objects carry: with asyncio not yet imported no object can carry it.
    """
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return inspect.iscoroutinefunction(fn)
    return bool(asyncio.iscoroutinefunction(fn))


def _await_here(coro: Coroutine[Any, Any, Any], *args: Any) -> Any:
    """The default `run_coroutine`: `aio.run_coroutine`, imported at the first async activity."""
    from replaylog.engine import aio

    return aio.run_coroutine(coro, *args)

F = TypeVar("F", bound=Callable[..., Any])

# The kinds this module records (engine.vocab), bound once as plain text: the slot path names
# one or two a slot, and a member read from its enum class costs ~100 ns on Python 3.11 where
# a global costs ~8 ns; a plain str also goes to the database driver without its adapter look-up.
_ACTIVITY = SlotKind.ACTIVITY.value
_NOW = SlotKind.NOW.value
_DEADLINE = SlotKind.DEADLINE.value
_TIMEOUT = SlotKind.TIMEOUT.value
_PATCH = SlotKind.PATCH.value
_APPROVAL = SlotKind.APPROVAL.value
_CHILD = SlotKind.CHILD.value

# What `blocked_on` says for a workflow sleeping on a durable timer (a wait says the signal name):
# the timer kind's text.
TIMER = SlotKind.TIMER.value
# What `blocked_on` says for a workflow waiting, durably, for the next attempt of an activity
# under a RetryPolicy (engine.retry): the wake time is that attempt's.
RETRY = Wait.RETRY.value
# The latest wake time a timer or a deadline may have: the end of year 9999 (datetime's range).
MAX_EPOCH = 253402300799.0

# The kind of the slot that records where a cancel request was delivered: its name is the
# command it interrupted ("activity:charge", "now:now", "signal:approve"), its value the
# reason. A replay raises WorkflowCancelled at that very command again, so code that
# catches it (a saga's compensations) replays deterministically.
CANCEL = SlotKind.CANCEL.value
# The audit action the verdict of a workflow that finished before its code reached another
# ctx call writes for the cancel request it never saw (its detail: "the workflow completed first").
CANCEL_NOT_DELIVERED = "cancel not delivered"

_CHILD_START = SlotKind.CHILD_START.value
_CHILD_RESULT = SlotKind.CHILD_RESULT.value
CHILD_SIGNAL = SlotKind.CHILD_SIGNAL.value
CHILD_CANCEL = SlotKind.CHILD_CANCEL.value
# What happens to a child started with ctx.start_workflow whose parent finishes while it runs.
PARENT_CLOSE = ("cancel", "terminate", "abandon")

# The kind of the slot `ctx.set_event(key, value)` records: its name is the key, its value
# the value. Readers outside the workflow take the latest slot of each key.
EVENT = SlotKind.EVENT.value
# The longest event key, in characters: a key is a name a reader asks for, not a value.
EVENT_KEY_LIMIT = 200
ATTRIBUTES = SlotKind.ATTRIBUTES.value
# A search attribute's value as stored and compared: a short scalar (engine.store indexes it as text).
ATTRIBUTE_VALUE_LIMIT = 200


# ---------------------------------------------------------------- decorators


# What each module decorated at its top level, by module name, in decoration order and
# keyed (kind, registered name, qualified name). The app loader reads it: scanning the
# module's namespace instead would lose a function whose Python name a later one reuses.
# A re-decoration under the same key (the module imported again) replaces the old entry.
_DECORATED: dict[str, dict[tuple[str, str, str], Callable[..., Any]]] = {}


def _mark(fn: F, kind: str, name: str | None) -> F:
    registered = name or fn.__name__
    # Functions take attributes at run time; Callable's type declares none, hence the ignores.
    fn._replaylog_kind = kind  # type: ignore[attr-defined]
    fn._replaylog_name = registered  # type: ignore[attr-defined]
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None) or registered
    # A function made inside another one (a test body, a factory) is decorated at run time,
    # not while its module imports: it belongs to an app only if the module's namespace holds it.
    if module and "<locals>" not in qualname:
        _DECORATED.setdefault(module, {})[(kind, registered, qualname)] = fn
    return fn


def decorated_in(module_name: str) -> list[Callable[..., Any]]:
    """The functions decorated at the top level of a module, in decoration order."""
    return list(_DECORATED.get(module_name, {}).values())


def forget_decorated(module_name: str) -> None:
    """Drop what a module decorated: it is about to be executed afresh."""
    _DECORATED.pop(module_name, None)


@overload
def workflow(fn: F, *, name: str | None = None, schedule: str | None = None) -> F: ...
@overload
def workflow(fn: None = None, *, name: str | None = None, schedule: str | None = None) -> Callable[[F], F]: ...
def workflow(fn: F | None = None, *, name: str | None = None, schedule: str | None = None) -> F | Callable[[F], F]:
    """Mark a function as a workflow: `def wf(ctx, input)`. The name defaults to the function's.

    `schedule`: a cron expression ("*/5 * * * *", UTC): a worker of the app keeps a schedule
    of this name that starts the workflow (without input) at each tick (docs/schedules.md).
    A malformed expression is refused here (ScheduleRefusedError).
    """
    if schedule is not None:
        from replaylog.engine.schedules import check_cron  # only an app with schedules loads cronsim

        check_cron(schedule)

    def mark(f: F) -> F:
        marked = _mark(f, "workflow", name)
        marked._replaylog_schedule = schedule  # type: ignore[attr-defined]
        return marked

    return mark if fn is None else mark(fn)


@overload
def activity(fn: F, *, name: str | None = None, check_args: bool = True, retry: RetryPolicy | None = None) -> F: ...
@overload
def activity(fn: None = None, *, name: str | None = None, check_args: bool = True,
             retry: RetryPolicy | None = None) -> Callable[[F], F]: ...
def activity(fn: F | None = None, *, name: str | None = None, check_args: bool = True,
             retry: RetryPolicy | None = None) -> F | Callable[[F], F]:
    """Mark a function as an activity (a side effect). The name defaults to the function's.

    `check_args=False` opts out of the argument guard: its slots record no arguments,
    and a replay does not compare them (for arguments that legitimately vary, or that
    JSON cannot hold). `retry` is the activity's retry policy, for every call that
    names none of its own (engine.retry.RetryPolicy).

    Raises:
        TypeError: `retry` is not a RetryPolicy.
    """
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise TypeError(f"@activity(retry=...) takes a RetryPolicy, not {type(retry).__name__}")
    if fn is None:
        return lambda f: _mark_activity(f, name, check_args, retry)
    return _mark_activity(fn, name, check_args, retry)


# The activities that opted out of the argument guard. A set, not an attribute: the guard
# asks once per slot, and a membership test costs less than getattr with a default.
_UNCHECKED: set[Callable[..., Any]] = set()
# The activities decorated with a retry policy of their own (@activity(retry=...)).
_POLICIES: dict[Callable[..., Any], RetryPolicy] = {}


def _mark_activity(fn: F, name: str | None, check_args: bool, retry: RetryPolicy | None = None) -> F:
    if check_args:
        _UNCHECKED.discard(fn)
    else:
        _UNCHECKED.add(fn)
    if retry is None:
        _POLICIES.pop(fn, None)
    else:
        _POLICIES[fn] = retry
    return _mark(fn, "activity", name)


def registered_name(fn: Callable[..., Any]) -> str:
    """The recorded name of a decorated function (its __name__ if undecorated)."""
    return getattr(fn, "_replaylog_name", None) or fn.__name__


# ---------------------------------------------------------------- records


class CommandRecord(NamedTuple):
    """The recorded outcome of one command slot: identity, result, and its arguments' key.

    `args` is the argument guard's key of an activity's arguments (see `args_key`):
    None for other kinds, for activities that opt out, and in histories recorded
    before the guard existed (those slots replay without the check).

    Immutable. A named tuple rather than a frozen dataclass: one is built for every live
    slot and every replayed one, and a frozen dataclass took 0.7 us to build (a setattr
    per field) against 0.27 us, on a path where each microsecond counts (README, Performance).
    """

    kind: str
    name: str
    ok: bool
    value: Any = None
    error: str | None = None
    attempts: int = 1
    args: str | None = None

    @property
    def label(self) -> str:
        """The "kind:name" form used in diagnostics."""
        return f"{self.kind}:{self.name}"


# Builds a CommandRecord from a tuple of all seven fields without the generated __new__ (a
# Python function call): for the per-slot paths, which always pass every field.
new_record: Callable[[type[CommandRecord], tuple[str, str, bool, Any, str | None, int, str | None]],
                     CommandRecord] = tuple.__new__


# A slot of a parallel group that history does not hold while a later slot of the group
# is recorded (the worker died while the group ran): loaders fill the gap with this, and
# the group runs it live again. Its kind is no command's, so anything else diverges on it.
UNRECORDED = "unrecorded"
HOLE = CommandRecord(UNRECORDED, "parallel task", False)


def fill_holes(records: list[tuple[int, CommandRecord]]) -> tuple[CommandRecord, ...]:
    """A history from (slot, record) pairs in slot order, HOLE at every slot missing."""
    out: list[CommandRecord] = []
    for slot, rec in records:
        while len(out) < slot:
            out.append(HOLE)
        out.append(rec)
    return tuple(out)


# ---------------------------------------------------------------- approvals

# An approval request waits on the signal named APPROVAL_PREFIX + its request id; the
# plain `signal` command refuses such names, so only an answer checked against the
# pending request (the store's answer_approval) can unlock it.
APPROVAL_PREFIX = "approval:"
# A parent waits for its child on the signal CHILD_PREFIX + the child's id, which the store
# sends when the child finishes ({"ok": bool, "result": …, "error": …}).
CHILD_PREFIX = "child:"


def signal_name_refusal(name: str) -> str | None:
    """Why no operator may send, and no workflow code wait on, a signal of this name; None if it may.

    The engine names what a workflow waits on with these: TIMER for a durable sleep, RETRY
    for the wait before an activity's next attempt,
    APPROVAL_PREFIX + request id for an approval, CHILD_PREFIX + id for a child's outcome.
    Only the engine delivers them, so a signal of such a name sent by hand would be
    mistaken for one, or wait for ever.
    """
    if not name:
        return "the signal name must not be empty"
    if name == TIMER:
        return f"the signal name {TIMER!r} is reserved for durable timers (a sleeping workflow is blocked on it)"
    if name == RETRY:
        return (f"the signal name {RETRY!r} is reserved for retry waits (a workflow waiting for an activity's next"
                " attempt is blocked on it)")
    if name.startswith(APPROVAL_PREFIX):
        return f"signal names starting {APPROVAL_PREFIX!r} answer approvals: use `replaylog approve`"
    if name.startswith(CHILD_PREFIX):
        return f"signal names starting {CHILD_PREFIX!r} are sent by child workflows when they finish"
    return None


def approval_request_id(slot: int) -> str:
    """The id of the approval request recorded at `slot`: the same on every replay."""
    return f"req-{slot}"


def approval_slot(request_id: str) -> int | None:
    """The slot an approval request id names, or None if it is not one."""
    head, _, number = request_id.partition("-")
    return int(number) if head == "req" and number.isdigit() else None


# ---------------------------------------------------------------- the argument guard

# Arguments whose canonical text is longer than this are kept as a digest only: the
# text itself makes the diagnostic and the transcript readable, but a long prompt
# stored in every slot would double a history's size.
ARGS_TEXT_LIMIT = 200
DIGEST_PREFIX = "sha256:"
# Canonical JSON: sorted keys, compact, ASCII (so the length is the size in bytes, and
# a lone surrogate cannot make the text unstorable). Built once (see `_encode`).
_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False).encode


def args_key(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """The argument guard's key of a call: its canonical JSON text, or a digest of a long one.

    Positional arguments alone are a JSON array; with keyword arguments, an object
    {"args": [...], "kwargs": {...}}. Raises TypeError or ValueError if JSON cannot
    hold an argument.
    """
    if not kwargs:
        # One int, the commonest call on the slot path, without the encoder's set-up. An f-string
        # formats an exact int with str() and builds the text in one allocation: measured under
        # callgrind, ~2,000 instructions fewer a slot than "[" + int.__repr__(i) + "]".
        text = f"[{args[0]}]" if len(args) == 1 and type(args[0]) is int else _canonical(args)
    else:
        text = _canonical({"args": args, "kwargs": kwargs})
    if len(text) <= ARGS_TEXT_LIMIT:
        return text
    return DIGEST_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:32]


def show_args(key: str) -> str:
    """An argument key as a diagnostic shows it."""
    if key.startswith(DIGEST_PREFIX):
        return f"arguments too long to show (digest {key})"
    return key


@dataclass(frozen=True, slots=True)
class SignalRecord:
    """A delivered signal: append-only, consumed per name in delivery order."""

    seq: int
    name: str
    payload: Any = None


@dataclass(frozen=True)
class WorkflowState:
    """The whole persisted state of a workflow: its input and its two logs."""

    input: Any = None
    has_input: bool = True
    commands: tuple[CommandRecord, ...] = ()
    signals: tuple[SignalRecord, ...] = ()


# What failed a workflow, recorded beside its error text so that readers (the console, check)
# match on the kind, never on the text: "activity" an activity's recorded failure the code did
# not handle, "nondeterministic" a divergence from history, "code" an exception of the
# workflow code's own, "engine" any other refusal of ours (a value JSON cannot hold, an
# unknown activity or workflow, a value over the cap).
ErrorKind = Literal["activity", "nondeterministic", "code", "engine"]


def error_kind(exc: BaseException) -> ErrorKind:
    """The kind of failure an exception that failed a workflow is (by its type)."""
    if isinstance(exc, ActivityError):
        return "activity"
    if isinstance(exc, NonDeterministicError):
        return "nondeterministic"
    return "engine" if isinstance(exc, ReplaylogError) else "code"


@dataclass(frozen=True)
class Outcome:
    """What one run of a workflow came to."""

    status: Status  # one whose info.outcome is True
    result: Any = None
    blocked_on: str | None = None
    error: str | None = None
    diagnostic: Diagnostic | None = None
    replayed_commands: int = 0
    executed_commands: int = 0
    consumed_signals: tuple[int, ...] = ()
    error_kind: ErrorKind | None = None  # what failed it (see error_kind), stored beside its error
    # The run raised an operator's cancel request in the workflow's code (live or replayed):
    # a wait after it blocks for good, it is not woken again for the same request.
    cancel_delivered: bool = False
    # A blocked run's recorded wake time (epoch seconds): a timer's, or a wait's deadline.
    wake_at: float | None = None
    # A failed run's traceback through the workflow code (engine.tracebacks.user_traceback):
    # None when no frame of the user's was on the way (the engine failed it on its own).
    traceback: str | None = None
    # A continued run (Status.CONTINUED): `result` is the next run's input, and this says
    # whether it has one (False: the next run is called without).
    next_has_input: bool = True
    # A run blocked on RETRY: the activities whose next attempt it waits for (one, or tasks of a
    # parallel group), kept by the store (their attempts count on from there in the run that wakes it).
    retry: tuple[RetryWait, ...] = ()


class RetryWait(NamedTuple):
    """An activity waiting, durably, for its next attempt: where, how many attempts failed, the
    last one's error, and when the next may start (epoch seconds)."""

    slot: int
    name: str
    attempts: int
    error: str
    retry_at: float
    lane: int = 0  # 0: the workflow's own thread; k: the k-th task of its parallel group


class Attempts(NamedTuple):
    """What earlier runs left of an activity they started and recorded no outcome for (a claim's).

    Attributes:
        slot: its slot. attempts: how many times it was started.
        error: the error of the last attempt, when it is known to have failed (a retry wait).
        retry_at: the earliest time of the next attempt (a retry wait), else None.
        details: what the last attempt passed to `heartbeat`, if anything.
    """

    slot: int
    attempts: int
    error: str | None = None
    retry_at: float | None = None
    details: Any = None


@dataclass(frozen=True)
class ActivityInfo:
    """What an activity may know about the call it serves (see `current_activity`).

    `idempotency_key` is derived from workflow id and slot: the same on every
    attempt and every replay, so external systems can drop a repeated effect.
    """

    workflow_id: str
    slot: int
    name: str
    attempt: int
    idempotency_key: str
    # What the latest earlier attempt of this activity passed to `heartbeat` (in this run, or in
    # a run of another worker before it died or stopped heartbeating); None if nothing.
    heartbeat_details: Any = None
    _ctx: Context | None = field(default=None, repr=False, compare=False)

    def heartbeat(self, details: Any = None) -> None:
        """Say that this attempt is alive, with `details` (any JSON value) for the next attempt to read.

        Under `heartbeat_timeout`, an attempt that sends none for that long is failed with
        ActivityTimeout and retried (on another worker, if this one stopped answering). The
        latest details are kept in the store, shown by `show` and the console, and given to the
        next attempt as `heartbeat_details`.

        Raises:
            ActivityTimeout: this attempt was already failed by a timeout: stop working.
            ValueNotJSONError: JSON cannot hold `details`.
        """
        if self._ctx is None:
            raise RuntimeError("heartbeat() called outside a running activity")
        self._ctx._heartbeat(self.slot, self.name, self.attempt, details)


# The Context of the workflow run in progress, set once per run by `execute`; the context
# keeps (slot, name, attempt) of its running activity in a plain attribute, set on every
# attempt and made into an ActivityInfo only when an activity asks for it. (A context
# variable set and reset around every attempt cost more than the rest of the attempt's
# bookkeeping.)
_current_context: contextvars.ContextVar[Context | None] = contextvars.ContextVar(
    "replaylog_current_context", default=None
)


# (slot, name, attempt) of the activity a parallel task runs: each task runs in a copy of
# the workflow's context, so tasks running at once do not see each other's.
_task_running: contextvars.ContextVar[tuple[int, str, int] | None] = contextvars.ContextVar(
    "replaylog_task_running", default=None
)


def current_activity() -> ActivityInfo:
    """The running activity's info; raises RuntimeError outside an activity."""
    ctx = _current_context.get()
    # A parallel task's, an async activity's and a timed attempt's are in their own context; else the context's.
    running = _task_running.get() or (ctx._c.running if ctx is not None else None)
    if ctx is None or running is None:
        raise RuntimeError("current_activity() called outside a running activity")
    slot, name, attempt = running
    workflow_id = ctx.workflow_id
    return ActivityInfo(workflow_id, slot, name, attempt, idempotency_key(workflow_id, slot),
                        ctx._details.get(slot), ctx)


def idempotency_key(workflow_id: str, slot: int) -> str:
    """The deterministic idempotency key of a slot."""
    return f"{workflow_id}:{slot}"


# ---------------------------------------------------------------- control flow


class ContinueAsNew(BaseException):
    """Raised by `ctx.continue_as_new`: this run ends, and the workflow goes on as a fresh run with `input`.

    A BaseException, like WorkflowBlocked, so that `except Exception` in workflow code cannot
    swallow it. `has_input` False: the next run is called without an input.
    """

    def __init__(self, input: Any, has_input: bool) -> None:
        super().__init__("continue as new")
        self.input = input
        self.has_input = has_input


# A workflow's history may grow to this many slots before `show`, the console and the worker's
# log warn that it is long (and say to use ctx.continue_as_new).
HISTORY_WARN = 10_000
# The cap on slots in one run's history unless a worker is given another (Temporal stops a
# history at 50,000 events): past it a workflow fails, told to use ctx.continue_as_new.
DEFAULT_MAX_SLOTS = 50_000


class HistoryTooLongError(ReplaylogError):
    """A run reached the cap on slots in one history (Worker(max_slots=…)): use ctx.continue_as_new."""


class WorkflowBlocked(BaseException):
    """Raised inside workflow code when it waits on a signal that has not arrived, or sleeps.

    `name` is the signal name (TIMER for a sleep); `wake_at` the recorded wake time or
    deadline, None for a wait without one. A BaseException so that `except Exception` in
    workflow code cannot swallow it.
    """

    def __init__(self, name: str, wake_at: float | None = None) -> None:
        super().__init__(name)
        self.name = name
        self.wake_at = wake_at


class RunSuspended(BaseException):
    """Raised by a `run_coroutine` hook that started an async activity and lets the run end meanwhile.

    The run unwinds as a blocked one does, holding no thread, and nothing is recorded for the
    activity yet; its runner runs the workflow again when the activity has finished, and the
    hook then hands that attempt's outcome to the replay that reaches the same slot.
    """


class _Interrupted(ReplaylogError):
    """Sticky marker of an activity interrupted by a BaseException (see Context.interrupted).

    Never an outcome: `execute` raises the interruption itself instead.
    """


class DryRunStop(BaseException):
    """A dry replay reached a slot history does not hold: it stops before any side effect."""

    def __init__(self, slot: int, issued: str) -> None:
        super().__init__(slot, issued)
        self.slot = slot
        self.issued = issued


# json.dumps with an option set builds a new encoder per call; this one is built once.
_encode = json.JSONEncoder(allow_nan=False).encode
# Values JSON holds as they are and reads back unchanged: no round trip to check them.
_PLAIN_JSON = frozenset((str, int, bool))


def to_json_value(value: Any, what: str) -> Any:
    """Return `value` as it will read back from JSON; raise ValueNotJSONError naming `what`.

    The live branch returns the round-tripped value so that live and replayed runs see
    exactly the same thing (a tuple would otherwise come back as a list on replay).
    """
    if value is None or (type(value) is int and value.bit_length() <= 64):
        # Read back as itself, and held by JSON (an int of thousands of digits is not:
        # str() refuses it): no encoding to try, ~1.5 µs a workflow's result here.
        return value
    try:
        text = _encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueNotJSONError(
            f"{what} is of type {_type_path(value, exc)}, which JSON cannot hold"
        ) from None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, float):
        return value
    return json.loads(text)


def _type_path(value: Any, exc: BaseException) -> str:
    """Name the offending type: the value's own, or the inner one the encoder choked on."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float ({value})"
    msg = str(exc)
    if "is not JSON serializable" in msg:
        return msg.split("Object of type ", 1)[-1].split(" is not", 1)[0]
    if isinstance(exc, ValueError) and "integer string conversion" in msg:
        # Python writes no int of more than sys.get_int_max_str_digits() digits (4,300 by default).
        return f"{type(value).__name__} (containing an int of more than {sys.get_int_max_str_digits():,} digits)"
    if isinstance(exc, ValueError):
        return f"{type(value).__name__} (containing NaN or infinity)"
    return type(value).__name__


def _not_json(value: Any) -> bool:
    try:
        _encode(value)
    except (TypeError, ValueError, RecursionError):
        return True
    return False


def error_text(exc: BaseException) -> str:
    """A one-line text for an exception, even one whose __str__ itself raises."""
    name = type(exc).__name__
    try:
        msg = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not take the worker down
        msg = "<exception text could not be converted>"
    return f"{name}: {msg}" if msg else name


# ---------------------------------------------------------------- the Context

# What `_next_signal` answers when no signal has arrived (None is a valid payload).
_NONE: Any = object()
# The live source of ctx.random(); its values are recorded, so its seed does not matter.
_random = random.Random()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _seconds(value: Any, what: str) -> float:
    """A duration of workflow code, checked before anything is recorded."""
    if not _is_number(value):
        raise TypeError(f"{what}: seconds must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what}: seconds must be finite and at least 0, got {value!r}")
    if value > MAX_EPOCH:
        raise ValueError(f"{what}: {value!r} seconds is past the year 9999")
    return float(value)


def _epoch(value: Any, what: str) -> float:
    """A wall-clock time of workflow code (epoch seconds), checked before anything is recorded."""
    if not _is_number(value):
        raise TypeError(f"{what}: the time must be a number of epoch seconds, got {type(value).__name__}")
    if not math.isfinite(value) or value > MAX_EPOCH:
        raise ValueError(f"{what}: the time must be finite and before the year 10000, got {value!r}")
    return float(value)


def _change_id(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what}: the change id must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{what}: the change id must not be empty")
    return value


def _priors(prior: tuple[int, int] | Attempts | Sequence[Attempts] | None) -> list[Attempts]:
    """The `prior` a Context takes, as a list of Attempts (empty for none)."""
    if prior is None:
        return []
    if isinstance(prior, Attempts):
        return [prior]
    if len(prior) == 2 and isinstance(prior[0], int) and isinstance(prior[1], int):
        return [Attempts(prior[0], prior[1])]
    return [p for p in prior if isinstance(p, Attempts)]


def _limits(timeout: Any, heartbeat_timeout: Any, where: str) -> tuple[float | None, float | None] | None:
    """An activity call's (timeout, heartbeat_timeout), checked before anything is recorded; None if neither."""
    if timeout is None and heartbeat_timeout is None:
        return None
    for what, value in (("timeout", timeout), ("heartbeat_timeout", heartbeat_timeout)):
        if value is not None and (not _is_number(value) or not math.isfinite(value) or value <= 0):
            raise ValueError(f"{where}({what}={value!r}): {what} must be a positive number of seconds")
    return (None if timeout is None else float(timeout),
            None if heartbeat_timeout is None else float(heartbeat_timeout))


RecordFn = Callable[[int, CommandRecord], None]
StartFn = Callable[[int, str, int], None]
# (slot, name, attempt, error text or None): after each live attempt of an activity (metrics, traces).
AttemptEndFn = Callable[[int, str, int, str | None], None]


def _one_by_one(thunks: Sequence[Callable[[], None]], _max_concurrency: int) -> None:
    for thunk in thunks:
        thunk()


@dataclass(frozen=True)
class ParallelHooks:
    """How a Context runs the live tasks of `parallel`: the runner of a process with threads.

    Without hooks (the in-memory runner) the tasks run one after another, in order.

    Args:
        run: runs the thunks, at most `max_concurrency` at once, and returns when every
            one has finished (the thunks never raise).
        record: like the Context's `record`, but called from the task threads, for the
            group's slots in the order they complete (not slot order).
        on_start: like `on_start`, called from the task threads; may be None.
    """

    run: Callable[[Sequence[Callable[[], None]], int], None]
    record: RecordFn
    on_start: StartFn | None = None


class TimedHooks(Protocol):
    """How a Context runs an attempt under a timeout or a heartbeat timeout: on a thread of its own, watched.

    The worker's (engine.worker.run) also write heartbeats to the store; the in-memory runner's
    (engine.attempt_watch.LocalTimed) write nothing. Without hooks timeouts are not enforced and
    heartbeats only keep their details for the next attempt.
    """

    def run_attempt(self, call: Callable[[], Any], slot: int, name: str, attempt: int, timeout: float | None,
                    heartbeat_timeout: float | None) -> Any:
        """Run `call` (the attempt) and return its value; raise ActivityTimeout when a limit passes first."""

    def heartbeat(self, slot: int, name: str, attempt: int, details: Any) -> None:
        """An attempt said it is alive (from the attempt's own thread); ActivityTimeout if it was abandoned."""


def child_act_target(kind: str, name: str, value: Any) -> str:
    """The id of the child a recorded `child_signal` / `child_cancel` slot acts on."""
    return str(value["id"]) if kind == CHILD_SIGNAL else name


def child_act_refused(kind: str, name: str, value: Any, status: str) -> ChildWorkflowClosedError:
    """The refusal of a child handle's signal or cancel: its child is `status` (finished, or "missing")."""
    act = f"signal {name!r}" if kind == CHILD_SIGNAL else "cancel"
    return ChildWorkflowClosedError(child_act_target(kind, name, value), status, act)


class ChildHandle:
    """A child workflow started with `ctx.start_workflow`; each method is a ctx call (a slot of its own).

    Attributes:
        id: the child's workflow id. workflow: its name.
    """

    def __init__(self, ctx: Context, id: str, workflow: str) -> None:
        self._ctx = ctx
        self.id = id
        self.workflow = workflow

    def __repr__(self) -> str:
        return f"ChildHandle({self.id!r}, {self.workflow!r})"

    def result(self) -> Any:
        """Wait for the child's result, holding no thread; ChildWorkflowError if it failed or was cancelled."""
        return self._ctx._child_result(self)

    def signal(self, name: str, payload: Any = None) -> None:
        """Send the child a signal (recorded; delivered in the same transaction, not to a finished child).

        Raises:
            ValueError: the name is empty or reserved. ValueNotJSONError: JSON cannot hold the payload.
        """
        refusal = signal_name_refusal(name) if isinstance(name, str) else "a signal name is a string"
        if refusal is not None:
            raise ValueError(f"ChildHandle.signal: {refusal}")
        payload = to_json_value(payload, f"the payload of signal {name!r}")
        self._ctx._child_act(self, CHILD_SIGNAL, name, {"id": self.id, "payload": payload}, args_key((self.id,), {}))

    def cancel(self, reason: str | None = None) -> None:
        """Ask the child to cancel (recorded; WorkflowCancelled in its code, as an operator's cancel)."""
        if reason is not None and not isinstance(reason, str):
            raise TypeError(f"ChildHandle.cancel(reason=...) takes a str, not {type(reason).__name__}")
        self._ctx._child_act(self, CHILD_CANCEL, self.id, reason, args_key((reason,), {}))


@dataclass(frozen=True)
class Task:
    """One activity call described by `ctx.task`, to be run by `ctx.parallel`."""

    fn_or_name: Callable[..., Any] | str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    max_retries: int | None = None  # None: the retry policy's attempts (see Context.call_activity)
    retry: RetryPolicy | None = None
    timeout: float | None = None
    heartbeat_timeout: float | None = None


class Context:
    """What workflow code talks to: one cursor for every command, a cursor per signal name.

    Args:
        state: the recorded history to replay.
        workflow_id: used for idempotency keys.
        activities: name → function, for `call_activity("name")`.
        clock: returns the current time (seconds); read only in the live branch.
        sleep: waits between live retry attempts.
        record: called with each new outcome; must make it durable before returning.
            Without one, the new outcomes are collected in `new_commands`.
        on_start: called before each live attempt (in-flight tracking); may be None.
        on_attempt_end: called after each live attempt with its error text (None if it
            returned), from the thread that ran it; may be None (metrics and traces use it).
        dry_run: stop with DryRunStop instead of executing anything live; the commands
            issued are collected in `issued`.
        backoff: base seconds of the exponential backoff between attempts under `max_retries`.
        prior: (slot, attempts) of an activity that earlier runs started and recorded no
            outcome for (their worker died, the run was interrupted, or it waits for a
            retry), or the whole `Attempts`, or a sequence of them (the tasks of a parallel
            group, each its own): this run's attempts at that slot count on from there, and
            the policy's attempts bound the total.
        retry: the app's default retry policy (engine.retry.default_retry), for calls and
            activities that name none.
        durable_retry: a wait between attempts longer than engine.retry.DURABLE_AFTER ends the
            run blocked on RETRY (the worker's runs); without it every wait is `sleep`.
        timed: runs attempts under `timeout` / `heartbeat_timeout` and takes heartbeats (the
            worker's, see TimedHooks); without it neither limit is enforced.
        cancel: the reason of an operator's cancel request already known ("" for none
            given); the worker sets `cancel_requested` when it learns of one mid-run.
        finished: the history is a finished workflow's (dry runs only): every timer in it
            has fired, and a `patched` call at its end ran under code from before the patch.
        parallel: how `parallel` runs its live tasks at once (see ParallelHooks); without
            it, one after another.
        run_coroutine: awaits the coroutine of an attempt (slot, attempt[, timeout]) of an
            `async def` activity and returns its value (the worker's: on its own event loop, or RunSuspended); without
            it, on a loop made for the call.
        max_slots: the most slots one run's history may hold: a command past it fails the
            workflow (HistoryTooLongError, saying to use `continue_as_new`); None: no cap.
    """

    def __init__(
        self,
        state: WorkflowState,
        *,
        workflow_id: str = "",
        activities: Mapping[str, Callable[..., Any]] | None = None,
        clock: Callable[[], float],
        sleep: Callable[[float], None] = lambda _s: None,
        record: RecordFn | None = None,
        on_start: StartFn | None = None,
        on_attempt_end: AttemptEndFn | None = None,
        dry_run: bool = False,
        backoff: float = 0.05,
        prior: tuple[int, int] | Attempts | Sequence[Attempts] | None = None,
        cancel: str | None = None,
        finished: bool = False,
        parallel: ParallelHooks | None = None,
        retry: RetryPolicy | None = None,
        durable_retry: bool = False,
        timed: TimedHooks | None = None,
        run_coroutine: Callable[..., Any] | None = None,
        max_slots: int | None = None,
    ) -> None:
        self._run_coroutine = run_coroutine or _await_here
        self._max_slots = max_slots
        priors = _priors(prior)
        # The activity outside a group that a live slot may meet is the latest one (a group's
        # tasks all ended before a later slot ran): compared by slot, one int per live activity.
        # The tasks of a group look theirs up by slot (`_priors`).
        self._priors = {p.slot: p for p in priors}
        self._prior = max(priors, key=lambda p: p.slot) if priors else Attempts(-1, 0)
        # The state every slot reads and writes, and the commonest slot, compiled (engine.cursor):
        # the cursor, the history, the sticky error (a divergence, or another error that leaves the
        # cursor meaningless: workflow code that catches it cannot go on issuing commands), the
        # callbacks, a cancel request (the reason, "" if none: the next live command records where
        # it was delivered and raises WorkflowCancelled, once), and the new outcomes when no
        # `record` takes them (the in-memory runner: a worker's run would otherwise hold every
        # slot of a long workflow).
        self._c = Cursor(
            state.commands, activities or {}, record, on_start, on_attempt_end, dry_run,
            max_slots if max_slots is not None else math.inf, self._prior.slot, cancel, _UNCHECKED, args_key,
            new_record, CommandRecord, to_json_value)
        self._signals = state.signals
        self._workflow_id = workflow_id
        self._clock = clock
        self._sleep = sleep
        self._backoff = backoff
        self._default_retry = retry
        self._durable_retry = durable_retry
        self._timed = timed
        # The latest heartbeat details of each activity slot, for its next attempt.
        self._details: dict[int, Any] = {p.slot: p.details for p in priors if p.details is not None}
        # Set when the run blocks on RETRY: the state of each activity that waits, which the store
        # keeps (Outcome.retry): one, or the waiting tasks of a parallel group.
        self.retry_waits: list[RetryWait] = []
        self._finished = finished
        self._parallel = parallel
        # The slot of that group's first task, which names the group in the store (read by
        # the worker's `record` for the group's tasks); None outside a group.
        self.parallel_group: int | None = None
        self._signal_cursor: dict[str, int] = {}
        self._consumed: list[int] = []
        # "kind:name" of every command issued, replayed or not: kept in dry runs only.
        self.issued: list[str] = []
        # A BaseException that is not the engine's own (KeyboardInterrupt, SystemExit, …)
        # raised by an activity, and where: the run is interrupted, not failed, even if
        # workflow code catches it (`execute` raises it again).
        self.interrupted: BaseException | None = None
        self.interrupted_in = ""
        self._logger: WorkflowLog | None = None  # made when the code first asks for it
        # The traceback of each activity failure this run recorded, by slot: set before the
        # failed record is handed to `record`, which may take it (the worker stores it beside it).
        self.tracebacks: dict[int, str] = {}

    # What the worker, the async loop, the thread guard and dry runs read and set of the cursor's state.

    @property
    def fatal(self) -> ReplaylogError | None:
        """The run's sticky error: once set, every later command raises it again."""
        return self._c.fatal

    @fatal.setter
    def fatal(self, error: ReplaylogError | None) -> None:
        self._c.fatal = error

    @property
    def cancel_requested(self) -> str | None:
        """An operator's cancel request known to this run (its reason, "" if none given), or None."""
        return self._c.cancel_requested

    @cancel_requested.setter
    def cancel_requested(self, reason: str | None) -> None:
        self._c.cancel_requested = reason

    @property
    def cancel_delivered(self) -> bool:
        """Whether the cancel request was delivered (raised in workflow code) in this run."""
        return self._c.cancel_delivered

    @property
    def executed_commands(self) -> int:
        """How many slots this run executed live."""
        return self._c.executed

    @property
    def replayed_commands(self) -> int:
        """How many slots this run replayed from history."""
        return self._c.replayed

    @property
    def new_commands(self) -> list[CommandRecord]:
        """The new outcomes, when no `record` callback took them (the in-memory runner)."""
        commands: list[CommandRecord] = self._c.new_commands
        return commands

    @property
    def workflow_id(self) -> str:
        """The id of the workflow this context runs."""
        return self._workflow_id

    @property
    def is_replaying(self) -> bool:
        """True while the code replays recorded slots; False from the first slot it runs live.

        The cursor decides: True while the next command's slot is in history. A signal wait
        takes no slot, so code between the last recorded slot and a wait that blocked an
        earlier run runs again, live, on the resumption. A dry run (`replaylog check`) is all replay.
        """
        return self._c.dry_run or self._c.index < self._c.history_len

    @property
    def logger(self) -> WorkflowLog:
        """A `logging` logger (a LoggerAdapter of "replaylog.workflow") that writes nothing while
        `is_replaying`: a line is written once, when the code reaches it live. Each record carries
        the workflow id (`record.workflow_id`) and the slot its next command takes (`record.slot`)."""
        if self._logger is None:
            self._logger = WorkflowLog(self._workflow_id, lambda: self.is_replaying, lambda: self._c.index)
        return self._logger

    # -- the guard

    def _guard(self, slot: int, kind: str, name: str) -> CommandRecord | None:
        """Return the recorded slot to replay, None to execute live; raise on divergence."""
        if self._c.dry_run:
            self.issued.append(f"{kind}:{name}")
        if self._c.fatal is not None:
            # Code caught the first fatal error and went on: stop it again.
            raise self._c.fatal
        if slot >= self._c.history_len:
            if self._c.dry_run:
                raise DryRunStop(slot, f"{kind}:{name}")
            if self._max_slots is not None and slot >= self._max_slots:
                self._c.fatal = HistoryTooLongError(
                    f"workflow {self._workflow_id!r} reached the cap of {self._max_slots} slots in one history"
                    f" (at {kind}:{name}): call ctx.continue_as_new(input) to go on in a fresh history")
                raise self._c.fatal
            return None
        rec: CommandRecord = self._c.commands[slot]
        if rec.kind != kind or rec.name != name:
            issued = f"{kind}:{name}"
            if rec.kind == CANCEL and rec.name == issued:
                self._c.replayed += 1
                self._c.cancel_delivered = True
                raise WorkflowCancelled(rec.value or "")
            self._c.fatal = NonDeterministicError(
                Diagnostic(
                    slot=slot,
                    recorded=rec.label,
                    issued=issued,
                    message=(
                        f"non-determinism at slot {slot}: history has {rec.label}, "
                        f"the workflow issued {issued}"
                    ),
                )
            )
            raise self._c.fatal
        return rec

    def _append(self, slot: int, rec: CommandRecord) -> None:
        if self._c.record is not None:
            self._c.record(slot, rec)
        else:
            self._c.new_commands.append(rec)

    def _cancelled_here(self, label: str) -> None:
        """Where the code would block (a wait, a sleep): raise a cancel delivered or requested here.

        A cancel slot for `label` at the cursor was delivered here: it is raised again,
        whatever arrived or came due since. Live, a request not yet delivered is recorded
        here and raised.
        """
        slot = self._c.index
        if slot < self._c.history_len:
            rec = self._c.commands[slot]
            if rec.kind == CANCEL and rec.name == label:
                self._c.index = slot + 1
                self._c.replayed += 1
                self._c.cancel_delivered = True
                if self._c.dry_run:
                    self.issued.append(rec.label)
                raise WorkflowCancelled(rec.value or "")
        elif self._c.cancel_requested is not None and not self._c.cancel_delivered and not self._c.dry_run:
            self._c.index = slot + 1
            self._deliver_cancel(slot, label)

    def _deliver_cancel(self, slot: int, issued: str) -> None:
        """Record that the cancel request is delivered at `slot`, instead of `issued`, and raise it."""
        reason = self._c.cancel_requested or ""
        self._c.cancel_delivered = True
        self._c.executed += 1
        self._append(slot, CommandRecord(CANCEL, issued, True, reason, None, 1))
        raise WorkflowCancelled(reason)

    # -- commands

    def _call_activity(
        self, fn_or_name: Callable[..., Any] | str, *args: Any, max_retries: int | None = None,
        retry: RetryPolicy | None = None, timeout: float | None = None, heartbeat_timeout: float | None = None,
        **kwargs: Any
    ) -> Any:
        """Run an activity once, durably: replay its recorded outcome, or execute and record it.

        Args:
            fn_or_name: an @activity function, or the name of one in the app.
            max_retries: attempts in the live branch before the failure is recorded
                (as in the reference: the total number of attempts, at least 1), 50 ms
                after the first failure and doubling.
            retry: a RetryPolicy (engine.retry) instead: its attempts, waits and
                non-retryable errors. Without either, the activity's policy
                (`@activity(retry=...)`), else the app's (`default_retry`), else 3
                attempts as `max_retries=3`.
            timeout: seconds an attempt may run (start to close); one still running then
                fails with ActivityTimeout (and is retried under the policy), and its late
                result is discarded.
            heartbeat_timeout: seconds an attempt may go without calling
                `current_activity().heartbeat()` before it fails with ActivityTimeout (and
                another worker takes the workflow over if this one stopped answering).

        Raises:
            ActivityError: the activity failed permanently (now, or in history).
            TypeError: both `retry` and `max_retries` are given, or `retry` is no RetryPolicy
                (nothing is recorded). ValueError: a timeout is not a positive number of seconds.
        """
        if retry is None and max_retries is None and timeout is None and heartbeat_timeout is None:
            # The commonest slot (no options; replayed, or a live first attempt) on the compiled
            # cursor (engine.cursor); what it declines runs below, as does the rest of an attempt
            # it hands back.
            value = self._c.activity(fn_or_name, args, kwargs)
            if value is not DECLINED:
                return self._finish_handback(value, args, kwargs) if type(value) is Handback else value
        return self._activity(fn_or_name, args, kwargs, max_retries, retry, timeout, heartbeat_timeout)

    if TYPE_CHECKING:
        call_activity = _call_activity
    else:
        def call_activity(self, fn_or_name, *args, **kwargs):
            # Trick "no keyword defaults": `_call_activity` is this method as documented and
            # type-checked (its signature and docstring are this one's). Its four keyword-only
            # options cost a lookup of each default on every call, ~630 CPU instructions, a
            # slot's 1.7% (bench.instructions): a call with no keyword at all, the commonest,
            # goes to the compiled cursor from here.
            if kwargs:
                return self._call_activity(fn_or_name, *args, **kwargs)
            value = self._c.activity(fn_or_name, args, kwargs)
            if value is not DECLINED:
                return self._finish_handback(value, args, kwargs) if type(value) is Handback else value
            return self._activity(fn_or_name, args, kwargs, None, None, None, None)

        call_activity.__doc__ = _call_activity.__doc__
        call_activity.__signature__ = inspect.signature(_call_activity)

    def _activity(self, fn_or_name: Callable[..., Any] | str, args: tuple[Any, ...], kwargs: dict[str, Any],
                  max_retries: int | None, retry: RetryPolicy | None, timeout: float | None,
                  heartbeat_timeout: float | None) -> Any:
        """`call_activity` past the compiled cursor: a slot it declined, or one called with options."""
        if isinstance(fn_or_name, str):
            name, fn = fn_or_name, self._c.activities.get(fn_or_name)
        else:
            name, fn = getattr(fn_or_name, "_replaylog_name", None) or fn_or_name.__name__, fn_or_name
        slot = self._c.index
        attempts, policy = self._policy(fn, max_retries, retry, "call_activity")
        limits = None if timeout is None and heartbeat_timeout is None else _limits(
            timeout, heartbeat_timeout, "call_activity")
        self._c.index = slot + 1
        checked = fn not in _UNCHECKED
        # args_key's commonest case (one int) without a call.
        key = f"[{args[0]}]" if checked and len(args) == 1 and not kwargs and type(args[0]) is int else None
        # A live slot of a healthy run needs none of the guard: past history, no dry run, under the cap.
        if slot < self._c.history_len or self._c.dry_run or self._c.fatal is not None or slot >= self._c.slot_cap:
            rec = self._guard(slot, _ACTIVITY, name)
            if rec is not None:
                if rec.args is not None and checked and rec.args != key:
                    self._guard_args(slot, name, rec.args, args, kwargs)
                self._c.replayed += 1
                if rec.ok:
                    return rec.value
                raise ActivityError(slot, name, rec.error or "", rec.attempts)
        if self._c.cancel_requested is not None and not self._c.cancel_delivered:
            self._deliver_cancel(slot, f"activity:{name}")
        if fn is None:
            self._c.fatal = UnknownActivityError(f"slot {slot}: unknown activity {name!r}")
            raise self._c.fatal
        if checked and key is None:
            try:
                key = args_key(args, kwargs)
            except (TypeError, ValueError, RecursionError):
                self._args_key(slot, name, args, kwargs)  # raises the fatal ValueNotJSONError
        return self._run_activity(slot, name, fn, key, attempts, policy, args, kwargs, limits)

    def _finish_handback(self, back: Handback, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """Go on with a live first attempt the cursor ran (`Cursor.activity`): it raised, or returned a coroutine."""
        attempts, policy = self._policy(back.fn, None, None, "call_activity")
        return self._run_activity(back.slot, back.name, back.fn, back.key, attempts, policy, args, kwargs,
                                  handback=back)

    def _policy(self, fn: Callable[..., Any] | None, max_retries: int | None, retry: RetryPolicy | None,
                where: str) -> tuple[int, RetryPolicy | None]:
        """(attempts, policy) of a call: its own, its activity's, the app's, or 3 as `max_retries=3`.

        The policy is None for `max_retries` (its waits are the Context's `backoff`, doubling).
        """
        if retry is not None:
            if max_retries is not None:
                raise TypeError(f"{where}(): give retry= or max_retries=, not both")
            if not isinstance(retry, RetryPolicy):
                raise TypeError(f"{where}(retry=...) takes a RetryPolicy, not {type(retry).__name__}")
            return retry.max_attempts, retry
        if max_retries is not None:
            return max(1, int(max_retries)), None
        policy = (_POLICIES.get(fn) if fn is not None else None) or self._default_retry
        if policy is not None:
            return policy.max_attempts, policy
        return 3, None

    def _args_key(self, slot: int, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        """The key of a live call's arguments; a fatal ValueNotJSONError if JSON cannot hold one."""
        try:
            return args_key(args, kwargs)
        except (TypeError, ValueError, RecursionError) as exc:
            bad = next((a for a in (*args, *kwargs.values()) if _not_json(a)), args)
            self._c.fatal = ValueNotJSONError(
                f"slot {slot}: an argument of activity {name!r} is of type {_type_path(bad, exc)}, which JSON "
                "cannot hold (the argument guard records the arguments; use @activity(check_args=False) "
                "to opt out)"
            )
            raise self._c.fatal from None

    def _guard_args(self, slot: int, name: str, recorded: str, args: tuple[Any, ...],
                    kwargs: Mapping[str, Any]) -> None:
        """Raise a NonDeterministicError if a replayed activity was called with other arguments."""
        try:
            live = args_key(args, kwargs)
        except (TypeError, ValueError, RecursionError):
            live = "arguments JSON cannot hold"
        if live == recorded:
            return
        label = f"activity:{name}"
        self._c.fatal = NonDeterministicError(
            Diagnostic(
                slot=slot,
                recorded=f"{label} {show_args(recorded)}",
                issued=f"{label} {show_args(live)}",
                message=(
                    f"non-determinism at slot {slot}: activity {name!r} was called with different arguments: "
                    f"history has {show_args(recorded)}, the workflow passed {show_args(live)}"
                ),
            )
        )
        raise self._c.fatal

    def _run_activity(self, slot: int, name: str, fn: Callable[..., Any], key: str | None, attempts: int,
                      policy: RetryPolicy | None, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                      limits: tuple[float | None, float | None] | None = None,
                      task_prior: Attempts | None = None, handback: Handback | None = None) -> Any:
        """The live branch of an activity slot: its attempts, then its outcome recorded.

        `task_prior` is what earlier runs left of a parallel group's task at `slot`, if anything;
        `handback` the first attempt the cursor ran (counted and marked started already).
        """
        first = 1
        if handback is None:
            self._c.executed += 1
        if slot == self._c.prior_slot or task_prior is not None:
            # Earlier runs started this activity and recorded nothing: their attempts count.
            prior = task_prior or self._prior
            done = prior.attempts
            if done < attempts and prior.error is not None and prior.retry_at is None and not self._wait_to_retry(
                    slot, name, done, policy, ActivityTimeout(prior.error), prior.error):
                # The last attempt failed where no run could wait its backoff: another worker took
                # it over (its heartbeat stopped, its worker died). The wait is taken above, as after
                # a failure in this run; an ActivityTimeout the policy does not retry fails it now.
                attempts = done
            if done >= attempts:
                # The last allowed attempt never ended (a poison activity would otherwise
                # take down one worker after another): a failure, as if it had raised; or
                # it failed before a retry wait, and the policy now allows no more.
                error = prior.error or f"the worker died during attempt {done} of {attempts}"
                self._append(slot, CommandRecord(_ACTIVITY, name, False, None, error, done, key))
                raise ActivityError(slot, name, error, done)
            first = done + 1
            if prior.retry_at is not None and (self._durable_retry or not self._c.group) and (
                    float(self._clock()) < prior.retry_at):
                # Woken before the next attempt's time (a run handed back, or a task of a group
                # whose other tasks' waits ended first): wait on.
                raise self._retry_later(slot, name, done, prior.error or "", prior.retry_at)
        last_error = ""
        last_exc: Exception | None = None
        on_start, on_end = self._c.on_start, self._c.on_end
        for attempt in range(first, attempts + 1):
            if on_start is not None and handback is None:  # the cursor marked its attempt started
                on_start(slot, name, attempt)
            if self._c.group:
                _task_running.set((slot, name, attempt))
            else:
                self._c.running = (slot, name, attempt)
            try:
                if limits is not None:
                    value = self._timed_attempt(fn, args, kwargs, slot, name, attempt, limits)
                else:
                    if handback is None:
                        value = fn(*args, **kwargs) if kwargs else fn(*args)
                    else:
                        back, handback = handback, None
                        if back.raised is not None:
                            raise back.raised  # handled below as any attempt's failure
                        value = back.started  # a coroutine
                    if type(value) is CoroutineType and is_async(fn):
                        # Its task runs in a copy of this context: current_activity() reads the attempt there.
                        token = _task_running.set((slot, name, attempt))
                        try:
                            value = self._run_coroutine(value, slot, attempt)
                        finally:
                            _task_running.reset(token)
            except Exception as exc:  # noqa: BLE001 - any activity failure is data to record
                last_error = error_text(exc)
                last_exc = exc
                if on_end is not None:
                    on_end(slot, name, attempt, last_error)
                if attempt >= attempts:
                    continue
                if not self._wait_to_retry(slot, name, attempt, policy, exc, last_error):
                    attempts = attempt  # a non-retryable error: recorded at once
                    break
                continue
            except BaseException as exc:
                if not isinstance(exc, (WorkflowBlocked, DryRunStop, RunSuspended)):
                    # Not a failure of the activity, and nothing is recorded: the run stops,
                    # and any later command raises again (workflow code may catch this).
                    self.interrupted = exc
                    self.interrupted_in = f"activity {name!r} at slot {slot} (attempt {attempt} of {attempts})"
                    self._c.fatal = _Interrupted(self.interrupted_in)
                raise
            finally:
                self._c.running = None
            if on_end is not None:
                on_end(slot, name, attempt, None)
            if value is not None and type(value) not in _PLAIN_JSON:
                if type(value) is CoroutineType:
                    value.close()  # never awaited: nothing of it ran
                    self._c.fatal = ValueNotJSONError(
                        f"slot {slot}: activity {name!r} is a plain function that returned a coroutine, which "
                        "JSON cannot hold: declare it `async def` so that the worker awaits it")
                    raise self._c.fatal
                try:
                    value = to_json_value(value, f"slot {slot}: the value activity {name!r} returned")
                except ValueNotJSONError as exc:
                    self._c.fatal = exc
                    raise
            # _append inline: once per live slot, a Python call fewer (~500 CPU instructions).
            rec = new_record(CommandRecord, (_ACTIVITY, name, True, value, None, attempt, key))
            record = self._c.record
            if record is not None:
                record(slot, rec)
            else:
                self._c.new_commands.append(rec)
            return value
        shown = None if last_exc is None else user_traceback(last_exc)
        if shown is not None:
            self.tracebacks[slot] = shown
        self._append(slot, CommandRecord(_ACTIVITY, name, False, None, last_error, attempts, key))
        raise ActivityError(slot, name, last_error, attempts)

    def _wait_to_retry(self, slot: int, name: str, attempt: int, policy: RetryPolicy | None, exc: Exception,
                       error: str) -> bool:
        """Wait as the policy says after failed attempt `attempt` (`exc`, shown as `error`); False if the
        policy retries no such error (the activity fails now).

        Raises:
            WorkflowBlocked: a durable wait: the run ends blocked on RETRY until the next attempt's time.
        """
        if policy is None:
            # Backoff reads the injected clock only through sleep: no wall clock here.
            self._sleep(self._backoff * (2 ** (attempt - 1)))
            return True
        if not policy.retries(exc):
            return False
        wait = policy.delay(attempt)
        if wait > DURABLE_AFTER and self._durable_retry:
            # A durable timer: the run ends here, holding no thread, and the store keeps the
            # attempts made; the run that wakes at `retry_at` counts on from them. (A task of a
            # parallel group ends its own thread: the run ends once the group's others have.)
            raise self._retry_later(slot, name, attempt, error, float(self._clock()) + wait) from None
        if wait > 0:
            self._sleep(wait)
        return True

    def _retry_later(self, slot: int, name: str, attempts: int, error: str, retry_at: float) -> WorkflowBlocked:
        """The block that ends the run until `retry_at`, the activity's wait noted for the store."""
        lane = 0 if self.parallel_group is None else slot - self.parallel_group + 1
        self.retry_waits.append(RetryWait(slot, name, attempts, error, retry_at, lane))
        return WorkflowBlocked(RETRY, retry_at)

    @property
    def retry_wait(self) -> RetryWait | None:
        """The first activity wait the run blocked on RETRY for, if any (see `retry_waits`)."""
        return self.retry_waits[0] if self.retry_waits else None

    def _timed_attempt(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any], slot: int,
                       name: str, attempt: int, limits: tuple[float | None, float | None]) -> Any:
        """One attempt under a timeout or a heartbeat timeout: on its own thread, through the hooks."""

        timeout, heartbeat_timeout = limits
        if self._timed is not None and heartbeat_timeout is None and is_async(fn):
            # An async attempt needs no thread to be timed: its task is awaited under the timeout
            # on the worker's loop, and cancelled (CancelledError at its current await) when it passes.
            token = _task_running.set((slot, name, attempt))
            try:
                return self._run_coroutine(fn(*args, **kwargs), slot, attempt, timeout)
            finally:
                _task_running.reset(token)

        def body() -> Any:
            _task_running.set((slot, name, attempt))  # current_activity() on the attempt's own thread
            value = fn(*args, **kwargs)
            if type(value) is CoroutineType and is_async(fn):
                # Under a heartbeat timeout the attempt's thread waits for the task (hold): its
                # heartbeats are watched from there, as a sync attempt's are.
                value = self._run_coroutine(value, slot, attempt, None, True)
            return value

        copied = contextvars.copy_context()

        def call() -> Any:
            return copied.run(body)

        if self._timed is None:
            return call()  # no hooks: neither limit is enforced
        return self._timed.run_attempt(call, slot, name, attempt, *limits)

    def _heartbeat(self, slot: int, name: str, attempt: int, details: Any) -> None:
        """`current_activity().heartbeat(details)`: keep the details for the next attempt, tell the hooks."""
        details = to_json_value(details, f"slot {slot}: the heartbeat details of activity {name!r}")
        self._details[slot] = details
        if self._timed is not None:
            self._timed.heartbeat(slot, name, attempt, details)

    # -- parallel activities

    def task(self, fn_or_name: Callable[..., Any] | str, *args: Any, max_retries: int | None = None,
             retry: RetryPolicy | None = None, timeout: float | None = None, heartbeat_timeout: float | None = None,
             **kwargs: Any) -> Task:
        """Describe an activity call without running it, for `parallel`.

        `max_retries` and `retry` are `call_activity`'s; the waits between a task's attempts
        are slept in its own thread (a group's tasks end together, so none of them blocks
        the workflow on a retry on its own).

        Raises:
            TypeError: both `retry` and `max_retries` are given, or `retry` is no RetryPolicy.
        """
        self._policy(None, max_retries, retry, "task")  # refused here, before any slot
        _limits(timeout, heartbeat_timeout, "task")
        return Task(fn_or_name, args, kwargs, max_retries, retry, timeout, heartbeat_timeout)

    def parallel(self, tasks: Sequence[Task], max_concurrency: int = 8) -> list[Any]:
        """Run activity calls at once; their results in task order.

        The tasks take consecutive slots in task order, whatever order they finish in,
        so a replay is deterministic; each outcome is recorded as its task finishes. A
        replay returns the recorded outcomes and runs only the tasks history does not
        hold (a worker that died in the middle of the group left them unrecorded).

        Raises:
            ParallelError: a task failed permanently; raised after every task finished
                and was recorded, carrying each task's outcome.
            TypeError, ValueError: `tasks` is empty or holds something that is not a
                Task; `max_concurrency` is not a positive int (nothing is recorded).
        """
        if not isinstance(tasks, (list, tuple)):
            raise TypeError(f"parallel() takes a list of ctx.task(...), not {type(tasks).__name__}")
        if not tasks:
            raise ValueError("parallel() needs at least one task")
        for i, t in enumerate(tasks):
            if not isinstance(t, Task):
                raise TypeError(f"parallel(): task {i} is a {type(t).__name__}, not a ctx.task(...)")
        if type(max_concurrency) is not int or max_concurrency < 1:
            raise ValueError(f"parallel(): max_concurrency must be a positive int, not {max_concurrency!r}")
        base = self._c.index
        self._group_cancel(tasks[0])
        self._c.index = base + len(tasks)
        outcomes: list[Any] = [None] * len(tasks)
        live: list[tuple[int, int, str, Callable[..., Any], str | None, Task]] = []
        for i, t in enumerate(tasks):
            slot = base + i
            if isinstance(t.fn_or_name, str):
                name, fn = t.fn_or_name, self._c.activities.get(t.fn_or_name)
            else:
                name, fn = registered_name(t.fn_or_name), t.fn_or_name
            checked = fn not in _UNCHECKED
            hole = slot < self._c.history_len and self._c.commands[slot] is HOLE
            rec = None
            if hole:
                if self._c.dry_run:
                    self.issued.append(f"activity:{name}")
                    raise DryRunStop(slot, f"activity:{name}")
            else:
                rec = self._guard(slot, _ACTIVITY, name)
            if rec is not None:
                if rec.args is not None and checked:
                    self._guard_args(slot, name, rec.args, t.args, t.kwargs)
                self._c.replayed += 1
                outcomes[i] = rec.value if rec.ok else ActivityError(slot, name, rec.error or "", rec.attempts)
                continue
            if fn is None:
                self._c.fatal = UnknownActivityError(f"slot {slot}: unknown activity {name!r}")
                raise self._c.fatal
            live.append((i, slot, name, fn, self._args_key(slot, name, t.args, t.kwargs) if checked else None, t))
        if live:
            self._run_group(base, live, outcomes, max_concurrency)
        if any(isinstance(o, ActivityError) for o in outcomes):
            raise ParallelError(outcomes)
        return outcomes

    def _group_cancel(self, first: Task) -> None:
        """An operator's cancel at a group is raised before any task runs, as at any other ctx call.

        It is recorded in the group's first slot, labelled with its first task, and the
        cursor moves past that slot only (as a cancelled activity's would): a replay raises
        it there again and then replays what the code did after catching it.
        """
        fn = first.fn_or_name
        # The cursor is at the group's first slot: the cancel point of any other ctx call.
        self._cancelled_here(f"activity:{fn if isinstance(fn, str) else registered_name(fn)}")

    def _run_group(self, base: int, live: list[tuple[int, int, str, Callable[..., Any], str | None, Task]],
                   outcomes: list[Any], max_concurrency: int) -> None:
        """Run the live tasks of the group whose first slot is `base`; re-raise the first that did not end
        in an outcome."""
        self._c.executed += len(live)
        raised: list[tuple[int, BaseException]] = []

        def thunk(i: int, slot: int, name: str, fn: Callable[..., Any], key: str | None, t: Task) -> None:
            try:
                attempts, policy = self._policy(fn, t.max_retries, t.retry, "task")
                outcomes[i] = self._run_activity(slot, name, fn, key, attempts, policy, t.args, t.kwargs,
                                                 _limits(t.timeout, t.heartbeat_timeout, "task"), priors.get(slot))
            except ActivityError as exc:
                outcomes[i] = exc
            except BaseException as exc:  # noqa: BLE001 - handed to the workflow thread below
                raised.append((i, exc))

        priors = self._priors
        hooks = self._parallel
        runner, record, on_start = (_one_by_one, self._c.record, self._c.on_start) if hooks is None else (
            hooks.run, hooks.record, hooks.on_start)
        # Each task runs in its own copy of this context (current_activity, _task_running).
        thunks = [functools.partial(contextvars.copy_context().run, thunk, *item) for item in live]
        saved = self._c.record, self._c.on_start
        self._c.record, self._c.on_start, self._c.group, self.parallel_group = record, on_start, True, base
        try:
            runner(thunks, max_concurrency)
        finally:
            self._c.record, self._c.on_start = saved
            self._c.group, self.parallel_group = False, None
        if raised:
            raised.sort(key=lambda r: r[0])
            stop = next((exc for _, exc in raised if not (isinstance(exc, WorkflowBlocked) and exc.name == RETRY)),
                        None)
            if stop is not None:
                raise stop
            # Every task that did not end waits for a retry: the run waits for the earliest.
            raise WorkflowBlocked(RETRY, min(w.retry_at for w in self.retry_waits))

    # -- child workflows

    def call_workflow(self, workflow: Callable[..., Any] | str, input: Any = None, id: str | None = None,
                      timeout: float | None = None) -> Any:
        """Start a child workflow and wait for its result, holding no thread.

        The child's id is recorded in this slot (by default derived from this workflow's
        id and the slot, so no replay ever starts a second child); the store starts the
        child in the same transaction, and when the child finishes it delivers the
        outcome to this workflow, which then returns the result.

        `timeout` (seconds) cancels the child (reason "timeout") that long after it starts;
        without one it inherits this workflow's deadline, if it has one.

        Raises:
            ChildWorkflowError: the child failed (its error text is carried).
            DuplicateWorkflowIdError: another workflow has the id given (recorded in this
                slot: the workflow's code may handle it, and a replay raises it again).
        """
        name = workflow if isinstance(workflow, str) else registered_name(workflow)
        limits = _limits(timeout, None, "call_workflow")
        child_id = self._start_child(_CHILD, name, input, id, {} if limits is None else {"timeout": limits[0]})
        outcome: dict[str, Any] = self._wait_signal(CHILD_PREFIX + child_id)
        if outcome.get("ok"):
            return outcome.get("result")
        raise ChildWorkflowError(child_id, name, str(outcome.get("error")))

    def _start_child(self, kind: str, name: str, input: Any, id: str | None, extra: dict[str, Any]) -> str:
        """The slot that starts a child (call_workflow's, start_workflow's): its id, replayed or recorded.

        The store starts the child in the transaction that records the slot; a refusal of
        its id is recorded too (DuplicateWorkflowIdError, raised again on every replay).
        """
        slot = self._c.index
        self._c.index = slot + 1
        rec = self._guard(slot, kind, name)
        if rec is not None:
            if rec.args is not None:
                self._guard_args(slot, name, rec.args, (input,), {})
            self._c.replayed += 1
            if not rec.ok:
                raise DuplicateWorkflowIdError(rec.error or "")
            return str(rec.value["id"])
        if kind != _CHILD and self._c.cancel_requested is not None and not self._c.cancel_delivered:
            self._deliver_cancel(slot, f"{kind}:{name}")
        child_id = self._child_id(slot, id)
        input = to_json_value(input, f"slot {slot}: the input of child workflow {name!r}")
        self._c.executed += 1
        key = args_key((input,), {})
        try:
            self._append(slot, CommandRecord(kind, name, True, {"id": child_id, "input": input, **extra}, None, 1, key))
        except DuplicateWorkflowIdError as exc:
            # Whether the id is free depends on other workflows, not on history: the refusal
            # is recorded, so that code which handles it replays down the same path.
            self._append(slot, CommandRecord(kind, name, False, None, str(exc), 1, key))
            raise
        except ReplaylogError as exc:  # an unknown workflow name: nothing was recorded
            self._c.fatal = exc
            raise
        return child_id

    def start_workflow(self, workflow: Callable[..., Any] | str, input: Any = None, id: str | None = None, *,
                       timeout: float | None = None, parent_close: str = "cancel") -> ChildHandle:
        """Start a child workflow without waiting for it: its handle (result, signal, cancel are ctx calls).

        Recorded in a slot of its own, as `call_workflow`'s start is; the child runs on its
        own while this workflow goes on. `parent_close` says what happens to the child if
        this workflow finishes (completes, fails or is cancelled) while it still runs:
        "cancel" (the default: WorkflowCancelled in the child, reason "parent closed"),
        "terminate" (stopped at once) or "abandon" (it runs on); each is in the child's
        audit trail. `timeout` as `call_workflow`'s.

        Raises:
            DuplicateWorkflowIdError: another workflow has the id given (recorded).
            ValueError: a bad id, timeout or parent_close (nothing is recorded).
        """
        if parent_close not in PARENT_CLOSE:
            raise ValueError(f"start_workflow(parent_close={parent_close!r}): say one of {', '.join(PARENT_CLOSE)}")
        name = workflow if isinstance(workflow, str) else registered_name(workflow)
        limits = _limits(timeout, None, "start_workflow")
        extra: dict[str, Any] = {"parent_close": parent_close}
        if limits is not None:
            extra["timeout"] = limits[0]
        return ChildHandle(self, self._start_child(_CHILD_START, name, input, id, extra), name)

    def _child_result(self, child: ChildHandle) -> Any:
        """`ChildHandle.result()`: a slot that holds the child's outcome once it has arrived."""
        slot = self._c.index
        self._c.index = slot + 1
        label = CHILD_PREFIX + child.id
        rec = self._guard(slot, _CHILD_RESULT, child.id)
        if rec is not None:
            self._c.replayed += 1
            self._next_signal(label)  # the outcome's signal, consumed as when the slot was recorded
            outcome = rec.value
        else:
            self._c.index = slot
            self._cancelled_here(f"{_CHILD_RESULT}:{child.id}")  # a cancel ends the wait, recorded here
            outcome = self._next_signal(label)
            if outcome is _NONE:
                raise WorkflowBlocked(label)
            self._c.index = slot + 1
            self._c.executed += 1
            self._append(slot, CommandRecord(_CHILD_RESULT, child.id, True, outcome))
        if outcome.get("ok"):
            return outcome.get("result")
        raise ChildWorkflowError(child.id, child.workflow, str(outcome.get("error")))

    def _child_act(self, child: ChildHandle, kind: str, name: str, value: Any, key: str) -> None:
        """`ChildHandle.signal()` / `cancel()`: a slot the store acts on in the transaction that records it.

        A child that had already finished is refused before anything is sent: the refusal
        is recorded in the slot (ok false, its text) and ChildWorkflowClosedError raised,
        again on every replay, so code that catches it replays down the same path.
        """
        self._record_value(kind, name, value, f"the {kind} of child workflow {name!r}", key,
                           lambda text: ChildWorkflowClosedError.replayed(child.id, text))

    def _child_id(self, slot: int, given: str | None) -> str:
        if given is None:
            return f"{self._workflow_id}.{slot}"
        if not isinstance(given, str) or not given or len(given) > 200 or any(
                c.isspace() or not c.isprintable() for c in given):
            raise ValueError(f"call_workflow(): id {given!r} is not valid: use 1-200 printable characters "
                             "without spaces")
        return given

    # -- approvals

    def request_approval(self, action: str, details: Any = None, timeout: float | None = None) -> dict[str, Any]:
        """Ask a person to approve `action`, and wait for the answer, holding no thread.

        The request (action, details, and a request id) is recorded in a slot of its
        own; the workflow then blocks until `replaylog approve ID` (or the console)
        answers that request and only it. Returns {"approved": bool, "by": "user@host",
        "note": text or None, "request": the request id}.

        With a `timeout` (seconds) the wait is `wait_signal`'s timed wait: its deadline is
        recorded in the next slot, and when it passes unanswered the timeout is recorded
        and SignalTimeout raised (again on every replay). The request is then closed: a
        late answer is refused, saying it timed out.

        Raises:
            SignalTimeout: no answer before the deadline.
            WorkflowCancelled: an operator cancelled the workflow while it waited.
            TypeError, ValueError: a bad action or timeout (nothing is recorded).
        """
        if not isinstance(action, str) or not action.strip():
            raise ValueError(f"request_approval(): the action must be a non-empty str, not {action!r}")
        if timeout is not None:
            _seconds(timeout, f"ctx.request_approval({action!r}, timeout=...)")  # refused before the slot
        slot = self._c.index
        self._c.index = slot + 1
        rid = approval_request_id(slot)
        rec = self._guard(slot, _APPROVAL, action)
        if rec is not None:
            self._c.replayed += 1
        else:
            details = to_json_value(details, f"slot {slot}: the details of approval {action!r}")
            self._c.executed += 1
            self._append(slot, CommandRecord(_APPROVAL, action, True,
                                             {"request": rid, "action": action, "details": details}))
        answer: dict[str, Any] = self._wait_signal(APPROVAL_PREFIX + rid, timeout)
        return answer

    def now(self) -> float:
        """A recorded clock read: the live clock once, the recorded value on every replay."""
        slot = self._c.index
        self._c.index += 1
        rec = self._guard(slot, _NOW, "now")
        if rec is not None:
            self._c.replayed += 1
            recorded: float = rec.value  # a now() slot always holds the float it recorded
            return recorded
        if self._c.cancel_requested is not None and not self._c.cancel_delivered:
            self._deliver_cancel(slot, "now:now")
        self._c.executed += 1
        value = float(self._clock())
        self._append(slot, new_record(CommandRecord, (_NOW, "now", True, value, None, 1, None)))
        return value

    def _recorded(self, kind: str, name: str, make: Callable[[], Any]) -> Any:
        """A command whose value is made once, live, and replayed from its slot ever after."""
        slot = self._c.index
        self._c.index += 1
        rec = self._guard(slot, kind, name)
        if rec is not None:
            self._c.replayed += 1
            return rec.value
        self._c.executed += 1
        value = make()
        self._append(slot, new_record(CommandRecord, (kind, name, True, value, None, 1, None)))
        return value

    def uuid4(self) -> str:
        """A random UUID (as text), generated once and recorded: the same on every replay."""
        value: str = self._recorded(SlotKind.UUID.value, "uuid4", lambda: str(uuid.uuid4()))
        return value

    def random(self) -> float:
        """A random float in [0, 1), generated once and recorded: the same on every replay."""
        value: float = self._recorded(SlotKind.RANDOM.value, "random", _random.random)
        return value

    def set_event(self, key: str, value: Any) -> None:
        """Publish a value under `key` for readers outside the workflow (a progress bar, a chat UI).

        Recorded in a slot of kind `event` when first reached and replayed ever after:
        readers (`handle.get_event`, `replaylog events`) see the latest value of each key,
        and every set stays in history. The value is capped like any stored value.

        Raises:
            TypeError: the key is not a string. ValueError: it is empty or longer than
                200 characters. ValueNotJSONError: JSON cannot hold the value.
        """
        if not isinstance(key, str):
            raise TypeError(f"ctx.set_event(key, value): the key must be a string, got {type(key).__name__}")
        if not key or len(key) > EVENT_KEY_LIMIT:
            raise ValueError(f"ctx.set_event(key, value): the key must be 1-{EVENT_KEY_LIMIT} characters,"
                             f" got {len(key)}")
        self._record_value(EVENT, key, value, f"the value of event {key!r}")

    def _record_value(self, kind: str, name: str, value: Any, what: str, key: str | None = None,
                      refusal: Callable[[str], ReplaylogError] | None = None) -> None:
        """A slot that only records a value (an event, search attributes, a child's signal): replayed, or
        recorded now (with `key`, the argument guard's key, where the store routes on one).

        With `refusal` (a child handle's act) the worker may refuse the act itself with
        ChildWorkflowClosedError: the refusal is recorded in the slot and raised, and a replay
        raises `refusal(its text)` again.
        """
        slot = self._c.index
        self._c.index = slot + 1
        rec = self._guard(slot, kind, name)
        if rec is not None:
            self._c.replayed += 1
            if not rec.ok and refusal is not None:
                raise refusal(rec.error or "")
            return
        if self._c.cancel_requested is not None and not self._c.cancel_delivered:
            self._deliver_cancel(slot, f"{kind}:{name}")
        try:
            value = to_json_value(value, f"slot {slot}: {what}")
            self._append(slot, new_record(CommandRecord, (kind, name, True, value, None, 1, key)))
        except ChildWorkflowClosedError as exc:
            if refusal is None:
                raise
            # Whether the child still runs depends on it, not on history: the refusal is recorded.
            self._append(slot, CommandRecord(kind, name, False, None, str(exc), 1, key))
            self._c.executed += 1
            raise
        except ReplaylogError:
            # Nothing was recorded (JSON cannot hold the value, or it is over the cap): the
            # slot stays free, so code that catches the error records its next command there.
            self._c.index = slot
            raise
        self._c.executed += 1

    def upsert_search_attributes(self, attributes: Mapping[str, str | int | float | bool | None]) -> None:
        """Set search attributes of this workflow, by which operators find it (`list --attr customer=c-42`).

        Recorded in a slot of kind `attributes` when first reached and replayed ever after;
        the store indexes each value (as text) for equality, and `list` shows them as
        columns. A key set again takes the new value; a key set to None is removed.

        Raises:
            TypeError: not a dict of string keys to str, int, float, bool or None.
            ValueError: a key empty or over 200 characters, a string value over 200, no key.
        """
        if not isinstance(attributes, Mapping) or not attributes:
            raise TypeError("ctx.upsert_search_attributes(attributes): give a non-empty dict of key to value")
        for key, value in attributes.items():
            if not isinstance(key, str) or not key or len(key) > EVENT_KEY_LIMIT:
                raise ValueError(f"ctx.upsert_search_attributes: key {key!r} must be a string of 1-{EVENT_KEY_LIMIT}"
                                 " characters")
            if value is not None and not isinstance(value, str | int | float | bool):
                raise TypeError(f"ctx.upsert_search_attributes: the value of {key!r} must be a str, int, float, bool"
                                f" or None, got {type(value).__name__}")
            if isinstance(value, str) and len(value) > ATTRIBUTE_VALUE_LIMIT:
                raise ValueError(f"ctx.upsert_search_attributes: the value of {key!r} is over"
                                 f" {ATTRIBUTE_VALUE_LIMIT} characters")
        self._record_value(ATTRIBUTES, ",".join(sorted(attributes)), dict(attributes), "the search attributes")

    # -- durable time

    def sleep(self, seconds: float) -> None:
        """Sleep durably: the wake time (now + seconds) is recorded in a timer slot when first reached.

        Until it passes, the run ends blocked on TIMER, holding no thread; a later run replays
        up to here and returns once the recorded time has come. Replays never move it.

        Raises:
            TypeError: `seconds` is not a number. ValueError: it is negative or not finite.
        """
        seconds = _seconds(seconds, "ctx.sleep(seconds)")
        self._timer(lambda now: now + seconds)

    def sleep_until(self, epoch_seconds: float) -> None:
        """Sleep durably until a wall-clock time (epoch seconds); a time already past fires at once.

        Raises:
            TypeError: not a number. ValueError: not finite, or past the year 9999.
        """
        wake_at = _epoch(epoch_seconds, "ctx.sleep_until(epoch_seconds)")
        self._timer(lambda _now: wake_at)

    def _timer(self, wake_from: Callable[[float], float]) -> None:
        slot = self._c.index
        self._c.index += 1
        rec = self._guard(slot, TIMER, "sleep")
        if rec is not None:
            self._c.replayed += 1
            wake_at = float(rec.value)
            self._cancelled_here("timer:sleep")  # a cancel ends a sleep
            if not self._passed(slot, wake_at):
                raise WorkflowBlocked(TIMER, wake_at)
            return
        self._c.executed += 1
        now = float(self._clock())
        wake_at = float(wake_from(now))
        self._append(slot, new_record(CommandRecord, (TIMER, "sleep", True, wake_at, None, 1, None)))
        self._cancelled_here("timer:sleep")
        if now < wake_at:
            raise WorkflowBlocked(TIMER, wake_at)

    def _passed(self, slot: int, wake_at: float) -> bool:
        """Whether the recorded time of a timer (or deadline) at `slot` has come.

        History that goes on past the slot says so without a clock (a replay of a long
        history reads none); at the end of history the clock decides, and a dry run, which
        reads no clock, knows only that a finished workflow's timers all fired.
        """
        if slot + 1 < self._c.history_len:
            return True
        if self._c.dry_run:
            return self._finished
        return float(self._clock()) >= wake_at

    def wait_signal(self, name: str, timeout: float | None = None) -> Any:
        """Return the payload of the next undelivered signal of this name, or block on it.

        Blocking holds no thread: the run ends, and a later run replays up to here.

        With a `timeout` (seconds), the wait takes a slot: its deadline is recorded when the
        wait is first reached, so replays and restarts never move it. When the deadline has
        passed with no signal, the timeout is recorded in the next slot and SignalTimeout is
        raised; a replay raises it again there, and a signal that arrives after it stays for
        the next wait of that name.

        Raises:
            WorkflowCancelled: an operator cancelled the workflow while (or before) it waited.
            SignalTimeout: no signal of that name arrived before the deadline.
            TypeError: `timeout` is not a number. ValueError: it is negative or not finite,
                or the name is empty or reserved (see `signal_name_refusal`: "timer", and
                names starting "approval:" or "child:", which only the engine sends).
        """
        refusal = signal_name_refusal(name)
        if refusal is not None:
            raise ValueError(f"ctx.wait_signal: {refusal}")
        return self._wait_signal(name, timeout)

    def _wait_signal(self, name: str, timeout: float | None = None) -> Any:
        """`wait_signal` on any name: for the engine's own waits (a child's outcome, an approval's answer)."""
        if timeout is None:
            self._cancelled_here(f"signal:{name}")
            payload = self._next_signal(name)
            if payload is _NONE:
                raise WorkflowBlocked(name)
            return payload
        seconds = _seconds(timeout, f"ctx.wait_signal({name!r}, timeout=...)")
        slot = self._c.index
        self._c.index += 1
        rec = self._guard(slot, _DEADLINE, name)
        now: float | None = None
        if rec is not None:
            self._c.replayed += 1
            deadline = float(rec.value)
            after = self._c.commands[slot + 1] if slot + 1 < self._c.history_len else None
            self._cancelled_here(f"signal:{name}")  # a cancel delivered at this wait, before any timeout
            if after is not None and after.kind == _TIMEOUT and after.name == name:
                # Decided before: time ran out, whatever signals arrived since.
                self._c.index += 1
                self._c.replayed += 1
                if self._c.dry_run:
                    self.issued.append(after.label)
                raise SignalTimeout(name, deadline, slot)
        else:
            self._c.executed += 1
            now = float(self._clock())
            deadline = now + seconds
            self._append(slot, new_record(CommandRecord, (_DEADLINE, name, True, deadline, None, 1, None)))
        self._cancelled_here(f"signal:{name}")
        payload = self._next_signal(name)
        if payload is not _NONE:
            return payload
        if slot + 1 < self._c.history_len:
            # History went on past this wait, and neither with a signal nor with a timeout:
            # the guard names the slot the code now disagrees with.
            self._c.index += 1
            self._guard(slot + 1, _TIMEOUT, name)
        if self._c.dry_run and not self._finished:
            raise WorkflowBlocked(name, deadline)  # a dry run reads no clock
        if now is None:
            now = float(self._clock()) if not self._c.dry_run else math.inf
        if now < deadline:
            raise WorkflowBlocked(name, deadline)
        tslot = self._c.index
        self._c.index += 1
        self._guard(tslot, _TIMEOUT, name)  # a dry run stops here: the timeout would be recorded live
        self._c.executed += 1
        self._append(tslot, new_record(CommandRecord, (_TIMEOUT, name, True, now, None, 1, None)))
        raise SignalTimeout(name, deadline, slot)

    def _next_signal(self, name: str) -> Any:
        """Consume the next signal of this name by its cursor; _NONE if none has arrived."""
        want = self._signal_cursor.get(name, 0)
        seen = 0
        for sig in self._signals:
            if sig.name == name:
                if seen == want:
                    self._signal_cursor[name] = want + 1
                    self._consumed.append(sig.seq)
                    return sig.payload
                seen += 1
        return _NONE

    # -- continue-as-new

    def continue_as_new(self, input: Any = _NONE) -> NoReturn:
        """End this run and go on as a fresh run of the same workflow id, with `input` (leave it out for none).

        The workflow's history starts again, empty: the store ends this run and starts the
        next in one transaction, and the signals this run did not consume carry over to it.
        Runs are numbered (`show ID --run N` shows an earlier one). Use it for a workflow that
        loops for ever (a poller, a subscription, an agent session), so that no history
        grows past the cap on slots.

        Raises:
            ContinueAsNew: always (the run ends here; workflow code must not catch it).
            ValueNotJSONError: `input` cannot be stored as JSON; the workflow fails, and no
                new run is started.
            WorkflowCancelled: an operator asked to cancel before it got here.
        """
        if self._c.fatal is not None:
            raise self._c.fatal
        self._cancelled_here("continue_as_new")
        if input is _NONE:
            raise ContinueAsNew(None, False)
        try:
            value = to_json_value(input, "the input of ctx.continue_as_new")
        except ValueNotJSONError as exc:
            self._c.fatal = exc  # sticky: code that catches it cannot go on as if it had continued
            raise
        raise ContinueAsNew(value, True)

    # -- versioning

    def patched(self, change_id: str) -> bool:
        """Whether to take the new code path of a change: versioning without breaking running workflows.

        Live, a marker slot is recorded and the answer is True. A replay of a history that has
        this marker here answers True; one recorded by code from before the change (something
        else at this slot, or a finished history's end) answers False and consumes nothing, so
        the old path replays. A marker of another change here is left for a later call, which
        is how patches stack: `if ctx.patched("v3"): … elif ctx.patched("v2"): …` replays a
        history made under `if ctx.patched("v2")` down the v2 branch.

        Raises:
            TypeError: the change id is not a string. ValueError: it is empty.
        """
        change_id = _change_id(change_id, "ctx.patched(change_id)")
        slot = self._c.index
        if self._c.fatal is None and (slot < self._c.history_len or (self._c.dry_run and self._finished)):
            rec = self._c.commands[slot] if slot < self._c.history_len else None
            if rec is None or rec.kind != _PATCH or rec.name != change_id:
                # Recorded by older code (no marker, or an older patch's marker, which a later
                # `patched` call of that id consumes): take the old path, consume nothing.
                return False
        self._c.index = slot + 1
        rec = self._guard(slot, _PATCH, change_id)
        if rec is not None:
            self._c.replayed += 1
            return True
        self._c.executed += 1
        self._append(slot, new_record(CommandRecord, (_PATCH, change_id, True, None, None, 1, None)))
        return True

    def deprecate_patch(self, change_id: str) -> None:
        """Retire a patch whose old path is gone: replay its marker where history has one, record none.

        Step two of retiring `patched(change_id)` (see docs/workflows.md): new runs record nothing here,
        and histories that hold the marker still replay. Once none of them is left, delete the call.

        Raises:
            TypeError: the change id is not a string. ValueError: it is empty.
        """
        change_id = _change_id(change_id, "ctx.deprecate_patch(change_id)")
        if self._c.fatal is not None:
            raise self._c.fatal
        slot = self._c.index
        if slot < self._c.history_len:
            rec = self._c.commands[slot]
            if rec.kind == _PATCH and rec.name == change_id:
                self._c.index = slot + 1
                self._c.replayed += 1
                if self._c.dry_run:
                    self.issued.append(rec.label)

    # -- after the run

    def unconsumed_divergence(self, instead: str = "completed without issuing it") -> NonDeterministicError | None:
        """A run that ended with recorded slots unconsumed is non-deterministic too.

        `instead` says how it ended ("completed without issuing it" for a completed run).
        """
        slot = self._c.index
        if slot >= self._c.history_len:
            return None
        rec = self._c.commands[slot]
        return NonDeterministicError(
            Diagnostic(
                slot=slot,
                recorded=rec.label,
                issued=None,
                message=(
                    f"non-determinism at slot {slot}: history has {rec.label}, "
                    f"the workflow {instead}"
                ),
            )
        )

    @property
    def consumed_signals(self) -> tuple[int, ...]:
        """Sequence numbers of the signals this run consumed."""
        return tuple(self._consumed)


# ---------------------------------------------------------------- running


def execute(fn: Callable[..., Any], ctx: Context, state: WorkflowState) -> Outcome:
    """Run workflow code against a context and classify what happened.

    LeaseLostError, DryRunStop and other BaseExceptions that are not ours propagate; so
    does a BaseException an activity raised (KeyboardInterrupt, SystemExit, …), even if
    workflow code caught it: the run was interrupted, it did not fail.
    """
    token = _current_context.set(ctx)  # for current_activity()
    asynchronous = is_async(fn)  # asked once a run, not again in _classify
    guarded = thread_guard.enter(registered_name(fn), asynchronous, ctx)  # workflow code starts no thread
    try:
        outcome = _classify(fn, ctx, state, asynchronous)
    finally:
        thread_guard.leave(guarded)
        _current_context.reset(token)
    if ctx.interrupted is not None:
        raise ctx.interrupted  # workflow code caught an activity's interruption: still one
    return outcome


@thread_guard.calls_workflow_code
def _classify(fn: Callable[..., Any], ctx: Context, state: WorkflowState, asynchronous: bool) -> Outcome:
    try:
        if asynchronous:
            from replaylog.engine import aio

            result = aio.drive(fn, ctx, (state.input,) if state.has_input else ())
        else:
            result = fn(ctx, state.input) if state.has_input else fn(ctx)
    except WorkflowBlocked as blocked:
        if ctx.fatal is not None:
            return _failed(ctx, ctx.fatal)
        return _outcome(ctx, Status.BLOCKED, blocked_on=blocked.name, wake_at=blocked.wake_at,
                        retry=tuple(ctx.retry_waits) if blocked.name == RETRY else ())
    except ContinueAsNew as cont:
        if ctx.fatal is not None:
            return _failed(ctx, ctx.fatal)
        leftover = ctx.unconsumed_divergence("continued as new without issuing it")
        if leftover is not None:
            return _failed(ctx, leftover)
        return _outcome(ctx, Status.CONTINUED, result=cont.input, next_has_input=cont.has_input)
    except Exception as exc:  # noqa: BLE001 - workflow code failing is an outcome
        if ctx.fatal is not None:
            return _failed(ctx, ctx.fatal)
        if isinstance(exc, WorkflowCancelled):
            return _outcome(ctx, Status.CANCELLED, error=error_text(exc))
        if isinstance(exc, ReplaylogError):
            return _failed(ctx, exc)
        return _outcome(ctx, Status.FAILED, error=f"workflow code raised {error_text(exc)}", error_kind="code",
                        traceback=None if ctx._c.dry_run else user_traceback(exc))
    if ctx.fatal is not None:
        return _failed(ctx, ctx.fatal)
    leftover = ctx.unconsumed_divergence()
    if leftover is not None:
        return _failed(ctx, leftover)
    try:
        result = to_json_value(result, "the workflow's result")
    except ValueNotJSONError as exc:
        return _failed(ctx, exc)
    return _outcome(ctx, Status.COMPLETED, result=result)


def _outcome(ctx: Context, status: Status, **kw: Any) -> Outcome:
    return Outcome(
        status=status,
        replayed_commands=ctx.replayed_commands,
        executed_commands=ctx.executed_commands,
        consumed_signals=ctx.consumed_signals,
        cancel_delivered=ctx.cancel_delivered,
        **kw,
    )


def _failed(ctx: Context, exc: ReplaylogError) -> Outcome:
    diagnostic = exc.diagnostic if isinstance(exc, NonDeterministicError) else None
    # Where in the workflow code it surfaced (the command that diverged, the call whose
    # activity failed): the engine's frames are left out, and a dry run keeps none.
    return _outcome(ctx, Status.FAILED, error=error_text(exc), diagnostic=diagnostic, error_kind=error_kind(exc),
                    traceback=None if ctx._c.dry_run else user_traceback(exc))


@dataclass(frozen=True)
class RunResult:
    """The in-memory runner's answer: the outcome and the state to persist."""

    outcome: Outcome
    state: WorkflowState
    context: Context = field(repr=False)

    @property
    def status(self) -> str:
        """Shortcut for outcome.status."""
        return self.outcome.status


def run(
    fn: Callable[..., Any],
    state: WorkflowState,
    *,
    clock: Callable[[], float],
    activities: Mapping[str, Callable[..., Any]] | None = None,
    workflow_id: str = "memory",
    sleep: Callable[[float], None] = lambda _s: None,
    retry: RetryPolicy | None = None,
) -> RunResult:
    """The pure in-memory runner: run a workflow against `state` and return the new state.

    `retry` is the app's default retry policy; every wait between attempts is `sleep`. An
    activity's `timeout` and `heartbeat_timeout` are enforced as a worker enforces them: such
    an attempt runs on a thread of its own and is measured in real time (engine.attempt_watch),
    whatever `clock` says, since they bound how long the activity's own code runs.
    """
    ctx = Context(state, workflow_id=workflow_id, activities=activities, clock=clock, sleep=sleep, retry=retry,
                  timed=LocalTimed())
    outcome = execute(fn, ctx, state)
    new_state = replace(state, commands=state.commands + tuple(ctx.new_commands))
    return RunResult(outcome, new_state, ctx)


def signal(state: WorkflowState, name: str, payload: Any = None) -> WorkflowState:
    """Append a signal to a copy of `state` (the in-memory counterpart of the store's signal)."""
    payload = to_json_value(payload, f"the payload of signal {name!r}")
    seq = state.signals[-1].seq + 1 if state.signals else 1
    return replace(state, signals=(*state.signals, SignalRecord(seq, name, payload)))


class Reason(StrEnum):
    """Why a dry replay answered as it did (`DryReplay.reason`); the command line and the console word it."""

    RUNS_LIVE = "runs_live"  # ok: the history replays; `slot` is the first the code would run live (`live`)
    FAILED_LIVE = "failed_live"  # ok: it replays up to `slot`, where its run was refused live (`error`)
    COMPLETES = "completes"  # ok
    ENDS_CANCELLED = "ends_cancelled"  # ok
    BLOCKS = "blocks"  # ok: it waits (`outcome.blocked_on`, `outcome.wake_at`)
    CONTINUES = "continues"  # ok: it continues as new (ctx.continue_as_new; `outcome.result` the next input)
    FAILS_AGAIN = "fails_again"  # ok: a failed workflow fails again with its recorded error (`error`)
    RECORDED_FAILURE = "recorded_failure"  # ok: it ends in an activity failure history holds (`error`)
    DIVERGES = "diverges"  # not ok: `diagnostic` positions it, `error` is its text
    ENDS_DIFFERENTLY = "ends_differently"  # not ok: a finished workflow's code now ends another way (`outcome`)
    CODE_FAILS = "code_fails"  # not ok: the workflow code fails (`error`)
    NO_CODE = "no_code"  # not ok: the code has no workflow of the recorded name (`error`)


@dataclass(frozen=True)
class DryReplay:
    """The verdict of replaying a history against the current code without side effects.

    `ok` is the answer (exit 0 or 1 for `check`), `reason` why; the fields a reason names
    say the rest. Worded for operators by `engine.text.verdict_text`.

    Attributes:
        replayed: the slots replayed. issued: every command the code issued, "kind:name".
        slot: where the verdict points: the slot the code would run live, the slot its run
            was refused at, or the divergence's.
        live: the command the code would run live at `slot` ("kind:name").
        diagnostic: a divergence: slot, what history holds, what the code issued.
        error: the error the verdict is about (see Reason).
        fixed: the workflow was failed by a divergence, and the code no longer diverges.
        status, recorded_error: the workflow's recorded status and error, as given.
        outcome: how the current code's replay ended, when it ran to an end.
    """

    ok: bool
    reason: Reason
    replayed: int = 0
    issued: tuple[str, ...] = ()
    slot: int | None = None
    live: str | None = None
    diagnostic: Diagnostic | None = None
    error: str | None = None
    fixed: bool = False
    status: str | None = None
    recorded_error: str | None = None
    outcome: Outcome | None = None

    @property
    def recorded_failure(self) -> bool:
        """The replay ends in an activity error that history holds: running it again fails again."""
        return self.reason is Reason.RECORDED_FAILURE


def dry_replay(
    fn: Callable[..., Any],
    state: WorkflowState,
    *,
    workflow_id: str = "",
    status: str | None = None,
    recorded_error: str | None = None,
    error_kind: str | None = None,
    diverged: bool = False,
) -> DryReplay:
    """Replay `state` against `fn` and stop at the first slot history does not hold.

    Nothing live runs: the clock is never read and no activity is called.

    Args:
        fn: the workflow function of the current code.
        state: the recorded history.
        workflow_id: for idempotency keys the code may read.
        status: the workflow's recorded status. A finished one (completed or failed)
            replays cleanly only if the current code ends where and how it ended: a
            history the code would extend, or leave unconsumed, has diverged.
        recorded_error: the error a failed workflow recorded.
        error_kind: what failed a failed workflow (ErrorKind): "engine" is our refusal of
            a live slot (an unknown activity, a value JSON cannot hold), which records
            nothing there, so a replay that stops at the end of its history stops where
            the run was refused.
        diverged: the failed workflow was failed by a divergence (a stored diagnostic):
            its recorded end is the engine's refusal, so the check is only whether the
            current code still diverges.
    """

    def no_clock() -> float:  # pragma: no cover - the dry run stops before any live read
        raise AssertionError("dry replay read the clock")

    finished = status is not None and status_info(status).code_ended and not diverged
    ctx = Context(state, workflow_id=workflow_id, clock=no_clock, dry_run=True, finished=finished)
    fixed = status == Status.FAILED and diverged

    def verdict(ok: bool, reason: Reason, **kw: Any) -> DryReplay:
        return DryReplay(ok, reason, ctx.replayed_commands, tuple(ctx.issued), fixed=fixed, status=status,
                         recorded_error=recorded_error, **kw)

    def diverges(diagnostic: Diagnostic) -> DryReplay:
        return verdict(False, Reason.DIVERGES, slot=diagnostic.slot, diagnostic=diagnostic,
                       error=error_text(NonDeterministicError(diagnostic)))

    try:
        outcome = execute(fn, ctx, state)
    except DryRunStop as stop:
        if not finished:
            return verdict(True, Reason.RUNS_LIVE, slot=stop.slot, live=stop.issued)
        if status == Status.FAILED and error_kind == "engine":
            # Its run was refused at this very slot, live: nothing was recorded there, so a
            # dry replay ends at the same point.
            return verdict(True, Reason.FAILED_LIVE, slot=stop.slot, error=recorded_error)
        ended = f"the workflow {status}" + (f" ({recorded_error})" if status == Status.FAILED and recorded_error
                                            else "")
        return diverges(Diagnostic(stop.slot, None, stop.issued,
                                   f"non-determinism at slot {stop.slot}: history ends there ({ended}), "
                                   f"the workflow issued {stop.issued}"))
    if outcome.diagnostic is not None:
        return verdict(False, Reason.DIVERGES, slot=outcome.diagnostic.slot, diagnostic=outcome.diagnostic,
                       error=outcome.error, outcome=outcome)
    if outcome.status != Status.COMPLETED:
        # Blocked or failed before the end of history: the recorded run went further with
        # the same inputs (signals only ever arrive), so the code has changed its path.
        waited = "a timer" if outcome.blocked_on == TIMER else f"signal {outcome.blocked_on!r}"
        instead = (f"waited on {waited} instead" if outcome.status == Status.BLOCKED
                   else f"failed before issuing it: {outcome.error}")
        leftover = ctx.unconsumed_divergence(instead)
        if leftover is not None:
            return diverges(leftover.diagnostic)
    if finished:
        if status == outcome.status and (status != Status.FAILED or outcome.error == recorded_error):
            reason = {Status.COMPLETED: Reason.COMPLETES, Status.CANCELLED: Reason.ENDS_CANCELLED,
                      Status.FAILED: Reason.FAILS_AGAIN}[outcome.status]
            return verdict(True, reason, error=outcome.error, outcome=outcome)
        return verdict(False, Reason.ENDS_DIFFERENTLY, error=outcome.error, outcome=outcome)
    if outcome.status == Status.BLOCKED:
        return verdict(True, Reason.BLOCKS, outcome=outcome)
    if outcome.status == Status.CONTINUED:
        return verdict(True, Reason.CONTINUES, outcome=outcome)
    if outcome.status == Status.COMPLETED:
        return verdict(True, Reason.COMPLETES, outcome=outcome)
    if outcome.status == Status.CANCELLED:
        return verdict(True, Reason.ENDS_CANCELLED, outcome=outcome)
    if outcome.error_kind == _ACTIVITY:
        return verdict(True, Reason.RECORDED_FAILURE, error=outcome.error, outcome=outcome)
    return verdict(False, Reason.CODE_FAILS, error=outcome.error, outcome=outcome)
