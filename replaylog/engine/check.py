"""`check`: one workflow's history dry-replayed against the current code, judged by its status.

The one place a check is made, for the command line, the console and the client alike.
The answers are structured (`DryReplay`, `RetryVerdict`); `replaylog.verdicts` words them.
"""

from __future__ import annotations

from dataclasses import dataclass

from replaylog.engine.app import Registry
from replaylog.engine.core import DryReplay, Reason, dry_replay
from replaylog.engine.errors import ReplaylogError
from replaylog.engine.store import ReaderStore
from replaylog.engine.vocab import Status


def check_workflow(store: ReaderStore, registry: Registry, workflow_id: str) -> DryReplay:
    """Dry-replay a stored workflow against `registry`'s code; nothing runs and nothing is written.

    A code without the recorded workflow name is the verdict Reason.NO_CODE, nothing replayed.

    Raises:
        UnknownWorkflowIdError: no workflow has that id.
    """
    row = store.get_workflow(workflow_id)
    try:
        fn = registry.workflow(row.workflow)
    except ReplaylogError as exc:
        return DryReplay(False, Reason.NO_CODE, error=str(exc), status=row.status)
    return dry_replay(fn, store.load_state(workflow_id), workflow_id=workflow_id, status=row.status,
                      recorded_error=row.error, error_kind=row.error_kind, diverged=row.diagnostic is not None)


@dataclass(frozen=True)
class RetryVerdict:
    """Whether `retry` may set a failed workflow going again.

    Attributes:
        workflow_id: the workflow.
        replay: its history dry-replayed as if it were unfinished (it may go on further now).
        fails_again_at: the replay ends in the activity failure history holds at this slot:
            a retry would fail again the same way (fork from the slot instead).
    """

    workflow_id: str
    replay: DryReplay
    fails_again_at: int | None = None

    @property
    def refused(self) -> bool:
        """The retry is refused: the replay diverges (or has no code), or it would fail again."""
        return not self.replay.ok or self.fails_again_at is not None


def retry_verdict(store: ReaderStore, registry: Registry, workflow_id: str) -> RetryVerdict:
    """Whether `retry` may set a failed workflow going again: the dry replay, and why it is refused if it is."""
    row = store.get_workflow(workflow_id)
    try:
        fn = registry.workflow(row.workflow)
    except ReplaylogError as exc:
        return RetryVerdict(workflow_id, DryReplay(False, Reason.NO_CODE, error=str(exc), status=row.status))
    diverged = row.diagnostic is not None
    replay = dry_replay(fn, store.load_state(workflow_id), workflow_id=workflow_id,
                        status=Status.FAILED if diverged else None, recorded_error=row.error,
                        error_kind=row.error_kind, diverged=diverged)
    if replay.ok and replay.recorded_failure:
        failed = store.last_failed_command(workflow_id)
        return RetryVerdict(workflow_id, replay, failed.slot if failed is not None else 0)
    return RetryVerdict(workflow_id, replay)
