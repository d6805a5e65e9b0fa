"""A worker whose database stays locked past the busy timeout goes on instead of dying.

A burst of commits (or another process's long write) can hold SQLite's write lock past
the busy timeout; the worker's renewals and claims then fail with "database is locked".
That used to end the worker's main loop, and with it every workflow it held.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest

import replaylog.engine.store.sqlite.connection as connection
from replaylog import Context, activity, workflow
from replaylog.engine.app import Registry
from replaylog.engine.store import open_store
from replaylog.engine.worker import Worker


@activity
def double(n: int) -> int:
    """2n."""
    return 2 * n


@workflow
def doubles(ctx: Context, n: int) -> int:
    """One activity."""
    return int(ctx.call_activity(double, n))


def test_a_locked_database_delays_renewals_and_claims_but_does_not_stop_the_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(connection, "BUSY_TIMEOUT_S", 0.2)
    db = tmp_path / "busy.db"
    open_store(db).close()
    worker = Worker(db, Registry.from_module(sys.modules[__name__]), ttl=0.9, poll=0.02)
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            worker.run()
        except BaseException as exc:  # what ended the main loop, for the assertion below
            failure.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        with open_store(db, readonly=True) as reader:
            while reader.served_names() is None:
                assert time.monotonic() < deadline, "the worker never said it runs"
                time.sleep(0.05)
        # Another writer holds the lock for five renewal periods.
        blocker = sqlite3.connect(db, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        with open_store(db) as starter:
            time.sleep(1.5)
            blocker.execute("ROLLBACK")
            blocker.close()
            assert not failure, f"the worker stopped on a locked database: {failure[0]!r}"
            wid = starter.start_workflow("doubles", 21)
            while starter.get_workflow(wid).status != "completed":
                assert not failure, f"the worker stopped: {failure[0]!r}"
                assert time.monotonic() < deadline + 30, "the workflow never completed after the lock was let go"
                time.sleep(0.05)
            assert starter.get_workflow(wid).result == 42
    finally:
        worker.stop()
        thread.join(30)
    assert not failure
    assert "database is locked" in caplog.text
