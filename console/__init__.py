"""The replaylog operator console: a Textual app over the shared log store.

It reads through `engine.store` in thread workers (one connection each) and writes
only through the store's operator functions. It never imports the worker.
"""

from console.app import ReplaylogConsole

__all__ = ["ReplaylogConsole"]
