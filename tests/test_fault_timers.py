"""Timers and deadlines under kill -9: real worker processes on a real SQLite file and on PostgreSQL.

The promises under test: every timer fires once and never early, though the workers that
hold the sleepers are SIGKILLed; a timeout and a signal that race are decided once, so no
signal is lost or consumed twice.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from fault_harness import integrity, read_jsonl, report

from conftest import ROOT, cli_env, run_cli, wait_for
from replaylog.engine.errors import WorkflowClosedError
from replaylog.engine.store import open_store

APP = "timer_app"


class Workers:
    """A pool of `replaylog worker --app timer_app` subprocesses, one of which the test kills now and then."""

    def __init__(self, db: Path | str, tmp: Path, n: int) -> None:
        self.db, self.tmp = db, tmp
        self.env = cli_env(FAULT_LEDGER=str(tmp / "ledger.jsonl"))
        self.procs = [self._start() for _ in range(n)]
        self.kills = 0

    def _start(self) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"worker-{time.monotonic_ns()}.log").open("wb")
        return subprocess.Popen(
            [sys.executable, "-m", "replaylog", "--db", str(self.db), "worker", "--app", APP, "--quiet",
             "--lease", "2"], env=self.env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def kill_one(self, rng: random.Random) -> None:
        """SIGKILL a worker and start another in its place."""
        victim = rng.randrange(len(self.procs))
        self.procs[victim].send_signal(signal.SIGKILL)
        self.procs[victim].wait(30)
        self.kills += 1
        self.procs[victim] = self._start()

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)


def _statuses(db: Path | str) -> Counter[str]:
    with open_store(db, readonly=True) as s:
        return Counter(s.status_counts())


def _recorded_deadline(db: Path | str, wid: str) -> float | None:
    """The deadline the workflow's first wait recorded (its first slot), None before it is reached.

    Read from history rather than the row's wake_at: wake_at is cleared while the workflow is
    claimed and after its deadline fired, while the recorded deadline stays.
    """
    with open_store(db, readonly=True) as store:
        commands = store.list_commands(wid)
    return float(commands[0].value) if commands and commands[0].kind == "deadline" else None


def _timers_under_kills(tmp_path: Path, db: Path | str, workflows: int) -> None:
    rng = random.Random(16)
    with open_store(db) as store:
        plans = {store.start_workflow("naps", [round(rng.uniform(0.1, 1.2), 3) for _ in range(3)]): None
                 for _ in range(workflows)}
    pool = Workers(db, tmp_path, 2)
    try:
        deadline = time.monotonic() + 240
        while _statuses(db)["completed"] < len(plans):
            assert time.monotonic() < deadline, f"the timers did not all fire: {_statuses(db)}"
            time.sleep(rng.uniform(0.2, 0.7))
            pool.kill_one(rng)
            assert integrity(db) == "ok"
    finally:
        pool.stop()
    fired = Counter((line["wid"], line["slot"]) for line in read_jsonl(tmp_path / "ledger.jsonl"))
    late: list[float] = []
    with open_store(db, readonly=True) as store:
        for wid in plans:
            commands = store.list_commands(wid)
            assert [c.kind for c in commands] == ["timer", "activity"] * 3
            result = store.get_workflow(wid).result
            assert [r["i"] for r in result] == [0, 1, 2]
            for timer, after, recorded in zip(commands[::2], commands[1::2], result, strict=True):
                # Fired once: the code after the timer is recorded once, and ran live at least once.
                assert fired[(wid, after.slot)] >= 1
                assert recorded["at"] >= timer.value, "a timer fired before its recorded wake time"
                late.append(recorded["at"] - timer.value)
    # A live run of the activity after a timer that a kill interrupted may run again (the
    # at-least-once boundary of an activity); a timer that fired twice would double every one.
    assert sum(fired.values()) - len(fired) <= pool.kills
    report("timers_under_kill9", {"workflows": len(plans), "timers": len(late), "kills": pool.kills,
                                  "median_late_s": round(sorted(late)[len(late) // 2], 3)})


def test_every_timer_fires_once_and_never_early_while_workers_are_killed(tmp_path: Path, db: Path | str) -> None:
    """12 workflows of three timers each under kills (`make soak`: 40)."""
    _timers_under_kills(tmp_path, db, 12)


@pytest.mark.soak
def test_soak_every_timer_fires_once_and_never_early_while_workers_are_killed(tmp_path: Path,
                                                                              db: Path | str) -> None:
    """The soak variant (make soak): 40 workflows of three timers each."""
    _timers_under_kills(tmp_path, db, 40)


def _race(tmp_path: Path, db: Path | str, workflows: int) -> None:
    rng = random.Random(61)
    with open_store(db) as store:
        wids = [store.start_workflow("race", round(rng.uniform(0.5, 1.5), 3)) for _ in range(workflows)]
    pool = Workers(db, tmp_path, 2)
    try:
        # Every wait has recorded its deadline. On a loaded machine some have passed by now: their
        # first signal lands after the deadline, which is one of the two sides of the race.
        assert wait_for(lambda: all(_recorded_deadline(db, w) is not None for w in wids), timeout=240), \
            "a wait with a deadline was never reached"
        deadlines = {w: _recorded_deadline(db, w) or 0.0 for w in wids}
        with open_store(db) as store:
            # The first signal lands close to the deadline, before or after it; the second later.
            sends = sorted([(deadlines[w] + rng.uniform(-0.3, 0.3), w, "first") for w in wids]
                           + [(deadlines[w] + rng.uniform(0.5, 1.0), w, "second") for w in wids],
                           key=lambda s: s[0])
            refused: set[str] = set()
            next_kill = time.time() + rng.uniform(0.2, 0.6)
            for at, wid, payload in sends:
                while time.time() < at:
                    if time.time() >= next_kill:
                        pool.kill_one(rng)
                        next_kill = time.time() + rng.uniform(0.2, 0.6)
                    time.sleep(0.005)
                try:
                    store.send_signal(wid, "go", payload)
                except WorkflowClosedError:
                    # The deadline won and the first signal already went to the next wait: the
                    # workflow completed, and the refusal says this signal was not taken.
                    assert payload == "second"
                    refused.add(wid)
        deadline = time.monotonic() + 240
        while _statuses(db)["completed"] < len(wids):
            assert time.monotonic() < deadline, f"the races did not all end: {_statuses(db)}"
            time.sleep(0.2)
    finally:
        pool.stop()
    outcomes: Counter[str] = Counter()
    with open_store(db, readonly=True) as store:
        for wid in wids:
            first, second = store.get_workflow(wid).result
            signals = store.list_signals(wid)
            sent = ["first"] if wid in refused else ["first", "second"]
            assert [s.payload for s in signals] == sent  # every acknowledged signal is there
            kinds = [c.kind for c in store.list_commands(wid)]
            if first == "timeout":
                # The deadline won: the timeout is recorded, and the first signal went to the next wait;
                # a second one that came in time stays unconsumed, for a wait that never comes.
                assert second == "first" and kinds == ["deadline", "timeout", "activity"]
                assert [s.consumed for s in signals] == [True, False][:len(sent)]
            else:
                assert wid not in refused
                assert (first, second) == ("first", "second") and kinds == ["deadline", "activity"]
                assert [s.consumed for s in signals] == [True, True]
            outcomes["timeout" if first == "timeout" else "signal"] += 1
    report("timeout_signal_race", {"workflows": len(wids), "kills": pool.kills, **outcomes})
    done = run_cli(db, "worker", "--app", APP, "--until-idle", "--quiet", env=cli_env())
    assert done.returncode == 0, done.stderr


def test_a_timeout_and_a_signal_that_race_lose_no_signal_and_consume_none_twice(tmp_path: Path,
                                                                                db: Path | str) -> None:
    """20 races under kills (`make soak`: 60)."""
    _race(tmp_path, db, 20)


@pytest.mark.soak
def test_soak_a_timeout_and_a_signal_that_race_lose_no_signal_and_consume_none_twice(tmp_path: Path,
                                                                                     db: Path | str) -> None:
    """The soak variant (make soak): 60 races under kills."""
    _race(tmp_path, db, 60)
