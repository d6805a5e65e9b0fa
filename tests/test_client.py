"""The Python client on both backends: every operation, the handle's waits, and its errors.

A real store (the `db` fixture: a SQLite file and a PostgreSQL database) and a real
worker running in the test's process (`replaylog.Worker`), as an application embeds them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import client_app
import pytest

from conftest import run_cli, wait_for
from replaylog import (
    Client,
    Queue,
    RunInfo,
    SignalInfo,
    Slot,
    UnknownWorkflowError,
    ValueNotJSONError,
    Worker,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowHandle,
    WorkflowInfo,
    WorkflowTerminated,
    WorkflowView,
)
from replaylog.client import ClientClosedError, WorkflowInputError, resolve_db
from replaylog.engine.errors import DuplicateWorkflowIdError, OperatorRefusedError, StoreError, WorkflowClosedError


@pytest.fixture
def client(db: Path | str) -> Iterator[Client]:
    with Client(db, app=client_app) as c:
        yield c


@pytest.fixture
def worker(db: Path | str, client: Client) -> Iterator[Worker]:
    # After the client: on SQLite the worker would create the file the client opens.
    with Worker(db, app=client_app, concurrency=8, focus_cpu=False, max_payload=4096) as w:
        yield w


def test_start_and_result_return_the_workflows_value(client: Client, worker: Worker) -> None:
    handle = client.start(client_app.add, 21)
    assert handle.result(timeout=60) == 42
    info = handle.describe()
    assert isinstance(info, WorkflowInfo)
    assert (info.id, info.workflow, info.status, info.result, info.input, info.slots) == (
        handle.id, "add", "completed", 42, 21, 3)
    assert info.finished and info.error is None and info.parent is None and info.created_at <= info.updated_at


def test_start_by_name_runs_the_workflow_of_that_name(client: Client, worker: Worker) -> None:
    assert client.start("noinput").result(timeout=60) == "done"


def test_start_with_an_id_taken_fails_or_returns_the_same_workflow(client: Client, worker: Worker) -> None:
    first = client.start(client_app.add, 1, id="order-1")
    assert first.result(timeout=60) == 2
    with pytest.raises(DuplicateWorkflowIdError, match="order-1"):
        client.start(client_app.add, 5, id="order-1")
    again = client.start(client_app.add, 5, id="order-1", if_exists="return")
    assert again.id == "order-1" and again.describe().input == 1  # nothing written
    assert len(client.list()) == 1


def test_refused_input_raises_one_clear_error_and_writes_nothing(client: Client, db: Path | str) -> None:
    with pytest.raises(WorkflowInputError, match="takes no input"):
        client.start(client_app.noinput, 5)
    with pytest.raises(WorkflowInputError, match="needs an input"):
        client.start(client_app.add)
    with pytest.raises(ValueNotJSONError, match="the workflow input cannot be stored as JSON"):
        client.start(client_app.add, {1, 2})
    with pytest.raises(TypeError, match="not a @workflow function"):
        client.start(print)
    if isinstance(db, Path):
        assert not db.exists()  # refused before the database was touched
    else:
        assert client.list() == []


def test_start_creates_a_missing_database_and_other_calls_refuse_one(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    with Client(db) as c:
        with pytest.raises(StoreError, match=f"no database at {db}"):
            c.list()
        assert not db.exists()
        c.start("noinput")
        assert db.exists() and [i.workflow for i in c.list()] == ["noinput"]


def test_the_database_is_resolved_as_the_command_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REPLAYLOG_DB", raising=False)
    assert resolve_db() == Path("replaylog.db")
    monkeypatch.setenv("REPLAYLOG_DB", "sqlite:///other.db")
    assert resolve_db() == Path("other.db") and Client().db == Path("other.db")
    assert resolve_db("postgresql://u@/db?host=/tmp") == "postgresql://u@/db?host=/tmp"
    with pytest.raises(StoreError, match="unknown store URL scheme mysql://"):
        Client("mysql://x")


def test_an_unknown_id_raises_on_first_use_naming_it(client: Client, worker: Worker) -> None:
    handle = client.get_handle("no-such-workflow")  # nothing read yet
    for use in (handle.describe, handle.result, lambda: handle.signal("go"), handle.cancel, handle.terminate,
                handle.export, handle.history, lambda: handle.get_event("k", timeout=0), handle.retry,
                lambda: handle.fork(0), handle.approve, lambda: client.signal("no-such-workflow", "go")):
        with pytest.raises(UnknownWorkflowError, match="no-such-workflow"):
            use()


def test_list_filters_by_status_workflow_parent_and_limit(client: Client, worker: Worker) -> None:
    top = client.start(client_app.parent, 2)
    top.result(timeout=60)
    waiting = client.start(client_app.waits)
    assert wait_for(lambda: waiting.describe().status == "blocked")
    assert {i.id for i in client.list(parent=top.id)} == {f"{top.id}-child-0", f"{top.id}-child-1"}
    assert [i.id for i in client.list(workflow=client_app.parent)] == [top.id]
    assert [i.id for i in client.list(workflow="waits", status="blocked")] == [waiting.id]
    assert len(client.list(status="completed")) == 3
    assert len(client.list(limit=2)) == 2 and len(client.list(limit=None)) == 4


def test_a_signal_wakes_the_workflow_waiting_for_it(client: Client, worker: Worker) -> None:
    first, second = client.start(client_app.waits), client.start(client_app.waits)
    assert first.get_event("stage", timeout=60) == "waiting"
    assert first.signal("go", {"n": 1}) == 1
    assert client.signal(second.id, "go", [2]) == 1
    assert first.result(timeout=60) == {"n": 1} and second.result(timeout=60) == [2]
    with pytest.raises(WorkflowClosedError, match="accepts no signals"):
        first.signal("go")
    with pytest.raises(ValueNotJSONError):
        client.signal(second.id, "go", object())
    with pytest.raises(TypeError, match="signal name is a string"):
        client.signal(second.id, 7, None)  # type: ignore[arg-type]


def test_result_raises_what_ended_the_workflow(client: Client, worker: Worker) -> None:
    failed = client.start(client_app.fails)
    with pytest.raises(WorkflowFailed) as caught:
        failed.result(timeout=60)
    assert (caught.value.workflow_id, caught.value.error_kind) == (failed.id, "code")
    assert "boom" in caught.value.message and caught.value.diagnostic is None
    cancelled = client.start(client_app.waits)
    assert wait_for(lambda: cancelled.describe().status == "blocked")
    assert cancelled.cancel("changed my mind") == "blocked"
    with pytest.raises(WorkflowCancelled, match="changed my mind") as stopped:
        cancelled.result(timeout=60)
    assert stopped.value.workflow_id == cancelled.id and stopped.value.reason == "changed my mind"
    terminated = client.start(client_app.waits)
    assert wait_for(lambda: terminated.describe().status == "blocked")
    assert terminated.terminate("stuck") == "blocked"
    with pytest.raises(WorkflowTerminated, match="stuck") as ended:
        terminated.result(timeout=60)
    assert (ended.value.workflow_id, ended.value.reason) == (terminated.id, "stuck")


def test_result_times_out_and_leaves_the_workflow_untouched(client: Client, worker: Worker) -> None:
    handle = client.start(client_app.waits)
    assert wait_for(lambda: handle.describe().status == "blocked")
    before = handle.describe()
    with pytest.raises(TimeoutError, match=f"{handle.id}.*did not finish within 0.2 s.*blocked"):
        handle.result(timeout=0.2)
    assert handle.describe() == before


def test_a_nondeterministic_failure_carries_its_diagnostic(client: Client, worker: Worker) -> None:
    done = client.start(client_app.add, 3)
    done.result(timeout=60)
    doc = done.export()
    doc["status"] = "running"  # imported pending: the worker replays it against `add`
    doc["slots"][1]["name"] = "triple"
    replayed = client.import_history(doc, id="diverges")
    with pytest.raises(WorkflowFailed) as caught:
        replayed.result(timeout=60)
    assert caught.value.error_kind == "nondeterministic"
    d = caught.value.diagnostic
    assert d is not None and (d.slot, d.recorded, d.issued) == (1, "activity:triple", "activity:double")


def test_approve_answers_the_pending_request(client: Client, worker: Worker) -> None:
    handle = client.start(client_app.ships)
    assert wait_for(lambda: (handle.describe().blocked_on or "").startswith("approval:"))
    with pytest.raises(OperatorRefusedError):
        handle.approve(request="not-the-pending-one")
    rid = handle.approve(note="ok")
    answer = handle.result(timeout=60)
    assert answer["approved"] is True and answer["note"] == "ok" and answer["request"] == rid


def test_retry_dry_replays_then_sets_a_failed_workflow_going(client: Client, worker: Worker,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(client_app.FAIL, "flaky", True)
    handle = client.start(client_app.flaky)
    with pytest.raises(WorkflowFailed, match="not yet"):
        handle.result(timeout=60)
    client_app.FAIL["flaky"] = False
    verdict = handle.retry("fixed")
    assert verdict is not None and verdict.ok
    assert handle.result(timeout=60) == "recovered"
    with pytest.raises(OperatorRefusedError, match="is completed: only a failed workflow can be retried"):
        handle.retry()


def test_listing_is_the_page_list_shows_with_its_total_and_why_a_workflow_waits(client: Client) -> None:
    first = client.start(client_app.add, 1)
    second = client.start(client_app.add, 2)
    page = client.listing(limit=1)
    assert [r.id for r in page.top] == [second.id] and page.total == 2  # most recently updated first
    assert page.waiting == {second.id: "no worker running"}  # no worker has ever run on it
    whole = client.listing(client.filter(status="pending"), limit=0)
    assert {r.id for r in whole.rows} == {first.id, second.id} and whole.total == 2 and whole.depth == {}


def test_details_are_what_show_json_prints(client: Client, worker: Worker, db: Path | str) -> None:
    handle = client.start(client_app.add, 4)
    handle.result(timeout=60)
    details = handle.details()
    assert details["id"] == handle.id and details["status"] == "completed" and details["commands"]
    shown = run_cli(db, "show", handle.id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == json.dumps(details) + "\n"  # the command line prints the client's read
    with pytest.raises(UnknownWorkflowError, match="nope"):
        client.get_handle("nope").details()


def test_view_reads_the_latest_run_typed_with_its_signals_and_the_show_json_object(
        client: Client, worker: Worker) -> None:
    handle = client.start(client_app.waits)
    assert wait_for(lambda: handle.describe().blocked_on == "go")
    waiting = handle.signals()
    handle.signal("go", {"n": 1})
    assert handle.result(timeout=60) == {"n": 1}
    assert waiting == []
    view = handle.view()
    assert isinstance(view, WorkflowView) and view.info == handle.describe()
    assert not view.info.has_input and view.info.traceback is None and view.info.worker_error is None
    assert view.run == RunInfo(1, view.info.slots, None, True, None, False) and view.runs == [view.run]
    assert view.runs == handle.runs()
    assert all(isinstance(s, SignalInfo) for s in view.signals)
    assert [(s.seq, s.name, s.payload, s.consumed) for s in view.signals] == [(1, "go", {"n": 1}, True)]
    assert view.signals == handle.signals() == handle.signals(run=1)
    assert view.history == handle.history() == handle.history(run=1) and view.details == handle.details()
    assert [(s.kind, s.name, s.value, s.traceback, s.parallel_group) for s in view.history] == [
        ("event", "stage", "waiting", None, None)]  # a signal is consumed by its cursor, not a slot
    failed = client.start(client_app.fails)
    with pytest.raises(WorkflowFailed, match="boom"):
        failed.result(timeout=60)
    info = failed.view().info
    assert info.traceback is not None and "ValueError: boom" in info.traceback
    for read in (lambda: client.get_handle("nope").view(), lambda: client.get_handle("nope").runs(),
                 lambda: client.get_handle("nope").signals(), lambda: client.get_handle("nope").history(run=1)):
        with pytest.raises(UnknownWorkflowError, match="nope"):
            read()


def test_stats_queues_and_migrate_are_what_their_commands_print(client: Client, db: Path | str) -> None:
    client.start(client_app.add, 1, queue=Queue("emails", concurrency=2))
    client.start(client_app.add, 2)
    stats = client.stats()
    assert (stats.counts["pending"], stats.counts["queued"]) == (1, 1)
    assert stats.workers == () and stats.slots_last_minute == 0
    printed = json.loads(run_cli(db, "stats", "--json").stdout)
    assert printed["counts"] == stats.counts and printed["total"] == 2
    (queue,) = client.queues()
    assert (queue.name, queue.concurrency, queue.waiting) == ("emails", 2, 1)
    assert [q["name"] for q in json.loads(run_cli(db, "queues", "--json").stdout)] == ["emails"]
    with Client(db) as fresh:  # it opens a database this client's start made: nothing left to migrate
        before, now = fresh.migrate()
    assert before == now == client.migrate()[1] and f"schema version {now}, up to date" in run_cli(db, "migrate").stdout


def test_check_says_whether_a_failed_workflow_would_now_succeed_and_needs_the_code(
        client: Client, worker: Worker, db: Path | str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(client_app.FAIL, "flaky", True)
    handle = client.start(client_app.flaky)
    with pytest.raises(WorkflowFailed, match="not yet"):
        handle.result(timeout=60)
    still = handle.check()
    assert not still.ok and still.replays  # the history replays, and a retry would fail again
    client_app.FAIL["flaky"] = False
    fixed = handle.check()
    assert fixed.ok and fixed.replays
    assert handle.describe().status == "failed"  # a check writes nothing
    with Client(db) as without_code, pytest.raises(OperatorRefusedError, match="give the Client an app"):
        without_code.get_handle(handle.id).check()


def test_fork_export_import_and_history(client: Client, worker: Worker) -> None:
    original = client.start(client_app.add, 4)
    assert original.result(timeout=60) == 8
    history = original.history()
    assert all(isinstance(s, Slot) for s in history)
    assert [(s.slot, s.kind, s.name, s.value) for s in history] == [
        (0, "event", "progress", 0.5), (1, "activity", "double", 8), (2, "event", "progress", 1.0)]
    assert original.history(from_slot=2) == history[2:]
    fork = original.fork(1, id="forked")
    assert fork.id == "forked" and fork.result(timeout=60) == 8
    assert fork.describe().slots == 3 and original.describe().slots == 3
    copy = client.import_history(original.export(), id="copy")
    assert copy.describe().status == "completed" and copy.result(timeout=1) == 8
    assert [s.value for s in copy.history()] == [s.value for s in history]


def test_events_keep_the_latest_value_per_key_and_every_set_in_history(client: Client, worker: Worker) -> None:
    handle = client.start(client_app.add, 5)
    handle.result(timeout=60)
    assert handle.events() == {"progress": 1.0} == client.events(handle.id)
    assert handle.get_event("progress") == 1.0 == client.get_event(handle.id, "progress", timeout=0)
    assert [s.value for s in handle.history() if s.kind == "event"] == [0.5, 1.0]
    # A key never set: None at once once the workflow finished, or after the timeout.
    assert handle.get_event("missing") is None
    waiting = client.start(client_app.waits)
    assert waiting.get_event("missing", timeout=0.1) is None
    with pytest.raises(TypeError, match="event key must be a string"):
        waiting.get_event(3)  # type: ignore[arg-type]


def test_an_event_value_that_cannot_be_stored_is_refused_in_the_code_and_nothing_recorded(
        client: Client, worker: Worker) -> None:
    handle = client.start(client_app.bad_events)
    assert handle.result(timeout=60) == ["ValueNotJSONError", "PayloadTooLargeError"]
    assert [(s.slot, s.kind, s.name) for s in handle.history()] == [(0, "event", "good")]


def test_a_closed_client_raises_one_clear_error(db: Path | str) -> None:
    c = Client(db)
    handle = c.start("noinput")
    c.close()
    c.close()  # harmless
    for use in (handle.describe, c.list, lambda: c.start("noinput")):
        with pytest.raises(ClientClosedError, match="this client is closed"):
            use()


def test_one_client_serves_many_threads(client: Client, worker: Worker) -> None:
    results: dict[int, int] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = client.start(client_app.add, i).result(timeout=120)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert errors == [] and results == {i: 2 * i for i in range(16)}


def test_waiting_on_a_handle_wakes_when_another_process_finishes_it(client: Client, db: Path | str) -> None:
    handle = client.start(client_app.add, 7)
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(handle.result(timeout=120)))
    waiter.start()
    assert wait_for(lambda: client.waiting == 1)
    with Worker(db, app=client_app, concurrency=2, focus_cpu=False):
        waiter.join(120)
    assert got == [14] and client.waiting == 0


def test_a_hundred_waiting_calls_take_no_thread_of_the_clients_and_close_wakes_them(db: Path | str) -> None:
    client = Client(db)
    handles = [client.start("noinput") for _ in range(100)]  # no worker: they stay pending
    before = threading.active_count()
    outcomes: list[str] = []

    def wait(h: WorkflowHandle[Any]) -> None:
        try:
            h.result(timeout=300)
        except ClientClosedError:
            outcomes.append("closed")

    waiters = [threading.Thread(target=wait, args=(h,)) for h in handles]
    for t in waiters:
        t.start()
    assert wait_for(lambda: client.waiting == 100)
    # The waiters' own threads, and on PostgreSQL the client's one listening thread (started
    # with its first open, before `before` was taken): nothing per waiting call.
    assert threading.active_count() == before + 100
    client.close()
    for t in waiters:
        t.join(60)
    assert outcomes == ["closed"] * 100 and client.waiting == 0
