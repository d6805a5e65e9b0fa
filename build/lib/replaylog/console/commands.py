"""The command palette's replaylog commands: go to a workflow id, filter by status, act on the workflow shown."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from rich.text import Text
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.message import Message

from replaylog.console.data import STATUSES, ConsoleData
from replaylog.console.live_screen import LiveScreen
from replaylog.console.workflow_screen import WorkflowScreen
from replaylog.engine.text import printable


class WorkflowCommands(Provider):
    """"Go to workflow id" (searching ids as you type) and "show <status> workflows".

    What a command does is the app's to do: the provider posts a message to it.
    """

    class GoToAsked(Message):
        """The operator chose "Go to workflow id…" (the app asks for the id)."""

    @dataclass
    class WorkflowChosen(Message):
        """The operator chose a workflow the search found (the app opens it)."""

        workflow_id: str

    @dataclass
    class StatusChosen(Message):
        """The operator chose to list the workflows in one status (None: all)."""

        status: str | None

    def _workflow_actions(self) -> list[tuple[str, Callable[[], object], str]]:
        """On a workflow's screen of a writable console: its actions, as its keys take them."""
        screen = self.screen
        if not isinstance(screen, WorkflowScreen) or screen.data.readonly:
            return []
        wid = printable(screen.workflow_id, oneline=True)
        return [(f"{label} workflow {wid}…", partial(screen.run_action, action), help)
                for label, action, help in (
                    ("Cancel", "cancel_workflow", "its code sees WorkflowCancelled; a reason, then confirm"),
                    ("Terminate", "terminate_workflow", "no workflow code runs again; confirm"),
                    ("Retry", "retry_workflow", "a failed workflow: the dry-replay verdict first, then confirm"),
                    ("Fork", "fork_workflow", "from the highlighted slot; confirm"))]

    def _status_commands(self) -> list[tuple[str, str | None]]:
        return [("Show all workflows", None)] + [(f"Show {s} workflows", s) for s in STATUSES]

    def _post(self, message: Message) -> None:
        self.app.post_message(message)

    def _goto(self) -> None:
        self._post(self.GoToAsked())

    def _open(self, workflow_id: str) -> None:
        self._post(self.WorkflowChosen(workflow_id))

    def _show_status(self, status: str | None) -> None:
        self._post(self.StatusChosen(status))

    async def discover(self) -> Hits:
        """What the palette offers before anything is typed."""
        yield DiscoveryHit("Go to workflow id…", self._goto, help="type an id to open it")
        for label, command, help in self._workflow_actions():
            yield DiscoveryHit(label, command, help=help)
        for label, status in self._status_commands():
            yield DiscoveryHit(label, partial(self._show_status, status))

    async def search(self, query: str) -> Hits:
        """Matching commands, then workflows whose id or name contains the query."""
        matcher = self.matcher(query)
        commands: list[tuple[str, Callable[[], object]]] = [("Go to workflow id…", self._goto)]
        commands += [(label, partial(self._show_status, status)) for label, status in self._status_commands()]
        commands += [(label, command) for label, command, _ in self._workflow_actions()]
        for label, command in commands:
            score = matcher.match(label)
            if score > 0:
                yield Hit(score, matcher.highlight(label), command, text=label)
        data = self._data()
        if not query.strip() or data is None:
            return
        # The DB read runs on a thread with its own connection, never on the UI loop.
        try:
            found = await asyncio.to_thread(data.find_workflow_ids, query.strip(), 10)
        except Exception:  # noqa: BLE001 - a failed lookup just offers no ids
            return
        for workflow_id, workflow, status in found:
            display = Text("Go to workflow ")
            display.append(printable(workflow_id, oneline=True), style="bold")
            display.append(f"  {printable(workflow, oneline=True)} · {status}", style="dim")
            yield Hit(0.9, display, partial(self._open, workflow_id),
                      text=f"Go to workflow {workflow_id}")

    def _data(self) -> ConsoleData | None:
        # The data layer the screens were handed (the list is always at the bottom of the stack).
        return next((s.data for s in reversed(self.app.screen_stack) if isinstance(s, LiveScreen)), None)
