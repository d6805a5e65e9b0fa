"""The SQLite log store on real files: schema, fencing, one query per table, refusals."""

from __future__ import annotations

import ast
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest

from conftest import on_server
from replaylog.engine.core import CommandRecord, Outcome
from replaylog.engine.errors import (
    DuplicateWorkflowIdError,
    PayloadTooLargeError,
    ReadOnlyError,
    SchemaVersionError,
    StoreBusyError,
    StoreError,
    UnknownWorkflowIdError,
    WorkflowClosedError,
)
from replaylog.engine.store import Claim, ClaimAsk, PendingRecord, Store, database_path, open_store
from replaylog.engine.store.rows import loads, loads_many
from replaylog.engine.store.shared.migrations import latest
from replaylog.engine.store.sqlite.connection import write_gate
from replaylog.engine.store.sqlite.schema import refuse_foreign
from replaylog.engine.vocab import Status
from replaylog.engine.worker.committer import Committer, Request


def rec(name: str, value: object = None) -> CommandRecord:
    return CommandRecord("activity", name, True, value)


def claim_one(store: Store, owner: str = "w1", ttl: float = 30) -> Claim:
    (claim,) = store.claim(owner, ttl=ttl)
    return claim


def sqlite_only(store_or_url: object, why: str) -> None:
    """Skip a test on PostgreSQL, saying why it is SQLite's alone."""
    url = store_or_url if isinstance(store_or_url, str) else getattr(store_or_url, "url", "")
    if isinstance(url, str) and url.startswith(("postgresql://", "postgres://")):
        pytest.skip(f"SQLite-specific: {why}")


def test_settings_are_wal_and_synchronous_full(store: Store) -> None:
    sqlite_only(store, "PRAGMAs of the SQLite file (test_postgres.py checks the session's settings)")
    conn = store._conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000


def test_resume_loads_history_with_one_query_per_table(store: Store) -> None:
    wid = store.start_workflow("wf", 1)
    claim = claim_one(store)
    written, _ = store.commit_batch([PendingRecord(claim, i, rec("a", i)) for i in range(500)], ttl=30)
    assert all(written)
    for i in range(3):
        store.send_signal(wid, "go", i)
    sqlite_only(store, "counts statements through sqlite3's trace callback")
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    state = store.load_state(wid)
    store._conn.set_trace_callback(None)
    assert len(state.commands) == 500 and [s.payload for s in state.signals] == [0, 1, 2]
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 3  # the workflow row, its commands, its signals: never one per slot


def test_a_lapsed_lease_of_a_dead_owner_is_claimed_once(store: Store) -> None:
    """Both lapsed and owned by a dead worker: one claim, one epoch bump, not two runs."""
    store.start_workflow("wf", None, workflow_id="x")
    store.start_workflow("wf", None, workflow_id="y")
    dead = store.claim("dead", ttl=0.0, limit=2)  # lapsed at once
    assert sorted(c.id for c in dead) == ["x", "y"]
    time.sleep(0.01)
    taken = store.claim("new", ttl=30, limit=10, dead_owners=["dead"])
    assert sorted((c.id, c.epoch) for c in taken) == [("x", 2), ("y", 2)]
    assert store.claim("other", ttl=30, limit=10, dead_owners=["dead"]) == []


def test_a_new_claim_fences_out_the_old_owner(store: Store) -> None:
    store.start_workflow("wf", None, workflow_id="x")
    old = claim_one(store, "old", ttl=0.0)  # already lapsed
    new = claim_one(store, "new")
    assert new.epoch == old.epoch + 1
    written, finished = store.commit_batch([PendingRecord(old, 0, rec("a"))], finishes=[
        (old, Outcome(status="completed", result=1))], ttl=30)
    assert written == [False] and finished == [False]
    assert store.commit_batch([PendingRecord(new, 0, rec("a"))], ttl=30)[0] == [True]
    assert store.get_workflow("x").slots == 1 and store.get_workflow("x").status == "running"


def test_a_slot_is_written_only_in_order_and_only_once(store: Store) -> None:
    store.start_workflow("wf", None, workflow_id="x")
    claim = claim_one(store)
    assert store.commit_batch([PendingRecord(claim, 1, rec("skip"))], ttl=30)[0] == [False]
    assert store.commit_batch([PendingRecord(claim, 0, rec("a"))], ttl=30)[0] == [True]
    assert store.commit_batch([PendingRecord(claim, 0, rec("again"))], ttl=30)[0] == [False]
    assert [c.name for c in store.list_commands("x")] == ["a"]


def test_blocked_workflow_becomes_pending_when_its_signal_arrives(store: Store) -> None:
    store.start_workflow("wf", None, workflow_id="x")
    claim = claim_one(store)
    store.commit_batch(finishes=[(claim, Outcome(status="blocked", blocked_on="go"))], ttl=30)
    row = store.get_workflow("x")
    assert (row.status, row.blocked_on, row.lease_owner) == ("blocked", "go", None)
    store.send_signal("x", "other", 1)
    assert store.get_workflow("x").status == "blocked"
    store.send_signal("x", "go", 2)
    assert (store.get_workflow("x").status, store.get_workflow("x").blocked_on) == ("pending", None)


