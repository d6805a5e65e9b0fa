"""How soon `handle.result()` returns after its workflow finished, on SQLite and on PostgreSQL.

A worker in another process runs `pingpong(1)` (wait for "ping", record one slot,
complete); this process waits in `result()` on a `Client`, signals, and takes the time
from the verdict's commit (`updated_at`, stamped by the worker's store) to `result()`
returning. SQLite wakes the waiter through `PRAGMA data_version` looks every 5 ms,
PostgreSQL through LISTEN/NOTIFY: the figure is the wake-up, not the workflow.
"""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.pg_server import PGServer, pgserver_missing
from bench.replaylog_runs import ROOT, _env, _pctl, fresh_db
from bench.sizes import Sizes
from replaylog import Client, WorkflowHandle

TARGET_MS = 50.0


def _latencies(db: Path | str, samples: int) -> list[float]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "replaylog", "--db", str(db), "worker", "--app", "bench.app", "--quiet"],
        cwd=ROOT, env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    out: list[float] = []
    try:
        with Client(db) as client:
            for _ in range(samples):
                handle = client.start("pingpong", 1)
                deadline = time.monotonic() + 60
                while handle.describe().status != "blocked":
                    if time.monotonic() > deadline:
                        raise RuntimeError("the workflow did not block on its signal")
                    time.sleep(0.002)
                returned: list[float] = []

                def wait(h: WorkflowHandle[Any] = handle, into: list[float] = returned) -> None:
                    h.result(timeout=60)
                    into.append(time.time())

                waiter = threading.Thread(target=wait)
                waiter.start()
                time.sleep(random.uniform(0.005, 0.02))  # the waiter settles into its wait
                handle.signal("ping")
                waiter.join(90)
                if not returned:
                    raise RuntimeError("result() did not return")
                out.append((returned[0] - handle.describe().updated_at) * 1000)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return out


def _figures(latencies: list[float]) -> dict[str, Any]:
    median = statistics.median(latencies)
    return {"samples": len(latencies), "median_ms": median, "p99_ms": _pctl(latencies, 0.99),
            "max_ms": max(latencies), "met": median <= TARGET_MS}


def result_wakeup(workdir: Path, sizes: Sizes) -> dict[str, Any]:
    """The wake-up latency of `result()` on SQLite, and on PostgreSQL when pgserver is installed."""
    db = fresh_db(workdir, "wake")
    with Client(db) as client:
        client.start("pingpong", 0)  # creates the database before the worker opens it
    out: dict[str, Any] = {"sqlite": _figures(_latencies(db, sizes.wake_samples))}
    missing = pgserver_missing()
    if missing is not None:
        out["postgres"] = {"status": "skipped", "note": missing}
    else:
        server = PGServer(workdir / "pgdata-wake", durable=True)
        try:
            out["postgres"] = _figures(_latencies(server.fresh_database("wake"), sizes.wake_samples))
        finally:
            server.close()
    out["target"] = f"median <= {TARGET_MS:g} ms"
    out["met"] = all(v.get("met", True) for v in out.values() if isinstance(v, dict))
    return out
