"""Async workflows and activities for the tests (importable as an app: `--app async_app`).

REPLAYLOG_TEST_LEDGER names a file each ledger activity appends "workflow-id slot" to,
once per run of its body; REPLAYLOG_TEST_LATENCY bounds a random latency (seconds) of
the async activities.
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

from replaylog import (
    ActivityError,
    ChildWorkflowClosedError,
    ChildWorkflowError,
    WorkflowCancelled,
    activity,
    current_activity,
    workflow,
)

# Calls of each activity in this process, by name (in-process tests count them).
CALLS: dict[str, int] = {}
# Flipped by a test to change the code between runs (the non-determinism guard).
CHANGED = {"on": False}


def _count(name: str) -> None:
    CALLS[name] = CALLS.get(name, 0) + 1


async def _latency() -> None:
    bound = float(os.environ.get("REPLAYLOG_TEST_LATENCY", "0"))
    if bound:
        await asyncio.sleep(random.uniform(0, bound))


def _ledger() -> None:
    path = os.environ.get("REPLAYLOG_TEST_LEDGER")
    if path:
        info = current_activity()
        with open(path, "a") as f:
            f.write(f"{info.workflow_id} {info.slot}\n")


@activity
def double(x: int) -> int:
    _count("double")
    return 2 * x


@activity
async def adouble(x: int) -> int:
    _count("adouble")
    await _latency()
    return 2 * x


@activity
async def atriple(x: int) -> int:
    _count("atriple")
    await _latency()
    return 3 * x


@activity
async def afail(x: int) -> int:
    _count("afail")
    await asyncio.sleep(0)
    raise ValueError(f"no good: {x}")


@activity
async def aledger(i: int) -> int:
    await _latency()
    _ledger()
    return i


@activity
async def ahang() -> str:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        path = os.environ.get("REPLAYLOG_TEST_LEDGER")
        if path:
            with open(path, "a") as f:
                f.write("cancelled\n")
        raise
    return "never"


@activity
async def aset() -> set[int]:
    return {1, 2}


@activity
def returns_coroutine() -> Any:
    return adouble(1)


@workflow
async def pipeline(ctx: Any, n: int) -> int:
    a = await ctx.call_activity(double, n)
    return int(await ctx.call_activity(adouble, a))


@workflow
async def fan(ctx: Any, n: int) -> list[int]:
    first = await ctx.call_activity(double, 1)
    many = await asyncio.gather(*(ctx.call_activity(adouble if i % 2 else atriple, i) for i in range(n)))
    return [first, *many]


@workflow
async def gated(ctx: Any) -> list[Any]:
    """now(), two waits on one name, and an activity between: the recorded mechanisms."""
    started = ctx.now()
    first = await ctx.wait_signal("go")
    value = await ctx.call_activity(atriple if CHANGED["on"] else adouble, first)
    second = await ctx.wait_signal("go")
    return [started, first, value, second, ctx.now() >= started]


@workflow
async def memo(ctx: Any) -> str:
    try:
        await ctx.call_activity(afail, 1, max_retries=2)
    except ActivityError as exc:
        await ctx.wait_signal("go")
        return f"handled: {exc.error}"
    return "unreachable"


@workflow
async def saga(ctx: Any) -> str:
    try:
        await ctx.wait_signal("never")
    except WorkflowCancelled:
        await ctx.call_activity(adouble, 100)
        raise
    return "unreachable"


@workflow
async def sleeper(ctx: Any, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "woke"


@workflow
async def parent(ctx: Any, n: int) -> int:
    return int(await ctx.call_workflow(pipeline, n)) + 1


@workflow
def sync_calls_async(ctx: Any, n: int) -> int:
    return int(ctx.call_activity(adouble, n))


@workflow
async def steps(ctx: Any, n: int) -> int:
    total = 0
    for i in range(0, n, 4):
        values = await asyncio.gather(*(ctx.call_activity(aledger, j) for j in range(i, min(i + 4, n))))
        total += sum(values)
    return total


@workflow
async def hangs(ctx: Any) -> str:
    return str(await ctx.call_activity(ahang))


@workflow
async def sleeps_badly(ctx: Any) -> None:
    await asyncio.sleep(1)


@workflow
async def awaits_forever(ctx: Any) -> None:
    await asyncio.Event().wait()


@workflow
async def returns_set(ctx: Any) -> Any:
    return await ctx.call_activity(aset)


@workflow
async def sync_returning_coroutine(ctx: Any) -> Any:
    return await ctx.call_activity(returns_coroutine)


# Async activities that wait for each other: they finish only once `GATE_SIZE` of them run at once.
GATE = {"size": 0, "arrived": 0}
_gate_event: dict[int, asyncio.Event] = {}


@activity
async def gathered(i: int) -> int:
    loop_id = id(asyncio.get_running_loop())
    event = _gate_event.setdefault(loop_id, asyncio.Event())
    GATE["arrived"] += 1
    if GATE["arrived"] >= GATE["size"]:
        event.set()
    await event.wait()
    return i


@workflow
async def meets(ctx: Any, i: int) -> int:
    return int(await ctx.call_activity(gathered, i))


# While on, `charge` fails: a failed async workflow that a fork (not a retry) sets going again.
FAILING = {"on": False}


@activity
async def charge(amount: int) -> dict[str, int]:
    _count("charge")
    if FAILING["on"]:
        raise RuntimeError("card declined")
    return {"charged": amount}


@workflow
async def checkout(ctx: Any, amount: int) -> dict[str, Any]:
    total = await ctx.call_activity(double, amount)
    receipt = await ctx.call_activity(charge, total, max_retries=1)
    return {"total": total, **receipt}


@workflow
async def times_out(ctx: Any) -> str:
    try:
        return str(await ctx.call_activity(ahang, timeout=0.3, max_retries=1))
    except ActivityError as exc:
        return exc.error


@activity
async def beats(n: int) -> int:
    for i in range(n):
        current_activity().heartbeat({"done": i})
        await asyncio.sleep(0.05)
    return n


@activity
async def goes_quiet() -> str:
    current_activity().heartbeat({"done": 0})
    await ahang()
    return "never"


@workflow
async def heartbeating(ctx: Any) -> list[Any]:
    done = await ctx.call_activity(beats, 4, heartbeat_timeout=2.0)
    try:
        await ctx.call_activity(goes_quiet, heartbeat_timeout=0.3, max_retries=1)
    except ActivityError as exc:
        return [done, exc.error]
    return [done, None]


@workflow
async def anap(ctx: Any, seconds: float) -> str:
    """A child that sleeps, durably."""
    await ctx.sleep(seconds)
    return "woke"


@workflow
async def awaiter(ctx: Any) -> Any:
    """A child that waits for the signal "go" and returns its payload."""
    return await ctx.wait_signal("go")


@workflow
async def spawns(ctx: Any) -> list[Any]:
    """Start children without waiting, work meanwhile, signal one, cancel one, collect all three outcomes."""
    napper = await ctx.start_workflow(anap, 0.05)
    told = await ctx.start_workflow(awaiter)
    stopped = await ctx.start_workflow(anap, 3600, parent_close="abandon")
    worked = await ctx.call_activity(adouble, 21)
    await told.signal("go", 5)
    await stopped.cancel("enough")
    out: list[Any] = [worked, await napper.result(), await told.result()]
    try:
        out.append(await stopped.result())
    except ChildWorkflowError as exc:
        out.append(exc.error)
    return out


@workflow
async def late_nudge(ctx: Any) -> list[Any]:
    """Await a child's result, then signal and cancel it: each refusal caught at its await."""
    child = await ctx.start_workflow(anap, 0.01)
    out: list[Any] = [await child.result()]
    for act in (lambda: child.signal("go", 1), lambda: child.cancel("too late")):
        try:
            await act()
            out.append("sent")
        except ChildWorkflowClosedError as exc:
            out.append(exc.status)
    return out
