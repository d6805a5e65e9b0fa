"""What failed a workflow is known by the error's type, never by its text.

Workflow code may turn an activity's failure into its own ActivityError subclass (the
shop's words for it): that is still an activity failure, though its text no longer starts
with "ActivityError".
"""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest
from console_helpers import SIZE, async_test, make_app, settle
from rich.console import Console
from textual.widgets import Static

from conftest import run_cli
from replaylog import ActivityError, Context, activity, workflow
from replaylog.console.data import is_transient
from replaylog.console.workflow_screen import WorkflowScreen
from replaylog.engine.app import load_app
from replaylog.engine.core import CommandRecord, WorkflowState, dry_replay
from replaylog.engine.store import open_store
from replaylog.engine.text import verdict_text
from replaylog.engine.worker import Worker

APP = '''
from replaylog import ActivityError, activity, workflow
from replaylog.engine.text import verdict_text


class CardDeclined(ActivityError):
    """The card was declined: an activity's failure, in the shop's own words."""


@activity
def charge() -> None:
    raise RuntimeError("card declined")


@workflow
def pay(ctx):
    try:
        return ctx.call_activity(charge, max_retries=1)
    except ActivityError as exc:
        raise CardDeclined(exc.slot, exc.name, exc.error, exc.attempts) from exc


@workflow
def broken(ctx):
    raise ValueError("ActivityError: not one, only a text that looks like one")


@workflow
def fine(ctx):
    return "ok"
'''


class CardDeclined(ActivityError):
    """The card was declined: an activity's failure, in the shop's own words."""


@activity
def charge() -> None:
    """Never runs in a dry replay: its failure is in history."""
    raise AssertionError("a dry replay ran an activity")


@workflow
def pay(ctx: Context) -> None:
    """Turns the activity's failure into its own ActivityError subclass."""
    try:
        ctx.call_activity(charge, max_retries=1)
    except ActivityError as exc:
        raise CardDeclined(exc.slot, exc.name, exc.error, exc.attempts) from exc


def run_app(db: Path, tmp_path: Path) -> None:
    """pay, broken and fine, each run to its end by a real worker."""
    (tmp_path / "kinds_app.py").write_text(APP)
    with open_store(db) as store:
        for name in ("pay", "broken", "fine"):
            store.start_workflow(name, has_input=False, workflow_id=f"{name}-1")
    Worker(db, load_app(str(tmp_path / "kinds_app.py")), poll=0.002).run(until_idle=True)


def test_a_failed_workflow_records_what_failed_it_by_type(db_path: Path, tmp_path: Path) -> None:
    run_app(db_path, tmp_path)
    with open_store(db_path, readonly=True) as store:
        rows = {name: store.get_workflow(f"{name}-1") for name in ("pay", "broken", "fine")}
    assert rows["pay"].error is not None and rows["pay"].error.startswith("CardDeclined: ")
    assert {name: (row.status, row.error_kind) for name, row in rows.items()} == {
        "pay": ("failed", "activity"), "broken": ("failed", "code"), "fine": ("completed", None)}
    shown = run_cli(db_path, "show", "--json", "pay-1")
    assert shown.returncode == 0 and json.loads(shown.stdout)["error_kind"] == "activity"


def test_a_dry_replay_ending_on_a_recorded_activity_failure_replays_cleanly_whatever_the_error_is_called() -> None:
    # A workflow still running (its verdict not written yet) whose history ends in a failed
    # activity: the code fails on it again, as recorded, under the shop's own error class.
    state = WorkflowState(commands=(CommandRecord("activity", "charge", False, error="RuntimeError: card declined",
                                                  attempts=1),), has_input=False)
    verdict = dry_replay(pay, state, status="running")
    assert verdict.ok, verdict_text(verdict)
    assert "fails on its recorded activity error" in verdict_text(verdict)


@async_test
async def test_the_console_diagnoses_an_activity_failure_by_its_type(db_path: Path, tmp_path: Path) -> None:
    run_app(db_path, tmp_path)
    app = make_app(db_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for wid, expected, absent in (("pay-1", "activity failed", "workflow failed"),
                                      ("broken-1", "workflow failed", "activity failed")):
            app.open_workflow(wid)
            await settle(pilot)
            assert isinstance(app.screen, WorkflowScreen)
            out = Console(width=200, record=True, file=io.StringIO())
            out.print(app.screen.query_one("#diag-summary", Static).content)
            summary = out.export_text()
            assert expected in summary and absent not in summary, summary
            await pilot.press("escape")
            await settle(pilot)


def test_a_lock_held_by_a_writer_is_told_apart_by_its_code_not_its_text(db_path: Path) -> None:
    # The console's watcher stays quiet about a lock that clears by itself, and says at once
    # that the database cannot be read for anything else, whatever words the error uses.
    with open_store(db_path):
        pass  # a database to lock
    writer = sqlite3.connect(db_path, isolation_level=None)
    waiter = sqlite3.connect(db_path, timeout=0, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError) as locked:
            waiter.execute("BEGIN IMMEDIATE")
    finally:
        writer.close()
        waiter.close()
    assert is_transient(locked.value)
    assert not is_transient(FileNotFoundError(f"no database file at {db_path.parent / 'busy' / 'locked.db'}"))
