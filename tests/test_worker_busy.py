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


@activity
def paced(i: int) -> int:
    """A short activity: slots commit many times a second, each a change the worker's loop sees."""
    time.sleep(0.002)
    return i


@workflow
def paced_chain(ctx: Context, n: int) -> int:
    """`n` short activities in a row."""
    for i in range(n):
        ctx.call_activity(paced, i)
    return n


def test_a_busy_worker_looks_for_new_work_less_often_while_it_finds_none_and_still_claims_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # While a workflow runs, each of its commits changes the data version the loop watches,
    # so every look queries for claimable work: the loop backs off to BUSY_POLL_MAX while
    # those queries find nothing (engine.worker.loop), and a start still gets claimed.
    from replaylog.engine.store.sqlite.store import SQLiteStore
    from replaylog.engine.worker import loop

    looks: list[float] = []
    has_claimable = SQLiteStore.has_claimable

    def counted(self: SQLiteStore, *args: object, **kwargs: object) -> bool:
        looks.append(time.monotonic())
        return has_claimable(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SQLiteStore, "has_claimable", counted)
    db = tmp_path / "looks.db"
    with open_store(db) as store:
        store.start_workflow("paced_chain", 1000, workflow_id="long")
    worker = Worker(db, Registry.from_module(sys.modules[__name__]))
    thread = threading.Thread(target=worker.run, kwargs={"until_idle": True}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        with open_store(db, readonly=True) as reader:
            while reader.get_workflow("long").slots < 20:  # running, its commits under way
                assert time.monotonic() < deadline, "the long workflow never got going"
                time.sleep(0.01)
            window_start = time.monotonic()
            time.sleep(0.5)
            in_window = [t for t in looks if t >= window_start and t < window_start + 0.5]
            # At the busy floor of 10 ms the loop would look ~50 times in half a second; backed
            # off it looks at most every BUSY_POLL_MAX (plus its lapse checks). A loaded
            # machine only looks less often.
            assert len(in_window) <= 0.5 / loop.BUSY_POLL_MAX + 0.5 / loop.LAPSE_CHECK + 3, len(in_window)
            # New work is still found while the worker is busy.
            with open_store(db) as writer:
                writer.start_workflow("paced_chain", 1, workflow_id="short")
            while reader.get_workflow("short").status != "completed":
                assert time.monotonic() < deadline, "a workflow started while the worker was busy was never run"
                time.sleep(0.01)
            assert reader.get_workflow("long").status == "running"  # it was claimed while the other ran
    finally:
        worker.stop()
        thread.join(timeout=60)
    assert not thread.is_alive()


def test_a_workers_claims_ride_its_group_commits_on_a_file_of_this_host(tmp_path: Path) -> None:
    db = tmp_path / "ride.db"
    with open_store(db) as store:
        ids = [store.start_workflow("doubles", n) for n in range(40)]
    worker = Worker(db, Registry.from_module(sys.modules[__name__]), concurrency=8)
    worker.run(until_idle=True)
    assert worker.completed == 40
    # Its claims were made in the committer's transactions (Committer.claim), not on the loop's connection.
    assert worker.committer.claims_ridden >= 5  # 40 workflows, at most 8 a claim
    with open_store(db, readonly=True) as store:
        assert [store.get_workflow(wid).result for wid in ids] == [2 * n for n in range(40)]
