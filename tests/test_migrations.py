"""Upgrades keep every workflow: the shared migrations on both backends, and a database 0.1.0 made.

`tests/fixtures/v010.db` and `tests/fixtures/v010-postgres.sql` were made by 0.1.0's code
(`tests/fixtures/make_v010.py`) with `tests/fixtures/v010_app.py`: today's code must open
them, list them, and run every workflow they left blocked, pending or stranded to its end,
after the whole chain of migrations.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_server import PGServer

from conftest import ROOT, cli_env, on_server, run_cli, sql, wait_for
from replaylog.engine.errors import SchemaVersionError
from replaylog.engine.filters import workflow_filter
from replaylog.engine.store import Store, open_store, slot_key
from replaylog.engine.store.shared import migrations
from replaylog.engine.store.shared.migrations import AddColumn, AddIndex, Migration, Sql, Transform

FIXTURES = ROOT / "tests" / "fixtures"
APP_ENV = {"PYTHONPATH": f"{FIXTURES}", "REPLAYLOG_APP": "v010_app"}

# What 0.1.0 left in the fixtures, by id, and what each ends as once today's worker has run it.
STATES_AT_010 = {
    "done": "completed", "broke": "failed", "sig": "blocked", "dl": "blocked", "nap": "blocked",
    "appr": "blocked", "fan": "blocked", "par": "blocked", "par.child": "blocked",
    "cancelme": "pending", "later": "pending", "stuck": "running",
}
RESULTS = {
    "done": 42, "sig": 16, "dl": 6, "nap": "woke", "appr": {"approved": True, "amount": 30},
    "fan": [10, 12, 14], "par.child": 10, "par": 20, "later": 26, "stuck": 3,
}


def _version(store: Store) -> int:
    if on_server(store):
        return int(sql(store, "SELECT version FROM meta")[0][0])
    return int(sql(store, "PRAGMA user_version")[0][0])


def _columns(store: Store, table: str) -> list[str]:
    if on_server(store):
        return [r[0] for r in sql(store, "SELECT column_name FROM information_schema.columns WHERE"
                                         " table_schema = 'replaylog' AND table_name = ? ORDER BY ordinal_position",
                                  (table,))]
    return [r[1] for r in sql(store, f"PRAGMA table_info({table})")]


def load_010(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Path | str:
    """A fresh copy of the database 0.1.0 made, on `backend`, as the CLI's --db takes it."""
    if backend == "sqlite":
        db = tmp_path / "v010.db"
        shutil.copyfile(FIXTURES / "v010.db", db)
        return db
    server: PGServer = request.getfixturevalue("pg_server")
    url = server.fresh_database("v010")
    with psycopg.connect(url, autocommit=True) as conn:
        # pg_dump's plain SQL, many statements in one string: the simple query protocol.
        psycopg.ClientCursor(conn).execute((FIXTURES / "v010-postgres.sql").read_text())  # type: ignore[arg-type]
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def old_db(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """The 0.1.0 database, once per backend."""
    return load_010(request.param, tmp_path, request)


def _later(version: int) -> Migration:
    """A migration as a later version would add one: columns added and filled, then a rebuild
    SQLite's ALTER TABLE cannot do (one renamed, one dropped, past the table's partial
    indexes), then an index on the renamed column. The code never names these columns."""
    return Migration(version, "a later version's changes", (
        AddColumn("workflows", "note", "text"),
        AddColumn("workflows", "scratch", "integer"),
        Sql(sqlite="UPDATE workflows SET note = 'from ' || workflow, scratch = 1",
            postgres="UPDATE replaylog.workflows SET note = 'from ' || workflow, scratch = 1"),
        Transform("workflows", rename={"note": "remark"}, drop=frozenset({"scratch"})),
        AddIndex("workflows_remark", "workflows", ("remark",), where="remark IS NOT NULL"),
    ))


def _broken(version: int) -> Migration:
    return Migration(version, "fails half-way", (
        AddColumn("workflows", "half_done", "text"),
        Sql(sqlite="SELECT no_such_column FROM workflows", postgres="SELECT no_such_column FROM replaylog.workflows"),
    ))


def _register(monkeypatch: pytest.MonkeyPatch, *made: Migration) -> None:
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, *made])


def _indexes(store: Store) -> set[str]:
    if on_server(store):
        return {r[0] for r in sql(store, "SELECT indexname FROM pg_indexes WHERE schemaname = 'replaylog'")}
    return {r[0] for r in sql(store, "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")}


def test_the_migrations_are_numbered_one_after_another_from_version_two() -> None:
    assert [m.version for m in migrations.MIGRATIONS] == list(range(2, migrations.latest() + 1))
    assert migrations.pending(1) == migrations.MIGRATIONS and migrations.pending(migrations.latest()) == []


