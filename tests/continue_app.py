"""The continue-as-new tests' app: a loop that continues as new every few iterations, and a signal collector.

Every live run of `step` appends "WORKFLOW_ID I" to $CONTINUE_LEDGER. With
$CONTINUE_KILL_AT set to "I:PATH", the first live run of step(I) creates PATH and kills its
own process with SIGKILL (a worker dies in the middle of a run).
"""

from __future__ import annotations

import os
from typing import Any

from evidence import append_line, kill_once

from replaylog import Context, activity, current_activity, workflow


@activity
def step(i: int) -> int:
    """One iteration's side effect: a ledger line (and, once, a SIGKILL if asked)."""
    append_line(os.environ.get("CONTINUE_LEDGER"), f"{current_activity().workflow_id} {i}")
    kill = os.environ.get("CONTINUE_KILL_AT")
    if kill and int(kill.split(":", 1)[0]) == i:
        kill_once(kill.split(":", 1)[1])
    return i


@workflow
def looper(ctx: Context, state: dict[str, Any]) -> int:
    """Run step(i) for i up to state["total"], continuing as new every state["every"] iterations."""
    i = int(state["i"])
    while i < state["total"]:
        ctx.call_activity(step, i)
        i += 1
        if i % state["every"] == 0 and i < state["total"]:
            ctx.continue_as_new({**state, "i": i})
    return i


@workflow
def collector(ctx: Context, got: list[int]) -> list[int]:
    """Consume "item" signals (None ends it), continuing as new every 20 items with what it got so far."""
    while True:
        item = ctx.wait_signal("item")
        if item is None:
            return got
        got = [*got, int(item)]
        if len(got) % 20 == 0:
            ctx.continue_as_new(got)


@workflow
def bad_continue(ctx: Context) -> None:
    """Continues as new with a value JSON cannot hold."""
    ctx.now()
    ctx.continue_as_new({"when": {1, 2}})


@workflow
def no_input_loop(ctx: Context) -> str:
    """Continues as new without an input once, then completes (its second run sees a signal from the first)."""
    if ctx.wait_signal("go") == "again":
        ctx.continue_as_new()
    return "done"
