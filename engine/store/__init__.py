"""The log store: the only package that speaks SQL."""

from __future__ import annotations

import os

from engine.store.connection import is_damaged
from engine.store.keys import SLOT_LIMIT, slot_key
from engine.store.rows import (
    OPEN_STATUSES,
    STATUSES,
    Claim,
    CommandRow,
    InflightRow,
    PendingRecord,
    SignalRow,
    WorkflowRow,
    WorkflowSummary,
    default_max_payload,
    new_workflow_id,
)
from engine.store.schema import APPLICATION_ID, SCHEMA_VERSION
from engine.store.sqlite import SQLiteStore

__all__ = [
    "APPLICATION_ID", "OPEN_STATUSES", "SCHEMA_VERSION", "SLOT_LIMIT", "STATUSES", "Claim", "CommandRow",
    "InflightRow", "PendingRecord", "SQLiteStore", "SignalRow", "WorkflowRow", "WorkflowSummary",
    "default_max_payload", "is_damaged", "new_workflow_id", "open_store", "slot_key",
]


def open_store(path: str | os.PathLike[str], *, readonly: bool = False, max_payload: int | None = None) -> SQLiteStore:
    """Open the log store at `path`."""
    return SQLiteStore(path, readonly=readonly, max_payload=max_payload)
