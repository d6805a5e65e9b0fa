"""The workloads on PostgreSQL, each against PostgreSQL's own floor measured in the same run.

The floor: one-row autocommit INSERTs from psycopg to the same server (each one a
durable commit, as every outcome is). The server is started here from the pgserver
wheel with its durable defaults (fsync on).
"""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.pg_server import PGServer
from bench.replaylog_runs import REGISTRY, ROOT, _env, _pctl, _wait, run_worker_processes
from bench.sizes import Sizes
from engine.store import open_store
from engine.worker import Worker


def floor_rate(url: str, rows: int) -> float:
    """One-row autocommit INSERTs from psycopg; commits/s."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS floor (id bigserial PRIMARY KEY, wf text NOT NULL, value text)")
        for i in range(min(rows, 200)):  # warm: connection, plan cache, WAL segment
            conn.execute("INSERT INTO floor (wf, value) VALUES (%s, %s)", ("wf-0123456789abcdef", str(i)))
        start = time.perf_counter()
        for i in range(rows):
            conn.execute("INSERT INTO floor (wf, value) VALUES (%s, %s)", ("wf-0123456789abcdef", str(i)))
        return rows / (time.perf_counter() - start)


def _run(url: str, concurrency: int = 64) -> float:
    worker = Worker(url, REGISTRY, concurrency=concurrency)
    start = time.perf_counter()
    worker.run(until_idle=True)
    return time.perf_counter() - start


def single(server: PGServer, sizes: Sizes) -> dict[str, Any]:
    """One workflow of `single_slots` trivial activities, in-process worker."""
    n = sizes.single_slots
    url = server.fresh_database("single")
    with open_store(url) as store:
        store.start_workflow("chain", n)
    wall = _run(url)
    floor = floor_rate(url, n)
    rate = n / wall
    return {"slots": n, "slots_per_s": rate, "floor_tx_per_s": floor, "ratio_vs_floor": rate / floor,
            "target": ">= 0.8 of floor", "met": rate / floor >= 0.8}


def group(server: PGServer, sizes: Sizes) -> dict[str, Any]:
    """`group_workflows` workflows at once in one worker: group commit against the floor."""
    n, slots = sizes.group_workflows, sizes.group_slots
    url = server.fresh_database("group")
    with open_store(url) as store:
        for _ in range(n):
            store.start_workflow("chain", slots)
    worker = Worker(url, REGISTRY, concurrency=64)
    start = time.perf_counter()
    worker.run(until_idle=True)
    wall = time.perf_counter() - start
    floor = floor_rate(url, min(2_000, n * slots))
    rate = n * slots / wall
    return {"workflows": n, "slots_each": slots, "slots_per_s": rate, "floor_tx_per_s": floor,
            "ratio_vs_floor": rate / floor,
            "outcomes_per_commit": worker.committer.commits / max(1, worker.committer.batches),
            "target": ">= 3x floor", "met": rate / floor >= 3}


def short(server: PGServer, sizes: Sizes) -> dict[str, Any]:
    """3-step workflows/s with 1, 2 and 4 worker processes (the scaling curve)."""
    n = sizes.short_workflows
    result: dict[str, Any] = {"workflows": n, "slots_each": sizes.short_slots}
    for processes in (1, 2, 4):
        url = server.fresh_database(f"short{processes}")
        with open_store(url) as store:
            for _ in range(n):
                store.start_workflow("chain", sizes.short_slots)
        wall, _ = run_worker_processes(url, processes)  # type: ignore[arg-type]
        with open_store(url) as store:
            done = store.status_counts()["completed"]
        if done != n:
            raise RuntimeError(f"{done} of {n} short workflows completed with {processes} process(es)")
        result[f"workflows_per_s_{processes}p"] = n / wall
    result["met"] = True  # a curve, no target of its own
    return result


def signal_latency(server: PGServer, sizes: Sizes) -> dict[str, Any]:
    """A worker in another process, signals from this one: time to the next recorded slot."""
    k = sizes.signal_samples
    url = server.fresh_database("signal")
    with open_store(url) as store:
        wid = store.start_workflow("pingpong", k)
    proc = subprocess.Popen(
        [sys.executable, "-m", "replaylog", "--db", url, "worker", "--app", "bench.app", "--quiet"],
        cwd=ROOT, env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    latencies: list[float] = []
    try:
        with open_store(url) as store, psycopg.connect(url, autocommit=True) as watch:
            def state() -> tuple[str, int]:
                row = watch.execute("SELECT status, slots FROM replaylog.workflows WHERE id = %s", (wid,)).fetchone()
                assert row is not None
                return row[0], int(row[1])

            for i in range(k):
                _wait(lambda i=i: state() == ("blocked", i), 60, f"the workflow to block after slot {i}")
                time.sleep(random.uniform(0.005, 0.02))
                sent = time.time()
                store.send_signal(wid, "ping", i)
                seen = _wait(lambda i=i: state()[1] > i, 30, f"slot {i} to be recorded")
                latencies.append((seen - sent) * 1000)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    median, p99 = statistics.median(latencies), _pctl(latencies, 0.99)
    return {"samples": k, "median_ms": median, "p99_ms": p99, "target": "median <= 20 ms, p99 <= 100 ms",
            "met": median <= 20.0 and p99 <= 100.0}


def postgres(workdir: Path, sizes: Sizes) -> dict[str, Any]:
    """Every PostgreSQL workload on one server started for the run; skipped without pgserver."""
    try:
        import pgserver  # noqa: F401
    except ImportError:
        return {"status": "skipped", "note": "pgserver is not installed (pip install -e '.[dev]')", "met": False}
    server = PGServer(workdir / "pgdata", durable=True)
    try:
        out: dict[str, Any] = {"single": single(server, sizes), "group": group(server, sizes),
                               "short": short(server, sizes), "signal": signal_latency(server, sizes)}
        out["met"] = all(out[k]["met"] for k in ("single", "group", "signal"))
        return out
    finally:
        server.server.cleanup()
