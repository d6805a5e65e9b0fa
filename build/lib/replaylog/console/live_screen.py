"""LiveScreen: the base of the screens that show what the database holds now."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.message import Message
from textual.screen import Screen

from replaylog.console.data import WRITE_ACTIONS, ConsoleData


class LiveScreen(Screen[None]):
    """A screen over the database that re-reads when it changes, one read at a time.

    Attributes down, messages up: the app hands it the data layer and calls
    `database_changed` on each commit; the screen asks the app for what only the app
    does (open a dialog, another screen) by posting messages, never by calling it.

    Args:
        data: the console's data layer; every read and write goes through it.
    """

    @dataclass
    class SignalRequested(Message):
        """The operator asked to send a signal to a workflow (the app opens the dialog)."""

        workflow_id: str
        default_name: str | None

    @dataclass
    class LoadFailed(Message):
        """A read failed; the screen shows the reason in place (the next change or key reads again)."""

        reason: str

    def __init__(self, data: ConsoleData) -> None:
        super().__init__()
        self.data = data
        self._loading = False
        self._dirty = False
        self._stale = False

    @property
    def busy(self) -> bool:
        """Whether a read is still on its way (tests wait for this to clear)."""
        return self._loading or self._dirty

    def reload(self) -> None:
        """Re-read what the screen shows; while a read runs, ask again once it is done (coalesced)."""
        if self._loading:
            self._dirty = True
            return
        self._loading, self._dirty = True, False
        self.read()

    def read(self) -> None:
        """Start the read (a thread worker); its answer calls `read_done`."""
        raise NotImplementedError

    def read_done(self) -> None:
        """A read answered or failed: read again if a change came in meanwhile."""
        self._loading = False
        if self._dirty:
            self.reload()

    def database_changed(self, *, visible: bool) -> None:
        """Re-read now if on screen, else when shown again."""
        if visible:
            self.reload()
        else:
            self._stale = True

    def on_screen_resume(self) -> None:
        """Catch up with changes made while a dialog or another screen was on top."""
        if self._stale:
            self._stale = False
            self.reload()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A read-only console has no write action at all (signal, cancel, …): hidden from the footer and inert."""
        return not (action in WRITE_ACTIONS and self.data.readonly)

    def request_signal(self, workflow_id: str, default_name: str | None) -> None:
        """Ask the app for the send-signal dialog."""
        if not self.data.readonly:
            self.post_message(self.SignalRequested(workflow_id, default_name))

    def topbar(self, where: Text) -> Text:
        """The title bar: where the operator is, the database file, and whether it is read-only."""
        bar = Text("replaylog", style="bold")
        bar.append_text(where)
        bar.append(f"   {self.data.label}", style="dim")
        if self.data.readonly:
            bar.append("  read-only", style="bold yellow")
        return bar
