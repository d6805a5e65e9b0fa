"""Helpers shared by the fault-injection tests: real worker processes, real kills, evidence.

Nothing here mocks the engine: workers are `replaylog worker` subprocesses on a real
SQLite file, kills are SIGKILL, and the evidence is the ledger the activities append to.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from conftest import ROOT, cli_env, run_cli, wait_for
from replaylog.engine.app import Registry
from replaylog.engine.worker import Worker


def fault_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of a fault-suite subprocess: ledger and sink files under `tmp`."""
    return cli_env(FAULT_LEDGER=str(tmp / "ledger.jsonl"), FAULT_SINK=str(tmp / "sink.txt"), **extra)


class WorkerProc:
    """One `replaylog worker --app fault_app` (or `app`) subprocess whose stderr goes to a log file."""

    def __init__(self, db: Path | str, logdir: Path, env: dict[str, str], *args: str, app: str = "fault_app") -> None:
        logdir.mkdir(parents=True, exist_ok=True)
        self.log_path = logdir / f"worker-{time.monotonic_ns()}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "replaylog", "--db", str(db), "worker", "--app", app, *args],
            env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
        )
        self.pid = self.proc.pid

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send `sig`; for SIGKILL also reap the process."""
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass
        if sig == signal.SIGKILL:
            self.wait(30)

    def wait(self, timeout: float) -> int:
        """Wait for the process to end; its exit code."""
        code = self.proc.wait(timeout)
        self._log.close()
        return code

    def log(self) -> str:
        """What the worker printed so far."""
        return self.log_path.read_text(errors="replace")


def integrity(db: Path | str) -> str:
    """PRAGMA integrity_check through a fresh read-only connection ("ok" for a PostgreSQL URL: the
    server guards its own files, and what the storm proves there is in the rows)."""
    if isinstance(db, str):
        return "ok"
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSON-lines ledger (empty if it was never written)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def report(name: str, figures: dict[str, Any]) -> None:
    """Print a test's figures, and append them to $FAULT_REPORT when set (for the README)."""
    line = json.dumps({"test": name, **figures})
    print(line)
    path = os.environ.get("FAULT_REPORT")
    if path:
        with open(path, "a") as fh:
            fh.write(line + "\n")


@contextmanager
def reaping(procs: list[WorkerProc]) -> Iterator[list[WorkerProc]]:
    """Kill whatever workers are left when the test ends, pass or fail."""
    try:
        yield procs
    finally:
        for p in procs:
            if p.proc.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                p.kill()


def crash_mid_activity(db: Path | str, tmp: Path, crashes: int, after_kill: Callable[[int], None]) -> None:
    """SIGKILL `crashes` workers in turn in the middle of fault_app's `stalled` activity at slot 1
    (`after_kill(n)` after the n-th), then let one more worker finish the workflow (exit 0)."""
    held = fault_env(tmp, FAULT_RELEASE=str(tmp / "never"))  # stall waits and waits
    with reaping([]) as procs:
        for crash in range(1, crashes + 1):
            w = WorkerProc(db, tmp / "logs", held, "--quiet")
            procs.append(w)
            assert wait_for(lambda n=crash: sum(e.get("event") == "start" for e in read_jsonl(tmp / "ledger.jsonl"))
                            == n, timeout=60), w.log()
            w.kill()
            after_kill(crash)
    (tmp / "released").touch()
    done = run_cli(db, "worker", "--app", "fault_app", "--until-idle", "--quiet",
                   env=fault_env(tmp, FAULT_RELEASE=str(tmp / "released")))
    assert done.returncode == 0, done.stderr


@contextmanager
def app_worker(db: Path | str, module: ModuleType, concurrency: int = 4) -> Iterator[Worker]:
    """An in-process worker of the app `module` on `db`, on a thread of its own, stopped on leaving."""
    w = Worker(db, Registry.from_module(module), concurrency=concurrency)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    try:
        yield w
    finally:
        w.stop()
        t.join(30)



def holds_write_lock(db: Path | str) -> bool:
    """Whether some connection holds the SQLite file's write lock (always False for a PostgreSQL URL)."""
    if str(db).startswith("postgresql:"):
        return False
    conn = sqlite3.connect(db, timeout=0.2, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()


def _stopped(pid: int) -> bool:
    """Whether every thread of process `pid` has stopped (state T in /proc)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        return all((task / "stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t") for task in tasks)
    except OSError:  # a thread ended meanwhile: look again
        return False


def freeze_outside_a_write(pid: int, db: Path | str) -> None:
    """SIGSTOP process `pid`, but not while it holds the SQLite file's write lock (a heartbeat's
    or a lease renewal's commit): a process frozen inside a write transaction blocks every writer
    on the file until it runs again, which no engine can help (docs/guarantees.md), and is not
    what a takeover test is about. On PostgreSQL it only freezes the process.

    The lock is looked at once every thread has stopped: a signal is delivered when its target is
    next scheduled, and on a loaded machine a worker looked at too soon went on into a heartbeat's
    write after the look and was frozen holding the lock (the worker meant to take over then never
    started)."""
    for _ in range(200):
        os.kill(pid, signal.SIGSTOP)
        assert wait_for(lambda: _stopped(pid), timeout=60), f"process {pid} did not stop"
        if not holds_write_lock(db):
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.02)
    raise AssertionError("the worker held the write lock at every try")
