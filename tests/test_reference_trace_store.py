"""The reference's three-run refund trace, through the SQLite store and the real worker."""

from __future__ import annotations

from pathlib import Path

from reference_refund import charge_card, fetch_invoice, refund
from reference_refund import side_effects as effects

from replaylog import run
from replaylog.engine.app import Registry
from replaylog.engine.store import open_store
from replaylog.engine.worker import Worker


def test_reference_trace_through_the_store(db_path: Path) -> None:
    registry = Registry("trace", workflows={"refund": refund},
                        activities={"fetch_invoice": fetch_invoice, "charge_card": charge_card})
    effects.update(charges=0, invoices=0)  # shared with test_core's runs in this process

    def drain() -> None:
        Worker(db_path, registry, clock=lambda: 1001.0).run(until_idle=True)

    with open_store(db_path) as store:
        wid = store.start_workflow("refund", 7)
    drain()  # run 1: 700 recorded, blocked on approval, nothing charged
    with open_store(db_path) as store:
        row = store.get_workflow(wid)
        assert (row.status, row.blocked_on) == ("blocked", "approval")
        assert [(c.name, c.value) for c in store.list_commands(wid)] == [("fetch_invoice", 700)]
        assert effects == {"charges": 0, "invoices": 1}
        store.send_signal(wid, "approval", {"approved": True})
    drain()  # run 2: slot 0 replays, now() records 1001, charge_card runs once
    with open_store(db_path) as store:
        row = store.get_workflow(wid)
        assert row.status == "completed"
        assert row.result == {"amount": 700, "approval": {"approved": True}, "at": 1001.0, "receipt": {"charged": -700}}
        assert [(c.kind, c.name, c.value) for c in store.list_commands(wid)] == [
            ("activity", "fetch_invoice", 700), ("now", "now", 1001.0), ("activity", "charge_card", {"charged": -700})]
        assert effects == {"charges": 1, "invoices": 1}
        state = store.load_state(wid)
    # Run 3: replaying the completed history from the store has zero new side effects.
    again = run(refund, state, clock=lambda: 9999.0)
    assert again.status == "completed" and again.outcome.result == row.result
    assert (again.context.replayed_commands, again.context.executed_commands) == (3, 0)
    assert effects == {"charges": 1, "invoices": 1}
