"""ctx.set_event in the core, in memory: a slot like any other, replayed, never recorded twice."""

from __future__ import annotations

from typing import Any

import pytest

from replaylog import Context, NonDeterministicError, ValueNotJSONError, WorkflowCancelled, WorkflowState, run, workflow
from replaylog.engine.core import CommandRecord, execute

NOON = 1_800_000_000.0


@workflow
def publishes(ctx: Context, n: int) -> int:
    for i in range(n):
        ctx.set_event("progress", i)
    ctx.wait_signal("go")
    return n


def test_each_set_takes_a_slot_and_a_replay_records_none_again() -> None:
    first = run(publishes, WorkflowState(input=3), clock=lambda: NOON)
    assert first.status == "blocked"
    assert [(c.kind, c.name, c.value) for c in first.state.commands] == [("event", "progress", i) for i in range(3)]
    again = run(publishes, first.state, clock=lambda: NOON)
    assert again.context.replayed_commands == 3 and again.context.new_commands == []


def test_a_set_where_history_holds_another_command_diverges() -> None:
    state = WorkflowState(input=1, commands=(CommandRecord("now", "now", True, NOON),))
    result = run(publishes, state, clock=lambda: NOON)
    assert result.status == "failed"
    assert isinstance(result.context.fatal, NonDeterministicError)
    assert (result.context.fatal.recorded, result.context.fatal.issued) == ("now:now", "event:progress")


@pytest.mark.parametrize(("key", "error", "said"), [
    (3, TypeError, "the key must be a string, got int"),
    ("", ValueError, "the key must be 1-200 characters, got 0"),
    ("k" * 201, ValueError, "the key must be 1-200 characters, got 201"),
])
def test_a_bad_key_is_refused_before_anything_is_recorded(key: Any, error: type[Exception], said: str) -> None:
    caught: list[BaseException] = []

    @workflow
    def bad_key(ctx: Context) -> None:
        try:
            ctx.set_event(key, 1)
        except Exception as exc:
            caught.append(exc)
        ctx.set_event("ok", 1)

    result = run(bad_key, WorkflowState(has_input=False), clock=lambda: NOON)
    assert result.status == "completed" and isinstance(caught[0], error) and said in str(caught[0])
    assert [(c.kind, c.name) for c in result.state.commands] == [("event", "ok")]


def test_a_value_json_cannot_hold_is_refused_and_its_slot_stays_free() -> None:
    @workflow
    def bad_value(ctx: Context) -> None:
        with pytest.raises(ValueNotJSONError, match="slot 0: the value of event 'k'"):
            ctx.set_event("k", object())
        ctx.set_event("k", "fine")

    result = run(bad_value, WorkflowState(has_input=False), clock=lambda: NOON)
    assert result.status == "completed" and [c.value for c in result.state.commands] == ["fine"]


def test_a_cancel_request_is_delivered_at_a_set_and_replays_there() -> None:
    ctx = Context(WorkflowState(input=2), clock=lambda: NOON, cancel="stop")
    outcome = execute(publishes, ctx, WorkflowState(input=2))
    assert outcome.status == "cancelled"
    assert [(c.kind, c.name) for c in ctx.new_commands] == [("cancel", "event:progress")]
    replay = Context(WorkflowState(input=2, commands=tuple(ctx.new_commands)), clock=lambda: NOON)
    with pytest.raises(WorkflowCancelled, match="stop"):
        replay.set_event("progress", 0)
