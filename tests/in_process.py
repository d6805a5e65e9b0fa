"""`like_a_process`: run a command in this test process and leave the process as it was.

A command run through `replaylog.cli.main` in the test process (conftest's `run_cli_here`)
changes what a process of its own would have thrown away on exit: `worker` installs SIGTERM
and SIGINT handlers and logging handlers bound to the stderr of that moment, imports the
app (a file app under a generated module name, beside its folder on sys.path), and runs
threads that may move themselves between CPUs. This puts all of it back, and fails the
call if it left a thread running or a file or connection open.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from replaylog.engine import thread_guard

ROOT = Path(__file__).resolve().parent.parent
_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Where code that is not an app lives: replaylog itself, the standard library, installed packages.
_NOT_APPS = tuple({str(ROOT / "replaylog"), sys.prefix, sys.base_prefix, sys.exec_prefix})
# The modules that set up loggers the command line configures (a NullHandler, on import).
_CONFIGURE_LOGGING = ("replaylog.engine.worker.loop", "replaylog.engine.workflow_log", "replaylog.cli")
# How long threads a command started may take to end once it returned (a loaded machine).
THREADS_END_WITHIN = 30.0


@dataclass
class _LoggerState:
    handlers: list[logging.Handler]
    level: int
    propagate: bool
    disabled: bool


def _loggers() -> dict[str, logging.Logger]:
    found = {name: lg for name, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)}
    found[""] = logging.getLogger()
    return found


def _logging_state() -> dict[str, _LoggerState]:
    return {name: _LoggerState(list(lg.handlers), lg.level, lg.propagate, lg.disabled)
            for name, lg in _loggers().items()}


def _restore_logging(saved: dict[str, _LoggerState], disable: int, streams: tuple[object, ...]) -> None:
    """Every logger that was there as it was, and the handlers added on `streams` (the command's
    stdout and stderr, about to close) closed and gone. A handler added otherwise stays (a
    module imported meanwhile set it up, as it would in every process).

    A logger made meanwhile keeps what the module that made it set up on import (a library's
    NullHandler), unless it wrote to those streams: then it is as a new logger is.
    """
    for name, lg in _loggers().items():
        added = [h for h in lg.handlers if isinstance(h, logging.StreamHandler) and h.stream in streams]
        for handler in added:
            handler.close()
            lg.removeHandler(handler)
        state = saved.get(name)
        if state is None and added:
            state = _LoggerState([h for h in lg.handlers if h not in added], logging.NOTSET, True, False)
        if state is not None:
            lg.handlers[:] = state.handlers + [h for h in lg.handlers if h not in state.handlers]
            lg.setLevel(state.level)
            lg.propagate, lg.disabled = state.propagate, state.disabled
    logging.disable(disable)


def is_app_module(module: ModuleType | None) -> bool:
    """Whether a module is an app's (or what an app imported beside it), not replaylog's or an installed one."""
    if module is None:
        return False
    if module.__name__.startswith("replaylog_app_"):
        return True
    file = getattr(module, "__file__", None)
    return file is not None and not os.path.realpath(file).startswith(_NOT_APPS)


def _forget_app_module(name: str) -> None:
    """Drop a module an app imported, with what it registered, so the next import executes it afresh."""
    from replaylog.engine import queues, retry
    from replaylog.engine.core import forget_decorated

    del sys.modules[name]
    forget_decorated(name)
    queues.forget_declared(name)
    retry._APP_DEFAULTS.pop(name, None)


def _open_files() -> dict[int, str]:
    """This process's open file descriptors and what each is (a file's path, a socket, a pipe)."""
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, gone already
            found[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
    return found


def _described(fd: int, target: str) -> str:
    """An open descriptor as a failure names it: what it is, what an epoll watches, whose socket it is."""
    said = f"{target} (fd {fd}"
    with contextlib.suppress(OSError):
        if target == "anon_inode:[eventpoll]":
            with open(f"/proc/self/fdinfo/{fd}") as info:
                watched = [line.split()[1] for line in info if line.startswith("tfd:")]
            said += f", watching fds {', '.join(watched) or 'none'}"
        elif target.startswith("socket:["):
            inode = target[len("socket:["):-1]
            for table in ("unix", "tcp", "tcp6"):
                with open(f"/proc/net/{table}") as rows:
                    for row in rows:
                        cells = row.split()
                        if table == "unix" and len(cells) >= 7 and cells[6] == inode:
                            said += f", unix {cells[7] if len(cells) > 7 else '(unnamed)'}"
                        elif table != "unix" and len(cells) >= 10 and cells[9] == inode:
                            said += f", {table} {cells[1]} -> {cells[2]}"
    return said + ")"


def _sqlite_file(target: str) -> bool:
    """Whether an open file is an SQLite database's (or its -wal/-shm).

    Not counted as left open: SQLite keeps the descriptor of a closed connection open while
    another connection of the process holds a lock on that file, and gives it to the next
    connection that opens it; a test's own connection (or one it left for the garbage
    collector) makes what a command leaves open on it unknowable. A leak shows in the
    worker's own tests, which run in a process.
    """
    return target.endswith((".db", ".db-wal", ".db-shm", ".sqlite", ".sqlite3"))


def _affinity() -> set[int] | None:
    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None


@contextlib.contextmanager
def _threads_started() -> Iterator[list[threading.Thread]]:
    """The threads started meanwhile by this thread or by threads it started (not by threads already running)."""
    ours: list[threading.Thread] = []
    here = {threading.current_thread()}
    start = threading.Thread.start

    def tracked(thread: threading.Thread) -> None:
        if threading.current_thread() in here:
            here.add(thread)
            ours.append(thread)
        start(thread)

    threading.Thread.start = tracked  # type: ignore[method-assign]
    try:
        yield ours
    finally:
        threading.Thread.start = start  # type: ignore[method-assign]


@contextlib.contextmanager
def like_a_process(what: str, check: bool = True) -> Iterator[None]:
    """Run the body as a command in a new process would run, then put this process back as it was.

    Logging starts as in a new interpreter (no handler on the root; pytest's come back after),
    so the command's own set-up decides where its lines go. Afterwards the SIGTERM/SIGINT
    handlers, every logger (handlers the command added are closed: they write to streams that
    are about to close), sys.path and this thread's CPU affinity are as before, and the app
    modules the command imported are forgotten (the next command imports the app again, as a
    new process would). AssertionError if the command left a thread running (after a grace of
    THREADS_END_WITHIN seconds), a file or connection open (an SQLite file's aside:
    `_sqlite_file`), or changed the CPU affinity, unless `check` is False (for a command that
    starts nothing, beside threads of the test's own that may open files meanwhile).
    """
    for name in _CONFIGURE_LOGGING:  # their loggers' own set-up, as a new process has it on import
        importlib.import_module(name)
    # The workflow thread guard wraps Thread.start once per process, on the first run: installed
    # under `_threads_started`'s own wrapper, it would be taken away with it, for every later test.
    thread_guard.install()
    handlers = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    logs, disable = _logging_state(), logging.root.manager.disable
    root = logging.getLogger()
    path, modules = list(sys.path), set(sys.modules)
    affinity, files = _affinity(), _open_files()
    importlib.invalidate_caches()  # a file an earlier test wrote where an app imports from
    root.handlers[:] = []
    root.setLevel(logging.WARNING)
    try:
        with _threads_started() as started:
            yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        _restore_logging(logs, disable, (sys.stdout, sys.stderr))
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            if is_app_module(sys.modules.get(name)):
                _forget_app_module(name)
        moved = _affinity()
        if moved != affinity and affinity is not None:
            os.sched_setaffinity(0, affinity)
    if not check:
        return
    problems = []
    if moved != affinity:
        problems.append(f"moved the test process's thread from CPUs {affinity} to {moved}")
    deadline = time.monotonic() + THREADS_END_WITHIN
    while (left := [t for t in started if t.is_alive()]) and time.monotonic() < deadline:
        time.sleep(0.01)
    if left:
        problems.append(f"left {len(left)} thread(s) running: {', '.join(sorted(t.name for t in left))}")
    opened = {fd: target for fd, target in _open_files().items()
              if files.get(fd) != target and not _sqlite_file(target)}
    if opened:
        threads = ", ".join(sorted(t.name for t in threading.enumerate()))
        problems.append(f"left open: {', '.join(sorted(_described(fd, t) for fd, t in opened.items()))}"
                        f" (threads alive: {threads})")
    if problems:
        raise AssertionError(f"`replaylog {what}` in the test process {'; '.join(problems)}")
