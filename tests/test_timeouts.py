"""Activity timeouts and heartbeats: an attempt past its limit fails with ActivityTimeout and is retried,
its late result discarded; a frozen worker's attempt is taken over once its heartbeat is overdue.

In memory for the checks and the details; on a real store (SQLite file and PostgreSQL) with an
in-process worker for the local limits, and with worker processes (SIGSTOP, SIGKILL) for the takeover,
where every task of a parallel group resumes on its own: its attempt count, its last heartbeat's
details, its backoff.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import timeout_app
from fault_harness import app_worker, freeze_outside_a_write, read_jsonl

from conftest import cli_env, run_cli, start_worker, wait_for
from replaylog import Context, RetryPolicy, WorkflowState, activity, current_activity, run
from replaylog.engine.store import Store, open_store
from replaylog.engine.worker import Worker

# ------------------------------------------------------------------ in memory


@pytest.mark.parametrize(("kwargs", "said"), [
    ({"timeout": -1}, "call_activity(timeout=-1): timeout must be a positive number of seconds"),
    ({"timeout": 0}, "call_activity(timeout=0): timeout must be a positive number of seconds"),
    ({"heartbeat_timeout": "10"}, "call_activity(heartbeat_timeout='10'): heartbeat_timeout must be a positive"),
    ({"timeout": float("nan")}, "call_activity(timeout=nan)"),
])
def test_a_bad_timeout_is_refused_in_one_line_and_nothing_is_recorded(kwargs: dict[str, Any], said: str) -> None:
    calls: list[int] = []

    @activity
    def act() -> None:
        calls.append(1)

    def wf(ctx: Context) -> None:
        ctx.call_activity(act, **kwargs)

    result = run(wf, WorkflowState(has_input=False), clock=lambda: 0.0)
    assert result.outcome.status == "failed"
    error = result.outcome.error
    assert error is not None and error.startswith(f"workflow code raised ValueError: {said}")
    assert "\n" not in error
    assert result.state.commands == () and calls == []


def test_heartbeat_outside_an_activity_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match=r"^current_activity\(\) called outside a running activity$"):
        current_activity().heartbeat({"x": 1})


def test_the_next_attempt_reads_the_last_heartbeat_details_of_the_one_before() -> None:
    seen: list[Any] = []

    @activity
    def resumable() -> str:
        info = current_activity()
        seen.append(info.heartbeat_details)
        info.heartbeat({"done": info.attempt * 10})
        if info.attempt < 3:
            raise ConnectionError("cut off")
        return "ok"

    def wf(ctx: Context) -> str:
        value: str = ctx.call_activity(resumable, max_retries=3)
        return value

    result = run(wf, WorkflowState(has_input=False), clock=lambda: 0.0)
    assert result.outcome.result == "ok"
    assert seen == [None, {"done": 10}, {"done": 20}]


def test_heartbeat_details_that_json_cannot_hold_fail_the_attempt_naming_them() -> None:
    @activity
    def odd() -> None:
        current_activity().heartbeat({1, 2})

    def wf(ctx: Context) -> None:
        ctx.call_activity(odd, max_retries=1)

    result = run(wf, WorkflowState(has_input=False), clock=lambda: 0.0)
    (rec,) = result.state.commands
    assert rec.error == ("ValueNotJSONError: slot 0: the heartbeat details of activity 'odd' is of type set,"
                         " which JSON cannot hold")


# ------------------------------------------------------------------ a worker, in process


@pytest.fixture
def worker(db: Path | str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Worker]:
    monkeypatch.setenv("FAULT_LEDGER", str(tmp_path / "ledger.jsonl"))
    with app_worker(db, timeout_app) as w:
        yield w


def _ledger(tmp_path: Path) -> list[dict[str, Any]]:
    return read_jsonl(tmp_path / "ledger.jsonl")


def test_an_attempt_past_its_timeout_is_retried_and_its_late_result_never_recorded(
        worker: Worker, store: Store, tmp_path: Path) -> None:
    wid = store.start_workflow("timed", 1.5)
    assert wait_for(lambda: store.get_workflow(wid).status == "completed", timeout=120)
    assert store.get_workflow(wid).result == "fresh"
    # The first attempt ends later, on its own thread: what it returns goes nowhere.
    assert wait_for(lambda: any(line["what"] == "late end" for line in _ledger(tmp_path)), timeout=120)
    (rec,) = store.list_commands(wid)
    assert (rec.value, rec.attempts) == ("fresh", 2)
    assert [(line["attempt"], line["what"]) for line in _ledger(tmp_path)] == [(1, "start"), (2, "start"),
                                                                               (1, "late end")]


def test_an_attempt_that_stops_heartbeating_is_retried_with_its_last_details(worker: Worker, store: Store) -> None:
    wid = store.start_workflow("watched", 3.0)
    assert wait_for(lambda: store.get_workflow(wid).status == "completed", timeout=120)
    assert store.get_workflow(wid).result == {"resumed_from": {"rows": 3}}
    (rec,) = store.list_commands(wid)
    assert rec.attempts == 2


# ------------------------------------------------------------------ a frozen worker process


class _Pulsing:
    """A heartbeating workflow on a worker process (by default a lease far longer than the heartbeat
    timeout: only the heartbeat, or on SQLite a dead pid, can hand the workflow on), and the worker that
    takes it over; both ended on exit."""

    def __init__(self, db: Path | str, tmp_path: Path, workflow: str, spec: Any, lease: str = "300") -> None:
        self.db = db
        self.ledger = tmp_path / "ledger.jsonl"
        self.env = cli_env(FAULT_LEDGER=str(self.ledger))
        started = run_cli(db, "start", workflow, json.dumps(spec), "--app", "timeout_app", env=self.env)
        assert started.returncode == 0, started.stderr
        self.wid = started.stdout.strip()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.first = self.worker("--lease", lease)

    def worker(self, *args: str) -> subprocess.Popen[bytes]:
        proc = start_worker(self.db, "--app", "timeout_app", *args, env=self.env)
        self.procs.append(proc)
        return proc

    def beating(self, store: Store, tasks: int = 1) -> bool:
        """Whether each of `tasks` activities in flight has heartbeat at least 3 times."""
        shown = store.inflight_tasks(self.wid)
        return len(shown) == tasks and all(isinstance(i.details, dict) and i.details.get("i", 0) >= 3 for i in shown)

    def attempts(self, slot: int) -> list[int]:
        """The attempts the ledger saw start at `slot`, in order."""
        return [line["attempt"] for line in read_jsonl(self.ledger) if line["slot"] == slot]

    def blocked_on_retry(self, store: Store) -> bool:
        """Whether the workflow waits for an activity's next attempt."""
        row = store.get_workflow(self.wid)
        return row.status == "blocked" and row.blocked_on == "retry"

    def __enter__(self) -> _Pulsing:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(30)


