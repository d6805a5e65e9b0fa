"""The client tests' app: a workflow for each way a workflow ends, events, approvals and time."""

from __future__ import annotations

from typing import Any

from replaylog import ChildWorkflowError, Context, SignalTimeout, activity, workflow

# Flipped by a test (the worker runs in the test's process): `flaky` fails while it is set.
FAIL = {"flaky": True}


@activity
def double(x: int) -> int:
    """Twice x."""
    return x * 2


@workflow
def add(ctx: Context, x: int) -> int:
    """Events around one activity: progress 0.5, then 1.0; the result is 2x."""
    ctx.set_event("progress", 0.5)
    y: int = ctx.call_activity(double, x)
    ctx.set_event("progress", 1.0)
    return y


@workflow
def noinput(ctx: Context) -> str:
    """Takes no input."""
    return "done"


@workflow
def waits(ctx: Context) -> Any:
    """Waits for signal "go" and returns its payload."""
    ctx.set_event("stage", "waiting")
    return ctx.wait_signal("go")


@workflow
def fails(ctx: Context) -> None:
    """Its code raises."""
    raise ValueError("boom")


@workflow
def flaky(ctx: Context) -> str:
    """Fails while FAIL["flaky"] is set, else completes."""
    ctx.call_activity(double, 1)
    if FAIL["flaky"]:
        raise RuntimeError("not yet")
    return "recovered"


@workflow
def ships(ctx: Context) -> Any:
    """Asks for an approval to ship and returns the answer."""
    return ctx.request_approval("ship", {"items": 3})


@workflow
def sleeper(ctx: Context) -> str:
    """Sleeps an hour."""
    ctx.sleep(3600)
    return "woke"


@workflow
def day_then_deadline(ctx: Context) -> str:
    """Sleeps 24 hours, then waits an hour for signal "go"."""
    ctx.sleep(24 * 3600)
    ctx.set_event("stage", "waiting for go")
    try:
        return str(ctx.wait_signal("go", timeout=3600))
    except SignalTimeout:
        return "timed out"


@workflow
def clock(ctx: Context) -> float:
    """The clock read at its start."""
    return ctx.now()


@workflow
def bad_events(ctx: Context) -> list[str]:
    """A value JSON cannot hold, then one over the cap, then a good one: only the good one is recorded."""
    refused = []
    try:
        ctx.set_event("bad", {1, 2})
    except Exception as exc:
        refused.append(type(exc).__name__)
    try:
        ctx.set_event("big", "x" * 5000)
    except Exception as exc:
        refused.append(type(exc).__name__)
    ctx.set_event("good", 1)
    return refused


@workflow
def parent(ctx: Context, n: int) -> list[Any]:
    """Starts `n` children (noinput) and returns their results."""
    return [ctx.call_workflow(noinput, id=f"{ctx.workflow_id}-child-{i}") for i in range(n)]


@workflow
def waits_on_child(ctx: Context, own: float | None) -> str:
    """Waits for a child that waits for "go" (its own timeout `own`, else this workflow's deadline)."""
    try:
        return str(ctx.call_workflow(waits, timeout=own))
    except ChildWorkflowError as exc:
        return f"child: {exc.error}"
