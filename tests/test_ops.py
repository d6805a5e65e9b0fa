"""The operator's actions (issue 17): cancel, terminate, retry, fork, export/import, check --history,
start --if-exists, the audit trail; in the core, the store and the real command line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest

from conftest import cli_env, run_cli, sql
from replaylog import WorkflowCancelled
from replaylog.engine.core import CommandRecord, Context, SignalRecord, WorkflowState, dry_replay, execute
from replaylog.engine.store import Store, open_store

APP = "ops_app"
Cli = Callable[..., CompletedProcess[str]]


def clock() -> float:
    return 1000.0


# ---------------------------------------------------------------- the core


def _saga() -> Callable[..., Any]:
    import ops_app

    return ops_app.saga


def test_cancel_is_raised_at_the_next_live_command_and_recorded_where_it_was_delivered() -> None:
    state = WorkflowState(input=2, commands=(CommandRecord("activity", "step", True, 0),))
    ctx = Context(state, clock=clock, activities={}, cancel="customer left")
    outcome = execute(_saga(), ctx, state)
    # Slot 1 (the second step) never ran: the cancel took its place; the compensation ran after it.
    assert outcome.status == "cancelled"
    assert outcome.error == "WorkflowCancelled: customer left"
    assert [(c.kind, c.name, c.value) for c in ctx.new_commands] == [
        ("cancel", "activity:step", "customer left"), ("activity", "refund", 0)]


def test_a_recorded_cancel_replays_at_the_same_command_even_if_a_signal_arrived_since() -> None:
    recorded = (CommandRecord("activity", "step", True, 0), CommandRecord("activity", "step", True, 10),
                CommandRecord("cancel", "signal:approve", True, "stop"), CommandRecord("activity", "refund", True, -10))
    state = WorkflowState(input=2, commands=recorded, signals=(SignalRecord(1, "approve", "yes"),))
    ctx = Context(state, clock=clock, activities={})
    outcome = execute(_saga(), ctx, state)
    # The refund of slot 4 (for step 0) runs live; everything before it replays, the cancel included.
    assert outcome.status == "cancelled" and outcome.replayed_commands == 4
    assert [(c.kind, c.name) for c in ctx.new_commands] == [("activity", "refund")]
    assert dry_replay(_saga(), WorkflowState(input=2, commands=(*recorded, CommandRecord("activity", "refund", True,
                                                                                          0))),
                      status="cancelled", recorded_error="WorkflowCancelled: stop").ok


def test_code_that_catches_the_cancel_and_returns_completes() -> None:
    import ops_app

    state = WorkflowState(has_input=False)
    ctx = Context(state, clock=clock, cancel="")
    outcome = execute(ops_app.forgives, ctx, state)
    assert (outcome.status, outcome.result) == ("completed", "let go: ")
    assert issubclass(WorkflowCancelled, Exception)


# ---------------------------------------------------------------- the store


def _row(store: Store, wid: str) -> Any:
    return store.get_workflow(wid)


def test_cancel_of_a_blocked_workflow_makes_it_runnable_and_keeps_the_reason(store: Store) -> None:
    wid = store.start_workflow("saga", 0)
    sql(store, "UPDATE workflows SET status = 'blocked', blocked_on = 'approve' WHERE id = ?", (wid,))
    assert store.cancel_workflow(wid, "changed my mind") == "blocked"
    row = _row(store, wid)
    assert (row.status, row.blocked_on, row.cancel_requested) == ("pending", None, "changed my mind")
    [claim] = store.claim("w", ttl=5)
    assert claim.cancel == "changed my mind"


def test_terminate_fences_out_the_worker_holding_the_lease(store: Store) -> None:
    wid = store.start_workflow("steps", 3)
    [claim] = store.claim("w", ttl=30)
    assert store.commit_record(claim, 0, CommandRecord("activity", "step", True, 0), ttl=30)
    assert store.terminate_workflow(wid, "runaway") == "running"
    assert not store.commit_record(claim, 1, CommandRecord("activity", "step", True, 10), ttl=30)
    row = _row(store, wid)
    assert (row.status, row.slots, row.error, row.lease_owner) == ("terminated", 1, "terminated by an operator:"
                                                                                    " runaway", None)
    assert store.claim("w2", ttl=5) == []


def test_a_slot_commit_comes_upon_a_cancel_request_without_a_query_of_its_own(store: Store, store_url: str) -> None:
    wid = store.start_workflow("steps", 5)
    [claim] = store.claim("w", ttl=30)
    assert store.commit_record(claim, 0, CommandRecord("activity", "step", True, 0), ttl=30)
    assert store.cancels == {}
    with open_store(store_url) as operator:
        operator.cancel_workflow(wid, "enough")
    assert store.commit_record(claim, 1, CommandRecord("activity", "step", True, 10), ttl=30)
    assert store.cancels == {wid: "enough"}


def test_a_blocked_verdict_after_a_cancel_request_leaves_the_workflow_runnable(store: Store, store_url: str) -> None:
    from replaylog.engine.core import Outcome

    wid = store.start_workflow("saga", 0)
    [claim] = store.claim("w", ttl=30)
    with open_store(store_url) as operator:
        operator.cancel_workflow(wid)
    store.commit_batch(finishes=[(claim, Outcome("blocked", blocked_on="approve"))], ttl=30)
    assert _row(store, wid).status == "pending"


def test_every_operator_action_is_in_the_audit_trail(store: Store) -> None:
    wid = store.start_workflow("saga", 0)
    store.send_signal(wid, "note", 1)
    store.cancel_workflow(wid, "why not")
    audit = store.list_audit(wid)
    assert [(a.action, a.reason, a.detail) for a in audit] == [
        ("start", None, "saga"), ("signal", None, "note #1"), ("cancel", "why not", None)]
    assert all("@" in a.actor and a.at > 0 for a in audit)


# ---------------------------------------------------------------- the command line


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return cli_env(REPLAYLOG_APP=APP, REPLAYLOG_TEST_LEDGER=str(tmp_path / "ledger.txt"),
                   REPLAYLOG_TEST_BUG=str(tmp_path / "bug"), REPLAYLOG_TEST_DECLINE=str(tmp_path / "decline"))


@pytest.fixture
def ops(db: Path | str, env: dict[str, str]) -> Cli:
    """The command line on the test's database, once per store backend (a file, a PostgreSQL database)."""
    return lambda *args, **kw: run_cli(db, *args, env=env, **kw)


