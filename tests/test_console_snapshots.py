"""Snapshots of every console screen at 120x40, over a seeded database whose timestamps are fixed
and with the console's clock frozen, so the SVGs are the same on every run and machine."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from console_helpers import SIZE, make_app, settle, wait_until
from console_seed import ROLES
from textual.pilot import Pilot
from textual.widgets import Input, Static, TextArea

from replaylog.console.paged_table import PagedTable
from replaylog.engine.app import load_app

Snap = Callable[..., bool]


def opening(workflow_id: str | None = None, *keys: str,
            then: Callable[[Pilot[Any]], Awaitable[None]] | None = None) -> Callable[[Pilot[Any]], Awaitable[None]]:
    """A run_before: wait for the list, maybe open a workflow, press keys, wait for every read."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        if workflow_id is not None:
            pilot.app.open_workflow(workflow_id)
            await settle(pilot)
        if keys:
            await pilot.press(*keys)
            await settle(pilot)
        if then is not None:
            await then(pilot)
        for widget in pilot.app.screen.query("Input, TextArea"):
            assert isinstance(widget, Input | TextArea)
            # A blinking cursor would make frames differ. Then a fresh draw: TextArea caches a
            # line drawn while its cursor blinked off under the same key as a line with the
            # cursor steady, so without it the frame depends on whether a loaded machine let a
            # half-second blink pass before this point.
            widget.cursor_blink = False
            widget.notify_style_update()
            widget.refresh()
        await pilot.pause()

    return run_before


def test_workflows_screen(snap_compare: Snap, console_db: Path) -> None:
    assert snap_compare(make_app(console_db), terminal_size=SIZE, run_before=opening())


def test_workflows_screen_at_a_phones_width(snap_compare: Snap, console_db: Path) -> None:
    # 64 columns: the status counts take two lines, and the list hides slots, updated and
    # workflow (in that order) so that id, status, blocked on and error fit, none cut off;
    # the footer's keys wrap onto two lines, the help key first.
    assert snap_compare(make_app(console_db), terminal_size=(64, 30), run_before=opening())


def test_workflow_screen_at_a_phones_width(snap_compare: Snap, console_db: Path) -> None:
    # 64 columns: the footer's keys do not fit on one line, so they wrap (compact), the help
    # key first: every key the screen has is on screen, none cut off.
    assert snap_compare(make_app(console_db), terminal_size=(64, 30), run_before=opening(ROLES["blocked"]))


def test_workflows_screen_filtered(snap_compare: Snap, console_db: Path) -> None:
    assert snap_compare(make_app(console_db), terminal_size=SIZE, run_before=opening(None, "slash", *"refund"))


def test_workflows_screen_readonly(snap_compare: Snap, console_db: Path) -> None:
    assert snap_compare(make_app(console_db, readonly=True), terminal_size=SIZE, run_before=opening(None, "5"))


def test_workflow_screen_slots(snap_compare: Snap, console_db: Path) -> None:
    assert snap_compare(make_app(console_db), terminal_size=SIZE, run_before=opening(ROLES["completed"]))


def test_workflow_screen_signals(snap_compare: Snap, console_db: Path) -> None:
    assert snap_compare(make_app(console_db), terminal_size=SIZE, run_before=opening(ROLES["blocked"], "2"))


def test_slot_value(snap_compare: Snap, console_db: Path) -> None:
    async def last_slot(pilot: Pilot[Any]) -> None:
        pilot.app.screen.query_one("#slot-table", PagedTable).move_cursor(row=2)
        await pilot.press("enter")
        await pilot.pause()

    assert snap_compare(make_app(console_db), terminal_size=SIZE,
                        run_before=opening(ROLES["completed"], then=last_slot))


def test_diagnosis_divergence_dry_replayed(snap_compare: Snap, console_db: Path) -> None:
    app = make_app(console_db, registry=load_app("console_workflows"))
    assert snap_compare(app, terminal_size=SIZE, run_before=opening(ROLES["diverged"]))


def test_diagnosis_after_the_code_is_fixed(snap_compare: Snap, console_db: Path) -> None:
    # Version 1 of fulfil matches the history again: the stored failure and the current code disagree.
    app = make_app(console_db, registry=load_app("console_workflows_v1"))
    assert snap_compare(app, terminal_size=SIZE, run_before=opening(ROLES["diverged"]))


def test_workflows_screen_wide(snap_compare: Snap, console_db: Path) -> None:
    # 200 columns: the error column takes the room "blocked on" (its longest wait here is short) leaves.
    assert snap_compare(make_app(console_db), terminal_size=(200, 30), run_before=opening())


def test_diagnosis_divergence_from_stored_diagnostic(snap_compare: Snap, console_db: Path) -> None:
    assert snap_compare(make_app(console_db), terminal_size=SIZE, run_before=opening(ROLES["diverged"]))


# The screen shows the failure's traceback as Python wrote it, and Python 3.13 marks the
# failing call's line differently (`~~~^^^` where 3.11 and 3.12 write `^^^^^^`).
@pytest.mark.skipif(sys.version_info >= (3, 13), reason="the snapshot's traceback is Python 3.11's rendering")
def test_diagnosis_activity_failure(snap_compare: Snap, console_db: Path) -> None:
    assert snap_compare(make_app(console_db), terminal_size=SIZE, run_before=opening(ROLES["activity_failure"]))


def test_markup_workflow(snap_compare: Snap, console_db: Path) -> None:
    assert snap_compare(make_app(console_db), terminal_size=SIZE, run_before=opening(ROLES["markup"], "1"))


def test_signal_dialog_invalid_json(snap_compare: Snap, console_db: Path) -> None:
    async def break_payload(pilot: Pilot[Any]) -> None:
        pilot.app.screen.query_one("#payload", TextArea).text = '{"approved": tru'
        validation = pilot.app.screen.query_one("#validation", Static)
        assert await wait_until(pilot, lambda: "not JSON" in str(validation.render()))

    assert snap_compare(make_app(console_db), terminal_size=SIZE,
                        run_before=opening(ROLES["blocked"], "s", then=break_payload))


def test_help_screen(snap_compare: Snap, console_db: Path) -> None:
    assert snap_compare(make_app(console_db), terminal_size=SIZE, run_before=opening(None, "question_mark"))
