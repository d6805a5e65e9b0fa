"""The replay core in memory: the reference's refund trace and every rule of the mechanism."""

from __future__ import annotations

from typing import Any

import pytest
from reference_refund import charge_card, fetch_invoice, refund, side_effects

from replaylog.engine.core import (
    ActivityError,
    CommandRecord,
    Context,
    Reason,
    WorkflowBlocked,
    WorkflowState,
    activity,
    dry_replay,
    run,
    signal,
    to_json_value,
    workflow,
)
from replaylog.engine.errors import ValueNotJSONError
from replaylog.engine.text import verdict_text

# ------------------------------------------------------------------ the reference's refund
# (refund, its activities and their side-effect counters live in tests/reference_refund.py)


def fixed_clock() -> float:
    return 1001.0


@pytest.fixture(autouse=True)
def _reset_effects() -> None:
    side_effects.update(charges=0, invoices=0)


def test_reference_refund_trace_has_the_reference_figures() -> None:
    state = WorkflowState(input=7)

    # Run 1: fetch_invoice executes (700), wait_signal blocks; nothing charged, no thread parked.
    r1 = run(refund, state, clock=fixed_clock)
    assert r1.status == "blocked"
    assert r1.outcome.blocked_on == "approval"
    assert [c.value for c in r1.state.commands] == [700]
    assert side_effects["charges"] == 0

    # Signal + run 2: fetch_invoice replays, now() records 1001, charge_card executes once.
    r2 = run(refund, signal(r1.state, "approval", {"approved": True}), clock=fixed_clock)
    assert r2.status == "completed"
    assert r2.context.replayed_commands == 1
    assert r2.context.executed_commands == 2
    assert side_effects == {"charges": 1, "invoices": 1}
    assert [(c.kind, c.name, c.value) for c in r2.state.commands] == [
        ("activity", "fetch_invoice", 700), ("now", "now", 1001.0), ("activity", "charge_card", {"charged": -700}),
    ]
    assert r2.outcome.result == {"amount": 700, "approval": {"approved": True}, "at": 1001.0,
                                 "receipt": {"charged": -700}}

    # Run 3: replaying the completed history has zero new side effects; every command replays.
    r3 = run(refund, r2.state, clock=lambda: pytest.fail("the clock was read on replay"))
    assert r3.status == "completed"
    assert r3.outcome.result == r2.outcome.result
    assert side_effects == {"charges": 1, "invoices": 1}
    assert r3.context.replayed_commands == 3
    assert r3.context.executed_commands == 0
    assert r3.state.commands == r2.state.commands


# ------------------------------------------------------------------ failures and retries

calls: dict[str, int] = {}


@activity
def always_fails() -> None:
    calls["always_fails"] = calls.get("always_fails", 0) + 1
    raise ValueError("boom")


@activity
def fails_twice() -> str:
    calls["fails_twice"] = calls.get("fails_twice", 0) + 1
    if calls["fails_twice"] < 3:
        raise ConnectionError("try again")
    return "ok"


@workflow
def handles_failure(ctx: Context) -> str:
    try:
        ctx.call_activity(always_fails, max_retries=4)
    except ActivityError as exc:
        return f"handled {exc.error} after {exc.attempts}"
    return "unreachable"


def test_failed_activity_is_recorded_once_with_its_attempts_and_replays_its_error_without_rerunning() -> None:
    calls.clear()
    sleeps: list[float] = []
    first = run(handles_failure, WorkflowState(has_input=False), clock=fixed_clock, sleep=sleeps.append)
    assert first.status == "completed"
    assert first.outcome.result == "handled ValueError: boom after 4"
    assert calls["always_fails"] == 4
    assert len(sleeps) == 3 and sleeps == sorted(sleeps)  # backoff grows between attempts
    (rec,) = first.state.commands
    assert (rec.ok, rec.error, rec.attempts) == (False, "ValueError: boom", 4)

    again = run(handles_failure, first.state, clock=fixed_clock)
    assert again.outcome.result == first.outcome.result
    assert calls["always_fails"] == 4  # replayed the verdict, never re-ran
    assert again.context.replayed_commands == 1


