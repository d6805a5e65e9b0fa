"""Version 2 of `order`: notifies by SMS, behind `patched`, so version 1's histories still replay."""

from __future__ import annotations

from patch_v1 import charge, notify

from replaylog import Context, workflow


@workflow(name="order")
def order(ctx: Context, n: int) -> str:
    """charge → "shipped" → notify by SMS (by mail on version 1's histories) → "done"."""
    ctx.call_activity(charge, n)
    ctx.wait_signal("shipped")
    how = "mail"  # the old path
    if ctx.patched("notify-by-sms"):
        how = "sms"
    how = ctx.call_activity(notify, how)
    ctx.wait_signal("done")
    return how
