"""The background worker: claim (lease) → load history once → run core → commit each outcome.

One worker process runs many workflows at once, one pooled thread each; one write
connection commits the outcomes of every thread that is waiting in one transaction. Each
outcome is durable before its workflow continues, and writes are fenced by the lease
epoch: a worker that lost its lease has its writes refused, so no slot is recorded twice.

- `loop.py`: `Worker`, the claim/renew loop, its thread pool and the upkeep of a database
  file on this host.
- `run.py`: `WorkflowRun`, one run of one claimed workflow (the Context's hooks).
- `committer.py`: `Committer`, group commit by leader hand-off.
- `native.py`: the two above compiled (mypyc) where the install could, and when their sources run instead.
"""

# Before run.py and committer.py are imported: their compiled modules, or their sources where those must run.
from replaylog.engine.worker import native

native.install()

from replaylog.engine.worker.loop import DEFAULT_CONCURRENCY, DEFAULT_LEASE_TTL, Worker  # noqa: E402
from replaylog.engine.worker.run import WorkerStopping  # noqa: E402

__all__ = ["DEFAULT_CONCURRENCY", "DEFAULT_LEASE_TTL", "Worker", "WorkerStopping"]
