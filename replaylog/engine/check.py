"""`check` and `retry`: one workflow's history dry-replayed against the current code, and one verdict.

The one place a check is made, for the command line, the client and the console alike.
A verdict answers what an operator asks: does the recorded history replay against the
current code, and, for a failed workflow, would a retry now succeed. `check` and `retry`
give the same answer (a failed workflow is judged as `retry` runs it: from its history,
as if unfinished). The wording of a dry replay's own line lives with `dry_replay`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from replaylog.engine.app import Registry
from replaylog.engine.core import DryReplay, WorkflowState, dry_replay
from replaylog.engine.errors import ReplaylogError
from replaylog.engine.store import ReaderStore
from replaylog.engine.vocab import Status


@dataclass(frozen=True)
class NoCode(DryReplay):
    """The verdict when the code has no workflow of the recorded name: nothing was replayed."""


@dataclass(frozen=True)
class Verdict:
    """A check's answer.

    Attributes:
        replay: the dry replay it rests on.
        replays: the recorded history replays against the current code (no divergence).
        ok: `check`'s answer (exit 0): it replays and, for a failed workflow, a retry may go
            ahead (it would not just fail again).
        text: the one line to show.
        retry: for a failed workflow, "allowed" or "refused"; None for any other status.
        fork_from: a retry would fail again on the activity error recorded at this slot:
            forking from it runs that activity again.
    """

    replay: DryReplay
    replays: bool
    ok: bool
    text: str
    retry: str | None = None
    fork_from: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The `check --json` shape."""
        r = self.replay
        return {"ok": self.ok, "replays": self.replays, "retry": self.retry, "fork_from": self.fork_from,
                "verdict": self.text, "replayed": r.replayed, "issued": list(r.issued),
                "diagnostic": r.diagnostic.to_dict() if r.diagnostic else None}


def judge(fn: Callable[..., Any], state: WorkflowState, *, workflow_id: str, status: str,
          recorded_error: str | None, diverged: bool, failed_slot: int | None) -> Verdict:
    """The verdict on one history (stored or exported) against the workflow function `fn`.

    Args:
        fn: the current code's workflow function.
        state: the recorded history.
        workflow_id: its id (idempotency keys; the fork command in a refusal).
        status: its recorded status.
        recorded_error: a failed workflow's error.
        diverged: it was failed by a divergence (a stored diagnostic).
        failed_slot: the slot of its last failed activity, if any (where a fork would start).
    """
    if status != Status.FAILED:
        replay = dry_replay(fn, state, workflow_id=workflow_id, status=status, recorded_error=recorded_error,
                            diverged=diverged)
        return Verdict(replay, replay.diagnostic is None and (replay.ok or status not in _ENDED), replay.ok,
                       replay.text)
    # A failed workflow is judged as `retry` runs it: its history replayed as if unfinished,
    # so code that now goes further is what a fix looks like, not a divergence.
    replay = dry_replay(fn, state, workflow_id=workflow_id, status=Status.FAILED if diverged else None,
                        recorded_error=recorded_error, diverged=diverged)
    if replay.diagnostic is not None:
        return Verdict(replay, False, False, f"the recorded history does not replay, so a retry is refused:"
                                             f" {replay.verdict}", "refused")
    if not replay.ok:
        return Verdict(replay, True, False, f"the recorded history replays, but a retry would fail:"
                                            f" {replay.verdict}", "refused")
    if replay.recorded_failure:
        at = failed_slot if failed_slot is not None else 0
        return Verdict(replay, True, False,
                       f"the recorded history replays, but a retry would fail again on the activity error"
                       f" recorded at slot {at}: fork from slot {at} to run that activity again (replaylog fork"
                       f" {workflow_id} --from-slot {at})", "refused", at)
    return Verdict(replay, True, True, f"{replay.text}: a retry may go ahead", "allowed")


# Statuses whose recorded end a replay must reproduce (a completed one the code extends has diverged).
_ENDED = (Status.COMPLETED, Status.CANCELLED, Status.TERMINATED)


def check_workflow(store: ReaderStore, registry: Registry, workflow_id: str) -> Verdict:
    """Dry-replay a stored workflow against `registry`'s code; nothing runs and nothing is written.

    Raises:
        UnknownWorkflowIdError: no workflow has that id.
    """
    row = store.get_workflow(workflow_id)
    try:
        fn = registry.workflow(row.workflow)
    except ReplaylogError as exc:
        return Verdict(NoCode(False, str(exc), 0, ()), False, False, str(exc),
                       "refused" if row.status == Status.FAILED else None)
    failed = store.last_failed_command(workflow_id) if row.status == Status.FAILED else None
    return judge(fn, store.load_state(workflow_id), workflow_id=workflow_id, status=row.status,
                 recorded_error=row.error, diverged=row.diagnostic is not None,
                 failed_slot=failed.slot if failed is not None else None)
