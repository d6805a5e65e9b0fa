"""Kill storm: worker processes SIGKILLed at random points, restarted each time.

The promise under test: an activity whose outcome was recorded never runs again; an
activity in flight at a kill runs at most once more (per kill); every workflow still
completes with the right result; the database stays sound after every kill; and a
sink that deduplicates by idempotency key sees exactly one effect per slot.
"""

from __future__ import annotations

import os
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from fault_app import expected_value
from fault_harness import WorkerProc, fault_env, integrity, read_jsonl, reaping, report

from conftest import run_cli, wait_for
from replaylog.engine.store import Store, open_store

STEPS = 10  # activities per workflow
CONCURRENCY = 8  # workflow threads per worker: the most slots one kill can leave in flight
WORKERS = 2


def _top_up(store: Store, expected: dict[str, int], rng: random.Random, count: int) -> None:
    for _ in range(count):
        seed = rng.randrange(1_000_000)
        wid = store.start_workflow("chain", {"n": STEPS, "seed": seed})
        expected[wid] = sum(expected_value(i, seed) for i in range(STEPS))


def _ledger_size(ledger: Path) -> int:
    return ledger.stat().st_size if ledger.exists() else 0


def _has_run(ledger: Path, pid: int, since: int = 0) -> bool:
    """Whether process `pid` has started an activity (the ledger line comes first thing in `effect`)
    in the ledger past offset `since` (where it stood when the process started: pids wrap)."""
    if not ledger.exists():
        return False
    with ledger.open("rb") as f:
        f.seek(since)
        return f'"pid": {pid},'.encode() in f.read()