def test_retries_collapse_into_one_recorded_outcome() -> None:
    calls.clear()

    @workflow
    def wf(ctx: Context) -> str:
        return ctx.call_activity(fails_twice, max_retries=3)

    r = run(wf, WorkflowState(has_input=False), clock=fixed_clock)
    assert r.outcome.result == "ok"
    assert [(c.ok, c.value, c.attempts) for c in r.state.commands] == [(True, "ok", 3)]


def test_unhandled_activity_error_fails_the_workflow() -> None:
    @workflow
    def wf(ctx: Context) -> None:
        ctx.call_activity(always_fails, max_retries=1)

    r = run(wf, WorkflowState(has_input=False), clock=fixed_clock)
    assert r.status == "failed"
    assert "ActivityError" in (r.outcome.error or "") and "boom" in (r.outcome.error or "")


# ------------------------------------------------------------------ non-determinism


def test_changed_command_at_a_slot_raises_nondeterministic_error_and_executes_nothing() -> None:
    r = run(refund, WorkflowState(input=7), clock=fixed_clock)
    before = dict(side_effects)

    @workflow(name="refund")
    def refund_v2(ctx: Context, invoice_id: int) -> None:
        ctx.call_activity(charge_card, 1)

    out = run(refund_v2, r.state, clock=fixed_clock)
    assert out.status == "failed"
    diag = out.outcome.diagnostic
    assert diag is not None
    assert (diag.slot, diag.recorded, diag.issued) == (0, "activity:fetch_invoice", "activity:charge_card")
    assert side_effects == before


def test_now_where_history_has_an_activity_diverges() -> None:
    r = run(refund, WorkflowState(input=7), clock=fixed_clock)

    @workflow
    def clock_first(ctx: Context, invoice_id: int) -> None:
        ctx.now()

    diag = run(clock_first, r.state, clock=fixed_clock).outcome.diagnostic
    assert diag is not None and (diag.recorded, diag.issued) == ("activity:fetch_invoice", "now:now")


def test_divergence_cannot_be_swallowed_by_workflow_code() -> None:
    r = run(refund, WorkflowState(input=7), clock=fixed_clock)

    @workflow
    def swallower(ctx: Context, invoice_id: int) -> str:
        try:
            ctx.call_activity(charge_card, 1)
        except Exception:
            pass
        return "carried on"

    out = run(swallower, r.state, clock=fixed_clock)
    assert out.status == "failed" and out.outcome.diagnostic is not None
    assert out.outcome.diagnostic.slot == 0


def test_completing_with_unconsumed_slots_is_nondeterministic_at_the_first_unconsumed_slot() -> None:
    r1 = run(refund, WorkflowState(input=7), clock=fixed_clock)
    done = run(refund, signal(r1.state, "approval", True), clock=fixed_clock)

    @workflow
    def shorter(ctx: Context, invoice_id: int) -> int:
        return ctx.call_activity(fetch_invoice, invoice_id)

    out = run(shorter, done.state, clock=fixed_clock)
    diag = out.outcome.diagnostic
    assert out.status == "failed" and diag is not None
    assert (diag.slot, diag.recorded, diag.issued) == (1, "now:now", None)


def test_blocked_exception_is_not_swallowed_by_except_exception() -> None:
    @workflow
    def sneaky(ctx: Context) -> str:
        try:
            ctx.wait_signal("go")
        except Exception:
            return "swallowed"
        return "got it"

    assert not issubclass(WorkflowBlocked, Exception)
    r = run(sneaky, WorkflowState(has_input=False), clock=fixed_clock)
    assert (r.status, r.outcome.blocked_on) == ("blocked", "go")


# ------------------------------------------------------------------ signals


def test_signals_of_one_name_are_consumed_in_delivery_order_by_a_cursor() -> None:
    @workflow
    def two(ctx: Context) -> list[Any]:
        return [ctx.wait_signal("approval"), ctx.wait_signal("approval")]

    state = WorkflowState(has_input=False)
    assert run(two, state, clock=fixed_clock).outcome.blocked_on == "approval"
    state = signal(state, "other", "ignored")
    state = signal(state, "approval", "first")
    r = run(two, state, clock=fixed_clock)
    assert (r.status, r.outcome.blocked_on) == ("blocked", "approval")
    r = run(two, signal(state, "approval", "second"), clock=fixed_clock)
    assert r.outcome.result == ["first", "second"]
    assert r.outcome.consumed_signals == (2, 3)


