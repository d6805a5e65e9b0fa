"""A small dialog asking for a workflow id."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from replaylog.console.key_footer import KeyFooter


class GoToDialog(ModalScreen[str | None]):
    """Type an id, enter opens it, esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def compose(self) -> ComposeResult:
        """A title and one input."""
        with Vertical(id="goto-dialog", classes="dialog"):
            yield Static(Text("Go to workflow id", style="bold"), classes="dialog-title")
            yield Input(placeholder="workflow id", id="goto-id")
            yield Static(Text("enter: open   esc: cancel   (ctrl+p searches ids as you type)", style="dim"))
        # The modal's own keys: the footer of the screen beneath would name keys that do nothing here.
        yield KeyFooter()

    @on(Input.Submitted, "#goto-id")
    def _submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        """Close without going anywhere."""
        self.dismiss(None)
