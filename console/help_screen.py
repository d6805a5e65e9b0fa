"""The `?` help: every key the console answers to."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

# (where, key, what): the README's key map is this table.
KEYMAP: tuple[tuple[str, str, str], ...] = (
    ("everywhere", "?", "this help"),
    ("everywhere", "q", "quit"),
    ("everywhere", "esc", "back / close / clear the filter"),
    ("everywhere", "ctrl+p", "command palette: go to workflow id, filter by status, change theme"),
    ("everywhere", "g", "go to a workflow by id"),
    ("everywhere", "j / k, ↑ / ↓", "move; past the end of a page loads the next page"),
    ("everywhere", "home / end", "first / last row of the page"),
    ("everywhere", "enter", "open the workflow, slot or signal under the cursor"),
    ("workflows", "/", "filter by id or workflow name"),
    ("workflows", "0 1 2 3 4 5", "all, pending, running, blocked, completed, failed"),
    ("workflows", "o / r", "sort by the next column, ascending / reverse (or click a column header)"),
    ("workflows", "] / [", "next / previous page"),
    ("workflows", "s", "send a signal to the workflow under the cursor (not with --readonly)"),
    ("workflow", "1 2 3", "slots, signals, diagnosis tab"),
    ("workflow", "s", "send a signal (not with --readonly)"),
    ("workflow", "c", "check: dry-replay the history against the code"),
    ("workflow", "v", "the workflow's input, result and error in full"),
    ("workflow", "] / [", "next / previous page of the slots or signals in view"),
    ("signal dialog", "ctrl+s / esc", "send / cancel"),
)


class HelpScreen(ModalScreen[None]):
    """The key map; esc, q or ? closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
        Binding("question_mark", "dismiss", "Close", show=False),
    ]

    def __init__(self, *, readonly: bool = False, code: str | None = None) -> None:
        """A key map for this console: read-only or not, and the workflow code it loaded (None: none)."""
        super().__init__()
        self.readonly = readonly
        self.code = code

    def _describe(self, key: str, what: str) -> str:
        if key == "c":
            # Which code a check replays depends on how the console was started (--app, the demo's app).
            return f"{what} ({self.code})" if self.code else f"{what} (none loaded: use --app)"
        return what

    def compose(self) -> ComposeResult:
        """The key table."""
        # Two columns under a heading per screen: a "where" column cost 17 cells a line,
        # which wrapped most descriptions on an 80-column terminal.
        table = Table(box=None, padding=(0, 2), show_header=False)
        table.add_column("key", style="bold cyan", no_wrap=True)
        table.add_column("does")
        group = None
        for where, key, what in KEYMAP:
            if self.readonly and key == "s":
                continue  # a read-only console has no write action to describe
            if where != group:
                group = where
                table.add_row(Text(where, style="bold underline default"), "")
            table.add_row(key, Text(self._describe(key, what)))
        with Vertical(id="help-dialog", classes="dialog"):
            yield Static(Text("Keys", style="bold"), classes="dialog-title")
            with VerticalScroll(id="help-keys"):
                yield Static(table)
            yield Static(Text("Mouse: click a row to select it, a header to sort.   ↑ ↓ scroll   esc close",
                              style="dim"))
        # The modal's own keys: the footer of the screen beneath would name keys that do nothing here.
        yield Footer()

    def on_mount(self) -> None:
        """Arrow keys scroll the key list (it scrolls on a short terminal)."""
        self.query_one("#help-keys").focus()