def test_a_gap_in_the_migrations_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    skipping = Migration(migrations.latest() + 2, "skips", ())  # one number left out
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, skipping])
    with pytest.raises(SchemaVersionError, match="the migrations are numbered"):
        migrations.pending(1)


def test_failures_have_traceback_columns_from_migration_two(store: Store) -> None:
    assert "traceback" in _columns(store, "workflows") and "traceback" in _columns(store, "commands")
    assert [tuple(r[:2]) for r in sql(store, "SELECT version, summary FROM migrations ORDER BY version")] == [
        (m.version, m.summary) for m in migrations.MIGRATIONS]


def test_a_later_migration_upgrades_a_database_in_one_go_keeping_every_row(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_store(store_url) as store:
        store.start_workflow("refund", 7, workflow_id="wf-1")
        before = _version(store)
        indexes = _indexes(store)
    _register(monkeypatch, _later(before + 1))
    with pytest.raises(SchemaVersionError, match=f"schema version {before}, older than this replaylog's "
                       f"\\({before + 1}\\); run `replaylog migrate`"):
        open_store(store_url, readonly=True)  # a reader never upgrades
    with open_store(store_url) as store:
        assert store.schema_upgrade == (before, before + 1) and _version(store) == before + 1
        columns = _columns(store, "workflows")
        assert "remark" in columns and "note" not in columns and "scratch" not in columns
        assert sql(store, "SELECT id, remark FROM workflows") == [("wf-1", "from refund")]
        assert store.get_workflow("wf-1").input == 7
        # The partial indexes the rebuild had to drop are back, and the new one is there.
        assert _indexes(store) == indexes | {"workflows_remark"}
        assert sql(store, "SELECT version FROM migrations ORDER BY version")[-1] == (before + 1,)
        store.start_workflow("refund", 8, workflow_id="wf-2")  # and the code writes as before
    with open_store(store_url, readonly=True) as store:
        assert store.schema_upgrade == (before + 1, before + 1)


def _attributes_slot(store: Store, seq: int, slot: int, value: str) -> None:
    """An `attributes` slot written by hand, as a worker of the schema's time wrote it."""
    sql(store, "INSERT INTO commands (slot_key, kind, name, ok, value, attempts, recorded_at)"
               " VALUES (?, 'attributes', 'k', ?, ?, 1, 0)", (slot_key(seq, slot), True, value))


def _has_attributes_trigger(store: Store) -> bool:
    if on_server(store):
        return bool(sql(store, "SELECT 1 FROM pg_trigger WHERE tgname = 'commands_search_attributes'"))
    return bool(sql(store, "SELECT 1 FROM sqlite_master WHERE type = 'trigger'"
                           " AND name = 'commands_search_attributes'"))


def test_search_attributes_indexed_before_the_store_wrote_them_survive_the_upgrade(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A database of schema 13, whose search attributes a trigger on commands indexed.
    with monkeypatch.context() as m:
        m.setattr(migrations, "MIGRATIONS", [x for x in migrations.MIGRATIONS if x.version <= 13])
        with open_store(store_url) as store:
            assert _has_attributes_trigger(store)
            for wid in ("kept", "lost", "continued"):
                store.start_workflow("tagged", None, workflow_id=wid)
            seqs = dict(sql(store, "SELECT id, seq FROM workflows"))
            for wid in ("kept", "lost"):
                _attributes_slot(store, seqs[wid], 0, '{"customer": "c-42", "tier": 3, "vip": true}')
                _attributes_slot(store, seqs[wid], 1, '{"tier": "gold", "vip": null}')
            # Continued as new: its first run (its old seq) set two keys, its current run (a new,
            # higher seq, as ctx.continue_as_new takes) changed one.
            earlier, current = seqs["continued"], max(seqs.values()) + 1
            sql(store, "UPDATE workflows SET seq = ?, run = 2 WHERE id = 'continued'", (current,))
            sql(store, "INSERT INTO runs (workflow_id, run, seq, input, slots, ended_at)"
                       " VALUES ('continued', 1, ?, NULL, 1, 0)", (earlier,))
            _attributes_slot(store, earlier, 0, '{"customer": "c-7", "tier": 1}')
            _attributes_slot(store, current, 0, '{"tier": 2}')
            assert store.search_attributes(["kept"]) == {"kept": {"customer": "c-42", "tier": "gold"}}
            # An index that lost rows (or never had them) is made again from the slots.
            sql(store, "DELETE FROM search_attributes WHERE workflow_id IN ('lost', 'continued')")
    with open_store(store_url) as store:
        assert store.schema_upgrade == (13, migrations.latest())
        assert not _has_attributes_trigger(store)
        expected = {"customer": "c-42", "tier": "gold"}
        assert store.search_attributes(["kept", "lost", "continued"]) == {
            "kept": expected, "lost": expected, "continued": {"customer": "c-7", "tier": "2"}}
        found = store.list_workflows(where=workflow_filter({}, {"customer": "c-42", "tier": "gold"}), limit=-1)
        assert {w.id for w in found} == {"kept", "lost"}


def test_a_migration_that_fails_leaves_the_database_as_it_was(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_store(store_url) as store:
        store.start_workflow("refund", 7, workflow_id="wf-1")
        before = _version(store)
    _register(monkeypatch, _later(before + 1), _broken(before + 2))
    with pytest.raises(Exception, match="no_such_column"):
        open_store(store_url)
    with monkeypatch.context() as m:
        m.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:-2])
        with open_store(store_url) as store:
            # Neither the migration that worked nor the half of the one that failed.
            assert _version(store) == before
            assert {"remark", "half_done"}.isdisjoint(_columns(store, "workflows"))
            assert store.get_workflow("wf-1").status == "pending"
    monkeypatch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:-1])
    with open_store(store_url) as store:  # and it upgrades once the migrations work
        assert _version(store) == before + 1 and store.get_workflow("wf-1").input == 7


