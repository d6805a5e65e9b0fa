"""CpuFocus: while commits are crowded, workflow threads run engine code on one CPU,
and every activity still runs on every CPU the worker may use, but for one that returned
at once its last times (it stays on the one CPU: it starts no thread or process).

While focused a thread runs under SCHED_BATCH (a woken thread does not preempt the one
holding the GIL), and under SCHED_OTHER again as it leaves the focus CPU. The worker's loop
thread (the one that calls Worker.run) follows the crowd to the focus CPU too, and is as it
was once the run ends.

What a thread may use is read with os.sched_getaffinity(0), and its policy with
os.sched_getscheduler(0), which on Linux answer for the calling thread. Whether focusing
is faster is measured in bench/, not here.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from replaylog import Context, activity, workflow
from replaylog.engine.app import Registry
from replaylog.engine.cpu_focus import CpuFocus
from replaylog.engine.store import open_store
from replaylog.engine.worker import Worker

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux thread affinity and at least two CPUs",
)

# The CPUs a workflow thread may use, seen in its activities (by the tag they are given) and in its engine code.
SEEN: dict[str, list[frozenset[int]]] = {"activity": [], "engine": [], "timed": [], "task": []}
# The scheduling policy of each of those, with its CPUs (one append: threads race).
POLICY: dict[str, list[tuple[frozenset[int], int]]] = {tag: [] for tag in SEEN}


def _policies(tag: str, cpus: frozenset[int] | None = None) -> set[int]:
    """The policies seen under `tag` (only those on `cpus`, if given)."""
    return {policy for on, policy in POLICY[tag] if cpus is None or on == cpus}


# The loop thread's CPUs and policy, seen from the workflows' engine code (its native id in LOOP_TID).
LOOP: list[tuple[frozenset[int], int]] = []
LOOP_TID: list[int] = []


def _note(tag: str) -> None:
    cpus = frozenset(os.sched_getaffinity(0))
    SEEN[tag].append(cpus)
    POLICY[tag].append((cpus, os.sched_getscheduler(0)))
    if tag == "engine":
        (tid,) = LOOP_TID
        LOOP.append((frozenset(os.sched_getaffinity(tid)), os.sched_getscheduler(tid)))


@activity
def where(i: int, tag: str = "activity") -> int:
    """Note the CPUs this activity may run on, and its scheduling policy."""
    _note(tag)
    return i


@workflow
def hops(ctx: Context, n: int) -> int:
    """`n` activities; between them, note the CPUs the engine code runs on."""
    for i in range(n):
        ctx.call_activity(where, i)
        _note("engine")
    return n


@workflow
def timed_hops(ctx: Context, n: int) -> int:
    """`hops` with every activity under a timeout: each attempt runs on a thread of its own."""
    for i in range(n):
        ctx.call_activity(where, i, "timed", timeout=60.0)
        _note("engine")
    return n


@workflow
def group_hops(ctx: Context, n: int) -> int:
    """`n` rounds of an activity and a one-task parallel group (its task runs on a thread of its own)."""
    for i in range(n):
        ctx.call_activity(where, i)
        _note("engine")  # the group starts from here
        ctx.parallel([ctx.task(where, i, "task")])
    return n


def _run(db: Path, workflows: int, *, crowded_at: float | None = None, focus: bool = True,
         quick_s: float | None = None, quick: dict[str, int] | None = None, workflow: str = "hops",
         slots: int = 6, per_slot: int = 1, pin: frozenset[int] | None = None) -> Worker:
    for seen in (*SEEN.values(), *POLICY.values(), LOOP, LOOP_TID):
        seen.clear()
    LOOP_TID.append(threading.get_native_id())  # worker.run() runs its loop in this thread
    with open_store(db) as store:
        for _ in range(workflows):
            store.start_workflow(workflow, slots)
    worker = Worker(db, Registry.from_module(sys.modules[__name__]), focus_cpu=focus)
    if worker.focus is not None:
        if crowded_at is not None:
            worker.focus.crowded_at = crowded_at
        if quick_s is not None:
            worker.focus.quick_s = quick_s
        worker.focus.quick.update(quick or {})
    every = frozenset(os.sched_getaffinity(0))
    if pin is not None:  # worker.run()'s caller pinned its thread (after the worker was made)
        os.sched_setaffinity(0, pin)
    try:
        worker.run(until_idle=True)
        if pin is not None:
            assert frozenset(os.sched_getaffinity(0)) == pin
    finally:
        os.sched_setaffinity(0, every)
    assert worker.completed == workflows
    assert len(SEEN["engine"]) == slots * workflows
    assert sum(len(seen) for tag, seen in SEEN.items() if tag != "engine") == per_slot * slots * workflows
    return worker


def test_crowded_commits_keep_engine_code_on_one_cpu_and_activities_on_all(tmp_path: Path) -> None:
    every = frozenset(os.sched_getaffinity(0))
    # Every commit counts as crowded and no activity counts as quick: the focus must be taken
    # after each activity's outcome and given up before the next activity, in every workflow thread.
    _run(tmp_path / "f.db", 3, crowded_at=0.0, quick_s=0.0)
    engine = set(SEEN["engine"])
    assert len(engine) == 1 and len(next(iter(engine))) == 1 and next(iter(engine)) <= every
    assert set(SEEN["activity"]) == {every}
    # Focused, a thread runs under SCHED_BATCH; its activities, on every CPU, under SCHED_OTHER.
    assert _policies("engine") == {os.SCHED_BATCH}
    assert _policies("activity") == {os.SCHED_OTHER}
    # The loop (this test's thread) ran on that CPU too, under SCHED_BATCH, and is as it was after.
    assert set(LOOP) == {(next(iter(engine)), os.SCHED_BATCH)}
    assert frozenset(os.sched_getaffinity(0)) == every and os.sched_getscheduler(0) == os.SCHED_OTHER


def test_a_quick_activity_stays_on_the_one_cpu_after_its_first_quick_attempts(tmp_path: Path) -> None:
    every = frozenset(os.sched_getaffinity(0))
    # Every attempt counts as quick (however loaded the machine): once `quick_runs` of them
    # were timed, the activity runs where the engine code does; until then, on every CPU.
    worker = _run(tmp_path / "q.db", 3, crowded_at=0.0, quick_s=60.0, slots=12)
    assert worker.focus is not None
    runs = worker.focus.quick_runs
    (one,) = set(SEEN["engine"])
    assert len(one) == 1 and one <= every
    seen = SEEN["activity"]
    assert set(seen) == {every, one}
    # The worker's threads start on the one CPU (the loop that starts them follows the crowd,
    # and commits count as crowded at once), so every attempt is timed; the other threads'
    # attempts (two at most) may start before a timed one is counted.
    assert seen[:runs] == [every] * runs
    # A quick activity kept on the one CPU runs under SCHED_BATCH with the engine code.
    assert _policies("activity", one) == {os.SCHED_BATCH} and _policies("activity", every) == {os.SCHED_OTHER}
    assert runs <= seen.count(every) <= runs + 2
    assert worker.focus.quick["where"] == 36


def test_an_attempt_on_a_thread_of_its_own_always_gets_every_cpu(tmp_path: Path) -> None:
    every = frozenset(os.sched_getaffinity(0))
    # Under a timeout each attempt runs on a thread the workflow thread starts, which takes
    # its CPUs: every CPU, though the activity is known to be quick.
    worker = _run(tmp_path / "t.db", 3, crowded_at=0.0, quick_s=60.0, quick={"where": 100}, workflow="timed_hops")
    assert set(SEEN["timed"]) == {every}
    assert _policies("timed") == {os.SCHED_OTHER} and _policies("engine") == {os.SCHED_BATCH}
    assert len(set(SEEN["engine"])) == 1 and set(SEEN["engine"]) != {every}
    assert worker.focus is not None and worker.focus.quick["where"] == 100  # such attempts are not timed


def test_a_parallel_groups_tasks_always_get_every_cpu(tmp_path: Path) -> None:
    every = frozenset(os.sched_getaffinity(0))
    # A group's tasks run on threads the workflow thread starts: every CPU for them, though
    # the activity is known to be quick.
    _run(tmp_path / "p.db", 3, crowded_at=0.0, quick_s=60.0, quick={"where": 100}, workflow="group_hops",
         per_slot=2)
    assert set(SEEN["task"]) == {every}
    assert _policies("task") == {os.SCHED_OTHER}
    # Each group started from the one CPU (the engine code after the activity before it).
    assert len(set(SEEN["engine"])) == 1 and set(SEEN["engine"]) != {every}


def test_a_slow_attempt_ends_an_activitys_quick_streak() -> None:
    class Thread:
        focused = False
        timing: str | None = None
        began = 0.0

    focus = CpuFocus(0, crowded_at=1.0, quick_s=1.0, quick_runs=2)
    me = Thread()
    for _ in range(3):  # crowd 0: the thread is never moved; its attempts are still timed
        focus.activity(me, "a", 0.0)
        focus.engine_code(me, 0.0)
    assert focus.quick == {"a": 3}
    focus.activity(me, "a", 0.0)
    me.began -= 2.0  # this attempt took two seconds
    focus.engine_code(me, 0.0)
    assert focus.quick == {"a": 0}
    focus.activity(me, "a", 0.0)
    focus.spread(me)  # it starts a thread: this attempt is not timed
    focus.engine_code(me, 0.0)
    assert focus.quick == {"a": 0} and me.timing is None


def test_a_lone_workflow_is_never_moved(tmp_path: Path) -> None:
    every = frozenset(os.sched_getaffinity(0))
    worker = _run(tmp_path / "l.db", 1)
    assert worker.focus is not None
    assert worker.committer.crowd < worker.focus.crowded_at  # one outcome per commit
    assert set(SEEN["engine"]) == set(SEEN["activity"]) == {every}
    assert _policies("engine") == _policies("activity") == {os.SCHED_OTHER}
    assert set(LOOP) == {(every, os.SCHED_OTHER)}


def test_no_cpu_focus_never_moves_a_thread(tmp_path: Path) -> None:
    every = frozenset(os.sched_getaffinity(0))
    worker = _run(tmp_path / "n.db", 3, crowded_at=0.0, focus=False)
    assert worker.focus is None
    assert set(SEEN["engine"]) == set(SEEN["activity"]) == {every}
    assert _policies("engine") == _policies("activity") == {os.SCHED_OTHER}


def test_a_loop_thread_its_caller_pinned_stays_where_it_is(tmp_path: Path) -> None:
    # Worker.run's caller pinned its thread to one CPU (not the focus's): the loop is not moved,
    # and its workflow threads, which start there, still are.
    every = frozenset(os.sched_getaffinity(0))
    pinned = frozenset({max(every)})
    worker = _run(tmp_path / "p.db", 3, crowded_at=0.0, quick_s=0.0, pin=pinned)
    assert worker.focus is not None
    assert set(LOOP) == {(pinned, os.SCHED_OTHER)}
    assert len(set(SEEN["engine"])) == 1 and _policies("engine") == {os.SCHED_BATCH}
    # (A thread's first activity may run where the thread started: on the caller's CPU.)
    assert SEEN["activity"].count(every) >= len(SEEN["activity"]) - 3


def test_a_policy_the_worker_did_not_start_under_is_left_as_it_is(tmp_path: Path) -> None:
    # The worker's threads start under the policy of the thread that starts them (here the
    # test's, under SCHED_BATCH): the focus still moves them between CPUs, never to SCHED_OTHER.
    every = frozenset(os.sched_getaffinity(0))
    before = os.sched_getscheduler(0)
    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    try:
        worker = _run(tmp_path / "b.db", 3, crowded_at=0.0, quick_s=0.0)
    finally:
        os.sched_setscheduler(0, before, os.sched_param(0))
    assert worker.focus is not None and worker.focus.batch is None
    assert len(set(SEEN["engine"])) == 1 and set(SEEN["engine"]) != {every}
    assert _policies("engine") == _policies("activity") == {os.SCHED_BATCH}


def test_a_refused_policy_leaves_the_focus_moving_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    # Where the system refuses the call (a seccomp profile), the first refusal ends the
    # policy's part, said once in the log; engine code still runs on the one CPU.
    every = frozenset(os.sched_getaffinity(0))
    calls = []

    def refuse(pid: int, policy: int, param: os.sched_param) -> None:
        calls.append(policy)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    with caplog.at_level("WARNING", logger="replaylog.worker"):
        worker = _run(tmp_path / "r.db", 3, crowded_at=0.0, quick_s=0.0)
    assert worker.focus is not None and worker.focus.batch is None and worker.focus.working
    assert len(set(SEEN["engine"])) == 1 and set(SEEN["engine"]) != {every}
    assert _policies("engine") == _policies("activity") == {os.SCHED_OTHER}
    # Threads racing to the first refusal may each try once; none tries after it.
    assert 1 <= len(calls) <= 3 and set(calls) == {os.SCHED_BATCH}
    refusals = [r for r in caplog.records if "SCHED_BATCH" in r.getMessage()]
    assert 1 <= len(refusals) <= 3 and "Operation not permitted" in refusals[0].getMessage()


def test_a_worker_on_a_server_store_never_moves_a_thread(pg_url: str) -> None:
    """On PostgreSQL the commits are the server's work: focusing measured a loss (bench), so it is off."""
    every = frozenset(os.sched_getaffinity(0))
    with open_store(pg_url) as store:
        store.start_workflow("hops", 3)
    worker = Worker(pg_url, Registry.from_module(sys.modules[__name__]), focus_cpu=True)
    assert worker.focus is None
    SEEN["engine"].clear()
    SEEN["activity"].clear()
    worker.run(until_idle=True)
    assert len(SEEN["activity"]) == 3
    assert set(SEEN["engine"]) == set(SEEN["activity"]) == {every}
