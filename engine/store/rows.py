"""What every store hands out and takes in: row types, claims, statuses, and stored values.

Backend-neutral: nothing here speaks SQL. Every stored value is JSON text, never pickle.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from engine.core import CommandRecord, WorkflowState
from engine.errors import StoreError

STATUSES = ("pending", "running", "blocked", "completed", "failed")
# The sort keys a list of workflows accepts, and the column each one sorts by.
SORT_COLUMNS = {"id": "id", "workflow": "workflow", "status": "status", "blocked_on": "blocked_on",
                "slots": "slots", "updated": "updated_at", "created": "created_at"}
DEFAULT_MAX_PAYLOAD = 1024 * 1024


def default_max_payload() -> int:
    """The payload cap: $REPLAYLOG_MAX_PAYLOAD bytes if set, else 1 MiB."""
    raw = os.environ.get("REPLAYLOG_MAX_PAYLOAD")
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise StoreError(f"REPLAYLOG_MAX_PAYLOAD must be a whole number of bytes, not {raw!r}") from None
        if value <= 0:
            raise StoreError(f"REPLAYLOG_MAX_PAYLOAD must be positive, not {value}")
        return value
    return DEFAULT_MAX_PAYLOAD


# One encoder for every value: json.dumps with any option set builds a new encoder per
# call, which cost more than the INSERT the text goes into.
_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def dumps(value: Any) -> str:
    """A value as the JSON text a store keeps (compact, no NaN)."""
    if type(value) is int:
        return int.__repr__(value)  # what the encoder writes for an int, without its set-up
    return _encode(value)


def loads(text: str | None) -> Any:
    """A stored JSON text back as a value (None stays None)."""
    return None if text is None else json.loads(text)


# ---------------------------------------------------------------- rows


@dataclass(frozen=True)
class WorkflowRow:
    """One workflow as the store holds it."""

    id: str
    workflow: str
    status: str
    blocked_on: str | None
    input: Any
    has_input: bool
    result: Any
    error: str | None
    diagnostic: dict[str, Any] | None
    slots: int
    created_at: float
    updated_at: float
    lease_owner: str | None
    lease_expires: float | None


@dataclass(frozen=True)
class WorkflowSummary:
    """The columns a list of workflows shows: no input, result or diagnostic to decode."""

    id: str
    workflow: str
    status: str
    blocked_on: str | None
    slots: int
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class CommandRow:
    """One recorded command slot, with when it was recorded."""

    slot: int
    kind: str
    name: str
    ok: bool
    value: Any
    error: str | None
    attempts: int
    recorded_at: float


@dataclass(frozen=True)
class SignalRow:
    """One delivered signal and whether a run has consumed it."""

    seq: int
    name: str
    payload: Any
    consumed: bool
    sent_at: float


@dataclass(frozen=True)
class InflightRow:
    """An activity that was started and has no recorded outcome yet (it possibly ran)."""

    slot: int
    name: str
    attempts: int
    started_at: float


@dataclass(frozen=True)
class Claim:
    """A workflow this worker holds the lease of; `epoch` fences its writes."""

    id: str
    workflow: str
    owner: str
    epoch: int
    # The key of its slot 0 in the commands table (engine.store.keys.slot_key).
    base: int
    input: Any
    has_input: bool
    # The history, when the claim loaded it (short histories, loaded for a whole batch of
    # claims at once); None means the worker loads it with `load_state`.
    state: WorkflowState | None = field(default=None, compare=False, repr=False)
    # An activity an earlier run started at slot `inflight_slot` and has no outcome for:
    # how many times it was started, so that this run's attempts count on from there.
    inflight_slot: int | None = None
    inflight_attempts: int = 0


@dataclass(frozen=True)
class PendingRecord:
    """One outcome waiting to be committed by `commit_batch`."""

    claim: Claim
    slot: int
    record: CommandRecord
