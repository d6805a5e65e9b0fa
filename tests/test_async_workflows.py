"""`async def` workflows and activities on both backends: the recorded mechanisms, mixing, bad input.

A real store (the `db` fixture: a SQLite file and a PostgreSQL database) and a real worker
in the test's process, as an application embeds them; the determinism checks run in memory.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import async_app
import pytest

from conftest import wait_for
from replaylog import Client, Worker, WorkflowCancelled, WorkflowFailed
from replaylog.engine.core import HOLE, WorkflowState, run, signal


@pytest.fixture
def client(db: Path | str) -> Iterator[Client]:
    with Client(db, app=async_app) as c:
        yield c


@pytest.fixture
def worker(db: Path | str, client: Client) -> Iterator[Worker]:
    with Worker(db, app=async_app, concurrency=8, focus_cpu=False) as w:
        yield w


@pytest.fixture(autouse=True)
def fresh_app() -> Iterator[None]:
    async_app.CALLS.clear()
    async_app.CHANGED["on"] = False
    yield
    async_app.CHANGED["on"] = False


def kinds(client: Client, workflow_id: str) -> list[tuple[str, str]]:
    return [(s.kind, s.name) for s in client.get_handle(workflow_id).history()]


def blocked_on(client: Client, workflow_id: str, name: str) -> bool:
    info = client.get_handle(workflow_id).describe()
    return info.status == "blocked" and info.blocked_on == name


def test_an_async_workflow_awaits_sync_and_async_activities_in_positional_slots(client: Client,
                                                                                worker: Worker) -> None:
    handle = client.start(async_app.pipeline, 5)
    assert handle.result(timeout=60) == 20
    assert kinds(client, handle.id) == [("activity", "double"), ("activity", "adouble")]
    assert async_app.CALLS == {"double": 1, "adouble": 1}


def test_gather_over_ctx_calls_records_its_members_in_issue_order(client: Client, worker: Worker) -> None:
    handle = client.start(async_app.fan, 6)
    assert handle.result(timeout=60) == [2, 0, 2, 6, 6, 12, 10]
    assert kinds(client, handle.id) == [("activity", "double")] + [
        ("activity", "adouble" if i % 2 else "atriple") for i in range(6)]


def test_recorded_now_and_the_signal_cursor_replay_across_runs(client: Client, worker: Worker) -> None:
    handle = client.start(async_app.gated)
    assert wait_for(lambda: blocked_on(client, handle.id, "go"))
    handle.signal("go", 7)
    assert wait_for(lambda: len(handle.history()) == 2 and blocked_on(client, handle.id, "go"))
    handle.signal("go", 8)
    started, first, value, second, later = handle.result(timeout=60)
    history = handle.history()
    assert [(s.kind, s.name) for s in history] == [("now", "now"), ("activity", "adouble"), ("now", "now")]
    assert started == history[0].value  # the recorded clock read, replayed on every later run
    assert (first, value, second, later) == (7, 14, 8, True)
    assert async_app.CALLS == {"adouble": 1}  # replayed twice, run once


def test_a_failed_async_activity_is_recorded_once_and_its_error_replays_without_rerunning(
        client: Client, worker: Worker) -> None:
    handle = client.start(async_app.memo)
    assert wait_for(lambda: blocked_on(client, handle.id, "go"))
    (slot,) = handle.history()
    assert (slot.kind, slot.name, slot.ok, slot.attempts) == ("activity", "afail", False, 2)
    handle.signal("go")
    assert handle.result(timeout=60) == "handled: ValueError: no good: 1"
    assert async_app.CALLS == {"afail": 2}  # its two attempts, in the first run only


def test_changed_async_code_fails_with_the_positioned_diagnostic(client: Client, worker: Worker) -> None:
    handle = client.start(async_app.gated)
    assert wait_for(lambda: blocked_on(client, handle.id, "go"))
    handle.signal("go", 1)
    assert wait_for(lambda: len(handle.history()) == 2 and blocked_on(client, handle.id, "go"))
    async_app.CHANGED["on"] = True
    handle.signal("go", 2)
    with pytest.raises(WorkflowFailed) as failed:
        handle.result(timeout=60)
    assert failed.value.error_kind == "nondeterministic"
    diagnostic = failed.value.diagnostic
    assert diagnostic is not None
    assert (diagnostic.slot, diagnostic.recorded, diagnostic.issued) == (1, "activity:adouble", "activity:atriple")
    assert async_app.CALLS == {"adouble": 1}


def test_cancel_reaches_the_await_and_compensation_is_recorded(client: Client, worker: Worker) -> None:
    handle = client.start(async_app.saga)
    assert wait_for(lambda: blocked_on(client, handle.id, "never"))
    handle.cancel("changed my mind")
    with pytest.raises(WorkflowCancelled, match="changed my mind"):
        handle.result(timeout=60)
    assert kinds(client, handle.id) == [("cancel", "signal:never"), ("activity", "adouble")]


def test_durable_sleep_child_workflow_and_a_sync_workflow_calling_an_async_activity(
        client: Client, worker: Worker) -> None:
    assert client.start(async_app.sleeper, 0.05).result(timeout=60) == "woke"
    parent = client.start(async_app.parent, 2)
    assert parent.result(timeout=60) == 9
    assert kinds(client, parent.id) == [("child", "pipeline")]
    assert client.start(async_app.sync_calls_async, 4).result(timeout=60) == 8


def test_children_started_without_waiting_are_awaited_signalled_and_cancelled_in_the_sync_handles_slots(
        client: Client, worker: Worker) -> None:
    handle = client.start(async_app.spawns)
    assert handle.result(timeout=120) == [42, "woke", 5, "WorkflowCancelled: enough"]
    wid = handle.id
    assert kinds(client, wid) == [
        ("child_start", "anap"), ("child_start", "awaiter"), ("child_start", "anap"), ("activity", "adouble"),
        ("child_signal", "go"), ("child_cancel", f"{wid}.2"),
        ("child_result", f"{wid}.0"), ("child_result", f"{wid}.1"), ("child_result", f"{wid}.2")]
    stopped = client.get_handle(f"{wid}.2").describe()
    assert (stopped.status, stopped.parent) == ("cancelled", wid)


def test_an_async_parents_signal_and_cancel_of_a_finished_child_raise_at_their_await_and_are_recorded(
        client: Client, worker: Worker) -> None:
    handle = client.start(async_app.late_nudge)
    assert handle.result(timeout=120) == ["woke", "completed", "completed"]
    assert kinds(client, handle.id)[-2:] == [("child_signal", "go"), ("child_cancel", f"{handle.id}.0")]
    assert client.get_handle(f"{handle.id}.0").describe().status == "completed"


@pytest.mark.parametrize(("workflow", "message"), [
    (async_app.sleeps_badly, r"called asyncio\.sleep\(1\) \(loop\.call_later\).*use await ctx\.sleep"),
    (async_app.awaits_forever, r"awaited <Future pending.*async_app\.py:\d+ \(in awaits_forever\).*only ctx calls"),
    (async_app.returns_set, r"slot 0: the value activity 'aset' returned is of type set, which JSON cannot hold"),
    (async_app.sync_returning_coroutine,
     r"activity 'returns_coroutine' is a plain function that returned a coroutine.*declare it `async def`"),
])
def test_what_would_break_determinism_fails_the_workflow_naming_it_and_records_nothing(
        client: Client, worker: Worker, workflow: Any, message: str) -> None:
    handle = client.start(workflow)
    with pytest.raises(WorkflowFailed, match=message) as failed:
        handle.result(timeout=60)
    assert failed.value.error_kind == "engine"
    assert handle.history() == []


def _issued(state: WorkflowState) -> list[tuple[str, str]]:
    return [(c.kind, c.name) for c in state.commands]


def test_the_same_async_workflow_records_the_same_slots_whatever_the_latencies(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPLAYLOG_TEST_LATENCY", "0.003")
    seen = set()
    for _ in range(20):
        random.seed()
        result = run(async_app.fan, WorkflowState(input=5), clock=lambda: 0.0)
        assert result.outcome.status == "completed"
        seen.add(tuple(_issued(result.state)))
    assert len(seen) == 1


def test_a_replay_of_a_gather_runs_only_the_members_with_no_outcome() -> None:
    live = run(async_app.fan, WorkflowState(input=3), clock=lambda: 0.0)
    commands = list(live.state.commands)
    # The worker died while the group ran: its second member has no outcome.
    commands[2] = HOLE
    async_app.CALLS.clear()
    again = run(async_app.fan, WorkflowState(input=3, commands=tuple(commands)), clock=lambda: 0.0)
    assert again.outcome.status == "completed" and again.outcome.result == live.outcome.result
    assert async_app.CALLS == {"adouble": 1}


def test_asyncio_gather_taskgroup_and_wait_record_the_same_history_as_ctx_parallel() -> None:
    from replaylog import workflow

    @workflow
    async def with_taskgroup(ctx: Any) -> list[int]:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(ctx.call_activity(async_app.adouble, i)) for i in range(3)]
        return [t.result() for t in tasks]

    @workflow
    async def with_wait(ctx: Any) -> list[int]:
        tasks = [asyncio.ensure_future(ctx.call_activity(async_app.adouble, i)) for i in range(3)]
        await asyncio.wait(tasks)
        return [t.result() for t in tasks]

    @workflow
    async def with_parallel(ctx: Any) -> list[int]:
        return list(await ctx.parallel([ctx.task(async_app.adouble, i) for i in range(3)]))

    runs = [run(wf, WorkflowState(has_input=False), clock=lambda: 0.0) for wf in
            (with_taskgroup, with_wait, with_parallel)]
    assert {tuple(_issued(r.state)) for r in runs} == {(("activity", "adouble"),) * 3}
    assert {tuple(r.outcome.result) for r in runs} == {(0, 2, 4)}


def test_a_signal_wait_blocks_without_a_thread_and_resumes_on_replay() -> None:
    first = run(async_app.gated, WorkflowState(has_input=False), clock=lambda: 5.0)
    assert (first.outcome.status, first.outcome.blocked_on) == ("blocked", "go")
    second = run(async_app.gated, signal(signal(first.state, "go", 1), "go", 2), clock=lambda: 6.0)
    assert second.outcome.result == [5.0, 1, 2, 2, True]


def test_the_test_environment_skips_an_async_workflows_day_long_sleep() -> None:
    from replaylog.testing import WorkflowEnvironment

    with WorkflowEnvironment(app=async_app) as env:
        assert env.client.start(async_app.sleeper, 86400).result(timeout=60) == "woke"
        assert env.client.start(async_app.fan, 2).result(timeout=60) == [2, 0, 2]


def test_children_started_by_a_gather_take_their_slots_in_issue_order_and_a_bad_policy_records_nothing() -> None:
    from replaylog import workflow

    @workflow
    async def starts_two(ctx: Any) -> list[str]:
        first, second = await asyncio.gather(ctx.start_workflow(async_app.anap, 1),
                                             ctx.start_workflow(async_app.awaiter))
        return [first.id, second.id]

    @workflow
    async def bad_policy(ctx: Any) -> None:
        await ctx.start_workflow(async_app.anap, 1, parent_close="explode")

    started = run(starts_two, WorkflowState(has_input=False), clock=lambda: 0.0)
    assert started.outcome.result == ["memory.0", "memory.1"]
    assert _issued(started.state) == [("child_start", "anap"), ("child_start", "awaiter")]
    refused = run(bad_policy, WorkflowState(has_input=False), clock=lambda: 0.0)
    assert refused.outcome.error == ("workflow code raised ValueError: start_workflow(parent_close='explode'): "
                                     "say one of cancel, terminate, abandon")
    assert refused.state.commands == ()
