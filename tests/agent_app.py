"""Workflows for the parallel, child and approval tests: activities leave evidence in $AGENT_LEDGER.

Loaded by real worker subprocesses (`--app agent_app`) and by in-process tests.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from replaylog import (
    ChildWorkflowError,
    Context,
    DuplicateWorkflowIdError,
    ParallelError,
    SignalTimeout,
    WorkflowCancelled,
    activity,
    workflow,
)


def _ledger(event: str, tag: str) -> None:
    path = os.environ.get("AGENT_LEDGER")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"event": event, "tag": tag, "pid": os.getpid()}) + "\n")


@activity
def note(tag: str) -> str:
    """Note a run in the ledger; return the tag."""
    _ledger("run", tag)
    return tag


@activity
def held(tag: str) -> str:
    """Note the start, then wait until $AGENT_RELEASE exists (at most 60 s)."""
    _hold(tag)
    _ledger("run", tag)
    return tag


def _hold(tag: str) -> None:
    """Note `tag`, then wait until $AGENT_RELEASE exists (at most 60 s)."""
    _ledger("start", tag)
    release = Path(os.environ.get("AGENT_RELEASE", "/nonexistent"))
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@workflow
def holds_after_its_last_call(ctx: Context) -> str:
    """Its last ctx call, then plain code held until released: a cancel sent meanwhile meets no ctx call."""
    ctx.call_activity(note, "last call")
    _hold("after the last call")
    return "done"


@activity
def meet(me: str, other: str) -> str:
    """Arrive, then wait (at most 30 s) for `other` to arrive: only tasks running at once both return."""
    where = Path(os.environ["AGENT_DIR"])
    (where / f"arrived-{me}").touch()
    deadline = time.monotonic() + 30
    while not (where / f"arrived-{other}").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{other} never arrived while {me} waited")
        time.sleep(0.01)
    return me


@activity
def broken(tag: str) -> str:
    """Always fails."""
    _ledger("run", tag)
    raise RuntimeError(f"{tag} is broken")


@workflow
def fan(ctx: Context) -> list[Any]:
    """Two tasks that can only finish if they run at once."""
    return ctx.parallel([ctx.task(meet, "a", "b"), ctx.task(meet, "b", "a")])


@workflow
def two_groups(ctx: Context) -> list[Any]:
    """Two ctx.parallel groups back to back, then a plain step and a group of one."""
    first = ctx.parallel([ctx.task(note, "a1"), ctx.task(note, "a2")])
    second = ctx.parallel([ctx.task(note, "b1"), ctx.task(note, "b2")])
    ctx.call_activity(note, "plain")
    return [first, second, ctx.parallel([ctx.task(note, "c1")])]


@workflow
def held_group(ctx: Context) -> list[Any]:
    """A step, a group whose first task is held while the others finish, a step."""
    ctx.call_activity(note, "before")
    results = ctx.parallel([ctx.task(held, "slow"), ctx.task(note, "fast"), ctx.task(note, "fast2")])
    ctx.call_activity(note, "after")
    return results


@workflow
def partly_broken(ctx: Context) -> dict[str, Any]:
    """A group with one failing task: the error carries every outcome."""
    try:
        ctx.parallel([ctx.task(note, "ok"), ctx.task(broken, "bad", max_retries=1)])
    except ParallelError as exc:
        return {"outcomes": [str(o) for o in exc.outcomes], "failed": sorted(exc.errors)}
    return {}


@workflow
def guarded(ctx: Context) -> list[Any]:
    """Two approvals in a row, each bound to its own request."""
    first = ctx.request_approval("delete the backups", {"count": 3})
    second = ctx.request_approval("send the email")
    return [first, second]


@workflow
def bad_group(ctx: Context, kind: str) -> Any:
    """A parallel group given bad input: an empty list, a function instead of a task, a non-JSON argument."""
    if kind == "empty":
        return ctx.parallel([])
    if kind == "not a task":
        return ctx.parallel([ctx.task(note, "fine"), note])
    return ctx.parallel([ctx.task(note, "fine"), ctx.task(note, {"a set": {1, 2}})])


@workflow
def guarded_for(ctx: Context, timeout: float) -> Any:
    """One approval with a timeout: the answer, or "timed out" (then the code goes on)."""
    try:
        return ctx.request_approval("restart the cluster", {"nodes": 3}, timeout=timeout)
    except SignalTimeout:
        return "timed out"


@workflow
def waits_for_go(ctx: Context) -> Any:
    """Waits for a plain signal, not an approval."""
    return ctx.wait_signal("go")


@workflow
def child_task(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
    """A child: one activity."""
    return {"done": ctx.call_activity(note, f"child {input['n']}")}


@workflow
def failing_child(ctx: Context) -> None:
    """A child whose code fails."""
    raise RuntimeError("child broke")


@workflow
def parent(ctx: Context) -> dict[str, Any]:
    """A child that completes, then one that fails."""
    result = ctx.call_workflow(child_task, {"n": 1})
    try:
        ctx.call_workflow("failing_child")
    except ChildWorkflowError as exc:
        return {"child": result, "error": exc.error, "failed": exc.child_id}
    return {"child": result}


@workflow
def bad_parent(ctx: Context, child_id: str | None = None) -> Any:
    """A child of an unknown workflow name, or with a given id."""
    if child_id:
        return ctx.call_workflow(child_task, {"n": 2}, id=child_id)
    return ctx.call_workflow("no_such_workflow")


@workflow
def handles_taken_id(ctx: Context, input: dict[str, str]) -> Any:
    """A child with a given id; a refusal of the id raises the parent's own error, or takes a fallback."""
    try:
        return ctx.call_workflow(child_task, {"n": 3}, id=input["id"])
    except DuplicateWorkflowIdError:
        if input["then"] == "raise":
            raise ValueError("mine") from None
    return {"fallback": ctx.call_activity(note, "fallback")}


@workflow
def held_child(ctx: Context) -> Any:
    """A child whose activity is held."""
    return ctx.call_activity(held, "in child")


@workflow
def grandchild_waits(ctx: Context) -> Any:
    """The bottom of a family three deep: waits for "go"; a cancel is noted, then raised on."""
    try:
        return ctx.wait_signal("go")
    except WorkflowCancelled:
        ctx.call_activity(note, "grandchild compensates")
        raise


@workflow
def child_waits(ctx: Context) -> Any:
    """The middle of the family: waits for its own child."""
    return {"grandchild": ctx.call_workflow(grandchild_waits)}


@workflow
def family(ctx: Context) -> Any:
    """A parent, a child, a grandchild: the parent waits for the child, which waits for the grandchild."""
    return {"child": ctx.call_workflow(child_waits)}


@workflow
def parent_of_held(ctx: Context) -> Any:
    """Waits for a child whose activity is held."""
    return {"from child": ctx.call_workflow(held_child)}


@workflow
def logs_as_it_goes(ctx: Context, n: int) -> Any:
    """Logs through ctx.logger around an activity and a timed wait for "go"."""
    ctx.logger.info("charging %s", n)
    ctx.call_activity(note, f"charge {n}")
    ctx.logger.info("waiting for go")
    go = ctx.wait_signal("go", timeout=3600)
    ctx.logger.warning("go: %s", go)
    return go
