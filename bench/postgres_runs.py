"""The workloads on PostgreSQL, each against PostgreSQL's own floor measured in the same run.

The floor: one-row autocommit INSERTs from psycopg to the same server (each one a
durable commit, as every outcome is), measured just before and just after the workload
and averaged: on a shared machine the disk's commit time drifts by 2-4x within a minute,
and one floor taken after the workload alone made the ratio swing with it. The server is
started here from the pgserver wheel with its durable defaults (fsync on).

The peer: DBOS (if installed, `.[peer]`) runs the same workloads (one workflow, 50 at
once, 3-step workflows with one process, signal to resume) with its system database on
the same server (a database of its own), in processes of its own (bench.peer_dbos), at
its smaller `peer_*` sizes (rates compare).
"""

from __future__ import annotations

import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from bench import peer_dbos
from bench.pg_server import PGServer, pgserver_missing
from bench.replaylog_runs import REGISTRY, ROOT, _env, _pctl, _wait, run_worker_processes
from bench.sizes import Sizes
from replaylog.engine.store import open_store
from replaylog.engine.worker import Worker


def floor_rate(url: str, rows: int, cpu: list[tuple[float, float]] | None = None,
               server: PGServer | None = None) -> float:
    """One-row autocommit INSERTs from psycopg; commits/s.

    With `cpu` (and `server`): append the CPU a timed commit cost, in µs, this process's
    (the floor's client: psycopg and libpq) and the server's.
    """
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS floor (id bigserial PRIMARY KEY, wf text NOT NULL, value text)")
        for i in range(min(rows, 200)):  # warm: connection, plan cache, WAL segment
            conn.execute("INSERT INTO floor (wf, value) VALUES (%s, %s)", ("wf-0123456789abcdef", str(i)))
        used = resource.getrusage(resource.RUSAGE_SELF)
        served = 0.0 if server is None else _server_cpu(server)[0]  # (its backend alive: counted live)
        start = time.perf_counter()
        for i in range(rows):
            conn.execute("INSERT INTO floor (wf, value) VALUES (%s, %s)", ("wf-0123456789abcdef", str(i)))
        rate = rows / (time.perf_counter() - start)
        if cpu is not None and server is not None:
            now = resource.getrusage(resource.RUSAGE_SELF)
            client = now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime
            cpu.append((client / rows * 1e6, (_server_cpu(server)[0] - served) / rows * 1e6))
        return rate


def _floor_around(url: str, rows: int, workload: Any, server: PGServer | None = None,
                  out: dict[str, Any] | None = None) -> tuple[float, float, Any]:
    """The floor before and after `workload()` (commits/s each) and its result.

    With `server` and `out`: the CPU a floor commit cost, the client's and the server's (µs,
    the mean of before and after) go to `out`, beside the workload's CPU a slot.
    """
    cpu: list[tuple[float, float]] = []
    before = floor_rate(url, rows, cpu, server)
    result = workload()
    after = floor_rate(url, rows, cpu, server)
    if out is not None and cpu:
        out["floor_client_cpu_us_per_commit"] = sum(c for c, _ in cpu) / len(cpu)
        out["floor_server_cpu_us_per_commit"] = sum(s for _, s in cpu) / len(cpu)
    return before, after, result


def _peer(role: str, server: PGServer, *args: int) -> dict[str, Any] | None:
    """DBOS's figure for workload `role` on a fresh database of `server`; None without DBOS, or with --no-peer."""
    if not PEER or not peer_dbos.available():
        return None
    try:
        db = server.fresh_database(f"dbos_{role}")
        if role == "short":
            return peer_dbos.short_on(db, *args)
        if role == "signal":
            return peer_dbos.signal_on(db, *args)
        return peer_dbos.call(role, db, *args)
    except Exception as exc:  # noqa: BLE001 - a failed peer run must not sink replaylog's figures
        return {"error": f"{type(exc).__name__}: {exc}"}


def _versus(out: dict[str, Any], peer: dict[str, Any] | None, ours: str = "slots_per_s",
            theirs_field: str = "slots_per_s", lower_is_better: bool = False) -> None:
    """Add DBOS's figure and replaylog's advantage (target 5x) to a workload's result."""
    if peer is None:
        return
    out["dbos"] = peer
    theirs = peer.get(theirs_field)
    if theirs and out.get(ours):
        out["vs_dbos"] = theirs / out[ours] if lower_is_better else out[ours] / theirs
        out["vs_dbos_met"] = out["vs_dbos"] >= 5


# Whether the DBOS peer runs (the bench's --no-peer turns it off).
PEER = True


def _run(url: str, concurrency: int = 64) -> float:
    return _run_worker(Worker(url, REGISTRY, concurrency=concurrency))


_TICK = os.sysconf("SC_CLK_TCK")


