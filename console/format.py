"""Turning stored values into safe, styled `Text` for widgets.

Every stored string goes through `engine.text.printable` and into a `Text`, never
into markup: a name containing `[/bold]` or an escape sequence shows literally.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from rich.text import Text

from engine.text import preview, printable

STATUS_STYLES = {
    "pending": "bold cyan",
    "running": "bold blue",
    "blocked": "bold yellow",
    "completed": "bold green",
    "failed": "bold red",
    "cancelled": "bold magenta",
    "terminated": "bold magenta",
}


# Characters of a value a table cell is given: more than any terminal is wide, so the
# column (which grows with the terminal) cuts it with `…`, not the preview.
CELL_PREVIEW = 1000


def text(value: Any, style: str = "") -> Text:
    """One line of stored text, control characters made visible, never parsed as markup."""
    # Cut with an ellipsis where a table column is narrower (an 80-column terminal).
    return Text(printable(str(value), oneline=True), style=style, no_wrap=True, overflow="ellipsis")


def status_text(status: str) -> Text:
    """A status word in its colour."""
    return Text(status, style=STATUS_STYLES.get(status, ""))


def value_preview(value: Any, width: int = 60) -> Text:
    """A one-line preview of a JSON value."""
    return Text(preview(value, width), no_wrap=True, overflow="ellipsis")


def utc(ts: float | None, *, millis: bool = False) -> str:
    """A timestamp as UTC wall time; fixed stored timestamps give fixed text on every machine."""
    if ts is None:
        return "—"
    when = dt.datetime.fromtimestamp(ts, tz=dt.UTC)
    if millis:
        return when.strftime("%H:%M:%S.") + f"{when.microsecond // 1000:03d}"
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def age(ts: float, now: float) -> str:
    """How long ago, coarse ("4s ago", "3m ago"): the clock is injected so tests can freeze it."""
    seconds = max(0.0, now - ts)
    if seconds < 60:
        return f"{int(seconds)}s ago"
    if seconds < 3600:
        return f"{int(seconds // 60)}m ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h ago"
    return f"{int(seconds // 86400)}d ago"
