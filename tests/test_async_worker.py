"""Async activities in a real worker: no thread held while they run, crashes, termination, SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import async_app
import pytest

from conftest import cli_env, run_cli, start_worker, wait_for
from replaylog import Client, Worker, WorkflowTerminated
from replaylog.engine.store import open_store

APP = "async_app"


def ledger(path: Path) -> Counter[str]:
    return Counter(path.read_text().splitlines()) if path.exists() else Counter()


def recorded(db: Path | str) -> set[str]:
    with Client(db) as client:
        return {f"{info.id} {slot.slot}" for info in client.list() for slot in client.get_handle(info.id).history()}


@pytest.fixture
def gate() -> Iterator[None]:
    async_app.GATE.update(size=0, arrived=0)
    async_app._gate_event.clear()
    yield
    async_app.GATE.update(size=0, arrived=0)


def test_workflows_awaiting_async_activities_hold_no_thread(db: Path | str, gate: None) -> None:
    # Ten activities that finish only once all ten run at once, on a worker with two threads:
    # if an awaiting workflow held its thread, two would run and wait for ever.
    async_app.GATE["size"] = 10
    with Client(db, app=async_app) as client:
        handles = [client.start(async_app.meets, i) for i in range(10)]
        with Worker(db, app=async_app, concurrency=2, focus_cpu=False) as worker:
            assert [h.result(timeout=60) for h in handles] == list(range(10))
            assert worker._engine.concurrency == 2
            threads = [t.name for t in threading.enumerate() if t.name.startswith("replaylog-wf-")]
            assert len(threads) <= 2


def test_kill_9_with_async_activities_in_flight_reruns_none_that_was_recorded(db: Path | str,
                                                                              tmp_path: Path) -> None:
    path = tmp_path / "ledger.txt"
    env = cli_env(REPLAYLOG_TEST_LEDGER=str(path), REPLAYLOG_TEST_LATENCY="0.05")
    ids = []
    for i in range(6):
        proc = run_cli(db, "start", "steps", "16", "--app", APP, "--id", f"wf-{i}", env=env)
        assert proc.returncode == 0, proc.stderr
        ids.append(proc.stdout.strip())
    worker = start_worker(db, "--app", APP, env=env)
    assert wait_for(lambda: len(recorded(db)) >= 30, timeout=120)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    at_kill = recorded(db)

    done = run_cli(db, "worker", "--until-idle", "--quiet", "--app", APP, env=env, timeout=180)
    assert done.returncode == 0, done.stderr
    for wid in ids:
        shown = json.loads(run_cli(db, "show", wid, "--json").stdout)
        assert (shown["status"], shown["result"]) == ("completed", sum(range(16)))
    runs = ledger(path)
    assert set(runs) == recorded(db)
    assert all(runs[key] == 1 for key in at_kill)  # recorded before the kill: never ran again
    assert all(n <= 2 for n in runs.values())  # in flight at the kill: at most once more


def test_terminating_a_workflow_cancels_its_running_async_activity(db: Path | str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("REPLAYLOG_TEST_LEDGER", str(path))
    with Client(db, app=async_app) as client, Worker(db, app=async_app, focus_cpu=False, lease=1.0):
        handle = client.start(async_app.hangs)
        assert wait_for(lambda: handle.describe().status == "running")
        handle.terminate("enough")
        assert wait_for(lambda: ledger(path)["cancelled"] == 1, timeout=60)
        with pytest.raises(WorkflowTerminated):
            handle.result(timeout=5)
        assert handle.history() == []


def test_sigterm_lets_a_running_async_activity_finish_and_records_it(db: Path | str, tmp_path: Path) -> None:
    path = tmp_path / "ledger.txt"
    env = cli_env(REPLAYLOG_TEST_LEDGER=str(path), REPLAYLOG_TEST_LATENCY="0.5")
    assert run_cli(db, "start", "steps", "2", "--app", APP, "--id", "slow", env=env).returncode == 0
    worker = subprocess.Popen([sys.executable, "-m", "replaylog", "--db", str(db), "worker", "--app", APP],
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    with open_store(db, readonly=True) as store:
        assert wait_for(lambda: store.get_workflow("slow").status == "running", timeout=60)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0
    runs = ledger(path)
    assert set(runs) == recorded(db)  # what ran was recorded: nothing ran unrecorded
    assert run_cli(db, "worker", "--until-idle", "--quiet", "--app", APP, env=env, timeout=120).returncode == 0
    assert set(ledger(path).values()) == {1}


def test_a_suspended_workflows_start_mark_outlives_its_threads_next_workflow_and_a_kill_9(
        db_path: Path, tmp_path: Path) -> None:
    env = cli_env(REPLAYLOG_TEST_LEDGER=str(tmp_path / "ledger.txt"))
    hung = run_cli(db_path, "start", "hangs", "--app", APP, env=env).stdout.strip()
    worker = start_worker(db_path, "--app", APP, "--concurrency", "1", env=env)

    def inflight(wid: str) -> object:
        return json.loads(run_cli(db_path, "show", wid, "--json").stdout)["inflight"]

    try:
        assert wait_for(lambda: inflight(hung) is not None, timeout=60)
        # The one thread's record now serves another workflow; the hung one's mark is kept apart.
        other = run_cli(db_path, "start", "pipeline", "3", "--app", APP, env=env).stdout.strip()
        with open_store(db_path, readonly=True) as store:
            assert wait_for(lambda: store.get_workflow(other).status == "completed", timeout=60)
        mark = inflight(hung)
        assert isinstance(mark, dict) and (mark["slot"], mark["name"], mark["attempts"]) == (0, "ahang", 1)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    mark = inflight(hung)  # read from the dead worker's mark file
    assert isinstance(mark, dict) and (mark["slot"], mark["name"]) == (0, "ahang")


def test_an_async_attempt_past_its_timeout_is_cancelled_and_fails_with_activity_timeout(
        db: Path | str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("REPLAYLOG_TEST_LEDGER", str(path))
    with Client(db, app=async_app) as client, Worker(db, app=async_app, focus_cpu=False):
        error = client.start(async_app.times_out).result(timeout=60)
    assert error == ("ActivityTimeout: attempt 1 ran past its timeout of 0.3 s (start to close); "
                     "its task was cancelled")
    assert ledger(path)["cancelled"] == 1  # the task got CancelledError at its await


def test_twenty_async_workflows_at_once_with_random_latencies_record_the_same_slots(
        db: Path | str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPLAYLOG_TEST_LATENCY", "0.02")
    with Client(db, app=async_app) as client, Worker(db, app=async_app, concurrency=4, focus_cpu=False):
        handles = [client.start(async_app.fan, 5) for _ in range(20)]
        results = {tuple(h.result(timeout=120)) for h in handles}
        histories = {tuple((s.kind, s.name) for s in h.history()) for h in handles}
    assert results == {(2, 0, 2, 6, 6, 12)}
    assert len(histories) == 1


def test_an_async_activity_under_a_heartbeat_timeout_is_watched_and_a_quiet_one_times_out(
        db: Path | str) -> None:
    with Client(db, app=async_app) as client, Worker(db, app=async_app, focus_cpu=False):
        done, error = client.start(async_app.heartbeating).result(timeout=60)
    assert done == 4
    assert error.startswith("ActivityTimeout: attempt 1 sent no heartbeat for 0.3 s")
