"""The console's operator actions (issue 17) under Pilot on a real seeded database, on both backends
(a SQLite file, a PostgreSQL database): cancel, terminate, retry (verdict first), fork from the
highlighted slot; read-only offers none."""

from __future__ import annotations

import io
from pathlib import Path

from console_helpers import SIZE, async_test, column, make_app, on_screen, settle, wait_until
from console_seed import ROLES
from textual.command import CommandList
from textual.pilot import Pilot
from textual.widgets import Button, Input, Static

from replaylog.console.action_dialog import ActionDialog
from replaylog.console.data import WRITE_ACTIONS
from replaylog.console.help_screen import HelpScreen
from replaylog.console.paged_table import PagedTable
from replaylog.console.workflow_screen import WorkflowScreen
from replaylog.console.workflows_screen import WorkflowsScreen
from replaylog.engine.app import load_app
from replaylog.engine.store import open_store


def rendered(widget: Static) -> str:
    """What a Static shows, as plain text."""
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


async def open_workflow(pilot: Pilot[None], workflow_id: str) -> WorkflowScreen:
    app = pilot.app
    await settle(pilot)
    table = app.screen.query_one(PagedTable)
    table.move_cursor(row=column(table, "id").index(workflow_id))
    await pilot.press("enter")
    await settle(pilot)
    assert isinstance(app.screen, WorkflowScreen)
    return app.screen


async def dialog_for(pilot: Pilot[None], key: str) -> ActionDialog:
    await pilot.press(key)
    assert await wait_until(pilot, lambda: isinstance(pilot.app.screen, ActionDialog))
    screen = pilot.app.screen
    assert isinstance(screen, ActionDialog)
    return screen


def body(dialog: ActionDialog) -> str:
    return rendered(dialog.query_one("#action-body", Static))


@async_test
async def test_cancel_asks_a_reason_and_confirmation_then_requests_it_through_the_store(
        console_any: Path | str) -> None:
    app = make_app(console_any)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_workflow(pilot, ROLES["blocked"])
        dialog = await dialog_for(pilot, "x")
        assert ROLES["blocked"] in rendered(dialog.query_one(".dialog-title", Static))
        assert "WorkflowCancelled" in body(dialog)
        await pilot.press("escape")  # back out: nothing written
        assert app.screen is screen
        with open_store(console_any, readonly=True) as store:
            assert store.get_workflow(ROLES["blocked"]).cancel_requested is None
        dialog = await dialog_for(pilot, "x")
        dialog.query_one("#reason", Input).value = "customer asked"
        await pilot.press("ctrl+s")
        assert await wait_until(pilot, lambda: app.screen is screen)
        with open_store(console_any, readonly=True) as store:
            row = store.get_workflow(ROLES["blocked"])
            assert (row.status, row.cancel_requested) == ("pending", "customer asked")
            assert [a.action for a in store.list_audit(ROLES["blocked"])][-1] == "cancel"
        summary = screen.query_one("#summary", Static)
        assert await wait_until(pilot, lambda: "requested (reason: customer asked)" in rendered(summary))


@async_test
async def test_terminate_names_the_workflow_and_the_list_shows_the_reason(console_any: Path | str) -> None:
    app = make_app(console_any)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_workflow(pilot, ROLES["blocked"])
        dialog = await dialog_for(pilot, "T")
        assert f"Terminate {ROLES['blocked']} now?" in body(dialog)
        dialog.query_one("#reason", Input).value = "stuck for days"
        await pilot.press("ctrl+s")
        assert await wait_until(pilot, lambda: app.screen is screen)
        with open_store(console_any, readonly=True) as store:
            assert store.get_workflow(ROLES["blocked"]).status == "terminated"
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: on_screen(app, WorkflowsScreen))
        await settle(pilot)
        table = app.screen.query_one(PagedTable)

        def row_of(wid: str) -> dict[str, str]:
            at = column(table, "id").index(wid)
            return {key: column(table, key)[at] for key in ("status", "error")}

        assert await wait_until(pilot, lambda: row_of(ROLES["blocked"])["status"] == "terminated")
        assert "stuck for days" in row_of(ROLES["blocked"])["error"]
        # A second terminate of a finished workflow is refused in place, writing nothing.
        await open_workflow(pilot, ROLES["completed"])
        dialog = await dialog_for(pilot, "T")
        await pilot.press("ctrl+s")
        refusal = dialog.query_one("#refusal", Static)
        assert await wait_until(pilot, lambda: "is completed" in rendered(refusal))
        assert isinstance(app.screen, ActionDialog)


