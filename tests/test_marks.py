"""In-flight start marks in their memory-mapped files (engine.marks) and how workers keep them.

The crash-level proof (SIGKILL mid-activity, `show` counting the attempts) is in
test_fault_inflight.py; here: the file format, torn records, and a live worker taking a
workflow over from a dead one's marks.
"""

from __future__ import annotations

import random
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from replaylog import Context, activity, current_activity, workflow
from replaylog.engine import marks
from replaylog.engine.app import Registry
from replaylog.engine.core import CommandRecord
from replaylog.engine.marks import _HEADER, _SEQ, RECORD, Mark, MarkBoard, _parse, board_files, marks_dir, read_marks
from replaylog.engine.store import PendingRecord, open_store
from replaylog.engine.worker import Worker

# Linux's pid_max is at most 4,194,304: no live process has this pid.
DEAD_PID = 4194999


def _dead_owner() -> str:
    return f"{socket.gethostname()}:{DEAD_PID}:deadbeef"


def test_a_mark_reads_back_as_written_and_the_files_are_private(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    board = MarkBoard(db, "h:123:abc123", 3)
    board.write(1, "wf-1", 7, 4, "charge_card", 2, 1234.5)
    board.write(2, "wf-2", 1, 0, "fetch", 1, 99.0)
    board.write(1, "wf-1", 7, 5, "refund", 1, 1240.0)  # the thread's next activity replaces its mark
    marks = sorted(read_marks(db), key=lambda m: m.workflow_id)
    assert [(m.workflow_id, m.epoch, m.slot, m.name, m.attempts, m.started_at, m.owner) for m in marks] == [
        ("wf-1", 7, 5, "refund", 1, 1240.0, "h:123:abc123"), ("wf-2", 1, 0, "fetch", 1, 99.0, "h:123:abc123")]
    assert [m.slot for m in read_marks(db, "wf-2")] == [0]
    assert stat.S_IMODE(marks_dir(db).stat().st_mode) == 0o700
    assert stat.S_IMODE(board.path.stat().st_mode) == 0o600
    assert board_files(db) == [(board.path, 123)]
    board.close(remove=True)
    assert read_marks(db) == [] and board_files(db) == []
    assert not marks_dir(db).exists()  # nothing left beside the database


def test_a_record_reused_for_another_workflow_or_name_reads_back_whole(tmp_path: Path) -> None:
    # A mark rewrites only the fixed fields while the id and name stay the same; a new
    # id or name must replace the bytes of the old one, even a longer old one.
    db = tmp_path / "m.db"
    board = MarkBoard(db, "h:123:abc123", 1)
    seen = []
    for wid, slot, name in [("wf-a-long-workflow-id", 0, "a_long_activity_name"), ("wf-a-long-workflow-id", 1,
                            "a_long_activity_name"), ("wf-b", 0, "a_long_activity_name"), ("wf-b", 1, "ok"),
                            ("wf-b", 2, "ok"), ("wf-a-long-workflow-id", 2, "ok")]:
        board.write(0, wid, 3, slot, name, 1, 10.0 + slot)
        seen.append([(m.workflow_id, m.slot, m.name, m.started_at) for m in read_marks(db)])
    assert seen == [[("wf-a-long-workflow-id", 0, "a_long_activity_name", 10.0)],
                    [("wf-a-long-workflow-id", 1, "a_long_activity_name", 11.0)],
                    [("wf-b", 0, "a_long_activity_name", 10.0)], [("wf-b", 1, "ok", 11.0)],
                    [("wf-b", 2, "ok", 12.0)], [("wf-a-long-workflow-id", 2, "ok", 12.0)]]
    board.close(remove=True)


def test_a_record_being_written_or_rewritten_while_read_is_skipped_never_torn(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    board = MarkBoard(db, "h:123:abc123", 2)
    board.write(0, "wf-a", 1, 3, "a", 1, 1.0)
    board.write(1, "wf-b", 1, 3, "b", 1, 1.0)
    data = bytearray(board.path.read_bytes())
    board.close(remove=False)
    # Record 0 caught mid-write (odd sequence number), as a process killed there leaves it.
    off = _HEADER.size
    _SEQ.pack_into(data, off, _SEQ.unpack_from(data, off)[0] + 1)
    parsed = _parse(bytes(data), bytes(data))
    assert parsed is not None and [m.workflow_id for m in parsed[1]] == ["wf-b"]
    # Record 1 rewritten between the two reads: its numbers differ, so it is skipped too.
    again = bytearray(data)
    _SEQ.pack_into(again, off + RECORD, _SEQ.unpack_from(data, off + RECORD)[0] + 2)
    parsed = _parse(bytes(data), bytes(again))
    assert parsed is not None and parsed[1] == []
    # Not a mark file at all.
    assert _parse(b"garbage" * 100, b"garbage" * 100) is None


@pytest.mark.skipif(marks.COMPILED is None, reason="the compiled mark writer is not built or is turned off")
def test_the_compiled_writer_writes_the_very_bytes_of_the_python_one(tmp_path: Path) -> None:
    # Two boards, the same writers and marks in the same order: one written by _marks.c, the
    # other by marks.py's closure (what runs where the C file was not built). Names change,
    # repeat, run long (clipped), carry non-ASCII; records are reused by new writers.
    rng = random.Random(31)
    compiled = MarkBoard(tmp_path / "c.db", "h:1:c0ffee", 4)
    python = MarkBoard(tmp_path / "p.db", "h:1:c0ffee", 4)
    python._board = None  # its writers are the Python closure
    names = ["charge", "refund", "é" * 90, "x" * 300, "naïve_ünïcode", ""]
    writers: dict[int, tuple[Any, Any]] = {}
    for step in range(600):
        index = rng.randrange(4)
        if index not in writers or rng.random() < 0.05:
            wid, epoch, lane = f"wf-{rng.randrange(10 ** 6)}" * rng.randrange(1, 20), rng.randrange(1, 2 ** 40), \
                rng.randrange(0, 5)
            writers[index] = (compiled.writer(index, wid, epoch, lane), python.writer(index, wid, epoch, lane))
        args = (rng.randrange(2 ** 31), names[rng.randrange(len(names))], rng.randrange(1, 9), rng.random() * 2e9)
        for write in writers[index]:
            write(*args)
        if step % 50 == 0:
            assert compiled.path.read_bytes()[_HEADER.size:] == python.path.read_bytes()[_HEADER.size:]
    assert compiled.path.read_bytes() == python.path.read_bytes()
    assert [compiled.read(i) for i in range(4)] == [python.read(i) for i in range(4)]
    mark = writers[0][0]
    compiled.close(remove=True)
    python.close(remove=True)
    with pytest.raises(ValueError, match="the mark file is closed"):
        mark(1, "charge", 1, 1.0)  # a writer kept past its board's close writes nothing (no unmapped memory)


def test_the_longest_workflow_id_is_kept_whole_and_a_long_name_is_clipped_on_a_character_boundary(
        tmp_path: Path) -> None:
    board = MarkBoard(tmp_path / "m.db", "h:1:ab", 1)
    longest = "é" * 200  # the store's limit is 200 characters; these take 2 bytes each
    board.write(0, longest, 1, 0, "é" * 400, 1, 0.0)
    (mark,) = board.marks()
    assert mark.workflow_id == longest
    assert mark.name == "é" * len(mark.name) and 50 < len(mark.name) < 400
    board.write(0, "𝒲" * 200, 1, 0, "n", 1, 0.0)  # 4 bytes each: 800, still whole
    assert board.marks()[0].workflow_id == "𝒲" * 200
    board.close(remove=True)


# ---------------------------------------------------------------- a worker taking over

DB_FOR_ACTIVITY: dict[str, Path] = {}


@activity
def report_attempts() -> int:
    """Return how many starts the store shows for this very slot while it runs."""
    info = current_activity()
    with open_store(DB_FOR_ACTIVITY["db"], readonly=True) as store:
        row = store.inflight(info.workflow_id)
    assert row is not None and row.slot == info.slot
    return row.attempts


@activity
def first() -> str:
    """A step before the one that was in flight."""
    return "done"


@workflow
def two_steps(ctx: Context) -> int:
    """A recorded step, then the step that reports its attempt count."""
    ctx.call_activity(first)
    return int(ctx.call_activity(report_attempts))


def test_a_worker_taking_over_from_a_dead_one_counts_attempts_on_and_keeps_its_marks(tmp_path: Path) -> None:
    db = tmp_path / "takeover.db"
    DB_FOR_ACTIVITY["db"] = db
    with open_store(db) as store:
        wid = store.start_workflow("two_steps", has_input=False)
        (claim,) = store.claim(_dead_owner(), ttl=600)  # a long lease: only the owner's death frees it
        store.commit_batch([PendingRecord(claim, 0, CommandRecord("activity", "first", True, "done"))], ttl=600)
    dead = MarkBoard(db, claim.owner, 4)
    dead.write(3, wid, claim.epoch, 1, "report_attempts", 2, time.time())  # started twice, then SIGKILL
    dead.close(remove=False)
    with open_store(db, readonly=True) as store:
        shown = store.inflight(wid)
    assert shown is not None and (shown.slot, shown.name, shown.attempts) == (1, "report_attempts", 2)

    worker = Worker(db, Registry.from_module(sys.modules[__name__]))
    worker.run(until_idle=True)

    with open_store(db) as store:
        row = store.get_workflow(wid)
        assert row.status == "completed", row
        assert row.result == 3  # this run's start was the third
        assert store.inflight(wid) is None  # the outcome is recorded now
    assert not dead.path.exists()  # folded into the database, then deleted
    assert not marks_dir(db).exists()  # the live worker's own file went when it stopped


def test_a_worker_deletes_only_the_files_of_dead_workers_on_its_own_host(tmp_path: Path) -> None:
    db = tmp_path / "janitor.db"
    open_store(db).close()
    here = MarkBoard(db, _dead_owner(), 2)
    here.close(remove=False)
    # Same dead-looking pid from another host (or a container with its own pids): its
    # worker may be alive, and a pid says nothing about it here.
    there = MarkBoard(db, f"elsewhere:{DEAD_PID}:cafe01", 2)
    there.close(remove=False)
    Worker(db, Registry.from_module(sys.modules[__name__])).run(until_idle=True)
    assert not here.path.exists()
    assert there.path.exists()


def test_marks_left_by_a_worker_of_an_older_database_at_the_same_path_count_for_nothing(tmp_path: Path) -> None:
    db = tmp_path / "reused.db"
    DB_FOR_ACTIVITY["db"] = db
    # A killed worker of a database since deleted left its file; a new database at the same
    # path has a workflow of the same id, never leased by that worker.
    stale = MarkBoard(db, _dead_owner(), 2)
    stale.write(0, "same-id", 1, 1, "report_attempts", 5, time.time())
    stale.close(remove=False)
    with open_store(db) as store:
        wid = store.start_workflow("two_steps", has_input=False, workflow_id="same-id")
        assert store.inflight(wid) is None
    Worker(db, Registry.from_module(sys.modules[__name__])).run(until_idle=True)
    with open_store(db) as store:
        row = store.get_workflow(wid)
        assert (row.status, row.result) == ("completed", 1)  # the first start, not the sixth
    assert not stale.path.exists()


# ---------------------------------------------------------------- a run ending with an activity in flight


@activity
def returns_a_set() -> object:
    """Runs, then returns a value JSON cannot hold: the run fails with no outcome for the slot."""
    return {1, 2}


@workflow
def ends_in_flight(ctx: Context) -> None:
    """A recorded step, then a step that ran and has no outcome."""
    ctx.call_activity(first)
    ctx.call_activity(returns_a_set, max_retries=1)


def test_a_run_that_ends_with_its_activity_in_flight_keeps_the_mark_in_the_database(tmp_path: Path) -> None:
    # The worker's own record in its mark file is overwritten by the thread's next
    # activity and the file is deleted when the worker stops: the mark must be copied
    # into the database when the run ends, with the attempt it reached.
    db = tmp_path / "inflight.db"
    with open_store(db) as store:
        wid = store.start_workflow("ends_in_flight", has_input=False)
    before = time.time()
    worker = Worker(db, Registry.from_module(sys.modules[__name__]), ttl=600)
    worker.run(until_idle=True)
    with open_store(db) as store:
        row, shown = store.get_workflow(wid), store.inflight(wid)
    assert row.status == "failed" and "ValueNotJSONError" in (row.error or ""), row
    assert shown is not None, "the start of the activity that ran was lost"
    assert (shown.slot, shown.name, shown.attempts) == (1, "returns_a_set", 1)
    assert before <= shown.started_at <= time.time()
    assert board_files(db) == []  # the worker's file is gone; the mark lives on in the database


def test_a_mark_file_of_the_previous_format_is_still_read(tmp_path: Path) -> None:
    # Format 1 (little-endian, packed) was written by workers before 2 December 2026: the
    # marks of such a worker that died must still be kept by a worker of this version.
    import struct

    from replaylog.engine.marks import MAGIC, read_board

    path = tmp_path / "old.marks"
    body = struct.Struct("<QqIdHH800s184s")
    data = bytearray(_HEADER.size + 2 * RECORD)
    data[:_HEADER.size] = _HEADER.pack(MAGIC, 1, 2, b"h:77:0ld")
    off = _HEADER.size + RECORD  # the second thread's record; the first was never written
    struct.pack_into("<Q", data, off, 4)
    body.pack_into(data, off + 8, 9, 12, 3, 1234.5, 4, 6, b"wf-9", b"refund")
    path.write_bytes(bytes(data))
    assert read_board(path) == [Mark("wf-9", 9, 12, "refund", 3, 1234.5, "h:77:0ld")]
    data[8:12] = struct.pack("<I", 99)  # a format this version does not know: not a mark file to it
    path.write_bytes(bytes(data))
    assert read_board(path) is None
