"""Parallel activities: consecutive slots by task order, each outcome committed as it completes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import cli_env, run_cli
from replaylog import ParallelError, activity
from replaylog.engine.core import (
    HOLE,
    CommandRecord,
    Context,
    WorkflowCancelled,
    WorkflowState,
    dry_replay,
    execute,
    run,
)
from replaylog.engine.store import open_store

RAN: list[str] = []


@activity
def echo(tag: str) -> str:
    RAN.append(tag)
    return tag.upper()


@activity
def fails(tag: str) -> str:
    RAN.append(tag)
    raise ValueError(f"{tag} failed")


def clock() -> float:
    return 1.0


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def three(ctx: Context, _input: Any) -> Any:
    first = ctx.call_activity(echo, "first")
    group = ctx.parallel([ctx.task(echo, "a"), ctx.task(echo, "b"), ctx.task(echo, "c")])
    return [first, group, ctx.call_activity(echo, "last")]


def test_tasks_take_consecutive_slots_in_task_order_and_results_come_back_in_order() -> None:
    result = run(three, WorkflowState(), clock=clock)
    assert result.status == "completed"
    assert result.outcome.result == ["FIRST", ["A", "B", "C"], "LAST"]
    assert [(c.name, c.value, c.args) for c in result.state.commands] == [
        ("echo", "FIRST", '["first"]'), ("echo", "A", '["a"]'), ("echo", "B", '["b"]'), ("echo", "C", '["c"]'),
        ("echo", "LAST", '["last"]')]


def test_replay_runs_nothing_and_a_changed_task_diverges_at_its_slot() -> None:
    recorded = run(three, WorkflowState(), clock=clock).state
    RAN.clear()
    again = run(three, recorded, clock=clock)
    assert again.status == "completed" and RAN == []

    def swapped(ctx: Context, _input: Any) -> Any:
        ctx.call_activity(echo, "first")
        return ctx.parallel([ctx.task(echo, "a"), ctx.task(echo, "B!"), ctx.task(echo, "c")])

    diverged = run(swapped, recorded, clock=clock)
    assert diverged.status == "failed" and diverged.outcome.diagnostic is not None
    assert diverged.outcome.diagnostic.slot == 2 and RAN == []
    assert not dry_replay(swapped, recorded, status="completed").ok


def test_a_failed_task_raises_parallel_error_after_every_task_is_recorded() -> None:
    seen: dict[str, Any] = {}

    def wf(ctx: Context, _input: Any) -> Any:
        try:
            ctx.parallel([ctx.task(fails, "x", max_retries=1), ctx.task(echo, "y")])
        except ParallelError as exc:
            seen["outcomes"] = exc.outcomes
            seen["errors"] = exc.errors
        return "handled"

    result = run(wf, WorkflowState(), clock=clock)
    assert result.status == "completed" and RAN == ["x", "y"]
    assert [c.ok for c in result.state.commands] == [False, True]
    assert seen["outcomes"][1] == "Y" and list(seen["errors"]) == [0]
    assert "x failed" in str(seen["errors"][0])
    RAN.clear()
    assert run(wf, result.state, clock=clock).status == "completed" and RAN == []


def test_a_gap_left_by_a_crash_runs_only_the_unrecorded_task() -> None:
    recorded = run(three, WorkflowState(), clock=clock).state
    gap = (*recorded.commands[:2], HOLE, *recorded.commands[3:4])  # slot 2 unrecorded, slot 3 recorded
    RAN.clear()
    resumed = run(three, WorkflowState(commands=gap), clock=clock)
    assert resumed.status == "completed" and RAN == ["b", "last"]
    assert resumed.outcome.result == ["FIRST", ["A", "B", "C"], "LAST"]


def test_a_gap_where_a_plain_activity_is_issued_diverges() -> None:
    state = WorkflowState(commands=(HOLE, CommandRecord("activity", "echo", True, "X", None, 1, '["x"]')))

    def plain(ctx: Context, _input: Any) -> Any:
        return ctx.call_activity(echo, "x")

    result = run(plain, state, clock=clock)
    assert result.status == "failed" and result.outcome.diagnostic is not None and RAN == []


@pytest.mark.parametrize(("tasks", "message"), [
    ([], "ValueError: parallel() needs at least one task"),
    ("echo", "TypeError: parallel() takes a list of ctx.task(...), not str"),
    ([echo], "TypeError: parallel(): task 0 is a function, not a ctx.task(...)"),
])
def test_bad_task_lists_are_clear_errors_and_record_nothing(tasks: Any, message: str) -> None:
    def wf(ctx: Context, _input: Any) -> Any:
        return ctx.parallel(tasks)

    result = run(wf, WorkflowState(), clock=clock)
    assert result.status == "failed" and message in (result.outcome.error or "")
    assert result.state.commands == () and RAN == []


def test_a_non_json_task_argument_records_nothing() -> None:
    def wf(ctx: Context, _input: Any) -> Any:
        return ctx.parallel([ctx.task(echo, "fine"), ctx.task(echo, {1, 2})])

    result = run(wf, WorkflowState(), clock=clock)
    assert result.status == "failed" and "slot 1: an argument of activity 'echo' is of type set" in (
        result.outcome.error or "")
    assert result.state.commands == () and RAN == []


def test_bad_max_concurrency_is_refused() -> None:
    def wf(ctx: Context, _input: Any) -> Any:
        return ctx.parallel([ctx.task(echo, "a")], max_concurrency=0)

    result = run(wf, WorkflowState(), clock=clock)
    assert result.status == "failed" and "max_concurrency must be a positive int" in (result.outcome.error or "")


# ------------------------------------------------------------------ a real worker


def agent_env(tmp_path: Path) -> dict[str, str]:
    return cli_env(AGENT_LEDGER=str(tmp_path / "ledger.jsonl"), AGENT_RELEASE=str(tmp_path / "release"),
                   AGENT_DIR=str(tmp_path))


def ledger(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_to_the_end(tmp_path: Path, db: Path | str, workflow: str) -> str:
    """Start `workflow` of agent_app and run a worker until nothing is left to do; its id."""
    env = agent_env(tmp_path)
    wid = run_cli(db, "start", workflow, "--app", "agent_app", env=env).stdout.strip().splitlines()[-1]
    done = run_cli(db, "worker", "--until-idle", "--quiet", "--app", "agent_app", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return wid


def test_a_worker_runs_the_tasks_at_once(tmp_path: Path, db: Path | str) -> None:
    wid = run_to_the_end(tmp_path, db, "fan")
    with open_store(db) as store:
        row = store.get_workflow(wid)
        assert (row.status, row.result) == ("completed", ["a", "b"]), row.error


def test_parallel_error_carries_each_outcome_through_a_worker(tmp_path: Path, db: Path | str) -> None:
    env = agent_env(tmp_path)
    wid = run_cli(db, "start", "partly_broken", "--app", "agent_app", env=env).stdout.strip().splitlines()[-1]
    assert run_cli(db, "worker", "--until-idle", "--quiet", "--app", "agent_app", env=env).returncode == 0
    with open_store(db) as store:
        row = store.get_workflow(wid)
        assert row.status == "completed", row.error
        assert row.result["failed"] == [1] and row.result["outcomes"][0] == "ok"
        assert "bad is broken" in row.result["outcomes"][1]


@pytest.mark.parametrize(("kind", "message"), [
    ("empty", "ValueError: parallel() needs at least one task"),
    ("not a task", "TypeError: parallel(): task 1 is a function, not a ctx.task(...)"),
    ("non json", "an argument of activity 'note' is of type set"),
])
def test_bad_groups_fail_in_one_line_through_a_worker_and_write_no_slot(tmp_path: Path, kind: str,
                                                                         message: str, db: Path | str) -> None:
    env = agent_env(tmp_path)
    wid = run_cli(db, "start", "bad_group", json.dumps(kind), "--app", "agent_app", env=env).stdout.strip()
    assert run_cli(db, "worker", "--until-idle", "--quiet", "--app", "agent_app", env=env).returncode == 0
    with open_store(db) as store:
        row = store.get_workflow(wid)
        assert row.status == "failed" and message in (row.error or ""), row.error
        assert "\n" not in (row.error or "")
        assert store.list_commands(wid) == []  # nothing written: not even the good task's slot
    assert ledger(tmp_path) == []  # and no activity ran


def test_a_cancel_requested_before_a_group_is_raised_there_and_no_task_runs() -> None:
    def wf(ctx: Context, _input: Any) -> Any:
        first = ctx.call_activity(echo, "first")
        try:
            return ctx.parallel([ctx.task(echo, "a"), ctx.task(echo, "b")])
        except WorkflowCancelled:
            return [first, ctx.call_activity(echo, "undo")]

    state = WorkflowState(commands=(CommandRecord("activity", "echo", True, "FIRST", None, 1, '["first"]'),))
    ctx = Context(state, clock=clock, cancel="stop")
    outcome = execute(wf, ctx, state)
    assert (outcome.status, outcome.result) == ("completed", ["FIRST", "UNDO"])
    assert RAN == ["undo"]  # neither task ran
    assert [(c.kind, c.name) for c in ctx.new_commands] == [("cancel", "activity:echo"), ("activity", "echo")]
    # The replay raises the cancel at the group again, then replays the compensation: nothing runs.
    RAN.clear()
    replayed = run(wf, replace(state, commands=state.commands + tuple(ctx.new_commands)), clock=clock)
    assert replayed.outcome.result == ["FIRST", "UNDO"] and replayed.context.executed_commands == 0 and RAN == []


def test_two_groups_back_to_back_are_recorded_and_shown_as_two(tmp_path: Path, db: Path | str) -> None:
    wid = run_to_the_end(tmp_path, db, "two_groups")
    with open_store(db) as store:
        assert store.get_workflow(wid).status == "completed"
        # Each task names its group by the group's first slot; the plain step is in none.
        assert [c.parallel_group for c in store.list_commands(wid)] == [0, 0, 2, 2, None, 5]
    shown = json.loads(run_cli(db, "show", wid, "--json").stdout)
    assert [c["parallel_group"] for c in shown["commands"]] == [0, 0, 2, 2, None, 5]
    text = run_cli(db, "show", wid).stdout
    groups = [" ".join(line.split()) for line in text.splitlines() if "in parallel" in line]
    assert groups == ["‖ in parallel: slots 0–1", "‖ in parallel: slots 2–3", "‖ in parallel: slot 5"], text
    assert [line.split()[:2] for line in text.splitlines() if "note" in line] == [
        ["0", "activity"], ["1", "activity"], ["2", "activity"], ["3", "activity"], ["4", "activity"],
        ["5", "activity"]]
    assert [("‖" in line) for line in text.splitlines() if " note " in line] == [True] * 4 + [False, True]
