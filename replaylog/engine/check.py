"""`check`: one workflow's history dry-replayed against the current code, judged by its status.

The one place a check is made, for the command line and the console alike; the wording
of the verdicts lives with `dry_replay` in engine.core.
"""

from __future__ import annotations

from dataclasses import dataclass

from replaylog.engine.app import Registry
from replaylog.engine.core import DryReplay, dry_replay
from replaylog.engine.errors import ReplaylogError
from replaylog.engine.store import ReaderStore
from replaylog.engine.vocab import Status


@dataclass(frozen=True)
class NoCode(DryReplay):
    """The verdict when the code has no workflow of the recorded name: nothing was replayed."""


def check_workflow(store: ReaderStore, registry: Registry, workflow_id: str) -> DryReplay:
    """Dry-replay a stored workflow against `registry`'s code; nothing runs and nothing is written.

    Raises:
        UnknownWorkflowIdError: no workflow has that id.
    """
    row = store.get_workflow(workflow_id)
    try:
        fn = registry.workflow(row.workflow)
    except ReplaylogError as exc:
        return NoCode(False, str(exc), 0, ())
    return dry_replay(fn, store.load_state(workflow_id), workflow_id=workflow_id, status=row.status,
                      recorded_error=row.error, diverged=row.diagnostic is not None)


def retry_verdict(store: ReaderStore, registry: Registry, workflow_id: str) -> tuple[DryReplay, str | None]:
    """Whether `retry` may set a failed workflow going again: the dry replay, and a refusal if any.

    The history is replayed as if the workflow were unfinished: it may go on further now.
    A replay that diverges is refused with its diagnostic; one that ends in the same
    recorded activity failure is refused with the slot to fork from.
    """
    row = store.get_workflow(workflow_id)
    try:
        fn = registry.workflow(row.workflow)
    except ReplaylogError as exc:
        return DryReplay(False, str(exc), 0, ()), str(exc)
    verdict = dry_replay(fn, store.load_state(workflow_id), workflow_id=workflow_id,
                         status=Status.FAILED if row.diagnostic is not None else None,
                         recorded_error=row.error, diverged=row.diagnostic is not None)
    if not verdict.ok:
        return verdict, f"{workflow_id!r} cannot be retried with the current code: {verdict.text}"
    if verdict.recorded_failure:
        failed = store.last_failed_command(workflow_id)
        at = failed.slot if failed is not None else 0
        return verdict, (f"{workflow_id!r} would fail again on the activity error recorded at slot {at}; "
                         f"fork it from slot {at} to run that activity again (replaylog fork {workflow_id}"
                         f" --from-slot {at})")
    return verdict, None
