"""`worker --until-idle` in the test process (run_cli_here) behaves as a process and leaves nothing behind."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path

import pytest
from in_process import like_a_process

from conftest import needs_process, run_cli
from replaylog.engine.workflow_log import WORKFLOW_LOGGER

APP_V1 = '''
from replaylog import activity, workflow


@activity
def shout(text):
    return text.upper()


@workflow
def greet(ctx, name):
    ctx.logger.info("greeting %s", name)
    return ctx.call_activity(shout, "v1 " + name)
'''


def _loggers_handlers() -> dict[str, list[logging.Handler]]:
    loggers = [lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    return {lg.name: list(lg.handlers) for lg in [logging.getLogger(), *loggers]}


def test_an_until_idle_worker_runs_here_and_one_that_needs_a_process_does_not() -> None:
    assert not needs_process(("worker", "--until-idle", "--app", "agent_app"))
    assert not needs_process(("--db", "x", "worker", "--quiet", "--until-idle", "--processes", "1"))
    assert needs_process(("worker", "--app", "agent_app"))  # runs until stopped
    assert needs_process(("worker", "--until-idle", "--processes", "2"))
    assert needs_process(("worker", "--until-idle", "--processes=3"))
    assert needs_process(("worker", "--until-idle", "--metrics-port", "9999"))
    assert needs_process(("console",))
    assert not needs_process(("list", "--json"))


def test_a_worker_run_here_leaves_signal_handlers_logging_modules_and_path_as_they_were(
        tmp_path: Path, db: Path | str) -> None:
    app = tmp_path / "greet_app.py"
    app.write_text(APP_V1)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    logs, path, modules = _loggers_handlers(), list(sys.path), set(sys.modules)
    threads = set(threading.enumerate())
    affinity = os.sched_getaffinity(0)
    for version in ("v1", "v2"):
        app.write_text(APP_V1.replace('"v1 "', f'"{version} "'))
        wid = run_cli(db, "start", "greet", '"ann"', "--app", str(app)).stdout.strip().splitlines()[-1]
        ran = run_cli(db, "worker", "--until-idle", "--app", str(app))
        assert ran.returncode == 0, ran.stderr
        # The workflow's log line once per run (the handler of the first run is gone), on the worker's stderr.
        assert ran.stderr.count("INFO greeting ann") == 1, ran.stderr
        shown = run_cli(db, "show", wid, "--json")
        assert f"{version.upper()} ANN" in shown.stdout  # the code as the file says now
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
    now = _loggers_handlers()
    assert {name: now[name] for name in logs} == logs
    assert not [h for name, hs in now.items() if name not in logs for h in hs if isinstance(h, logging.StreamHandler)]
    assert logging.getLogger(WORKFLOW_LOGGER).propagate
    assert sys.path == path
    assert not [m for m in set(sys.modules) - modules if m.startswith("replaylog_app_") or m == "greet_app"]
    assert set(threading.enumerate()) == threads
    assert os.sched_getaffinity(0) == affinity


def test_json_logs_of_workers_run_here_one_after_another_do_not_pile_up(db: Path | str) -> None:
    for _ in range(2):
        assert run_cli(db, "start", "logs_as_it_goes", "5", "--app", "agent_app").returncode == 0
        ran = run_cli(db, "worker", "--until-idle", "--log-format", "json", "--app", "agent_app")
        assert ran.returncode == 0, ran.stderr
        started = [line for line in ran.stdout.splitlines() if '"worker_started"' in line]
        assert len(started) == 1, ran.stdout


def test_like_a_process_refuses_a_command_that_leaves_a_thread_running(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("in_process.THREADS_END_WITHIN", 0.2)
    stop = threading.Event()
    try:
        with pytest.raises(AssertionError, match="left 1 thread"), like_a_process("a leak"):
            threading.Thread(target=stop.wait, name="leaked").start()
    finally:
        stop.set()


def test_like_a_process_refuses_and_undoes_a_command_that_moves_the_test_thread_between_cpus() -> None:
    before = os.sched_getaffinity(0)
    if len(before) < 2:
        pytest.skip("one CPU: nothing to move between")
    with pytest.raises(AssertionError, match="moved the test process's thread"), like_a_process("a move"):
        os.sched_setaffinity(0, {min(before)})
    assert os.sched_getaffinity(0) == before


def test_like_a_process_refuses_a_command_that_leaves_a_file_open(tmp_path: Path) -> None:
    kept = []
    try:
        with pytest.raises(AssertionError, match=r"left open: .*kept\.txt"), like_a_process("a leak"):
            kept.append((tmp_path / "kept.txt").open("w"))
    finally:
        for fh in kept:
            fh.close()


def test_like_a_process_puts_back_signal_handlers_and_closes_the_logging_handlers_a_command_added() -> None:
    before = signal.getsignal(signal.SIGTERM)
    added: list[logging.Handler] = []
    with like_a_process("a set-up"):
        signal.signal(signal.SIGTERM, lambda *_: None)
        handler = logging.StreamHandler(sys.stderr)
        logging.getLogger(WORKFLOW_LOGGER).addHandler(handler)
        added.append(handler)
        assert not logging.getLogger().handlers  # a new interpreter's root has none
    assert signal.getsignal(signal.SIGTERM) is before
    assert added[0] not in logging.getLogger(WORKFLOW_LOGGER).handlers
