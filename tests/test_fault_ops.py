"""Fault suite, issue 17: cancel and terminate racing real worker processes mid-slot, SIGKILL included.

On both backends (the `db` fixture): on PostgreSQL the killed worker's leases are taken
over when they lapse (5 s), not by its pid.

Evidence: the commands table (no recorded slot lost, no gap, nothing recorded after a
terminate) and the ledger the activities append to (no activity run after a terminate
but the one in flight at that moment).
"""

from __future__ import annotations

import signal
import time
from collections import defaultdict
from pathlib import Path
from subprocess import Popen

from conftest import cli_env, run_cli, start_worker, wait_for
from replaylog.engine.store import open_store

APP = "ops_app"
N = 4  # workflows cancelled, and as many terminated, per test
STEPS = 3000  # long enough (0.02 s a step) that every workflow is still running when acted on


def _env(tmp: Path) -> dict[str, str]:
    return cli_env(REPLAYLOG_APP=APP, REPLAYLOG_TEST_LEDGER=str(tmp / "ledger.txt"),
                   REPLAYLOG_TEST_STEP_SECONDS="0.02")


def _start(db: Path | str, env: dict[str, str]) -> tuple[list[str], list[str]]:
    cancel = [f"c{i}" for i in range(N)]
    term = [f"t{i}" for i in range(N)]
    for wid in cancel:
        assert run_cli(db, "start", "saga", str(STEPS), "--id", wid, env=env).returncode == 0
    for wid in term:
        assert run_cli(db, "start", "steps", str(STEPS), "--id", wid, env=env).returncode == 0
    return cancel, term


def _slots(db: Path | str) -> dict[str, list[tuple[int, str, str, object]]]:
    out: dict[str, list[tuple[int, str, str, object]]] = defaultdict(list)
    with open_store(db, readonly=True) as s:
        for wid, slot, kind, name, value in s._conn.execute(
                "SELECT workflow_id, slot, kind, name, value FROM command_log ORDER BY workflow_id, slot"):
            out[wid].append((slot, kind, name, value))
    return out


def _rows(db: Path | str) -> dict[str, tuple[str, int, str | None]]:
    with open_store(db, readonly=True) as s:
        return {r.id: (r.status, r.slots, r.error) for r in s.list_workflows(limit=-1)}


def _ledger(tmp: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    path = tmp / "ledger.txt"
    for line in path.read_text().splitlines() if path.exists() else []:
        wid, slot, *_ = line.split()
        out[wid].append(int(slot))
    return out


def _act(db: Path | str, env: dict[str, str], cancel: list[str], term: list[str]) -> dict[str, int]:
    """Cancel and terminate, interleaved; the slot count each terminate left."""
    left = {}
    for c, t in zip(cancel, term, strict=True):
        assert run_cli(db, "cancel", c, "--reason", "race", env=env).returncode == 0
        done = run_cli(db, "terminate", t, "--reason", "race", env=env)
        assert done.returncode == 0, (done.stderr, _rows(db)[t])
        left[t] = _rows(db)[t][1]
    return left


def _verify(db: Path | str, tmp: Path, cancel: list[str], term: list[str], left: dict[str, int]) -> None:
    rows, slots, ledger = _rows(db), _slots(db), _ledger(tmp)
    for wid in cancel:
        status, _, error = rows[wid]
        assert (status, error) == ("cancelled", "WorkflowCancelled: race"), wid
        got = slots[wid]
        assert [s for s, *_ in got] == list(range(len(got))), f"{wid}: a recorded slot is missing"
        k = next(i for i, (_, kind, _, _) in enumerate(got) if kind == "cancel")
        assert k < STEPS, f"{wid}: the cancel came after every step"
        assert got[k][2] == "activity:step"
        steps_done = [v for _, kind, name, v in got[:k]]
        assert all(kind == "activity" and name == "step" for _, kind, name, _ in got[:k])
        # Every step taken was compensated, newest first, and nothing else ran.
        assert [(kind, name, v) for _, kind, name, v in got[k + 1:]] == [
            ("activity", "refund", f"{-int(str(s))}") for s in reversed(steps_done)]
    for wid in term:
        status, count, error = rows[wid]
        assert (status, error) == ("terminated", "terminated by an operator: race"), wid
        got = slots[wid]
        assert count == left[wid] == len(got), f"{wid}: recorded {len(got)} slots, {left[wid]} at the terminate"
        assert [s for s, *_ in got] == list(range(len(got))), f"{wid}: a recorded slot is missing"
        # The activity in flight at the terminate may have run (slot == count); nothing after it.
        assert max(ledger[wid], default=-1) <= count, f"{wid}: an activity ran after the terminate"


def _stop(worker: Popen[bytes]) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGKILL)
    worker.wait(30)


def _mid_run(db: Path | str, ids: list[str]) -> bool:
    slots = _slots(db)
    return all(len(slots.get(wid, ())) >= 3 for wid in ids)


def test_cancel_and_terminate_racing_a_live_worker_mid_slot(tmp_path: Path, db: Path | str) -> None:
    env = _env(tmp_path)
    cancel, term = _start(db, env)
    worker = start_worker(db, "--app", APP, env=env)
    try:
        assert wait_for(lambda: _mid_run(db, cancel + term), timeout=120)
        left = _act(db, env, cancel, term)
        assert wait_for(lambda: {_rows(db)[w][0] for w in cancel} == {"cancelled"}, timeout=180)
        time.sleep(0.5)  # room for a fenced-out write to (wrongly) land before the evidence is read
    finally:
        _stop(worker)
    _verify(db, tmp_path, cancel, term, left)


def test_cancel_and_terminate_while_a_sigkilled_worker_holds_the_leases(tmp_path: Path, db: Path | str) -> None:
    env = _env(tmp_path)
    cancel, term = _start(db, env)
    worker = start_worker(db, "--app", APP, env=env)
    try:
        assert wait_for(lambda: _mid_run(db, cancel + term), timeout=120)
        worker.send_signal(signal.SIGKILL)  # mid-slot: activities in flight, leases held
        worker.wait(30)
        assert {_rows(db)[w][0] for w in cancel + term} == {"running"}
        left = _act(db, env, cancel, term)
    finally:
        _stop(worker)
    done = run_cli(db, "worker", "--until-idle", "--quiet", "--app", APP, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    _verify(db, tmp_path, cancel, term, left)


def test_a_worker_killed_right_after_a_terminate_records_nothing_more(tmp_path: Path, db: Path | str) -> None:
    env = _env(tmp_path)
    cancel, term = _start(db, env)
    worker = start_worker(db, "--app", APP, env=env)
    try:
        assert wait_for(lambda: _mid_run(db, cancel + term), timeout=120)
        left = _act(db, env, cancel, term)
        worker.send_signal(signal.SIGKILL)
        worker.wait(30)
    finally:
        _stop(worker)
    done = run_cli(db, "worker", "--until-idle", "--quiet", "--app", APP, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    _verify(db, tmp_path, cancel, term, left)
