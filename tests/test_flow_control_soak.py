"""The issue's long figures for retries and timeouts (make soak): real worker processes, real waits.

- 5 attempts at 1 s doubling wait 1 + 2 + 4 + 8 s: the workflow takes at least 15 s, holds no
  lease (so no thread) while it waits, and a worker killed during a wait leaves the count kept.
- an activity sleeping 10 s under timeout=1 is retried and its late result never recorded.
- a frozen worker (SIGSTOP) loses its heartbeating attempt to another worker; the time from the
  last heartbeat to the takeover is reported beside heartbeat_timeout + 1 s.
"""

from __future__ import annotations

import json
import signal
import time
from itertools import pairwise
from pathlib import Path

import pytest
from fault_harness import freeze_outside_a_write, read_jsonl, report

from conftest import cli_env, run_cli, start_worker, wait_for
from replaylog.engine.core import RETRY
from replaylog.engine.store import open_store

pytestmark = pytest.mark.soak


def _start(db: Path | str, env: dict[str, str], app: str, workflow: str, value: object) -> str:
    done = run_cli(db, "start", workflow, json.dumps(value), "--app", app, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_five_attempts_at_one_second_doubling_wait_fifteen_seconds_holding_no_thread(db: Path | str,
                                                                                     tmp_path: Path) -> None:
    env = cli_env(FAULT_LEDGER=str(tmp_path / "ledger.jsonl"))
    wid = _start(db, env, "retry_app", "durable", {"attempts": 5, "initial": 1.0, "backoff": 2.0, "fail": 4})
    worker = start_worker(db, "--app", "retry_app", env=env)
    held: list[str | None] = []
    kills = 0
    try:
        with open_store(db) as store:
            def look() -> bool:
                nonlocal worker, kills
                row = store.get_workflow(wid)
                if row.status == "blocked" and row.blocked_on == RETRY:
                    held.append(row.lease_owner)
                    inflight = store.inflight(wid)
                    if kills == 0 and inflight is not None and inflight.attempts == 2:
                        worker.send_signal(signal.SIGKILL)  # during the second wait
                        worker.wait(30)
                        kills += 1
                        worker = start_worker(db, "--app", "retry_app", env=env)
                return row.status == "completed"

            assert wait_for(look, timeout=300, interval=0.05)
            (rec,) = store.list_commands(wid)
    finally:
        worker.kill()
        worker.wait(30)
    lines = read_jsonl(tmp_path / "ledger.jsonl")
    assert [line["attempt"] for line in lines] == [1, 2, 3, 4, 5] and rec.attempts == 5 and kills == 1
    gaps = [b["at"] - a["at"] for a, b in pairwise(lines)]
    assert all(gap >= wait for gap, wait in zip(gaps, [1, 2, 4, 8], strict=True))
    assert lines[-1]["at"] - lines[0]["at"] >= 15
    assert held and set(held) == {None}
    report("retry backoff", {"attempt gaps (s)": [round(g, 2) for g in gaps],
                             "first to last attempt (s)": round(lines[-1]["at"] - lines[0]["at"], 2)})


def test_an_activity_sleeping_ten_seconds_under_a_one_second_timeout_is_retried_and_never_recorded_late(
        db: Path | str, tmp_path: Path) -> None:
    env = cli_env(FAULT_LEDGER=str(tmp_path / "ledger.jsonl"))
    wid = _start(db, env, "timeout_app", "timed", 10)
    worker = start_worker(db, "--app", "timeout_app", env=env)
    try:
        with open_store(db) as store:
            assert wait_for(lambda: store.get_workflow(wid).status == "completed", timeout=120)
            assert wait_for(lambda: any(x["what"] == "late end" for x in read_jsonl(tmp_path / "ledger.jsonl")),
                            timeout=120)
            (rec,) = store.list_commands(wid)
            assert (rec.value, rec.attempts) == ("fresh", 2)
    finally:
        worker.kill()
        worker.wait(30)


def test_heartbeat_timeout_detects_a_frozen_worker(db: Path | str, tmp_path: Path) -> None:
    env = cli_env(FAULT_LEDGER=str(tmp_path / "ledger.jsonl"))
    wid = _start(db, env, "timeout_app", "pulsing", {"limit": 600, "heartbeat": 2.0})
    # Two workers already running (a deploy's): whichever claims it is frozen, the other takes over.
    workers = [start_worker(db, "--app", "timeout_app", "--lease", "300", env=env) for _ in range(2)]
    try:
        with open_store(db) as store:
            assert wait_for(lambda: (i := store.inflight(wid)) is not None and i.heartbeat_at is not None, timeout=120)
            owner = store.get_workflow(wid).lease_owner
            assert owner is not None
            (frozen,) = [w for w in workers if f":{w.pid}:" in owner]
            freeze_outside_a_write(frozen.pid, db)
            frozen_at = time.time()
            assert wait_for(lambda: store.get_workflow(wid).status == "completed", timeout=300)
        lines = read_jsonl(tmp_path / "ledger.jsonl")
        assert [line["attempt"] for line in lines] == [1, 2] and lines[1]["pid"] != frozen.pid
        report("heartbeat takeover", {"heartbeat_timeout (s)": 2.0,
                                      "frozen to next attempt (s)": round(lines[1]["at"] - frozen_at, 2),
                                      "bound (heartbeat_timeout + 1 s)": 3.0})
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(30)
