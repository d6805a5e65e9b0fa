"""The sample support agent, async: a (fake, local) async model client, tools awaited in parallel.

    replaylog start async_support_agent '"order-7"' --app replaylog.samples.async_agent
    replaylog worker --app replaylog.samples.async_agent --until-idle

The same agent as `replaylog.samples.support_agent`, written as code that calls an async
SDK is written: the model client is an object with an `async def complete`, as
`AsyncOpenAI` or `AsyncAnthropic` have; each model call and tool call is an `async def`
activity, and the two lookups run at once with `asyncio.gather`. Every await of a ctx call
is recorded in a slot, so a crash or a restart re-runs none that finished.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from replaylog import AsyncContext, activity, current_activity, workflow


class FakeAsyncModel:
    """A stand-in for an async model SDK client: no network, no keys, the same answer for the same prompt.

    `latency` seconds are awaited per call, as a network round trip would be (holding no thread).
    """

    def __init__(self, latency: float = 0.01) -> None:
        self.latency = latency

    async def complete(self, prompt: str) -> dict[str, Any]:
        """The model's answer to a prompt (a plan, a summary, or a plain answer)."""
        await asyncio.sleep(self.latency)
        if prompt.startswith("plan:"):
            return {"tools": ["lookup_order", "check_policy"], "then": "issue_refund"}
        if prompt.startswith("summarise:"):
            return {"summary": f"{len(prompt)} characters of notes; refund looks allowed"}
        return {"answer": "done"}


MODEL = FakeAsyncModel()


@activity
async def ask_model_async(prompt: str) -> dict[str, Any]:
    """A model call through the async client. The argument guard records the prompt."""
    return await MODEL.complete(prompt)


@activity
async def lookup_order_async(order: str) -> dict[str, Any]:
    """A tool: the order (an async HTTP call, say)."""
    await asyncio.sleep(0.01)
    return {"order": order, "total": 4200, "customer": "c-17"}


@activity
async def check_policy_async(order: str) -> dict[str, Any]:
    """A tool: the refund policy."""
    await asyncio.sleep(0.01)
    return {"refundable": True, "policy": "30-day"}


@activity
def issue_refund_sync(order: str, amount: int) -> dict[str, Any]:
    """The risky tool, a plain function (async and sync activities mix): only after a person approved."""
    return {"refunded": amount, "key": current_activity().idempotency_key}


@workflow
async def summarise_async(ctx: AsyncContext, notes: dict[str, Any]) -> str:
    """A sub-task the agent hands to a child workflow."""
    answer = await ctx.call_activity(ask_model_async, "summarise: " + json.dumps(notes, sort_keys=True))
    return str(answer["summary"])


@workflow
async def async_support_agent(ctx: AsyncContext, order: str = "order-991") -> dict[str, Any]:
    """Plan with the model, run both tools at once, summarise in a child, ask before the risky tool."""
    plan = await ctx.call_activity(ask_model_async, f"plan: refund {order}")
    found, policy = await asyncio.gather(ctx.call_activity(lookup_order_async, order),
                                         ctx.call_activity(check_policy_async, order))
    summary = await ctx.call_workflow(summarise_async, {"order": found, "policy": policy})
    ctx.set_event("progress", {"step": "awaiting approval", "summary": summary})
    answer = await ctx.request_approval(plan["then"], {"order": order, "amount": found["total"],
                                                       "summary": summary})
    if not answer["approved"]:
        return {"order": order, "refunded": None, "rejected_by": answer["by"], "note": answer["note"]}
    receipt = await ctx.call_activity(issue_refund_sync, order, found["total"])
    return {"order": order, "receipt": receipt, "approved_by": answer["by"]}
