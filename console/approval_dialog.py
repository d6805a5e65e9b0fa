"""The approval dialog: approve or reject the request a workflow waits on, with a note."""

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
    request meanwhile, the store refuses it and the refusal is shown in place. Dismisses
    with (workflow id, request id, approved) once the store accepted it.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", tooltip="cancel"),
        Binding("ctrl+s", "answer", "Answer", tooltip="send the answer"),
    ]

    class Answered(Message):
        """The store recorded the answer."""

    class Refused(Message):
        """The store refused the answer, writing nothing."""

        def __init__(self, reason: str) -> None:
            super().__init__()
            self.reason = reason

    def __init__(self, data: ConsoleData, workflow_id: str, request: dict[str, Any], approve: bool) -> None:
        super().__init__()
        self.data = data
        self.workflow_id = workflow_id
        self.request = request
        self.approve = approve
        self.sending = False

    def compose(self) -> ComposeResult:
        """What is asked, a note, the answer's buttons."""
        verb = "Approve" if self.approve else "Reject"
        title = Text(f"{verb} ")
        title.append_text(text(str(self.request.get("action")), "bold"))
        title.append(f"  (request {self.request.get('request')} of ")
        title.append_text(text(self.workflow_id, "bold"))
        title.append(")")
        with Vertical(id="approval-dialog", classes="dialog"):
            yield Static(title, classes="dialog-title")
            yield Static(text(preview(self.request.get("details"), 400)), id="approval-details")
            yield Label("note (optional)")
            yield Input(placeholder="a note the workflow receives", id="approval-note")
            yield Static(id="refusal")
            with Horizontal(id="approval-buttons"):
                yield Button(f"{verb}  ctrl+s", id="answer", variant="primary" if self.approve else "error")
                yield Button("Cancel  esc", id="cancel")
        yield Footer()

    def on_mount(self) -> None:
        """Start in the note."""
        self.query_one("#approval-note", Input).focus()

    @on(Input.Submitted, "#approval-note")
    def _note_submitted(self, _event: Input.Submitted) -> None:
        self.action_answer()

    @on(Button.Pressed, "#answer")
    def _answer_pressed(self, _event: Button.Pressed) -> None:
        self.action_answer()

    @on(Button.Pressed, "#cancel")
    def _cancel_pressed(self, _event: Button.Pressed) -> None:
        self.action_cancel()

    def action_cancel(self) -> None:
        """Close without answering."""
        self.dismiss(None)

    def action_answer(self) -> None:
        """Send the answer through the store, off the UI thread."""
        if self.sending:
            return
        self.sending = True
        self.query_one("#answer", Button).disabled = True
        self._send(self.query_one("#approval-note", Input).value or None)

    @work(thread=True, group="approval", exit_on_error=False)
    def _send(self, note: str | None) -> None:
        try:
            self.data.answer_approval(self.workflow_id, str(self.request.get("request")), approved=self.approve,
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
        self.query_one("#answer", Button).disabled = False
