"""A seeded database for the console tests, with every timestamp fixed.

Seeding runs the real store and a real (in-process) worker; while it runs the wall
clock is frozen, so snapshots show the same times on every machine and every run.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from replaylog.engine.app import load_app
from replaylog.engine.core import CommandRecord, Outcome
from replaylog.engine.store import PendingRecord, open_store
from replaylog.engine.worker import Worker

# 2026-01-01 00:00:00 UTC: every stored timestamp in the seeded database.
FROZEN = 1_767_225_600.0
# The console's clock in tests: 42 seconds later, so ages read "42s ago".
NOW = FROZEN + 42

ROLES = {
    "completed": "refund-7",
    "blocked": "refund-12",
    "nondeterministic": "refund-v1-8",
    "activity_failure": "ship-9",
    "markup": "hostile-[/bold]-1",
    "diverged": "fulfil-3",
}


def frozen_clock() -> float:
    """The clock the console sees in tests."""
    return NOW


@contextmanager
def frozen_time() -> Iterator[None]:
    """Freeze time.time() (the store's timestamps) while seeding; leases never lapse meanwhile."""
    real = time.time
    time.time = lambda: FROZEN
    try:
        yield
    finally:
        time.time = real


def _drain(db: Path | str, app: str) -> None:
    Worker(db, load_app(app), poll=0.002, clock=lambda: FROZEN).run(until_idle=True)


def seed(db: Path | str) -> None:
    """Workflows in every state the console shows, with fixed ids and times (a SQLite file or a PostgreSQL URL)."""
    with frozen_time():
        with open_store(db) as store:
            store.start_workflow("refund", 8, workflow_id=ROLES["nondeterministic"])
        _drain(db, "replaylog.samples.legacy_v1")  # version 1 of the code: it diverges later
        with open_store(db) as store:
            store.start_workflow("fulfil", 3, workflow_id=ROLES["diverged"])
        _drain(db, "console_workflows_v1")
        with open_store(db) as store:
            store.send_signal(ROLES["nondeterministic"], "approval", {"approved": True, "by": "ops"})
            store.send_signal(ROLES["diverged"], "go", True)
            store.start_workflow("refund", 7, workflow_id=ROLES["completed"])
            store.start_workflow("refund", 12, workflow_id=ROLES["blocked"])
            store.start_workflow("failing_shipment", "A-9", workflow_id=ROLES["activity_failure"])
            store.start_workflow("hostile[/bold]", "[bold]hi\x1b[31m", workflow_id=ROLES["markup"])
        _drain(db, "console_workflows")
        with open_store(db) as store:
            store.send_signal(ROLES["completed"], "approval", {"approved": True, "by": "alice"})
            # A signal nobody waits for, named and filled with markup: it stays "waiting".
            store.send_signal(ROLES["blocked"], "[/bold]note", {"text": "[red]\x1b[2J[/red]"})
        _drain(db, "console_workflows")


def copy_db(src: Path, dst: Path) -> Path:
    """Copy a closed database (and its WAL, if one is left) to a fresh path."""
    for suffix in ("", "-wal"):
        if Path(f"{src}{suffix}").exists():
            shutil.copyfile(f"{src}{suffix}", f"{dst}{suffix}")
    return dst


def seed_long_history(db: Path, workflow_id: str, slots: int) -> None:
    """A workflow with `slots` recorded slots, written in one transaction through the store's API."""
    with frozen_time(), open_store(db) as store:
        store.start_workflow("refund", 1, workflow_id=workflow_id)
        (claim,) = store.claim("seeder", ttl=60)
        records = [PendingRecord(claim, i, CommandRecord("activity", "step", True, {"i": i, "square": i * i}))
                   for i in range(slots)]
        store.commit_batch(records, finishes=[(claim, Outcome("blocked", blocked_on="more"))], ttl=60)
