"""Signal storm: workflows × 10 signals from 4 concurrent senders while workers are killed.

The promise under test: every acknowledged signal is consumed exactly once, in send
order per name, and none is lost, though the workers consuming them are SIGKILLed.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from fault_harness import WorkerProc, fault_env, integrity, read_jsonl, reaping, report

from conftest import ROOT, run_cli
from replaylog.engine.store import open_store

WORKFLOWS = 200
PER_NAME = 5  # signals "a" and "b" each: 10 per workflow
SENDERS = 4


def _plans(wids: list[str], rng: random.Random) -> list[list[tuple[str, str, int]]]:
    """Each (workflow, name) chain goes to one sender, in order; each sender interleaves its
    chains at random, so the signals of a workflow arrive shuffled across names and senders."""
    chains: list[list[list[tuple[str, str, int]]]] = [[] for _ in range(SENDERS)]
    for wid in wids:
        for name in ("a", "b"):
            chains[rng.randrange(SENDERS)].append([(wid, name, i) for i in range(PER_NAME)])
    plans = []
    for mine in chains:
        plan: list[tuple[str, str, int]] = []
        live = [c for c in mine if c]
        while live:
            chain = rng.choices(live, weights=[len(c) for c in live])[0]
            plan.append(chain.pop(0))
            live = [c for c in live if c]
        plans.append(plan)
    return plans


def test_signal_storm_consumes_every_acknowledged_signal_once_in_order(tmp_path: Path) -> None:
    """40 workflows × 10 signals (`make soak`: 200)."""
    signal_storm(tmp_path, tmp_path / "signals.db", 40, lease=30)


@pytest.mark.soak
def test_soak_signal_storm(tmp_path: Path) -> None:
    """The soak variant (make soak): 200 workflows × 10 signals."""
    signal_storm(tmp_path, tmp_path / "signals.db", WORKFLOWS, lease=30)


def test_signal_storm_on_postgresql_consumes_every_acknowledged_signal_once_in_order(tmp_path: Path,
                                                                                    pg_url: str) -> None:
    """Smaller: senders and workers each on their own connections; killed workers' leases lapse (5 s)."""
    signal_storm(tmp_path, pg_url, 40, lease=5)


@pytest.mark.soak
def test_soak_signal_storm_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    """The soak variant on PostgreSQL (make soak): 200 workflows × 10 signals."""
    signal_storm(tmp_path, pg_url, WORKFLOWS, lease=5)


def signal_storm(tmp_path: Path, db: Path | str, workflows: int, lease: float) -> None:
    """The storm on `db` (a SQLite file or a PostgreSQL URL) with `workflows` collectors; checks every promise."""
    rng = random.Random(7)
    env = fault_env(tmp_path)
    store = open_store(db)
    wids = [store.start_workflow("collector", PER_NAME) for _ in range(workflows)]
    senders = []
    for k, plan in enumerate(_plans(wids, rng)):
        (tmp_path / f"plan-{k}.json").write_text(json.dumps(plan))
        senders.append(subprocess.Popen(
            [sys.executable, "-m", "fault_sender", str(db), str(tmp_path / f"plan-{k}.json"),
             str(tmp_path / f"acks-{k}.jsonl"), "0.03"], env=env, cwd=ROOT, stdin=subprocess.DEVNULL))
    kills = 0
    args = ("--quiet", "--lease", str(lease))
    with reaping([WorkerProc(db, tmp_path / "logs", env, *args) for _ in range(2)]) as procs:
        deadline = time.monotonic() + 600
        while any(s.poll() is None for s in senders):
            assert time.monotonic() < deadline, "the senders did not finish"
            time.sleep(rng.uniform(0.2, 0.8))
            victim = rng.randrange(2)
            procs[victim].kill()
            kills += 1
            assert integrity(db) == "ok"
            procs.append(WorkerProc(db, tmp_path / "logs", env, *args))
            procs[victim] = procs.pop()
        for p in procs:
            p.kill()
    assert [s.returncode for s in senders] == [0] * SENDERS
    done = run_cli(db, "worker", "--app", "fault_app", "--quiet", "--until-idle", timeout=300, env=env)
    assert done.returncode == 0, done.stderr

    acks = [a for k in range(SENDERS) for a in read_jsonl(tmp_path / f"acks-{k}.jsonl")]
    errors = [a for a in acks if "error" in a]
    assert not errors, f"{len(errors)} signal(s) refused, e.g. {errors[0]}"
    assert len(acks) == workflows * PER_NAME * 2
    acked: dict[tuple[str, int], tuple[str, int]] = {(a["wid"], a["seq"]): (a["name"], a["i"]) for a in acks}
    assert len(acked) == len(acks), "two acknowledgements carry the same sequence number"

    stored: dict[tuple[str, int], tuple[str, int]] = {}
    consumed_once = 0
    for wid in wids:
        row = store.get_workflow(wid)
        assert row.status == "completed", (wid, row.status, row.error)
        signals = store.list_signals(wid)
        for s in signals:
            stored[(wid, s.seq)] = (s.name, s.payload["i"])
            assert s.consumed, f"{wid} signal #{s.seq} was never consumed"
        # Consumed exactly once and in send order: the run saw each name's payloads in order,
        # each once, and they are exactly the ones stored.
        result: dict[str, list[dict[str, Any]]] = row.result
        for name in ("a", "b"):
            assert [p["i"] for p in result[name]] == list(range(PER_NAME)), (wid, name, result[name])
            sent_order = [s.payload["i"] for s in signals if s.name == name]
            assert sent_order == list(range(PER_NAME))
            consumed_once += len(result[name])
    store.close()
    assert stored == acked, "an acknowledged signal is missing, or a stored one was never acknowledged"
    per_wid: dict[str, int] = defaultdict(int)
    for wid, _seq in stored:
        per_wid[wid] += 1
    assert set(per_wid.values()) == {PER_NAME * 2}
    assert integrity(db) == "ok"
    name = "signal_storm" if isinstance(db, Path) else "signal_storm_postgresql"
    report(name, {"workflows": workflows, "signals_sent_and_acknowledged": len(acks),
                            "sender_processes": SENDERS, "worker_kills": kills,
                            "signals_consumed_exactly_once": consumed_once, "lost": 0, "consumed_twice": 0})