def test_signals_are_refused_for_unknown_and_closed_workflows(store: Store) -> None:
    with pytest.raises(UnknownWorkflowIdError):
        store.send_signal("nope", "go")
    store.start_workflow("wf", None, workflow_id="x")
    claim = claim_one(store)
    store.commit_batch(finishes=[(claim, Outcome(status="completed", result=None))], ttl=30)
    with pytest.raises(WorkflowClosedError):
        store.send_signal("x", "go")
    assert store.list_signals("x") == []


def test_payload_cap_and_duplicate_ids(store_url: str) -> None:
    with open_store(store_url, max_payload=10) as store:
        store.start_workflow("wf", "12345678", workflow_id="x")  # 10 bytes with quotes
        with pytest.raises(PayloadTooLargeError):
            store.send_signal("x", "go", "123456789")
        with pytest.raises(DuplicateWorkflowIdError):
            store.start_workflow("wf", None, workflow_id="x")
        assert store.list_signals("x") == []


# Texts the encoder writes, texts older versions wrote (spaces after separators), and
# texts JSON refuses: the store's reader must answer each exactly as json.loads does.
_STORED_TEXTS = ["0", "7", "123456789012345678901234567890", "-5", "1.5", "1e+16", "-0.0", "true", "null",
                 '"x"', '"\\ud800"', '"\u00e9t\u00e9"', "[1, 2]", '{"a": [1, {"b": null}]}', '{"a":1}',
                 " 1", "1 "]
_REFUSED_TEXTS = ["", "01", "00", "1 2", "[1,", "x", "NaN1", "+1", "\u0661", "\u00b2"]


def test_stored_values_read_back_exactly_as_json_reads_them() -> None:
    for text in _STORED_TEXTS:
        expected = json.loads(text)
        got = loads(text)
        assert got == expected and type(got) is type(expected), text
    for text in _REFUSED_TEXTS:
        with pytest.raises(json.JSONDecodeError) as ours:
            loads(text)
        with pytest.raises(json.JSONDecodeError) as theirs:
            json.loads(text)
        assert str(ours.value) == str(theirs.value), text


def test_a_history_of_values_reads_back_as_each_reads_alone() -> None:
    ints = ["0", "7", "-5", "123456789012345678901234567890", "-0"]
    for texts in (ints, _STORED_TEXTS, ["1", "2", "01"], ["1", " 2"], ["1", "2.0"], ["1", "\u0661"], ["1", "+1"]):
        if any(t in _REFUSED_TEXTS for t in texts):
            with pytest.raises(json.JSONDecodeError):
                loads_many(texts)
            continue
        got = loads_many(texts)
        expected = [json.loads(t) for t in texts]
        assert got == expected and list(map(type, got)) == list(map(type, expected)), texts
    for text in _REFUSED_TEXTS:
        with pytest.raises(json.JSONDecodeError) as ours:
            loads_many(["1", text])
        with pytest.raises(json.JSONDecodeError) as theirs:
            json.loads(text)
        assert str(ours.value) == str(theirs.value), text


def test_a_history_reads_back_the_values_its_slots_recorded(store_url: str) -> None:
    values = [0, 42, 10**30, -3, 2.5, "07", "text", [1, "a"], {"k": [None, True]}, None, "\u00e9"]
    with open_store(store_url) as store:
        store.start_workflow("wf", None, workflow_id="x")
        claim = claim_one(store)
        for slot, value in enumerate(values):
            assert store.commit_record(claim, slot, CommandRecord("activity", "a", True, value, None, 1), ttl=30)
        assert [r.value for r in store.load_state("x").commands] == values


def test_readonly_store_refuses_writes(store_url: str) -> None:
    open_store(store_url).close()
    with open_store(store_url, readonly=True) as ro:
        with pytest.raises(ReadOnlyError):
            ro.start_workflow("wf", None)
        assert ro.count_workflows() == 0


def test_newer_schema_and_foreign_databases_are_refused(tmp_path: Path) -> None:
    newer = tmp_path / "newer.db"
    open_store(newer).close()
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version = {latest() + 1}")  # a version this replaylog does not know yet
    conn.close()
    with pytest.raises(SchemaVersionError, match=f"schema version {latest() + 1}"):
        open_store(newer)
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE people (name TEXT)")
    conn.close()
    with pytest.raises(SchemaVersionError, match="not a replaylog one"):
        open_store(foreign)
    conn = sqlite3.connect(foreign)
    assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["people"]  # nothing added


