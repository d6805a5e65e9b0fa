"""Version 1 of `order`, from before the "notify-by-sms" patch (see patch_v2)."""

from __future__ import annotations

from replaylog import Context, activity, workflow


@activity
def charge(n: int) -> int:
    """A stand-in charge."""
    return n


@activity
def notify(how: str) -> str:
    """A stand-in notification."""
    return how


@workflow(name="order")
def order(ctx: Context, n: int) -> str:
    """charge → "shipped" → notify by mail → "done"."""
    ctx.call_activity(charge, n)
    ctx.wait_signal("shipped")
    how = ctx.call_activity(notify, "mail")
    ctx.wait_signal("done")
    return how
