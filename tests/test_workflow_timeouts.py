"""Workflow timeouts: at its deadline a workflow is cancelled with reason "timeout", and may compensate;
children inherit what is left of their parent's deadline unless given their own. On a real store
(SQLite file and PostgreSQL) with an in-process worker; the command line for `start --timeout`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import timeout_app
from fault_harness import app_worker

from conftest import run_cli, sql, wait_for
from replaylog.engine.errors import StoreError
from replaylog.engine.store import Store
from replaylog.engine.worker import Worker


@pytest.fixture
def worker(db: Path | str) -> Iterator[Worker]:
    with app_worker(db, timeout_app) as w:
        yield w


def _deadline(store: Store, wid: str) -> float | None:
    ((deadline,),) = sql(store, "SELECT deadline FROM workflows WHERE id = ?", (wid,))
    return None if deadline is None else float(deadline)


def test_a_workflow_past_its_timeout_is_cancelled_with_reason_timeout_and_compensates(worker: Worker,
                                                                                    store: Store) -> None:
    wid = store.start_workflow("slow_order", "o-1", timeout=0.5)
    assert wait_for(lambda: store.get_workflow(wid).status == "cancelled", timeout=120)
    row = store.get_workflow(wid)
    assert (row.error, row.cancel_requested) == ("WorkflowCancelled: timeout", "timeout")
    assert [(c.kind, c.name) for c in store.list_commands(wid)] == [
        ("timer", "sleep"), ("cancel", "timer:sleep"), ("activity", "refund")]
    assert store.list_commands(wid)[2].value == "refunded o-1"
    cancel = [a for a in store.list_audit(wid) if a.action == "cancel"]
    assert [(a.reason, a.detail) for a in cancel] == [("timeout", "its timeout passed")]



def test_a_timed_out_workflow_is_found_by_its_reason_and_shows_it(worker: Worker, store: Store,
                                                                  db: Path | str) -> None:
    wid = store.start_workflow("slow_order", "o-1", timeout=0.3)
    other = store.start_workflow("slow_order", "o-2")
    assert wait_for(lambda: store.get_workflow(wid).status == "cancelled", timeout=120)
    listed = run_cli(db, "list", "--status", "cancelled", "--error-text", "timeout", "--json")
    assert [r["id"] for r in json.loads(listed.stdout)] == [wid]
    shown = run_cli(db, "show", wid).stdout
    assert "WorkflowCancelled: timeout" in shown and "reason: timeout" in shown.replace("'", "")
    assert store.get_workflow(other).status != "cancelled"


def test_children_inherit_the_parents_deadline_unless_given_their_own(worker: Worker, store: Store) -> None:
    wid = store.start_workflow("parent_of_sleepers", 0.5, timeout=3600)
    own, inherited = f"{wid}.0", f"{wid}.1"
    # The first child's own timeout cancels it; the second runs under what is left of the parent's.
    assert wait_for(lambda: [c.kind for c in store.list_commands(wid)] == ["child", "child"], timeout=120)
    assert store.get_workflow(own).status == "cancelled"
    assert store.get_workflow(own).error == "WorkflowCancelled: timeout"
    parent_deadline = _deadline(store, wid)
    assert parent_deadline is not None and _deadline(store, inherited) == parent_deadline
    own_deadline = _deadline(store, own)
    assert own_deadline is not None and own_deadline < parent_deadline - 3000
    assert store.get_workflow(inherited).status in ("pending", "running", "blocked")


def test_a_bad_timeout_is_refused_in_one_line_and_nothing_is_written(store: Store, db: Path | str) -> None:
    for bad in (-1, 0, float("inf"), "10"):
        with pytest.raises(StoreError, match=r"^the workflow timeout must be a positive number of seconds, not "):
            store.start_workflow("slow_order", "o-1", timeout=bad)  # type: ignore[arg-type]
    for text in ("1x", "-5", "0"):
        done = run_cli(db, "start", "slow_order", '"o-1"', "--app", "timeout_app", "--timeout", text)
        assert done.returncode != 0 and done.stdout == ""
        assert len(done.stderr.strip().splitlines()) == 1 and "--timeout" in done.stderr
    assert store.count_workflows() == 0


def test_start_takes_a_timeout_as_a_duration(store: Store, db: Path | str) -> None:
    done = run_cli(db, "start", "slow_order", '"o-1"', "--app", "timeout_app", "--timeout", "1h")
    assert done.returncode == 0, done.stderr
    wid = done.stdout.strip()
    deadline = _deadline(store, wid)
    assert deadline is not None and deadline - store.get_workflow(wid).created_at == pytest.approx(3600, abs=1)
