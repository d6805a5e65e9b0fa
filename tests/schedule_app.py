"""The schedule tests' app: a scheduled job whose every live run leaves a line outside the database.

`job` records one activity (`note`), which appends "WORKFLOW_ID" to $SCHEDULE_LEDGER. With
$SCHEDULE_KILL_ONCE set to a path that does not exist yet, the first run of `note` creates
it and kills its own process with SIGKILL: a worker dies at a tick's workflow.
"""

from __future__ import annotations

import os
import signal

from replaylog import Context, activity, current_activity, workflow


@activity
def note() -> str:
    """Append this workflow's id to the ledger (and kill the process once, if asked)."""
    wid = current_activity().workflow_id
    ledger = os.environ.get("SCHEDULE_LEDGER")
    if ledger:
        fd = os.open(ledger, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (wid + "\n").encode())
        finally:
            os.close(fd)
    marker = os.environ.get("SCHEDULE_KILL_ONCE")
    if marker:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            os.kill(os.getpid(), signal.SIGKILL)
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
