"""A test app whose activities and workflows return values of a chosen size, for the value cap."""

from __future__ import annotations

import hashlib
from typing import Any

from replaylog import ActivityError, Context, activity, workflow

# How often each activity ran, by name: the in-process tests count real runs with it.
RUNS: dict[str, int] = {}


@activity
def sized(text: str, n: int) -> str:
    """Return `text` repeated n times (its JSON takes n * len(text) UTF-8 bytes and two quotes)."""
    RUNS["sized"] = RUNS.get("sized", 0) + 1
    return text * n


@activity
def echo(value: Any) -> Any:
    """Return the value given."""
    return value


@activity
def raises(message: str) -> None:
    """Fail with this message, every attempt."""
    RUNS["raises"] = RUNS.get("raises", 0) + 1
    raise RuntimeError(message)


@workflow
def catches_error(ctx: Context, message: str) -> dict[str, Any]:
    """Call `raises` (one attempt); return a digest of the ActivityError's error text, and its attempts.

    (A digest: the text itself may be as large as the cap, and the result must fit under it too.)
    """
    try:
        ctx.call_activity(raises, message, max_retries=1)
    except ActivityError as exc:
        return {"error": digest(exc.error), "attempts": exc.attempts}
    return {}


def digest(text: str) -> str:
    """A short digest of any text (lone surrogates included)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@workflow
def catches(ctx: Context, n: int) -> dict[str, Any]:
    """Call `sized` for n bytes of "x"; report the ActivityError it raises, if any, after signal "go"."""
    try:
        got: Any = ctx.call_activity(sized, "x", n)
    except ActivityError as exc:
        got = {"error": exc.error, "attempts": exc.attempts, "slot": exc.slot}
    ctx.wait_signal("go")
    return {"got": got}


@workflow
def returns(ctx: Context, n: int) -> str:
    """Return n bytes of "y" (as JSON: n + 2 bytes)."""
    return "y" * n


@workflow
def echoes(ctx: Context, value: Any) -> Any:
    """Record `value` as an activity result, and return it."""
    return ctx.call_activity(echo, value)


@workflow
def fails(ctx: Context, message: str) -> None:
    """Fail with a ValueError carrying this message."""
    raise ValueError(message)
