"""Issue 18 in the store itself, on both backends: parallel commits, child workflows, approvals, argument keys.

The worker and CLI tests (test_parallel, test_children*, test_approvals, test_arg_guard) run
these paths end to end; here each store promise is pinned down on its own, so that SQLite
and PostgreSQL are held to the same answers.
"""

from __future__ import annotations

import time

import pytest

from conftest import on_server, sql
from replaylog.engine.core import CHILD_PREFIX, HOLE, CommandRecord, Outcome
from replaylog.engine.errors import DuplicateWorkflowIdError, OperatorRefusedError, StoreError
from replaylog.engine.store import PendingRecord, Store

TTL = 30.0


def rec(name: str, value: object = None, args: str | None = None) -> CommandRecord:
    return CommandRecord("activity", name, True, value, None, 1, args)


def child(child_id: str, workflow: str = "kid", value: object = 5) -> CommandRecord:
    return CommandRecord("child", workflow, True, {"id": child_id, "input": value}, None, 1, f"[{value}]")


def test_parallel_tasks_commit_in_any_order_once_each_and_only_under_the_lease(store: Store) -> None:
    store.start_workflow("wf", None, workflow_id="p")
    (claim,) = store.claim("w1", ttl=TTL)
    assert store.commit_record(claim, 0, rec("before", 0), ttl=TTL)
    assert store.commit_record(claim, 3, rec("t", 3), ttl=TTL, parallel_group=1)
    assert store.commit_record(claim, 1, rec("t", 1), ttl=TTL, parallel_group=1)
    assert not store.commit_record(claim, 1, rec("t", 1), ttl=TTL, parallel_group=1)  # never written twice
    written, _ = store.commit_batch([PendingRecord(claim, 2, rec("t", 2), parallel_group=1)], ttl=TTL)
    assert written == [True]
    # The row's fence is at the group's end: the next plain slot is 4.
    assert not store.commit_record(claim, 3, rec("after", 3), ttl=TTL)
    assert store.commit_record(claim, 4, rec("after", 4), ttl=TTL)
    assert [c.value for c in store.load_state("p").commands] == [0, 1, 2, 3, 4]
    store.release(claim)
    (again,) = store.claim("w2", ttl=TTL)
    assert not store.commit_record(claim, 5, rec("t", 5), ttl=TTL, parallel_group=1)  # fenced out: old epoch
    assert store.commit_record(again, 5, rec("t", 5), ttl=TTL, parallel_group=1)


def test_a_group_after_slots_that_left_the_row_alone_is_fenced_and_followed_in_order(store: Store) -> None:
    # Plain slots in a row (on SQLite they leave the workflow's row alone, its count lagging);
    # a group's tasks then move the count, and the first slot after the group is fenced at its end.
    store.start_workflow("wf", None, workflow_id="q")
    (claim,) = store.claim("w1", ttl=TTL)
    for slot in range(4):
        assert store.commit_record(claim, slot, rec("before", slot), ttl=TTL)
    written, _ = store.commit_batch([PendingRecord(claim, 5, rec("t", 5), parallel_group=4)], ttl=TTL)
    assert written == [True]
    assert store.commit_record(claim, 4, rec("t", 4), ttl=TTL, parallel_group=4)
    assert not store.commit_record(claim, 5, rec("after", 5), ttl=TTL)  # the group's end is 6
    assert store.commit_record(claim, 6, rec("after", 6), ttl=TTL)
    written, _ = store.commit_batch([PendingRecord(claim, 7, rec("after", 7))], ttl=TTL)
    assert written == [True]
    shown = store.get_workflow("q")
    assert shown is not None and shown.slots == 8
    assert [c.value for c in store.load_state("q").commands] == list(range(8))


