"""A test environment for an application's workflows: a temporary store, a client, a worker, one clock.

    from replaylog.testing import WorkflowEnvironment

    def test_reminder_is_sent_after_a_day():
        with WorkflowEnvironment(app=[reminder, send_email]) as env:
            handle = env.client.start(reminder, "ada@example.com")
            assert handle.result(timeout=10) == "sent"     # the day-long ctx.sleep is skipped

Time skipping: while a call of `env.client` waits (`result`, `get_event`) and no
workflow has code to run (none pending, running, or due), the environment's clock jumps
to the earliest recorded wake time (a `ctx.sleep`, `sleep_until`, a signal's or an
approval's deadline, a retry's next attempt), a workflow's deadline (`client.start(...,
timeout=...)`, inherited by its children) or the next schedule tick, so a workflow that
sleeps a day finishes in milliseconds, and one that waits past its timeout is cancelled
(reason "timeout") as soon as nothing else is left to run. `env.advance(seconds)` steps
through the schedule ticks, wake times and deadlines on the way in order, starting each
tick's workflow (cancelling each workflow whose deadline passed) and letting it run before
the next. Outside such a wait the clock runs as the wall clock does: a test can start a
workflow, look at it and signal it before a deadline passes. `env.advance(seconds)` moves
it by hand.

The workflows see the environment's clock through ctx.now() and every recorded time; the
store compares recorded wake times and workflow deadlines with it (`open_store(wake_clock=…)`);
leases and running activities keep real time: an activity's `timeout` and `heartbeat_timeout`
measure how long its code really ran. (The clock never jumps while an activity runs, as it
jumps only when every workflow waits, so the two agree during an attempt.)
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

from replaylog.client import AppLike, Client, app_registry
from replaylog.engine.store import Store, open_store
from replaylog.worker import Worker

__all__ = ["WorkflowEnvironment"]

# How often the time-skipping thread looks whether every workflow waits on time (seconds).
SKIP_LOOK = 0.002
# How long `advance` waits for the workflows it woke to run (seconds).
ADVANCE_WAIT = 60.0


class WorkflowEnvironment:
    """A temporary SQLite store, `client` (a Client) and an in-process worker on one skippable clock.

    Args:
        app: the workflows and activities under test: a module, an import string or .py
            path, or a list of @workflow and @activity functions.
        start_time: where the environment's clock starts (epoch seconds or an aware
            datetime); else now.
        concurrency: workflows run at once by the worker.

    Use it as a context manager (or call `close()`): on leaving, the worker stops, the
    client closes and the temporary folder is removed; nothing is left behind.
    """

    def __init__(self, app: AppLike, *, start_time: float | datetime | None = None, concurrency: int = 16) -> None:
        registry = app_registry(app)
        if isinstance(start_time, datetime):
            if start_time.tzinfo is None:
                raise ValueError("start_time: give an aware datetime (tzinfo set), or epoch seconds")
            start_time = start_time.timestamp()
        self._offset = 0.0 if start_time is None else float(start_time) - time.time()
        self._clock_lock = threading.Lock()
        self._folder = Path(tempfile.mkdtemp(prefix="replaylog-test-"))
        self.db = self._folder / "replaylog.db"
        self.client = Client(self.db, app=registry)
        self.client._wake_clock = self.now
        self.worker = Worker(self.db, app=registry, concurrency=concurrency, focus_cpu=False, clock=self.now)
        self._stop = threading.Event()
        self._skipper: threading.Thread | None = None
        self._store: Store | None = None
        self._closed = False

    def now(self) -> float:
        """The environment's clock (epoch seconds): what ctx.now() reads in its workflows."""
        return time.time() + self._offset

    def __enter__(self) -> WorkflowEnvironment:
        self.worker.start()
        self._skipper = threading.Thread(target=self._skip, name="replaylog-time-skipping", daemon=True)
        self._skipper.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker, close the client, remove the temporary store. Closing twice is harmless."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        try:
            if self._skipper is not None:
                self._skipper.join()
            self.worker.stop()
        finally:
            self.client.close()
            if self._store is not None:
                self._store.close()
            shutil.rmtree(self._folder, ignore_errors=True)

    def advance(self, seconds: float) -> None:
        """Let the workflows run until each waits, move the clock forward by `seconds`, and
        return once the workflows that came due have run (each has finished or waits again).

        A workflow just started first reaches its sleep, so the sleep is measured from now.
        """
        if seconds < 0:
            raise ValueError(f"advance: time moves forward only, got {seconds!r} seconds")
        self._settle()
        target = self.now() + seconds
        store = self._own_store()
        # Step through the schedule ticks and wake times on the way, in order, as real time
        # would: five minutes of a "* * * * *" schedule start five workflows, each run in turn.
        while True:
            times = [t for t in (store.next_schedule_at(), store.next_wake(), store.next_deadline())
                     if t is not None and t <= target]
            step = min(times) if times else target
            with self._clock_lock:
                ahead = step - self.now()
                if ahead > 0:
                    self._offset += ahead
            self._settle()
            if step >= target:
                return

    def _settle(self) -> None:
        """Start the due schedule ticks, cancel the workflows whose deadline passed, and let every workflow
        run until it waits, until nothing more starts."""
        store = self._own_store()
        while True:
            self.wait_idle()
            # (The worker does both too, a few times a second: this wait must not return before it has.)
            started = bool(store.fire_schedules(self.now())) | bool(store.expire_deadlines())
            # The worker looks for due ticks too: a tick it started first is not in `started`,
            # but it is committed, so this wait sees its workflow and lets it run.
            self.wait_idle()
            if not started:
                return

    def wait_idle(self, timeout: float = ADVANCE_WAIT) -> None:
        """Return once no workflow is pending, running or due; TimeoutError after `timeout` seconds."""
        store = self._own_store()
        deadline = time.monotonic() + timeout
        while store.has_runnable():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"workflows still ran after {timeout} s")
            time.sleep(SKIP_LOOK)

    def _own_store(self) -> Store:
        if self._store is None:
            self._store = open_store(self.db, wake_clock=self.now)
        return self._store

    def _skip(self) -> None:
        """While a client call waits and every unfinished workflow waits (none has code to run),
        jump the clock to the earliest recorded wake time."""
        store = open_store(self.db, wake_clock=self.now)  # this thread's own connection
        try:
            while not self._stop.wait(SKIP_LOOK):
                if not self.client.waiting or store.has_runnable() or store.fire_schedules(self.now()):
                    continue
                if store.expire_deadlines():
                    continue  # the cancelled workflows run first
                times = [t for t in (store.next_wake(), store.next_schedule_at(), store.next_deadline())
                         if t is not None]
                if not times:
                    continue
                wake_at = min(times)
                # Looked again as the clock jumps, under the lock the client's calls count their
                # waits with: a wait that ended during the looks above (the test went on to
                # signal its workflow, say) must not see time jump after it.
                with self._clock_lock, self.client._changed:  # the client's own lock, on purpose
                    if not self.client.waiting:
                        continue
                    ahead = wake_at - self.now()
                    if ahead > 0:
                        self._offset += ahead
        finally:
            store.close()
