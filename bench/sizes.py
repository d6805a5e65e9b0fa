"""Workload sizes: the full run the issue specifies, and a smoke run that takes seconds."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Sizes:
    """How big each workload is.

    The `peer_*` sizes are smaller than replaylog's where DBOS would take minutes at
    its measured rate; the peer figures are rates (per second), so they compare.
    """

    single_slots: int = 5_000
    single_rounds: int = 3
    group_workflows: int = 50
    group_slots: int = 1_000
    group_rounds: int = 3
    resume_slots: int = 10_000
    resume_repeats: int = 5
    signal_samples: int = 200  # p99 of fewer than 100 samples is just the maximum
    short_workflows: int = 2_000
    short_slots: int = 3
    console_workflows: int = 1_000_000
    console_slots: int = 50_000
    console_refresh_s: float = 3.0
    peer_single_slots: int = 1_000
    peer_group_workflows: int = 50
    peer_group_slots: int = 40
    peer_resume_slots: int = 2_000
    peer_signal_samples: int = 50
    peer_short_workflows: int = 500
    timer_count: int = 200
    timer_spread_s: float = 10.0
    sleepers: int = 10_000
    sleepers_idle_s: float = 5.0
    wake_samples: int = 100
    queue_claims: int = 500
    async_workflows: int = 1_000
    async_activity_s: float = 1.0
    async_slots: int = 5_000
    async_rounds: int = 3
    prune_finished: int = 100_000
    prune_slots: int = 5
    prune_live_workflows: int = 32
    prune_live_slots: int = 1_000
    tracing_slots: int = 1_000
    tracing_rounds: int = 21
    # Untimed commits that grow a new database's WAL past its first checkpoint before a
    # floor or an engine run is timed (bench.floor.WARM_COMMITS), and the fewest rows a
    # group run's floor is timed on.
    warm_commits: int = 1_200
    floor_min_rows: int = 1_000
    # Alternated rounds of the queue row (claims, short workflows) and of the prune row
    # (the first prunes to its end, the others are stopped when the live work ends).
    queue_rounds: int = 3
    prune_rounds: int = 6

    def to_dict(self) -> dict[str, Any]:
        """The sizes as a plain dict for the JSON report."""
        return asdict(self)


FULL = Sizes()

SMOKE = Sizes(
    single_slots=100, single_rounds=1, group_workflows=4, group_slots=30, group_rounds=1, resume_slots=200,
    resume_repeats=2, signal_samples=5, short_workflows=40, short_slots=3, console_workflows=2_000, console_slots=500,
    console_refresh_s=0.5, peer_single_slots=20, peer_group_workflows=3, peer_group_slots=5, peer_resume_slots=30,
    peer_signal_samples=3, peer_short_workflows=10, timer_count=20, timer_spread_s=1.0, sleepers=200,
    sleepers_idle_s=1.0, wake_samples=5, async_workflows=40, async_activity_s=0.2, async_slots=200, async_rounds=1,
    queue_claims=20, prune_finished=2_000, prune_slots=3, prune_live_workflows=4, prune_live_slots=30,
    tracing_slots=30, tracing_rounds=3, warm_commits=20, floor_min_rows=50,
    queue_rounds=1, prune_rounds=2,
)
