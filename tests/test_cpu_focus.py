"""CpuFocus: while commits are crowded, workflow threads run engine code on one CPU,
and every activity still runs on every CPU the worker may use.

What a thread may use is read with os.sched_getaffinity(0), which on Linux answers for
the calling thread. Whether focusing is faster is measured in bench/, not here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from replaylog import Context, activity, workflow
from replaylog.engine.app import Registry
from replaylog.engine.store import open_store
from replaylog.engine.worker import Worker

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux thread affinity and at least two CPUs",
)

# The CPUs a workflow thread may use, seen in its activities and in its engine code.
SEEN: dict[str, list[frozenset[int]]] = {"activity": [], "engine": []}


@activity
def where(i: int) -> int:
    """Note the CPUs this activity may run on."""
    SEEN["activity"].append(frozenset(os.sched_getaffinity(0)))
    return i


@workflow
def hops(ctx: Context, n: int) -> int:
    """`n` activities; between them, note the CPUs the engine code runs on."""
    for i in range(n):
        ctx.call_activity(where, i)
        SEEN["engine"].append(frozenset(os.sched_getaffinity(0)))
    return n


def _run(db: Path, workflows: int, *, crowded_at: float | None = None, focus: bool = True) -> Worker:
    SEEN["activity"].clear()
    SEEN["engine"].clear()
    with open_store(db) as store:
        for _ in range(workflows):
            store.start_workflow("hops", 6)
    worker = Worker(db, Registry.from_module(sys.modules[__name__]), focus_cpu=focus)
    if crowded_at is not None and worker.focus is not None:
        worker.focus.crowded_at = crowded_at
    worker.run(until_idle=True)
    assert worker.completed == workflows
    assert len(SEEN["activity"]) == len(SEEN["engine"]) == 6 * workflows
    return worker


def test_crowded_commits_keep_engine_code_on_one_cpu_and_activities_on_all(tmp_path: Path) -> None:
    every = frozenset(os.sched_getaffinity(0))
    # Every commit counts as crowded: the focus must be taken after each activity's
    # outcome and given up before the next activity, in every workflow thread.
    _run(tmp_path / "f.db", 3, crowded_at=0.0)
    engine = set(SEEN["engine"])
    assert len(engine) == 1 and len(next(iter(engine))) == 1 and next(iter(engine)) <= every
    assert set(SEEN["activity"]) == {every}
    assert frozenset(os.sched_getaffinity(0)) == every  # the test's own thread was never moved


def test_a_lone_workflow_is_never_moved(tmp_path: Path) -> None:
    every = frozenset(os.sched_getaffinity(0))
    worker = _run(tmp_path / "l.db", 1)
    assert worker.focus is not None
    assert worker.committer.crowd < worker.focus.crowded_at  # one outcome per commit
    assert set(SEEN["engine"]) == set(SEEN["activity"]) == {every}


def test_no_cpu_focus_never_moves_a_thread(tmp_path: Path) -> None:
    every = frozenset(os.sched_getaffinity(0))
    worker = _run(tmp_path / "n.db", 3, crowded_at=0.0, focus=False)
    assert worker.focus is None
    assert set(SEEN["engine"]) == set(SEEN["activity"]) == {every}


def test_a_worker_on_a_server_store_never_moves_a_thread(pg_url: str) -> None:
    """On PostgreSQL the commits are the server's work: focusing measured a loss (bench), so it is off."""
    every = frozenset(os.sched_getaffinity(0))
    with open_store(pg_url) as store:
        store.start_workflow("hops", 3)
    worker = Worker(pg_url, Registry.from_module(sys.modules[__name__]), focus_cpu=True)
    assert worker.focus is None
    SEEN["engine"].clear()
    SEEN["activity"].clear()
    worker.run(until_idle=True)
    assert len(SEEN["activity"]) == 3
    assert set(SEEN["engine"]) == set(SEEN["activity"]) == {every}
