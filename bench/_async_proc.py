"""The worker process of the `async` workload: runs a database's workflows until idle, then prints
one JSON line: its wall time, the most threads it had, and its peak RSS."""

from __future__ import annotations

import json
import resource
import sys
import threading
import time

from bench.replaylog_runs import REGISTRY
from replaylog.engine.worker import Worker

# How often the thread count is sampled (seconds).
SAMPLE = 0.02


def main(db: str) -> None:
    """Run the worker until idle, sampling the thread count meanwhile."""
    peak = threading.active_count()
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(SAMPLE):
            peak = max(peak, threading.active_count())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    worker = Worker(db, REGISTRY)
    start = time.perf_counter()
    worker.run(until_idle=True)
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    # The sampler itself is not the worker's.
    print(json.dumps({"wall_s": wall, "peak_threads": peak - 1, "concurrency": worker.concurrency,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main(sys.argv[1])
