"""Queues: limits enforced by the store's claim, order, dedup, delay and bad input, on both backends.

Every limit is checked from what was recorded (each workflow's ctx.now() before and after
its activity, and the store's admission times), never from how long the test took.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import queue_app
from fault_harness import WorkerProc, read_jsonl, reaping
from queue_app import most_at_once

from conftest import cli_env, run_cli, wait_for
from replaylog import Client, DedupIdTakenError, Queue, QueueError, Worker
from replaylog.engine.app import AppImportError, Registry
from replaylog.engine.store import open_store


@contextmanager
def working(db: Path | str, concurrency: int = 8, app: object = queue_app) -> Iterator[Worker]:
    """An embedded worker of the queue app on `db` while the block runs."""
    worker = Worker(db, app=app, concurrency=concurrency)  # type: ignore[arg-type]
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


def _times(client: Client, ids: list[str]) -> list[list[float]]:
    return [client.get_handle(wid).result(timeout=120) for wid in ids]


def test_a_queue_never_runs_more_than_its_concurrency_at_once(db: Path | str) -> None:
    with Client(db, app=queue_app) as client:
        ids = [client.start(queue_app.timed, {"key": f"k{i}", "seconds": 0.05}, queue="storm").id
               for i in range(12)]
        with working(db, concurrency=12):
            intervals = _times(client, ids)
    assert most_at_once(intervals) <= 4
    assert most_at_once(intervals) >= 2  # the worker did run several at once: the limit was what held it


def test_a_workflow_of_no_queue_is_not_held_by_a_full_queue(db: Path | str) -> None:
    with Client(db, app=queue_app) as client:
        queued = [client.start(queue_app.timed, {"key": f"q{i}", "seconds": 0.3}, queue="serial").id
                  for i in range(3)]
        free = [client.start(queue_app.timed, {"key": f"f{i}", "seconds": 0.01}).id for i in range(3)]
        with working(db):
            free_times = _times(client, free)
            queued_times = _times(client, queued)
    assert most_at_once(queued_times) == 1
    # The free ones ran while the serial queue's first workflow still held its place.
    assert max(end for _, end in free_times) < queued_times[-1][0]


def test_one_worker_runs_at_most_worker_concurrency_of_a_queue(db: Path | str) -> None:
    with Client(db, app=queue_app) as client:
        ids = [client.start(queue_app.timed, {"key": f"k{i}", "seconds": 0.05}, queue="per-worker").id
               for i in range(5)]
        with working(db, concurrency=8):
            intervals = _times(client, ids)
    assert most_at_once(intervals) == 1


def test_priority_orders_admission_lower_first_and_first_started_first_within_one(db: Path | str) -> None:
    priorities = [2, 0, 1, 0, 2, 1, 0]
    with Client(db, app=queue_app) as client:
        ids = [client.start(queue_app.timed, {"key": f"k{i}", "seconds": 0.0}, queue="serial", priority=p).id
               for i, p in enumerate(priorities)]
        waiting = [client.get_handle(wid).describe() for wid in ids]
        with working(db):
            intervals = _times(client, ids)
    ran = [wid for _, wid in sorted(zip((start for start, _ in intervals), ids, strict=True))]
    expected = [wid for _, _, wid in sorted(zip(priorities, range(len(ids)), ids, strict=True))]
    assert ran == expected
    with open_store(db) as store:
        admitted = sorted(ids, key=lambda wid: store.get_workflow(wid).admitted_at or 0.0)
    assert admitted == expected
    # While queued, each one's place in the line was shown in that same order.
    assert [w.id for w in sorted(waiting, key=lambda w: w.position or 0)] == expected


def test_a_rate_limit_spreads_admissions_over_its_window(db: Path | str) -> None:
    with Client(db, app=queue_app) as client:
        ids = [client.start(queue_app.timed, {"key": f"k{i}", "seconds": 0.0}, queue="paced").id for i in range(9)]
        with working(db):
            _times(client, ids)
    with open_store(db) as store:
        admitted = sorted(store.get_workflow(wid).admitted_at or 0.0 for wid in ids)
    # paced: 3 per 0.5 s. Any 4 admissions in a row span at least the window.
    assert all(admitted[i + 3] - admitted[i] >= 0.5 for i in range(len(admitted) - 3))
    assert admitted[-1] - admitted[0] >= 1.0


def test_a_dedup_id_is_refused_while_its_holder_is_unfinished_and_free_after(db: Path | str) -> None:
    with Client(db, app=queue_app) as client:
        first = client.start(queue_app.timed, {"key": "a", "seconds": 0.0}, queue="serial", dedup_id="order-7")
        with pytest.raises(DedupIdTakenError, match=f"dedup id 'order-7' is taken on queue 'serial' by workflow "
                                                   f"'{first.id}'") as refused:
            client.start(queue_app.timed, {"key": "b"}, queue="serial", dedup_id="order-7")
        assert refused.value.workflow_id == first.id
        again = client.start(queue_app.timed, {"key": "c"}, queue="serial", dedup_id="order-7", if_exists="return")
        assert again.id == first.id
        # Another queue, or another id, is another line.
        other = client.start(queue_app.timed, {"key": "d", "seconds": 0.0}, queue="storm", dedup_id="order-7")
        assert len(client.list(limit=None)) == 2
        with working(db):
            first.result(timeout=120)
            other.result(timeout=120)
            later = client.start(queue_app.timed, {"key": "e", "seconds": 0.0}, queue="serial", dedup_id="order-7")
            assert later.id != first.id
            later.result(timeout=120)


def test_a_delayed_workflow_is_not_admitted_before_its_time(db: Path | str) -> None:
    with Client(db, app=queue_app) as client:
        late = client.start(queue_app.timed, {"key": "late", "seconds": 0.0}, queue="storm", delay=1.0)
        soon = client.start(queue_app.timed, {"key": "soon", "seconds": 0.0}, queue="storm")
        assert late.describe().status == "queued"
        with working(db):
            soon_times = soon.result(timeout=120)
            late_times = late.result(timeout=120)
        with open_store(db) as store:
            row = store.get_workflow(late.id)
    assert row.not_before is not None and row.admitted_at is not None
    assert row.admitted_at >= row.not_before
    assert late_times[0] >= row.not_before
    assert soon_times[0] < row.not_before  # the delayed one held nobody up


@pytest.mark.parametrize(("options", "message"), [
    ({"queue": "nowhere"}, "unknown queue 'nowhere' (known: "),
    ({"queue": "storm", "priority": -1}, "priority must be 0 or more (lower runs first), not -1"),
    ({"queue": "storm", "delay": -5}, "delay must be 0 or more seconds, not -5"),
    ({"queue": "storm", "delay": float("nan")}, "delay must be a number of seconds, not nan"),
    ({"priority": 3}, "priority is a queue option: start the workflow on a queue (queue=NAME)"),
    ({"dedup_id": "x"}, "dedup_id is a queue option"),
    ({"delay": 1}, "delay is a queue option"),
    ({"queue": "has space"}, "queue name 'has space' is not valid"),
])
def test_bad_start_options_are_one_clear_error_and_write_nothing(db: Path | str, options: dict[str, object],
                                                                 message: str) -> None:
    with Client(db, app=queue_app) as client:
        client.start(queue_app.timed, {"key": "known"}, queue="storm")  # the store knows the app's queues
        with pytest.raises(QueueError) as refused:
            client.start(queue_app.timed, {"key": "x"}, **options)  # type: ignore[arg-type]
        assert message in str(refused.value)
        assert "\n" not in str(refused.value)
        assert len(client.list(limit=None)) == 1


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"concurrency": -1}, "queue 'q': concurrency must be at least 1, not -1"),
    ({"concurrency": 0}, "queue 'q': concurrency must be at least 1, not 0"),
    ({"worker_concurrency": 1.5}, "queue 'q': worker_concurrency must be a whole number, not 1.5"),
    ({"rate_limit": (0, 1.0)}, "queue 'q': rate_limit's starts must be at least 1, not 0"),
    ({"rate_limit": (5, -1.0)}, "queue 'q': rate_limit's seconds must be a positive number, not -1.0"),
    ({"rate_limit": 5}, "queue 'q': rate_limit must be (starts, seconds), not 5"),
])
def test_a_queue_with_a_bad_limit_is_refused_when_declared(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(QueueError) as refused:
        Queue("q", **kwargs)  # type: ignore[arg-type]
    assert str(refused.value) == message


def test_an_app_declaring_one_queue_twice_with_different_limits_is_refused() -> None:
    with pytest.raises(AppImportError, match="declares queue 'q' twice, with different limits: concurrency 1 and"
                                             " concurrency 2"):
        Registry.from_functions([Queue("q", concurrency=1), Queue("q", concurrency=2)], "app")


def test_the_last_worker_to_start_sets_a_queues_limits_and_says_what_it_changed(
        db: Path | str, caplog: pytest.LogCaptureFixture) -> None:
    old, new = Queue("mail", concurrency=5), Queue("mail", concurrency=2, rate_limit=(10, 60.0))
    with working(db, app=[queue_app.timed, queue_app.hold, old]):
        pass
    with caplog.at_level(logging.WARNING, logger="replaylog.worker"), \
            working(db, app=[queue_app.timed, queue_app.hold, new]):
        pass
    assert ("queue 'mail': its limits were concurrency 5 (declared by app [timed, hold, Queue(name='mail',"
            in caplog.text) or "queue 'mail': its limits were concurrency 5" in caplog.text
    assert "now concurrency 2, 10 per 60 s" in caplog.text
    with open_store(db) as store:
        (row,) = store.queues()
    assert (row.concurrency, row.rate_limit) == (2, (10, 60.0))


def test_cancelling_a_queued_workflow_takes_it_out_of_the_line_at_once(db: Path | str) -> None:
    with Client(db, app=queue_app) as client:
        blocker = client.start(queue_app.timed, {"key": "a", "seconds": 3.0}, queue="serial")
        waiting = client.start(queue_app.timed, {"key": "b", "seconds": 0.0}, queue="serial")
        with working(db):
            assert wait_for(lambda: blocker.describe().status == "running")
            assert waiting.describe().status == "queued"
            waiting.cancel("not needed")
            with pytest.raises(Exception, match="not needed"):
                waiting.result(timeout=120)
            _, blocker_end = blocker.result(timeout=120)
        # It never waited for the serial queue's one place: it ended while the blocker still ran.
        assert waiting.describe().updated_at < blocker_end


def test_queues_figures_count_running_waiting_and_the_rate_window(db: Path | str) -> None:
    with Client(db, app=queue_app) as client:
        for i in range(3):
            client.start(queue_app.timed, {"key": f"k{i}"}, queue="serial")
        client.start(queue_app.timed, {"key": "d"}, queue="serial", delay=3600)
    with open_store(db) as store:
        rows = {q.name: q for q in store.queues()}
    serial = rows["serial"]
    assert (serial.concurrency, serial.waiting, serial.delayed, serial.running) == (1, 4, 1, 0)


def test_a_worker_that_stops_leaves_queued_workflows_queued_and_until_idle_waits_for_them(db: Path | str) -> None:
    with Client(db, app=queue_app) as client:
        ids = [client.start(queue_app.timed, {"key": f"k{i}", "seconds": 0.0}, queue="serial").id for i in range(3)]
    worker = Worker(db, app=queue_app)
    done = threading.Event()

    def run() -> None:
        worker.run(until_idle=True)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert wait_for(done.is_set)
    with open_store(db) as store:
        assert [store.get_workflow(wid).status for wid in ids] == ["completed"] * 3


def test_start_list_show_and_queues_on_the_command_line(db: Path | str) -> None:
    with Client(db, app=queue_app) as client:
        client.start(queue_app.timed, {"key": "seed"}, queue="serial")
    start = ("start", "--app", "queue_app", "timed")
    started = run_cli(db, *start, '{"key": "cli"}', "--queue", "serial", "--priority", "3",
                      "--dedup-id", "cli-1", "--delay", "1m", "--id", "wf-cli")
    assert started.returncode == 0, started.stderr
    again = run_cli(db, *start, '{"key": "cli"}', "--queue", "serial", "--dedup-id", "cli-1")
    assert again.returncode != 0
    assert again.stderr.strip().splitlines()[-1].endswith("dedup id 'cli-1' is taken on queue 'serial' by workflow"
                                                          " 'wf-cli', which is not finished")
    unknown = run_cli(db, *start, '{"key": "x"}', "--queue", "nope")
    assert unknown.returncode != 0 and "unknown queue 'nope'" in unknown.stderr
    negative = run_cli(db, *start, '{"key": "x"}', "--queue", "serial", "--priority", "-2")
    assert negative.returncode != 0 and "priority must be 0 or more" in negative.stderr
    listed = run_cli(db, "list")
    assert listed.returncode == 0, listed.stderr
    line = next(ln for ln in listed.stdout.splitlines() if "wf-cli" in ln)
    assert "serial" in line and "#2" in line
    shown = run_cli(db, "show", "wf-cli")
    assert shown.returncode == 0, shown.stderr
    assert "queue" in shown.stdout and "serial" in shown.stdout and "priority 3" in shown.stdout
    assert "2nd in line" in shown.stdout and "not before" in shown.stdout and "dedup id cli-1" in shown.stdout
    queues = run_cli(db, "queues")
    assert queues.returncode == 0, queues.stderr
    row = next(ln.strip() for ln in queues.stdout.splitlines() if ln.strip().startswith("serial"))
    assert row.split()[:3] == ["serial", "0", "2"]
    with open_store(db) as store:
        assert store.count_workflows() == 2


# ------------------------------------------------------------------ worker processes, killed


def queue_storm(db: Path | str, tmp: Path, workflows: int, kill_every: float | None, kills: int,
                lease: float = 2.0, seed: int = 7, storm_for: float = 600.0) -> None:
    """`workflows` on the storm queue (concurrency 4), 3 worker processes, SIGKILLs; check every promise.

    Kills come `kill_every` seconds apart (None: once, when a worker has started activities),
    up to `kills` of them and for at most `storm_for` seconds (on a loaded machine a worker
    may spend seconds importing, and a kill every 2 s then leaves little time to work), each
    victim replaced by a new worker; then the workers left finish the rest. Checked from what was recorded:
    never more than 4 of the queue's workflows between their first and last recorded time at
    once; every one completed, once; no activity of one workflow ran in two places at once.
    """
    rng = random.Random(seed)
    ledger = tmp / "ledger.jsonl"
    env = cli_env(QUEUE_LEDGER=str(ledger))
    with Client(db, app=queue_app) as client:
        ids = [client.start(queue_app.timed, {"key": f"k{i}", "seconds": rng.uniform(0.02, 0.15)},
                            queue="storm").id for i in range(workflows)]
    args = ("--quiet", "--concurrency", "8", "--lease", str(lease))

    def spawn() -> WorkerProc:
        return WorkerProc(db, tmp / "logs", env, *args, app="queue_app")

    killed = 0
    deaths: dict[int, float] = {}  # pid → when it was dead for sure (SIGKILL, reaped)
    storm_ends = time.monotonic() + storm_for
    with reaping([spawn() for _ in range(3)]) as procs, open_store(db) as store:
        def all_done() -> bool:
            return store.count_workflows(status="completed") == workflows

        while killed < kills and time.monotonic() < storm_ends and not all_done():
            if kill_every is None:
                assert wait_for(lambda: ledger.exists() and ledger.read_text().count('"start"') >= 4)
            else:
                time.sleep(kill_every)
            victim = rng.randrange(len(procs))
            procs[victim].kill()
            deaths[procs[victim].pid] = time.time()
            procs[victim] = spawn()
            killed += 1
        assert wait_for(all_done, timeout=600), store.status_counts()
        results = {wid: store.get_workflow(wid) for wid in ids}
    assert killed >= 1
    assert all(r.status == "completed" for r in results.values())
    intervals = [r.result for r in results.values()]
    assert most_at_once(intervals) <= 4
    # Every workflow ran to its end once: one result each, and its activity never ran in two
    # places at once (an attempt cut by a kill ended when its worker died).
    runs: dict[str, list[list[float]]] = {}
    for line in read_jsonl(ledger):
        attempts = runs.setdefault(line["key"], [])
        if line["event"] == "start":
            attempts.append([line["at"], deaths.get(line["pid"], float("inf")), line["pid"]])
        else:  # the end of this worker's latest attempt of it
            [a for a in attempts if a[2] == line["pid"]][-1][1] = line["at"]
    assert sorted(runs) == sorted(f"k{i}" for i in range(workflows))
    for key, attempts in runs.items():
        assert most_at_once([[start, end] for start, end, _ in attempts]) == 1, f"{key} ran twice at once"


def test_a_queue_limit_holds_across_three_worker_processes_with_a_worker_killed(db: Path | str,
                                                                                tmp_path: Path) -> None:
    queue_storm(db, tmp_path, workflows=40, kill_every=None, kills=1)


@pytest.mark.soak
def test_a_queue_limit_holds_across_three_worker_processes_killed_every_two_seconds(db: Path | str,
                                                                                    tmp_path: Path) -> None:
    queue_storm(db, tmp_path, workflows=200, kill_every=2.0, kills=1_000)


def test_a_delay_is_waited_out_by_the_testing_environments_clock(tmp_path: Path) -> None:
    from replaylog.testing import WorkflowEnvironment

    with WorkflowEnvironment(app=queue_app) as env:
        began = env.now()
        handle = env.client.start(queue_app.timed, {"key": "later", "seconds": 0.0}, queue="storm", delay=3600)
        # The environment skips to the end of the delay as to a timer: no hour goes by.
        start, _ = handle.result(timeout=60)
    assert start >= began + 3600
