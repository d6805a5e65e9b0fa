"""Queues: what a queue costs a claim, and workload 5 (short workflows) through a queue of 64.

Both figures are ratios taken in one run, queued against unqueued on the same disk at the
same time: the machine is shared, and absolute rates drift by more than the difference.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from bench.app import SHORT_QUEUE
from bench.replaylog_runs import fresh_db, run_worker_processes
from bench.sizes import Sizes
from replaylog.engine.queues import Queue
from replaylog.engine.store import open_store

# The claim workload's queue: limits that never stop a claim, so only the admission's reads are paid.
_CLAIM_QUEUE = Queue("claims", concurrency=1_000_000, rate_limit=(1_000_000_000, 60.0))


def _claim_ms(db: Path, n: int, queue: Queue | None) -> tuple[float, float]:
    """Median milliseconds of one claim of one workflow, over `n` started workflows (on `queue`, or
    none): (wall time, CPU time of this process).

    Each claimed workflow is terminated after its claim is timed, so the queue's count of
    admitted workflows stays where a running system keeps it. The CPU time is the claim's own
    work: the wall time is mostly the commit's fsync, which a shared disk makes drift by
    several times between rounds.
    """
    walls, cpus = [], []
    with open_store(db) as store:
        for _ in range(n):
            store.start_workflow("chain", 1, queue=queue)
        for _ in range(n):
            w0, c0 = time.perf_counter(), time.process_time()
            (claim,) = store.claim("bench-claimer", ttl=60.0, limit=1, names={"chain"})
            cpus.append(time.process_time() - c0)
            walls.append(time.perf_counter() - w0)
            store.terminate_workflow(claim.id)
    return statistics.median(walls) * 1000, statistics.median(cpus) * 1000


def claim_cost(workdir: Path, sizes: Sizes) -> dict[str, Any]:
    """A claim of a queued workflow against a claim of an unqueued one, in alternating rounds."""
    n = sizes.queue_claims
    plain, queued = [], []
    for i in range(sizes.queue_rounds):
        plain.append(_claim_ms(fresh_db(workdir, f"claim-plain-{i}"), n, None))
        queued.append(_claim_ms(fresh_db(workdir, f"claim-queued-{i}"), n, _CLAIM_QUEUE))
    unqueued_ms, queued_ms = (statistics.median(w for w, _ in plain), statistics.median(w for w, _ in queued))
    unqueued_cpu, queued_cpu = (statistics.median(c for _, c in plain), statistics.median(c for _, c in queued))
    return {"claims": n, "unqueued_ms": unqueued_ms, "queued_ms": queued_ms, "ratio": queued_ms / unqueued_ms,
            "unqueued_cpu_ms": unqueued_cpu, "queued_cpu_ms": queued_cpu, "cpu_ratio": queued_cpu / unqueued_cpu}


def _short_rate(db: Path, n: int, slots: int, queue: Queue | None) -> float:
    """Workflows per second of one worker process over `n` started short workflows (on `queue`, or none)."""
    with open_store(db) as store:
        for _ in range(n):
            store.start_workflow("chain", slots, queue=queue)
    wall, _ = run_worker_processes(db, 1)
    with open_store(db) as store:
        done = store.status_counts()["completed"]
    if done != n:
        raise RuntimeError(f"{done} of {n} short workflows completed ({'on a queue' if queue else 'unqueued'})")
    return n / wall


def short_queued(workdir: Path, sizes: Sizes) -> dict[str, Any]:
    """Workload 5 (N short workflows, one worker process) through a queue of concurrency 64, and not.

    Rounds alternate which goes first, and the ratio is the median of the rounds' ratios:
    on a shared machine the load moves within a round's minute by more than the difference.
    """
    n, slots = sizes.short_workflows, sizes.short_slots
    ratios, plain, queued = [], [], []
    for i in range(sizes.queue_rounds):
        order: list[Queue | None] = [None, SHORT_QUEUE] if i % 2 == 0 else [SHORT_QUEUE, None]
        rates = {q is not None: _short_rate(fresh_db(workdir, f"short-{i}-{q is not None}"), n, slots, q)
                 for q in order}
        plain.append(rates[False])
        queued.append(rates[True])
        ratios.append(rates[True] / rates[False])
    return {"workflows": n, "unqueued_per_s": statistics.median(plain), "queued_per_s": statistics.median(queued),
            "ratio": statistics.median(ratios), "round_ratios": ratios}


def queues(workdir: Path, sizes: Sizes) -> dict[str, Any]:
    """Both queue figures; met when workload 5 through the queue keeps 80% of its unqueued rate."""
    claims, short = claim_cost(workdir, sizes), short_queued(workdir, sizes)
    return {"claim": claims, "short": short, "target": "queued short workflows >= 0.8 of unqueued",
            "met": short["ratio"] >= 0.8}
