"""Version 1 of the refund workflow, kept to show a NonDeterministicError.

It looked the customer up before fetching the invoice. A refund started under this
version and resumed under the current code diverges at slot 0: history holds
activity:fetch_customer, the current code issues activity:fetch_invoice.
"""

from __future__ import annotations

from typing import Any

from replaylog import Context, activity, workflow
from replaylog.samples import charge_card, fetch_invoice


@activity
def fetch_customer(invoice_id: int) -> dict[str, Any]:
    """The customer an invoice belongs to."""
    return {"customer": "c-17", "invoice": invoice_id}


@workflow(name="refund")
def refund_v1(ctx: Context, invoice_id: int = 7) -> dict[str, Any]:
    """The old refund: fetch_customer → fetch_invoice → approval → now() → charge_card."""
    customer = ctx.call_activity(fetch_customer, invoice_id)
    amount = ctx.call_activity(fetch_invoice, invoice_id)
    ctx.wait_signal("approval")
    ts = ctx.now()
    receipt = ctx.call_activity(charge_card, -amount)
    return {"status": "refunded", "amount": amount, "customer": customer, "receipt": receipt, "at": ts}
