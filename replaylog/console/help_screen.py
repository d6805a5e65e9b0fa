"""The `?` help: every key the console answers to, generated from the screens' bindings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from replaylog.console.data import WRITE_ACTIONS
from replaylog.console.key_footer import KeyFooter

# (heading, bindings): a binding with a tooltip is a help row (the footer shows the same text
# when the mouse rests on its key); bindings that share a tooltip share a row ("0 1 2 3 4 5").
HelpSection = tuple[str, Sequence[BindingType]]


def help_rows(sections: Sequence[HelpSection], key_display: object, *, readonly: bool = False,
              code: str | None = None) -> list[tuple[str, list[tuple[str, str]]]]:
    """(heading, [(keys, what)]) per section, from the bindings' tooltips.

    Args:
        sections: the bindings of each screen, under a heading.
        key_display: `App.get_key_display`, so keys read as the footer shows them.
        readonly: leave out the write actions (a read-only console has none).
        code: the workflow code `c` checks against (None: none loaded).
    """
    out: list[tuple[str, list[tuple[str, str]]]] = []
    for heading, bindings in sections:
        rows: dict[str, list[str]] = {}
        checks: set[str] = set()  # the tooltips of the check action
        for binding in Binding.make_bindings(bindings):
            if not binding.tooltip or (readonly and binding.action in WRITE_ACTIONS):
                continue
            if binding.action == "check":
                checks.add(binding.tooltip)
            keys = rows.setdefault(binding.tooltip, [])
            shown = key_display(binding)  # type: ignore[operator]
            if shown not in keys:
                keys.append(shown)
        described = []
        for what, keys in rows.items():
            if what in checks:
                # Which code a check replays depends on how the console was started (--app, the demo's app).
                what = f"{what} ({code})" if code else f"{what} (none loaded: use --app)"
            described.append((" ".join(keys), what))
        out.append((heading, described))
    return out


class HelpScreen(ModalScreen[None]):
    """The key map; esc, q or ? closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
        Binding("question_mark", "dismiss", "Close", show=False),
    ]

    def __init__(self, sections: Sequence[HelpSection], *, readonly: bool = False, code: str | None = None) -> None:
        """A key map of these sections, for a console that is read-only or not and loaded `code` (or none)."""
        super().__init__()
        self.sections = sections
        self.readonly = readonly
        self.code = code

    def compose(self) -> ComposeResult:
        """The key table."""
        # Two columns under a heading per screen: a "where" column cost 17 cells a line,
        # which wrapped most descriptions on an 80-column terminal.
        table = Table(box=None, padding=(0, 2), show_header=False)
        table.add_column("key", style="bold cyan", no_wrap=True)
        table.add_column("does")
        for heading, rows in help_rows(self.sections, self.app.get_key_display, readonly=self.readonly,
                                       code=self.code):
            table.add_row(Text(heading, style="bold underline default"), "")
            for keys, what in rows:
                table.add_row(Text(keys), Text(what))
        with Vertical(id="help-dialog", classes="dialog"):
            yield Static(Text("Keys", style="bold"), classes="dialog-title")
            with VerticalScroll(id="help-keys"):
                yield Static(table)
            yield Static(Text("Mouse: click a row to select it, a header to sort.   ↑ ↓ scroll   esc close",
                              style="dim"))
        # The modal's own keys: the footer of the screen beneath would name keys that do nothing here.
        yield KeyFooter()

    def on_mount(self) -> None:
        """Arrow keys scroll the key list (it scrolls on a short terminal)."""
        self.query_one("#help-keys").focus()
