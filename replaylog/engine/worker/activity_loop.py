"""The worker's one event loop for `async def` activities: many at once, on one thread.

An async activity's coroutine runs as a task on this loop, in a copy of the calling thread's
context variables (so `current_activity()` answers inside it); the workflow thread that
called it waits for its outcome. The loop starts with the first async activity, so a
worker whose app has none runs no extra thread.

A task is cancelled (cooperatively: it gets CancelledError at its current await) when its
workflow's lease is lost (an operator terminated it, or another worker took it over); the
workflow thread then stops the run as a lost lease, recording nothing for that attempt.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any

from replaylog.engine.errors import LeaseLostError


class ActivityLoop:
    """An asyncio loop on a thread of its own, running the async activities of every workflow of a worker."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # The tasks running for each workflow (by id), for `cancel`.
        self._running: dict[str, set[asyncio.Task[Any]]] = {}

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=serve, name="replaylog-async-activities", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def run(self, workflow_id: str, coro: Coroutine[Any, Any, Any]) -> Any:
        """Await `coro` on the loop and return its value (or raise its error) in the calling thread.

        Raises:
            LeaseLostError: the task was cancelled because the workflow's lease was lost.
        """
        loop = self._started()
        context = contextvars.copy_context()
        outcome: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def start() -> None:
            task = loop.create_task(coro, context=context)
            tasks = self._running.setdefault(workflow_id, set())
            tasks.add(task)

            def done(t: asyncio.Task[Any]) -> None:
                tasks.discard(t)
                if not tasks:
                    self._running.pop(workflow_id, None)
                if t.cancelled():
                    outcome.cancel()
                elif (exc := t.exception()) is not None:
                    outcome.set_exception(exc)
                else:
                    outcome.set_result(t.result())

            task.add_done_callback(done)

        loop.call_soon_threadsafe(start)
        try:
            return outcome.result()
        except concurrent.futures.CancelledError:
            raise LeaseLostError(workflow_id) from None

    def cancel(self, workflow_id: str) -> None:
        """Cancel the running async activities of a workflow (its lease is lost): each gets CancelledError."""
        loop = self._loop
        if loop is None:
            return

        def cancel() -> None:
            for task in list(self._running.get(workflow_id, ())):
                task.cancel()

        loop.call_soon_threadsafe(cancel)

    def close(self) -> None:
        """Stop the loop and its thread (every run has ended: nothing is running on it)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
