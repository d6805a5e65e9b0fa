"""What a check or a retry says: the one wording of a dry replay's verdict, for every reader.

The engine answers with structures (`engine.core.DryReplay` and its `Reason`,
`engine.check.RetryVerdict`); the command line, the console and the client say them
with these functions, so a verdict reads the same wherever it is shown. The engine never
imports this module (tests/test_walls.py).
"""

from __future__ import annotations

from typing import Any

from replaylog.engine.check import RetryVerdict
from replaylog.engine.core import DryReplay, Reason
from replaylog.engine.text import blocked_text
from replaylog.engine.vocab import Status

__all__ = ["retry_refusal", "verdict_json", "verdict_text"]


def verdict_text(verdict: DryReplay) -> str:
    """The one line to show an operator; a clean one says how many slots were replayed."""
    line = _said(verdict)
    return f"{line} ({verdict.replayed} slot(s) replayed)" if verdict.ok else line


def verdict_json(verdict: DryReplay) -> dict[str, Any]:
    """The JSON shape of a verdict (`check --json`): the answer, its reason and slot, and the line."""
    return {"ok": verdict.ok, "reason": str(verdict.reason), "slot": verdict.slot, "verdict": verdict_text(verdict),
            "replayed": verdict.replayed, "issued": list(verdict.issued),
            "diagnostic": verdict.diagnostic.to_dict() if verdict.diagnostic else None}


def retry_refusal(verdict: RetryVerdict) -> str | None:
    """Why `retry` refuses, in one line; None if it may go ahead."""
    replay, wid = verdict.replay, verdict.workflow_id
    if replay.reason is Reason.NO_CODE:
        return replay.error
    if not replay.ok:
        return f"{wid!r} cannot be retried with the current code: {verdict_text(replay)}"
    at = verdict.fails_again_at
    if at is not None:
        return (f"{wid!r} would fail again on the activity error recorded at slot {at}; fork it from slot {at}"
                f" to run that activity again (replaylog fork {wid} --from-slot {at})")
    return None


def _said(v: DryReplay) -> str:
    if v.reason is Reason.ENDS_DIFFERENTLY:
        ended = f"the workflow {v.status}"
        if v.status == Status.FAILED and v.recorded_error:
            ended += f" ({v.recorded_error})"
        return f"ends differently: {ended}, the current code {_now(v)}"
    clean = "no longer diverges" if v.fixed else "replays cleanly"
    waits = blocked_text(v.outcome.blocked_on, v.outcome.wake_at) if v.outcome is not None else "?"
    said = {
        Reason.RUNS_LIVE: f"{clean}; slot {v.slot} would run {v.live} live",
        Reason.FAILED_LIVE: f"replays cleanly up to slot {v.slot}, where it failed live: {v.error}",
        Reason.COMPLETES: f"{clean}; completes",
        Reason.ENDS_CANCELLED: f"{clean}; ends cancelled",
        Reason.BLOCKS: f"{clean}; blocked on {waits}",
        Reason.FAILS_AGAIN: f"fails again the same way: {v.error}",
        Reason.RECORDED_FAILURE: f"{clean}; fails on its recorded activity error",
        Reason.DIVERGES: v.error or "diverges",
        Reason.CODE_FAILS: v.error or "workflow code fails",
        Reason.NO_CODE: v.error or "the code has no such workflow",
    }
    return said[v.reason]


def _now(v: DryReplay) -> str:
    """How the current code's replay ends, for `ends differently`."""
    o = v.outcome
    if o is None:
        return "ends elsewhere"
    if o.status == Status.BLOCKED:
        return f"blocks on {blocked_text(o.blocked_on, o.wake_at)}"
    if o.status == Status.CANCELLED:
        return "ends cancelled"
    if o.status == Status.COMPLETED:
        return "completes"
    return f"fails: {o.error}"
