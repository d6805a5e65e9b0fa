"""A cancel request that arrives after a workflow's last ctx call: the completion stands, and
`show`, `show --json`, the console and the audit trail say the cancel was not delivered."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import cli_env, run_cli, start_worker, wait_for
from replaylog.console.data import fetch_detail
from replaylog.engine.core import CANCEL_NOT_DELIVERED, Outcome
from replaylog.engine.store import Store, open_store

TTL = 30.0


def _finish(store: Store, outcome: Outcome) -> str:
    wid = store.start_workflow("wf", None)
    (claim,) = store.claim("w1", ttl=TTL)
    store.cancel_workflow(wid, "late")  # while its run goes on
    assert store.commit_batch(finishes=[(claim, outcome)], ttl=TTL) == ([], [True])
    return wid


def test_a_verdict_that_finished_before_a_cancel_reached_the_code_audits_it_as_not_delivered(store: Store) -> None:
    completed = _finish(store, Outcome("completed", result="done"))
    failed = _finish(store, Outcome("failed", error="workflow code raised KeyError: 'x'", error_kind="code"))
    caught = _finish(store, Outcome("completed", result="compensated", cancel_delivered=True))
    for wid, status in ((completed, "completed"), (failed, "failed")):
        row = store.get_workflow(wid)
        assert (row.status, row.cancel_requested) == (status, "late")  # the completion and the request both kept
        last = store.list_audit(wid)[-1]
        assert (last.action, last.reason, last.detail) == (CANCEL_NOT_DELIVERED, "late", f"the workflow {status} first")
        assert fetch_detail(store, wid, 0).cancel == f"not delivered: the workflow {status} first (reason: late)"
    # Delivered (its code caught WorkflowCancelled and completed): nothing more to say.
    assert [a.action for a in store.list_audit(caught)] == ["start", "cancel"]
    assert fetch_detail(store, caught, 0).cancel == "delivered (reason: late)"


def test_a_cancel_after_the_last_ctx_call_keeps_the_completion_and_every_view_says_not_delivered(
        tmp_path: Path, db: Path | str) -> None:
    env = cli_env(AGENT_LEDGER=str(tmp_path / "ledger.jsonl"), AGENT_RELEASE=str(tmp_path / "release"))
    wid = run_cli(db, "start", "holds_after_its_last_call", "--app", "agent_app", env=env).stdout.strip()
    worker = start_worker(db, "--app", "agent_app", env=env)
    try:
        ledger = tmp_path / "ledger.jsonl"
        assert wait_for(lambda: "after the last call" in ledger.read_text(), timeout=60)
        assert run_cli(db, "cancel", wid, "--reason", "late", env=env).returncode == 0
        (tmp_path / "release").touch()
        with open_store(db, readonly=True) as store:
            assert wait_for(lambda: store.get_workflow(wid).status == "completed", timeout=60)
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    shown = json.loads(run_cli(db, "show", wid, "--json").stdout)
    assert (shown["status"], shown["result"]) == ("completed", "done")
    assert shown["cancel"] == {"reason": "late", "state": "not delivered", "why": "the workflow completed first"}
    assert [(a["action"], a["reason"], a["detail"]) for a in shown["audit"]][-1] == (
        CANCEL_NOT_DELIVERED, "late", "the workflow completed first")
    text = run_cli(db, "show", wid, env=cli_env(COLUMNS="200")).stdout
    assert "cancel    not delivered: the workflow completed first (reason: late)" in text
    assert "cancel not delivered" in text  # the audit table's row
