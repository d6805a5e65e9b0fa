"""The benchmark suite still runs: `python -m bench --smoke` produces every figure.

No timing is asserted here, ever: these machines are shared and noisy. The test only
checks that each measurement ran and wrote the fields the table in docs/performance.md is built from.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bench import peer_dbos
from conftest import ROOT, cli_env

FIELDS = {
    "single": ("slots", "slots_per_s", "floor_tx_per_s", "ratio_vs_floor", "no_inflight_ratio_vs_floor", "met"),
    "group": ("workflows", "slots_per_s", "floor_tx_per_s", "ratio_vs_floor", "outcomes_per_commit",
              "no_cpu_focus_ratio_vs_floor", "cpu_focus_gain", "met"),
    "resume": ("slots", "load_ms", "replay_ms", "replay_slots_per_s", "activities_reexecuted", "met"),
    "signal": ("samples", "median_ms", "p99_ms", "met"),
    "short": ("workflows", "workflows_per_s_1p", "workflows_per_s_2p", "starts_per_s", "met"),
    "queues": ("claim", "short", "met"),
    "prune": ("finished", "pruned", "ratio", "before_mb", "after_prune_mb", "after_vacuum_mb", "met"),
    "timers": ("timers", "median_late_ms", "p99_late_ms", "early", "met"),
    "sleepers": ("sleepers", "worker_rss_mb", "idle_cpu_percent", "wakeups_per_s", "met"),
    "tracing": ("slots", "off_slots_per_s", "on_ratio", "on_cpu_ratio", "on_cpu_us_per_slot_added", "absent_ratio",
                "absent_cpu_ratio", "absent_otel_imports_asked", "met"),
}
CONSOLE_FIELDS = ("first_paint_s", "counted_s", "peak_rss_mb", "open_workflow_s", "max_stall_ms", "met")
PEER_FIELDS = {"single": "slots_per_s", "group": "slots_per_s", "resume": "replay_slots_per_s",
               "signal": "median_ms", "short": "workflows_per_s_1p"}


def postmasters(pgdata: Path) -> list[int]:
    """The pids of PostgreSQL servers running on the data folder `pgdata` (their `postgres -D` command)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"postgres") and b"-D" in argv:
            folder = argv[argv.index(b"-D") + 1].decode(errors="replace")
            if Path(folder) == pgdata:
                found.append(int(entry.name))
    return found


