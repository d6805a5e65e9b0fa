"""The SQLite store's compiled path (engine.store.sqlite.speedups) and its pure-Python fallback: the same answers.

The rest of the suite runs on whichever path this machine has (the compiled one wherever a
C compiler built it); these tests run both, on the same histories and statements, and run
the store's own tests once more with the compiled path turned off.
"""

from __future__ import annotations

import gc
import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import can_build
from replaylog.engine import marks, native
from replaylog.engine.core import CommandRecord, Outcome
from replaylog.engine.errors import StoreBusyError
from replaylog.engine.store import Claim, PendingRecord, WorkflowFilter, open_store
from replaylog.engine.store.sqlite import speedups
from replaylog.engine.vocab import Status

ROOT = Path(__file__).resolve().parent.parent
COMPILED = speedups.COMPILED



needs_compiled = pytest.mark.skipif(COMPILED is None, reason="the compiled path is not built or is turned off here")


@pytest.fixture(params=["compiled", "pure"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test once on the compiled path and once on the pure-Python one (stores opened after it is chosen)."""
    if request.param == "compiled":
        if COMPILED is None:
            pytest.skip("the compiled path is not built or is turned off here")
    else:
        monkeypatch.setattr(speedups, "COMPILED", None)
    return str(request.param)


def test_the_compiled_path_is_built_where_a_compiler_is() -> None:
    if os.environ.get(speedups.PURE_ENV, "") not in ("", "0"):
        pytest.skip(f"{speedups.PURE_ENV} turns the compiled path off in this run")
    if not can_build():
        pytest.skip("no C compiler or no Python headers on this machine: the pure-Python path runs")
    # `make test` installs with a compiler present: a build that silently fell back would
    # leave every other test on the pure path and the compiled one untested.
    assert COMPILED is not None, "the C extension was not built (pip install -e . shows why) or failed its checks"


def test_the_environment_turns_the_compiled_path_off() -> None:
    probe = "from replaylog.engine.store.sqlite import speedups; print(speedups.COMPILED is None)"
    for value, off in (("1", True), ("0", COMPILED is None), ("", COMPILED is None)):
        env = {**os.environ, speedups.PURE_ENV: value}
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == str(off), value


def test_version_says_which_path_the_slots_take() -> None:
    for value, expected in (("1", f"pure Python ({speedups.PURE_ENV} is set)"),
                            ("", "compiled" if COMPILED is not None else "pure Python (")):
        env = {**os.environ, speedups.PURE_ENV: value}
        out = subprocess.run([sys.executable, "-m", "replaylog", "--version"], env=env, capture_output=True,
                             text=True, check=True)
        lines = out.stdout.splitlines()
        assert lines[0].startswith("replaylog, version ") and lines[1].startswith(
            f"SQLite store's slot path: {expected}"), out.stdout
        marks_expected = ("pure Python (REPLAYLOG_PURE_PYTHON is set)" if value
                          else "compiled" if marks.COMPILED is not None else "pure Python (the C file was not built")
        assert lines[2].startswith(f"in-flight mark writer: {marks_expected}"), out.stdout
        mypyc_expected = ("pure Python (REPLAYLOG_PURE_PYTHON is set)" if value
                          else "compiled" if native.compiled_path() == "compiled" else "pure Python (")
        assert lines[3].startswith(f"per-slot modules (mypyc): {mypyc_expected}"), out.stdout


def _claim(store: Any) -> Claim:
    (claim,) = store.claim("w", ttl=30)
    return claim  # type: ignore[no-any-return]


# Every kind of value a slot holds, failures and retries among them.
_HISTORY = [
    CommandRecord("activity", "a", True, 0, None, 1, "k0"),
    CommandRecord("activity", "a", True, -7, None, 1, "k1"),
    CommandRecord("activity", "a", True, 123456789012345678, None, 1, "k2"),  # 18 digits
    CommandRecord("activity", "a", True, 10**30, None, 1, "k3"),
    CommandRecord("activity", "a", True, 2.5, None, 2, "k4"),
    CommandRecord("activity", "a", True, 1.0, None, 1, "k5"),
    CommandRecord("activity", "a", True, True, None, 1, "k6"),
    CommandRecord("activity", "a", True, None, None, 1, "k7"),
    CommandRecord("activity", "a", True, "07", None, 1, "k8"),
    CommandRecord("activity", "a", True, "-0", None, 1, None),
    CommandRecord("activity", "naïve ✓", True, {"k": [None, True, 1.5, "é"]}, None, 1, "k9"),
    CommandRecord("activity", "a", False, None, "ValueError: boom", 3, "k10"),
    CommandRecord("clock", "now", True, 1_700_000_000.25, None, 1, None),
    CommandRecord("activity", "a", True, [], None, 1, "k11"),
]


def _typed(value: Any) -> Any:
    """A value with its types spelled out: 1 == True == 1.0 in Python, not in a history."""
    if isinstance(value, dict):
        return ("dict", [(k, _typed(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_typed(v) for v in value])
    return (type(value).__name__, value)


def _history(store_path: Path) -> tuple[Any, ...]:
    with open_store(store_path) as store:
        return tuple(_typed(list(r)) for r in store.load_state("x").commands)


def test_a_history_reads_back_the_same_on_both_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if COMPILED is None:
        pytest.skip("the compiled path is not built or is turned off here")
    db = tmp_path / "history.db"
    with open_store(db) as store:
        store.start_workflow("wf", None, workflow_id="x")
        claim = _claim(store)
        for slot, record in enumerate(_HISTORY):
            assert store.commit_record(claim, slot, record, ttl=30)
        # A parallel group a worker died in: slot n+1 never recorded, n+2 was (a hole).
        n = len(_HISTORY)
        for slot in (n, n + 2):
            assert store.commit_record(claim, slot, CommandRecord("activity", "p", True, slot, None, 1, "kp"),
                                       ttl=30, parallel_group=n)
    compiled = _history(db)
    monkeypatch.setattr(speedups, "COMPILED", None)
    pure = _history(db)
    assert compiled == pure
    assert compiled[: len(_HISTORY)] == tuple(_typed(list(r)) for r in _HISTORY)
    assert len(compiled) == len(_HISTORY) + 3  # the hole is filled, as the pure path fills it


def test_a_lone_workflows_slots_are_fenced_on_both_paths(path: str, tmp_path: Path) -> None:
    db = tmp_path / f"{path}.db"
    with open_store(db) as store, open_store(db) as other:
        assert (store._compiled is not None) == (path == "compiled")  # type: ignore[attr-defined]
        store.start_workflow("wf", None, workflow_id="x")
        claim = _claim(store)
        for slot in range(4):  # the first fences the row; the rest are the one guarded statement
            assert store.commit_record(claim, slot, CommandRecord("activity", "a", True, slot, None, 1, "k"), ttl=30)
        assert not store.commit_record(claim, 2, CommandRecord("activity", "a", True, 9, None, 1, "k"), ttl=30)
        other._conn.execute("UPDATE workflows SET lease_expires = 0 WHERE id = 'x'")  # type: ignore[attr-defined]
        (taken,) = other.claim("w2", ttl=30)
        assert taken.epoch > claim.epoch
        # The old owner's next slot is refused; the new owner's is written.
        assert not store.commit_record(claim, 4, CommandRecord("activity", "a", True, 4, None, 1, "k"), ttl=30)
        assert other.commit_record(taken, 4, CommandRecord("activity", "a", True, 40, None, 1, "k"), ttl=30)
        assert [r.value for r in store.load_state("x").commands] == [0, 1, 2, 3, 40]


class _Clock:
    """A stand-in for commit.py's `time` module: its time() is what the test sets."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


def _updated_at(store: Any, workflow_id: str) -> float:
    return store._conn.execute("SELECT updated_at FROM workflows WHERE id = ?",  # type: ignore[no-any-return]
                               (workflow_id,)).fetchone()[0]


def test_the_lone_slot_restamps_the_row_once_a_second_on_both_paths(path: str, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # The guarded statement leaves the workflow's row alone; once UPDATED_AT_STEP has passed
    # since the row was last rewritten, the slot goes through the fenced transaction, which
    # rewrites updated_at. The compiled lone slot must give the slot up at the same moment.
    import replaylog.engine.store.sqlite.commit as commit
    from replaylog.engine.store.sqlite.fence import UPDATED_AT_STEP

    clock = _Clock(1_000_000.0)
    monkeypatch.setattr(commit, "time", clock)
    with open_store(tmp_path / f"{path}.db") as store:
        store.start_workflow("wf", None, workflow_id="x")
        claim = _claim(store)
        assert store.commit_record(claim, 0, CommandRecord("activity", "a", True, 0, None, 1, "k"), ttl=30)
        assert _updated_at(store, "x") == clock.now  # the first slot fences and rewrites the row
        stamped = clock.now
        for slot in range(1, 4):
            clock.now += UPDATED_AT_STEP / 4
            assert store.commit_record(claim, slot, CommandRecord("activity", "a", True, slot, None, 1, "k"), ttl=30)
            assert _updated_at(store, "x") == stamped  # the guarded statement: the row untouched
        clock.now = stamped + UPDATED_AT_STEP
        assert store.commit_record(claim, 4, CommandRecord("activity", "a", True, 4, None, 1, "k"), ttl=30)
        assert _updated_at(store, "x") == clock.now
        assert [r.value for r in store.load_state("x").commands] == [0, 1, 2, 3, 4]


def test_a_value_json_cannot_hold_fails_alike_on_both_paths(path: str, tmp_path: Path) -> None:
    with open_store(tmp_path / f"{path}.db") as store:
        store.start_workflow("wf", None, workflow_id="x")
        claim = _claim(store)
        assert store.commit_record(claim, 0, CommandRecord("activity", "a", True, 0, None, 1, "k"), ttl=30)
        for value, error in ((object(), TypeError), (float("nan"), ValueError)):
            with pytest.raises(error):
                store.commit_record(claim, 1, CommandRecord("activity", "a", True, value, None, 1, "k"), ttl=30)
        # Nothing was written, and the fence still takes slot 1 next (its text given, as the worker gives it).
        assert store.commit_record(claim, 1, CommandRecord("activity", "a", True, {"v": 1}, None, 1, "k"),
                                   '{"v": 1}', ttl=30)
        assert [r.value for r in store.load_state("x").commands] == [0, {"v": 1}]


def _rec(value: Any) -> CommandRecord:
    return CommandRecord("activity", "a", True, value, None, 1, "k")


def test_another_write_on_the_connection_does_not_lose_the_lease_on_both_paths(path: str, tmp_path: Path) -> None:
    # Another write on the committing connection (a start here) makes the commit fence forget
    # the slots it wrote, and the slots written without the row's rewrite left the row's
    # `slots` behind them: the next slot is still the next under this lease, and is written.
    with open_store(tmp_path / f"{path}.db") as store:
        claim = _running(store, 5)
        store.start_workflow("wf", None, workflow_id="y")
        stamped = _updated_at(store, "x")
        assert store.commit_record(claim, 5, _rec(5), ttl=30)
        assert _updated_at(store, "x") > stamped  # the row brought up to date, its time too
        assert store.commit_record(claim, 6, _rec(6), ttl=30)
        # What is not the next slot is refused still: one written already, or one past a gap.
        store.start_workflow("wf", None, workflow_id="z")
        assert not store.commit_record(claim, 4, _rec(-4), ttl=30)
        assert not store.commit_record(claim, 8, _rec(-8), ttl=30)
        assert store.commit_record(claim, 7, _rec(7), ttl=30)
        assert [r.value for r in store.load_state("x").commands] == list(range(8))
        # Nor is a new run's slot past its first.
        (fresh,) = store.claim("w", ttl=30)
        assert fresh.id == "y"
        assert not store.commit_record(fresh, 2, _rec(2), ttl=30)
        assert not store.load_state("y").commands


def test_a_failed_group_commit_does_not_lose_the_lease_on_both_paths(path: str, tmp_path: Path) -> None:
    # A group commit that fails (a value JSON cannot hold, in another workflow's slot) rolls
    # back every slot in it; the same slots, committed again, are written.
    with open_store(tmp_path / f"{path}.db") as store:
        claim = _running(store, 5)
        store.start_workflow("wf", None, workflow_id="y")
        (other,) = store.claim("w", ttl=30)
        with pytest.raises(TypeError):
            store.commit_batch([PendingRecord(claim, 5, _rec(5)), PendingRecord(other, 0, _rec(object()))], ttl=30)
        written, _ = store.commit_batch([PendingRecord(claim, 5, _rec(5)), PendingRecord(other, 0, _rec(0))], ttl=30)
        assert written == [True, True]
        assert store.commit_record(claim, 6, _rec(6), ttl=30)
        assert [r.value for r in store.load_state("x").commands] == list(range(7))
        assert [r.value for r in store.load_state("y").commands] == [0]


@needs_compiled
def test_the_compiled_lone_slot_reads_any_claim_as_python_does(tmp_path: Path) -> None:
    # lone_slot reads the claim's fields at their slot offsets when it is a Claim (__slots__),
    # and by name when it is anything else: a stand-in with the same fields is fenced alike,
    # and the real claim after it is read at its offsets again.
    from dataclasses import fields
    from types import SimpleNamespace

    with open_store(tmp_path / "any.db") as store:
        store.start_workflow("wf", None, workflow_id="x")
        claim = _claim(store)
        assert store.commit_record(claim, 0, CommandRecord("activity", "a", True, 0, None, 1, "k"), ttl=30)
        stand_in = SimpleNamespace(**{f.name: getattr(claim, f.name) for f in fields(Claim)})
        assert store.commit_record(stand_in, 1, CommandRecord("activity", "a", True, 1, None, 1, "k"),  # type: ignore[arg-type]
                                   ttl=30)
        assert store.commit_record(claim, 2, CommandRecord("activity", "a", True, 2, None, 1, "k"), ttl=30)
        # A stand-in of an older lease is refused, as that lease's claim would be.
        stale = SimpleNamespace(**{**vars(stand_in), "epoch": claim.epoch - 1})
        assert not store.commit_record(stale, 3, CommandRecord("activity", "a", True, -1, None, 1, "k"),  # type: ignore[arg-type]
                                       ttl=30)
        assert [r.value for r in store.load_state("x").commands] == [0, 1, 2]


def _inserts(store: Any, slots: range, claim: Claim) -> list[str]:
    """The slot statements the store runs for `slots` (each must be written), as SQLite's trace sees them."""
    seen: list[str] = []
    store._conn.set_trace_callback(seen.append)
    try:
        for slot in slots:
            assert store.commit_record(claim, slot, CommandRecord("activity", "a", True, slot, None, 1, "k"), ttl=30)
    finally:
        store._conn.set_trace_callback(None)
    return ["INSERT guarded" if "FROM workflows" in q else "INSERT unguarded"
            for q in seen if q.lstrip().upper().startswith("INSERT INTO COMMANDS")]


@needs_compiled
def test_the_compiled_lone_slot_skips_the_row_only_while_nothing_was_committed(tmp_path: Path) -> None:
    # The data-version fence: after a slot it wrote, the compiled lone slot writes the next
    # without the row's check while nobody (this connection included) committed anything in
    # between; any commit between sends the next slot through the row's check again.
    db = tmp_path / "version.db"
    with open_store(db) as store, open_store(db) as other:
        store.start_workflow("wf", None, workflow_id="x")
        store.start_workflow("wf", None, workflow_id="y")
        claims = {c.id: c for c in store.claim("w", ttl=30, limit=2)}
        claim = claims["x"]
        assert store.commit_record(claim, 0, CommandRecord("activity", "a", True, 0, None, 1, "k"), ttl=30)
        assert _inserts(store, range(1, 5), claim) == ["INSERT guarded"] + ["INSERT unguarded"] * 3
        other.start_workflow("wf", None, workflow_id="z")  # another connection's commit, the row untouched
        # Tried unguarded, its commit refused (the version moved), then written guarded.
        assert _inserts(store, range(5, 7), claim) == ["INSERT unguarded", "INSERT guarded", "INSERT unguarded"]
        # This connection's own commit (another workflow's slot) between two of x's.
        assert store.commit_record(claims["y"], 0, CommandRecord("activity", "a", True, 0, None, 1, "k"), ttl=30)
        assert _inserts(store, range(7, 9), claim) == ["INSERT guarded", "INSERT unguarded"]
        assert [r.value for r in store.load_state("x").commands] == list(range(9))
        assert [r.value for r in store.load_state("y").commands] == [0]


def _running(store: Any, slots: int) -> Claim:
    """Workflow "x" started and claimed, its slots 0 … `slots` - 1 written (their values the slot numbers)."""
    store.start_workflow("wf", None, workflow_id="x")
    claim = _claim(store)
    for slot in range(slots):
        assert store.commit_record(claim, slot, CommandRecord("activity", "a", True, slot, None, 1, "k"), ttl=30)
    return claim


def test_a_lease_taken_between_two_slots_refuses_the_next_on_both_paths(path: str, tmp_path: Path) -> None:
    # Slot after slot on one lease (on the compiled path, written without the row's check after
    # the first two), then another worker takes the lease over: the old owner's next slot is
    # refused and nothing of it is written, whichever path it took.
    db = tmp_path / f"{path}.db"
    with open_store(db) as store, open_store(db) as other:
        claim = _running(store, 6)
        other._conn.execute("UPDATE workflows SET lease_expires = 0 WHERE id = 'x'")  # type: ignore[attr-defined]
        (taken,) = other.claim("w2", ttl=30)
        assert not store.commit_record(claim, 6, CommandRecord("activity", "a", True, -6, None, 1, "k"), ttl=30)
        assert other.commit_record(taken, 6, CommandRecord("activity", "a", True, 60, None, 1, "k"), ttl=30)
        assert [r.value for r in other.load_state("x").commands] == [0, 1, 2, 3, 4, 5, 60]


def test_a_cancel_request_between_two_slots_stops_the_next_alike_on_both_paths(path: str, tmp_path: Path) -> None:
    # An operator's cancel request, committed by another connection between two slots, is
    # met by the next slot's commit on either path: the slot goes to the fenced transaction,
    # which writes it and reports the request (Commits.cancels), as it does on the pure path.
    db = tmp_path / f"{path}.db"
    with open_store(db) as store, open_store(db) as other:
        claim = _running(store, 3)
        other.cancel_workflow("x", reason="enough")
        assert store.commit_record(claim, 3, CommandRecord("activity", "a", True, 3, None, 1, "k"), ttl=30)
        assert store.cancels.get("x") == "enough"
        assert [r.value for r in store.load_state("x").commands] == [0, 1, 2, 3]


def test_a_lock_held_too_long_is_the_stores_busy_error_on_both_paths(path: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import replaylog.engine.store.sqlite.connection as connection

    monkeypatch.setattr(connection, "BUSY_TIMEOUT_S", 0.1)
    db = tmp_path / "busy.db"
    with open_store(db) as store:
        store.start_workflow("wf", None, workflow_id="x")
        claim = _claim(store)
        assert store.commit_record(claim, 0, CommandRecord("activity", "a", True, 0, None, 1, "k"), ttl=30)
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreBusyError, match="locked"):
                store.commit_record(claim, 1, CommandRecord("activity", "a", True, 1, None, 1, "k"), ttl=30)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        # Nothing was written, and the slot goes through once the lock is free.
        assert store.commit_record(claim, 1, CommandRecord("activity", "a", True, 1, None, 1, "k"), ttl=30)
        assert [r.value for r in store.load_state("x").commands] == [0, 1]


def _recorded_at(store: Any) -> list[float]:
    """When each slot of the store's one workflow was recorded, in slot order."""
    return [row[0] for row in store._conn.execute("SELECT recorded_at FROM commands ORDER BY slot_key")]


def test_a_slot_is_stamped_by_time_time_even_where_a_test_replaces_it_on_both_paths(
        path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The compiled store reads the wall clock without calling time.time, but only while
    # time.time is itself: a stand-in put in its place (as the console's snapshots freeze
    # time) stamps the slots it writes, as it does on the pure path.
    import time

    with open_store(tmp_path / f"{path}.db") as store:
        claim = _running(store, 3)  # the row fenced, then the lone statement
        before = time.time()
        assert store.commit_record(claim, 3, _rec(3), ttl=30)
        monkeypatch.setattr(time, "time", lambda: 1_234.5)
        assert store.commit_record(claim, 4, _rec(4), ttl=30)
        monkeypatch.undo()
        assert store.commit_record(claim, 5, _rec(5), ttl=30)
        stamps = _recorded_at(store)
        assert stamps[3] >= before and stamps[5] >= stamps[3]
        assert stamps[4] == 1_234.5


def test_a_slot_given_in_any_shape_is_written_alike_on_both_paths(path: str, tmp_path: Path) -> None:
    # The compiled store's commit_record takes the worker's call in C and hands any other
    # shape of call to the method: each is written, once, in order.
    with open_store(tmp_path / f"{path}.db") as store:
        claim = _running(store, 2)
        assert store.commit_record(claim, 2, _rec(2), '2', ttl=30, parallel_group=None, traceback=None)
        assert store.commit_record(claim, 3, _rec(3), text="3", ttl=30)
        assert store.commit_record(claim=claim, slot=4, rec=_rec(4), ttl=30)
        assert store.commit_record(claim, 5, _rec(5), None, traceback="tb", ttl=30)
        with pytest.raises(TypeError):
            store.commit_record(claim, 6, _rec(6))  # no ttl: refused, as the method refuses it
        with pytest.raises(TypeError):
            store.commit_record(claim, 6, _rec(6), ttl=30, colour="red")
        assert not store.commit_record(claim, 4, _rec(-4), ttl=30)
        assert [r.value for r in store.load_state("x").commands] == list(range(6))


@needs_compiled
def test_the_compiled_commit_record_is_each_writing_stores_own(tmp_path: Path) -> None:
    # Bound to one store (its connection, statements and fence), never to a read-only one nor
    # where a subclass has a commit_record of its own; a closed store lets go of it, and one
    # never closed is still collected.
    import weakref

    from replaylog.engine.store.sqlite.store import SQLiteStore

    db = tmp_path / "own.db"
    store = open_store(db)
    assert type(store.commit_record).__name__ == "Lone"
    with open_store(db, readonly=True) as reader:
        assert type(reader.commit_record).__name__ == "method"

    class Counting(SQLiteStore):
        calls = 0

        def commit_record(self, *args: Any, **kwargs: Any) -> bool:
            Counting.calls += 1
            return super().commit_record(*args, **kwargs)

    counting = Counting(db)
    counting.start_workflow("wf", None, workflow_id="x")
    claim = _claim(counting)
    assert counting.commit_record(claim, 0, _rec(0), ttl=30)
    assert Counting.calls == 1
    counting.close()
    ref = weakref.ref(store)
    store.close()
    assert type(store.commit_record).__name__ == "method"
    del store
    assert ref() is None  # closed: nothing refers to it any more
    forgotten = open_store(db)
    ref = weakref.ref(forgotten)
    del forgotten
    gc.collect()
    assert ref() is None  # never closed: the collector takes it and its compiled twin


def test_a_crowds_first_attempts_are_fenced_alike_on_both_paths(path: str, tmp_path: Path) -> None:
    # A group commit's commonest outcome under the fence's FAST rule (written without the
    # row's rewrite, on the compiled path by `first_try` in C): any other connection's commit
    # (a cancel request, a lease taken over) sends the next batch through the row's check,
    # which reports the cancel and refuses the lost lease; a stale slot or one past a gap is
    # refused; values are encoded as the pure path encodes them.
    db = tmp_path / f"{path}.db"

    def first(slot: int, value: Any = None) -> CommandRecord:
        return CommandRecord("activity", "tick", True, slot if value is None else value, None, 1, f"[{slot}]")

    with open_store(db) as store, open_store(db) as other:
        for wid in ("a", "b", "c"):
            store.start_workflow("wf", None, workflow_id=wid)
        claims = {c.id: c for c in store.claim("w1", ttl=30, limit=3)}
        a, b, c = claims["a"], claims["b"], claims["c"]
        for slot in (0, 1, 2):  # fenced, then FAST twice
            written, _ = store.commit_batch([PendingRecord(x, slot, first(slot)) for x in (a, b, c)], ttl=30)
            assert written == [True, True, True]
        other.cancel_workflow("b", reason="enough")
        other._conn.execute("UPDATE workflows SET lease_expires = 0 WHERE id = 'c'")  # type: ignore[attr-defined]
        (taken,) = other.claim("w2", ttl=30)
        assert taken.id == "c"
        written, _ = store.commit_batch([PendingRecord(x, 3, first(3)) for x in (a, b, c)], ttl=30)
        assert written == [True, True, False]
        assert store.cancels.get("b") == "enough"
        written, _ = store.commit_batch([
            PendingRecord(a, 4, first(4, {"k": [1, 2.5, None]})),  # FAST again, its value encoded here
            PendingRecord(a, 4, first(4, -1)),  # written just now: refused
            PendingRecord(a, 6, first(6, -1)),  # past a gap: refused
            PendingRecord(a, 5, first(5, "five"), '"five"'),
        ], ttl=30)
        assert written == [True, False, False, True]
        assert other.commit_batch([PendingRecord(taken, 3, first(3, 30))], ttl=30)[0] == [True]
        assert [r.value for r in store.load_state("a").commands] == [0, 1, 2, 3, {"k": [1, 2.5, None]}, "five"]
        assert [r.value for r in store.load_state("b").commands] == [0, 1, 2, 3]
        assert [r.value for r in store.load_state("c").commands] == [0, 1, 2, 30]
        assert [r.args for r in store.load_state("a").commands] == [f"[{i}]" for i in range(6)]


def test_closing_a_store_closes_its_file_on_both_paths(path: str, tmp_path: Path) -> None:
    # The compiled path keeps prepared statements; a connection closed with any left would
    # stay open (SQLite closes it with the last one), and the file's WAL with it.
    db = tmp_path / "close.db"
    store = open_store(db)
    store.start_workflow("wf", None, workflow_id="x")
    claim = _claim(store)
    written, _ = store.commit_batch([PendingRecord(claim, 0, CommandRecord("activity", "a", True, 0))], ttl=30)
    assert written == [True]
    for slot in range(1, 4):
        assert store.commit_record(claim, slot, CommandRecord("activity", "a", True, slot, None, 1, "k"), ttl=30)
    # (The claim's and the verdict's statements are kept by the compiled path too.)
    assert store.commit_batch(finishes=[(claim, Outcome(Status.COMPLETED, result=4))], ttl=30)[1] == [True]
    assert Path(f"{db}-wal").exists()
    store.close()
    assert not Path(f"{db}-wal").exists()  # the last connection closed: checkpointed and removed


def _twin_tables(tmp_path: Path, columns: str) -> tuple[sqlite3.Connection, sqlite3.Connection]:
    """Two databases with the same table `t` (k INTEGER PRIMARY KEY, `columns`): the compiled path's, sqlite3's."""
    twins = []
    for name in ("ours", "theirs"):
        conn = sqlite3.connect(tmp_path / f"{name}.db", isolation_level=None)
        conn.execute(f"CREATE TABLE t (k INTEGER PRIMARY KEY, {columns})")
        twins.append(conn)
    return twins[0], twins[1]


def _outcome(call: Any, *args: Any) -> object:
    """What `call(*args)` returned (the rows it changed), or the name of the exception it raised."""
    try:
        return call(*args)
    except Exception as exc:
        return type(exc).__name__


def _changed(run: Any, *args: Any) -> int:
    """The rows a sqlite3 `execute` or `executemany` (`run`) changed."""
    return int(run(*args).rowcount)


@needs_compiled
def test_compiled_statements_fail_as_sqlite3s_do(tmp_path: Path) -> None:
    assert COMPILED is not None
    conn = sqlite3.connect(tmp_path / "errors.db", isolation_level=None)
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v)")
    cache: dict[str, Any] = {}
    insert = "INSERT INTO t VALUES (?, ?)"
    assert COMPILED.execute(conn, cache, insert, (1, "a")) == 1
    cases: list[tuple[str, tuple[Any, ...]]] = [
        (insert, (1, "again")),  # the primary key
        (insert, (2,)),  # too few parameters
        (insert, (3, [1])),  # a type sqlite3 does not bind
        (insert, (2**70, "x")),  # past SQLite's 64-bit integers
        ("INSERT INTO nowhere VALUES (?)", (1,)),  # no such table
    ]
    for sql, params in cases:
        with pytest.raises(Exception) as ours:  # compared with sqlite3's own below
            COMPILED.execute(conn, cache, sql, params)
        with pytest.raises(Exception) as theirs:
            conn.execute(sql, params)
        assert type(ours.value) is type(theirs.value), (sql, params, ours.value, theirs.value)
        assert getattr(ours.value, "sqlite_errorcode", None) == getattr(theirs.value, "sqlite_errorcode", None)
    assert conn.execute("SELECT k, v FROM t").fetchall() == [(1, "a")]  # nothing else was written
    cache.clear()
    conn.close()
    with pytest.raises(sqlite3.ProgrammingError, match="closed database"):
        COMPILED.execute(conn, cache, insert, (5, "x"))
    with pytest.raises(TypeError, match=r"sqlite3\.Connection"):
        COMPILED.execute(object(), cache, insert, (5, "x"))  # type: ignore[arg-type]


@needs_compiled
def test_kept_bindings_write_what_each_call_passes(tmp_path: Path) -> None:
    # execute() binds again only the parameters that are not the objects it bound last time
    # (cached_stmt in _speedups.c). Calls that share some objects with the call before, bring
    # new ones, and fail half-way through binding must still write exactly what sqlite3 writes.
    assert COMPILED is not None
    ours, theirs = _twin_tables(tmp_path, "a, b, c, d")
    cache: dict[str, Any] = {}
    insert = "INSERT INTO t VALUES (?, ?, ?, ?, ?)"
    rng = random.Random(31)
    kept = ["same", "ü über", "x" * 300, 7, 2.5, None, 10**12]

    def fresh() -> Any:
        # Objects made anew each call: equal values, never the same object as before.
        return rng.choice([f"s{rng.random()}", "".join(["é", str(rng.randrange(9))]), rng.random(),
                           rng.randrange(10**15, 10**16)])

    params: tuple[Any, ...] = ()
    for k in range(400):
        row = [rng.choice(kept) if rng.random() < 0.6 else fresh() for _ in range(4)]
        if k % 37 == 5:
            row[rng.randrange(4)] = [1]  # a type neither binds: the call fails, nothing written
        params = (k, *row)
        outcomes = [_outcome(COMPILED.execute, ours, cache, insert, params),
                    _outcome(_changed, theirs.execute, insert, params)]
        assert outcomes[0] == outcomes[1], (k, params, outcomes)
        del row
        if k % 50 == 0:
            gc.collect()
    # The last call's very objects again, but for the key: only the key is bound anew.
    again = (1000, *params[1:])
    assert COMPILED.execute(ours, cache, insert, again) == 1
    theirs.execute(insert, again)
    dump = "SELECT k, a, b, c, d FROM t ORDER BY k"
    assert ours.execute(dump).fetchall() == theirs.execute(dump).fetchall()
    assert len(ours.execute(dump).fetchall()) > 350
    cache.clear()
    ours.close()
    theirs.close()


@needs_compiled
def test_compiled_fetch_and_execute_many_answer_as_sqlite3_does(tmp_path: Path) -> None:
    # fetch() and execute_many() (the hot statements' compiled path: connection.py's _fetch and
    # _execute_many) on kept prepared statements: the same rows, values, changes and errors as
    # sqlite3's execute().fetchall() and executemany(), whatever was bound before.
    assert COMPILED is not None
    ours, theirs = _twin_tables(tmp_path, "a, b")
    cache: dict[str, Any] = {}
    insert = "INSERT INTO t VALUES (?, ?, ?)"
    rng = random.Random(7)
    values = [None, 0, -1, 2**62, 2.5, "", "ü über", "x" * 500, Status.COMPLETED, True, b"\x00\xff"]
    for batch in range(30):
        rows = [(batch * 10 + i, rng.choice(values), rng.choice(values)) for i in range(rng.randrange(0, 6))]
        if batch % 7 == 3 and rows:
            rows[-1] = (rows[-1][0], [1], None)  # a type neither binds: the rows before it stay written
        outcomes = [_outcome(COMPILED.execute_many, ours, cache, insert, rows),
                    _outcome(_changed, theirs.executemany, insert, rows)]
        assert outcomes[0] == outcomes[1], (batch, rows, outcomes)
    select = "SELECT k, a, b, typeof(a) FROM t WHERE k >= ? AND (a IS ? OR ? IS NULL) ORDER BY k"
    for low, match in [(0, None), (50, None), (0, "ü über"), (290, 2.5), (10**6, None), (0, 0)]:
        got = COMPILED.fetch(ours, cache, select, (low, match, match))
        assert got == theirs.execute(select, (low, match, match)).fetchall()
        assert all(type(x) is type(y) for r, s in zip(got, theirs.execute(select, (low, match, match)), strict=True)
                   for x, y in zip(r, s, strict=True))
    assert len(COMPILED.fetch(ours, cache, "SELECT * FROM t", ())) > 40
    assert COMPILED.fetch(ours, cache, "SELECT k FROM t WHERE k < 0", ()) == []
    many = COMPILED.fetch(ours, cache, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300)"
                                       " SELECT i, 'r' || i FROM n", ())  # past the rows read between GIL releases
    assert many == [(i, f"r{i}") for i in range(1, 301)]
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        COMPILED.fetch(ours, cache, "SELECT * FROM nowhere", ())
    with pytest.raises(sqlite3.ProgrammingError, match="Incorrect number of bindings"):
        COMPILED.fetch(ours, cache, select, (1,))
    with pytest.raises(TypeError, match="tuples"):
        COMPILED.execute_many(ours, cache, insert, [[999, 1, 2]])  # type: ignore[list-item]
    cache.clear()
    ours.close()
    theirs.close()


@needs_compiled
def test_claims_of_any_size_keep_a_few_statements(tmp_path: Path) -> None:
    # The compiled path keeps every statement it prepared for the connection's life: a claim's
    # read of the rows it takes pads its id list to a power of two, so claims of 1 to 20
    # workflows keep six texts of it, and each claim takes what it asked for, once each.
    with open_store(tmp_path / "claims.db") as store:
        for i in range(220):
            store.start_workflow("wf", None, workflow_id=f"w{i:03}")
        taken: list[str] = []
        for limit in range(1, 21):
            claims = store.claim("w", ttl=30, limit=limit)
            assert len(claims) == limit
            taken += [c.id for c in claims]
        assert sorted(taken) == [f"w{i:03}" for i in range(210)]
        kept = [sql for sql in store._stmts if " IN (" in sql]  # type: ignore[attr-defined]
        assert sorted(sql.count("?") for sql in kept) == [1, 2, 4, 8, 16, 32]


def test_a_completed_verdict_leaves_no_error_on_its_row_on_both_paths(path: str, tmp_path: Path) -> None:
    # A completed verdict leaves `error` out of its UPDATE (no full-text trigger fired; commit.py's
    # _COMPLETED) and clears an error the row still held (an odd import can leave one): the
    # workflow ends with no error, and a search of errors no longer finds it.
    db = tmp_path / f"{path}.db"
    with open_store(db) as store:
        for wid in ("clean", "stale"):
            store.start_workflow("wf", None, workflow_id=wid)
        store._conn.execute("UPDATE workflows SET error = 'left behind' WHERE id = 'stale'")  # type: ignore[attr-defined]
        assert [w.id for w in store.list_workflows(where=WorkflowFilter(error_text="behind"))] == ["stale"]
        claims = store.claim("w", ttl=30, limit=2)
        assert len(claims) == 2
        _, finished = store.commit_batch(finishes=[(c, Outcome(Status.COMPLETED, result={"n": c.id})) for c in claims],
                                         ttl=30)
        assert finished == [True, True]
        for wid in ("clean", "stale"):
            row = store.get_workflow(wid)
            assert (row.status, row.result, row.error) == (Status.COMPLETED, {"n": wid}, None)
        assert store.list_workflows(where=WorkflowFilter(error_text="behind")) == []
        # A failed verdict still writes its error, and the search finds it.
        store.start_workflow("wf", None, workflow_id="bad")
        (claim,) = store.claim("w", ttl=30)
        _, finished = store.commit_batch(finishes=[(claim, Outcome(Status.FAILED, error="boom happened"))], ttl=30)
        assert finished == [True]
        assert [w.id for w in store.list_workflows(where=WorkflowFilter(error_text="boom"))] == ["bad"]


def test_the_store_tests_pass_with_the_compiled_path_off(tmp_path: Path) -> None:
    # The fallback is what runs wherever the extensions could not be built: the store's own
    # tests (SQLite's half), the mark file's, the worker's and the replay core's (its cursor,
    # engine.cursor, from its source), run again on it in a process of their own (mypyc's
    # modules from their sources: tests/test_native.py).
    env = {**os.environ, speedups.PURE_ENV: "1"}
    files = ["tests/test_store.py", "tests/test_parallel.py", "tests/test_fault_lease.py", "tests/test_value_cap.py",
             "tests/test_marks.py", "tests/test_core.py", "tests/test_arg_guard.py", "tests/test_tracebacks.py"]
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "-k", "not postgresql",
         "--basetemp", str(tmp_path / "pure"), *files],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and " failed" not in out.stdout
