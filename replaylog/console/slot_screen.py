"""A modal showing one slot's (or signal's) value pretty-printed as JSON, or its error."""

from __future__ import annotations

from typing import ClassVar

from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from replaylog.console.data import InFlight, Signal, Slot, WorkflowView
from replaylog.console.format import text
from replaylog.console.key_footer import KeyFooter
from replaylog.engine.text import is_time, pretty_json, printable, utc
from replaylog.engine.vocab import Status, kind_info


class SlotScreen(ModalScreen[None]):
    """The full value of a slot or signal payload; esc closes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close", tooltip="close"),
        Binding("enter", "dismiss", "Close", show=False, key_display="enter", tooltip="close"),
        Binding("q", "dismiss", "Close", show=False, tooltip="close"),
    ]

    def __init__(self, title: Text, facts: list[tuple[str, Text]], body: Syntax | Text) -> None:
        super().__init__()
        self._title = title
        self._facts = facts
        self._body = body

    @classmethod
    def for_command(cls, workflow_id: str, cmd: Slot) -> SlotScreen:
        """A recorded slot: its value as JSON, or its error."""
        title = _title(f"slot {cmd.slot}  ", cmd.label)
        facts = [("workflow", text(workflow_id)),
                 ("outcome", Text("ok", style="green") if cmd.ok else Text("failed", style="bold red")),
                 ("attempts", text(cmd.attempts)), ("recorded", text(utc(cmd.recorded_at)))]
        kind = kind_info(cmd.kind)
        when = kind.time
        if when is not None and is_time(cmd.value):  # else the value below shows the number
            facts.append((when, text(utc(cmd.value), "bold")))
        elif kind.marker is not None:
            facts.append(("marker", text(f"change {cmd.name!r}: {kind.marker}", "cyan")))
        if cmd.ok:
            return cls(title, facts, _json(cmd.value))
        failure = Text(printable(cmd.error or ""), style="red")
        if cmd.traceback:
            failure.append("\n\ntraceback\n", style="bold")
            failure.append(printable(cmd.traceback))
        return cls(title, facts, failure)

    @classmethod
    def for_inflight(cls, workflow_id: str, inflight: InFlight) -> SlotScreen:
        """The in-flight activity: started, no recorded outcome."""
        title = _title(f"slot {inflight.slot}  ", f"activity:{inflight.name}")
        facts = [("workflow", text(workflow_id)), ("outcome", Text("in flight", style="bold yellow")),
                 ("attempts", text(inflight.attempts)), ("started", text(utc(inflight.started_at)))]
        if inflight.retry_at is not None:
            facts.append(("next attempt", text(utc(inflight.retry_at), "bold")))
        if inflight.error:
            facts.append(("last error", text(inflight.error, "red")))
        if inflight.heartbeat_at is not None:
            facts.append(("heartbeat", text(utc(inflight.heartbeat_at))))
        body = Text("Started and no outcome recorded: the activity possibly ran. If the worker died, the next"
                    " worker runs it again (attempt counted), so it must be idempotent.", style="yellow")
        if inflight.details is not None:
            body.append("\n\nlast heartbeat details\n", style="bold")
            body.append(printable(pretty_json(inflight.details)))
        return cls(title, facts, body)

    @classmethod
    def for_signal(cls, workflow_id: str, sig: Signal) -> SlotScreen:
        """A delivered signal: its payload as JSON."""
        title = _title(f"signal #{sig.seq}  ", sig.name)
        facts = [("workflow", text(workflow_id)),
                 ("state", Text("consumed", style="green") if sig.consumed else Text("waiting", style="yellow")),
                 ("sent", text(utc(sig.sent_at)))]
        return cls(title, facts, _json(sig.payload))

    @classmethod
    def for_workflow(cls, row: WorkflowView) -> SlotScreen:
        """A workflow's input, result and error in full (the summary shows one line of each)."""
        title = _title("workflow ", row.id)
        facts = [("workflow", text(row.workflow)), ("status", text(row.status))]
        body = Text()
        sections: list[tuple[str, str, str]] = [("input", pretty_json(row.input) if row.has_input else "(none)", "")]
        if row.status == Status.COMPLETED:
            sections.append(("result", pretty_json(row.result), "green"))
        if row.error:
            sections.append(("error", printable(row.error), "red"))
        if row.traceback:
            sections.append(("traceback", printable(row.traceback), ""))
        for i, (label, value, style) in enumerate(sections):
            body.append(("\n\n" if i else "") + label + "\n", style="bold")
            body.append(value, style=style)  # a Text: stored text is never parsed as markup
        return cls(title, facts, body)

    def compose(self) -> ComposeResult:
        """Title, facts, and the value in a scrolling pane."""
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        for label, value in self._facts:
            grid.add_row(label, value)
        with Vertical(id="slot-dialog", classes="dialog"):
            yield Static(self._title, classes="dialog-title")
            yield Static(grid)
            with VerticalScroll(id="slot-value"):
                yield Static(self._body)
            yield Static(Text("esc: close", style="dim"))
        # The modal's own keys: the footer of the screen beneath would name keys that do nothing here.
        yield KeyFooter()

def _title(lead: str, name: object) -> Text:
    """A dialog title: what it shows, then its stored name in bold (never parsed as markup)."""
    title = Text(lead)
    title.append_text(text(name, "bold"))
    return title


def _json(value: object) -> Syntax:
    # Syntax never parses markup, and pretty_json has escaped control characters.
    return Syntax(pretty_json(value), "json", theme="ansi_dark", word_wrap=True)
