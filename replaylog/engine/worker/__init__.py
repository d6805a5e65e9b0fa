"""The background worker: claim (lease) → load history once → run core → commit each outcome.

One worker process runs many workflows at once, one pooled thread each; one write
connection commits the outcomes of every thread that is waiting in one transaction. Each
outcome is durable before its workflow continues, and writes are fenced by the lease
epoch: a worker that lost its lease has its writes refused, so no slot is recorded twice.

- `loop.py`: `Worker`, the claim/renew loop, its thread pool and the upkeep of a database
  file on this host.
- `run.py`: `WorkflowRun`, one run of one claimed workflow (the Context's hooks).
- `committer.py`: `Committer`, group commit by leader hand-off.

`run.py` and `committer.py` are compiled by mypyc where the install could (engine.native).
"""

from replaylog.engine.worker.loop import DEFAULT_CONCURRENCY, DEFAULT_LEASE_TTL, Worker
from replaylog.engine.worker.run import WorkerStopping

__all__ = ["DEFAULT_CONCURRENCY", "DEFAULT_LEASE_TTL", "Worker", "WorkerStopping"]
