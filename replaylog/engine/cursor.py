"""A run's cursor over its history, and the commonest activity slot run on it, compiled.

Trick "compiled cursor": the state every slot reads and writes (the cursor, the history,
the sticky error, the callbacks, the counters) lives in `Cursor`, a class mypyc compiles
with the worker's per-slot modules (setup.py; replaylog.engine.native), so its fields are
C struct members. `Cursor.activity` runs the commonest slot end to end: an activity called
with no options, replayed from history, or run live and succeeding at its first attempt.
Anything else it declines (`DECLINED`, before it changes anything) or hands back
(`Handback`, once the attempt ran), and the Context (engine.core, interpreted, documented)
does it as before. Measured under callgrind (`make bench-instructions`, in turns with the
tree before): the engine's slot 52,924 -> 43,970 instructions, the Context alone (core row)
15,948 -> 8,610, a replayed slot at resume 7,988 -> 5,565.

The Context keeps the public face: arguments checked and refused in one line, docstrings,
and the frame the thread guard looks for (a compiled function has none). This module
imports nothing of the core (which imports it): what it needs of it is handed to the
constructor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import CoroutineType
from typing import Any, Final

from replaylog.engine.errors import ActivityError, ReplaylogError, ValueNotJSONError

# What `Cursor.activity` answers when the slot is not the commonest kind: the Context runs it.
DECLINED: Final = object()
# The slot kind of an activity (vocab.SlotKind.ACTIVITY).
_ACTIVITY: Final = "activity"
# Values JSON holds as they are (engine.core._PLAIN_JSON): any other goes through `to_json`.
_PLAIN: Final = frozenset((str, int, bool))
# An imported name, bound Final: mypyc keeps it in a C static, where it looks an imported
# name up in the module's dict on every read.
_COROUTINE: Final = CoroutineType


class Handback:
    """A live first attempt `Cursor.activity` ran that the Context finishes: it raised, or returned a coroutine.

    The slot is taken (the cursor moved past it, `executed` counts it, the start was
    marked); `raised` is the attempt's exception, or `started` the coroutine it returned.
    """

    def __init__(self, slot: int, name: str, fn: Callable[..., Any], key: str | None,
                 raised: BaseException | None, started: Any) -> None:
        self.slot = slot
        self.name = name
        self.fn = fn
        self.key = key
        self.raised = raised
        self.started = started


class Cursor:
    """The per-slot state of one run (engine.core.Context keeps it here) and its commonest slot."""

    def __init__(self, commands: Sequence[Any], activities: Mapping[str, Callable[..., Any]],
                 record: Callable[[int, Any], None] | None, on_start: Callable[[int, str, int], None] | None,
                 on_end: Callable[[int, str, int, str | None], None] | None, dry_run: bool, slot_cap: float,
                 prior_slot: int, cancel: str | None, unchecked: set[Callable[..., Any]],
                 args_key: Callable[[tuple[Any, ...], Mapping[str, Any]], str],
                 new_record: Callable[[Any, tuple[Any, ...]], Any], record_type: Any,
                 to_json: Callable[[Any, str], Any]) -> None:
        self.index = 0  # the next command's slot
        self.commands = commands
        self.history_len = len(commands)
        self.activities = activities
        self.record = record
        self.on_start = on_start
        self.on_end = on_end
        self.dry_run = dry_run
        self.slot_cap = slot_cap
        self.prior_slot = prior_slot
        self.group = False  # a parallel group's tasks are running
        self.running: tuple[int, str, int] | None = None  # (slot, name, attempt) while an activity runs
        self.new_commands: list[Any] = []
        self.fatal: ReplaylogError | None = None  # the sticky error: every later command raises it again
        self.cancel_requested = cancel
        self.cancel_delivered = False
        self.replayed = 0
        self.executed = 0
        self._unchecked = unchecked
        self._args_key = args_key
        self._new_record = new_record
        self._record_type = record_type
        self._to_json = to_json

    def activity(self, fn_or_name: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run an activity slot called with no options, if it is the commonest kind; else DECLINED.

        Replayed: its recorded outcome, when history holds this activity with the same
        arguments. Live: its first attempt, when nothing else is due at the slot (no cancel,
        no earlier attempt, no cap, no group); a success is recorded and returned, and an
        attempt that raised or returned a coroutine is handed back (`Handback`).
        """
        if isinstance(fn_or_name, str):
            name: str = fn_or_name
            fn = self.activities.get(name)
            if fn is None:
                return DECLINED
        else:
            fn = fn_or_name
            name = getattr(fn, "_replaylog_name", None) or fn.__name__
        slot = self.index
        if self.fatal is not None or self.dry_run:
            return DECLINED
        checked = fn not in self._unchecked
        # args_key's commonest case (one int) without a call.
        key: str | None = None
        if checked:
            if len(args) == 1 and not kwargs and type(args[0]) is int:
                key = f"[{args[0]}]"
            else:
                try:
                    key = self._args_key(args, kwargs)
                except Exception:  # noqa: BLE001 - the Context says which argument JSON cannot hold
                    return DECLINED
        if slot < self.history_len:
            done = self.commands[slot]
            if done.kind != _ACTIVITY or done.name != name or (
                    done.args is not None and checked and done.args != key):
                return DECLINED  # a divergence or a cancel: the Context's guard says which
            self.index = slot + 1
            self.replayed += 1
            if done.ok:
                return done.value
            raise ActivityError(slot, name, done.error or "", done.attempts)
        if (slot >= self.slot_cap or slot == self.prior_slot or self.group
                or (self.cancel_requested is not None and not self.cancel_delivered)):
            return DECLINED
        self.index = slot + 1
        self.executed += 1
        on_start = self.on_start
        if on_start is not None:
            on_start(slot, name, 1)
        self.running = (slot, name, 1)
        try:
            value = fn(*args, **kwargs) if kwargs else fn(*args)
        except BaseException as exc:  # noqa: BLE001 - the Context records or raises it
            self.running = None
            return Handback(slot, name, fn, key, exc, None)
        self.running = None
        if type(value) is _COROUTINE:
            return Handback(slot, name, fn, key, None, value)
        on_end = self.on_end
        if on_end is not None:
            on_end(slot, name, 1, None)
        if value is not None and type(value) not in _PLAIN:
            try:
                value = self._to_json(value, f"slot {slot}: the value activity {name!r} returned")
            except ValueNotJSONError as exc:
                self.fatal = exc
                raise
        rec = self._new_record(self._record_type, (_ACTIVITY, name, True, value, None, 1, key))
        record = self.record
        if record is not None:
            record(slot, rec)
        else:
            self.new_commands.append(rec)
        return value
