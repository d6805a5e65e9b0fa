"""The base of the dialogs that write through the store: a signal, an approval's answer, an operator action."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from rich.text import Text
from textual import on, work
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from replaylog.engine.text import printable

T = TypeVar("T")


class WriteDialog(ModalScreen[T]):
    """A modal dialog whose one write goes to the store off the UI thread.

    `writing` is True from the key or click that starts the write until the store
    answers. A refusal (the store wrote nothing) is posted as `Refused`, shown in the
    dialog's `#refusal` line, and the dialog's buttons are given back (`_give_back`).
    Once the store wrote it, the dialog posts `Written` with what it dismisses with.
    Its `#close` button, and esc bound to `close`, close it without writing.
    """

    @dataclass
    class Written(Message):
        """The store made the write: the dialog closes with `answer`."""

        answer: Any

    @dataclass
    class Refused(Message):
        """The store refused the write, writing nothing."""

        reason: str

    def __init__(self) -> None:
        super().__init__()
        self.writing = False

    @on(Button.Pressed, "#close")
    def _close_pressed(self, _event: Button.Pressed) -> None:
        self.action_close()

    def action_close(self) -> None:
        """Close without writing."""
        self.dismiss(None)

    def _write(self, write: Callable[[], Any], refused: type[Exception]) -> None:
        """Make the store write `write()` off the UI thread, unless a write is under way.

        What `write` returns is what the dialog closes with; a `refused` exception (the
        data layer's one line) is shown instead and the dialog stays open.
        """
        if self.writing:
            return
        self.writing = True
        self._write_off_thread(write, refused)

    @work(thread=True, group="write", exit_on_error=False)
    def _write_off_thread(self, write: Callable[[], Any], refused: type[Exception]) -> None:
        try:
            answer = write()
        except refused as exc:
            self.post_message(self.Refused(str(exc)))
            return
        self.post_message(self.Written(answer))

    def _give_back(self) -> None:
        """After a refusal: enable again what the operator may press."""

    def on_write_dialog_written(self, message: Written) -> None:
        """Done: close with the answer."""
        self.dismiss(message.answer)

    def on_write_dialog_refused(self, message: Refused) -> None:
        """Show the store's refusal where the operator is looking."""
        self.writing = False
        self.query_one("#refusal", Static).update(Text(f"refused: {printable(message.reason)}", style="bold red"))
        self._give_back()
