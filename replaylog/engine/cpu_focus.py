"""CpuFocus: workflow threads run engine code on one CPU while commits are crowded.

A speed trick, kept in this module. Only one thread runs Python at a time (the GIL).
When dozens of workflow threads wait on group commits, every slot hands the GIL to
another thread, and when that thread sleeps on the other CPU the hand-off (a cross-CPU
wake-up, an idle CPU brought back, caches gone cold) cost more CPU than the slot's own
work: a 2 vCPU machine spent ~50 us per slot, of which ~25 were hand-offs. So while
commits are crowded, a workflow thread moves itself to one CPU (os.sched_setaffinity)
after its activity returns, for the commit and the engine code up to its next activity,
and moves back to every CPU before that activity runs, so that an activity, and any
thread or process it starts, has every CPU. A lone workflow is never moved.

One exception: an activity whose last QUICK_RUNS attempts on this worker each returned
within QUICK_S stays on the focus CPU. That is less time than starting a thread or a
process takes (95-260 us on the 2 vCPUs measured; tens of us on fast hardware), so such
an activity starts neither, and moving it out and back cost two system calls and a
cross-CPU wake-up for a call of a few microseconds. Its first attempts, any attempt after
a slow one, an attempt under a timeout (it runs on a thread of its own) and a parallel
group's tasks always get every CPU. Should a quick activity this once start a process,
that process keeps the one CPU (and SCHED_BATCH, below): `worker --no-cpu-focus` if that
matters.

Measured gain (50 workflows x 1,000 slots on 2 vCPUs, group commit): ~17,000 ->
~24,000 slots/s; 16 workflows +10-15%; 8 workflows and fewer unchanged (they are never
crowded). Keeping quick activities on the focus CPU, with the committer's baton
(engine.worker.committer): ~21,000 -> ~31,000 (docs/performance.md). `worker
--no-cpu-focus` turns it off.

While focused, a thread is also put under the SCHED_BATCH policy (back to SCHED_OTHER as
it leaves the focus CPU): a thread woken from a commit then no longer preempts the one
running, which holds the GIL, only to find the GIL taken and sleep again; it runs when the
running one sleeps. This applies only where the worker's threads start under SCHED_OTHER
(a real-time or idle policy set by the user is left as it is) and stops at the first
refusal. Measured on 2,000 three-slot workflows in one worker (2 vCPUs), in turns with
the focus alone: involuntary context switches ~3,650 -> ~820 a run, voluntary ~14,800 ->
~12,700, workflows/s +7% run by run (median of twelve pairs; docs/performance.md).

The worker's loop thread (claims, looks at the store, and commits it leads) follows the
crowd too: on the focus CPU under SCHED_BATCH while commits are crowded, back when they
are not, and as it was once the loop ends. Left on every CPU, it took the GIL from the
other CPU at every statement it ran, and the focused threads woken meanwhile found the
GIL taken. Measured as above, ten pairs in turns: workflows/s +20% run by run, CPU -21%,
voluntary context switches ~14,600 -> ~7,900 a run. It is moved only where it runs
on every CPU the focus may use, under SCHED_OTHER: a thread its caller pinned is left
where it is. A thread started by a focused thread inherits its CPU and policy; a new
workflow thread takes that as focused (`adopt`), so its first activity moves it out.

The worker calls these: `engine_code` after an activity returns, `activity` before one
starts, `spread` before the thread starts threads of its own, `adopt` as a workflow thread
starts, and `follows` as its loop starts (the LoopThread it answers `follow`s once a pass
and `unfollow`s as the loop ends); the committer measures the crowd (outcomes per commit).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Protocol

log = logging.getLogger("replaylog.worker")

# Outcomes per group commit (a moving average) from which workflow threads are kept on
# one CPU while they run engine code. Measured on 2 vCPUs: at 8 workflows (~4.5 per
# commit) focusing gained nothing, at 16 (~8.5) it gained 10-15%, at 50 (~25) 20-35%;
# below the crowd it cost up to 30% (a lone thread's fsync wake-up then must come to
# that one CPU).
CROWDED_COMMIT = 8.0

# An activity stays on the focus CPU once its last QUICK_RUNS attempts each returned within
# QUICK_S seconds (from its start to its outcome's record): see the module's docstring.
# The time counts the engine code up to the record and any interruption besides the call:
# at 20 us, 6% of the attempts of a call of ~1 us (2,000 three-slot workflows, 2 vCPUs)
# read slower and each ended the streak, ~1,500-2,100 moves a run; at 50 us, 0.3%
# (`Worker.run` in turns, ten pairs: CPU -6%, workflows/s +3% run by run).
QUICK_S = 50e-6
QUICK_RUNS = 8

# The scheduling policies a focused thread moves between (Linux only; None elsewhere).
_BATCH: int | None = getattr(os, "SCHED_BATCH", None)
_OTHER: int | None = getattr(os, "SCHED_OTHER", None)


class FocusedThread(Protocol):
    """A workflow thread's state as CpuFocus keeps it: whether it is on the focus CPU, and its activity's timing."""

    focused: bool
    timing: str | None  # the activity started while the thread was focused, timed until its outcome
    began: float  # when that activity started (time.perf_counter)


class LoopThread:
    """The worker loop's thread as its CpuFocus moves it (a FocusedThread that runs no activity)."""

    __slots__ = ("began", "focus", "focused", "timing")

    def __init__(self, focus: CpuFocus) -> None:
        self.focus = focus
        self.focused = False
        self.timing: str | None = None
        self.began = 0.0

    def follow(self, crowd: float) -> None:
        """Once a pass of the worker's loop: on the focus CPU while commits are crowded, on every CPU when not."""
        focus = self.focus
        crowded = crowd >= focus.crowded_at and focus.working
        if crowded != self.focused:
            focus._move(self, crowded)

    def unfollow(self) -> None:
        """The worker's loop ends: its thread goes back to every CPU and SCHED_OTHER."""
        if self.focused:
            self.focus._move(self, False)


