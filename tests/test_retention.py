"""Retention: `replaylog prune`, `Client.prune` and `worker --retention` delete finished workflows with all
they own, in batches, on both backends, and never an unfinished workflow or a parent whose children run."""

from __future__ import annotations

import sqlite3
import struct
import time
from pathlib import Path

import pytest

from conftest import run_cli, sql, start_worker, wait_for
from replaylog import Client
from replaylog.engine.errors import StoreError
from replaylog.engine.filters import parse_duration
from replaylog.engine.retention import parse_cutoff, prune, store_batches
from replaylog.engine.store import Store, open_store, slot_key

DAY = 86400.0
OWNED = ("signals", "inflight", "audit")


def _url(db: Path | str) -> str:
    return db if isinstance(db, str) else f"sqlite:///{db}"


def _workflow(store: Store, status: str, age: float, *, parent: str | None = None, slots: int = 3) -> str:
    """A workflow in `status`, last updated `age` seconds ago, with slots, a signal, an audit row, a start mark."""
    wid = store.start_workflow("job", {"n": 1})
    store.send_signal(wid, "go", 1)
    (seq,) = sql(store, "SELECT seq FROM workflows WHERE id = ?", (wid,))[0]
    for i in range(slots):
        sql(store, "INSERT INTO commands (slot_key, kind, name, ok, value, attempts, recorded_at)"
                   " VALUES (?, 'activity', 'step', ?, '1', 1, 0)", (slot_key(int(seq), i), True))
    sql(store, "INSERT INTO inflight (workflow_id, slot, name, attempts, started_at) VALUES (?, ?, 'step', 1, 0)",
        (wid, slots))
    sql(store, "UPDATE workflows SET status = ?, updated_at = ?, parent = ? WHERE id = ?",
        (status, time.time() - age, parent, wid))
    return wid


def _owned(store: Store, wid: str) -> dict[str, int]:
    """How many rows of each table a workflow has."""
    (seq,) = sql(store, "SELECT seq FROM workflows WHERE id = ?", (wid,))[0] or (None,)
    counts = {t: int(sql(store, f"SELECT COUNT(*) FROM {t} WHERE workflow_id = ?", (wid,))[0][0]) for t in OWNED}
    counts["commands"] = int(sql(store, "SELECT COUNT(*) FROM commands WHERE slot_key BETWEEN ? AND ?",
                                 (slot_key(int(seq)), slot_key(int(seq) + 1) - 1))[0][0])
    return counts


def _ids(store: Store) -> set[str]:
    return {r[0] for r in sql(store, "SELECT id FROM workflows")}


def _dump(store: Store) -> list[object]:
    """Every row of every table a prune touches, to compare before and after."""
    tables = ("workflows", "commands", *OWNED)
    return [sorted(map(repr, sql(store, f"SELECT * FROM {t}"))) for t in tables]


def _prune(store: Store, cutoff: float, **kw: object) -> object:
    return prune(store_batches(store, finished_before=cutoff, **kw), finished_before=cutoff,  # type: ignore[arg-type]
                 dry_run=bool(kw.get("dry_run")), pause=0)


def test_prune_deletes_old_finished_workflows_with_their_slots_signals_marks_and_audit_rows(store: Store) -> None:
    old = {s: _workflow(store, s, 40 * DAY) for s in ("completed", "failed", "cancelled", "terminated")}
    live = {s: _workflow(store, s, 40 * DAY) for s in ("pending", "running", "blocked")}
    recent = _workflow(store, "completed", 1 * DAY)
    seqs = {wid: sql(store, "SELECT seq FROM workflows WHERE id = ?", (wid,))[0][0] for wid in old.values()}
    assert all(_owned(store, wid)["commands"] == 3 for wid in old.values())

    report = _prune(store, time.time() - 30 * DAY)

    assert report.pruned == 4 and report.kept == 0  # type: ignore[attr-defined]
    assert _ids(store) == set(live.values()) | {recent}
    for wid, seq in seqs.items():
        assert all(int(sql(store, f"SELECT COUNT(*) FROM {t} WHERE workflow_id = ?", (wid,))[0][0]) == 0
                   for t in OWNED)
        assert sql(store, "SELECT COUNT(*) FROM commands WHERE slot_key BETWEEN ? AND ?",
                   (slot_key(int(seq)), slot_key(int(seq) + 1) - 1))[0][0] == 0
    for wid in [*live.values(), recent]:
        assert _owned(store, wid) == {"signals": 1, "inflight": 1, "audit": 2, "commands": 3}


def test_prune_takes_only_the_statuses_asked_for(store: Store) -> None:
    done = _workflow(store, "completed", 40 * DAY)
    failed = _workflow(store, "failed", 40 * DAY)
    _prune(store, time.time() - 30 * DAY, statuses=["failed"])
    assert _ids(store) == {done}
    assert failed not in _ids(store)


