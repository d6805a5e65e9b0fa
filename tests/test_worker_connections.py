"""A pooled workflow thread opens its own store connection at its first use, not at its first run.

Connections are counted as the process's open file descriptors on the database file (SQLite
opens the file once per connection), from inside the activities the worker runs.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from replaylog import Context, activity, current_activity, workflow
from replaylog.engine.app import Registry
from replaylog.engine.store import open_store
from replaylog.engine.worker import Worker

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts file descriptors in /proc")

DB: list[Path] = []
# (thread, connections on the database) in each plain activity; (before, after) around a first heartbeat.
SEEN: list[tuple[int, int]] = []
BEATS: list[tuple[int, int]] = []


def _connections() -> int:
    """How many descriptors this process holds on the database file (one per SQLite connection)."""
    target = os.path.realpath(DB[0])
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                count += 1
        except OSError:  # closed meanwhile
            pass
    return count


@activity
def look(i: int) -> int:
    """Note this thread and the connections open now."""
    SEEN.append((threading.get_ident(), _connections()))
    return i


@activity
def beat(i: int) -> int:
    """A heartbeat: written through the workflow thread's own connection."""
    before = _connections()
    current_activity().heartbeat({"i": i})
    BEATS.append((before, _connections()))
    return i


@workflow
def plain(ctx: Context, n: int) -> int:
    """`n` activities that use nothing but the committer."""
    for i in range(n):
        ctx.call_activity(look, i)
    return n


@workflow
def beating(ctx: Context, n: int) -> int:
    """One activity that heartbeats."""
    return int(ctx.call_activity(beat, n))


def _worker(db: Path, workflow_name: str, count: int, concurrency: int) -> Worker:
    DB[:] = [db]
    with open_store(db) as store:
        for _ in range(count):
            store.start_workflow(workflow_name, 3)
    worker = Worker(db, Registry.from_module(sys.modules[__name__]), concurrency=concurrency, focus_cpu=False)
    worker.run(until_idle=True)
    assert worker.completed == count
    return worker


def test_runs_that_need_no_connection_of_their_own_open_none(tmp_path: Path) -> None:
    SEEN.clear()
    _worker(tmp_path / "p.db", "plain", 12, 6)
    threads = {thread for thread, _ in SEEN}
    # Several pooled threads ran, and the connections stayed the worker's loop's and its
    # committer's (each thread opening its own made it two plus one a thread).
    assert len(SEEN) == 36 and len(threads) >= 2
    assert max(count for _, count in SEEN) <= 2


def test_a_run_that_needs_its_threads_connection_opens_it_then(tmp_path: Path) -> None:
    BEATS.clear()
    _worker(tmp_path / "b.db", "beating", 1, 2)
    ((before, after),) = BEATS
    assert after == before + 1  # the heartbeat opened the thread's connection, and was written through it
