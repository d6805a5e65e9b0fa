"""A test app for the operator's actions: a saga that compensates on cancel, long step chains,
a workflow with a bug switched by a file, an activity that fails while a file says so."""

from __future__ import annotations

import os
import time

from replaylog import Context, WorkflowCancelled, activity, current_activity, workflow


def _ledger(event: str) -> None:
    path = os.environ.get("REPLAYLOG_TEST_LEDGER")
    if not path:
        return
    # O_APPEND writes of one short line are atomic, so processes never interleave a line.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (event + "\n").encode())
    finally:
        os.close(fd)


def _switch(name: str) -> bool:
    path = os.environ.get(name)
    return bool(path) and os.path.exists(path)


@activity
def step(i: int) -> int:
    """Note the run in the ledger, take a little time, return i * 10."""
    info = current_activity()
    _ledger(f"{info.workflow_id} {info.slot}")
    time.sleep(float(os.environ.get("REPLAYLOG_TEST_STEP_SECONDS", "0.01")))
    return i * 10


@activity
def refund(amount: int) -> int:
    """A compensation: note it, return the amount given back."""
    info = current_activity()
    _ledger(f"{info.workflow_id} {info.slot} refund")
    return -amount


@activity
def charge() -> str:
    """Fails while the file $REPLAYLOG_TEST_DECLINE exists."""
    if _switch("REPLAYLOG_TEST_DECLINE"):
        raise RuntimeError("card declined")
    return "charged"


@workflow
def saga(ctx: Context, n: int) -> object:
    """n steps, then wait for approval; cancelled, refund every step taken, newest first."""
    done: list[int] = []
    try:
        for i in range(n):
            done.append(ctx.call_activity(step, i))
        return ctx.wait_signal("approve")
    except WorkflowCancelled:
        for value in reversed(done):
            ctx.call_activity(refund, value)
        raise


@workflow
def steps(ctx: Context, n: int) -> int:
    """n steps, then the sum of their results."""
    return sum(ctx.call_activity(step, i) for i in range(n))


@workflow
def buggy(ctx: Context) -> int:
    """One step; raises while the file $REPLAYLOG_TEST_BUG exists (the bug a deploy fixes); one more step."""
    a: int = ctx.call_activity(step, 1)
    if _switch("REPLAYLOG_TEST_BUG"):
        raise ValueError("a bug")
    b: int = ctx.call_activity(step, 2)
    return a + b


@workflow
def pays(ctx: Context) -> str:
    """One step, then a charge tried once."""
    ctx.call_activity(step, 0)
    result: str = ctx.call_activity(charge, max_retries=1)
    return result


@workflow
def forgives(ctx: Context) -> str:
    """Waits for a signal; cancelled, it catches the cancel and completes."""
    try:
        ctx.wait_signal("go")
    except WorkflowCancelled as exc:
        return f"let go: {exc.reason}"
    return "went"


@workflow
def stubborn(ctx: Context) -> object:
    """Waits for "go"; cancelled, it refunds and then waits for "really" instead."""
    try:
        return ctx.wait_signal("go")
    except WorkflowCancelled:
        ctx.call_activity(refund, 1)
        return ctx.wait_signal("really")


@workflow
def napper(ctx: Context) -> str:
    """Sleeps an hour; cancelled meanwhile, refunds and lets the cancel end it."""
    try:
        ctx.sleep(3600)
    except WorkflowCancelled:
        ctx.call_activity(refund, 5)
        raise
    return "rested"


@workflow
def waits_an_hour(ctx: Context) -> object:
    """Waits for "go" at most an hour; cancelled meanwhile, says so and completes."""
    try:
        return ctx.wait_signal("go", timeout=3600)
    except WorkflowCancelled as exc:
        return f"cancelled while waiting: {exc.reason}"


@workflow
def tagged(ctx: Context, customer: str) -> str:
    """Search attributes set, one step, then one of them changed and one removed."""
    ctx.upsert_search_attributes({"customer": customer, "tier": 3, "vip": True})
    ctx.call_activity(step, 0)
    ctx.upsert_search_attributes({"tier": "gold", "vip": None})
    return customer