def test_a_gap_left_in_a_group_loads_as_a_hole_with_the_argument_keys_kept(store: Store) -> None:
    store.start_workflow("wf", None, workflow_id="g")
    (claim,) = store.claim("w1", ttl=TTL)
    assert store.commit_record(claim, 0, rec("before", 0, '["x"]'), ttl=TTL)
    assert store.commit_record(claim, 2, rec("t", 2, '["y"]'), ttl=TTL, parallel_group=1)
    commands = store.load_state("g").commands
    assert commands[1] is HOLE and [commands[0].args, commands[2].args] == ['["x"]', '["y"]']
    assert [(c.slot, c.args) for c in store.list_commands("g")] == [(0, '["x"]'), (2, '["y"]')]
    store.release(claim)
    (again,) = store.claim("w1", ttl=TTL)  # a claim loads a short history itself
    assert again.state is not None and again.state.commands == commands


def test_a_child_slot_starts_the_child_and_its_end_wakes_the_parent(store: Store) -> None:
    store.start_workflow("parent", None, workflow_id="p")
    (claim,) = store.claim("w1", ttl=TTL)
    assert store.commit_record(claim, 0, child("p.0"), ttl=TTL)
    row = store.get_workflow("p.0")
    assert (row.status, row.workflow, row.input, row.parent) == ("pending", "kid", 5, "p")
    assert store.family("p") == {"parent": None, "children": [{"id": "p.0", "workflow": "kid", "status": "pending"}]}
    assert store.family("p.0") == {"parent": "p", "children": []}
    assert [w.id for w in store.list_workflows(top_level=True)] == ["p"]
    assert store.count_workflows(top_level=True) == 1 and store.count_workflows() == 2
    _, finished = store.commit_batch(finishes=[(claim, Outcome(status="blocked", blocked_on=CHILD_PREFIX + "p.0"))],
                                     ttl=TTL)
    assert finished == [True]
    (kid,) = store.claim("w1", ttl=TTL)
    assert kid.id == "p.0"
    assert store.commit_batch(finishes=[(kid, Outcome(status="completed", result=7))], ttl=TTL)[1] == [True]
    parent = store.get_workflow("p")
    assert (parent.status, parent.blocked_on) == ("pending", None)  # woken by its child's verdict
    assert [(s.name, s.payload) for s in store.list_signals("p")] == [
        ("child:p.0", {"ok": True, "result": 7, "error": None})]


def test_a_grandchild_is_a_descendant_and_a_cancelled_child_tells_its_parent(store: Store) -> None:
    store.start_workflow("parent", None, workflow_id="p")
    (claim,) = store.claim("w1", ttl=TTL)
    written, _ = store.commit_batch([PendingRecord(claim, 0, child("p.0"))], ttl=TTL)  # a child in a batch
    assert written == [True]
    store.commit_batch(finishes=[(claim, Outcome(status="blocked", blocked_on=CHILD_PREFIX + "p.0"))], ttl=TTL)
    (kid,) = store.claim("w1", ttl=TTL)
    assert store.commit_record(kid, 0, child("p.0.0", "grandkid"), ttl=TTL)
    assert [(w.id, w.parent) for w in store.list_descendants(["p"])] == [("p.0", "p"), ("p.0.0", "p.0")]
    assert store.list_descendants([]) == []
    store.commit_batch(finishes=[(kid, Outcome(status="cancelled", error="WorkflowCancelled: enough"))], ttl=TTL)
    assert store.get_workflow("p").status == "pending"
    assert [s.payload for s in store.list_signals("p")] == [
        {"ok": False, "result": None, "error": "WorkflowCancelled: enough"}]


