"""The diagnosis pane: why a workflow failed, and recorded history beside what the code issues now."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from console.data import Diagnosis
from console.format import text, utc
from console.paged_table import PagedTable
from engine.text import printable

VERDICT_STYLES = {"match": "green", "diverges": "bold red", "after": "dim", "unknown": "dim"}


class DiagnosisView(Vertical):
    """A summary of the failure plus, for a divergence, the aligned view with the first divergence marked."""

    def compose(self) -> ComposeResult:
        """The summary and the aligned table."""
        yield Static(Text("reading…", style="dim"), id="diag-summary")
        yield PagedTable(id="aligned")

    def on_mount(self) -> None:
        """The aligned table's columns; it stays hidden unless there is a divergence."""
        table = self.query_one("#aligned", PagedTable)
        table.define_columns([("slot", "slot", 6, 4), ("recorded", "recorded in history", 34, 16),
                              ("mark", "", 3, 1), ("issued", "issued by the code", 34, 16),
                              ("note", "", 22, 3)])
        table.display = False

    def show(self, diagnosis: Diagnosis) -> None:
        """Draw a diagnosis (on the UI thread)."""
        summary = Table.grid(padding=(0, 2))
        summary.add_column(style="bold", no_wrap=True)
        summary.add_column()
        table = self.query_one("#aligned", PagedTable)
        verdict = diagnosis.verdict
        if diagnosis.kind == "nondeterministic":
            summary.add_row("failure", Text(f"NonDeterministicError at slot {diagnosis.slot}", style="bold red"))
            summary.add_row("recorded", text(diagnosis.recorded or "(nothing)"))
            summary.add_row("issued", text(diagnosis.issued or "(nothing: the code completed)"))
            # The engine's message says again what the three rows above say; keep the rows short
            # (the aligned view must keep its room on a 24-line terminal) unless it says more.
            standard = f"non-determinism at slot {diagnosis.slot}: "
            if not diagnosis.message.startswith(standard):
                summary.add_row("message", Text(printable(diagnosis.message)))
            summary.add_row("issued from", Text(printable(diagnosis.source), style="dim"))
            if verdict is not None and diagnosis.verdict_ok is False and diagnosis.message \
                    and diagnosis.message in verdict:
                verdict = f"non-determinism at slot {diagnosis.slot}, as above"
        elif diagnosis.kind == "activity":
            cmd = diagnosis.failed_command
            summary.add_row("failure", Text("activity failed", style="bold red"))
            if cmd is not None:
                summary.add_row("activity", text(cmd.name))
                summary.add_row("slot", text(cmd.slot))
                summary.add_row("attempts", text(cmd.attempts))
                summary.add_row("recorded", text(utc(cmd.recorded_at)))
                summary.add_row("error", Text(printable(cmd.error or ""), style="red"))
            if cmd is None or not diagnosis.message.endswith(cmd.error or ""):
                summary.add_row("workflow error", Text(printable(diagnosis.message), style="red"))
        elif diagnosis.kind == "other":
            summary.add_row("failure", Text("workflow failed", style="bold red"))
            if diagnosis.slot is not None:
                summary.add_row("slot", text(diagnosis.slot))
            summary.add_row("error", Text(printable(diagnosis.message), style="red"))
        else:
            summary.add_row("failure", Text("none: this workflow has not failed", style="green"))
        if verdict is not None:
            ok = diagnosis.verdict_ok
            style = "yellow" if ok is None else ("bold green" if ok else "bold red")
            summary.add_row("check", Text(printable(verdict), style=style))
        else:
            summary.add_row("check", Text("press c to dry-replay the history against the current code", "dim"))
        parts: list[Table | Text] = [summary]
        parts.extend(Text(printable(note), style="yellow") for note in diagnosis.notes)
        self.query_one("#diag-summary", Static).update(Group(*parts))
        table.display = bool(diagnosis.aligned)
        rows: list[tuple[str, list[Text]]] = []
        first: int | None = None
        for i, row in enumerate(diagnosis.aligned):
            style = VERDICT_STYLES[row.verdict]
            mark = {"match": "=", "diverges": "≠"}.get(row.verdict, "")
            note = {"diverges": "◀ first divergence", "unknown": "not known without --app"}.get(row.verdict, "")
            rows.append((str(row.slot), [Text(str(row.slot), justify="right"), text(row.recorded or "(nothing)", style),
                                         Text(mark, style=style), text(row.issued or "—", style),
                                         Text(note, style=style, no_wrap=True, overflow="ellipsis")]))
            if row.verdict == "diverges" and first is None:
                first = i
        table.set_page(rows, cursor_at=first)
