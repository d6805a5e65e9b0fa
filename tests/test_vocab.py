"""The one vocabulary (engine.vocab): every kind the core records and every status has its entry.

A kind or status named anywhere else by a list of its own is the drift this module ends:
the last test reads the whole package for one.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import replaylog
from replaylog.console.format import STATUS_STYLES
from replaylog.console.transcript_screen import MARKS
from replaylog.engine.core import (
    CommandRecord,
    Context,
    DryReplay,
    Reason,
    SignalTimeout,
    WorkflowState,
    activity,
    execute,
    signal,
    workflow,
)
from replaylog.engine.history import parse_document
from replaylog.engine.text import utc, verdict_text
from replaylog.engine.vocab import (
    FINISHED,
    UNFINISHED,
    Group,
    SlotKind,
    Status,
    is_kind,
    is_status,
    kind_info,
    status_info,
)

START = 1_800_000_000.0


@activity
def echo(x: int) -> int:
    return x


@workflow
def every_command(ctx: Any, _input: Any) -> None:
    ctx.call_activity(echo, 1)
    ctx.now()
    ctx.uuid4()
    ctx.random()
    ctx.set_event("progress", 0.5)
    ctx.patched("v2")
    ctx.upsert_search_attributes({"customer": "c-42"})
    ctx.sleep(0)  # due at once: recorded, not waited on
    try:
        ctx.wait_signal("reply", timeout=0)  # records its deadline, then the timeout
    except SignalTimeout:
        pass
    ctx.request_approval("ship")  # records the request, then waits for the answer


@workflow
def with_child(ctx: Any, _input: Any) -> None:
    ctx.call_workflow("every_command", 1)


@workflow
def with_spawned_child(ctx: Any, _input: Any) -> None:
    child = ctx.start_workflow("every_command", 1)
    child.signal("go", 1)
    child.cancel("stop")
    child.result()


def _recorded_kinds(fn: Any, *, cancel: str | None = None) -> tuple[str, list[str]]:
    """Run `fn` live in memory; the outcome's status and the kind of every slot it recorded."""
    kinds: list[str] = []

    def record(_slot: int, rec: CommandRecord) -> None:
        kinds.append(rec.kind)

    state = WorkflowState(input=1)
    ctx = Context(state, workflow_id="w", clock=lambda: START, record=record, cancel=cancel)
    return execute(fn, ctx, state).status, kinds


def test_every_kind_the_context_records_has_its_vocabulary_entry() -> None:
    statuses = set()
    recorded: set[str] = set()
    for fn, cancel in ((every_command, None), (with_child, None), (every_command, "stop")):
        status, kinds = _recorded_kinds(fn, cancel=cancel)
        statuses.add(status)
        recorded.update(kinds)
    # A child started without waiting, signalled, cancelled, and its outcome arrived.
    state = signal(WorkflowState(input=1), "child:w.0", {"ok": True, "result": 1})
    ctx = Context(state, workflow_id="w", clock=lambda: START, record=lambda _slot, rec: recorded.add(rec.kind))
    statuses.add(execute(with_spawned_child, ctx, state).status)
    assert all(is_kind(k) for k in recorded), recorded
    # And every kind of the vocabulary is one the core records (none is dead, the runs above miss none).
    assert recorded == {k.value for k in SlotKind}
    assert all(status_info(s).outcome for s in statuses)


def test_every_status_has_its_style_and_every_transcript_group_its_mark() -> None:
    assert set(STATUS_STYLES) == set(Status)
    assert set(MARKS) == set(Group)


def test_kinds_and_statuses_are_their_stored_text() -> None:
    assert SlotKind.ACTIVITY == "activity" and f"{SlotKind.TIMER}:sleep" == "timer:sleep"
    assert {"failed": 1}[Status.FAILED] == 1 and str(Status.FAILED) == "failed"
    assert kind_info("timer") is SlotKind.TIMER.info and kind_info("a kind of a newer build").group is Group.OTHER
    assert not is_kind("unrecorded") and not is_status("done") and is_status("terminated")