class CpuFocus:
    """Moves workflow threads to one CPU and back (see the module's docstring).

    Args:
        index: picks the focus CPU among those allowed (the pid: worker processes on one
            machine should not all crowd onto the same CPU).
        crowded_at: outcomes per commit from which commits count as crowded.
        quick_s, quick_runs: an activity stays on the focus CPU once its last `quick_runs`
            attempts each returned within `quick_s` seconds.
    """

    def __init__(self, index: int, crowded_at: float = CROWDED_COMMIT, quick_s: float = QUICK_S,
                 quick_runs: int = QUICK_RUNS) -> None:
        allowed = sorted(os.sched_getaffinity(0))
        self.every: set[int] = set(allowed)
        self.one: set[int] = {allowed[index % len(allowed)]}
        self.crowded_at = crowded_at
        self.quick_s = quick_s
        self.quick_runs = quick_runs
        self.working = True  # False once the CPUs allowed changed under us
        # (SCHED_BATCH, SCHED_OTHER, their priority) while focused threads move between them: only
        # where threads start under SCHED_OTHER (see the docstring); None once refused.
        self.batch: tuple[int, int, os.sched_param] | None = None
        if _BATCH is not None and _OTHER is not None and os.sched_getscheduler(0) == _OTHER:
            self.batch = (_BATCH, _OTHER, os.sched_param(0))
        # Activity name -> how many of its latest attempts in a row returned within QUICK_S.
        # Shared by the workflow threads: a lost update under a race only delays or ends a streak.
        self.quick: dict[str, int] = {}

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
        name = thread.timing
        if name is not None:
            thread.timing = None
            quick = self.quick
            quick[name] = quick.get(name, 0) + 1 if time.perf_counter() - thread.began <= self.quick_s else 0
        if crowd >= self.crowded_at and not thread.focused and self.working:
            self._move(thread, True)

    def activity(self, thread: FocusedThread, name: str, crowd: float) -> None:
        """Activity `name` is about to run on this focused thread: give it every CPU, unless it is a quick one.

        The attempt is timed until its outcome is recorded (`engine_code`).
        """
        if not (crowd >= self.crowded_at and self.quick.get(name, 0) >= self.quick_runs):
            self._move(thread, False)
        thread.timing = name
        thread.began = time.perf_counter()

    def spread(self, thread: FocusedThread) -> None:
        """The thread is to start threads of its own (or wait for one): give it every CPU, which they inherit."""
        thread.timing = None
        if thread.focused:
            self._move(thread, False)

    def adopt(self, thread: FocusedThread) -> None:
        """A new workflow thread: focused if the thread that started it was (it inherited that CPU and policy)."""
        try:
            thread.focused = os.sched_getaffinity(0) == self.one
        except OSError:
            thread.focused = False

    def follows(self) -> LoopThread | None:
        """The calling thread (the worker's loop) to `follow` the crowd, or None where it must stay as it is.

        Only a thread that may run on every CPU the focus uses, under SCHED_OTHER where the
        policy is in use: one its caller pinned (or gave another policy) is not moved.
        """
        try:
            if os.sched_getaffinity(0) != self.every:
                return None
            if self.batch is not None and os.sched_getscheduler(0) != self.batch[1]:
                return None
        except OSError:
            return None
        return LoopThread(self)

    def _move(self, thread: FocusedThread, one: bool) -> None:
        try:
            os.sched_setaffinity(0, self.one if one else self.every)
        except OSError as exc:  # the CPUs allowed changed under us (a cgroup, taskset): stop focusing
            self.working = False
            thread.focused = False
            self._policy(False)
            log.warning("stopped moving workflow threads between CPUs: %s", exc)
            return
        thread.focused = one
        self._policy(one)

    def _policy(self, batch: bool) -> None:
        """Put the calling thread under SCHED_BATCH (`batch`) or back under SCHED_OTHER; stop trying at a refusal."""
        policies = self.batch
        if policies is None:
            return
        try:
            os.sched_setscheduler(0, policies[0] if batch else policies[1], policies[2])
        except OSError as exc:  # refused (a seccomp profile): the focus goes on without it
            self.batch = None
            log.warning("stopped putting focused workflow threads under SCHED_BATCH: %s", exc)
