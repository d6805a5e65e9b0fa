"""The send-signal dialog: a name, a JSON payload validated as you type, confirm."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, Static, TextArea

from replaylog.console.data import ConsoleData, SignalRefused, signal_name_refusal
from replaylog.console.format import titled
from replaylog.console.key_footer import KeyFooter
from replaylog.console.write_dialog import WriteDialog


class SignalDialog(WriteDialog[tuple[str, str, int] | None]):
    """Send one signal through `ConsoleData.send_signal` (the store's, as `replaylog signal` uses).

    Dismisses with (workflow id, name, sequence number) once the store accepted it; a
    refusal (closed workflow, unknown id, payload too large) is shown in place.

    Args:
        data: the console's data layer, which sends it.
        workflow_id: the workflow to signal.
        default_name: the name to start with (the signal it waits on, if any).
        payload: the JSON text to start with (none: the operator types it; nothing is sent
            that was not typed, and an approval least of all).
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Cancel", tooltip="cancel"),
        Binding("ctrl+s", "send", "Send", tooltip="send"),
        # Priority bindings act when the key is read, before the keys after it are handed to
        # a widget: without them, what is typed right after tab or enter (a quick typist, a
        # slow link to a served console) still lands in the field being left ("nudgenull").
        Binding("tab", "app.focus_next", show=False, priority=True),
        Binding("shift+tab", "app.focus_previous", show=False, priority=True),
        Binding("enter", "name_entered", show=False, priority=True),
    ]

    def __init__(self, data: ConsoleData, workflow_id: str, default_name: str = "",
                 payload: str = "") -> None:
        super().__init__()
        self.data = data
        self.workflow_id = workflow_id
        self.default_name = default_name
        self.initial_payload = payload
        self.payload: Any = None
        self.valid = False

    def compose(self) -> ComposeResult:
        """Name, payload editor, validation line, refusal line, buttons."""
        with Vertical(id="signal-dialog", classes="dialog"):
            yield Static(titled("Send a signal to ", self.workflow_id), classes="dialog-title")
            yield Label("name")
            yield Input(self.default_name, placeholder="signal name", id="signal-name")
            yield Label("payload (JSON)")
            # tab_behavior="focus": with "indent", esc in the editor only moved the focus (onto Send, so a
            # following enter sent the signal) instead of cancelling as the dialog says.
            yield TextArea(self.initial_payload, id="payload", soft_wrap=True, tab_behavior="focus")
            yield Static(id="validation")
            yield Static(id="refusal")
            with Horizontal(id="signal-buttons"):
                yield Button("Send  ctrl+s", id="send", variant="primary")
                yield Button("Cancel  esc", id="close")
        # The modal's own keys: the footer of the screen beneath would name keys that do nothing here.
        yield KeyFooter()

    def on_mount(self) -> None:
        """Validate the initial payload; start in the name (tab: the payload, then Send)."""
        self._validate(self.initial_payload)
        self.query_one("#signal-name", Input).focus()

    @on(TextArea.Changed, "#payload")
    def _payload_changed(self, event: TextArea.Changed) -> None:
        self._validate(event.text_area.text)

    @on(Input.Changed, "#signal-name")
    def _name_changed(self, _event: Input.Changed) -> None:
        self._validate(self.query_one("#payload", TextArea).text)

    def action_name_entered(self) -> None:
        """Enter in the name goes on to the payload; elsewhere it is the focused widget's."""
        if self.focused is not self.query_one("#signal-name", Input):
            raise SkipAction
        self.set_focus(self.query_one("#payload", TextArea))  # at once (Widget.focus() waits a turn)

    def _validate(self, raw: str) -> None:
        line = self.query_one("#validation", Static)
        self.query_one("#refusal", Static).update("")
        name = self.query_one("#signal-name", Input).value
        # The store refuses these names too (its write is where the rule lives); said here as you type.
        refusal = signal_name_refusal(name)
        self.valid = False
        if refusal is not None and name:
            line.update(Text(f"✗ {refusal}", style="bold red"))
        elif not raw.strip():
            line.update(Text("type the payload (JSON; null for none)", style="yellow"))
        else:
            try:
                self.payload = json.loads(raw)
            except json.JSONDecodeError as exc:
                line.update(Text(f"✗ not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}",
                                 style="bold red"))
            else:
                self.valid = refusal is None
                line.update(Text("✓ valid JSON", style="green") if refusal is None
                            else Text(f"✗ {refusal}", style="bold red"))
        self.query_one("#send", Button).disabled = not self.valid

    @on(Button.Pressed, "#send")
    def _send_pressed(self, _event: Button.Pressed) -> None:
        self.action_send()

    def action_send(self) -> None:
        """Send what the fields hold now through the store, off the UI thread.

        Validated again here: the check made on each change may still be queued behind a
        ctrl+s typed at once after the payload.
        """
        if self.writing:
            return
        self._validate(self.query_one("#payload", TextArea).text)
        if not self.valid:
            return
        self.query_one("#send", Button).disabled = True
        wid, name, payload = self.workflow_id, self.query_one("#signal-name", Input).value, self.payload
        # (On the writing thread's own connection.) Closes with (workflow id, name, sequence number).
        self._write(lambda: (wid, name, self.data.send_signal(wid, name, payload)), SignalRefused)

    def _give_back(self) -> None:
        self.query_one("#send", Button).disabled = not self.valid
