"""The client's handles are typed by the workflow's result: `make lint` checks this file with mypy.

A handle of `client.start(fn, …)` is a WorkflowHandle[R] for a function returning R, so
`result()` returns R; a start by name knows no function, and gives WorkflowHandle[Any].
"""

from __future__ import annotations

from typing import Any, assert_type

from replaylog import Client, Context, WorkflowHandle, activity, workflow


@activity
def price(sku: str) -> int:
    """The price of an item, in cents."""
    return 100 * len(sku)


@workflow
def quote(ctx: Context, skus: list[str]) -> dict[str, int]:
    """The price of each item."""
    return {sku: ctx.call_activity(price, sku) for sku in skus}


def typed(client: Client) -> int:
    """What mypy sees of a handle: its result type comes from the workflow function."""
    handle = client.start(quote, ["a", "bb"])
    assert_type(handle, WorkflowHandle[dict[str, int]])
    prices = handle.result(timeout=30)
    assert_type(prices, dict[str, int])
    assert_type(handle.fork(0), WorkflowHandle[dict[str, int]])
    by_name = client.start("quote", ["a"])
    assert_type(by_name, WorkflowHandle[Any])
    return sum(prices.values())
