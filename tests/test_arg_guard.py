"""The argument guard: an activity replayed with other arguments than it was recorded with diverges."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest

from conftest import run_cli
from replaylog import activity
from replaylog.engine.core import ARGS_TEXT_LIMIT, CommandRecord, Context, WorkflowState, args_key, dry_replay, run
from replaylog.engine.errors import NonDeterministicError
from replaylog.engine.store import open_store
from replaylog.engine.text import verdict_text

Cli = Callable[..., CompletedProcess[str]]
CALLS: list[Any] = []


@activity
def ask_model(prompt: str, temperature: float = 0.0) -> str:
    CALLS.append(prompt)
    return f"answer to {prompt}"


@activity
def stamp_number(n: int) -> int:
    CALLS.append(n)
    return n


@activity(check_args=False)
def stamp(token: str) -> str:
    CALLS.append(token)
    return "stamped"


def asker(prompt: str) -> Callable[[Context, Any], Any]:
    def wf(ctx: Context, _input: Any) -> Any:
        return ctx.call_activity(ask_model, prompt, temperature=0.5)
    return wf


def clock() -> float:
    return 1.0


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    CALLS.clear()


def test_args_key_is_canonical_json_and_a_digest_when_long() -> None:
    assert args_key((1,), {}) == "[1]"
    assert args_key(("a", {"z": 1, "b": [1.5]}), {}) == '["a",{"b":[1.5],"z":1}]'
    assert args_key(("p",), {"t": 0.5, "a": None}) == '{"args":["p"],"kwargs":{"a":null,"t":0.5}}'
    long = args_key(("x" * ARGS_TEXT_LIMIT,), {})
    assert long.startswith("sha256:") and len(long) == len("sha256:") + 32
    assert long == args_key(("x" * ARGS_TEXT_LIMIT,), {}) != args_key(("y" * ARGS_TEXT_LIMIT,), {})


def test_replay_with_the_same_arguments_runs_nothing() -> None:
    first = run(asker("hello"), WorkflowState(), clock=clock)
    assert first.status == "completed"
    assert first.state.commands[0].args == '{"args":["hello"],"kwargs":{"temperature":0.5}}'
    again = run(asker("hello"), first.state, clock=clock)
    assert again.status == "completed" and again.outcome.result == "answer to hello"
    assert CALLS == ["hello"]


def test_a_changed_prompt_is_a_divergence_naming_the_slot_and_both_argument_lists() -> None:
    first = run(asker("hello"), WorkflowState(), clock=clock)
    changed = run(asker("goodbye"), first.state, clock=clock)
    assert changed.status == "failed"
    diag = changed.outcome.diagnostic
    assert diag is not None and diag.slot == 0
    assert '["hello"]' in diag.message and '["goodbye"]' in diag.message
    assert "slot 0" in diag.message and "different arguments" in diag.message
    assert diag.recorded is not None and '"hello"' in diag.recorded
    assert diag.issued is not None and '"goodbye"' in diag.issued
    assert CALLS == ["hello"]  # the stale answer was never handed to the changed call


def test_a_changed_int_argument_is_a_divergence_and_the_same_one_replays() -> None:
    # One int is the commonest call: its key is made without the encoder, and must be the encoder's.
    def counter(n: int) -> Callable[[Context, Any], Any]:
        def wf(ctx: Context, _input: Any) -> Any:
            return ctx.call_activity(stamp_number, n)
        return wf

    first = run(counter(7), WorkflowState(), clock=clock)
    assert first.state.commands[0].args == "[7]" == args_key((7,), {})
    assert run(counter(7), first.state, clock=clock).status == "completed"
    changed = run(counter(8), first.state, clock=clock)
    assert changed.status == "failed"
    diag = changed.outcome.diagnostic
    assert diag is not None and diag.slot == 0 and "[7]" in diag.message and "[8]" in diag.message
    # A bool is not an int to the key: True is recorded as JSON's true, and 1 is not it.
    flagged = run(counter(True), WorkflowState(), clock=clock)
    assert flagged.state.commands[0].args == "[true]"
    assert run(counter(1), flagged.state, clock=clock).status == "failed"
    assert CALLS == [7, True]


def test_long_arguments_are_compared_by_digest() -> None:
    long_a, long_b = "a" * 500, "a" * 499 + "b"
    first = run(asker(long_a), WorkflowState(), clock=clock)
    assert first.state.commands[0].args.startswith("sha256:")
    assert run(asker(long_a), first.state, clock=clock).status == "completed"
    changed = run(asker(long_b), first.state, clock=clock)
    assert changed.status == "failed" and "too long to show (digest sha256:" in (changed.outcome.error or "")


def test_check_args_false_opts_out() -> None:
    def wf(ctx: Context, token: str) -> Any:
        return ctx.call_activity(stamp, token)

    first = run(wf, WorkflowState(input="t1"), clock=clock)
    assert first.state.commands[0].args is None
    again = run(wf, WorkflowState(input="t2", commands=first.state.commands), clock=clock)
    assert again.status == "completed" and CALLS == ["t1"]


def test_a_history_recorded_without_argument_keys_replays_as_before() -> None:
    old = WorkflowState(commands=(CommandRecord("activity", "ask_model", True, "old answer"),))
    replayed = run(asker("anything"), old, clock=clock)
    assert replayed.status == "completed" and replayed.outcome.result == "old answer" and CALLS == []


def test_a_non_json_argument_fails_clearly_and_records_nothing() -> None:
    def wf(ctx: Context, _input: Any) -> Any:
        return ctx.call_activity(ask_model, object())

    result = run(wf, WorkflowState(), clock=clock)
    assert result.status == "failed"
    assert "slot 0: an argument of activity 'ask_model' is of type object" in (result.outcome.error or "")
    assert "check_args=False" in (result.outcome.error or "")
    assert result.state.commands == () and CALLS == []


def test_dry_replay_reports_changed_arguments_like_any_divergence() -> None:
    first = run(asker("hello"), WorkflowState(), clock=clock)
    verdict = dry_replay(asker("goodbye"), first.state, status="completed")
    assert not verdict.ok and verdict.diagnostic is not None and verdict.diagnostic.slot == 0
    assert "different arguments" in verdict_text(verdict)


def test_the_guard_raises_a_sticky_non_deterministic_error() -> None:
    first = run(asker("hello"), WorkflowState(), clock=clock)

    def catcher(ctx: Context, _input: Any) -> Any:
        try:
            ctx.call_activity(ask_model, "other", temperature=0.5)
        except NonDeterministicError:
            pass
        return ctx.call_activity(ask_model, "hello", temperature=0.5)

    assert run(catcher, first.state, clock=clock).status == "failed"


# ------------------------------------------------------------------ through the store and the command line


def write_app(tmp_path: Path, name: str, prompt: str) -> str:
    app = tmp_path / f"{name}.py"
    app.write_text(
        "from replaylog import workflow, activity\n"
        "@activity\ndef ask(prompt):\n    return 'answer'\n"
        f"@workflow\ndef agent(ctx):\n    return ctx.call_activity(ask, {prompt!r})\n"
    )
    return str(app)


def test_the_store_keeps_the_key_and_check_reports_a_changed_prompt(db: Path | str, tmp_path: Path) -> None:
    cli: Cli = functools.partial(run_cli, db)
    v1, v2 = write_app(tmp_path, "v1", "summarise the news"), write_app(tmp_path, "v2", "summarise the weather")
    started = cli("start", "agent", "--app", v1)
    assert started.returncode == 0, started.stderr
    wid = started.stdout.strip().splitlines()[-1]
    assert cli("worker", "--until-idle", "--quiet", "--app", v1).returncode == 0
    with open_store(db) as store:
        assert [c.args for c in store.list_commands(wid)] == ['["summarise the news"]']
        assert store.load_state(wid).commands[0].args == '["summarise the news"]'
    assert cli("check", wid, "--app", v1).returncode == 0
    changed = cli("check", wid, "--app", v2, "--json")
    verdict = json.loads(changed.stdout)
    assert changed.returncode == 1 and verdict["ok"] is False and verdict["diagnostic"]["slot"] == 0
    assert '["summarise the news"]' in verdict["verdict"] and '["summarise the weather"]' in verdict["verdict"]


def test_export_import_and_fork_keep_the_argument_keys(db: Path | str, tmp_path: Path) -> None:
    cli: Cli = functools.partial(run_cli, db)
    v1, v2 = write_app(tmp_path, "v1", "summarise the news"), write_app(tmp_path, "v2", "summarise the weather")
    wid = cli("start", "agent", "--app", v1).stdout.strip().splitlines()[-1]
    assert cli("worker", "--until-idle", "--quiet", "--app", v1).returncode == 0
    out = tmp_path / "agent.json"
    assert cli("export", wid, "-o", str(out)).returncode == 0
    assert json.loads(out.read_text())["slots"][0]["args"] == '["summarise the news"]'
    assert cli("import", str(out), "--id", "imported").returncode == 0
    forked = cli("fork", wid, "--from-slot", "1")
    assert forked.returncode == 0, forked.stderr
    fork_id = forked.stdout.strip().splitlines()[-1]
    with open_store(db) as store:
        for copy in ("imported", fork_id):
            assert [c.args for c in store.list_commands(copy)] == ['["summarise the news"]'], copy
    # The keys still guard the copies: a changed prompt is caught, not answered from the record.
    assert cli("check", "imported", "--app", v2).returncode == 1
    assert cli("check", "--history", str(out), "--app", v2).returncode == 1
