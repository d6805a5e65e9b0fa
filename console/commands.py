"""The command palette's replaylog commands: go to a workflow id, filter by status."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual.command import DiscoveryHit, Hit, Hits, Provider

from console.data import STATUSES, find_workflow_ids
from engine.text import printable

if TYPE_CHECKING:
    from console.app import ReplaylogConsole


class WorkflowCommands(Provider):
    """"Go to workflow id" (searching ids as you type) and "show <status> workflows"."""

    @property
    def console(self) -> ReplaylogConsole:
        """The app, typed."""
        return cast("ReplaylogConsole", self.app)

    def _status_commands(self) -> list[tuple[str, str | None]]:
        return [("Show all workflows", None)] + [(f"Show {s} workflows", s) for s in STATUSES]

    def _show_status(self, status: str | None) -> None:
        from console.workflows_screen import WorkflowsScreen

        while len(self.app.screen_stack) > 2 and not isinstance(self.app.screen, WorkflowsScreen):
            self.app.pop_screen()
        if isinstance(self.app.screen, WorkflowsScreen):
            self.app.screen.action_status(status)

    async def discover(self) -> Hits:
        """What the palette offers before anything is typed."""
        yield DiscoveryHit("Go to workflow id…", self.console.action_goto, help="type an id to open it")
        for label, status in self._status_commands():
            yield DiscoveryHit(label, partial(self._show_status, status))

    async def search(self, query: str) -> Hits:
        """Matching commands, then workflows whose id or name contains the query."""
        matcher = self.matcher(query)
        for label, status in [("Go to workflow id…", None), *self._status_commands()]:
            score = matcher.match(label)
            if score > 0:
                command = self.console.action_goto if label.startswith("Go to") else partial(self._show_status, status)
                yield Hit(score, matcher.highlight(label), command, text=label)
        if not query.strip():
            return
        # The DB read runs on a thread with its own connection, never on the UI loop.
        try:
            found = await asyncio.to_thread(self._find, query.strip())
        except Exception:  # noqa: BLE001 - a failed lookup just offers no ids
            return
        for workflow_id, workflow, status in found:
            display = Text("Go to workflow ")
            display.append(printable(workflow_id, oneline=True), style="bold")
            display.append(f"  {printable(workflow, oneline=True)} · {status}", style="dim")
            yield Hit(0.9, display, partial(self.console.open_workflow, workflow_id),
                      text=f"Go to workflow {workflow_id}")

    def _find(self, text: str) -> list[tuple[str, str, str]]:
        with self.console.open_store() as store:
            return find_workflow_ids(store, text, limit=10)
