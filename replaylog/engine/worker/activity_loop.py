"""The worker's one event loop for `async def` activities: many at once, and no thread held while they run.

When a run reaches a live async activity, its coroutine becomes a task on this loop (in a
copy of the calling thread's context variables, so `current_activity()` answers inside it)
and the run ends suspended (engine.core.RunSuspended): it unwinds as a blocked run does and
its pooled thread serves other workflows, while the worker keeps the workflow's lease. When
every task the workflow started has finished, `on_ready` is called with its id and the
worker runs it again: the replay reaches the same slot and attempt, and `run` hands it the
finished task's outcome instead of starting the coroutine again (the new coroutine is closed
unawaited), which is then recorded as any activity's outcome is. So a thousand workflows
awaiting a model call hold a thousand tasks on one thread, not a thousand threads; the
price is one replay of the workflow per live async activity (in memory, from the store).

A task is cancelled (cooperatively: it gets CancelledError at its current await) when its
workflow's lease is lost (an operator terminated it, or another worker took it over); the
run that comes for its outcome then stops as a lost lease, recording nothing for it.

The loop starts with the first async activity, so a worker whose app has none runs no
extra thread.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from replaylog.engine.core import RunSuspended
from replaylog.engine.errors import ActivityTimeout, LeaseLostError

if TYPE_CHECKING:
    import asyncio

# asyncio is imported where the loop starts and on it, not at the top: a worker whose app has
# no `async def` activity never starts this loop, and skips asyncio's ~40 ms import
# (-X importtime) in every worker process.


class _TimedOut(Exception):
    """An attempt's task ran past its timeout and was cancelled (not a TimeoutError of its own)."""


