"""The console's schedules screen (pause, resume, trigger) and a continued workflow's runs, under Pilot on
both backends."""

from __future__ import annotations

from pathlib import Path

import continue_app
from console_helpers import SIZE, async_test, make_app, on_screen, settle, wait_until
from test_console_ops import rendered
from textual.widgets import DataTable, Static

from replaylog import Client
from replaylog.console.run_screen import RunScreen
from replaylog.console.schedules_screen import SchedulesScreen
from replaylog.console.workflow_screen import WorkflowScreen
from replaylog.engine.store import open_store
from replaylog.worker import Worker


def _cells(table: DataTable[object], column: str) -> list[str]:
    return [str(table.get_cell_at((row, list(table.columns).index(column))))
            for row in range(table.row_count)]


@async_test
async def test_the_schedules_screen_shows_next_runs_and_pauses_resumes_and_triggers(db: Path | str) -> None:
    with open_store(db) as store:
        store.add_schedule("nightly", "job", "0 2 * * *", timezone="Europe/Paris")
        store.add_schedule("hourly", "job", "0 * * * *")
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("S")
        assert await wait_until(pilot, lambda: on_screen(app, SchedulesScreen))
        screen = app.screen
        await settle(pilot)
        table = screen.query_one(DataTable)
        assert _cells(table, "name") == ["hourly", "nightly"]
        assert all(c.endswith("UTC") for c in _cells(table, "next run (UTC)"))  # each one's next run
        await pilot.press("p")  # the cursor is on "hourly"
        assert await wait_until(pilot, lambda: _cells(table, "next run (UTC)")[0] == "paused")
        with open_store(db) as store:
            assert store.get_schedule("hourly").paused and not store.get_schedule("nightly").paused
        await pilot.press("u")
        assert await wait_until(pilot, lambda: _cells(table, "next run (UTC)")[0] != "paused")
        await pilot.press("t")
        assert await wait_until(pilot, lambda: _cells(table, "last started")[0].startswith("hourly@"))
        with open_store(db) as store:
            started = store.get_schedule("hourly").last_id
            assert started is not None and store.get_workflow(started).workflow == "job"
            assert [a.action for a in store.list_audit("schedule:hourly")] == [
                "schedule add", "schedule pause", "schedule resume", "schedule trigger"]


@async_test
async def test_a_readonly_console_lists_schedules_and_refuses_their_actions(db: Path | str) -> None:
    with open_store(db) as store:
        store.add_schedule("hourly", "job", "0 * * * *")
    app = make_app(db, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("S")
        assert await wait_until(pilot, lambda: on_screen(app, SchedulesScreen))
        await settle(pilot)
        await pilot.press("p", "t")
        await settle(pilot)
    with open_store(db) as store:
        row = store.get_schedule("hourly")
        assert not row.paused and row.last_id is None


@async_test
async def test_the_workflow_screen_names_the_run_and_opens_the_earlier_ones(db: Path | str) -> None:
    app_fns = [continue_app.looper, continue_app.step]
    with Worker(db, app=app_fns, focus_cpu=False), Client(db) as client:
        client.start("looper", {"i": 0, "total": 30, "every": 10}, id="loop").result(timeout=120)
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.open_workflow("loop")
        assert await wait_until(pilot, lambda: on_screen(app, WorkflowScreen))
        await settle(pilot)
        summary = app.screen.query_one("#summary", Static)
        assert await wait_until(pilot, lambda: "3 (continued as new; earlier: 1 (10 slots), 2 (10 slots)"
                                in rendered(summary))
        await pilot.press("R")
        assert await wait_until(pilot, lambda: on_screen(app, RunScreen))
        run_screen = app.screen
        await settle(pilot)
        table = run_screen.query_one(DataTable)
        assert "run 2 of 3" in rendered(run_screen.query_one("#topbar", Static))
        assert _cells(table, "value / error") == [str(i) for i in range(10, 20)]
        await pilot.press("left_square_bracket")
        assert await wait_until(pilot, lambda: "run 1 of 3" in rendered(run_screen.query_one("#topbar", Static)))
        await settle(pilot)
        assert _cells(table, "value / error") == [str(i) for i in range(10)]
