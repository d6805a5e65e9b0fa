"""CpuFocus: workflow threads run engine code on one CPU while commits are crowded.

A speed trick, kept in this module. Only one thread runs Python at a time (the GIL).
When dozens of workflow threads wait on group commits, every slot hands the GIL to
another thread, and when that thread sleeps on the other CPU the hand-off (a cross-CPU
wake-up, an idle CPU brought back, caches gone cold) cost more CPU than the slot's own
work: a 2 vCPU machine spent ~50 us per slot, of which ~25 were hand-offs. So while
commits are crowded, a workflow thread moves itself to one CPU (os.sched_setaffinity)
after its activity returns, for the commit and the engine code up to its next activity,
and moves back to every CPU before that activity runs: activities, and any process they
start, are never confined. A lone workflow is never moved.

Measured gain (50 workflows x 1,000 slots on 2 vCPUs, group commit): ~17,000 ->
~24,000 slots/s; 16 workflows +10-15%; 8 workflows and fewer unchanged (they are never
crowded). `worker --no-cpu-focus` turns it off.

The worker calls two methods, `engine_code` after an activity returns and `activity`
before one starts; the committer measures the crowd (outcomes per commit).
"""

from __future__ import annotations

import logging
import os
from typing import Protocol

log = logging.getLogger("replaylog.worker")

# Outcomes per group commit (a moving average) from which workflow threads are kept on
# one CPU while they run engine code. Measured on 2 vCPUs: at 8 workflows (~4.5 per
# commit) focusing gained nothing, at 16 (~8.5) it gained 10-15%, at 50 (~25) 20-35%;
# below the crowd it cost up to 30% (a lone thread's fsync wake-up then must come to
# that one CPU).
CROWDED_COMMIT = 8.0


class FocusedThread(Protocol):
    """A workflow thread's state as CpuFocus keeps it: whether it is on the focus CPU."""

    focused: bool


class CpuFocus:
    """Moves workflow threads to one CPU and back (see the module's docstring).

    Args:
        index: picks the focus CPU among those allowed (the pid: worker processes on one
            machine should not all crowd onto the same CPU).
        crowded_at: outcomes per commit from which commits count as crowded.
    """

    def __init__(self, index: int, crowded_at: float = CROWDED_COMMIT) -> None:
        allowed = sorted(os.sched_getaffinity(0))
        self.spread: set[int] = set(allowed)
        self.one: set[int] = {allowed[index % len(allowed)]}
        self.crowded_at = crowded_at
        self.working = True  # False once the CPUs allowed changed under us

    @staticmethod
    def create(enabled: bool) -> CpuFocus | None:
        """A focus for this process, or None when off or where it cannot work (one CPU, not Linux)."""
        if not enabled or not hasattr(os, "sched_setaffinity"):
            return None
        try:
            if len(os.sched_getaffinity(0)) < 2:
                return None
            return CpuFocus(os.getpid())
        except OSError:
            return None

    def engine_code(self, thread: FocusedThread, crowd: float) -> None:
        """An activity returned: keep this thread on the focus CPU if commits are crowded."""
        if crowd >= self.crowded_at and not thread.focused and self.working:
            self._move(thread, True)

    def activity(self, thread: FocusedThread) -> None:
        """An activity is about to run: give this thread (and what it starts) every CPU."""
        if thread.focused:
            self._move(thread, False)

    def _move(self, thread: FocusedThread, one: bool) -> None:
        try:
            os.sched_setaffinity(0, self.one if one else self.spread)
        except OSError as exc:  # the CPUs allowed changed under us (a cgroup, taskset): stop focusing
            self.working = False
            thread.focused = False
            log.warning("stopped moving workflow threads between CPUs: %s", exc)
            return
        thread.focused = one
