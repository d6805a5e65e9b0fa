"""One PostgreSQL connection of a store: opening it, transactions, retries across connection faults, wake-ups.

Every store operation runs through `_run`: a function of the connection, retried on a
new connection when the old one broke (a server restart, a terminated backend, a
dropped network). A write whose commit may or may not have happened is retried by
functions that can tell (see commit and operations); the retries back off, and a
worker says once that it lost the connection and once that it has it back.

Change detection (`data_version`): a second connection, opened on first use, LISTENs on
one channel that every write that changes what a worker or the console would do
NOTIFYs (a start, a signal, a verdict, a release); a thread counts the notifications.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.generators import fetch_many, send

from replaylog.engine.errors import ReadOnlyError, StoreError
from replaylog.engine.marks import MarkBoard
from replaylog.engine.store.postgres.schema import SCHEMA, check_schema
from replaylog.engine.store.postgres.url import redact_text, redact_url
from replaylog.engine.store.rows import default_max_payload
from replaylog.engine.store.shared.base import Dialect, Rows, StoreBase

log = logging.getLogger("replaylog.store.postgres")

Conn = psycopg.Connection[tuple[Any, ...]]
Cursor = psycopg.Cursor[tuple[Any, ...]]
T = TypeVar("T")
# The channel every state change is announced on.
CHANNEL = "replaylog"
NOTIFY = f"SELECT pg_notify('{CHANNEL}', '')"
# How long a store keeps trying to reach the server again before an operation fails (a
# server restart takes seconds; an operator who stops it for good sees the error then).
RECONNECT_FOR = 60.0
BACKOFF_FIRST = 0.05
BACKOFF_MAX = 2.0
# The listening thread waits on its connection's socket and on a pipe that close() writes to,
# so a close never waits out a poll; it also looks at the closing flag this often (seconds).
LISTEN_IDLE = 5.0
# The statuses of a write's answer that say it ran.
_ANSWERED = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)
# Faults after which the same work is simply tried again: the transaction was rolled back.
_RETRY_IN_PLACE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)


class _LostDuringSetUp(StoreError):
    """The connection was made, then lost before the session was set up: worth another try."""


class _Outage:
    """Says once per outage that the connection was lost, and once that it is back (process-wide)."""

    lock = threading.Lock()
    down_since: float | None = None

    @classmethod
    def lost(cls, where: str, exc: BaseException) -> None:
        with cls.lock:
            if cls.down_since is None:
                cls.down_since = time.monotonic()
                log.warning("lost the connection to %s (%s); reconnecting", where, _first_line(exc))

    @classmethod
    def back(cls, where: str) -> None:
        with cls.lock:
            if cls.down_since is not None:
                log.warning("reconnected to %s after %.1f s", where, time.monotonic() - cls.down_since)
                cls.down_since = None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def connection_lost(exc: BaseException, conn: Conn | None) -> bool:
    """Whether an error means the connection is gone (not a bad statement)."""
    if isinstance(exc, pg_errors.AdminShutdown | pg_errors.CrashShutdown | pg_errors.CannotConnectNow):
        return True
    if isinstance(exc, psycopg.OperationalError):
        # No SQLSTATE: the client lost the server (a closed socket, a pipeline cut short);
        # class 08: a connection exception; 57P: the server is shutting down or restarting.
        state = getattr(exc, "sqlstate", None)
        return (conn is None or conn.broken or conn.closed or state is None
                or state.startswith(("08", "57P")))
    return isinstance(exc, psycopg.InterfaceError) and (conn is None or conn.closed)


def pg_sql(sql: str) -> str:
    """A statement written with `?` placeholders (engine.store.shared.base) in psycopg's `%s` style."""
    return sql.replace("?", "%s")


