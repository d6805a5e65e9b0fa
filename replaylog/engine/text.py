"""Showing stored text safely, and stored times: every stored string is shown as text, never interpreted.

The one time formatter (`utc`) is here, outside the pure core and below the store, the
command line and the console, which all say times in their lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from replaylog.engine.core import CANCEL_NOT_DELIVERED, DryReplay, Reason
from replaylog.engine.core import RETRY as RETRY  # re-exported: the console names a retry wait by it
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


# The forms a stored time takes: a full timestamp (messages, a slot's facts), to the minute,
# a time of day that says UTC or not (a column header saying it), a table's short stamp, a
# time of day to the millisecond, ISO 8601 to the millisecond for machines (JSON logs), and
# ISO 8601 to the second (a schedule's tick in the id of the workflow it starts).
TimeForm = Literal["full", "minute", "clock", "time", "short", "millis", "iso", "tick"]
_FORMS: dict[str, str] = {"full": "%Y-%m-%d %H:%M:%S UTC", "minute": "%Y-%m-%d %H:%M UTC", "clock": "%H:%M:%S UTC",
                          "time": "%H:%M:%S", "short": "%m-%d %H:%M:%S", "millis": "%H:%M:%S.",
                          "iso": "%Y-%m-%dT%H:%M:%S.", "tick": "%Y-%m-%dT%H:%M:%SZ"}


def is_time(value: Any) -> bool:
    """Whether a stored value is a time (epoch seconds) a datetime can hold, to be shown as one."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return False
    return True


def utc(epoch: float | None, form: TimeForm = "full") -> str:
    """A stored time (epoch seconds) as UTC wall time: the one way the CLI, the console and the store's
    messages say a time ("2026-12-04 09:00:00 UTC"); fixed stored times give fixed text on every machine.

    None is a dash; a number no datetime can hold is shown as the number ("… (epoch seconds)").
    """
    if epoch is None:
        return "—"
    try:
        when = datetime.fromtimestamp(epoch, UTC)
    except (OverflowError, OSError, ValueError):
        return f"{epoch} (epoch seconds)"
    shown = when.strftime(_FORMS[form])
    if form == "millis":
        return shown + f"{when.microsecond // 1000:03d}"
    return shown + f"{when.microsecond // 1000:03d}Z" if form == "iso" else shown


def near_utc(epoch: float, now: float) -> str:
    """A wake time: "21:05:03" on the same UTC day as `now`, else "2026-12-04 09:00 UTC".

    A bare clock time for tomorrow would read as today, hence the date on any other day.
    """
    if not is_time(epoch) or not is_time(now):
        return utc(epoch)
    same_day = datetime.fromtimestamp(epoch, UTC).date() == datetime.fromtimestamp(now, UTC).date()
    return utc(epoch, "time" if same_day else "minute")


def blocked_text(blocked_on: str | None, wake_at: float | None) -> str:
    """What a blocked run waits on, in words: "timer until …" or "signal 'x' (until …)"."""
    if blocked_on == TIMER:
        return f"timer until {utc(wake_at)}" if wake_at is not None else "timer"
    if blocked_on == RETRY:
        return f"retry of an activity at {utc(wake_at)}" if wake_at is not None else "retry of an activity"
    deadline = f" (until {utc(wake_at)})" if wake_at is not None else ""
    return f"signal {blocked_on!r}{deadline}"


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
        return f"timer until {near_utc(wake_at, now)}"
    if blocked_on == RETRY:
        return f"retry at {near_utc(wake_at, now)}"
    return f"{blocked_on} (until {near_utc(wake_at, now)})"


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st, ..."""
    tail = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{tail}"


def queue_text(queue: str | None, position: int | None, now: float, *, priority: int | None = None,
               not_before: float | None = None, dedup_id: str | None = None,
               admitted_at: float | None = None) -> str:
    """A workflow's place on its queue, for operators: "emails · priority 3 · 2nd in line · not before 21:05:03
    (in 4m 12s) · dedup id order-7", or "emails · admitted 21:04:10" once admitted; "" for no queue."""
    if queue is None:
        return ""
    parts = [queue]
    if priority:
        parts.append(f"priority {priority}")
    if position is not None:
        parts.append(f"{ordinal(position)} in line")
    if position is not None and not_before is not None and not_before > now:
        parts.append(f"not before {near_utc(not_before, now)} ({countdown(not_before, now)})")
    if position is None and admitted_at is not None:
        parts.append(f"admitted {near_utc(admitted_at, now)}")
    if dedup_id is not None:
        parts.append(f"dedup id {dedup_id}")
    return " · ".join(parts)


