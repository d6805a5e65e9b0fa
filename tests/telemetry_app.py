"""A test app for metrics, traces and JSON logs: an activity that fails before it succeeds, a wait, a failure.

`aorder` is `order`'s async twin: its run suspends at each attempt of its async activity and
is run again for the attempt's outcome.
"""

from __future__ import annotations

import asyncio

from replaylog import AsyncContext, Context, activity, current_activity, workflow


@activity
def fetch(n: int) -> int:
    """Always works."""
    return n * 2


@activity
def flaky(n: int) -> int:
    """Fails on its first two attempts at a slot, then returns n."""
    if current_activity().attempt < 3:
        raise ConnectionError(f"attempt {current_activity().attempt} refused")
    return n


@activity
def broken(n: int) -> int:
    """Always fails."""
    raise ValueError(f"order {n} is broken")


@workflow
def order(ctx: Context, n: int) -> int:
    """fetch, flaky (three attempts), a log line, a wait for "go", fetch again."""
    total = ctx.call_activity(fetch, n)
    total += ctx.call_activity(flaky, n, max_retries=3)
    ctx.logger.info("order %s fetched, waiting for go", n)
    ctx.wait_signal("go")
    return total + ctx.call_activity(fetch, n)


@workflow
def doomed(ctx: Context, n: int) -> int:
    """One fetch, then an activity that fails for good (two attempts): the workflow fails."""
    ctx.call_activity(fetch, n)
    return ctx.call_activity(broken, n, max_retries=2)


@activity
async def aflaky(n: int) -> int:
    """`flaky`, async: fails on its first two attempts at a slot, then returns n."""
    await asyncio.sleep(0)
    if current_activity().attempt < 3:
        raise ConnectionError(f"attempt {current_activity().attempt} refused")
    return n


@workflow
async def aorder(ctx: AsyncContext, n: int) -> int:
    """aflaky (three attempts, each on the worker's event loop), then fetch."""
    total = int(await ctx.call_activity(aflaky, n, max_retries=3))
    return total + int(await ctx.call_activity(fetch, n))
