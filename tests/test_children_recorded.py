"""Every child a parent recorded as started exists, once: after an import into a fresh database, and
when a worker resumes a parent whose child has no row. A child handle's signal or cancel to a child
that has finished is refused, recorded and raised again on replay; an operator's is refused in one line.
On both backends (a real SQLite file and a real PostgreSQL server), with in-process workers and the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import spawn_app
from fault_harness import app_worker

from conftest import run_cli, sql, wait_for
from replaylog import ChildWorkflowClosedError, Client, ReplaylogError, run
from replaylog.engine.core import CommandRecord, args_key
from replaylog.engine.store import Store, open_store
from replaylog.engine.store.shared.keys import SLOT_LIMIT, slot_key
from replaylog.engine.worker.run import WorkflowRun

FINISHED = ("completed", "failed", "cancelled", "terminated")


@pytest.fixture
def other_db(request: pytest.FixtureRequest, store_url: str, tmp_path: Path) -> Iterator[Path | str]:
    """A second fresh database of the same backend as `db`: where an export is imported."""
    if store_url.startswith("sqlite:"):
        yield tmp_path / "other.db"
        return
    databases = request.getfixturevalue("pg_databases")
    url: str = databases.take()
    yield url
    databases.give_back(url)


def _url(db: Path | str) -> str:
    return f"sqlite:///{db}" if isinstance(db, Path) else db


def _children(store: Store, parent: str) -> list[str]:
    return sorted(w.id for w in store.list_workflows(parent=parent))


def _blocked_on(store: Store, wid: str, on: str) -> bool:
    row = store.get_workflow(wid)
    return row.status == "blocked" and row.blocked_on == on


def _export_blocked_relay(db: Path | str, store: Store, tmp_path: Path) -> tuple[str, Path]:
    """Run `relay` until it waits for its tally child (which has its first "go"); export the parent alone."""
    wid = store.start_workflow("relay", 2)
    child = f"{wid}.0"
    with app_worker(db, spawn_app):
        assert wait_for(lambda: _blocked_on(store, wid, f"child:{child}") and _blocked_on(store, child, "go"))
    exported = tmp_path / "relay.json"
    assert run_cli(db, "export", wid, "--output", str(exported)).returncode == 0
    return wid, exported


def test_an_imported_parent_gets_the_child_it_started_with_its_input_and_signal_and_runs_to_completion(
        db: Path | str, other_db: Path | str, store: Store, tmp_path: Path) -> None:
    wid, exported = _export_blocked_relay(db, store, tmp_path)
    child = f"{wid}.0"
    imported = run_cli(other_db, "import", str(exported))
    assert imported.returncode == 0, imported.stderr
    other = open_store(_url(other_db))
    try:
        # The child the export did not carry is started, as the worker's commit of its slot made it.
        assert _children(other, wid) == [child]
        row = other.get_workflow(child)
        assert (row.workflow, row.status, row.input, row.parent) == ("tally", "pending", 2, wid)
        assert sql(other, "SELECT parent_close FROM workflows WHERE id = ?", (child,)) == [("cancel",)]
        # The parent's recorded signal to it is delivered to it, once.
        assert [(s.name, s.payload) for s in other.list_signals(child)] == [("go", 5)]
        starts = [a.detail for a in other.list_audit(child) if a.action == "start"]
        assert starts == [f"tally: recorded as started by {wid} at slot 0, which had no row of it"]
        with app_worker(other_db, spawn_app):
            assert wait_for(lambda: _blocked_on(other, child, "go"))
            other.send_signal(child, "go", 2)
            assert wait_for(lambda: other.get_workflow(wid).status in FINISHED)
        parent = other.get_workflow(wid)
        assert (parent.status, parent.result, parent.error) == ("completed", 7, None)
        assert _children(other, wid) == [child]
        assert [(s.name, s.payload) for s in other.list_signals(child)] == [("go", 5), ("go", 2)]
        # Importing the parent again is refused: the child is not started a second time.
        again = run_cli(other_db, "import", str(exported))
        assert again.returncode == 1 and "already exists" in again.stderr
        assert _children(other, wid) == [child]
    finally:
        other.close()


def test_a_child_imported_before_its_parent_is_adopted_keeping_its_progress(
        db: Path | str, other_db: Path | str, store: Store, tmp_path: Path) -> None:
    wid, exported = _export_blocked_relay(db, store, tmp_path)
    child = f"{wid}.0"
    child_file = tmp_path / "child.json"
    assert run_cli(db, "export", child, "--output", str(child_file)).returncode == 0
    assert run_cli(other_db, "import", str(child_file)).returncode == 0
    assert run_cli(other_db, "import", str(exported)).returncode == 0
    other = open_store(_url(other_db))
    try:
        assert _children(other, wid) == [child]
        # Its own history came with it: the parent's signal is not delivered a second time.
        assert [(s.name, s.payload) for s in other.list_signals(child)] == [("go", 5)]
        assert not [a for a in other.list_audit(child) if a.action == "start"]
        with app_worker(other_db, spawn_app):
            assert wait_for(lambda: _blocked_on(other, child, "go"))
            other.send_signal(child, "go", 2)
            assert wait_for(lambda: other.get_workflow(wid).status in FINISHED)
        assert (other.get_workflow(wid).status, other.get_workflow(wid).result) == ("completed", 7)
    finally:
        other.close()


def test_an_imported_parent_whose_child_had_finished_is_not_given_it_again(
        db: Path | str, other_db: Path | str, store: Store, tmp_path: Path) -> None:
    wid = store.start_workflow("late_words", has_input=False)
    with app_worker(db, spawn_app):
        assert wait_for(lambda: store.get_workflow(wid).status in FINISHED)
    with Client(db) as client:
        doc = client.get_handle(wid).export()
    # Exported as if still running: the child's outcome is in its signals, so no child is started.
    doc["status"] = "blocked"
    path = tmp_path / "late.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert run_cli(other_db, "import", str(path)).returncode == 0
    other = open_store(_url(other_db))
    try:
        assert _children(other, wid) == []
    finally:
        other.close()


def _drop_workflow(store: Store, wid: str) -> None:
    """Remove a workflow's row, history and signals by hand: the state a lost child row leaves."""
    (seq,) = sql(store, "SELECT seq FROM workflows WHERE id = ?", (wid,))[0]
    sql(store, "DELETE FROM commands WHERE slot_key BETWEEN ? AND ?", (slot_key(seq), slot_key(seq) + SLOT_LIMIT - 1))
    sql(store, "DELETE FROM signals WHERE workflow_id = ?", (wid,))
    sql(store, "DELETE FROM workflows WHERE id = ?", (wid,))


