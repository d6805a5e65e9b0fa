"""A replaylog worker process that waits at a barrier, so process start-up is not timed.

Run as `python -m bench._worker_proc DB`: it imports everything, prints "ready",
waits for a line on stdin, serves until idle, and prints one JSON line with the
time it finished.
"""

from __future__ import annotations

import json
import sys
import time

import bench.app
from replaylog.engine.app import Registry
from replaylog.engine.worker import Worker


def main() -> None:
    """Serve the database in argv[1] until idle, after the parent says go."""
    db = sys.argv[1]
    concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    worker = Worker(db, Registry.from_module(bench.app, "bench.app"), concurrency=concurrency)
    print("ready", flush=True)
    sys.stdin.readline()
    worker.run(until_idle=True)
    end = time.time()
    print(json.dumps({"end": end, "completed": worker.completed, "batches": worker.committer.batches,
                      "commits": worker.committer.commits}), flush=True)


if __name__ == "__main__":
    main()
