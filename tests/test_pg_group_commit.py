"""Group commit on PostgreSQL: one statement a batch, and start marks that ride the commit before them.

A batch of slots of different workflows is one statement (engine.store.postgres.commit,
"one statement a batch"): each slot is fenced by its own workflow's lease and slot count.

While another thread leads a commit, a workflow thread queues its outcome without waiting
(`Committer.enqueue`), goes on to its next activity, adds that activity's start mark to
the queued request (`Committer.add_mark`) and waits once, for both (`Committer.wait_for`).
These tests hold a commit up with a row lock taken from another connection, so that what
queues behind it and when the leader takes it are states the test sees, not timings.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from pg_server import LibpqLosingFirstAnswer

from conftest import wait_for
from replaylog import Context, activity, workflow
from replaylog.engine.app import Registry
from replaylog.engine.core import CommandRecord
from replaylog.engine.store import Claim, PendingRecord, open_store
from replaylog.engine.store.postgres import commit as pg_commit
from replaylog.engine.worker import Worker
from replaylog.engine.worker.committer import ALONE_BELOW, Committer, Request

URL: list[str] = []
# What each activity found when it ran: (workflow id, its slot, outcomes recorded, the slot its mark is of).
SEEN: list[tuple[str, int, int, int | None]] = []
_local = threading.local()
_CONNS: list[psycopg.Connection[tuple[object, ...]]] = []


def _conn() -> psycopg.Connection[tuple[object, ...]]:
    """This thread's own connection to the test's database (autocommit: it sees what is committed)."""
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = _local.conn = psycopg.connect(URL[0], autocommit=True)
        _CONNS.append(conn)
    return conn


@activity
def look(wid: str, i: int) -> int:
    """Note what the database holds of this workflow as its `i`-th activity starts."""
    conn = _conn()
    # (The count of its command rows: the row's `slots` lags them under the lock fence.)
    row = conn.execute("SELECT count(*) FROM replaylog.commands c, replaylog.workflows w WHERE w.id = %s"
                       " AND c.slot_key BETWEEN w.seq << 32 AND ((w.seq + 1) << 32) - 1", (wid,)).fetchone()
    mark = conn.execute("SELECT slot FROM replaylog.inflight WHERE workflow_id = %s AND lane = 0", (wid,)).fetchone()
    assert row is not None
    SEEN.append((wid, i, int(row[0]), None if mark is None else int(mark[0])))  # type: ignore[call-overload]
    return i


@workflow
def chain(ctx: Context, n: int) -> int:
    """`n` activities, each looking at what is committed of the ones before."""
    for i in range(n):
        ctx.call_activity(look, ctx.workflow_id, i)
    return n


def _run(url: str, concurrency: int) -> Worker:
    """A worker of this module's workflows, run until nothing is left to do; the activities' connections closed."""
    worker = Worker(url, Registry.from_module(sys.modules[__name__]), concurrency=concurrency)
    try:
        worker.run(until_idle=True)
    finally:
        for conn in _CONNS:
            conn.close()
        _CONNS.clear()
    return worker


def test_no_activity_runs_before_the_outcome_before_it_is_durable_and_its_ridden_mark_with_it(pg_url: str) -> None:
    URL[:] = [pg_url]
    SEEN.clear()
    workflows, slots = 8, 25
    with open_store(pg_url) as store:
        for _ in range(workflows):
            store.start_workflow("chain", slots)
    worker = _run(pg_url, workflows)
    assert worker.completed == workflows
    assert len(SEEN) == workflows * slots
    # Every activity found the outcomes of all the slots before it committed, seen from another
    # connection: the workflow went on before its outcome was durable, but no activity ran before.
    early = [(wid, i, recorded) for wid, i, recorded, _ in SEEN if recorded != i]
    assert early == []
    # Marks rode commits here (8 threads on one committer crowd it), and each activity whose mark
    # rode found it committed; a mark sent alone (its commit had begun) may still be on its way.
    ridden = worker.committer.marks_ridden
    seen_marked = sum(1 for _, i, _, marked in SEEN if marked == i)
    assert ridden > 0
    assert seen_marked >= ridden


def _claims(store_url: str, *ids: str) -> dict[str, Claim]:
    with open_store(store_url) as s:
        for wid in ids:
            s.start_workflow("wf", 1, workflow_id=wid)
        return {c.id: c for c in s.claim("w1", ttl=60, limit=len(ids))}


def _rec(name: str) -> CommandRecord:
    return CommandRecord("activity", name, True, 1, None, 1, None)


@contextmanager
def _row_locked(url: str, wid: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """Hold workflow `wid`'s row locked (a commit that fences on it waits) until the block ends."""
    with psycopg.connect(url) as conn:
        conn.execute("SELECT 1 FROM replaylog.workflows WHERE id = %s FOR UPDATE", (wid,))
        yield conn
        conn.commit()