def test_a_database_newer_than_this_replaylog_is_refused_untouched(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as m:
        _register(m, _later(migrations.latest() + 1))
        with open_store(store_url) as store:  # written by a replaylog one version ahead
            store.start_workflow("refund", 7, workflow_id="wf-1")
            ahead = _version(store)
    file = Path(store_url.removeprefix("sqlite:///")) if store_url.startswith("sqlite:") else None
    before = file.read_bytes() if file else None
    for readonly in (False, True):
        with pytest.raises(SchemaVersionError, match=f"schema version {ahead}, newer than this replaylog "
                           f"understands \\({ahead - 1}\\); upgrade replaylog"):
            open_store(store_url, readonly=readonly)
    assert (file.read_bytes() if file else None) == before
    with monkeypatch.context() as m:
        _register(m, _later(ahead))
        with open_store(store_url, readonly=True) as store:
            assert _version(store) == ahead and [w.id for w in store.list_workflows()] == ["wf-1"]


def test_a_database_made_by_a_development_build_before_010_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "dev.db"
    shutil.copyfile(FIXTURES / "v010.db", db)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 2")  # what the development builds wrote; no migrations table
    conn.close()
    before = db.read_bytes()
    for readonly in (False, True):
        with pytest.raises(SchemaVersionError, match=re.escape(
                "made by a development build of replaylog before 0.1.0 (schema version 2), which cannot be"
                " upgraded: make it again")):
            open_store(db, readonly=readonly)
    assert db.read_bytes() == before


def _workflows(db: Path | str) -> dict[str, dict[str, Any]]:
    listed = run_cli(db, "list", "--json", env=cli_env(**APP_ENV))
    assert listed.returncode == 0, listed.stderr
    return {w["id"]: w for w in json.loads(listed.stdout)}


def test_a_010_database_opens_lists_and_runs_every_workflow_to_its_end(old_db: Path | str) -> None:
    refused = run_cli(old_db, "list", env=cli_env(**APP_ENV))
    assert refused.returncode == 1 and "run `replaylog migrate`" in refused.stderr  # list reads only
    migrated = run_cli(old_db, "migrate")
    assert migrated.returncode == 0 and f"schema version 1 -> {migrations.latest()}" in migrated.stdout
    assert {wid: w["status"] for wid, w in _workflows(old_db).items()} == STATES_AT_010
    with open_store(old_db) as store:
        assert "card declined" in (store.get_workflow("broke").error or "")
        assert [c.parallel for c in store.list_commands("fan")] == [True, True, True]
        # Recorded before groups were told apart: its consecutive tasks read as one group.
        assert [c.parallel_group for c in store.list_commands("fan")] == [0, 0, 0]
        assert store.pending_approval("appr") is not None
        for wid, payload in (("sig", 5), ("dl", 1), ("fan", 10), ("par.child", 3)):
            store.send_signal(wid, "go", payload)
        store.answer_approval("appr", approved=True, by="test")
    worker = subprocess.Popen([sys.executable, "-m", "replaylog", "--db", str(old_db), "worker", "--quiet",
                               "--app", "v010_app", "--lease", "1"], env=cli_env(**APP_ENV), cwd=ROOT,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with open_store(old_db, readonly=True) as store:
            ended = wait_for(lambda: all(w.status in ("completed", "failed", "cancelled")
                                         for w in store.list_workflows()), timeout=90)
            listed = {w.id: w for w in store.list_workflows()}
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=60)
    assert ended, {wid: w.status for wid, w in listed.items()}
    assert {wid: w.result for wid, w in listed.items() if w.status == "completed"} == RESULTS, err
    assert listed["broke"].status == "failed" and listed["cancelme"].status == "cancelled"


def test_two_processes_opening_an_old_database_at_once_migrate_it_once(old_db: Path | str) -> None:
    runs = [subprocess.Popen([sys.executable, "-m", "replaylog", "--db", str(old_db), "migrate"], env=cli_env(),
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    said = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], said
    outs = sorted(out for out, _ in said)
    latest = migrations.latest()
    assert outs[0].endswith(f"schema version 1 -> {latest}\n")
    assert outs[1].endswith(f"schema version {latest}, up to date\n")
    with open_store(old_db, readonly=True) as store:
        applied = [r[0] for r in sql(store, "SELECT version FROM migrations ORDER BY version")]
    assert applied == list(range(2, latest + 1))


Shape = dict[str, object]


def _sqlite_shape(db: Path) -> Shape:
    conn = sqlite3.connect(db)
    try:
        # The full-text index of errors is an FTS5 table (and its shadow tables) on SQLite, an
        # index on an expression on PostgreSQL: compared by what it finds (tests/test_filters.py).
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                  if not r[0].startswith("workflows_fts")]
        views = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
        columns = {t: {r[1] for r in conn.execute(f"PRAGMA table_info({t})")} for t in tables}
        indexes = set()
        for t in tables:
            for _, name, unique, origin, partial in conn.execute(f"PRAGMA index_list({t})"):
                if origin != "pk":  # a primary key: compared as the table's own key, not as an index
                    cols = tuple(r[2] for r in conn.execute(f"PRAGMA index_info({name})"))
                    indexes.add((t, cols, bool(unique), bool(partial)))
        pk = {t: tuple(r[1] for r in sorted(conn.execute(f"PRAGMA table_info({t})"), key=lambda r: r[5]) if r[5])
              for t in tables}
    finally:
        conn.close()
    return {"tables": set(tables), "views": views, "columns": columns, "indexes": indexes, "keys": pk}


def _postgres_shape(url: str) -> Shape:
    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'replaylog'"
            " AND table_type = 'BASE TABLE' AND table_name <> 'meta'")]  # meta: SQLite's PRAGMAs instead
        views = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.views WHERE table_schema = 'replaylog'")}
        columns: dict[str, set[str]] = {t: set() for t in tables}
        for t, c in conn.execute("SELECT table_name, column_name FROM information_schema.columns"
                                 " WHERE table_schema = 'replaylog'"):
            if t in columns:
                columns[t].add(c)
        indexes = set()
        pk: dict[str, tuple[str, ...]] = {t: () for t in tables}
        for t, cols, unique, primary, partial in conn.execute(
                "SELECT t.relname, array(SELECT a.attname FROM unnest(ix.indkey) WITH ORDINALITY k(num, n)"
                " JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.num ORDER BY k.n),"
                " ix.indisunique, ix.indisprimary, ix.indpred IS NOT NULL"
                " FROM pg_index ix JOIN pg_class t ON t.oid = ix.indrelid"
                " JOIN pg_namespace ns ON ns.oid = t.relnamespace WHERE ns.nspname = 'replaylog'"):
            if t not in pk:
                continue
            if primary:
                pk[t] = tuple(cols)
            elif cols:  # (no columns: an index on an expression, the full-text one)
                indexes.add((t, tuple(cols), bool(unique), bool(partial)))
    return {"tables": set(tables), "views": views, "columns": columns, "indexes": indexes, "keys": pk}


