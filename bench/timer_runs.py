"""Durable timers: how late they fire with a worker running, and what 10,000 sleepers cost.

The worker is a real `replaylog worker` process; the figures come from recorded history
(each timer's wake time and the stamp the activity after it recorded) and /proc.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.replaylog_runs import ROOT, _env, _pctl, _wait, fresh_db
from bench.sizes import Sizes
from replaylog.engine.store import open_store

_TICK = os.sysconf("SC_CLK_TCK")


def _worker(db: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "replaylog", "--db", str(db), "worker", "--app", "bench.app", "--quiet"],
        cwd=ROOT, env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (and its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _count(db: Path, status: str) -> int:
    with open_store(db, readonly=True) as store:
        return store.status_counts()[status]


def _lateness(db: Path, ids: list[str]) -> list[float]:
    """Per workflow: when the code after its timer ran, minus the recorded wake time (seconds)."""
    late = []
    with open_store(db, readonly=True) as store:
        for wid in ids:
            timer, after = store.list_commands(wid)[:2]
            late.append(after.value - timer.value)
    return late


def precision(workdir: Path, sizes: Sizes) -> dict[str, Any]:
    """N timers due one after another over a few seconds, fired by a running worker: how late each is."""
    n, spread = sizes.timer_count, sizes.timer_spread_s
    db = fresh_db(workdir, "timers")
    proc = _worker(db)
    try:
        first = time.time() + 2.0  # every workflow is asleep before the first timer is due
        with open_store(db) as store:
            ids = [store.start_workflow("alarm", first + spread * i / n) for i in range(n)]
        _wait(lambda: _count(db, "completed") == n, 60 + spread, "every timer to fire", interval=0.05)
    finally:
        _stop(proc)
    late_ms = [x * 1000 for x in _lateness(db, ids)]
    median, p99 = statistics.median(late_ms), _pctl(late_ms, 0.99)
    return {"timers": n, "spread_s": spread, "median_late_ms": median, "p99_late_ms": p99,
            "max_late_ms": max(late_ms), "early": sum(x < 0 for x in late_ms),
            "target": "median <= 50 ms, p99 <= 200 ms late", "met": median <= 50 and p99 <= 200 and min(late_ms) >= 0}


def sleepers(workdir: Path, sizes: Sizes) -> dict[str, Any]:
    """N workflows asleep at once: the worker's memory and idle CPU while they wait; then all fire together."""
    n, idle = sizes.sleepers, sizes.sleepers_idle_s
    db = fresh_db(workdir, "sleepers")
    proc = _worker(db)
    try:
        # All are due at one moment, far enough ahead for every one to be started, run and
        # asleep, and for the idle window after that (a start and a first run take < 2 ms each).
        t0 = time.time()
        at = t0 + 5.0 + n / 250 + idle
        with open_store(db) as store:
            ids = [store.start_workflow("alarm", at) for _ in range(n)]
        _wait(lambda: _count(db, "blocked") == n, n / 50 + 60, "every workflow to fall asleep", interval=0.1)
        asleep_at = time.time()
        cpu0, w0 = _cpu_seconds(proc.pid), time.monotonic()
        time.sleep(idle)
        idle_cpu = (_cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - w0)
        rss = _rss_mb(proc.pid)
        missed = max(0.0, time.time() - at)  # the idle window ran past the wake time (a slow machine)
        _wait(lambda: _count(db, "completed") == n, n / 50 + 120, "every sleeper to wake", interval=0.05)
    finally:
        _stop(proc)
    with open_store(db, readonly=True) as store:
        last = max(r.updated_at for r in store.list_workflow_summaries(limit=-1))
    late = _lateness(db, ids)
    return {"sleepers": n, "asleep_after_s": asleep_at - t0, "worker_rss_mb": rss, "idle_cpu_percent": idle_cpu * 100,
            "idle_window_s": idle, "wakeups_per_s": n / max(1e-6, last - at), "all_awake_after_s": last - at,
            "median_late_ms": statistics.median(late) * 1000, "idle_window_overran_s": missed,
            "target": "idle CPU < 5% of a core while asleep", "met": idle_cpu < 0.05 and missed == 0.0}
