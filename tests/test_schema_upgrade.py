"""The command key space on real files (the migrations: tests/test_migrations.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from replaylog.engine.core import CommandRecord
from replaylog.engine.errors import StoreError
from replaylog.engine.store import SLOT_LIMIT, PendingRecord, open_store, slot_key


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
