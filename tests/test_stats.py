"""`replaylog stats` and the store's `stats()`: one snapshot of how a database stands, on each backend."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import queue_app

from conftest import run_cli, sql, start_worker, wait_for
from replaylog import Client
from replaylog import Worker as EmbeddedWorker
from replaylog.engine.app import load_app
from replaylog.engine.store import open_store
from replaylog.engine.worker import Worker


def _seed(db: Path | str) -> None:
    """Two refunds blocked on approval (a fetch recorded each), a completed one, two pending reports."""
    with open_store(db) as store:
        for n in (1, 2, 3):
            store.start_workflow("refund", n, workflow_id=f"refund-{n}")
    Worker(db, load_app("replaylog.samples"), poll=0.002).run(until_idle=True)
    with open_store(db) as store:
        store.send_signal("refund-3", "approval", {"approved": True, "by": "ops"})
    Worker(db, load_app("replaylog.samples"), poll=0.002).run(until_idle=True)
    with open_store(db) as store:
        store.start_workflow("report", 2, workflow_id="report-a")
        store.start_workflow("report", 2, workflow_id="report-b")


def test_stats_counts_match_list_and_the_oldest_waits_and_the_last_minutes_slots(db: Path | str) -> None:
    before = time.time()
    _seed(db)
    listed = json.loads(run_cli(db, "list", "--json").stdout)
    result = run_cli(db, "stats", "--json")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    by_status = {s: sum(1 for r in listed if r["status"] == s) for s in stats["counts"]}
    assert stats["counts"] == by_status and stats["total"] == len(listed) == 5
    assert (stats["counts"]["blocked"], stats["counts"]["pending"], stats["counts"]["completed"]) == (2, 2, 1)
    assert 0 <= stats["oldest_pending_age"] <= stats["at"] - before
    assert stats["oldest_blocked_age"] >= stats["oldest_pending_age"]
    with open_store(db, readonly=True) as store:
        recorded = sum(len(store.list_commands(r["id"])) for r in listed)
    assert recorded > 0 and stats["slots_last_minute"] == recorded
    assert stats["slots_per_second"] == recorded / 60
    assert stats["past_wake_time"] == 0 and stats["workers"] == []


def test_slots_older_than_a_minute_and_passed_wake_times_are_told_apart(db: Path | str) -> None:
    _seed(db)
    with open_store(db) as store:
        total = store.stats().slots_last_minute
        sql(store, "UPDATE commands SET recorded_at = recorded_at - 600")
        sql(store, "UPDATE workflows SET wake_at = ? WHERE id = 'refund-1'", (time.time() - 5,))
    with open_store(db, readonly=True) as store:
        stats = store.stats()
    assert total > 0 and stats.slots_last_minute == 0
    assert stats.overdue == 1


def test_stats_names_each_live_worker_and_its_last_heartbeat(db: Path | str) -> None:
    _seed(db)
    worker = start_worker(db, "--lease", "3")
    try:
        assert wait_for(lambda: len(json.loads(run_cli(db, "stats", "--json").stdout)["workers"]) == 1, timeout=60)
        (shown,) = json.loads(run_cli(db, "stats", "--json").stdout)["workers"]
        assert shown["pid"] == worker.pid and "refund" in shown["names"]
        assert 0 <= shown["heartbeat_age"] < 30
        human = run_cli(db, "stats")
        assert human.returncode == 0
        assert "live workers     1" in human.stdout and str(worker.pid) in human.stdout
        assert "workflows        5:" in human.stdout and "blocked 2" in human.stdout
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    assert wait_for(lambda: json.loads(run_cli(db, "stats", "--json").stdout)["workers"] == [])
    assert "live workers     none" in run_cli(db, "stats").stdout


@contextmanager
def filled_queues(db: Path | str, **options: Any) -> Iterator[EmbeddedWorker]:
    """`queue_app.fill_queues`, and a worker of the queue app (made with `options`) that has run what it can."""
    with Client(db, app=queue_app) as client:
        queue_app.fill_queues(client)
    with EmbeddedWorker(db, app=queue_app, **options) as worker:
        def settled() -> bool:
            listed = json.loads(run_cli(db, "list", "--json").stdout)
            return {r["id"]: r["status"] for r in listed} == queue_app.FILLED
        assert wait_for(settled, timeout=60)
        yield worker


def listed_by_queue(db: Path | str, queue: str) -> dict[str, int]:
    """Workflows per status on `queue`, counted from `replaylog list --queue QUEUE --json`."""
    listed = json.loads(run_cli(db, "list", "--queue", queue, "--limit", "0", "--json").stdout)
    counts: dict[str, int] = {}
    for r in listed:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return counts


def test_stats_counts_each_queues_workflows_by_status_as_list_does_with_its_limit(db: Path | str) -> None:
    with filled_queues(db):
        pass
    stats = json.loads(run_cli(db, "stats", "--json").stdout)
    assert stats["total"] == len(queue_app.FILLED)
    shown = {q["name"]: q for q in stats["queues"]}
    # Every queue the app declared, the empty ones too; the free workflow is on none.
    assert sorted(shown) == ["paced", "per-worker", "serial", "storm"]
    for name, q in shown.items():
        assert {s: n for s, n in q["counts"].items() if n} == listed_by_queue(db, name), name
        assert set(q["counts"]) == set(stats["counts"]) and q["total"] == sum(q["counts"].values())
    assert shown["serial"]["counts"]["blocked"] == 1 and shown["serial"]["counts"]["queued"] == 2
    assert (shown["serial"]["concurrency"], shown["serial"]["admitted"]) == (1, 1)
    assert (shown["storm"]["concurrency"], shown["storm"]["counts"]["completed"]) == (4, 1)
    assert shown["per-worker"]["concurrency"] is None and shown["per-worker"]["total"] == 0
    human = run_cli(db, "stats")
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    assert "queue serial     3: blocked 1 · queued 2; limit 1, 1 taken" in lines, human.stdout
    assert "queue storm      1: completed 1; limit 4, 0 taken" in lines
    assert "queue paced      0: empty; no limit" in lines


def test_stats_on_no_database_says_so_and_creates_none(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.db"
    result = run_cli(missing, "stats")
    assert result.returncode == 1 and "no database at" in result.stderr
    assert not missing.exists()
