"""Queues: how many workflows of a kind run at once, how fast they start, and in what order.

A `Queue` is declared at the top level of an app module, as workflows are decorated there,
and belongs to that app when the module loads (`engine.app.Registry.queues`). A worker
records its app's queues in the store when it starts; from then on the store's claim
enforces them for every worker on every host (`engine.store.shared.queues`), so a limit
never depends on a worker's memory.

A workflow started on a queue is `queued` until a claim admits it: only while the queue
has room under its global concurrency, the claiming worker's concurrency for the queue,
and its rate limit; lower priority first, first started first within a priority, never
before its delay. Once admitted it holds its place in the queue's concurrency until it
finishes, whatever it waits on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from replaylog.engine.errors import ReplaylogError


class QueueError(ReplaylogError):
    """A queue declared or used wrongly: a bad limit, an unknown queue, a bad start option."""


class DedupIdTakenError(QueueError):
    """A start refused: an unfinished workflow on the queue holds the same dedup id.

    Attributes:
        workflow_id: the id of the workflow that holds it.
    """

    def __init__(self, queue: str, dedup_id: str, workflow_id: str) -> None:
        super().__init__(f"dedup id {dedup_id!r} is taken on queue {queue!r} by workflow {workflow_id!r},"
                         " which is not finished")
        self.workflow_id = workflow_id


# What each module declared at its top level, by module name then queue name (as engine.core
# keeps decorated functions): the app loader reads it.
_DECLARED: dict[str, dict[str, Queue]] = {}

# The longest queue name, in characters: a name an operator types, not a value.
NAME_LIMIT = 100


def _whole(value: object, what: str, *, least: int) -> int | None:
    """A limit that is a whole number no smaller than `least`, or None (no limit); QueueError otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise QueueError(f"{what} must be a whole number, not {value!r}")
    if value < least:
        raise QueueError(f"{what} must be at least {least}, not {value}")
    return value


def name_refusal(name: object) -> str | None:
    """Why `name` cannot name a queue, or None if it can."""
    if not isinstance(name, str):
        return f"a queue name is a string, not {type(name).__name__}"
    if not name or len(name) > NAME_LIMIT or any(c.isspace() or not c.isprintable() for c in name):
        return f"queue name {name!r} is not valid: use 1-{NAME_LIMIT} printable characters without spaces"
    return None


@dataclass(frozen=True, init=False)
class Queue:
    """A named queue with limits, enforced by the store's claim across every worker.

    Args:
        name: the name `client.start(..., queue=NAME)` and `replaylog start --queue` use.
        concurrency: at most this many of the queue's workflows admitted and unfinished at
            once, across every worker and host (None: no limit).
        worker_concurrency: at most this many of them running in one worker process at
            once (None: no limit beyond the worker's own).
        rate_limit: (starts, seconds): at most `starts` admissions in any window of
            `seconds` (None: no limit).

    Declared at the top level of an app module, it is the app's queue: a worker running
    the app records it in the store when it starts.
    """

    name: str
    concurrency: int | None
    worker_concurrency: int | None
    rate_limit: tuple[int, float] | None

    def __init__(self, name: str, concurrency: int | None = None, worker_concurrency: int | None = None,
                 rate_limit: tuple[int, float] | None = None) -> None:
        refusal = name_refusal(name)
        if refusal is not None:
            raise QueueError(refusal)
        rate: tuple[int, float] | None = None
        if rate_limit is not None:
            if not isinstance(rate_limit, tuple) or len(rate_limit) != 2:
                raise QueueError(f"queue {name!r}: rate_limit must be (starts, seconds), not {rate_limit!r}")
            starts = _whole(rate_limit[0], f"queue {name!r}: rate_limit's starts", least=1)
            period = rate_limit[1]
            if isinstance(period, bool) or not isinstance(period, int | float) or not math.isfinite(period) \
                    or period <= 0:
                raise QueueError(f"queue {name!r}: rate_limit's seconds must be a positive number, not {period!r}")
            assert starts is not None
            rate = (starts, float(period))
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "concurrency", _whole(concurrency, f"queue {name!r}: concurrency", least=1))
        object.__setattr__(self, "worker_concurrency",
                           _whole(worker_concurrency, f"queue {name!r}: worker_concurrency", least=1))
        object.__setattr__(self, "rate_limit", rate)
        module = _caller_module()
        if module is not None:
            _DECLARED.setdefault(module, {})[name] = self

    def limits_text(self) -> str:
        """The limits as one line: `concurrency 5, 2 per worker, 100 per 60 s` ("no limits" if none)."""
        return limits_text(self.concurrency, self.worker_concurrency, self.rate_limit)


def limits_text(concurrency: int | None, worker_concurrency: int | None, rate: tuple[int, float] | None) -> str:
    """A queue's limits as one line, for logs and refusals."""
    parts = []
    if concurrency is not None:
        parts.append(f"concurrency {concurrency}")
    if worker_concurrency is not None:
        parts.append(f"{worker_concurrency} per worker")
    if rate is not None:
        parts.append(f"{rate[0]} per {rate[1]:g} s")
    return ", ".join(parts) or "no limits"


def _caller_module() -> str | None:
    """The module whose top level runs `Queue(...)`, or None when it is made inside a function.

    As for decorated functions (engine.core._mark): a queue made at run time (a test body,
    a factory) belongs to an app only if the module's namespace holds it.
    """
    import sys

    frame = sys._getframe(2)
    if frame.f_code.co_name != "<module>":
        return None
    module = frame.f_globals.get("__name__")
    return module if isinstance(module, str) else None


def declared_in(module_name: str) -> list[Queue]:
    """The queues declared at the top level of a module, in declaration order."""
    return list(_DECLARED.get(module_name, {}).values())


def forget_declared(module_name: str) -> None:
    """Drop what a module declared: it is about to be executed afresh."""
    _DECLARED.pop(module_name, None)


def check_start(queue: str | None, priority: int, dedup_id: str | None, delay: float | None) -> None:
    """Refuse start options that can never be right, before anything is written (QueueError, one line)."""
    if queue is not None:
        refusal = name_refusal(queue)
        if refusal is not None:
            raise QueueError(refusal)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise QueueError(f"priority must be a whole number, not {priority!r}")
    if priority < 0:
        raise QueueError(f"priority must be 0 or more (lower runs first), not {priority}")
    if delay is not None:
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not math.isfinite(delay):
            raise QueueError(f"delay must be a number of seconds, not {delay!r}")
        if delay < 0:
            raise QueueError(f"delay must be 0 or more seconds, not {delay:g}")
    if dedup_id is not None and (not isinstance(dedup_id, str) or not dedup_id or len(dedup_id) > 200):
        raise QueueError(f"dedup id {dedup_id!r} is not valid: use 1-200 characters")
    if queue is None:
        given = [what for what, on in (("priority", priority != 0), ("dedup_id", dedup_id is not None),
                                       ("delay", delay is not None)) if on]
        if given:
            raise QueueError(f"{given[0]} is a queue option: start the workflow on a queue (queue=NAME)")
