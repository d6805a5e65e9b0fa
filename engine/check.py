"""`check`: one workflow's history dry-replayed against the current code, judged by its status.

The one place a check is made, for the command line and the console alike; the wording
of the verdicts lives with `dry_replay` in engine.core.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.app import Registry
from engine.core import DryReplay, dry_replay
from engine.errors import ReplaylogError
from engine.store import ReaderStore


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
