"""`replaylog demo` seeds workflows in every state, through the real store and worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT, cli_env, run_cli
from replaylog.demo import seed
from replaylog.engine.store import open_store


def test_demo_seed_has_every_state(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    ids = seed(db, echo=lambda _line: None)
    with open_store(db, readonly=True) as store:
        rows = {key: store.get_workflow(wid) for key, wid in ids.items()}
    assert rows["completed"].status == "completed"
    assert (rows["blocked"].status, rows["blocked"].blocked_on) == ("blocked", "approval")
    assert rows["activity_failure"].status == "failed"
    assert "ActivityError" in (rows["activity_failure"].error or "")
    nd = rows["nondeterministic"]
    assert nd.status == "failed" and nd.diagnostic is not None
    assert (nd.diagnostic["slot"], nd.diagnostic["recorded"], nd.diagnostic["issued"]) == (
        0, "activity:fetch_customer", "activity:fetch_invoice")
    assert rows["running"].status == "pending"  # the demo's background worker picks it up
    sleeping, deadline = rows["sleeping"], rows["deadline"]
    assert (sleeping.status, sleeping.blocked_on) == ("blocked", "timer")
    assert sleeping.wake_at is not None and sleeping.wake_at > time.time() + 86000
    assert (deadline.status, deadline.blocked_on) == ("blocked", "approval")
    assert deadline.wake_at is not None and deadline.wake_at > time.time() + 2 * 86400 - 400
    # The agent ran its tools in parallel and its child, and now waits for a person.
    assert (rows["approval"].status, rows["approval"].blocked_on) == ("blocked", "approval:req-4")
    with open_store(db, readonly=True) as store:
        assert store.pending_approval(ids["approval"])["action"] == "issue_refund"
        assert store.family(ids["approval"])["children"][0]["status"] == "completed"


def test_demo_without_a_terminal_prints_the_tour(tmp_path: Path) -> None:
    proc = run_cli(tmp_path / "demo.db", "demo", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "refund-12 is completed" in proc.stderr
    assert "NonDeterministicError" in proc.stderr
    # The approved refund's result is printed as JSON (what `show --json` prints), not a Python dict.
    done = next(line for line in proc.stderr.splitlines() if "refund-12 is completed" in line)
    assert json.loads(done.split(" ms: ", 1)[1])["receipt"]["charged"] == -1200


def test_the_tour_names_a_command_a_newcomer_can_type(tmp_path: Path) -> None:
    # `make demo` runs .venv/bin/replaylog without activating the environment: a bare
    # `replaylog` in the hint would be "command not found".
    script = Path(sys.executable).parent / "replaylog"
    assert script.exists(), "the console script is installed beside the interpreter"
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if Path(p).resolve() != script.parent.resolve())
    proc = subprocess.run([str(script), "--db", str(tmp_path / "demo.db"), "demo"], capture_output=True,
                          text=True, env=cli_env(PATH=path), cwd=ROOT, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    hint = next(line for line in proc.stderr.splitlines() if line.startswith("Look closer:"))
    command = hint.split()[2]
    assert Path(command).resolve() == script.resolve()
    shown = subprocess.run([command, *hint.split()[3:]], capture_output=True, text=True, env=cli_env(PATH=path),
                           cwd=ROOT, timeout=60)
    assert shown.returncode == 0 and "refund-v1-8" in shown.stdout, shown.stderr


def test_a_second_demo_keeps_the_users_changes_and_says_so_and_fresh_seeds_again(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    first = run_cli(db, "demo", timeout=120)
    assert first.returncode == 0, first.stderr
    assert run_cli(db, "terminate", "reminder-ann", "--reason", "mine").returncode == 0
    second = run_cli(db, "demo", timeout=120)
    assert second.returncode == 0, second.stderr
    assert "your changes are kept" in second.stderr and "Seeding" not in second.stderr
    with open_store(db, readonly=True) as store:
        assert store.get_workflow("reminder-ann").status == "terminated"
    fresh = run_cli(db, "demo", "--fresh", timeout=120)
    assert fresh.returncode == 0 and "Seeding demo database" in fresh.stderr
    with open_store(db, readonly=True) as store:
        assert store.get_workflow("reminder-ann").status == "blocked"


def test_demo_fresh_refuses_a_database_the_demo_did_not_seed(tmp_path: Path) -> None:
    db = tmp_path / "work.db"
    assert run_cli(db, "start", "refund", "1", "--id", "real-work").returncode == 0
    proc = run_cli(db, "demo", "--fresh", timeout=120)
    assert proc.returncode == 1 and proc.stderr.startswith("replaylog: error: ")
    assert "holds workflows the demo did not seed" in proc.stderr
    with open_store(db, readonly=True) as store:
        assert [r.id for r in store.list_workflows(limit=-1)] == ["real-work"]


def test_the_seeding_table_is_aligned_in_columns() -> None:
    import tempfile

    lines: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        seed(Path(folder) / "demo.db", echo=lines.append)
    import re

    assert any(line.split()[:2] == ["refund-deadline-21", "refund_with_deadline"] for line in lines)
    # Workflow and status start at the same place on every line, however long the longest id and name.
    starts = {tuple(m.start() for m in re.finditer(r"\S+", line))[1:3] for line in lines}
    assert len(starts) == 1, lines
