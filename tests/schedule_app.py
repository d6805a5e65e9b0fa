"""The schedule tests' app: a scheduled job whose every live run leaves a line outside the database.

`job` records one activity (`note`), which appends "WORKFLOW_ID" to $SCHEDULE_LEDGER. With
$SCHEDULE_KILL_ONCE set to a path that does not exist yet, the first run of `note` creates
it and kills its own process with SIGKILL: a worker dies at a tick's workflow.
"""

from __future__ import annotations

import os

from evidence import append_line, kill_once

from replaylog import Context, activity, current_activity, workflow


@activity
def note() -> str:
    """Append this workflow's id to the ledger (and kill the process once, if asked)."""
    wid = current_activity().workflow_id
    append_line(os.environ.get("SCHEDULE_LEDGER"), wid)
    marker = os.environ.get("SCHEDULE_KILL_ONCE")
    if marker:
        kill_once(marker)
    return wid


@workflow
def job(ctx: Context) -> str:
    """One tick's work: one recorded activity."""
    return str(ctx.call_activity(note))


@workflow
def waits(ctx: Context) -> str:
    """A tick's workflow that runs until signalled `done` (for the overlap policies)."""
    return str(ctx.wait_signal("done"))


@workflow(schedule="*/5 * * * *")
def every_five(ctx: Context) -> str:
    """A schedule declared in the app."""
    return "ok"


@workflow
def echo(ctx: Context, value: object) -> object:
    """A scheduled workflow with an input: returns it."""
    return value