def test_a_frozen_workers_attempt_is_taken_over_when_its_heartbeat_is_overdue(db: Path | str,
                                                                              tmp_path: Path) -> None:
    with _Pulsing(db, tmp_path, "pulsing", {"limit": 120, "heartbeat": 1.0}) as run, open_store(db) as store:
        wid = run.wid
        assert wait_for(lambda: run.beating(store), timeout=120)
        freeze_outside_a_write(run.first.pid, db)
        shown = json.loads(run_cli(db, "show", wid, "--json").stdout)
        assert shown["inflight"]["details"]["i"] >= 3 and shown["inflight"]["heartbeat_at"] is not None
        lease_expires = store.get_workflow(wid).lease_expires
        assert lease_expires is not None
        second = run.worker()
        assert wait_for(lambda: store.get_workflow(wid).status == "completed", timeout=120)
        last = store.inflight(wid)
        result = store.get_workflow(wid).result
        (rec,) = store.list_commands(wid)
        lines = _ledger(tmp_path)
        assert [line["attempt"] for line in lines] == [1, 2]
        assert lines[1]["pid"] == second.pid
        assert lines[1]["at"] < lease_expires  # taken over for its heartbeat, long before its lease would lapse
        assert rec.attempts == 2 and last is None
        assert isinstance(result["resumed_from"], dict) and result["resumed_from"]["i"] >= 3
        # Thawed, the first worker's writes are refused: the history stays the second worker's.
        run.first.send_signal(signal.SIGCONT)
        assert wait_for(lambda: store.get_workflow(wid).lease_owner is None, timeout=30)
        assert len(store.list_commands(wid)) == 1


