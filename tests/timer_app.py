"""A test app of durable timers and waits with a deadline; activities leave a ledger line per live run.

The ledger ($FAULT_LEDGER, one JSON line per run) is evidence outside the database: the
tests compare it with what history recorded, so a timer that fired twice cannot hide.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from replaylog import Context, SignalTimeout, activity, current_activity, workflow


def _append(line: str) -> None:
    path = os.environ.get("FAULT_LEDGER")
    if not path:
        return
    # One O_APPEND write of a short line is atomic: processes never interleave a line.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@activity
def fired(i: int) -> dict[str, Any]:
    """Note the run (workflow, slot, wall time) in the ledger; return when it ran."""
    info = current_activity()
    at = time.time()
    _append(json.dumps({"wid": info.workflow_id, "slot": info.slot, "i": i, "at": at, "pid": os.getpid()}))
    return {"i": i, "at": at}


@workflow
def nap(ctx: Context, seconds: float) -> dict[str, Any]:
    """Sleep once, then note when the timer fired."""
    ctx.sleep(seconds)
    return ctx.call_activity(fired, 0)


@workflow
def naps(ctx: Context, durations: list[float]) -> list[dict[str, Any]]:
    """Sleep each duration in turn, noting each firing."""
    out = []
    for i, seconds in enumerate(durations):
        ctx.sleep(seconds)
        out.append(ctx.call_activity(fired, i))
    return out


@workflow
def approval(ctx: Context, timeout: float) -> Any:
    """Wait for "approval" until the deadline; "expired" when it passes first."""
    try:
        return ctx.wait_signal("approval", timeout=timeout)
    except SignalTimeout:
        return "expired"


@workflow
def race(ctx: Context, timeout: float) -> list[Any]:
    """A wait with a deadline, then one without: a signal the first missed is the second's."""
    try:
        first = ctx.wait_signal("go", timeout=timeout)
    except SignalTimeout:
        first = "timeout"
    second = ctx.wait_signal("go")
    ctx.call_activity(fired, 0)
    return [first, second]


@workflow
def versioned(ctx: Context) -> dict[str, Any]:
    """One slot of each kind the console shows readably: uuid, random, patch marker, timer."""
    ident = ctx.uuid4()
    roll = ctx.random()
    ctx.sleep(0)
    return {"id": ident, "roll": roll, "new_path": ctx.patched("use-new-path")}
