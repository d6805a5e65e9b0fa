"""The operator console, driven by Pilot over a real seeded SQLite file (no store mocks)."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from console_helpers import SIZE, async_test, column, make_app, on_screen, settle, wait_until
from console_seed import ROLES, copy_db, frozen_time, seed_long_history
from textual import events
from textual.command import CommandList
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Static, TextArea
from textual.widgets.data_table import ColumnKey

from conftest import run_cli, start_worker
from replaylog.console.app import ReplaylogConsole
from replaylog.console.data import (
    SIGNAL_PAGE,
    SLOT_PAGE,
    WORKFLOW_PAGE,
    WRITE_ACTIONS,
    SignalRefused,
    WorkflowsQuery,
    fetch_workflows,
)
from replaylog.console.diagnosis_view import DiagnosisView
from replaylog.console.help_screen import HelpScreen
from replaylog.console.paged_table import PagedTable
from replaylog.console.signal_dialog import SignalDialog
from replaylog.console.slot_screen import SlotScreen
from replaylog.console.workflow_screen import WorkflowScreen
from replaylog.console.workflows_screen import WorkflowsScreen
from replaylog.engine.app import load_app
from replaylog.engine.core import CommandRecord
from replaylog.engine.marks import MarkBoard
from replaylog.engine.store import PendingRecord, open_store

ROOT = Path(__file__).resolve().parent.parent


def header(table: DataTable[Any], key: str) -> str:
    """A column's label, as plain text."""
    return table.columns[ColumnKey(key)].label.plain


def header_line(table: DataTable[Any]) -> str:
    """The table's header row as drawn on screen."""
    return table.render_line(0).text


def rendered(widget: Static) -> str:
    """What a Static shows, as plain text."""
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


def ids(app: ReplaylogConsole) -> list[str]:
    return column(app.screen.query_one(PagedTable), "id")


# ------------------------------------------------------------------ the list


@async_test
async def test_list_shows_every_workflow_with_status_counts(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(PagedTable)
        assert sorted(column(table, "id")) == sorted(ROLES.values())
        statuses = dict(zip(column(table, "id"), column(table, "status"), strict=True))
        assert statuses[ROLES["blocked"]] == "blocked"
        assert statuses[ROLES["completed"]] == "completed"
        assert column(table, "updated")[0] == "42s ago"  # the injected clock, not the wall clock
        counts = rendered(app.screen.query_one("#counts", Static))
        assert "blocked 1" in counts and "failed 4" in counts and "completed 1" in counts


@async_test
async def test_the_first_page_is_drawn_before_the_status_counts_are_in(console_db: Path) -> None:
    # What the first paint shows: the rows of the page, the counts marked as still coming.
    with open_store(console_db, readonly=True) as store:
        quick = fetch_workflows(store, WorkflowsQuery(), count=False)
    assert quick.total == -1 and quick.counts == {} and len(quick.rows) == len(ROLES)
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, WorkflowsScreen)
        screen.page = quick
        screen._redraw()  # as the partial page is drawn, before the counted one replaces it
        await pilot.pause()
        counts = rendered(screen.query_one("#counts", Static))
        assert "counting…" in counts and "blocked …" in counts
        assert f"1–{len(ROLES)} of …" in rendered(screen.query_one("#pageinfo", Static))
        assert sorted(column(screen.query_one(PagedTable), "id")) == sorted(ROLES.values())
        screen.reload()  # and the counts come in
        await settle(pilot)
        counts = rendered(screen.query_one("#counts", Static))
        assert "counting" not in counts and "blocked 1" in counts


