"""Turning stored values into safe, styled `Text`: the console's, and the command line's.

Every stored string goes through `engine.text.printable` and into a `Text`, never
into markup: a name containing `[/bold]` or an escape sequence shows literally. The
command line imports what it shares with the console from here (status styles, clock
reads, the worker error line), so that both say a thing the same way.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from replaylog.engine.text import countdown, is_time, preview, printable, utc, waits_text
from replaylog.engine.vocab import Status

# Every status's colour (a test asks that each Status has one).
STATUS_STYLES: dict[str, str] = {
    Status.QUEUED: "cyan",
    Status.PENDING: "bold cyan",
    Status.RUNNING: "bold blue",
    Status.BLOCKED: "bold yellow",
    Status.COMPLETED: "bold green",
    Status.FAILED: "bold red",
    Status.CANCELLED: "bold magenta",
    Status.TERMINATED: "bold magenta",
    Status.CONTINUED: "cyan",
}


# Characters of a value a table cell is given: more than any terminal is wide, so the
# column (which grows with the terminal) cuts it with `…`, not the preview.
CELL_PREVIEW = 1000


def text(value: Any, style: str = "") -> Text:
    """One line of stored text, control characters made visible, never parsed as markup."""
    # Cut with an ellipsis where a table column is narrower (an 80-column terminal).
    return Text(printable(str(value), oneline=True), style=style, no_wrap=True, overflow="ellipsis")


def titled(prefix: str, name: str) -> Text:
    """A dialog's title: `prefix` then a stored name (a workflow id, say) in bold, as text."""
    title = Text(prefix)
    title.append_text(text(name, "bold"))
    return title


def status_text(status: str) -> Text:
    """A status word in its colour."""
    return Text(status, style=STATUS_STYLES.get(status, ""))


def value_preview(value: Any, width: int = 60) -> Text:
    """A one-line preview of a JSON value."""
    return Text(preview(value, width), no_wrap=True, overflow="ellipsis")


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


def clock_read(value: Any) -> str | None:
    """A recorded clock read (`now`) as a UTC time; None when the value is no time a datetime can hold."""
    return utc(value) if is_time(value) else None


def worker_error_line(error: str, status: str, retry_at: float | None) -> str:
    """The last error that stopped a run without an outcome, and when a worker runs it again.

    Kept until a run completes or fails the workflow; "runs again" only while it waits to.
    """
    if status == Status.PENDING and retry_at is not None:
        return f"{error} — runs again from {utc(retry_at, 'clock')}"
    return error


def waits_cell(blocked_on: str | None, wake_at: float | None, now: float, *, first: bool = False,
               prefix: str = "", style: str = "") -> Text:
    """What a workflow waits on, with the countdown to its timer or deadline: "timer until 21:05:03 · in 4m 2s".

    `first` marks the one that fires next (▸, bold); stored names are text, never markup.
    """
    if blocked_on is None:
        return Text("")
    shown = Text(prefix, no_wrap=True, overflow="ellipsis")
    if first:
        shown.append("▸ ", style="bold magenta")
    shown.append(printable(waits_text(blocked_on, wake_at, now), oneline=True),
                 style="bold yellow" if first else style)
    if wake_at is not None:
        shown.append(f" · {countdown(wake_at, now)}", style="dim")
    return shown
