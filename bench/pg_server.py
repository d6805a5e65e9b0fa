"""A real PostgreSQL server for the tests, the benchmarks and `make postgres`: pgserver's binaries, a unix socket.

No root and no system packages: the `pgserver` wheel (the dev extra) carries PostgreSQL
16. One server per test process; each test gets a database of its own (CREATE DATABASE
is ~50 ms). `python -m bench.pg_server start|stop [FOLDER]` (what `make postgres` and
`make postgres-stop` run) keeps one running for a newcomer to try replaylog on.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

_names = itertools.count()


def pgserver_missing() -> str | None:
    """Why no server can be started here (pgserver is not installed), in one line; None if one can.

    pgserver's wheels stop at Python 3.12 (its binaries are PostgreSQL's, but each wheel is
    tagged for one CPython): on a newer Python the dev extra leaves it out, and what needs a
    server says so instead of failing on an import.
    """
    if importlib.util.find_spec("pgserver") is not None:
        return None
    if sys.version_info >= (3, 13):
        return (f"pgserver, which starts the PostgreSQL server, has no wheel for Python "
                f"{sys.version_info.major}.{sys.version_info.minor}: use Python 3.11 or 3.12 for it")
    return "pgserver, which starts the PostgreSQL server, is not installed (pip install -e '.[dev]')"


def _drop_aborted_initdb(pgdata: Path) -> None:
    """Remove a data folder whose initdb was cut short (on a loaded machine pgserver's initdb can time out).

    Its postmaster.pid is then the bootstrap backend's (a negative pid) and stays: every
    later start reads it and fails. A folder whose server did start is left alone.
    """
    pid_file = pgdata / "postmaster.pid"
    try:
        first = pid_file.read_text().split("\n", 1)[0].strip()
    except OSError:
        return
    if first.startswith("-"):
        shutil.rmtree(pgdata, ignore_errors=True)


class PGServer:
    """One running server: its admin URL, fresh databases on it, and stop/start for fault tests."""

    def __init__(self, pgdata: Path, *, durable: bool) -> None:
        import pgserver

        self._pg = pgserver
        # Two test processes starting servers at once on a loaded machine: pg_ctl's
        # start can time out; a second try finds the server up or starts it.
        for attempt in range(3):
            try:
                self.server = pgserver.get_server(pgdata, cleanup_mode="stop")
                break
            except Exception:
                if attempt == 2:
                    raise
                # pgserver caches the handle per folder: a failed one must not be handed back.
                pgserver.PostgresServer._instances.pop(Path(pgdata).expanduser().resolve(), None)
                _drop_aborted_initdb(Path(pgdata))
                time.sleep(2)
        self.pgdata = Path(pgdata)
        self.admin_url = self.server.get_uri()
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            # Workers open a connection per workflow thread (a worker holds `concurrency` + 3).
            conn.execute("ALTER SYSTEM SET max_connections = 400")
            if not durable:
                # The tests prove semantics, not durability across a power cut: no fsync waits.
                conn.execute("ALTER SYSTEM SET fsync = off")
                conn.execute("ALTER SYSTEM SET full_page_writes = off")
        self.restart()

    def _ctl(self, *args: str) -> None:
        self._pg.pg_ctl(["-w", *args], pgdata=self.pgdata, user=self.server.system_user, timeout=60)

    def restart(self) -> None:
        """Stop and start the server (fast shutdown): every connection is dropped."""
        self.stop()
        self.start()

    def stop(self) -> None:
        """Stop the server (fast shutdown); tried again while it still answers.

        Run as root, pg_ctl runs as pgserver's own user, and cannot stop a server whose folder
        that user can no longer reach: a pytest session that starts makes /tmp/pytest-of-root
        0700 again, under a server started in a test's tmp_path. The postmaster is then sent
        SIGINT (a fast shutdown) by the pid in its postmaster.pid.
        """
        for attempt in range(5):
            try:
                self._ctl("-m", "fast", "stop")
                return
            except Exception:
                try:
                    psycopg.connect(self.admin_url, connect_timeout=2).close()
                except psycopg.OperationalError:
                    return  # it is down
                if self._interrupt_postmaster():
                    return
                if attempt == 4:
                    raise
                time.sleep(1)

    def _interrupt_postmaster(self) -> bool:
        """SIGINT to the postmaster named in postmaster.pid; whether it has gone within a minute."""
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return False
        deadline = time.monotonic() + 60
        try:
            os.kill(pid, signal.SIGINT)
            while time.monotonic() < deadline:
                os.kill(pid, 0)
                time.sleep(0.05)
        except ProcessLookupError:
            return True
        return False

    def close(self) -> None:
        """Stop the server for good, at the end of a run.

        pg_ctl, not pgserver's `cleanup`: the server was restarted by pg_ctl (`restart`), and
        pgserver's cleanup then left it running after the tests and benchmarks had ended.
        """
        self.stop()

    def start(self) -> None:
        """Start it again after `stop`: pg_ctl with pgserver's options (no TCP, the socket in pgdata).

        pg_ctl -w waits until the server accepts connections (pgserver's own start reads
        postmaster.pid while the server writes it, and can fail on a loaded machine).
        """
        socket_dir = self.admin_url.split("host=", 1)[1].split("&", 1)[0]
        self._ctl("-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(self.pgdata / "log"), "start")

    def url(self, database: str) -> str:
        """The URL of a database on this server."""
        return self.server.get_uri(database)

    def fresh_database(self, prefix: str = "t") -> str:
        """Create an empty database; return its URL."""
        name = f"{prefix}_{os.getpid()}_{next(_names)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def execute(self, url: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run one statement on a database as the admin; return its rows (if any)."""
        with psycopg.connect(url, autocommit=True) as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []


# Where `make postgres` keeps its server, beside the demo's SQLite file; the database it makes on it.
DEV_FOLDER = Path(".demo/postgres")
DEV_DATABASE = "replaylog"


def start_dev(folder: Path = DEV_FOLDER) -> str:
    """Start (or find running) a durable server in `folder`, with a database `replaylog`; its URL.

    The server outlives this process (pgserver's cleanup is off): it runs until `stop_dev`.
    """
    import pgserver

    folder.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(folder.resolve(), cleanup_mode=None)
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DEV_DATABASE,)).fetchone():
            conn.execute(f'CREATE DATABASE "{DEV_DATABASE}"')
    return str(server.get_uri(DEV_DATABASE))


