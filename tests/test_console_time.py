"""The console shows time: what a workflow waits on and until when, the countdown, what fires next,
and timer, deadline, uuid, random and patch slots in the slot table; on both backends."""

from __future__ import annotations

import io
from pathlib import Path

import timer_app
from console_helpers import SIZE, async_test, column, make_app, on_screen, settle, wait_until
from textual.widgets import Static

from replaylog.console.paged_table import PagedTable
from replaylog.console.slot_screen import SlotScreen
from replaylog.console.workflow_screen import WorkflowScreen
from replaylog.engine.app import Registry
from replaylog.engine.store import open_store
from replaylog.engine.worker import Worker


def _seed(db: Path | str) -> dict[str, str]:
    with open_store(db) as store:
        ids = {"soon": store.start_workflow("nap", 600, workflow_id="nap-soon"),
               "later": store.start_workflow("nap", 7200, workflow_id="nap-later"),
               "deadline": store.start_workflow("approval", 3 * 86400, workflow_id="approval-3d"),
               "versioned": store.start_workflow("versioned", has_input=False, workflow_id="versioned")}
    Worker(db, Registry.from_module(timer_app), poll=0.002).run(until_idle=True)
    return ids


def _rendered(widget: Static) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


@async_test
async def test_the_list_shows_until_when_with_a_countdown_and_marks_what_fires_next(db: Path | str) -> None:
    _seed(db)
    with open_store(db, readonly=True) as s:
        soon = s.get_workflow("nap-soon").wake_at
    assert soon is not None
    app = make_app(db, clock=lambda: soon - 250)  # 4m 10s before the first timer fires
    async with app.run_test(size=(200, 30)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(PagedTable)
        waits = dict(zip(column(table, "id"), column(table, "blocked_on"), strict=True))
        assert waits["nap-soon"].startswith("▸ timer until ") and waits["nap-soon"].endswith(" · in 4m 10s")
        assert waits["nap-later"].startswith("timer until ") and "· in 1h 54m" in waits["nap-later"]
        deadline = waits["approval-3d"]
        assert deadline.startswith("approval (until ") and deadline.endswith(" UTC) · in 2d 23h")
        assert waits["versioned"] == ""


@async_test
async def test_a_wide_list_shows_what_a_workflow_waits_on_whole_and_a_pending_one_without_a_worker_says_so(
        db: Path | str) -> None:
    _seed(db)
    with open_store(db) as store:
        store.start_workflow("nap", 5, workflow_id="nap-unserved")  # no worker runs now
    app = make_app(db)
    async with app.run_test(size=(200, 30)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(PagedTable)
        waits = dict(zip(column(table, "id"), column(table, "blocked_on"), strict=True))
        assert waits["nap-unserved"] == "no worker running"
        # Drawn whole, not cut with "…" while the error column takes the rest of the width.
        drawn = [table.render_line(y).text for y in range(1, table.row_count + 1)]
        (line,) = [line for line in drawn if "approval-3d" in line]
        assert waits["approval-3d"] in line and "…" not in line


@async_test
async def test_the_workflow_screen_counts_down_and_shows_time_and_random_slots_readably(db: Path | str) -> None:
    _seed(db)
    with open_store(db, readonly=True) as s:
        soon = s.get_workflow("nap-soon").wake_at
        record = s.list_commands("versioned")
    assert soon is not None
    now = [soon - 90.0]
    app = make_app(db, clock=lambda: now[0])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.open_workflow("nap-soon")
        await settle(pilot)
        summary = app.screen.query_one("#summary", Static)
        assert "on timer until " in _rendered(summary) and "· in 1m 30s" in _rendered(summary)
        now[0] = soon - 30.0  # the countdown ticks on screen, with nothing new in the database
        assert await wait_until(pilot, lambda: "· in 30s" in _rendered(summary))

        app.pop_screen()
        app.open_workflow("versioned")
        await settle(pilot)
        assert isinstance(app.screen, WorkflowScreen)
        slots = app.screen.query_one("#slot-table", PagedTable)
        assert column(slots, "kind") == ["uuid", "random", "timer", "patch"]
        values = column(slots, "value")
        assert values[0] == record[0].value and values[1] == str(record[1].value)
        assert values[2].endswith("UTC  (wake time)")
        assert values[3] == "marker: runs the patched code"
        slots.move_cursor(row=2)
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: on_screen(app, SlotScreen))
        facts = _rendered(app.screen.query(Static)[1])
        assert "wake time" in facts and "UTC" in facts.split("wake time", 1)[1]


@async_test
async def test_the_signal_dialog_offers_no_name_for_a_sleeping_workflow_and_the_wait_for_a_waiting_one(
        db: Path | str) -> None:
    from textual.widgets import Input

    from replaylog.console.signal_dialog import SignalDialog

    _seed(db)
    app = make_app(db)
    async with app.run_test(size=(200, 30)) as pilot:
        await settle(pilot)
        for wid, offered in (("nap-soon", ""), ("approval-3d", "approval")):
            table = app.screen.query_one(PagedTable)
            table.move_cursor(row=column(table, "id").index(wid))
            await pilot.press("s")
            assert await wait_until(pilot, lambda: on_screen(app, SignalDialog))
            assert app.screen.query_one("#signal-name", Input).value == offered
            await pilot.press("escape")
            assert await wait_until(pilot, lambda: not isinstance(app.screen, SignalDialog))


@async_test
async def test_the_ticking_countdown_never_draws_the_last_page_over_a_read_failure(db_path: Path) -> None:
    # SQLite's alone: the failure is the file (and its WAL) deleted under the console; a server's
    # database cannot vanish so, and a lost connection is retried (test_postgres covers that).
    import asyncio

    _seed(db_path)
    app = make_app(db_path, readonly=True, poll_interval=0.05)
    async with app.run_test(size=(200, 30)) as pilot:
        await settle(pilot)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db_path}{suffix}").unlink(missing_ok=True)
        assert await wait_until(pilot, lambda: app.database_problem is not None)
        await pilot.press("0")  # the list reads again, and fails
        await settle(pilot)
        info = app.screen.query_one("#pageinfo", Static)
        assert "no database at" in _rendered(info)
        await asyncio.sleep(2.5)  # two ticks of the countdown
        await pilot.pause()
        assert "no database at" in _rendered(info)


@async_test
async def test_a_tick_while_the_previous_page_loads_keeps_the_cursor_for_that_page(db: Path | str) -> None:
    from replaylog.console.data import WORKFLOW_PAGE
    from replaylog.console.workflows_screen import WorkflowsScreen

    with open_store(db) as store:
        for i in range(WORKFLOW_PAGE + 20):
            store.start_workflow("nap", 1, workflow_id=f"wf-{i:04d}")
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("o")  # by id, ascending
        await settle(pilot)
        table = app.screen.query_one(PagedTable)
        table.move_cursor(row=WORKFLOW_PAGE - 1)
        await pilot.press("j")  # the next page
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, WorkflowsScreen)
        screen.action_page(-1)  # back a page: the cursor is to land on its last row
        screen._redraw_ages()  # the countdown ticks before that page is in
        await settle(pilot)
        assert column(table, "id")[-1] == f"wf-{WORKFLOW_PAGE - 1:04d}"
        assert table.cursor_row == WORKFLOW_PAGE - 1
