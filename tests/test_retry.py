"""Retry policies: attempts, growing waits, non-retryable errors, and durable waits between attempts.

In memory for the policy itself; on a real store (SQLite file and PostgreSQL) with a real
worker for the durable wait, which blocks the workflow on "retry" and holds no thread; with
worker processes killed (SIGKILL) during the wait for the attempt count kept across a crash.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import retry_app
from fault_harness import app_worker, read_jsonl

from conftest import cli_env, run_cli, start_worker, wait_for
from replaylog import Context, RetryPolicy, WorkflowState, activity, current_activity, run
from replaylog.engine.app import Registry
from replaylog.engine.core import RETRY, Attempts, WorkflowBlocked
from replaylog.engine.errors import ActivityError, ActivityTimeout, StoreError
from replaylog.engine.retry import DURABLE_AFTER
from replaylog.engine.store import Store, open_store
from replaylog.engine.worker import Worker

# ------------------------------------------------------------------ the policy, in memory


@pytest.mark.parametrize(("kwargs", "said"), [
    ({"max_attempts": 0}, "RetryPolicy(max_attempts=0): max_attempts must be a whole number of at least 1"),
    ({"max_attempts": 2.5}, "RetryPolicy(max_attempts=2.5)"),
    ({"initial": -1}, "RetryPolicy(initial=-1): initial must be a finite number of seconds, at least 0"),
    ({"max_interval": float("inf")}, "RetryPolicy(max_interval=inf)"),
    ({"backoff": 0.5}, "RetryPolicy(backoff=0.5): backoff must be a finite number of at least 1"),
    ({"non_retryable": (1,)}, "RetryPolicy(non_retryable=(1,)): give exception classes or their names"),
])
def test_a_bad_policy_is_refused_in_one_line_naming_the_field(kwargs: dict[str, Any], said: str) -> None:
    with pytest.raises(ValueError) as caught:
        RetryPolicy(**kwargs)
    assert str(caught.value).startswith(said)
    assert "\n" not in str(caught.value)


def test_waits_grow_by_the_backoff_up_to_the_maximum_interval() -> None:
    policy = RetryPolicy(max_attempts=6, initial=1.0, backoff=2.0, max_interval=5.0)
    assert [policy.delay(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert RetryPolicy(initial=2.0, backoff=10.0, max_interval=1e9).delay(2000) == 1e9  # no overflow


def _runs(wf: Any, **kw: Any) -> tuple[Any, list[float]]:
    slept: list[float] = []
    result = run(wf, WorkflowState(has_input=False), clock=lambda: 0.0, sleep=slept.append, **kw)
    return result, slept


def test_a_policy_retries_with_its_waits_and_counts_attempts() -> None:
    attempts: list[int] = []

    @activity
    def shaky() -> str:
        attempts.append(current_activity().attempt)
        if len(attempts) < 4:
            raise ConnectionError("down")
        return "up"

    def wf(ctx: Context) -> str:
        value: str = ctx.call_activity(shaky, retry=RetryPolicy(max_attempts=5, initial=0.1, backoff=2.0,
                                                                max_interval=0.3))
        return value

    result, slept = _runs(wf)
    assert result.outcome.result == "up"
    assert attempts == [1, 2, 3, 4]
    assert slept == [0.1, 0.2, 0.3]
    assert result.state.commands[0].attempts == 4


def test_a_non_retryable_error_fails_the_activity_at_once() -> None:
    calls: list[int] = []

    @activity
    def strict() -> None:
        calls.append(1)
        raise ValueError("bad request")

    def wf(ctx: Context) -> None:
        ctx.call_activity(strict, retry=RetryPolicy(max_attempts=5, initial=0.1, non_retryable=(ValueError,)))

    result, slept = _runs(wf)
    assert result.outcome.status == "failed"
    assert calls == [1] and slept == []
    rec = result.state.commands[0]
    assert (rec.ok, rec.attempts, rec.error) == (False, 1, "ValueError: bad request")


_TAKEN_OVER = "ActivityTimeout: attempt 1 sent no heartbeat within its heartbeat timeout; another worker took over"


def _after_takeover(policy: RetryPolicy) -> tuple[Context, list[float], list[int], BaseException | None]:
    """Run a workflow whose first attempt an earlier worker lost (the store's takeover error, no retry time)."""
    slept: list[float] = []
    calls: list[int] = []

    @activity
    def job() -> str:
        calls.append(1)
        return "done"

    ctx = Context(WorkflowState(input=None), clock=lambda: 1000.0, sleep=slept.append, durable_retry=True,
                  prior=Attempts(0, 1, _TAKEN_OVER, None))
    raised: BaseException | None = None
    try:
        ctx.call_activity(job, retry=policy)
    except BaseException as exc:  # what the run ended with is the subject
        raised = exc
    return ctx, slept, calls, raised


def test_an_attempt_lost_in_a_takeover_waits_its_backoff_before_the_next() -> None:
    ctx, slept, calls, raised = _after_takeover(RetryPolicy(max_attempts=3, initial=0.2))
    assert raised is None and slept == [0.2] and calls == [1]
    assert ctx.new_commands[0].attempts == 2  # the lost attempt counts
    # A wait past the threshold is a durable retry timer, counted from the takeover.
    ctx, slept, calls, raised = _after_takeover(RetryPolicy(max_attempts=3, initial=5.0))
    assert isinstance(raised, WorkflowBlocked) and raised.wake_at == 1005.0 and calls == [] and slept == []
    assert ctx.retry_wait == (0, "job", 1, _TAKEN_OVER, 1005.0, 0)


def test_an_attempt_lost_in_a_takeover_fails_at_once_when_timeouts_are_not_retried() -> None:
    ctx, slept, calls, raised = _after_takeover(RetryPolicy(max_attempts=3, initial=5.0,
                                                            non_retryable=(ActivityTimeout,)))
    assert isinstance(raised, ActivityError) and calls == [] and slept == []
    (rec,) = ctx.new_commands
    assert (rec.ok, rec.attempts, rec.error) == (False, 1, _TAKEN_OVER)


def test_a_non_retryable_error_may_be_named_by_its_class_name() -> None:
    assert not RetryPolicy(non_retryable=("KeyError",)).retries(KeyError("x"))
    assert not RetryPolicy(non_retryable="LookupError").retries(KeyError("x"))  # a base class, by name
    assert RetryPolicy(non_retryable=("KeyError",)).retries(ValueError("x"))


def test_max_retries_keeps_its_meaning_and_cannot_be_given_with_a_policy() -> None:
    calls: list[int] = []

    @activity
    def down() -> None:
        calls.append(1)
        raise ConnectionError("down")

    def legacy(ctx: Context) -> None:
        ctx.call_activity(down, max_retries=2)

    result, slept = _runs(legacy)
    assert calls == [1, 1] and slept == [0.05]
    assert isinstance(result.outcome.error, str) and "after 2 attempt(s)" in result.outcome.error

    def both(ctx: Context) -> None:
        ctx.call_activity(down, max_retries=2, retry=RetryPolicy())

    result, _ = _runs(both)
    assert result.outcome.error == ("workflow code raised TypeError: call_activity(): give retry= or max_retries=,"
                                    " not both")
    assert result.state.commands == ()  # nothing recorded


def test_an_activity_policy_and_an_app_default_apply_when_a_call_names_none() -> None:
    registry = Registry.from_module(retry_app)
    assert registry.retry == RetryPolicy(max_attempts=4, initial=0.01, backoff=1.0)
    result = run(retry_app.defaults, WorkflowState(input=3), clock=lambda: 0.0, retry=registry.retry)
    # flaky_two's own policy allows 2 attempts; flaky_default takes the app's 4.
    assert result.outcome.result == ["ActivityError", 4]
    assert [c.attempts for c in result.state.commands] == [2, 4]


def test_a_parallel_task_takes_a_policy_too() -> None:
    seen: list[int] = []

    @activity
    def shaky(n: int) -> int:
        seen.append(current_activity().attempt)
        if current_activity().attempt < 2:
            raise ConnectionError("down")
        return n

    def wf(ctx: Context) -> list[Any]:
        return ctx.parallel([ctx.task(shaky, 1, retry=RetryPolicy(max_attempts=2, initial=0.2))])

    result, slept = _runs(wf)
    assert result.outcome.result == [1] and seen == [1, 2] and slept == [0.2]


# ------------------------------------------------------------------ durable waits, on a real store


@pytest.fixture
def worker(db: Path | str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Worker]:
    monkeypatch.setenv("FAULT_LEDGER", str(tmp_path / "ledger.jsonl"))
    with app_worker(db, retry_app) as w:
        yield w


def _ledger(tmp_path: Path) -> list[dict[str, Any]]:
    return read_jsonl(tmp_path / "ledger.jsonl")


def test_a_long_wait_between_attempts_blocks_on_retry_holding_no_thread(worker: Worker, store: Store,
                                                                       tmp_path: Path) -> None:
    assert DURABLE_AFTER < 0.6
    wid = store.start_workflow("durable", {"attempts": 3, "initial": 0.6, "fail": 2})
    # What each look at the blocked workflow saw: (wake time, retry time, attempts, error, lease holder).
    seen: list[tuple[float | None, float, int, str | None, str | None]] = []

    def done_or_seen_waiting() -> bool:
        row = store.get_workflow(wid)
        inflight = store.inflight(wid)
        if row.status == "blocked" and row.blocked_on == RETRY and inflight is not None and inflight.retry_at:
            seen.append((row.wake_at, inflight.retry_at, inflight.attempts, inflight.error, row.lease_owner))
        return row.status == "completed"

    # (wait_for's predicate must not assert: it looks again after an exception.)
    assert wait_for(done_or_seen_waiting, timeout=120)
    assert seen
    for wake_at, retry_at, attempts, error, holder in seen:
        assert wake_at == retry_at
        assert error == f"ConnectionError: attempt {attempts} failed"
        assert holder is None  # no lease, so no thread of any worker: only the store remembers the wait
    waits = sorted({(retry_at, attempts) for _, retry_at, attempts, _, _ in seen})
    assert store.get_workflow(wid).result == 3
    (rec,) = store.list_commands(wid)
    assert (rec.ok, rec.attempts) == (True, 3)
    lines = _ledger(tmp_path)
    assert [line["attempt"] for line in lines] == [1, 2, 3]
    assert waits and all(w[1] in (1, 2) for w in waits)
    for retry_at, failed in waits:
        assert lines[failed]["at"] >= retry_at  # the next attempt never starts early


def test_show_and_list_say_a_workflow_waits_for_a_retry_and_when(store: Store, db: Path | str) -> None:
    wid = store.start_workflow("durable", {"attempts": 3, "initial": 3600, "fail": 5})
    with app_worker(db, retry_app):
        assert wait_for(lambda: store.get_workflow(wid).blocked_on == RETRY, timeout=120)
    shown = run_cli(db, "show", wid)
    assert "blocked on  retry at " in shown.stdout
    assert "slot 0: activity flaky failed attempt 1: ConnectionError: attempt 1 failed; attempt 2 at" in shown.stdout
    data = json.loads(run_cli(db, "show", wid, "--json").stdout)
    assert data["blocked_on"] == "retry" and data["inflight"]["attempts"] == 1
    assert data["inflight"]["retry_at"] == data["wake_at"]
    listed = run_cli(db, "list")
    assert "retry at" in listed.stdout


def test_a_signal_named_retry_is_refused_and_does_not_wake_the_wait(store: Store) -> None:
    wid = store.start_workflow("durable", {"attempts": 2, "initial": 1, "fail": 1})
    with pytest.raises(StoreError, match="the signal name 'retry' is reserved for retry waits"):
        store.send_signal(wid, "retry")
    assert store.list_signals(wid) == []


def test_a_non_retryable_error_is_recorded_at_once_by_the_worker(worker: Worker, store: Store) -> None:
    wid = store.start_workflow("durable", {"attempts": 5, "initial": 30, "fail": 1, "activity": "invalid"})
    assert wait_for(lambda: store.get_workflow(wid).status == "failed", timeout=120)
    (rec,) = store.list_commands(wid)
    assert (rec.ok, rec.attempts, rec.error) == (False, 1, "ValueError: attempt 1 failed")


# ------------------------------------------------------------------ a crash during the wait


def test_a_worker_killed_during_a_retry_wait_resumes_at_the_recorded_time_with_the_count_kept(
        db: Path | str, tmp_path: Path) -> None:
    env = cli_env(FAULT_LEDGER=str(tmp_path / "ledger.jsonl"))
    started = run_cli(db, "start", "durable", json.dumps({"attempts": 3, "initial": 2.0, "fail": 2}),
                      "--app", "retry_app", env=env)
    assert started.returncode == 0, started.stderr
    wid = started.stdout.strip()
    first = start_worker(db, "--app", "retry_app", env=env)
    try:
        with open_store(db) as store:
            assert wait_for(lambda: store.get_workflow(wid).blocked_on == RETRY, timeout=120)
            inflight = store.inflight(wid)
            assert inflight is not None and inflight.attempts == 1 and inflight.retry_at is not None
            retry_at = inflight.retry_at
            first.send_signal(signal.SIGKILL)
            first.wait(30)
            killed_at = time.time()
            second = start_worker(db, "--app", "retry_app", env=env)
            try:
                assert wait_for(lambda: store.get_workflow(wid).status == "completed", timeout=120)
            finally:
                second.terminate()
                second.wait(30)
            (rec,) = store.list_commands(wid)
            assert (rec.attempts, store.get_workflow(wid).result) == (3, 3)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(30)
    lines = _ledger(tmp_path)
    assert [line["attempt"] for line in lines] == [1, 2, 3]  # the count went on, nothing ran twice
    assert lines[1]["at"] >= retry_at
    if killed_at < retry_at:  # (a machine too loaded to kill it within the wait lets the first run it)
        assert lines[1]["pid"] != lines[0]["pid"]  # the second worker ran it
