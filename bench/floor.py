"""The raw SQLite floor: one small row per committed transaction, WAL + synchronous=FULL.

This is what any engine that makes each outcome durable before going on must pay per
outcome, measured on the same disk in the same run as the engine it judges.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

# One-row commits made, untimed, before a floor is measured. A new database's WAL grows
# with every commit until the first autocheckpoint (at 1,000 pages) and is then written
# over from its start: on the disks here a growing WAL's commit took about twice as long
# (310 us against 160 us), because each fsync also has to journal the file's new size.
# Timing a fresh floor would compare the engine with a floor slowed by that growth for
# its first thousand commits.
WARM_COMMITS = 1_200


def commit_row(conn: sqlite3.Connection, i: int) -> None:
    """One floor transaction: one small row, with BEGIN IMMEDIATE as the engine does (the same lock dance)."""
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO floor (wf, value) VALUES (?, ?)", ("wf-0123456789abcdef", str(i)))
    conn.execute("COMMIT")


def warm(conn: sqlite3.Connection, rows: int = WARM_COMMITS) -> None:
    """Commit `rows` one-row transactions so that the WAL has grown and been recycled."""
    for i in range(rows):
        commit_row(conn, i)


def open_floor(path: Path, *, any_thread: bool = False, warm_rows: int = WARM_COMMITS) -> sqlite3.Connection:
    """A fresh floor database at `path` (WAL, synchronous=FULL), warmed by `warm_rows` commits;
    `any_thread` to use it from another."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=not any_thread)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE floor (id INTEGER PRIMARY KEY, wf TEXT NOT NULL, value TEXT NOT NULL)")
    warm(conn, warm_rows)
    return conn


def floor_rate(path: Path, rows: int, warm_rows: int = WARM_COMMITS) -> float:
    """Commit `rows` one-row transactions to a fresh database at `path` warmed by `warm_rows`; return commits/s."""
    conn = open_floor(path, warm_rows=warm_rows)
    try:
        start = time.perf_counter()
        for i in range(rows):
            commit_row(conn, i)
        return rows / (time.perf_counter() - start)
    finally:
        conn.close()
