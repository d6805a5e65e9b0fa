"""TableScreen: a live screen of one short table (a title line, the table, a line under it, the footer)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from replaylog.console.key_footer import KeyFooter
from replaylog.console.live_screen import LiveScreen
from replaylog.engine.text import printable


class TableScreen(LiveScreen):
    """A screen whose whole content is one table, re-read on each commit (the schedules, one run's slots)."""

    COLUMNS: ClassVar[tuple[str, ...]] = ()

    def compose(self) -> ComposeResult:
        """A title line (#topbar), the table, a line under it (#pageinfo), the footer."""
        yield Static(id="topbar")
        yield DataTable(cursor_type="row")
        yield Static(id="pageinfo")
        yield KeyFooter()

    def heading(self) -> str:
        """The title line before the first read ("" for none)."""
        return ""

    def on_mount(self) -> None:
        """The title, the columns, the first read (Textual calls this once, as a handler, whatever subclasses)."""
        self.query_one("#topbar", Static).update(Text(printable(self.heading(), oneline=True), style="bold"))
        table = self.query_one(DataTable)
        for column in self.COLUMNS:
            table.add_column(column, key=column)
        self.reload()
        table.focus()

    def say(self, line: str, style: str = "") -> None:
        """Show one line under the table."""
        self.query_one("#pageinfo", Static).update(Text(printable(line, oneline=True), style))

    def on_live_screen_load_failed(self, message: LiveScreen.LoadFailed) -> None:
        """Say why the read failed; the next change tries again."""
        self.say(f"cannot read the database: {message.reason}", "red")
        self.read_done()

    def action_back(self) -> None:
        """Back to the screen below."""
        self.app.pop_screen()
