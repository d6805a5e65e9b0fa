"""A worker's retention (`worker --retention 30d`): a thread that prunes old finished workflows now and then.

It has a store connection of its own (a store stays on its thread) and prunes through the
same bounded batches as `replaylog prune` (engine.retention), so the worker's claims and
commits take the write lock between batches. A failed pass is logged and tried again at
the next one: retention is upkeep, never a reason to stop running workflows.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from replaylog.engine.errors import ReplaylogError
from replaylog.engine.retention import prune, store_batches
from replaylog.engine.store import open_store
from replaylog.engine.text import utc

log = logging.getLogger("replaylog.worker")

# Seconds between two passes: an hour of lateness is nothing against a retention of days,
# and each pass that finds nothing costs one indexed read.
EVERY = 300.0


class Pruner(threading.Thread):
    """Prunes workflows finished more than `retention` seconds ago, at start and every `every` seconds."""

    def __init__(self, db: str | Path, retention: float, stopping: threading.Event, *, every: float = EVERY) -> None:
        super().__init__(name="replaylog-retention", daemon=True)
        self.db = db
        self.retention = retention
        self.every = every
        self._stopping = stopping
        self.pruned = 0  # workflows deleted so far (children included)

    def run(self) -> None:
        """Pass after pass until the worker stops."""
        while not self._stopping.is_set():
            self.prune_once()
            self._stopping.wait(self.every)

    def prune_once(self) -> None:
        """One pass: every workflow due, batch by batch; a failure is logged, not raised."""
        try:
            with open_store(self.db) as store:
                cutoff = time.time() - self.retention
                report = prune(store_batches(store, finished_before=cutoff), finished_before=cutoff,
                               stop=self._stopping.is_set)
        except ReplaylogError as exc:
            log.warning("retention: pruning failed, tried again in %.0f s: %s", self.every, exc)
            return
        done = report.pruned + report.children
        self.pruned += done
        if done:
            log.info("retention: pruned %d workflow(s) finished before %s", done, utc(cutoff))