def heartbeat_text(heartbeat_at: float, details: Any, now: float) -> str:
    """An in-flight attempt's latest heartbeat, for operators: when, and its details in short."""
    ago = "just now" if now - heartbeat_at < 1 else f"{duration(now - heartbeat_at)} ago"
    said = "" if details is None else f": {preview(details, 120)}"
    return f"last heartbeat {ago} ({near_utc(heartbeat_at, now)}){said}"


def retry_text(slot: int, name: str, attempts: int, error: str | None, retry_at: float, now: float) -> str:
    """An activity waiting for its next attempt, for operators: which, what failed, when it runs again."""
    failed = f": {error}" if error else ""
    return (f"slot {slot}: activity {name} failed attempt {attempts}{failed}; attempt {attempts + 1} at"
            f" {near_utc(retry_at, now)} ({countdown(retry_at, now)})")


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


# ---------------------------------------------------------------- a dry replay's verdict, in words


def verdict_line(verdict: DryReplay) -> str:
    """A dry replay's verdict (engine.core.DryReplay: a Reason and what it names) in one line."""
    return _said(verdict)


def verdict_text(verdict: DryReplay) -> str:
    """The verdict's line to show an operator; a clean one says how many slots were replayed."""
    line = _said(verdict)
    return f"{line} ({verdict.replayed} slot(s) replayed)" if verdict.ok else line


def _said(v: DryReplay) -> str:
    if v.reason is Reason.ENDS_DIFFERENTLY:
        ended = f"the workflow {v.status}"
        if v.status == Status.FAILED and v.recorded_error:
            ended += f" ({v.recorded_error})"
        return f"ends differently: {ended}, the current code {_now(v)}"
    clean = "no longer diverges" if v.fixed else "replays cleanly"
    waits = blocked_text(v.outcome.blocked_on, v.outcome.wake_at) if v.outcome is not None else "?"
    said = {
        Reason.RUNS_LIVE: f"{clean}; slot {v.slot} would run {v.live} live",
        Reason.FAILED_LIVE: f"replays cleanly up to slot {v.slot}, where it failed live: {v.error}",
        Reason.COMPLETES: f"{clean}; completes",
        Reason.ENDS_CANCELLED: f"{clean}; ends cancelled",
        Reason.BLOCKS: f"{clean}; blocked on {waits}",
        Reason.CONTINUES: f"{clean}; continues as new",
        Reason.FAILS_AGAIN: f"fails again the same way: {v.error}",
        Reason.RECORDED_FAILURE: f"{clean}; fails on its recorded activity error",
        Reason.DIVERGES: v.error or "diverges",
        Reason.CODE_FAILS: v.error or "workflow code fails",
        Reason.NO_CODE: v.error or "the code has no such workflow",
    }
    return said[v.reason]


def _now(v: DryReplay) -> str:
    """How the current code's replay ends, for `ends differently`."""
    o = v.outcome
    if o is None:
        return "ends elsewhere"
    if o.status == Status.BLOCKED:
        return f"blocks on {blocked_text(o.blocked_on, o.wake_at)}"
    if o.status == Status.CANCELLED:
        return "ends cancelled"
    if o.status == Status.COMPLETED:
        return "completes"
    return f"fails: {o.error}"
