"""A process that runs fault_app's workflows with the embedded worker, as an application would.

    python embedded_worker.py DB with     # `with Worker(...)`, then sleeps until killed
    python embedded_worker.py DB idle     # Worker(...).run(until_idle=True)
"""

from __future__ import annotations

import sys
import time

from replaylog import Worker

if __name__ == "__main__":
    db, mode = sys.argv[1], sys.argv[2]
    if mode == "with":
        # A short lease: on PostgreSQL a dead worker is found by its lapsed lease alone.
        with Worker(db, app="fault_app", concurrency=8, lease=1.0, focus_cpu=False):
            print("serving", flush=True)
            while True:
                time.sleep(1)
    else:
        Worker(db, app="fault_app", concurrency=8, focus_cpu=False).run(until_idle=True)
