"""Shared pieces of the console tests: the seeded database, the app under test, waiting for it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from console_seed import frozen_clock
from textual.app import App
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import DataTable

from replaylog.console.app import ReplaylogConsole

SIZE = (120, 40)


def make_app(db: Path, **kwargs: Any) -> ReplaylogConsole:
    """The console on `db` with the frozen clock and no animations (deterministic frames)."""
    kwargs.setdefault("clock", frozen_clock)
    app = ReplaylogConsole(db, **kwargs)
    app.animation_level = "none"
    return app


async def settle(pilot: Pilot[Any], timeout: float = 120.0) -> None:
    """Wait until every screen has drawn the answer to its last read."""
    app = pilot.app
    deadline = time.monotonic() + timeout
    await pilot.pause()
    while getattr(app, "busy", False) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
        await pilot.pause()
    assert not getattr(app, "busy", False), "the console did not finish loading"
    await pilot.pause()


async def wait_until(pilot: Pilot[Any], predicate: Any, timeout: float = 120.0) -> bool:
    """Let the app run until predicate() holds; the answer says whether it did."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
        await pilot.pause()
    return bool(predicate())


def on_screen(app: App[Any], kind: type[Screen[Any]]) -> bool:
    """The app shows a `kind` screen that has composed its widgets and run its on_mount.

    `app.screen` is the new screen from the moment it is pushed, a little before its
    widgets exist: a query made in between finds nothing (on a loaded machine, often).
    """
    return isinstance(app.screen, kind) and app.screen.is_mounted


def column(table: DataTable[Any], key: str) -> list[str]:
    """The plain text of one column, top to bottom."""
    index = [c.value for c in table.columns].index(key)
    return [table.get_row_at(i)[index].plain for i in range(table.row_count)]


def async_test(fn: Any) -> Any:
    """Run an async test in its own event loop (the suite has no asyncio plugin)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return wrapper
