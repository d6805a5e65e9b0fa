"""Retry policies of activities: how many attempts, how long between them, which errors never retry.

A policy is code, never stored: history records each activity's outcome and how many
attempts it took, and a replay reads them back whatever the policy says now. The waits
between live attempts are what a policy decides. A wait of at most `DURABLE_AFTER`
seconds is slept in the workflow's thread; a longer one is a durable timer: the run
ends blocked on "retry" with the next attempt's time as its wake time, holding no
thread, and the attempts made so far are kept in the store, so a worker that dies
during the wait does not reset the count.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass

# Waits between attempts longer than this (seconds) are durable timers; shorter ones are
# slept in the workflow's thread, where a claim and a replay would cost more than the wait.
DURABLE_AFTER = 0.5

# The app-wide default policy, by the module that set it (`default_retry`): the app loader
# gives a module's to every activity call of its workflows that names no policy of its own.
_APP_DEFAULTS: dict[str, RetryPolicy] = {}


@dataclass(frozen=True)
class RetryPolicy:
    """How an activity is retried: `max_attempts` in all, waiting `initial` seconds after the first
    failure, `backoff` times longer after each next one, never longer than `max_interval`.

    Errors whose type is in `non_retryable` (a class, matched with isinstance, or a class
    name) fail the activity at once, whatever attempts are left.

    Raises:
        ValueError: max_attempts is not a whole number of at least 1, a time is negative
            or not finite, backoff is below 1, or non_retryable holds something that is
            neither an exception class nor a name.
    """

    max_attempts: int = 3
    initial: float = 1.0
    backoff: float = 2.0
    max_interval: float = 60.0
    non_retryable: tuple[type[BaseException] | str, ...] = ()

    def __post_init__(self) -> None:
        if type(self.max_attempts) is not int or self.max_attempts < 1:
            raise ValueError(f"RetryPolicy(max_attempts={self.max_attempts!r}): max_attempts must be a whole"
                             " number of at least 1 (1: no retry)")
        for what in ("initial", "max_interval"):
            value = getattr(self, what)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"RetryPolicy({what}={value!r}): {what} must be a finite number of seconds, at"
                                 " least 0")
        if isinstance(self.backoff, bool) or not isinstance(self.backoff, (int, float)) or not (
                math.isfinite(self.backoff) and self.backoff >= 1):
            raise ValueError(f"RetryPolicy(backoff={self.backoff!r}): backoff must be a finite number of at least 1")
        given: object = self.non_retryable  # a lone class or name is taken as a tuple of one
        kinds = (given,) if isinstance(given, (type, str)) else tuple(given) if isinstance(given, Iterable) else None
        if kinds is None or not all(isinstance(k, str) or (isinstance(k, type) and issubclass(k, BaseException))
                                    for k in kinds):
            raise ValueError(f"RetryPolicy(non_retryable={given!r}): give exception classes or their names")
        object.__setattr__(self, "non_retryable", kinds)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1 for the first) before the next."""
        if self.initial == 0:
            return 0.0
        # Past ~1,000 doublings the float overflows; the cap has long been reached by then.
        steps = min(attempt - 1, 1000)
        try:
            wait = self.initial * self.backoff ** steps
        except OverflowError:
            wait = math.inf
        return min(wait, self.max_interval)

    def retries(self, exc: BaseException) -> bool:
        """Whether an attempt that raised `exc` may be followed by another (attempts left aside)."""
        for kind in self.non_retryable:
            if isinstance(kind, str):
                if any(kind in (t.__name__, t.__qualname__, f"{t.__module__}.{t.__qualname__}")
                       for t in type(exc).__mro__):
                    return False
            elif isinstance(exc, kind):
                return False
        return True


# What `max_retries=N` means: N attempts, 50 ms after the first failure, doubling (in the thread).
def legacy_policy(max_retries: int) -> RetryPolicy:
    """The policy `call_activity(..., max_retries=N)` stands for: N attempts, 0.05 s doubling."""
    return RetryPolicy(max_attempts=max(1, int(max_retries)), initial=0.05, backoff=2.0, max_interval=60.0)


DEFAULT_POLICY = legacy_policy(3)


def default_retry(policy: RetryPolicy | None) -> None:
    """Set the app's default retry policy: call it at the top level of the app's module.

    Every activity call of the app's workflows that names no policy (no `retry=` nor
    `max_retries=`) and whose activity has none (`@activity(retry=...)`) takes it.
    None sets it back to the built-in default (3 attempts, 0.05 s doubling).

    Raises:
        TypeError: `policy` is not a RetryPolicy (nor None).
    """
    if policy is not None and not isinstance(policy, RetryPolicy):
        raise TypeError(f"default_retry() takes a RetryPolicy, not {type(policy).__name__}")
    module = sys._getframe(1).f_globals.get("__name__", "")
    if policy is None:
        _APP_DEFAULTS.pop(module, None)
    else:
        _APP_DEFAULTS[module] = policy


def app_default(module_name: str) -> RetryPolicy | None:
    """The default retry policy the module `module_name` set with `default_retry`, if any."""
    return _APP_DEFAULTS.get(module_name)