def test_a_file_another_process_creates_while_it_is_checked_is_never_taken_for_a_foreign_one(
        tmp_path: Path) -> None:
    # The check of a new file's header reads it while a second opener may be creating the
    # schema. Here that creation commits just as each statement of the check starts, one
    # statement at a time: whichever it is, the file must read as ours (empty or complete).
    def statements_of_the_check(path: Path, create_at: int | None) -> int:
        seen: list[str] = []

        def trace(statement: str) -> None:
            if statement.startswith("-- "):
                return  # a statement SQLite runs inside one of the check's (a pragma's own)
            if len(seen) == create_at:
                open_store(path).close()  # the other opener: its creation commits now
            seen.append(statement)

        conn = sqlite3.connect(path, isolation_level=None)
        conn.set_trace_callback(trace)
        try:
            refuse_foreign(conn, path)
        finally:
            conn.close()
        return len(seen)

    count = statements_of_the_check(tmp_path / "counted.db", None)
    assert count >= 1
    for at in range(count):
        path = tmp_path / f"new-{at}.db"
        sqlite3.connect(path).close()  # an empty file, as the first opener made it
        assert statements_of_the_check(path, at) == count
        with closing(sqlite3.connect(path)) as conn:
            assert refuse_foreign(conn, path) == latest()


def test_list_pages_filters_and_sorts_in_sql(store: Store) -> None:
    for i in range(30):
        store.start_workflow("refund" if i % 2 else "agent", i, workflow_id=f"wf-{i:02d}")
    page = store.list_workflows(text="refund", sort="id", descending=False, limit=5, offset=5)
    assert [r.id for r in page] == ["wf-11", "wf-13", "wf-15", "wf-17", "wf-19"]
    assert store.count_workflows(text="agent") == 15
    assert store.count_workflows(text="wf-0") == 10
    assert store.status_counts() == {"pending": 30, "running": 0, "blocked": 0, "completed": 0, "failed": 0,
                                     "cancelled": 0, "terminated": 0, "queued": 0}
    assert store.count_workflows(text="%") == 0  # LIKE wildcards in the filter are literal


# -- slot commits that write only the command row (engine.store.sqlite.commit, the fast path)


def _wal_frames(store: Store) -> int:
    return int(store._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])


def test_a_lone_workflows_slot_commit_writes_about_one_page_and_counts_stay_exact(db_path: Path) -> None:
    writer = open_store(db_path)
    reader = open_store(db_path, readonly=True)
    try:
        writer.start_workflow("wf", None, workflow_id="x")
        claim = claim_one(writer)
        writer._conn.execute("PRAGMA wal_autocheckpoint = 0")  # count every frame of the next commits
        writer._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for slot in range(300):
            assert writer.commit_record(claim, slot, rec("a", slot), ttl=30)
        # Before: two pages a slot (the command row and the workflow row). Now the
        # workflow row is rewritten about once a second; page splits add a little.
        assert _wal_frames(writer) <= 1.3 * 300
        raw = reader._conn.execute("SELECT slots FROM workflows WHERE id = 'x'").fetchone()[0]
        assert raw < 300  # the column lags while the workflow runs...
        # ...and nothing that shows or decides by the count sees it lag.
        assert reader.get_workflow("x").slots == 300
        assert [r.slots for r in reader.list_workflows()] == [300]
        assert [r.slots for r in reader.list_workflow_summaries()] == [300]
        # The verdict makes the column exact.
        assert writer.commit_batch(finishes=[(claim, Outcome(status="completed", result=1))], ttl=30)[1] == [True]
        assert reader._conn.execute("SELECT slots FROM workflows WHERE id = 'x'").fetchone()[0] == 300
    finally:
        writer.close()
        reader.close()


def test_slots_written_without_the_row_are_still_fenced_in_order(store_url: str) -> None:
    store = open_store(store_url)
    try:
        store.start_workflow("wf", None, workflow_id="x")
        claim = claim_one(store)
        for slot in range(3):
            assert store.commit_record(claim, slot, rec("a"), ttl=30)
        assert not store.commit_record(claim, 4, rec("gap"), ttl=30)
        assert not store.commit_record(claim, 2, rec("again"), ttl=30)
        assert store.commit_record(claim, 3, rec("a"), ttl=30)
        assert [c.slot for c in store.list_commands("x")] == [0, 1, 2, 3]
    finally:
        store.close()


def test_a_claim_on_the_same_connection_fences_out_the_old_lease_at_once(store_url: str) -> None:
    # PRAGMA data_version does not change for a connection's own commits: a claim made
    # through the store that writes the slots must still end the old lease's writes.
    store = open_store(store_url)
    try:
        store.start_workflow("wf", None, workflow_id="x")
        old = claim_one(store, "old", ttl=0.0)  # lapses at once
        assert store.commit_record(old, 0, rec("a"), ttl=0.0)
        assert store.commit_record(old, 1, rec("a"), ttl=0.0)
        new = claim_one(store, "new")
        assert new.epoch == old.epoch + 1 and new.state is not None and len(new.state.commands) == 2
        assert not store.commit_record(old, 2, rec("stale"), ttl=30)
        assert store.commit_record(new, 2, rec("b"), ttl=30)
        assert [c.name for c in store.list_commands("x")] == ["a", "a", "b"]
    finally:
        store.close()


