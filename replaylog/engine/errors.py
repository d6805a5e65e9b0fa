"""The error classes of replaylog: one root, small flat classes."""

from __future__ import annotations

import re
from dataclasses import dataclass


class ReplaylogError(Exception):
    """Root of every error replaylog raises on purpose."""


class ActivityError(ReplaylogError):
    """An activity failed permanently (retries exhausted), live or replayed from history.

    Attributes:
        slot: the command slot the failure is recorded at.
        name: the activity name.
        error: the recorded error text.
        attempts: how many attempts ran before the verdict was recorded.
    """

    def __init__(self, slot: int, name: str, error: str, attempts: int) -> None:
        super().__init__(f"activity {name!r} failed at slot {slot} after {attempts} attempt(s): {error}")
        self.slot = slot
        self.name = name
        self.error = error
        self.attempts = attempts


class ActivityTimeout(ReplaylogError):
    """An attempt of an activity ran past its `timeout` (start to close), or sent no heartbeat within
    its `heartbeat_timeout`: the attempt counts as failed with this error, and is retried under the
    activity's retry policy. Whatever the abandoned attempt returns later is discarded, never recorded;
    its next `heartbeat()` raises this error in it, so that an activity that heartbeats stops."""


class ParallelError(ReplaylogError):
    """One or more tasks of `ctx.parallel` failed permanently.

    Raised only after every task of the group finished and its outcome was recorded.

    Attributes:
        outcomes: one per task, in task order: its value, or its ActivityError.
        errors: the failed tasks' ActivityErrors, by task index.
    """

    def __init__(self, outcomes: list[object]) -> None:
        self.outcomes = outcomes
        self.errors = {i: o for i, o in enumerate(outcomes) if isinstance(o, ActivityError)}
        first = next(iter(self.errors.values()))
        super().__init__(f"{len(self.errors)} of {len(outcomes)} parallel task(s) failed; the first: {first}")


class ChildWorkflowError(ReplaylogError):
    """A child workflow started by `ctx.call_workflow` failed.

    Attributes:
        child_id: the child's workflow id.
        workflow: the child's workflow name.
        error: the child's recorded error text.
    """

    def __init__(self, child_id: str, workflow: str, error: str) -> None:
        super().__init__(f"child workflow {workflow!r} ({child_id}) failed: {error}")
        self.child_id = child_id
        self.workflow = workflow
        self.error = error


class ChildWorkflowClosedError(ReplaylogError):
    """A child handle's `signal()` or `cancel()` reached a child that had already finished.

    Recorded in the handle's slot (nothing is sent), so a replay raises it again: the
    workflow code may catch it and go on.

    Attributes:
        child_id: the child's workflow id.
        status: what the child was when the parent acted (completed, failed, cancelled,
            terminated), or "missing" if no workflow has its id.
    """

    def __init__(self, child_id: str, status: str, act: str) -> None:
        where = "does not exist" if status == "missing" else f"is {status}"
        super().__init__(f"child workflow {child_id!r} {where}: {act} not sent")
        self.child_id = child_id
        self.status = status

    @classmethod
    def replayed(cls, child_id: str, text: str) -> ChildWorkflowClosedError:
        """The error a slot recorded (its text as recorded), raised again by a replay."""
        found = re.search(r" is (\w+): ", text)
        exc = cls(child_id, found.group(1) if found else "missing", "")
        exc.args = (text,)
        return exc


@dataclass(frozen=True)
class Diagnostic:
    """Where and how a replay diverged from the recorded history.

    `recorded` and `issued` are "kind:name" strings, or None where there is nothing
    (the code issued nothing more, or history holds nothing at that slot).
    """

    slot: int
    recorded: str | None
    issued: str | None
    message: str

    def to_dict(self) -> dict[str, object]:
        """The JSON shape stored and printed by `show --json`."""
        return {"slot": self.slot, "recorded": self.recorded, "issued": self.issued, "message": self.message}


