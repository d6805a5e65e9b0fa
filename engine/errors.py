"""The error classes of replaylog: one root, small flat classes."""

from __future__ import annotations

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


class UnknownActivityError(ReplaylogError):
    """Workflow code called an activity name the app does not define."""


class UnknownWorkflowError(ReplaylogError):
    """A workflow name the app does not define."""


class ValueNotJSONError(ReplaylogError):
    """A value that must be stored cannot be represented as JSON."""


class StoreError(ReplaylogError):
    """Root of the log store's refusals."""


class StoreBusyError(StoreError):
    """Other writers held the database past the busy timeout; the same write may succeed later."""


class UnknownWorkflowIdError(StoreError):
    """No workflow has that id."""


class WorkflowClosedError(StoreError):
    """The workflow has completed or failed and accepts no more signals."""


class PayloadTooLargeError(StoreError):
    """An input or payload is larger than the configured cap."""


class DuplicateWorkflowIdError(StoreError):
    """A workflow with that id already exists."""


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