def test_an_overdue_heartbeat_is_taken_over_by_another_worker_never_by_the_one_that_watches_it(
        store: Store) -> None:
    # The worker that runs the attempt watches it (engine.attempt_watch) and fails it with "sent no
    # heartbeat"; its own claim must not take its workflow over meanwhile, saying another worker did.
    wid = store.start_workflow("pulsing", {"limit": 1, "heartbeat": 0.1})
    (mine,) = store.claim("host:1:watching", ttl=600)
    store.mark_started(mine, 0, "pulse", 1, time.time() - 5)
    assert store.heartbeat(mine, 0, "pulse", 1, details=None, beat_at=time.time() - 5, expires=time.time() - 4)
    assert store.claim("host:1:watching", ttl=600) == []
    assert store.get_workflow(wid).lease_owner == "host:1:watching"
    (theirs,) = store.claim("host:2:other", ttl=600)
    assert (theirs.id, theirs.epoch) == (wid, mine.epoch + 1)
    assert store.get_workflow(wid).lease_owner == "host:2:other"


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "frozen"])
def test_an_attempt_taken_over_from_a_lost_worker_waits_its_backoff_as_a_retry_timer(
        db: Path | str, tmp_path: Path, stop: signal.Signals) -> None:
    spec = {"limit": 120, "heartbeat": 1.0, "backoff": 3.0}
    with _Pulsing(db, tmp_path, "pulsing_backoff", spec) as run, open_store(db) as store:
        wid = run.wid
        assert wait_for(lambda: run.beating(store), timeout=120)
        if stop == signal.SIGSTOP:
            freeze_outside_a_write(run.first.pid, db)
        else:
            run.first.send_signal(stop)
        second = run.worker()
        # The takeover is a failed attempt: the workflow waits the policy's backoff on a retry timer.
        assert wait_for(lambda: run.blocked_on_retry(store), timeout=120)
        wake_at = store.get_workflow(wid).wake_at
        assert wake_at is not None
        shown = run_cli(db, "show", wid)
        assert "blocked on  retry at" in shown.stdout, shown.stdout
        assert "activity pulse failed attempt 1: ActivityTimeout: attempt 1" in shown.stdout, shown.stdout
        assert "; attempt 2 at" in shown.stdout, shown.stdout
        assert wait_for(lambda: store.get_workflow(wid).status == "completed", timeout=120)
        (rec,) = store.list_commands(wid)
        result = store.get_workflow(wid).result
        lines = _ledger(tmp_path)
        assert [line["attempt"] for line in lines] == [1, 2]
        assert lines[1]["pid"] == second.pid
        assert lines[1]["at"] >= wake_at  # the second attempt started at the retry timer's time, not before
        assert rec.attempts == 2
        assert isinstance(result["resumed_from"], dict) and result["resumed_from"]["i"] >= 3