def kill_storm(tmp: Path, kills_wanted: int, time_limit: float, seed: int, db: Path | str | None = None,
               lease: float = 60, workers: int = WORKERS) -> dict[str, Any]:
    """Run the storm and check every invariant; return the figures.

    `db`: a PostgreSQL URL to storm instead of a SQLite file. There a dead worker is found
    by its lapsed lease only (pids say nothing across hosts), so give a short `lease`.
    """
    if db is None:
        db = tmp / "storm.db"
    env = fault_env(tmp, FAULT_STEP_MAX="0.03")
    rng = random.Random(seed)
    store = open_store(db)
    expected: dict[str, int] = {}
    _top_up(store, expected, rng, 32)
    args = ("--quiet", "--concurrency", str(CONCURRENCY), "--lease", str(lease))
    killed: set[int] = set()  # every killed pid (a long storm's pids wrap: a set may hold fewer than were killed)
    kills = 0
    integrity_checks = 0
    started = time.monotonic()

    def keep_busy() -> None:
        """Top the work up, so kills keep landing on work in flight."""
        if store.count_workflows(status=("pending", "running")) < 16:
            _top_up(store, expected, rng, 24)

    ledger = tmp / "ledger.jsonl"

    def at_work(pid: int, since: int) -> bool:
        keep_busy()  # the other workers may run out of work while this one imports
        return _has_run(ledger, pid, since)

    born: dict[int, int] = {}  # a worker's pid -> the ledger's size when it was started
    with reaping([WorkerProc(db, tmp / "logs", env, *args) for _ in range(workers)]) as procs:
        while kills < kills_wanted:
            assert time.monotonic() - started < time_limit, f"only {kills} kills in {time_limit:.0f} s"
            # Random points: during import, mid-claim, mid-activity, mid-commit.
            time.sleep(rng.uniform(0.1, 0.8))
            victim = rng.randrange(workers)
            if len(killed) % 2:
                # Every other kill waits until its victim runs activities: on a loaded machine a
                # worker can spend the whole random delay importing, and the storm must also
                # land on activities in flight.
                pid = procs[victim].pid
                since = born.get(pid, 0)
                assert wait_for(lambda pid=pid, since=since: at_work(pid, since), timeout=120), procs[victim].log()
            procs[victim].kill()
            killed.add(procs[victim].pid)
            kills += 1
            verdict = integrity(db)
            integrity_checks += 1
            assert verdict == "ok", f"integrity_check after kill {kills}: {verdict}"
            size = _ledger_size(ledger)
            procs.append(WorkerProc(db, tmp / "logs", env, *args))
            born[procs[-1].pid] = size
            procs[victim] = procs.pop()
            keep_busy()
        storm_seconds = time.monotonic() - started
        for p in procs:
            p.kill()
            killed.add(p.pid)
        assert integrity(db) == "ok"
    # One clean worker finishes whatever the storm left.
    done = run_cli(db, "worker", "--app", "fault_app", "--quiet", "--until-idle", "--lease", "60",
                   timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert integrity(db) == "ok"

    # Every workflow completed with the right result.
    rows = {r.id: r for r in store.list_workflows(limit=-1)}
    assert set(rows) == set(expected)
    wrong = {wid: (r.status, r.result, r.error) for wid, r in rows.items()
             if r.status != "completed" or r.result != expected[wid]}
    assert not wrong, f"{len(wrong)} workflow(s) wrong, e.g. {next(iter(wrong.items()))}"

    # Who ran each recorded slot (the process is part of the recorded value: its pid, and a
    # token of its own, since a long storm's pids wrap and a later worker may get a killed one's).
    recorded: dict[tuple[str, int], str] = {}
    for wid in expected:
        cmds = store.list_commands(wid)
        assert [c.slot for c in cmds] == list(range(STEPS))
        for c in cmds:
            assert c.ok and c.name == "effect"
            recorded[(wid, c.slot)] = c.value["proc"]
    store.close()

    runs: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for line in read_jsonl(ledger):
        runs[(line["wid"], line["slot"])].append(line)
    assert set(runs) == set(recorded), "a run without a recorded slot, or a recorded slot that never ran"
    extra_by_process: dict[str, int] = defaultdict(int)
    duplicates = 0
    for key, proc in recorded.items():
        ran_in = [r["proc"] for r in runs[key]]
        # The recorded run happened exactly once.
        assert ran_in.count(proc) == 1, f"slot {key} ran {ran_in.count(proc)} times in the process that recorded it"
        others = [r for r in runs[key] if r["proc"] != proc]
        # Every other run was in flight in a process that was killed, once per process.
        pids = [r["pid"] for r in runs[key]]
        assert {r["pid"] for r in others} <= killed, f"slot {key} re-ran in a process that was never killed: {pids}"
        assert len({r["proc"] for r in others}) == len(others), f"slot {key} ran twice in one killed process: {pids}"
        duplicates += len(others)
        for r in others:
            extra_by_process[r["proc"]] += 1
        # The idempotency key is the same on every run of a slot, and derived from id and slot.
        assert {r["key"] for r in runs[key]} == {f"{key[0]}:{key[1]}"}
    # A kill interrupts at most one activity per workflow thread of the killed process.
    assert max(extra_by_process.values(), default=0) <= CONCURRENCY
    # The storm did hit activities in flight (not only workers still importing).
    assert extra_by_process, "no kill landed while an activity was running"

    # The sink keyed by idempotency key saw exactly one effect per slot.
    sink_lines = (tmp / "sink.txt").read_text().split()
    effects = set(sink_lines)
    assert effects == {f"{wid}:{slot}" for wid, slot in recorded}
    logs = "".join(p.read_text(errors="replace") for p in (tmp / "logs").iterdir())
    assert "Traceback" not in logs and "database is locked" not in logs, logs[-2000:]
    return {
        "kills": kills,  # (the final reaping of the survivors is not part of the storm)
        "storm_seconds": round(storm_seconds, 1),
        "integrity_checks_ok": integrity_checks + 2,
        "workflows": len(expected),
        "slots_recorded": len(recorded),
        "activity_runs": sum(len(v) for v in runs.values()),
        "kills_that_interrupted_an_activity": len(extra_by_process),
        "duplicate_runs_in_flight_at_a_kill": duplicates,
        "duplicate_runs_of_recorded_slots": 0,
        "sink_deliveries": len(sink_lines),
        "sink_effects_after_key_dedup": len(effects),
    }


def test_kill_storm_loses_nothing_and_reruns_only_what_was_in_flight(tmp_path: Path) -> None:
    """At least 16 SIGKILLs at random points, half of them while the victim runs activities
    (`make soak` makes 1,000)."""
    figures = kill_storm(tmp_path, kills_wanted=16, time_limit=600,
                         seed=int(os.environ.get("FAULT_SEED", "4")))
    assert figures["kills"] >= 16
    report("kill_storm", figures)


def test_kill_storm_on_postgresql_loses_nothing_and_reruns_only_what_was_in_flight(tmp_path: Path,
                                                                                   pg_url: str) -> None:
    """A small storm on PostgreSQL: 12 SIGKILLs of 3 workers (as many hosts would run them); dead workers'
    leases lapse (5 s) instead of being found by pid."""
    figures = kill_storm(tmp_path, kills_wanted=12, time_limit=600, seed=int(os.environ.get("FAULT_SEED", "15")),
                         db=pg_url, lease=5, workers=3)
    assert figures["kills"] >= 12
    report("kill_storm_postgresql", figures)


@pytest.mark.soak
def test_soak_kill_storm_survives_a_thousand_kills(tmp_path: Path) -> None:
    """The soak variant (make soak): at least 1,000 SIGKILLs."""
    figures = kill_storm(tmp_path, kills_wanted=1000, time_limit=3600,
                         seed=int(os.environ.get("FAULT_SEED", "1000")))
    assert figures["kills"] >= 1000
    report("soak_kill_storm", figures)


@pytest.mark.soak
def test_soak_kill_storm_on_postgresql_survives_a_thousand_kills(tmp_path: Path, pg_url: str) -> None:
    """The soak variant on PostgreSQL (make soak): at least 1,000 SIGKILLs, dead workers found by lapsed leases."""
    figures = kill_storm(tmp_path, kills_wanted=1000, time_limit=3 * 3600,
                         seed=int(os.environ.get("FAULT_SEED", "1015")), db=pg_url, lease=5, workers=3)
    assert figures["kills"] >= 1000
    report("soak_kill_storm_postgresql", figures)

