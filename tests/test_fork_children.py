"""A fork made after its original started a child that has not answered runs its own child, and never
touches the original's: ctx.start_workflow and ctx.call_workflow, through the CLI, the client and the
console's door, on both backends (a real SQLite file and a real PostgreSQL server), in-process workers.
"""

from __future__ import annotations

from pathlib import Path

import spawn_app
from fault_harness import app_worker
from test_children_recorded import _export_blocked_relay

from conftest import run_cli, sql, wait_for
from replaylog import Client
from replaylog.engine.store import Store

FINISHED = ("completed", "failed", "cancelled", "terminated")


def _blocked_on(store: Store, wid: str, on: str) -> bool:
    row = store.get_workflow(wid)
    return row.status == "blocked" and row.blocked_on == on


def _children(store: Store, parent: str) -> list[str]:
    return sorted(w.id for w in store.list_workflows(parent=parent))


def _untouched(store: Store, wid: str, child: str, signals: list[tuple[str, int]]) -> None:
    """The original still waits for its own child, which still waits, with only its own signals."""
    assert _blocked_on(store, wid, f"child:{child}")
    assert _blocked_on(store, child, "go")
    assert [(s.name, s.payload) for s in store.list_signals(child)] == signals
    assert _children(store, wid) == [child]


def test_a_fork_after_a_started_child_runs_its_own_child_with_the_recorded_input_and_signal(
        db: Path | str, store: Store) -> None:
    wid = store.start_workflow("relay", 2)
    child = f"{wid}.0"
    with app_worker(db, spawn_app):
        assert wait_for(lambda: _blocked_on(store, wid, f"child:{child}") and _blocked_on(store, child, "go"))
        # Slots 0 (the start) and 1 (the signal "go" 5 to it) are copied; the fork waits at slot 2.
        forked = run_cli(db, "fork", wid, "--from-slot", "2", "--id", "relay-fork")
        assert forked.returncode == 0, forked.stderr
        mine = "relay-fork.0"
        assert wait_for(lambda: _blocked_on(store, "relay-fork", f"child:{mine}") and _blocked_on(store, mine, "go"))
        row = store.get_workflow(mine)
        assert (row.workflow, row.input, row.parent) == ("tally", 2, "relay-fork")
        assert sql(store, "SELECT parent_close FROM workflows WHERE id = ?", (mine,)) == [("cancel",)]
        # The copied signal to the child reached the fork's child, once; the copied slots name it.
        assert [(s.name, s.payload) for s in store.list_signals(mine)] == [("go", 5)]
        history = store.list_commands("relay-fork")
        assert [(c.kind, c.name) for c in history[:2]] == [("child_start", "tally"), ("child_signal", "go")]
        assert history[0].value["id"] == mine and history[1].value["id"] == mine
        starts = [a.detail for a in store.list_audit(mine) if a.action == "start"]
        assert starts == [f"tally: started by relay-fork: its own child, for the copy of slot 0 of {wid}"]
        store.send_signal(mine, "go", 7)
        assert wait_for(lambda: store.get_workflow("relay-fork").status in FINISHED)
        fork = store.get_workflow("relay-fork")
        assert (fork.status, fork.result, fork.error) == ("completed", 12, None)
        _untouched(store, wid, child, [("go", 5)])
    # The fork replays to the same end (its slots name the child it waits for).
    checked = run_cli(db, "check", "relay-fork", "--app", "spawn_app")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_client_fork_after_a_called_child_waits_for_its_own_child_not_the_originals(
        db: Path | str, store: Store) -> None:
    wid = store.start_workflow("caller", None)
    child = f"{wid}.0"
    with app_worker(db, spawn_app):
        assert wait_for(lambda: _blocked_on(store, wid, f"child:{child}") and _blocked_on(store, child, "go"))
        with Client(db if isinstance(db, str) else f"sqlite:///{db}") as client:
            fork = client.get_handle(wid).fork(1)
        mine = f"{fork.id}.0"
        assert wait_for(lambda: _blocked_on(store, fork.id, f"child:{mine}") and _blocked_on(store, mine, "go"))
        assert (store.get_workflow(mine).input, store.get_workflow(mine).parent) == (1, fork.id)
        store.send_signal(mine, "go", 4)
        assert wait_for(lambda: store.get_workflow(fork.id).status in FINISHED)
        assert (store.get_workflow(fork.id).status, store.get_workflow(fork.id).result) == ("completed", 4)
        _untouched(store, wid, child, [])
        # The original's child answers the original alone.
        store.send_signal(child, "go", 9)
        assert wait_for(lambda: store.get_workflow(wid).status in FINISHED)
    assert (store.get_workflow(wid).status, store.get_workflow(wid).result) == ("completed", 9)
    assert store.get_workflow(fork.id).result == 4 and _children(store, fork.id) == [mine]