def test_a_parallel_tasks_heartbeats_are_stored_and_a_frozen_worker_is_taken_over_for_them(
        db: Path | str, tmp_path: Path) -> None:
    with _Pulsing(db, tmp_path, "pulsing_group", {"limit": 120, "heartbeat": 1.0}) as run, open_store(db) as store:
        wid = run.wid
        # The quick task is recorded first: the pulsing one runs below the last recorded slot.
        assert wait_for(lambda: [r.name for r in store.list_commands(wid)] == ["refund"], timeout=120)
        assert wait_for(lambda: run.beating(store), timeout=120)
        shown = json.loads(run_cli(db, "show", wid, "--json").stdout)
        assert shown["inflight"]["slot"] == 0 and shown["inflight"]["details"]["i"] >= 3
        freeze_outside_a_write(run.first.pid, db)
        lease_expires = store.get_workflow(wid).lease_expires
        assert lease_expires is not None
        second = run.worker()
        assert wait_for(lambda: store.get_workflow(wid).status == "completed", timeout=120)
        result = store.get_workflow(wid).result
        attempts = {r.name: r.attempts for r in store.list_commands(wid)}
        lines = [line for line in _ledger(tmp_path) if line["slot"] == 0]
        assert [line["attempt"] for line in lines] == [1, 2]
        assert lines[1]["pid"] == second.pid
        assert lines[1]["at"] < lease_expires  # taken over for its heartbeat, long before its lease would lapse
        assert attempts == {"pulse": 2, "refund": 1}
        assert result[1] == "refunded b"
        assert isinstance(result[0]["resumed_from"], dict) and result[0]["resumed_from"]["i"] >= 3


# ------------------------------------------------------------------ a parallel group taken over

@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "frozen"])
def test_every_task_of_a_group_resumes_with_its_own_attempts_and_heartbeat_details_after_a_takeover(
        db: Path | str, tmp_path: Path, stop: signal.Signals) -> None:
    with _Pulsing(db, tmp_path, "pulsing_pair", {"limit": 120, "heartbeat": 1.0}) as run, open_store(db) as store:
        wid = run.wid
        assert wait_for(lambda: run.beating(store, tasks=2), timeout=120)
        shown = json.loads(run_cli(db, "show", wid, "--json").stdout)
        assert [(t["slot"], t["lane"], t["details"]["task"]) for t in shown["inflight_tasks"]] == [
            (0, 1, "a"), (1, 2, "b")]
        text = run_cli(db, "show", wid).stdout
        assert "slot 0 activity pulse_as started 1 time(s)" in text and "slot 1 activity pulse_as started 1" in text
        if stop == signal.SIGSTOP:
            freeze_outside_a_write(run.first.pid, db)
        else:
            run.first.send_signal(stop)
        second = run.worker()
        assert wait_for(lambda: store.get_workflow(wid).status == "completed", timeout=120)
        result = store.get_workflow(wid).result
        assert {r.slot: r.attempts for r in store.list_commands(wid)} == {0: 2, 1: 2}
        for slot, task in ((0, "a"), (1, "b")):
            assert run.attempts(slot) == [1, 2]  # the second attempt is the 2nd: the count went on
            assert [line["pid"] for line in _ledger(tmp_path) if line["slot"] == slot][1] == second.pid
            # Each task read the details its own last heartbeat left.
            assert result[slot]["resumed_from"]["task"] == task and result[slot]["resumed_from"]["i"] >= 3
        assert store.inflight_tasks(wid) == []


def test_every_task_of_a_group_killed_mid_attempt_counts_its_attempts_on(db: Path | str, tmp_path: Path) -> None:
    # No heartbeat here: only the start marks (the mark file on SQLite, rows on PostgreSQL) count.
    # A short lease: on PostgreSQL a killed worker's workflows are taken over once theirs lapses.
    with _Pulsing(db, tmp_path, "stalling_pair", 120, lease="3") as run, open_store(db) as store:
        wid = run.wid
        assert wait_for(lambda: run.attempts(0) == [1] and run.attempts(1) == [1], timeout=120)
        assert wait_for(lambda: len(store.inflight_tasks(wid)) == 2, timeout=120)
        run.first.send_signal(signal.SIGKILL)
        run.first.wait(30)
        # The dead worker's marks: both tasks possibly ran, once each.
        assert wait_for(lambda: [(t.slot, t.attempts) for t in store.inflight_tasks(wid)] == [(0, 1), (1, 1)],
                        timeout=120)
        second = run.worker()
        assert wait_for(lambda: store.get_workflow(wid).status == "completed", timeout=120)
        assert store.get_workflow(wid).result == ["a again", "b again"]
        assert {r.slot: r.attempts for r in store.list_commands(wid)} == {0: 2, 1: 2}
        assert run.attempts(0) == [1, 2] and run.attempts(1) == [1, 2]
        assert {line["pid"] for line in _ledger(tmp_path) if line["attempt"] == 2} == {second.pid}