def test_a_worker_resuming_a_parent_starts_a_recorded_child_that_has_no_row_once(db: Path | str, store: Store) -> None:
    wid = store.start_workflow("overlap", 3600)
    child = f"{wid}.0"
    with app_worker(db, spawn_app):
        assert wait_for(lambda: _blocked_on(store, wid, f"child:{child}") and _blocked_on(store, child, "timer"))
    _drop_workflow(store, child)
    resume = "UPDATE workflows SET status = 'pending', blocked_on = NULL WHERE id = ?"
    sql(store, resume, (wid,))
    with app_worker(db, spawn_app):
        assert wait_for(lambda: _children(store, wid) == [child] and _blocked_on(store, child, "timer")
                        and _blocked_on(store, wid, f"child:{child}"))
        row = store.get_workflow(child)
        assert (row.workflow, row.input, row.parent) == ("nap", 3600, wid)
        # Resumed again, the parent finds its child: nothing is started twice.
        sql(store, resume, (wid,))
        assert wait_for(lambda: store.get_workflow(wid).slots == 2 and _blocked_on(store, wid, f"child:{child}"))
    assert _children(store, wid) == [child]
    assert [a.detail for a in store.list_audit(child) if a.action == "start"] == [
        f"nap: recorded as started by {wid} at slot 0, which had no row of it"]


def test_a_blocked_parent_whose_child_has_no_row_gets_it_started_by_the_next_worker(
        db: Path | str, store: Store) -> None:
    # Nothing wakes such a parent (its child's outcome never comes): the worker looks for it itself.
    wid = store.start_workflow("overlap", 3600)
    child = f"{wid}.0"
    with app_worker(db, spawn_app):
        assert wait_for(lambda: _blocked_on(store, wid, f"child:{child}") and _blocked_on(store, child, "timer"))
    _drop_workflow(store, child)
    with app_worker(db, spawn_app):
        assert wait_for(lambda: _children(store, wid) == [child] and _blocked_on(store, child, "timer"))
        row = store.get_workflow(child)
        assert (row.workflow, row.input, row.parent) == ("nap", 3600, wid)
        assert _blocked_on(store, wid, f"child:{child}")  # it waits on, for the child it now has
    assert [a.detail for a in store.list_audit(child) if a.action == "start"] == [
        f"nap: recorded as started by {wid} at slot 0, which had no row of it"]
    # Found again, it has its child: nothing is started twice.
    assert store.start_orphaned_children() == {}
    assert _children(store, wid) == [child]


def test_a_parent_that_signals_or_cancels_a_finished_child_gets_a_recorded_refusal_it_can_catch(
        db: Path | str, store: Store) -> None:
    wid = store.start_workflow("late_words", has_input=False)
    child = f"{wid}.0"
    with app_worker(db, spawn_app):
        assert wait_for(lambda: store.get_workflow(wid).status in FINISHED)
    row = store.get_workflow(wid)
    assert row.status == "completed", row.error
    signal_refusal = f"child workflow {child!r} is completed: signal 'go' not sent"
    cancel_refusal = f"child workflow {child!r} is completed: cancel not sent"
    assert row.result == ["quick", [signal_refusal, child, "completed"], [cancel_refusal, child, "completed"]]
    commands = store.list_commands(wid)
    assert [(c.kind, c.ok, c.error) for c in commands] == [
        ("child_start", True, None), ("child_result", True, None),
        ("child_signal", False, signal_refusal), ("child_cancel", False, cancel_refusal)]
    # Nothing reached the child.
    assert store.list_signals(child) == []
    assert [a.action for a in store.list_audit(child)] == []
    # A replay of the history raises the same refusals: the code goes down the same path.
    replayed = run(spawn_app.late_words, store.load_state(wid), clock=lambda: 0.0)
    assert replayed.outcome.result == row.result
    assert replayed.state.commands == store.load_state(wid).commands


