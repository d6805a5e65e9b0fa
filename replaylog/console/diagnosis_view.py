"""The diagnosis pane: why a workflow failed, and recorded history beside what the code issues now."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from replaylog.console.data import Diagnosis
from replaylog.console.format import text, utc
from replaylog.console.paged_table import PagedTable
from replaylog.engine.text import printable

VERDICT_STYLES = {"match": "green", "diverges": "bold red", "after": "dim", "unknown": "dim", "live": "yellow"}


# The issued column's label says whose commands it shows: the code loaded now, or the stored record.
ISSUED_NOW = "issued by the current code"
ISSUED_THEN = "issued when it failed (stored)"


class DiagnosisView(Vertical):
    """Why a workflow failed (as stored then), what the current code does now, and the aligned view."""

    def compose(self) -> ComposeResult:
        """The summary and the aligned table."""
        yield Static(Text("reading…", style="dim"), id="diag-summary")
        yield PagedTable(id="aligned")

    def on_mount(self) -> None:
        """The aligned table's columns; it stays hidden unless there is a divergence."""
        table = self.query_one("#aligned", PagedTable)
        table.define_columns([("slot", "slot", 6, 4), ("recorded", "recorded in history", 34, 16),
                              ("mark", "", 3, 1), ("issued", ISSUED_NOW, 34, 16),
                              ("note", "", 22, 3)], grow=["recorded", "issued"])
        table.display = False

    def show(self, diagnosis: Diagnosis) -> None:
        """Draw a diagnosis (on the UI thread)."""
        summary = Table.grid(padding=(0, 2))
        summary.add_column(style="bold", no_wrap=True)
        summary.add_column()
        table = self.query_one("#aligned", PagedTable)
        verdict = diagnosis.verdict
        if diagnosis.kind == "nondeterministic":
            # What was stored when the workflow failed, apart from what the code loaded now does.
            failed = Text(f"NonDeterministicError at slot {diagnosis.slot}", style="bold red")
            failed.append("  (the diagnostic stored then)", style="dim")
            summary.add_row("when it failed", failed)
            summary.add_row("  history held", text(diagnosis.recorded or "(nothing)"))
            summary.add_row("  code issued", text(diagnosis.issued or "(nothing: the code completed)"))
            # The engine's message says again what the rows above say; keep the rows short
            # (the aligned view must keep its room on a 24-line terminal) unless it says more.
            standard = f"non-determinism at slot {diagnosis.slot}: "
            if not diagnosis.message.startswith(standard):
                summary.add_row("  message", Text(printable(diagnosis.message)))
            if verdict is not None and diagnosis.verdict_ok is False and diagnosis.message \
                    and diagnosis.message in verdict:
                verdict = f"diverges at slot {diagnosis.slot}, as when it failed"
        elif diagnosis.kind == "activity":
            cmd = diagnosis.failed_command
            summary.add_row("failure", Text("activity failed", style="bold red"))
            if cmd is not None:
                summary.add_row("activity", text(cmd.name))
                summary.add_row("slot", text(cmd.slot))
                summary.add_row("attempts", text(cmd.attempts))
                summary.add_row("recorded", text(utc(cmd.recorded_at)))
                summary.add_row("error", Text(printable(cmd.error or ""), style="red"))
                if cmd.traceback:
                    summary.add_row("traceback", Text(printable(cmd.traceback)))
            if cmd is None or not diagnosis.message.endswith(cmd.error or ""):
                summary.add_row("workflow error", Text(printable(diagnosis.message), style="red"))
            if diagnosis.traceback:
                summary.add_row("in the workflow", Text(printable(diagnosis.traceback)))
        elif diagnosis.kind == "other":
            summary.add_row("failure", Text("workflow failed", style="bold red"))
            if diagnosis.slot is not None:
                summary.add_row("slot", text(diagnosis.slot))
            summary.add_row("error", Text(printable(diagnosis.message), style="red"))
            if diagnosis.traceback:
                summary.add_row("traceback", Text(printable(diagnosis.traceback)))
        else:
            summary.add_row("failure", Text("none: this workflow has not failed", style="green"))
        summary.add_row("current code", current_code(diagnosis, verdict))
        parts: list[Table | Text] = [summary]
        parts.extend(Text(printable(note), style="yellow") for note in diagnosis.notes)
        self.query_one("#diag-summary", Static).update(Group(*parts))
        table.display = bool(diagnosis.aligned)
        table.set_label("issued", ISSUED_NOW if diagnosis.aligned_current else ISSUED_THEN)
        rows: list[tuple[str, list[Text]]] = []
        first: int | None = None
        for i, row in enumerate(diagnosis.aligned):
            style = VERDICT_STYLES[row.verdict]
            mark = {"match": "=", "diverges": "≠"}.get(row.verdict, "")
            note = {"diverges": "◀ first divergence", "unknown": "not known without --app",
                    "live": "would run live now"}.get(row.verdict, "")
            note_style = style
            if row.failed_here and row.verdict != "diverges":
                # The current code no longer diverges here: say where the workflow once failed.
                note, note_style = "◀ where it failed", "yellow"
            rows.append((str(row.slot), [Text(str(row.slot), justify="right"), text(row.recorded or "(nothing)", style),
                                         Text(mark, style=style), text(row.issued or "—", style),
                                         Text(note, style=note_style, no_wrap=True, overflow="ellipsis")]))
            if first is None and row.verdict == "diverges":
                first = i
        if first is None:  # the code no longer diverges: the cursor shows where it failed
            first = next((i for i, row in enumerate(diagnosis.aligned) if row.failed_here), None)
        table.set_page(rows, cursor_at=first)


def current_code(diagnosis: Diagnosis, verdict: str | None) -> Text:
    """The "current code" line: the dry replay's verdict and the code it ran, or how to get one."""
    if verdict is None:
        if diagnosis.code is None:
            return Text("not loaded: start the console with --app to dry-replay the history against it", "dim")
        return Text(f"press c to dry-replay the history against {printable(diagnosis.code)}", "dim")
    ok = diagnosis.verdict_ok
    line = Text(printable(verdict), style="yellow" if ok is None else ("bold green" if ok else "bold red"))
    if diagnosis.code is not None:
        line.append(f"  (dry replay of {printable(diagnosis.code)})", style="dim")
    return line