def test_a_takeover_from_another_connection_fences_out_the_old_lease(store_url: str) -> None:
    mine, theirs = open_store(store_url), open_store(store_url)
    try:
        mine.start_workflow("wf", None, workflow_id="x")
        old = claim_one(mine, "old", ttl=0.0)
        for slot in range(3):
            assert mine.commit_record(old, slot, rec("a"), ttl=0.0)
        new = claim_one(theirs, "new")
        assert new.state is not None and len(new.state.commands) == 3
        assert theirs._conn.execute("SELECT slots FROM workflows").fetchone()[0] == 3  # the claim counted them
        assert not mine.commit_record(old, 3, rec("stale"), ttl=30)
        assert theirs.commit_record(new, 3, rec("b"), ttl=30)
        assert [c.name for c in mine.list_commands("x")] == ["a", "a", "a", "b"]
    finally:
        mine.close()
        theirs.close()


def test_an_operator_on_another_connection_fences_out_the_next_slot(store_url: str) -> None:
    worker, operator = open_store(store_url), open_store(store_url)
    try:
        worker.start_workflow("wf", None, workflow_id="x")
        claim = claim_one(worker)
        for slot in range(3):
            assert worker.commit_record(claim, slot, rec("a"), ttl=30)
        assert operator.terminate_workflow("x", "enough") == "running"
        assert not worker.commit_record(claim, 3, rec("late"), ttl=30)
        assert [c.slot for c in operator.list_commands("x")] == [0, 1, 2]
    finally:
        worker.close()
        operator.close()


def test_slots_after_a_cancel_request_was_seen_are_still_written_under_the_lease(store_url: str) -> None:
    # A cancelled workflow may go on recording (its clean-up), with the request still on its row.
    worker, operator = open_store(store_url), open_store(store_url)
    try:
        worker.start_workflow("wf", None, workflow_id="x")
        claim = claim_one(worker)
        assert worker.commit_record(claim, 0, rec("a"), ttl=30)
        operator.cancel_workflow("x", "enough")
        assert worker.commit_record(claim, 1, rec("a"), ttl=30)
        assert worker.cancels.pop("x") == "enough"
        for slot in range(2, 5):
            assert worker.commit_record(claim, slot, rec("cleanup"), ttl=30)
        assert [c.slot for c in operator.list_commands("x")] == [0, 1, 2, 3, 4]
    finally:
        worker.close()
        operator.close()


def test_a_slot_is_fenced_by_its_own_row_when_its_rowid_names_another(db_path: Path) -> None:
    # The lone slot's statement finds the workflow's row by the rowid it learnt, which SQLite
    # does not promise to keep (VACUUM may renumber the rows of a table without an INTEGER
    # PRIMARY KEY). Here another workflow of the same owner, epoch and count takes that rowid.
    worker, operator = open_store(db_path), open_store(db_path)

    def swap_rowids() -> None:
        conn = operator._conn
        x, b = (conn.execute("SELECT rowid FROM workflows WHERE id = ?", (w,)).fetchone()[0] for w in ("x", "b"))
        with conn:
            conn.execute("BEGIN")
            conn.execute("UPDATE workflows SET rowid = -1 WHERE id = 'x'")
            conn.execute("UPDATE workflows SET rowid = ? WHERE id = 'b'", (x,))
            conn.execute("UPDATE workflows SET rowid = ? WHERE id = 'x'", (b,))

    try:
        for wid in ("x", "b"):
            worker.start_workflow("wf", None, workflow_id=wid)
        claims = {c.id: c for c in worker.claim("w1", ttl=30, limit=2)}
        assert {c.epoch for c in claims.values()} == {1}
        for wid in ("b", "x"):
            assert worker.commit_record(claims[wid], 0, rec("a"), ttl=30)
        swap_rowids()
        assert operator.terminate_workflow("x", "enough") == "running"
        assert not worker.commit_record(claims["x"], 1, rec("late"), ttl=30)  # not fenced by b's row
        for slot in range(1, 4):  # b's own row found again
            assert worker.commit_record(claims["b"], slot, rec("a"), ttl=30)
        assert [c.slot for c in worker.list_commands("x")] == [0]
        assert [c.slot for c in worker.list_commands("b")] == [0, 1, 2, 3]
    finally:
        worker.close()
        operator.close()


