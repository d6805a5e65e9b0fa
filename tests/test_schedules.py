"""Schedules: each tick starts exactly one workflow, whoever looks; catch-up and overlap policies; bad input."""

from __future__ import annotations

import signal
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import schedule_app

from conftest import cli_env, run_cli, sql, start_worker, wait_for
from replaylog.engine.errors import ScheduleRefusedError
from replaylog.engine.schedules import CATCH_UP_GRACE, plan, tick_id
from replaylog.engine.store import Store, open_store
from replaylog.testing import WorkflowEnvironment
from replaylog.worker import Worker

# 2026-12-04 09:00:00 UTC, a minute boundary: ticks of "* * * * *" fall on whole minutes from it.
T0 = datetime(2026, 12, 4, 9, 0, tzinfo=UTC).timestamp()
APP = [schedule_app.job, schedule_app.waits, schedule_app.note]


def _ids(store: Store, name: str) -> list[str]:
    return sorted(r[0] for r in sql(store, "SELECT id FROM workflows WHERE id LIKE ?", (f"{name}@%",)))


def _minute_ids(name: str, minutes: range) -> list[str]:
    return [tick_id(name, T0 + 60 * m) for m in minutes]


# ---------------------------------------------------------------- the policies, pure


def _plan(*, overlap: str = "skip", catch_up: str = "last", next_at: float = T0 + 60, now: float,
          running: bool = False, buffered: float | None = None) -> Any:
    return plan(expr="* * * * *", tz="UTC", overlap=overlap, catch_up=catch_up, next_at=next_at,
                buffered=buffered, running=running, now=now)


def test_catch_up_none_starts_only_a_tick_found_within_the_grace() -> None:
    late = _plan(catch_up="none", overlap="allow", now=T0 + 60 * 10 + 5)
    assert late.start == (T0 + 600,)  # the tick of minute 10 is 5 s old: on time; minutes 1-9 missed
    assert late.skipped == 9
    found_late = _plan(catch_up="none", now=T0 + 600 + CATCH_UP_GRACE + 1, next_at=T0 + 600)
    assert found_late.start == (T0 + 660,) and found_late.skipped == 1  # minute 10 is 61 s old: missed


def test_catch_up_last_starts_the_latest_missed_tick_and_all_starts_every_one() -> None:
    assert _plan(catch_up="last", overlap="allow", now=T0 + 600 + 30).start == (T0 + 600,)
    every = _plan(catch_up="all", overlap="allow", now=T0 + 600 + 30)
    assert every.start == tuple(T0 + 60 * m for m in range(1, 11)) and every.skipped == 0
    assert every.next_at == T0 + 660


def test_overlap_skip_buffer_one_and_allow_while_the_last_workflow_runs() -> None:
    assert _plan(overlap="skip", running=True, now=T0 + 61).start == ()
    assert _plan(overlap="skip", running=True, now=T0 + 61).skipped == 1
    kept = _plan(overlap="buffer-one", running=True, now=T0 + 61)
    assert kept.start == () and kept.buffered == T0 + 60
    replaced = _plan(overlap="buffer-one", running=True, now=T0 + 121, next_at=T0 + 120, buffered=T0 + 60)
    assert replaced.buffered == T0 + 120 and replaced.skipped == 1  # one kept: the newer one
    after = _plan(overlap="buffer-one", running=False, now=T0 + 130, next_at=T0 + 180, buffered=T0 + 120)
    assert after.start == (T0 + 120,) and after.buffered is None
    assert _plan(overlap="allow", running=True, now=T0 + 61).start == (T0 + 60,)


# ---------------------------------------------------------------- the store, both backends


