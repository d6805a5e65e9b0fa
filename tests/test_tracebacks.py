"""A failure's traceback: captured from workflow and activity code (the user's frames only), stored on
both backends, and shown by `show`, `show --json` and the worker log."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli, sql
from replaylog.engine.core import CommandRecord, Context, Outcome, WorkflowState, activity, run, workflow
from replaylog.engine.store import PendingRecord, Store
from replaylog.engine.store.rows import fit_text

NO_INPUT = WorkflowState(has_input=False)


def clock() -> float:
    return 1.0


def parse(text: str) -> int:
    fields = {"value": len(text)}
    return fields["valeu"]


@activity
def lookup(text: str) -> int:
    return parse(text)


def total(ctx: Context) -> int:
    return ctx.call_activity(lookup, "abc", max_retries=2)


@workflow
def sums(ctx: Context) -> int:
    return total(ctx) + {"a": 1}["b"]


@workflow
def handles(ctx: Context) -> int:
    try:
        return total(ctx)
    except Exception:  # the activity failure handled, then a bug of its own
        return {"a": 1}["valeu"]


def test_an_activity_failure_keeps_the_traceback_of_its_last_attempt_without_the_engines_frames() -> None:
    r = run(sums, NO_INPUT, clock=clock)
    (shown,) = r.context.tracebacks.values()
    assert shown.startswith("Traceback (most recent call last):\n  File \"tests/test_tracebacks.py\", line")
    assert "in lookup" in shown and "in parse" in shown and shown.endswith("KeyError: 'valeu'")
    assert "replaylog/engine" not in shown and "_run_activity" not in shown
    # The workflow failed with it: its traceback goes through the workflow's own frames to the call.
    workflow_tb = r.outcome.traceback or ""
    assert "in sums" in workflow_tb and "in total" in workflow_tb and "in lookup" not in workflow_tb
    assert workflow_tb.endswith("replaylog.ActivityError: activity 'lookup' failed at slot 0 after 2 attempt(s): "
                                "KeyError: 'valeu'")
    assert "replaylog/engine" not in workflow_tb


@workflow
def plain(ctx: Context) -> int:
    return ctx.call_activity(lookup, "abc")  # no options: the cursor's path (engine.cursor), compiled or not


def test_a_plain_calls_failure_live_and_replayed_shows_the_users_frames_only() -> None:
    r = run(plain, NO_INPUT, clock=clock)
    (shown,) = r.context.tracebacks.values()  # its first attempt ran on the cursor, the rest in the Context
    assert "in lookup" in shown and "in parse" in shown and shown.endswith("KeyError: 'valeu'")
    assert "replaylog/engine" not in shown and "replaylog.engine" not in shown
    (failed,) = r.state.commands
    assert not failed.ok and failed.attempts == 3
    # Replayed: the recorded failure is raised again where the code calls, with nothing of the engine between.
    again = run(plain, r.state, clock=clock)
    assert again.context.replayed_commands == 1 and again.context.executed_commands == 0
    workflow_tb = again.outcome.traceback or ""
    assert workflow_tb.startswith("Traceback (most recent call last):\n  File \"tests/test_tracebacks.py\", line")
    assert "in plain" in workflow_tb and "in lookup" not in workflow_tb
    assert "replaylog/engine" not in workflow_tb and "File \"replaylog" not in workflow_tb


def test_workflow_code_that_raises_records_where_with_the_handled_failure_chained() -> None:
    r = run(handles, NO_INPUT, clock=clock)
    assert r.outcome.error == "workflow code raised KeyError: 'valeu'" and r.outcome.error_kind == "code"
    shown = r.outcome.traceback or ""
    assert "During handling of the above exception, another exception occurred" in shown
    assert shown.count("in handles") == 2 and "replaylog/engine" not in shown


def test_a_failure_the_engine_raised_on_its_own_has_no_traceback() -> None:
    @workflow
    def returns_a_set(ctx: Context) -> object:
        return {1, 2}

    r = run(returns_a_set, NO_INPUT, clock=clock)
    assert r.status == "failed" and r.outcome.traceback is None


def test_a_traceback_over_the_cap_keeps_its_end() -> None:
    text = "Traceback (most recent call last):\n" + '  File "app.py", line 1, in f\n' * 200 + "KeyError: 'x'"
    cut = fit_text(text, 300, "the traceback", tail=True)
    assert len(cut.encode()) <= 300 and cut.endswith("KeyError: 'x'")
    assert cut.startswith("(cut: the traceback is ") and "over the cap of 300 bytes" in cut


def test_the_store_keeps_a_failed_slots_and_a_failed_workflows_traceback_and_retry_clears_it(store: Store) -> None:
    wid = store.start_workflow("sums", None)
    (claim,) = store.claim("w1", ttl=30)
    failed = CommandRecord("activity", "lookup", False, None, "KeyError: 'valeu'", 2, '["abc"]')
    assert store.commit_record(claim, 0, failed, ttl=30, traceback="Traceback (slot 0)\nKeyError: 'valeu'")
    written, finished = store.commit_batch(
        [PendingRecord(claim, 1, failed, traceback="Traceback (slot 1)")],
        finishes=[(claim, Outcome("failed", error="ActivityError: …", error_kind="activity",
                                  traceback="Traceback (workflow)"))], ttl=30)
    assert written == [True] and finished == [True]
    assert [c.traceback for c in store.list_commands(wid)] == ["Traceback (slot 0)\nKeyError: 'valeu'",
                                                               "Traceback (slot 1)"]
    assert store.get_workflow(wid).traceback == "Traceback (workflow)"
    fork = store.fork_workflow(wid, 1)  # slot 0 is copied with its traceback; slot 1 runs again
    assert [c.traceback for c in store.list_commands(fork)] == ["Traceback (slot 0)\nKeyError: 'valeu'"]
    store.retry_workflow(wid)
    assert store.get_workflow(wid).traceback is None
    assert sql(store, "SELECT COUNT(*) FROM commands WHERE traceback IS NOT NULL") == [(3,)]


def test_show_show_json_and_the_worker_log_carry_the_tracebacks(db: Path | str) -> None:
    wid = run_cli(db, "start", "failing_shipment", '"A-1"', "--app", "console_workflows").stdout.strip()
    worker = run_cli(db, "worker", "--until-idle", "--app", "console_workflows")
    assert worker.returncode == 0, worker.stderr
    log = worker.stderr
    assert f"{wid} slot 0: activity 'carrier_down' failed after 2 attempt(s): RuntimeError: carrier API" in log
    assert '\n      File "tests/console_workflows.py", line 16, in carrier_down\n' in log  # indented under it
    assert f"{wid} failed ActivityError" in log and "in failing_shipment" in log
    shown = json.loads(run_cli(db, "show", wid, "--json").stdout)
    assert "in failing_shipment" in shown["traceback"] and "replaylog/engine" not in shown["traceback"]
    (slot,) = shown["commands"]
    assert slot["traceback"].endswith("RuntimeError: carrier API returned 503 for A-1")
    text = run_cli(db, "show", wid).stdout
    assert "\ntraceback\nTraceback (most recent call last):\n" in text
    assert "\ntraceback of slot 0 (activity carrier_down)\nTraceback (most recent call last):\n" in text
