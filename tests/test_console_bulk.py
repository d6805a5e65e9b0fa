"""The console's filter fields and bulk actions under Pilot on a real seeded database, on both backends:
marked workflows or the filtered set, a confirmation naming them, each done on its own; a bad field
said in one line; read-only offers none of it."""

from __future__ import annotations

import io
from pathlib import Path

from console_helpers import SIZE, async_test, column, make_app, on_screen, settle, wait_until
from console_seed import ROLES
from textual.pilot import Pilot
from textual.widgets import Input, Static

from replaylog.console.action_dialog import ActionDialog
from replaylog.console.paged_table import PagedTable
from replaylog.console.workflows_screen import WorkflowsScreen
from replaylog.engine.store import open_store


def rendered(widget: Static) -> str:
    """What a Static shows, as plain text."""
    from rich.console import Console

    console = Console(width=300, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


async def mark(pilot: Pilot[None], workflow_id: str) -> None:
    table = pilot.app.screen.query_one(PagedTable)
    table.move_cursor(row=[i.removeprefix("● ") for i in column(table, "id")].index(workflow_id))
    await pilot.press("space")


async def filtered(pilot: Pilot[None], query: str) -> None:
    await pilot.press("slash")
    pilot.app.screen.query_one("#filter", Input).value = query
    await pilot.press("enter")
    await settle(pilot)


def audit_rows(db: Path | str) -> int:
    with open_store(db, readonly=True) as store:
        return sum(len(store.list_audit(r.id)) for r in store.list_workflows(limit=-1))


@async_test
async def test_terminate_of_marked_workflows_names_them_and_goes_on_past_a_refusal(console_any: Path | str) -> None:
    app = make_app(console_any)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, WorkflowsScreen)
        await mark(pilot, ROLES["completed"])
        await mark(pilot, ROLES["blocked"])
        await settle(pilot)
        assert screen.marked == {ROLES["completed"], ROLES["blocked"]}
        assert "2 marked" in rendered(screen.query_one("#pageinfo", Static))
        await pilot.press("T")
        assert await wait_until(pilot, lambda: on_screen(app, ActionDialog))
        dialog = app.screen
        assert isinstance(dialog, ActionDialog)
        said = rendered(dialog.query_one("#action-body", Static))
        assert "2 workflow(s) marked: " in said and ROLES["blocked"] in said and ROLES["completed"] in said
        dialog.query_one("#reason", Input).value = "bad deploy"
        await pilot.press("ctrl+s")
        assert await wait_until(pilot, lambda: app.screen is screen)
        assert screen.marked == set()
    with open_store(console_any, readonly=True) as store:
        row = store.get_workflow(ROLES["blocked"])
        assert (row.status, row.error) == ("terminated", "terminated by an operator: bad deploy")
        assert [a.action for a in store.list_audit(ROLES["blocked"])][-1] == "terminate"
        assert store.get_workflow(ROLES["completed"]).status == "completed"  # refused, untouched


@async_test
async def test_the_filter_box_takes_fields_and_a_bulk_action_takes_the_filtered_set(console_any: Path | str) -> None:
    with open_store(console_any, readonly=True) as store:
        blocked = [r.id for r in store.list_workflows(status="blocked", sort="created", descending=False, limit=-1)]
    before = audit_rows(console_any)
    app = make_app(console_any)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        await filtered(pilot, "status:blocked")
        table = screen.query_one(PagedTable)
        assert await wait_until(pilot, lambda: sorted(column(table, "id")) == sorted(blocked))
        await pilot.press("X")
        assert await wait_until(pilot, lambda: on_screen(app, ActionDialog))
        said = rendered(app.screen.query_one("#action-body", Static))
        assert f"{len(blocked)} workflow(s) the filter takes: {', '.join(blocked[:10])}" in said
        await pilot.press("escape")  # backed out: nothing written
        assert await wait_until(pilot, lambda: app.screen is screen)
        assert audit_rows(console_any) == before
        # A field the filter does not know: one red line, no rows, nothing else happens.
        await filtered(pilot, "colour:red")
        info = screen.query_one("#pageinfo", Static)
        assert await wait_until(pilot, lambda: "unknown filter field 'colour'" in rendered(info))
        assert column(table, "id") == []


@async_test
async def test_a_bulk_action_with_no_filter_and_nothing_marked_is_refused(console_any: Path | str) -> None:
    app = make_app(console_any)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        await pilot.press("T")
        await pilot.pause(0.3)
        assert await wait_until(pilot, lambda: any("never takes every workflow" in str(n.message)
                                                   for n in app._notifications))
        assert app.screen is screen


@async_test
async def test_readonly_offers_no_bulk_action(console_any: Path | str) -> None:
    app = make_app(console_any, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        await mark(pilot, ROLES["blocked"])
        for key in ("R", "X", "T"):
            await pilot.press(key)
            await pilot.pause(0.1)
            assert app.screen is screen
    with open_store(console_any, readonly=True) as store:
        assert store.get_workflow(ROLES["blocked"]).status == "blocked"


@async_test
async def test_search_attributes_filter_the_list_and_show_in_the_workflow(console_any: Path | str) -> None:
    from conftest import sql
    from replaylog.engine.store import slot_key

    with open_store(console_any) as store:
        wid = store.start_workflow("refund", 5)
        (seq,) = sql(store, "SELECT seq FROM workflows WHERE id = ?", (wid,))[0]
        sql(store, "INSERT INTO commands (slot_key, kind, name, ok, value, attempts, recorded_at)"
                   " VALUES (?, 'attributes', 'customer,tier', ?, ?, 1, 0)",
            (slot_key(int(seq)), True, '{"customer": "c-42", "tier": 3}'))
        # The index a worker's commit of that slot writes beside it (engine.store.shared.attributes).
        for key, value in (("customer", "c-42"), ("tier", "3")):
            sql(store, "INSERT INTO search_attributes (workflow_id, key, value) VALUES (?, ?, ?)", (wid, key, value))
    app = make_app(console_any)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await filtered(pilot, "customer=c-42 tier=3")
        table = app.screen.query_one(PagedTable)
        assert await wait_until(pilot, lambda: column(table, "id") == [wid])
        table.move_cursor(row=0)
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, WorkflowsScreen))
        summary = app.screen.query_one("#summary", Static)
        assert await wait_until(pilot, lambda: "customer=c-42, tier=3" in rendered(summary))