def stop_dev(folder: Path = DEV_FOLDER) -> bool:
    """Stop the server `start_dev` started in `folder` (its data stays); False if none was running there."""
    if not (folder / "postmaster.pid").exists():
        return False
    import pgserver

    server = pgserver.get_server(folder.resolve(), cleanup_mode=None)
    pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=folder.resolve(), user=server.system_user, timeout=60)
    return True


def main(argv: list[str]) -> int:
    """`start [FOLDER]`: start the dev server and print the URL to use; `stop [FOLDER]`: stop it."""
    if not argv or argv[0] not in ("start", "stop") or len(argv) > 2:
        print("usage: python -m bench.pg_server start|stop [FOLDER]", file=sys.stderr)
        return 2
    folder = Path(argv[1]) if len(argv) > 1 else DEV_FOLDER
    missing = pgserver_missing()
    # Without pgserver no server was started here by this checkout's Python: nothing to stop.
    if missing is not None and (argv[0] == "start" or (folder / "postmaster.pid").exists()):
        print(f"cannot {argv[0]} a local PostgreSQL server: {missing}", file=sys.stderr)
        return 1
    if argv[0] == "stop":
        print(f"stopped the PostgreSQL server in {folder} (its data stays)" if stop_dev(folder)
              else f"no PostgreSQL server running in {folder}")
        return 0
    url = start_dev(folder)
    print(f"PostgreSQL is running in {folder} (a unix socket there, no TCP port) until `make postgres-stop`.")
    print("Point replaylog at it (the bundled app; give --app yours):")
    print(f"  export REPLAYLOG_DB='{url}'")
    print("  .venv/bin/replaylog start refund 42")
    print("  .venv/bin/replaylog worker --until-idle")
    print("  .venv/bin/replaylog list")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
