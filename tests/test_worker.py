"""The worker as real processes: crash and restart, two workers on one file, SIGTERM, wake-ups."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

from conftest import cli_env, run_cli, start_worker, wait_for
from replaylog.engine.store import open_store

APP = "worker_app"


def env_for(tmp_path: Path, step_seconds: float = 0.02) -> dict[str, str]:
    return cli_env(REPLAYLOG_TEST_LEDGER=str(tmp_path / "ledger.txt"), REPLAYLOG_TEST_STEP_SECONDS=str(step_seconds))


def ledger(tmp_path: Path) -> Counter[tuple[str, int]]:
    path = tmp_path / "ledger.txt"
    if not path.exists():
        return Counter()
    return Counter((wid, int(slot)) for wid, slot in (line.split() for line in path.read_text().splitlines()))


def start_many(db: Path | str, n: int, steps: int, env: dict[str, str]) -> list[str]:
    ids = []
    for i in range(n):
        proc = run_cli(db, "start", "steps", str(steps), "--app", APP, "--id", f"wf-{i:03d}", env=env)
        assert proc.returncode == 0, proc.stderr
        ids.append(proc.stdout.strip())
    return ids


def recorded(db: Path | str) -> set[tuple[str, int]]:
    with open_store(db, readonly=True) as s:
        return set(s._conn.execute("SELECT workflow_id, slot FROM command_log").fetchall())


def statuses(db: Path | str) -> dict[str, str]:
    with open_store(db, readonly=True) as s:
        return {r.id: r.status for r in s.list_workflows(limit=-1)}


def test_sigkilled_worker_is_taken_over_and_each_recorded_activity_ran_exactly_once(db: Path | str,
                                                                                   tmp_path: Path) -> None:
    env = env_for(tmp_path, 0.03)
    ids = start_many(db, 4, 25, env)
    worker = start_worker(db, "--app", APP, env=env)
    assert wait_for(lambda: len(recorded(db)) >= 20, timeout=60)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    at_kill = recorded(db)
    assert set(statuses(db).values()) == {"running"}  # the dead worker still holds the leases

    # The restarted worker sees the dead owner on this host and takes over without waiting the lease out.
    done = run_cli(db, "worker", "--until-idle", "--quiet", "--app", APP, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert set(statuses(db).values()) == {"completed"}
    for wid in ids:
        shown = json.loads(run_cli(db, "show", wid, "--json").stdout)
        assert shown["result"] == sum(i * 10 for i in range(25))
        assert [c["slot"] for c in shown["commands"]] == list(range(25))

    runs = ledger(tmp_path)
    assert set(runs) == recorded(db)
    # Recorded before the kill: ran exactly once. In flight at the kill: at most once more.
    assert all(runs[key] == 1 for key in at_kill)
    extra = {key: n for key, n in runs.items() if n > 1}
    assert all(n == 2 for n in extra.values())
    assert len(extra) <= len(ids)  # at most one slot per running workflow was in flight


def test_two_worker_processes_never_record_or_run_a_slot_twice(db: Path | str, tmp_path: Path) -> None:
    env = env_for(tmp_path, 0.002)
    start_many(db, 30, 8, env)
    workers = [start_worker(db, "--app", APP, "--until-idle", "--concurrency", "8", env=env) for _ in range(2)]
    for w in workers:
        assert w.wait(timeout=120) == 0, w.stderr.read() if w.stderr else ""
    assert set(statuses(db).values()) == {"completed"}
    runs = ledger(tmp_path)
    assert len(runs) == 30 * 8
    assert set(runs.values()) == {1}
    assert set(runs) == recorded(db)


def test_processes_option_runs_several_workers(db: Path | str, tmp_path: Path) -> None:
    env = env_for(tmp_path, 0.002)
    start_many(db, 10, 4, env)
    proc = run_cli(db, "worker", "--until-idle", "--quiet", "--processes", "2", "--app", APP, env=env,
                   timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert set(statuses(db).values()) == {"completed"}
    assert set(ledger(tmp_path).values()) == {1}


def test_sigterm_finishes_the_current_slot_and_hands_the_workflow_back(db: Path | str, tmp_path: Path) -> None:
    env = env_for(tmp_path, 0.3)
    (wid,) = start_many(db, 1, 20, env)
    # Not --quiet: its last line says what it handed back.
    worker = subprocess.Popen([sys.executable, "-m", "replaylog", "--db", str(db), "worker", "--app", APP],
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    assert wait_for(lambda: len(recorded(db)) >= 2, timeout=60)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert worker.stderr is not None
    last = worker.stderr.read().splitlines()[-1]
    assert f"(pid {worker.pid}) stopped by SIGTERM: handed back 1 unfinished workflow(s)" in last
    assert last.endswith(f"for the next worker: {wid}; 0 completed while it ran")
    with open_store(db, readonly=True) as s:
        row = s.get_workflow(wid)
        assert (row.status, row.lease_owner) == ("pending", None)
    # The activity in flight at SIGTERM was finished and recorded: nothing ran unrecorded.
    assert set(ledger(tmp_path)) == recorded(db)
    assert run_cli(db, "worker", "--until-idle", "--quiet", "--app", APP, env=env,
                   timeout=120).returncode == 0
    assert statuses(db) == {wid: "completed"}
    assert set(ledger(tmp_path).values()) == {1}


def test_a_worker_stopped_while_idle_says_it_handed_nothing_back(db: Path | str, tmp_path: Path) -> None:
    worker = subprocess.Popen([sys.executable, "-m", "replaylog", "--db", str(db), "worker",
                               "--app", APP], env=env_for(tmp_path), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert worker.stderr is not None
    assert "replaylog worker serving" in worker.stderr.readline()  # started: its signal handlers are set
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert worker.stderr.read().splitlines() == [
        f"replaylog worker (pid {worker.pid}) stopped by SIGTERM: no workflow was running, none handed back;"
        " 0 completed while it ran"]


def test_signal_from_another_process_wakes_a_blocked_workflow(db: Path | str, tmp_path: Path) -> None:
    env = env_for(tmp_path, 0.0)
    wid = run_cli(db, "start", "waits", "--app", APP, env=env).stdout.strip()
    worker = start_worker(db, "--app", APP, env=env)
    try:
        # Generous deadlines (wait_for's default): a worker's start and its wake-up on a loaded
        # machine take seconds, and only the states matter here.
        assert wait_for(lambda: statuses(db)[wid] == "blocked"), statuses(db)
        sent = run_cli(db, "signal", wid, "go", '"now"', env=env)
        assert sent.returncode == 0, sent.stderr
        assert wait_for(lambda: statuses(db)[wid] == "completed"), statuses(db)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=120)
    shown = json.loads(run_cli(db, "show", wid, "--json").stdout)
    assert shown["result"] == "now" and shown["signals"][0]["consumed"] is True


def _waiting(db: Path | str, wid: str) -> str | None:
    """What `list --json` says a workflow waits for."""
    rows = json.loads(run_cli(db, "list", "--json").stdout)
    return next(r["waiting_for_worker"] for r in rows if r["id"] == wid)


def test_a_worker_without_a_workflows_code_leaves_it_pending_for_one_that_has_it(db: Path | str,
                                                                                 tmp_path: Path) -> None:
    env = env_for(tmp_path, 0.0)
    orphan = run_cli(db, "start", "steps", "2", "--app", APP, env=env).stdout.strip()
    fine = run_cli(db, "start", "shipping", env=env).stdout.strip()
    # The sample app has no 'steps': that workflow is left alone, not failed, and the worker says so.
    drained = run_cli(db, "worker", "--until-idle", "--quiet", env=env)
    assert drained.returncode == 0, drained.stderr
    assert "left 1 pending workflow(s) no worker here knows: steps (1)" in drained.stderr
    assert statuses(db) == {orphan: "pending", fine: "completed"}
    assert _waiting(db, orphan) == "no worker running"
    assert _waiting(db, fine) is None

    # A live worker that lacks the code: list, show and show --json blame the name.
    worker = start_worker(db, env=env)
    try:
        assert wait_for(lambda: _waiting(db, orphan) == "no running worker knows 'steps'", timeout=60)
        assert "pending — no running worker knows 'steps'" in run_cli(db, "show", orphan).stdout
        assert "no running worker knows 'steps'" in run_cli(db, "list").stdout
        shown = json.loads(run_cli(db, "show", orphan, "--json").stdout)
        assert shown["status"] == "pending" and shown["waiting_for_worker"] == "no running worker knows 'steps'"
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    # A worker that exits cleanly takes its row with it.
    assert _waiting(db, orphan) == "no worker running"

    # A worker with the right app runs it.
    done = run_cli(db, "worker", "--until-idle", "--quiet", "--app", APP, env=env)
    assert done.returncode == 0, done.stderr
    assert "left" not in done.stderr
    assert statuses(db) == {orphan: "completed", fine: "completed"}
    assert json.loads(run_cli(db, "show", orphan, "--json").stdout)["result"] == 10


def test_signal_sent_while_running_is_not_lost(db: Path | str, tmp_path: Path) -> None:
    env = env_for(tmp_path, 0.5)
    wid = run_cli(db, "start", "waits", "--app", APP, env=env).stdout.strip()
    worker = start_worker(db, "--app", APP, env=env)
    try:
        assert wait_for(lambda: statuses(db)[wid] == "running", timeout=120)
        # Sent while slot 0 is still executing: the run that blocks on 'go' must not strand it.
        assert run_cli(db, "signal", wid, "go", "1", env=env).returncode == 0
        assert wait_for(lambda: statuses(db)[wid] == "completed", timeout=120)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)


def test_a_commit_the_store_refuses_hands_the_workflow_back_instead_of_failing_it(db_path: Path,
                                                                                  tmp_path: Path) -> None:
    """A store error while committing an outcome is the worker's failure, not the workflow's outcome.

    SQLite-only set-up: a trigger makes the database refuse slot 2 (on PostgreSQL the same
    path is taken by a commit that fails after its connection could not be got back).
    """
    import sqlite3

    env = env_for(tmp_path)
    (wid,) = start_many(db_path, 1, 5, env)
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TRIGGER boom BEFORE INSERT ON commands WHEN NEW.slot_key % 4294967296 = 2"
                     " BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
    worker = start_worker(db_path, "--app", APP, env=env)
    try:
        def error() -> str:
            with open_store(db_path, readonly=True) as s:
                return s.get_workflow(wid).worker_error or ""

        assert wait_for(lambda: "refused by the test" in error(), timeout=60)
        with open_store(db_path, readonly=True) as s:
            assert s.get_workflow(wid).status != "failed"
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    with sqlite3.connect(db_path) as conn:
        conn.execute("DROP TRIGGER boom")
    done = run_cli(db_path, "worker", "--until-idle", "--quiet", "--app", APP, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert statuses(db_path) == {wid: "completed"}


def test_the_loops_wake_is_set_once_cleared_by_a_wait_and_woken_from_another_thread() -> None:
    from replaylog.engine.worker.loop import Wake

    wake = Wake()
    assert wake.wait(0.01) is False  # not set: the wait times out
    wake.set()
    wake.set()  # set twice is set once
    assert wake.wait(0.0) is True
    assert wake.wait(0.0) is False  # the wait that saw it cleared it
    wake.set()
    wake.clear()
    assert wake.wait(0.0) is False  # a set the loop clears is forgotten
    woke = threading.Event()

    def waiter() -> None:
        if wake.wait(60):
            woke.set()

    t = threading.Thread(target=waiter)
    t.start()
    wake.set()  # from this thread: the waiter wakes long before its 60 s
    t.join(60)
    assert woke.is_set() and not t.is_alive()
