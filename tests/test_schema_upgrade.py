"""The schema on real files: the migration mechanism (steps, one transaction, refusals) and the key space."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from replaylog.engine.core import CommandRecord
from replaylog.engine.errors import SchemaVersionError, StoreError
from replaylog.engine.store import SLOT_LIMIT, PendingRecord, open_store, schema, slot_key


def _add_note(conn: sqlite3.Connection) -> None:
    """A step as a future version would register it: a new column, filled for the rows there are."""
    conn.execute("ALTER TABLE workflows ADD COLUMN note TEXT")
    conn.execute("UPDATE workflows SET note = 'from ' || workflow")


def _broken(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE half_done (x INTEGER)")
    raise RuntimeError("step failed half-way")


def _version(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def _columns(db: Path, table: str) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


def test_a_new_database_is_created_by_the_steps_at_the_current_version(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    open_store(db).close()
    assert _version(db) == schema.SCHEMA_VERSION == len(schema.STEPS) == 1
    assert _columns(db, "commands")[0] == "slot_key" and "seq" in _columns(db, "workflows")


def test_a_registered_step_upgrades_a_file_in_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "old.db"
    with open_store(db) as store:
        store.start_workflow("refund", 7, workflow_id="wf-1")
    monkeypatch.setattr(schema, "STEPS", [*schema.STEPS, _add_note])
    with pytest.raises(SchemaVersionError, match="schema version 1, older than this replaylog's \\(2\\)"):
        open_store(db, readonly=True)  # a reader never upgrades
    assert _version(db) == 1
    with open_store(db) as store:
        assert store._conn.execute("SELECT id, note FROM workflows").fetchall() == [("wf-1", "from refund")]
        assert store.get_workflow("wf-1").input == 7  # every row kept
    assert _version(db) == 2
    # A new file takes the same steps, in the same order.
    open_store(tmp_path / "new.db").close()
    assert _version(tmp_path / "new.db") == 2 and "note" in _columns(tmp_path / "new.db", "workflows")


def test_a_step_that_fails_leaves_the_file_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "old.db"
    with open_store(db) as store:
        store.start_workflow("refund", 7, workflow_id="wf-1")
    monkeypatch.setattr(schema, "STEPS", [*schema.STEPS, _add_note, _broken])
    with pytest.raises(RuntimeError, match="step failed half-way"):
        open_store(db)
    # Neither the step that worked nor the half of the one that failed: one transaction.
    assert _version(db) == 1 and "note" not in _columns(db, "workflows") and _columns(db, "half_done") == []
    monkeypatch.setattr(schema, "STEPS", schema.STEPS[:2])
    with open_store(db) as store:  # and the file upgrades once the steps work
        assert store.get_workflow("wf-1").status == "pending"
    assert _version(db) == 2


def test_a_file_of_a_newer_version_is_refused_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "newer.db"
    with monkeypatch.context() as m:
        m.setattr(schema, "STEPS", [*schema.STEPS, _add_note])
        with open_store(db) as store:  # written by a replaylog one version ahead
            store.start_workflow("refund", 7, workflow_id="wf-1")
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    for readonly in (False, True):
        with pytest.raises(SchemaVersionError, match="schema version 2, newer than this replaylog understands \\(1\\)"):
            open_store(db, readonly=readonly)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before and _version(db) == 2


def test_a_workflow_reads_only_its_own_keys_whatever_the_offset(tmp_path: Path) -> None:
    with open_store(tmp_path / "k.db") as store:
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
    with open_store(tmp_path / "k.db") as store:
        store.start_workflow("wf", None, workflow_id="one")
        store.start_workflow("wf", None, workflow_id="two")
        # "one" has its last possible slot recorded (written directly: recording 2**32 takes days)
        store._conn.execute("INSERT INTO commands (slot_key, kind, name, ok, value, error, attempts, recorded_at)"
                            " VALUES (?, 'activity', 'a', 1, '0', NULL, 1, 0)",
                            (slot_key(1, SLOT_LIMIT - 1),))
        claim = next(c for c in store.claim("w", ttl=30, limit=2) if c.id == "one")
        assert store.get_workflow("one").slots == SLOT_LIMIT
        with pytest.raises(StoreError, match=f"workflow 'one' has recorded {SLOT_LIMIT} slots"):
            store.commit_record(claim, SLOT_LIMIT, CommandRecord("activity", "a", True, 0), ttl=30)
        assert store.list_commands("two") == [] and store.get_workflow("two").slots == 0
        assert store._conn.execute("SELECT COUNT(*) FROM commands").fetchone()[0] == 1
