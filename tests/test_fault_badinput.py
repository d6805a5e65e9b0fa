"""Bad input: each gets a one-line error (no traceback), and nothing is written or lost.

Every case runs the real CLI on a real database and compares what the database holds
(or, for a damaged file, its bytes) before and after.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, cli_env, run_cli
from replaylog.engine.store import open_store

APP = ("--app", "fault_app")


def one_line_error(res: subprocess.CompletedProcess[str]) -> str:
    """Assert the command failed with exactly one line on stderr, no traceback; return it."""
    assert res.returncode != 0, res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("replaylog: error: "), res.stderr
    assert "Traceback" not in res.stderr
    return lines[0]


def dump(db: Path) -> list[Any]:
    """Everything the database holds, read through a read-only connection."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
                for t in ("workflows", "commands", "signals", "inflight")]
    finally:
        conn.close()


def digest(path: Path) -> str:
    """The file's bytes, hashed."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def seeded(db_path: Path) -> dict[str, str]:
    """A database with one blocked, one completed and one failed workflow."""
    env = cli_env()
    ids = {
        "blocked": run_cli(db_path, "start", "collector", "1", *APP, env=env).stdout.strip(),
        "completed": run_cli(db_path, "start", "chain", '{"n": 2, "seed": 3}', *APP, env=env).stdout.strip(),
        "failed": run_cli(db_path, "start", "bad_code", *APP, env=env).stdout.strip(),
    }
    assert run_cli(db_path, "worker", *APP, "--until-idle", "-q", env=env).returncode == 0
    with open_store(db_path) as store:
        assert {k: store.get_workflow(v).status for k, v in ids.items()} == {k: k for k in ids}
    return ids


def test_cli_refusals_are_one_line_and_write_nothing(db_path: Path, tmp_path: Path,
                                                      seeded: dict[str, str]) -> None:
    big = tmp_path / "big.json"
    big.write_text(json.dumps("x" * (1024 * 1024)))  # just over the default cap of 1 MiB
    bad_app = tmp_path / "bad_app.py"
    bad_app.write_text("raise RuntimeError('broken at import')\n")
    exit_app = tmp_path / "exit_app.py"
    exit_app.write_text("import sys\nsys.exit(3)\n")
    before = dump(db_path)
    cases: dict[str, tuple[tuple[str, ...], str, dict[str, str]]] = {
        "invalid JSON input": (("start", "chain", '{"n": 2,', *APP), "invalid JSON", {}),
        "invalid JSON payload": (("signal", seeded["blocked"], "a", "[1, 2"), "invalid JSON", {}),
        "input over the default cap": (("start", "chain", f"@{big}", *APP), "over the cap of 1048576", {}),
        "payload over the default cap": (("signal", seeded["blocked"], "a", f"@{big}"), "over the cap", {}),
        "payload over --max-payload": (("--max-payload", "10", "signal", seeded["blocked"], "a", '"0123456789"'),
                                       "over the cap of 10 bytes", {}),
        "payload over $REPLAYLOG_MAX_PAYLOAD": (("signal", seeded["blocked"], "a", '"0123456789"'),
                                                 "over the cap of 10 bytes", {"REPLAYLOG_MAX_PAYLOAD": "10"}),
        "signal to an unknown workflow": (("signal", "wf-nope", "a"), "no workflow with id 'wf-nope'", {}),
        "signal to a completed workflow": (("signal", seeded["completed"], "a"), "is completed", {}),
        "signal to a failed workflow": (("signal", seeded["failed"], "a"), "is failed", {}),
        "unknown workflow name": (("start", "no_such_workflow", *APP), "unknown workflow 'no_such_workflow'", {}),
        "app that raises on import": (("start", "chain", "--app", str(bad_app)), "broken at import", {}),
        "app that exits on import": (("start", "chain", "--app", str(exit_app)), "failed to import", {}),
        "worker with an app that fails to import": (("worker", "--app", str(bad_app), "--until-idle"),
                                                     "broken at import", {}),
        "app module that does not exist": (("start", "chain", "--app", "no_such_module"), "no_such_module", {}),
    }
    for label, (args, expect, extra) in cases.items():
        line = one_line_error(run_cli(db_path, *args, env=cli_env(**extra)))
        assert expect in line, f"{label}: {line}"
    assert dump(db_path) == before, "a refused command wrote to the database"
    # Nothing lost either: the blocked workflow still takes its signals and completes.
    assert run_cli(db_path, "signal", seeded["blocked"], "a", '"A"').returncode == 0
    assert run_cli(db_path, "signal", seeded["blocked"], "b", '"B"').returncode == 0
    assert run_cli(db_path, "worker", *APP, "--until-idle", "-q").returncode == 0
    with open_store(db_path) as store:
        assert store.get_workflow(seeded["blocked"]).result == {"a": ["A"], "b": ["B"]}


def test_bad_workflow_and_activity_code_fails_its_workflow_clearly_and_the_worker_carries_on(db_path: Path) -> None:
    ids = {name: run_cli(db_path, "start", name, *APP).stdout.strip()
           for name in ("bad_value", "bad_exception", "bad_code", "bad_activity_name")}
    good = run_cli(db_path, "start", "chain", '{"n": 3, "seed": 5}', *APP).stdout.strip()
    res = run_cli(db_path, "worker", *APP, "--until-idle", "-q")
    # The failures' own tracebacks are shown indented under their lines; the worker's would not be.
    assert res.returncode == 0 and not any(line.startswith("Traceback") for line in res.stderr.splitlines()), res.stderr
    with open_store(db_path) as store:
        rows = {name: store.get_workflow(wid) for name, wid in ids.items()}
        cmds = {name: store.list_commands(wid) for name, wid in ids.items()}
        assert store.get_workflow(good).status == "completed"
    assert all(r.status == "failed" and r.error and "\n" not in r.error for r in rows.values())
    # A value JSON cannot hold is never recorded: the slot stays empty, the error names it.
    assert "slot 0: the value activity 'returns_set' returned is of type set" in rows["bad_value"].error
    assert cmds["bad_value"] == []
    # An exception whose text cannot be produced is still recorded as the slot's failure.
    assert [(c.ok, c.error, c.attempts) for c in cmds["bad_exception"]] == [
        (False, "Unprintable: <exception text could not be converted>", 2)]
    assert rows["bad_code"].error == "workflow code raised KeyError: \"the workflow's own bug\""
    assert [c.name for c in cmds["bad_code"]] == ["quick"]
    assert "unknown activity 'no_such_activity'" in rows["bad_activity_name"].error
    for wid in ids.values():
        shown = run_cli(db_path, "show", wid)
        assert shown.returncode == 0 and "Traceback" not in shown.stderr


# ---------------------------------------------------------------- the database file itself


def _every_command(db: Path, wid: str) -> Iterator[tuple[str, subprocess.CompletedProcess[str]]]:
    for args in (("list",), ("show", wid), ("start", "chain", '{"n": 1, "seed": 1}', *APP),
                 ("signal", wid, "a"), ("worker", *APP, "--until-idle", "-q"), ("check", "--all", *APP)):
        yield " ".join(args[:1]), run_cli(db, *args, timeout=60)


def test_a_file_that_is_not_sqlite_is_refused_in_one_line_and_left_untouched(tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    db.write_text("these are my notes, not a database\n" * 200)
    before = digest(db)
    for label, res in _every_command(db, "wf-x"):
        assert "not a usable SQLite database" in one_line_error(res), label
    assert digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


def test_a_sqlite_file_of_another_application_is_refused_and_left_untouched(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE mine (x)")
    conn.commit()
    conn.close()
    before = digest(db)
    for label, res in _every_command(db, "wf-x"):
        assert "not a replaylog one" in one_line_error(res), label
    assert digest(db) == before


@pytest.mark.parametrize("offset", [100, 4096], ids=["header", "first-table-page"])
def test_a_corrupted_database_is_refused_in_one_line(db_path: Path, seeded: dict[str, str], offset: int) -> None:
    # Close cleanly first so everything is in the main file, then damage it.
    open_store(db_path).close()
    with db_path.open("r+b") as fh:
        fh.seek(offset)
        fh.write(b"\xde\xad\xbe\xef" * 256)
    before = digest(db_path)
    for label, res in _every_command(db_path, seeded["blocked"]):
        line = one_line_error(res) if res.returncode else None
        if line is None:
            # SQLite finds damage only on the pages a command reads: a command that never
            # touched them may succeed, and then must have left the damaged file as it was.
            assert label in ("worker", "check"), f"{label} succeeded on a damaged file"
            continue
        assert "malformed" in line or "not a usable" in line, f"{label}: {line}"
    assert digest(db_path) == before


def test_a_newer_schema_version_is_refused_and_left_untouched(db_path: Path, seeded: dict[str, str]) -> None:
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = dump(db_path)
    for label, res in _every_command(db_path, seeded["blocked"]):
        assert "schema version 99, newer than this replaylog understands" in one_line_error(res), label
    assert dump(db_path) == before


def test_an_immutable_database_refuses_writes_in_one_line_and_still_reads(db_path: Path,
                                                                           seeded: dict[str, str]) -> None:
    """Tests run as root, for whom mode 0400 denies nothing: chattr +i really does."""
    before = dump(db_path)
    if subprocess.run(["chattr", "+i", str(db_path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not permitted here")
    try:
        for args in (("start", "chain", '{"n": 1, "seed": 1}', *APP), ("signal", seeded["blocked"], "a"),
                     ("worker", *APP, "--until-idle")):
            assert "is read-only" in one_line_error(run_cli(db_path, *args)), args
        # Reading opens with mode=ro, so it still works on a file nobody may write.
        listed = run_cli(db_path, "list", "--json")
        assert listed.returncode == 0 and {r["id"] for r in json.loads(listed.stdout)} == set(seeded.values())
        assert run_cli(db_path, "show", "--json", seeded["blocked"]).returncode == 0
    finally:
        subprocess.run(["chattr", "-i", str(db_path)], check=True)
    assert dump(db_path) == before


def test_a_0400_database_is_read_only_for_its_non_root_owner() -> None:
    """The real 0400 case: the owner is an ordinary user (nobody), for whom 0400 denies writes."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not available")
    # pytest's tmp_path sits in a 0700 folder of root's: use one nobody can reach.
    home = Path(tempfile.mkdtemp(prefix="replaylog-nobody-"))
    try:
        home.chmod(0o755)
        db = home / "r.db"
        wid = run_cli(db, "start", "collector", "1", *APP).stdout.strip()
        open_store(db).close()
        for p in [home, *home.iterdir()]:
            shutil.chown(p, 65534, 65534)
        db.chmod(0o400)
        before = dump(db)

        def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                 sys.executable, "-m", "replaylog", "--db", str(db), *args],
                capture_output=True, text=True, env=cli_env(), cwd=ROOT, timeout=60)

        probe = as_nobody("--version")
        if probe.returncode != 0:
            pytest.skip(f"cannot run the CLI as nobody here: {probe.stderr.strip()[:200]}")
        for args in (("start", "chain", '{"n": 1, "seed": 1}', *APP), ("signal", wid, "a"),
                     ("worker", *APP, "--until-idle")):
            assert "is read-only" in one_line_error(as_nobody(*args)), args
        # list and show open the file with mode=ro, so they work where writing is denied.
        listed = as_nobody("list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [r["id"] for r in json.loads(listed.stdout)] == [wid]
        shown = as_nobody("show", wid)
        assert shown.returncode == 0 and wid in shown.stdout, shown.stderr
        assert dump(db) == before
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_worker_that_meets_a_damaged_page_stops_with_one_line_instead_of_retrying(db_path: Path) -> None:
    """Damage SQLite finds only mid-run (here: the commands table) must not be retried forever."""
    assert run_cli(db_path, "start", "chain", '{"n": 2, "seed": 1}', *APP).returncode == 0
    assert run_cli(db_path, "worker", *APP, "--until-idle", "-q").returncode == 0
    assert run_cli(db_path, "start", "chain", '{"n": 2, "seed": 2}', *APP).returncode == 0
    open_store(db_path).close()  # checkpointed: every page is in the main file
    conn = sqlite3.connect(db_path)
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'commands'").fetchone()[0]
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with db_path.open("r+b") as fh:
        fh.seek((root - 1) * page)
        fh.write(b"\xde\xad\xbe\xef" * (page // 4))
    res = run_cli(db_path, "worker", *APP, "--until-idle", "-q", timeout=60)
    assert "is damaged" in one_line_error(res) and "integrity_check" in res.stderr