def ok(proc: CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def shown(ops: Cli, wid: str) -> dict[str, Any]:
    return json.loads(ok(ops("show", wid, "--json")))


def refused(proc: CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def snapshot(db: Path | str) -> list[list[tuple[Any, ...]]]:
    with open_store(db, readonly=True) as s:
        return [s._conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
                for t in ("workflows", "commands", "signals", "audit")]


def test_a_cancelled_saga_compensates_and_ends_cancelled_with_its_reason(ops: Cli, tmp_path: Path) -> None:
    wid = ok(ops("start", "saga", "2", "--id", "trip"))
    ok(ops("worker", "--until-idle", "--quiet"))
    assert shown(ops, wid)["status"] == "blocked"
    assert "cancel requested" in ok(ops("cancel", wid, "--reason", "flight cancelled"))
    ok(ops("worker", "--until-idle", "--quiet"))
    data = shown(ops, wid)
    assert (data["status"], data["error"]) == ("cancelled", "WorkflowCancelled: flight cancelled")
    assert [(c["kind"], c["name"]) for c in data["commands"]] == [
        ("activity", "step"), ("activity", "step"), ("cancel", "signal:approve"), ("activity", "refund"),
        ("activity", "refund")]
    assert [a["action"] for a in data["audit"]] == ["start", "cancel"]
    assert data["audit"][1]["reason"] == "flight cancelled"
    listed = json.loads(ok(ops("list", "--status", "cancelled", "--json")))
    assert [r["id"] for r in listed] == [wid]
    assert "flight cancelled" in ok(ops("list"))
    assert "flight cancelled" in ok(ops("show", wid))
    refused(ops("signal", wid, "approve"), "cancelled", "accepts no signals")


def test_terminate_stops_a_blocked_workflow_and_no_code_runs_again(ops: Cli) -> None:
    wid = ok(ops("start", "saga", "1"))
    ok(ops("worker", "--until-idle", "--quiet"))
    ok(ops("terminate", wid, "--reason", "stuck"))
    ok(ops("worker", "--until-idle", "--quiet"))
    data = shown(ops, wid)
    assert (data["status"], data["error"], len(data["commands"])) == ("terminated", "terminated by an operator:"
                                                                                     " stuck", 1)
    assert [r["status"] for r in json.loads(ok(ops("list", "--status", "terminated", "--json")))] == ["terminated"]


def table_rows(text: str) -> dict[str, dict[str, str]]:
    """A piped `list` table as {id: {column: cell}}, cut at the header's column starts."""
    lines = text.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("id "))
    names = ["id", "workflow", "status", "blocked on", "slots", "updated (UTC)", "error / reason"]
    starts = [header.index(n) for n in names if n in header]
    rows = {}
    for line in lines[lines.index(header) + 2:]:
        if line.strip():
            cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
            rows[cells[0]] = dict(zip([n for n in names if n in header], cells, strict=True))
    return rows


def test_list_shows_the_error_of_a_failed_workflow_and_the_reason_a_stopped_one_was_stopped(ops: Cli,
                                                                                           tmp_path: Path) -> None:
    (tmp_path / "bug").touch()
    failed = ok(ops("start", "buggy", "--id", "bug-1"))
    cancelled = ok(ops("start", "saga", "1", "--id", "trip"))
    terminated = ok(ops("start", "saga", "1", "--id", "stuck-1"))
    ok(ops("worker", "--until-idle", "--quiet"))
    ok(ops("cancel", cancelled, "--reason", "flight cancelled"))
    ok(ops("terminate", terminated, "--reason", "stuck"))
    ok(ops("worker", "--until-idle", "--quiet"))
    error = shown(ops, failed)["error"]
    only_failed = table_rows(ok(ops("list", "--status", "failed")))
    assert only_failed[failed]["error / reason"] == error and only_failed[failed]["blocked on"] == ""
    everything = table_rows(ok(ops("list")))
    assert everything[cancelled]["error / reason"] == "WorkflowCancelled: flight cancelled"
    assert everything[terminated]["error / reason"] == "terminated by an operator: stuck"
    assert everything[cancelled]["blocked on"] == everything[terminated]["blocked on"] == ""
    # No row with an error, no empty column.
    assert "error / reason" not in ok(ops("list", "--status", "completed"))


def test_retry_replays_a_fixed_workflow_and_goes_on(ops: Cli, tmp_path: Path) -> None:
    (tmp_path / "bug").touch()
    wid = ok(ops("start", "buggy"))
    ok(ops("worker", "--until-idle", "--quiet"))
    assert shown(ops, wid)["status"] == "failed"
    refused(ops("retry", wid), "cannot be retried", "ValueError: a bug")  # the code is not fixed yet
    (tmp_path / "bug").unlink()
    said = ok(ops("retry", wid))
    assert "pending again" in said and "slot 1 would run" in said
    ok(ops("worker", "--until-idle", "--quiet"))
    data = shown(ops, wid)
    assert (data["status"], data["result"], data["error"]) == ("completed", 30, None)
    assert [a["action"] for a in data["audit"]] == ["start", "retry"]
    assert (tmp_path / "ledger.txt").read_text().count(f"{wid} 0") == 1  # slot 0 replayed, not run again


def _declined_payment(ops: Cli, tmp_path: Path, wid: str) -> str:
    """A `pays` workflow failed by its declined charge (slot 1), the card still declined."""
    (tmp_path / "decline").touch()
    ok(ops("start", "pays", "--id", wid))
    ok(ops("worker", "--until-idle", "--quiet"))
    assert shown(ops, wid)["status"] == "failed"
    return wid


def test_retry_of_a_recorded_activity_failure_says_which_slot_to_fork_from_and_fork_runs_it_again(
        ops: Cli, tmp_path: Path, db: Path | str) -> None:
    wid = _declined_payment(ops, tmp_path, "order-1")
    before = snapshot(db)
    refused(ops("retry", wid), "slot 1", "fork", "--from-slot 1")
    assert snapshot(db) == before
    (tmp_path / "decline").unlink()
    forked = ops("fork", wid, "--from-slot", "1", "--id", "order-1b")
    assert ok(forked) == "order-1b"
    assert "charge (slot 1)" in forked.stderr and "new idempotency keys" in forked.stderr
    ok(ops("worker", "--until-idle", "--quiet"))
    data = shown(ops, "order-1b")
    assert (data["status"], data["result"]) == ("completed", "charged")
    assert data["forked_from"] == {"id": wid, "slot": 1}
    assert "forked from" in ok(ops("show", "order-1b"))
    assert shown(ops, wid)["status"] == "failed"  # the original is untouched
    assert (tmp_path / "ledger.txt").read_text().splitlines() == [f"{wid} 0"]  # slot 0 was copied, not run


def test_fork_from_failure_runs_the_failed_activity_again_and_from_activity_names_its_first_slot(
        ops: Cli, tmp_path: Path, db: Path | str) -> None:
    wid = _declined_payment(ops, tmp_path, "order-2")
    (tmp_path / "decline").unlink()
    forked = ops("fork", wid, "--from-failure", "--id", "order-2b")
    assert ok(forked) == "order-2b" and f"forked {wid} at slot 1: " in forked.stderr
    again = ops("fork", wid, "--from-activity", "step", "--id", "order-2c")
    assert ok(again) == "order-2c" and f"forked {wid} at slot 0: " in again.stderr
    ok(ops("worker", "--until-idle", "--quiet"))
    assert shown(ops, "order-2b")["forked_from"] == {"id": wid, "slot": 1}
    assert (shown(ops, "order-2b")["status"], shown(ops, "order-2c")["status"]) == ("completed", "completed")
    # order-2b copied slot 0; order-2c ran it again.
    assert (tmp_path / "ledger.txt").read_text().splitlines() == [f"{wid} 0", "order-2c 0"]


def test_fork_refuses_a_slot_it_cannot_name_and_writes_nothing(ops: Cli, db: Path | str) -> None:
    wid = ok(ops("start", "steps", "1"))
    ok(ops("worker", "--until-idle", "--quiet"))
    before = snapshot(db)
    refused(ops("fork", wid, "--from-failure"), f"workflow {wid!r} (completed) has no failed slot to fork from")
    refused(ops("fork", wid, "--from-activity", "charge"), f"workflow {wid!r} recorded no activity 'charge'")
    refused(ops("fork", wid), "name the fork's first live slot one way")
    refused(ops("fork", wid, "--from-slot", "0", "--from-failure"), "name the fork's first live slot one way")
    assert snapshot(db) == before


def test_retry_force_skips_the_dry_replay(ops: Cli, tmp_path: Path) -> None:
    (tmp_path / "bug").touch()
    wid = ok(ops("start", "buggy"))
    ok(ops("worker", "--until-idle", "--quiet"))
    assert "dry replay skipped" in ok(ops("retry", wid, "--force"))
    assert shown(ops, wid)["status"] == "pending"


def test_fork_copies_every_signal(ops: Cli) -> None:
    wid = ok(ops("start", "saga", "1"))
    ok(ops("signal", wid, "approve", '"yes"'))
    ok(ops("worker", "--until-idle", "--quiet"))
    assert shown(ops, wid)["result"] == "yes"
    new = ok(ops("fork", wid, "--from-slot", "0"))
    ok(ops("worker", "--until-idle", "--quiet"))
    data = shown(ops, new)
    assert (data["status"], data["result"], [s["payload"] for s in data["signals"]]) == ("completed", "yes", ["yes"])


def test_export_import_and_check_history_round_trip(ops: Cli, tmp_path: Path) -> None:
    wid = ok(ops("start", "saga", "1", "--id", "trip"))
    ok(ops("worker", "--until-idle", "--quiet"))
    out = tmp_path / "trip.json"
    ok(ops("export", wid, "-o", str(out)))
    doc = json.loads(out.read_text())
    assert (doc["format"], doc["version"], doc["status"], len(doc["slots"])) == ("replaylog-history", 1,
                                                                                   "blocked", 1)
    assert json.loads(ok(ops("export", wid))) == doc
    assert ok(ops("import", str(out), "--id", "trip-2")) == "trip-2"
    ok(ops("signal", "trip-2", "approve", "1"))
    ok(ops("worker", "--until-idle", "--quiet"))
    assert shown(ops, "trip-2")["status"] == "completed"
    assert [a["action"] for a in shown(ops, "trip-2")["audit"]] == ["import", "signal"]
    # A replay corpus, checked with no database at all.
    elsewhere = tmp_path / "none.db"
    checked = run_cli(elsewhere, "check", "--history", str(out), str(out), env=cli_env(REPLAYLOG_APP=APP))
    assert checked.returncode == 0, checked.stderr
    assert "2 replay cleanly" in checked.stdout and not elsewhere.exists()
    doc["slots"][0]["name"] = "refund"
    bad = tmp_path / "diverged.json"
    bad.write_text(json.dumps(doc))
    checked = run_cli(elsewhere, "check", "--history", str(out), "--history", str(bad),
                      env=cli_env(REPLAYLOG_APP=APP))
    assert checked.returncode == 1 and "non-determinism at slot 0" in checked.stderr
    assert "1 diverge or fail" in checked.stdout


def test_start_if_exists_return_gives_the_same_workflow_and_touches_nothing(ops: Cli, db: Path | str) -> None:
    assert ok(ops("start", "steps", "1", "--id", "pay-7")) == "pay-7"
    before = snapshot(db)
    assert ok(ops("start", "steps", "2", "--id", "pay-7", "--if-exists", "return")) == "pay-7"
    assert snapshot(db) == before
    refused(ops("start", "steps", "2", "--id", "pay-7"), "already exists")


# ---------------------------------------------------------------- bad input: one line, exit 1, nothing written


def test_operator_actions_refuse_bad_input_in_one_line_and_write_nothing(ops: Cli, db: Path | str,
                                                                         tmp_path: Path) -> None:
    done = ok(ops("start", "steps", "1", "--id", "done"))
    ok(ops("worker", "--until-idle", "--quiet"))
    running = ok(ops("start", "saga", "1", "--id", "open"))
    before = snapshot(db)
    refused(ops("cancel", done), "'done' is completed", "can be cancelled")
    refused(ops("terminate", done), "'done' is completed", "can be terminated")
    refused(ops("cancel", "nope"), "no workflow with id 'nope'")
    refused(ops("terminate", "nope"), "no workflow with id 'nope'")
    refused(ops("retry", running), "'open' is pending", "only a failed workflow")
    refused(ops("retry", "nope"), "no workflow with id 'nope'")
    refused(ops("fork", done, "--from-slot", "2"), "--from-slot 2 is outside 0..1")
    refused(ops("fork", done, "--from-slot", "-1"), "outside 0..1")
    refused(ops("fork", "nope", "--from-slot", "0"), "no workflow with id 'nope'")
    refused(ops("fork", done, "--from-slot", "0", "--id", "open"), "already exists")
    exported = tmp_path / "done.json"
    ok(ops("export", done, "-o", str(exported)))
    refused(ops("import", str(exported)), "'done' already exists")
    cases = {"malformed.json": "{not json", "other.json": json.dumps({"format": "something-else", "version": 1}),
             "newer.json": json.dumps({**json.loads(exported.read_text()), "version": 99}),
             "list.json": "[]", "badslot.json": json.dumps({**json.loads(exported.read_text()), "slots": [{}]}),
             "badattributes.json": json.dumps({**json.loads(exported.read_text()), "slots": [
                 {"slot": 0, "kind": "attributes", "name": "k", "ok": True, "value": "c-42", "attempts": 1,
                  "recorded_at": 0}]})}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    refused(ops("import", str(tmp_path / "malformed.json")), "invalid JSON")
    refused(ops("import", str(tmp_path / "other.json")), "not a replaylog history document")
    refused(ops("import", str(tmp_path / "newer.json")), "version 99 is not supported")
    refused(ops("import", str(tmp_path / "list.json")), "not a replaylog history document")
    refused(ops("import", str(tmp_path / "badslot.json"), "--id", "x"), "slot 0 is malformed")
    refused(ops("import", str(tmp_path / "badattributes.json"), "--id", "x"),
            "slot 0 is malformed: the value of an attributes slot is an object of search attributes")
    refused(ops("import", str(tmp_path / "missing.json")), "cannot read")
    refused(ops("check", "--history", str(tmp_path / "other.json")), "not a replaylog history document")
    assert snapshot(db) == before
    ok(ops("cancel", running))
    refused(ops("cancel", running), "already asked to cancel")


def test_retry_of_a_diverged_workflow_refuses_the_diagnostic_and_accepts_the_code_that_fits(db: Path | str) -> None:
    def cli(*args: str, **kw: Any) -> CompletedProcess[str]:  # the sample app, on either backend
        return run_cli(db, *args, **kw)

    wid = ok(cli("start", "refund", "8"))
    legacy = ("--app", "replaylog.samples.legacy_v1")
    cli("worker", "--until-idle", "--quiet", *legacy)
    cli("signal", wid, "approval", "true")
    cli("worker", "--until-idle", "--quiet")
    assert json.loads(ok(cli("show", wid, "--json")))["diagnostic"]["slot"] == 0
    refused(cli("retry", wid), "cannot be retried", "non-determinism at slot 0", "activity:fetch_customer")
    assert "no longer diverges" in ok(cli("retry", wid, *legacy))
    ok(cli("worker", "--until-idle", "--quiet", *legacy))
    data = json.loads(ok(cli("show", wid, "--json")))
    assert (data["status"], data["diagnostic"], data["error"]) == ("completed", None, None)


def test_a_workflow_that_caught_the_cancel_and_waits_again_stays_blocked(ops: Cli) -> None:
    wid = ok(ops("start", "stubborn"))
    ok(ops("worker", "--until-idle", "--quiet"))
    ok(ops("cancel", wid))
    # Delivered once: the wait after it blocks for good (it is not woken again for the same request).
    ok(ops("worker", "--until-idle", "--quiet", timeout=60))
    data = shown(ops, wid)
    assert (data["status"], data["blocked_on"]) == ("blocked", "really")
    assert [c["kind"] for c in data["commands"]] == ["cancel", "activity"]
    ok(ops("signal", wid, "really", '"yes"'))
    ok(ops("worker", "--until-idle", "--quiet"))
    assert (shown(ops, wid)["status"], shown(ops, wid)["result"]) == ("completed", "yes")


# ---------------------------------------------------------------- cancel ends durable waits (issue 16's)


def test_cancel_ends_a_durable_sleep_and_replays_there() -> None:
    import ops_app

    asleep = WorkflowState(has_input=False, commands=(CommandRecord("timer", "sleep", True, 5000.0),))
    ctx = Context(asleep, clock=clock, cancel="wake up")
    outcome = execute(ops_app.napper, ctx, asleep)
    assert (outcome.status, outcome.error) == ("cancelled", "WorkflowCancelled: wake up")
    assert [(c.kind, c.name) for c in ctx.new_commands] == [("cancel", "timer:sleep"), ("activity", "refund")]
    # Replayed after the wake time has passed, the cancel is raised at the sleep again.
    done = WorkflowState(has_input=False, commands=(*asleep.commands, *ctx.new_commands))
    again = Context(done, clock=lambda: 9999.0)
    assert execute(ops_app.napper, again, done).status == "cancelled" and again.new_commands == []


def test_cancel_ends_a_wait_with_a_deadline_and_wins_over_a_later_signal() -> None:
    import ops_app

    waiting = WorkflowState(has_input=False, commands=(CommandRecord("deadline", "go", True, 5000.0),))
    ctx = Context(waiting, clock=clock, cancel="no")
    outcome = execute(ops_app.waits_an_hour, ctx, waiting)
    assert (outcome.status, outcome.result) == ("completed", "cancelled while waiting: no")
    assert [(c.kind, c.name) for c in ctx.new_commands] == [("cancel", "signal:go")]
    late = WorkflowState(has_input=False, commands=(*waiting.commands, *ctx.new_commands),
                         signals=(SignalRecord(1, "go", "yes"),))
    again = Context(late, clock=clock)
    assert execute(ops_app.waits_an_hour, again, late).result == "cancelled while waiting: no"


def test_cancel_wakes_a_sleeping_workflow_through_the_worker(ops: Cli) -> None:
    wid = ok(ops("start", "napper"))
    ok(ops("worker", "--until-idle", "--quiet"))
    assert (shown(ops, wid)["status"], shown(ops, wid)["blocked_on"]) == ("blocked", "timer")
    ok(ops("cancel", wid, "--reason", "enough"))
    ok(ops("worker", "--until-idle", "--quiet"))
    data = shown(ops, wid)
    assert (data["status"], data["error"]) == ("cancelled", "WorkflowCancelled: enough")
    assert [c["kind"] for c in data["commands"]] == ["timer", "cancel", "activity"]
