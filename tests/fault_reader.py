"""A console-style reader process for the contention test: `python -m fault_reader DB SECONDS OUT`.

It does what an operator console does (pages of workflows, counts, one workflow's slots
and signals, change detection through the store's read-only connection) and, between
those, holds a long read transaction open on a second read-only connection, as a slow
console or a backup would. Every error is counted and written to OUT, never raised.
"""

from __future__ import annotations

import json
import random
import sqlite3
import sys
import time

from replaylog.engine.core import error_text
from replaylog.engine.store import open_store


def main(db: str, seconds: str, out: str) -> None:
    """Read until the time is up; write {"reads": n, "long_holds": n, "errors": [...]} to OUT."""
    store = open_store(db, readonly=True)
    holder = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None, timeout=10)
    reads = holds = 0
    errors: list[str] = []
    deadline = time.monotonic() + float(seconds)
    while time.monotonic() < deadline:
        try:
            store.data_version()
            rows = store.list_workflows(limit=50)
            store.status_counts()
            if rows:
                wid = random.choice(rows).id
                store.list_commands(wid)
                store.list_signals(wid)
                store.inflight(wid)
            reads += 1
            if random.random() < 0.3:
                # A long read transaction: its snapshot pins the WAL until it ends.
                holder.execute("BEGIN")
                holder.execute("SELECT COUNT(*) FROM commands").fetchone()
                time.sleep(random.uniform(0.2, 1.0))
                holder.execute("SELECT COUNT(*) FROM signals").fetchone()
                holder.execute("COMMIT")
                holds += 1
        except Exception as exc:
            errors.append(error_text(exc))
            if holder.in_transaction:
                holder.execute("ROLLBACK")
        time.sleep(random.uniform(0.0, 0.05))
    store.close()
    holder.close()
    with open(out, "w") as fh:
        json.dump({"reads": reads, "long_holds": holds, "errors": errors}, fh)


if __name__ == "__main__":
    main(*sys.argv[1:4])