def test_a_batch_of_first_attempts_writes_the_fenced_ones_and_refuses_the_rest(store: Store) -> None:
    for wid in ("a", "b", "c"):
        store.start_workflow("wf", None, workflow_id=wid)
    claims = {c.id: c for c in store.claim("w1", ttl=30, limit=3)}

    def first(slot: int) -> CommandRecord:
        return CommandRecord("activity", "tick", True, slot, None, 1, f"[{slot}]")

    written, _ = store.commit_batch([
        PendingRecord(claims["a"], 0, first(0)),
        PendingRecord(claims["b"], 1, first(1)),  # not b's next slot: refused, never a gap
        PendingRecord(claims["c"], 0, first(0), "0"),
        PendingRecord(claims["a"], 1, first(1)),
    ], ttl=30)
    assert written == [True, False, True, True]
    assert [(c.slot, c.value, c.args, c.attempts) for c in store.list_commands("a")] == [(0, 0, "[0]", 1),
                                                                                       (1, 1, "[1]", 1)]
    assert store.list_commands("b") == []
    assert [(c.slot, c.value, c.args) for c in store.list_commands("c")] == [(0, 0, "[0]")]


def test_a_lone_slot_is_one_statement_committed_by_itself(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # After the slot that fences the workflow's row, each slot is one guarded INSERT in
    # autocommit mode (engine.store.sqlite.commit): its own transaction, with no BEGIN,
    # PRAGMA or COMMIT around it. The clock stands still: no once-a-second restamp.
    from replaylog.engine.store.sqlite import commit

    class Frozen:
        @staticmethod
        def time() -> float:
            return 1_000_000.0

    monkeypatch.setattr(commit, "time", Frozen)
    writer = open_store(db_path)
    reader = open_store(db_path, readonly=True)
    try:
        writer.start_workflow("wf", None, workflow_id="x")
        claim = claim_one(writer)
        assert writer.commit_record(claim, 0, rec("a", 0), ttl=30)
        statements: list[str] = []
        writer._conn.set_trace_callback(statements.append)
        for slot in range(1, 4):
            assert writer.commit_record(claim, slot, CommandRecord("activity", "a", True, slot, args="[1]"), ttl=30)
            assert not writer._conn.in_transaction
            assert [c.slot for c in reader.list_commands("x")][-1] == slot  # committed when it returned
        writer._conn.set_trace_callback(None)
        assert [s.split()[0] for s in statements] == ["INSERT"] * 3
    finally:
        writer.close()
        reader.close()


def _main_program(conn: sqlite3.Connection, sql: str) -> list[str]:
    """The opcodes of a statement's own program (EXPLAIN lists a trigger's after it, numbered from 0 again)."""
    ops: list[str] = []
    last = -1
    for addr, opcode, *_ in conn.execute("EXPLAIN " + sql):
        if addr <= last:
            break
        ops.append(opcode)
        last = addr
    return ops


def test_a_workflows_claim_fenced_slots_and_verdict_build_no_temporary_btree(db_path: Path) -> None:
    """What a workflow's life sends once a workflow or a slot builds no temporary b-tree.

    `UPDATE … RETURNING` and `x IN (a, b, c)` each build one (a 4 KiB page zeroed, opened
    and closed) every time they run: together ~150,000 instructions of a short workflow's
    ~600,000 in the store (docs/performance.md, "Workload 5: the worker's claims queue
    behind its commits"). Each slot here is fenced on the workflow's row (another
    connection's commit comes first).
    """
    with open_store(db_path) as store, open_store(db_path) as other:
        store.start_workflow("wf", None, workflow_id="x")
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)
        claim = claim_one(store)
        for slot in range(3):
            other.start_workflow("wf", None)  # a commit of another connection: the fence reads the row again
            written, _ = store.commit_batch([PendingRecord(claim, slot, rec("a", slot))], ttl=30)
            assert written == [True]
        _, finished = store.commit_batch(finishes=[(claim, Outcome(Status.COMPLETED, result=1))], ttl=30)
        store._conn.set_trace_callback(None)
        assert finished == [True] and store.get_workflow("x").status == "completed"
        per_workflow = [s for s in statements if s.startswith(("UPDATE", "INSERT"))
                        or (s.startswith("SELECT") and " WHERE id = " in s)]
        kinds = {s.split(" SET ")[1].split(" = ")[0] if s.startswith("UPDATE") else s.split()[0] for s in per_workflow}
        assert {"status", "slots", "INSERT"} <= kinds, per_workflow  # the claim, verdict; the fence; the rows
        for sql in per_workflow:
            assert "OpenEphemeral" not in _main_program(store._conn, sql), sql


def _gate_free_elsewhere(path: Path) -> bool:
    """Whether another thread could take the process's write gate of `path` now (it gives it back at once)."""
    got: list[bool] = []

    def probe() -> None:
        gate = write_gate(path)
        got.append(gate.acquire(blocking=False))
        if got[0]:
            gate.release()

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return got[0]


