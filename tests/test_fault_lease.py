"""Lease fencing: a worker frozen mid-activity loses its lease, and its late writes are refused.

SIGSTOP keeps the process alive, so dead-owner detection does not apply: the lease has
to lapse before another worker may take the workflow over.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

from fault_harness import WorkerProc, fault_env, freeze_outside_a_write, integrity, read_jsonl, reaping, report

from conftest import wait_for
from replaylog.engine.store import open_store


def _snapshot(db: Path) -> list[Any]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return [conn.execute("SELECT * FROM workflows ORDER BY id").fetchall(),
                conn.execute("SELECT * FROM command_log ORDER BY workflow_id, slot").fetchall()]
    finally:
        conn.close()


def test_a_frozen_worker_loses_its_lease_and_its_late_writes_are_refused(tmp_path: Path) -> None:
    db = tmp_path / "lease.db"
    store = open_store(db)
    wid = store.start_workflow("stalled", "fenced")
    ledger = tmp_path / "ledger.jsonl"
    release_a = tmp_path / "release-a"
    release_b = tmp_path / "release-b"
    release_b.touch()  # the second worker's activity returns at once
    with reaping([]) as procs:
        a = WorkerProc(db, tmp_path / "logs", fault_env(tmp_path, FAULT_RELEASE=str(release_a)), "--lease", "1")
        procs.append(a)
        assert wait_for(lambda: any(e.get("event") == "start" for e in read_jsonl(ledger)), timeout=60)
        freeze_outside_a_write(a.pid, db)  # frozen in the middle of the activity at slot 1
        claim_epoch = store.get_workflow(wid).lease_owner
        assert claim_epoch is not None and f":{a.pid}:" in claim_epoch
        assert wait_for(lambda: (store.get_workflow(wid).lease_expires or 0) < time.time(), timeout=120)

        b = WorkerProc(db, tmp_path / "logs", fault_env(tmp_path, FAULT_RELEASE=str(release_b)), "--lease", "5")
        procs.append(b)
        assert wait_for(lambda: store.get_workflow(wid).status == "completed", timeout=60), b.log()
        b.kill(signal.SIGTERM)
        assert b.wait(30) == 0
        before = _snapshot(db)

        release_a.touch()
        a.kill(signal.SIGCONT)  # the activity returns and A tries to record slot 1
        assert wait_for(lambda: "lease lost" in a.log(), timeout=60), a.log()
        a.kill(signal.SIGTERM)
        assert a.wait(30) == 0, a.log()
        after = _snapshot(db)

    assert after == before, "the frozen worker's late writes reached the database"
    row = store.get_workflow(wid)
    cmds = store.list_commands(wid)
    store.close()
    assert [c.slot for c in cmds] == [0, 1, 2]  # no slot recorded twice
    # The recorded outcome of the fenced slot is the second worker's run: no effect lost.
    assert cmds[1].value == {"tag": "fenced", "pid": b.pid}
    assert row.result == {"first": 2, "held": {"tag": "fenced", "pid": b.pid}, "last": 4}
    events = [(e["pid"], e["event"]) for e in read_jsonl(ledger)]
    # Both ran the activity (the frozen run was in flight: at-least-once), each to its end.
    assert sorted(events) == sorted([(a.pid, "start"), (a.pid, "end"), (b.pid, "start"), (b.pid, "end")])
    assert integrity(db) == "ok"
    report("lease_fencing", {"late_writes_refused": True, "slots_recorded": len(cmds),
                             "runs_of_fenced_slot": 2, "recorded_run_pid_is_takeover_worker": True})