def test_both_backends_have_the_same_tables_columns_indexes_and_keys(tmp_path: Path, pg_url: str) -> None:
    open_store(tmp_path / "shape.db").close()
    open_store(pg_url).close()
    sqlite_shape, postgres_shape = _sqlite_shape(tmp_path / "shape.db"), _postgres_shape(pg_url)
    for part in ("tables", "views", "columns", "indexes", "keys"):
        assert sqlite_shape[part] == postgres_shape[part], part
    assert "migrations" in sqlite_shape["tables"]  # and the comparison saw something


def test_a_010_database_after_every_migration_has_the_shape_of_a_new_one(tmp_path: Path, pg_url: str) -> None:
    old = tmp_path / "v010.db"
    shutil.copyfile(FIXTURES / "v010.db", old)
    open_store(old).close()
    open_store(tmp_path / "new.db").close()
    assert _sqlite_shape(old) == _sqlite_shape(tmp_path / "new.db")
    server_old = pg_url
    with psycopg.connect(server_old, autocommit=True) as conn:
        psycopg.ClientCursor(conn).execute((FIXTURES / "v010-postgres.sql").read_text())  # type: ignore[arg-type]
    open_store(server_old).close()
    assert _postgres_shape(server_old) == _sqlite_shape(tmp_path / "new.db")
