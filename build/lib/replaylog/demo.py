"""`replaylog demo`: seed a database with workflows in every state, run a worker, open the console.

The seed uses only public paths: the store's start and signal, and real worker
runs with the sample app (and its old version, for the non-deterministic one).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from replaylog.engine.app import load_app
from replaylog.engine.marks import marks_dir
from replaylog.engine.store import ReaderStore, open_store
from replaylog.engine.text import waits_text
from replaylog.engine.worker import Worker


def _drain(db: Path, app: str) -> None:
    """Run a worker in this process until nothing is pending or running."""
    Worker(db, load_app(app), poll=0.002).run(until_idle=True)


def seed(db: Path, echo: Callable[[str], None]) -> dict[str, str]:
    """Create a fresh demo database; return the ids of the seeded workflows by role."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.rmtree(marks_dir(db), ignore_errors=True)  # a killed worker's marks for the old database
    ids: dict[str, str] = {}
    with open_store(db) as store:
        # A refund started under version 1 of the code, which looked the customer up first.
        ids["nondeterministic"] = store.start_workflow("refund", 8, workflow_id="refund-v1-8")
    _drain(db, "replaylog.samples.legacy_v1")
    with open_store(db) as store:
        store.send_signal(ids["nondeterministic"], "approval", {"approved": True, "by": "ops"})
        ids["completed"] = store.start_workflow("refund", 7, workflow_id="refund-7")
        ids["blocked"] = store.start_workflow("refund", 12, workflow_id="refund-12")
        ids["agent"] = store.start_workflow("agent", "order-991", workflow_id="agent-991")
        ids["approval"] = store.start_workflow("support_agent", "order-992", workflow_id="support-992")
        ids["handled_failure"] = store.start_workflow("shipping", "A-1", workflow_id="shipping-A-1")
        ids["activity_failure"] = store.start_workflow("express_shipping", "B-2", workflow_id="express-B-2")
        ids["two_approvals"] = store.start_workflow("two_approvals", None, has_input=False,
                                                    workflow_id="two-approvals-1")
        # Durable time: a reminder asleep until tomorrow, a refund whose approval expires in two days.
        ids["sleeping"] = store.start_workflow("reminder", "ann@example.com", workflow_id="reminder-ann")
        ids["deadline"] = store.start_workflow("refund_with_deadline", 21, workflow_id="refund-deadline-21")
    _drain(db, "replaylog.samples")
    with open_store(db) as store:
        store.send_signal(ids["completed"], "approval", {"approved": True, "by": "alice"})
        store.send_signal(ids["two_approvals"], "approval", "alice")
    _drain(db, "replaylog.samples")
    with open_store(db) as store:
        ids["running"] = store.start_workflow("report", 200, workflow_id="report-200")
        echo_states(store, echo)
    return ids


def echo_states(store: ReaderStore, echo: Callable[[str], None]) -> None:
    """Print one line per workflow: id, name, status, blocked-on or error."""
    for row in store.list_workflows(sort="created", descending=False, limit=-1):
        extra = waits_text(row.blocked_on, row.wake_at, time.time()) or row.error or ""
        echo(f"  {row.id:<18} {row.workflow:<17} {row.status:<10} {extra}")


def run_demo(db: str | os.PathLike[str], *, open_console: bool, echo: Callable[[str], None]) -> None:
    """Seed, start a background worker, open the console (or print the tour without a terminal)."""
    db = Path(db)
    echo(f"Seeding demo database {db} …")
    ids = seed(db, echo)
    worker = subprocess.Popen(
        [sys.executable, "-m", "replaylog", "--db", str(db), "worker", "--quiet"],
        stdin=subprocess.DEVNULL,
    )
    try:
        interactive = sys.stdin.isatty() and sys.stdout.isatty()
        if open_console and interactive:
            from replaylog.console.app import ReplaylogConsole

            ReplaylogConsole(db, registry=load_app("replaylog.samples")).run()
        else:
            _tour(db, ids, echo)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.kill()


def _tour(db: Path, ids: dict[str, str], echo: Callable[[str], None]) -> None:
    """The refund tour in the terminal: approve the blocked refund and watch it complete."""
    blocked = ids["blocked"]
    echo(f"\nApproving {blocked} (blocked on 'approval') while the worker runs …")
    with open_store(db) as store:
        start = time.monotonic()
        store.send_signal(blocked, "approval", {"approved": True, "by": "demo"})
        while store.get_workflow(blocked).status != "completed" and time.monotonic() - start < 10:
            time.sleep(0.01)
        row = store.get_workflow(blocked)
        result = json.dumps(row.result, ensure_ascii=False)  # JSON, as `show --json` prints it
        echo(f"  {blocked} is {row.status} after {1000 * (time.monotonic() - start):.0f} ms: {result}")
        echo("\nEvery workflow now:")
        echo_states(store, echo)
    cmd = _command_name()
    echo(f"\nLook closer:  {cmd} --db {db} show {ids['nondeterministic']}")
    echo(f"              {cmd} --db {db} console")


def _command_name() -> str:
    """How to type the replaylog command here: its bare name if that is on PATH, else its path.

    `make demo` runs .venv/bin/replaylog without activating the environment, so a bare
    `replaylog` in the hint would be "command not found" for a newcomer.
    """
    invoked = Path(sys.argv[0])
    on_path = shutil.which("replaylog")
    if invoked.name != "replaylog" or (on_path is not None and Path(on_path).resolve() == invoked.resolve()):
        return "replaylog"
    return str(invoked)
