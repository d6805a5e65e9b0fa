"""A test app whose activities and workflow code interrupt their run or kill their worker.

Each first call (counted in a file named by the input, so separate runs and separate
processes share the count) raises a BaseException or SIGKILLs the process; later calls
behave.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from replaylog import ActivityError, Context, activity, current_activity, workflow


class Abort(BaseException):
    """A BaseException of the user's own, neither KeyboardInterrupt nor SystemExit."""


_RAISE: dict[str, type[BaseException]] = {"KeyboardInterrupt": KeyboardInterrupt, "SystemExit": SystemExit,
                                          "Abort": Abort}


def _count(path: str) -> int:
    """Add one to the count in `path`; return the new count."""
    n = int(open(path).read()) + 1 if os.path.exists(path) else 1  # noqa: SIM115 - a one-line read
    with open(path, "w") as fh:
        fh.write(str(n))
    return n


@activity
def interrupts_once(counter: str, what: str) -> str:
    """Raise `what` (a BaseException) on the first call, return "fine" after."""
    if _count(counter) == 1:
        raise _RAISE[what]("stop right there")
    return "fine"


@workflow
def activity_interrupted_once(ctx: Context, args: dict[str, str]) -> str:
    """One activity that is interrupted at its first call; its value."""
    return str(ctx.call_activity(interrupts_once, args["counter"], args["what"]))


@workflow
def activity_interrupt_swallowed(ctx: Context, args: dict[str, str]) -> str:
    """Workflow code that catches the activity's interruption and goes on: still an interruption."""
    try:
        return str(ctx.call_activity(interrupts_once, args["counter"], args["what"]))
    except BaseException:  # the point of the test
        return "swallowed"


@workflow
def code_interrupted_once(ctx: Context, args: dict[str, str]) -> str:
    """Workflow code that raises a BaseException of its own on its first run."""
    ctx.now()
    if _count(args["counter"]) == 1:
        raise _RAISE[args["what"]]("the code stopped")
    return "fine"


@activity
def kills_its_worker() -> str:
    """SIGKILL the worker process that runs it, every time."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


@workflow
def poison(ctx: Context) -> dict[str, Any]:
    """An activity that kills every worker that runs it; the workflow handles its failure."""
    try:
        ctx.call_activity(kills_its_worker, max_retries=3)
    except ActivityError as exc:
        return {"caught": exc.error, "attempts": exc.attempts}
    return {"caught": None}


@activity
def kills_its_worker_once(counter: str) -> int:
    """SIGKILL the worker on the first call; on later ones return the attempt number."""
    if _count(counter) == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return current_activity().attempt


@workflow
def dies_once(ctx: Context, counter: str) -> int:
    """One activity that kills its first worker and succeeds on its second attempt."""
    return int(ctx.call_activity(kills_its_worker_once, counter))
