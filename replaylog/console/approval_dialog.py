"""The approval dialog: one dialog to approve or reject the request a workflow waits on, with a note."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, Static

from replaylog.console.data import ApprovalRefused, ConsoleData
from replaylog.console.format import text
from replaylog.console.key_footer import KeyFooter
from replaylog.console.write_dialog import WriteDialog
from replaylog.engine.text import preview


class ApprovalDialog(WriteDialog[tuple[str, str, bool] | None]):
    """Answer one approval request through the data layer (the store's `answer_approval`, as `replaylog approve`).

    The request id shown is bound to the answer: if the workflow has moved on to another
    request meanwhile, the store refuses it and the refusal is shown in place. One dialog
    holds both answers (Approve, Reject) so that neither takes a key of its own on the
    workflow screen, where `x` is cancel. Dismisses with (workflow id, request id,
    approved) once the store accepted it.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Cancel", tooltip="close without answering"),
        Binding("ctrl+y", "answer(True)", "Approve", tooltip="approve the request, with the note"),
        Binding("ctrl+r", "answer(False)", "Reject", tooltip="reject the request, with the note"),
    ]

    def __init__(self, data: ConsoleData, workflow_id: str, request: dict[str, Any]) -> None:
        super().__init__()
        self.data = data
        self.workflow_id = workflow_id
        self.request = request

    def compose(self) -> ComposeResult:
        """What is asked, a note, the answer's buttons."""
        title = Text("Approval ")
        title.append_text(text(str(self.request.get("action")), "bold"))
        title.append(f"  (request {self.request.get('request')} of ")
        title.append_text(text(self.workflow_id, "bold"))
        title.append(")")
        with Vertical(id="approval-dialog", classes="dialog"):
            yield Static(title, classes="dialog-title")
            yield Static(text(preview(self.request.get("details"), 400)), id="approval-details")
            yield Label("note (optional), sent with either answer")
            yield Input(placeholder="a note the workflow receives", id="approval-note")
            yield Static(id="refusal")
            with Horizontal(id="approval-buttons"):
                yield Button("Approve  ctrl+y", id="approve", variant="success")
                yield Button("Reject  ctrl+r", id="reject", variant="error")
                yield Button("Cancel  esc", id="close")
        yield KeyFooter()

    def on_mount(self) -> None:
        """Start in the note."""
        self.query_one("#approval-note", Input).focus()

    @on(Button.Pressed, "#approve")
    def _approve_pressed(self, _event: Button.Pressed) -> None:
        self.action_answer(True)

    @on(Button.Pressed, "#reject")
    def _reject_pressed(self, _event: Button.Pressed) -> None:
        self.action_answer(False)

    def _buttons(self, disabled: bool) -> None:
        for button in self.query("#approval-buttons Button").results(Button):
            if button.id != "close":
                button.disabled = disabled

    def action_answer(self, approve: bool) -> None:
        """Send the answer (approve or reject) through the store, off the UI thread; one at a time."""
        if self.writing:
            return
        self._buttons(True)
        wid, request = self.workflow_id, str(self.request.get("request"))
        note = self.query_one("#approval-note", Input).value or None

        def answer() -> tuple[str, str, bool]:  # closes with (workflow id, request id, the answer)
            self.data.answer_approval(wid, request, approved=approve, note=note)
            return wid, request, approve

        self._write(answer, ApprovalRefused)

    def _give_back(self) -> None:
        self._buttons(False)
