"""Workflow code starts no threads: `threading.Thread.start` refuses, in one line, when workflow code calls it.

A thread started in a workflow's body runs outside the log: what it does is not recorded,
every replay starts it again, and whatever it hands back reaches the workflow at a time no
history holds. So the start is refused where the code makes it (as the async loop refuses
`asyncio.to_thread`), and the run fails with that error even if the code catches it.
Activities may start threads, and so may the engine (ctx.parallel's pool, a worker's own).

How workflow code is told from the rest, at no cost to a slot: `enter` marks the
run in progress in a context variable (a new thread starts with it unset; ctx.parallel's
tasks and async activities run in copies of it), and `install()` wraps `Thread.start`
once per process. Only a start in a marked context looks at the stack: walking up from
the caller, the first frame of the engine decides. A frame that calls the workflow's body
(`calls_workflow_code`: core's run of a sync body, the async loop's step) means workflow
code started the thread; any other engine frame (an activity's attempt, ctx.parallel, a
log handler under ctx.logger) means an activity or the engine did, and it starts.
A thread started with `_thread.start_new_thread` directly is not seen (the standard
library's pools and timers all start theirs through `threading.Thread`).
"""

from __future__ import annotations

import contextvars
import sys
import threading
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any, Protocol, TypeVar

from replaylog.engine.errors import ReplaylogError, WorkflowThreadError

F = TypeVar("F", bound=Callable[..., Any])

# The code objects of the engine's functions that call workflow code (`calls_workflow_code`).
_BODY_CALLERS: set[CodeType] = set()
# The modules whose frames sit between a caller and the thread it starts: skipped when naming the call.
_PLUMBING = ("threading", "concurrent.futures")


class _Run(Protocol):
    """What the guard needs of the workflow run in progress (engine.core.Context): where to make its error sticky."""

    fatal: ReplaylogError | None


_running: contextvars.ContextVar[tuple[str, bool, _Run] | None] = contextvars.ContextVar(
    "replaylog_workflow_code", default=None)

_install_lock = threading.Lock()
_original_start: Callable[[threading.Thread], None] | None = None


def calls_workflow_code(fn: F) -> F:
    """Mark an engine function as the one that calls a workflow's body: a thread start it reaches first is refused."""
    _BODY_CALLERS.add(fn.__code__)
    return fn


def enter(name: str, is_async: bool, run: _Run) -> contextvars.Token[tuple[str, bool, _Run] | None]:
    """Until `leave`, a thread started by the workflow code of `name` is refused and fails `run` (`run.fatal`)."""
    if _original_start is None:
        install()
    return _running.set((name, is_async, run))


def leave(token: contextvars.Token[tuple[str, bool, _Run] | None]) -> None:
    """End what `enter` began."""
    _running.reset(token)


def install() -> None:
    """Wrap `threading.Thread.start` with the guard, once per process (later calls do nothing)."""
    global _original_start
    if _original_start is not None:
        return
    with _install_lock:
        if _original_start is None:
            _original_start = threading.Thread.start
            threading.Thread.start = _guarded_start  # type: ignore[method-assign]


def _guarded_start(self: threading.Thread) -> None:
    running = _running.get()
    if running is not None:
        site = _workflow_site(sys._getframe(1))
        if site is not None:
            name, is_async, run = running
            err = WorkflowThreadError(_refusal(name, is_async, self, *site))
            if run.fatal is None:
                run.fatal = err  # sticky: code that catches it cannot go on as if the thread ran
            raise err
    assert _original_start is not None, "installed before the first start it guards"
    _original_start(self)


def _workflow_site(frame: FrameType | None) -> tuple[str, FrameType] | None:
    """(the call, the frame that made it) when workflow code started the thread; None for anything else."""
    call, site, callee = "Thread.start", None, None
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("replaylog.engine"):
            return (call, site) if site is not None and frame.f_code in _BODY_CALLERS else None
        if site is None and not module.startswith(_PLUMBING):
            site = frame
            if callee is not None:
                call = callee.f_code.co_qualname
        callee = frame
        frame = frame.f_back
    return None


def _refusal(name: str, is_async: bool, thread: threading.Thread, call: str, site: FrameType) -> str:
    target = getattr(thread, "_target", None)
    what = call + (f", target {getattr(target, '__qualname__', repr(target))}"
                   if target is not None and call == "Thread.start" else "")
    where = f"{site.f_code.co_filename.rsplit('/', 1)[-1]}:{site.f_lineno} (in {site.f_code.co_name})"
    instead = ("await ctx.call_activity, or several at once with asyncio.gather over ctx calls or ctx.parallel"
               if is_async else "ctx.call_activity, or several at once with ctx.parallel")
    return (f"workflow {name!r} started a thread in its code ({what} at {where}): a thread's work is not recorded"
            f" and every replay would run it again; run it in an activity instead ({instead})")
