"""Workloads 1–5 on DBOS (the peer), with its SQLite system database (or PostgreSQL: workload 7).

Each workload runs in a fresh subprocess (`python -m bench.peer_dbos ROLE DB N ...`),
because DBOS is a process-wide singleton; each prints one JSON line. The parent side
(`run_peer`) needs no DBOS import of its own, except to send messages as a client.

DBOS is an optional extra (`pip install -e '.[peer]'`); without it the peer column is
skipped with a note.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.sizes import Sizes

ROOT = Path(__file__).resolve().parent.parent
QUEUE_POLL_S = 0.05  # DBOS's queue default is 1 s; a short poll is the fair, fast setting


def available() -> bool:
    """Whether DBOS is installed."""
    try:
        return importlib.util.find_spec("dbos") is not None
    except (ImportError, ValueError):  # a broken or blocked install counts as absent
        return False


def version() -> str | None:
    """The installed DBOS version, if any."""
    if not available():
        return None
    from importlib.metadata import version as v

    return v("dbos")


# ---------------------------------------------------------------- the child side


def system_url(db: str) -> str:
    """DBOS's system database URL for `db`: a PostgreSQL URL as it is, else a SQLite file's path."""
    return db if db.startswith(("postgresql://", "postgres://")) else f"sqlite:///{db}"


def _configure(db: str, executor: str = "local") -> Any:
    """Configure DBOS on `db` (a SQLite file or a PostgreSQL URL) and register the bench workflows; return DBOS."""
    import logging

    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS(config={"name": "replaylog-bench", "system_database_url": system_url(db), "log_level": "WARNING",
                 "application_version": "bench", "executor_id": executor})
    marks = os.environ.get("BENCH_MARKS")

    @DBOS.step()
    def tick(i: int) -> int:
        return i

    @DBOS.workflow(name="chain")
    def chain(n: int) -> int:
        for i in range(n):
            tick(i)
        return n

    @DBOS.workflow(name="resumable")
    def resumable(n: int) -> int:
        # Workflow code (not a step) runs on every replay: the marks time the replay.
        entered = time.perf_counter()
        for i in range(n):
            tick(i)
        if marks:
            Path(marks).write_text(json.dumps({"entered": entered, "replayed": time.perf_counter()}))
        DBOS.recv("go", timeout_seconds=600)
        tick(n)
        return n + 1

    @DBOS.workflow(name="pingpong")
    def pingpong(n: int) -> int:
        for i in range(n):
            DBOS.recv("ping", timeout_seconds=600)
            tick(i)
        return n

    globals().update(chain=chain, resumable=resumable, pingpong=pingpong)
    return DBOS


def _count(db: str, sql: str, *args: Any) -> int:
    if db.startswith(("postgresql://", "postgres://")):  # DBOS's tables are in its schema `dbos`
        import psycopg

        with psycopg.connect(db, autocommit=True) as pg:
            pg.execute("SET search_path TO dbos")
            row = pg.execute(sql.replace("%", "%%").replace("?", "%s"), args).fetchone()
            return int(row[0]) if row else 0
    conn = sqlite3.connect(db, timeout=30)
    try:
        return int(conn.execute(sql, args).fetchone()[0])
    finally:
        conn.close()


def _steps(db: str, wid: str) -> int:
    return _count(db, "SELECT COUNT(*) FROM operation_outputs WHERE workflow_uuid = ? AND function_name LIKE '%tick'",
                  wid)


def _child(role: str, db: str, args: list[str]) -> dict[str, Any]:
    dbos = _configure(db, executor=os.environ.get("BENCH_EXECUTOR", "local"))
    if role == "single":
        n = int(args[0])
        dbos.launch()
        t0 = time.perf_counter()
        globals()["chain"](n)
        return {"slots_per_s": n / (time.perf_counter() - t0)}
    if role == "group":
        w, n = int(args[0]), int(args[1])
        dbos.launch()
        t0 = time.perf_counter()
        handles = [dbos.start_workflow(globals()["chain"], n) for _ in range(w)]
        for h in handles:
            h.get_result()
        return {"slots_per_s": w * n / (time.perf_counter() - t0)}
    if role == "resume-record":
        n = int(args[0])
        dbos.launch()
        from dbos import SetWorkflowID

        with SetWorkflowID("resume-1"):
            dbos.start_workflow(globals()["resumable"], n)
        deadline = time.monotonic() + 900
        while _steps(db, "resume-1") < n and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # let it reach recv
        os._exit(0)  # a crash: the workflow stays PENDING for recovery
    if role == "resume-recover":
        marks = Path(os.environ["BENCH_MARKS"])
        t0 = time.perf_counter()
        dbos.launch()  # recovers the PENDING workflow, replaying every recorded step
        deadline = time.monotonic() + 900
        while not marks.exists() and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.01)
        m = json.loads(marks.read_text())
        dbos.send("resume-1", "ok", "go")
        dbos.retrieve_workflow("resume-1").get_result()
        return {"replay_ms": (m["replayed"] - m["entered"]) * 1000,
                "launch_to_replayed_ms": (m["replayed"] - t0) * 1000}
    if role == "signal-worker":
        n = int(args[0])
        dbos.launch()
        from dbos import SetWorkflowID

        with SetWorkflowID("pingpong-1"):
            handle = dbos.start_workflow(globals()["pingpong"], n)
        handle.get_result()
        return {}
    if role == "short-worker":
        # Launched first (a queue can only be registered on a launched DBOS), but it
        # dequeues nothing until the queue is registered, after the parent says go.
        dbos.launch()
        print("ready", flush=True)
        sys.stdin.readline()
        launched = time.time()
        dbos.register_queue("bench", polling_interval_sec=QUEUE_POLL_S, worker_concurrency=64)
        n = int(args[0])
        while _count(db, "SELECT COUNT(*) FROM workflow_status WHERE status = 'SUCCESS'") < n:
            time.sleep(0.01)
        return {"launched": launched, "end": time.time()}
    raise SystemExit(f"unknown role {role}")


# ---------------------------------------------------------------- the parent side


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def _fresh(workdir: Path, name: str) -> str:
    path = workdir / f"dbos-{name}.sqlite"
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return str(path)


def call(role: str, db: str, *args: Any, timeout: float = 900, **env: str) -> dict[str, Any]:
    """Run one DBOS workload `role` on `db` in a fresh process (DBOS is a singleton); its JSON line."""
    out = subprocess.run([sys.executable, "-m", "bench.peer_dbos", role, db, *map(str, args)], cwd=ROOT,
                         env=_env(**env), capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"DBOS {role} failed: {out.stderr.strip().splitlines()[-1:]}")
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def _signal(workdir: Path, k: int, db: str | None = None) -> dict[str, Any]:
    """Signal to resume across processes; on a fresh SQLite file, or on the PostgreSQL database `db`."""
    from dbos import DBOSClient

    db = db or _fresh(workdir, "signal")
    on_file = not db.startswith(("postgresql://", "postgres://"))
    proc = subprocess.Popen([sys.executable, "-m", "bench.peer_dbos", "signal-worker", db, str(k)], cwd=ROOT,
                            env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    latencies = []
    try:
        deadline = time.monotonic() + 120
        while ((on_file and not Path(db).exists()) or not _table_ready(db)) and time.monotonic() < deadline:
            time.sleep(0.05)
        while not _started(db, "pingpong-1") and time.monotonic() < deadline:
            time.sleep(0.01)  # a message to a workflow that does not exist yet is refused
        client = DBOSClient(system_database_url=system_url(db))
        for i in range(k):
            while _steps(db, "pingpong-1") < i:
                time.sleep(0.001)
            # A human's approval lands at a random moment of DBOS's 1 s recv poll, so the
            # send is spread over a whole poll period (replaylog's bench does the same
            # over its 2 ms poll); the first 30 ms let recv start waiting.
            time.sleep(random.uniform(0.03, 1.03))
            sent = time.time()
            client.send("pingpong-1", i, "ping")
            while _steps(db, "pingpong-1") <= i:
                time.sleep(0.001)
            latencies.append((time.time() - sent) * 1000)
        client.destroy()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    ordered = sorted(latencies)
    return {"samples": k, "median_ms": statistics.median(latencies),
            "p99_ms": ordered[min(len(ordered) - 1, max(0, round(0.99 * len(ordered) + 0.5) - 1))]}


def _started(db: str, wid: str) -> bool:
    try:
        return _count(db, "SELECT COUNT(*) FROM workflow_status WHERE workflow_uuid = ?", wid) > 0
    except Exception:  # noqa: BLE001 - sqlite3's or psycopg's: not there yet
        return False


def _table_ready(db: str) -> bool:
    try:
        _count(db, "SELECT COUNT(*) FROM operation_outputs")
        return True
    except Exception:  # noqa: BLE001 - sqlite3's or psycopg's: not there yet
        return False


def _short(workdir: Path, n: int, processes: int, db: str | None = None) -> dict[str, Any]:
    """3-step workflows through a DBOS queue; on a fresh SQLite file, or on the PostgreSQL database `db`."""
    from dbos import DBOSClient

    db = db or _fresh(workdir, f"short-{processes}")
    procs = [subprocess.Popen([sys.executable, "-m", "bench.peer_dbos", "short-worker", db, str(n)], cwd=ROOT,
                              env=_env(BENCH_EXECUTOR=f"bench-{i}"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
             for i in range(processes)]
    try:
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a DBOS worker did not start")
        client = DBOSClient(system_database_url=system_url(db))
        t0 = time.perf_counter()
        for _ in range(n):
            client.enqueue({"workflow_name": "chain", "queue_name": "bench"}, 3)
        start_s = time.perf_counter() - t0
        client.destroy()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        reports = []
        for p in procs:
            out, _ = p.communicate(timeout=900)
            reports.append(json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    wall = max(r["end"] for r in reports) - min(r["launched"] for r in reports)
    return {"starts_per_s": n / start_s, "workflows_per_s": n / wall}


def short_on(db: str, n: int, processes: int) -> dict[str, Any]:
    """DBOS's 3-step workflows/s with `processes` processes on the PostgreSQL database `db`."""
    return _short(Path("."), n, processes, db)