def _waiting_on_a_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                           " AND wait_event_type = 'Lock'").fetchone()
    return row is not None and int(row[0]) > 0  # type: ignore[call-overload]


class _Leader:
    """A thread that commits `claim`'s slot 0 and so leads a commit; `join` it once its row is let go."""

    def __init__(self, committer: Committer, claim: Claim) -> None:
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._lead, args=(committer, claim))
        self.thread.start()

    def _lead(self, committer: Committer, claim: Claim) -> None:
        try:
            assert committer.commit_record(claim, 0, _rec("first"))
        except BaseException as exc:  # reported by join
            self.errors.append(exc)

    def join(self) -> None:
        self.thread.join(timeout=120)
        assert not self.thread.is_alive() and self.errors == []


@pytest.fixture
def committer(pg_url: str) -> Iterator[Committer]:
    c = Committer(pg_url, ttl=60)
    c.start()
    yield c
    c.stop()


def _inflight(url: str, wid: str) -> tuple[object, ...] | None:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT slot, name FROM replaylog.inflight WHERE workflow_id = %s AND lane = 0",
                            (wid,)).fetchone()


def _names(url: str, wid: str) -> list[str]:
    with open_store(url) as s:
        return [c.name for c in s.list_commands(wid)]


def test_a_mark_added_to_a_queued_outcome_is_committed_with_it(pg_url: str, committer: Committer) -> None:
    claims = _claims(pg_url, "a", "b")
    with _row_locked(pg_url, "a"):
        leader = _Leader(committer, claims["a"])
        assert wait_for(lambda: _waiting_on_a_lock(pg_url), timeout=120)  # a's commit is in progress
        req = Request(record=PendingRecord(claims["b"], 0, _rec("b0")))
        assert committer.enqueue(req)  # queued behind it; this thread goes on
        assert committer.add_mark(req, (claims["b"], 1, "b1", 1, time.time(), 0))
        assert _names(pg_url, "b") == [] and _inflight(pg_url, "b") is None
    leader.join()
    # The leader committed the queued request after its own (its thread was not waiting yet).
    assert committer.wait_for(req)
    assert _names(pg_url, "b") == ["b0"] and _inflight(pg_url, "b") == (1, "b1")
    assert committer.marks_ridden == 1
    # With no commit in progress, in a crowd (several outcomes a commit), nothing is queued: the
    # caller commits the ordinary way (a commit left waiting for its thread's code idles the server).
    committer.crowd = ALONE_BELOW
    assert not committer.enqueue(Request(record=PendingRecord(claims["b"], 1, _rec("b1"))))


def test_a_lone_outcome_waits_for_its_own_thread_and_its_next_mark(pg_url: str, committer: Committer) -> None:
    claims = _claims(pg_url, "b")
    assert committer.crowd < ALONE_BELOW  # (commits of one outcome each)
    req = Request(record=PendingRecord(claims["b"], 0, _rec("b0")))
    assert committer.enqueue(req)  # nobody leads: queued all the same, for its own thread
    assert committer.add_mark(req, (claims["b"], 1, "b1", 1, time.time(), 0))
    assert _names(pg_url, "b") == [] and _inflight(pg_url, "b") is None
    assert committer.wait_for(req)  # this thread leads: one statement for both
    assert _names(pg_url, "b") == ["b0"] and _inflight(pg_url, "b") == (1, "b1")
    assert committer.marks_ridden == 1 and committer.batches == 1


