"""A test app of retry policies: activities that fail a set number of times, with a ledger line per attempt.

The ledger ($FAULT_LEDGER, one JSON line per attempt: workflow, slot, attempt, wall time,
pid) is evidence outside the database: the tests compare it with what history recorded.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from replaylog import Context, RetryPolicy, activity, current_activity, default_retry, workflow

# The app's default policy: what `flaky_default` gets, having none of its own.
default_retry(RetryPolicy(max_attempts=4, initial=0.01, backoff=1.0))


def _append(line: dict[str, Any]) -> None:
    path = os.environ.get("FAULT_LEDGER")
    if not path:
        return
    # One O_APPEND write of a short line is atomic: processes never interleave a line.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def _attempt(fail_times: int, error: type[Exception] = ConnectionError) -> int:
    info = current_activity()
    _append({"wid": info.workflow_id, "slot": info.slot, "attempt": info.attempt, "at": time.time(),
             "pid": os.getpid()})
    if info.attempt <= fail_times:
        raise error(f"attempt {info.attempt} failed")
    return info.attempt


@activity
def flaky(fail_times: int) -> int:
    """Fail the first `fail_times` attempts with ConnectionError; return the attempt that succeeded."""
    return _attempt(fail_times)


@activity
def invalid(fail_times: int) -> int:
    """Fail with ValueError (non-retryable under the policies below)."""
    return _attempt(fail_times, ValueError)


@activity(retry=RetryPolicy(max_attempts=2, initial=0.01))
def flaky_two(fail_times: int) -> int:
    """flaky, with a policy of its own: 2 attempts."""
    return _attempt(fail_times)


@activity
def flaky_default(fail_times: int) -> int:
    """flaky, under the app's default policy (4 attempts)."""
    return _attempt(fail_times)


@workflow
def durable(ctx: Context, spec: dict[str, Any]) -> int:
    """Call `flaky` under a policy of `spec["attempts"]` attempts, `spec["initial"]` seconds growing by
    `spec["backoff"]` (1: constant)."""
    policy = RetryPolicy(max_attempts=spec["attempts"], initial=spec["initial"], backoff=spec.get("backoff", 1.0),
                         non_retryable=(ValueError,))
    result: int = ctx.call_activity(spec.get("activity", "flaky"), spec["fail"], retry=policy)
    return result


@workflow
def defaults(ctx: Context, fail: int) -> list[Any]:
    """The activity's own policy, then the app's default: each outcome, or its error."""
    out: list[Any] = []
    for fn in (flaky_two, flaky_default):
        try:
            out.append(ctx.call_activity(fn, fail))
        except Exception as exc:
            out.append(type(exc).__name__)
    return out
