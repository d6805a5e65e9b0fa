"""An activity attempt run on a thread of its own under a time limit, and watched from the caller's thread.

The worker's runs (engine.worker.run) and the in-memory runner (`LocalTimed`, engine.core.run)
share it. At `timeout` seconds after the attempt started, or `heartbeat_timeout` seconds after
its last heartbeat, the attempt is abandoned: ActivityTimeout for the caller (the Context retries
under its policy), its thread left to end on its own, whatever it returns discarded, and its next
`heartbeat()` raises ActivityTimeout in it so that an activity that heartbeats stops.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from replaylog.engine.errors import ActivityTimeout


class AttemptWatch:
    """An attempt running on a thread of its own under a timeout, as the thread that waits for it sees it."""

    __slots__ = ("abandoned", "beat_at", "details", "done", "error", "fresh", "value", "wake")

    def __init__(self) -> None:
        self.wake = threading.Event()  # set when the attempt ends or beats
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None
        self.beat_at = time.monotonic()  # its start, then its latest heartbeat
        self.details: Any = None
        self.fresh = False  # a heartbeat the waiting thread has not handed on yet
        self.abandoned = False  # timed out: its result is discarded, its next heartbeat raises

    def run(self, call: Callable[[], Any]) -> None:
        """The attempt's thread: run it, keep its value or error, wake the watcher."""
        try:
            self.value = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread (or dropped if abandoned)
            self.error = exc
        finally:
            self.done = True
            self.wake.set()

    def beat(self, name: str, attempt: int, details: Any) -> None:
        """A heartbeat from the attempt's thread; ActivityTimeout if the attempt was abandoned."""
        if self.abandoned:
            raise ActivityTimeout(f"attempt {attempt} of activity {name!r} was abandoned after a timeout: stop")
        self.beat_at = time.monotonic()
        self.details = details
        self.fresh = True
        self.wake.set()

    def outcome(self, call: Callable[[], Any], slot: int, attempt: int, timeout: float | None,
                heartbeat_timeout: float | None, on_beat: Callable[[Any], None] | None = None) -> Any:
        """Start the attempt on its thread and wait for its value (or error), at most until a limit passes.

        `on_beat` is called (in this thread) with the details of each heartbeat.

        Raises:
            ActivityTimeout: a limit passed first: the attempt is abandoned.
        """
        deadline = math.inf if timeout is None else self.beat_at + timeout
        threading.Thread(target=self.run, args=(call,), name=f"replaylog-attempt-{slot}-{attempt}",
                         daemon=True).start()
        while True:
            due = deadline if heartbeat_timeout is None else min(deadline, self.beat_at + heartbeat_timeout)
            self.wake.wait(max(0.0, due - time.monotonic()))
            self.wake.clear()
            if self.fresh:
                self.fresh = False
                if on_beat is not None:
                    on_beat(self.details)
            if self.done:
                break
            now = time.monotonic()
            if now >= deadline:
                self.abandoned = True
                raise ActivityTimeout(f"attempt {attempt} ran past its timeout of {timeout:g} s (start to close);"
                                      " its result, if it comes, is discarded")
            if heartbeat_timeout is not None and now >= self.beat_at + heartbeat_timeout:
                self.abandoned = True
                raise ActivityTimeout(f"attempt {attempt} sent no heartbeat for {heartbeat_timeout:g} s;"
                                      " its result, if it comes, is discarded")
        if self.error is not None:
            raise self.error
        return self.value


class LocalTimed:
    """The in-memory runner's attempts under a timeout (engine.core.TimedHooks): watched as a worker
    watches them, on real threads and real time, with nothing written anywhere.

    The limits are durations of the activity's own code, so they are measured on the monotonic
    clock whatever clock the run was given (a test's clock often stands still).
    """

    def __init__(self) -> None:
        self._watches: dict[tuple[int, int], AttemptWatch] = {}

    def run_attempt(self, call: Callable[[], Any], slot: int, name: str, attempt: int, timeout: float | None,
                    heartbeat_timeout: float | None) -> Any:
        """Run the attempt on a thread of its own; its value, or ActivityTimeout when a limit passes first."""
        watch = AttemptWatch()
        self._watches[(slot, attempt)] = watch
        try:
            return watch.outcome(call, slot, attempt, timeout, heartbeat_timeout)
        finally:
            self._watches.pop((slot, attempt), None)

    def heartbeat(self, slot: int, name: str, attempt: int, details: Any) -> None:
        """An attempt's heartbeat (from its own thread): its watch takes it."""
        watch = self._watches.get((slot, attempt))
        if watch is not None:
            watch.beat(name, attempt, details)
