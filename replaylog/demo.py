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
    """Print one line per workflow: id, name, status, blocked-on or error, in columns as wide as their widest."""
    rows = store.list_workflows(sort="created", descending=False, limit=-1)
    id_width = max((len(r.id) for r in rows), default=0)
    name_width = max((len(r.workflow) for r in rows), default=0)
    status_width = max((len(r.status) for r in rows), default=0)
    for row in rows:
        extra = waits_text(row.blocked_on, row.wake_at, time.time()) or row.error or ""
        echo(f"  {row.id:<{id_width}}  {row.workflow:<{name_width}}  {row.status:<{status_width}}  {extra}".rstrip())


# The seeded workflow a database must hold for --fresh to wipe it: never a database of real work.
DEMO_MARK = "refund-v1-8"


class DemoRefused(Exception):
    """The demo will not touch this database (a one-line reason)."""


def _is_demo(db: Path) -> bool:
    """Whether the file holds the demo's seed (or no workflow at all)."""
    with open_store(db) as store:  # writable, as the demo is: an older database is migrated, not refused
        return store.count_workflows() == 0 or any(r.id == DEMO_MARK for r in store.list_workflows(limit=-1))


def run_demo(db: str | os.PathLike[str], *, open_console: bool, echo: Callable[[str], None],
             fresh: bool = False) -> None:
    """Seed (unless the database exists: the changes made in it are kept), start a background worker,
    open the console (or print the tour without a terminal).

    Args:
        db: the demo's SQLite file.
        open_console: open the console when on a terminal.
        echo: where the lines for the user go.
        fresh: seed again over an existing demo database (refused for one that is not the demo's).
    """
    db = Path(db)
    kept = db.exists() and not fresh
    if db.exists() and fresh and not _is_demo(db):
        raise DemoRefused(f"{db} holds workflows the demo did not seed: --fresh would delete them; give --db"
                          " another file")
    if kept:
        echo(f"Using the demo database {db} as you left it: your changes are kept (to seed it afresh:"
             f" {_command_name()} --db {db} demo --fresh, or make demo-fresh)")
        with open_store(db) as store:  # writable, as the demo is: an older database is migrated, not refused
            echo_states(store, echo)
        ids = {"nondeterministic": DEMO_MARK, "blocked": "refund-12"}
    else:
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
    with open_store(db) as store:
        if not any(r.id == blocked and r.status == "blocked" for r in store.list_workflows(limit=-1)):
            blocked = ""  # a kept database where it was approved already (or is gone): nothing to approve
    if blocked:
        _approve(db, blocked, echo)
    cmd = _command_name()
    echo(f"\nLook closer:  {cmd} --db {db} show {ids['nondeterministic']}")
    echo(f"              {cmd} --db {db} console")


def _approve(db: Path, blocked: str, echo: Callable[[str], None]) -> None:
    """Approve the blocked refund and watch the background worker complete it."""
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
