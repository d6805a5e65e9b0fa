"""The workflows the console tests seed: the sample refund, an activity that fails for good,
and names and errors full of markup and terminal escape codes."""

from __future__ import annotations

from replaylog import Context, activity, workflow
from replaylog.samples import charge_card, fetch_invoice, refund

__all__ = ["carrier_down", "charge_card", "failing_shipment", "fetch_invoice", "fulfil", "hostile", "pick",
           "refund", "shout", "weigh"]


@activity
def carrier_down(order_id: str) -> str:
    """Always fails: the carrier's API is down."""
    raise RuntimeError(f"carrier API returned 503 for {order_id}")


@workflow
def failing_shipment(ctx: Context, order_id: str) -> str:
    """Does not handle its activity's failure, so the workflow fails with it."""
    return ctx.call_activity(carrier_down, order_id, max_retries=2)


@activity(name="shout[/bold]")
def shout(text: str) -> str:
    """Fails with an error full of markup and escape codes."""
    raise ValueError("[/bold][red]not markup\x1b[31m red? \x1b[2J cleared?")


@workflow(name="hostile[/bold]")
def hostile(ctx: Context, text: str) -> str:
    """Fails on an activity whose name and error are markup."""
    return ctx.call_activity(shout, text, max_retries=1)


@activity
def pick(item: int) -> dict[str, int]:
    """Pick an item from the shelf."""
    return {"item": item, "shelf": item % 4}


@activity
def weigh(items: int) -> float:
    """Weigh the parcel."""
    return items * 1.5


@workflow
def fulfil(ctx: Context, items: int) -> float:
    """Pick every item, weigh the parcel, wait for "go". Version 1 (tests/console_workflows_v1.py)
    waited before weighing: a history it left diverges from this code at the weighing slot."""
    for i in range(items):
        ctx.call_activity(pick, i)
    weight = ctx.call_activity(weigh, items)
    ctx.wait_signal("go")
    return weight
