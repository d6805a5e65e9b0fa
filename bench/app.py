"""The workflows the benchmark runs: trivial activities, so the engine is all that is timed.

Worker subprocesses load this module with `--app bench.app`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from replaylog import Context, Queue, activity, workflow

# Workload 5 through a queue (bench.queue_runs): as many at once as a worker runs by default.
SHORT_QUEUE = Queue("short", concurrency=64)

# How many times `tick` ran in this process: the resume benchmark proves with it that
# replay re-executed nothing.
CALLS = {"tick": 0}
# A function `tick` calls with its argument, or None: the single-workflow benchmark
# uses it to interleave floor measurements with the engine's at a fine grain.
HOOK: Callable[[int], None] | None = None


@activity
def tick(i: int) -> int:
    """A trivial activity: returns its argument."""
    CALLS["tick"] += 1
    if HOOK is not None:
        HOOK(i)
    return i


@workflow
def chain(ctx: Context, n: int) -> int:
    """`n` trivial activities in a row."""
    for i in range(n):
        ctx.call_activity(tick, i)
    return n


@workflow
def resumable(ctx: Context, n: int) -> int:
    """`n` trivial activities, then wait for "go", then one more activity."""
    for i in range(n):
        ctx.call_activity(tick, i)
    ctx.wait_signal("go")
    ctx.call_activity(tick, n)
    return n + 1


@workflow
def pingpong(ctx: Context, n: int) -> int:
    """`n` rounds of: wait for "ping", then record one activity."""
    for i in range(n):
        ctx.wait_signal("ping")
        ctx.call_activity(tick, i)
    return n


@activity
def stamp() -> float:
    """The wall time it ran at: when the timer before it fired, as the workflow saw it."""
    import time

    return time.time()


@workflow
def alarm(ctx: Context, at: float) -> float:
    """Sleep durably until `at` (epoch seconds), then stamp the time."""
    ctx.sleep_until(at)
    return ctx.call_activity(stamp)


@workflow
async def achain(ctx: Context, n: int) -> int:
    """`chain` as an async workflow: `n` trivial (sync) activities awaited in a row."""
    for i in range(n):
        await ctx.call_activity(tick, i)
    return n


@activity
async def wait_a_while(seconds: float) -> float:
    """An async activity that awaits `seconds` (a model call, say) and holds no thread meanwhile."""
    await asyncio.sleep(seconds)
    return seconds


@workflow
async def awaits_io(ctx: Context, seconds: float) -> float:
    """One async activity that waits `seconds`."""
    return float(await ctx.call_activity(wait_a_while, seconds))