def test_writers_of_one_process_queue_on_one_write_gate_held_for_the_transaction(db_path: Path) -> None:
    """Two connections of one process to one file share a gate, held from BEGIN IMMEDIATE to the end.

    (A claim made to poll SQLite's write lock, sleeping between tries, lost every race
    against its own worker's group commits: connection.write_gate.)
    """
    with open_store(db_path) as a, open_store(Path(os.path.relpath(db_path))) as b:
        assert a._gate is b._gate is write_gate(db_path)
        entered, leave = threading.Event(), threading.Event()

        def hold() -> None:
            with a._write():
                entered.set()
                leave.wait(30)

        holder = threading.Thread(target=hold)
        holder.start()
        assert entered.wait(30)
        assert not _gate_free_elsewhere(db_path)  # taken while a's transaction is open
        writer = threading.Thread(target=lambda: b.start_workflow("wf", None, workflow_id="after"))
        writer.start()
        leave.set()
        holder.join(30)
        writer.join(30)
        assert not writer.is_alive() and b.get_workflow("after").status == "pending"
        assert _gate_free_elsewhere(db_path)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX's")
def test_a_forked_child_finds_the_write_gate_free_though_a_thread_of_its_parent_held_it(db_path: Path) -> None:
    with open_store(db_path) as store:
        store.start_workflow("wf", None, workflow_id="x")
    entered, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with open_store(db_path) as held, held._write():
            entered.set()
            leave.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert entered.wait(30)
        pid = os.fork()
        if pid == 0:  # the child: one thread, which holds no transaction (the parent's SQLite lock is not its)
            code = 1
            try:
                code = 0 if write_gate(db_path).acquire(blocking=False) else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0  # the gate was free in the child
        assert not _gate_free_elsewhere(db_path)  # and still held in the parent
    finally:
        leave.set()
        holder.join(30)


def test_a_commit_that_fails_gives_the_write_gate_back(db_path: Path) -> None:
    with open_store(db_path) as store:
        store.start_workflow("wf", None, workflow_id="x")
        claim = claim_one(store)
        with pytest.raises(TypeError):
            store.commit_batch([PendingRecord(claim, 0, rec("a", object()))], ttl=30)  # no JSON value
        assert not store._conn.in_transaction
        assert _gate_free_elsewhere(db_path)
        with pytest.raises(TypeError):  # a parallel task's slot: the fenced transaction
            store.commit_record(claim, 0, rec("a", object()), ttl=30, parallel_group=0)
        assert not store._conn.in_transaction
        assert _gate_free_elsewhere(db_path)
        assert store.commit_record(claim, 0, rec("a", 1), ttl=30)  # and writes go on
        assert _gate_free_elsewhere(db_path)


# -- claims that ride a group commit (Commits._ride, Committer.claim)


def test_a_claim_riding_a_group_commit_is_written_with_it_and_leaves_the_fence_standing(store_url: str) -> None:
    with open_store(store_url) as store:
        store.start_workflow("wf", None, workflow_id="x")
        mine = claim_one(store)
        store.start_workflow("wf", None, workflow_id="y")
        if on_server(store):
            with pytest.raises(ValueError, match="claims on its own connection"):
                store.commit_batch([], ttl=30, claims=[ClaimAsk("w1", ttl=30, limit=5)])
            return
        assert store.commit_batch([PendingRecord(mine, 0, rec("a", 1))], ttl=30) == ([True], [])
        ask = ClaimAsk("w1", ttl=30, limit=5)
        assert store.commit_batch([PendingRecord(mine, 1, rec("a", 2))], ttl=30, claims=[ask]) == ([True], [])
        assert ask.error is None and ask.claims is not None and [c.id for c in ask.claims] == ["y"]
        assert store.get_workflow("y").status == Status.RUNNING
        # The claim was this connection's own: the fence still knows x, so its next slot is
        # the command row alone (a claim on another connection would have it fenced again).
        seen: list[str] = []
        store._conn.set_trace_callback(seen.append)  # type: ignore[attr-defined]
        assert store.commit_batch([PendingRecord(mine, 2, rec("a", 3))], ttl=30) == ([True], [])
        store._conn.set_trace_callback(None)  # type: ignore[attr-defined]
        assert not [q for q in seen if q.startswith("UPDATE workflows")], seen
        assert [c.value for c in store.list_commands("x")] == [1, 2, 3]


