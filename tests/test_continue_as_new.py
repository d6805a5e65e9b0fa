"""Continue-as-new: a run ends and the same workflow id goes on in a fresh history, atomically, no signal lost."""

from __future__ import annotations

import json
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import continue_app
import pytest

from conftest import cli_env, run_cli, sql, start_worker, wait_for
from replaylog import Client, Slot
from replaylog.engine.core import Context, HistoryTooLongError, WorkflowState, run
from replaylog.engine.errors import OperatorRefusedError
from replaylog.engine.store import open_store
from replaylog.worker import Worker

APP = [continue_app.looper, continue_app.step, continue_app.collector, continue_app.bad_continue,
       continue_app.no_input_loop]


def _ledger(path: Path) -> Counter[int]:
    return Counter(int(line.split()[1]) for line in path.read_text().splitlines())


def test_the_core_ends_a_run_continued_as_new_with_the_next_input() -> None:
    state = WorkflowState(input={"i": 0, "total": 10, "every": 4})
    done = run(continue_app.looper, state, clock=lambda: 0.0, activities={"step": lambda i: i})
    assert done.status == "continued"
    assert done.outcome.result == {"i": 4, "total": 10, "every": 4} and done.outcome.next_has_input
    assert len(done.state.commands) == 4


def test_a_cap_on_slots_fails_the_run_telling_to_continue_as_new() -> None:
    ctx = Context(WorkflowState(input={"i": 0, "total": 10, "every": 100}), clock=lambda: 0.0,
                  activities={"step": lambda i: i}, max_slots=5, workflow_id="long")
    from replaylog.engine.core import execute

    outcome = execute(continue_app.looper, ctx, WorkflowState(input={"i": 0, "total": 10, "every": 100}))
    assert outcome.status == "failed" and outcome.error_kind == "engine"
    assert "reached the cap of 5 slots" in (outcome.error or "") and "ctx.continue_as_new" in (outcome.error or "")
    assert HistoryTooLongError.__name__ in (outcome.error or "")


def test_a_loop_of_1000_iterations_continuing_every_100_keeps_each_run_short(db: Path | str, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = tmp_path / "ledger"
    monkeypatch.setenv("CONTINUE_LEDGER", str(ledger))
    with Worker(db, app=APP, focus_cpu=False, max_slots=100), Client(db) as client:
        handle = client.start("looper", {"i": 0, "total": 1000, "every": 100}, id="loop")
        assert handle.result(timeout=300) == 1000
    assert _ledger(ledger) == Counter(range(1000))  # every iteration ran once
    with open_store(db) as store:
        runs = store.list_runs("loop")
        assert [r.run for r in runs] == list(range(1, 11)) and runs[-1].current
        assert [r.slots for r in runs] == [100] * 10
        third = store.run_commands("loop", 3)
        assert [c.value for c in third] == list(range(200, 300))
        assert json.loads(runs[2].input_text or "") == {"i": 200, "total": 1000, "every": 100}


def test_a_worker_killed_mid_run_resumes_in_the_right_run(db: Path | str, tmp_path: Path) -> None:
    ledger, marker = tmp_path / "ledger", tmp_path / "killed"
    env = cli_env(REPLAYLOG_APP="continue_app", CONTINUE_LEDGER=str(ledger), CONTINUE_KILL_AT=f"250:{marker}")
    with Client(db) as client:
        client.start("looper", {"i": 0, "total": 500, "every": 100}, id="loop")
    first = start_worker(db, env=env)
    try:
        assert first.wait(timeout=300) == -signal.SIGKILL  # in step(250): run 3, slot 50
    finally:
        if first.poll() is None:
            first.kill()
    with open_store(db) as store:
        assert [r.run for r in store.list_runs("loop")] == [1, 2, 3]
    second = start_worker(db, env=env)
    try:
        with open_store(db) as store:
            assert wait_for(lambda: store.get_workflow("loop").status == "completed", timeout=300)
            assert store.get_workflow("loop").result == 500
            runs = store.list_runs("loop")
            assert [(r.run, r.slots) for r in runs] == [(n, 100) for n in range(1, 6)]
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=60)
    ran = _ledger(ledger)
    assert set(ran) == set(range(500))
    assert {i for i, n in ran.items() if n > 1} <= {250}  # only the step the kill interrupted ran again