def test_a_time_kind_says_what_its_time_is_in_short_and_in_full() -> None:
    for kind in SlotKind:
        assert (kind.info.time is None) == (kind.info.time_note is None), kind
    assert {k for k in SlotKind if k.info.time} == {SlotKind.NOW, SlotKind.TIMER, SlotKind.DEADLINE, SlotKind.TIMEOUT}


def test_finished_statuses_are_those_no_run_comes_after() -> None:
    assert {Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.TERMINATED, Status.CONTINUED} == FINISHED
    assert set(UNFINISHED) == set(Status) - FINISHED
    # A terminated workflow's history stops where the operator stopped it, not where its code ended.
    assert not Status.TERMINATED.info.code_ended and Status.CANCELLED.info.code_ended


def test_an_exported_history_holds_only_kinds_and_statuses_of_the_vocabulary() -> None:
    doc = {"format": "replaylog-history", "version": 1, "id": "w", "workflow": "x", "has_input": False,
           "status": "pending", "signals": [],
           "slots": [{"slot": 0, "kind": "unrecorded", "name": "n", "ok": True, "attempts": 1, "recorded_at": 0}]}
    with pytest.raises(replaylog.ReplaylogError, match="slot 0 is malformed"):
        parse_document(doc, "h.json")
    doc["slots"] = [{"slot": 0, "kind": str(k), "name": "n", "ok": True, "attempts": 1, "recorded_at": 0}
                    for k in SlotKind][:1]
    doc["status"] = "done"
    with pytest.raises(replaylog.ReplaylogError, match="unknown status 'done'"):
        parse_document(doc, "h.json")
    for status in Status:
        doc["status"] = str(status)
        assert parse_document(doc, "h.json").status == status


def test_a_signal_named_like_a_kind_is_only_a_signal() -> None:
    # Kinds name slots, never signals: a signal "approval" is delivered like any other.
    @workflow
    def waits(ctx: Any, _input: Any) -> Any:
        return ctx.wait_signal("approval")

    state = signal(WorkflowState(input=1), "approval", "yes")
    ctx = Context(state, clock=lambda: START)
    assert execute(waits, ctx, state).result == "yes"


_WORDS = {k.value for k in SlotKind} | {s.value for s in Status}


def _lists_of_words(tree: ast.AST) -> list[tuple[int, list[str]]]:
    """Tuples, lists, sets and dict keys of two or more literals that are all kind or status words."""
    found = []
    for node in ast.walk(tree):
        items: list[ast.expr | None] = []
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            items = list(node.elts)
        elif isinstance(node, ast.Dict):
            items = list(node.keys)
        words = [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
        if len(words) >= 2 and len(words) == len(items) and all(w in _WORDS for w in words):
            found.append((getattr(node, "lineno", 0), words))
    return found


def test_no_module_keeps_a_list_of_kinds_or_statuses_of_its_own() -> None:
    root = Path(replaylog.__file__).parent
    lists = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "vocab.py" or "samples" in path.parts:
            continue
        for line, words in _lists_of_words(ast.parse(path.read_text())):
            lists.append(f"{path.relative_to(root)}:{line}: {words}")
    assert lists == []


def test_every_reason_of_a_dry_replay_is_worded() -> None:
    for reason in Reason:
        assert verdict_text(DryReplay(False, reason, slot=1, error="why"))


def test_stored_times_are_said_by_the_one_time_formatter() -> None:
    # Turning epoch seconds into wall time happens in engine/text.py alone (`utc`), so the CLI,
    # the console and the store's messages say a time the same way.
    root = Path(replaylog.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).as_posix() == "engine/text.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("fromtimestamp", "utcfromtimestamp", "gmtime"):
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.attr}")
    assert found == []
    assert utc(1_800_000_000.5, "millis") == "08:00:00.500" and utc(None) == "—"
    assert utc(1e20) == "1e+20 (epoch seconds)"
