"""Durable time, recorded randomness and versioning, in memory: sleep, deadlines, uuid/random, patched.

Every one is a command in the log, replayed like any other; time comes from an injected clock.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from replaylog.engine.core import (
    TIMER,
    CommandRecord,
    Context,
    NonDeterministicError,
    RunResult,
    SignalTimeout,
    WorkflowState,
    activity,
    dry_replay,
    run,
    signal,
    workflow,
)
from replaylog.engine.text import blocked_text, verdict_text

START = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


class Clock:
    """A clock the test moves by hand; it counts its reads."""

    def __init__(self, now: float = START) -> None:
        self.now = now
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


def no_clock() -> float:
    raise AssertionError("the clock was read")


effects: list[str] = []


@pytest.fixture(autouse=True)
def _reset_effects() -> None:
    effects.clear()


@activity
def remind(who: str) -> str:
    effects.append(f"remind {who}")
    return f"reminded {who}"


@activity
def charge(amount: int) -> dict[str, int]:
    effects.append(f"charge {amount}")
    return {"charged": amount}


@activity
def notify(what: str) -> str:
    effects.append(f"notify {what}")
    return what


NO_INPUT = WorkflowState(has_input=False)


def kinds(r: RunResult) -> list[tuple[str, str]]:
    return [(c.kind, c.name) for c in r.state.commands]


# ------------------------------------------------------------------ timers


@workflow
def reminder(ctx: Context) -> str:
    ctx.sleep(3600)
    return ctx.call_activity(remind, "ann")


def test_sleep_records_its_wake_time_when_first_reached_and_ends_the_run_blocked_on_timer() -> None:
    clock = Clock()
    r = run(reminder, NO_INPUT, clock=clock)
    assert (r.status, r.outcome.blocked_on, r.outcome.wake_at) == ("blocked", TIMER, START + 3600)
    assert r.state.commands == (CommandRecord("timer", "sleep", True, START + 3600),)
    assert effects == []


def test_a_timer_replayed_before_its_time_blocks_again_on_the_recorded_time_never_moved() -> None:
    clock = Clock()
    first = run(reminder, NO_INPUT, clock=clock)
    clock.now = START + 1800  # a restart half-way: the wake time stays where it was recorded
    again = run(reminder, first.state, clock=clock)
    assert (again.status, again.outcome.wake_at) == ("blocked", START + 3600)
    assert again.state.commands == first.state.commands  # nothing new recorded
    assert again.context.replayed_commands == 1 and again.context.executed_commands == 0


def test_a_timer_whose_time_has_come_fires_and_its_replay_later_returns_at_once_without_the_clock() -> None:
    clock = Clock()
    first = run(reminder, NO_INPUT, clock=clock)
    clock.now = START + 3600
    fired = run(reminder, first.state, clock=clock)
    assert (fired.status, fired.outcome.result) == ("completed", "reminded ann")
    assert effects == ["remind ann"]
    # History goes on past the timer: a replay knows it fired without reading any clock.
    again = run(reminder, fired.state, clock=no_clock)
    assert again.outcome.result == "reminded ann" and effects == ["remind ann"]


def test_a_timer_that_expired_while_nothing_ran_fires_on_the_next_run() -> None:
    clock = Clock()
    first = run(reminder, NO_INPUT, clock=clock)
    clock.now = START + 86400 * 3  # days late: it fires once, at once
    r = run(reminder, first.state, clock=clock)
    assert r.status == "completed" and effects == ["remind ann"]


def test_sleep_until_records_the_given_time_and_a_time_already_past_fires_at_once() -> None:
    @workflow
    def until(ctx: Context, at: float) -> float:
        ctx.sleep_until(at)
        return ctx.now()

    clock = Clock()
    later = run(until, WorkflowState(input=START + 60), clock=clock)
    assert (later.status, later.outcome.wake_at) == ("blocked", START + 60)
    past = run(until, WorkflowState(input=START - 60), clock=clock)
    assert past.status == "completed"
    # The slot is taken all the same: the command sequence never depends on the time.
    assert kinds(past) == [("timer", "sleep"), ("now", "now")]
    assert past.state.commands[0].value == START - 60


def test_sleep_zero_fires_at_once_and_still_takes_its_slot() -> None:
    @workflow
    def nap(ctx: Context) -> str:
        ctx.sleep(0)
        return "awake"

    r = run(nap, NO_INPUT, clock=Clock())
    assert r.outcome.result == "awake" and kinds(r) == [("timer", "sleep")]


def test_a_timer_where_history_has_an_activity_is_nondeterministic_naming_the_slot() -> None:
    @workflow
    def old(ctx: Context) -> str:
        return ctx.call_activity(remind, "bob")

    r = run(old, NO_INPUT, clock=Clock())
    out = run(reminder, r.state, clock=Clock())
    diag = out.outcome.diagnostic
    assert out.status == "failed" and diag is not None
    assert (diag.slot, diag.recorded, diag.issued) == (0, "activity:remind", "timer:sleep")


# ------------------------------------------------------------------ waits with a deadline


@workflow
def approval(ctx: Context, amount: int) -> Any:
    try:
        decision = ctx.wait_signal("approval", timeout=3600)
    except SignalTimeout:
        ctx.call_activity(notify, "expired")
        return "expired"
    return ctx.call_activity(charge, amount) if decision.get("approved") else "declined"


def test_a_wait_with_a_timeout_records_its_deadline_when_first_reached_and_blocks_until_it() -> None:
    clock = Clock()
    r = run(approval, WorkflowState(input=5), clock=clock)
    assert (r.status, r.outcome.blocked_on, r.outcome.wake_at) == ("blocked", "approval", START + 3600)
    assert r.state.commands == (CommandRecord("deadline", "approval", True, START + 3600),)
    clock.now = START + 600  # a replay later keeps the recorded deadline
    again = run(approval, r.state, clock=clock)
    assert again.outcome.wake_at == START + 3600 and again.state.commands == r.state.commands


def test_a_signal_before_the_deadline_is_returned_and_replays_the_same() -> None:
    clock = Clock()
    first = run(approval, WorkflowState(input=5), clock=clock)
    clock.now = START + 60
    done = run(approval, signal(first.state, "approval", {"approved": True}), clock=clock)
    assert (done.status, done.outcome.result) == ("completed", {"charged": 5})
    assert kinds(done) == [("deadline", "approval"), ("activity", "charge")]
    assert done.outcome.consumed_signals == (1,)
    again = run(approval, done.state, clock=no_clock)
    assert again.outcome.result == {"charged": 5} and effects == ["charge 5"]


def test_a_deadline_passed_without_a_signal_records_the_timeout_and_raises_signal_timeout() -> None:
    clock = Clock()
    first = run(approval, WorkflowState(input=5), clock=clock)
    clock.now = START + 3600
    out = run(approval, first.state, clock=clock)
    assert (out.status, out.outcome.result) == ("completed", "expired")
    assert kinds(out) == [("deadline", "approval"), ("timeout", "approval"), ("activity", "notify")]
    # The timeout is an outcome in history: a replay raises it at the same point, no clock read.
    again = run(approval, out.state, clock=no_clock)
    assert again.outcome.result == "expired" and effects == ["notify expired"]


def test_a_signal_arriving_after_the_recorded_timeout_stays_for_the_next_wait_of_that_name() -> None:
    @workflow
    def twice(ctx: Context) -> list[Any]:
        seen: list[Any] = []
        try:
            seen.append(ctx.wait_signal("approval", timeout=10))
        except SignalTimeout as exc:
            seen.append(f"timed out at slot {exc.slot}")
        seen.append(ctx.wait_signal("approval"))
        return seen

    clock = Clock()
    first = run(twice, NO_INPUT, clock=clock)
    clock.now = START + 10
    timed_out = run(twice, first.state, clock=clock)
    assert (timed_out.status, timed_out.outcome.blocked_on) == ("blocked", "approval")
    assert kinds(timed_out) == [("deadline", "approval"), ("timeout", "approval")]
    late = signal(timed_out.state, "approval", "late yes")
    # The replay raises the recorded timeout again (the late signal does not undo it): the
    # signal cursor is untouched, so the second wait consumes the signal, once.
    done = run(twice, late, clock=clock)
    assert done.outcome.result == ["timed out at slot 0", "late yes"]
    assert done.outcome.consumed_signals == (1,)


def test_a_signal_and_a_passed_deadline_in_the_same_run_the_signal_wins_and_replay_agrees() -> None:
    clock = Clock()
    first = run(approval, WorkflowState(input=5), clock=clock)
    clock.now = START + 7200  # both: the signal was delivered, and the deadline passed
    raced = run(approval, signal(first.state, "approval", {"approved": True}), clock=clock)
    assert raced.outcome.result == {"charged": 5}
    assert [k for k, _ in kinds(raced)] == ["deadline", "activity"]
    assert run(approval, raced.state, clock=clock).outcome.result == {"charged": 5}
    assert effects == ["charge 5"]


def test_an_uncaught_signal_timeout_fails_the_workflow_with_its_text() -> None:
    @workflow
    def strict(ctx: Context) -> Any:
        return ctx.wait_signal("approval", timeout=0)

    r = run(strict, NO_INPUT, clock=Clock())
    assert r.status == "failed"
    assert r.outcome.error == "SignalTimeout: no signal 'approval' arrived before the deadline of the wait at slot 0"
    assert kinds(r) == [("deadline", "approval"), ("timeout", "approval")]


def test_a_history_that_went_on_past_a_deadline_with_neither_signal_nor_timeout_diverges() -> None:
    # Recorded with a signal that consumed the wait; the code now waits on another name first.
    state = WorkflowState(input=5, commands=(CommandRecord("deadline", "approval", True, START + 10),
                                            CommandRecord("activity", "charge", True, {"charged": 5})))
    out = run(approval, state, clock=Clock(START + 99))  # no signal in this history
    diag = out.outcome.diagnostic
    assert out.status == "failed" and diag is not None
    assert (diag.slot, diag.recorded, diag.issued) == (1, "activity:charge", "timeout:approval")
    assert effects == []


def test_blocked_text_words_timers_and_deadlines() -> None:
    assert blocked_text(TIMER, START) == "timer until 2027-01-15 08:00:00 UTC"
    assert blocked_text("approval", START) == "signal 'approval' (until 2027-01-15 08:00:00 UTC)"
    assert blocked_text("approval", None) == "signal 'approval'"


# ------------------------------------------------------------------ recorded randomness


def test_uuid4_and_random_each_take_a_slot_and_replay_their_recorded_values() -> None:
    @workflow
    def ids(ctx: Context) -> list[Any]:
        return [ctx.uuid4(), ctx.random(), ctx.uuid4()]

    r = run(ids, NO_INPUT, clock=no_clock)
    first, rnd, second = r.outcome.result
    assert len(first) == 36 and first != second and 0.0 <= rnd < 1.0
    assert kinds(r) == [("uuid", "uuid4"), ("random", "random"), ("uuid", "uuid4")]
    again = run(ids, r.state, clock=no_clock)
    assert again.outcome.result == r.outcome.result and again.context.executed_commands == 0


def test_random_where_history_has_a_uuid_diverges() -> None:
    @workflow
    def one_id(ctx: Context) -> str:
        return ctx.uuid4()

    @workflow
    def one_random(ctx: Context) -> float:
        return ctx.random()

    r = run(one_id, NO_INPUT, clock=no_clock)
    diag = run(one_random, r.state, clock=no_clock).outcome.diagnostic
    assert diag is not None and (diag.slot, diag.recorded, diag.issued) == (0, "uuid:uuid4", "random:random")


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("call", "error", "text"),
    [
        (lambda ctx: ctx.sleep(-1), ValueError, "ctx.sleep(seconds): seconds must be finite and at least 0, got -1"),
        (lambda ctx: ctx.sleep(math.nan), ValueError, "got nan"),
        (lambda ctx: ctx.sleep(math.inf), ValueError, "got inf"),
        (lambda ctx: ctx.sleep("5"), TypeError, "ctx.sleep(seconds): seconds must be a number, got str"),
        (lambda ctx: ctx.sleep(True), TypeError, "got bool"),
        (lambda ctx: ctx.sleep(1e300), ValueError, "past the year 9999"),
        (lambda ctx: ctx.sleep_until(math.nan), ValueError, "ctx.sleep_until(epoch_seconds): the time must be finite"),
        (lambda ctx: ctx.sleep_until(None), TypeError, "got NoneType"),
        (lambda ctx: ctx.wait_signal("x", timeout="soon"), TypeError,
         "ctx.wait_signal('x', timeout=...): seconds must be a number, got str"),
        (lambda ctx: ctx.wait_signal("x", timeout=-5), ValueError, "got -5"),
        (lambda ctx: ctx.wait_signal("timer"), ValueError, "the signal name 'timer' is reserved for durable timers"),
        (lambda ctx: ctx.wait_signal("approval:req-0"), ValueError,
         "ctx.wait_signal: signal names starting 'approval:' answer approvals"),
        (lambda ctx: ctx.wait_signal("child:kid"), ValueError, "signal names starting 'child:' are sent by child"),
        (lambda ctx: ctx.wait_signal(""), ValueError, "ctx.wait_signal: the signal name must not be empty"),
        (lambda ctx: ctx.patched(""), ValueError, "ctx.patched(change_id): the change id must not be empty"),
        (lambda ctx: ctx.patched(7), TypeError, "ctx.patched(change_id): the change id must be a string, got int"),
        (lambda ctx: ctx.deprecate_patch(" "), ValueError, "must not be empty"),
    ],
)
def test_bad_input_is_a_clear_error_in_workflow_code_and_nothing_is_recorded(call: Any, error: type, text: str) -> None:
    caught: list[BaseException] = []

    @workflow
    def wf(ctx: Context) -> float:
        try:
            call(ctx)
        except (TypeError, ValueError) as exc:
            caught.append(exc)
        return ctx.now()  # the cursor did not move: this lands at slot 0

    r = run(wf, NO_INPUT, clock=Clock())
    assert r.status == "completed"
    assert len(caught) == 1 and type(caught[0]) is error and text in str(caught[0])
    assert kinds(r) == [("now", "now")]

    @workflow
    def uncaught(ctx: Context) -> None:
        call(ctx)

    failed = run(uncaught, NO_INPUT, clock=Clock())
    assert failed.status == "failed" and text in (failed.outcome.error or "")
    assert failed.state.commands == ()


# ------------------------------------------------------------------ versioning with patched


@workflow(name="order")
def order_v1(ctx: Context, amount: int) -> Any:
    ctx.call_activity(charge, amount)
    ctx.wait_signal("shipped")
    return ctx.call_activity(notify, "shipped")


@workflow(name="order")
def order_v2(ctx: Context, amount: int) -> Any:
    ctx.call_activity(charge, amount)
    ctx.wait_signal("shipped")
    if ctx.patched("notify-by-sms"):
        return ctx.call_activity(notify, "sms")
    return ctx.call_activity(notify, "shipped")


def _history(version: Any, *, shipped: bool) -> WorkflowState:
    """A history `version` of `order` recorded: blocked on "shipped", or completed."""
    r = run(version, WorkflowState(input=9), clock=no_clock)
    if shipped:
        r = run(version, signal(r.state, "shipped"), clock=no_clock)
        assert r.status == "completed"
    effects.clear()
    return r.state


def _v1_history(*, shipped: bool) -> WorkflowState:
    return _history(order_v1, shipped=shipped)


def test_patched_run_live_records_a_marker_and_takes_the_new_path() -> None:
    r = run(order_v2, signal(WorkflowState(input=9), "shipped"), clock=no_clock)
    assert r.outcome.result == "sms"
    assert kinds(r) == [("activity", "charge"), ("patch", "notify-by-sms"), ("activity", "notify")]
    again = run(order_v2, r.state, clock=no_clock)  # replay with the marker: True again
    assert again.outcome.result == "sms" and again.context.executed_commands == 0


def test_patched_replaying_a_history_from_before_the_patch_takes_the_old_path_and_consumes_nothing() -> None:
    old = _v1_history(shipped=True)
    r = run(order_v2, old, clock=no_clock)
    assert (r.status, r.outcome.result) == ("completed", "shipped")
    assert r.state.commands == old.commands and effects == []  # every slot replayed, nothing new
    assert r.context.replayed_commands == 2


def test_patched_at_the_end_of_a_blocked_old_history_records_the_marker_and_takes_the_new_path() -> None:
    blocked = _v1_history(shipped=False)  # old code blocked on "shipped" with one slot
    r = run(order_v2, signal(blocked, "shipped"), clock=no_clock)
    assert r.outcome.result == "sms"
    assert kinds(r)[1:] == [("patch", "notify-by-sms"), ("activity", "notify")]


@workflow(name="order")
def order_v3(ctx: Context, amount: int) -> Any:
    ctx.call_activity(charge, amount)
    ctx.wait_signal("shipped")
    if ctx.patched("notify-by-push"):
        return ctx.call_activity(notify, "push")
    elif ctx.patched("notify-by-sms"):
        return ctx.call_activity(notify, "sms")
    return ctx.call_activity(notify, "shipped")


@pytest.mark.parametrize(("version", "path"), [(order_v1, "shipped"), (order_v2, "sms"), (order_v3, "push")])
def test_stacked_patches_replay_each_versions_finished_history_down_its_own_branch(version: Any, path: str) -> None:
    recorded = _history(version, shipped=True)
    r = run(order_v3, recorded, clock=no_clock)
    assert (r.status, r.outcome.result) == ("completed", path)
    assert r.state.commands == recorded.commands and effects == []  # every slot replayed, nothing new
    verdict = dry_replay(order_v3, recorded, status="completed")
    assert verdict.ok
    assert verdict_text(verdict) == f"replays cleanly; completes ({len(recorded.commands)} slot(s) replayed)"


@pytest.mark.parametrize(("version", "path"), [(order_v1, "push"), (order_v2, "push"), (order_v3, "push")])
def test_stacked_patches_take_the_newest_branch_where_a_blocked_history_of_any_version_runs_on(
        version: Any, path: str) -> None:
    # Blocked before the patch point, no version has recorded a marker yet: the newest code decides live.
    r = run(order_v3, signal(_history(version, shipped=False), "shipped"), clock=no_clock)
    assert r.outcome.result == path
    assert kinds(r)[1:] == [("patch", "notify-by-push"), ("activity", "notify")]


def test_an_older_patch_marker_is_left_for_the_later_patched_call_of_its_id() -> None:
    recorded = _history(order_v2, shipped=True)

    @workflow(name="order")
    def asks_in_turn(ctx: Context, amount: int) -> Any:
        ctx.call_activity(charge, amount)
        ctx.wait_signal("shipped")
        answers = [ctx.patched("notify-by-push"), ctx.patched("notify-by-mail"), ctx.patched("notify-by-sms")]
        ctx.call_activity(notify, "sms")
        return answers

    r = run(asks_in_turn, recorded, clock=no_clock)
    assert (r.status, r.outcome.result) == ("completed", [False, False, True])
    assert r.context.replayed_commands == 3 and r.context.executed_commands == 0


def test_a_marker_no_patched_call_consumes_is_nondeterministic_naming_the_slot() -> None:
    r = run(order_v2, signal(WorkflowState(input=9), "shipped"), clock=no_clock)

    @workflow(name="order")
    def order_mail(ctx: Context, amount: int) -> Any:
        ctx.call_activity(charge, amount)
        ctx.wait_signal("shipped")
        if ctx.patched("notify-by-mail"):
            return ctx.call_activity(notify, "mail")
        return ctx.call_activity(notify, "shipped")

    out = run(order_mail, r.state, clock=no_clock)
    diag = out.outcome.diagnostic
    assert out.status == "failed" and diag is not None
    # patched("notify-by-mail") answered False and left the marker; the next command meets it.
    assert (diag.slot, diag.recorded, diag.issued) == (1, "patch:notify-by-sms", "activity:notify")


def test_a_marker_where_the_code_calls_no_patched_is_nondeterministic_naming_the_slot() -> None:
    r = run(order_v2, signal(WorkflowState(input=9), "shipped"), clock=no_clock)
    out = run(order_v1, r.state, clock=no_clock)
    diag = out.outcome.diagnostic
    assert out.status == "failed" and diag is not None
    assert (diag.slot, diag.recorded, diag.issued) == (1, "patch:notify-by-sms", "activity:notify")
    assert effects == ["charge 9", "notify sms"]  # from the first run only


def test_check_of_code_with_a_patch_passes_for_histories_from_before_and_after_it() -> None:
    before_done = _v1_history(shipped=True)
    before_blocked = _v1_history(shipped=False)
    after = run(order_v2, signal(WorkflowState(input=9), "shipped"), clock=no_clock).state
    effects.clear()
    verdicts = [
        dry_replay(order_v2, before_done, status="completed"),
        dry_replay(order_v2, before_blocked, status="blocked"),
        dry_replay(order_v2, signal(before_blocked, "shipped"), status="pending"),
        dry_replay(order_v2, after, status="completed"),
    ]
    assert [v.ok for v in verdicts] == [True, True, True, True], [verdict_text(v) for v in verdicts]
    assert verdict_text(verdicts[0]) == "replays cleanly; completes (2 slot(s) replayed)"
    assert verdicts[0].issued == ("activity:charge", "activity:notify")  # the old path, no marker
    assert "slot 1 would run patch:notify-by-sms live" in verdict_text(verdicts[2])
    assert verdicts[3].issued == ("activity:charge", "patch:notify-by-sms", "activity:notify")
    assert effects == []
    # And code without the patch fails the check of a history that has the marker.
    bad = dry_replay(order_v1, after, status="completed")
    assert not bad.ok and bad.diagnostic is not None and bad.diagnostic.slot == 1


def test_patched_at_the_end_of_a_finished_old_history_answers_false_in_a_dry_replay() -> None:
    @workflow(name="short")
    def short_v1(ctx: Context) -> str:
        ctx.call_activity(charge, 1)
        return "done"

    @workflow(name="short")
    def short_v2(ctx: Context) -> str:
        ctx.call_activity(charge, 1)
        if ctx.patched("add-receipt"):
            ctx.call_activity(notify, "receipt")
        return "done"

    done = run(short_v1, NO_INPUT, clock=no_clock).state
    verdict = dry_replay(short_v2, done, status="completed")
    assert verdict.ok, verdict_text(verdict)
    live = dry_replay(short_v2, done, status="blocked")  # not finished: the next run takes the new path
    assert live.ok and "slot 1 would run patch:add-receipt live" in verdict_text(live)


def test_deprecate_patch_replays_histories_with_and_without_the_marker_and_records_none() -> None:
    @workflow(name="order")
    def order_v3(ctx: Context, amount: int) -> Any:
        ctx.call_activity(charge, amount)
        ctx.wait_signal("shipped")
        ctx.deprecate_patch("notify-by-sms")  # the old path is gone
        return ctx.call_activity(notify, "sms")

    with_marker = run(order_v2, signal(WorkflowState(input=9), "shipped"), clock=no_clock).state
    effects.clear()
    assert run(order_v3, with_marker, clock=no_clock).outcome.result == "sms"
    assert dry_replay(order_v3, with_marker, status="completed").ok
    fresh = run(order_v3, signal(WorkflowState(input=9), "shipped"), clock=no_clock)
    assert kinds(fresh) == [("activity", "charge"), ("activity", "notify")]


# ------------------------------------------------------------------ dry replay (check) of time


def test_dry_replay_of_a_sleeping_history_reads_no_clock_and_says_until_when() -> None:
    r = run(reminder, NO_INPUT, clock=Clock())
    verdict = dry_replay(reminder, r.state, status="blocked")
    assert verdict.ok
    shown = verdict_text(verdict)
    assert shown == "replays cleanly; blocked on timer until 2027-01-15 09:00:00 UTC (1 slot(s) replayed)"


def test_dry_replay_of_finished_histories_with_timers_and_timeouts_replays_cleanly() -> None:
    @workflow
    def nap_last(ctx: Context) -> str:
        ctx.sleep(5)
        return "done"

    clock = Clock()
    first = run(nap_last, NO_INPUT, clock=clock)
    clock.now += 5
    done = run(nap_last, first.state, clock=clock)
    assert done.status == "completed" and kinds(done) == [("timer", "sleep")]
    # The timer is the last slot: only the status says it fired, and the dry run trusts it.
    verdict = dry_replay(nap_last, done.state, status="completed")
    assert verdict_text(verdict) == "replays cleanly; completes (1 slot(s) replayed)"

    expired = run(approval, WorkflowState(input=5), clock=clock)
    clock.now += 3600
    expired = run(approval, expired.state, clock=clock)
    verdict = dry_replay(approval, expired.state, status="completed")
    assert verdict.ok and verdict.issued == ("deadline:approval", "timeout:approval", "activity:notify")


def test_dry_replay_of_a_wait_with_a_deadline_and_of_a_finished_one_that_lost_its_signal() -> None:
    clock = Clock()
    waiting = run(approval, WorkflowState(input=5), clock=clock)
    verdict = dry_replay(approval, waiting.state, status="blocked")
    assert verdict_text(verdict) == ("replays cleanly; blocked on signal 'approval' (until 2027-01-15 09:00:00 UTC)"
                            " (1 slot(s) replayed)")
    # A completed history that ends at the wait must have consumed a signal; without one it diverges.
    bad = dry_replay(approval, waiting.state, status="completed")
    assert not bad.ok and bad.diagnostic is not None
    assert (bad.diagnostic.slot, bad.diagnostic.issued) == (1, "timeout:approval")


def test_nondeterministic_error_is_what_a_command_at_a_patch_marker_raises_inside_workflow_code() -> None:
    seen: list[BaseException] = []
    r = run(order_v2, signal(WorkflowState(input=9), "shipped"), clock=no_clock)

    @workflow(name="order")
    def catches(ctx: Context, amount: int) -> Any:
        ctx.call_activity(charge, amount)
        ctx.wait_signal("shipped")
        try:
            ctx.call_activity(notify, "shipped")  # history has the patch marker here
        except NonDeterministicError as exc:
            seen.append(exc)
        return "carried on"

    out = run(catches, r.state, clock=no_clock)
    assert out.status == "failed" and len(seen) == 1  # sticky: catching it does not help


# ------------------------------------------------------------------ the sample workflows


def test_the_sample_refund_with_deadline_expires_or_refunds_with_a_recorded_refund_number() -> None:
    from replaylog.samples import refund_with_deadline

    clock = Clock()
    first = run(refund_with_deadline, WorkflowState(input=21), clock=clock)
    assert (first.outcome.blocked_on, first.outcome.wake_at) == ("approval", START + 2 * 86400)
    clock.now += 2 * 86400
    expired = run(refund_with_deadline, first.state, clock=clock)
    assert expired.outcome.result["status"] == "expired"
    assert [k for k, _ in kinds(expired)] == ["activity", "deadline", "timeout", "activity"]

    approved = run(refund_with_deadline, signal(first.state, "approval", {"approved": True}), clock=Clock())
    result = approved.outcome.result
    assert result["status"] == "refunded" and len(result["receipt"]["refund_number"]) == 36
    assert kinds(approved)[-2:] == [("patch", "refund-number"), ("uuid", "uuid4")]
    # A refund completed before the patch existed (no marker) checks against the patched code.
    before = replace(approved.state, commands=approved.state.commands[:3])
    verdict = dry_replay(refund_with_deadline, before, status="completed")
    assert verdict.ok and verdict.issued == ("activity:fetch_invoice", "deadline:approval", "activity:charge_card")


def test_the_sample_reminder_sleeps_a_day_then_a_recorded_jittered_while() -> None:
    from replaylog.samples import reminder

    clock = Clock()
    first = run(reminder, WorkflowState(input="ann"), clock=clock)
    assert (first.outcome.blocked_on, first.outcome.wake_at) == (TIMER, START + 86400)
    clock.now += 86400
    second = run(reminder, first.state, clock=clock)
    assert second.outcome.blocked_on == TIMER and kinds(second)[-2:] == [("random", "random"), ("timer", "sleep")]
    assert START + 86400 + 3 * 3600 <= (second.outcome.wake_at or 0) <= START + 86400 + 4 * 3600
    assert run(reminder, second.state, clock=clock).outcome.wake_at == second.outcome.wake_at


def test_waits_text_dates_a_wake_time_on_another_utc_day_so_tomorrow_never_reads_as_today() -> None:
    from replaylog.engine.text import waits_text

    now = 1_796_270_400.0  # 2026-12-03 04:00 UTC
    assert waits_text(TIMER, now + 3600, now) == "timer until 05:00:00"
    # 23h later is tomorrow: a bare "03:00:00" would read as an hour ago, today.
    assert waits_text(TIMER, now + 23 * 3600, now) == "timer until 2026-12-04 03:00 UTC"
    assert waits_text("approve", now - 5 * 3600, now) == "approve (until 2026-12-02 23:00 UTC)"
