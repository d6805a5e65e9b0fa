"""Sample workflows: the reference refund, retries, repeated signals, an agent loop, durable time.

Activities are deterministic stand-ins for real systems so that the tour and the
tests give the same figures every time. `replaylog start refund` uses these by default.
"""

from __future__ import annotations

from typing import Any

from replaylog import ActivityError, Context, SignalTimeout, activity, current_activity, workflow

# -------------------------------------------------------------- the reference refund


@activity
def fetch_invoice(invoice_id: int) -> int:
    """The invoice amount: 100 per id unit (fetch_invoice(7) → 700)."""
    return int(invoice_id) * 100


@activity
def charge_card(amount: int) -> dict[str, Any]:
    """Charge (a negative amount refunds); the receipt carries the idempotency key."""
    return {"charged": amount, "idempotency_key": current_activity().idempotency_key}


@workflow
def refund(ctx: Context, invoice_id: int = 7) -> dict[str, Any]:
    """fetch_invoice → wait for "approval" → now() → charge_card(-amount)."""
    amount = ctx.call_activity(fetch_invoice, invoice_id)
    approval = ctx.wait_signal("approval")
    if isinstance(approval, dict) and approval.get("approved") is False:
        return {"status": "rejected", "amount": amount}
    ts = ctx.now()
    receipt = ctx.call_activity(charge_card, -amount)
    return {"status": "refunded", "amount": amount, "receipt": receipt, "at": ts}


# -------------------------------------------------------------- retries, then handled


@activity
def flaky_lookup(order_id: str) -> dict[str, str]:
    """Fails on its first two attempts, succeeds on the third."""
    attempt = current_activity().attempt
    if attempt < 3:
        raise ConnectionError(f"lookup service timed out (attempt {attempt})")
    return {"order": order_id, "warehouse": "north"}


@activity
def broken_gateway(order_id: str) -> str:
    """Always fails: the carrier's API is down."""
    raise RuntimeError(f"carrier API returned 503 for {order_id}")


@activity
def open_ticket(order_id: str, reason: str) -> str:
    """Hand the order to a person."""
    return f"TICKET-{order_id}"


@workflow
def shipping(ctx: Context, order_id: str = "A-1") -> dict[str, Any]:
    """A lookup that succeeds on retry, a gateway that fails for good and is handled."""
    info = ctx.call_activity(flaky_lookup, order_id, max_retries=3)
    try:
        label = ctx.call_activity(broken_gateway, order_id, max_retries=2)
    except ActivityError as exc:
        ticket = ctx.call_activity(open_ticket, order_id, exc.error)
        return {"order": info, "shipped": False, "ticket": ticket}
    return {"order": info, "shipped": True, "label": label}


@workflow
def express_shipping(ctx: Context, order_id: str = "B-2") -> str:
    """No fallback: the gateway's recorded failure fails the workflow with an ActivityError."""
    ctx.call_activity(flaky_lookup, order_id, max_retries=3)
    label: str = ctx.call_activity(broken_gateway, order_id, max_retries=3)
    return label


# -------------------------------------------------------------- two signals of one name


@activity
def record_approval(step: int, who: Any) -> str:
    """Note an approval."""
    return f"step {step} approved by {who}"


@workflow
def two_approvals(ctx: Context) -> list[str]:
    """Waits for two "approval" signals and consumes them in delivery order."""
    notes = []
    for step in (1, 2):
        who = ctx.wait_signal("approval")
        notes.append(ctx.call_activity(record_approval, step, who))
    return notes


# -------------------------------------------------------------- an agent loop

_PLAN = {
    # A deterministic stand-in for a model: what it "chooses" after each tool result.
    0: {"tool": "lookup_order", "args": {}},
    1: {"tool": "check_policy", "args": {}},
    2: {"tool": "issue_refund", "args": {"amount": 4200}},
    3: {"tool": "finish", "args": {}},
}
RISKY_TOOLS = {"issue_refund"}


@activity
def model_choose(task: str, turn: int, last_result: Any) -> dict[str, Any]:
    """Stand-in for a model call choosing the next tool."""
    return dict(_PLAN.get(turn, {"tool": "finish", "args": {}}))


@activity
def run_tool(tool: str, task: str, args: dict[str, Any]) -> dict[str, Any]:
    """Stand-in for a tool call."""
    if tool == "lookup_order":
        return {"order": task, "total": 4200, "customer": "c-17"}
    if tool == "check_policy":
        return {"refundable": True, "policy": "30-day"}
    if tool == "issue_refund":
        return {"refunded": args.get("amount"), "key": current_activity().idempotency_key}
    return {"error": f"unknown tool {tool}"}


