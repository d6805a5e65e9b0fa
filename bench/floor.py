"""The raw SQLite floor: one small row per committed transaction, WAL + synchronous=FULL.

This is what any engine that makes each outcome durable before going on must pay per
outcome, measured on the same disk in the same run as the engine it judges.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path


def floor_rate(path: Path, rows: int) -> float:
    """Commit `rows` one-row transactions to a fresh database at `path`; return commits/s."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE floor (id INTEGER PRIMARY KEY, wf TEXT NOT NULL, value TEXT NOT NULL)")
        start = time.perf_counter()
        for i in range(rows):
            # BEGIN IMMEDIATE as the engine does: the floor pays for the same lock dance.
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO floor (wf, value) VALUES (?, ?)", ("wf-0123456789abcdef", str(i)))
            conn.execute("COMMIT")
        return rows / (time.perf_counter() - start)
    finally:
        conn.close()