def test_an_outcome_whose_thread_is_slow_to_come_back_is_committed_by_commit_stale(pg_url: str,
                                                                                    committer: Committer) -> None:
    claims = _claims(pg_url, "b")
    woken: list[int] = []
    committer.on_defer = lambda: woken.append(1)
    req = Request(record=PendingRecord(claims["b"], 0, _rec("b0")))
    assert committer.enqueue(req)
    assert woken == [1] and committer.watching  # the worker's loop now looks every half DEFERRED_FOR
    seen = committer.commit_stale(-1)  # queued since the last look: left for its thread
    assert _names(pg_url, "b") == [] and committer.stale_commits == 0
    assert committer.commit_stale(seen) == seen  # nothing queued since: it is stale
    assert _names(pg_url, "b") == ["b0"] and committer.stale_commits == 1
    assert req.answered
    assert not committer.add_mark(req, (claims["b"], 1, "b1", 1, time.time(), 0))  # too late to ride
    assert committer.wait_for(req)
    # Watching ends once commits are crowded and nothing waits unled; the next deferral wakes the loop again.
    committer.commit_stale(committer.enqueued)
    assert committer.watching
    committer.crowd = ALONE_BELOW
    committer.commit_stale(committer.enqueued)
    assert not committer.watching
    committer.crowd = 1.0
    again = Request(record=PendingRecord(claims["b"], 1, _rec("b1")))
    assert committer.enqueue(again)
    assert woken == [1, 1]
    assert committer.wait_for(again)


def test_a_queued_outcome_whose_lease_was_taken_is_refused_and_so_is_its_mark(pg_url: str,
                                                                              committer: Committer) -> None:
    claims = _claims(pg_url, "a", "b")
    with _row_locked(pg_url, "a") as locker:
        leader = _Leader(committer, claims["a"])
        assert wait_for(lambda: _waiting_on_a_lock(pg_url), timeout=120)
        req = Request(record=PendingRecord(claims["b"], 0, _rec("b0")))
        assert committer.enqueue(req)
        assert committer.add_mark(req, (claims["b"], 1, "b1", 1, time.time(), 0))
        # Another worker's claim meanwhile: b's lease has a new epoch (committed with the lock's end).
        locker.execute("UPDATE replaylog.workflows SET lease_epoch = lease_epoch + 1 WHERE id = 'b'")
    leader.join()
    assert not committer.wait_for(req)
    assert _names(pg_url, "b") == [] and _inflight(pg_url, "b") is None
    assert _names(pg_url, "a") == ["first"]


def test_a_mark_comes_too_late_once_its_outcomes_commit_began(pg_url: str, committer: Committer) -> None:
    claims = _claims(pg_url, "a", "b")
    with _row_locked(pg_url, "b"):
        with _row_locked(pg_url, "a"):
            leader = _Leader(committer, claims["a"])
            assert wait_for(lambda: _waiting_on_a_lock(pg_url), timeout=120)
            req = Request(record=PendingRecord(claims["b"], 0, _rec("b0")))
            assert committer.enqueue(req)
        # a's commit ended; the leader took b's outcome into the next, which waits on b's row.
        assert wait_for(lambda: _names(pg_url, "a") == ["first"] and _waiting_on_a_lock(pg_url), timeout=120)
        assert not committer.add_mark(req, (claims["b"], 1, "b1", 1, time.time(), 0))
    leader.join()
    assert committer.wait_for(req)
    assert _names(pg_url, "b") == ["b0"] and _inflight(pg_url, "b") is None
    assert committer.marks_ridden == 0


def _act(name: str, value: object, text: str | None = None, ok: bool = True, error: str | None = None,
         args: str | None = None) -> CommandRecord:
    return CommandRecord("activity", name, ok, value, error, 1, args)


