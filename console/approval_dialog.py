"""The approval dialog: one dialog to approve or reject the request a workflow waits on, with a note."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Input, Label, Static

from console.data import ApprovalRefused, ConsoleData
from console.format import text
from engine.text import preview, printable


class ApprovalDialog(ModalScreen[tuple[str, str, bool] | None]):
    """Answer one approval request through the data layer (the store's `answer_approval`, as `replaylog approve`).

    The request id shown is bound to the answer: if the workflow has moved on to another
    request meanwhile, the store refuses it and the refusal is shown in place. One dialog
    holds both answers (Approve, Reject) so that neither takes a key of its own on the
    workflow screen, where `x` is cancel. Dismisses with (workflow id, request id,
    approved) once the store accepted it.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", tooltip="close without answering"),
        Binding("ctrl+y", "answer(True)", "Approve", tooltip="approve the request, with the note"),
        Binding("ctrl+r", "answer(False)", "Reject", tooltip="reject the request, with the note"),
    ]

    class Answered(Message):
        """The store recorded the answer."""

    class Refused(Message):
        """The store refused the answer, writing nothing."""

        def __init__(self, reason: str) -> None:
            super().__init__()
            self.reason = reason

    def __init__(self, data: ConsoleData, workflow_id: str, request: dict[str, Any]) -> None:
        super().__init__()
        self.data = data
        self.workflow_id = workflow_id
        self.request = request
        self.approve = True  # the answer being sent (set by action_answer)
        self.sending = False

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
                yield Button("Cancel  esc", id="cancel")
        yield Footer()

    def on_mount(self) -> None:
        """Start in the note."""
        self.query_one("#approval-note", Input).focus()

    @on(Button.Pressed, "#approve")
    def _approve_pressed(self, _event: Button.Pressed) -> None:
        self.action_answer(True)

    @on(Button.Pressed, "#reject")
    def _reject_pressed(self, _event: Button.Pressed) -> None:
        self.action_answer(False)

    @on(Button.Pressed, "#cancel")
    def _cancel_pressed(self, _event: Button.Pressed) -> None:
        self.action_cancel()

    def action_cancel(self) -> None:
        """Close without answering."""
        self.dismiss(None)

    def _buttons(self, disabled: bool) -> None:
        for button in self.query("#approval-buttons Button").results(Button):
            if button.id != "cancel":
                button.disabled = disabled

    def action_answer(self, approve: bool) -> None:
        """Send the answer (approve or reject) through the store, off the UI thread; one at a time."""
        if self.sending:
            return
        self.sending = True
        self.approve = approve
        self._buttons(True)
        self._send(approve, self.query_one("#approval-note", Input).value or None)

    @work(thread=True, group="approval", exit_on_error=False)
    def _send(self, approve: bool, note: str | None) -> None:
        try:
            self.data.answer_approval(self.workflow_id, str(self.request.get("request")), approved=approve,
                                      note=note)
        except ApprovalRefused as exc:
            self.post_message(self.Refused(str(exc)))
            return
        self.post_message(self.Answered())

    def on_approval_dialog_answered(self, _message: Answered) -> None:
        """Done: close with the answer."""
        self.dismiss((self.workflow_id, str(self.request.get("request")), self.approve))

    def on_approval_dialog_refused(self, message: Refused) -> None:
        """Show the store's refusal where the operator is looking."""
        self.sending = False
        self.query_one("#refusal", Static).update(Text(f"refused: {printable(message.reason)}", style="bold red"))
        self._buttons(False)
