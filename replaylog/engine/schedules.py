"""Schedules: cron expressions, their ticks in a time zone, and what a due tick does.

Pure: no SQL, no clock of its own (times come in as epoch seconds). The store keeps one
row per schedule and asks `plan` what to start when a worker looks (engine.store.shared.
schedules); the worker and the test environment only say when to look.

Cron expressions are parsed and iterated by cronsim (a maintained, dependency-free
library, see docs/schedules.md), never by hand: five fields (minute hour day month
weekday), or six with seconds first. Ticks are computed in the schedule's IANA time zone
(zoneinfo), so "0 9 * * *" in Europe/Paris is 09:00 Paris time on both sides of a DST change.

A tick starts a workflow whose id is the schedule's name and the tick's UTC time
(`tick_id`): however many workers fire the same tick, the store's insert of that id
succeeds once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from replaylog.engine.errors import ScheduleRefusedError
from replaylog.engine.text import utc

# What a tick does while the workflow the schedule started last is unfinished: start
# nothing ("skip"), keep this one tick to start when it ends ("buffer-one"), or start
# anyway ("allow").
OVERLAPS: tuple[str, ...] = ("skip", "buffer-one", "allow")
# What ticks missed while no worker looked (a tick older than CATCH_UP_GRACE when found)
# do: nothing ("none"), the latest of them starts ("last"), every one starts ("all").
CATCH_UPS: tuple[str, ...] = ("none", "last", "all")
DEFAULT_OVERLAP = "skip"
DEFAULT_CATCH_UP = "last"
DEFAULT_TIMEZONE = "UTC"
# A tick found this late or less (seconds) is on time, not missed: a worker looks about
# once a second, and a busy or restarting one may look a little later than that.
CATCH_UP_GRACE = 60.0
# The most ticks one look starts for one schedule under catch-up "all" (a schedule every
# second left for a month must not start 2.6 million workflows in one transaction); the
# rest start on the following looks.
MAX_TICKS_PER_LOOK = 1000
# Schedule names: as workflow ids allow, short enough that the tick's id stays under 200.
NAME_LIMIT = 100
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def check_name(name: str) -> str:
    """A schedule name, or ScheduleRefusedError: 1-100 printable characters, no space, no '@'."""
    if (not isinstance(name, str) or not name or len(name) > NAME_LIMIT or "@" in name
            or any(c.isspace() or not c.isprintable() for c in name)):
        raise ScheduleRefusedError(f"schedule name {name!r} is not valid: use 1-{NAME_LIMIT} printable"
                                   " characters without spaces or '@'")
    return name


def zone(name: str) -> ZoneInfo:
    """The IANA time zone `name`, or ScheduleRefusedError naming it."""
    try:
        if not name or name != name.strip():
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleRefusedError(f"unknown time zone {name!r}: give an IANA name such as UTC or"
                                   " Europe/Paris") from None


def check_cron(expr: str) -> str:
    """`expr` if cronsim parses it, or ScheduleRefusedError saying what is wrong with it."""
    if not isinstance(expr, str) or not expr.strip():
        raise ScheduleRefusedError("cron expression is empty: give five fields (minute hour day month weekday),"
                                   " such as '*/5 * * * *'")
    try:
        CronSim(expr, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise ScheduleRefusedError(f"cron expression {expr!r} is not valid: {exc} (five fields: minute hour"
                                   " day month weekday; or six with seconds first)") from None
    return expr


def check_choice(value: str, choices: tuple[str, ...], what: str) -> str:
    """`value` if it is one of `choices`, or ScheduleRefusedError naming them."""
    if value not in choices:
        raise ScheduleRefusedError(f"{what} {value!r} is not one of {', '.join(choices)}")
    return value


def next_tick(expr: str, tz: str, after: float) -> float:
    """The first tick of `expr` in time zone `tz` strictly after `after` (epoch seconds)."""
    start = (_EPOCH + timedelta(seconds=math.floor(after))).astimezone(zone(tz))
    return next(iter(CronSim(expr, start))).timestamp()


def ticks_between(expr: str, tz: str, first: float, now: float, limit: int) -> list[float]:
    """The ticks from `first` (itself a tick) up to `now`, at most `limit` of them, oldest first."""
    ticks: list[float] = []
    tick = first
    while tick <= now and len(ticks) < limit:
        ticks.append(tick)
        tick = next_tick(expr, tz, tick)
    return ticks


def tick_id(name: str, tick: float) -> str:
    """The id of the workflow a schedule's tick starts: "NAME@2026-12-04T09:00:00Z" (the tick in UTC)."""
    return f"{name}@{utc(tick, 'tick')}"


@dataclass(frozen=True)
class Plan:
    """What one look at a schedule does.

    Attributes:
        start: the ticks whose workflows start now, oldest first.
        skipped: due ticks that start nothing (missed under catch-up, or overlapping).
        buffered: the tick kept for when the running workflow ends (overlap buffer-one), else None.
        next_at: the schedule's next tick after this look.
    """

    start: tuple[float, ...]
    skipped: int
    buffered: float | None
    next_at: float


def plan(*, expr: str, tz: str, overlap: str, catch_up: str, next_at: float, buffered: float | None,
         running: bool, now: float) -> Plan:
    """What a look at `now` does with a schedule whose next tick is `next_at`.

    `running`: the workflow the schedule started last is unfinished. `buffered`: a tick
    kept by overlap buffer-one; it starts once nothing runs.
    """
    due = ticks_between(expr, tz, next_at, now, MAX_TICKS_PER_LOOK) if next_at <= now else []
    following = next_tick(expr, tz, due[-1]) if due else next_at
    if len(due) == MAX_TICKS_PER_LOOK and following <= now:
        following = next_tick(expr, tz, due[-1])  # the rest are looked at next time
    # Catch-up: a tick older than the grace was missed (no worker looked at it in time).
    if catch_up == "all":
        chosen = due
    elif catch_up == "last":
        chosen = due[-1:]
    else:
        chosen = [t for t in due if now - t <= CATCH_UP_GRACE]
    skipped = len(due) - len(chosen)
    if overlap == "allow":
        return Plan(tuple(chosen), skipped, buffered, following)
    # skip / buffer-one: at most one workflow of the schedule runs at once; buffer-one keeps
    # the newest tick that could not start (one only: a newer one replaces it).
    start: list[float] = []
    if not running and buffered is not None:
        start.append(buffered)
        running, buffered = True, None
    waiting = list(chosen)
    if waiting and not running:
        start.append(waiting.pop(0))
    if waiting and overlap == "buffer-one":
        skipped += len(waiting) - 1 + (buffered is not None)
        buffered = waiting[-1]
    else:
        skipped += len(waiting)
    return Plan(tuple(start), skipped, buffered, following)
