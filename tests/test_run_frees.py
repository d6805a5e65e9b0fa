"""A finished run leaves no reference cycle behind: its objects are freed as it ends.

The Context holds the run's bound hooks (record, on_start, sleep, …), so a run that kept its
Context was a cycle of ~21 objects a workflow, freed only by the cyclic collector, whose
passes then walked them all (on 2,000 short workflows, 90-170 ms of a ~1.8 s run).

(An activity's failure still leaves the usual cycle of an exception caught in a frame that
its traceback holds, on that rare path only.)
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from replaylog import Context, activity, workflow
from replaylog.engine.app import Registry
from replaylog.engine.core import Context as EngineContext
from replaylog.engine.cursor import Cursor
from replaylog.engine.store import open_store
from replaylog.engine.vocab import Status
from replaylog.engine.worker import Worker
from replaylog.engine.worker.run import WorkflowRun


@activity
def double(x: int) -> int:
    """Twice x."""
    return 2 * x


@workflow
def three_steps(ctx: Context, x: int) -> int:
    """Three activities in a row."""
    for _ in range(3):
        x = int(ctx.call_activity(double, x))
    return x


@workflow
def fails(ctx: Context, x: int) -> int:
    """An activity, then the workflow's own error."""
    ctx.call_activity(double, x)
    raise RuntimeError("the workflow gives up")


@pytest.fixture
def saved_garbage() -> Iterator[list[object]]:
    """The cyclic garbage made meanwhile, kept for the test to look at (gc.DEBUG_SAVEALL)."""
    gc.collect()
    gc.garbage.clear()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_finished_runs_leave_no_cycle_for_the_collector(db_path: Path, saved_garbage: list[object]) -> None:
    with open_store(db_path) as store:
        ids = [store.start_workflow("three_steps", i) for i in range(12)]
        ids += [store.start_workflow("fails", i) for i in range(4)]
    Worker(db_path, Registry.from_module(sys.modules[__name__]), concurrency=4).run(until_idle=True)
    with open_store(db_path) as store:
        statuses = [store.get_workflow(wid).status for wid in ids]
    assert statuses == [Status.COMPLETED] * 12 + [Status.FAILED] * 4
    gc.collect()
    kept = [type(o).__name__ for o in saved_garbage if isinstance(o, (WorkflowRun, EngineContext, Cursor))]
    assert kept == [], f"runs left to the cyclic collector: {len(kept)} objects ({sorted(set(kept))})"
