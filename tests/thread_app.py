"""Workflows that start threads in their own code (refused), and activities that start threads (allowed)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from replaylog import AsyncContext, Context, activity, workflow

# Each run of _fetch, in this process: a refused start never runs it.
FETCHED: list[str] = []


def _fetch() -> None:
    """What a workflow's thread would do."""
    FETCHED.append("fetched")


def _in_a_thread(value: int) -> int:
    """`value` doubled by a thread started and joined here."""
    box: list[int] = []
    t = threading.Thread(target=lambda: box.append(value * 2))
    t.start()
    t.join()
    return box[0]


@activity
def threaded(value: int) -> int:
    """An activity that starts a thread and a pool: allowed, activities may do anything."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        pooled = pool.submit(lambda: value).result()
    return _in_a_thread(pooled)


@activity
async def async_threaded(value: int) -> int:
    """An async activity that hands work to a thread (asyncio.to_thread): allowed."""
    return await asyncio.to_thread(_in_a_thread, value)


@workflow
def starts_thread(ctx: Context) -> str:
    """Starts a thread in its body: refused."""
    ctx.call_activity(threaded, 1)
    threading.Thread(target=_fetch).start()
    return "unreachable"


@workflow
def catches_it(ctx: Context) -> str:
    """Starts a thread and catches the refusal: the run fails all the same."""
    try:
        threading.Thread(target=_fetch).start()
    except Exception:
        pass
    return "went on"


@workflow
def uses_a_pool(ctx: Context) -> Any:
    """Hands work to a thread pool in its body: refused, the call named."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_fetch).result()


@workflow
async def async_starts_thread(ctx: AsyncContext) -> str:
    """An async workflow that starts a thread between two awaits: refused."""
    await ctx.call_activity(threaded, 1)
    threading.Thread(target=_fetch).start()
    return "unreachable"


@workflow
def activities_start_threads(ctx: Context) -> list[int]:
    """Activities that start threads, one by one, in ctx.parallel and async: all allowed."""
    one = ctx.call_activity(threaded, 1)
    both = ctx.parallel([ctx.task(threaded, 2), ctx.task(threaded, 3)])
    return [one, *both, ctx.call_activity(async_threaded, 4)]


@workflow
async def async_activities_start_threads(ctx: AsyncContext) -> list[int]:
    """The same from an async workflow: awaited one by one and gathered."""
    one = await ctx.call_activity(threaded, 1)
    both = await asyncio.gather(ctx.call_activity(threaded, 2), ctx.call_activity(async_threaded, 3))
    return [one, *both]