def signal_on(db: str, k: int) -> dict[str, Any]:
    """DBOS's signal-to-resume latency on the PostgreSQL database `db`."""
    return _signal(Path("."), k, db)


def run_peer(workdir: Path, sizes: Sizes, only: set[str]) -> dict[str, Any]:
    """Run the DBOS side of workloads 1–5 (those in `only`); each is its own dict or an error."""
    out: dict[str, Any] = {"version": version(), "queue_polling_interval_s": QUEUE_POLL_S,
                           "sizes": {"single_slots": sizes.peer_single_slots,
                                     "group": [sizes.peer_group_workflows, sizes.peer_group_slots],
                                     "resume_slots": sizes.peer_resume_slots,
                                     "signal_samples": sizes.peer_signal_samples,
                                     "short_workflows": sizes.peer_short_workflows}}
    jobs = {
        "single": lambda: call("single", _fresh(workdir, "single"), sizes.peer_single_slots),
        "group": lambda: call("group", _fresh(workdir, "group"), sizes.peer_group_workflows,
                               sizes.peer_group_slots),
        "resume": lambda: _resume(workdir, sizes.peer_resume_slots),
        "signal": lambda: _signal(workdir, sizes.peer_signal_samples),
        "short": lambda: {f"{k}_{p}p": v for p in (1, 2)
                          for k, v in _short(workdir, sizes.peer_short_workflows, p).items()},
    }
    for name, job in jobs.items():
        if name not in only:
            continue
        try:
            out[name] = job()
        except Exception as exc:  # noqa: BLE001 - one failed peer workload must not sink the report
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def _resume(workdir: Path, n: int) -> dict[str, Any]:
    db = _fresh(workdir, "resume")
    marks = workdir / "dbos-resume-marks.json"
    marks.unlink(missing_ok=True)
    call("resume-record", db, n)
    result = call("resume-recover", db, n, BENCH_MARKS=str(marks))
    result["slots"] = n
    result["replay_slots_per_s"] = n / (result["replay_ms"] / 1000)
    return result


if __name__ == "__main__":
    print(json.dumps(_child(sys.argv[1], sys.argv[2], sys.argv[3:])), flush=True)
