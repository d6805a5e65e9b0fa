"""The transcript: a workflow's slots as a conversation (model and tool calls, approvals, children)."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Static

from replaylog.console.data import TRANSCRIPT_SLOTS, ConsoleData, TranscriptEntry
from replaylog.console.format import text, titled
from replaylog.console.key_footer import KeyFooter
from replaylog.engine.text import printable
from replaylog.engine.vocab import Group

# Each transcript group's mark in the margin.
MARKS = {Group.CALL: "▸", Group.APPROVAL: "?", Group.CHILD: "⇢", Group.CLOCK: "◷", Group.OTHER: "·"}
PARALLEL_MARK = "‖"  # a task of a ctx.parallel group; the group opens with a "in parallel" line


class TranscriptScreen(ModalScreen[None]):
    """One workflow's transcript, read in a thread; esc closes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close", tooltip="close"),
        Binding("q", "dismiss", "Close", show=False, tooltip="close"),
    ]

    class Loaded(Message):
        """The transcript was read."""

        def __init__(self, entries: list[TranscriptEntry], total: int) -> None:
            super().__init__()
            self.entries = entries
            self.total = total

    class Failed(Message):
        """The read failed; the reason is shown in place."""

        def __init__(self, reason: str) -> None:
            super().__init__()
            self.reason = reason

    def __init__(self, data: ConsoleData, workflow_id: str) -> None:
        super().__init__()
        self.data = data
        self.workflow_id = workflow_id

    def compose(self) -> ComposeResult:
        """Title and the conversation."""
        with Vertical(id="transcript-dialog", classes="dialog"):
            yield Static(titled("transcript of ", self.workflow_id), classes="dialog-title")
            with VerticalScroll():
                yield Static(Text("reading…", style="dim"), id="transcript")
        yield KeyFooter()

    def on_mount(self) -> None:
        """Read the transcript."""
        self._fetch()

    @work(thread=True, group="transcript", exit_on_error=False)
    def _fetch(self) -> None:
        try:
            entries, total = self.data.transcript(self.workflow_id)
        except Exception as exc:  # noqa: BLE001 - shown to the operator, not raised
            self.post_message(self.Failed(str(exc)))
            return
        self.post_message(self.Loaded(entries, total))

    def on_transcript_screen_loaded(self, message: Loaded) -> None:
        """Draw the conversation: one row per slot, stored text never parsed as markup."""
        grid = Table.grid(padding=(0, 1))
        grid.add_column(justify="right", style="dim", no_wrap=True)
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        group = None
        for e in message.entries:
            if e.parallel_group is not None and e.parallel_group != group:
                # Each group opens with its own line: two groups back to back read as two.
                grid.add_row("", PARALLEL_MARK, Text("in parallel:", style="dim italic"))
            group = e.parallel_group
            line = text(e.title, "bold" if e.group in (Group.APPROVAL, Group.CHILD) else "")
            line.append("  →  ", style="dim")
            line.append_text(text(e.outcome, "" if e.ok else "red"))
            # Wrapped, never cut: what came of a call (an approval's answer and its note) is
            # the part an operator reads the transcript for, and it comes last on the line.
            line.no_wrap, line.overflow = False, "fold"
            grid.add_row(str(e.slot), PARALLEL_MARK if e.parallel_group is not None else MARKS[e.group], line)
        if not message.entries:
            grid.add_row("", "", Text("no slots recorded yet", style="dim"))
        if message.total > TRANSCRIPT_SLOTS:
            grid.add_row("", "", Text(f"the first {TRANSCRIPT_SLOTS} of {message.total} slots", style="dim"))
        self.query_one("#transcript", Static).update(grid)

    def on_transcript_screen_failed(self, message: Failed) -> None:
        """Show why the read failed."""
        self.query_one("#transcript", Static).update(Text(printable(message.reason), style="bold red"))