def test_one_statement_fences_each_slot_by_its_own_workflow_and_keeps_every_value_exactly(pg_url: str) -> None:
    ids = ["ok1", "ok2", "taken", "cancelled", "stale", "failed"]
    claims = _claims(pg_url, *ids)
    with open_store(pg_url) as s, open_store(pg_url) as other:
        written, _ = s.commit_batch([PendingRecord(claims[w], 0, _rec("first")) for w in ids], ttl=60)
        assert written == [True] * len(ids)
        other.cancel_workflow("cancelled", reason="enough")
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("UPDATE replaylog.workflows SET lease_epoch = lease_epoch + 1 WHERE id = 'taken'")
        odd = '{"k": [1, 2.5, null], "q": "a \\"quoted\\" back\\\\slash é 😀"}'
        batch = [
            PendingRecord(claims["ok1"], 1, _act("a", None, args='["x"]'), odd),
            PendingRecord(claims["ok2"], 1, _act("b", "line\nbreak")),
            PendingRecord(claims["taken"], 1, _act("c", 3)),  # another lease now
            PendingRecord(claims["cancelled"], 1, _act("d", 4)),  # written, and the cancel reported
            PendingRecord(claims["stale"], 0, _act("e", 5)),  # slot 0 is written already
            PendingRecord(claims["failed"], 1, _act("f", None, ok=False, error="ValueError: no"), None, None, "tb"),
        ]
        marks = [(claims[w], 2, f"next-{w}", 1, 1_764_900_000.123_456_7, 0) for w in ids]
        written, _ = s.commit_batch(batch, ttl=60, marks=marks)
        assert written == [True, True, False, True, False, True]
        assert s.cancels.get("cancelled") == "enough"
        with psycopg.connect(pg_url, autocommit=True) as conn:
            raw = conn.execute("SELECT value FROM replaylog.command_log"
                               " WHERE workflow_id = 'ok1' AND slot = 1").fetchone()
        assert raw == (odd,)  # the very text, not a re-encoding of it
        state = s.load_state("ok1")
        assert state.commands[1].value == {"k": [1, 2.5, None], "q": 'a "quoted" back\\slash é 😀'}
        assert state.commands[1].args == '["x"]'
        assert s.load_state("ok2").commands[1].value == "line\nbreak"
        failed = s.list_commands("failed")[1]
        assert (failed.ok, failed.error, failed.traceback) == (False, "ValueError: no", "tb")
        assert [len(s.list_commands(w)) for w in ids] == [2, 2, 1, 2, 1, 2]
        # A mark is written where its workflow's slot was, and nowhere else, its time exact.
        for w, has in zip(ids, written, strict=True):
            mark = other.inflight(w)
            assert (mark is not None and mark.slot == 2 and mark.name == f"next-{w}") == has, w
            assert mark is None or mark.started_at == 1_764_900_000.123_456_7


def test_a_workflow_twice_in_a_batch_is_fenced_slot_by_slot(pg_url: str) -> None:
    claims = _claims(pg_url, "x", "y")
    with open_store(pg_url) as s:
        written, _ = s.commit_batch([PendingRecord(claims["x"], 0, _act("a", 0)),
                                     PendingRecord(claims["x"], 0, _act("a", 9)),  # the same slot again
                                     PendingRecord(claims["x"], 1, _act("b", 1)),
                                     PendingRecord(claims["y"], 0, _act("c", 2))], ttl=60)
        assert written == [True, False, True, True]
        assert [c.value for c in s.load_state("x").commands] == [0, 1]


def test_a_batch_whose_answer_was_lost_is_reported_written_once(pg_url: str) -> None:
    """The server committed the batch, the connection died before the answer: the retry finds its own rows."""
    claims = _claims(pg_url, "x", "y", "z")
    with open_store(pg_url) as s:
        real = s._conn  # type: ignore[attr-defined]
        waits: list[int] = []

        class LosesTheAnswer:
            """Forwards to the real connection; the batch's third wait (its Sync's answer, read once the
            server committed) never returns: the connection dies."""

            def __getattr__(self, name: str) -> object:
                return getattr(real, name)

            def wait(self, gen: object) -> object:
                results = real.wait(gen)
                waits.append(1)
                if len(waits) == 3:
                    real.close()
                    raise psycopg.OperationalError("the connection was lost")
                return results

        s._conn = LosesTheAnswer()  # type: ignore[attr-defined]
        written, _ = s.commit_batch([PendingRecord(claims[w], 0, _act("a", w)) for w in ("x", "y", "z")], ttl=60)
        assert len(waits) >= 3
        assert written == [True, True, True]
        assert [[c.value for c in s.load_state(w).commands] for w in ("x", "y", "z")] == [["x"], ["y"], ["z"]]


