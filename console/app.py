"""ReplaylogConsole: the operator console's App.

The app owns the database path and the change detector; screens own what they show.
A single long-lived thread worker polls `PRAGMA data_version` on its own connection
(the number is only comparable on one connection) and posts `DatabaseChanged`; the
screen in view then re-queries only what it shows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.worker import get_current_worker

from console.commands import WorkflowCommands
from console.goto_dialog import GoToDialog
from console.help_screen import HelpScreen
from console.signal_dialog import SignalDialog
from console.workflow_screen import WorkflowScreen
from console.workflows_screen import WorkflowsScreen
from engine.app import Registry
from engine.store import SQLiteStore

# Well under the one second the issue allows, and a data_version read is a read of
# shared memory, so polling this often costs nothing measurable.
DEFAULT_POLL_INTERVAL = 0.25


class ReplaylogConsole(App[None]):
    """The operator console over one replaylog database.

    Args:
        db_path: the SQLite file the worker writes.
        readonly: open it with mode=ro and offer no write action at all.
        registry: the workflow code (from --app), for dry replays; None shows stored diagnostics only.
        clock: the wall clock for "4s ago" columns; tests inject a fixed one.
        poll_interval: seconds between data_version checks.
    """

    CSS_PATH = "app.tcss"
    TITLE = "replaylog"
    COMMANDS = App.COMMANDS | {WorkflowCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("g", "goto", "Go to id"),
    ]

    class DatabaseChanged(Message):
        """Another connection committed to the database since the last look."""

    def __init__(
        self,
        db_path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        registry: Registry | None = None,
        clock: Callable[[], float] = time.time,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        super().__init__()
        self.db_path = Path(db_path)
        self.readonly = readonly
        self.registry = registry
        self.clock = clock
        self.poll_interval = poll_interval
        self.changes_seen = 0

    def open_store(self) -> SQLiteStore:
        """A new store on this thread's own connection (read-only when the console is)."""
        return SQLiteStore(self.db_path, readonly=self.readonly)

    def on_mount(self) -> None:
        """Show the workflow list and start watching the database."""
        self.push_screen(WorkflowsScreen())
        self._watch_database()

    @work(thread=True, group="watch", exclusive=True, exit_on_error=False)
    def _watch_database(self) -> None:
        worker = get_current_worker()
        with self.open_store() as store:
            last = store.data_version()
            while not worker.cancelled_event.wait(self.poll_interval):
                version = store.data_version()
                if version != last:
                    last = version
                    self.post_message(self.DatabaseChanged())

    def on_replaylog_console_database_changed(self, _message: DatabaseChanged) -> None:
        """Tell the screens; the one in view re-queries, the others re-query when shown again."""
        self.changes_seen += 1
        top = self.screen
        for screen in self.screen_stack:
            changed = getattr(screen, "database_changed", None)
            if changed is not None:
                visible = screen is top or (top.is_modal and screen is self.screen_stack[-2])
                changed(visible=visible)

    @property
    def busy(self) -> bool:
        """Whether any screen is still loading what it shows (tests wait for this to clear)."""
        return any(getattr(screen, "busy", False) for screen in self.screen_stack)

    # -- actions shared by the screens

    def open_workflow(self, workflow_id: str) -> None:
        """Show one workflow."""
        self.push_screen(WorkflowScreen(workflow_id))

    def open_signal_dialog(self, workflow_id: str, default_name: str | None) -> None:
        """Ask for a signal to send, unless the console is read-only (then there is no write path)."""
        if self.readonly:
            return
        self.push_screen(SignalDialog(workflow_id, default_name or ""), self._signal_sent)

    def _signal_sent(self, result: tuple[str, str, int] | None) -> None:
        if result is not None:
            workflow_id, name, seq = result
            self.notify(f"signal #{seq} {name!r} sent to {workflow_id}", title="Signal sent", markup=False)

    def action_help(self) -> None:
        """Show the key map."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(readonly=self.readonly))

    def action_goto(self) -> None:
        """Ask for a workflow id and open it."""
        def opened(workflow_id: str | None) -> None:
            if workflow_id:
                self.open_workflow(workflow_id)

        self.push_screen(GoToDialog(), opened)
