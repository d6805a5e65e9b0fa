"""The SQLite log store: the only module that speaks SQL.

One database file is shared by worker processes, CLI invocations and the console.
WAL journal, synchronous=FULL (a committed outcome survives power loss, or an activity
would run twice), a busy timeout of seconds, BEGIN IMMEDIATE for every write (a
deferred read-then-write transaction fails at once with "database is locked").

A `SQLiteStore` holds one connection and must stay on the thread that made it; open
one per thread. Every value is stored as JSON text, never pickle.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.core import CommandRecord, Outcome, SignalRecord, WorkflowState, new_record
from engine.errors import (
    DuplicateWorkflowIdError,
    NotADatabaseError,
    PayloadTooLargeError,
    ReadOnlyError,
    SchemaVersionError,
    StoreError,
    UnknownWorkflowIdError,
    ValueNotJSONError,
    WorkflowClosedError,
)
from engine.marks import Mark, board_path, read_board, read_marks

SCHEMA_VERSION = 2
# A command row's key is (workflow seq << 32) + slot: a workflow holds fewer slots than this.
SLOT_LIMIT = 1 << 32
# "RPLG": marks a database as ours, so we never add tables to somebody else's file.
APPLICATION_ID = 0x52504C47
DEFAULT_MAX_PAYLOAD = 1024 * 1024
BUSY_TIMEOUT_S = 10.0
# While a workflow records slot after slot, its updated_at moves at most this often
# (seconds): the console shows ages in seconds, and each restamp costs two index pages.
UPDATED_AT_STEP = 1.0
# The size the WAL file is truncated back to after it restarts (SQLite's autocheckpoint
# keeps it near 4 MiB while nothing pins it).
WAL_SIZE_LIMIT = 8 * 1024 * 1024
# A worker not seen for this many of its lease lengths counts as gone (served_names).
LIVE_TTLS = 3
STATUSES = ("pending", "running", "blocked", "completed", "failed")
OPEN_STATUSES = ("pending", "running", "blocked")
# Characters of a workflow's error a list row carries: a line on any terminal, while a page
# stays small whatever a stored error (a traceback) holds.
ERROR_PREVIEW = 400
SORT_COLUMNS = {"id": "id", "workflow": "workflow", "status": "status", "blocked_on": "blocked_on",
                "slots": "slots", "updated": "updated_at", "created": "created_at"}


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


# SQLite's primary result codes for a damaged file: SQLITE_CORRUPT and SQLITE_NOTADB.
_DAMAGE_CODES = (11, 26)


def is_damaged(exc: BaseException) -> bool:
    """Whether an error means the database file itself is damaged (corrupt, or not SQLite).

    Such an error will not go away by retrying, unlike "database is locked".
    """
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and code & 0xFF in _DAMAGE_CODES


# One encoder for every value: json.dumps with any option set builds a new encoder per
# call, which cost more than the INSERT the text goes into. Text is kept as UTF-8, not
# \u-escaped, so a document stored takes its own size (escaping tripled the size of
# non-Latin text, and the cap measured the escapes). Measured with timeit: the same
# cost as the ASCII encoder, ~0.2 us for a short string, ~1.6 us for a small dict;
# measuring the size adds ~0.03 us for ASCII text (isascii and len are O(1)).
_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode
# For text holding a lone surrogate (json.loads("\"\\ud800\"") makes one): UTF-8 cannot
# hold it, so such a value is stored \u-escaped, which reads back exactly.
_encode_ascii = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def encode_value(value: Any) -> tuple[str, int]:
    """A value's JSON text as stored, and its size in bytes (UTF-8): the one encoder of every stored value.

    Raises TypeError or ValueError (NaN, infinity) if JSON cannot hold the value.
    """
    if type(value) is int:
        text = int.__repr__(value)  # what the encoder writes for an int, without its set-up
        return text, len(text)
    text = _encode(value)
    if text.isascii():
        return text, len(text)
    try:
        return text, len(text.encode())
    except UnicodeEncodeError:
        text = _encode_ascii(value)
        return text, len(text)


def _dumps(value: Any) -> str:
    return encode_value(value)[0]


def over_cap(what: str, size: int, cap: int) -> str:
    """The message for a value over the payload cap, naming its size and the cap."""
    return f"{what} is {size} bytes, over the cap of {cap} bytes"


def fit_text(text: str, cap: int, what: str) -> str:
    """Error text as it can be stored: UTF-8 (a lone surrogate written as its escape) and
    within the cap (cut, with a note naming `what`, its size and the cap).

    Returns `text` itself when it needs neither.
    """
    if text.isascii() and len(text) <= cap:
        return text
    try:
        data = text.encode()
    except UnicodeEncodeError:
        data = text.encode("utf-8", "backslashreplace")
        text = data.decode()
    if len(data) <= cap:
        return text
    note = f" … (cut: {over_cap(what, len(data), cap)})"
    keep = max(0, cap - len(note.encode()))
    return data[:keep].decode("utf-8", "ignore") + note


def _loads(text: str | None) -> Any:
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
    # The last error that stopped a run of it without an outcome (an activity or its code
    # raised KeyboardInterrupt, SystemExit, …; or the worker failed): kept until a run
    # completes or fails the workflow.
    worker_error: str | None = None
    # After such an error the workflow is pending again, but not claimed before this time.
    retry_at: float | None = None
    # What failed a failed workflow (engine.core.ErrorKind): match on this, never on `error`'s text.
    error_kind: str | None = None


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
    error: str | None = None  # the start of a failed workflow's error (ERROR_PREVIEW characters)


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
    # The key of its slot 0 in the commands table: (workflow seq << 32).
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
    """One outcome waiting to be committed by `record_commands`."""

    claim: Claim
    slot: int
    record: CommandRecord
    # The value's JSON text if the caller encoded it already (the worker does, to check
    # it against the cap): then it is not encoded a second time.
    text: str | None = None


def _key_bounds(wf: str) -> tuple[str, str]:
    """The first and last command key of the workflows row named `wf`, in SQL.

    A workflow's command rows are keyed (seq << 32) + slot (see SQLiteStore._v1_to_v2).
    """
    return f"({wf}.seq << 32)", f"(({wf}.seq << 32) + {SLOT_LIMIT - 1})"


# For readers that join `workflows w` to `commands c`.
_FIRST_KEY, _LAST_KEY = _key_bounds("w")
# A running workflow's `slots` column is rewritten at most about once a second: most slot
# commits write only the command row (see SQLiteStore._write_record). Its true count is
# its last slot + 1, one seek in the commands' key; every reader that shows or decides by
# the count takes that for a running workflow.
_SLOTS_NOW = ("COALESCE((SELECT c.slot_key - {0} + 1 FROM commands c WHERE c.slot_key BETWEEN {0} AND {1}"
              " ORDER BY c.slot_key DESC LIMIT 1), 0)").format(*_key_bounds("workflows"))
_SLOTS_SHOWN = f"CASE WHEN status = 'running' THEN {_SLOTS_NOW} ELSE slots END AS slots"
_INSERT_COMMAND = ("INSERT INTO commands (slot_key, kind, name, ok, value, error, attempts, recorded_at)"
                   " VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
# A successful slot, the common case, binds no None and no bool: Python's sqlite3 binds
# only exact int, float and str directly and sends anything else (None included) through
# its adapter lookup, two failed attribute lookups with their exceptions: ~4,000 CPU
# instructions a slot, a twentieth of all the engine spent on one.
_INSERT_OK = ("INSERT INTO commands (slot_key, kind, name, ok, value, attempts, recorded_at)"
              " VALUES (?, ?, ?, 1, ?, ?, ?)")
# The commonest of all: an activity that succeeded at its first attempt. Every parameter
# bound costs ~500 instructions; these two are constants here.
_INSERT_FIRST_TRY = ("INSERT INTO commands (slot_key, kind, name, ok, value, attempts, recorded_at)"
                     " VALUES (?, 'activity', ?, 1, ?, 1, ?)")
_WF_COLUMNS = ("id, workflow, status, blocked_on, input, result, error, diagnostic, " + _SLOTS_SHOWN + ", "
               "created_at, updated_at, lease_owner, lease_expires, worker_error, retry_at, error_kind")


def _workflow_row(r: Sequence[Any]) -> WorkflowRow:
    return WorkflowRow(
        id=r[0], workflow=r[1], status=r[2], blocked_on=r[3], input=_loads(r[4]), has_input=r[4] is not None,
        result=_loads(r[5]), error=r[6], diagnostic=_loads(r[7]), slots=r[8], created_at=r[9],
        updated_at=r[10], lease_owner=r[11], lease_expires=r[12], worker_error=r[13], retry_at=r[14],
        error_kind=r[15],
    )


# Without ANALYZE statistics SQLite picks workflows_status_updated for `status = 'pending'
# AND workflow IN (...)` and walks every pending row, those of other names included (a
# worker that lacks their code leaves them there): name the partial index instead.
_BY_NAME = " INDEXED BY workflows_pending"


def _names_clause(names: Collection[str] | None) -> tuple[str, list[str]]:
    """` AND workflow IN (?, ...)` and its parameters; nothing for None (every name)."""
    if names is None:
        return "", []
    named = list(names)
    return f" AND workflow IN ({', '.join('?' * len(named))})", named


def waiting_reason(workflow: str, served: frozenset[str] | None) -> str | None:
    """Why a pending workflow waits for a worker (from `served_names`), or None if a live one knows it."""
    if served is None:
        return "no worker running"
    if workflow in served:
        return None
    return f"no running worker knows {workflow!r}"


def new_workflow_id() -> str:
    """A fresh, unguessable workflow id."""
    return "wf-" + uuid.uuid4().hex[:16]


_FOLD_MARK = (
    "INSERT INTO inflight (workflow_id, slot, name, attempts, started_at) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (workflow_id) DO UPDATE SET slot = excluded.slot, name = excluded.name,"
    " attempts = excluded.attempts, started_at = excluded.started_at"
)


# A claim loads the histories of the workflows it takes when they are at most this many
# slots long: one query per table for the whole batch, instead of a read transaction per
# workflow. Longer ones are loaded by their worker thread, so a claim never holds the
# write lock for long.
CLAIM_LOAD_SLOTS = 256
# Ids per `IN (...)` list (SQLite allows 32,766 parameters; batches are far smaller).
_IN_CHUNK = 500


# ---------------------------------------------------------------- the store


class SQLiteStore:
    """The log store on one SQLite file.

    Args:
        path: the database file; created (mode 0600) unless `readonly`.
        readonly: open with mode=ro; every write raises ReadOnlyError.
        max_payload: cap in bytes on a signal payload's or an input's JSON text.
    """

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False, max_payload: int | None = None) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.max_payload = max_payload if max_payload is not None else default_max_payload()
        self._stamped: dict[str, float] = {}  # workflow id → the updated_at this store last wrote
        # workflow id -> (lease epoch, data_version, next slot, the `slots` column as this
        # connection last wrote it) after its last slot written here (see _write_record).
        self._fenced: dict[str, tuple[int, int, int, int]] = {}
        self._conn = self._connect()
        # For the per-slot statements: conn.execute makes a new cursor on every call.
        self._cur = self._conn.cursor()

    # -- opening

    def _connect(self) -> sqlite3.Connection:
        path = self.path
        if path.is_dir():
            raise StoreError(f"database path {path} is a directory")
        if self.readonly:
            if not path.exists():
                raise StoreError(f"no database at {path}")
            uri = f"file:{path.resolve()}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=BUSY_TIMEOUT_S,
                                   check_same_thread=False)
        else:
            if not path.exists():
                if not path.parent.exists():
                    raise StoreError(f"cannot create database {path}: folder {path.parent} does not exist")
                try:
                    # Create it ourselves so it is 0600 from its first byte; SQLite gives
                    # the -wal and -shm files the database file's permissions.
                    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise StoreError(f"cannot create database {path}: {exc.strerror}") from None
            elif not os.access(path, os.W_OK):
                raise ReadOnlyError(f"database {path} is read-only (use --readonly to open it for reading)")
            conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            # Refuse another application's file (or a newer schema) before anything writes:
            # switching to WAL rewrites the file header.
            self._refuse_foreign(conn)
            if not self.readonly:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if mode.lower() != "wal":
                    raise StoreError(f"database {path} could not be switched to WAL (journal_mode={mode})")
                conn.execute("PRAGMA synchronous = FULL")
                # Once a checkpoint lets the WAL restart, cut the file back: a burst behind a
                # long reader must not leave a WAL of that size on disk for good.
                conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
            self._check_schema(conn)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise NotADatabaseError(f"{path} is not a usable SQLite database: {exc}") from None
        except StoreError:
            conn.close()
            raise
        return conn

    def _refuse_foreign(self, conn: sqlite3.Connection) -> int:
        """Raise SchemaVersionError for a file that is not ours or is newer; return its version."""
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables):
            raise SchemaVersionError(f"{self.path} is a SQLite database, but not a replaylog one")
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.path} has schema version {version}, newer than this replaylog "
                f"understands ({SCHEMA_VERSION}); upgrade replaylog"
            )
        return int(version)

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        version = self._refuse_foreign(conn)
        if version == SCHEMA_VERSION:
            return
        if self.readonly:
            if version == 0:
                raise SchemaVersionError(
                    f"{self.path} is not initialised (schema version 0); open it writable once"
                )
            raise SchemaVersionError(
                f"{self.path} has schema version {version}, older than this replaylog's ({SCHEMA_VERSION}); "
                "stop its workers, then open it writable once (`replaylog console` without --readonly) to upgrade it"
            )
        self._migrate(conn)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Bring the schema to SCHEMA_VERSION in one transaction, one step per version.

        A new database takes every step, so the upgrade path of an old one is the path
        every new one is created by.
        """
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Read under the write lock: another process may have migrated while we waited.
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version >= SCHEMA_VERSION:
                conn.execute("COMMIT")
                return
            if version < 1:
                self._create_v1(conn)
            if version < 2:
                self._v1_to_v2(conn)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @staticmethod
    def _create_v1(conn: sqlite3.Connection) -> None:
        # Imported here, once per new database: it takes ~40 ms to import (more than
        # a whole `replaylog signal`), and only creating the schema uses it.
        import sqlite_utils

        db = sqlite_utils.Database(conn)
        db["workflows"].create(
            {"id": str, "workflow": str, "status": str, "blocked_on": str, "input": str, "result": str,
             "error": str, "diagnostic": str, "slots": int, "created_at": float, "updated_at": float,
             "lease_owner": str, "lease_epoch": int, "lease_expires": float},
            pk="id", not_null={"workflow", "status", "slots", "lease_epoch", "created_at", "updated_at"},
            defaults={"slots": 0, "lease_epoch": 0},
        )
        db["workflows"].create_index(["status", "updated_at"], index_name="workflows_status_updated")
        db["workflows"].create_index(["updated_at"], index_name="workflows_updated")
        conn.execute(
            "CREATE TABLE commands (workflow_id TEXT, slot INTEGER, kind TEXT NOT NULL, name TEXT NOT NULL,"
            " ok INTEGER NOT NULL, value TEXT, error TEXT, attempts INTEGER NOT NULL, recorded_at FLOAT NOT NULL,"
            " PRIMARY KEY (workflow_id, slot)) WITHOUT ROWID"
        )
        db["signals"].create(
            {"workflow_id": str, "seq": int, "name": str, "payload": str, "consumed": int, "sent_at": float},
            pk=("workflow_id", "seq"), not_null={"name", "payload", "consumed", "sent_at"},
            defaults={"consumed": 0},
        )
        # The start marks of workers that are gone (engine.marks keeps the live ones),
        # one row per workflow. (WITHOUT ROWID from when every start mark was a row here.)
        conn.execute(
            "CREATE TABLE inflight (workflow_id TEXT PRIMARY KEY, slot INTEGER NOT NULL, name TEXT NOT NULL,"
            " attempts INTEGER NOT NULL, started_at FLOAT NOT NULL) WITHOUT ROWID"
        )

    @staticmethod
    def _v1_to_v2(conn: sqlite3.Connection) -> None:
        """Key each command row by one integer, (workflow seq << 32) + slot, in a rowid table.

        Version 1 kept commands in a WITHOUT ROWID b-tree keyed (workflow_id, slot).
        SQLite appends to a rowid table's last page cheaply (a full page gets one new
        page beside it), but splits an index b-tree, which is what a WITHOUT ROWID table
        is, by spreading its cells over three pages: a commit that split one wrote five
        pages, and a lone workflow's slots averaged 1.2 to 1.7 pages a commit instead of
        1.02. Each page a commit writes is fsynced on every slot's path. Workflows are
        numbered in start order, so the newest one's slots append; the row also loses
        the repeated id (half its size). `seq` is a column of its own, not the implicit
        rowid, which VACUUM may renumber.
        """
        conn.execute("ALTER TABLE workflows ADD COLUMN seq INTEGER")
        conn.execute("UPDATE workflows SET seq = rowid")
        conn.execute("CREATE UNIQUE INDEX workflows_seq ON workflows (seq)")
        conn.execute(
            "CREATE TABLE commands_v2 (slot_key INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL,"
            " ok INTEGER NOT NULL, value TEXT, error TEXT, attempts INTEGER NOT NULL, recorded_at FLOAT NOT NULL)"
        )
        copied = conn.execute(
            "INSERT INTO commands_v2 SELECT (w.seq << 32) + c.slot, c.kind, c.name, c.ok, c.value, c.error,"
            " c.attempts, c.recorded_at FROM commands c JOIN workflows w ON w.id = c.workflow_id"
            " ORDER BY w.seq, c.slot"
        ).rowcount
        total = conn.execute("SELECT COUNT(*) FROM commands").fetchone()[0]
        if copied != total:
            # Rows of no workflow: never written by replaylog. Keep the file as it is.
            raise SchemaVersionError(
                f"cannot upgrade: {total - copied} of {total} command rows belong to no workflow; "
                "the database is left at schema version 1"
            )
        conn.execute("DROP TABLE commands")
        conn.execute("ALTER TABLE commands_v2 RENAME TO commands")
        # For people reading the file with sqlite3: version 1's columns, by workflow id.
        conn.execute(
            "CREATE VIEW command_log AS SELECT w.id AS workflow_id, c.slot_key - (w.seq << 32) AS slot, c.kind,"
            " c.name, c.ok, c.value, c.error, c.attempts, c.recorded_at FROM workflows w JOIN commands c"
            f" ON c.slot_key BETWEEN w.seq << 32 AND (w.seq << 32) + {SLOT_LIMIT - 1}"
        )
        # The workers that run on this database and the workflow names their apps know,
        # so that a pending workflow no live worker knows can say so (engine.worker keeps
        # its row: written at start, stamped at each lease renewal, deleted at exit).
        conn.execute(
            "CREATE TABLE workers (owner TEXT PRIMARY KEY, host TEXT NOT NULL, pid INTEGER NOT NULL,"
            " app TEXT NOT NULL, names TEXT NOT NULL, ttl FLOAT NOT NULL, started_at FLOAT NOT NULL,"
            " seen_at FLOAT NOT NULL)"
        )
        # A worker claims pending workflows of its names only, oldest first: per name, one
        # range of this index in order. Partial, so a running workflow's restamps never touch it.
        conn.execute("CREATE INDEX workflows_pending ON workflows (workflow, updated_at) WHERE status = 'pending'")
        # A run stopped by an error that is no outcome (see SQLiteStore.hand_back): the last
        # such error, when the workflow may be claimed again, and how many in a row.
        conn.execute("ALTER TABLE workflows ADD COLUMN worker_error TEXT")
        conn.execute("ALTER TABLE workflows ADD COLUMN retry_at FLOAT")
        conn.execute("ALTER TABLE workflows ADD COLUMN interruptions INTEGER NOT NULL DEFAULT 0")
        # What failed a failed workflow (engine.core.ErrorKind), so readers match on it, not on the text.
        conn.execute("ALTER TABLE workflows ADD COLUMN error_kind TEXT")

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.readonly:
            raise ReadOnlyError(f"database {self.path} is open read-only")
        conn = self._conn
        # A write here may claim a workflow or drop a lease, and PRAGMA data_version does
        # not change for this connection's own commits: the slots written since are no
        # longer known to be fenced (see _write_record).
        self._fenced.clear()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise self._translate(exc) from None
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            conn.execute("ROLLBACK")
            raise self._translate(exc) from None

    def _translate(self, exc: sqlite3.OperationalError) -> StoreError:
        msg = str(exc)
        if "readonly" in msg or "read-only" in msg:
            return ReadOnlyError(f"database {self.path} cannot be written: {msg}")
        return StoreError(f"database {self.path}: {msg}")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        # One short read transaction: a consistent snapshot that does not hold back
        # checkpoints for longer than the query itself.
        conn = self._conn
        conn.execute("BEGIN")
        try:
            yield conn
        except BaseException:
            # End the snapshot without masking the error: on a damaged file COMMIT raises
            # too, and that second error would hide the first.
            if conn.in_transaction:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def encode_payload(self, value: Any, what: str) -> str:
        """Encode a value as JSON text within the payload cap, or raise naming `what`."""
        try:
            text, size = encode_value(value)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueNotJSONError(f"{what} cannot be stored as JSON: {exc}") from None
        if size > self.max_payload:
            raise PayloadTooLargeError(over_cap(what, size, self.max_payload))
        return text

    def data_version(self) -> int:
        """A number that changes whenever another connection commits to the database."""
        return self._conn.execute("PRAGMA data_version").fetchone()[0]

    # -- starting and signalling (operator writes)

    def start_workflow(self, workflow: str, input: Any = None, *, has_input: bool = True,
                       workflow_id: str | None = None) -> str:
        """Insert a pending workflow; return its id."""
        input_text = self.encode_payload(input, "the workflow input") if has_input else None
        wid = workflow_id or new_workflow_id()
        if not wid or len(wid) > 200 or any(c.isspace() or not c.isprintable() for c in wid):
            raise StoreError(f"workflow id {wid!r} is not valid: use 1-200 printable characters without spaces")
        now = time.time()
        with self._write() as conn:
            try:
                # seq numbers workflows in start order (under the write lock): the newest
                # workflow's command rows sort last, where appending to them is cheapest.
                conn.execute(
                    "INSERT INTO workflows (id, workflow, status, input, slots, created_at, updated_at, lease_epoch,"
                    " seq) VALUES (?, ?, 'pending', ?, 0, ?, ?, 0, (SELECT COALESCE(MAX(seq), 0) + 1 FROM workflows))",
                    (wid, workflow, input_text, now, now),
                )
            except sqlite3.IntegrityError:
                raise DuplicateWorkflowIdError(f"a workflow with id {wid!r} already exists") from None
        return wid

    def send_signal(self, workflow_id: str, name: str, payload: Any = None) -> int:
        """Append a signal in one write transaction; wake the workflow if it waits on `name`.

        Returns the signal's sequence number. Refuses unknown ids, closed workflows and
        payloads over the cap, writing nothing.
        """
        if not name:
            raise StoreError("the signal name must not be empty")
        text = self.encode_payload(payload, f"the payload of signal {name!r}")
        now = time.time()
        with self._write() as conn:
            row = conn.execute("SELECT status, blocked_on FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
            if row is None:
                raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
            status, blocked_on = row
            if status in ("completed", "failed"):
                raise WorkflowClosedError(f"workflow {workflow_id!r} is {status} and accepts no signals")
            seq = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM signals WHERE workflow_id = ?", (workflow_id,)
            ).fetchone()[0]
            conn.execute(
                "INSERT INTO signals (workflow_id, seq, name, payload, consumed, sent_at) VALUES (?, ?, ?, ?, 0, ?)",
                (workflow_id, seq, name, text, now),
            )
            if status == "blocked" and blocked_on == name:
                conn.execute(
                    "UPDATE workflows SET status = 'pending', blocked_on = NULL, updated_at = ? WHERE id = ?",
                    (now, workflow_id),
                )
            else:
                conn.execute("UPDATE workflows SET updated_at = ? WHERE id = ?", (now, workflow_id))
        return int(seq)

    # -- reading

    def get_workflow(self, workflow_id: str) -> WorkflowRow:
        """One workflow; UnknownWorkflowIdError if there is none."""
        row = self._conn.execute(f"SELECT {_WF_COLUMNS} FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
        if row is None:
            raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
        return _workflow_row(row)

    def _where(self, status: str | Iterable[str] | None, text: str | None) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if status:
            statuses = [status] if isinstance(status, str) else list(status)
            clauses.append(f"status IN ({', '.join('?' * len(statuses))})")
            params.extend(statuses)
        if text:
            escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            clauses.append("(id LIKE ? ESCAPE '\\' OR workflow LIKE ? ESCAPE '\\')")
            params.extend([f"%{escaped}%"] * 2)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def _page(self, columns: str, status: str | Iterable[str] | None, text: str | None, sort: str,
              descending: bool, limit: int, offset: int) -> sqlite3.Cursor:
        if sort not in SORT_COLUMNS:
            raise StoreError(f"cannot sort by {sort!r}; choose one of {', '.join(SORT_COLUMNS)}")
        where, params = self._where(status, text)
        direction = "DESC" if descending else "ASC"
        sql = (f"SELECT {columns} FROM workflows{where} ORDER BY {SORT_COLUMNS[sort]} {direction}, "
               f"rowid {direction} LIMIT ? OFFSET ?")
        return self._conn.execute(sql, [*params, int(limit), int(offset)])

    def list_workflows(self, *, status: str | Iterable[str] | None = None, text: str | None = None,
                       sort: str = "updated", descending: bool = True, limit: int = 100,
                       offset: int = 0) -> list[WorkflowRow]:
        """A page of workflows, filtered and sorted in SQL (never every row)."""
        return [_workflow_row(r) for r in self._page(_WF_COLUMNS, status, text, sort, descending, limit, offset)]

    def list_workflow_summaries(self, *, status: str | Iterable[str] | None = None, text: str | None = None,
                                sort: str = "updated", descending: bool = True, limit: int = 100,
                                offset: int = 0) -> list[WorkflowSummary]:
        """Like `list_workflows`, without the payload columns: a page stays small whatever the inputs hold."""
        cursor = self._page(f"id, workflow, status, blocked_on, {_SLOTS_SHOWN}, created_at, updated_at,"
                            f" substr(error, 1, {ERROR_PREVIEW})", status, text, sort, descending, limit, offset)
        return [WorkflowSummary(*r) for r in cursor]

    def count_workflows(self, *, status: str | Iterable[str] | None = None, text: str | None = None) -> int:
        """How many workflows match a filter."""
        where, params = self._where(status, text)
        return int(self._conn.execute(f"SELECT COUNT(*) FROM workflows{where}", params).fetchone()[0])

    def status_counts(self) -> dict[str, int]:
        """Workflows per status (every status present, zero where none)."""
        counts = dict.fromkeys(STATUSES, 0)
        for status, n in self._conn.execute("SELECT status, COUNT(*) FROM workflows GROUP BY status"):
            counts[status] = n
        return counts

    def list_commands(self, workflow_id: str, *, offset: int = 0, limit: int = -1) -> list[CommandRow]:
        """Recorded slots in order, optionally a page of them."""
        rows = self._conn.execute(
            f"SELECT c.slot_key - {_FIRST_KEY}, kind, name, ok, value, c.error, attempts, recorded_at"
            f" FROM workflows w JOIN commands c ON c.slot_key BETWEEN {_FIRST_KEY} + ? AND {_LAST_KEY}"
            " WHERE w.id = ? ORDER BY c.slot_key LIMIT ?",
            (min(max(int(offset), 0), SLOT_LIMIT), workflow_id, int(limit)),
        )
        return [CommandRow(r[0], r[1], r[2], bool(r[3]), _loads(r[4]), r[5], r[6], r[7]) for r in rows]

    def last_failed_command(self, workflow_id: str) -> CommandRow | None:
        """The highest recorded slot whose outcome is an error, if any (what failed a workflow)."""
        r = self._conn.execute(
            f"SELECT c.slot_key - {_FIRST_KEY}, kind, name, ok, value, c.error, attempts, recorded_at"
            f" FROM workflows w JOIN commands c ON c.slot_key BETWEEN {_FIRST_KEY} AND {_LAST_KEY}"
            " WHERE w.id = ? AND ok = 0 ORDER BY c.slot_key DESC LIMIT 1",
            (workflow_id,),
        ).fetchone()
        return None if r is None else CommandRow(r[0], r[1], r[2], bool(r[3]), _loads(r[4]), r[5], r[6], r[7])

    def list_signals(self, workflow_id: str, *, offset: int = 0, limit: int = -1) -> list[SignalRow]:
        """Delivered signals in delivery order, optionally a page of them."""
        rows = self._conn.execute(
            "SELECT seq, name, payload, consumed, sent_at FROM signals WHERE workflow_id = ? ORDER BY seq"
            " LIMIT ? OFFSET ?",
            (workflow_id, int(limit), int(offset)),
        )
        return [SignalRow(r[0], r[1], _loads(r[2]), bool(r[3]), r[4]) for r in rows]

    def count_signals(self, workflow_id: str) -> tuple[int, int]:
        """(delivered, still waiting to be consumed) signals of a workflow."""
        total, waiting = self._conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(consumed = 0), 0) FROM signals WHERE workflow_id = ?", (workflow_id,)
        ).fetchone()
        return int(total), int(waiting)

    def inflight(self, workflow_id: str) -> InflightRow | None:
        """The started activity with no recorded outcome, if any (it possibly ran).

        Looks in the inflight table (marks of workers that are gone) and in the mark
        files of the workers (`engine.marks`), and takes the latest slot, then the
        highest attempt count.
        """
        row = self._conn.execute(
            f"SELECT {_SLOTS_NOW}, workflows.lease_owner, workflows.lease_epoch, i.slot, i.name, i.attempts,"
            " i.started_at FROM workflows LEFT JOIN inflight i ON i.workflow_id = workflows.id WHERE workflows.id = ?",
            (workflow_id,),
        ).fetchone()
        if row is None:
            return None
        slots, lease = row[0], (row[1], row[2])
        best = InflightRow(*row[3:]) if row[3] is not None and row[3] >= slots else None
        for m in read_marks(self.path, workflow_id):
            # A file's mark counts while the lease it was written under is the workflow's
            # lease (a taken-over workflow's old marks are in the table by then).
            if (m.owner, m.epoch) == lease and m.slot >= slots and (
                    best is None or (m.slot, m.attempts) > (best.slot, best.attempts)):
                best = InflightRow(m.slot, m.name, m.attempts, m.started_at)
        return best

    def load_state(self, workflow_id: str) -> WorkflowState:
        """The whole history of a workflow: one query per table, never one per slot."""
        with self._read() as conn:
            wf = conn.execute("SELECT input, seq FROM workflows WHERE id = ?", (workflow_id,)).fetchone()
            if wf is None:
                raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
            commands = self._load_commands(conn, wf[1] << 32)
            signals = tuple(
                SignalRecord(seq, name, _loads(payload))
                for seq, name, payload in conn.execute(
                    "SELECT seq, name, payload FROM signals WHERE workflow_id = ? ORDER BY seq", (workflow_id,)
                )
            )
        return WorkflowState(input=_loads(wf[0]), has_input=wf[0] is not None, commands=commands, signals=signals)

    @staticmethod
    def _load_commands(conn: sqlite3.Connection, base: int) -> tuple[CommandRecord, ...]:
        """The command records of the workflow whose keys start at `base`, in slot order."""
        loads = json.loads
        rec = CommandRecord
        # Rows come back in key order, which is slot order; ORDER BY makes it explicit.
        return tuple(
            new_record(rec, (kind, name, bool(ok), None if value is None else loads(value), error, attempts))
            for kind, name, ok, value, error, attempts in conn.execute(
                "SELECT kind, name, ok, value, error, attempts FROM commands WHERE slot_key BETWEEN ? AND ?"
                " ORDER BY slot_key",
                (base, base + SLOT_LIMIT - 1),
            )
        )

    # -- the worker's writes (all lease-fenced)

    def claim(self, owner: str, *, ttl: float, limit: int = 1, dead_owners: Sequence[str] = (),
              names: Collection[str] | None = None) -> list[Claim]:
        """Take the lease of up to `limit` runnable workflows (of `names` only, unless None).

        Runnable: pending, or running under a lease that has lapsed or whose owner is
        known dead. Each claim bumps the lease epoch, which fences out the old owner.
        A workflow whose name the worker's app lacks is left alone: it would only fail there.
        """
        now = time.time()
        claims: list[Claim] = []
        only, named = _names_clause(names)
        with self._write() as conn:
            if names is None:
                rows = conn.execute(
                    "SELECT id, NULL FROM workflows WHERE status = 'pending' AND (retry_at IS NULL OR retry_at <= ?)"
                    " ORDER BY updated_at LIMIT ?", (now, limit)
                ).fetchall()
            else:
                # One ordered range of workflows_pending per name, merged here: a single
                # `workflow IN (...) ORDER BY updated_at` sorts every pending row of those names.
                oldest: list[tuple[float, int, str]] = []
                for name in names:
                    oldest += conn.execute(
                        f"SELECT updated_at, rowid, id FROM workflows{_BY_NAME}"
                        " WHERE status = 'pending' AND workflow = ? AND (retry_at IS NULL OR retry_at <= ?)"
                        " ORDER BY updated_at LIMIT ?",
                        (name, now, limit)).fetchall()
                rows = [(wid, None) for _, _, wid in sorted(oldest)[:limit]]
            if len(rows) < limit:
                rows += conn.execute(
                    f"SELECT id, lease_owner FROM workflows WHERE status = 'running' AND lease_expires < ?{only}"
                    " LIMIT ?",
                    (now, *named, limit - len(rows)),
                ).fetchall()
            if len(rows) < limit and dead_owners:
                # Only leases that have not lapsed: the query above took every lapsed one (it
                # was not cut by its LIMIT, or we would not be here). Taking one twice would
                # claim it twice, and run it in two threads, one of them fenced out.
                marks = ", ".join("?" * len(dead_owners))
                rows += conn.execute(
                    f"SELECT id, lease_owner FROM workflows WHERE status = 'running' AND lease_owner IN ({marks})"
                    f" AND (lease_expires >= ? OR lease_expires IS NULL){only} LIMIT ?",
                    (*dead_owners, now, *named, limit - len(rows)),
                ).fetchall()
            # A workflow taken over from another worker may have an activity in flight
            # there: fold that worker's mark in first, so the attempts count on.
            boards: dict[str, list[Mark]] = {}
            for wid, previous in rows:
                if previous is not None:
                    if previous not in boards:
                        path = board_path(self.path, previous)
                        boards[previous] = (read_board(path) or []) if path is not None else []
                    self._fold(conn, [m for m in boards[previous] if m.workflow_id == wid])
            taken = []
            for wid, _ in rows:
                row = conn.execute(
                    "UPDATE workflows SET status = 'running', lease_owner = ?, lease_epoch = lease_epoch + 1,"
                    f" lease_expires = ?, updated_at = ?, slots = {_SLOTS_NOW}"
                    " WHERE id = ? RETURNING workflow, lease_epoch, input, slots, seq",
                    (owner, now + ttl, now, wid),
                ).fetchone()
                taken.append((wid, row))
            short = [wid for wid, row in taken if row[3] <= CLAIM_LOAD_SLOTS]
            histories = self._load_histories(conn, short) if short else {}
            started = self._inflight_of(conn, [wid for wid, _ in taken])
            for wid, row in taken:
                inp, has_input = _loads(row[2]), row[2] is not None
                logs = histories.get(wid)
                state = None if logs is None else WorkflowState(
                    input=inp, has_input=has_input, commands=tuple(logs[0]), signals=tuple(logs[1]))
                slot, attempts = started.get(wid, (None, 0))
                if slot is not None and slot < row[3]:
                    slot, attempts = None, 0  # its outcome was recorded since
                claims.append(Claim(wid, row[0], owner, row[1], row[4] << 32, inp, has_input, state, slot, attempts))
        return claims

    @staticmethod
    def _inflight_of(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """The folded in-flight (slot, attempts) of many workflows, by id."""
        out: dict[str, tuple[int, int]] = {}
        for i in range(0, len(ids), _IN_CHUNK):
            chunk = ids[i:i + _IN_CHUNK]
            marks = ", ".join("?" * len(chunk))
            for wid, slot, attempts in conn.execute(
                f"SELECT workflow_id, slot, attempts FROM inflight WHERE workflow_id IN ({marks})", chunk,
            ):
                out[wid] = (slot, attempts)
        return out

    @staticmethod
    def _fold(conn: sqlite3.Connection, marks: Iterable[Mark]) -> int:
        """Keep marks in the inflight table where they still say something; return how many."""
        kept = 0
        for m in marks:
            wf = conn.execute(f"SELECT {_SLOTS_NOW}, lease_owner, lease_epoch FROM workflows WHERE id = ?",
                              (m.workflow_id,)).fetchone()
            if wf is None or (wf[1], wf[2]) != (m.owner, m.epoch):
                # Not under the lease it was written under: another worker took the workflow
                # over (and kept this mark then), or the file is older than this database.
                continue
            if m.slot < wf[0]:
                continue  # its outcome is recorded: nothing is in flight there
            have = conn.execute("SELECT slot, attempts FROM inflight WHERE workflow_id = ?",
                                (m.workflow_id,)).fetchone()
            if have is not None and have[0] >= wf[0] and (have[0], have[1]) >= (m.slot, m.attempts):
                continue  # the table already knows as much
            conn.execute(_FOLD_MARK, (m.workflow_id, m.slot, m.name, m.attempts, m.started_at))
            kept += 1
        return kept

    def fold_marks(self, marks: Sequence[Mark]) -> int:
        """Keep workers' start marks in the database (a dead worker's, or a run's that ended abnormally).

        Only a mark written under the workflow's current lease (owner and epoch) is
        kept, and only while its slot has no recorded outcome; of two marks for one
        workflow the later slot, then the higher attempt count, wins. Returns how many
        were written.
        """
        if not marks:
            return 0
        with self._write() as conn:
            return self._fold(conn, marks)

    @staticmethod
    def _load_histories(
        conn: sqlite3.Connection, ids: Sequence[str]
    ) -> dict[str, tuple[list[CommandRecord], list[SignalRecord]]]:
        """The commands and signals of many workflows: one query per table (per chunk of ids)."""
        loads = json.loads
        rec = CommandRecord
        out: dict[str, tuple[list[CommandRecord], list[SignalRecord]]] = {wid: ([], []) for wid in ids}
        for i in range(0, len(ids), _IN_CHUNK):
            chunk = ids[i:i + _IN_CHUNK]
            marks = ", ".join("?" * len(chunk))
            for wid, kind, name, ok, value, error, attempts in conn.execute(
                "SELECT w.id, kind, name, ok, value, c.error, attempts FROM workflows w JOIN commands c"
                f" ON c.slot_key BETWEEN {_FIRST_KEY} AND {_LAST_KEY} WHERE w.id IN ({marks})"
                " ORDER BY w.id, c.slot_key",
                chunk,
            ):
                out[wid][0].append(
                    new_record(rec, (kind, name, bool(ok), None if value is None else loads(value), error, attempts)))
            for wid, seq, name, payload in conn.execute(
                f"SELECT workflow_id, seq, name, payload FROM signals WHERE workflow_id IN ({marks})"
                " ORDER BY workflow_id, seq",
                chunk,
            ):
                out[wid][1].append(SignalRecord(seq, name, _loads(payload)))
        return out

    def running_owners(self) -> list[str]:
        """The distinct lease owners of running workflows."""
        return [r[0] for r in self._conn.execute(
            "SELECT DISTINCT lease_owner FROM workflows WHERE status = 'running' AND lease_owner IS NOT NULL")]

    def next_lease_expiry(self) -> float | None:
        """When the earliest running lease lapses (None if nothing is running)."""
        return self._conn.execute("SELECT MIN(lease_expires) FROM workflows WHERE status = 'running'").fetchone()[0]

    def has_claimable(self, dead_owners: Sequence[str] = (), names: Collection[str] | None = None) -> bool:
        """Whether `claim` would find anything (of `names`): a cheap read before taking the write lock."""
        marks = ", ".join("?" * len(dead_owners)) or "NULL"
        only, named = _names_clause(names)
        now = time.time()
        return self._conn.execute(
            f"SELECT EXISTS (SELECT 1 FROM workflows{_BY_NAME if only else ''} WHERE status = 'pending'{only}"
            " AND (retry_at IS NULL OR retry_at <= ?))"
            f" OR EXISTS (SELECT 1 FROM workflows WHERE status = 'running' AND lease_expires < ?{only})"
            f" OR EXISTS (SELECT 1 FROM workflows WHERE status = 'running' AND lease_owner IN ({marks}){only})",
            (*named, now, now, *named, *dead_owners, *named),
        ).fetchone()[0] == 1

    def has_runnable(self, names: Collection[str] | None = None) -> bool:
        """Whether anything (of `names`) is pending or running: what `--until-idle` waits out."""
        only, named = _names_clause(names)
        return self._conn.execute(
            f"SELECT EXISTS (SELECT 1 FROM workflows{_BY_NAME if only else ''} WHERE status = 'pending'{only})"
            f" OR EXISTS (SELECT 1 FROM workflows WHERE status = 'running'{only})", (*named, *named),
        ).fetchone()[0] == 1

    def pending_unknown(self, names: Collection[str]) -> dict[str, int]:
        """Pending workflows per name, of the names not in `names` (what a worker of those names leaves)."""
        named = list(names)
        return dict(self._conn.execute(
            f"SELECT workflow, COUNT(*) FROM workflows WHERE status = 'pending'"
            f" AND workflow NOT IN ({', '.join('?' * len(named))}) GROUP BY workflow ORDER BY COUNT(*) DESC, workflow",
            named).fetchall())

    # -- which worker serves what

    def worker_started(self, owner: str, *, host: str, pid: int, app: str, names: Collection[str],
                       ttl: float) -> None:
        """Say that a worker runs, and the workflow names its app knows (see `served_names`)."""
        now = time.time()
        with self._write() as conn:
            # Rows of workers that died without a word, long gone: keep the table small.
            conn.execute("DELETE FROM workers WHERE seen_at < ? - 10 * ttl", (now,))
            conn.execute(
                "INSERT OR REPLACE INTO workers (owner, host, pid, app, names, ttl, started_at, seen_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (owner, host, pid, app, _dumps(sorted(names)), ttl, now, now))

    def worker_stopped(self, owner: str) -> None:
        """A worker exits cleanly: it serves nothing any more."""
        with self._write() as conn:
            conn.execute("DELETE FROM workers WHERE owner = ?", (owner,))

    def served_names(self) -> frozenset[str] | None:
        """The workflow names live workers know; None when no worker is live.

        Live: seen within LIVE_TTLS of its lease length (workers stamp their row at
        every lease renewal, a third of a lease apart).
        """
        rows = self._conn.execute("SELECT names FROM workers WHERE seen_at >= ? - ? * ttl",
                                  (time.time(), LIVE_TTLS)).fetchall()
        if not rows:
            return None
        return frozenset(name for (text,) in rows for name in json.loads(text))

    def commit_batch(self, records: Sequence[PendingRecord] = (), *,
                     finishes: Sequence[tuple[Claim, Outcome]] = (), ttl: float) -> tuple[list[bool], list[bool]]:
        """Commit outcomes and run verdicts of one or many workflows in one transaction: group commit.

        Each slot is written only if its claim still holds the lease and the slot is
        the next one (fencing); each finish only if the lease still holds. The answer
        says, per record and per finish, whether it was written.
        """
        now = time.time()
        conn = self._begin_immediate()
        try:
            version = self._cur.execute("PRAGMA data_version").fetchone()[0] if records else 0
            write_record = self._write_record
            written = [write_record(item.claim, item.slot, item.record, now, ttl, version, item.text)
                       for item in records]
            finished = [self._write_finish(conn, claim, outcome, now) for claim, outcome in finishes]
        except BaseException:
            self._fenced.clear()
            conn.execute("ROLLBACK")
            raise
        self._end(conn)
        for claim, _ in finishes:
            self._stamped.pop(claim.id, None)
            self._fenced.pop(claim.id, None)
        return written, finished

    def commit_record(self, claim: Claim, slot: int, rec: CommandRecord, text: str | None = None, *,
                      ttl: float) -> bool:
        """`commit_batch` for one outcome alone: what a lone workflow does once per slot.

        The same transaction and fencing, without the batch's lists; True if written.
        `text` is the value's JSON text if the caller encoded it already.
        """
        conn = self._begin_immediate()
        try:
            version = self._cur.execute("PRAGMA data_version").fetchone()[0]
            written = self._write_record(claim, slot, rec, time.time(), ttl, version, text)
        except BaseException:
            self._fenced.clear()
            conn.execute("ROLLBACK")
            raise
        self._end(conn)
        return written

    # The per-slot transactions are spelled out with these two rather than taken from
    # `_write`: they run once per slot, and a context manager cost as much as a statement.

    def _begin_immediate(self) -> sqlite3.Connection:
        if self.readonly:
            raise ReadOnlyError(f"database {self.path} is open read-only")
        try:
            self._cur.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise self._translate(exc) from None
        return self._conn

    def _end(self, conn: sqlite3.Connection) -> None:
        try:
            self._cur.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            self._fenced.clear()  # what they say was written was not
            conn.execute("ROLLBACK")
            raise self._translate(exc) from None

    def _write_record(self, claim: Claim, slot: int, rec: CommandRecord, now: float, ttl: float,
                      version: int, text: str | None = None) -> bool:
        """Write one slot's outcome if the claim still holds the lease and `slot` is next.

        Fencing reads the workflow's row, and rewriting that row per slot (count, lease
        expiry) put a second page into every commit's fsync; on the disks here that was
        ~9 us of a ~170 us slot. So the row is written only when something could have
        changed: `version` is this connection's PRAGMA data_version, which changes only
        when another connection commits. If it is what it was at this workflow's last
        write here, under the same lease epoch and with this slot next, nobody else has
        written anything since (no claim, no lease taken over), and the command row
        alone is written. Otherwise, and at least once a second (UPDATED_AT_STEP), the
        row is fenced and rewritten as before: owner, epoch, and the count this
        connection last wrote there.
        """
        key = claim.id
        known = self._fenced.get(key)
        if known is not None and known[0] == claim.epoch:
            if known[2] != slot:
                return False  # not the next slot of this lease: refuse it, never leave a gap
            fast = known[1] == version and now - self._stamped.get(key, 0.0) < UPDATED_AT_STEP
            column = known[3]
        else:
            fast = False
            column = slot  # a claim sets the column to the true count
        if not fast:
            if now - self._stamped.get(key, 0.0) >= UPDATED_AT_STEP:
                # updated_at is in two indexes, so setting it rewrites two more pages: at most once a second.
                cur = self._cur.execute(
                    "UPDATE workflows SET slots = ?, updated_at = ?, lease_expires = ? "
                    "WHERE id = ? AND lease_owner = ? AND lease_epoch = ? AND slots = ?",
                    (slot + 1, now, now + ttl, key, claim.owner, claim.epoch, column),
                )
                if len(self._stamped) > 10_000:
                    self._stamped.clear()  # bounded: ids of workflows run elsewhere since
                    self._fenced.clear()
                self._stamped[key] = now
            else:
                cur = self._cur.execute(
                    "UPDATE workflows SET slots = ?, lease_expires = ? "
                    "WHERE id = ? AND lease_owner = ? AND lease_epoch = ? AND slots = ?",
                    (slot + 1, now + ttl, key, claim.owner, claim.epoch, column),
                )
            if cur.rowcount != 1:
                self._fenced.pop(key, None)
                return False
            column = slot + 1
        if slot >= SLOT_LIMIT:  # its key would be the next workflow's
            raise StoreError(f"workflow {key!r} has recorded {SLOT_LIMIT} slots, the most one workflow can")
        row_key = claim.base + slot
        kind, name, ok, value, error, attempts = rec
        if ok and error is None:
            if text is None:
                text = int.__repr__(value) if type(value) is int else _dumps(value)  # _dumps's int case, inline
            if attempts == 1 and kind == "activity":
                self._cur.execute(_INSERT_FIRST_TRY, (row_key, name, text, now))
            else:
                self._cur.execute(_INSERT_OK, (row_key, kind, name, text, attempts, now))
        else:
            self._cur.execute(_INSERT_COMMAND, (row_key, kind, name, int(ok), _dumps(value) if ok else None,
                                                error, attempts, now))
        self._fenced[key] = (claim.epoch, version, slot + 1, column)
        return True

    @staticmethod
    def _write_finish(conn: sqlite3.Connection, claim: Claim, outcome: Outcome, now: float) -> bool:
        status, blocked_on = outcome.status, outcome.blocked_on
        consumed = ",".join(map(str, outcome.consumed_signals))
        if status == "blocked":
            # A signal of this name that arrived during the run makes it runnable, not blocked.
            # (NOT IN (NULL) is never true in SQL, so leave the clause out when nothing was consumed.)
            unconsumed = f" AND seq NOT IN ({consumed})" if consumed else ""
            arrived = conn.execute(
                f"SELECT COUNT(*) FROM signals WHERE workflow_id = ? AND name = ?{unconsumed}",
                (claim.id, blocked_on),
            ).fetchone()[0]
            if arrived:
                status, blocked_on = "pending", None
        cur = conn.execute(
            "UPDATE workflows SET status = ?, blocked_on = ?, result = ?, error = ?, diagnostic = ?, error_kind = ?,"
            f" lease_owner = NULL, lease_expires = NULL, updated_at = ?, slots = {_SLOTS_NOW},"
            # A run that came to a verdict was not interrupted; one that ended the workflow
            # makes the last worker error history.
            " interruptions = 0, retry_at = NULL,"
            # ?1 is the status written (SET sees the old row's columns); the `?` after it are 8-10.
            " worker_error = CASE WHEN ?1 IN ('completed', 'failed') THEN NULL ELSE worker_error END"
            " WHERE id = ? AND lease_owner = ? AND lease_epoch = ?",
            (status, blocked_on, _dumps(outcome.result) if status == "completed" else None, outcome.error,
             _dumps(outcome.diagnostic.to_dict()) if outcome.diagnostic else None,
             outcome.error_kind if status == "failed" else None, now, claim.id, claim.owner, claim.epoch),
        )
        if cur.rowcount != 1:
            return False
        if consumed:
            conn.execute(
                f"UPDATE signals SET consumed = 1 WHERE workflow_id = ? AND consumed = 0 AND seq IN ({consumed})",
                (claim.id,),
            )
        return True

    def renew(self, claims: Sequence[Claim], *, ttl: float, worker: str | None = None) -> list[bool]:
        """Extend leases still held; say which are. `worker`: stamp that worker's row as seen too."""
        now = time.time()
        with self._write() as conn:
            if worker is not None:
                conn.execute("UPDATE workers SET seen_at = ? WHERE owner = ?", (now, worker))
            return [
                conn.execute(
                    "UPDATE workflows SET lease_expires = ? WHERE id = ? AND lease_owner = ? AND lease_epoch = ?",
                    (now + ttl, c.id, c.owner, c.epoch),
                ).rowcount == 1
                for c in claims
            ]

    def release(self, claim: Claim) -> None:
        """Give a workflow back (worker stopping): pending again, lease dropped."""
        with self._write() as conn:
            conn.execute(
                "UPDATE workflows SET status = 'pending', lease_owner = NULL, lease_expires = NULL, updated_at = ?,"
                f" slots = {_SLOTS_NOW} WHERE id = ? AND lease_owner = ? AND lease_epoch = ?",
                (time.time(), claim.id, claim.owner, claim.epoch),
            )

    def hand_back(self, claim: Claim, error: str, *, backoff: float, backoff_max: float) -> float | None:
        """Give a workflow back after a run stopped by an error that is no outcome.

        Pending again, lease dropped, `error` kept as its worker error; it is not claimed
        for `backoff` seconds, doubled for each such run in a row up to `backoff_max`, so
        code that is interrupted every time does not keep a worker spinning. Returns the
        seconds it waits, or None if the lease was no longer held (nothing written).
        """
        now = time.time()
        with self._write() as conn:
            row = conn.execute(
                "UPDATE workflows SET status = 'pending', lease_owner = NULL, lease_expires = NULL, updated_at = ?,"
                f" slots = {_SLOTS_NOW}, worker_error = ?, interruptions = interruptions + 1,"
                " retry_at = ? + MIN(?, ? * (1 << MIN(interruptions, 30)))"
                " WHERE id = ? AND lease_owner = ? AND lease_epoch = ? RETURNING retry_at",
                (now, error, now, backoff_max, backoff, claim.id, claim.owner, claim.epoch),
            ).fetchone()
        return None if row is None else float(row[0]) - now

    # -- maintenance

    def integrity_check(self) -> str:
        """PRAGMA integrity_check's verdict ("ok" when sound)."""
        return str(self._conn.execute("PRAGMA integrity_check").fetchone()[0])

    def checkpoint(self, *, restart: bool = False, wait: float = 1.0) -> tuple[int, int, int]:
        """Fold the WAL back into the database file; return (busy, WAL frames, frames copied).

        PASSIVE never waits. With `restart`, wait up to `wait` seconds for the readers
        still using the WAL to finish, so the next write starts it from the beginning:
        readers that keep overlapping otherwise pin it and it grows without bound (the
        autocheckpoint copies frames but can never restart the log). A RESTART checkpoint
        holds writers back while it waits, hence the short wait.
        """
        if not restart:
            row = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            return int(row[0]), int(row[1]), int(row[2])
        self._conn.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
        try:
            row = self._conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
        finally:
            self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        return int(row[0]), int(row[1]), int(row[2])

    def wal_bytes(self) -> int:
        """The size of the WAL file in bytes (0 if there is none)."""
        try:
            return os.stat(f"{self.path}-wal").st_size
        except FileNotFoundError:
            return 0


def open_store(path: str | os.PathLike[str], *, readonly: bool = False, max_payload: int | None = None) -> SQLiteStore:
    """Open the log store at `path`."""
    return SQLiteStore(path, readonly=readonly, max_payload=max_payload)
