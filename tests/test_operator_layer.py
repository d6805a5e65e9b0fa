"""The command line and the console say the same things the same way: one operator layer."""

from __future__ import annotations

import io
from pathlib import Path

from console_helpers import SIZE, async_test, make_app, settle
from console_seed import frozen_time
from rich.console import Console
from textual.widgets import Static

from conftest import run_cli
from replaylog.cli import _status
from replaylog.console.format import STATUS_STYLES, status_text
from replaylog.console.workflow_screen import WorkflowScreen
from replaylog.engine.store import STATUSES, open_store


def test_a_status_is_styled_alike_on_the_command_line_and_in_the_console() -> None:
    for status in STATUSES:
        assert _status(status).style == status_text(status).style == STATUS_STYLES[status]


@async_test
async def test_show_and_the_console_give_the_worker_error_in_the_same_words(db_path: Path) -> None:
    with frozen_time(), open_store(db_path) as store:
        store.start_workflow("refund", 7, workflow_id="interrupted-1")
        (claim,) = store.claim("otherhost:4194996:cafebabe", ttl=30)
        store.hand_back(claim, "KeyboardInterrupt: stop", backoff=30, backoff_max=60)
    line = "KeyboardInterrupt: stop — runs again from 00:00:30 UTC"  # the frozen midnight and 30 s
    shown = run_cli(db_path, "show", "interrupted-1")
    assert shown.returncode == 0 and f"worker error  {line}" in shown.stdout, shown.stdout
    app = make_app(db_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.open_workflow("interrupted-1")
        await settle(pilot)
        assert isinstance(app.screen, WorkflowScreen)
        out = Console(width=200, record=True, file=io.StringIO())
        out.print(app.screen.query_one("#summary", Static).content)
        assert f"worker error  {line}" in out.export_text()