def test_a_child_that_finishes_between_the_workers_check_and_the_commit_is_refused_by_the_commit_and_recorded(
        db: Path | str, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # The worker's read before the commit is skipped: the commit's own check, under lock, decides.
    monkeypatch.setattr(WorkflowRun, "_check_child_open", lambda self, rec: None)
    wid = store.start_workflow("late_words", has_input=False)
    child = f"{wid}.0"
    with app_worker(db, spawn_app):
        assert wait_for(lambda: store.get_workflow(wid).status in FINISHED)
    row = store.get_workflow(wid)
    # Recorded at the first try: no run was handed back with a worker error.
    assert (row.status, row.error, row.worker_error) == ("completed", None, None)
    assert row.result[1:] == [[f"child workflow {child!r} is completed: signal 'go' not sent", child, "completed"],
                              [f"child workflow {child!r} is completed: cancel not sent", child, "completed"]]
    assert [(c.kind, c.ok) for c in store.list_commands(wid)][2:] == [("child_signal", False), ("child_cancel", False)]
    assert store.list_signals(child) == []


def test_an_uncaught_refusal_fails_the_parent_naming_the_child_and_its_status(db: Path | str, store: Store) -> None:
    wid = store.start_workflow("late_signal", has_input=False)
    with app_worker(db, spawn_app):
        assert wait_for(lambda: store.get_workflow(wid).status in FINISHED)
    row = store.get_workflow(wid)
    assert row.status == "failed"
    assert row.error == f"ChildWorkflowClosedError: child workflow '{wid}.0' is completed: signal 'go' not sent"


def test_the_store_refuses_a_child_signal_commit_when_the_child_finished_first_writing_nothing(store: Store) -> None:
    wid = store.start_workflow("late_words", has_input=False)
    (claim,) = store.claim("tester", ttl=60)
    start = {"id": f"{wid}.0", "input": None, "parent_close": "cancel"}
    assert store.commit_record(claim, 0, CommandRecord("child_start", "quick", True, start, None, 1,
                                                       args_key((None,), {})), ttl=60)
    sql(store, "UPDATE workflows SET status = 'completed' WHERE id = ?", (f"{wid}.0",))
    signal = CommandRecord("child_signal", "go", True, {"id": f"{wid}.0", "payload": 1}, None, 1,
                           args_key((f"{wid}.0",), {}))
    with pytest.raises(ChildWorkflowClosedError, match="is completed: signal 'go' not sent"):
        store.commit_record(claim, 1, signal, ttl=60)
    assert len(store.list_commands(wid)) == 1
    assert store.list_signals(f"{wid}.0") == []
    # The refusal itself is what the worker records in the slot instead.
    refused = CommandRecord("child_signal", "go", False, None, "refused", 1, signal.args)
    assert store.commit_record(claim, 1, refused, ttl=60)
    assert [(c.kind, c.ok) for c in store.list_commands(wid)] == [("child_start", True), ("child_signal", False)]


@pytest.mark.parametrize("status", FINISHED)
def test_an_operators_signal_or_cancel_of_a_finished_workflow_is_refused_in_one_line_writing_nothing(
        db: Path | str, store: Store, status: str) -> None:
    wid = store.start_workflow("quick", has_input=False)
    if status == "terminated":
        store.terminate_workflow(wid, "stop")
    else:
        sql(store, "UPDATE workflows SET status = ? WHERE id = ?", (status, wid))
    audit = store.list_audit(wid)
    with Client(db) as client:
        handle = client.get_handle(wid)
        with pytest.raises(ReplaylogError, match=f"workflow '{wid}' is {status} and accepts no signals"):
            handle.signal("go", 1)
        with pytest.raises(ReplaylogError, match=f"workflow '{wid}' is {status}: only a pending, running or blocked"):
            handle.cancel("late")
    for args in (("signal", wid, "go"), ("cancel", wid)):
        refused = run_cli(db, *args)
        assert refused.returncode == 1
        assert refused.stderr.count("\n") == 1 and f"'{wid}' is {status}" in refused.stderr
    assert store.list_signals(wid) == []
    assert store.list_audit(wid) == audit


def test_a_child_handles_refusal_is_the_public_error_with_the_childs_id_and_status() -> None:
    exc = ChildWorkflowClosedError("p.3", "failed", "cancel")
    assert str(exc) == "child workflow 'p.3' is failed: cancel not sent"
    again = ChildWorkflowClosedError.replayed("p.3", str(exc))
    assert (str(again), again.child_id, again.status) == (str(exc), "p.3", "failed")
