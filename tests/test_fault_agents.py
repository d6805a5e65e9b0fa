"""Faults in agents' workflows: kill -9 in the middle of a parallel group, and while a child runs.

Real worker subprocesses on a real SQLite file, SIGKILL, and the ledger the activities append to.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import ROOT, cli_env, run_cli, wait_for
from replaylog.engine.core import HOLE
from replaylog.engine.store import open_store


def agent_env(tmp_path: Path) -> dict[str, str]:
    return cli_env(AGENT_LEDGER=str(tmp_path / "ledger.jsonl"), AGENT_RELEASE=str(tmp_path / "release"),
                   AGENT_DIR=str(tmp_path))


def ledger(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def runs(tmp_path: Path, tag: str) -> int:
    return sum(1 for e in ledger(tmp_path) if e["event"] == "run" and e["tag"] == tag)


def workflow_ids(db: Path | str) -> list[str]:
    with open_store(db, readonly=True) as store:
        return sorted(r.id for r in store.list_workflows(limit=-1))


def test_kill_9_in_the_middle_of_a_group_reruns_only_the_unrecorded_task(tmp_path: Path, db: Path | str) -> None:
    env = agent_env(tmp_path)
    wid = run_cli(db, "start", "held_group", "--app", "agent_app", env=env).stdout.strip().splitlines()[-1]
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen([sys.executable, "-m", "replaylog", "--db", str(db), "worker", "--app", "agent_app"],
                              env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        # The held task (slot 1) is running; the two after it finish and are committed at once,
        # before it: each outcome is committed as it completes, not in slot order.
        def later_tasks_committed() -> bool:
            with open_store(db, readonly=True) as store:
                return [c.slot for c in store.list_commands(wid)] == [0, 2, 3]

        assert wait_for(later_tasks_committed, timeout=60), (tmp_path / "worker.log").read_text()
        assert {"event": "start", "tag": "slow"} in [{k: e[k] for k in ("event", "tag")} for e in ledger(tmp_path)]
    finally:
        worker.kill()
        worker.wait(30)
        log.close()
    with open_store(db) as store:
        commands = store.load_state(wid).commands
        assert commands[1] is HOLE and [c.value for c in commands[2:]] == ["fast", "fast2"]
    (tmp_path / "release").touch()
    done = run_cli(db, "worker", "--until-idle", "--quiet", "--app", "agent_app", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    with open_store(db) as store:
        row = store.get_workflow(wid)
        assert (row.status, row.result) == ("completed", ["slow", "fast", "fast2"]), row.error
        assert [c.slot for c in store.list_commands(wid)] == [0, 1, 2, 3, 4]
    runs = [e["tag"] for e in ledger(tmp_path) if e["event"] == "run"]
    assert sorted(runs) == ["after", "before", "fast", "fast2", "slow"]  # no recorded task ran twice
    assert isinstance(db, str) or db.exists()  # (a PostgreSQL store has no file)


def test_kill_9_while_a_child_runs_starts_no_second_child(tmp_path: Path, db: Path | str) -> None:
    env = agent_env(tmp_path)
    wid = run_cli(db, "start", "parent_of_held", "--app", "agent_app", env=env).stdout.strip().splitlines()[-1]
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen([sys.executable, "-m", "replaylog", "--db", str(db), "worker", "--app", "agent_app"],
                              env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        started = tmp_path / "ledger.jsonl"
        assert wait_for(lambda: started.exists() and "in child" in started.read_text(), timeout=60), (
            tmp_path / "worker.log").read_text()
    finally:
        worker.kill()
        worker.wait(30)
        log.close()
    assert workflow_ids(db) == sorted([wid, f"{wid}.0"])
    (tmp_path / "release").touch()
    done = run_cli(db, "worker", "--until-idle", "--quiet", "--app", "agent_app", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    with open_store(db, readonly=True) as store:
        row = store.get_workflow(wid)
        assert (row.status, row.result) == ("completed", {"from child": "in child"}), row.error
        assert [c.kind for c in store.list_commands(wid)] == ["child"]
    assert workflow_ids(db) == sorted([wid, f"{wid}.0"]) and runs(tmp_path, "in child") == 1
