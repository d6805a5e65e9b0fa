"""One vocabulary: the kinds of slot the core records, the statuses of a workflow, and what each is.

Both are str enums: a member is its stored text ("activity", "blocked"), so a member and
the text read back from a row compare and hash equal, and the stored text never changed.
Everything that asks what a kind or a status is (the core, the store, the worker, the
command line, the console) asks here; nothing keeps a list of its own.

Adding a slot kind is one line in `SlotKind` (its text and its `KindInfo`) plus the core
command that records it; adding a status is one line in `Status` plus the core (and its
colour in console/format.py, which a test asks for).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Self


class Group(StrEnum):
    """How the transcript (a workflow's slots as a conversation) shows a kind of slot."""

    CALL = "call"  # a model or tool call: the activity and its arguments
    APPROVAL = "approval"  # a request for a person's answer, and the answer
    CHILD = "child"  # a child workflow and its status
    CLOCK = "clock"  # a recorded clock read
    OTHER = "other"  # "kind:name" and the value


@dataclass(frozen=True, slots=True)
class KindInfo:
    """What a kind of slot is, for every reader of histories.

    Attributes:
        group: how the transcript shows it.
        time: its value is a time (epoch seconds), and this is what that time is, as a
            slot's facts name it ("wake time"); None for a value that is no time.
        time_note: the same time said in full, beside the time in a table cell.
        marker: the slot holds no value: it marks the code path a replay takes, said so.
    """

    group: Group = Group.OTHER
    time: str | None = None
    time_note: str | None = None
    marker: str | None = None


class _Described(StrEnum):
    """A str enum whose members are written `NAME = "text", info`: the stored text, and what it is."""

    info: object

    def __new__(cls, text: str, info: object) -> Self:
        member = str.__new__(cls, text)
        member._value_ = text
        member.info = info
        return member


class SlotKind(_Described):
    """The kinds of slot the core records: the `kind` of every CommandRecord (`kind:name`).

    Each member carries its `info` (KindInfo), given on the same line.
    """

    info: KindInfo

    ACTIVITY = "activity", KindInfo(Group.CALL)
    NOW = "now", KindInfo(Group.CLOCK, "clock read", "clock read")
    UUID = "uuid", KindInfo()
    RANDOM = "random", KindInfo()
    TIMER = "timer", KindInfo(time="wake time", time_note="wake time")
    DEADLINE = "deadline", KindInfo(time="deadline", time_note="deadline of the wait")
    TIMEOUT = "timeout", KindInfo(time="timed out at", time_note="timed out: no signal by the deadline")
    PATCH = "patch", KindInfo(marker="runs the patched code")
    # Where an operator's cancel request was delivered: its name is the command it interrupted
    # ("activity:charge", "signal:approve"), its value the reason.
    CANCEL = "cancel", KindInfo()
    APPROVAL = "approval", KindInfo(Group.APPROVAL)
    CHILD = "child", KindInfo(Group.CHILD)
    # ctx.start_workflow: a child started without waiting (value: id, input, parent_close, timeout);
    # its handle's result() records CHILD_RESULT (name: the child's id, value: its outcome),
    # signal() CHILD_SIGNAL (name: the signal's; value: child id, payload) and cancel()
    # CHILD_CANCEL (name: the child's id; value: the reason). The store acts on the child in
    # the transaction that records the slot.
    CHILD_START = "child_start", KindInfo(Group.CHILD)
    CHILD_RESULT = "child_result", KindInfo()
    CHILD_SIGNAL = "child_signal", KindInfo()
    CHILD_CANCEL = "child_cancel", KindInfo()
    # ctx.set_event(key, value): its name is the key; readers take the latest slot of each key.
    EVENT = "event", KindInfo()
    # ctx.upsert_search_attributes({...}): its name is the keys set, its value the dict; the
    # store keeps each workflow's current attributes in an index of their own (search_attributes).
    ATTRIBUTES = "attributes", KindInfo()


class Wait(StrEnum):
    """The words a blocked workflow's `blocked_on` holds for waits that time alone ends (any other
    word is the name of the signal it waits for). No signal may take one of these names.

    TIMER: a durable sleep (ctx.sleep), the timer slot's kind. RETRY: the durable wait between
    two attempts of an activity under a RetryPolicy (engine.retry), the next attempt's time
    its wake time.
    """

    TIMER = SlotKind.TIMER.value
    RETRY = "retry"


# Every kind's stored text, and its member: a row's text looked up without a ValueError.
_BY_TEXT: dict[str, SlotKind] = {k.value: k for k in SlotKind}
_UNKNOWN = KindInfo()


def is_kind(text: object) -> bool:
    """Whether `text` is the stored text of a slot kind."""
    return isinstance(text, str) and text in _BY_TEXT


def kind_info(text: str) -> KindInfo:
    """What the kind stored as `text` is; a kind this build does not know is shown as "other"."""
    kind = _BY_TEXT.get(text)
    return kind.info if kind is not None else _UNKNOWN


@dataclass(frozen=True, slots=True)
class StatusInfo:
    """What a workflow status is.

    Attributes:
        finished: no run comes after it: operators' writes that need a live workflow refuse it.
        code_ended: the workflow's own code ended it, so its history ends where the code did
            (a dry replay checks that the current code still ends there and so).
        outcome: a run of the core can end in it (`Outcome.status`).
        by_operator: an operator's request ended it, and its error is the operator's reason.
    """

    finished: bool = False
    code_ended: bool = False
    outcome: bool = False
    by_operator: bool = False


class Status(_Described):
    """The statuses of a workflow, as stored in its row. Each member carries its `info` (StatusInfo)."""

    info: StatusInfo

    PENDING = "pending", StatusInfo()
    RUNNING = "running", StatusInfo()
    BLOCKED = "blocked", StatusInfo(outcome=True)
    COMPLETED = "completed", StatusInfo(finished=True, code_ended=True, outcome=True)
    FAILED = "failed", StatusInfo(finished=True, code_ended=True, outcome=True)
    # The code ended on an operator's cancel request (it may have caught it and compensated).
    CANCELLED = "cancelled", StatusInfo(finished=True, code_ended=True, outcome=True, by_operator=True)
    # The status of an earlier run that ended in ctx.continue_as_new (a workflow's row never has
    # it: the workflow goes on, pending, in its next run).
    CONTINUED = "continued", StatusInfo(finished=True, code_ended=True, outcome=True)
    # Ended by an operator, not by its code: its history stops wherever the code was.
    TERMINATED = "terminated", StatusInfo(finished=True, by_operator=True)
    # Started on a queue (engine.queues) and not admitted yet: a claim admits it when the
    # queue has room, its priority comes up and its delay has passed. Last, so the console's
    # status keys 1-7 kept their meaning when it came.
    QUEUED = "queued", StatusInfo()


_STATUS_BY_TEXT: dict[str, Status] = {s.value: s for s in Status}

# The statuses no run comes after, and those a worker may still run.
FINISHED: frozenset[Status] = frozenset(s for s in Status if s.info.finished)
UNFINISHED: tuple[Status, ...] = tuple(s for s in Status if not s.info.finished)


def is_status(text: object) -> bool:
    """Whether `text` is a stored status."""
    return isinstance(text, str) and text in _STATUS_BY_TEXT


def status_info(text: str) -> StatusInfo:
    """What the status stored as `text` is (an unknown one: unfinished, like a status of a newer build)."""
    status = _STATUS_BY_TEXT.get(text)
    return status.info if status is not None else StatusInfo()