class PGDialect(Dialect):
    """PostgreSQL's SQL: `%s` placeholders, row locks, arrays for lists, LIMIT NULL for none."""

    lock = " FOR UPDATE"
    lock_of_format = " FOR UPDATE OF {}"
    share_lock = " FOR SHARE"
    # seq is an identity column: its sequence never hands a number out twice.
    next_seq = "nextval(pg_get_serial_sequence('workflows', 'seq'))"
    # The expression of the GIN index of schema migration 4: whole words, no stemming (as SQLite's FTS5).
    error_match = "to_tsvector('simple', coalesce(workflows.error, '')) @@ plainto_tsquery('simple', ?)"
    json_pairs = "jsonb_each_text(({})::jsonb)"
    json_text = "{0}.value"

    def run(self, conn: Conn, sql: str, params: Sequence[Any] = ()) -> Rows:
        """Execute one statement."""
        return conn.execute(pg_sql(sql), params)

    def run_many(self, conn: Conn, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Execute one statement once per row of parameters (nothing for none)."""
        if rows:
            with conn.cursor() as cur:
                cur.executemany(pg_sql(sql), rows)

    def in_list(self, column: str, values: Iterable[Any]) -> tuple[str, list[Any]]:
        """`column = ANY(?)`: one array parameter, whatever the number of values."""
        return f"{column} = ANY(?)", [list(values)]

    def limit(self, limit: int) -> int | None:
        """SQLite's LIMIT -1 (no limit) as PostgreSQL's LIMIT NULL."""
        return None if limit < 0 else int(limit)


POSTGRES = PGDialect()


class PGConnection(StoreBase):
    """The connection every part of the PostgreSQL store works through.

    Args:
        url: a libpq URL (postgresql://… or postgres://…, unix sockets with ?host=/path).
        readonly: the session has default_transaction_read_only on; every write raises ReadOnlyError.
        max_payload: cap in bytes on a signal payload's or an input's JSON text.
    """

    dialect = POSTGRES

    def __init__(self, url: str, *, readonly: bool = False, max_payload: int | None = None) -> None:
        self.url = url
        self.where = redact_url(url)
        self.readonly = readonly
        self.max_payload = max_payload if max_payload is not None else default_max_payload()
        self._version = 0
        self._listener: threading.Thread | None = None
        self._wakers: list[Callable[[], None]] = []
        self._closing = threading.Event()
        # Ends the listening thread (made with it): from close(), or when the store is dropped unclosed.
        self._stop_listening: Callable[[], Any] = lambda: None
        # A write sent without waiting for its answer (`_send_unanswered`): how to make it again
        # if the answer, read before the connection's next use, says it failed.
        self._unanswered: Callable[[Conn, int], Any] | None = None
        # The statements prepared by name (`_prepare`) and the connection they were prepared on.
        self._prepared_on: Conn | None = None
        self._prepared: set[str] = set()
        self._conn: Conn = self._open()

    def _open(self) -> Conn:
        """The first connection. A server that cannot be reached fails at once (one line for the
        command line); a session lost while it was being set up (a terminated backend) is tried again."""
        deadline = time.monotonic() + RECONNECT_FOR
        backoff = BACKOFF_FIRST
        while True:
            try:
                return self._connect(first=True)
            except _LostDuringSetUp:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(backoff)
                backoff = min(BACKOFF_MAX, backoff * 2)

    # -- opening

    def _connect(self, *, first: bool = False) -> Conn:
        try:
            conn: Conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {self.where}: {redact_text(_first_line(exc), self.url)}") from None
        try:
            conn.execute(f"SET search_path TO {SCHEMA}")
            # A committed outcome must be durable before its workflow goes on (or an activity
            # would run twice after a crash): whatever the server's default says.
            conn.execute("SET synchronous_commit = on")
            if self.readonly:
                # The server refuses every write of this session, whatever the code asks.
                conn.execute("SET default_transaction_read_only = on")
            if first:
                # (version before, version now): `replaylog migrate` reports it.
                self.schema_upgrade = check_schema(conn, self.where, readonly=self.readonly)
        except psycopg.Error as exc:  # lost again while setting the session up: a reconnect tries again
            lost = connection_lost(exc, conn)
            conn.close()
            message = f"cannot connect to {self.where}: {redact_text(_first_line(exc), self.url)}"
            raise (_LostDuringSetUp if lost else StoreError)(message) from None
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        """Close the connection (and the change listener, if one was started)."""
        self._closing.set()
        # (An unanswered write is not waited for: the server runs it before it reads the
        # connection's end.)
        self._conn.close()
        if self._listener is not None:
            self._stop_listening()
            self._listener.join(timeout=2)

    def open_marks(self, owner: str, records: int) -> MarkBoard | None:
        """None: hosts share no files; marks are rows, written through `mark_started`."""
        return None

    def upkeep(self, owner: str) -> list[str] | None:
        """Nothing: the server bounds its own log, and dead workers are found by their lapsed leases."""
        return None

    def reclaim_space(self, *, full: bool = False) -> str:
        """Nothing: the server's autovacuum makes the space of deleted rows reusable; what that means, in a line."""
        return ("PostgreSQL's autovacuum makes the deleted rows' space reusable"
                " (VACUUM FULL, run by the server's administrator, would give it back to the file system)")

    # -- running operations

    def _run(self, fn: Callable[[Conn, int], T], *, write: bool = False) -> T:
        """Run `fn(connection, attempt)`, again on a new connection after a connection fault.

        `attempt` is 0 the first time; a write that is tried again (attempt > 0) may find
        its own earlier commit, if the connection broke after the server committed it.
        """
        if write and self.readonly:
            raise ReadOnlyError(f"database {self.where} is open read-only")
        if self._unanswered is not None:
            self._settle()
        attempt = 0
        deadline: float | None = None
        backoff = BACKOFF_FIRST
        while True:
            try:
                result = fn(self._conn, attempt)
            except pg_errors.ReadOnlySqlTransaction as exc:
                raise ReadOnlyError(f"database {self.where} cannot be written: {_first_line(exc)}") from None
            except _RETRY_IN_PLACE:
                attempt += 1
                time.sleep(min(backoff, 0.05))
                continue
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if not connection_lost(exc, self._conn):
                    raise StoreError(f"{self.where}: {redact_text(_first_line(exc), self.url)}") from None
                _Outage.lost(self.where, exc)
                now = time.monotonic()
                deadline = deadline or now + RECONNECT_FOR
                self._reconnect(deadline, backoff)
                backoff = min(BACKOFF_MAX, backoff * 2)
                attempt += 1
                continue
            except psycopg.Error as exc:  # a bad statement or value: one line, the URL's password hidden
                raise StoreError(f"{self.where}: {redact_text(_first_line(exc), self.url)}") from None
            if attempt:
                _Outage.back(self.where)
            return result

    # -- writes that do not wait for their answer

    def _send_unanswered(self, name: str, statement: str, params: Sequence[bytes | None],
                         redo: Callable[[Conn, int], Any], param_formats: Sequence[int] | None = None) -> None:
        """Send one autocommit statement and go on without waiting for its answer.

        Trick "unanswered marks" (the one user is engine.store.postgres.marks): the
        statement is handed to the kernel and the caller goes on at once; its answer is read
        before the connection's next use (`_settle`), and if that answer says it failed,
        `redo` makes the write again the ordinary way (after a reconnect, if the connection
        broke). Measured on 2 vCPUs (pgserver 16, fsync on, floor ~3,500 commits/s), with
        the mark also made one statement: a lone workflow 730-970 -> ~1,450 slots/s, 50
        workflows at once ~1,300 -> ~2,450 slots/s (each thread then on its own connection).

        Once sent, such a write outlives the process that sent it: a killed process's
        socket is closed after its queued bytes went out (nothing unread is in its receive
        buffer, since the answer of the write before was read first: so no reset), and the
        server runs a statement it was sent whether or not the client still listens.

        `statement` is prepared once per connection under `name` (PREPARE); `params` are
        its parameters as text, or in the formats `param_formats` gives (libpq's: 0 text, 1
        binary). The statement is a few hundred bytes: libpq hands it to the
        kernel at once (a flush that has more to write waits until it could).
        """
        if self.readonly:
            raise ReadOnlyError(f"database {self.where} is open read-only")
        if self._unanswered is not None:
            self._settle()
        conn = self._conn
        try:
            self._prepare(conn, name, statement)
            pgconn = conn.pgconn
            pgconn.send_query_prepared(name.encode(), params, param_formats)
            if pgconn.flush():
                conn.wait(send(pgconn))
        except (psycopg.OperationalError, psycopg.InterfaceError):
            # Not sent (a broken connection, say): the ordinary way, with its retries.
            self._run(redo, write=True)
            return
        except psycopg.Error as exc:  # a bad statement: one line, the URL's password hidden
            raise StoreError(f"{self.where}: {redact_text(_first_line(exc), self.url)}") from None
        self._unanswered = redo

    def _execute_raw(self, conn: Conn, name: str, statement: str, params: Sequence[bytes | None],
                     param_formats: Sequence[int] | None = None) -> pq.abc.PGresult:
        """Run `statement` (prepared once per connection as `name`) with `params`; its one result.

        `params` are text, or in the formats `param_formats` gives (libpq's: 0 text, 1 binary).

        Trick "raw slot statement" (the one user is engine.store.postgres.commit, a lone
        workflow's slot): libpq is called directly with parameters already in text, past
        psycopg's cursor, query conversion and adaptation, which cost ~60-100 µs of Python a
        statement. Measured on 2 vCPUs (pgserver 16, fsync on), one workflow of 2,000 slots,
        four alternated runs on a loaded machine: the worker's CPU per slot went from a median
        of ~214 µs to ~165 µs (the slot's wait for the server is unchanged). A failed statement
        raises the psycopg error it would have.

        psycopg sends `DEALLOCATE ALL` after a rolled-back transaction once it has prepared
        statements of its own, which drops ours too: a statement the server no longer knows
        is prepared again and sent once more (the connection is in autocommit, so the failed
        send changed nothing).
        """
        for again in (False, True):
            self._prepare(conn, name, statement)
            # libpq's own blocking call (it lets go of the GIL while it waits), not a send and
            # psycopg's wait (a generator driven through the connection's wait function):
            # counted under callgrind, one workflow in an in-process worker, marks on, a slot
            # ~82,000 -> ~73,000 CPU instructions (two runs each, in turns).
            pgconn = conn.pgconn
            result: pq.abc.PGresult = pgconn.exec_prepared(  # (None is NULL, as in send_query_prepared)
                name.encode(), params, param_formats)  # type: ignore[arg-type]
            if result.status != pq.ExecStatus.FATAL_ERROR:
                return result
            if pgconn.status == pq.ConnStatus.BAD:
                # The connection broke under the call (libpq says so in a result with no
                # SQLSTATE): raised as psycopg's wait raises it, a connection fault.
                raise psycopg.OperationalError(_first_line(pg_errors.error_from_result(
                    result, encoding=conn.info.encoding)))
            error = pg_errors.error_from_result(result, encoding=conn.info.encoding)
            if again or not isinstance(error, pg_errors.InvalidSqlStatementName) \
                    or pgconn.transaction_status != pq.TransactionStatus.IDLE:
                raise error
            self._prepared.discard(name)
        raise AssertionError("unreachable")  # the second pass returns or raises

    def _pipeline_raw(self, conn: Conn, name: str, statement: str, params: Sequence[Sequence[bytes | None]],
                      param_formats: Sequence[int] | None = None,
                      then: tuple[str, str, Sequence[bytes | None]] | None = None) -> list[pq.abc.PGresult]:
        """Run `statement` (prepared as `name`) once per row of `params`, all in one transaction.

        Each row's parameters are text, or in the formats `param_formats` gives (as `_execute_raw`).
        `then`: one more statement (name, statement, text parameters) after them, in the same
        transaction; its result is not returned (a failure raises, as any statement's).

        Trick "raw group commit" (the one user is engine.store.postgres.commit, a batch of
        slots): libpq's pipeline mode, past psycopg's cursors, sends the batch at once and
        ends it with one Sync, which commits every statement sent before it in one implicit
        transaction (one WAL flush); then the answers are read, one result a statement. A
        failed statement aborts the ones after it and the transaction; the first error is
        raised once the Sync was read (the connection is idle again). As in `_execute_raw`,
        a statement psycopg deallocated is prepared again and the batch sent once more.
        """
        pgconn = conn.pgconn
        for again in (False, True):
            self._prepare(conn, name, statement)
            if then is not None:
                self._prepare(conn, then[0], then[1])
            pgconn.enter_pipeline_mode()
            try:
                for row in params:
                    pgconn.send_query_prepared(name.encode(), row, param_formats)
                if then is not None:
                    pgconn.send_query_prepared(then[0].encode(), then[2], None)
                pgconn.pipeline_sync()
                conn.wait(send(pgconn))
                results = [conn.wait(fetch_many(pgconn))[-1] for _ in range(len(params) + (then is not None))]
                conn.wait(fetch_many(pgconn))  # the Sync's
            finally:
                if not conn.closed and not conn.broken:
                    try:
                        pgconn.exit_pipeline_mode()
                    except psycopg.Error:  # answers left unread after a fault: the connection is not reused
                        conn.close()
            failed = next((r for r in results if r.status == pq.ExecStatus.FATAL_ERROR), None)
            if failed is None:
                return results[:len(params)] if then is not None else results
            error = pg_errors.error_from_result(failed, encoding=conn.info.encoding)
            if again or not isinstance(error, pg_errors.InvalidSqlStatementName):
                raise error
            self._prepared.discard(name)
        raise AssertionError("unreachable")  # the second pass returns or raises

    def _prepare(self, conn: Conn, name: str, statement: str) -> None:
        """PREPARE `statement` as `name` on `conn`, once per connection."""
        if self._prepared_on is not conn:
            self._prepared_on, self._prepared = conn, set()
        if name not in self._prepared:
            conn.execute(f"PREPARE {name} AS {statement}")
            self._prepared.add(name)

    def _settle(self) -> None:
        """Read the answer of the write `_send_unanswered` sent; make it again if it failed."""
        redo, self._unanswered = self._unanswered, None
        if redo is None:
            return
        conn = self._conn
        pgconn = conn.pgconn
        failed = False
        try:
            # The answer has mostly come while the activity ran: read what is there, and wait
            # (psycopg's way) only for what has not come yet.
            pgconn.consume_input()
            while not pgconn.is_busy():
                result = pgconn.get_result()
                if result is None:
                    break
                failed = failed or result.status not in _ANSWERED
            else:
                failed = any(r.status not in _ANSWERED for r in conn.wait(fetch_many(pgconn))) or failed
        except psycopg.Error:
            failed = True
        if failed:
            self._run(redo, write=True)

    def _reconnect(self, deadline: float, backoff: float) -> None:
        """A new connection, trying with growing pauses until `deadline`."""
        self._conn.close()
        while True:
            time.sleep(backoff)
            try:
                self._conn = self._connect()
                return
            except StoreError as exc:
                if time.monotonic() >= deadline:
                    raise StoreError(f"lost the connection to {self.where} and could not get it back: {exc}") from None
                backoff = min(BACKOFF_MAX, backoff * 2)

    # -- the primitives of the shared reads and operator writes (engine.store.shared.base)

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        statement = pg_sql(sql)
        return self._run(lambda c, _: c.execute(statement, params).fetchall())

    def _query_one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        statement = pg_sql(sql)
        return self._run(lambda c, _: c.execute(statement, params).fetchone())

    def _snapshot(self, fn: Callable[[Conn], T]) -> T:
        def read(conn: Conn, _: int) -> T:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                return fn(conn)

        return self._run(read)

    def _operate(self, workflow_id: str, action: str, now: float, who: str, body: Callable[[Conn], T],
                 again: Callable[[str], T]) -> T:
        # After a connection fault the write is tried again on a new connection; one whose
        # answer was lost may have committed: its audit row, stamped with this call's own
        # time and actor, tells, and the retry returns what the first try did.
        def operate(conn: Conn, attempt: int) -> T:
            with conn.transaction():
                if attempt:
                    row = conn.execute("SELECT detail FROM audit WHERE workflow_id = %s AND action = %s"
                                       " AND at = %s AND actor = %s", (workflow_id, action, now, who)).fetchone()
                    if row is not None:
                        return again(row[0] or "")
                result = body(conn)
                conn.execute(NOTIFY)
            return result

        return self._run(operate, write=True)

    # -- change detection

    def data_version(self) -> int:
        """A change token: it changes whenever a start, signal, verdict or release is committed.

        The first call starts a thread with a connection of its own that LISTENs for
        those; later calls read a counter (no query).
        """
        if self._listener is None:
            ready = threading.Event()
            stop_read, stop_write = os.pipe()
            # The thread holds the store only weakly: a store dropped without close() (a Client
            # never closed) is collected, and its finalizer ends the thread and its connection,
            # where the thread kept it alive and listening (reconnecting, once its database was gone) for ever.
            self._stop_listening = weakref.finalize(self, _stop_listening, self._closing, stop_write)
            self._listener = threading.Thread(
                target=_listen, args=(weakref.ref(self), self.url, self._closing, ready, stop_read),
                name="replaylog-pg-listen", daemon=True)
            self._listener.start()
            ready.wait(5)
        return self._version

    def wake_on_change(self, wake: Callable[[], None]) -> bool:
        """Call `wake` from the listening thread on each notification (True): the worker's idle
        wait ends at once, where polling the token cost up to its poll interval."""
        self._wakers.append(wake)
        self.data_version()  # start listening
        return True


def _stop_listening(closing: threading.Event, stop_write: int) -> None:
    """End a store's listening thread: at once, through its pipe (runs once: a weakref.finalize)."""
    closing.set()
    with contextlib.suppress(OSError):  # the thread had ended and closed its end (a broken pipe)
        os.write(stop_write, b"x")
    os.close(stop_write)


def _listen(store_ref: weakref.ref[PGConnection], url: str, closing: threading.Event, ready: threading.Event,
            stop: int) -> None:
    """The listening thread of a store: LISTEN on a connection of its own; on each notification the
    store's token moves and its wakers are called.

    Reconnects with a backoff when the connection is lost; ends when `closing` is set (the store
    closed, or dropped and collected), closing its connection and its end of the stop pipe.
    """

    def told(first: bool = False) -> bool:
        """The token moves and each waker is called (False: the store was dropped, the thread ends)."""
        store = store_ref()  # (held only for this call: a dropped store is collected meanwhile)
        if store is None:
            return False
        store._version += 1
        if first:
            ready.set()
        for wake in store._wakers:  # (the worker's loop sleeps until told, or its next timed look)
            wake()
        return True

    backoff = BACKOFF_FIRST
    try:
        while not closing.is_set():
            try:
                with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    if not told(first=True):  # anything may have changed while nobody listened
                        return
                    backoff = BACKOFF_FIRST
                    # poll, not select: a busy worker's descriptors may be numbered past select's 1,024.
                    waiting = select.poll()
                    waiting.register(conn.fileno(), select.POLLIN)
                    waiting.register(stop, select.POLLIN)
                    while not closing.is_set():
                        if not any(fd == conn.fileno() for fd, _ in waiting.poll(LISTEN_IDLE * 1000)):
                            continue  # the store was closed or dropped (the pipe was written to), or nothing came
                        for _ in conn.notifies(timeout=0):
                            if not told():
                                return
            except psycopg.Error:
                ready.set()
                if closing.wait(backoff):
                    return
                backoff = min(BACKOFF_MAX, backoff * 2)
    finally:
        os.close(stop)
