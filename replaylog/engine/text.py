"""Showing stored text safely: every stored string is shown as text, never interpreted."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Protocol

from replaylog.engine.core import CANCEL_NOT_DELIVERED
from replaylog.engine.core import TIMER as TIMER  # re-exported: the console names a sleep by it
from replaylog.engine.vocab import Status, status_info

# C0 controls except tab and newline, DEL, and the C1 range (\x9b is a one-byte CSI).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str, *, oneline: bool = False) -> str:
    """Return `text` with terminal control characters made visible (\\x1b, not ESC).

    With `oneline`, newlines and tabs become visible too, for table cells.
    """
    out = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    if oneline:
        out = out.replace("\n", "\\n").replace("\t", "\\t")
    return out


def preview(value: Any, width: int = 60) -> str:
    """A one-line, control-free preview of a JSON value, cut to `width` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = printable(text, oneline=True)
    return text if len(text) <= width else text[: width - 1] + "…"


def pretty_json(value: Any) -> str:
    """A JSON value pretty-printed, with control characters escaped by the encoder."""
    return printable(json.dumps(value, indent=2, ensure_ascii=False))


def _clock_text(epoch: float, now: float) -> str:
    """A wake time: "21:05:03" on the same UTC day as `now`, else "2026-12-04 09:00 UTC".

    A bare clock time for tomorrow would read as today, hence the date on any other day.
    """
    try:
        when = datetime.fromtimestamp(epoch, UTC)
        today = datetime.fromtimestamp(now, UTC).date()
    except (OverflowError, OSError, ValueError):
        return f"{epoch} (epoch seconds)"
    return when.strftime("%H:%M:%S") if when.date() == today else when.strftime("%Y-%m-%d %H:%M UTC")


def duration(seconds: float) -> str:
    """A span of time, coarse: "<1s", "42s", "4m 12s", "3h 5m", "2d 3h"."""
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 1 else "<1s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m {int(seconds % 60)}s"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h {int(seconds % 3600 // 60)}m"
    return f"{int(seconds // 86400)}d {int(seconds % 86400 // 3600)}h"


def countdown(epoch: float, now: float) -> str:
    """How long until `epoch`, coarse: "in 4m 12s", "in 2d 3h", "due" once it has passed."""
    left = epoch - now
    return "due" if left <= 0 else f"in {duration(left)}"


def waits_text(blocked_on: str | None, wake_at: float | None, now: float) -> str:
    """What a blocked workflow waits on, for operators: "timer until 21:05:03", "approval (until …)".

    `blocked_on` is "timer" for a durable sleep, else the signal name; `wake_at` the timer's
    wake time or the wait's deadline (None: only a signal wakes it).
    """
    if blocked_on is None:
        return ""
    if wake_at is None:
        return blocked_on
    if blocked_on == TIMER:
        return f"timer until {_clock_text(wake_at, now)}"
    return f"{blocked_on} (until {_clock_text(wake_at, now)})"


class _AuditEntry(Protocol):
    """What `cancel_state` reads of an audit row (engine.store.rows.AuditRow)."""

    @property
    def action(self) -> str: ...
    @property
    def detail(self) -> str | None: ...


def cancel_state(status: str, requested: str | None,
                 audit: Iterable[_AuditEntry]) -> tuple[str, str | None] | None:
    """What became of an operator's cancel request: ("requested" | "delivered" | "not delivered", why).

    None when no cancel was requested. A finished workflow's `audit` trail holds a "cancel
    not delivered" row when its verdict met a request its code never reached (it finished
    first); the row's detail says why.
    """
    if requested is None:
        return None
    not_delivered = next((a.detail or "" for a in audit if a.action == CANCEL_NOT_DELIVERED), None)
    if not_delivered is not None:
        return "not delivered", not_delivered
    if status == Status.TERMINATED:
        return "not delivered", "the workflow was terminated first"
    if not status_info(status).finished:
        return "requested", None
    return "delivered", None


def cancel_text(state: str, why: str | None, reason: str | None) -> str:
    """A `cancel_state` and the request's reason in one line: "not delivered: the workflow completed first
    (reason: late)"."""
    return state + (f": {why}" if why else "") + (f" (reason: {reason})" if reason else "")