def test_a_parent_whose_child_still_runs_is_kept_and_a_finished_child_goes_with_its_parent(store: Store) -> None:
    waiting_parent = _workflow(store, "failed", 40 * DAY)
    running_child = _workflow(store, "running", 40 * DAY, parent=waiting_parent)
    parent = _workflow(store, "completed", 40 * DAY)
    child = _workflow(store, "completed", 1 * DAY, parent=parent)
    grandchild = _workflow(store, "failed", 1 * DAY, parent=child)
    # A finished child of a parent that is kept is not pruned from under it.
    other_parent = _workflow(store, "blocked", 40 * DAY)
    finished_child = _workflow(store, "completed", 40 * DAY, parent=other_parent)

    report = _prune(store, time.time() - 30 * DAY)

    assert _ids(store) == {waiting_parent, running_child, other_parent, finished_child}
    assert (report.pruned, report.children, report.kept) == (1, 2, 1)  # type: ignore[attr-defined]
    assert report.kept_ids == [waiting_parent]  # type: ignore[attr-defined]
    assert _owned(store, grandchild if grandchild in _ids(store) else running_child)["commands"] == 3


def test_prune_goes_batch_by_batch_past_the_workflows_it_keeps(store: Store) -> None:
    doomed = []
    for i in range(7):
        parent = _workflow(store, "completed", 40 * DAY, slots=1)
        if i % 3 == 0:  # every third one has a child still running: kept, and not looked at twice
            _workflow(store, "pending", 40 * DAY, parent=parent, slots=1)
        else:
            doomed.append(parent)
    report = _prune(store, time.time() - 30 * DAY, batch=2)
    assert report.batches == 4 and report.pruned == len(doomed) and report.kept == 3  # type: ignore[attr-defined]
    assert not set(doomed) & _ids(store)


def test_dry_run_counts_what_would_go_and_writes_nothing(store: Store) -> None:
    parent = _workflow(store, "completed", 40 * DAY)
    _workflow(store, "completed", 40 * DAY, parent=parent)
    _workflow(store, "failed", 40 * DAY)
    _workflow(store, "running", 40 * DAY)
    before = _dump(store)
    report = _prune(store, time.time() - 30 * DAY, dry_run=True)
    assert (report.pruned, report.children) == (2, 1)  # type: ignore[attr-defined]
    assert _dump(store) == before


