"""Operator actions on async workflows, on both backends: check dry-replays async code, fork, retry,
export and import, and the console shows and answers an async agent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import async_app
import pytest
from console_helpers import SIZE, async_test, make_app, on_screen, settle, wait_until
from test_console_agents import rendered
from textual.widgets import Input, Static

from conftest import wait_for
from replaylog import Client, Worker, WorkflowFailed
from replaylog.console.approval_dialog import ApprovalDialog
from replaylog.console.workflow_screen import WorkflowScreen
from replaylog.engine.app import load_app
from replaylog.engine.check import check_workflow
from replaylog.engine.errors import OperatorRefusedError
from replaylog.engine.store import open_store
from replaylog.engine.worker import Worker as EngineWorker


@pytest.fixture
def client(db: Path | str) -> Iterator[Client]:
    async_app.CHANGED["on"] = async_app.FAILING["on"] = False
    async_app.CALLS.clear()
    with Client(db, app=async_app) as c:
        yield c
    async_app.CHANGED["on"] = async_app.FAILING["on"] = False


def test_check_dry_replays_async_code_and_names_the_divergence(client: Client, db: Path | str) -> None:
    with Worker(db, app=async_app, focus_cpu=False):
        handle = client.start(async_app.gated)
        assert wait_for(lambda: handle.describe().blocked_on == "go")
        handle.signal("go", 3)
        assert wait_for(lambda: len(handle.history()) == 2 and handle.describe().status == "blocked")
    assert client.registry is not None
    with open_store(db) as store:
        fine = check_workflow(store, client.registry, handle.id)
        async_app.CHANGED["on"] = True
        changed = check_workflow(store, client.registry, handle.id)
    assert fine.ok and fine.replays and fine.replay.replayed == 2
    assert not changed.ok and changed.replay.diagnostic is not None
    assert (changed.replay.diagnostic.slot, changed.replay.diagnostic.issued) == (1, "activity:atriple")
    assert async_app.CALLS == {"adouble": 1}  # the dry replays ran nothing


def test_a_failed_async_workflow_is_refused_a_retry_and_a_fork_runs_the_failed_activity_again(
        client: Client, db: Path | str) -> None:
    async_app.FAILING["on"] = True
    with Worker(db, app=async_app, focus_cpu=False):
        handle = client.start(async_app.checkout, 21)
        with pytest.raises(WorkflowFailed, match="card declined"):
            handle.result(timeout=60)
        with pytest.raises(OperatorRefusedError, match="cannot be retried"):
            handle.retry()  # its dry replay ends in the same recorded failure
        async_app.FAILING["on"] = False
        fork = handle.fork(1)
        assert fork.result(timeout=60) == {"total": 42, "charged": 42}
        copy = client.import_history(fork.export(), id="imported")
        assert copy.describe().status == "completed"
    assert [s.name for s in fork.history()] == ["double", "charge"]
    assert async_app.CALLS == {"double": 1, "charge": 2}  # the fork replayed double, ran charge again


WID = "async-agent-1"


@async_test
async def test_the_console_shows_an_async_agent_and_answers_its_approval(db: Path | str) -> None:
    registry = load_app("replaylog.samples.async_agent")
    with open_store(db) as store:
        store.start_workflow("async_support_agent", "order-2", workflow_id=WID)
    EngineWorker(db, registry, poll=0.002).run(until_idle=True)
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.open_workflow(WID)
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, WorkflowScreen)
        assert "approval: issue_refund (request req-5)" in rendered(screen.query_one("#summary", Static))
        await pilot.press("a")
        assert await wait_until(pilot, lambda: on_screen(app, ApprovalDialog))
        app.screen.query_one("#approval-note", Input).value = "ok"
        await pilot.press("ctrl+y")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, ApprovalDialog))
    EngineWorker(db, registry, poll=0.002).run(until_idle=True)
    with open_store(db, readonly=True) as store:
        row: Any = store.get_workflow(WID)
        assert row.status == "completed" and row.result["receipt"]["refunded"] == 4200
