"""Shared fixtures: real SQLite files in tmp_path, the real CLI and real worker processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from in_process import like_a_process

from bench.pg_server import pgserver_missing
from replaylog.engine.store import Store, open_store

if TYPE_CHECKING:
    from pg_server import Databases, PGServer

ROOT = Path(__file__).resolve().parent.parent


def can_build() -> bool:
    """What setup.py needs for the compiled parts (the C files, mypyc's modules): a C compiler and Python's headers."""
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return headers.exists() and any(shutil.which(cc) for cc in ("cc", "gcc", "clang"))


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a CLI subprocess: the repo on sys.path, no stray REPLAYLOG_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLAYLOG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


# Commands that run in a process of their own even from run_cli: the console and the demo (a
# Textual app), and a worker that keeps running (its signal handlers, threads and exit are what
# its tests are about). `worker --until-idle` runs here (`run_cli_here`) unless it starts
# processes or serves metrics: it is the commonest command of the suite, and most of its tests
# are about what it records and says, not about the process.
PROCESS_COMMANDS = frozenset({"worker", "console", "demo"})
_GLOBAL_OPTIONS = frozenset({"--db", "--max-payload"})  # the group's options that take a value


def _command(args: tuple[str, ...]) -> str | None:
    """The subcommand in a replaylog argument list (after the group's own options)."""
    it = iter(args)
    for arg in it:
        if arg in _GLOBAL_OPTIONS:
            next(it, None)
        elif not arg.startswith("-"):
            return arg
    return None


def _option(args: tuple[str, ...], name: str) -> str | None:
    """The value given to option `name` (`--name V` or `--name=V`), else None."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.partition("=")[2]
    return None


def needs_process(args: tuple[str, ...], env: dict[str, str] | None = None) -> bool:
    """Whether `replaylog ARGS…` must run in a process of its own to behave as it does for a user.

    A worker that runs until stopped, starts worker processes or serves metrics does; so does
    a command given an import path (PYTHONPATH) this process does not have.
    """
    if env is not None and env.get("PYTHONPATH") != cli_env().get("PYTHONPATH"):
        return True
    command = _command(args)
    if command != "worker":
        return command in PROCESS_COMMANDS
    return ("--until-idle" not in args or _option(args, "--processes") not in (None, "1")
            or _option(args, "--metrics-port") is not None)


def run_cli(db: Path | str, *args: str, input: str | bytes | None = None, timeout: float = 60,
            env: dict[str, str] | None = None, process: bool = False) -> subprocess.CompletedProcess[str]:
    """Run `replaylog --db DB ARGS…` and capture its exit code and output as text.

    In this test process (`run_cli_here`) unless `process` is asked for or the command needs
    one (`needs_process`): a new interpreter costs ~0.3 s of CPU for its imports on a quiet
    machine, several seconds of wall time on a loaded one, and most tests are about what the
    command says and writes, not about the process. `timeout` bounds only a process.
    """
    if not process and not needs_process(args, env):
        return run_cli_here(db, *args, input=input, env=env)
    data = input.encode() if isinstance(input, str) else input
    proc = subprocess.run(
        [sys.executable, "-m", "replaylog", "--db", str(db), *args],
        input=data, capture_output=True, timeout=timeout, env=env or cli_env(), cwd=ROOT,
        stdin=None if data is not None else subprocess.DEVNULL,
    )
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(errors="replace"),
                                       proc.stderr.decode(errors="replace"))


def run_cli_here(db: Path | str, *args: str, input: str | bytes | None = None,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`replaylog --db DB ARGS…` through `replaylog.cli.main` in this process, as a process would see it.

    The same entry point, arguments, environment (exactly `env`, else `cli_env()`), working
    folder, stdin (`input`, else empty) and non-terminal stdout/stderr; the exit code from
    SystemExit; an exception that escapes main is a traceback on stderr and exit code 1, as
    the interpreter would print it. What the command changes in this process is put back
    (`like_a_process`): signal handlers, logging, imported app modules, CPU affinity; and
    it may leave no thread running and no file or connection open.
    """
    import traceback

    from click.testing import CliRunner

    from replaylog.cli import main

    wanted = env or cli_env()
    overrides: dict[str, str | None] = {k: None for k in os.environ if k not in wanted}
    overrides.update(wanted)
    argv = ["--db", str(db), *args]
    cwd = os.getcwd()
    code: int = 0
    # A worker's threads, files and connections must all be gone when it returns; another
    # command starts none, and the test's own threads may open some meanwhile.
    here = like_a_process(" ".join(argv), check=_command(args) == "worker")
    with CliRunner().isolation(input=input, env=overrides) as (out, err, _mixed), here:
        try:
            if cwd != str(ROOT):
                os.chdir(ROOT)
            main(argv)
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                sys.stderr.write(f"{exc.code}\n")
                code = 1
        except Exception:
            sys.stderr.write(traceback.format_exc())
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            if cwd != str(ROOT):
                os.chdir(cwd)
        stdout, stderr = out.getvalue(), err.getvalue()
    return subprocess.CompletedProcess(["replaylog", *argv], code, stdout.decode(errors="replace"),
                                       stderr.decode(errors="replace"))


def start_worker(db: Path | str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start `replaylog worker` on DB as a background subprocess."""
    return subprocess.Popen(
        [sys.executable, "-m", "replaylog", "--db", str(db), "worker", "--quiet", *args],
        env=env or cli_env(), cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


def wait_for(predicate: Callable[[], bool], timeout: float = 120.0, interval: float = 0.02) -> bool:
    """Poll until predicate() is true; False on timeout (assert on the answer)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except Exception:  # a read racing a writer on a loaded machine: look again
            pass
        time.sleep(interval)
    return predicate()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A path for a fresh database file."""
    return tmp_path / "replaylog.db"


# The store backends the store-level tests run on: every test that takes `store`,
# `store_url` or `db` runs on each.
STORE_BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PGServer]:
    """One real PostgreSQL server per test process (pgserver: no root, no system packages)."""
    from pg_server import PGServer

    # A folder of our own, not pytest's: run as root, pgserver starts the server as another
    # user, and pytest's 0700 temp folders (and its cleanup of old ones) get in its way.
    base = Path(tempfile.mkdtemp(prefix="replaylog-pg-"))
    base.chmod(0o755)
    server = PGServer(base / "pg", durable=False)
    yield server
    server.close()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_databases(pg_server: PGServer) -> Databases:
    """The test process's empty PostgreSQL databases, lent one to a test."""
    from pg_server import Databases

    return Databases(pg_server)


@pytest.fixture
def pg_url(pg_databases: Databases) -> Iterator[str]:
    """The URL of an empty PostgreSQL database of the test's own."""
    url = pg_databases.take()
    yield url
    pg_databases.give_back(url)


@pytest.fixture(params=STORE_BACKENDS)
def store_url(request: pytest.FixtureRequest, db_path: Path) -> str:
    """Where a fresh store lives, as the URL `open_store` takes, once per backend."""
    backend = request.param
    if backend == "sqlite":
        return f"sqlite:///{db_path}"  # db_path is absolute: sqlite:////tmp/...
    if backend == "postgresql":
        url: str = request.getfixturevalue("pg_url")
        return url
    raise pytest.UsageError(f"no test set-up for store backend {backend!r}")


@pytest.fixture
def db(store_url: str, db_path: Path) -> Path | str:
    """A fresh database as the CLI's --db takes it, once per backend: a file path, or a PostgreSQL URL."""
    return db_path if store_url.startswith("sqlite:") else store_url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """A fresh store on a real database, once per backend (a real SQLite file for now)."""
    s = open_store(store_url)
    yield s
    s.close()


def on_server(store: Store) -> bool:
    """Whether a store is a server's (PostgreSQL) rather than one host's file (SQLite)."""
    from replaylog.engine.store.sqlite.store import SQLiteStore

    return not isinstance(store, SQLiteStore)


def sql(store: Store, statement: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one SQL statement on a store's own connection, either backend: `?` placeholders
    (SQLite's) become `%s` on PostgreSQL. For tests that set a row up by hand."""
    if on_server(store):  # psycopg
        statement = statement.replace("?", "%s")
    cur = store._conn.execute(statement, params)  # type: ignore[attr-defined]
    return list(cur.fetchall()) if cur.description else []


@pytest.fixture
def cli(db_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """run_cli bound to the test's database."""
    return lambda *args, **kw: run_cli(db_path, *args, **kw)


# ---------------------------------------------------------------- soak tests (make soak)


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--soak` runs the long soak-marked tests; the default run skips them."""
    parser.addoption("--soak", action="store_true", default=False, help="run the long soak tests (make soak)")


# Why no PostgreSQL server can be started here (pgserver has no wheel for Python 3.13 and
# newer), else None: the tests that need one are then skipped, saying so. Only there: where
# the dev extra installs pgserver (3.11, 3.12, and CI), a missing one fails those tests
# rather than leave a green run that tested no PostgreSQL.
PGSERVER_MISSING = pgserver_missing() if sys.version_info >= (3, 13) else None
_SERVER_FIXTURES = {"pg_server", "pg_databases", "pg_url"}


def _needs_a_server(item: pytest.Item) -> bool:
    """A test on a PostgreSQL server: its fixtures, a backend parameter, or the `pgserver` mark."""
    if _SERVER_FIXTURES & set(getattr(item, "fixturenames", ())) or item.get_closest_marker("pgserver"):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(v in ("postgresql", "postgres") for v in callspec.params.values())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip soak-marked tests unless --soak was given, so a default run stays short; and the
    PostgreSQL tests where no server can be started (PGSERVER_MISSING)."""
    if PGSERVER_MISSING is not None:
        no_server = pytest.mark.skip(reason=PGSERVER_MISSING)
        for item in items:
            if _needs_a_server(item):
                item.add_marker(no_server)
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak test: run with --soak (make soak)")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def console_seed_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The console tests' seeded database, made once per test process."""
    from console_seed import seed

    db = tmp_path_factory.mktemp("console-seed") / "replaylog.db"
    seed(db)
    return db


@pytest.fixture
def console_db(console_seed_template: Path, tmp_path: Path) -> Path:
    """A fresh copy of the seeded console database (named replaylog.db: the name shows in the title bar)."""
    from console_seed import copy_db

    return copy_db(console_seed_template, tmp_path / "replaylog.db")


@pytest.fixture(scope="session")
def console_seed_pg(pg_server: PGServer) -> str:
    """The console tests' seeded database on PostgreSQL, made once per test process: a template to copy."""
    from console_seed import seed

    name = f"console_seed_{os.getpid()}"
    pg_server.execute(pg_server.admin_url, f'CREATE DATABASE "{name}"')
    seed(pg_server.url(name))
    return name


@pytest.fixture(params=STORE_BACKENDS)
def console_any(request: pytest.FixtureRequest) -> Iterator[Path | str]:
    """A fresh copy of the seeded console database, once per backend: the file, or a PostgreSQL database
    made from the seeded template (CREATE DATABASE … TEMPLATE copies it on the server; dropped after)."""
    if request.param == "sqlite":
        path: Path = request.getfixturevalue("console_db")
        yield path
        return
    server: PGServer = request.getfixturevalue("pg_server")
    template: str = request.getfixturevalue("console_seed_pg")
    name = f"console_{os.getpid()}_{time.monotonic_ns()}"
    # The seeding store's listener may still be leaving the template: a copy needs it alone.
    for attempt in range(50):
        try:
            server.execute(server.admin_url, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
            break
        except Exception:
            if attempt == 49:
                raise
            time.sleep(0.1)
    yield server.url(name)
    server.execute(server.admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's database (`replaylog demo`'s seed), made once per test process."""
    db = tmp_path_factory.mktemp("demo-seed") / "demo.db"
    from replaylog.demo import seed

    seed(db, echo=lambda _line: None)
    return db


@pytest.fixture
def demo_db(demo_template: Path, tmp_path: Path) -> Path:
    """A fresh copy of the demo's database."""
    from console_seed import copy_db

    return copy_db(demo_template, tmp_path / "demo.db")
