"""The embedded worker (`replaylog.Worker`) in a process of its own: killed mid-activity, it loses
nothing, and no recorded slot runs again (both backends)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from fault_app import expected_value
from fault_harness import fault_env, read_jsonl, report

from conftest import ROOT, wait_for
from replaylog import Client, Worker

SCRIPT = ROOT / "tests" / "embedded_worker.py"
STEPS, WORKFLOWS = 12, 6


def _embedded(db: Path | str, mode: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(SCRIPT), str(db), mode], env=env, cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_process_killed_inside_a_with_worker_block_loses_nothing_and_reruns_no_recorded_slot(
        db: Path | str, tmp_path: Path) -> None:
    env = fault_env(tmp_path, FAULT_STEP_MAX="0.05")
    ledger = tmp_path / "ledger.jsonl"
    with Client(db) as client:
        handles = [client.start("chain", {"n": STEPS, "seed": i}) for i in range(WORKFLOWS)]
        proc = _embedded(db, "with", env)
        try:
            # Mid-run: some slots recorded, activities in flight in every workflow thread.
            assert wait_for(lambda: len(read_jsonl(ledger)) >= WORKFLOWS * STEPS // 3, timeout=120), \
                proc.stderr.read1().decode() if proc.poll() is not None and proc.stderr else "no progress"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(60)
        killed = proc.pid
        runs_at_kill = len(read_jsonl(ledger))
        finisher = _embedded(db, "idle", env)
        _out, err = finisher.communicate(timeout=300)
        assert finisher.returncode == 0, err.decode()
        for i, h in enumerate(handles):
            assert h.result(timeout=60) == sum(expected_value(s, i) for s in range(STEPS))
        recorded = {(h.id, s.slot): s.value["pid"] for h in handles for s in h.history()}
    assert len(recorded) == WORKFLOWS * STEPS
    runs: dict[tuple[str, int], list[int]] = defaultdict(list)
    for line in read_jsonl(ledger):
        runs[(line["wid"], line["slot"])].append(line["pid"])
    reruns = 0
    for key, pid in recorded.items():
        pids = runs[key]
        assert pids.count(pid) == 1, f"slot {key} ran {pids.count(pid)} times in the process that recorded it"
        others = [p for p in pids if p != pid]
        # Only an activity in flight at the kill runs again, once.
        assert others in ([], [killed]), f"slot {key} ran again: {pids}"
        reruns += len(others)
    report("embedded_worker_sigkill", {"backend": "postgresql" if isinstance(db, str) else "sqlite",
                                       "runs_before_kill": runs_at_kill, "slots_recorded": len(recorded),
                                       "reruns_in_flight_at_kill": reruns, "reruns_of_recorded_slots": 0})


def test_leaving_a_with_block_stops_like_sigterm_and_hands_workflows_back(db: Path | str, tmp_path: Path,
                                                                         monkeypatch: Any) -> None:
    for key, value in fault_env(tmp_path, FAULT_STEP_MAX="0.05").items():
        if key.startswith("FAULT_"):
            monkeypatch.setenv(key, value)
    with Client(db) as client:
        handle = client.start("chain", {"n": 40, "seed": 1})
        with Worker(db, app="fault_app", concurrency=4, focus_cpu=False):
            assert wait_for(lambda: len(handle.history()) >= 2, timeout=60)
        info = handle.describe()
        assert info.status == "pending" and 2 <= info.slots < 40  # handed back mid-run, not failed
        done = len(read_jsonl(tmp_path / "ledger.jsonl"))
        assert done == info.slots  # every activity that ran was recorded: the stop waited for it
        with Worker(db, app="fault_app", concurrency=4, focus_cpu=False):
            assert handle.result(timeout=120) == sum(expected_value(s, 1) for s in range(40))
    assert len(read_jsonl(tmp_path / "ledger.jsonl")) == 40  # nothing ran twice