def test_now_occupies_a_slot_and_replays_its_recorded_value() -> None:
    ticks = iter([5.0, 6.0])

    @workflow
    def clocked(ctx: Context) -> list[float]:
        return [ctx.now(), ctx.now()]

    r = run(clocked, WorkflowState(has_input=False), clock=lambda: next(ticks))
    assert r.outcome.result == [5.0, 6.0]
    assert [c.kind for c in r.state.commands] == ["now", "now"]
    again = run(clocked, r.state, clock=lambda: 99.0)
    assert again.outcome.result == [5.0, 6.0] and again.context.executed_commands == 0


# ------------------------------------------------------------------ values


def test_value_json_cannot_hold_fails_the_workflow_naming_slot_and_type() -> None:
    @activity
    def gives_a_set() -> set[int]:
        return {1, 2}

    @workflow
    def wf(ctx: Context) -> None:
        ctx.call_activity(lambda: 1)  # slot 0, fine
        try:
            ctx.call_activity(gives_a_set)
        except Exception:
            pass  # swallowing it does not help: the error is sticky

    r = run(wf, WorkflowState(has_input=False), clock=fixed_clock)
    assert r.status == "failed"
    assert "slot 1" in (r.outcome.error or "") and "set" in (r.outcome.error or "")
    assert len(r.state.commands) == 1


def test_live_values_read_back_as_json_so_live_and_replay_agree() -> None:
    @activity
    def tuple_maker() -> tuple[int, int]:
        return (1, 2)

    @workflow
    def wf(ctx: Context) -> Any:
        return ctx.call_activity(tuple_maker)

    r = run(wf, WorkflowState(has_input=False), clock=fixed_clock)
    assert r.outcome.result == [1, 2]
    assert run(wf, r.state, clock=fixed_clock).outcome.result == [1, 2]


def test_activity_by_name_and_unknown_activity_name() -> None:
    @workflow
    def by_name(ctx: Context) -> Any:
        return ctx.call_activity("fetch_invoice", 3)

    ok = run(by_name, WorkflowState(has_input=False), clock=fixed_clock, activities={"fetch_invoice": fetch_invoice})
    assert ok.outcome.result == 300
    bad = run(by_name, WorkflowState(has_input=False), clock=fixed_clock, activities={})
    assert bad.status == "failed" and "unknown activity 'fetch_invoice'" in (bad.outcome.error or "")


def test_exception_in_workflow_code_fails_with_its_text() -> None:
    @workflow
    def broken(ctx: Context) -> None:
        raise KeyError("missing")

    r = run(broken, WorkflowState(has_input=False), clock=fixed_clock)
    assert r.status == "failed" and r.outcome.error == "workflow code raised KeyError: 'missing'"


# ------------------------------------------------------------------ dry replay


def test_dry_replay_runs_nothing_and_reports_divergence() -> None:
    r = run(refund, WorkflowState(input=7), clock=fixed_clock)
    before = dict(side_effects)
    ok = dry_replay(refund, signal(r.state, "approval", True))
    assert ok.ok and "slot 1 would run now:now" in verdict_text(ok)
    assert side_effects == before

    @workflow
    def other(ctx: Context, invoice_id: int) -> None:
        ctx.call_activity(charge_card, 0)

    bad = dry_replay(other, r.state)
    assert not bad.ok and bad.diagnostic is not None and bad.diagnostic.slot == 0
    assert bad.issued == ("activity:charge_card",)
    assert side_effects == before


def test_a_failed_workflows_check_goes_by_what_failed_it_never_by_its_error_text() -> None:
    state = WorkflowState(input=7, commands=(CommandRecord("activity", "fetch_invoice", True, 700),))

    @workflow
    def two_calls(ctx: Context, invoice_id: int) -> None:
        ctx.call_activity(fetch_invoice, invoice_id)
        ctx.call_activity(charge_card, 700)

    # Its own code raised, with a text that reads like a refusal at slot 1: the history ends
    # after slot 0, and the code now issues slot 1, so it diverges.
    code = dry_replay(two_calls, state, status="failed", recorded_error="workflow code raised ValueError: slot 1: no",
                      error_kind="code")
    assert (code.ok, code.reason, code.slot) == (False, Reason.DIVERGES, 1)
    assert code.diagnostic is not None and code.diagnostic.issued == "activity:charge_card"
    # Refused live at slot 1 (an unknown activity, say): nothing was recorded there, so the
    # history replays up to it, where the run stopped.
    refused = dry_replay(two_calls, state, status="failed", recorded_error="UnknownActivityError: unknown",
                         error_kind="engine")
    assert (refused.ok, refused.reason, refused.slot) == (True, Reason.FAILED_LIVE, 1)
    assert verdict_text(refused) == ("replays cleanly up to slot 1, where it failed live: "
                                     "UnknownActivityError: unknown (1 slot(s) replayed)")


