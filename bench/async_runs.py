"""Async workflows: many awaiting I/O at once in one worker process, and the slot path's cost against sync.

- `waiting`: N workflows, each awaiting one async activity that sleeps S seconds, run by one
  worker process (`bench._async_proc`): wall time from the worker's start to the last one
  finished, the most threads the process had, and its peak RSS. A workflow that held a
  thread while awaiting would take N / 64 × S seconds with the default 64 threads.
- `slots`: workload 1 (one workflow, trivial activities) as an async workflow and as a sync
  one, in one run, alternating rounds: the async/sync ratio of slots per second.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.replaylog_runs import REGISTRY, fresh_db
from bench.sizes import Sizes
from replaylog.engine.store import open_store
from replaylog.engine.worker import Worker


def waiting(workdir: Path, sizes: Sizes) -> dict[str, Any]:
    """N workflows awaiting an S-second async activity each, in one worker process."""
    db = fresh_db(workdir, "async-waiting")
    n, seconds = sizes.async_workflows, sizes.async_activity_s
    with open_store(db) as store:
        for _ in range(n):
            store.start_workflow("awaits_io", seconds)
    proc = subprocess.run([sys.executable, "-m", "bench._async_proc", str(db)], capture_output=True, text=True,
                          timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the worker process failed: {proc.stderr[-2000:]}")
    figure: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    with open_store(db, readonly=True) as store:
        done = sum(1 for r in store.list_workflows(limit=-1) if r.status == "completed")
    if done != n:
        raise RuntimeError(f"{done} of {n} workflows completed")
    figure.update(workflows=n, activity_s=seconds, target=f"< {3 * seconds:g} s wall, threads bounded",
                  met=figure["wall_s"] < 3 * seconds)
    return figure


def _slots_per_s(workdir: Path, workflow: str, n: int, name: str) -> float:
    db = fresh_db(workdir, name)
    with open_store(db) as store:
        store.start_workflow(workflow, n)
    worker = Worker(db, REGISTRY)
    start = time.perf_counter()
    worker.run(until_idle=True)
    wall = time.perf_counter() - start
    if worker.completed != 1:
        raise RuntimeError(f"{workflow} did not complete")
    return n / wall


def slots(workdir: Path, sizes: Sizes) -> dict[str, Any]:
    """Workload 1 as an async and as a sync workflow in rounds that alternate which goes first, in one run."""
    n = sizes.async_slots
    sync_rates, async_rates = [], []
    for r in range(sizes.async_rounds):
        rates = {wf: _slots_per_s(workdir, wf, n, f"slots-{wf}-{r}")
                 for wf in (("chain", "achain") if r % 2 == 0 else ("achain", "chain"))}
        sync_rates.append(rates["chain"])
        async_rates.append(rates["achain"])
    ratios = [a / s for a, s in zip(async_rates, sync_rates, strict=True)]
    ratio = statistics.median(ratios)
    return {"slots": n, "sync_slots_per_s": statistics.median(sync_rates),
            "async_slots_per_s": statistics.median(async_rates), "ratio_async_vs_sync": ratio,
            "round_ratios": ratios, "target": ">= 0.8 of sync", "met": ratio >= 0.8}


def async_bench(workdir: Path, sizes: Sizes) -> dict[str, Any]:
    """Both async figures; met when both are."""
    wait, slot = waiting(workdir, sizes), slots(workdir, sizes)
    return {"waiting": wait, "slots": slot, "met": bool(wait["met"] and slot["met"])}