def test_cli_prune_dry_run_names_the_first_ids_and_changes_nothing(db: Path | str) -> None:
    with open_store(_url(db)) as store:
        wid = _workflow(store, "completed", 40 * DAY)
        before = _dump(store)
    done = run_cli(db, "prune", "--finished-before", "30d", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("would prune 1 workflow(s) finished before ") and wid in done.stdout
    with open_store(_url(db)) as store:
        assert _dump(store) == before
    done = run_cli(db, "prune", "--finished-before", "30d")
    assert done.returncode == 0 and done.stdout.startswith("pruned 1 workflow(s)"), done.stdout + done.stderr
    with open_store(_url(db)) as store:
        assert wid not in _ids(store)


@pytest.mark.parametrize("args, said", [
    (("--finished-before", "2999-01-01"), "--finished-before 2999-01-01 is in the future"),
    (("--finished-before", "soon"), "--finished-before 'soon' is neither an age"),
    (("--finished-before", "30d", "--status", "running"), "--status running: only finished workflows are pruned"),
])
def test_bad_prune_input_is_one_line_and_writes_nothing(db: Path | str, args: tuple[str, ...], said: str) -> None:
    with open_store(_url(db)) as store:
        _workflow(store, "completed", 40 * DAY)
        before = _dump(store)
    done = run_cli(db, "prune", *args)
    assert done.returncode == 1
    assert done.stderr.startswith(f"replaylog: error: {said}") and done.stderr.count("\n") == 1, done.stderr
    with open_store(_url(db)) as store:
        assert _dump(store) == before


def test_ages_and_times_are_read_as_cutoffs() -> None:
    now = 2_000_000_000.0
    assert parse_duration("30d") == 30 * DAY and parse_duration("90m") == 5400
    assert parse_cutoff("12h", now) == now - 12 * 3600
    assert parse_cutoff("2026-01-31", now) == 1769817600.0
    assert parse_cutoff("2026-01-31T01:00+01:00", now) == 1769817600.0
    with pytest.raises(StoreError, match="is in the future"):
        parse_cutoff("2040-01-01", now)


def test_a_pruned_sqlite_file_shrinks_with_vacuum(db_path: Path) -> None:
    with open_store(db_path) as store:
        # Seeding only: 13,000 rows need not each wait for the disk (what is measured is the file's size).
        sql(store, "PRAGMA synchronous = OFF")
        for _ in range(300):
            _workflow(store, "completed", 40 * DAY, slots=40)
        keep = _workflow(store, "completed", 1 * DAY)
        sql(store, "PRAGMA wal_checkpoint(TRUNCATE)")
    size = db_path.stat().st_size
    with Client(db_path) as client:
        report = client.prune("30d", vacuum=True)
    assert report.pruned == 300 and report.space is not None and report.space.startswith("VACUUM:")
    assert db_path.stat().st_size < size / 4
    with open_store(db_path) as store:
        assert _ids(store) == {keep} and _owned(store, keep)["commands"] == 3


def test_a_worker_with_retention_prunes_while_it_runs_live_workflows(db: Path | str) -> None:
    url = _url(db)
    with open_store(url) as store:
        old = [_workflow(store, "completed", 40 * DAY) for _ in range(5)]
        unfinished = _workflow(store, "blocked", 40 * DAY)
    proc = start_worker(db, "--retention", "30d")
    try:
        with Client(db) as client:
            live = client.start("report", 5)
            assert client.get_handle(live.id).result(timeout=120) is not None
        with open_store(url) as store:
            assert wait_for(lambda: not set(old) & _ids(store))
            assert unfinished in _ids(store) and live.id in _ids(store)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_prune_deletes_the_earlier_runs_of_a_workflow_continued_as_new(db: Path | str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import continue_app

    from replaylog.worker import Worker

    monkeypatch.setenv("CONTINUE_LEDGER", str(tmp_path / "ledger"))
    with Worker(db, app=[continue_app.looper, continue_app.step], focus_cpu=False), Client(db) as client:
        assert client.start("looper", {"i": 0, "total": 9, "every": 3}, id="loop").result(timeout=300) == 9
        kept = client.start("looper", {"i": 0, "total": 2, "every": 3}, id="kept").result(timeout=300)
    with open_store(_url(db)) as store:
        seqs = [int(r[0]) for r in sql(store, "SELECT seq FROM runs WHERE workflow_id = 'loop'")]
        assert len(seqs) == 2  # runs 1 and 2 ended by continue-as-new; run 3 is the workflow's row
        sql(store, "UPDATE workflows SET updated_at = ? WHERE id = 'loop'", (time.time() - 40 * DAY,))
        report = _prune(store, time.time() - 30 * DAY)
        assert report.pruned == 1 and _ids(store) == {"kept"} and kept == 2  # type: ignore[attr-defined]
        assert sql(store, "SELECT COUNT(*) FROM runs WHERE workflow_id = 'loop'")[0][0] == 0
        for seq in seqs:
            assert sql(store, "SELECT COUNT(*) FROM commands WHERE slot_key BETWEEN ? AND ?",
                       (slot_key(seq), slot_key(seq + 1) - 1))[0][0] == 0


def _seed_old(db_path: Path, count: int) -> None:
    """`count` completed workflows of one slot each, finished 40 days ago, written in one transaction."""
    open_store(db_path).close()  # the schema
    old = time.time() - 40 * DAY
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO workflows (id, workflow, status, slots, created_at, updated_at, lease_epoch, seq)"
            " VALUES (?, 'job', 'completed', 1, ?, ?, 0, ?)", ((f"old-{i}", old, old, i + 1) for i in range(count)))
        conn.executemany("INSERT INTO commands (slot_key, kind, name, ok, value, attempts, recorded_at)"
                         " VALUES (?, 'activity', 'step', 1, '1', 1, 0)",
                         ((slot_key(i + 1, 0),) for i in range(count)))
        conn.execute("COMMIT")
    finally:
        conn.close()


def _batch_steps(db_path: Path, batch: int) -> int:
    """SQLite virtual-machine steps (in hundreds) of one prune batch on the file: work, not time."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    with open_store(db_path) as store:
        store._conn.set_progress_handler(count, 100)  # type: ignore[attr-defined]
        done = store.prune_batch(finished_before=time.time() - 30 * DAY, batch=batch)
    assert len(done.pruned) == batch
    return steps[0]


def test_a_prune_batch_does_as_much_work_among_many_old_workflows_as_among_few(tmp_path: Path) -> None:
    # A batch holds the write lock while it finds its workflows: that must cost what the batch
    # takes, not a read of every old workflow in the store (live workers wait meanwhile).
    few, many = tmp_path / "few.db", tmp_path / "many.db"
    _seed_old(few, 100)
    _seed_old(many, 5_000)
    assert _batch_steps(many, 20) < 1.5 * _batch_steps(few, 20)


def test_a_prune_batch_copies_the_wal_into_the_file_itself(db_path: Path) -> None:
    # So the copying of its pages never falls to the next commit of a live worker.
    with open_store(db_path) as store:
        for _ in range(5):
            _workflow(store, "completed", 40 * DAY)
        assert _prune(store, time.time() - 30 * DAY).pruned == 5  # type: ignore[attr-defined]
        shm = Path(f"{db_path}-shm").read_bytes()
        # The WAL index's header (SQLite's file format, "wal-index format"): mxFrame, the last
        # valid frame, and nBackfill, the frames already copied into the database file.
        (last,) = struct.unpack_from("=I", shm, 16)
        (copied,) = struct.unpack_from("=I", shm, 96)
        assert last > 0 and copied == last
