"""The console and agents: pending approvals answered with the request bound, and the transcript view."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from console_helpers import SIZE, async_test, column, make_app, on_screen, settle, wait_until
from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import Button, Input, Static

from replaylog.console.action_dialog import ActionDialog
from replaylog.console.approval_dialog import ApprovalDialog
from replaylog.console.paged_table import PagedTable
from replaylog.console.transcript_screen import TranscriptScreen
from replaylog.console.workflow_screen import WorkflowScreen
from replaylog.engine.app import load_app
from replaylog.engine.store import open_store
from replaylog.engine.worker import Worker

WID = "agent-1"


def seed(db: Path | str) -> Path | str:
    with open_store(db) as store:
        store.start_workflow("support_agent", "order-1", workflow_id=WID)
    Worker(db, load_app("replaylog.samples"), poll=0.002).run(until_idle=True)
    with open_store(db, readonly=True) as store:
        assert store.get_workflow(WID).blocked_on == "approval:req-4"
    return db


def rendered(widget: Static) -> str:
    """What a Static shows, as plain text."""
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


async def open_agent(pilot: Pilot[Any]) -> WorkflowScreen:
    await settle(pilot)
    pilot.app.open_workflow(WID)
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, WorkflowScreen)
    return screen


def answers(db: Path | str) -> list[Any]:
    with open_store(db, readonly=True) as store:
        return [s.payload for s in store.list_signals(WID) if s.name.startswith("approval:")]


@async_test
async def test_approve_answers_the_request_on_screen_with_a_note(db: Path | str) -> None:
    seed(db)
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_agent(pilot)
        assert "approval: issue_refund (request req-4)" in rendered(screen.query_one("#summary", Static))
        assert screen.check_action("answer", ())
        await pilot.press("a")
        assert await wait_until(pilot, lambda: on_screen(app, ApprovalDialog))
        app.screen.query_one("#approval-note", Input).value = "looks right"
        await pilot.press("ctrl+y")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, ApprovalDialog))
    (answer,) = answers(db)
    assert answer["approved"] is True and answer["note"] == "looks right" and answer["request"] == "req-4"


@async_test
async def test_one_dialog_rejects_with_its_button_and_x_stays_cancel(db: Path | str) -> None:
    seed(db)
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_agent(pilot)
        await pilot.press("x")  # x is cancel (issue 17), also on a workflow waiting for an approval
        assert await wait_until(pilot, lambda: on_screen(app, ActionDialog))
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: app.screen is screen)
        await pilot.press("a")
        assert await wait_until(pilot, lambda: on_screen(app, ApprovalDialog))
        dialog = app.screen
        labels = [str(b.label) for b in dialog.query("#approval-buttons Button").results(Button)]
        assert labels[:2] == ["Approve  ctrl+y", "Reject  ctrl+r"]
        dialog.query_one("#approval-note", Input).value = "too much"
        await pilot.click("#reject")
        assert await wait_until(pilot, lambda: app.screen is screen)
    (answer,) = answers(db)
    assert answer["approved"] is False and answer["note"] == "too much" and answer["request"] == "req-4"
    with open_store(db, readonly=True) as store:
        assert store.get_workflow(WID).cancel_requested is None  # the cancel dialog was closed unanswered


@async_test
async def test_a_stale_dialog_is_refused_in_place_when_the_request_was_answered_meanwhile(db: Path | str) -> None:
    seed(db)
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await open_agent(pilot)
        await pilot.press("a")
        assert await wait_until(pilot, lambda: on_screen(app, ApprovalDialog))
        dialog = app.screen
        with open_store(db) as store:  # somebody else answered first
            store.answer_approval(WID, approved=True, by="bob@elsewhere")
        await pilot.press("ctrl+r")
        refusal = dialog.query_one("#refusal", Static)
        assert await wait_until(pilot, lambda: "no pending approval request" in rendered(refusal))
        assert app.screen is dialog
    assert [a["by"] for a in answers(db)] == ["bob@elsewhere"]  # the rejection was not written


@async_test
async def test_readonly_offers_no_approve_or_reject(db: Path | str) -> None:
    seed(db)
    app = make_app(db, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_agent(pilot)
        offered = {b.binding.action for b in screen.active_bindings.values() if b.enabled}
        assert not any(action.startswith("answer") for action in offered)
        assert not screen.check_action("answer", ())
        await pilot.press("a")
        await pilot.pause()
        assert app.screen is screen
        screen.action_answer()  # invoked anyway (the palette, say): refused
        await pilot.pause()
        assert app.screen is screen
        app.open_approval_dialog(WID, {"request": "req-4", "action": "issue_refund"})  # asked directly
        await pilot.pause()
        assert app.screen is screen
    assert answers(db) == []


@async_test
async def test_the_transcript_shows_calls_the_child_and_the_approval(db: Path | str) -> None:
    seed(db)
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await open_agent(pilot)
        await pilot.press("t")
        assert await wait_until(pilot, lambda: on_screen(app, TranscriptScreen))
        body = app.screen.query_one("#transcript", Static)
        assert await wait_until(pilot, lambda: "issue_refund" in rendered(body))
        shown = rendered(body)
        assert 'ask_model("plan: refund order-1")' in shown
        assert 'lookup_order("order-1")' in shown and 'check_policy("order-1")' in shown
        # The two tools ran in one ctx.parallel group: one "in parallel" line, then each marked ‖;
        # the model call before them is not.
        lines = shown.splitlines()
        assert sum("in parallel:" in line for line in lines) == 1
        assert [line.split()[:2] for line in lines if "_order(" in line or "_policy(" in line] == [["1", "‖"],
                                                                                                ["2", "‖"]]
        assert not any("‖" in line for line in lines if "ask_model(" in line)
        assert f"summarise {WID}.3" in shown and "completed" in shown
        assert "(request req-4)" in shown and "waiting for an answer" in shown


@async_test
async def test_the_transcript_opens_each_of_two_groups_back_to_back_with_its_own_line(db: Path | str) -> None:
    with open_store(db) as store:
        store.start_workflow("two_groups", has_input=False, workflow_id="groups-1")
    Worker(db, load_app("agent_app"), poll=0.002).run(until_idle=True)
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.open_workflow("groups-1")
        await settle(pilot)
        await pilot.press("t")
        assert await wait_until(pilot, lambda: on_screen(app, TranscriptScreen))
        body = app.screen.query_one("#transcript", Static)
        assert await wait_until(pilot, lambda: '"c1"' in rendered(body))
        lines = [" ".join(line.split()) for line in rendered(body).splitlines() if line.strip()]
        assert lines == [
            "‖ in parallel:", '0 ‖ note("a1") → a1', '1 ‖ note("a2") → a2',
            "‖ in parallel:", '2 ‖ note("b1") → b1', '3 ‖ note("b2") → b2',
            '4 ▸ note("plain") → plain',
            "‖ in parallel:", '5 ‖ note("c1") → c1',
        ], lines


@async_test
async def test_the_transcript_shows_a_long_approval_answer_whole(db: Path | str) -> None:
    seed(db)
    note = "refund approved after a call with the customer; " * 4 + "END-OF-NOTE"
    with open_store(db) as store:
        store.answer_approval(WID, approved=True, by="alice", note=note, request="req-4")
    app = make_app(db)
    async with app.run_test(size=(200, 50)) as pilot:
        await open_agent(pilot)
        await pilot.press("t")
        assert await wait_until(pilot, lambda: on_screen(app, TranscriptScreen))
        body = app.screen.query_one("#transcript", Static)
        assert await wait_until(pilot, lambda: "issue_refund" in rendered(body))
        # As wide as it is drawn on this terminal: the answer wraps, it is not cut with "…".
        console = Console(width=body.content_size.width, record=True, file=io.StringIO())
        console.print(body.content)
        drawn = " ".join(line.strip() for line in console.export_text().splitlines())
        assert "approved by alice: refund approved" in drawn and "END-OF-NOTE" in drawn


@async_test
async def test_the_list_filters_to_workflows_waiting_for_an_approval(db: Path | str) -> None:
    seed(db)
    with open_store(db) as store:
        store.start_workflow("two_approvals", workflow_id="signal-waiter")  # waits for a plain signal
    Worker(db, load_app("replaylog.samples"), poll=0.002).run(until_idle=True)
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(PagedTable)
        assert {WID, "signal-waiter", f"{WID}.3"} <= set(column(table, "id"))
        await pilot.press("a")
        await settle(pilot)
        assert column(table, "id") == [WID]
        # The list names the request's action as `list` does, not the raw signal name.
        assert column(table, "blocked_on") == ["approval: issue_refund (request req-4)"]
        assert "awaiting approval" in rendered(app.screen.query_one("#pageinfo", Static))
        await pilot.press("a")  # again: all of them
        await settle(pilot)
        assert {WID, "signal-waiter", f"{WID}.3"} <= set(column(table, "id"))


@async_test
async def test_the_workflow_screen_links_parent_and_children(db: Path | str) -> None:
    seed(db)
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_agent(pilot)
        assert f"children  {WID}.3 (completed)" in rendered(screen.query_one("#summary", Static))
        app.open_workflow(f"{WID}.3")
        await settle(pilot)
        child = app.screen
        assert isinstance(child, WorkflowScreen) and child.workflow_id == f"{WID}.3"
        assert f"parent    {WID}" in rendered(child.query_one("#summary", Static))
