"""Children started without waiting (ctx.start_workflow): the handle's result, signal and cancel are slots;
a parent that finishes first applies each child's parent-close policy, in the child's audit trail.
On a real store (SQLite file and PostgreSQL) with an in-process worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import spawn_app
from fault_harness import app_worker

from conftest import wait_for
from replaylog import Context, WorkflowState, run
from replaylog.engine.store import Store
from replaylog.engine.worker import Worker


@pytest.fixture
def worker(db: Path | str) -> Iterator[Worker]:
    with app_worker(db, spawn_app) as w:
        yield w


def _done(store: Store, wid: str) -> bool:
    return store.get_workflow(wid).status in ("completed", "failed", "cancelled", "terminated")


def test_a_child_started_without_waiting_runs_while_the_parent_works_and_its_result_is_a_later_slot(
        worker: Worker, store: Store) -> None:
    wid = store.start_workflow("overlap", 0.2)
    assert wait_for(lambda: _done(store, wid), timeout=120)
    row = store.get_workflow(wid)
    assert row.status == "completed", row.error
    assert row.result == [42, "woke", f"{wid}.0"]
    assert [(c.kind, c.name) for c in store.list_commands(wid)] == [
        ("child_start", "nap"), ("activity", "step"), ("child_result", f"{wid}.0")]
    assert store.get_workflow(f"{wid}.0").parent == wid


@pytest.mark.parametrize(("policy", "status"), [("cancel", "cancelled"), ("terminate", "terminated"),
                                                ("abandon", "blocked")])
def test_a_parent_that_finishes_first_applies_its_childs_parent_close_policy(worker: Worker, store: Store,
                                                                            policy: str, status: str) -> None:
    wid = store.start_workflow("leaves", policy)
    child = f"{wid}.0"
    assert wait_for(lambda: store.get_workflow(wid).status == "completed", timeout=120)
    assert wait_for(lambda: store.get_workflow(child).status == status, timeout=120)
    audit = [(a.action, a.reason, a.detail) for a in store.list_audit(child)]
    action = {"cancel": "cancel", "terminate": "terminate", "abandon": "abandon"}[policy]
    assert (action, "parent closed", f"parent-close policy {policy}: its parent {wid} completed") in audit
    if policy == "cancel":
        assert store.get_workflow(child).error == "WorkflowCancelled: parent closed"


def test_a_parent_signals_and_cancels_the_children_it_started(worker: Worker, store: Store) -> None:
    wid = store.start_workflow("steers", has_input=False)
    assert wait_for(lambda: _done(store, wid), timeout=120)
    row = store.get_workflow(wid)
    assert row.status == "completed", row.error
    assert row.result == [5, "WorkflowCancelled: enough"]
    assert [c.kind for c in store.list_commands(wid)] == [
        "child_start", "child_start", "child_signal", "child_cancel", "child_result", "child_result"]
    cancel = [(a.action, a.actor, a.reason) for a in store.list_audit(f"{wid}.1") if a.action == "cancel"]
    assert cancel == [("cancel", f"workflow {wid}", "enough")]


def test_a_bad_parent_close_policy_is_refused_and_nothing_is_recorded() -> None:
    def wf(ctx: Context) -> None:
        ctx.start_workflow("nap", 1, parent_close="explode")

    result = run(wf, WorkflowState(has_input=False), clock=lambda: 0.0)
    assert result.outcome.error == ("workflow code raised ValueError: start_workflow(parent_close='explode'): say one"
                                    " of cancel, terminate, abandon")
    assert result.state.commands == ()
