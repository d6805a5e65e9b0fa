"""One SQLite connection to a shared log file: opening it, and its read and write transactions.

One database file is shared by worker processes, CLI invocations and the console.
WAL journal, synchronous=FULL (a committed outcome survives power loss, or an activity
would run twice), a busy timeout of seconds, BEGIN IMMEDIATE for every write (a
deferred read-then-write transaction fails at once with "database is locked").
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from replaylog.engine.errors import NotADatabaseError, ReadOnlyError, StoreBusyError, StoreError
from replaylog.engine.store.rows import default_max_payload
from replaylog.engine.store.shared.base import Dialect, StoreBase
from replaylog.engine.store.sqlite import speedups
from replaylog.engine.store.sqlite.fence import CommitFence
from replaylog.engine.store.sqlite.schema import check_schema, refuse_foreign

T = TypeVar("T")

BUSY_TIMEOUT_S = 10.0
# The size the WAL file is truncated back to after it restarts (SQLite's autocheckpoint
# keeps it near 4 MiB while nothing pins it).
WAL_SIZE_LIMIT = 8 * 1024 * 1024
# SQLite's primary result codes for a damaged file: SQLITE_CORRUPT and SQLITE_NOTADB.
_DAMAGE_CODES = (11, 26)
# ... and for a lock another connection holds: SQLITE_BUSY and SQLITE_LOCKED.
_BUSY_CODES = (5, 6)
# ... and for a file this connection may not write: SQLITE_READONLY.
_READONLY_CODE = 8


# Trick "write gate": the connections of one process to one file take a lock of the process's
# before SQLite's write lock (BEGIN IMMEDIATE) and give it back after COMMIT or ROLLBACK. SQLite
# makes a connection that finds the write lock taken poll for it, sleeping 1, 2, 5, 10, 15, 20 …
# ms between tries: a worker's claim (its own connection) lost every race against its
# committer's back-to-back group commits and slept 6-36 ms a claim, while the worker's
# threads ran dry (many short workflows: claims took 0.70 s of a 1.14 s run). Queued on a
# lock, a writer of the same process runs the moment the other is done. Another process is
# still waited for by SQLite's busy timeout. Measured gain, with the temporary b-trees the
# store's statements no longer build: workload 5, 1,430 -> 1,760 workflows/s (medians of
# eight runs in turns; docs/performance.md, "Workload 5: the worker's claims queue behind
# its commits").
_GATES: dict[str, threading.RLock] = {}
_GATES_LOCK = threading.Lock()


def _gates_after_fork() -> None:
    # A child of os.fork has one thread: a gate another thread of the parent held at the fork
    # would stay held in the child for good. (`_at_fork_reinit` is what the threading and
    # logging modules reset their own locks with in a forked child.)
    for gate in (_GATES_LOCK, *_GATES.values()):
        gate._at_fork_reinit()  # type: ignore[attr-defined]


os.register_at_fork(after_in_child=_gates_after_fork)


def write_gate(path: Path) -> threading.RLock:
    """The lock this process's writers to the file at `path` take around their write transactions.

    Re-entrant: a thread that holds it (a write on one connection) may start a write on
    another; SQLite's own lock then decides, as it would without the gate.
    """
    key = os.path.realpath(path)
    with _GATES_LOCK:
        gate = _GATES.get(key)
        if gate is None:
            gate = _GATES[key] = threading.RLock()
        return gate


def is_busy(exc: BaseException) -> bool:
    """Whether an error means another connection holds a lock ("database is locked"): it clears by itself.

    By the error's type and SQLite result code, never its text.
    """
    if isinstance(exc, StoreBusyError):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.OperationalError) and code is not None and code & 0xFF in _BUSY_CODES


def is_damaged(exc: BaseException) -> bool:
    """Whether an error means the database file itself is damaged (corrupt, or not SQLite).

    Such an error will not go away by retrying, unlike "database is locked".
    """
    if isinstance(exc, NotADatabaseError):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and code & 0xFF in _DAMAGE_CODES


def store_error(exc: sqlite3.Error, path: Path) -> StoreError:
    """The store's error for one of SQLite's, so no caller names sqlite3: by its result code, not its text.

    A damaged file is a NotADatabaseError, a lock held past the busy timeout a
    StoreBusyError, a file that cannot be written a ReadOnlyError; anything else a StoreError.
    """
    msg = str(exc)
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if is_damaged(exc):
        return NotADatabaseError(f"database {path} is damaged ({msg}): check it with PRAGMA integrity_check"
                                 " and restore it from a backup")
    if is_busy(exc):
        return StoreBusyError(f"database {path}: {msg}")
    if code == _READONLY_CODE or "readonly" in msg or "read-only" in msg:
        return ReadOnlyError(f"database {path} cannot be written: {msg}")
    return StoreError(f"database {path}: {msg}")


class SQLiteDialect(Dialect):
    """SQLite's SQL: `?` placeholders as written, one writer at a time (no row locks), rowid order."""

    tie = "rowid"
    # SQLite's LIKE has no escape character unless one is named.
    like_escape = " ESCAPE '\\'"
    # SQLite's unary + keeps a term off every index (its documented hint to the planner).
    unindexed = "+{}"
    # The FTS5 table of errors is keyed by workflows.seq (schema migration 4).
    error_match = "workflows.seq IN (SELECT rowid FROM workflows_fts WHERE workflows_fts MATCH ?)"
    # json_each gives a JSON true or false as 1 or 0: spelled as JSON spells them.
    json_pairs = "json_each({})"
    json_text = ("CASE {0}.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' WHEN 'null' THEN NULL"
                 " ELSE CAST({0}.value AS TEXT) END")

    def error_query(self, text: str) -> str:
        """Each word quoted as an FTS5 string: every word must occur, and no word is FTS5 syntax."""
        return " ".join('"' + word.replace('"', '""') + '"' for word in text.split())

    def run(self, conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Execute one statement."""
        return conn.execute(sql, params)

    def run_many(self, conn: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Execute one statement once per row of parameters."""
        conn.executemany(sql, rows)

    def compiled_records(self, conn: sqlite3.Connection, sql: str, params: tuple[Any, ...], record_type: type[Any],
                         loads: Any) -> list[Any] | None:
        """The records by engine.store.sqlite.speedups' compiled path, where it is loaded (else None)."""
        compiled = speedups.COMPILED
        if compiled is None:
            return None
        return compiled.records(conn, sql, params, record_type, loads)  # type: ignore[no-any-return]

    def in_list(self, column: str, values: Iterable[Any]) -> tuple[str, list[Any]]:
        """`column IN (?, ...)`, one parameter per value."""
        named = list(values)
        return f"{column} IN ({', '.join('?' * len(named))})", named

    def limit(self, limit: int) -> int:
        """SQLite takes LIMIT -1 as no limit."""
        return int(limit)


SQLITE = SQLiteDialect()


class SQLiteConnection(StoreBase):
    """The connection every part of the SQLite store works through.

    Args:
        path: the database file; created (mode 0600) unless `readonly`.
        readonly: open with mode=ro; every write raises ReadOnlyError.
        max_payload: cap in bytes on a signal payload's or an input's JSON text.
    """

    dialect = SQLITE

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False, max_payload: int | None = None) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.max_payload = max_payload if max_payload is not None else default_max_payload()
        # What this connection knows of the slots it wrote (the per-slot speed trick).
        self._fence = CommitFence()
        try:
            self._conn = self._connect_waiting()
        except sqlite3.Error as exc:  # sqlite3.connect itself: a file it cannot open
            raise store_error(exc, self.path) from None
        # For the per-slot statements: conn.execute makes a new cursor on every call.
        self._cur = self._conn.cursor()
        self._gate = write_gate(self.path)
        # The compiled path (engine.store.sqlite.speedups), None for the pure-Python one, and
        # its prepared statements on this connection (finalized before it closes).
        self._compiled = speedups.COMPILED
        # (Keyed by their text, and never dropped: only statements of a few texts go through it,
        # no SQL built with a list of any length.)
        self._stmts: dict[str, Any] = {}

    # -- the hot statements

    def _fetch(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """The rows of `sql` on this store's connection (in its transaction, if one is open).

        Trick "hot statements in C": on the compiled path (speedups) through `_speedups.fetch`,
        its prepared statement kept, without the sqlite3 module's cursor, column names,
        adapter look-ups and GIL let go around every column of every row. For the few
        statements every workflow makes (commit.py, leases.py); measured in commit.py
        (`_write_finish`).
        """
        compiled = self._compiled
        if compiled is None:
            return self._conn.execute(sql, params).fetchall()
        rows: list[tuple[Any, ...]] = compiled.fetch(self._conn, self._stmts, sql, params)
        return rows

    def _execute_many(self, sql: str, rows: list[tuple[Any, ...]]) -> int:
        """Run `sql` once for each tuple of `rows` (as `_fetch`, the compiled path where it runs); the rows changed."""
        compiled = self._compiled
        if compiled is None:
            return self._conn.executemany(sql, rows).rowcount
        changed: int = compiled.execute_many(self._conn, self._stmts, sql, rows)
        return changed

    def _execute(self, sql: str, params: tuple[Any, ...]) -> int:
        """Run `sql` once (as `_fetch`, the compiled path where it runs); the rows it changed."""
        compiled = self._compiled
        if compiled is None:
            return self._conn.execute(sql, params).rowcount
        changed: int = compiled.execute(self._conn, self._stmts, sql, params)
        return changed

    # -- opening

    def _connect_waiting(self) -> sqlite3.Connection:
        """`_connect`, tried again while the file is busy, for up to the busy timeout.

        SQLite's busy timeout does not cover every lock a connection's set-up takes: switching
        a new file to WAL needs its exclusive lock, and a connection that asks for it while
        another holds the file's write lock (a second process creating the same new database
        at the same moment) is refused at once rather than made to wait, to rule out a
        deadlock. Both openers must succeed, one after the other, as they do once the file
        exists.
        """
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        pause = 0.005
        while True:
            try:
                return self._connect()
            except (sqlite3.OperationalError, StoreBusyError) as exc:
                if not is_busy(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

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
            refuse_foreign(conn, path)
            if not self.readonly:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if mode.lower() != "wal":
                    raise StoreError(f"database {path} could not be switched to WAL (journal_mode={mode})")
                conn.execute("PRAGMA synchronous = FULL")
                # Once a checkpoint lets the WAL restart, cut the file back: a burst behind a
                # long reader must not leave a WAL of that size on disk for good.
                conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
            # (version before, version now): `replaylog migrate` reports it.
            self.schema_upgrade = check_schema(conn, path, readonly=self.readonly)
        except BaseException as exc:
            conn.close()  # a connection that failed its set-up is never kept
            if isinstance(exc, sqlite3.DatabaseError) and not is_busy(exc):
                raise NotADatabaseError(f"{path} is not a usable SQLite database: {exc}") from None
            raise
        return conn

    def close(self) -> None:
        """Close the connection."""
        self._stmts.clear()  # finalizes the compiled path's statements: the file closes with the connection
        self._conn.close()

    # -- plumbing

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.readonly:
            raise ReadOnlyError(f"database {self.path} is open read-only")
        conn = self._conn
        # A write here may claim a workflow or drop a lease, and PRAGMA data_version does
        # not change for this connection's own commits: the slots written since are no
        # longer known to be fenced.
        self._fence.clear()
        self._enter_gate()
        try:
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
        finally:
            self._gate.release()

    def _enter_gate(self) -> None:
        """Take the process's write gate of this file (see write_gate); StoreBusyError after the busy timeout."""
        if not self._gate.acquire(timeout=BUSY_TIMEOUT_S):
            raise StoreBusyError(f"database {self.path} is busy: another thread of this process held its write"
                                 f" lock for {BUSY_TIMEOUT_S:g} s")

    def _translate(self, exc: sqlite3.Error) -> StoreError:
        return store_error(exc, self.path)

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

    # -- the primitives of the shared reads and operator writes (engine.store.shared.base)

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return self._conn.execute(sql, params).fetchall()

    def _query_one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(sql, params).fetchone()

    def _snapshot(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._read() as conn:
            return fn(conn)

    def _operate(self, workflow_id: str, action: str, now: float, who: str,
                 body: Callable[[sqlite3.Connection], T], again: Callable[[str], T]) -> T:
        # One try: a local file never loses the answer of a commit it made.
        with self._write() as conn:
            return body(conn)

    def data_version(self) -> int:
        """A number that changes whenever another connection commits to the database."""
        try:
            version: int = self._cur.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error as exc:
            raise store_error(exc, self.path) from exc
        return version

    def wake_on_change(self, wake: Callable[[], None]) -> bool:
        """Nothing (False): SQLite tells no one of a commit; `data_version` is read when asked."""
        return False