@async_test
async def test_slash_filters_by_id_or_name_and_esc_clears(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("slash", *"refund")
        await settle(pilot)
        assert sorted(ids(app)) == ["refund-12", "refund-7", "refund-v1-8"]
        await pilot.press("enter", "escape")
        await settle(pilot)
        assert len(ids(app)) == len(ROLES)
        assert not app.screen.query_one("#filter", Input).display


@async_test
async def test_status_keys_filter_and_sort_keys_order(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("5")  # failed
        await settle(pilot)
        assert sorted(ids(app)) == sorted([ROLES["nondeterministic"], ROLES["activity_failure"], ROLES["markup"],
                                           ROLES["diverged"]])
        await pilot.press("0", "o")  # all, then sort by the column after "updated": id, ascending first
        await settle(pilot)
        assert ids(app) == sorted(ROLES.values())
        assert "sorted by id ▲" in rendered(app.screen.query_one("#pageinfo", Static))
        await pilot.press("r")
        await settle(pilot)
        assert ids(app) == sorted(ROLES.values(), reverse=True)
        await pilot.press("o")  # the next column starts ascending too, whatever the last direction
        await settle(pilot)
        assert app.screen.query_state.sort == "workflow" and not app.screen.query_state.descending


@async_test
async def test_enter_right_after_a_status_key_opens_from_the_new_list(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert ids(app)[0] != ROLES["blocked"]
        screen = app.screen
        # "3" then enter, typed faster than the page is read: enter must not act on the old page.
        screen.action_status("blocked")
        screen.query_one(PagedTable).action_select_cursor()
        await settle(pilot)
        assert isinstance(app.screen, WorkflowScreen)
        assert app.screen.workflow_id == ROLES["blocked"]  # the only blocked workflow


@async_test
async def test_clicking_a_header_sorts_by_that_column(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(PagedTable)
        table.post_message(DataTable.HeaderSelected(table, table.columns[next(iter(table.columns))].key, 0,
                                                    table.columns[next(iter(table.columns))].label))
        await settle(pilot)
        assert app.screen.query_state.sort == "id"
        assert ids(app) == sorted(ROLES.values())  # a new column sorts ascending first, as `o` does


@async_test
async def test_a_failed_workflows_error_shows_in_the_list_as_one_line_of_text(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(PagedTable)
        errors = dict(zip(ids(app), column(table, "error"), strict=True))
        assert errors[ROLES["completed"]] == errors[ROLES["blocked"]] == ""
        assert errors[ROLES["activity_failure"]].startswith("ActivityError: activity 'carrier_down' failed at slot 0")
        assert errors[ROLES["activity_failure"]].endswith("RuntimeError: carrier API returned 503 for A-9")
        # Stored text, never markup: the error's brackets and escape codes show as they are.
        assert "[/bold][red]not markup\\x1b[31m" in errors[ROLES["markup"]]
        row = ids(app).index(ROLES["activity_failure"])
        assert "ActivityError: activity 'carrier_down' failed at slot 0 after 2 attempt(s)" in table.render_line(
            row + 1).text
        # The error column takes the room a wide terminal has; on 80 columns it is cut with `…`.
        assert fits(table) and table.columns[ColumnKey("error")].width > 60
        await pilot.resize_terminal(80, 24)
        await settle(pilot)
        assert fits(table) and table.columns[ColumnKey("error")].width < 20
        assert table.render_line(ids(app).index(ROLES["activity_failure"]) + 1).text.rstrip().endswith("…")


@async_test
async def test_list_pages_in_sql_and_walks_past_the_page_edge(db_path: Path) -> None:
    with open_store(db_path) as store:
        for i in range(WORKFLOW_PAGE + 20):
            store.start_workflow("refund", i, workflow_id=f"wf-{i:04d}")
    app = make_app(db_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("o")  # by id, ascending
        await settle(pilot)
        table = app.screen.query_one(PagedTable)
        assert table.row_count == WORKFLOW_PAGE  # one page, never every row
        table.move_cursor(row=WORKFLOW_PAGE - 1)
        await pilot.press("j")  # past the last row: the next page
        await settle(pilot)
        assert ids(app)[0] == f"wf-{WORKFLOW_PAGE:04d}" and table.row_count == 20
        await pilot.press("k")  # above the first row: back again, cursor on the last row
        await settle(pilot)
        assert ids(app)[-1] == f"wf-{WORKFLOW_PAGE - 1:04d}" and table.cursor_row == WORKFLOW_PAGE - 1


# ------------------------------------------------------------------ one workflow


async def open_workflow(pilot: Pilot[None], workflow_id: str) -> WorkflowScreen:
    app = pilot.app
    await settle(pilot)
    table = app.screen.query_one(PagedTable)  # every seeded workflow fits on the first page
    table.move_cursor(row=column(table, "id").index(workflow_id))
    await pilot.press("enter")
    await settle(pilot)
    assert isinstance(app.screen, WorkflowScreen)
    return app.screen


@async_test
async def test_enter_opens_a_workflow_with_slots_and_signals(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_workflow(pilot, ROLES["completed"])
        summary = rendered(screen.query_one("#summary", Static))
        assert "completed" in summary and '"status": "refunded"' in summary
        slots = screen.query_one("#slot-table", PagedTable)
        assert column(slots, "name") == ["fetch_invoice", "now", "charge_card"]
        assert column(slots, "ok") == ["ok", "ok", "ok"]
        signals = screen.query_one("#signal-table", DataTable)
        assert column(signals, "name") == ["approval"] and column(signals, "state") == ["consumed"]
        await pilot.press("escape")
        assert not isinstance(app.screen, WorkflowScreen)


@async_test
async def test_enter_on_a_slot_shows_its_value_as_pretty_json(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_workflow(pilot, ROLES["completed"])
        screen.query_one("#slot-table", PagedTable).move_cursor(row=2)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, SlotScreen)
        body = app.screen.query_one("#slot-value Static", Static)
        shown = rendered(body)
        assert '"charged": -700' in shown and '"idempotency_key": "refund-7:2"' in shown
        assert '{\n  "charged"' in shown  # pretty-printed, not one line
        await pilot.press("escape")
        assert isinstance(app.screen, WorkflowScreen)


@async_test
async def test_a_failed_slot_and_the_failed_workflow_show_their_tracebacks(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_workflow(pilot, ROLES["activity_failure"])  # it opens on the diagnosis
        await pilot.press("1")  # the slots
        screen.query_one("#slot-table", PagedTable).move_cursor(row=0)
        await pilot.press("enter")  # slot 0, the activity that failed
        assert await wait_until(pilot, lambda: on_screen(app, SlotScreen))
        shown = rendered(app.screen.query_one("#slot-value Static", Static))
        assert 'traceback\nTraceback (most recent call last):\n  File "tests/console_workflows.py", line' in shown
        assert "in carrier_down" in shown and "replaylog/engine" not in shown
        await pilot.press("escape")
        await pilot.press("v")  # the workflow's error in full, and where in its code it surfaced
        shown = rendered(app.screen.query_one("#slot-value Static", Static))
        assert "traceback\nTraceback (most recent call last):" in shown and "in failing_shipment" in shown


@async_test
async def test_a_50000_slot_history_opens_one_page_at_a_time(db_path: Path) -> None:
    seed_long_history(db_path, "long-1", 50_000)
    seed_long_history(db_path, "short-1", 1)
    app = make_app(db_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)

        # Structure, not seconds (test machines are noisy; bench/ times it): opening a
        # 50,000-slot history reads one page of it, the same as a 1-slot history.
        app.open_workflow("short-1")
        await settle(pilot)
        assert app.screen.query_one("#slot-table", PagedTable).row_count == 1
        await pilot.press("escape")
        app.open_workflow("long-1")
        await settle(pilot)
        slots = app.screen.query_one("#slot-table", PagedTable)
        assert slots.row_count == SLOT_PAGE  # one page of the history, never all of it
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert column(slots, "slot")[0] == str(SLOT_PAGE)


@async_test
async def test_a_cursor_on_the_last_slot_follows_a_running_workflow(db_path: Path) -> None:
    with open_store(db_path) as store:
        store.start_workflow("report", 10, workflow_id="report-1")
        (claim,) = store.claim("worker-under-test", ttl=600)

        def record(slot: int) -> None:
            store.commit_batch([PendingRecord(claim, slot, CommandRecord("activity", "crunch", True, slot))], ttl=600)

        for slot in range(SLOT_PAGE - 2):
            record(slot)
        app = make_app(db_path, poll_interval=0.05)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            app.open_workflow("report-1")
            await settle(pilot)
            slots = app.screen.query_one("#slot-table", PagedTable)
            await pilot.press("end")
            assert slots.cursor_row == SLOT_PAGE - 3
            record(SLOT_PAGE - 2)
            assert await wait_until(pilot, lambda: slots.row_count == SLOT_PAGE - 1)
            assert slots.cursor_row == SLOT_PAGE - 2  # still on the last slot, the new one
            for slot in range(SLOT_PAGE - 1, SLOT_PAGE + 2):  # past the end of the page
                record(slot)
            assert await wait_until(pilot, lambda: column(slots, "slot")[-1:] == [str(SLOT_PAGE + 1)])
            await settle(pilot)
            assert slots.cursor_row == slots.row_count - 1


@async_test
async def test_the_value_column_takes_the_width_there_is_and_follows_a_resize(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=(200, 40)) as pilot:
        screen = await open_workflow(pilot, ROLES["completed"])
        slots = screen.query_one("#slot-table", PagedTable)
        receipt = '{"charged": -700, "idempotency_key": "refund-7:2"}'
        assert column(slots, "value")[2] == receipt  # the whole value: the column cuts, not the preview
        assert receipt in slots.render_line(3).text
        assert fits(slots) and slots.columns[ColumnKey("value")].width > 100
        # The columns fill the table's width: nothing left empty on the right.
        used = sum(c.get_render_width(slots) for c in slots.columns.values())
        assert used >= slots.scrollable_content_region.width - slots.styles.scrollbar_size_vertical
        await pilot.resize_terminal(100, 30)
        await settle(pilot)
        assert fits(slots) and 20 < slots.columns[ColumnKey("value")].width < 60
        await pilot.resize_terminal(200, 40)
        await settle(pilot)
        assert slots.columns[ColumnKey("value")].width > 100


@async_test
async def test_a_cut_column_header_ends_in_an_ellipsis(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        line = header_line(app.screen.query_one(PagedTable))
        assert "blocke…" in line  # "blocked on" in a 7-cell column
        screen = await open_workflow(pilot, ROLES["completed"])
        slots = screen.query_one("#slot-table", PagedTable)
        for key in ("attempts", "value"):
            col = slots.columns[ColumnKey(key)]
            label = col.label.plain
            if col.width < len(label):
                assert label[: col.width - 1] + "…" in header_line(slots)
        assert "…" in header_line(slots)


@async_test
async def test_v_shows_the_input_result_and_error_in_full_as_text(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await open_workflow(pilot, ROLES["completed"])
        await pilot.press("v")
        assert isinstance(app.screen, SlotScreen)
        shown = rendered(app.screen.query_one("#slot-value Static", Static))
        assert '"status": "refunded"' in shown and "input\n7" in shown
        await pilot.press("escape", "escape")
        await open_workflow(pilot, ROLES["markup"])
        await pilot.press("v")
        shown = rendered(app.screen.query_one("#slot-value Static", Static))
        assert "[/bold][red]not markup\\x1b[31m" in shown  # literally, escape code made visible


@async_test
async def test_an_activity_started_without_an_outcome_is_marked_possibly_ran(db_path: Path) -> None:
    with frozen_time(), open_store(db_path) as store:
        store.start_workflow("refund", 7, workflow_id="crashed-1")
        # A worker whose pid cannot exist (above Linux's pid_max) left its mark file behind.
        (claim,) = store.claim("otherhost:4194999:deadbeef", ttl=1)  # the lease lapses long before the console looks
        store.commit_batch([PendingRecord(claim, 0, CommandRecord("activity", "fetch_invoice", True, 700))], ttl=1)
        board = MarkBoard(db_path, claim.owner, 4)
        board.write(2, claim.id, claim.epoch, 1, "charge_card", 2, time.time())  # its second attempt started
        board.close(remove=False)
    app = make_app(db_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.open_workflow("crashed-1")
        await settle(pilot)
        summary = rendered(app.screen.query_one("#summary", Static))
        assert "slot 1: activity charge_card started 2 time(s), no recorded outcome — possibly ran" in summary
        slots = app.screen.query_one("#slot-table", PagedTable)
        assert column(slots, "ok") == ["ok", "in flight"]
        assert column(slots, "attempts")[-1] == "2"


@async_test
async def test_every_task_of_a_parallel_group_in_flight_is_listed_with_its_own_attempts(db_path: Path) -> None:
    with frozen_time(), open_store(db_path) as store:
        store.start_workflow("refund", 7, workflow_id="crashed-group")
        (claim,) = store.claim("otherhost:4194998:deadbeef", ttl=1)  # a worker that cannot be alive
        store.commit_batch([PendingRecord(claim, 0, CommandRecord("activity", "fetch_invoice", True, 700))], ttl=1)
        # Its parallel group's two tasks (slots 1 and 2, lanes 1 and 2) were running, each in a record of its own.
        board = MarkBoard(db_path, claim.owner, 4)
        board.write(2, claim.id, claim.epoch, 1, "charge_card", 3, time.time(), lane=1)
        board.write(3, claim.id, claim.epoch, 2, "notify", 1, time.time(), lane=2)
        board.close(remove=False)
    app = make_app(db_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.open_workflow("crashed-group")
        await settle(pilot)
        summary = rendered(app.screen.query_one("#summary", Static))
        assert "slot 1: activity charge_card started 3 time(s), no recorded outcome — possibly ran" in summary
        assert "slot 2: activity notify started 1 time(s), no recorded outcome — possibly ran" in summary
        slots = app.screen.query_one("#slot-table", PagedTable)
        assert column(slots, "ok") == ["ok", "in flight", "in flight"]
        assert column(slots, "attempts") == ["1", "3", "1"]


@async_test
async def test_the_last_worker_error_shows_with_when_the_workflow_runs_again(db_path: Path) -> None:
    # A run stopped by an error that is no outcome (here a KeyboardInterrupt) hands the
    # workflow back: the screen says why it is pending again and when a worker takes it.
    with frozen_time(), open_store(db_path) as store:
        store.start_workflow("refund", 7, workflow_id="interrupted-1")
        (claim,) = store.claim("otherhost:4194997:feedbeef", ttl=30)
        assert store.hand_back(claim, "KeyboardInterrupt: [bold]stop[/bold]", backoff=30, backoff_max=60) == 30
    app = make_app(db_path)
    async with app.run_test(size=SIZE) as pilot:
        summary = rendered((await open_workflow(pilot, "interrupted-1")).query_one("#summary", Static))
        # 2026-01-01 00:00:00 UTC (the frozen time) plus the 30 s back-off; stored text, never markup.
        assert "worker error  KeyboardInterrupt: [bold]stop[/bold] — runs again from 00:00:30 UTC" in summary


@async_test
async def test_running_now_turns_into_possibly_ran_when_the_lease_lapses_with_nothing_committed(
        db_path: Path) -> None:
    # A worker that dies commits nothing more: the screen itself must notice that its lease
    # ran out, or "running now" stays up over an activity that possibly ran.
    with open_store(db_path) as store:
        store.start_workflow("refund", 7, workflow_id="dies-1")
        claimed_at = time.time()
        (claim,) = store.claim("otherhost:4194998:0badf00d", ttl=2)
        board = MarkBoard(db_path, claim.owner, 1)
        board.write(0, claim.id, claim.epoch, 0, "fetch_invoice", 1, time.time())
        board.close(remove=False)
    # The console's clock stands at the claim until the screen has shown the live lease,
    # however long a loaded machine takes to open it; then it runs, past the lease.
    lapsed = False
    app = make_app(db_path, clock=lambda: time.time() + 10 if lapsed else claimed_at)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.open_workflow("dies-1")
        await settle(pilot)

        def summary() -> str:
            return rendered(app.screen.query_one("#summary", Static))

        assert "slot 0: activity fetch_invoice is running now (attempt 1)" in summary()
        lapsed = True  # no write from here on: the screen's own timer must notice the lapse
        assert await wait_until(pilot, lambda: "possibly ran" in summary(), timeout=120), summary()
        assert "slot 0: activity fetch_invoice started 1 time(s), no recorded outcome" in summary()


@async_test
async def test_a_workflow_with_many_signals_shows_the_latest_page_and_pages_back(console_db: Path) -> None:
    with open_store(console_db) as store:
        for i in range(SIGNAL_PAGE + 50):
            store.send_signal(ROLES["blocked"], "tick", i)
        assert store.count_signals(ROLES["blocked"]) == (SIGNAL_PAGE + 51, SIGNAL_PAGE + 51)
    total = SIGNAL_PAGE + 51  # the seeded "[/bold]note" is signal 1, tick i is signal i + 2
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.open_workflow(ROLES["blocked"])
        await settle(pilot)
        await pilot.press("2")
        signals = app.screen.query_one("#signal-table", PagedTable)
        info = app.screen.query_one("#signal-info", Static)
        assert signals.row_count == SIGNAL_PAGE
        assert column(signals, "payload")[-1] == str(SIGNAL_PAGE + 49)  # the newest is last
        assert f"signals 52–{total} of {total} (the latest)" in rendered(info)
        assert f"{total} signal(s), {total} waiting" in rendered(app.screen.query_one("#summary", Static))

        await pilot.press("left_square_bracket")  # the page before: the oldest signals
        await settle(pilot)
        assert column(signals, "seq")[0] == "1" and signals.row_count == SIGNAL_PAGE
        assert column(signals, "name")[0] == "[/bold]note"
        assert f"signals 1–{SIGNAL_PAGE} of {total}" in rendered(info) and "latest" not in rendered(info)

        signals.move_cursor(row=SIGNAL_PAGE - 1)
        await pilot.press("j")  # past the last row: the next page, on the next signal
        await settle(pilot)
        assert column(signals, "seq")[-1] == str(total)
        assert signals.get_row_at(signals.cursor_row)[0].plain == str(SIGNAL_PAGE + 1)

        # On the latest page the table follows new signals as they arrive.
        with open_store(console_db) as store:
            store.send_signal(ROLES["blocked"], "tick", "newest")
        assert await wait_until(pilot, lambda: column(signals, "payload")[-1] == "newest")


# ------------------------------------------------------------------ signals


async def open_dialog(pilot: Pilot[None], workflow_id: str) -> SignalDialog:
    await open_workflow(pilot, workflow_id)
    await pilot.press("s")
    await pilot.pause()
    assert isinstance(pilot.app.screen, SignalDialog)
    return pilot.app.screen


@async_test
async def test_sending_a_valid_signal_writes_through_the_store_and_shows_the_new_state(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(pilot, ROLES["blocked"])
        assert dialog.query_one("#signal-name", Input).value == "approval"  # what it is blocked on
        dialog.query_one("#payload", TextArea).text = '{"approved": true, "by": "test"}'
        await pilot.press("ctrl+s")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, SignalDialog))
        with open_store(console_db, readonly=True) as store:
            sig = store.list_signals(ROLES["blocked"])[-1]
            assert (sig.name, sig.payload) == ("approval", {"approved": True, "by": "test"})
            assert store.get_workflow(ROLES["blocked"]).status == "pending"
        screen = app.screen
        assert await wait_until(pilot, lambda: "pending" in rendered(screen.query_one("#summary", Static)), 2.0)


@pytest.mark.parametrize(("field", "typed", "reason"), [
    ("#payload", '{"approved": tru', "not JSON: Expecting value at line 1"),
    ("#signal-name", "timer", "the signal name 'timer' is reserved for durable timers"),
])
@async_test
async def test_invalid_json_or_a_reserved_name_is_refused_with_the_reason_as_you_type_and_nothing_is_sent(
        console_db: Path, field: str, typed: str, reason: str) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(pilot, ROLES["blocked"])
        if field == "#payload":
            dialog.query_one(field, TextArea).text = typed
        else:
            dialog.query_one(field, Input).value = typed
        await pilot.pause()
        assert reason in rendered(dialog.query_one("#validation", Static))
        assert dialog.query_one("#send").disabled
        await pilot.press("ctrl+s")
        await pilot.pause(0.2)
        assert isinstance(app.screen, SignalDialog)
        with open_store(console_db, readonly=True) as store:
            assert [s.name for s in store.list_signals(ROLES["blocked"])] == ["[/bold]note"]


@async_test
async def test_esc_in_the_payload_editor_cancels_without_sending(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(pilot, ROLES["blocked"])
        await pilot.press("tab")
        assert dialog.query_one("#payload", TextArea).has_focus
        await pilot.press("escape")
        assert isinstance(app.screen, WorkflowScreen)
        await pilot.press("enter")  # an enter after it opens the slot under the cursor, and sends nothing
        await settle(pilot)
        with open_store(console_db, readonly=True) as store:
            assert [s.name for s in store.list_signals(ROLES["blocked"])] == ["[/bold]note"]


@async_test
async def test_the_signal_dialog_starts_in_the_name_offers_no_payload_and_tab_goes_name_payload_send(
        console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(pilot, ROLES["blocked"])
        name, payload = dialog.query_one("#signal-name", Input), dialog.query_one("#payload", TextArea)
        assert name.has_focus and name.value == "approval" and payload.text == ""
        # Nothing pre-filled to send: one ctrl+s sends no approval the operator did not type.
        assert dialog.query_one("#send").disabled
        assert "type the payload" in rendered(dialog.query_one("#validation", Static))
        await pilot.press("ctrl+s")
        await pilot.pause(0.2)
        assert isinstance(app.screen, SignalDialog)
        await pilot.press("tab")
        assert payload.has_focus
        await pilot.press(*"null", "tab")
        assert app.focused is dialog.query_one("#send")
        with open_store(console_db, readonly=True) as store:
            assert [s.name for s in store.list_signals(ROLES["blocked"])] == ["[/bold]note"]
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, SignalDialog))
        with open_store(console_db, readonly=True) as store:
            assert [(s.name, s.payload) for s in store.list_signals(ROLES["blocked"])][-1] == ("approval", None)


def type_at_once(app: ReplaylogConsole, *keys: tuple[str, str | None]) -> None:
    """Hand the app several keys in one read, as a terminal or a served session delivers a burst.

    Pilot's `press` waits until each key is handled before the next; a person typing over a
    slow link (or a quick typist) does not.
    """
    assert app._driver is not None
    for key, character in keys:
        app._driver.send_message(events.Key(key, character))


@pytest.mark.parametrize("next_field", [("tab", "\t"), ("enter", "\r")], ids=["tab", "enter"])
@async_test
async def test_keys_typed_at_once_after_the_name_land_in_the_payload_and_ctrl_s_sends_them(
        console_db: Path, next_field: tuple[str, str]) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(pilot, ROLES["blocked"])
        name, payload = dialog.query_one("#signal-name", Input), dialog.query_one("#payload", TextArea)
        name.value = ""
        await pilot.pause()
        type_at_once(app, *[(c, c) for c in "nudge"], next_field, *[(c, c) for c in "null"], ("ctrl+s", "\x13"))
        assert await wait_until(pilot, lambda: not isinstance(app.screen, SignalDialog)), (name.value, payload.text)
        with open_store(console_db, readonly=True) as store:
            assert [(s.name, s.payload) for s in store.list_signals(ROLES["blocked"])][-1] == ("nudge", None)


@async_test
async def test_a_completed_workflow_refuses_the_signal_in_place(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(pilot, ROLES["completed"])
        dialog.query_one("#signal-name", Input).value = "approval"
        dialog.query_one("#payload", TextArea).text = "true"
        await pilot.press("ctrl+s")
        refusal = dialog.query_one("#refusal", Static)
        assert await wait_until(pilot, lambda: "accepts no signals" in rendered(refusal))
        assert isinstance(app.screen, SignalDialog)
        with open_store(console_db, readonly=True) as store:
            assert len(store.list_signals(ROLES["completed"])) == 1


@async_test
async def test_unknown_ids_and_oversized_payloads_are_refused_in_place(
        console_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPLAYLOG_MAX_PAYLOAD", "40")
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.open_signal_dialog("no-such-workflow", "approval")
        await pilot.pause()
        dialog = app.screen
        dialog.query_one("#payload", TextArea).text = "null"
        await pilot.press("ctrl+s")
        refusal = dialog.query_one("#refusal", Static)
        assert await wait_until(pilot, lambda: "no workflow with id" in rendered(refusal))
        await pilot.press("escape")
        app.open_signal_dialog(ROLES["blocked"], "approval")
        await pilot.pause()
        dialog = app.screen
        dialog.query_one("#payload", TextArea).text = json.dumps({"note": "x" * 50})
        await pilot.press("ctrl+s")
        refusal = dialog.query_one("#refusal", Static)
        assert await wait_until(pilot, lambda: "over the cap of 40 bytes" in rendered(refusal))


@async_test
async def test_readonly_offers_no_write_action(console_db: Path) -> None:
    app = make_app(console_db, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        offered = {b.binding.action for b in app.screen.active_bindings.values() if b.enabled}
        assert "signal" not in offered and "filter" in offered
        await pilot.press("s")
        await pilot.pause()
        screen = await open_workflow(pilot, ROLES["blocked"])
        await pilot.press("s")
        await pilot.pause()
        assert app.screen is screen  # no dialog
        assert not screen.check_action("signal", ())
        app.open_signal_dialog(ROLES["blocked"], "approval")  # even asked directly, nothing opens
        await pilot.pause()
        assert app.screen is screen
        with pytest.raises(SignalRefused, match="read-only"):
            app.data.send_signal(ROLES["blocked"], "approval", True)  # the connection itself is mode=ro


# ------------------------------------------------------------------ live


@async_test
async def test_a_worker_moving_a_workflow_shows_within_a_second(console_db: Path) -> None:
    worker = start_worker(console_db, "--app", "console_workflows")
    try:
        app = make_app(console_db)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            table = app.screen.query_one(PagedTable)

            def status_of(workflow_id: str) -> str:
                return dict(zip(column(table, "id"), column(table, "status"), strict=True)).get(workflow_id, "")

            assert status_of(ROLES["blocked"]) == "blocked"
            with open_store(console_db) as store:
                store.send_signal(ROLES["blocked"], "approval", {"approved": True, "by": "test"})
                assert await wait_until(pilot, lambda: store.get_workflow(ROLES["blocked"]).status == "completed",
                                        30)
            # No key pressed: the list follows the database by itself. (It polls four times a
            # second; the bound here is generous because test machines are loaded and noisy.)
            assert await wait_until(pilot, lambda: status_of(ROLES["blocked"]) == "completed", 10.0)
            counts = app.screen.query_one("#counts", Static)
            assert await wait_until(pilot, lambda: "completed 2" in rendered(counts), 10.0)
    finally:
        worker.terminate()
        worker.wait(timeout=10)


@async_test
async def test_a_live_refresh_keeps_the_cursor_on_its_workflow(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(PagedTable)
        table.move_cursor(row=ids(app).index(ROLES["blocked"]))
        with open_store(console_db) as store:
            store.start_workflow("refund", 1, workflow_id="newcomer")  # now the most recently updated
        assert await wait_until(pilot, lambda: ids(app)[0] == "newcomer", 1.0)
        assert table.current_key == ROLES["blocked"]
        assert table.row_count == len(ROLES) + 1


@async_test
async def test_cells_render_exactly_as_datatable_renders_them_after_rows_moved(console_db: Path) -> None:
    # PagedTable reuses a cell's rendered text wherever the cell moves; the segments,
    # styles and click metadata must be the ones DataTable itself would make there.
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(PagedTable)
        await pilot.pause()  # painted: every cell's text is cached at its first place
        with open_store(console_db) as store:
            store.start_workflow("refund", 1, workflow_id="newcomer")  # every row moves down one
        assert await wait_until(pilot, lambda: ids(app)[0] == "newcomer", 1.0)
        await pilot.pause()
        widths = [c.get_render_width(table) for c in table.ordered_columns]
        for row in range(table.row_count):
            base = table._get_row_style(row, table.rich_style)
            for col, width in enumerate(widths):
                for cursor, hover in ((False, False), (True, False), (False, True)):
                    ours = table._render_cell(row, col, base, width, cursor, hover)
                    stock = DataTable._render_cell(table, row, col, base, width, cursor, hover)
                    assert ours == stock, (row, col, cursor, hover)


# ------------------------------------------------------------------ diagnosis


@async_test
async def test_a_divergence_is_aligned_from_the_stored_diagnostic_without_the_code(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_workflow(pilot, ROLES["diverged"])
        aligned = screen.query_one("#aligned", DataTable)
        assert column(aligned, "recorded") == ["activity:pick"] * 3 + ["now:now"]
        assert column(aligned, "issued") == ["activity:pick"] * 3 + ["activity:weigh"]
        assert column(aligned, "note")[3] == "◀ first divergence"
        assert aligned.cursor_row == 3
        # Without the code the issued side is the stored record, and the labels say so.
        assert header(aligned, "issued") == "issued when it failed (stored)"
        assert "not loaded: start the console with --app" in rendered(screen.query_one("#diag-summary", Static))


def test_replaylog_console_loads_the_app_every_command_loads(console_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from replaylog.cli import Settings, console_app

    # `replaylog console` with no --app: $REPLAYLOG_APP, as `check`, `retry` and `worker` read it.
    monkeypatch.setenv("REPLAYLOG_APP", "console_workflows")

    async def go() -> None:
        app = console_app(Settings(str(console_db), None), readonly=False, app=None)
        app.animation_level = "none"
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_workflow(pilot, ROLES["diverged"])
            await pilot.press("3")
            summary = screen.query_one("#diag-summary", Static)
            assert await wait_until(pilot, lambda: "dry replay of console_workflows" in rendered(summary))
            assert "not loaded" not in rendered(summary)
            assert header(screen.query_one("#aligned", DataTable), "issued") == "issued by the current code"

    import asyncio

    asyncio.run(go())


@async_test
async def test_a_divergence_is_aligned_by_a_dry_replay_of_the_current_code(console_db: Path) -> None:
    app = make_app(console_db, registry=load_app("console_workflows"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_workflow(pilot, ROLES["diverged"])
        aligned = screen.query_one("#aligned", DataTable)
        assert column(aligned, "mark") == ["=", "=", "=", "≠"]
        summary = rendered(screen.query_one("#diag-summary", Static))
        assert "(dry replay of console_workflows)" in summary
        assert header(aligned, "issued") == "issued by the current code"
        await pilot.press("c")
        await settle(pilot)
        summary = rendered(screen.query_one("#diag-summary", Static))
        assert "diverges at slot 3, as when it failed" in summary.split("current code", 1)[1]


@async_test
async def test_after_the_code_is_fixed_the_stored_failure_and_the_current_code_are_told_apart(
        console_db: Path) -> None:
    # fulfil-3 failed when the current code (console_workflows) met a history version 1 left;
    # loading version 1 again stands for an operator who fixed the code.
    app = make_app(console_db, registry=load_app("console_workflows_v1"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_workflow(pilot, ROLES["diverged"])
        summary = rendered(screen.query_one("#diag-summary", Static))
        failed, now = summary.split("current code", 1)
        # What was stored when it failed, labelled as such, still names what the old code issued...
        assert "when it failed" in failed and "NonDeterministicError at slot 3" in failed
        assert "activity:weigh" in failed
        # ...and the current code's verdict says it replays, in its own row.
        assert "no longer diverges" in now and "activity:weigh" in now and "diverges at" not in now
        # The aligned view is the current code's: no divergence marked where the code now matches.
        aligned = screen.query_one("#aligned", PagedTable)
        assert header(aligned, "issued") == "issued by the current code"
        assert column(aligned, "recorded") == ["activity:pick"] * 3 + ["now:now", "(nothing)"]
        assert column(aligned, "issued") == ["activity:pick"] * 3 + ["now:now", "activity:weigh"]
        assert column(aligned, "mark") == ["=", "=", "=", "=", ""]
        assert column(aligned, "note") == ["", "", "", "◀ where it failed", "would run live now"]
        assert aligned.cursor_row == 3


@async_test
async def test_c_on_a_failed_workflow_shows_the_verdict_in_a_notice(console_db: Path) -> None:
    app = make_app(console_db, registry=load_app("console_workflows"))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await open_workflow(pilot, ROLES["diverged"])  # its verdict is on screen before any key
        assert not list(app._notifications)
        await pilot.press("c")
        await settle(pilot)
        (notice,) = list(app._notifications)
        assert notice.title == f"Check {ROLES['diverged']}" and notice.severity == "error"
        assert "non-determinism at slot 3" in notice.message
        await pilot.press("escape")
        await open_workflow(pilot, ROLES["blocked"])
        await pilot.press("c")
        await settle(pilot)
        assert any(n.severity == "information" and "replays cleanly" in n.message for n in app._notifications)


@async_test
async def test_c_judges_a_finished_workflow_as_replaylog_check_does(db_path: Path, tmp_path: Path) -> None:
    # A completed workflow whose code now issues one more command has diverged: its history
    # ended where the code goes on. The console's verdict is the command line's, word for word.
    head = "from replaylog import activity, workflow\n@activity\ndef a():\n    return 1\n@workflow\ndef steps(ctx):\n"
    once = "    ctx.call_activity(a)\n"
    (tmp_path / "steps_v1.py").write_text(head + once + "    return 'done'\n")
    (tmp_path / "steps_v2.py").write_text(head + once * 2 + "    return 'done'\n")
    with open_store(db_path) as store:
        store.start_workflow("steps", has_input=False, workflow_id="steps-1")
    assert run_cli(db_path, "worker", "--until-idle", "--quiet", "--app", str(tmp_path / "steps_v1.py")).returncode == 0
    v2 = str(tmp_path / "steps_v2.py")
    cli = run_cli(db_path, "check", "steps-1", "--app", v2)
    assert cli.returncode == 1 and cli.stderr.startswith("steps-1: ")
    app = make_app(db_path, registry=load_app(v2))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        screen = await open_workflow(pilot, "steps-1")
        assert screen.detail is not None and screen.detail.row.status == "completed"
        await pilot.press("c")
        await settle(pilot)
        (notice,) = list(app._notifications)
        assert notice.severity == "error"
        assert notice.message == cli.stderr.strip().removeprefix("steps-1: ")
        assert "history ends there (the workflow completed)" in notice.message


@async_test
async def test_help_names_the_code_c_checks_against(console_db: Path) -> None:
    for registry, expected in ((load_app("replaylog.samples"), "against the code (replaylog.samples)"),
                               (None, "(none loaded: use --app)")):
        app = make_app(console_db, registry=registry)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await pilot.press("question_mark")
            await pilot.pause()
            keys = rendered(app.screen.query_one("#help-keys Static", Static))
            assert "needs --app" not in keys
            line = next(line for line in keys.splitlines() if line.strip().startswith("c "))
            assert expected in line


@async_test
async def test_check_reports_a_clean_replay(console_db: Path) -> None:
    app = make_app(console_db, registry=load_app("console_workflows"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_workflow(pilot, ROLES["blocked"])
        await pilot.press("c")
        await settle(pilot)
        summary = rendered(screen.query_one(DiagnosisView).query_one("#diag-summary", Static))
        assert "replays cleanly; blocked on signal 'approval'" in summary


@async_test
async def test_check_says_when_the_code_has_no_such_workflow(console_db: Path) -> None:
    app = make_app(console_db, registry=load_app("replaylog.samples"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_workflow(pilot, ROLES["activity_failure"])
        await pilot.press("c")
        await settle(pilot)
        assert "unknown workflow 'failing_shipment'" in rendered(screen.query_one("#diag-summary", Static))


@async_test
async def test_an_activity_failure_shows_error_attempts_and_slot(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_workflow(pilot, ROLES["activity_failure"])
        summary = rendered(screen.query_one("#diag-summary", Static))
        assert "carrier_down" in summary and "RuntimeError: carrier API returned 503 for A-9" in summary
        assert "attempts" in summary and " 2" in summary.split("attempts", 1)[1].splitlines()[0]
        await pilot.press("c")
        await settle(pilot)
        assert "start the console with --app" in rendered(screen.query_one("#diag-summary", Static))


# ------------------------------------------------------------------ conventions


@async_test
async def test_stored_markup_and_escape_codes_render_literally(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert ROLES["markup"] in ids(app)
        screen = await open_workflow(pilot, ROLES["markup"])
        summary = rendered(screen.query_one("#summary", Static))
        assert "hostile[/bold]" in summary and "[/bold][red]not markup\\x1b[31m" in summary
        assert "\x1b" not in summary
        slots = screen.query_one("#slot-table", PagedTable)
        assert column(slots, "name") == ["shout[/bold]"]
        await pilot.press("escape")
        screen = await open_workflow(pilot, ROLES["blocked"])
        await pilot.press("2")
        signals = screen.query_one("#signal-table", DataTable)
        assert column(signals, "name") == ["[/bold]note"]
        assert column(signals, "payload") == ['{"text": "[red]\\u001b[2J[/red]"}']
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, SlotScreen)
        assert "[red]\\u001b[2J[/red]" in rendered(app.screen.query_one("#slot-value Static", Static))


@async_test
async def test_help_lists_the_keys(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


@async_test
async def test_the_help_is_made_from_the_bindings_of_every_screen(console_db: Path) -> None:
    from textual.binding import Binding

    screens = (ReplaylogConsole, PagedTable, WorkflowsScreen, WorkflowScreen, SlotScreen, SignalDialog)
    bindings = [b for screen in screens for b in Binding.make_bindings(screen.BINDINGS)]
    # Every key the footer offers is described in the help, by its binding's tooltip.
    assert all(b.tooltip for b in bindings if b.show)
    for readonly in (False, True):
        app = make_app(console_db, readonly=readonly)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await pilot.press("question_mark")
            await pilot.pause()
            keys = " ".join(rendered(app.screen.query_one("#help-keys Static", Static)).split())
            for b in bindings:
                if b.tooltip and not b.tooltip.startswith("check:"):
                    assert (b.tooltip in keys) != (readonly and b.action in WRITE_ACTIONS), b
            assert ("0 1 2 3 4 5 6 7 8 show all, pending, running, blocked, completed, failed, cancelled,"
                    " terminated, queued") in keys
            assert "^p command palette" in keys


@async_test
async def test_the_palette_goes_to_a_workflow_id(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+p", *"ship-9")

        def offered() -> list[str]:
            hits = app.screen.query(CommandList)
            return [str(hits.first().get_option_at_index(i).prompt) for i in range(hits.first().option_count)
                    ] if hits else []

        assert await wait_until(pilot, lambda: any("Go to workflow ship-9" in hit for hit in offered()))
        await pilot.press("down", "enter")
        assert await wait_until(pilot, lambda: on_screen(app, WorkflowScreen))
        assert app.screen.workflow_id == "ship-9"


@async_test
async def test_the_palette_filters_the_list_by_status_from_a_workflow_screen(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await open_workflow(pilot, ROLES["blocked"])
        await pilot.press("ctrl+p", *"show failed")

        def first_hit() -> str:
            hits = app.screen.query(CommandList)
            return str(hits.first().get_option_at_index(0).prompt) if hits and hits.first().option_count else ""

        assert await wait_until(pilot, lambda: "failed workflows" in first_hit())
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, WorkflowsScreen)
                                and app.screen.query_state.status == "failed")
        await settle(pilot)
        assert set(column(app.screen.query_one(PagedTable), "status")) == {"failed"}


@async_test
async def test_go_to_an_unknown_id_says_so_in_place(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("g", *"nope", "enter")
        await settle(pilot)
        assert isinstance(app.screen, WorkflowScreen)
        assert "no workflow with id 'nope'" in rendered(app.screen.query_one("#summary", Static))


@async_test
async def test_go_to_replaces_the_workflow_screens_so_one_esc_per_level_reaches_the_list(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await open_workflow(pilot, ROLES["blocked"])
        for wid in (ROLES["completed"], "ship-9", ROLES["nondeterministic"]):
            await pilot.press("g", *wid, "enter")
            await settle(pilot)
            assert isinstance(app.screen, WorkflowScreen) and app.screen.workflow_id == wid
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, WorkflowsScreen)
        assert [type(s) for s in app.screen_stack[1:]] == [WorkflowsScreen]


@async_test
async def test_keys_typed_after_quit_open_nothing(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.open_workflow(ROLES["blocked"])
        await settle(pilot)
        app.exit()  # "q", then keys that were already on their way: "s", "?", "g"
        app.screen.action_signal()
        app.action_help()
        app.action_goto()
    assert app.return_code == 0


def fits(table: DataTable[Any]) -> bool:
    """Every column of the table is in view: nothing hides past the right edge."""
    return table.virtual_size.width <= table.scrollable_content_region.width


@async_test
async def test_every_screen_fits_an_80x24_terminal(console_db: Path) -> None:
    app = make_app(console_db, registry=load_app("console_workflows"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert fits(app.screen.query_one(PagedTable))

        screen = await open_workflow(pilot, ROLES["diverged"])
        aligned = screen.query_one("#aligned", PagedTable)
        assert fits(aligned)
        # The divergence is in view, and so is the history before it.
        assert aligned.scrollable_content_region.height >= 4
        assert column(aligned, "recorded")[3] == "now:now"
        await pilot.press("1")
        assert fits(screen.query_one("#slot-table", PagedTable))
        await pilot.press("2")
        assert fits(screen.query_one("#signal-table", PagedTable))
        await pilot.press("escape")

        await open_dialog(pilot, ROLES["blocked"])
        send = app.screen.query_one("#send")
        assert send.region.height > 0 and send.region.bottom <= 24  # the buttons are on screen


# ------------------------------------------------------------------ the database watcher


def replace_file(path: Path, content: Path) -> None:
    """Swap the database file for another, atomically, as a restore from backup would."""
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    os.replace(content, path)


@async_test
async def test_live_updates_survive_an_unreadable_database_and_resume_when_it_is_restored(
        console_db: Path, tmp_path: Path) -> None:
    backup = copy_db(console_db, tmp_path / "backup.db")
    with open_store(backup) as store:
        store.start_workflow("refund", 1, workflow_id="restored")
    app = make_app(console_db, poll_interval=0.05)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        assert "restored" not in ids(app)

        damaged = tmp_path / "damaged.db"
        damaged.write_bytes(b"not a database at all\n" * 512)
        replace_file(console_db, damaged)
        assert await wait_until(pilot, lambda: app.database_problem is not None)
        assert "not a usable SQLite database" in (app.database_problem or "")
        assert await wait_until(pilot, lambda: len(app.screen.query("Toast")) == 1)
        await pilot.pause(0.3)  # several retries later, still one notice, not one per retry
        (notice,) = app.screen.query("Toast")
        assert "cannot read the database, retrying" in notice.render().plain

        replace_file(console_db, backup)  # the watcher keeps retrying and picks the file up
        assert await wait_until(pilot, lambda: app.database_problem is None)
        assert await wait_until(pilot, lambda: "restored" in ids(app))

        with open_store(console_db) as store:  # and goes on seeing commits
            store.start_workflow("refund", 2, workflow_id="after-restore")
        assert await wait_until(pilot, lambda: "after-restore" in ids(app))


@pytest.mark.parametrize("readonly", [True, False])
@async_test
async def test_a_deleted_database_is_reported_and_never_recreated(console_db: Path, readonly: bool) -> None:
    app = make_app(console_db, readonly=readonly, poll_interval=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{console_db}{suffix}").unlink(missing_ok=True)
        assert await wait_until(pilot, lambda: app.database_problem is not None)
        assert "no database file at" in (app.database_problem or "")
        await pilot.press("0")  # the list reads again
        await settle(pilot)
        assert "no database at" in rendered(app.screen.query_one("#pageinfo", Static))
        assert not console_db.exists()  # reads never create a database


@async_test
async def test_the_workflow_screen_shows_the_latest_value_of_each_event(db_path: Path) -> None:
    with frozen_time(), open_store(db_path) as store:
        store.start_workflow("refund", 7, workflow_id="events-1")
        (claim,) = store.claim("otherhost:4194995:cafebabe", ttl=30)
        store.commit_batch([PendingRecord(claim, 0, CommandRecord("event", "progress", True, 0.25)),
                            PendingRecord(claim, 1, CommandRecord("event", "stage", True, "[bold]charging[/bold]")),
                            PendingRecord(claim, 2, CommandRecord("event", "progress", True, 0.75))], ttl=30)
    app = make_app(db_path)
    async with app.run_test(size=SIZE) as pilot:
        summary = rendered((await open_workflow(pilot, "events-1")).query_one("#summary", Static))
        # The latest value per key, stored text shown as text, never markup.
        assert 'events    progress: 0.75, stage: [bold]charging[/bold]' in summary, summary


# ------------------------------------------------------------------ queues


@async_test
async def test_a_queued_workflow_shows_its_queue_and_place_in_line_in_the_list_and_its_screen(db_path: Path) -> None:
    from replaylog import Client, Queue

    with Client(db_path) as client:
        line = Queue("reports", concurrency=1)
        first = client.start("refund", 1, queue=line)
        second = client.start("refund", 2, queue=line, priority=2, dedup_id="[red]not markup[/red]")
    app = make_app(db_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("8")  # queued
        await settle(pilot)
        table = app.screen.query_one(PagedTable)
        waits = dict(zip(column(table, "id"), column(table, "blocked_on"), strict=True))
        assert waits == {first.id: "queue reports #1", second.id: "queue reports #2"}
        # The queue's figures, as `replaylog queues` gives them, under the status counts.
        assert "reports 0/1 running · 2 waiting" in rendered(app.screen.query_one("#queues", Static))
        screen = await open_workflow(pilot, second.id)
        summary = rendered(screen.query_one("#summary", Static))
        assert "queue" in summary and "reports · priority 2 · 2nd in line · dedup id [red]not markup[/red]" in summary


@async_test
async def test_a_change_seen_while_the_console_closes_is_dropped_not_raised(console_db: Path) -> None:
    # The store's change watcher (on PostgreSQL a LISTEN thread) can post a change after the
    # app has popped its last screen on the way out; the handler must not ask for a screen then.
    app = make_app(console_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        seen = app.changes_seen
    assert not app.screen_stack
    app.on_replaylog_console_database_changed(ReplaylogConsole.DatabaseChanged())
    assert app.changes_seen == seen + 1