async def _within(coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
    import asyncio

    try:
        return await asyncio.wait_for(coro, timeout)
    except TimeoutError as exc:
        if isinstance(exc.__cause__, asyncio.CancelledError):  # wait_for's own: the task was cancelled
            raise _TimedOut() from None
        raise


class ActivityLoop:
    """An asyncio loop on a thread of its own, running the async activities of every workflow of a worker.

    Args:
        on_ready: called (from the loop's thread) with the id of a suspended workflow whose
            tasks have all finished: the worker runs it again.
    """

    def __init__(self, on_ready: Callable[[str], None] | None = None) -> None:
        self.on_ready = on_ready
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # By workflow id: how many of its tasks are started and not done (counted before the
        # loop creates them, so a run that unwinds at once still waits for them), the tasks
        # themselves, its finished ones by (slot, attempt), kept until its run ends (a replay
        # goes through the attempts of a retried activity again), and whether its run has unwound (parked).
        self._running: dict[str, int] = {}
        self._tasks: dict[str, set[asyncio.Task[Any]]] = {}
        self._finished: dict[str, dict[tuple[int, int], asyncio.Task[Any]]] = {}
        # Of those finished, the (slot, attempt) whose end a run has told metrics and traces
        # about: a failed attempt is replayed by each later run until its slot is recorded.
        self._reported: dict[str, set[tuple[int, int]]] = {}
        self._parked: set[str] = set()

    @property
    def parked(self) -> int:
        """How many workflows are suspended on async activities (their runs hold no thread)."""
        return len(self._parked)

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                import asyncio

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

    def holds(self, workflow_id: str) -> bool:
        """Whether finished tasks wait for the workflow's next run."""
        with self._lock:
            return bool(self._finished.get(workflow_id))

    def has_outcome(self, workflow_id: str, slot: int) -> bool:
        """Whether a finished task waits for the run that replays up to `slot`."""
        with self._lock:
            return any(s == slot for s, _ in self._finished.get(workflow_id, ()))

    def reported(self, workflow_id: str, slot: int, attempt: int) -> bool:
        """Whether an earlier run told metrics and traces this finished attempt's end (this run replays it)."""
        with self._lock:
            return (slot, attempt) in self._reported.get(workflow_id, ())

    def report(self, workflow_id: str, slot: int, attempt: int) -> bool:
        """Whether this end of an attempt is the one to tell metrics and traces about (False: told already).

        An attempt that ran as a task of this loop is told once, by the first run that collects its outcome.
        """
        key = (slot, attempt)
        with self._lock:
            if key not in self._finished.get(workflow_id, ()):
                return True  # not kept for a replay (a sync attempt, a held one, one just recorded)
            told = self._reported.setdefault(workflow_id, set())
            if key in told:
                return False
            told.add(key)
            return True

    def run(self, workflow_id: str, coro: Coroutine[Any, Any, Any], slot: int, attempt: int,
            timeout: float | None = None, hold: bool = False) -> Any:
        """The outcome of the task a suspended run started for this attempt; else start it and raise RunSuspended.

        With a `timeout` (the activity's, start to close) the task is cancelled when it passes, and
        the attempt fails with ActivityTimeout. With `hold`, the calling thread waits for the task
        instead (an attempt under a heartbeat timeout, watched from its own thread).

        Raises:
            RunSuspended: the task is started; the run ends and comes back when it finished.
            LeaseLostError: the task was cancelled because the workflow's lease was lost.
        """
        with self._lock:
            done = self._finished.get(workflow_id, {}).get((slot, attempt))
        if done is not None:
            coro.close()  # this attempt already ran, as the task: the new coroutine never starts
            if done.cancelled():
                raise LeaseLostError(workflow_id)
            error = done.exception()
            if isinstance(error, _TimedOut):
                raise ActivityTimeout(f"attempt {attempt} ran past its timeout of {timeout:g} s (start to close); "
                                      "its task was cancelled") from None
            if error is not None:
                raise error
            with self._lock:  # it is recorded now: no replay comes back for this slot
                kept = self._finished.get(workflow_id, {})
                told = self._reported.get(workflow_id, set())
                for key in [k for k in kept if k[0] == slot]:
                    del kept[key]
                    told.discard(key)
            return done.result()
        loop = self._started()
        context = contextvars.copy_context()
        if timeout is not None:
            coro = _within(coro, timeout)
        if hold:
            import asyncio

            future = asyncio.run_coroutine_threadsafe(self._held(workflow_id, coro, context), loop)
            try:
                return future.result()
            except concurrent.futures.CancelledError:
                raise LeaseLostError(workflow_id) from None
        with self._lock:
            self._running[workflow_id] = self._running.get(workflow_id, 0) + 1
        loop.call_soon_threadsafe(self._start, workflow_id, coro, (slot, attempt), context)
        raise RunSuspended()

    async def _held(self, workflow_id: str, coro: Coroutine[Any, Any, Any], context: contextvars.Context) -> Any:
        """On the loop: a held attempt's task, cancellable by `cancel` as the others are."""
        import asyncio

        task = asyncio.get_running_loop().create_task(coro, context=context)
        with self._lock:
            self._tasks.setdefault(workflow_id, set()).add(task)
        try:
            return await task
        finally:
            with self._lock:
                tasks = self._tasks.get(workflow_id, set())
                tasks.discard(task)
                if not tasks:
                    self._tasks.pop(workflow_id, None)

    def _start(self, workflow_id: str, coro: Coroutine[Any, Any, Any], key: tuple[int, int],
               context: contextvars.Context) -> None:
        """On the loop: the task, and what happens when it is done."""
        import asyncio

        task = asyncio.get_running_loop().create_task(coro, context=context)
        with self._lock:
            self._tasks.setdefault(workflow_id, set()).add(task)

        def done(t: asyncio.Task[Any]) -> None:
            with self._lock:
                tasks = self._tasks.get(workflow_id, set())
                tasks.discard(t)
                if not tasks:
                    self._tasks.pop(workflow_id, None)
                self._finished.setdefault(workflow_id, {})[key] = t
                left = self._running[workflow_id] = self._running[workflow_id] - 1
                ready = left == 0 and workflow_id in self._parked
                if left == 0:
                    del self._running[workflow_id]
                    self._parked.discard(workflow_id)
                self._changed.notify_all()
            if ready and self.on_ready is not None:
                self.on_ready(workflow_id)

        task.add_done_callback(done)

    def park(self, workflow_id: str) -> bool:
        """The workflow's run has unwound: True if its tasks are all done already (run it again now)."""
        with self._lock:
            if self._running.get(workflow_id):
                self._parked.add(workflow_id)
                return False
            return True

    def forget(self, workflow_id: str) -> None:
        """The workflow's run ended otherwise (finished, handed back, lease lost): drop what is kept for it."""
        with self._lock:
            self._finished.pop(workflow_id, None)
            self._reported.pop(workflow_id, None)

    def cancel(self, workflow_id: str) -> None:
        """Cancel the running async activities of a workflow (its lease is lost): each gets CancelledError."""
        loop = self._loop
        if loop is None:
            return

        def cancel() -> None:
            with self._lock:
                tasks = list(self._tasks.get(workflow_id, ()))
            for task in tasks:
                task.cancel()

        loop.call_soon_threadsafe(cancel)

    def drain(self) -> None:
        """Wait until no task runs and every suspended workflow was handed to `on_ready` (the worker stops)."""
        with self._lock:
            while self._running:
                self._changed.wait(0.5)

    def close(self) -> None:
        """Stop the loop and its thread (every run has ended: nothing is running on it)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        import asyncio

        async def cancel_left() -> None:
            # Attempts abandoned under a heartbeat timeout may still run: they end with the worker.
            for task in asyncio.all_tasks() - {asyncio.current_task()}:
                task.cancel()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(cancel_left(), loop).result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
