"""Contention: workers, signal senders, CLI callers and long-reading consoles, all at once.

The promise under test: no "database is locked" reaches any caller (the busy timeout
and BEGIN IMMEDIATE absorb the waits), and the WAL stays bounded because checkpoints
keep happening while readers come and go.
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fault_harness import WorkerProc, fault_env, integrity, reaping, report

from conftest import ROOT, run_cli
from replaylog.engine.store import open_store
from replaylog.engine.store.sqlite import upkeep

WAL_BOUND = 32 * 1024 * 1024


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def test_no_caller_sees_a_locked_database_and_the_wal_stays_bounded(tmp_path: Path) -> None:
    """8 s of contention (`make soak`: 60 s)."""
    contention(tmp_path, 8.0)


@pytest.mark.soak
def test_soak_no_caller_sees_a_locked_database_for_a_minute(tmp_path: Path) -> None:
    """The soak variant (make soak): a minute of contention."""
    contention(tmp_path, 60.0)


def contention(tmp_path: Path, seconds: float) -> None:
    """Workers, senders, readers and CLI calls on one file for `seconds`; checks every promise."""
    rng = random.Random(11)
    db = tmp_path / "contention.db"
    wal = Path(f"{db}-wal")
    env = fault_env(tmp_path, FAULT_STEP_MAX="0.01")
    store = open_store(db)
    collectors = [store.start_workflow("collector", 5) for _ in range(100)]
    for _ in range(40):
        store.start_workflow("chain", {"n": 10, "seed": rng.randrange(1000)})
    db_size_before = _size(db)
    procs: list[subprocess.Popen[bytes]] = []
    for k in range(2):
        plan = [(wid, name, i) for wid in collectors[k::2] for name in ("a", "b") for i in range(5)]
        (tmp_path / f"plan-{k}.json").write_text(json.dumps(plan))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "fault_sender", str(db), str(tmp_path / f"plan-{k}.json"),
             str(tmp_path / f"acks-{k}.jsonl"), "0.02"], env=env, cwd=ROOT, stdin=subprocess.DEVNULL))
    for k in range(2):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "fault_reader", str(db), str(seconds), str(tmp_path / f"reader-{k}.json")],
            env=env, cwd=ROOT, stdin=subprocess.DEVNULL))
    cli_calls = 0
    max_wal = 0
    started_total = 140
    with reaping([WorkerProc(db, tmp_path / "logs", env, "--quiet") for _ in range(2)]) as workers:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            max_wal = max(max_wal, _size(wal))
            if store.count_workflows(status=("pending", "running")) < 16:
                for _ in range(20):
                    store.start_workflow("chain", {"n": 10, "seed": rng.randrange(1000)})
                started_total += 20
            for args in (("list", "--json", "--limit", "5"), ("show", "--json", rng.choice(collectors))):
                res = run_cli(db, *args, env=env)
                cli_calls += 1
                assert res.returncode == 0 and "locked" not in res.stderr, res.stderr
            time.sleep(0.1)
        for p in procs:
            assert p.wait(120) == 0, f"{p.args[2]} exited with {p.returncode}"
        assert all(w.proc.poll() is None for w in workers), "a worker died under contention"
        for w in workers:
            w.kill(signal.SIGTERM)
            assert w.wait(60) == 0, w.log()
        logs = "".join(w.log() for w in workers)
    assert "locked" not in logs and "Traceback" not in logs, logs[-2000:]

    acks = [json.loads(line) for k in range(2) for line in (tmp_path / f"acks-{k}.jsonl").read_text().splitlines()]
    assert len(acks) == 1000 and not [a for a in acks if "error" in a], [a for a in acks if "error" in a][:3]
    readers = [json.loads((tmp_path / f"reader-{k}.json").read_text()) for k in range(2)]
    assert [r["errors"] for r in readers] == [[], []]
    assert all(r["reads"] > 0 and r["long_holds"] > 0 for r in readers), readers

    # Checkpoints happened: in WAL mode the database file grows only when the WAL is
    # copied back into it; and the WAL never held more than a bounded amount.
    db_size_after = _size(db)
    assert db_size_after > db_size_before, f"no checkpoint copied anything: {db_size_before} -> {db_size_after}"
    assert max_wal < WAL_BOUND, f"the WAL grew to {max_wal} bytes"
    counts = store.status_counts()
    store.close()
    assert integrity(db) == "ok"
    report("contention", {
        "seconds": seconds, "workers": 2, "signal_senders": 2, "signals_acknowledged": len(acks),
        "reader_processes": 2, "reads": sum(r["reads"] for r in readers),
        "long_read_transactions": sum(r["long_holds"] for r in readers), "cli_calls": cli_calls,
        "workflows_started": started_total, "workflows_completed": counts["completed"],
        "locked_errors": 0, "max_wal_bytes": max_wal, "db_bytes_before": db_size_before,
        "db_bytes_after": db_size_after,
    })


def test_a_store_opened_while_another_creates_the_same_new_database_waits_for_it(tmp_path: Path) -> None:
    # A second opener of a brand-new file (a worker and a client started at once) needs the
    # file's exclusive lock to switch it to WAL, and SQLite refuses that at once, busy timeout
    # or not, while the creator holds the write lock: the opener must wait, not fail.
    import sqlite3
    import threading

    path = tmp_path / "new.db"
    creator = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    creator.execute("BEGIN IMMEDIATE")
    creator.execute("CREATE TABLE mid_creation (a)")  # the creator's write lock, held
    opened: list[object] = []

    def open_it() -> None:
        try:
            with open_store(path) as store:
                opened.append(store.list_workflows())
        except Exception as exc:  # what the opener saw is the answer
            opened.append(exc)

    opener = threading.Thread(target=open_it)
    opener.start()
    opener.join(0.3)  # the opener meets the lock (refused in milliseconds without the wait)
    creator.execute("ROLLBACK")
    creator.close()
    opener.join(60)
    assert opened == [[]], opened


def _pinned_wal(tmp_path: Path) -> tuple[Path, Any, sqlite3.Connection]:
    """A store whose WAL is past the (lowered) bound, and a reader whose snapshot pins it.

    The reader's transaction began before the last 50 pages were written, so a RESTART
    must wait for it to end.
    """
    db = tmp_path / "wal.db"
    store = open_store(db)

    def grow() -> None:
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("CREATE TABLE IF NOT EXISTS filler (x BLOB)")
        for _ in range(50):
            conn.execute("INSERT INTO filler VALUES (?)", (b"x" * 3000,))
        conn.close()

    grow()
    reader = sqlite3.connect(db, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM filler").fetchone()
    grow()
    return db, store, reader


def test_a_restart_kept_out_by_another_checkpoint_does_not_back_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two workers on one file both look after its WAL. While one's RESTART waits for a
    # reader, the other's cannot even start (SQLite answers at once, with no frame counts):
    # that says nothing about readers, so it must not push the next look back.
    monkeypatch.setattr(upkeep, "WAL_RESTART_AT", 64 * 1024)
    monkeypatch.setattr(upkeep, "WAL_RESTART_WAIT", 0.05)
    db, store, reader = _pinned_wal(tmp_path)
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    other.execute("PRAGMA busy_timeout = 20000")

    def checkpoint_elsewhere() -> None:
        # Until it gets SQLite's checkpoint lock (the probes below take it for a moment too),
        # then it holds the lock while it waits for the reader.
        while other.execute("PRAGMA wal_checkpoint(RESTART)").fetchone() == (1, -1, -1):
            pass

    waiting = threading.Thread(target=checkpoint_elsewhere)
    waiting.start()
    try:
        deadline = time.monotonic() + 60
        while store._restart_wal(0.0) != "elsewhere":  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "the other connection's checkpoint never started"
            time.sleep(0.01)
        assert store._bound_wal() == upkeep.WAL_CHECK  # type: ignore[attr-defined]
        assert store._wal_backoff == upkeep.WAL_CHECK  # type: ignore[attr-defined]
    finally:
        reader.execute("COMMIT")
        waiting.join(60)
    assert not waiting.is_alive()
    # With the reader gone, a try restarts the WAL.
    assert store._restart_wal(1.0) == "done"  # type: ignore[attr-defined]
    other.close()
    reader.close()
    store.close()


def test_a_restart_readers_hold_back_backs_off_and_warns_once_the_wal_is_large(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(upkeep, "WAL_RESTART_AT", 64 * 1024)
    monkeypatch.setattr(upkeep, "WAL_RESTART_WAIT", 0.02)
    monkeypatch.setattr(upkeep, "WAL_RESTART_WAIT_MAX", 0.1)
    db, store, reader = _pinned_wal(tmp_path)
    try:
        waits = [store._bound_wal() for _ in range(3)]  # type: ignore[attr-defined]
        assert waits == [1.0, 2.0, 4.0], waits
        assert not [r for r in caplog.records if r.levelname == "WARNING"]
        monkeypatch.setattr(upkeep, "WAL_WARN_AT", 64 * 1024)
        with caplog.at_level("WARNING", logger="replaylog.worker"):
            assert store._bound_wal() == 8.0  # type: ignore[attr-defined]
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warned) == 1 and "read transactions keep it from restarting" in warned[0], warned
        assert str(db) in warned[0] and "next try in 8 s" in warned[0], warned
    finally:
        reader.execute("COMMIT")
        reader.close()
    # The reader gone: the next look restarts the WAL and the backoff starts over.
    assert store._bound_wal() == upkeep.WAL_CHECK  # type: ignore[attr-defined]
    assert store._wal_backoff == upkeep.WAL_CHECK  # type: ignore[attr-defined]
    store.close()