def test_the_first_slot_after_a_claim_that_rode_a_commit_writes_its_command_row_alone(db_path: Path) -> None:
    with open_store(db_path) as store:
        store.start_workflow("wf", None, workflow_id="y")
        ask = ClaimAsk("w1", ttl=30, limit=5)
        store.commit_batch([], ttl=30, claims=[ask])
        assert ask.claims is not None
        (y,) = ask.claims
        # The claim wrote y's row on this connection, and nobody has written since: the fence
        # knows the row as the claim left it, so slot 0 needs neither its rewrite nor its read.
        seen: list[str] = []
        store._conn.set_trace_callback(seen.append)  # type: ignore[attr-defined]
        assert store.commit_batch([PendingRecord(y, 0, rec("a", 1))], ttl=30) == ([True], [])
        store._conn.set_trace_callback(None)  # type: ignore[attr-defined]
        assert not [q for q in seen if "workflows" in q], seen
        assert store.commit_batch([PendingRecord(y, 2, rec("gap"))], ttl=30) == ([False], [])  # never a gap
        assert store.commit_batch([PendingRecord(y, 1, rec("a", 2))], ttl=30) == ([True], [])
        assert [c.value for c in store.list_commands("y")] == [1, 2]
        row = store.get_workflow("y")
        assert (row.status, row.lease_owner) == (Status.RUNNING, "w1")


def test_the_first_slot_after_a_riding_claim_is_fenced_once_another_connection_wrote(db_path: Path) -> None:
    worker, operator = open_store(db_path), open_store(db_path)
    try:
        worker.start_workflow("wf", None, workflow_id="y")
        ask = ClaimAsk("w1", ttl=30, limit=5)
        worker.commit_batch([], ttl=30, claims=[ask])
        assert ask.claims is not None
        (y,) = ask.claims
        operator.cancel_workflow("y", "enough")  # after the claim, on another connection
        # The fence cannot vouch for the row now: the slot is fenced on it, which reads the request.
        assert worker.commit_batch([PendingRecord(y, 0, rec("a", 1))], ttl=30) == ([True], [])
        assert worker.cancels.pop("y") == "enough"
        assert operator.terminate_workflow("y", "stop") == "running"
        assert worker.commit_batch([PendingRecord(y, 1, rec("late"))], ttl=30) == ([False], [])
        assert [c.value for c in operator.list_commands("y")] == [1]
    finally:
        worker.close()
        operator.close()


def test_a_claim_riding_a_commit_fences_out_the_lease_it_takes_over(db_path: Path) -> None:
    with open_store(db_path) as store:
        store.start_workflow("wf", None, workflow_id="x")
        old = claim_one(store, "old", ttl=0.0)  # lapses at once
        for slot in range(2):
            assert store.commit_batch([PendingRecord(old, slot, rec("a", slot))], ttl=0.0) == ([True], [])
        ask = ClaimAsk("new", ttl=30, limit=1)
        store.commit_batch([], ttl=30, claims=[ask])
        assert ask.claims is not None
        (new,) = ask.claims
        assert new.epoch == old.epoch + 1
        # Its own commit left this connection's data_version as it was: only forgetting the
        # workflow it took over keeps the old lease's next slot from going through unfenced.
        assert store.commit_batch([PendingRecord(old, 2, rec("stale"))], ttl=30) == ([False], [])
        assert store.commit_batch([PendingRecord(new, 2, rec("b"))], ttl=30) == ([True], [])
        assert [c.name for c in store.list_commands("x")] == ["a", "a", "b"]