def test_dry_replay_that_blocks_or_fails_before_the_end_of_history_diverges() -> None:
    # History went past slot 0 with the same signals (signals only ever arrive): code that
    # now stops at slot 0 has changed its path, whatever the workflow's status.
    state = WorkflowState(input=7, commands=(CommandRecord("activity", "fetch_invoice", True, 700),
                                             CommandRecord("now", "now", True, 1.0)))

    @workflow
    def waits_early(ctx: Context, invoice_id: int) -> None:
        ctx.call_activity(fetch_invoice, invoice_id)
        ctx.wait_signal("approval")

    blocked = dry_replay(waits_early, state)
    assert not blocked.ok and blocked.diagnostic is not None
    assert (blocked.diagnostic.slot, blocked.diagnostic.recorded, blocked.diagnostic.issued) == (1, "now:now", None)
    assert "waited on signal 'approval' instead" in verdict_text(blocked)


def test_command_record_label() -> None:
    assert CommandRecord("activity", "x", True).label == "activity:x"


def test_current_activity_names_the_running_attempt_and_only_inside_an_activity() -> None:
    from replaylog.engine.core import current_activity

    seen: list[tuple[str, int, str, int, str]] = []
    outside: list[str] = []

    def probe_outside() -> None:
        try:
            current_activity()
        except RuntimeError as exc:
            outside.append(str(exc))

    @activity
    def flaky(fail_times: int) -> int:
        info = current_activity()
        seen.append((info.workflow_id, info.slot, info.name, info.attempt, info.idempotency_key))
        if info.attempt <= fail_times:
            raise ValueError("not yet")
        return info.attempt

    @workflow
    def wf(ctx: Context) -> list[int]:
        probe_outside()  # workflow code before any activity
        first = ctx.call_activity(flaky, 0)
        probe_outside()  # between activities: the first one has returned
        second = ctx.call_activity(flaky, 2, max_retries=3)
        return [first, second]

    probe_outside()  # no run at all
    r = run(wf, WorkflowState(input=None, has_input=False), clock=fixed_clock, workflow_id="wf-probe")
    probe_outside()  # after the run
    assert r.status == "completed" and r.outcome.result == [1, 3]
    keys = {key for *_, key in seen}
    assert [s[:4] for s in seen] == [("wf-probe", 0, "flaky", 1), ("wf-probe", 1, "flaky", 1),
                                     ("wf-probe", 1, "flaky", 2), ("wf-probe", 1, "flaky", 3)]
    assert len(keys) == 2  # the same key on every attempt of a slot, another for the next slot
    assert outside == ["current_activity() called outside a running activity"] * 4


def test_values_read_back_as_json_gives_them_and_an_int_json_cannot_write_is_named() -> None:
    # to_json_value answers small ints and None without encoding them (the commonest
    # workflow results), anything else as it reads back from JSON; an int of more digits
    # than Python writes is refused with what it is.
    assert [to_json_value(v, "x") for v in (0, -7, 2**63, 2**64, None, True, 2.5, "s")] == [
        0, -7, 2**63, 2**64, None, True, 2.5, "s"]
    assert to_json_value((1, (2, 3)), "x") == [1, [2, 3]]
    with pytest.raises(ValueNotJSONError, match=r"^the workflow's result is of type int \(containing an int of more"
                                                r" than 4,300 digits\), which JSON cannot hold$"):
        to_json_value(10**5000, "the workflow's result")
    with pytest.raises(ValueNotJSONError, match=r"is of type list \(containing an int of more than"):
        to_json_value([1, 10**5000], "x")
