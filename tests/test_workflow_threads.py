"""Workflow code that starts a thread fails, naming the call; activities and the worker start threads freely.

In memory (the core's runner) for what the guard decides, and with a real worker on both
backends (the `db` fixture) for a worker whose own threads, ctx.parallel's pool and
activities' threads all run beside the refusal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import thread_app

from replaylog import Client, Worker, WorkflowFailed
from replaylog.engine.core import WorkflowState, dry_replay, run

ACTIVITIES = {"threaded": thread_app.threaded, "async_threaded": thread_app.async_threaded}


@pytest.fixture(autouse=True)
def no_fetch_yet() -> Iterator[None]:
    thread_app.FETCHED.clear()
    yield
    thread_app.FETCHED.clear()


def _run(fn: Callable[..., Any]) -> Any:
    return run(fn, WorkflowState(has_input=False), clock=lambda: 0.0, activities=ACTIVITIES).outcome


def test_a_sync_workflow_that_starts_a_thread_fails_naming_the_call_and_pointing_at_activities() -> None:
    outcome = _run(thread_app.starts_thread)
    assert outcome.status == "failed" and outcome.error_kind == "engine"
    error = outcome.error or ""
    assert "\n" not in error and error.startswith("WorkflowThreadError: workflow 'starts_thread' started a thread")
    assert "(Thread.start, target _fetch at thread_app.py:" in error and "(in starts_thread))" in error
    assert "run it in an activity instead (ctx.call_activity, or several at once with ctx.parallel)" in error
    assert thread_app.FETCHED == []  # the thread never started
    assert outcome.executed_commands == 1  # the activity before it, which started threads of its own


def test_catching_the_refusal_does_not_let_the_workflow_go_on() -> None:
    outcome = _run(thread_app.catches_it)
    assert outcome.status == "failed" and "started a thread" in (outcome.error or "")
    assert thread_app.FETCHED == []


def test_a_thread_pool_in_workflow_code_is_refused_naming_the_pools_call() -> None:
    outcome = _run(thread_app.uses_a_pool)
    assert outcome.status == "failed"
    assert "(ThreadPoolExecutor.submit at thread_app.py:" in (outcome.error or "")
    assert thread_app.FETCHED == []


def test_an_async_workflow_that_starts_a_thread_fails_pointing_at_awaited_activities() -> None:
    outcome = _run(thread_app.async_starts_thread)
    assert outcome.status == "failed" and "\n" not in (outcome.error or "")
    assert "workflow 'async_starts_thread' started a thread in its code (Thread.start, target _fetch" in (
        outcome.error or "")
    assert "(await ctx.call_activity, or several at once with asyncio.gather over ctx calls or ctx.parallel)" in (
        outcome.error or "")
    assert thread_app.FETCHED == []


def test_activities_start_threads_from_sync_and_async_workflows() -> None:
    done = _run(thread_app.activities_start_threads)
    assert (done.status, done.result) == ("completed", [2, 4, 6, 8])
    done = _run(thread_app.async_activities_start_threads)
    assert (done.status, done.result) == ("completed", [2, 4, 6])


def test_a_dry_replay_of_code_that_starts_a_thread_says_the_code_fails() -> None:
    recorded = run(thread_app.starts_thread, WorkflowState(has_input=False), clock=lambda: 0.0,
                   activities=ACTIVITIES).state
    verdict = dry_replay(thread_app.starts_thread, recorded)
    assert not verdict.ok and "started a thread" in (verdict.error or "")
    assert thread_app.FETCHED == []


@pytest.fixture
def client(db: Path | str) -> Iterator[Client]:
    with Client(db, app=thread_app) as c:
        yield c


def test_a_worker_fails_the_workflow_that_starts_a_thread_and_runs_threaded_activities(
        client: Client, db: Path | str) -> None:
    with Worker(db, app=thread_app, concurrency=4, focus_cpu=False):
        refused = [client.start(thread_app.starts_thread), client.start(thread_app.async_starts_thread)]
        for handle in refused:
            with pytest.raises(WorkflowFailed, match=r"started a thread in its code \(Thread.start") as failed:
                handle.result(timeout=120)
            assert failed.value.error_kind == "engine" and "\n" not in failed.value.message
        # The same worker goes on: activities' threads, ctx.parallel's pool and its own threads all start.
        assert client.start(thread_app.activities_start_threads).result(timeout=120) == [2, 4, 6, 8]
        assert client.start(thread_app.async_activities_start_threads).result(timeout=120) == [2, 4, 6]
    assert thread_app.FETCHED == []
    assert [s.name for s in refused[0].history()] == ["threaded"]  # recorded before the refusal, kept
