"""The fault-injection suite's app: activities that leave evidence outside the database.

Every live run of `effect` appends one line to a ledger file ($FAULT_LEDGER) and, keyed
by its idempotency key, to a sink file ($FAULT_SINK). The tests compare those files with
what the database recorded, so a duplicate or a lost effect cannot hide.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from typing import Any

from replaylog import Context, activity, current_activity, workflow


def _append(env: str, line: str) -> None:
    path = os.environ.get(env)
    if not path:
        return
    # One O_APPEND write of a short line is atomic: concurrent processes never interleave
    # a line, and a SIGKILL lands before or after the write, never inside it.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


# This process, told apart from a later one that the kernel gives the same pid: a long storm
# starts thousands of workers, and pids wrap (pid_max is 32,768 here).
PROCESS = uuid.uuid4().hex[:12]


def expected_value(i: int, seed: int) -> int:
    """What `effect(i, seed)` computes: the tests check results against it."""
    return (i + 1) * 1000 + seed % 997


@activity
def effect(i: int, seed: int) -> dict[str, Any]:
    """A side effect: ledger line, sink line keyed by idempotency key, a little time.

    Returns the value and the pid (and `PROCESS`) that ran it, so the tests know which run was
    recorded.
    """
    info = current_activity()
    pid = os.getpid()
    _append("FAULT_LEDGER", json.dumps({"wid": info.workflow_id, "slot": info.slot, "pid": pid, "proc": PROCESS,
                                        "attempt": info.attempt, "key": info.idempotency_key}))
    # Time for a kill to land while the activity is in flight.
    time.sleep(random.uniform(0.0, float(os.environ.get("FAULT_STEP_MAX", "0.03"))))
    _append("FAULT_SINK", info.idempotency_key)
    return {"v": expected_value(i, seed), "pid": pid, "proc": PROCESS}


@workflow
def chain(ctx: Context, args: dict[str, int]) -> int:
    """`n` effects in a row; the result is the sum of their values."""
    n, seed = args["n"], args["seed"]
    # Attempts count across worker deaths and max_retries bounds them: in a storm that
    # kills a worker every half second, one slot may be caught in flight three times (the
    # default bound) and fail "the worker died during attempt 3 of 3". The storm proves no
    # recorded slot runs again, so it gives every slot room for as many deaths as it sees.
    return sum(ctx.call_activity(effect, i, seed, max_retries=10_000)["v"] for i in range(n))


@activity
def stall(tag: str) -> dict[str, Any]:
    """Note the start in the ledger, then wait until $FAULT_RELEASE exists (or 60 s)."""
    info = current_activity()
    pid = os.getpid()
    _append("FAULT_LEDGER", json.dumps({"wid": info.workflow_id, "slot": info.slot, "pid": pid,
                                        "attempt": info.attempt, "event": "start"}))
    release = os.environ.get("FAULT_RELEASE", "")
    deadline = time.monotonic() + 60
    while release and not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.02)
    _append("FAULT_LEDGER", json.dumps({"wid": info.workflow_id, "slot": info.slot, "pid": pid,
                                        "attempt": info.attempt, "event": "end"}))
    return {"tag": tag, "pid": pid}


@activity
def quick(i: int) -> int:
    """A plain activity with no side effect."""
    return i * 2


@workflow
def stalled(ctx: Context, tag: str) -> dict[str, Any]:
    """quick → stall → quick: the middle slot can be held in flight for as long as a test likes."""
    first = ctx.call_activity(quick, 1)
    held = ctx.call_activity(stall, tag)
    last = ctx.call_activity(quick, 2)
    return {"first": first, "held": held, "last": last}


@workflow
def collector(ctx: Context, per_name: int) -> dict[str, list[Any]]:
    """Wait for `per_name` signals of "a" and of "b", alternately; return them per name."""
    got: dict[str, list[Any]] = {"a": [], "b": []}
    for _ in range(per_name):
        got["a"].append(ctx.wait_signal("a"))
        got["b"].append(ctx.wait_signal("b"))
    ctx.call_activity(quick, per_name)
    return got


# ---------------------------------------------------------------- bad behaviour


class Unprintable(Exception):
    """An exception whose text cannot be produced: str() raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text for you")


@activity
def returns_set() -> Any:
    """Returns a value JSON cannot hold."""
    return {1, 2, 3}


@activity
def raises_unprintable() -> None:
    """Raises an exception that cannot be converted to text."""
    raise Unprintable()


@activity
def raises_markup() -> None:
    """Raises with terminal escapes and Rich markup in the message."""
    raise ValueError("\x1b[31mred\x1b[0m [bold red]boom[/bold red] \x1b]0;pwned\x07")


@workflow
def bad_value(ctx: Context) -> Any:
    """Calls an activity whose value JSON cannot hold."""
    return ctx.call_activity(returns_set)


@workflow
def bad_exception(ctx: Context) -> Any:
    """Calls an activity whose exception cannot be converted to text."""
    return ctx.call_activity(raises_unprintable, max_retries=2)


@workflow
def bad_code(ctx: Context) -> Any:
    """Workflow code that raises after one recorded slot."""
    ctx.call_activity(quick, 1)
    raise KeyError("the workflow's own bug")


@workflow
def bad_activity_name(ctx: Context) -> Any:
    """Calls an activity the app does not define."""
    return ctx.call_activity("no_such_activity", 1)


@workflow
def bad_markup(ctx: Context, _payload: Any = None) -> Any:
    """Fails with an error holding escapes and markup."""
    return ctx.call_activity(raises_markup, max_retries=1)


@workflow(name="evil\x1b[2J[bold]name[/bold]")
def evil_name(ctx: Context) -> Any:
    """A workflow whose recorded name holds an escape sequence and markup."""
    return ctx.wait_signal("\x1b[31m[red]sig[/red]")
