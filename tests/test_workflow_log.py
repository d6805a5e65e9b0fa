"""ctx.is_replaying and ctx.logger: a workflow's log lines are written once, when its code reaches them live."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from replaylog.engine.core import Context, WorkflowState, activity, dry_replay, run, signal, workflow
from replaylog.engine.workflow_log import WORKFLOW_LOGGER

NO_INPUT = WorkflowState(has_input=False)


def clock() -> float:
    return 1000.0


@activity
def step(n: int) -> int:
    return n


seen: list[tuple[str, bool]] = []


@workflow
def logs(ctx: Context) -> str:
    seen.append(("start", ctx.is_replaying))
    ctx.logger.info("start")
    ctx.call_activity(step, 1)
    seen.append(("after step", ctx.is_replaying))
    ctx.logger.info("after step %d", 1, extra={"order": 7})
    ctx.sleep(60)
    seen.append(("woke", ctx.is_replaying))
    ctx.logger.warning("woke")
    got = ctx.wait_signal("go", timeout=600)
    seen.append(("got go", ctx.is_replaying))
    ctx.logger.info("got %s", got)
    return str(got)


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, Any]]:
    """The workflow logger's (level, message, workflow id) since the last call."""
    out = [(r.levelname, r.getMessage(), getattr(r, "workflow_id", None)) for r in caplog.records
           if r.name == WORKFLOW_LOGGER]
    caplog.clear()
    return out


def test_is_replaying_is_true_while_recorded_slots_replay_and_the_logger_writes_only_live_lines(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=WORKFLOW_LOGGER)
    seen.clear()
    now = [1000.0]
    first = run(logs, NO_INPUT, clock=lambda: now[0], workflow_id="wf-log")
    assert first.outcome.blocked_on == "timer"
    assert seen == [("start", False), ("after step", False)]
    assert lines(caplog) == [("INFO", "start", "wf-log"), ("INFO", "after step 1", "wf-log")]

    seen.clear()
    now[0] += 60
    second = run(logs, first.state, clock=lambda: now[0], workflow_id="wf-log")
    assert second.outcome.blocked_on == "go"
    # Replaying the step and the timer writes nothing; from the last recorded slot on, the code is live.
    assert seen == [("start", True), ("after step", True), ("woke", False)]
    assert lines(caplog) == [("WARNING", "woke", "wf-log")]

    seen.clear()
    done = run(logs, signal(second.state, "go", "yes"), clock=lambda: now[0], workflow_id="wf-log")
    assert done.status == "completed"
    assert seen == [("start", True), ("after step", True), ("woke", True), ("got go", False)]
    assert lines(caplog) == [("INFO", "got yes", "wf-log")]

    seen.clear()
    verdict = dry_replay(logs, done.state, workflow_id="wf-log", status="completed")
    assert verdict.ok and all(replaying for _, replaying in seen)  # a check is all replay: not a line written
    assert lines(caplog) == []


def test_a_log_records_extra_is_kept_beside_the_workflow_id(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=WORKFLOW_LOGGER)
    run(logs, NO_INPUT, clock=clock, workflow_id="wf-extra")
    record = next(r for r in caplog.records if r.getMessage() == "after step 1")
    assert (getattr(record, "workflow_id", None), getattr(record, "order", None)) == ("wf-extra", 7)


def test_ctx_logger_is_a_logging_logger_that_is_disabled_while_replaying() -> None:
    def probe(ctx: Context, _input: Any) -> list[bool]:
        before = ctx.logger.isEnabledFor(logging.ERROR)
        ctx.call_activity(step, 2)
        return [before, ctx.logger.isEnabledFor(logging.ERROR), isinstance(ctx.logger, logging.LoggerAdapter)]

    first = run(probe, WorkflowState(), clock=clock)
    assert first.outcome.result == [True, True, True]
    assert run(probe, first.state, clock=clock).outcome.result == [False, True, True]


def test_the_worker_shows_workflow_log_lines_once_at_info_and_above_and_only_warnings_when_quiet(
        db_path: Path) -> None:
    wid = run_cli(db_path, "start", "logs_as_it_goes", "5", "--app", "agent_app").stdout.strip().splitlines()[-1]
    first = run_cli(db_path, "worker", "--until-idle", "--app", "agent_app")
    assert first.returncode == 0, first.stderr
    shown = [line for line in first.stderr.splitlines() if " INFO " in line or " WARNING " in line]
    assert [line.split(" ", 1)[1] for line in shown] == [f"{wid} INFO charging 5", f"{wid} INFO waiting for go"]
    assert all(re.match(r"\d\d:\d\d:\d\d ", line) for line in shown)
    assert run_cli(db_path, "signal", wid, "go", '"now"').returncode == 0
    # The resumption replays the first lines' slots: they are not written again; --quiet keeps warnings.
    second = run_cli(db_path, "worker", "--until-idle", "--quiet", "--app", "agent_app")
    assert second.returncode == 0, second.stderr
    assert [line.split(" ", 1)[1] for line in second.stderr.splitlines()] == [f"{wid} WARNING go: now"]
