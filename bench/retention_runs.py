"""Retention: pruning many finished workflows in batches while a worker runs live ones.

The figure is a ratio taken in one run: the live workflows' slot rate while `prune` deletes
the finished ones, against the same live workload on an identical database nobody prunes
(each round's database a copy of one seeded file). Rounds alternate which goes first (the
machine is shared: absolute rates drift by more than the difference), and the ratio is the
median of the rounds'. In the first pruning round the prune goes on to the end once the
live work is done (its time, what it pruned, the file's size before, after it and after a
VACUUM); in the others it is stopped when the live work ends, having run all through it.
"""

from __future__ import annotations

import shutil
import sqlite3
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from bench.replaylog_runs import fresh_db, run_worker_processes
from bench.sizes import Sizes
from replaylog.engine.retention import PruneReport, prune, store_batches
from replaylog.engine.store import open_store, slot_key

_AGE = 40 * 86400.0  # how long ago the seeded workflows finished


def _seed(db: Path, finished: int, slots: int, live: int, live_slots: int) -> None:
    """`finished` completed workflows of `slots` slots each, finished long ago, written in one transaction
    (starting each through the store would take longer than the measurement); then `live` pending ones."""
    open_store(db).close()  # the schema
    old = time.time() - _AGE
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO workflows (id, workflow, status, input, result, slots, created_at, updated_at, lease_epoch,"
            " seq) VALUES (?, 'chain', 'completed', ?, ?, ?, ?, ?, 0, ?)",
            ((f"old-{i}", str(slots), str(slots), slots, old, old, i + 1) for i in range(finished)))
        conn.executemany(
            "INSERT INTO commands (slot_key, kind, name, ok, value, attempts, recorded_at)"
            " VALUES (?, 'activity', 'tick', 1, ?, 1, ?)",
            ((slot_key(i + 1, j), str(j), old) for i in range(finished) for j in range(slots)))
        conn.executemany("INSERT INTO audit (workflow_id, action, at, actor) VALUES (?, 'start', ?, 'bench')",
                         ((f"old-{i}", old) for i in range(finished)))
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    with open_store(db) as store:
        for _ in range(live):
            store.start_workflow("chain", live_slots)
    conn = sqlite3.connect(db)
    try:  # everything in the main file, so a copy of it alone is the whole database
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def _live_rate(db: Path, slots: int, pruning: bool, to_the_end: bool) -> tuple[float, PruneReport | None, float]:
    """The live workflows' slots per second (one worker process), with a prune running beside them or not;
    the prune's report and how long it took. Unless `to_the_end`, the prune stops when the live work is done."""
    report: list[PruneReport] = []
    took: list[float] = []
    live_done = threading.Event()

    def pruner() -> None:
        t0 = time.perf_counter()
        with open_store(db) as store:
            cutoff = time.time() - _AGE / 2
            report.append(prune(store_batches(store, finished_before=cutoff), finished_before=cutoff,
                                stop=lambda: live_done.is_set() and not to_the_end))
        took.append(time.perf_counter() - t0)

    thread = threading.Thread(target=pruner) if pruning else None
    if thread is not None:
        thread.start()
    wall, _ = run_worker_processes(db, 1)
    live_done.set()
    if thread is not None:
        thread.join()
    return slots / wall, report[0] if report else None, took[0] if took else 0.0


def retention(workdir: Path, sizes: Sizes) -> dict[str, Any]:
    """The live slot rate while a prune runs, against an unpruned run; the database's size around it."""
    n, live, live_slots = sizes.prune_finished, sizes.prune_live_workflows, sizes.prune_live_slots
    ratios, pruned_rates, plain_rates = [], [], []
    sizes_mb: dict[str, float] = {}
    pruned_count, prune_s, overlapped = 0, 0.0, True
    seeded = fresh_db(workdir, "prune-seeded")
    _seed(seeded, n, sizes.prune_slots, live, live_slots)
    for i in range(sizes.prune_rounds):
        rates: dict[bool, float] = {}
        for pruning in ([True, False] if i % 2 == 0 else [False, True]):
            db = fresh_db(workdir, f"prune-{i}-{pruning}")
            shutil.copyfile(seeded, db)
            before = db.stat().st_size
            rate, report, took = _live_rate(db, live * live_slots, pruning, to_the_end=i == 0)
            rates[pruning] = rate
            if report is not None and i > 0:
                overlapped = overlapped and report.pruned < n  # the prune outlasted the live work
            if report is not None and i == 0:
                prune_s = took
                pruned_count = report.pruned
                sizes_mb["before_mb"] = before / 1e6
                conn = sqlite3.connect(db)
                try:  # the WAL copied back: the freed pages stay in the file, for new rows
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                finally:
                    conn.close()
                sizes_mb["after_prune_mb"] = db.stat().st_size / 1e6
                with open_store(db) as store:
                    store.reclaim_space(full=True)
                sizes_mb["after_vacuum_mb"] = db.stat().st_size / 1e6
            fresh_db(workdir, f"prune-{i}-{pruning}")  # a copy per round: not left to fill the disk
        pruned_rates.append(rates[True])
        plain_rates.append(rates[False])
        ratios.append(rates[True] / rates[False])
    ratio = statistics.median(ratios)
    return {"finished": n, "pruned": pruned_count, "live_workflows": live, "live_slots": live * live_slots,
            "pruned_slots_per_s": statistics.median(pruned_rates),
            "unpruned_slots_per_s": statistics.median(plain_rates), "ratio": ratio, "round_ratios": ratios,
            "prune_s": prune_s, "prune_outlasted_live": overlapped, **sizes_mb,
            "target": "live slot rate >= 0.8 of an unpruned run",
            "met": ratio >= 0.8 and pruned_count == n and overlapped}
