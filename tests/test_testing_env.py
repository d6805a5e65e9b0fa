"""replaylog.testing.WorkflowEnvironment: an application's tests on a temporary store with a clock that skips time."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import client_app
import pytest

from conftest import wait_for
from replaylog import WorkflowCancelled, WorkflowFailed
from replaylog.testing import WorkflowEnvironment

DAY, HOUR = 24 * 3600, 3600


@pytest.fixture
def env() -> Iterator[WorkflowEnvironment]:
    with WorkflowEnvironment(app=client_app) as e:
        yield e


def test_a_day_of_sleep_and_an_hour_long_deadline_are_skipped_while_a_result_is_awaited(
        env: WorkflowEnvironment) -> None:
    started = env.now()
    handle = env.client.start(client_app.day_then_deadline)
    assert handle.result(timeout=30) == "timed out"
    assert env.now() - started >= DAY + HOUR
    # The recorded times are the environment's: the timer a day on, the deadline an hour after it.
    timer, _event, deadline, timeout = handle.history()
    assert timer.kind == "timer" and timer.value - started >= DAY
    assert (deadline.kind, timeout.kind) == ("deadline", "timeout") and deadline.value - timer.value >= HOUR


def test_time_runs_as_the_wall_clock_while_nothing_waits_so_a_signal_beats_its_deadline(
        env: WorkflowEnvironment) -> None:
    handle = env.client.start(client_app.day_then_deadline)
    assert wait_for(lambda: handle.describe().blocked_on == "timer")
    env.advance(DAY)  # returns once the woken workflow waits again
    info = handle.describe()
    assert info.blocked_on == "go" and info.wake_at is not None and info.wake_at - env.now() > HOUR - 60
    assert handle.get_event("stage", timeout=0) == "waiting for go"
    handle.signal("go", "in time")
    assert handle.result(timeout=30) == "in time"


def test_advance_moves_the_clock_by_hand(env: WorkflowEnvironment) -> None:
    handle = env.client.start(client_app.sleeper)
    assert wait_for(lambda: handle.describe().blocked_on == "timer")
    env.advance(HOUR / 2)
    assert handle.describe().status == "blocked"
    env.advance(HOUR / 2)
    assert handle.describe().status == "completed" and handle.result(timeout=0) == "woke"
    with pytest.raises(ValueError, match="forward only"):
        env.advance(-1)


def test_a_workflow_timeout_is_skipped_to_while_a_result_is_awaited(env: WorkflowEnvironment) -> None:
    started = env.now()
    handle = env.client.start(client_app.waits, timeout=DAY)  # nobody sends "go"
    with pytest.raises(WorkflowCancelled, match="timeout"):
        handle.result(timeout=30)
    assert env.now() - started >= DAY
    info = handle.describe()
    assert (info.status, info.error) == ("cancelled", "WorkflowCancelled: timeout")


def test_advance_past_a_workflow_timeout_cancels_it_on_the_environments_clock() -> None:
    # A clock far from the wall clock: a deadline counted on the wall clock would pass at once.
    with WorkflowEnvironment(app=client_app, start_time=datetime(2031, 5, 1, tzinfo=UTC)) as env:
        handle = env.client.start(client_app.waits, timeout=HOUR)
        assert wait_for(lambda: handle.describe().blocked_on == "go")
        env.advance(HOUR / 2)
        assert handle.describe().status == "blocked"
        env.advance(HOUR / 2)  # returns once the cancelled workflow has run
        info = handle.describe()
        assert (info.status, info.error) == ("cancelled", "WorkflowCancelled: timeout")


def test_a_childs_own_timeout_is_counted_on_the_environments_clock() -> None:
    with WorkflowEnvironment(app=client_app, start_time=datetime(2031, 5, 1, tzinfo=UTC)) as env:
        handle = env.client.start(client_app.waits_on_child, HOUR, timeout=DAY)
        assert wait_for(lambda: handle.describe().blocked_on is not None)
        env.advance(HOUR / 2)
        assert handle.describe().status == "blocked"
        env.advance(HOUR / 2)
        assert handle.result(timeout=0) == "child: WorkflowCancelled: timeout"


def test_the_clock_starts_at_start_time() -> None:
    start = datetime(2030, 1, 1, tzinfo=UTC)
    with WorkflowEnvironment(app=client_app, start_time=start) as env:
        read = env.client.start(client_app.clock).result(timeout=30)
        assert start.timestamp() <= read < start.timestamp() + 600
    with pytest.raises(ValueError, match="aware datetime"):
        WorkflowEnvironment(app=client_app, start_time=datetime(2030, 1, 1))


def test_errors_reach_the_test_as_they_reach_an_application(env: WorkflowEnvironment) -> None:
    with pytest.raises(WorkflowFailed, match="boom"):
        env.client.start(client_app.fails).result(timeout=30)


def test_nothing_is_left_behind() -> None:
    with WorkflowEnvironment(app=client_app) as env:
        env.client.start(client_app.add, 1).result(timeout=30)
        folder = env.db.parent
        assert env.db.exists()
    assert not folder.exists()
    assert env.client.closed and env.worker.stop_requested


def test_looking_without_waiting_never_skips_time(env: WorkflowEnvironment) -> None:
    # A call with timeout=0 only looks: time must not jump under it, however often a test looks.
    handle = env.client.start(client_app.day_then_deadline)
    assert wait_for(lambda: handle.describe().blocked_on == "timer")
    env.advance(DAY)
    before = env.now()
    for _ in range(300):
        assert handle.get_event("stage", timeout=0) == "waiting for go"
    assert env.now() - before < HOUR - 60, "the clock jumped while the test only looked"
    assert handle.describe().blocked_on == "go"
    handle.signal("go", "in time")
    assert handle.result(timeout=30) == "in time"
