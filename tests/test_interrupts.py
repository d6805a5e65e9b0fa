"""Runs that end without an outcome: a BaseException from activity or workflow code, a worker
that is interrupted, a worker that dies in an activity again and again.

Whatever such code raises, the workflow is handed back (never left running under a lease
nobody serves), the error is shown, and attempts started by workers that died count
towards `max_retries`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import interrupt_app
import pytest

from conftest import ROOT, cli_env, run_cli, start_worker, wait_for
from replaylog import ActivityError, Context, current_activity
from replaylog.engine.app import Registry
from replaylog.engine.core import CommandRecord, WorkflowState, execute
from replaylog.engine.store import open_store
from replaylog.engine.worker import Worker

APP = "interrupt_app"


def serve(db: Path, *, stop_on: str | None = None, until_idle: bool = False) -> tuple[Worker, threading.Thread,
                                                                                      list[str]]:
    """An in-process Worker (one workflow thread) serving in a thread; it stops at an event containing `stop_on`."""
    events: list[str] = []

    def on_event(wid: str, text: str) -> None:
        events.append(text)
        if stop_on is not None and stop_on in text:
            w.stop()

    w = Worker(db, Registry.from_module(interrupt_app), concurrency=1, ttl=2.0, on_event=on_event)
    t = threading.Thread(target=w.run, kwargs={"until_idle": until_idle}, daemon=True)
    t.start()
    return w, t, events


def shown(db: Path, wid: str) -> dict[str, Any]:
    proc = run_cli(db, "show", "--json", wid)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def finish(db: Path, wid: str) -> dict[str, Any]:
    """Run a fresh in-process worker until nothing is left; `show --json` of the workflow."""
    w, t, events = serve(db, until_idle=True)
    t.join(timeout=120)
    if t.is_alive():
        w.stop()
        t.join(timeout=30)
        pytest.fail(f"the workflow never finished: {events}")
    return shown(db, wid)


def assert_handed_back(db: Path, wid: str, error: str) -> None:
    """Pending, owned by nobody, nothing recorded for the interrupted run, the error shown."""
    with open_store(db, readonly=True) as s:
        row = s.get_workflow(wid)
        assert (row.status, row.lease_owner, row.lease_expires) == ("pending", None, None)
        assert s.list_commands(wid) == [] or all(c.ok for c in s.list_commands(wid))
    data = shown(db, wid)
    assert data["worker_error"] == error
    text = run_cli(db, "show", wid, env=cli_env(COLUMNS="250"))
    assert "worker error" in text.stdout and error in text.stdout, text.stdout
    assert "runs again" in text.stdout


@pytest.mark.parametrize("what", ["KeyboardInterrupt", "SystemExit", "Abort"])
def test_activity_raising_a_base_exception_hands_the_workflow_back_and_it_completes_later(
        db_path: Path, tmp_path: Path, what: str) -> None:
    counter = str(tmp_path / "calls")
    with open_store(db_path) as s:
        wid = s.start_workflow("activity_interrupted_once", {"counter": counter, "what": what})
    w, t, events = serve(db_path, stop_on="handed back")
    t.join(timeout=60)
    if t.is_alive():
        w.stop()
        t.join(timeout=30)
    assert not t.is_alive() and any("handed back" in e for e in events), events
    assert_handed_back(db_path, wid,
                       f"{what}: stop right there raised in activity 'interrupts_once' at slot 0 (attempt 1 of 3)")
    # The interruption was no activity failure: no slot recorded for it.
    assert shown(db_path, wid)["commands"] == []

    done = finish(db_path, wid)
    assert (done["status"], done["result"], done["worker_error"]) == ("completed", "fine", None)
    # The interrupted attempt possibly had its effect: it counts.
    assert [(c["ok"], c["attempts"]) for c in done["commands"]] == [(True, 2)]


@pytest.mark.parametrize("what", ["SystemExit", "Abort"])
def test_workflow_code_raising_a_base_exception_hands_the_workflow_back(db_path: Path, tmp_path: Path,
                                                                        what: str) -> None:
    counter = str(tmp_path / "runs")
    with open_store(db_path) as s:
        wid = s.start_workflow("code_interrupted_once", {"counter": counter, "what": what})
    w, t, events = serve(db_path, stop_on="handed back")
    t.join(timeout=60)
    if t.is_alive():
        w.stop()
        t.join(timeout=30)
    assert not t.is_alive(), events
    assert_handed_back(db_path, wid, f"{what}: the code stopped raised in workflow code")
    done = finish(db_path, wid)
    assert (done["status"], done["result"], done["worker_error"]) == ("completed", "fine", None)
    assert [c["kind"] for c in done["commands"]] == ["now"]  # the slot before the interruption replayed


def test_workflow_code_that_swallows_an_activity_interruption_is_still_interrupted(db_path: Path,
                                                                                   tmp_path: Path) -> None:
    counter = str(tmp_path / "calls")
    with open_store(db_path) as s:
        wid = s.start_workflow("activity_interrupt_swallowed", {"counter": counter, "what": "KeyboardInterrupt"})
    done = finish(db_path, wid)
    assert (done["status"], done["result"]) == ("completed", "fine")


def test_the_workflow_thread_serves_on_after_an_interruption(db_path: Path, tmp_path: Path) -> None:
    # One workflow thread: had it died, nothing after the interruption would ever run.
    with open_store(db_path) as s:
        first = s.start_workflow("activity_interrupted_once",
                                 {"counter": str(tmp_path / "a"), "what": "KeyboardInterrupt"})
        second = s.start_workflow("dies_once", str(tmp_path / "b"))
        (tmp_path / "b").write_text("1")  # its activity is past the call that kills
    w, t, events = serve(db_path)
    try:
        assert wait_for(lambda: {r.status for r in open_store(db_path, readonly=True).list_workflows(limit=-1)}
                        == {"completed"}, timeout=90), events
    finally:
        w.stop()
        t.join(timeout=30)
    assert shown(db_path, first)["result"] == "fine" and shown(db_path, second)["result"] == 1


def owners(db: Path) -> dict[str, tuple[str, str | None]]:
    with open_store(db, readonly=True) as s:
        return {r.id: (r.status, r.lease_owner) for r in s.list_workflows(limit=-1)}


def test_sigint_to_a_worker_hands_its_workflows_back_at_once(db_path: Path, tmp_path: Path) -> None:
    env = cli_env(REPLAYLOG_TEST_LEDGER=str(tmp_path / "ledger.txt"), REPLAYLOG_TEST_STEP_SECONDS="0.2")
    ids = [run_cli(db_path, "start", "steps", "50", "--app", "worker_app", env=env).stdout.strip() for _ in range(3)]
    worker = start_worker(db_path, "--app", "worker_app", "--lease", "600", env=env)
    try:
        assert wait_for(lambda: {v[0] for v in owners(db_path).values()} == {"running"}, timeout=60)
        worker.send_signal(signal.SIGINT)
        assert worker.wait(timeout=60) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
    # Handed back, not left to a lease of ten minutes.
    assert owners(db_path) == {wid: ("pending", None) for wid in ids}


def test_ctrl_c_on_a_worker_with_several_processes_hands_every_workflow_back(db_path: Path, tmp_path: Path) -> None:
    env = cli_env(REPLAYLOG_TEST_LEDGER=str(tmp_path / "ledger.txt"), REPLAYLOG_TEST_STEP_SECONDS="0.2")
    ids = [run_cli(db_path, "start", "steps", "50", "--app", "worker_app", env=env).stdout.strip() for _ in range(4)]
    # Ctrl-C in a terminal signals the whole foreground process group: parent and children.
    proc = subprocess.Popen(
        [sys.executable, "-m", "replaylog", "--db", str(db_path), "worker", "--quiet", "--app", "worker_app",
         "--processes", "2", "--concurrency", "2", "--lease", "600"],
        env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert wait_for(lambda: len({v[1] for v in owners(db_path).values()} - {None}) == 2, timeout=60)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert owners(db_path) == {wid: ("pending", None) for wid in ids}


def run_until_done(db: Path, wid: str, most: int) -> list[int]:
    """Run `worker --until-idle` processes one after another until the workflow is finished; their exit codes."""
    codes: list[int] = []
    while owners(db)[wid][0] not in ("completed", "failed") and len(codes) < most:
        codes.append(run_cli(db, "worker", "--app", APP, "--until-idle", "--quiet", timeout=120,
                             process=True).returncode)  # its activity kills the process
    return codes


def test_an_activity_that_kills_every_worker_fails_after_max_retries_deaths(db_path: Path) -> None:
    with open_store(db_path) as s:
        wid = s.start_workflow("poison", has_input=False)
    codes = run_until_done(db_path, wid, most=6)
    assert codes == [-signal.SIGKILL] * 3 + [0]
    data = shown(db_path, wid)
    error = "the worker died during attempt 3 of 3"
    assert data["status"] == "completed"
    assert data["result"] == {"caught": error, "attempts": 3}
    assert [(c["ok"], c["error"], c["attempts"]) for c in data["commands"]] == [(False, error, 3)]
    assert data["inflight"] is None


def test_attempts_count_on_across_a_worker_crash(db_path: Path, tmp_path: Path) -> None:
    with open_store(db_path) as s:
        wid = s.start_workflow("dies_once", str(tmp_path / "calls"))
    assert run_until_done(db_path, wid, most=4) == [-signal.SIGKILL, 0]
    data = shown(db_path, wid)
    # The activity saw itself as attempt 2, and the slot records both attempts.
    assert data["result"] == 2
    assert [(c["ok"], c["attempts"]) for c in data["commands"]] == [(True, 2)]


def _attempt_of_the_call() -> int:
    return current_activity().attempt


def test_core_counts_attempts_on_from_the_starts_of_earlier_runs() -> None:
    def wf(ctx: Context) -> int:
        return int(ctx.call_activity(_attempt_of_the_call, max_retries=3))

    ctx = Context(WorkflowState(has_input=False), clock=lambda: 0.0, prior=(0, 2))
    assert execute(wf, ctx, WorkflowState(has_input=False)).result == 3
    assert [(r.ok, r.attempts) for r in ctx.new_commands] == [(True, 3)]


def test_core_records_the_death_in_the_last_allowed_attempt_as_the_slots_failure() -> None:
    def wf(ctx: Context) -> str:
        ctx.now()
        try:
            ctx.call_activity(_attempt_of_the_call, max_retries=2)
        except ActivityError as exc:
            return exc.error
        return "ran"

    ctx = Context(WorkflowState(has_input=False, commands=(CommandRecord("now", "now", True, 1.0),)),
                  clock=lambda: 0.0, prior=(1, 2))
    assert execute(wf, ctx, WorkflowState(has_input=False)).result == "the worker died during attempt 2 of 2"
    assert [(r.ok, r.error, r.attempts) for r in ctx.new_commands] == [
        (False, "the worker died during attempt 2 of 2", 2)]