def test_a_fork_whose_copy_holds_the_childs_result_reads_it_and_starts_no_child(
        db: Path | str, store: Store) -> None:
    wid = store.start_workflow("caller", None)
    child = f"{wid}.0"
    with app_worker(db, spawn_app):
        assert wait_for(lambda: _blocked_on(store, child, "go"))
        store.send_signal(child, "go", 3)
        assert wait_for(lambda: store.get_workflow(wid).status in FINISHED)
        assert run_cli(db, "fork", wid, "--from-slot", "1", "--id", "late-fork").returncode == 0
        assert wait_for(lambda: store.get_workflow("late-fork").status in FINISHED)
    assert store.get_workflow("late-fork").result == 3
    assert _children(store, "late-fork") == []


def test_a_fork_past_an_unanswered_child_with_an_id_the_code_gave_is_refused_in_one_line(
        db: Path | str, store: Store) -> None:
    wid = store.start_workflow("caller", "named-child")
    with app_worker(db, spawn_app):
        assert wait_for(lambda: _blocked_on(store, wid, "child:named-child"))
        refused = run_cli(db, "fork", wid, "--from-slot", "1", "--id", "named-fork")
        assert refused.returncode == 1
        assert "started child workflow 'named-child' under an id its code gave" in refused.stderr
        assert "fork from slot 0 or earlier" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        # Nothing was written.
        assert sql(store, "SELECT COUNT(*) FROM workflows WHERE id LIKE ?", ("named-fork%",)) == [(0,)]
        # Forking from the start slot lets the fork's code start it: the id is taken, which it records.
        assert run_cli(db, "fork", wid, "--from-slot", "0", "--id", "named-fork").returncode == 0
        assert wait_for(lambda: store.get_workflow("named-fork").status in FINISHED)
    row = store.get_workflow("named-fork")
    assert row.status == "failed" and "named-child" in (row.error or "")
    assert _blocked_on(store, wid, "child:named-child") and _blocked_on(store, "named-child", "go")


def test_a_fork_of_a_parent_imported_under_a_new_id_runs_its_own_child(
        db: Path | str, store: Store, tmp_path: Path) -> None:
    wid, exported = _export_blocked_relay(db, store, tmp_path)
    child = f"{wid}.0"
    imported = run_cli(db, "import", str(exported), "--id", "relay-copy")
    assert imported.returncode == 0, imported.stderr
    # Its start slot names the child its code derived from the id it ran under (wid.0), not relay-copy.0.
    forked = run_cli(db, "fork", "relay-copy", "--from-slot", "2", "--id", "copy-fork")
    assert forked.returncode == 0, forked.stderr
    mine = "copy-fork.0"
    assert _children(store, "copy-fork") == [mine]
    row = store.get_workflow(mine)
    assert (row.workflow, row.input, row.parent) == ("tally", 2, "copy-fork")
    assert store.list_commands("copy-fork")[0].value["id"] == mine
    assert [(s.name, s.payload) for s in store.list_signals(mine)] == [("go", 5)]
    _untouched(store, wid, child, [("go", 5)])

