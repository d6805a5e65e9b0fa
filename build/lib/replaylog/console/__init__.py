"""The replaylog operator console: a Textual app over the shared log store.

Every read and write goes through `console.data` (in thread workers, one connection
each; writes only through the store's operator functions); screens get it handed down
and post messages up to the app. It never imports the worker.

`console.format` is also the command line's: importing it (or this package) loads no
Textual; `ReplaylogConsole` is imported from `console.app` when first asked for.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReplaylogConsole"]


def __getattr__(name: str) -> Any:
    # Lazy: `replaylog list` imports console.format, and Textual takes a while to import.
    if name == "ReplaylogConsole":
        from replaylog.console.app import ReplaylogConsole

        return ReplaylogConsole
    raise AttributeError(f"module 'console' has no attribute {name!r}")