def test_a_signal_storm_across_continue_as_new_loses_none_and_delivers_none_twice(db: Path | str) -> None:
    n = 300
    with Worker(db, app=APP, focus_cpu=False), Client(db) as client:
        handle = client.start("collector", [], id="collect")
        senders = [threading.Thread(target=lambda k=k: [client.signal("collect", "item", i)
                                                        for i in range(k, n, 3)]) for k in range(3)]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        client.signal("collect", "item", None)  # the last of its name: consumed after every item
        got = handle.result(timeout=300)
    assert sorted(got) == list(range(n))  # 0 lost, 0 twice
    with open_store(db) as store:
        runs = store.list_runs("collect")
        assert len(runs) == n // 20 + 1
        # Every signal belongs to the run that consumed it: none is left over, none counted twice.
        counted = sql(store, "SELECT COUNT(*), COUNT(DISTINCT seq) FROM signals WHERE workflow_id = 'collect'")
        assert counted[0] == (n + 1, n + 1)
        assert sum(len(store.list_signals("collect", run=r.run)) for r in runs[:-1]) + len(
            store.list_signals("collect")) == n + 1


def test_continue_as_new_with_no_input_carries_an_unconsumed_signal_over(db: Path | str) -> None:
    with Client(db) as client:
        handle = client.start("no_input_loop", id="again")
        client.signal("again", "go", "again")
        client.signal("again", "go", "stop")  # sent before any run: the first consumes only "again"
        with Worker(db, app=APP, focus_cpu=False):
            assert handle.result(timeout=120) == "done"
    with open_store(db) as store:
        runs = store.list_runs("again")
        assert [(r.run, r.input_text) for r in runs] == [(1, None), (2, None)]
        assert [(s.seq, s.payload) for s in store.list_signals("again", run=1)] == [(1, "again")]
        assert [(s.seq, s.payload, s.consumed) for s in store.list_signals("again")] == [(2, "stop", True)]


def test_continue_as_new_with_an_input_json_cannot_hold_fails_in_one_line_and_starts_no_run(db: Path | str) -> None:
    with Worker(db, app=APP, focus_cpu=False), Client(db) as client:
        handle = client.start("bad_continue", id="bad")
        with pytest.raises(Exception, match=r"the input of ctx\.continue_as_new is of type set") as caught:
            handle.result(timeout=120)
    assert "\n" not in str(caught.value)
    with open_store(db) as store:
        assert [r.run for r in store.list_runs("bad")] == [1]
        assert store.get_workflow("bad").error_kind == "engine"


def test_show_shows_the_latest_run_and_an_earlier_one_with_run(db: Path | str, tmp_path: Path) -> None:
    with Worker(db, app=APP, focus_cpu=False), Client(db) as client:
        client.start("looper", {"i": 0, "total": 30, "every": 10}, id="loop").result(timeout=120)
    latest = run_cli(db, "show", "loop")
    assert latest.returncode == 0 and "continued as new from run 2" in latest.stdout
    data: dict[str, Any] = json.loads(run_cli(db, "show", "loop", "--json").stdout)
    assert data["run"] == 3 and [r["run"] for r in data["runs"]] == [1, 2, 3]
    second = json.loads(run_cli(db, "show", "loop", "--run", "2", "--json").stdout)
    assert second["status"] == "continued" and [c["value"] for c in second["commands"]] == list(range(10, 20))
    assert "2 of 3" in run_cli(db, "show", "loop", "--run", "2").stdout
    missing = run_cli(db, "show", "loop", "--run", "9")
    assert missing.returncode == 1 and "has no run 9 (its runs: 1, 2, 3)" in missing.stderr


