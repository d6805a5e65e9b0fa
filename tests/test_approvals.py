"""Approvals bound to the request: recorded, answered once, and only by an answer to that request."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import cli_env, run_cli, wait_for
from replaylog.engine.core import Context, SignalTimeout, WorkflowState, dry_replay, run, signal
from replaylog.engine.store import open_store


def clock() -> float:
    return 1.0


def asks(ctx: Context, _input: Any) -> Any:
    return ctx.request_approval("wire the money", {"amount": 10})


def test_a_request_is_recorded_and_blocks_until_its_answer_arrives() -> None:
    first = run(asks, WorkflowState(), clock=clock)
    assert first.status == "blocked" and first.outcome.blocked_on == "approval:req-0"
    (rec,) = first.state.commands
    assert (rec.kind, rec.name, rec.value) == ("approval", "wire the money",
                                               {"request": "req-0", "action": "wire the money",
                                                "details": {"amount": 10}})
    answer = {"approved": True, "by": "ann@host", "note": None, "request": "req-0"}
    done = run(asks, signal(first.state, "approval:req-0", answer), clock=clock)
    assert done.status == "completed" and done.outcome.result == answer
    assert done.context.replayed_commands == 1 and done.context.executed_commands == 0
    assert dry_replay(asks, first.state, status="blocked").ok


def test_an_answer_to_another_request_does_not_unlock_this_one() -> None:
    first = run(asks, WorkflowState(), clock=clock)
    stale = run(asks, signal(first.state, "approval:req-7", {"approved": True}), clock=clock)
    assert stale.status == "blocked"


@pytest.mark.parametrize(("action", "details", "message"), [
    ("", None, "the action must be a non-empty str"),
    (None, None, "the action must be a non-empty str"),
    ("go", {1, 2}, "slot 0: the details of approval 'go' is of type set"),
])
def test_bad_requests_are_clear_and_record_nothing(action: Any, details: Any, message: str) -> None:
    def wf(ctx: Context, _input: Any) -> Any:
        return ctx.request_approval(action, details)

    result = run(wf, WorkflowState(), clock=clock)
    assert result.status == "failed" and message in (result.outcome.error or "")
    assert result.state.commands == ()


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def asks_for(ctx: Context, _input: Any) -> Any:
    try:
        return ctx.request_approval("wire the money", {"amount": 10}, timeout=60)
    except SignalTimeout as exc:
        return {"timed out": exc.name, "deadline": exc.deadline}


def test_a_request_with_a_timeout_waits_until_its_recorded_deadline_then_raises_signal_timeout() -> None:
    clock = Clock()
    first = run(asks_for, WorkflowState(), clock=clock)
    assert first.status == "blocked"
    assert (first.outcome.blocked_on, first.outcome.wake_at) == ("approval:req-0", 1060.0)
    assert [c.kind for c in first.state.commands] == ["approval", "deadline"]
    clock.now = 1030.0  # a restart before the deadline: it still waits, on the same deadline
    again = run(asks_for, first.state, clock=clock)
    assert (again.status, again.outcome.wake_at) == ("blocked", 1060.0)
    clock.now = 1061.0
    late = run(asks_for, first.state, clock=clock)
    assert late.status == "completed"
    assert late.outcome.result == {"timed out": "approval:req-0", "deadline": 1060.0}
    assert [c.kind for c in late.state.commands] == ["approval", "deadline", "timeout"]
    # The timeout is history: a replay raises it again, whatever answer arrived since.
    answered = signal(late.state, "approval:req-0", {"approved": True, "request": "req-0"})
    replayed = run(asks_for, answered, clock=clock)
    assert replayed.outcome.result == late.outcome.result and replayed.context.executed_commands == 0


def test_an_answer_before_the_deadline_is_returned() -> None:
    clock = Clock()
    first = run(asks_for, WorkflowState(), clock=clock)
    answer = {"approved": False, "by": "ann@host", "note": "no", "request": "req-0"}
    done = run(asks_for, signal(first.state, "approval:req-0", answer), clock=clock)
    assert done.status == "completed" and done.outcome.result == answer


@pytest.mark.parametrize(("timeout", "message"), [
    ("soon", "seconds must be a number, got str"),
    (-1, "seconds must be finite and at least 0"),
])
def test_a_bad_timeout_is_refused_before_the_request_is_recorded(timeout: Any, message: str) -> None:
    def wf(ctx: Context, _input: Any) -> Any:
        return ctx.request_approval("go", None, timeout=timeout)

    result = run(wf, WorkflowState(), clock=clock)
    assert result.status == "failed" and message in (result.outcome.error or "")
    assert "ctx.request_approval('go', timeout=...)" in (result.outcome.error or "")
    assert result.state.commands == ()


# ------------------------------------------------------------------ the command line and a real worker


def cli_for(db: Path | str, tmp_path: Path) -> Any:
    env = cli_env(AGENT_LEDGER=str(tmp_path / "ledger.jsonl"))
    return lambda *args: run_cli(db, *args, env=env)


def one_line_refusal(proc: Any, *needles: str) -> None:
    assert proc.returncode == 1 and proc.stdout == "", proc
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def signal_count(db: Path | str, wid: str) -> int:
    with open_store(db, readonly=True) as store:
        return store.count_signals(wid)[0]


def kinds(db: Path | str, wid: str) -> list[str]:
    with open_store(db, readonly=True) as store:
        return [c.kind for c in store.list_commands(wid)]


def test_approve_answers_the_pending_request_only_and_once(tmp_path: Path, db: Path | str) -> None:
    cli = cli_for(db, tmp_path)
    wid = cli("start", "guarded", "--app", "agent_app").stdout.strip().splitlines()[-1]
    assert cli("worker", "--until-idle", "--quiet", "--app", "agent_app").returncode == 0
    listed = cli("list")
    assert "approval: delete the backups (request req-0)" in listed.stdout, listed.stdout
    shown = json.loads(cli("show", wid, "--json").stdout)
    assert shown["approval"] == {"request": "req-0", "action": "delete the backups", "details": {"count": 3}}
    assert "approval: delete the backups (request req-0)" in cli("show", wid).stdout

    one_line_refusal(cli("signal", wid, "approval:req-0", "{}"), "use `replaylog approve`")
    one_line_refusal(cli("approve", wid, "--request", "req-5"), "request 'req-5' is not the pending one",
                     "'req-0'")
    assert signal_count(db, wid) == 0

    approved = cli("approve", wid, "--note", "checked")
    assert approved.returncode == 0 and "approved request req-0" in approved.stdout
    one_line_refusal(cli("approve", wid), "has no pending approval request", "it is pending")  # used once
    assert signal_count(db, wid) == 1

    assert cli("worker", "--until-idle", "--quiet", "--app", "agent_app").returncode == 0
    assert "approval: send the email (request req-1)" in cli("list").stdout
    one_line_refusal(cli("approve", wid, "--request", "req-0"), "not the pending one")  # a stale answer
    rejected = cli("approve", wid, "--reject", "--request", "req-1", "--note", "not today")
    assert rejected.returncode == 0 and "rejected request req-1" in rejected.stdout
    assert cli("worker", "--until-idle", "--quiet", "--app", "agent_app").returncode == 0
    result = json.loads(cli("show", wid, "--json").stdout)
    assert result["status"] == "completed", result
    first, second = result["result"]
    assert first["approved"] is True and first["note"] == "checked" and first["request"] == "req-0"
    assert "@" in first["by"]
    assert second == {"approved": False, "by": first["by"], "note": "not today", "request": "req-1"}
    one_line_refusal(cli("approve", wid), "is completed")


def test_approving_a_workflow_that_waits_for_a_signal_is_refused(tmp_path: Path, db: Path | str) -> None:
    cli = cli_for(db, tmp_path)
    wid = cli("start", "waits_for_go", "--app", "agent_app").stdout.strip().splitlines()[-1]
    one_line_refusal(cli("approve", wid), "has no pending approval request", "it is pending")
    assert cli("worker", "--until-idle", "--quiet", "--app", "agent_app").returncode == 0
    one_line_refusal(cli("approve", wid), "has no pending approval request", "waits for signal 'go'")
    one_line_refusal(cli("approve", "wf-nope"), "no workflow with id 'wf-nope'")
    assert signal_count(db, wid) == 0


def test_a_timed_out_request_is_closed_and_a_late_approve_says_so(tmp_path: Path, db: Path | str) -> None:
    cli = cli_for(db, tmp_path)
    wid = cli("start", "guarded_for", "0.2", "--app", "agent_app").stdout.strip().splitlines()[-1]
    assert cli("worker", "--until-idle", "--quiet", "--app", "agent_app").returncode == 0
    with open_store(db, readonly=True) as store:
        row = store.get_workflow(wid)
    assert (row.status, row.blocked_on) == ("blocked", "approval:req-0") and row.wake_at is not None
    assert "approval: restart the cluster (request req-0) (until" in cli("list").stdout
    # The deadline passes before any worker records the timeout: the store closes the request itself.
    assert wait_for(lambda: time.time() > (row.wake_at or 0) + 0.05, timeout=120)
    one_line_refusal(cli("approve", wid), "request 'req-0'", "timed out at", "the answer was not recorded")
    assert signal_count(db, wid) == 0
    assert cli("worker", "--until-idle", "--quiet", "--app", "agent_app").returncode == 0
    shown = json.loads(cli("show", wid, "--json").stdout)
    assert (shown["status"], shown["result"]) == ("completed", "timed out")
    assert kinds(db, wid) == ["approval", "deadline", "timeout"]
    # Afterwards too: a late answer, named or not, is refused saying that the request timed out.
    one_line_refusal(cli("approve", wid), "has no pending approval request (it is completed)",
                     "request 'req-0' timed out at", "is closed")
    one_line_refusal(cli("approve", wid, "--request", "req-0"), "request 'req-0' timed out at")
    assert signal_count(db, wid) == 0


def test_an_approval_within_its_timeout_is_delivered(tmp_path: Path, db: Path | str) -> None:
    cli = cli_for(db, tmp_path)
    wid = cli("start", "guarded_for", "3600", "--app", "agent_app").stdout.strip().splitlines()[-1]
    assert cli("worker", "--until-idle", "--quiet", "--app", "agent_app").returncode == 0
    approved = cli("approve", wid, "--request", "req-0", "--note", "go")
    assert approved.returncode == 0, approved.stderr
    with open_store(db, readonly=True) as store:
        row = store.get_workflow(wid)
    assert (row.status, row.wake_at) == ("pending", None)  # woken, its deadline cleared
    assert cli("worker", "--until-idle", "--quiet", "--app", "agent_app").returncode == 0
    shown = json.loads(cli("show", wid, "--json").stdout)
    assert shown["status"] == "completed" and shown["result"]["approved"] is True
    assert kinds(db, wid) == ["approval", "deadline"]


def test_a_workflow_waiting_for_an_approval_with_a_deadline_exports_and_imports(tmp_path: Path, db: Path | str) -> None:
    cli = cli_for(db, tmp_path)
    wid = cli("start", "guarded_for", "3600", "--app", "agent_app").stdout.strip().splitlines()[-1]
    assert cli("worker", "--until-idle", "--quiet", "--app", "agent_app").returncode == 0
    out = tmp_path / "waiting.json"
    assert cli("export", wid, "-o", str(out)).returncode == 0
    imported = cli("import", str(out), "--id", "copy")
    assert imported.returncode == 0, imported.stderr  # approval and deadline slots are known kinds
    assert kinds(db, "copy") == ["approval", "deadline"]
    assert cli("worker", "--until-idle", "--quiet", "--app", "agent_app").returncode == 0
    assert "approval: restart the cluster (request req-0)" in cli("list", "--awaiting", "approval").stdout
    assert cli("approve", "copy").returncode == 0