def test_every_task_of_a_group_taken_over_waits_its_backoff_on_a_durable_retry_timer(
        db: Path | str, tmp_path: Path) -> None:
    spec = {"limit": 120, "heartbeat": 1.0, "backoff": 3.0}
    with _Pulsing(db, tmp_path, "pulsing_pair", spec) as run, open_store(db) as store:
        wid = run.wid
        assert wait_for(lambda: run.beating(store, tasks=2), timeout=120)
        run.first.send_signal(signal.SIGKILL)
        second = run.worker()
        # Both lost attempts failed: the workflow waits the backoff on a retry timer, holding no thread,
        # each task's count, error and next attempt's time kept in the store.
        assert wait_for(lambda: run.blocked_on_retry(store), timeout=120)
        wake_at = store.get_workflow(wid).wake_at
        assert wake_at is not None
        tasks = store.inflight_tasks(wid)
        assert [(t.slot, t.attempts) for t in tasks] == [(0, 1), (1, 1)]
        assert all(t.retry_at is not None and t.retry_at >= wake_at and t.error and "ActivityTimeout" in t.error
                   for t in tasks)
        assert wake_at == min(t.retry_at for t in tasks if t.retry_at is not None)
        shown = run_cli(db, "show", wid).stdout
        assert shown.count("activity pulse_as failed attempt 1: ActivityTimeout") == 2, shown
        assert wait_for(lambda: store.get_workflow(wid).status == "completed", timeout=120)
        result = store.get_workflow(wid).result
        assert {r.slot: r.attempts for r in store.list_commands(wid)} == {0: 2, 1: 2}
        for slot, task in ((0, "a"), (1, "b")):
            second_attempt = [line for line in _ledger(tmp_path) if line["slot"] == slot][1]
            assert second_attempt["pid"] == second.pid and second_attempt["attempt"] == 2
            assert second_attempt["at"] >= wake_at  # started at the retry timer's time, not before
            assert result[slot]["resumed_from"]["task"] == task


# ------------------------------------------------------------------ the in-memory runner's limits

_NEVER = threading.Event()  # what a hung attempt waits on (set by no one; each waits 30 s at most)


@activity
def hangs_first() -> str:
    """The first attempt hangs; later ones answer at once."""
    if current_activity().attempt == 1:
        _NEVER.wait(30)
        return "late"
    return "fresh"


@activity
async def hangs_first_async() -> str:
    """hangs_first, awaiting."""
    if current_activity().attempt == 1:
        await asyncio.sleep(30)
        return "late"
    return "fresh"


@pytest.mark.parametrize("hangs", [hangs_first, hangs_first_async], ids=["sync", "async"])
def test_the_in_memory_runner_retries_an_attempt_past_its_timeout(hangs: Any) -> None:
    def wf(ctx: Context) -> str:
        value: str = ctx.call_activity(hangs, timeout=1.0, retry=RetryPolicy(max_attempts=2, initial=0.01))
        return value

    result = run(wf, WorkflowState(has_input=False), clock=lambda: 0.0)
    assert result.outcome.result == "fresh"
    (rec,) = result.state.commands
    assert (rec.attempts, rec.ok) == (2, True)


def test_the_in_memory_runner_retries_a_silent_attempt_with_its_last_heartbeat() -> None:
    @activity
    def goes_quiet() -> Any:
        info = current_activity()
        if info.attempt == 1:
            info.heartbeat({"rows": 5})
            _NEVER.wait(30)
            return "late"
        return {"resumed_from": info.heartbeat_details}

    def wf(ctx: Context) -> Any:
        return ctx.call_activity(goes_quiet, heartbeat_timeout=0.5, retry=RetryPolicy(max_attempts=2, initial=0.01))

    result = run(wf, WorkflowState(has_input=False), clock=lambda: 0.0)
    assert result.outcome.result == {"resumed_from": {"rows": 5}}
    assert result.state.commands[0].attempts == 2