def test_a_child_whose_id_is_taken_refuses_the_whole_commit(store: Store) -> None:
    store.start_workflow("parent", None, workflow_id="p")
    (claim,) = store.claim("w1", ttl=TTL)
    store.start_workflow("other", None, workflow_id="p.0")  # started meanwhile by somebody else
    with pytest.raises(DuplicateWorkflowIdError, match=r"'p\.0' already exists"):
        store.commit_record(claim, 0, child("p.0"), ttl=TTL)
    with pytest.raises(DuplicateWorkflowIdError):
        store.commit_batch([PendingRecord(claim, 0, child("p.0"))], ttl=TTL)
    assert store.list_commands("p") == [] and store.get_workflow("p.0").parent is None
    # The lease still holds and slot 0 is still next: nothing of the refused commits was written.
    assert store.commit_record(claim, 0, rec("a", 0), ttl=TTL)


def _blocked_on_approval(store: Store, wid: str, *, wake_at: float | None = None) -> None:
    store.start_workflow("asks", None, workflow_id=wid)
    (claim,) = store.claim("w1", ttl=TTL)
    request = {"request": "req-0", "action": "wire the money", "details": {"amount": 10}}
    assert store.commit_record(claim, 0, CommandRecord("approval", "wire the money", True, request), ttl=TTL)
    if wake_at is not None:
        assert store.commit_record(claim, 1, CommandRecord("deadline", "approval:req-0", True, wake_at), ttl=TTL)
    store.commit_batch(finishes=[(claim, Outcome(status="blocked", blocked_on="approval:req-0", wake_at=wake_at))],
                       ttl=TTL)


@pytest.mark.parametrize("name", ["timer", "approval:req-0", "child:kid", ""])
def test_the_engines_own_signal_names_are_refused_and_nothing_is_written(store: Store, name: str) -> None:
    store.start_workflow("wf", None, workflow_id="w")
    (claim,) = store.claim("w1", ttl=TTL)
    store.commit_batch(finishes=[(claim, Outcome(status="blocked", blocked_on="timer", wake_at=time.time() + 3600))],
                       ttl=TTL)
    with pytest.raises(StoreError, match=r"reserved for durable timers|answer approvals|sent by child|empty"):
        store.send_signal("w", name, {})
    assert store.list_signals("w") == [] and [a.action for a in store.list_audit("w")] == ["start"]
    assert store.get_workflow("w").status == "blocked"


def test_an_approval_is_answered_once_and_only_for_the_pending_request(store: Store) -> None:
    _blocked_on_approval(store, "a")
    store.start_workflow("asks", None, workflow_id="other")
    assert store.pending_approval("a") == {"request": "req-0", "action": "wire the money", "details": {"amount": 10}}
    assert store.pending_approval("other") is None
    assert [w.id for w in store.list_workflows(awaiting="approval")] == ["a"]
    assert [w.id for w in store.list_workflow_summaries(awaiting="approval")] == ["a"]
    assert store.count_workflows(awaiting="approval") == 1
    with pytest.raises(StoreError, match="the one choice is 'approval'"):
        store.count_workflows(awaiting="signal")
    with pytest.raises(StoreError, match="answer approvals"):
        store.send_signal("a", "approval:req-0", {"approved": True})
    with pytest.raises(StoreError, match="sent by child workflows"):
        store.send_signal("a", "child:x", {})
    with pytest.raises(OperatorRefusedError, match=r"request 'req-5' is not the pending one.*'req-0'"):
        store.answer_approval("a", approved=True, by="ann@host", request="req-5")
    assert store.answer_approval("a", approved=False, by="ann@host", note="no", request="req-0") == "req-0"
    assert store.get_workflow("a").status == "pending"
    assert [s.payload for s in store.list_signals("a")] == [
        {"approved": False, "by": "ann@host", "note": "no", "request": "req-0"}]
    assert [(x.action, x.reason, x.detail) for x in store.list_audit("a")][-1] == ("reject", "no", "req-0")
    with pytest.raises(OperatorRefusedError, match="has no pending approval request \\(it is pending\\)"):
        store.answer_approval("a", approved=True, by="ann@host")  # used once
    assert store.count_signals("a") == (1, 1)


