"""Schema version 1 → 2 on real files: every row kept, the upgrade all or nothing, keys bounded."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from engine.app import Registry
from engine.core import CommandRecord
from engine.errors import SchemaVersionError, StoreError
from engine.store import APPLICATION_ID, SLOT_LIMIT, PendingRecord, SQLiteStore
from engine.worker import Worker
from replaylog import Context, activity, workflow


@activity
def add(a: int, b: int) -> int:
    """a + b."""
    return a + b


@workflow
def adds_after_go(ctx: Context, n: int) -> int:
    """n additions, a signal, one more addition with its payload."""
    total = 0
    for i in range(n):
        total = ctx.call_activity(add, total, i)
    extra = ctx.wait_signal("go")
    return ctx.call_activity(add, total, extra)


def _v1_database(path: Path, *, orphan: bool = False) -> None:
    """A database as version 1 left it: three workflows in start order, one blocked after 5 slots."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN")
    SQLiteStore._create_v1(conn)
    rows = [
        # id, workflow, status, blocked_on, input, result, error, slots
        ("wf-b", "adds_after_go", "blocked", "go", "5", None, None, 5),
        ("wf-a", "adds_after_go", "failed", None, "2", None, "ActivityError: boom", 2),
        ("wf-c", "adds_after_go", "pending", None, "1", None, None, 0),
    ]
    for i, (wid, name, status, blocked_on, inp, result, error, slots) in enumerate(rows):
        conn.execute(
            "INSERT INTO workflows (id, workflow, status, blocked_on, input, result, error, slots, created_at,"
            " updated_at, lease_epoch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 3)",
            (wid, name, status, blocked_on, inp, result, error, slots, 1000.0 + i, 1000.0 + i),
        )
    total = 0
    for slot in range(5):  # wf-b's history, as the worker recorded it
        conn.execute("INSERT INTO commands VALUES ('wf-b', ?, 'activity', 'add', 1, ?, NULL, 1, ?)",
                     (slot, str(total + slot), 2000.0 + slot))
        total += slot
    conn.execute("INSERT INTO commands VALUES ('wf-a', 0, 'activity', 'add', 1, '0', NULL, 1, 3000.0)")
    conn.execute("INSERT INTO commands VALUES ('wf-a', 1, 'activity', 'add', 0, NULL, 'ActivityError: boom', 3,"
                 " 3001.0)")
    if orphan:
        conn.execute("INSERT INTO commands VALUES ('wf-gone', 0, 'activity', 'add', 1, '0', NULL, 1, 4000.0)")
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    conn.execute("COMMIT")
    conn.close()


def test_a_version_1_database_is_upgraded_with_every_slot_kept_and_runs_on(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    _v1_database(db)
    with pytest.raises(SchemaVersionError, match="schema version 1, older than"):
        SQLiteStore(db, readonly=True)  # a reader never upgrades
    with SQLiteStore(db) as store:
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == 2
        b = store.list_commands("wf-b")
        assert [(c.slot, c.name, c.ok, c.value, c.attempts, c.recorded_at) for c in b] == [
            (0, "add", True, 0, 1, 2000.0), (1, "add", True, 1, 1, 2001.0), (2, "add", True, 3, 1, 2002.0),
            (3, "add", True, 6, 1, 2003.0), (4, "add", True, 10, 1, 2004.0)]
        failed = store.last_failed_command("wf-a")
        assert failed is not None and (failed.slot, failed.error, failed.attempts) == (1, "ActivityError: boom", 3)
        assert store.list_commands("wf-c") == []
        assert [r.slots for r in store.list_workflows(sort="id", descending=False)] == [2, 5, 0]
        assert len(store.load_state("wf-b").commands) == 5
        store.send_signal("wf-b", "go", 100)
        # a workflow started after the upgrade is numbered after the old ones
        store.start_workflow("adds_after_go", 0, workflow_id="wf-new")
        seqs = dict(store._conn.execute("SELECT id, seq FROM workflows").fetchall())
        assert seqs["wf-new"] == max(seqs.values()) and len(set(seqs.values())) == 4
    worker = Worker(db, Registry.from_module(sys.modules[__name__]))
    worker.run(until_idle=True)
    with SQLiteStore(db) as store:
        b = store.get_workflow("wf-b")
        assert (b.status, b.result, b.slots) == ("completed", 110, 6)  # 0+1+2+3+4 replayed, + 100 live
        assert [c.value for c in store.list_commands("wf-b")] == [0, 1, 3, 6, 10, 110]
        assert store.get_workflow("wf-c").status == "blocked"  # ran its 1 slot, waits for "go"
        # the view for people reading the file keeps version 1's columns
        view = store._conn.execute(
            "SELECT workflow_id, slot, value FROM command_log ORDER BY workflow_id, slot").fetchall()
        assert view == [("wf-a", 0, "0"), ("wf-a", 1, None), ("wf-b", 0, "0"), ("wf-b", 1, "1"), ("wf-b", 2, "3"),
                        ("wf-b", 3, "6"), ("wf-b", 4, "10"), ("wf-b", 5, "110"), ("wf-c", 0, "0")]
        assert store.integrity_check() == "ok"


def test_an_upgrade_that_would_drop_rows_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    _v1_database(db, orphan=True)
    with pytest.raises(SchemaVersionError, match="1 of 8 command rows belong to no workflow"):
        SQLiteStore(db)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert conn.execute("SELECT COUNT(*) FROM commands WHERE workflow_id = 'wf-gone'").fetchone()[0] == 1
    assert "seq" not in [r[1] for r in conn.execute("PRAGMA table_info(workflows)")]


def test_a_workflow_reads_only_its_own_keys_whatever_the_offset(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "k.db") as store:
        for wid in ("one", "two", "three"):
            store.start_workflow("wf", None, workflow_id=wid)
        for claim in store.claim("w", ttl=30, limit=3):
            written, _ = store.commit_batch(
                [PendingRecord(claim, i, CommandRecord("activity", claim.id, True, i)) for i in range(3)], ttl=30)
            assert all(written)
        for offset in (-(1 << 40), -1, 0):
            assert [(c.slot, c.name) for c in store.list_commands("two", offset=offset)] == [
                (0, "two"), (1, "two"), (2, "two")]
        assert store.list_commands("two", offset=2) == store.list_commands("two")[2:]
        assert store.list_commands("two", offset=1 << 40) == []
        assert [r.name for r in store.load_state("two").commands] == ["two"] * 3
        assert {r.slots for r in store.list_workflows()} == {3}


def test_a_slot_past_the_key_space_is_refused_not_written_into_the_next_workflow(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "k.db") as store:
        store.start_workflow("wf", None, workflow_id="one")
        store.start_workflow("wf", None, workflow_id="two")
        # "one" has its last possible slot recorded (written directly: recording 2**32 takes days)
        store._conn.execute("INSERT INTO commands VALUES ((1 << 32) + ? - 1, 'activity', 'a', 1, '0', NULL, 1, 0)",
                            (SLOT_LIMIT,))
        claim = next(c for c in store.claim("w", ttl=30, limit=2) if c.id == "one")
        assert store.get_workflow("one").slots == SLOT_LIMIT
        with pytest.raises(StoreError, match=f"workflow 'one' has recorded {SLOT_LIMIT} slots"):
            store.commit_record(claim, SLOT_LIMIT, CommandRecord("activity", "a", True, 0), ttl=30)
        assert store.list_commands("two") == [] and store.get_workflow("two").slots == 0
        assert store._conn.execute("SELECT COUNT(*) FROM commands").fetchone()[0] == 1
