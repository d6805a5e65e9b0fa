"""Durable timers and deadlines in the store and the worker: a real SQLite file, real workers.

The wake time lives in a `wake_at` column with a partial index; a claim takes the due
ones from that index, and a worker sleeps until the first of them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import timer_app

from conftest import cli_env, on_server, run_cli, sql, wait_for
from replaylog.engine.app import Registry
from replaylog.engine.core import TIMER, Outcome
from replaylog.engine.errors import StoreError
from replaylog.engine.store import Store, open_store
from replaylog.engine.worker import Worker

OWNER = "host:1:test"


def _block(store: Store, *blocks: tuple[str, str, float | None]) -> None:
    """Claim the workflows and write for each (id, on, wake_at) the verdict of a run that blocked so."""
    claims = {c.id: c for c in store.claim(OWNER, ttl=30, limit=100)}
    finishes = [(claims[wid], Outcome("blocked", blocked_on=on, wake_at=wake_at)) for wid, on, wake_at in blocks]
    _, finished = store.commit_batch(finishes=finishes, ttl=30)
    assert finished == [True] * len(blocks)


def test_a_sleeping_workflow_is_claimable_only_once_its_wake_time_has_passed(store: Store) -> None:
    later = store.start_workflow("nap", 1)
    soon = store.start_workflow("nap", 1)
    _block(store, (later, TIMER, time.time() + 3600), (soon, TIMER, time.time() - 1))
    assert store.get_workflow(later).wake_at == pytest.approx(time.time() + 3600, abs=60)
    assert store.next_wake() == store.get_workflow(soon).wake_at
    assert store.has_claimable()
    (claim,) = store.claim(OWNER, ttl=30, limit=10)
    assert claim.id == soon
    row = store.get_workflow(soon)
    assert (row.status, row.blocked_on, row.wake_at) == ("running", None, None)
    assert not store.has_claimable() and store.claim(OWNER, ttl=30, limit=10) == []
    assert store.next_wake() == store.get_workflow(later).wake_at


def test_list_summaries_carry_the_wake_time_of_blocked_workflows_only(store: Store) -> None:
    wid = store.start_workflow("approval", 60)
    at = time.time() + 60
    _block(store, (wid, "approval", at))
    (summary,) = store.list_workflow_summaries()
    assert (summary.blocked_on, summary.wake_at) == ("approval", at)
    store.send_signal(wid, "approval", True)
    row = store.get_workflow(wid)
    assert (row.status, row.wake_at) == ("pending", None)


def test_a_signal_and_a_passed_deadline_wake_the_workflow_once(store: Store) -> None:
    wid = store.start_workflow("approval", 1)
    _block(store, (wid, "approval", time.time() - 5))  # the deadline passed before the signal came
    store.send_signal(wid, "approval", "yes")  # under the write lock: pending, the wake time dropped
    assert (store.get_workflow(wid).status, store.get_workflow(wid).wake_at) == ("pending", None)
    claims = store.claim(OWNER, ttl=30, limit=10)
    assert [c.id for c in claims] == [wid]  # taken once, though both the signal and the deadline say run
    assert claims[0].state is not None and [s.name for s in claims[0].state.signals] == ["approval"]
    assert store.claim(OWNER, ttl=30, limit=10) == []


def test_a_signal_named_timer_is_refused_and_does_not_wake_a_sleeping_workflow(store: Store) -> None:
    wid = store.start_workflow("nap", 1)
    _block(store, (wid, TIMER, time.time() + 3600))
    with pytest.raises(StoreError, match="reserved for durable timers"):
        store.send_signal(wid, TIMER, None)
    assert store.get_workflow(wid).status == "blocked"
    assert store.list_signals(wid) == []
    assert store.claim(OWNER, ttl=30, limit=10) == []


def test_the_claim_and_the_worker_reach_the_due_timers_through_the_wake_index(store: Store) -> None:
    # "Without scanning": each query that looks for sleepers seeks in workflows_wake.
    if on_server(store):
        _pg_wake_plans(store)
        return
    conn = store._conn
    queries = [
        ("SELECT id FROM workflows INDEXED BY workflows_wake WHERE status = 'blocked' AND wake_at <= ?"
         " AND workflow IN (?) ORDER BY wake_at LIMIT 5", (1.0, "nap")),
        ("SELECT wake_at FROM workflows INDEXED BY workflows_wake WHERE status = 'blocked'"
         " AND wake_at IS NOT NULL ORDER BY wake_at LIMIT 1", ()),
    ]
    for query, params in queries:
        plan = " ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + query, params))
        assert "SEARCH workflows USING INDEX workflows_wake" in plan, plan
    store.start_workflow("nap", 1)
    assert store.next_wake() is None


def _pg_wake_plans(store: Store) -> None:
    """PostgreSQL's half of the test above: its planner picks by statistics (no INDEXED BY), so the
    table gets many finished workflows and a few sleepers, as a long-lived database has."""
    sql(store, "INSERT INTO workflows (id, workflow, status, created_at, updated_at, wake_at)"
               " SELECT 'wf-' || i, 'nap', CASE WHEN mod(i, 500) = 0 THEN 'blocked' ELSE 'completed' END, 0, 0,"
               " CASE WHEN mod(i, 500) = 0 THEN i END FROM generate_series(1, 20000) AS i")
    sql(store, "ANALYZE workflows")
    queries = [
        ("SELECT id FROM workflows WHERE status = 'blocked' AND wake_at <= %s AND workflow = ANY(%s)"
         " ORDER BY wake_at LIMIT 5", (1.0, ["nap"])),
        ("SELECT wake_at FROM workflows WHERE status = 'blocked' AND wake_at IS NOT NULL ORDER BY wake_at LIMIT 1", ()),
    ]
    for query, params in queries:
        plan = " ".join(r[0] for r in store._conn.execute("EXPLAIN " + query, params))  # type: ignore[attr-defined]
        assert "workflows_wake" in plan, plan
    assert store.next_wake() == 500.0


# ------------------------------------------------------------------ with a running worker


@pytest.fixture
def worker(db: Path | str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Worker]:
    monkeypatch.setenv("FAULT_LEDGER", str(tmp_path / "ledger.jsonl"))
    w = Worker(db, Registry.from_module(timer_app), concurrency=8)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    yield w
    w.stop()
    t.join(30)


def _ledger(tmp_path: Path) -> list[dict[str, float]]:
    path = tmp_path / "ledger.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_a_running_worker_fires_a_timer_at_its_wake_time_once(worker: Worker, store: Store,
                                                              tmp_path: Path) -> None:
    wid = store.start_workflow("nap", 0.4)
    assert wait_for(lambda: store.get_workflow(wid).status == "blocked", timeout=120)
    wake_at = store.get_workflow(wid).wake_at
    assert wake_at is not None and store.get_workflow(wid).blocked_on == TIMER
    assert wait_for(lambda: store.get_workflow(wid).status == "completed", timeout=120)
    (line,) = _ledger(tmp_path)
    assert line["at"] >= wake_at  # never early
    timer = store.list_commands(wid)[0]
    assert (timer.kind, timer.value) == ("timer", wake_at)


def test_a_deadline_passes_and_the_timeout_is_recorded_then_a_late_signal_stays(worker: Worker,
                                                                                store: Store) -> None:
    wid = store.start_workflow("race", 0.3)
    assert wait_for(lambda: store.get_workflow(wid).blocked_on == "go"
                    and [c.kind for c in store.list_commands(wid)] == ["deadline", "timeout"], timeout=30)
    store.send_signal(wid, "go", "late")
    assert wait_for(lambda: store.get_workflow(wid).status == "completed", timeout=120)
    assert store.get_workflow(wid).result == ["timeout", "late"]
    assert [s.consumed for s in store.list_signals(wid)] == [True]


def test_a_timer_that_expired_while_no_worker_ran_fires_when_one_starts(db: Path | str, tmp_path: Path) -> None:
    env = cli_env(FAULT_LEDGER=str(tmp_path / "ledger.jsonl"))
    started = run_cli(db, "start", "nap", "0.5", "--app", "timer_app", env=env)
    assert started.returncode == 0, started.stderr
    wid = started.stdout.strip()
    first = run_cli(db, "worker", "--app", "timer_app", "--until-idle", "--quiet", env=env)
    assert first.returncode == 0, first.stderr
    with open_store(db, readonly=True) as s:
        row = s.get_workflow(wid)
    assert (row.status, row.blocked_on) == ("blocked", TIMER) and row.wake_at is not None
    # No worker runs while the timer expires; the next one to start fires it, once.
    assert wait_for(lambda: time.time() > (row.wake_at or 0) + 0.2, timeout=120)
    second = run_cli(db, "worker", "--app", "timer_app", "--until-idle", "--quiet", env=env)
    assert second.returncode == 0, second.stderr
    with open_store(db, readonly=True) as s:
        assert s.get_workflow(wid).status == "completed"
    assert len(_ledger(tmp_path)) == 1


# ------------------------------------------------------------------ operators see time


def test_list_and_show_say_what_a_workflow_waits_on_and_until_when(db: Path | str) -> None:
    napping = run_cli(db, "start", "nap", "3600", "--app", "timer_app").stdout.strip()
    waiting = run_cli(db, "start", "approval", str(3 * 86400), "--app", "timer_app").stdout.strip()
    done = run_cli(db, "worker", "--app", "timer_app", "--until-idle", "--quiet")
    assert done.returncode == 0, done.stderr
    rows = {r["id"]: r for r in json.loads(run_cli(db, "list", "--json").stdout)}
    assert rows[napping]["blocked_on"] == "timer" and rows[waiting]["blocked_on"] == "approval"
    for wid, seconds in ((napping, 3600), (waiting, 3 * 86400)):
        assert rows[wid]["wake_at"] == pytest.approx(time.time() + seconds, abs=120)
        shown = json.loads(run_cli(db, "show", wid, "--json").stdout)
        assert shown["wake_at"] == rows[wid]["wake_at"]
    # A wake time on the same UTC day reads as a clock time, on another day with its date:
    # the nap (an hour ahead) crosses midnight when the suite runs after 23:00 UTC.
    nap_wake = time.gmtime(rows[napping]["wake_at"])
    same_day = nap_wake.tm_yday == time.gmtime().tm_yday
    nap_at = time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M UTC", nap_wake)
    deadline = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(rows[waiting]["wake_at"]))
    listed = run_cli(db, "list").stdout
    assert f"timer until {nap_at}" in listed
    assert f"approval (until {deadline})" in listed
    shown = run_cli(db, "show", napping).stdout
    assert f"timer until {nap_at} (in " in shown
    # The slot table shows the wake time as a time, not an epoch number.
    assert time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(rows[napping]["wake_at"])) in shown
    assert str(rows[napping]["wake_at"]) not in shown
    # A workflow that waits on nothing with a time says null.
    plain = run_cli(db, "start", "race", "0", "--app", "timer_app").stdout.strip()
    assert json.loads(run_cli(db, "show", plain, "--json").stdout)["wake_at"] is None


# ------------------------------------------------------------------ versioning, checked against a real store


def _order(db: Path | str, app: str, *, finish: bool) -> str:
    wid = run_cli(db, "start", "order", "5", "--app", app).stdout.strip()
    assert run_cli(db, "signal", wid, "shipped").returncode == 0
    if finish:
        assert run_cli(db, "signal", wid, "done").returncode == 0
    done = run_cli(db, "worker", "--app", app, "--until-idle", "--quiet")
    assert done.returncode == 0, done.stderr
    return wid


def test_check_passes_for_histories_from_before_and_after_a_patch(db: Path | str) -> None:
    old_waiting, old_done = _order(db, "patch_v1", finish=False), _order(db, "patch_v1", finish=True)
    _order(db, "patch_v2", finish=False)
    new_done = _order(db, "patch_v2", finish=True)
    with open_store(db, readonly=True) as s:
        assert [c.kind for c in s.list_commands(new_done)] == ["activity", "patch", "activity"]
        assert s.get_workflow(new_done).result == "sms" and s.get_workflow(old_done).result == "mail"
    every = run_cli(db, "check", "--all", "--app", "patch_v2")
    assert every.returncode == 0, every.stdout + every.stderr
    assert "checked 2 unfinished workflow(s): 2 replay cleanly, 0 diverge or fail" in every.stdout
    for wid in (old_done, new_done):
        one = run_cli(db, "check", wid, "--app", "patch_v2")
        assert one.returncode == 0, one.stdout + one.stderr
    # The old code cannot replay a history that has the marker: the slot is named.
    back = run_cli(db, "check", new_done, "--app", "patch_v1")
    assert back.returncode == 1
    assert "non-determinism at slot 1: history has patch:notify-by-sms" in back.stdout + back.stderr
    # A version 1 workflow resumed by version 2's worker stays on the old path.
    assert run_cli(db, "signal", old_waiting, "done").returncode == 0
    assert run_cli(db, "worker", "--app", "patch_v2", "--until-idle", "--quiet").returncode == 0
    with open_store(db, readonly=True) as s:
        assert (s.get_workflow(old_waiting).status, s.get_workflow(old_waiting).result) == ("completed", "mail")
