"""The reference's refund workflow, with counters of its real side effects (shared by the trace tests)."""

from __future__ import annotations

from typing import Any

from replaylog import Context, activity, workflow

side_effects = {"charges": 0, "invoices": 0}


@activity
def fetch_invoice(invoice_id: int) -> int:
    """Look the invoice up: its amount is the id times 100."""
    side_effects["invoices"] += 1
    return invoice_id * 100


@activity
def charge_card(amount: int) -> dict[str, int]:
    """Charge (a negative amount refunds)."""
    side_effects["charges"] += 1
    return {"charged": amount}


@workflow
def refund(ctx: Context, invoice_id: int) -> dict[str, Any]:
    """Fetch the invoice, wait for approval, read the clock once, charge once."""
    amount = ctx.call_activity(fetch_invoice, invoice_id)
    approval = ctx.wait_signal("approval")
    ts = ctx.now()
    receipt = ctx.call_activity(charge_card, -amount)
    return {"amount": amount, "approval": approval, "at": ts, "receipt": receipt}
