"""The operator-action dialog: what an action will do, an optional reason, confirm; the write off the UI thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, Static

from replaylog.console.data import ActionRefused
from replaylog.console.key_footer import KeyFooter
from replaylog.console.write_dialog import WriteDialog


class ActionDialog(WriteDialog[str | None]):
    """Confirm one operator action (cancel, terminate, retry, fork) and take it through the data layer.

    Dismisses with the line saying what was done once the store took the action; a
    refusal (the workflow finished meanwhile, say) is shown in place and nothing is written.

    Args:
        title: what the action is, naming the workflow.
        body: what it will do (the dry-replay verdict, the activities that run again, …).
        confirm: the confirm button's label.
        act: takes the action (given the reason typed, "" if none); returns the line to
            show; raises ActionRefused with the one line to show instead. Runs on a thread.
        ask_reason: offer a reason field.
        allowed: False when the action may not be taken (the verdict refuses it): no confirm button.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Back", tooltip="close without acting"),
        Binding("ctrl+s", "confirm", "Confirm", tooltip="confirm"),
    ]

    def __init__(self, title: Text, body: Text, confirm: str, act: Callable[[str], str], *,
                 ask_reason: bool = False, allowed: bool = True) -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.confirm_label = confirm
        self.act = act
        self.ask_reason = ask_reason
        self.allowed = allowed

    def compose(self) -> ComposeResult:
        """Title, what it does, the reason field, the refusal line, buttons."""
        with Vertical(id="action-dialog", classes="dialog"):
            yield Static(self.title_text, classes="dialog-title")
            yield Static(self.body, id="action-body")
            if self.ask_reason:
                yield Label("reason (optional)")
                yield Input(placeholder="why: kept with the workflow", id="reason")
            yield Static(id="refusal")
            with Horizontal(id="action-buttons"):
                if self.allowed:
                    yield Button(f"{self.confirm_label}  ctrl+s", id="confirm", variant="error")
                yield Button("Back  esc", id="close")
        yield KeyFooter()

    def on_mount(self) -> None:
        """Start in the reason field, else on Back: a stray enter must not act."""
        if self.ask_reason:
            self.query_one("#reason", Input).focus()
        else:
            self.query_one("#close", Button).focus()

    @on(Button.Pressed, "#confirm")
    def _confirm_pressed(self, _event: Button.Pressed) -> None:
        self.action_confirm()

    @on(Input.Submitted, "#reason")
    def _reason_submitted(self, _event: Input.Submitted) -> None:
        self.query_one("#confirm", Button).focus()  # enter moves to the button; a second enter confirms

    def action_confirm(self) -> None:
        """Take the action, off the UI thread."""
        if not self.allowed or self.writing:
            return
        self.query_one("#confirm", Button).disabled = True
        reason = self.query_one("#reason", Input).value.strip() if self.ask_reason else ""
        self._write(lambda: self.act(reason), ActionRefused)

    def _give_back(self) -> None:
        self.query_one("#confirm", Button).disabled = False
