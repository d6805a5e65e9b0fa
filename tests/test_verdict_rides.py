"""A run's verdict rides in the commit of its last outcome (WorkflowRun.ride, Committer.add_finish).

While another thread leads a commit, a workflow thread queues its outcome and runs on; a run
that ends there adds its verdict to that queued outcome and its thread takes the next
workflow without waiting for either. Both are written in one transaction, the verdict only
if the outcome was; should that commit fail, the activity's start mark, kept in the mark file
meanwhile, is kept in the database.

The worker tests hold one workflow's commit in progress, deterministically, while the other's
run ends: the worker's event hook, called by that commit's leader as it answers, waits.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import on_server, wait_for
from replaylog import Context, activity, workflow
from replaylog.engine.app import Registry
from replaylog.engine.core import CommandRecord, Outcome
from replaylog.engine.marks import read_marks
from replaylog.engine.store import PendingRecord, open_store
from replaylog.engine.store.shared.keys import slot_key
from replaylog.engine.vocab import Status
from replaylog.engine.worker import Worker
from replaylog.engine.worker import loop as worker_loop
from replaylog.engine.worker.committer import Committer, Request

DEADLINE = 60.0  # seconds: a generous bound for a loaded machine, never a measured window

# The activities' gates, set by the worker tests: each key's activity waits for its own.
GATES: dict[str, threading.Event] = {}
STARTED: dict[str, threading.Event] = {}


@activity
def gated(key: str) -> str:
    """Says it started, then waits for the test to let it return."""
    STARTED[key].set()
    if not GATES[key].wait(DEADLINE):
        raise RuntimeError(f"the test never let {key} go")
    return key


@workflow
def one_gated(ctx: Context, key: str) -> str:
    """One gated activity."""
    return str(ctx.call_activity(gated, key))


def _rec(value: int) -> CommandRecord:
    return CommandRecord("activity", "a", True, value, None, 1, "k")


def _completed(value: int) -> Outcome:
    return Outcome(status=Status.COMPLETED, result=value, executed_commands=1)


def test_a_verdict_added_to_a_queued_outcome_is_written_in_its_commit_after_it(db: Path | str) -> None:
    with open_store(db) as store:
        for wid in ("w", "v"):
            store.start_workflow("wf", None, workflow_id=wid)
        claims = {c.id: c for c in store.claim("me", ttl=60, limit=2)}
    committer = Committer(db, ttl=60)
    committer.start()
    try:
        heard: list[Request] = []
        outcome = Request(record=PendingRecord(claims["w"], 0, _rec(7)))
        assert committer.enqueue(outcome)  # nobody leads: queued for its thread, or the next commit
        verdict = Request(finish=(claims["w"], _completed(7)), then=heard.append)
        assert committer.add_finish(outcome, verdict)
        assert committer.verdicts_ridden == 1
        # Another workflow's slot commits what is queued, and itself, in one transaction.
        assert committer.commit_record(claims["v"], 0, _rec(1))
        assert heard == [outcome] and outcome.ok and outcome.error is None
        # Its commit began (and ended): a verdict comes too late for it.
        assert not committer.add_finish(outcome, Request(finish=(claims["w"], _completed(7))))
        assert committer.verdicts_ridden == 1
    finally:
        committer.stop()
    with open_store(db, readonly=True) as store:
        w = store.get_workflow("w")
        assert (w.status, w.result, w.slots) == ("completed", 7, 1)
        assert [c.value for c in store.list_commands("w")] == [7]
        assert store.get_workflow("v").status == "running"


def test_a_verdict_riding_an_outcome_its_lease_refuses_is_refused_with_it(db: Path | str) -> None:
    with open_store(db) as store:
        store.start_workflow("wf", None, workflow_id="w")
        (old,) = store.claim("old", ttl=0.0, limit=1)  # lapses at once
        end = time.monotonic() + DEADLINE
        while not (taken := store.claim("new", ttl=60, limit=1)):
            assert time.monotonic() < end, "the lapsed lease was never taken over"
            time.sleep(0.01)
        assert taken[0].epoch == old.epoch + 1
    committer = Committer(db, ttl=60)
    committer.start()
    try:
        heard: list[Request] = []
        outcome = Request(record=PendingRecord(old, 0, _rec(7)))
        assert committer.enqueue(outcome)
        assert committer.add_finish(outcome, Request(finish=(old, _completed(7)), then=heard.append))
        assert committer.commit_stale(-1) != -1  # (the first look only notes what is queued)
        committer.commit_stale(committer.enqueued)  # nobody came back for it: committed here
        assert heard == [outcome] and outcome.error is None and not outcome.ok
    finally:
        committer.stop()
    with open_store(db, readonly=True) as store:
        w = store.get_workflow("w")
        assert (w.status, w.lease_owner) == ("running", "new")
        assert store.list_commands("w") == []


def _two_runs(db: Path, *, refuse_b: bool, concurrency: int = 3) -> tuple[Worker, dict[str, str], list[str]]:
    """Workflows a and b on a worker. a's verdict is answered first and its answer
    held (its commit's leader stays in the commit) while b's run ends, so b's verdict rides b's
    last outcome; b's thread then runs a third workflow, c, whose activity starts before that
    commit. With `refuse_b` a trigger refuses b's slot when it comes. Returns the worker (stopped),
    a and b's statuses and what the worker said of b."""
    for key in ("a", "b", "c"):
        GATES[key], STARTED[key] = threading.Event(), threading.Event()
    with open_store(db) as store:
        for key in ("a", "b"):
            store.start_workflow("one_gated", key, workflow_id=key)
    # A long lease: b's, once its commit failed, must not lapse and run again during the test.
    # Three threads at most (by default), two started for a and b: c, claimed once b's run ended,
    # is run by the one of them that is idle then, b's (threads are started only when none is idle).
    worker = Worker(db, Registry.from_module(sys.modules[__name__]), concurrency=concurrency, ttl=600)
    # The loop claims on its own connection: a claim riding the group commit would wait, with
    # b's outcome, for the commit held up below.
    worker._claims_ride = False
    said: list[str] = []
    a_answered, a_go, a_let_go = threading.Event(), threading.Event(), threading.Event()

    def on_event(wid: str, text: str) -> None:
        if wid == "a" and text.startswith("completed"):
            a_answered.set()
            a_go.wait(DEADLINE)  # the commit that answered it is not over until this returns
            a_let_go.set()
        elif wid == "b":
            said.append(text)

    worker.on_event = on_event
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: STARTED["a"].is_set() and STARTED["b"].is_set()), "both activities to start"
        GATES["a"].set()
        assert wait_for(a_answered.is_set), "a's verdict to be answered"
        GATES["b"].set()
        assert wait_for(lambda: worker.committer.verdicts_ridden == 1), "b's verdict to ride its outcome"
        with open_store(db) as store:
            store.start_workflow("one_gated", "c", workflow_id="c")
            b_slot = slot_key(store._conn.execute(  # type: ignore[attr-defined]
                "SELECT seq FROM workflows WHERE id = 'b'").fetchone()[0], 0)
        assert wait_for(STARTED["c"].is_set), "c to start on b's thread"
        assert not a_let_go.is_set(), "c started only once a's commit let go"
        # b's outcome is not committed yet: its start mark is still in the mark file, though
        # its thread has since marked c's activity.
        assert [(m.slot, m.name) for m in read_marks(db, "b")] == [(0, "gated")]
        assert [(m.slot, m.name) for m in read_marks(db, "c")] == [(0, "gated")]
        if refuse_b:
            with sqlite3.connect(db) as conn:
                conn.execute(f"CREATE TRIGGER boom BEFORE INSERT ON commands WHEN NEW.slot_key = {b_slot}"
                             " BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
        a_go.set()  # the leader goes on, and commits b's outcome with its verdict
        assert wait_for(lambda: bool(said)), "b's verdict to be answered"
        assert wait_for(lambda: len(worker._spare_marks) == worker_loop.PARKED_MARKS), "the kept mark's record back"
        GATES["c"].set()
        with open_store(db, readonly=True) as store:
            assert wait_for(lambda: store.get_workflow("c").status == "completed"), "c to complete"
            statuses = {key: store.get_workflow(key).status for key in ("a", "b")}
    finally:
        a_go.set()
        for gate in GATES.values():
            gate.set()
        worker.stop()
        thread.join(DEADLINE)
    assert not thread.is_alive()
    return worker, statuses, said


def test_a_runs_verdict_rides_its_last_outcome_queued_behind_a_commit_in_progress(db_path: Path) -> None:
    worker, statuses, said = _two_runs(db_path, refuse_b=False)
    assert statuses == {"a": "completed", "b": "completed"}
    assert said == ["completed"]
    assert worker.completed == 3
    with open_store(db_path, readonly=True) as store:
        assert [c.value for c in store.list_commands("b")] == ["b"]
        assert store.get_workflow("b").result == "b"
        # Its start mark stayed in the mark file: once the slot is recorded nothing is in flight.
        assert store.inflight("b") is None
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM inflight").fetchone()[0] == 0


def test_a_thread_whose_runs_verdict_is_on_its_way_is_free_for_the_next_claim(db_path: Path) -> None:
    # Two threads: a's is held in its commit, b's run has ended with its verdict not yet
    # answered. b's thread holds nothing, so c is claimed and runs on it meanwhile; counted as
    # busy until its verdict was answered, b would have kept c out until a's commit let go.
    worker, statuses, said = _two_runs(db_path, refuse_b=False, concurrency=2)
    assert statuses == {"a": "completed", "b": "completed"}
    assert said == ["completed"]
    assert worker.completed == 3 and len(worker._threads) == 2


def test_a_ridden_verdicts_failed_commit_keeps_the_outcomes_start_mark_in_the_database(db_path: Path) -> None:
    _, statuses, said = _two_runs(db_path, refuse_b=True)
    assert statuses == {"a": "completed", "b": "running"}
    assert len(said) == 1 and said[0].startswith("left for another try after a worker error")
    assert "refused by the test" in said[0]
    with open_store(db_path, readonly=True) as store:
        assert store.list_commands("b") == []
    # The activity ran and its outcome is not recorded: its mark is kept in the table (the worker
    # that held it lives on, and its thread's record now holds other marks).
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute("SELECT slot, name, attempts FROM inflight WHERE workflow_id = 'b'").fetchall()
    assert rows == [(0, "gated", 1)]


def test_a_lone_workflows_last_outcome_and_verdict_share_a_commit_on_a_server_only(
        db: Path | str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On PostgreSQL a lone workflow queues its outcomes (its next start mark rides them): its last
    one and its verdict are one commit, led by its own thread. On SQLite a lone workflow commits
    each outcome at once (nothing to ride it), then its verdict."""
    # The loop never commits the queued outcome first (it would after DEFERRED_FOR of workflow code).
    monkeypatch.setattr(worker_loop, "DEFERRED_FOR", 600.0)
    GATES["solo"], STARTED["solo"] = threading.Event(), threading.Event()
    GATES["solo"].set()
    with open_store(db) as store:
        store.start_workflow("one_gated", "solo", workflow_id="solo")
        server = on_server(store)
    worker = Worker(db, Registry.from_module(sys.modules[__name__]), concurrency=1)
    worker.run(until_idle=True)
    assert worker.completed == 1
    # (On SQLite the worker's claim is made in a commit of the committer's too: one more.)
    assert (worker.committer.verdicts_ridden, worker.committer.batches) == ((1, 1) if server else (0, 3))
    with open_store(db, readonly=True) as store:
        solo = store.get_workflow("solo")
        assert (solo.status, solo.result) == ("completed", "solo")
        assert [c.value for c in store.list_commands("solo")] == ["solo"]
