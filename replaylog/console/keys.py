"""The console's keys, gathered for the `?` help and for docs/console.md.

Every key is typed once, in a binding: the screens' own, and the app's here
(`APP_BINDINGS`). `help_sections()` gathers them under a heading per screen; the help
screen shows them, and `python -m console.keys` prints them as a Markdown table
(`--write docs/console.md` puts it between the file's `<!-- keys:start -->` and
`<!-- keys:end -->` markers). tests/test_docs_tables.py checks that docs/console.md holds
what this prints. This module does not import the app (no console module does).
"""

from __future__ import annotations

import sys
from pathlib import Path

from textual.app import App
from textual.binding import Binding, BindingType

from replaylog.console.action_dialog import ActionDialog
from replaylog.console.approval_dialog import ApprovalDialog
from replaylog.console.help_screen import HelpSection, help_rows
from replaylog.console.paged_table import PagedTable
from replaylog.console.run_screen import RunScreen
from replaylog.console.schedules_screen import SchedulesScreen
from replaylog.console.signal_dialog import SignalDialog
from replaylog.console.slot_screen import SlotScreen
from replaylog.console.workflow_screen import WorkflowScreen
from replaylog.console.workflows_screen import WorkflowsScreen

APP_BINDINGS: list[BindingType] = [
    Binding("q", "quit", "Quit", tooltip="quit"),
    Binding("question_mark", "help", "Help", key_display="?", tooltip="this help"),
    Binding("g", "goto", "Go to id", tooltip="go to a workflow by id"),
    Binding("S", "schedules", "Schedules", key_display="S", show=False,
            tooltip="the schedules: next runs; pause, resume, trigger"),
]
PALETTE_HELP = "command palette: go to workflow id, filter by status, change theme"
START = "<!-- keys:start -->"
END = "<!-- keys:end -->"


def help_sections(palette_key: str = App.COMMAND_PALETTE_BINDING) -> list[HelpSection]:
    """Every screen's key bindings under a heading (the palette's key is the app's setting)."""
    palette = Binding(palette_key, "command_palette", tooltip=PALETTE_HELP)
    return [("everywhere", [*APP_BINDINGS, palette, *PagedTable.BINDINGS]),
            ("workflows", WorkflowsScreen.BINDINGS), ("workflow", WorkflowScreen.BINDINGS),
            ("value view", SlotScreen.BINDINGS), ("run", RunScreen.BINDINGS), ("schedules", SchedulesScreen.BINDINGS),
            ("signal dialog", SignalDialog.BINDINGS), ("action dialog", ActionDialog.BINDINGS),
            ("approval dialog", ApprovalDialog.BINDINGS)]


def markdown() -> str:
    """The key table: one row per described binding (keys sharing a description share a row)."""
    # get_key_display formats a binding as the footer shows it; the console does not change it.
    display = App[None]().get_key_display
    lines = ["| where | keys | does |", "| --- | --- | --- |"]
    for heading, rows in help_rows(help_sections(), display, code="the code given with --app"):
        for keys, what in rows:
            shown = " ".join(f"`{k}`" for k in keys.split(" "))
            cell = what.replace("|", r"\|")
            lines.append(f"| {heading} | {shown} | {cell} |")
    return "\n".join(lines) + "\n"


def with_table(text: str, table: str) -> str:
    """`text` with the part between the markers replaced by `table`."""
    head, found, rest = text.partition(START)
    _, found_end, tail = rest.partition(END)
    if not found or not found_end:
        raise ValueError(f"the markers {START} and {END} are missing")
    return f"{head}{START}\n{table}{END}{tail}"


def main(argv: list[str]) -> None:
    """Print the table, or write it into the file given after --write."""
    if argv[:1] == ["--write"] and len(argv) == 2:
        path = Path(argv[1])
        path.write_text(with_table(path.read_text(encoding="utf-8"), markdown()), encoding="utf-8")
    elif not argv:
        sys.stdout.write(markdown())
    else:
        sys.exit("usage: python -m console.keys [--write FILE]")


if __name__ == "__main__":
    main(sys.argv[1:])
