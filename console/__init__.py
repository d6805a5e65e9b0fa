"""The replaylog operator console: a Textual app over the shared log store.

Every read and write goes through `console.data` (in thread workers, one connection
each; writes only through the store's operator functions); screens get it handed down
and post messages up to the app. It never imports the worker.
"""

from console.app import ReplaylogConsole

__all__ = ["ReplaylogConsole"]