@async_test
async def test_retry_shows_the_dry_replay_verdict_first_and_offers_it_only_when_it_replays(
        console_any: Path | str) -> None:
    wid = ROLES["nondeterministic"]
    app = make_app(console_any, registry=load_app("replaylog.samples"))
    async with app.run_test(size=SIZE) as pilot:
        await open_workflow(pilot, wid)
        dialog = await dialog_for(pilot, "r")
        said = body(dialog)
        assert "does not replay, so a retry is refused" in said
        assert said.count("non-determinism at slot 0") == 1  # said once, not once per line
        assert not dialog.query("#confirm")  # refused: nothing to confirm
        await pilot.press("ctrl+s")
        await pilot.pause()
        with open_store(console_any, readonly=True) as store:
            assert store.get_workflow(wid).status == "failed"
    app = make_app(console_any, registry=load_app("replaylog.samples.legacy_v1"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_workflow(pilot, wid)
        dialog = await dialog_for(pilot, "r")
        assert "no longer diverges" in body(dialog)
        assert dialog.query_one("#confirm", Button)
        await pilot.press("ctrl+s")
        assert await wait_until(pilot, lambda: app.screen is screen)
        with open_store(console_any, readonly=True) as store:
            assert store.get_workflow(wid).status == "pending"


@async_test
async def test_a_retry_that_would_fail_again_on_an_activity_error_offers_the_fork_it_names(
        console_any: Path | str) -> None:
    wid = ROLES["activity_failure"]
    app = make_app(console_any, registry=load_app("console_workflows"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_workflow(pilot, wid)
        dialog = await dialog_for(pilot, "r")
        said = body(dialog)
        assert "a retry would fail again on the activity error recorded at slot 0" in said
        assert "Fork from slot 0 instead" in said
        confirm = dialog.query_one("#confirm", Button)
        assert "Fork from slot 0" in str(confirm.label)
        await pilot.press("ctrl+s")
        assert await wait_until(pilot, lambda: app.screen is screen)
        with open_store(console_any, readonly=True) as store:
            forks = [r for r in store.list_workflows(limit=-1) if r.forked_from == wid]
            assert len(forks) == 1 and store.get_workflow(wid).status == "failed"


@async_test
async def test_fork_from_the_highlighted_slot_names_the_activities_that_run_again(console_any: Path | str) -> None:
    wid = ROLES["completed"]
    app = make_app(console_any)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_workflow(pilot, wid)
        screen.query_one("#slot-table", PagedTable).move_cursor(row=1)
        dialog = await dialog_for(pilot, "f")
        said = body(dialog)
        assert "from slot 1 its code runs live" in said
        assert "1 recorded activity will run again" in said and "charge_card (slot 2)" in said
        await pilot.press("ctrl+s")
        assert await wait_until(pilot, lambda: app.screen is screen)
        with open_store(console_any, readonly=True) as store:
            forks = [r for r in store.list_workflows(limit=-1) if r.forked_from == wid]
            assert [(r.forked_slot, r.status, r.slots) for r in forks] == [(1, "pending", 1)]
            assert store.get_workflow(wid).status == "completed"
        await pilot.press("escape")
        forked = await open_workflow(pilot, forks[0].id)
        assert f"forked from  {wid} at slot 1" in rendered(forked.query_one("#summary", Static))


@async_test
async def test_the_palette_offers_the_workflow_actions(console_any: Path | str) -> None:
    app = make_app(console_any)
    async with app.run_test(size=SIZE) as pilot:
        await open_workflow(pilot, ROLES["blocked"])
        await pilot.press("ctrl+p", *"terminate workflow")

        def first_hit() -> str:
            hits = app.screen.query(CommandList)
            return str(hits.first().get_option_at_index(0).prompt) if hits and hits.first().option_count else ""

        assert await wait_until(pilot, lambda: f"Terminate workflow {ROLES['blocked']}" in first_hit())
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: on_screen(app, ActionDialog))


@async_test
async def test_readonly_hides_and_refuses_every_operator_action(console_any: Path | str) -> None:
    app = make_app(console_any, readonly=True, registry=load_app("replaylog.samples.legacy_v1"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_workflow(pilot, ROLES["blocked"])
        offered = {b.binding.action for b in screen.active_bindings.values() if b.enabled}
        assert offered & WRITE_ACTIONS == set() and "check" in offered
        for key in ("x", "T", "r", "f"):
            await pilot.press(key)
            await pilot.pause(0.1)
            assert app.screen is screen  # no dialog
        # Invoked directly (past check_action), each is refused: no dialog, nothing written.
        for act in (screen.action_cancel_workflow, screen.action_terminate_workflow, screen.action_retry_workflow,
                    screen.action_fork_workflow):
            act()
            await pilot.pause(0.1)
            assert app.screen is screen
        await pilot.press("ctrl+p", *"workflow")
        await pilot.pause(0.3)
        hits = app.screen.query(CommandList)
        prompts = [str(hits.first().get_option_at_index(i).prompt) for i in range(hits.first().option_count)
                   ] if hits else []
        assert not any(p.startswith(("Cancel", "Terminate", "Retry", "Fork")) for p in prompts)
        await pilot.press("escape")
        await pilot.press("question_mark")
        assert await wait_until(pilot, lambda: on_screen(app, HelpScreen))
        keys = " ".join(rendered(app.screen.query_one("#help-keys Static", Static)).split())
        assert "check:" in keys
        assert not any(what in keys for what in ("cancel:", "terminate:", "retry a failed", "fork from"))
    with open_store(console_any, readonly=True) as store:
        row = store.get_workflow(ROLES["blocked"])
        assert (row.status, row.cancel_requested) == ("blocked", None)
