"""Finding workflows and acting on many: the filters of `list`, `Client.list` and the bulk actions, full-text
search of errors and search attributes, on both backends."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest

from conftest import cli_env, run_cli, sql
from replaylog import Client
from replaylog.engine.core import CommandRecord
from replaylog.engine.errors import StoreError
from replaylog.engine.filters import parse_query, workflow_filter
from replaylog.engine.store import Store, open_store
from replaylog.engine.store.rows import PendingRecord

Cli = Callable[..., CompletedProcess[str]]
HOUR = 3600.0


def _url(db: Path | str) -> str:
    return db if isinstance(db, str) else f"sqlite:///{db}"


def _made(store: Store, name: str, status: str, *, error: str | None = None, kind: str | None = None,
          parent: str | None = None, forked_from: str | None = None, age: float = 0.0) -> str:
    wid = store.start_workflow(name, None)
    at = time.time() - age
    sql(store, "UPDATE workflows SET status = ?, error = ?, error_kind = ?, parent = ?, forked_from = ?,"
               " created_at = ?, updated_at = ? WHERE id = ?", (status, error, kind, parent, forked_from, at, at, wid))
    return wid


def _found(store: Store, **fields: Any) -> set[str]:
    attributes = fields.pop("attributes", ())
    return {r.id for r in store.list_workflows(where=workflow_filter(fields, attributes), limit=-1)}


def test_each_filter_field_takes_only_its_workflows(store: Store) -> None:
    charge = _made(store, "charge", "failed", error="RuntimeError: card declined by the bank", kind="activity",
                   age=5 * HOUR)
    ship = _made(store, "ship", "failed", error="ValueError: a bug in the address", kind="code", age=1 * HOUR)
    done = _made(store, "charge", "completed", parent=charge)
    fork = _made(store, "charge", "pending", forked_from=charge)
    assert _found(store, status="failed") == {charge, ship}
    assert _found(store, status="failed,completed") == {charge, ship, done}
    assert _found(store, workflow="charge") == {charge, done, fork}
    assert _found(store, workflow="charge", status="failed") == {charge}
    assert _found(store, parent=charge) == {done}
    assert _found(store, forked_from=charge) == {fork}
    assert _found(store, created_before="3h") == {charge}
    assert _found(store, created_after="3h") == {ship, done, fork}
    assert _found(store, updated_after="2h", updated_before="30m") == {ship}
    assert _found(store, error_kind="code") == {ship}
    sql(store, "UPDATE workflows SET queue = 'payments' WHERE id IN (?, ?)", (charge, fork))
    assert _found(store, queue="payments") == {charge, fork}
    assert _found(store, queue="payments,other", status="pending") == {fork}
    assert store.count_workflows(where=workflow_filter({"status": "failed", "error_kind": "activity"})) == 1


def test_error_text_is_a_full_text_search_that_follows_the_error(store: Store) -> None:
    declined = _made(store, "charge", "failed", error="RuntimeError: card declined by the bank")
    other = _made(store, "charge", "failed", error="RuntimeError: card expired")
    _made(store, "charge", "completed")
    assert _found(store, error_text="declined") == {declined}
    assert _found(store, error_text="CARD runtimeerror") == {declined, other}  # every word, any case, any order
    assert _found(store, error_text="bank declined") == {declined}
    assert _found(store, error_text='"declined" OR -x') == set()  # words, never the engine's query syntax
    # The index follows the row: an error cleared (a retry), changed, or deleted with its workflow.
    store.retry_workflow(declined)
    assert _found(store, error_text="declined") == set()
    sql(store, "UPDATE workflows SET error = ? WHERE id = ?", ("RuntimeError: declined again", other))
    assert _found(store, error_text="declined") == {other} and _found(store, error_text="expired") == set()


def test_an_unknown_filter_field_or_bad_value_is_one_clear_line(store_url: str) -> None:
    with pytest.raises(StoreError, match=r"^unknown filter field 'colour': filter on status, workflow"):
        workflow_filter({"colour": "red"})
    with pytest.raises(StoreError, match=r"^status finished is not one of pending"):
        workflow_filter({"status": "finished"})
    with pytest.raises(StoreError, match=r"^--created-after 'soon' is neither an age"):
        workflow_filter({"created_after": "soon"})
    with Client(store_url) as client, pytest.raises(StoreError, match="unknown filter field 'colour'"):
        client.list(colour="red")
    where, rest = parse_query('status:failed error_text:"card declined" customer=c-42 wf-1')
    assert (where.statuses, where.error_text, where.attributes, rest) == (
        ("failed",), "card declined", (("customer", "c-42"),), "wf-1")


# ---------------------------------------------------------------- the command line, with real workers


@pytest.fixture
def ops(db: Path | str, tmp_path: Path) -> Cli:
    env = cli_env(REPLAYLOG_APP="ops_app", REPLAYLOG_TEST_LEDGER=str(tmp_path / "ledger.txt"),
                  REPLAYLOG_TEST_BUG=str(tmp_path / "bug"))
    return lambda *args, **kw: run_cli(db, *args, env=env, **kw)


def _ok(proc: CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _dump(db: Path | str) -> list[object]:
    with open_store(_url(db), readonly=True) as s:
        return [sorted(map(repr, s._conn.execute(f"SELECT * FROM {t}").fetchall()))  # type: ignore[attr-defined]
                for t in ("workflows", "commands", "signals", "audit", "search_attributes")]


def test_search_attributes_are_recorded_as_slots_indexed_and_shown_as_list_columns(ops: Cli, db: Path | str) -> None:
    first = _ok(ops("start", "tagged", '"c-42"')).strip()
    _ok(ops("start", "tagged", '"c-7"'))
    _ok(ops("worker", "--until-idle", "--quiet"))
    rows = json.loads(_ok(ops("list", "--json", "--attr", "customer=c-42")))
    assert [r["id"] for r in rows] == [first]
    # The latest value of each key; a key set to None is gone.
    assert rows[0]["search_attributes"] == {"customer": "c-42", "tier": "gold"}
    assert json.loads(_ok(ops("list", "--json", "--attr", "tier=gold", "--attr", "customer=c-7")))[0]["id"] != first
    assert json.loads(_ok(ops("list", "--json", "--attr", "vip=true"))) == []
    table = _ok(ops("list", "--attr", "customer=c-42"))
    assert "customer" in table.splitlines()[1] and "tier" in table.splitlines()[1] and "gold" in table
    shown = json.loads(_ok(ops("show", first, "--json")))
    assert [c["kind"] for c in shown["commands"]] == ["attributes", "activity", "attributes"]
    # A fork copies the slots, and with them the attributes of the slots it copied.
    fork = _ok(ops("fork", first, "--from-slot", "1")).strip()
    with Client(db) as client:
        assert {w.id for w in client.list(attributes={"customer": "c-42", "tier": 3})} == {fork}
        assert client.list(attributes={"vip": True})[0].search_attributes == {"customer": "c-42", "tier": "3",
                                                                               "vip": "true"}


def test_every_commit_path_of_an_attributes_slot_indexes_it(store: Store) -> None:
    lone, batched, grouped, failed = (store.start_workflow("tagged", None) for _ in range(4))
    claims = {c.id: c for c in store.claim("test-worker", ttl=600, limit=4)}
    assert set(claims) == {lone, batched, grouped, failed}
    # A lone workflow's slot (commit_record), and the same key set again and one removed.
    assert store.commit_record(claims[lone], 0, CommandRecord("attributes", "a,b", True, {"a": "x", "b": 1}), ttl=600)
    assert store.commit_record(claims[lone], 1, CommandRecord("attributes", "a,b", True, {"a": 2.5, "b": None}),
                               ttl=600)
    # Slots of several workflows in one group commit, beside an activity's.
    written, _ = store.commit_batch([
        PendingRecord(claims[batched], 0, CommandRecord("activity", "step", True, 1)),
        PendingRecord(claims[batched], 1, CommandRecord("attributes", "c", True, {"c": False})),
        PendingRecord(claims[grouped], 0, CommandRecord("attributes", "d", True, {"d": "y"}), parallel_group=0),
    ], ttl=600)
    assert written == [True, True, True]
    # A failed attributes slot sets nothing.
    assert store.commit_record(claims[failed], 0, CommandRecord("attributes", "e", False, None, error="boom"),
                               ttl=600)
    assert store.search_attributes([lone, batched, grouped, failed]) == {
        lone: {"a": "2.5"}, batched: {"c": "false"}, grouped: {"d": "y"}}
    assert _found(store, attributes={"a": 2.5}) == {lone}
    assert _found(store, attributes={"c": False, "d": "y"}) == set()


def test_an_imported_workflow_is_found_by_the_search_attributes_of_its_slots(ops: Cli, db: Path | str,
                                                                              tmp_path: Path) -> None:
    first = _ok(ops("start", "tagged", '"c-42"')).strip()
    _ok(ops("worker", "--until-idle", "--quiet"))
    exported = tmp_path / "tagged.json"
    _ok(ops("export", first, "-o", str(exported)))
    copy = _ok(ops("import", str(exported), "--id", "tagged-copy")).strip()
    # The import writes the slots in bulk; the index is made from them, the latest value of each key.
    rows = json.loads(_ok(ops("list", "--json", "--attr", "customer=c-42", "--attr", "tier=gold")))
    assert {r["id"] for r in rows} == {first, copy}
    assert {r["id"]: r["search_attributes"] for r in rows}[copy] == {"customer": "c-42", "tier": "gold"}
    assert json.loads(_ok(ops("list", "--json", "--attr", "vip=true"))) == []
    # A fork of the import from before the second upsert takes the first one's attributes.
    fork = _ok(ops("fork", copy, "--from-slot", "2")).strip()
    with Client(db) as client:
        assert [w.id for w in client.list(attributes={"tier": 3})] == [fork]
        assert client.list(attributes={"tier": 3})[0].search_attributes == {"customer": "c-42", "tier": "3",
                                                                             "vip": "true"}


def test_bulk_retry_after_a_fix_completes_every_failed_workflow_and_audits_each(ops: Cli, db: Path | str,
                                                                                tmp_path: Path) -> None:
    _bulk_retry_after_a_fix(ops, db, tmp_path, 50)


@pytest.mark.soak
def test_bulk_retry_of_500_failed_workflows_after_a_fix_completes_them_all(ops: Cli, db: Path | str,
                                                                          tmp_path: Path) -> None:
    _bulk_retry_after_a_fix(ops, db, tmp_path, 500)


def _bulk_retry_after_a_fix(ops: Cli, db: Path | str, tmp_path: Path, many: int) -> None:
    """`many` workflows failed by a bug, retried in bulk once it is fixed: all complete, each audited."""
    (tmp_path / "bug").touch()
    with Client(db) as client:
        failed = [client.start("buggy").id for _ in range(many)]
        finished = client.start("steps", 1).id
    _ok(ops("worker", "--until-idle", "--quiet", "--concurrency", "16"))
    before = _dump(db)
    dry = ops("retry", "--status", "failed", "--workflow", "buggy", "--dry-run")
    assert dry.returncode == 0 and dry.stderr.startswith(f"retry: {many} workflow(s) match: {failed[0]}, ")
    assert "dry run: nothing was retried" in dry.stderr
    asks = ops("retry", "--status", "failed", "--workflow", "buggy")  # no terminal, no --yes: nothing done
    assert asks.returncode == 1 and asks.stderr.splitlines()[-1] == (
        f"replaylog: error: retry of {many} workflow(s) needs confirmation: add --yes (no terminal to ask on)")
    assert _dump(db) == before
    (tmp_path / "bug").unlink()
    done = ops("retry", "--workflow", "buggy,steps", "--yes", "--reason", "deploy 41 fixed it")
    # The completed one is refused (one line of its own) and the rest go on; the summary says so.
    assert done.returncode == 1, done.stderr
    assert f"{finished} refused: workflow {finished!r} is completed" in done.stderr
    assert done.stderr.splitlines()[-1] == f"retried {many} of {many + 1} workflow(s); 1 refused (above)"
    assert sorted(done.stdout.split("\n")[:-1]) == sorted(f"{w} retried" for w in failed)
    _ok(ops("worker", "--until-idle", "--quiet", "--concurrency", "16"))
    with Client(db) as client:
        assert {w.status for w in client.list(workflow="buggy", limit=None)} == {"completed"}
        audit = json.loads(_ok(ops("show", failed[7], "--json")))["audit"]
    assert [(a["action"], a["reason"]) for a in audit] == [("start", None), ("retry", "deploy 41 fixed it")]


def test_bulk_cancel_and_terminate_take_the_same_filters_and_refuse_an_id_with_them(ops: Cli, db: Path | str) -> None:
    with Client(db) as client:
        waiting = [client.start("saga", 0).id for _ in range(3)]
    _ok(ops("worker", "--until-idle", "--quiet"))
    refused = ops("cancel", waiting[0], "--status", "blocked")
    assert refused.returncode == 1 and refused.stderr == (
        "replaylog: error: give a WORKFLOW_ID or filters (--status, --workflow, …), not both\n")
    unknown = ops("terminate", "--filter", "colour:red", "--yes")
    assert unknown.returncode == 1 and unknown.stderr.startswith("replaylog: error: unknown filter field 'colour'")
    assert unknown.stderr.count("\n") == 1
    cancelled = ops("cancel", "--filter", "status:blocked workflow:saga", "--yes", "--reason", "closing")
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stderr.splitlines()[-1] == "asked to cancel 3 of 3 workflow(s)"
    terminated = ops("terminate", "--workflow", "saga", "--yes")
    assert terminated.stderr.splitlines()[-1] == "terminated 3 of 3 workflow(s)"
    with Client(db) as client:
        assert {w.status for w in client.list(workflow="saga")} == {"terminated"}


@pytest.mark.parametrize("attributes, error", [
    ({}, "give a non-empty dict"),
    ({"": "x"}, "key '' must be a string of 1-200 characters"),
    ({"customer": ["c-42"]}, "the value of 'customer' must be a str, int, float, bool or None, got list"),
    ({"note": "x" * 201}, "the value of 'note' is over 200 characters"),
])
def test_bad_search_attributes_fail_the_call_and_record_nothing(attributes: dict[str, Any], error: str) -> None:
    from replaylog.engine.core import Context, WorkflowState

    state = WorkflowState(has_input=False)
    ctx = Context(state, clock=time.time)
    with pytest.raises((TypeError, ValueError), match=error):
        ctx.upsert_search_attributes(attributes)
    assert ctx.new_commands == []