def _stat_cpu(pid: int, children: bool = False) -> float:
    """User + system CPU seconds of a process from /proc (with its reaped children's, if asked)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / _TICK


def _server_cpu(server: PGServer) -> tuple[float, int]:
    """CPU seconds the server has used so far (its postmaster with the backends it reaped, and the
    live ones) and how many client backends it has now."""
    postmaster = int((server.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    total = _stat_cpu(postmaster, children=True)
    clients = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == postmaster:
                    clients += b"[local]" in (entry / "cmdline").read_bytes()  # "postgres: user db [local] idle"
            except OSError:
                continue  # gone meanwhile (then counted with the postmaster's reaped children)
            if int(fields[1]) == postmaster:
                total += (int(fields[11]) + int(fields[12])) / _TICK
    return total, clients


def server_cpu(server: PGServer) -> float:
    """CPU seconds the server has used so far, once no client is connected and the sum has settled.

    A backend whose client just closed is counted once the postmaster has reaped it; read
    while backends were exiting, a run's figure came out a fraction of the truth (0.45 s
    read at once against 0.65 s a tenth of a second later, with no client left). So this
    waits (up to 5 s) until no client backend is left and two reads 50 ms apart agree.
    """
    deadline = time.monotonic() + 5
    last = None
    while True:
        total, clients = _server_cpu(server)
        if (not clients and total == last) or time.monotonic() >= deadline:
            return total
        last = None if clients else total
        time.sleep(0.05)


def _with_cpu(server: PGServer, slots: int, out: dict[str, Any], workload: Any) -> Any:
    """Run `workload()` (an in-process worker) and add the CPU a slot cost, in µs, to `out`: this
    process's (the worker's threads: user + system, resource.getrusage) and the server's."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    served = server_cpu(server)
    result = workload()
    now = resource.getrusage(resource.RUSAGE_SELF)
    out["worker_cpu_us_per_slot"] = (now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime) / slots * 1e6
    out["server_cpu_us_per_slot"] = (server_cpu(server) - served) / slots * 1e6
    return result


def single(server: PGServer, sizes: Sizes) -> dict[str, Any]:
    """One workflow of `single_slots` trivial activities, in-process worker."""
    n = sizes.single_slots
    url = server.fresh_database("single")
    with open_store(url) as store:
        store.start_workflow("chain", n)
    cpu: dict[str, Any] = {}
    before, after, wall = _floor_around(url, min(n, 2_000), lambda: _with_cpu(server, n, cpu, lambda: _run(url)),
                                        server, cpu)
    floor = (before + after) / 2
    rate = n / wall
    out = {"slots": n, "slots_per_s": rate, "floor_tx_per_s": floor, "floor_before_after": [before, after],
           "ratio_vs_floor": rate / floor, **cpu, "target": ">= 0.8 of floor, worker CPU <= 90 µs a slot",
           "met": rate / floor >= 0.8 and cpu["worker_cpu_us_per_slot"] <= 90}
    _versus(out, _peer("single", server, sizes.peer_single_slots))
    return out


def group(server: PGServer, sizes: Sizes) -> dict[str, Any]:
    """`group_workflows` workflows at once in one worker: group commit against the floor."""
    n, slots = sizes.group_workflows, sizes.group_slots
    url = server.fresh_database("group")
    with open_store(url) as store:
        for _ in range(n):
            store.start_workflow("chain", slots)
    worker = Worker(url, REGISTRY, concurrency=64)
    cpu: dict[str, Any] = {}
    before, after, wall = _floor_around(url, min(2_000, n * slots),
                                        lambda: _with_cpu(server, n * slots, cpu, lambda: _run_worker(worker)),
                                        server, cpu)
    floor = (before + after) / 2
    rate = n * slots / wall
    out = {"workflows": n, "slots_each": slots, "slots_per_s": rate, "floor_tx_per_s": floor,
           "floor_before_after": [before, after], "ratio_vs_floor": rate / floor, **cpu,
           "outcomes_per_commit": worker.committer.commits / max(1, worker.committer.batches),
           "target": ">= 2.5x floor", "met": rate / floor >= 2.5}
    _versus(out, _peer("group", server, sizes.peer_group_workflows, sizes.peer_group_slots))
    return out


def _run_worker(worker: Worker) -> float:
    start = time.perf_counter()
    worker.run(until_idle=True)
    return time.perf_counter() - start


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
    _versus(result, _peer("short", server, sizes.peer_short_workflows, 1), "workflows_per_s_1p", "workflows_per_s")
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
    out = {"samples": k, "median_ms": median, "p99_ms": p99, "target": "median <= 20 ms, p99 <= 100 ms",
           "met": median <= 20.0 and p99 <= 100.0}
    _versus(out, _peer("signal", server, sizes.peer_signal_samples), "median_ms", "median_ms", lower_is_better=True)
    return out


def postgres(workdir: Path, sizes: Sizes) -> dict[str, Any]:
    """Every PostgreSQL workload on one server started for the run; skipped without pgserver."""
    missing = pgserver_missing()
    if missing is not None:
        return {"status": "skipped", "note": missing, "met": False}
    server = PGServer(workdir / "pgdata", durable=True)
    try:
        out: dict[str, Any] = {"single": single(server, sizes), "group": group(server, sizes),
                               "short": short(server, sizes), "signal": signal_latency(server, sizes)}
        # DBOS side by side: replaylog at least 5x, where DBOS ran.
        out["met"] = (all(out[k]["met"] for k in ("single", "group", "signal"))
                      and all(out[k].get("vs_dbos_met", True) for k in ("single", "group", "short", "signal")))
        return out
    finally:
        server.close()