def test_a_request_past_its_deadline_is_closed_and_the_refusal_says_when(store: Store) -> None:
    deadline = time.time() - 10
    _blocked_on_approval(store, "late", wake_at=deadline)
    shown = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(deadline))
    with pytest.raises(OperatorRefusedError, match=f"request 'req-0' of workflow 'late' timed out at {shown}"):
        store.answer_approval("late", approved=True, by="ann@host")
    # A worker recorded the timeout (slots deadline, timeout) and the workflow went on.
    (claim,) = store.claim("w1", ttl=TTL)
    assert store.commit_record(claim, 2, CommandRecord("timeout", "approval:req-0", True, time.time()), ttl=TTL)
    store.commit_batch(finishes=[(claim, Outcome(status="completed", result="timed out"))], ttl=TTL)
    with pytest.raises(OperatorRefusedError, match=f"it is completed\\); request 'req-0' timed out at {shown}"):
        store.answer_approval("late", approved=True, by="ann@host")
    with pytest.raises(OperatorRefusedError, match=f"request 'req-0' timed out at {shown}"):
        store.answer_approval("late", approved=True, by="ann@host", request="req-0")
    assert store.count_signals("late") == (0, 0)
    assert [x.action for x in store.list_audit("late")] == ["start"]


def test_the_argument_keys_are_copied_by_a_fork(store: Store) -> None:
    store.start_workflow("wf", None, workflow_id="f")
    (claim,) = store.claim("w1", ttl=TTL)
    assert store.commit_record(claim, 0, rec("ask", "answer", '["the prompt"]'), ttl=TTL)
    assert store.commit_record(claim, 1, rec("ask", "answer"), ttl=TTL)  # opted out: no key
    store.fork_workflow("f", 2, new_id="copy")
    assert [c.args for c in store.list_commands("copy")] == ['["the prompt"]', None]
    assert sql(store, "SELECT COUNT(*) FROM commands WHERE args IS NOT NULL")[0][0] == 2


def test_groups_back_to_back_keep_their_names_and_marks_without_one_read_as_consecutive_groups(
        store: Store) -> None:
    store.start_workflow("wf", None, workflow_id="two")
    (claim,) = store.claim("w1", ttl=TTL)
    for slot, group in ((1, 0), (0, 0), (2, 2), (3, 2)):  # two groups, tasks written as they complete
        assert store.commit_record(claim, slot, rec("t", slot), ttl=TTL, parallel_group=group)
    assert store.commit_record(claim, 4, rec("plain", 4), ttl=TTL)
    written, _ = store.commit_batch([PendingRecord(claim, 5, rec("t", 5), parallel_group=5)], ttl=TTL)
    assert written == [True]
    assert [(c.parallel, c.parallel_group) for c in store.list_commands("two")] == [
        (True, 0), (True, 0), (True, 2), (True, 2), (False, None), (True, 5)]
    # Tasks recorded before the store named groups carry the mark alone: each run of
    # consecutive ones reads as one group, named by its first slot.
    sql(store, "UPDATE commands SET parallel_group = NULL")
    assert [c.parallel_group for c in store.list_commands("two")] == [0, 0, 0, 0, None, 5]
    assert [c.parallel_group for c in store.list_commands("two", offset=1)] == [1, 1, 1, None, 5]


def test_a_slot_is_committed_after_the_server_forgot_every_prepared_statement(store: Store) -> None:
    # psycopg sends DEALLOCATE ALL after a rollback once it has prepared statements of its
    # own; the slot statement the PostgreSQL store prepared itself must survive that.
    store.start_workflow("wf", None, workflow_id="forgot")
    (claim,) = store.claim("w1", ttl=TTL)
    assert store.commit_record(claim, 0, rec("a", 0), ttl=TTL)
    sql(store, "DEALLOCATE ALL" if on_server(store) else "SELECT 1")
    assert store.commit_record(claim, 1, rec("b", 1), ttl=TTL)
    assert [c.name for c in store.list_commands("forgot")] == ["a", "b"]
