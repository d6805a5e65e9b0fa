"""The workflow screen: one workflow's state, its slots (paged in SQL), signals and diagnosis."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable, Static, TabbedContent, TabPane, Tabs

from replaylog.console.action_dialog import ActionDialog
from replaylog.console.data import (
    HISTORY_WARN,
    SIGNAL_PAGE,
    SLOT_PAGE,
    ConsoleData,
    Diagnosis,
    ForkPreview,
    RetryPreview,
    Slot,
    WorkflowDetail,
)
from replaylog.console.diagnosis_view import DiagnosisView
from replaylog.console.format import (
    CELL_PREVIEW,
    status_text,
    text,
    value_preview,
    waits_cell,
    worker_error_line,
)
from replaylog.console.key_footer import KeyFooter
from replaylog.console.live_screen import LiveScreen
from replaylog.console.paged_table import PagedTable
from replaylog.console.run_screen import RunScreen
from replaylog.console.slot_screen import SlotScreen
from replaylog.console.transcript_screen import TranscriptScreen
from replaylog.engine.text import RETRY, TIMER, heartbeat_text, is_time, preview, printable, retry_text, utc
from replaylog.engine.vocab import SlotKind, Status, kind_info

if TYPE_CHECKING:
    from textual.timer import Timer


TABS_HELP = "slots, signals, diagnosis tab"
PAGE_HELP = "next / previous page of the slots or signals in view"


class WorkflowScreen(LiveScreen):
    """Everything about one workflow; live like the list."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="back to the list"),
        Binding("s", "signal", "Signal", tooltip="send a signal"),
        # The help adds the code a check replays (see help_screen.help_rows).
        Binding("c", "check", "Check", tooltip="check: dry-replay the history against the code"),
        Binding("v", "values", "Values", tooltip="the workflow's input, result and error in full"),
        # The operator's actions (as `replaylog cancel` … make them), each behind a confirmation.
        Binding("x", "cancel_workflow", "Cancel",
                tooltip="cancel: its code sees WorkflowCancelled (a reason, confirm)"),
        Binding("T", "terminate_workflow", "Terminate", tooltip="terminate: no workflow code runs again (confirm)"),
        Binding("r", "retry_workflow", "Retry",
                tooltip="retry a failed workflow: the dry-replay verdict first, then confirm"),
        Binding("f", "fork_workflow", "Fork", tooltip="fork from the highlighted slot: a new workflow, live from it"),
        # One dialog answers the pending approval request (a note, Approve or Reject), its id bound.
        Binding("a", "answer", "Approval", tooltip="answer the pending approval: a note, approve or reject"),
        Binding("t", "transcript", "Transcript", tooltip="the slots as a conversation: calls, approvals, children"),
        Binding("R", "runs", "Runs", show=False,
                tooltip="its earlier runs (ctx.continue_as_new): their slots, one run at a time"),
        # The tab titles name these keys; the footer has no room for them on 80 columns.
        Binding("1", "tab('slots')", "Slots", show=False, tooltip=TABS_HELP),
        Binding("2", "tab('signals')", "Signals", show=False, tooltip=TABS_HELP),
        Binding("3", "tab('diagnosis')", "Diagnosis", show=False, tooltip=TABS_HELP),
        Binding("right_square_bracket", "page(1)", "Next page", key_display="]", show=False, tooltip=PAGE_HELP),
        Binding("left_square_bracket", "page(-1)", "Prev page", key_display="[", show=False, tooltip=PAGE_HELP),
    ]

    @dataclass
    class ApprovalRequested(Message):
        """The operator asked to answer the pending approval request (the app opens the dialog)."""

        workflow_id: str
        request: dict[str, Any]

    @dataclass
    class DetailLoaded(Message):
        """The workflow and a page of its slots were read."""

        detail: WorkflowDetail

    @dataclass
    class Diagnosed(Message):
        """A diagnosis (and maybe a dry replay) finished."""

        diagnosis: Diagnosis

    @dataclass
    class DiagnosisFailed(Message):
        """The diagnosis (or its dry replay) failed; the reason is shown in the diagnosis tab."""

        reason: str
        checked: bool = False  # it was a `c` press that failed

    @dataclass
    class RetryPreviewed(Message):
        """The dry replay a retry makes first is done."""

        preview: RetryPreview

    @dataclass
    class ForkPreviewed(Message):
        """What a fork would run again was read."""

        preview: ForkPreview

    @dataclass
    class ActionFailed(Message):
        """A preview could not be made (the database could not be read, the code raised)."""

        title: str
        reason: str

    def __init__(self, data: ConsoleData, workflow_id: str) -> None:
        super().__init__(data)
        self.workflow_id = workflow_id
        self.detail: WorkflowDetail | None = None
        self.diagnosis: Diagnosis | None = None
        self.slot_offset = 0
        self.signal_offset: int | None = None  # None: follow the latest page of signals
        self._diagnosing = False
        self._cursor_after: int | None = None
        self._signal_cursor_after: int | None = None
        self._shown_status: str | None = None
        self._lease_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        """Title, summary, then slots / signals / diagnosis tabs."""
        yield Static(id="topbar")
        yield Static(Text("reading…", style="dim"), id="summary")
        with TabbedContent(id="tabs"):
            with TabPane("1 Slots", id="slots"):
                yield PagedTable(id="slot-table")
                yield Static(id="slot-info")
            with TabPane("2 Signals", id="signals"):
                yield PagedTable(id="signal-table")
                yield Static(id="signal-info")
            with TabPane("3 Diagnosis", id="diagnosis"):
                yield DiagnosisView()
        yield KeyFooter()

    def on_mount(self) -> None:
        """Columns, then the first read."""
        slots = self.query_one("#slot-table", PagedTable)
        slots.define_columns([("slot", "slot", 7, 5), ("kind", "kind", 8, 8), ("name", "name", 20, 10),
                              ("ok", "ok", 9, 9), ("value", "value / error", 38, 12), ("attempts", "attempts", 8, 4),
                              ("when", "when (UTC)", 13, 12)], grow=["value"])
        signals = self.query_one("#signal-table", PagedTable)
        signals.define_columns([("seq", "seq", 5, 4), ("name", "name", 20, 10), ("payload", "payload", 50, 14),
                                ("state", "state", 9, 8), ("sent", "sent (UTC)", 13, 12)], grow=["payload"])
        where = Text("  workflow ")
        where.append_text(text(self.workflow_id, "bold"))
        self.query_one("#topbar", Static).update(self.topbar(where))
        self.reload()
        slots.focus()
        # The countdown to a timer or a deadline ticks on screen (nothing in the database changes).
        self.set_interval(1, self._tick, name="countdown")

    def _tick(self) -> None:
        if self.detail is not None and self.detail.row.wake_at is not None:
            self._draw_summary(self.detail)

    # -- loading

    @property
    def busy(self) -> bool:
        """Whether a read is still on its way."""
        return super().busy or self._diagnosing

    def read(self) -> None:
        """Re-read the workflow and the slot and signal pages on screen."""
        self._fetch(self.slot_offset, self.signal_offset)

    @work(thread=True, group="detail", exit_on_error=False)
    def _fetch(self, offset: int, signal_offset: int | None) -> None:
        try:
            detail = self.data.detail(self.workflow_id, offset, signal_offset)
        except Exception as exc:  # noqa: BLE001 - shown to the operator, not raised
            self.post_message(self.LoadFailed(str(exc)))
            return
        self.post_message(self.DetailLoaded(detail))

    @work(thread=True, group="diagnosis", exit_on_error=False)
    def _diagnose(self, check: bool) -> None:
        try:
            diagnosis = self.data.diagnose(self.workflow_id, check=check)
        except Exception as exc:  # noqa: BLE001 - workflow code may raise anything during a dry replay
            self.post_message(self.DiagnosisFailed(f"diagnosis failed: {exc}", check))
            return
        self.post_message(self.Diagnosed(diagnosis))

    def on_live_screen_load_failed(self, message: LiveScreen.LoadFailed) -> None:
        """Show why the read failed, in place."""
        self.query_one("#summary", Static).update(Text(printable(message.reason), style="bold red"))
        self.read_done()

    def on_workflow_screen_detail_loaded(self, message: DetailLoaded) -> None:
        """Draw the summary, the slot page and the signals."""
        detail = self.detail = message.detail
        self.slot_offset = detail.offset
        if self.signal_offset is not None:
            self.signal_offset = detail.signal_offset  # the store may have clamped it
        self._draw_summary(detail)
        self.refresh_bindings()  # approve and reject show only while a request is pending
        self._draw_slots(detail)
        self._draw_signals(detail)
        self._watch_lease(detail)
        status = detail.row.status
        if status != self._shown_status:
            first = self._shown_status is None
            self._shown_status = status
            if status == Status.FAILED:
                self._diagnosing = True
                self._diagnose(False)
                if first:
                    # After the next refresh: TabbedContent activates its first tab on mount.
                    self.call_after_refresh(self.action_tab, "diagnosis")
            elif self.diagnosis is None:
                self.query_one(DiagnosisView).show(Diagnosis(self.workflow_id, "none", ""))
        self.read_done()

    def on_workflow_screen_diagnosis_failed(self, message: DiagnosisFailed) -> None:
        """Say why the diagnosis could not be made, where it would have been."""
        self._diagnosing = False
        self.query_one(DiagnosisView).query_one("#diag-summary", Static).update(
            Text(printable(message.reason), style="bold red"))
        if message.checked:
            self.notify(printable(message.reason), title=f"Check {printable(self.workflow_id, oneline=True)}",
                        severity="error", markup=False)

    def on_workflow_screen_diagnosed(self, message: Diagnosed) -> None:
        """Draw the diagnosis; say the verdict of a check."""
        self._diagnosing = False
        diagnosis = self.diagnosis = message.diagnosis
        self.query_one(DiagnosisView).show(diagnosis)
        if diagnosis.checked and diagnosis.verdict is not None:
            # A check on a failed workflow often repaints the tab with what it showed already:
            # the notice is the visible answer to the key press.
            ok = diagnosis.verdict_ok
            self.notify(printable(diagnosis.verdict), title=f"Check {printable(self.workflow_id, oneline=True)}",
                        severity="warning" if ok is None else ("information" if ok else "error"), markup=False)
        aligned = self.query_one("#aligned", PagedTable)
        if self.query_one(TabbedContent).active == "diagnosis" and aligned.display:
            aligned.focus()

    # -- drawing

    def _draw_summary(self, detail: WorkflowDetail) -> None:
        row = detail.row
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="ellipsis")
        grid.add_row("workflow", text(row.workflow))
        if len(detail.runs) > 1:
            earlier = ", ".join(f"{n} ({slots} slots)" for n, slots, _ in detail.runs[-4:-1])
            grid.add_row("run", text(f"{detail.runs[-1][0]} (continued as new; earlier: {earlier}; R shows them)"))
        status = status_text(row.status)
        if detail.approval is not None:
            # An approval with a timeout counts down to it as a signal's deadline does.
            status.append_text(waits_cell(f"{detail.approval['action']} (request {detail.approval['request']})",
                                          row.wake_at, self.data.clock(), prefix="  approval: ",
                                          style="bold yellow"))
        elif row.blocked_on:
            on = "  on " if row.blocked_on == TIMER else "  on signal "
            status.append_text(waits_cell(row.blocked_on, row.wake_at, self.data.clock(), prefix=on,
                                          style="bold yellow"))
        if detail.waiting:
            status.append_text(text(f"  {detail.waiting}", "yellow"))
        grid.add_row("status", status)
        grid.add_row("input", Text(preview(row.input, 200) if row.has_input else "(none)", no_wrap=True))
        if row.status == Status.COMPLETED:
            grid.add_row("result", Text(preview(row.result, 200), style="green", no_wrap=True))
        if row.error:
            grid.add_row("error", Text(printable(row.error, oneline=True), style="red", no_wrap=True))
        if detail.cancel is not None:
            grid.add_row("cancel", text(detail.cancel, "bold magenta"))
        if row.queue is not None:
            grid.add_row("queue", text(row.queue))
        if row.forked_from is not None:
            grid.add_row("forked from", text(f"{row.forked_from[0]} at slot {row.forked_from[1]}"))
        # The links of ctx.call_workflow, both ways (g goes to an id).
        if detail.parent is not None:
            grid.add_row("parent", text(detail.parent))
        if detail.children:
            shown = ", ".join(f"{cid} ({status})" for cid, _, status in detail.children[:4])
            more = f", … ({len(detail.children)} in all)" if len(detail.children) > 4 else ""
            grid.add_row("children", text(shown + more))
        if detail.attributes:
            # What operators find it by (`/` customer=c-42), as `replaylog list` shows them in columns.
            grid.add_row("attributes", text(", ".join(f"{key}={value}" for key, value in detail.attributes)))
        if detail.events:
            shown = ", ".join(f"{key}: {preview(value, 60)}" for key, value in detail.events[:6])
            more = f", … ({len(detail.events)} keys)" if len(detail.events) > 6 else ""
            grid.add_row("events", text(shown + more))
        if row.worker_error:
            # A run stopped without an outcome (KeyboardInterrupt, SystemExit, a worker failure).
            grid.add_row("worker error", text(worker_error_line(row.worker_error, row.status, row.retry_at), "yellow"))
        for i in detail.inflight_tasks:  # one, or each task of a parallel group
            if i.retry_at is not None and row.blocked_on == RETRY:
                what = retry_text(i.slot, i.name, i.attempts, i.error, i.retry_at, self.data.clock())
            elif self._lease_live(detail):
                what = f"slot {i.slot}: activity {i.name} is running now (attempt {i.attempts})"
            else:
                # Nobody holds the lease: the attempt may have had its effect before the worker died.
                what = (f"slot {i.slot}: activity {i.name} started {i.attempts} time(s), no recorded outcome"
                        " — possibly ran")
            grid.add_row("in flight", text(what, "bold yellow"))
            if i.heartbeat_at is not None:
                grid.add_row("heartbeat", text(heartbeat_text(i.heartbeat_at, i.details, self.data.clock())))
        grid.add_row("history", Text(f"{row.slots:,} slot(s), {detail.signal_total:,} signal(s), "
                                     f"{detail.signal_waiting:,} waiting"))
        if row.slots > HISTORY_WARN:
            grid.add_row("", text(f"past {HISTORY_WARN:,} slots: use ctx.continue_as_new(input) to go on in a fresh"
                                  " history before the worker's cap fails it", "bold yellow"))
        grid.add_row("times", Text(f"created {utc(row.created_at)}   updated {utc(row.updated_at)}", style="dim"))
        self.query_one("#summary", Static).update(grid)

    def _watch_lease(self, detail: WorkflowDetail) -> None:
        """While an activity shows as running under a live lease, read again once the lease lapses.

        A worker that dies commits nothing more, so no change would make the screen read
        again, and "running now" would stay on screen although the activity possibly ran.
        """
        if self._lease_timer is not None:
            self._lease_timer.stop()
            self._lease_timer = None
        expires = detail.row.lease_expires
        if detail.inflight is not None and expires is not None and self._lease_live(detail):
            self._lease_timer = self.set_timer(max(0.05, expires - self.data.clock() + 0.1), self.reload)

    def _lease_live(self, detail: WorkflowDetail) -> bool:
        """Whether a worker holds the workflow's lease now (its in-flight activity is running, not lost)."""
        row = detail.row
        return row.status == Status.RUNNING and row.lease_expires is not None and row.lease_expires > self.data.clock()

    def _draw_slots(self, detail: WorkflowDetail) -> None:
        table = self.query_one("#slot-table", PagedTable)
        rows: list[tuple[str, list[Text]]] = []
        for c in detail.commands:
            rows.append((str(c.slot), [
                Text(str(c.slot), justify="right"), text(c.kind), text(c.name),
                Text("ok", style="green") if c.ok else Text("failed", style="bold red"),
                _value_cell(c),
                Text(str(c.attempts), justify="right", style="" if c.attempts == 1 else "yellow"),
                Text(utc(c.recorded_at, "millis"), style="dim"),
            ]))
        total = detail.row.slots
        at_end = detail.offset + len(detail.commands) >= total
        for i in detail.inflight_tasks if at_end else ():
            note = ("running now" if self._lease_live(detail) else
                    f"waits for attempt {i.attempts + 1}" if i.retry_at is not None and detail.row.blocked_on == RETRY
                    else "started, no outcome: possibly ran")
            rows.append((f"inflight:{i.slot}", [
                Text(str(i.slot), justify="right", style="bold yellow"), text(SlotKind.ACTIVITY), text(i.name),
                Text("in flight", style="bold yellow"), Text(note, style="yellow"),
                Text(str(i.attempts), justify="right", style="yellow"), Text(utc(i.started_at, "millis"), "dim"),
            ]))
        # A cursor on the last row of the history follows it as a running workflow records
        # slots (like tail -f), onto the next page when this one fills up.
        tailing = (self._cursor_after is None and not table.has_more_after and table.row_count > 0
                   and table.cursor_row == table.row_count - 1)
        if tailing and not at_end:
            self._page_slots(+1)
            self._cursor_after = SLOT_PAGE  # clamped to the last row of the next page
        table.has_more_before = detail.offset > 0
        table.has_more_after = not at_end
        table.set_page(rows, cursor_at=len(rows) - 1 if tailing and at_end else self._cursor_after)
        if not (tailing and not at_end):
            self._cursor_after = None
        info = Text(style="dim")
        if total:
            info.append(f" slots {detail.offset:,}–{detail.offset + len(detail.commands) - 1:,} of {total:,}")
            if total > SLOT_PAGE:
                info.append("   ] next page   [ previous page")
        else:
            info.append(" no slots recorded yet")
        info.append("   enter: show value")
        self.query_one("#slot-info", Static).update(info)

    def _draw_signals(self, detail: WorkflowDetail) -> None:
        shown, total = len(detail.signals), detail.signal_total
        table = self.query_one("#signal-table", PagedTable)
        table.has_more_before = detail.signal_offset > 0
        table.has_more_after = detail.signal_offset + shown < total
        table.set_page([
            (str(s.seq), [Text(str(s.seq), justify="right"), text(s.name), value_preview(s.payload, CELL_PREVIEW),
                          Text("consumed", style="green") if s.consumed else Text("waiting", style="bold yellow"),
                          Text(utc(s.sent_at, "millis"), style="dim")])
            for s in detail.signals
        ], cursor_at=self._signal_cursor_after)
        self._signal_cursor_after = None
        info = Text(style="dim")
        if not total:
            info.append(" no signals delivered yet")
        elif shown < total:
            first = detail.signal_offset + 1
            info.append(f" signals {first:,}–{first + shown - 1:,} of {total:,}")
            info.append(" (the latest)" if not table.has_more_after else "")
            info.append("   ] next page   [ previous page")
        else:
            info.append(f" {total:,} signal(s)")
        if total:
            info.append("   enter: show payload")
        self.query_one("#signal-info", Static).update(info)

    # -- actions

    def action_back(self) -> None:
        """Back to the list."""
        self.app.pop_screen()

    def action_tab(self, tab: str) -> None:
        """Switch tab."""
        self.query_one(TabbedContent).active = tab

    @on(TabbedContent.TabActivated)
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        # Keys follow the eye: the table of the tab in view takes the focus.
        target = {"slots": "#slot-table", "signals": "#signal-table", "diagnosis": "#aligned"}.get(event.pane.id or "")
        if target is not None:
            widget = self.query_one(target)
            # With nothing to move through on the tab (no aligned view), the tabs take the
            # focus, so left/right still switch tabs.
            (widget if widget.display else self.query_one(Tabs)).focus()

    def action_page(self, delta: int) -> None:
        """The next (1) or previous (-1) page of the table in view: slots or signals."""
        if self.query_one(TabbedContent).active == "signals":
            self._page_signals(delta)
        else:
            self._page_slots(delta)

    def _page_slots(self, delta: int) -> None:
        if self.detail is None:
            return
        offset = max(0, self.slot_offset + delta * SLOT_PAGE)
        if offset >= max(self.detail.row.slots, 1) or offset == self.slot_offset:
            return
        self.slot_offset = offset
        self._cursor_after = 0 if delta > 0 else SLOT_PAGE - 1
        self.reload()

    def _page_signals(self, delta: int) -> None:
        detail = self.detail
        if detail is None:
            return
        latest = max(0, detail.signal_total - SIGNAL_PAGE)
        current = detail.signal_offset
        offset = max(0, min(current + delta * SIGNAL_PAGE, latest))
        if offset == current:
            return
        # Back on the latest page, follow it again: new signals appear as they arrive.
        self.signal_offset = None if offset >= latest else offset
        # Keep the cursor on the signal next to the one it left.
        seq_after = current + SIGNAL_PAGE + 1 if delta > 0 else current
        self._signal_cursor_after = max(0, min(seq_after - 1 - offset, SIGNAL_PAGE - 1))
        self.reload()

    @on(PagedTable.PageRequested, "#slot-table")
    def _slot_edge(self, event: PagedTable.PageRequested) -> None:
        self._page_slots(event.delta)

    @on(PagedTable.PageRequested, "#signal-table")
    def _signal_edge(self, event: PagedTable.PageRequested) -> None:
        self._page_signals(event.delta)

    @on(DataTable.RowSelected, "#slot-table, #signal-table")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        # The rows are keyed by slot, by signal sequence number, or "inflight:SLOT".
        detail = self.detail
        key = self.query_one(f"#{event.data_table.id}", PagedTable).key_at(event.cursor_row)
        if detail is None or key is None:
            return
        wid = self.workflow_id
        if event.data_table.id == "signal-table":
            shown = [SlotScreen.for_signal(wid, s) for s in detail.signals if str(s.seq) == key]
        elif key.startswith("inflight:"):
            shown = [SlotScreen.for_inflight(wid, i) for i in detail.inflight_tasks if f"inflight:{i.slot}" == key]
        else:
            shown = [SlotScreen.for_command(wid, c) for c in detail.commands if str(c.slot) == key]
        if shown:
            self.app.push_screen(shown[0])

    def action_values(self) -> None:
        """Show the workflow's input, result and error in full."""
        if self.detail is not None:
            self.app.push_screen(SlotScreen.for_workflow(self.detail.row))

    def action_check(self) -> None:
        """Dry-replay the history against the current code and show the verdict."""
        self.query_one(TabbedContent).active = "diagnosis"
        self._diagnosing = True
        self._diagnose(True)

    def action_signal(self) -> None:
        """Send a signal to this workflow."""
        self.request_signal(self.workflow_id, self.detail.row.blocked_on if self.detail else None)

    # -- the operator's actions

    def _wid(self) -> Text:
        return text(self.workflow_id, "bold")

    def _acted(self, said: str | None) -> None:
        if said is not None:
            self.notify(printable(said), title="Done", markup=False)
            self.reload()

    def _refused_readonly(self) -> bool:
        """Refuse a write action in a read-only console (hidden already by check_action, if invoked anyway)."""
        if self.data.readonly:
            self.notify("the console is read-only: no write actions", severity="error", markup=False)
        return self.data.readonly

    def _confirm(self, title: str, body: Text, confirm: str, act: Callable[[str], str], *,
                 ask_reason: bool = False, allowed: bool = True) -> None:
        if self._refused_readonly():
            return
        head = Text(f"{title} ")
        head.append_text(self._wid())
        self.app.push_screen(ActionDialog(head, body, confirm, act, ask_reason=ask_reason, allowed=allowed),
                             self._acted)

    def action_cancel_workflow(self) -> None:
        """Ask this workflow to cancel: a reason, then confirm."""
        body = Text("Its code sees WorkflowCancelled at its current or next ctx call and may run compensating"
                    " activities; if the exception leaves it, it ends cancelled with the reason.")
        self._confirm("Cancel workflow", body, "Cancel workflow", lambda reason: self.data.cancel(self.workflow_id,
                                                                                                    reason),
                      ask_reason=True)

    def action_terminate_workflow(self) -> None:
        """Terminate this workflow, once confirmed."""
        body = Text("Terminate ")
        body.append_text(self._wid())
        body.append(" now? No workflow code runs again; an activity in flight may finish, but its outcome is not"
                    " recorded. This cannot be undone.")
        self._confirm("Terminate workflow", body, "Terminate", lambda reason: self.data.terminate(self.workflow_id,
                                                                                                   reason),
                      ask_reason=True)

    def action_retry_workflow(self) -> None:
        """Dry-replay this failed workflow against the code; show the verdict, then confirm the retry."""
        if self._refused_readonly():
            return
        self._retry_preview()

    @work(thread=True, group="action-preview", exit_on_error=False)
    def _retry_preview(self) -> None:
        try:
            preview = self.data.retry_preview(self.workflow_id)
        except Exception as exc:  # noqa: BLE001 - workflow code may raise anything during a dry replay
            self.post_message(self.ActionFailed("Retry", f"the dry replay failed: {exc}"))
            return
        self.post_message(self.RetryPreviewed(preview))

    def on_workflow_screen_retry_previewed(self, message: RetryPreviewed) -> None:
        """The verdict first: the dialog offers the retry only when the verdict allows it."""
        p = message.preview
        # `check`'s verdict, said once (it names the divergence, or what a retry would do).
        body = Text("dry replay against the current code: ", style="bold")
        body.append(printable(p.verdict), style="green" if p.allowed else "red")
        if p.allowed:
            body.append("\nRetry sets it pending again, history kept: a worker replays it and goes on.")
            self._confirm("Retry workflow", body, "Retry", lambda _reason: self.data.retry(self.workflow_id))
        elif p.fork_from is not None:
            # The way out the verdict names, offered here: a fork that runs the failed activity again.
            at = p.fork_from
            body.append(f"\nFork from slot {at} instead: a new workflow with slots 0–{at - 1} and every signal"
                        f" copied runs the activity at slot {at} again; this one is kept as it is.")
            self._confirm("Retry workflow", body, f"Fork from slot {at}",
                          lambda _reason: self.data.fork(self.workflow_id, at))
        else:
            self._confirm("Retry workflow", body, "Retry", lambda _reason: self.data.retry(self.workflow_id),
                          allowed=False)

    def action_fork_workflow(self) -> None:
        """Fork from the highlighted slot; the confirmation says which activities run again."""
        if self._refused_readonly():
            return
        key = self.query_one("#slot-table", PagedTable).current_key
        slot = int(key) if key is not None and key.isdigit() else (self.detail.row.slots if self.detail else 0)
        self._fork_preview(slot)

    @work(thread=True, group="action-preview", exit_on_error=False)
    def _fork_preview(self, slot: int) -> None:
        try:
            preview = self.data.fork_preview(self.workflow_id, slot)
        except Exception as exc:  # noqa: BLE001 - shown to the operator, not raised
            self.post_message(self.ActionFailed("Fork", str(exc)))
            return
        self.post_message(self.ForkPreviewed(preview))

    def on_workflow_screen_fork_previewed(self, message: ForkPreviewed) -> None:
        """Confirm the fork, naming the activities that will run again."""
        p = message.preview
        body = Text(f"A new workflow with slots 0–{p.slot - 1} and every signal copied; from slot {p.slot} its code"
                    " runs live. The original is untouched.\n" if p.slot else "A new workflow with every signal"
                    " copied and no slot: its code runs live from slot 0. The original is untouched.\n")
        if p.again:
            shown = ", ".join(p.again[:8]) + (f", … ({len(p.again)} in all)" if len(p.again) > 8 else "")
            body.append(f"{len(p.again)} recorded activit{'y' if len(p.again) == 1 else 'ies'} will run again,"
                        f" with new idempotency keys: {printable(shown)}", style="bold yellow")
        else:
            body.append("No recorded activity runs again.")
        self._confirm(f"Fork from slot {p.slot}:", body, "Fork", lambda _reason: self.data.fork(self.workflow_id,
                                                                                                 p.slot))

    def on_workflow_screen_action_failed(self, message: ActionFailed) -> None:
        """Say why the action could not be prepared."""
        self.notify(printable(message.reason), title=message.title, severity="error", markup=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The approval key: only while an approval request is pending, and never read-only."""
        if action == "answer":
            return not self.data.readonly and self.detail is not None and self.detail.approval is not None
        return super().check_action(action, parameters)

    def action_answer(self) -> None:
        """Open the approval dialog for the pending request (the one on screen: its id is bound to the answer)."""
        if self._refused_readonly():
            return
        if self.detail is None or self.detail.approval is None:
            self.notify("no approval request is pending", severity="warning", markup=False)
            return
        self.post_message(self.ApprovalRequested(self.workflow_id, self.detail.approval))

    def action_transcript(self) -> None:
        """Show the slots as a conversation."""
        self.app.push_screen(TranscriptScreen(self.data, self.workflow_id))

    def action_runs(self) -> None:
        """Show the run before the current one (ctx.continue_as_new); `[` and `]` step between runs there."""
        runs = self.detail.runs if self.detail is not None else ()
        if len(runs) < 2:
            self.notify("this workflow has one run: it never continued as new", severity="warning", markup=False)
            return
        self.app.push_screen(RunScreen(self.data, self.workflow_id, runs, runs[-2][0]))


def _value_cell(c: Slot) -> Text:
    """A slot's value or error, one line; a clock read shows as a time (the raw number is in its detail)."""
    if not c.ok:
        return text(c.error or "", "red")
    kind = kind_info(c.kind)
    if kind.time_note is not None and is_time(c.value):  # else the number is shown as it is
        return Text(f"{utc(c.value)}  ({kind.time_note})", no_wrap=True, overflow="ellipsis")
    if kind.marker is not None:
        return Text(f"marker: {kind.marker}", style="cyan", no_wrap=True, overflow="ellipsis")
    return value_preview(c.value, CELL_PREVIEW)