def run_bench(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`python -m bench ARGS`; past `timeout` it is interrupted (SIGINT: its `finally` blocks stop its
    PostgreSQL server) and the test fails."""
    bench = subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=ROOT, env=cli_env(), text=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = bench.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        bench.send_signal(signal.SIGINT)
        try:
            out, err = bench.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            bench.kill()
            out, err = bench.communicate()
        return subprocess.CompletedProcess(bench.args, -1, out, f"{err}\ninterrupted after {timeout:.0f} s")
    return subprocess.CompletedProcess(bench.args, bench.returncode, out, err)


# The smoke run in three parts, each its own `python -m bench --smoke --only …`, so the
# suite's workers run them side by side (one run of everything was the suite's longest test).
PARTS = {
    # The peer (DBOS, where installed) beside the rows its ratios are taken against.
    "sqlite-and-peer": ("single", "group", "resume", "signal", "short", "queues", "prune", "peer"),
    "time-and-console": ("timers", "sleepers", "wake", "async", "tracing", "console"),
    "postgres": ("postgres",),
}


def test_the_parts_cover_every_workload() -> None:
    from bench.cli import WORKLOADS

    named = [w for part in PARTS.values() for w in part]
    assert sorted(named) == sorted(WORKLOADS) and len(named) == len(set(named))


@pytest.mark.parametrize("part", PARTS)
def test_smoke_run_writes_every_measurement(part: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    pgdata = tmp_path / "work" / "pgdata"
    only = PARTS[part]
    try:
        proc = run_bench(["--smoke", "--only", ",".join(only), "--out", str(out), "--workdir", str(tmp_path / "work")],
                         timeout=1800)
        # The run's PostgreSQL server is stopped, however the run ended.
        assert postmasters(pgdata) == [], "the bench left its PostgreSQL server running"
    finally:
        for pid in postmasters(pgdata):  # not to leave it to the next test or run
            os.kill(pid, signal.SIGINT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["meta"]["mode"] == "smoke"
    assert data["meta"]["machine"]["nproc"] >= 1
    m = data["measurements"]
    assert set(m) == set(only), sorted(m)
    for name, fields in FIELDS.items():
        if name not in only:
            continue
        assert m[name]["status"] == "ok", m[name]
        for field in fields:
            assert field in m[name], (name, field)
    if "resume" in only:
        assert m["resume"]["activities_reexecuted"] == 0
    if "tracing" in only:
        # Each tracing side ran every round, in turn; with OpenTelemetry hidden nothing asked for it.
        assert len(m["tracing"]["rounds"]) == 3 and m["tracing"]["absent_otel_imports_asked"] == 0
    if "async" in only:
        assert m["async"]["status"] == "ok", m["async"]
        for sub, fields in (("waiting", ("workflows", "wall_s", "peak_threads", "rss_mb", "met")),
                            ("slots", ("sync_slots_per_s", "async_slots_per_s", "ratio_async_vs_sync", "met"))):
            for field in fields:
                assert field in m["async"][sub], ("async", sub, field)
        assert m["async"]["waiting"]["peak_threads"] <= m["async"]["waiting"]["concurrency"] + 4  # not one a workflow
    if "console" in only:
        assert m["console"]["status"] in ("ok", "skipped"), m["console"]
        if m["console"]["status"] == "ok":
            for field in CONSOLE_FIELDS:
                assert field in m["console"], field
        else:
            assert m["console"]["note"]
    if "postgres" in only:
        pg = m["postgres"]
        assert pg["status"] in ("ok", "skipped"), pg
        if pg["status"] == "ok":
            for key, field in (("single", "ratio_vs_floor"), ("group", "ratio_vs_floor"),
                               ("short", "workflows_per_s_4p"), ("signal", "p99_ms"),
                               ("single", "worker_cpu_us_per_slot"), ("single", "server_cpu_us_per_slot"),
                               ("group", "worker_cpu_us_per_slot"), ("group", "server_cpu_us_per_slot"),
                               ("single", "floor_client_cpu_us_per_commit"),
                               ("single", "floor_server_cpu_us_per_commit")):
                assert field in pg[key], (key, field)
            if peer_dbos.available():  # DBOS on the same PostgreSQL server, beside replaylog's figures
                for key in ("single", "group"):
                    assert "error" not in pg[key]["dbos"] and "vs_dbos" in pg[key], (key, pg[key].get("dbos"))
    if "peer" in only:
        peer = m["peer"]
        assert peer["status"] in ("ok", "skipped"), peer
        if peer["status"] == "ok":
            for name, field in PEER_FIELDS.items():
                assert "error" not in peer[name], (name, peer[name])
                assert field in peer[name], (name, field)
            assert set(peer["replaylog_advantage"]) == set(PEER_FIELDS)
        else:
            assert peer["note"]
    # The table went to stdout too.
    assert "measurement" in proc.stdout


@pytest.mark.pgserver
@pytest.mark.skipif(os.geteuid() != 0, reason="only a server started by root runs as another user (pgserver's)")
def test_a_server_whose_folder_its_user_can_no_longer_reach_is_stopped_all_the_same() -> None:
    # Under root, pgserver runs PostgreSQL as its own user and opens the folders above the data
    # folder to it; a pytest session that starts closes /tmp/pytest-of-root again (0700), and
    # pg_ctl, run as that user, can no longer stop a server under a test's tmp_path.
    from pg_server import PGServer

    base = Path(tempfile.mkdtemp(prefix="replaylog-pg-"))
    closed = base / "closed"
    closed.mkdir()
    server = PGServer(closed / "pg", durable=False)
    try:
        assert postmasters(closed / "pg")
        closed.chmod(0o700)
        server.close()
        assert postmasters(closed / "pg") == []
    finally:
        for pid in postmasters(closed / "pg"):
            os.kill(pid, signal.SIGINT)
        closed.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.soak
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_instruction_counts_run_for_the_engine_and_the_floor(tmp_path: Path) -> None:
    """In `make soak`: under valgrind it takes a minute on a quiet machine, ten on a loaded one."""
    # The figure to watch while working on the slot path (bench/instructions.py). Only
    # that it runs and is sane is checked: the engine does more per slot than the
    # floor's bare commit. (At 100 slots a count moves by ~2,000 between runs, about
    # what the in-flight marks cost, so the two engine kinds are not compared.)
    out = tmp_path / "instructions.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.instructions", "--slots", "100", "--out", str(out)],
        cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert figures["slots"] == 100 and isinstance(figures["compiled"], bool)
    assert isinstance(figures["compiled_marks"], bool)
    # The bench says which path its children ran: the one a process of the same environment takes.
    path = subprocess.run([sys.executable, "-c", "from replaylog.engine import native; print(native.compiled_path())"],
                          cwd=ROOT, env=cli_env(), capture_output=True, text=True, check=True).stdout.strip()
    assert figures["compiled_worker"] == (path == "compiled"), (figures, path)
    assert 10_000 < figures["floor"] < min(figures["engine"], figures["engine-no-marks"]), figures
    # The core row: the Context alone, a part of what the engine does a slot.
    assert 0 < figures["core"] < figures["engine-no-marks"], figures
    assert "engine / floor" in proc.stdout
    # The resume row: loading and replaying histories of 500 and 1,500 slots, each a positive cost a slot.
    assert figures["resume_slots"] == 500 and figures["resume-load"] > 0 and figures["resume-replay"] > 0, figures
    assert "resume-load" in proc.stdout and "resume-replay" in proc.stdout
    # The short-store row: 25 and 75 three-slot workflows through the store, more a workflow than a slot.
    assert figures["short_workflows"] == 25 and figures["short-store"] > figures["engine"], figures
    assert "short-store" in proc.stdout


def test_a_run_without_workdir_keeps_its_databases_in_the_system_temp_dir_never_in_the_repo() -> None:
    # A killed run leaves its folder behind: one under bench/ was once committed whole.
    from bench.cli import default_workdir

    workdir = default_workdir()
    try:
        assert workdir.parent.resolve() == Path(tempfile.gettempdir()).resolve()
        assert not workdir.resolve().is_relative_to(ROOT)
    finally:
        workdir.rmdir()


def test_git_ignores_temp_folders_left_under_bench() -> None:
    for left in ("bench/tmpzhipsi7f/pg/PG_VERSION", "bench/replaylog-bench-x1/pgdata/PG_VERSION"):
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", left], cwd=ROOT)
        assert ignored.returncode == 0, f"{left} is not ignored"

