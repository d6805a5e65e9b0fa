"""The log store: the only package that speaks SQL or names a driver.

Callers (the worker, the command line, the console) see the protocols of
`engine.store.protocols`, the row types of `engine.store.rows`, the errors of
`engine.errors` (every driver error is one of them by the time it leaves this package:
`StoreError`, `StoreBusyError` for a lock held too long, `NotADatabaseError` for a
damaged file), and `open_store`, the one place a store is built, which picks the
backend by the location's URL.

- `shared/`: what both backends run, written once: `base` (the SQL dialect and the
  primitives each connection implements), `keys` (the command key encoding), `reads`
  and `operations` (the reads and the operator writes), `workers` (which worker serves
  what), `migrations` (every schema change after 0.1.0, for both).
- `sqlite/`: one file shared by the processes of one host (`SQLiteStore`).
- `postgres/`: a server shared by hosts (`PostgresStore`); it imports nothing of `sqlite/`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from replaylog.engine.errors import StoreError
from replaylog.engine.store.postgres.url import is_postgres_url, redact_url
from replaylog.engine.store.protocols import OperatorStore, ReaderStore, Store, WorkerStore
from replaylog.engine.store.rows import (
    STATUSES,
    AuditRow,
    Claim,
    ClaimAsk,
    CommandRow,
    InflightRow,
    LiveWorker,
    PendingRecord,
    PruneBatch,
    QueueCounts,
    QueueRow,
    RunRow,
    ScheduleRow,
    SignalRow,
    StartMark,
    StoreStats,
    WorkflowFilter,
    WorkflowRow,
    WorkflowSummary,
    default_max_payload,
    encode_payload,
    encode_value,
    fit_text,
    over_cap,
)
from replaylog.engine.store.shared.keys import SLOT_LIMIT, slot_key
from replaylog.engine.store.shared.operations import REMOTE_ADDR_ENV, check_timeout, operator_name
from replaylog.engine.store.shared.workers import waiting_reason
from replaylog.engine.store.sqlite.connection import is_busy, is_damaged

__all__ = [
    "REMOTE_ADDR_ENV", "SLOT_LIMIT", "STATUSES", "AuditRow", "Claim", "ClaimAsk", "CommandRow", "InflightRow",
    "LiveWorker", "OperatorStore", "PendingRecord", "PruneBatch", "QueueCounts", "QueueRow", "ReaderStore", "RunRow",
    "ScheduleRow", "SignalRow", "StartMark", "Store",
    "StoreStats", "WorkerStore", "WorkflowFilter", "WorkflowRow", "WorkflowSummary",
    "check_timeout", "database_path", "default_max_payload", "encode_payload", "encode_value", "fit_text", "is_busy",
    "is_damaged", "is_postgres_url", "load_backend", "open_store", "operator_name", "over_cap", "redact_url",
    "slot_key", "sqlite_slot_path", "waiting_reason",
]

_SQLITE_URL = "sqlite:///"
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def sqlite_slot_path() -> str:
    """Which path the SQLite store's slot commits and history reads take in this process.

    "compiled" (engine.store.sqlite.speedups), or "pure Python (why)".
    """
    from replaylog.engine.store.sqlite import speedups

    return speedups.slot_path()


def database_path(url_or_path: str | os.PathLike[str]) -> Path:
    """The SQLite file a store location names: a path, or a `sqlite:///path` URL.

    As in SQLAlchemy, `sqlite:///replaylog.db` is relative to the current folder and
    `sqlite:////var/lib/replaylog.db` absolute. Any other URL raises StoreError with
    one line (a PostgreSQL URL names no file: see `open_store`).
    """
    if not isinstance(url_or_path, str):
        return Path(url_or_path)
    if url_or_path.startswith(_SQLITE_URL):
        rest = url_or_path[len(_SQLITE_URL):]
        if not rest:
            raise StoreError(f"{_SQLITE_URL} needs a file path after it (sqlite:///replaylog.db)")
        return Path(rest)
    scheme = _URL.match(url_or_path)
    if scheme is None:
        return Path(url_or_path)
    # Only the scheme goes into the message: the rest of a URL may hold a password.
    name = scheme.group(1).lower()
    if name in ("postgresql", "postgres"):
        raise StoreError(f"{name}:// names a PostgreSQL database, not a file")
    raise StoreError(f"unknown store URL scheme {name}://; give a SQLite file path, sqlite:///path"
                     " or postgresql://…")


def load_backend(url_or_path: str | os.PathLike[str]) -> None:
    """Import the module of the store a location needs, now rather than at its first open.

    A long-lived caller (a worker) calls it when it is built: the import is ~30 ms of start-up
    that would otherwise fall in its first moments of serving, and a missing psycopg is told
    before anything starts (StoreError).
    """
    _backend(url_or_path)


def _backend(url_or_path: str | os.PathLike[str]) -> Callable[..., Store]:
    # The store class, its module imported: the backends are named only here.
    if is_postgres_url(url_or_path):
        try:
            from replaylog.engine.store.postgres.store import PostgresStore
        except ImportError:
            raise StoreError("PostgreSQL stores need psycopg: pip install 'replaylog[postgres]'") from None
        return PostgresStore
    from replaylog.engine.store.sqlite.store import SQLiteStore

    return SQLiteStore


def open_store(url_or_path: str | os.PathLike[str], *, readonly: bool = False,
               max_payload: int | None = None, wake_clock: Callable[[], float] | None = None) -> Store:
    """Open the log store at a file path or URL: the one place a store is built.

    Args:
        url_or_path: a SQLite file path, or `sqlite:///path` (see `database_path`), or a
            PostgreSQL URL (`postgresql://…` or `postgres://…`, any libpq URL, unix sockets
            as `postgresql://user@/db?host=/path`), which needs the `postgres` extra (psycopg).
        readonly: reads only; every write raises ReadOnlyError.
        max_payload: cap in bytes on a signal payload's or an input's JSON text
            (default: $REPLAYLOG_MAX_PAYLOAD, else 1 MiB).
        wake_clock: the clock recorded wake times (timers, deadlines) are due by; the wall
            clock unless given (replaylog.testing gives one it moves by hand).
    """
    # A URL goes to the server's store as it is; a path or sqlite:/// URL, as the file it names.
    location = url_or_path if is_postgres_url(url_or_path) else database_path(url_or_path)
    store = _backend(url_or_path)(location, readonly=readonly, max_payload=max_payload)
    if wake_clock is not None:
        store.wake_clock = wake_clock
    return store