def test_a_claim_that_fails_in_a_group_commit_is_undone_alone(db_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    with open_store(db_path) as store:
        store.start_workflow("wf", None, workflow_id="x")
        mine = claim_one(store)
        store.start_workflow("wf", None, workflow_id="y")
        claim_in = store._claim_in  # type: ignore[attr-defined]

        def claims_then_fails(*args: object) -> list[Claim]:
            claim_in(*args)  # y leased, in the commit's transaction
            raise sqlite3.OperationalError("no such table: a_bug")

        monkeypatch.setattr(store, "_claim_in", claims_then_fails)
        ask = ClaimAsk("w1", ttl=30, limit=5)
        assert store.commit_batch([PendingRecord(mine, 0, rec("a", 1))], ttl=30, claims=[ask]) == ([True], [])
        assert ask.claims is None and isinstance(ask.error, StoreError) and "a_bug" in str(ask.error)
        assert [c.value for c in store.list_commands("x")] == [1]  # the outcome it rode with stands
        assert store.get_workflow("y").status == Status.PENDING  # what the claim wrote does not
        assert not store._conn.in_transaction and _gate_free_elsewhere(db_path)


def test_a_claim_riding_a_commit_that_fails_claims_nothing_and_leaves_the_error_to_the_outcomes(
        db_path: Path) -> None:
    with open_store(db_path) as store:
        store.start_workflow("wf", None, workflow_id="x")
        mine = claim_one(store)
        store.start_workflow("wf", None, workflow_id="y")
    committer = Committer(db_path, ttl=30)
    committer.start()
    try:
        bad = Request(record=PendingRecord(mine, 0, rec("a", object())))  # no JSON value: the commit fails
        committer._pending.append(bad)  # queued, as a workflow thread's would be
        assert committer.claim(ClaimAsk("w1", ttl=30, limit=5)) == []  # it led the commit of both
        assert isinstance(bad.error, TypeError)
        (claim,) = committer.claim(ClaimAsk("w1", ttl=30, limit=5))  # the next commit claims
        assert claim.id == "y"
        with open_store(db_path) as store:
            store.start_workflow("wf", None, workflow_id="z")
        first = ClaimAsk("w1", ttl=30, limit=5)
        queued = Request(ask=first)
        queued.done = threading.Lock()
        queued.done.acquire()  # waiting, as a thread's would be
        committer._pending.append(queued)
        assert committer.claim(ClaimAsk("w1", ttl=30, limit=5)) == []  # z went to the first in this commit
        assert queued.answered and queued.done is None and [c.id for c in first.claims or []] == ["z"]
    finally:
        committer.stop()
    with open_store(db_path) as store:
        assert store.get_workflow("y").status == Status.RUNNING and store.list_commands("x") == []


# -- open_store: the one place a store is built


def test_open_store_takes_a_path_or_a_sqlite_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_store(tmp_path / "a.db") as store:
        store.start_workflow("wf", None, workflow_id="by-path")
    with open_store(f"sqlite:///{tmp_path / 'a.db'}", readonly=True) as store:  # absolute: four slashes
        assert store.get_workflow("by-path").status == "pending"
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:///b.db") as store:  # three slashes: relative to the current folder
        store.start_workflow("wf", None)
    assert (tmp_path / "b.db").exists()
    assert database_path("sqlite:///b.db") == Path("b.db")


@pytest.mark.parametrize(("url", "message"), [
    ("postgresql://ops:s3cret@/replaylog?host=/nonexistent", "cannot connect to postgresql://ops:***@/replaylog"),
    ("postgres://ops@/replaylog?host=/nonexistent&password=s3cret", "cannot connect to postgres://ops@/replaylog"),
    ("mysql://db.example/replaylog", "unknown store URL scheme mysql://"),
    ("sqlite:///", "sqlite:/// needs a file path"),
])
def test_open_store_refuses_other_urls_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str,
                                                   message: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match=re.escape(message)) as refused:
        open_store(url)
    assert "\n" not in str(refused.value) and "s3cret" not in str(refused.value)  # a URL's password stays out
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_worker_without_psycopg_is_refused_when_built(tmp_path: Path) -> None:
    """A worker loads its store's module as it is built: a missing psycopg is told then, in one line."""
    script = (
        "import sys; sys.modules['psycopg'] = None  # as on a machine without the postgres extra\n"
        "from replaylog.engine.app import Registry\n"
        "from replaylog.engine.errors import StoreError\n"
        "from replaylog.engine.worker import Worker\n"
        "try:\n"
        "    Worker('postgresql://u@/db?host=/nonexistent', Registry('none'))\n"
        "except StoreError as exc:\n"
        "    print('refused:', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out == "refused: PostgreSQL stores need psycopg: pip install 'replaylog[postgres]'\n"
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_callers_see_the_store_only_through_engine_store() -> None:
    """The worker, the command line and the console import the protocols, never a backend module."""
    root = Path(__file__).resolve().parent.parent
    callers = [root / "replaylog" / "engine" / name for name in ("check.py", "app.py", "core.py")]
    callers += sorted((root / "replaylog" / "engine" / "worker").glob("*.py"))
    callers += sorted((root / "replaylog").glob("*.py")) + sorted((root / "replaylog" / "console").glob("*.py"))
    offenders = []
    for path in callers:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("replaylog.engine.store."):
                offenders.append(f"{path.relative_to(root)}: from {node.module} import ...")
            elif isinstance(node, ast.Import):
                offenders += [f"{path.relative_to(root)}: import {a.name}" for a in node.names
                              if a.name.startswith("replaylog.engine.store.")]
            elif isinstance(node, ast.ImportFrom) and node.module == "replaylog.engine.store":
                offenders += [f"{path.relative_to(root)}: {a.name}" for a in node.names if a.name == "SQLiteStore"]
    assert offenders == []


def test_sqlite_errors_leave_the_store_as_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Callers catch the store's errors only: a lock held too long, a damaged or broken file, on any method."""
    import replaylog.engine.store.sqlite.connection as connection

    monkeypatch.setattr(connection, "BUSY_TIMEOUT_S", 0.1)
    db = tmp_path / "errors.db"
    with open_store(db) as store:
        store.start_workflow("wf", 1, workflow_id="a")
        (claim,) = store.claim("w", ttl=30)
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreBusyError):
                store.start_workflow("wf", 2)  # an operator write
            with pytest.raises(StoreBusyError):
                store.commit_record(claim, 0, CommandRecord("activity", "a", True, 1), ttl=30)  # the per-slot path
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        breaker = sqlite3.connect(db, isolation_level=None)
        breaker.execute("DROP TABLE signals")  # what no migration would do: an error SQLite names in its own words
        breaker.close()
        with pytest.raises(StoreError, match="no such table: signals") as raised:
            store.list_signals("a")
        assert not isinstance(raised.value, sqlite3.Error)
