"""Retention: how old a finished workflow may get, and pruning the older ones batch by batch.

`replaylog prune`, `Client.prune` and a worker's `--retention` all go through `prune`,
which asks the store for one bounded batch at a time (engine.store.shared.retention)
and pauses between batches, so workers' commits are never held back for long.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from replaylog.engine.errors import StoreError
from replaylog.engine.filters import parse_time
from replaylog.engine.store import OperatorStore, PruneBatch
from replaylog.engine.text import utc
from replaylog.engine.vocab import FINISHED

# Top-level workflows one batch looks at (each batch one write transaction): small enough that
# a live commit waiting behind a batch waits tens of milliseconds, not hundreds.
BATCH = 200
# After each batch the prune rests REST times as long as the batch took (at least PAUSE), so it
# holds the write lock at most 1 / (1 + REST) of the time and live workers' commits go on
# between batches (bench `prune`; docs/performance.md, "Retention", has what it costs them).
REST = 4.0
PAUSE = 0.02

def parse_cutoff(value: str | float | datetime | timedelta, now: float, what: str = "--finished-before") -> float:
    """The epoch time `value` names (engine.filters.parse_time: an age such as "30d", an ISO date or time, …).
    A time after `now` is refused (StoreError): nothing has finished in the future."""
    cutoff = parse_time(value, now, what)
    if cutoff > now:
        said = value if isinstance(value, str) else utc(cutoff)
        raise StoreError(f"{what} {said} is in the future (it is {utc(now)} now): nothing has finished then;"
                         " nothing was pruned")
    return cutoff


def parse_statuses(text: str | Iterable[str] | None) -> tuple[str, ...]:
    """The finished statuses named ("completed,failed" or a list); every finished status if none."""
    if text is None:
        return tuple(sorted(FINISHED))
    names = [s.strip() for s in (text.split(",") if isinstance(text, str) else text) if s.strip()]
    wrong = [s for s in names if s not in FINISHED]
    if wrong or not names:
        raise StoreError(f"--status {','.join(wrong) or repr('')}: only finished workflows are pruned;"
                         f" choose among {', '.join(sorted(FINISHED))}")
    return tuple(dict.fromkeys(names))


@dataclass
class PruneReport:
    """What a prune did (dry: would do)."""

    cutoff: float
    dry_run: bool
    pruned: int = 0  # top-level workflows deleted
    children: int = 0  # child workflows deleted with them
    kept: int = 0  # matched, but kept: a child of theirs is unfinished
    batches: int = 0
    first: list[str] = field(default_factory=list)  # the first ids pruned, to show
    kept_ids: list[str] = field(default_factory=list)  # the first ids kept, to show
    space: str | None = None  # what was done about the freed space (engine.store reclaim_space), in a line


def prune(batch_of: Callable[[int], PruneBatch], *, finished_before: float, dry_run: bool = False,
          pause: float = PAUSE, show: int = 10, stop: Callable[[], bool] = lambda: False) -> PruneReport:
    """Prune batch after batch until none is left: `batch_of(after)` runs one (see `store_batches`).

    `stop` is asked between batches (a worker stopping); what was pruned stays pruned.
    """
    report = PruneReport(finished_before, dry_run)
    after = 0
    while not stop():
        began = time.monotonic()
        done = batch_of(after)
        if done.last is None:
            break
        report.batches += 1
        report.pruned += len(done.pruned)
        report.children += done.children
        report.kept += len(done.kept)
        report.first.extend(done.pruned[:max(0, show - len(report.first))])
        report.kept_ids.extend(done.kept[:max(0, show - len(report.kept_ids))])
        after = done.last
        if not dry_run and pause > 0:
            time.sleep(max(pause, REST * (time.monotonic() - began)))
    return report


def store_batches(store: OperatorStore, *, finished_before: float, statuses: Collection[str] | None = None,
                  dry_run: bool = False, batch: int = BATCH) -> Callable[[int], PruneBatch]:
    """One batch of a prune on `store` at a time, as `prune` asks for them (statuses checked first)."""
    wanted = parse_statuses(statuses)
    return lambda after: store.prune_batch(finished_before=finished_before, statuses=wanted, after=after,
                                           batch=batch, dry_run=dry_run)
