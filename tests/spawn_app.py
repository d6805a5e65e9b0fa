"""A test app of children started without waiting (ctx.start_workflow): results, signals, cancels, parent-close."""

from __future__ import annotations

from typing import Any

from replaylog import ChildWorkflowError, Context, activity, workflow


@activity
def step(n: int) -> int:
    """Some work the parent does while its child runs."""
    return n * 2


@workflow
def nap(ctx: Context, seconds: float) -> str:
    """A child that sleeps, durably."""
    ctx.sleep(seconds)
    return "woke"


@workflow
def waiter(ctx: Context) -> Any:
    """A child that waits for the signal "go" and returns its payload."""
    return ctx.wait_signal("go")


@workflow
def overlap(ctx: Context, seconds: float) -> list[Any]:
    """Start a child, work meanwhile, then wait for the child's result."""
    child = ctx.start_workflow(nap, seconds)
    worked = ctx.call_activity(step, 21)
    return [worked, child.result(), child.id]


@workflow
def leaves(ctx: Context, policy: str) -> str:
    """Start a long child under `policy` and finish at once, leaving it running."""
    ctx.start_workflow(nap, 3600, parent_close=policy)
    return "done"


@workflow
def steers(ctx: Context) -> list[Any]:
    """Signal one child, cancel another, and collect both outcomes."""
    told = ctx.start_workflow(waiter)
    stopped = ctx.start_workflow(nap, 3600)
    told.signal("go", 5)
    stopped.cancel("enough")
    out: list[Any] = [told.result()]
    try:
        out.append(stopped.result())
    except ChildWorkflowError as exc:
        out.append(exc.error)
    return out
