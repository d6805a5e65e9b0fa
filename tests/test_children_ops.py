"""Cancelling or terminating a parent does the same to its unfinished children, at any depth.

Real worker subprocesses on a real SQLite file; the audit trail names each child's action.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_fault_agents import agent_env, ledger, runs

from conftest import ROOT, run_cli, wait_for
from replaylog.engine.store import open_store


def statuses(db: Path | str, *wids: str) -> list[str]:
    with open_store(db, readonly=True) as store:
        return [store.get_workflow(w).status for w in wids]


def audit(db: Path | str, wid: str) -> list[tuple[str, str | None, str | None]]:
    with open_store(db, readonly=True) as store:
        return [(a.action, a.reason, a.detail) for a in store.list_audit(wid)]


def start_family(db: Path | str, tmp_path: Path) -> tuple[str, str, str]:
    env = agent_env(tmp_path)
    wid = run_cli(db, "start", "family", "--app", "agent_app", env=env).stdout.strip().splitlines()[-1]
    done = run_cli(db, "worker", "--until-idle", "--quiet", "--app", "agent_app", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    child, grandchild = f"{wid}.0", f"{wid}.0.0"
    assert statuses(db, wid, child, grandchild) == ["blocked"] * 3
    return wid, child, grandchild


def test_cancelling_a_parent_cancels_its_unfinished_children_and_theirs(tmp_path: Path, db: Path | str) -> None:
    env = agent_env(tmp_path)
    wid, child, grandchild = start_family(db, tmp_path)
    said = run_cli(db, "cancel", wid, "--reason", "customer left", env=env)
    assert said.returncode == 0, said.stderr
    for w in (child, grandchild):
        assert audit(db, w)[-1] == ("cancel", "customer left", f"with its parent, from {wid}")
    assert audit(db, wid)[-1] == ("cancel", "customer left", None)
    with open_store(db, readonly=True) as store:
        assert [store.get_workflow(w).cancel_requested for w in (wid, child, grandchild)] == ["customer left"] * 3
    done = run_cli(db, "worker", "--until-idle", "--quiet", "--app", "agent_app", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert statuses(db, wid, child, grandchild) == ["cancelled"] * 3
    assert runs(tmp_path, "grandchild compensates") == 1  # the grandchild's code saw the cancel, once


def test_cancelling_a_parent_leaves_a_finished_child_alone(tmp_path: Path, db: Path | str) -> None:
    env = agent_env(tmp_path)
    wid, child, grandchild = start_family(db, tmp_path)
    assert run_cli(db, "cancel", grandchild, env=env).returncode == 0  # the grandchild alone first
    done = run_cli(db, "worker", "--until-idle", "--quiet", "--app", "agent_app", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    # Its parent (the child) was told, as when a child fails: ChildWorkflowError ended it failed.
    assert statuses(db, wid, child, grandchild) == ["failed", "failed", "cancelled"]


def test_terminating_a_parent_terminates_its_children_and_fences_out_a_running_one(
        tmp_path: Path, db: Path | str) -> None:
    env = agent_env(tmp_path)
    wid = run_cli(db, "start", "parent_of_held", "--app", "agent_app", env=env).stdout.strip().splitlines()[-1]
    child = f"{wid}.0"
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen([sys.executable, "-m", "replaylog", "--db", str(db), "worker", "--app", "agent_app"],
                              env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        # The child's activity is running, held, in the worker.
        assert wait_for(lambda: any(e["tag"] == "in child" for e in ledger(tmp_path)), timeout=60), (
            tmp_path / "worker.log").read_text()
        said = run_cli(db, "terminate", wid, "--reason", "runaway", env=env)
        assert said.returncode == 0, said.stderr
        assert statuses(db, wid, child) == ["terminated", "terminated"]
        assert audit(db, child)[-1] == ("terminate", "runaway", f"with its parent, from {wid}")
        (tmp_path / "release").touch()  # the held activity returns: its outcome must not be recorded
        # The worker tried to commit it and was refused (the terminate moved the lease epoch on).
        worker_log = tmp_path / "worker.log"
        assert wait_for(lambda: f"{child} lease lost" in worker_log.read_text(), timeout=60), worker_log.read_text()
        assert runs(tmp_path, "in child") == 1
    finally:
        worker.terminate()
        worker.wait(60)
        log.close()
    with open_store(db, readonly=True) as store:
        assert [store.get_workflow(w).status for w in (wid, child)] == ["terminated", "terminated"]
        assert store.list_commands(child) == []  # the fenced-out worker recorded nothing
        assert store.get_workflow(child).error == "terminated by an operator: runaway"


def test_terminating_a_child_alone_tells_its_parent(tmp_path: Path, db: Path | str) -> None:
    env = agent_env(tmp_path)
    wid, child, grandchild = start_family(db, tmp_path)
    assert run_cli(db, "terminate", child, "--reason", "stuck", env=env).returncode == 0
    assert statuses(db, wid, child, grandchild) == ["pending", "terminated", "terminated"]
    done = run_cli(db, "worker", "--until-idle", "--quiet", "--app", "agent_app", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    with open_store(db, readonly=True) as store:
        row = store.get_workflow(wid)
    assert row.status == "failed" and "terminated by an operator: stuck" in (row.error or "")
