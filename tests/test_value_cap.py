"""The payload cap: measured on UTF-8 bytes as given, and applied to every value stored.

Inputs and signal payloads are refused when they are sent; an activity's result over the
cap is recorded as that activity's failure, and a workflow's result over it fails the
workflow. Real SQLite files, the real CLI in subprocesses, the real worker in process.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import cap_app
import pytest

from conftest import wait_for
from replaylog.engine.app import Registry
from replaylog.engine.errors import PayloadTooLargeError
from replaylog.engine.store import Store, open_store
from replaylog.engine.worker import Worker

Cli = Callable[..., CompletedProcess[str]]
MIB = 1024 * 1024
CAP = 1000
REGISTRY = Registry("cap_app", workflows={"catches": cap_app.catches, "returns": cap_app.returns,
                                          "echoes": cap_app.echoes, "catches_error": cap_app.catches_error,
                                          "fails": cap_app.fails},
                    activities={"sized": cap_app.sized, "echo": cap_app.echo, "raises": cap_app.raises})


def euro_document(size: int) -> str:
    """A JSON string document of exactly `size` UTF-8 bytes: "€" takes three (and six as a \\u escape)."""
    count, rest = divmod(size - 2, 3)
    return json.dumps("€" * count + "x" * rest, ensure_ascii=False)


def stored_input_bytes(db: Path) -> list[int]:
    """The byte length of each stored input, read straight from the file."""
    with sqlite3.connect(db) as conn:
        return [n for (n,) in conn.execute("SELECT length(CAST(input AS BLOB)) FROM workflows")]


def drain(db: Path, cap: int = CAP) -> None:
    Worker(db, REGISTRY, max_payload=cap).run(until_idle=True)


def start(db: Path, workflow: str, value: Any) -> str:
    with open_store(db) as store:
        return store.start_workflow(workflow, value)


# ---------------------------------------------------------------- measured on the bytes as given


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_utf8_input_under_the_cap_is_stored_as_utf8_and_one_over_is_refused_naming_its_size(
        cli: Cli, db_path: Path, tmp_path: Path, source: str) -> None:
    under, over = euro_document(750_002), euro_document(MIB + 1)
    assert len(under.encode()) == 750_002 and len(over.encode()) == MIB + 1

    def send(doc: str) -> CompletedProcess[str]:
        if source == "stdin":
            return cli("start", "shipping", "-", input=doc)
        path = tmp_path / "input.json"
        path.write_text(doc, encoding="utf-8")
        return cli("start", "shipping", f"@{path}")

    accepted = send(under)
    assert accepted.returncode == 0, accepted.stderr
    wid = accepted.stdout.strip().splitlines()[-1]
    assert stored_input_bytes(db_path) == [750_002]  # stored as given: UTF-8, no \u escapes
    with open_store(db_path) as store:
        assert store.get_workflow(wid).input == json.loads(under)

    refused = send(over)
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in refused.stderr
    assert f"is {MIB + 1} bytes, over the cap of {MIB} bytes" in lines[0], lines[0]
    assert stored_input_bytes(db_path) == [750_002]  # nothing written


def test_signal_payload_is_measured_in_utf8_bytes(store: Store, store_url: str) -> None:
    wid = store.start_workflow("two_approvals", has_input=False)
    with open_store(store_url, max_payload=4096) as capped:
        capped.send_signal(wid, "approval", json.loads(euro_document(4096)))
        with pytest.raises(PayloadTooLargeError, match="is 4097 bytes, over the cap of 4096 bytes"):
            capped.send_signal(wid, "approval", json.loads(euro_document(4097)))
    assert [s.payload for s in store.list_signals(wid)] == [json.loads(euro_document(4096))]


@pytest.mark.parametrize("value", ["Zoë, 東京, 🎉", "lone \ud800 surrogate", {"k\udfff": ["é", "\udc80"]}])
def test_text_round_trips_exactly_through_every_stored_place(db_path: Path, value: Any) -> None:
    # A lone surrogate (json.loads accepts "\ud800") cannot be UTF-8: such a value is
    # stored \u-escaped, and still reads back exactly.
    wid = start(db_path, "echoes", value)
    drain(db_path)
    with open_store(db_path) as store:
        row = store.get_workflow(wid)
        assert (row.status, row.input, row.result) == ("completed", value, value)
        assert store.list_commands(wid)[0].value == value


# ---------------------------------------------------------------- every recorded value is capped


def test_activity_result_over_the_cap_is_recorded_as_its_failure_once_and_replays_the_same(db_path: Path) -> None:
    cap_app.RUNS.clear()
    wid = start(db_path, "catches", CAP + 1)  # the JSON text is CAP + 3 bytes
    drain(db_path)
    with open_store(db_path) as store:
        assert store.get_workflow(wid).status == "blocked"
        [slot] = store.list_commands(wid)
        assert (slot.name, slot.ok, slot.value, slot.attempts) == ("sized", False, None, 1)
        assert f"is {CAP + 3} bytes, over the cap of {CAP} bytes" in (slot.error or ""), slot.error
        assert slot.error and slot.error.startswith("PayloadTooLargeError:")
        store.send_signal(wid, "go")
    drain(db_path)  # the second run replays slot 0 from history
    with open_store(db_path) as store:
        row = store.get_workflow(wid)
        assert row.status == "completed"
        # The workflow code caught an ActivityError, live and on replay alike.
        assert row.result == {"got": {"error": slot.error, "attempts": 1, "slot": 0}}
    assert cap_app.RUNS == {"sized": 1}  # not retried: a retry would not make it smaller


def test_activity_result_at_the_cap_is_recorded(db_path: Path) -> None:
    wid = start(db_path, "catches", CAP - 2)
    drain(db_path)
    with open_store(db_path) as store:
        [slot] = store.list_commands(wid)
        assert (slot.ok, slot.value) == (True, "x" * (CAP - 2))


def test_workflow_result_over_the_cap_fails_the_workflow_naming_size_and_cap(db_path: Path) -> None:
    over, at = start(db_path, "returns", CAP - 1), start(db_path, "returns", CAP - 2)
    drain(db_path)
    with open_store(db_path) as store:
        failed = store.get_workflow(over)
        assert (failed.status, failed.result) == ("failed", None)
        assert failed.error == (f"PayloadTooLargeError: the workflow's result is {CAP + 1} bytes,"
                                f" over the cap of {CAP} bytes")
        done = store.get_workflow(at)
        assert (done.status, done.result) == ("completed", "y" * (CAP - 2))


def test_max_payload_reaches_the_worker_of_the_command_line(cli: Cli) -> None:
    wid = cli("start", "returns", str(11 * 1024), "--app", "cap_app").stdout.strip()
    assert cli("--max-payload", "10240", "worker", "--until-idle", "--quiet", "--app", "cap_app").returncode == 0
    shown = json.loads(cli("show", wid, "--json").stdout)
    assert shown["status"] == "failed"
    assert f"is {11 * 1024 + 2} bytes, over the cap of 10240 bytes" in shown["error"]


def drain_in_thread(db: Path, until: Callable[[], bool]) -> bool:
    """Run a worker until `until()` holds (polled, generous timeout); False if it never did."""
    worker = Worker(db, REGISTRY, max_payload=CAP)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        return wait_for(until, timeout=60)
    finally:
        worker.stop()
        thread.join(60)


def status_of(db: Path, wid: str) -> str:
    with open_store(db) as store:
        return store.get_workflow(wid).status


def test_activity_error_text_over_the_cap_is_cut_to_it_and_the_workflow_sees_what_was_recorded(
        db_path: Path) -> None:
    wid = start(db_path, "catches_error", "e" * 5000)
    assert drain_in_thread(db_path, lambda: status_of(db_path, wid) in ("completed", "failed"))
    with open_store(db_path) as store:
        [slot] = store.list_commands(wid)
        row = store.get_workflow(wid)
    assert slot.error is not None and len(slot.error.encode()) <= CAP
    assert slot.error.startswith("RuntimeError: eee")
    assert slot.error.endswith("(cut: slot 0: the error text of activity 'raises' is 5014 bytes,"
                               f" over the cap of {CAP} bytes)")
    assert (row.status, row.result) == ("completed", {"error": cap_app.digest(slot.error), "attempts": 1})


def test_error_text_with_a_lone_surrogate_is_recorded_escaped(db_path: Path) -> None:
    # A file name that is not UTF-8 reaches Python as lone surrogates ("surrogateescape"),
    # and an exception about it carries them: storing that text failed every commit.
    wid = start(db_path, "catches_error", "no such file: b\udcff.txt")
    assert drain_in_thread(db_path, lambda: status_of(db_path, wid) in ("completed", "failed"))
    with open_store(db_path) as store:
        [slot] = store.list_commands(wid)
        row = store.get_workflow(wid)
    assert slot.error == "RuntimeError: no such file: b\\udcff.txt"
    assert (row.status, row.result) == ("completed", {"error": cap_app.digest(slot.error), "attempts": 1})


def test_workflow_error_text_over_the_cap_is_cut_to_it(db_path: Path) -> None:
    wid = start(db_path, "fails", "f" * 5000)
    drain(db_path)
    with open_store(db_path) as store:
        row = store.get_workflow(wid)
    assert row.status == "failed" and row.error is not None and len(row.error.encode()) <= CAP
    assert row.error.startswith("workflow code raised ValueError: fff")
    assert row.error.endswith(f"(cut: the workflow's error text is {33 + 5000} bytes, over the cap of {CAP} bytes)")