class NonDeterministicError(ReplaylogError):
    """The workflow issued a command that differs from the recorded history at a slot.

    It is sticky: the run fails even if workflow code catches it, because the
    positions after a divergence no longer mean anything.
    """

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic
        self.slot = diagnostic.slot
        self.recorded = diagnostic.recorded
        self.issued = diagnostic.issued


class SignalTimeout(ReplaylogError):
    """No signal of that name arrived before the deadline of `ctx.wait_signal(name, timeout=...)`.

    The timeout is an outcome recorded in history: a replay raises it again at the same point,
    and a signal that arrives later stays for the next wait of that name.

    Attributes:
        name: the signal name the workflow waited on.
        deadline: the recorded deadline (epoch seconds).
        slot: the slot holding the wait's recorded deadline.
    """

    def __init__(self, name: str, deadline: float, slot: int) -> None:
        super().__init__(f"no signal {name!r} arrived before the deadline of the wait at slot {slot}")
        self.name = name
        self.deadline = deadline
        self.slot = slot


class AsyncWorkflowError(ReplaylogError):
    """An async workflow did what would make its history depend on timing (the error names the call)."""


class WorkflowThreadError(ReplaylogError):
    """Workflow code started a thread, whose work no history records: the error names the call and where."""


class UnknownActivityError(ReplaylogError):
    """Workflow code called an activity name the app does not define."""


class UnknownWorkflowError(ReplaylogError):
    """A workflow name the app does not define."""


class ValueNotJSONError(ReplaylogError):
    """A value that must be stored cannot be represented as JSON."""


class WorkflowCancelled(ReplaylogError):
    """An operator cancelled the workflow: raised from its current or next ctx call.

    Workflow code may catch it to run compensating activities (recorded like any other);
    if it leaves the workflow, the workflow's status is `cancelled`. `reason` is the
    operator's reason ("" if none was given). A workflow handle's `result()` raises it too,
    naming the cancelled workflow in `workflow_id` (None inside workflow code).
    """

    def __init__(self, reason: str = "", workflow_id: str | None = None) -> None:
        said = reason or "cancelled by an operator"
        super().__init__(said if workflow_id is None else f"workflow {workflow_id!r} was cancelled: {said}")
        self.reason = reason
        self.workflow_id = workflow_id


class StoreError(ReplaylogError):
    """Root of the log store's refusals."""


class StoreBusyError(StoreError):
    """Other writers held the database past the busy timeout; the same write may succeed later."""


class UnknownWorkflowIdError(StoreError):
    """No workflow has that id."""


class WorkflowClosedError(StoreError):
    """The workflow has finished (completed, failed, cancelled or terminated) and accepts no more signals."""


class OperatorRefusedError(StoreError):
    """An operator action that does not apply to the workflow as it is (cancel a finished one, …)."""


class ScheduleRefusedError(OperatorRefusedError):
    """A schedule that cannot be: a malformed cron expression, an unknown time zone or name, no such schedule."""


class HistoryFormatError(StoreError):
    """An exported history document is malformed, or of another format or version."""


class PayloadTooLargeError(StoreError):
    """An input or payload is larger than the configured cap."""


class DuplicateWorkflowIdError(StoreError):
    """A workflow with that id already exists.

    Workflow code meets it from `ctx.call_workflow(..., id=...)` when another workflow has
    the id: the refusal is recorded in the child's slot, so code that catches it goes on
    (its own outcome decides the workflow's) and replays the same way.
    """


class SchemaVersionError(StoreError):
    """The database was written by a newer replaylog, or is not a replaylog database."""


class NotADatabaseError(StoreError):
    """The file is not a SQLite database, or it is corrupted."""


class ReadOnlyError(StoreError):
    """The store was opened read-only, or the file cannot be written."""


class LeaseLostError(BaseException):
    """This worker no longer holds the workflow's lease: its write was refused (fencing).

    A BaseException so that `except Exception` in workflow code cannot swallow it.
    """
