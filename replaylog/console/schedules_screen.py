"""The schedules screen: every cron schedule with its next run; pause, resume or trigger the one under the cursor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable

from replaylog.console.data import ActionRefused, ConsoleData, ListedSchedule
from replaylog.console.format import text
from replaylog.console.table_screen import TableScreen
from replaylog.engine.text import printable, utc

COLUMNS = ("name", "workflow", "cron", "time zone", "next run (UTC)", "overlap", "catch-up", "last started")


class SchedulesScreen(TableScreen):
    """Every schedule (a short list: all of it on one table), re-read on each commit."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="back to the workflows"),
        Binding("p", "pause_schedule", "Pause", tooltip="pause the schedule under the cursor: its ticks start nothing"),
        Binding("u", "resume_schedule", "Resume",
                tooltip="resume the schedule under the cursor from its next tick after now"),
        Binding("t", "trigger_schedule", "Trigger", tooltip="start the workflow of the schedule under the cursor now"),
    ]

    @dataclass
    class Loaded(Message):
        """The schedules were read."""

        rows: list[ListedSchedule]

    @dataclass
    class Acted(Message):
        """A pause, resume or trigger was done (`said`) or refused (`refused`)."""

        said: str | None
        refused: str | None

    COLUMNS = COLUMNS

    def __init__(self, data: ConsoleData) -> None:
        super().__init__(data)
        self.rows: list[ListedSchedule] = []

    def heading(self) -> str:
        """The title line."""
        return f"Schedules · {self.data.label}"

    def read(self) -> None:
        """Re-read every schedule."""
        self._fetch()

    @work(thread=True, group="schedules", exit_on_error=False)
    def _fetch(self) -> None:
        try:
            rows = self.data.schedules()
        except Exception as exc:  # noqa: BLE001 - shown to the operator, not raised
            self.post_message(self.LoadFailed(str(exc)))
            return
        self.post_message(self.Loaded(rows))

    def on_schedules_screen_loaded(self, message: Loaded) -> None:
        """Draw the schedules, keeping the cursor on the same one."""
        table = self.query_one(DataTable)
        current = self.current
        self.rows = message.rows
        table.clear()
        for r in message.rows:
            table.add_row(text(r.name), text(r.workflow), text(r.cron), text(r.timezone),
                          Text("paused", style="yellow") if r.next_at is None else text(utc(r.next_at)),
                          text(r.overlap), text(r.catch_up), text(r.last_id or "—"), key=r.name)
        if current is not None and any(r.name == current for r in message.rows):
            table.move_cursor(row=table.get_row_index(current))
        self.say("no schedules: add one with `replaylog schedule add` or @workflow(schedule=...)" if not message.rows
                 else f"{len(message.rows)} schedule(s)")
        self.read_done()

    @property
    def current(self) -> str | None:
        """The name of the schedule under the cursor, if any."""
        table = self.query_one(DataTable)
        if not self.rows or table.cursor_row < 0 or table.cursor_row >= len(self.rows):
            return None
        return self.rows[table.cursor_row].name

    # -- actions

    def action_pause_schedule(self) -> None:
        """Pause the schedule under the cursor."""
        self._act(self.data.pause_schedule)

    def action_resume_schedule(self) -> None:
        """Resume the schedule under the cursor."""
        self._act(self.data.resume_schedule)

    def action_trigger_schedule(self) -> None:
        """Start the workflow of the schedule under the cursor now."""
        self._act(self.data.trigger_schedule)

    def _act(self, act: Callable[[str], str]) -> None:
        name = self.current
        if name is None:
            self.notify("no schedule under the cursor", severity="warning", markup=False)
            return
        if self.data.readonly:
            self.notify("the console is read-only: no write actions", severity="error", markup=False)
            return
        self._run(act, name)

    @work(thread=True, group="schedule-action", exit_on_error=False)
    def _run(self, act: Callable[[str], str], name: str) -> None:
        try:
            self.post_message(self.Acted(act(name), None))
        except ActionRefused as exc:
            self.post_message(self.Acted(None, str(exc)))

    def on_schedules_screen_acted(self, message: Acted) -> None:
        """Say what was done, or why not; read the schedules again."""
        if message.refused is not None:
            self.notify(printable(message.refused), title="Refused", severity="error", markup=False)
        else:
            self.notify(printable(message.said or ""), title="Done", markup=False)
        self.reload()
