"""`replaylog demo` seeds workflows in every state, through the real store and worker."""

from __future__ import annotations

from pathlib import Path

from conftest import run_cli
from engine.demo import seed
from engine.store import SQLiteStore


def test_demo_seed_has_every_state(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    ids = seed(db, echo=lambda _line: None)
    with SQLiteStore(db, readonly=True) as store:
        rows = {key: store.get_workflow(wid) for key, wid in ids.items()}
    assert rows["completed"].status == "completed"
    assert (rows["blocked"].status, rows["blocked"].blocked_on) == ("blocked", "approval")
    assert rows["activity_failure"].status == "failed"
    assert "ActivityError" in (rows["activity_failure"].error or "")
    nd = rows["nondeterministic"]
    assert nd.status == "failed" and nd.diagnostic is not None
    assert (nd.diagnostic["slot"], nd.diagnostic["recorded"], nd.diagnostic["issued"]) == (
        0, "activity:fetch_customer", "activity:fetch_invoice")
    assert rows["running"].status == "pending"  # the demo's background worker picks it up


def test_demo_without_a_terminal_prints_the_tour(tmp_path: Path) -> None:
    proc = run_cli(tmp_path / "demo.db", "demo", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "refund-12 is completed" in proc.stderr
    assert "NonDeterministicError" in proc.stderr