@workflow
def agent(ctx: Context, task: str = "order-991") -> dict[str, Any]:
    """A tool-calling loop: each model call and tool call is an activity; a person approves risky tools."""
    transcript: list[dict[str, Any]] = []
    last: Any = None
    for turn in range(10):
        choice = ctx.call_activity(model_choose, task, turn, last)
        tool = choice["tool"]
        if tool == "finish":
            break
        if tool in RISKY_TOOLS:
            verdict = ctx.wait_signal("approval")
            if not (isinstance(verdict, dict) and verdict.get("approved")):
                transcript.append({"tool": tool, "skipped": "not approved"})
                break
        last = ctx.call_activity(run_tool, tool, task, choice["args"])
        transcript.append({"tool": tool, "result": last})
    return {"task": task, "turns": transcript}


# -------------------------------------------------------------- an agent with parallel tools, a child, an approval


def _fake_model(prompt: str) -> dict[str, Any]:
    """A deterministic stand-in for a model: the same prompt always gets the same answer."""
    if prompt.startswith("plan:"):
        return {"tools": ["lookup_order", "check_policy"], "then": "issue_refund"}
    if prompt.startswith("summarise:"):
        return {"summary": f"{len(prompt)} characters of notes; refund looks allowed"}
    return {"answer": "done"}


@activity
def ask_model(prompt: str) -> dict[str, Any]:
    """A model call (a fake one: no network, no keys). The argument guard records the prompt."""
    return _fake_model(prompt)


@activity
def lookup_order(order: str) -> dict[str, Any]:
    """A tool: the order."""
    return {"order": order, "total": 4200, "customer": "c-17"}


@activity
def check_policy(order: str) -> dict[str, Any]:
    """A tool: the refund policy."""
    return {"refundable": True, "policy": "30-day"}


@activity
def issue_refund(order: str, amount: int) -> dict[str, Any]:
    """The risky tool: only ever called after a person approved this very request."""
    return {"refunded": amount, "key": current_activity().idempotency_key}


@workflow
def summarise(ctx: Context, notes: dict[str, Any]) -> str:
    """A sub-task the agent hands to a child workflow."""
    summary: str = ctx.call_activity(ask_model, f"summarise: {notes}")["summary"]
    return summary


@workflow
def support_agent(ctx: Context, order: str = "order-991") -> dict[str, Any]:
    """Plan with the model, run two tools at once, summarise in a child, ask before the risky tool."""
    plan = ctx.call_activity(ask_model, f"plan: refund {order}")
    found, policy = ctx.parallel([ctx.task(lookup_order, order), ctx.task(check_policy, order)])
    summary = ctx.call_workflow(summarise, {"order": found, "policy": policy})
    answer = ctx.request_approval(plan["then"], {"order": order, "amount": found["total"], "summary": summary})
    if not answer["approved"]:
        return {"order": order, "refunded": None, "rejected_by": answer["by"], "note": answer["note"]}
    receipt = ctx.call_activity(issue_refund, order, found["total"])
    return {"order": order, "receipt": receipt, "approved_by": answer["by"]}


# -------------------------------------------------------------- a long one, for the demo


@activity
def crunch(step: int) -> int:
    """A slow step (half a second), so the demo always has something running."""
    import time

    time.sleep(0.5)
    return step * step


@workflow
def report(ctx: Context, steps: int = 200) -> int:
    """Many slow steps: shows a workflow in the running state."""
    return sum(ctx.call_activity(crunch, i) for i in range(int(steps)))


# -------------------------------------------------------------- time, randomness, versions


@activity
def notify_customer(invoice_id: int, message: str) -> str:
    """Stand-in for an e-mail to the customer."""
    return f"told the customer of invoice {invoice_id}: {message}"


@workflow
def refund_with_deadline(ctx: Context, invoice_id: int = 21) -> dict[str, Any]:
    """The refund whose approval expires: fetch_invoice → "approval" within two days → charge.

    The deadline is recorded when the wait is first reached; if it passes first, the
    timeout is recorded and the customer is told instead. A later change gave refunds a
    refund number: `patched` keeps the refunds started before it on their old path.
    """
    amount = ctx.call_activity(fetch_invoice, invoice_id)
    try:
        approval = ctx.wait_signal("approval", timeout=2 * 86400)
    except SignalTimeout:
        note = ctx.call_activity(notify_customer, invoice_id, "the refund request expired unapproved")
        return {"status": "expired", "amount": amount, "note": note}
    if isinstance(approval, dict) and approval.get("approved") is False:
        return {"status": "rejected", "amount": amount}
    receipt = ctx.call_activity(charge_card, -amount)
    if ctx.patched("refund-number"):
        receipt = {**receipt, "refund_number": ctx.uuid4()}
    return {"status": "refunded", "amount": amount, "receipt": receipt}


@activity
def send_reminder(to: str, attempt: int) -> str:
    """Stand-in for sending a reminder."""
    return f"reminder {attempt} sent to {to}"


@workflow
def reminder(ctx: Context, to: str = "ann@example.com") -> list[str]:
    """Remind someone tomorrow, then again a few hours later (jittered, recorded once)."""
    sent = []
    ctx.sleep(86400)
    sent.append(ctx.call_activity(send_reminder, to, 1))
    ctx.sleep(3 * 3600 + ctx.random() * 3600)
    sent.append(ctx.call_activity(send_reminder, to, 2))
    return sent