def test_the_client_reads_each_run_its_slots_and_signals_and_shows_what_show_prints(db: Path | str) -> None:
    with Client(db) as client:
        again = client.start("no_input_loop", id="again")
        client.signal("again", "go", "again")
        client.signal("again", "go", "stop")
        with Worker(db, app=APP, focus_cpu=False):
            loop = client.start("looper", {"i": 0, "total": 6, "every": 3}, id="loop")
            assert again.result(timeout=120) == "done" and loop.result(timeout=120) == 6
        runs = loop.runs()
        assert [(r.run, r.current, r.slots, r.input, r.ended_at is None) for r in runs] == [
            (1, False, 3, {"i": 0, "total": 6, "every": 3}, False),
            (2, True, 3, {"i": 3, "total": 6, "every": 3}, True)]
        first, latest = loop.history(run=1), loop.history()
        assert all(isinstance(s, Slot) for s in first + latest)
        assert [(s.kind, s.name, s.value) for s in first] == [("activity", "step", i) for i in range(3)]
        assert [s.value for s in latest] == [3, 4, 5] and loop.history(run=2) == latest
        assert loop.history(1, run=1) == first[1:]
        assert [(r.run, r.has_input, r.input) for r in again.runs()] == [(1, False, None), (2, False, None)]
        assert [(s.seq, s.payload, s.consumed) for s in again.signals(run=1)] == [(1, "again", True)]
        assert [(s.seq, s.payload) for s in again.signals()] == [(2, "stop")] == [
            (s.seq, s.payload) for s in again.signals(run=2)]
        earlier = loop.view(1)
        assert (earlier.run, earlier.runs, earlier.history) == (runs[0], runs, first)
        assert earlier.info.status == "completed" and earlier.signals == []
        assert earlier.details == loop.details(1) and earlier.details["status"] == "continued"
        now = loop.view()
        assert now.run == runs[-1] and now.history == latest and now.details == loop.details(2) == loop.details()
        for read in (lambda: loop.history(run=9), lambda: again.signals(run=9), lambda: loop.view(9)):
            with pytest.raises(OperatorRefusedError, match=r"has no run 9 \(its runs: 1, 2\)"):
                read()
        for run in (1, 2):  # the command line prints the client's object
            shown = run_cli(db, "show", "loop", "--run", str(run), "--json").stdout
            assert json.loads(shown) == loop.details(run)


@pytest.mark.soak
def test_soak_a_loop_of_10000_iterations_continuing_every_100_stays_under_the_cap(
        db: Path | str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = tmp_path / "ledger"
    monkeypatch.setenv("CONTINUE_LEDGER", str(ledger))
    with Worker(db, app=APP, focus_cpu=False, max_slots=100), Client(db) as client:
        assert client.start("looper", {"i": 0, "total": 10_000, "every": 100}, id="soak").result(timeout=3600) == 10_000
    assert _ledger(ledger) == Counter(range(10_000))
    with open_store(db) as store:
        runs = store.list_runs("soak")
        assert len(runs) == 100 and max(r.slots for r in runs) == 100


def test_a_worker_fails_a_run_past_its_cap_and_warns_past_the_long_history_mark(
        db: Path | str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import replaylog.engine.worker.loop as loop

    monkeypatch.setattr(loop, "HISTORY_WARN", 5)  # the 10,000-slot mark, made small
    with caplog.at_level("WARNING", logger="replaylog.worker"), Worker(db, app=APP, focus_cpu=False,
                                                                       max_slots=20), Client(db) as client:
        ok = client.start("looper", {"i": 0, "total": 10, "every": 100}, id="ten")
        assert ok.result(timeout=120) == 10
        long = client.start("looper", {"i": 0, "total": 50, "every": 100}, id="long")
        with pytest.raises(Exception, match=r"reached the cap of 20 slots .*ctx\.continue_as_new"):
            long.result(timeout=120)
    warned = [r.getMessage() for r in caplog.records if "past 5" in r.getMessage()]
    assert any(m.startswith("ten has 10 slots") for m in warned)
    with open_store(db) as store:
        assert store.get_workflow("long").slots == 20  # nothing recorded past the cap
        assert store.get_workflow("long").error_kind == "engine"


def test_check_dry_replays_the_current_run_of_a_continued_workflow(db: Path | str) -> None:
    with Worker(db, app=APP, focus_cpu=False), Client(db) as client:
        client.start("looper", {"i": 0, "total": 30, "every": 10}, id="loop").result(timeout=120)
    done = run_cli(db, "check", "loop", "--json", env=cli_env(REPLAYLOG_APP="continue_app"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["replays"] is True


def test_a_dry_replay_that_reaches_continue_as_new_says_it_continues() -> None:
    from replaylog.engine.core import Reason, dry_replay

    live = run(continue_app.looper, WorkflowState(input={"i": 0, "total": 10, "every": 4}), clock=lambda: 0.0,
               activities={"step": lambda i: i})
    replay = dry_replay(continue_app.looper, live.state, workflow_id="loop", status="pending")
    assert (replay.ok, replay.reason) == (True, Reason.CONTINUES)