def test_a_sqlite_store_refuses_marks_in_a_commit_and_writes_nothing(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as s:
        s.start_workflow("wf", 1, workflow_id="x")
        (x,) = s.claim("w1", ttl=60, limit=1)
        with pytest.raises(ValueError, match="mark file"):
            s.commit_batch([PendingRecord(x, 0, _rec("a"))], ttl=60, marks=[(x, 1, "b", 1, time.time(), 0)])
        assert s.list_commands("x") == []


# -- one workflow alone: its outcome rides with its next start mark, one statement a slot


@workflow
def alone(ctx: Context, n: int) -> int:
    """`n` activities of one workflow (nobody else commits)."""
    for i in range(n):
        ctx.call_activity(look, ctx.workflow_id, i)
    return n


def test_a_lone_workflow_commits_each_outcome_with_the_next_start_mark_before_that_activity_runs(
        pg_url: str) -> None:
    URL[:] = [pg_url]
    SEEN.clear()
    slots = 30
    with open_store(pg_url) as store:
        wid = store.start_workflow("alone", slots)
    worker = _run(pg_url, 4)
    assert worker.completed == 1
    # Every outcome but the last rode with the next activity's start mark, in one transaction...
    assert worker.committer.marks_ridden == slots - 1
    # ... committed before that activity ran, as each activity saw from another connection.
    assert [(i, recorded, marked) for _, i, recorded, marked in SEEN][1:] == [(i, i, i) for i in range(1, slots)]
    assert _inflight(pg_url, wid) == (slots - 1, "look")


GATE = threading.Event()


@activity
def first() -> int:
    """Returns at once."""
    return 1


@workflow
def slow_between(ctx: Context, _: object = None) -> int:
    """An activity, then workflow code that takes its time (it waits for the test) before the next."""
    ctx.call_activity(first)
    GATE.wait(timeout=120)
    return int(ctx.call_activity(first))


def test_an_outcome_is_committed_while_its_workflow_code_runs_long_before_the_next_activity(pg_url: str) -> None:
    GATE.clear()
    with open_store(pg_url) as store:
        wid = store.start_workflow("slow_between")
    worker = Worker(pg_url, Registry.from_module(sys.modules[__name__]), concurrency=4)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run(until_idle=True)
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        # The first outcome waits for no next activity: the worker's loop commits it.
        assert wait_for(lambda: _names(pg_url, wid) == ["first"], timeout=60)
    finally:
        GATE.set()
        thread.join(timeout=120)
    assert errors == [] and worker.completed == 1
    assert worker.committer.stale_commits >= 1
    assert _names(pg_url, wid) == ["first", "first"]


def _losing_first_answer(store: object) -> list[int]:
    """Make `store`'s next prepared statement commit and its answer be lost (see LibpqLosingFirstAnswer);
    the list returned gets an entry when it was."""
    real = store._conn  # type: ignore[attr-defined]
    lost: list[int] = []

    class LosesTheAnswer:
        pgconn = LibpqLosingFirstAnswer(real, lost)

        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

    store._conn = LosesTheAnswer()  # type: ignore[attr-defined]
    return lost


def test_a_lone_slot_with_its_mark_whose_answer_was_lost_is_reported_written_once(pg_url: str) -> None:
    """One slot and the next start mark, one statement: committed, then the connection died before the answer."""
    claims = _claims(pg_url, "x")
    with open_store(pg_url) as s:
        lost = _losing_first_answer(s)
        written, _ = s.commit_batch([PendingRecord(claims["x"], 0, _act("a", 1))], ttl=60,
                                    marks=[(claims["x"], 1, "b", 1, time.time(), 0)])
        assert lost and written == [True]
    assert _names(pg_url, "x") == ["a"] and _inflight(pg_url, "x") == (1, "b")


# -- the lock fence: a lone workflow's slots lock its row, which is rewritten at least once a second


class _Clock:
    """Stands for the `time` module of the PostgreSQL commits: a clock the test moves."""

    def __init__(self) -> None:
        self.now = time.time()

    def time(self) -> float:
        return self.now


def _row(url: str, wid: str) -> tuple[int, float]:
    """The workflow row's own `slots` column and updated_at, from another connection."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT slots, updated_at FROM replaylog.workflows WHERE id = %s", (wid,)).fetchone()
    assert row is not None
    return int(row[0]), float(row[1])  # type: ignore[call-overload]


def test_lone_slots_lock_the_row_and_rewrite_it_at_least_once_a_second(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x = _claims(pg_url, "x")["x"]
    clock = _Clock()  # (from after the claim: slot 4, two seconds on, finds the claim's updated_at old)
    monkeypatch.setattr(pg_commit, "time", clock)
    with open_store(pg_url) as s:
        assert s.commit_record(x, 0, _act("a", 0), ttl=60)  # the first slot under a claim rewrites the row
        _, claimed_at = _row(pg_url, "x")
        for slot in (1, 2, 3):
            clock.now += 0.2
            assert s.lone_fence.locks(x, slot, clock.now)
            assert s.commit_record(x, slot, _act("a", slot), ttl=60)
        # Slots 1-3 only locked the row: its own count is slot 0's, but every reader counts them.
        assert _row(pg_url, "x") == (1, claimed_at)
        assert s.get_workflow("x").slots == 4 and len(s.list_commands("x")) == 4
        clock.now += 2.0  # more than a second since the row was rewritten: slot 4 rewrites it
        assert not s.lone_fence.locks(x, 4, clock.now)
        assert s.commit_record(x, 4, _act("a", 4), ttl=60)
        assert _row(pg_url, "x") == (5, clock.now)
        # A slot that is not next is never taken under the lock: the rewrite's check refuses it.
        assert not s.lone_fence.locks(x, 6, clock.now)
        assert not s.commit_record(x, 6, _act("a", 6), ttl=60)
        assert [c.value for c in s.list_commands("x")] == [0, 1, 2, 3, 4]


def test_a_lock_fenced_slot_is_refused_once_another_worker_holds_the_lease(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(pg_commit, "time", clock)  # (the fence's clock stands still: slot 2 takes the lock)
    with open_store(pg_url) as s:
        s.start_workflow("wf", 1, workflow_id="x")
        (x,) = s.claim("w1", ttl=0.05, limit=1)
        assert s.commit_record(x, 0, _act("a", 0), ttl=0.05)
        assert s.commit_record(x, 1, _act("a", 1), ttl=0.05)
        assert _row(pg_url, "x")[0] == 1
        # w1's lease lapses (nothing renews it) and w2 takes the workflow over.
        with open_store(pg_url) as other:
            taken: list[Claim] = []

            def taken_over() -> bool:
                taken.extend(other.claim("w2", ttl=60, limit=1))
                return bool(taken)

            assert wait_for(taken_over, timeout=60)
            (y,) = taken
            assert y.epoch == x.epoch + 1
            assert _row(pg_url, "x")[0] == 2  # the claim counted the slots the lock fence left out of the row
            assert s.lone_fence.locks(x, 2, clock.now)
            assert not s.commit_record(x, 2, _act("stale", 2), ttl=60)
            assert other.commit_record(y, 2, _act("b", 2), ttl=60)
        assert [c.name for c in s.list_commands("x")] == ["a", "a", "b"]


def test_a_lock_fenced_slot_whose_answer_was_lost_is_reported_written_once(pg_url: str) -> None:
    """The locked slot and its mark committed, then the connection died before the answer: the retry
    rewrites the row, finds its slot written, and looks for it as its own."""
    claims = _claims(pg_url, "x")
    x = claims["x"]
    with open_store(pg_url) as s:
        assert s.commit_record(x, 0, _act("a", 0), ttl=60)
        lost = _losing_first_answer(s)
        assert s.lone_fence.locks(x, 1, time.time())
        written, _ = s.commit_batch([PendingRecord(x, 1, _act("b", 1))], ttl=60,
                                    marks=[(x, 2, "c", 1, time.time(), 0)])
        assert lost and written == [True]
    assert _names(pg_url, "x") == ["a", "b"] and _inflight(pg_url, "x") == (2, "c")


@pytest.mark.parametrize("name", ["_BATCH", "_SLOT_RAW", "_SLOT_MARK_RAW", "_LOCK_RAW", "_LOCK_MARK_RAW"])
def test_a_slot_statement_planned_on_an_empty_table_looks_its_slot_up_in_the_key(pg_url: str, name: str) -> None:
    """A statement's generic plan is made once, early, while the commands table is small: the check that
    the slot before is written must stay a look in the key (an EXISTS there became a hashed subplan,
    a scan of the whole table each batch, and 50 workflows ran at a tenth of their speed)."""
    statement: str = getattr(pg_commit, name)
    count = max(int(n) for n in re.findall(r"\$(\d+)", statement))
    with open_store(pg_url), psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SET search_path = replaylog")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE s AS {statement}")
        plan = "\n".join(str(r[0]) for r in conn.execute(f"EXPLAIN EXECUTE s({', '.join(['NULL'] * count)})"))
    assert "Seq Scan on commands" not in plan and "hashed SubPlan" not in plan, plan
