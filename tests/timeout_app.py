"""A test app of activity timeouts and heartbeats; each attempt leaves ledger lines (start, and a late end).

The ledger ($FAULT_LEDGER, one JSON line per event: workflow, slot, attempt, what, wall time,
pid) is evidence outside the database: the tests compare it with what history recorded.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from replaylog import ChildWorkflowError, Context, RetryPolicy, WorkflowCancelled, activity, current_activity, workflow

QUICK = RetryPolicy(max_attempts=3, initial=0.01)


def _note(what: str, **extra: Any) -> None:
    path = os.environ.get("FAULT_LEDGER")
    if not path:
        return
    info = current_activity()
    line = {"wid": info.workflow_id, "slot": info.slot, "attempt": info.attempt, "what": what, "at": time.time(),
            "pid": os.getpid(), **extra}
    # One O_APPEND write of a short line is atomic: processes never interleave a line.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


@activity
def slow_first(seconds: float) -> str:
    """The first attempt takes `seconds`, then says it ended late; later ones answer at once."""
    _note("start")
    if current_activity().attempt == 1:
        time.sleep(seconds)
        _note("late end")
        return "late"
    return "fresh"


@activity
def falls_silent(seconds: float) -> Any:
    """The first attempt heartbeats once and then goes silent for `seconds`; the next returns what it was left."""
    info = current_activity()
    _note("start")
    if info.attempt == 1:
        info.heartbeat({"rows": 3})
        time.sleep(seconds)
        return "late"
    return {"resumed_from": info.heartbeat_details}


def _pulse(limit: float, **named: str) -> Any:
    info = current_activity()
    _note("start")
    if info.attempt > 1:
        return {"resumed_from": info.heartbeat_details}
    end = time.monotonic() + limit
    i = 0
    while time.monotonic() < end:
        i += 1
        info.heartbeat({**named, "i": i})
        time.sleep(0.05)
    return "never frozen"


@activity
def pulse(limit: float) -> Any:
    """The first attempt heartbeats every 50 ms (details: a count) for up to `limit` seconds; later ones
    return the details they were left."""
    return _pulse(limit)


@workflow
def timed(ctx: Context, seconds: float) -> str:
    """slow_first under a start-to-close timeout of 0.3 s."""
    result: str = ctx.call_activity(slow_first, seconds, timeout=0.3, retry=QUICK)
    return result


@workflow
def watched(ctx: Context, seconds: float) -> Any:
    """falls_silent under a heartbeat timeout of 0.3 s."""
    return ctx.call_activity(falls_silent, seconds, heartbeat_timeout=0.3, retry=QUICK)


@workflow
def pulsing(ctx: Context, spec: dict[str, float]) -> Any:
    """pulse under a heartbeat timeout of `spec["heartbeat"]` seconds."""
    return ctx.call_activity(pulse, spec["limit"], heartbeat_timeout=spec["heartbeat"], retry=QUICK)


@workflow
def pulsing_backoff(ctx: Context, spec: dict[str, float]) -> Any:
    """pulse under a heartbeat timeout of `spec["heartbeat"]` seconds, `spec["backoff"]` seconds between attempts."""
    return ctx.call_activity(pulse, spec["limit"], heartbeat_timeout=spec["heartbeat"],
                             retry=RetryPolicy(max_attempts=3, initial=spec["backoff"]))


@activity
def refund(order: str) -> str:
    """The compensation a timed-out workflow runs."""
    return f"refunded {order}"


@workflow
def slow_order(ctx: Context, order: str) -> str:
    """Wait for a shipment that does not come (a durable sleep); compensate when cancelled."""
    try:
        ctx.sleep(3600)
    except WorkflowCancelled:
        ctx.call_activity(refund, order)
        raise
    return "shipped"


@workflow
def sleeper(ctx: Context, seconds: float) -> str:
    """A child that sleeps."""
    ctx.sleep(seconds)
    return "woke"


@workflow
def parent_of_sleepers(ctx: Context, own: float | None) -> list[Any]:
    """Two children: one with a timeout of its own (`own`), then one inheriting this workflow's deadline."""
    out: list[Any] = []
    for timeout in (own, None):
        try:
            out.append(ctx.call_workflow(sleeper, 3600, timeout=timeout))
        except ChildWorkflowError as exc:
            out.append(exc.error)
    return out


@workflow
def pulsing_group(ctx: Context, spec: dict[str, float]) -> Any:
    """pulse (under a heartbeat timeout of `spec["heartbeat"]` seconds) beside a quick task, in one parallel group."""
    return ctx.parallel([ctx.task(pulse, spec["limit"], heartbeat_timeout=spec["heartbeat"], retry=QUICK),
                         ctx.task(refund, "b")])


@activity
def pulse_as(task: str, limit: float) -> Any:
    """pulse, its details naming `task` ({"task", "i"})."""
    return _pulse(limit, task=task)


@activity
def stalls_first(task: str, limit: float) -> str:
    """The first attempt sleeps `limit` seconds (its worker is killed meanwhile); later ones answer at once."""
    _note("start")
    if current_activity().attempt == 1:
        time.sleep(limit)
        return "never killed"
    return f"{task} again"


@workflow
def pulsing_pair(ctx: Context, spec: dict[str, float]) -> Any:
    """Two pulse_as tasks in one parallel group, each under a heartbeat timeout of `spec["heartbeat"]`
    seconds, `spec["backoff"]` seconds between attempts (0: QUICK's)."""
    policy = RetryPolicy(max_attempts=3, initial=spec["backoff"]) if spec.get("backoff") else QUICK
    return ctx.parallel([ctx.task(pulse_as, name, spec["limit"], heartbeat_timeout=spec["heartbeat"], retry=policy)
                         for name in ("a", "b")])


@workflow
def stalling_pair(ctx: Context, limit: float) -> Any:
    """Two stalls_first tasks in one parallel group, no timeouts: only start marks count their attempts."""
    return ctx.parallel([ctx.task(stalls_first, name, limit, retry=QUICK) for name in ("a", "b")])
