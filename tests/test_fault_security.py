"""Security: no code execution from stored data, private files, read-only opens, literal text."""

from __future__ import annotations

import ast
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, cli_env, run_cli, wait_for
from replaylog.engine.errors import ReadOnlyError
from replaylog.engine.store import open_store

# Modules that turn bytes into live objects (or code): none may read stored data.
UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "jsonpickle"}
UNSAFE_BUILTINS = {"eval", "exec", "compile", "__import__"}
SKIP_DIRS = {".venv", ".git", "build", "dist", "node_modules", "__pycache__", ".pytest_cache", ".ruff_cache"}


def python_sources() -> list[Path]:
    """Every Python file of the repository, not of its virtualenv."""
    found = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        found += [Path(dirpath) / f for f in filenames if f.endswith(".py")]
    return found


def unsafe_uses(path: Path) -> list[str]:
    """Imports of deserialising modules and calls of eval/exec/compile in one file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    hits = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module.split(".")[0]]
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in UNSAFE_BUILTINS:
                hits.append(f"{where}:{node.lineno}: {func.id}()")
            if isinstance(func, ast.Attribute) and func.attr in ("load", "loads", "unsafe_load") and \
                    isinstance(func.value, ast.Name) and func.value.id in UNSAFE_MODULES | {"yaml"}:
                hits.append(f"{where}:{node.lineno}: {func.value.id}.{func.attr}()")
        hits += [f"{where}:{node.lineno}: import {n}" for n in names if n in UNSAFE_MODULES]
    return hits


def test_no_source_file_unpickles_evals_or_execs_anything() -> None:
    sources = python_sources()
    assert len(sources) > 20 and ROOT / "replaylog" / "engine" / "store" / "rows.py" in sources
    hits = [hit for path in sources for hit in unsafe_uses(path)]
    assert hits == [], "stored data must only ever be read as JSON:\n" + "\n".join(hits)


def test_the_scanner_catches_what_it_looks_for(tmp_path: Path) -> None:
    bad = tmp_path / "probe.py"  # outside the repo, so the real scan never sees it
    bad.write_text("import pickle\nfrom marshal import loads\nx = eval('1')\nexec('y = 2')\npickle.loads(b'')\n")
    assert len(unsafe_uses(bad)) == 5


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_database_wal_and_shm_files_are_created_0600_even_with_a_permissive_umask(tmp_path: Path) -> None:
    db = tmp_path / "private.db"
    env = cli_env()
    cmd = [sys.executable, "-m", "replaylog", "--db", str(db)]
    # umask 000 would give a plain open() 0666: the store must not rely on the umask.
    started = subprocess.run(["sh", "-c", 'umask 000; exec "$@"', "sh", *cmd, "start", "collector", "1",
                              "--app", "fault_app"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert started.returncode == 0, started.stderr
    worker = subprocess.Popen(["sh", "-c", 'umask 000; exec "$@"', "sh", *cmd, "worker", "--app", "fault_app",
                               "-q"], env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
    try:
        wal, shm = Path(f"{db}-wal"), Path(f"{db}-shm")
        assert wait_for(lambda: wal.exists() and shm.exists() and wal.stat().st_size > 0, timeout=120)
        modes = {p.name: oct(_mode(p)) for p in (db, wal, shm)}
        assert modes == {db.name: "0o600", wal.name: "0o600", shm.name: "0o600"}
        # The worker's in-flight mark file (engine.marks) and its folder are private too.
        marks = Path(f"{db}-inflight")
        assert wait_for(lambda: any(marks.glob("*.marks")), timeout=120)
        assert oct(_mode(marks)) == "0o700"
        assert {oct(_mode(p)) for p in marks.glob("*.marks")} == {"0o600"}
    finally:
        worker.terminate()
        worker.wait(30)


def test_readonly_store_opens_mode_ro_and_refuses_every_write(db_path: Path) -> None:
    with open_store(db_path) as store:
        wid = store.start_workflow("collector", 1)
    ro = open_store(db_path, readonly=True)
    try:
        # The connection itself is read-only (mode=ro), not just the store's methods.
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            ro._conn.execute("DELETE FROM workflows")
        for write in (lambda: ro.start_workflow("collector", 1), lambda: ro.send_signal(wid, "a", 1),
                      lambda: ro.claim("me", ttl=5)):
            with pytest.raises(ReadOnlyError):
                write()
        assert ro.get_workflow(wid).status == "pending"
    finally:
        ro.close()
    with pytest.raises(Exception, match="no database"):
        open_store(db_path.with_name("absent.db"), readonly=True)
    assert not db_path.with_name("absent.db").exists()


def test_list_and_show_create_nothing_and_change_nothing(tmp_path: Path) -> None:
    """list and show open with mode=ro: on a missing file they create nothing."""
    absent = tmp_path / "absent.db"
    for args in (("list",), ("show", "wf-x")):
        res = run_cli(absent, *args)
        assert res.returncode == 1 and "no database" in res.stderr
    assert list(tmp_path.iterdir()) == []


ESCAPES = ("\x1b", "\x07", "\x9b")


def test_escapes_and_markup_in_names_errors_and_payloads_print_literally(db_path: Path) -> None:
    evil_name = "evil\x1b[2J[bold]name[/bold]"
    env = cli_env(COLUMNS="400")
    app = ("--app", "fault_app")
    evil = run_cli(db_path, "start", evil_name, *app, env=env).stdout.strip()
    markup = run_cli(db_path, "start", "bad_markup", '"\\u001b]0;title\\u0007[link=x]in[/link]"', *app,
                     env=env).stdout.strip()
    assert evil and markup
    worker = run_cli(db_path, "worker", *app, "--until-idle", env=env)  # not quiet: its event log too
    assert worker.returncode == 0, worker.stderr
    sig = run_cli(db_path, "signal", evil, "\x1b[31m[red]sig[/red]", '{"p": "\\u001b[5m[blink]x[/blink]"}', env=env)
    outputs = [worker, sig]
    outputs += [run_cli(db_path, *args, env=env) for args in (
        ("list",), ("list", "--json"), ("show", evil), ("show", markup), ("show", "--json", markup),
        ("check", evil, *app), ("signal", evil, "\x1b[2Jnope\x07", "not json"),
    )]
    for res in outputs:
        for ch in ESCAPES:
            assert ch not in res.stdout and ch not in res.stderr, (res.args, repr(res.stdout + res.stderr))
    shown_evil, shown_markup = outputs[4].stdout, outputs[5].stdout
    # Rich markup is shown as the characters it is made of, never applied.
    assert "evil\\x1b[2J[bold]name[/bold]" in outputs[2].stdout
    assert "[bold red]boom[/bold red]" in shown_markup and "\\x1b[31mred\\x1b[0m" in shown_markup
    assert "[link=x]in[/link]" in shown_markup
    assert "\\x1b[31m[red]sig[/red]" in shown_evil and "[blink]x[/blink]" in shown_evil
    # JSON output keeps the stored text exactly (escaped by the JSON encoder).
    data = json.loads(outputs[6].stdout)
    assert "\x1b[31mred\x1b[0m [bold red]boom[/bold red]" in data["error"]
    assert "invalid JSON" in outputs[-1].stderr and "\\x1b[2Jnope\\x07" in outputs[-1].stderr
