"""The workflows the benchmark runs: trivial activities, so the engine is all that is timed.

Worker subprocesses load this module with `--app bench.app`.
"""

from __future__ import annotations

from collections.abc import Callable

from replaylog import Context, activity, workflow

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
