"""An exported history: one versioned JSON document per workflow (`export`, `import`, `check --history`).

Pure: no SQL. The store writes and reads the rows; this module builds the document and
refuses one that is malformed, of another format or of another version, in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

from replaylog.engine.core import CommandRecord, ErrorKind, SignalRecord, WorkflowState
from replaylog.engine.errors import HistoryFormatError
from replaylog.engine.vocab import SlotKind, is_kind, is_status

FORMAT = "replaylog-history"
VERSION = 1
_ERROR_KINDS = (None, *get_args(ErrorKind))


@dataclass(frozen=True)
class HistoryDocument:
    """A workflow's whole history as exported: what `import` writes and `check --history` replays."""

    id: str
    workflow: str
    input: Any
    has_input: bool
    status: str
    result: Any
    error: str | None
    diagnostic: dict[str, Any] | None
    commands: tuple[CommandRecord, ...]
    recorded_at: tuple[float, ...]
    signals: tuple[SignalRecord, ...]
    sent_at: tuple[float, ...]
    forked_from: str | None = None
    forked_slot: int | None = None
    error_kind: str | None = None  # what failed a failed workflow (engine.core.ErrorKind)

    @property
    def state(self) -> WorkflowState:
        """The history as the replay core takes it."""
        return WorkflowState(self.input, self.has_input, self.commands, self.signals)

    def to_json(self) -> dict[str, Any]:
        """The document: format and version first, then the workflow, its slots and its signals."""
        return {
            "format": FORMAT, "version": VERSION, "id": self.id, "workflow": self.workflow,
            "input": self.input, "has_input": self.has_input, "status": self.status, "result": self.result,
            "error": self.error, "error_kind": self.error_kind, "diagnostic": self.diagnostic,
            "origin": None if self.forked_from is None else {"id": self.forked_from, "slot": self.forked_slot},
            "slots": [{"slot": i, "kind": c.kind, "name": c.name, "ok": c.ok, "value": c.value, "error": c.error,
                       "attempts": c.attempts, "recorded_at": at, "args": c.args}
                      for i, (c, at) in enumerate(zip(self.commands, self.recorded_at, strict=True))],
            "signals": [{"seq": s.seq, "name": s.name, "payload": s.payload, "sent_at": at}
                        for s, at in zip(self.signals, self.sent_at, strict=True)],
        }


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise HistoryFormatError(f"{where}: {what}")


def parse_document(data: Any, where: str) -> HistoryDocument:
    """Check an exported document and return it; HistoryFormatError (one line naming `where`) if it is not one."""
    _need(isinstance(data, dict), where, "not a replaylog history document (a JSON object is expected)")
    _need(data.get("format") == FORMAT, where, f"not a replaylog history document (format {data.get('format')!r},"
          f" expected {FORMAT!r})")
    _need(data.get("version") == VERSION, where, f"history document version {data.get('version')!r} is not"
          f" supported (this replaylog reads version {VERSION})")
    for key, kind in (("id", str), ("workflow", str), ("status", str), ("has_input", bool), ("slots", list),
                      ("signals", list)):
        _need(isinstance(data.get(key), kind), where, f"field {key!r} is missing or not a {kind.__name__}")
    _need(is_status(data["status"]), where, f"unknown status {data['status']!r}")
    commands: list[CommandRecord] = []
    recorded: list[float] = []
    for i, c in enumerate(data["slots"]):
        at = f"slot {i}"
        _need(isinstance(c, dict) and c.get("slot") == i, where, f"{at} is malformed or out of order")
        # (A parallel group's unrecorded gap is never stored: its kind is no slot kind.)
        _need(is_kind(c.get("kind")) and isinstance(c.get("name"), str) and isinstance(c.get("ok"), bool)
              and type(c.get("attempts")) is int and isinstance(c.get("recorded_at"), (int, float))
              and (c.get("error") is None or isinstance(c.get("error"), str))
              and (c.get("args") is None or isinstance(c.get("args"), str)), where, f"{at} is malformed")
        # The store indexes each key of a recorded attributes slot (engine.store.shared.attributes).
        _need(c["kind"] != SlotKind.ATTRIBUTES or not c["ok"] or isinstance(c.get("value"), dict), where,
              f"{at} is malformed: the value of an attributes slot is an object of search attributes")
        # "args": the argument guard's key (absent in documents written before it: no check on replay).
        commands.append(CommandRecord(c["kind"], c["name"], c["ok"], c.get("value"), c.get("error"), c["attempts"],
                                      c.get("args")))
        recorded.append(float(c["recorded_at"]))
    signals: list[SignalRecord] = []
    sent: list[float] = []
    for i, s in enumerate(data["signals"]):
        _need(isinstance(s, dict) and type(s.get("seq")) is int and isinstance(s.get("name"), str)
              and isinstance(s.get("sent_at"), (int, float)), where, f"signal {i} is malformed")
        signals.append(SignalRecord(s["seq"], s["name"], s.get("payload")))
        sent.append(float(s["sent_at"]))
    _need(len({s.seq for s in signals}) == len(signals), where, "signal sequence numbers repeat")
    origin = data.get("origin")
    _need(origin is None or (isinstance(origin, dict) and isinstance(origin.get("id"), str)
                             and type(origin.get("slot")) is int), where, "field 'origin' is malformed")
    diagnostic = data.get("diagnostic")
    _need(diagnostic is None or isinstance(diagnostic, dict), where, "field 'diagnostic' is malformed")
    _need(data.get("error") is None or isinstance(data.get("error"), str), where, "field 'error' is malformed")
    _need(data.get("error_kind") in _ERROR_KINDS, where,
          "field 'error_kind' is malformed")
    return HistoryDocument(
        id=data["id"], workflow=data["workflow"], input=data.get("input"), has_input=data["has_input"],
        status=data["status"], result=data.get("result"), error=data.get("error"), diagnostic=diagnostic,
        commands=tuple(commands), recorded_at=tuple(recorded), signals=tuple(signals), sent_at=tuple(sent),
        forked_from=None if origin is None else origin["id"], forked_slot=None if origin is None else origin["slot"],
        error_kind=data.get("error_kind"),
    )
