"""A test app whose activities leave a ledger outside the database, to count real runs."""

from __future__ import annotations

import os
import time

from replaylog import Context, activity, current_activity, workflow


def _ledger(event: str) -> None:
    path = os.environ["REPLAYLOG_TEST_LEDGER"]
    # O_APPEND writes of one short line are atomic, so processes never interleave a line.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (event + "\n").encode())
    finally:
        os.close(fd)


@activity
def step(i: int) -> int:
    """Note the run in the ledger, take a little time, return i * 10."""
    info = current_activity()
    _ledger(f"{info.workflow_id} {info.slot}")
    time.sleep(float(os.environ.get("REPLAYLOG_TEST_STEP_SECONDS", "0.02")))
    return i * 10


@workflow
def steps(ctx: Context, n: int) -> int:
    """n steps, then the sum of their results."""
    return sum(ctx.call_activity(step, i) for i in range(n))


@workflow
def waits(ctx: Context) -> object:
    """One step, a signal, one more step."""
    ctx.call_activity(step, 0)
    got = ctx.wait_signal("go")
    ctx.call_activity(step, 1)
    return got
