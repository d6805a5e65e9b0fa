"""The run screen: the slots of one run of a workflow that continued as new (ctx.continue_as_new)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable, Static

from replaylog.console.data import SLOT_PAGE, ConsoleData, Slot
from replaylog.console.format import text
from replaylog.console.table_screen import TableScreen
from replaylog.engine.text import preview, printable, utc

COLUMNS = ("slot", "kind", "name", "ok", "value / error", "attempts", "recorded (UTC)")


class RunScreen(TableScreen):
    """One run's slots (the first page of them); `[` and `]` step to the run before or after.

    Args:
        data: the console's data layer.
        workflow_id: the workflow.
        runs: its runs as the workflow screen read them: (run, slots, ended_at or None), oldest first.
        run: the run to show first.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="back to the workflow (its latest run)"),
        Binding("left_square_bracket", "step(-1)", "Earlier run", key_display="[",
                tooltip="the run before / after this one"),
        Binding("right_square_bracket", "step(1)", "Later run", key_display="]",
                tooltip="the run before / after this one"),
    ]

    @dataclass
    class Loaded(Message):
        """A run's slots were read."""

        run: int
        slots: tuple[Slot, ...]

    COLUMNS = COLUMNS

    def __init__(self, data: ConsoleData, workflow_id: str, runs: tuple[tuple[int, int, float | None], ...],
                 run: int) -> None:
        super().__init__(data)
        self.workflow_id = workflow_id
        self.runs = runs
        self.run = run

    def read(self) -> None:
        """Read the run on screen."""
        self._fetch(self.run)

    @work(thread=True, group="run", exit_on_error=False)
    def _fetch(self, run: int) -> None:
        try:
            slots = self.data.run_slots(self.workflow_id, run)
        except Exception as exc:  # noqa: BLE001 - shown to the operator, not raised
            self.post_message(self.LoadFailed(str(exc)))
            return
        self.post_message(self.Loaded(run, slots))

    def on_run_screen_loaded(self, message: Loaded) -> None:
        """Draw the run's slots, if it is still the run asked for."""
        if message.run != self.run:
            self._dirty = True
            self.read_done()
            return
        number, total, ended = next(r for r in self.runs if r[0] == self.run)
        last = self.runs[-1][0]
        when = "the current run" if ended is None else f"ended {utc(ended)} (continued as new)"
        self.query_one("#topbar", Static).update(
            Text(printable(f"{self.workflow_id} · run {number} of {last} · {when}", oneline=True), style="bold"))
        table = self.query_one(DataTable)
        table.clear()
        for s in message.slots:
            table.add_row(text(s.slot), text(s.kind), text(s.name),
                          Text("ok", style="green") if s.ok else Text("failed", style="red"),
                          text(preview(s.value, 80) if s.ok else (s.error or "")), text(s.attempts),
                          text(utc(s.recorded_at, "short")))
        shown = len(message.slots)
        more = (f"; the first {SLOT_PAGE} shown (replaylog show {self.workflow_id} --run {number} has all)"
                if total > shown else "")
        self.say(f"{total} slot(s){more}")
        self.read_done()

    def action_step(self, delta: int) -> None:
        """Show the run before (-1) or after (+1) this one, if there is one."""
        numbers = [r[0] for r in self.runs]
        at = numbers.index(self.run) + delta
        if 0 <= at < len(numbers):
            self.run = numbers[at]
            self.reload()
