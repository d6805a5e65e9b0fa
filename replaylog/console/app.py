"""ReplaylogConsole: the operator console's App.

The app owns the data layer (console.data) and the change detector; screens own what
they show. A single long-lived thread worker polls `PRAGMA data_version` on its own
connection (the number is only comparable on one connection) and posts
`DatabaseChanged`; the screen in view then re-queries only what it shows. The app hands
the data layer down to the screens it opens and answers the messages they post up.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.console import RenderableType
from textual import work
from textual.app import App
from textual.await_complete import AwaitComplete
from textual.binding import BindingType
from textual.message import Message
from textual.worker import get_current_worker

from replaylog.console.approval_dialog import ApprovalDialog
from replaylog.console.commands import WorkflowCommands
from replaylog.console.data import ConsoleData, is_transient, signal_name_refusal
from replaylog.console.goto_dialog import GoToDialog
from replaylog.console.help_screen import HelpScreen
from replaylog.console.keys import APP_BINDINGS, help_sections
from replaylog.console.live_screen import LiveScreen
from replaylog.console.schedules_screen import SchedulesScreen
from replaylog.console.signal_dialog import SignalDialog
from replaylog.console.workflow_screen import WorkflowScreen
from replaylog.console.workflows_screen import WorkflowsScreen
from replaylog.engine.app import Registry
from replaylog.engine.text import printable

# Well under the one second the issue allows, and a data_version read is a read of
# shared memory, so polling this often costs nothing measurable.
DEFAULT_POLL_INTERVAL = 0.25
# Consecutive "database is locked" failures before the operator is told (a writer's lock clears
# by itself); any other failure is reported at once. Retries back off up to MAX_RETRY_INTERVAL.
UNREADABLE_AFTER = 3
MAX_RETRY_INTERVAL = 2.0
UNREADABLE_NOTICE_SECONDS = 3600  # stays up until the database is readable again


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
    # Below 32 lines every screen has the class -short (app.tcss tightens the layout).
    # Textual 8 annotates App.VERTICAL_BREAKPOINTS as `ClassVar[...] | None`, which mypy reads as an
    # instance variable; like BINDINGS it is a class-level setting.
    VERTICAL_BREAKPOINTS: ClassVar[list[tuple[int, str]] | None] = [(0, "-short"), (32, "-tall")]  # type: ignore[misc]
    BINDINGS: ClassVar[list[BindingType]] = APP_BINDINGS  # in console.keys, beside the other screens' for the help

    class DatabaseChanged(Message):
        """Another connection committed to the database since the last look."""

    @dataclass
    class DatabaseUnreadable(Message):
        """The watcher cannot read the database (it keeps retrying)."""

        reason: str

    class DatabaseReadable(Message):
        """The watcher can read the database again after DatabaseUnreadable."""

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
        self.data = ConsoleData(db_path, readonly=readonly, registry=registry, clock=clock)
        self.poll_interval = poll_interval
        self.changes_seen = 0
        self.exiting = False
        self.database_problem: str | None = None  # why the watcher cannot read the database, if it cannot
        self._heap_frozen = False

    def on_mount(self) -> None:
        """Show the workflow list and start watching the database."""
        self.push_screen(WorkflowsScreen(self.data))
        self._watch_database()
        gc.freeze()  # the modules and the app (see on_workflows_screen_page_loaded)

    def on_workflows_screen_page_loaded(self, _message: WorkflowsScreen.PageLoaded) -> None:
        """Once the list is on screen, take what lives as long as the console out of the collector's reach."""
        # Python's full collections walk every tracked object: with Textual, Rich and the
        # list's widgets in the heap, each one stopped the UI thread for 30-120 ms, the
        # longest stalls of a live refresh. Frozen objects are skipped (freed by reference
        # counting as ever); only what the console builds later is walked.
        if not self._heap_frozen:
            self._heap_frozen = True
            self.call_after_refresh(gc.freeze)

    def pop_screen(self) -> AwaitComplete:
        """Go back a screen; once it is gone, collect its garbage now rather than mid-refresh."""
        popped = super().pop_screen()
        self._collect_when_gone(popped)
        return popped

    def _collect_when_gone(self, popped: AwaitComplete) -> None:
        # A screen's widgets are reference cycles, freed only by a full collection; left to the
        # collector, that pass comes later, maybe in the middle of a live refresh. Here it
        # rides on the screen change, which repaints everything anyway.
        if popped.is_done:
            gc.collect()
        else:
            self.set_timer(0.02, lambda: self._collect_when_gone(popped))

    @work(thread=True, group="watch", exclusive=True, exit_on_error=False)
    def _watch_database(self) -> None:
        # This thread is the console's only way of hearing about commits, so it must outlive
        # any error: it says once that the database cannot be read, and keeps trying.
        worker = get_current_worker()
        watch = self.data.watch()
        failures = 0
        reported: str | None = None
        try:
            while True:
                try:
                    changed = watch.poll()
                except Exception as exc:  # noqa: BLE001 - reported to the operator, then retried
                    watch.close()
                    failures += 1
                    reason = printable(str(exc) or type(exc).__name__, oneline=True)
                    # A lock held by a writer clears by itself: say nothing unless it lasts.
                    if reason != reported and (not is_transient(exc) or failures >= UNREADABLE_AFTER):
                        reported = reason
                        self.post_message(self.DatabaseUnreadable(reason))
                    delay = min(self.poll_interval * 2 ** failures, MAX_RETRY_INTERVAL)
                else:
                    if failures:
                        failures = 0
                        changed = True  # whatever failed to load meanwhile is read again
                        if reported is not None:
                            reported = None
                            self.post_message(self.DatabaseReadable())
                    if changed:
                        self.post_message(self.DatabaseChanged())
                    delay = self.poll_interval
                if worker.cancelled_event.wait(delay):
                    return
        finally:
            watch.close()

    def on_replaylog_console_database_unreadable(self, message: DatabaseUnreadable) -> None:
        """Say once, in one line, that live updates are stalled and why."""
        if self.database_problem is not None:
            self.clear_notifications()  # a new reason replaces the notice; it does not stack
        self.database_problem = message.reason
        self.notify(f"cannot read the database, retrying: {message.reason}", title="Live updates stopped",
                    severity="error", timeout=UNREADABLE_NOTICE_SECONDS, markup=False)

    def on_replaylog_console_database_readable(self, _message: DatabaseReadable) -> None:
        """Say the database is back; the screens re-query (a DatabaseChanged follows)."""
        self.database_problem = None
        self.clear_notifications()
        self.notify("the database can be read again", title="Live updates resumed", markup=False)

    def on_replaylog_console_database_changed(self, _message: DatabaseChanged) -> None:
        """Tell the screens; the one in view re-queries, the others re-query when shown again."""
        self.changes_seen += 1
        stack = self.screen_stack
        if not stack:  # the app is closing and its screens are gone: nobody is left to tell
            return
        top = stack[-1]
        for screen in stack:
            if isinstance(screen, LiveScreen):
                visible = screen is top or (top.is_modal and screen is stack[-2])
                screen.database_changed(visible=visible)

    @property
    def busy(self) -> bool:
        """Whether any screen is still loading what it shows (tests wait for this to clear)."""
        return any(screen.busy for screen in self.screen_stack if isinstance(screen, LiveScreen))

    def exit(self, result: None = None, return_code: int = 0, message: RenderableType | None = None) -> None:
        """Quit; from here on no key opens a screen (keys typed after `q` arrive while the app closes)."""
        self.exiting = True
        super().exit(result, return_code, message)

    # -- actions shared by the screens

    def open_workflow(self, workflow_id: str, *, jump: bool = False) -> None:
        """Show one workflow; a `jump` (go to id, the palette) first goes back to the list.

        A jump replaces the screens above the list rather than stacking on them, so `esc`
        always reaches the list in one press per level (workflow, then list).
        """
        if self.exiting:
            return
        if jump:
            self._back_to_list()
        self.push_screen(WorkflowScreen(self.data, workflow_id))

    def _back_to_list(self) -> None:
        while len(self.screen_stack) > 2 and not isinstance(self.screen, WorkflowsScreen):
            self.pop_screen()

    def open_signal_dialog(self, workflow_id: str, default_name: str | None) -> None:
        """Ask for a signal to send, unless the console is read-only (then there is no write path)."""
        if self.data.readonly or self.exiting:
            return
        if default_name is not None and signal_name_refusal(default_name) is not None:
            default_name = None  # it sleeps, or waits on a child or an approval: no name of it may be sent
        self.push_screen(SignalDialog(self.data, workflow_id, default_name or ""), self._signal_sent)

    def open_approval_dialog(self, workflow_id: str, request: dict[str, Any]) -> None:
        """Ask for a note and an answer (approve or reject) to the approval request, unless read-only."""
        if self.data.readonly or self.exiting:
            return
        self.push_screen(ApprovalDialog(self.data, workflow_id, request), self._approval_answered)

    def _approval_answered(self, result: tuple[str, str, bool] | None) -> None:
        if result is not None:
            workflow_id, request, approved = result
            verb = "approved" if approved else "rejected"
            self.notify(f"request {request} of {workflow_id} {verb}", title="Approval answered", markup=False)

    def on_workflow_screen_approval_requested(self, message: WorkflowScreen.ApprovalRequested) -> None:
        """The workflow screen asked to answer its pending approval request: open the dialog."""
        self.open_approval_dialog(message.workflow_id, message.request)

    def _signal_sent(self, result: tuple[str, str, int] | None) -> None:
        if result is not None:
            workflow_id, name, seq = result
            self.notify(f"signal #{seq} {name!r} sent to {workflow_id}", title="Signal sent", markup=False)

    def on_workflows_screen_workflow_chosen(self, message: WorkflowsScreen.WorkflowChosen) -> None:
        """The list chose a workflow: show it."""
        self.open_workflow(message.workflow_id)

    def on_live_screen_signal_requested(self, message: LiveScreen.SignalRequested) -> None:
        """A screen asked to send a signal: open the dialog."""
        self.open_signal_dialog(message.workflow_id, message.default_name)

    def on_workflow_commands_go_to_asked(self, _message: WorkflowCommands.GoToAsked) -> None:
        """The palette's "Go to workflow id…"."""
        self.action_goto()

    def on_workflow_commands_workflow_chosen(self, message: WorkflowCommands.WorkflowChosen) -> None:
        """The palette found a workflow and the operator chose it."""
        self.open_workflow(message.workflow_id, jump=True)

    def on_workflow_commands_status_chosen(self, message: WorkflowCommands.StatusChosen) -> None:
        """The palette's "Show <status> workflows": back to the list, filtered."""
        self._back_to_list()
        if isinstance(self.screen, WorkflowsScreen):
            self.screen.action_status(message.status)

    def action_help(self) -> None:
        """Show the key map."""
        if not isinstance(self.screen, HelpScreen) and not self.exiting:
            self.push_screen(HelpScreen(help_sections(self.COMMAND_PALETTE_BINDING), readonly=self.data.readonly,
                                        code=self.data.code))

    def action_schedules(self) -> None:
        """Show the schedules (their next runs; pause, resume, trigger)."""
        if not isinstance(self.screen, SchedulesScreen) and not self.screen.is_modal and not self.exiting:
            self.push_screen(SchedulesScreen(self.data))

    def action_goto(self) -> None:
        """Ask for a workflow id and open it."""
        def opened(workflow_id: str | None) -> None:
            if workflow_id:
                self.open_workflow(workflow_id, jump=True)

        if not self.exiting:
            self.push_screen(GoToDialog(), opened)

