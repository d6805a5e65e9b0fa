"""Child workflows: started once with the parent's slot, the parent waits holding no thread, links both ways."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from conftest import cli_env, run_cli
from replaylog.console.data import fetch_transcript
from replaylog.engine.core import CommandRecord, Context, WorkflowState, execute, run, signal
from replaylog.engine.errors import ChildWorkflowError, DuplicateWorkflowIdError
from replaylog.engine.store import open_store


def clock() -> float:
    return 1.0


def calls(ctx: Context, _input: Any) -> Any:
    try:
        return ctx.call_workflow("kid", {"n": 1})
    except ChildWorkflowError as exc:
        return f"failed: {exc.error}"


def test_the_parent_records_the_child_and_waits_for_its_outcome() -> None:
    first = run(calls, WorkflowState(), clock=clock, workflow_id="wf-p")
    assert first.status == "blocked" and first.outcome.blocked_on == "child:wf-p.0"
    (rec,) = first.state.commands
    assert (rec.kind, rec.name, rec.value, rec.args) == ("child", "kid", {"id": "wf-p.0", "input": {"n": 1}},
                                                        '[{"n":1}]')
    done = run(calls, signal(first.state, "child:wf-p.0", {"ok": True, "result": 42}), clock=clock,
               workflow_id="wf-p")
    assert done.status == "completed" and done.outcome.result == 42 and done.context.executed_commands == 0
    failed = run(calls, signal(first.state, "child:wf-p.0", {"ok": False, "error": "boom"}), clock=clock,
                 workflow_id="wf-p")
    assert failed.outcome.result == "failed: boom"


def test_a_changed_child_input_diverges() -> None:
    first = run(calls, WorkflowState(), clock=clock, workflow_id="wf-p")

    def other(ctx: Context, _input: Any) -> Any:
        return ctx.call_workflow("kid", {"n": 2})

    assert run(other, first.state, clock=clock, workflow_id="wf-p").outcome.diagnostic is not None


def test_a_bad_child_id_or_input_records_nothing() -> None:
    def bad_id(ctx: Context, _input: Any) -> Any:
        return ctx.call_workflow("kid", id="has space")

    def bad_input(ctx: Context, _input: Any) -> Any:
        return ctx.call_workflow("kid", {1, 2})

    r1 = run(bad_id, WorkflowState(), clock=clock)
    assert r1.status == "failed" and "id 'has space' is not valid" in (r1.outcome.error or "")
    r2 = run(bad_input, WorkflowState(), clock=clock)
    assert r2.status == "failed" and "the input of child workflow 'kid' is of type set" in (r2.outcome.error or "")
    assert r1.state.commands == () and r2.state.commands == ()


def test_a_refused_child_id_is_recorded_and_code_that_catches_it_decides_the_outcome() -> None:
    def catches(ctx: Context, _input: Any) -> Any:
        try:
            return ctx.call_workflow("kid", id="taken")
        except DuplicateWorkflowIdError as exc:
            raise ValueError(f"mine ({exc})") from None

    recorded: list[CommandRecord] = []

    def store_refuses(slot: int, rec: CommandRecord) -> None:
        if rec.ok:  # what the worker's store says of an id another workflow has
            raise DuplicateWorkflowIdError(f"slot {slot}: a workflow with id 'taken' already exists")
        recorded.append(rec)

    live = execute(catches, Context(WorkflowState(), clock=clock, record=store_refuses), WorkflowState())
    mine = "workflow code raised ValueError: mine (slot 0: a workflow with id 'taken' already exists)"
    assert (live.status, live.error, live.error_kind) == ("failed", mine, "code")
    assert recorded == [CommandRecord("child", "kid", False, None, "slot 0: a workflow with id 'taken' already exists",
                                      1, "[null]")]
    # A replay raises the recorded refusal at the same place: nothing is started, the same outcome.
    again = run(catches, WorkflowState(commands=tuple(recorded)), clock=clock)
    assert (again.status, again.outcome.error, again.context.executed_commands) == ("failed", mine, 0)


# ------------------------------------------------------------------ a real worker


def env_for(tmp_path: Path) -> dict[str, str]:
    return cli_env(AGENT_LEDGER=str(tmp_path / "ledger.jsonl"), AGENT_RELEASE=str(tmp_path / "release"))


def runs(tmp_path: Path, tag: str) -> int:
    path = tmp_path / "ledger.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return sum(1 for line in lines if json.loads(line) == {**json.loads(line), "event": "run", "tag": tag})


def workflow_ids(db: Path | str) -> list[str]:
    with open_store(db, readonly=True) as store:
        return sorted(r.id for r in store.list_workflows(limit=-1))


def test_a_parent_gets_its_childrens_results_and_show_links_both_ways(tmp_path: Path, db: Path | str) -> None:
    env = env_for(tmp_path)
    wid = run_cli(db, "start", "parent", "--app", "agent_app", env=env).stdout.strip().splitlines()[-1]
    done = run_cli(db, "worker", "--until-idle", "--quiet", "--app", "agent_app", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    shown = json.loads(run_cli(db, "show", wid, "--json", env=env).stdout)
    assert shown["status"] == "completed", shown
    assert shown["result"] == {"child": {"done": "child 1"}, "failed": f"{wid}.1",
                               "error": "workflow code raised RuntimeError: child broke"}
    assert [(c["id"], c["workflow"], c["status"]) for c in shown["children"]] == [
        (f"{wid}.0", "child_task", "completed"), (f"{wid}.1", "failing_child", "failed")]
    child = json.loads(run_cli(db, "show", f"{wid}.0", "--json", env=env).stdout)
    assert child["parent"] == wid and child["input"] == {"n": 1}
    text = run_cli(db, "show", wid, env=cli_env(COLUMNS="200")).stdout
    assert re.search(rf"child\s+{wid}\.0 \(child_task, completed\)", text), text
    assert re.search(rf"parent\s+{wid}\s", run_cli(db, "show", f"{wid}.0", env=cli_env(COLUMNS="200")).stdout)
    assert run_cli(db, "check", wid, "--app", "agent_app", env=env).returncode == 0  # replay starts nothing
    assert workflow_ids(db) == sorted([wid, f"{wid}.0", f"{wid}.1"]) and runs(tmp_path, "child 1") == 1


def test_a_child_of_an_unknown_workflow_fails_the_parent_and_writes_nothing_an_uncaught_taken_id_fails_it_too(
        tmp_path: Path, db: Path | str) -> None:
    env = env_for(tmp_path)
    unknown = run_cli(db, "start", "bad_parent", "--app", "agent_app", env=env).stdout.strip().splitlines()[-1]
    taken = run_cli(db, "start", "bad_parent", json.dumps(unknown), "--app", "agent_app",
                    env=env).stdout.strip().splitlines()[-1]
    assert run_cli(db, "worker", "--until-idle", "--quiet", "--app", "agent_app", env=env).returncode == 0
    with open_store(db, readonly=True) as store:
        first, second = store.get_workflow(unknown), store.get_workflow(taken)
        assert first.status == "failed" and "no_such_workflow" in (first.error or ""), first.error
        assert second.status == "failed" and second.error == (
            f"DuplicateWorkflowIdError: slot 0: a workflow with id {unknown!r} already exists")
        assert store.list_commands(unknown) == []
        assert [(c.kind, c.ok) for c in store.list_commands(taken)] == [("child", False)]  # the refusal
    assert workflow_ids(db) == sorted([unknown, taken])


def test_a_caught_refusal_of_a_taken_child_id_leaves_the_outcome_to_the_workflow(
        tmp_path: Path, db: Path | str) -> None:
    env = env_for(tmp_path)
    app = ("--app", "agent_app")
    other = run_cli(db, "start", "child_task", json.dumps({"n": 0}), *app, env=env).stdout.strip().splitlines()[-1]
    raises, falls_back = (
        run_cli(db, "start", "handles_taken_id", json.dumps({"id": other, "then": then}), *app,
                env=env).stdout.strip().splitlines()[-1] for then in ("raise", "fall back"))
    assert run_cli(db, "worker", "--until-idle", "--quiet", *app, env=env).returncode == 0
    with open_store(db, readonly=True) as store:
        mine = store.get_workflow(raises)
        assert (mine.status, mine.error, mine.error_kind) == ("failed", "workflow code raised ValueError: mine", "code")
        fallback = store.get_workflow(falls_back)
        assert (fallback.status, fallback.result) == ("completed", {"fallback": "fallback"})
        assert [(c.kind, c.ok) for c in store.list_commands(falls_back)] == [("child", False), ("activity", True)]
        refused = fetch_transcript(store, falls_back)[0][0]
        assert (refused.title, refused.outcome, refused.ok) == (
            "child_task", f"slot 0: a workflow with id {other!r} already exists", False)
    assert workflow_ids(db) == sorted([other, raises, falls_back])  # no child started for either
    for wid in (raises, falls_back):  # their histories replay: the recorded refusal is raised again
        checked = run_cli(db, "check", wid, "--json", *app, env=env)
        assert json.loads(checked.stdout)["replays"] is True, checked.stdout + checked.stderr
    # The completed one replays to its end; the failed one would fail again on a retry (exit 1).
    assert run_cli(db, "check", falls_back, *app, env=env).returncode == 0
    again = run_cli(db, "check", raises, *app, env=env)
    assert again.returncode == 1 and "a retry would fail" in again.stdout + again.stderr
