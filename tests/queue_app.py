"""The queue tests' app: workflows that record when their code ran, on queues with limits.

`timed` records ctx.now() before and after its activity: the recorded interval lies inside
the time the workflow held its place in its queue, so overlapping intervals count how many
ran at once, from the log alone. Its activity appends its own start and end (with the
worker's pid) to $QUEUE_LEDGER when set, so a test sees every execution, re-runs included.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from replaylog import Client, Context, Queue, activity, workflow

# The kill test's queue: at most 4 admitted at once across every worker.
storm = Queue("storm", concurrency=4)
one_at_a_time = Queue("serial", concurrency=1)
per_worker = Queue("per-worker", worker_concurrency=1)
paced = Queue("paced", rate_limit=(3, 0.5))


def _ledger(event: str, key: str) -> None:
    path = os.environ.get("QUEUE_LEDGER")
    if path:
        line = json.dumps({"event": event, "key": key, "pid": os.getpid(), "at": time.time()}) + "\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


@activity
def hold(key: str, seconds: float) -> str:
    """Take `seconds`, as a call to a limited service would."""
    _ledger("start", key)
    time.sleep(seconds)
    _ledger("end", key)
    return key


@workflow
def timed(ctx: Context, args: dict[str, Any]) -> list[float]:
    """Hold for args["seconds"]; return [ctx.now() before, ctx.now() after]."""
    began = ctx.now()
    ctx.call_activity(hold, args["key"], args.get("seconds", 0.05))
    return [began, ctx.now()]


@workflow
def gated(ctx: Context, key: str) -> str:
    """Hold, then wait for the signal "go": blocked, it keeps its place in its queue."""
    ctx.call_activity(hold, key, 0.0)
    ctx.wait_signal("go")
    return key


def fill_queues(client: Client) -> None:
    """Three `gated` workflows on "serial" (one admitted, two queued), one `timed` on "storm", one `gated` on none.

    Once a worker has run what it can, "serial" holds one blocked workflow (its whole
    concurrency) and two queued, "storm" one completed, and the free one is blocked.
    """
    for i in range(3):
        client.start(gated, f"serial-{i}", queue="serial", id=f"serial-{i}")
    client.start(timed, {"key": "storm", "seconds": 0.0}, queue="storm", id="storm-0")
    client.start(gated, "free", id="free-0")


FILLED = {"serial-0": "blocked", "serial-1": "queued", "serial-2": "queued", "storm-0": "completed",
          "free-0": "blocked"}


def most_at_once(intervals: list[list[float]]) -> int:
    """The most intervals [start, end] open at one time (an end before a start at the same time)."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
                   key=lambda e: (e[0], e[1]))
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most