def test_a_tick_looked_at_by_two_stores_at_once_starts_one_workflow(store_url: str) -> None:
    stores = [open_store(store_url) for _ in range(4)]
    try:
        stores[0].add_schedule("rep", "job", "* * * * *", catch_up="all", overlap="allow", start_at=T0)
        started: list[list[str]] = [[] for _ in stores]
        go = threading.Barrier(len(stores))

        def look(i: int) -> None:
            go.wait()
            started[i] = stores[i].fire_schedules(T0 + 60 * 30 + 1)

        threads = [threading.Thread(target=look, args=(i,)) for i in range(len(stores))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        every = sorted(w for s in started for w in s)
        assert every == _minute_ids("rep", range(1, 31))  # 30 ticks, each started once, by one of them
        assert _ids(stores[0], "rep") == every
        assert stores[0].get_schedule("rep").next_at == T0 + 60 * 31
    finally:
        for s in stores:
            s.close()


@pytest.mark.parametrize(("field", "value", "message"), [
    ("cron_expr", "61 * * * *", "cron expression '61 * * * *' is not valid: Bad minute"),
    ("cron_expr", "* * *", "cron expression '* * *' is not valid: Wrong number of fields"),
    ("timezone", "Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
    ("overlap", "queue", "overlap policy 'queue' is not one of skip, buffer-one, allow"),
    ("catch_up", "some", "catch-up policy 'some' is not one of none, last, all"),
    ("name", "has space", "schedule name 'has space' is not valid"),
])
def test_a_bad_schedule_is_refused_in_one_line_and_writes_nothing(store: Store, field: str, value: str,
                                                                   message: str) -> None:
    args: dict[str, Any] = {"name": "rep", "workflow": "job", "cron_expr": "* * * * *", field: value}
    with pytest.raises(ScheduleRefusedError) as caught:
        store.add_schedule(**args)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert store.list_schedules() == []
    assert sql(store, "SELECT COUNT(*) FROM audit")[0][0] == 0


def test_pause_resume_trigger_and_delete(store: Store) -> None:
    store.add_schedule("rep", "job", "0 * * * *", start_at=T0 - 1)
    assert store.pause_schedule("rep").paused
    assert store.fire_schedules(T0 + 3600 * 5) == []  # paused: its ticks start nothing
    resumed = store.pause_schedule("rep", False)
    assert not resumed.paused and resumed.next_at > time.time()  # from its next tick after now: no catch-up
    wid = store.trigger_schedule("rep")
    assert wid.startswith("rep@") and store.get_workflow(wid).workflow == "job"
    assert store.get_schedule("rep").last_id == wid
    store.delete_schedule("rep")
    assert store.list_schedules() == [] and store.get_workflow(wid).workflow == "job"
    with pytest.raises(ScheduleRefusedError, match="no schedule named 'rep'"):
        store.pause_schedule("rep")
    actions = [r[0] for r in sql(store, "SELECT action FROM audit WHERE workflow_id = 'schedule:rep' ORDER BY seq")]
    assert actions == ["schedule add", "schedule pause", "schedule resume", "schedule trigger", "schedule delete"]


def test_overlap_skip_and_buffer_one_against_a_workflow_still_running(store: Store) -> None:
    for name, overlap in (("skipper", "skip"), ("buffer", "buffer-one")):
        store.add_schedule(name, "waits", "* * * * *", overlap=overlap, start_at=T0)
    assert sorted(store.fire_schedules(T0 + 61)) == [tick_id("buffer", T0 + 60), tick_id("skipper", T0 + 60)]
    # Minutes 2 and 3 come while both first workflows wait: skip drops them, buffer-one keeps the newest.
    assert store.fire_schedules(T0 + 121) == []
    assert store.fire_schedules(T0 + 181) == []
    assert store.get_schedule("skipper").skipped == 2
    assert store.get_schedule("buffer").buffered == T0 + 180
    for name in ("skipper", "buffer"):
        sql(store, "UPDATE workflows SET status = 'completed' WHERE id = ?", (tick_id(name, T0 + 60),))
    assert store.fire_schedules(T0 + 190) == [tick_id("buffer", T0 + 180)]  # the kept tick, once it ended
    assert store.fire_schedules(T0 + 241) == [tick_id("skipper", T0 + 240)]


# ---------------------------------------------------------------- workers


def test_two_workers_over_five_minutes_of_ticks_start_one_workflow_per_tick(db: Path | str, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = tmp_path / "ledger"
    monkeypatch.setenv("SCHEDULE_LEDGER", str(ledger))
    now = [T0 + 1.0]
    with open_store(db) as store:
        store.add_schedule("minutely", "job", "* * * * *", start_at=T0)
    workers = [Worker(db, app=APP, concurrency=4, focus_cpu=False, clock=lambda: now[0]) for _ in range(2)]
    for w in workers:
        w.start()
    try:
        with open_store(db) as store:
            for minute in range(1, 6):
                now[0] = T0 + 60 * minute + 0.5  # the skipped clock reaches the tick
                wid = tick_id("minutely", T0 + 60 * minute)
                assert wait_for(lambda w=wid: bool(sql(store, "SELECT 1 FROM workflows WHERE id = ? AND status ="
                                                               " 'completed'", (w,))))
            assert _ids(store, "minutely") == _minute_ids("minutely", range(1, 6))
    finally:
        for w in workers:
            w.stop()
    assert sorted(ledger.read_text().split()) == _minute_ids("minutely", range(1, 6))  # each ran once


def test_the_testing_environment_runs_five_minutes_of_a_minutely_schedule(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = tmp_path / "ledger"
    monkeypatch.setenv("SCHEDULE_LEDGER", str(ledger))
    with WorkflowEnvironment(app=APP, start_time=T0 + 1) as env:
        env.client.add_schedule("minutely", "job", "* * * * *")
        env.advance(300)
        infos = env.client.list(workflow="job", limit=None)
        assert sorted(i.id for i in infos) == _minute_ids("minutely", range(1, 6))
        assert {i.status for i in infos} == {"completed"}
    assert sorted(ledger.read_text().split()) == _minute_ids("minutely", range(1, 6))


def test_a_worker_keeps_the_apps_declared_schedule(db_path: Path) -> None:
    registry_app = [schedule_app.every_five]
    w = Worker(db_path, app=registry_app, focus_cpu=False)
    w.start()
    try:
        with open_store(db_path) as store:
            assert wait_for(lambda: [s.name for s in store.list_schedules()] == ["every_five"])
            row = store.get_schedule("every_five")
            assert (row.cron, row.origin, row.workflow) == ("*/5 * * * *", "app", "every_five")
    finally:
        w.stop()


def test_a_malformed_cron_in_the_decorator_is_refused_where_it_is_written() -> None:
    from replaylog import workflow

    with pytest.raises(ScheduleRefusedError, match="cron expression '\\*/5 \\* \\*' is not valid"):
        @workflow(schedule="*/5 * *")
        def broken(ctx: Any) -> None: ...


def test_a_worker_killed_at_the_tick_leaves_each_tick_started_once(db: Path | str, tmp_path: Path) -> None:
    """A real worker process fires a burst of missed per-second ticks and is SIGKILLed in the first tick's
    activity; a second worker finishes the work: every tick has exactly one workflow, none missing."""
    ledger, marker = tmp_path / "ledger", tmp_path / "killed"
    env = cli_env(REPLAYLOG_APP="schedule_app", SCHEDULE_LEDGER=str(ledger), SCHEDULE_KILL_ONCE=str(marker))
    start = float(int(time.time())) - 20
    with open_store(db) as store:
        store.add_schedule("burst", "job", "* * * * * *", overlap="allow", catch_up="all", start_at=start)
    first = start_worker(db, env=env)
    try:
        assert first.wait(timeout=120) == -signal.SIGKILL  # died in the first tick's activity
    finally:
        if first.poll() is None:
            first.kill()
    second = start_worker(db, env=env)
    try:
        with open_store(db) as store:
            store.pause_schedule("burst")
            last = store.get_schedule("burst").last_tick
            assert last is not None
            expected = [tick_id("burst", t) for t in range(int(start) + 1, int(last) + 1)]
            assert wait_for(lambda: sql(store, "SELECT COUNT(*) FROM workflows WHERE id LIKE ? AND status"
                                               " = 'completed'", ("burst@%",))[0][0] == len(expected))
            assert _ids(store, "burst") == expected
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=60)
    # Every tick's activity ran; those in flight when the process died ran again (at least once).
    assert set(ledger.read_text().split()) == set(expected)


# ---------------------------------------------------------------- the command line


def test_schedule_commands_add_list_pause_trigger_delete(db_path: Path) -> None:
    env = cli_env(REPLAYLOG_APP="schedule_app")
    added = run_cli(db_path, "schedule", "add", "nightly", "--cron", "0 2 * * *", "--workflow", "job",
                    "--timezone", "Europe/Paris", "--overlap", "buffer-one", "--catch-up", "none", env=env)
    assert added.returncode == 0, added.stderr
    assert "nightly" in added.stdout and "next run" in added.stdout
    listed = run_cli(db_path, "schedule", "list", env=env)
    assert "nightly" in listed.stdout and "0 2 * * *" in listed.stdout and "Europe/Paris" in listed.stdout
    assert run_cli(db_path, "schedule", "pause", "nightly", env=env).returncode == 0
    assert "paused" in run_cli(db_path, "schedule", "list", env=env).stdout
    assert run_cli(db_path, "schedule", "resume", "nightly", env=env).returncode == 0
    trig = run_cli(db_path, "schedule", "trigger", "nightly", env=env)
    assert trig.returncode == 0 and trig.stdout.strip().startswith("nightly@")
    assert run_cli(db_path, "schedule", "delete", "nightly", env=env).returncode == 0
    assert "no schedules" in run_cli(db_path, "schedule", "list", env=env).stdout


@pytest.mark.parametrize(("args", "message"), [
    (("--cron", "*/5 * * *", "--input", "1"), "cron expression '*/5 * * *' is not valid"),
    (("--cron", "* * * * *", "--input", "1", "--timezone", "Nowhere/City"), "unknown time zone 'Nowhere/City'"),
    (("--cron", "* * * * *", "--input", "{nope"), "invalid JSON in the schedule's input"),
])
def test_schedule_add_refuses_bad_input_in_one_line_and_writes_nothing(db_path: Path, args: tuple[str, ...],
                                                                       message: str) -> None:
    done = run_cli(db_path, "schedule", "add", "s", "--workflow", "echo", *args,
                   env=cli_env(REPLAYLOG_APP="schedule_app"))
    assert done.returncode == 1
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    if db_path.exists():
        with open_store(db_path) as store:
            assert store.list_schedules() == []
