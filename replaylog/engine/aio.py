"""Async workflows on a deterministic loop of their own, and the coroutines of async activities.

An `async def` workflow is driven by `drive`, on a `WorkflowLoop`: an asyncio event loop with no
clock, no I/O and no threads. Its ready callbacks run in the order they were scheduled, so the
code's tasks step in one order on every run. Every `await ctx.…` call (`AsyncContext`) does not
run where it is awaited: it becomes a pending command, and when no task has anything left to run
the driver issues the pending commands, in the order they were issued, through the one
synchronous Context that sync workflows use. Consecutive activity calls issued in one round
(`asyncio.gather`, a `TaskGroup`) run as one `ctx.parallel` group: consecutive slots in issue
order, each recorded as it finishes. So the slots, the guard, signal cursors, cancellation and
blocking are exactly a sync workflow's, whatever the timing.

Why a loop of our own rather than driving the coroutine by hand: asyncio.gather, TaskGroup and
asyncio.wait need a running loop, and a loop whose `time()`, `call_later` and `run_in_executor`
refuse gives the code what makes a workflow deterministic and a clear error for the rest
(asyncio.sleep, loop.time(), threads). A workflow awaiting anything that is not a ctx call
leaves the loop with nothing to run and nothing pending: it fails naming what it awaited,
it never hangs.

An async activity's coroutine is awaited by whoever runs the Context: the worker on its own
event loop (engine.worker.activity_loop), the in-memory runner on a loop made for the call
(`run_coroutine`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from replaylog.engine import thread_guard
from replaylog.engine.errors import ActivityError, ActivityTimeout, AsyncWorkflowError, ParallelError

if TYPE_CHECKING:
    from replaylog.engine.core import ChildHandle, Context, Task
    from replaylog.engine.workflow_log import WorkflowLog


_ALLOWED = ("only ctx calls may be awaited in a workflow (await ctx.call_activity, ctx.sleep, ctx.wait_signal, "
            "…), and asyncio.gather, TaskGroup and asyncio.wait over them")


class _Command:
    """One `await ctx.…` call waiting for the driver: what to run, and the future to answer."""

    __slots__ = ("activity", "future", "run")

    def __init__(self, future: asyncio.Future[Any], run: Callable[[], Any],
                 activity: tuple[Any, tuple[Any, ...], dict[str, Any]] | None) -> None:
        self.future = future
        self.run = run  # the synchronous Context call
        self.activity = activity  # (fn or name, args, kwargs) of an activity call: it may join a group


class WorkflowLoop(asyncio.AbstractEventLoop):
    """The event loop of one async workflow run: FIFO callbacks, no clock, no I/O, no threads.

    What a workflow must not do raises AsyncWorkflowError where the code does it, and the
    error is kept in `broken`: the run fails with it even if the code catches it.
    """

    def __init__(self, workflow: str) -> None:
        self._workflow = workflow
        self._ready: deque[asyncio.Handle] = deque()
        self.pending: list[_Command] = []
        self.broken: AsyncWorkflowError | None = None
        # A control-flow exception (blocked, dry-run stop, worker stopping) is unwinding the code:
        # a ctx call made meanwhile (in a finally block) gets it too instead of a slot.
        self.stopping: BaseException | None = None
        self._live = 0  # tasks not done: with one, a ctx call can be issued where it is awaited
        self._outer: asyncio.AbstractEventLoop | None = None  # the loop this thread ran before `step`

    def _task_done(self, _task: asyncio.Task[Any]) -> None:
        self._live -= 1

    def _refuse(self, what: str, instead: str) -> AsyncWorkflowError:
        err = AsyncWorkflowError(f"async workflow {self._workflow!r} called {what}, which would make its "
                                 f"history depend on timing: {instead}")
        if self.broken is None:
            self.broken = err
        return err

    # -- what asyncio's futures and tasks need

    def call_soon(self, callback: Callable[..., object], *args: Any,  # type: ignore[override]
                  context: contextvars.Context | None = None) -> asyncio.Handle:
        """Schedule a callback after those already scheduled."""
        handle = asyncio.Handle(callback, args, self, context)
        self._ready.append(handle)
        return handle

    def create_future(self) -> asyncio.Future[Any]:
        """A future of this loop."""
        return asyncio.Future(loop=self)

    def create_task(self, coro: Any, *, name: str | None = None,
                    context: contextvars.Context | None = None) -> asyncio.Task[Any]:
        """A task of this loop; its first step runs after the callbacks already scheduled."""
        task = asyncio.Task(coro, loop=self, name=name, context=context)
        self._live += 1
        task.add_done_callback(self._task_done)
        return task

    def get_debug(self) -> bool:
        """Never in debug mode (debug mode reads the clock)."""
        return False

    def is_running(self) -> bool:
        """Always, while the driver steps it."""
        return True

    def is_closed(self) -> bool:
        """Never: the loop lives as long as its run."""
        return False

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        """Drop asyncio's reports (a task destroyed pending when a run ends blocked, say)."""

    def get_exception_handler(self) -> None:
        """No handler: reports are dropped."""
        return None

    # -- what would make the history depend on timing

    def time(self) -> float:
        """Refused: read the clock with `ctx.now()` (recorded)."""
        raise self._refuse("loop.time()", "read the clock with ctx.now(), which is recorded")

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any,  # type: ignore[override]
                   context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        """Refused (asyncio.sleep, asyncio.wait_for, timeouts): use `await ctx.sleep(seconds)`."""
        raise self._refuse(f"asyncio.sleep({delay!r}) (loop.call_later)",
                           "use await ctx.sleep(seconds), a durable timer")

    def call_at(self, when: float, callback: Callable[..., object], *args: Any,  # type: ignore[override]
                context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        """Refused (asyncio.timeout, wait_for): use `await ctx.sleep_until(epoch)`."""
        raise self._refuse(f"loop.call_at({when!r}) (asyncio.timeout / wait_for)",
                           "use await ctx.sleep_until(epoch_seconds) or wait_signal(name, timeout=...)")

    def run_in_executor(self, executor: Any, func: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:  # type: ignore[override]
        """Refused (asyncio.to_thread): side effects belong in activities."""
        while isinstance(func, functools.partial):  # asyncio.to_thread wraps the function in Context.run
            func = func.args[0] if func.args and callable(func.args[0]) else func.func
        name = getattr(func, "__qualname__", repr(func))
        raise self._refuse(f"run_in_executor / asyncio.to_thread({name})",
                           "run side effects in an activity (await ctx.call_activity)")

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any,  # type: ignore[override]
                             context: contextvars.Context | None = None) -> asyncio.Handle:
        """Refused: another thread woke the workflow (a future resolved outside it)."""
        name = getattr(callback, "__qualname__", repr(callback))
        raise self._refuse(f"call_soon_threadsafe({name}) from another thread",
                           "a thread's result must come through an activity")

    # -- the driver's side

    @thread_guard.calls_workflow_code
    def step(self) -> None:
        """Run every callback scheduled, and those they schedule, until none is left."""
        ready = self._ready
        outer = self._outer = asyncio.events._get_running_loop()  # an application's loop, if this thread runs one
        asyncio.events._set_running_loop(self)
        try:
            while ready:
                handle = ready.popleft()
                if not handle._cancelled:
                    handle._run()
        finally:
            asyncio.events._set_running_loop(outer)

    def issue(self, run: Callable[[], Any],
              activity: tuple[Any, tuple[Any, ...], dict[str, Any]] | None = None) -> asyncio.Future[Any]:
        """A pending command's future (or the control-flow exception unwinding the code)."""
        if self.stopping is not None:
            raise self.stopping
        future = self.create_future()
        if self._live == 1 and not self.pending:
            # The only task: no other could issue a command in this round, so issuing it now
            # is what the driver would do once the task waits, without the round trip (a done
            # future is awaited without a task switch). The slot path of sequential code. The
            # Context runs as it does from the driver: outside this loop (an async activity of
            # the in-memory runner runs on a loop of its own).
            asyncio.events._set_running_loop(self._outer)
            try:
                _answer(self, future, run)
            finally:
                asyncio.events._set_running_loop(self)
        else:
            self.pending.append(_Command(future, run, activity))
        return future


def _awaited(task: asyncio.Task[Any]) -> str:
    """What a task waits on, and where in the workflow code, for the error naming it."""
    waiter = getattr(task, "_fut_waiter", None)
    what = "something that is not a ctx call" if waiter is None else repr(waiter)
    frames = task.get_stack(limit=1)
    if frames:
        code = frames[-1].f_code
        what += f" at {code.co_filename.rsplit('/', 1)[-1]}:{frames[-1].f_lineno} (in {code.co_name})"
    return what


def drive(fn: Callable[..., Coroutine[Any, Any, Any]], ctx: Context, args: tuple[Any, ...]) -> Any:
    """Run an async workflow to its end on a WorkflowLoop: its result, or raise what it raised.

    Control flow (WorkflowBlocked, DryRunStop, the worker's stop) is thrown into the code at
    the await it arose from, as a sync workflow's call raises it, and then raised from here.
    """
    from replaylog.engine.core import registered_name

    loop = WorkflowLoop(registered_name(fn))  # type: ignore[abstract]  # the methods it lacks refuse
    actx = AsyncContext(ctx, loop)
    main = loop.create_task(fn(actx, *args))
    try:
        while True:
            loop.step()
            if loop.broken is not None:
                if ctx.fatal is None:
                    ctx.fatal = loop.broken
                raise loop.broken
            if loop.stopping is not None:
                raise loop.stopping
            if main.done():
                return main.result()
            if not loop.pending:
                waiting = [t for t in asyncio.all_tasks(loop) if not t.done()]
                shown = _awaited(waiting[-1] if waiting else main)
                ctx.fatal = AsyncWorkflowError(
                    f"async workflow {loop._workflow!r} awaited {shown}, which nothing in the workflow will "
                    f"ever complete: {_ALLOWED}")
                raise ctx.fatal
            _issue_pending(ctx, loop)
    finally:
        _close(loop, main)


def _close(loop: WorkflowLoop, main: asyncio.Task[Any]) -> None:
    """Cancel the tasks a finished run left behind (an un-awaited gather member, say): they issue nothing."""
    if loop.stopping is None:
        loop.stopping = asyncio.CancelledError()
    for task in asyncio.all_tasks(loop):
        if not task.done():
            task.cancel()
    with contextlib.suppress(BaseException):  # the run's own outcome is already decided
        loop.step()
    if main.done() and not main.cancelled():
        main.exception()  # retrieved: asyncio would otherwise report it as never retrieved


def _issue_pending(ctx: Context, loop: WorkflowLoop) -> None:
    """Run the pending commands in issue order; consecutive activity calls as one parallel group."""
    batch, loop.pending = loop.pending, []
    i = 0
    while i < len(batch):
        j = i
        while j < len(batch) and batch[j].activity is not None:
            j += 1
        if j - i > 1:
            _run_group(ctx, loop, batch[i:j])
            i = j
        else:
            _answer(loop, batch[i].future, batch[i].run)
            i += 1
        if loop.stopping is not None or loop.broken is not None:
            return  # the rest were never reached: the run ends here


def _answer(loop: WorkflowLoop, future: asyncio.Future[Any], run: Callable[[], Any]) -> None:
    try:
        future.set_result(run())
    except Exception as exc:  # noqa: BLE001 - raised at the await, as a sync call would raise it
        future.set_exception(exc)
    except BaseException as exc:  # noqa: BLE001 - control flow: thrown in at the await, then raised by drive
        loop.stopping = exc
        future.set_exception(exc)


def _run_group(ctx: Context, loop: WorkflowLoop, group: Sequence[_Command]) -> None:
    tasks: list[Task] = []
    for command in group:
        assert command.activity is not None
        fn, args, kwargs = command.activity
        tasks.append(ctx.task(fn, *args, **kwargs))
    try:
        values: list[Any] = ctx.parallel(tasks, max_concurrency=len(tasks))
    except ParallelError as exc:
        values = exc.outcomes
    except Exception as exc:  # noqa: BLE001 - a cancel, a divergence: each member's await raises it
        for command in group:
            command.future.set_exception(exc)
        return
    except BaseException as exc:  # noqa: BLE001 - control flow: thrown in at the await, then raised by drive
        loop.stopping = exc
        for command in group:
            command.future.set_exception(exc)
        return
    for command, value in zip(group, values, strict=True):
        if isinstance(value, ActivityError):
            command.future.set_exception(value)
        else:
            command.future.set_result(value)


class AsyncContext:
    """What an `async def` workflow talks to: the Context's commands, awaitable.

    `await ctx.call_activity(...)`, `sleep`, `sleep_until`, `wait_signal`, `request_approval`,
    `call_workflow`, `start_workflow` and `parallel` take the same arguments as the Context's
    (keyword arguments are passed on as they are); `now()`, `uuid4()`, `random()`, `patched()`, `deprecate_patch()`,
    `set_event()` and `task()` stay plain calls, and take their slot where they are called.
    """

    def __init__(self, ctx: Context, loop: WorkflowLoop) -> None:
        self._ctx = ctx
        self._loop = loop

    @property
    def sync(self) -> Context:
        """The synchronous Context underneath (for helpers written for sync workflows' plain calls)."""
        return self._ctx

    @property
    def workflow_id(self) -> str:
        """The id of the workflow this context runs."""
        return self._ctx.workflow_id

    @property
    def is_replaying(self) -> bool:
        """True while the code replays recorded slots (see Context.is_replaying)."""
        return self._ctx.is_replaying

    @property
    def logger(self) -> WorkflowLog:
        """The workflow's logger, silent while replaying (see Context.logger)."""
        return self._ctx.logger

    def __getattr__(self, name: str) -> Any:
        # Plain calls (now, uuid4, random, patched, set_event, task, …) are the Context's own.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._ctx, name)

    async def call_activity(self, fn_or_name: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> Any:
        """`await` an activity (sync or async def): see Context.call_activity."""
        ctx = self._ctx
        return await self._loop.issue(lambda: ctx.call_activity(fn_or_name, *args, **kwargs),
                                      (fn_or_name, args, kwargs))

    async def parallel(self, tasks: Sequence[Task], *args: Any, **kwargs: Any) -> list[Any]:
        """`await` a group of `ctx.task(...)` calls run at once: see Context.parallel."""
        ctx = self._ctx
        return await self._loop.issue(lambda: ctx.parallel(tasks, *args, **kwargs))  # type: ignore[no-any-return]

    async def sleep(self, seconds: float) -> None:
        """`await` a durable sleep: see Context.sleep."""
        ctx = self._ctx
        await self._loop.issue(lambda: ctx.sleep(seconds))

    async def sleep_until(self, epoch_seconds: float) -> None:
        """`await` a durable sleep until a wall-clock time: see Context.sleep_until."""
        ctx = self._ctx
        await self._loop.issue(lambda: ctx.sleep_until(epoch_seconds))

    async def wait_signal(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """`await` the next signal of this name: see Context.wait_signal."""
        ctx = self._ctx
        return await self._loop.issue(lambda: ctx.wait_signal(name, *args, **kwargs))

    async def request_approval(self, action: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """`await` a person's answer: see Context.request_approval."""
        ctx = self._ctx
        return await self._loop.issue(  # type: ignore[no-any-return]
            lambda: ctx.request_approval(action, *args, **kwargs))

    async def call_workflow(self, workflow: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> Any:
        """`await` a child workflow's result: see Context.call_workflow."""
        ctx = self._ctx
        return await self._loop.issue(lambda: ctx.call_workflow(workflow, *args, **kwargs))

    async def start_workflow(self, workflow: Callable[..., Any] | str, input: Any = None, id: str | None = None,
                             *, timeout: float | None = None, parent_close: str = "cancel") -> AsyncChildHandle:
        """`await` the start of a child workflow, not its end: its handle. See Context.start_workflow.

        Starting takes a slot, so it is a pending command like any other: children started
        by tasks of one round take their slots in the order the tasks issued the starts.
        """
        ctx, loop = self._ctx, self._loop
        handle: ChildHandle = await loop.issue(lambda: ctx.start_workflow(
            workflow, input, id, timeout=timeout, parent_close=parent_close))
        return AsyncChildHandle(handle, loop)

    def gather(self, *calls: Awaitable[Any]) -> Awaitable[list[Any]]:
        """asyncio.gather over ctx calls (they run as one parallel group)."""
        return asyncio.gather(*calls)


class AsyncChildHandle:
    """A child started with `await ctx.start_workflow(...)` in an async workflow: ChildHandle's calls, awaitable.

    Each method takes the slot the sync handle's takes (child_result, child_signal, child_cancel).

    Attributes:
        id: the child's workflow id. workflow: its name.
    """

    def __init__(self, handle: ChildHandle, loop: WorkflowLoop) -> None:
        self._handle = handle
        self._loop = loop
        self.id = handle.id
        self.workflow = handle.workflow

    def __repr__(self) -> str:
        return f"AsyncChildHandle({self.id!r}, {self.workflow!r})"

    async def result(self) -> Any:
        """`await` the child's result: see ChildHandle.result."""
        return await self._loop.issue(self._handle.result)

    async def signal(self, name: str, payload: Any = None) -> None:
        """`await` sending the child a signal: see ChildHandle.signal."""
        handle = self._handle
        await self._loop.issue(lambda: handle.signal(name, payload))

    async def cancel(self, reason: str | None = None) -> None:
        """`await` asking the child to cancel: see ChildHandle.cancel."""
        handle = self._handle
        await self._loop.issue(lambda: handle.cancel(reason))


async def _within(coro: Coroutine[Any, Any, Any], timeout: float, attempt: int) -> Any:
    """Await `coro` for at most `timeout` seconds; ActivityTimeout (not its own TimeoutError) if cancelled then."""
    try:
        return await asyncio.wait_for(coro, timeout)
    except TimeoutError as exc:
        if isinstance(exc.__cause__, asyncio.CancelledError):  # wait_for's own: the coroutine was cancelled
            raise ActivityTimeout(f"attempt {attempt} ran past its timeout of {timeout:g} s (start to close);"
                                  " it was cancelled") from None
        raise


def run_coroutine(coro: Coroutine[Any, Any, Any], _slot: int = 0, _attempt: int = 1,
                  _timeout: float | None = None, _hold: bool = False) -> Any:
    """Await an async activity's coroutine where no worker owns a loop (the in-memory runner).

    On a loop made for the call; from a thread that already runs a loop (an application's),
    on a thread of its own, since a loop cannot be entered twice. With a `_timeout` (the
    activity's, start to close) the coroutine is cancelled when it passes, and the attempt
    fails with ActivityTimeout.
    """
    if _timeout is not None:
        coro = _within(coro, _timeout, _attempt)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: list[Any] = []
    errors: list[BaseException] = []

    context = contextvars.copy_context()  # current_activity() answers in the helper thread too

    def run() -> None:
        try:
            box.append(context.run(asyncio.run, coro))
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread below
            errors.append(exc)

    helper = threading.Thread(target=run, name="replaylog-async-activity")
    helper.start()
    helper.join()
    if errors:
        raise errors[0]
    return box[0]
