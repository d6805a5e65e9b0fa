"""A test app of children started without waiting (ctx.start_workflow): results, signals, cancels, parent-close."""

from __future__ import annotations

from typing import Any

from replaylog import ChildWorkflowClosedError, ChildWorkflowError, Context, activity, workflow


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


@workflow
def tally(ctx: Context, count: int) -> int:
    """A child that adds up the payloads of `count` signals "go"."""
    return sum(int(ctx.wait_signal("go")) for _ in range(count))


@workflow
def relay(ctx: Context, count: int) -> Any:
    """Start a tally child, send it the first "go" (5), and wait for its sum."""
    child = ctx.start_workflow(tally, count)
    child.signal("go", 5)
    return child.result()


@workflow
def quick(ctx: Context) -> str:
    """A child that finishes at once."""
    return "quick"


@workflow
def late_words(ctx: Context) -> list[Any]:
    """Let a child finish, then signal it and cancel it: each refusal caught and kept."""
    child = ctx.start_workflow(quick)
    out: list[Any] = [child.result()]
    for act in (lambda: child.signal("go", 1), lambda: child.cancel("too late")):
        try:
            act()
            out.append("sent")
        except ChildWorkflowClosedError as exc:
            out.append([str(exc), exc.child_id, exc.status])
    return out


@workflow
def late_signal(ctx: Context) -> None:
    """Let a child finish, then signal it without catching the refusal."""
    child = ctx.start_workflow(quick)
    child.result()
    child.signal("go", 1)


@workflow
def caller(ctx: Context, given: str | None) -> Any:
    """Call a tally child of one "go" (under the id `given`, else the derived one) and wait for it."""
    return ctx.call_workflow(tally, 1, id=given)
