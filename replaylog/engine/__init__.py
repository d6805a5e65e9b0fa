"""The engine behind `replaylog`: the replay core, the store and the worker.

An implementation package: applications import from `replaylog` (the curated public
surface); what is not named there may change without notice.
"""

# Before any of the per-slot modules is imported: their compiled forms, or their sources where those must run.
from replaylog.engine import native

native.install()
