"""The tests' PostgreSQL server (the one the benchmarks start too, bench/pg_server.py) and its
databases, emptied between tests instead of made anew."""

from __future__ import annotations

import time

import psycopg

from bench.pg_server import PGServer

__all__ = ["Databases", "LibpqLosingFirstAnswer", "PGServer"]

# What a database holds beyond a new one's: any schema but public, anything in public, and
# any connection but the one asking.
_LEFT_OVER = """
SELECT (SELECT count(*) FROM pg_namespace WHERE nspname NOT IN ('public', 'information_schema')
                                              AND nspname NOT LIKE 'pg\\_%')
     + (SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace)
     + (SELECT count(*) FROM pg_proc WHERE pronamespace = 'public'::regnamespace)
     + (SELECT count(*) FROM pg_type WHERE typnamespace = 'public'::regnamespace)
     + (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
                                                   AND backend_type = 'client backend')
"""


class LibpqLosingFirstAnswer:
    """Stands for a connection's libpq object (its `pgconn`): its first prepared statement runs on the
    server (and commits), then the connection is closed before the answer is read, and the call raises
    as a lost connection does. `lost` gets an entry then (shared with other interceptors of a test)."""

    def __init__(self, real: psycopg.Connection[tuple[object, ...]], lost: list[int]) -> None:
        self._real = real
        self._lost = lost

    def __getattr__(self, name: str) -> object:
        return getattr(self._real.pgconn, name)

    def exec_prepared(self, *args: object) -> object:
        result = self._real.pgconn.exec_prepared(*args)  # type: ignore[arg-type]
        if not self._lost:
            self._lost.append(1)
            self._real.close()
            raise psycopg.OperationalError("the connection was lost")
        return result


class Databases:
    """Empty databases on one server, each lent to one test at a time.

    A database a test gives back has its connections ended and the `replaylog` schema (where
    the store keeps everything) dropped; if it is then as a new one is, the next test gets
    it. That costs ~20-50 ms; CREATE DATABASE copies a template, ~0.1 s on a quiet machine
    and ~1 s on a loaded one, and the copies left behind made the server's folder grow by
    ~8 MB a test. A database left with anything else (a table or schema of a test's own, a
    connection that came back) is dropped, and a new one made when needed.
    """

    def __init__(self, server: PGServer) -> None:
        self.server = server
        self._idle: list[str] = []

    def take(self) -> str:
        """The URL of an empty database, for one test."""
        while self._idle:
            url = self._idle.pop()
            if self._left_over(url) == 0:
                return url
            self._drop(url)
        return self.server.fresh_database()

    def give_back(self, url: str) -> None:
        """Empty the database and keep it for the next test (or drop it, if it cannot be emptied)."""
        try:
            self._end_connections(url)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("SET lock_timeout = '10s'")
                conn.execute("DROP SCHEMA IF EXISTS replaylog CASCADE")
            if self._left_over(url) == 0:
                self._idle.append(url)
                return
        except psycopg.Error:
            pass  # the server stopped by the test, a lock held by a straggler: drop it below
        self._drop(url)

    def _end_connections(self, url: str) -> None:
        """pg_terminate_backend on every connection to the database; wait until they are gone."""
        name = _name(url)
        deadline = time.monotonic() + 30
        while True:
            rows = self.server.execute(
                self.server.admin_url,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
                (name,))
            if not rows or time.monotonic() > deadline:
                return
            time.sleep(0.02)

    def _left_over(self, url: str) -> int:
        try:
            rows = self.server.execute(url, _LEFT_OVER)
        except psycopg.Error:
            return -1
        return int(rows[0][0])

    def _drop(self, url: str) -> None:
        try:
            self.server.execute(self.server.admin_url, f'DROP DATABASE IF EXISTS "{_name(url)}" WITH (FORCE)')
        except psycopg.Error:
            pass  # a server a test left stopped: its folder goes with the session


def _name(url: str) -> str:
    """The database name in a URL of `PGServer.url` (postgresql://user:@/NAME?host=…)."""
    return url.split("?", 1)[0].rsplit("/", 1)[1]
