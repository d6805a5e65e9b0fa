"""The workflows screen: a live, filtered, sorted page of workflows with status counts."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import ClassVar

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.timer import Timer
from textual.widgets import DataTable, Input, Static

from replaylog.console.action_dialog import ActionDialog
from replaylog.console.data import (
    BULK_SHOWN,
    STATUSES,
    ActionRefused,
    BulkAction,
    BulkPreview,
    ConsoleData,
    WorkflowsPage,
    WorkflowsQuery,
)
from replaylog.console.format import STATUS_STYLES, age, status_text, text, waits_cell
from replaylog.console.key_footer import KeyFooter
from replaylog.console.live_screen import LiveScreen
from replaylog.console.paged_table import PagedTable
from replaylog.engine.text import printable

# (key, label, width, narrowest): narrower on an 80-column terminal; the error takes the room
# a wide terminal has left.
COLUMNS = (("id", "id", 28, 11), ("workflow", "workflow", 18, 12), ("status", "status", 10, 9),
           ("blocked_on", "blocked on", 24, 7), ("slots", "slots", 8, 5), ("updated", "updated", 10, 9),
           ("error", "error", 30, 8))
# On a wide terminal "blocked on" grows beside the error until the page's longest wait fits
# (an approval's action, request and deadline with its countdown), at most this wide; the
# error takes the rest. Its width moves in steps of BLOCKED_ON_STEP, so a ticking countdown
# does not re-lay the table out every second.
BLOCKED_ON_WIDEST = 72
# Hidden in this order while the narrowest widths do not fit (a phone's 64 columns): the
# id, the status, what it waits on and the error are what an operator acts on there.
DROPPED_WHEN_NARROW = ("slots", "updated", "workflow")
BLOCKED_ON_STEP = 8
# The columns `o` steps through and a header click sorts by (the error is not indexed: no sort).
SORT_ORDER = ["id", "workflow", "status", "blocked_on", "slots", "updated"]
FILTER_DEBOUNCE = 0.15  # seconds of quiet typing before the filter queries
COUNTS_EVERY = 0.5  # seconds between status recounts while commits keep coming
STATUS_KEYS = {str(i + 1): status for i, status in enumerate(STATUSES)}
# What each bulk action does to one workflow, as its dialog says it.
BULK_WHAT = {
    "retry": "Each failed one is dry-replayed against the code and, if it replays, set pending again.",
    "cancel": "Each pending, running or blocked one is asked to cancel (WorkflowCancelled at its next ctx call).",
    "terminate": "Each pending, running or blocked one is stopped at once: no code of it runs again.",
}
STATUS_HELP = "show " + ", ".join(["all", *STATUSES])
Row = tuple[str, list[Text]]  # (workflow id, its cells)


class WorkflowsScreen(LiveScreen):
    """Every workflow, one page at a time; updates within a second of a commit."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "Open", show=False),
        Binding("slash", "filter", "Filter", key_display="/",
                tooltip="filter by id or name, and fields: status:failed error_text:declined customer=c-42"),
        Binding("0", "status(None)", "All", show=False, tooltip=STATUS_HELP),
        *[Binding(k, f"status('{s}')", s.capitalize(), show=False, tooltip=STATUS_HELP)
          for k, s in STATUS_KEYS.items()],
        Binding("a", "awaiting_approval", "Approvals",
                tooltip="only workflows waiting for an approval (again: all of them)"),
        Binding("o", "sort", "Sort", tooltip="sort by the next column, ascending first (or click a column header)"),
        Binding("r", "reverse", "Reverse", tooltip="reverse the sort"),
        # The page line names these keys when there is more than one page.
        Binding("right_square_bracket", "page(1)", "Next page", key_display="]", show=False,
                tooltip="next / previous page"),
        Binding("left_square_bracket", "page(-1)", "Prev page", key_display="[", show=False,
                tooltip="next / previous page"),
        Binding("s", "signal", "Signal", tooltip="send a signal to the workflow under the cursor"),
        Binding("escape", "clear_filter", "Clear filter", show=False, tooltip="clear the filter"),
        Binding("space", "mark", "Mark", show=False,
                tooltip="mark or unmark the workflow under the cursor, for R, X and T"),
        Binding("R", "bulk('retry')", "Retry many", show=False,
                tooltip="retry the marked workflows, else every one the filter takes (confirm)"),
        Binding("X", "bulk('cancel')", "Cancel many", show=False,
                tooltip="cancel the marked workflows, else every one the filter takes (confirm)"),
        Binding("T", "bulk('terminate')", "Terminate many", show=False,
                tooltip="terminate the marked workflows, else every one the filter takes (confirm)"),
    ]

    @dataclass
    class PageLoaded(Message):
        """A page of workflows was read (on a worker thread)."""

        asked: WorkflowsQuery
        page: WorkflowsPage
        cells: list[Row]
        # The rows without the counts: shown at once, the read goes on for the counts.
        partial: bool = False

    @dataclass
    class BulkPreviewed(Message):
        """The workflows a bulk action would take were found (on a worker thread)."""

        preview: BulkPreview

    @dataclass
    class BulkFailed(Message):
        """A bulk action could not be prepared: the one line why."""

        reason: str

    @dataclass
    class WorkflowChosen(Message):
        """The operator chose a workflow to open (the app shows it)."""

        workflow_id: str

    def __init__(self, data: ConsoleData) -> None:
        super().__init__(data)
        self.query_state = WorkflowsQuery()
        self.page: WorkflowsPage | None = None
        self._cursor_after: int | None = None
        self._counted_at = 0.0
        self._recount_due = False
        self._filter_timer: Timer | None = None
        self._filter_pending = False
        self._open_when_shown = False
        self._cells: list[Row] = []
        self._load_failed = False  # the last read failed: its reason is on screen
        # The workflows marked (space) for a bulk action, kept across pages and filters.
        self.marked: set[str] = set()

    def compose(self) -> ComposeResult:
        """The title bar, the status counts, the filter, the table and the page line."""
        yield Static(id="topbar")
        yield Static(id="counts")
        yield Static(id="queues")  # shown only when a worker has declared a queue
        yield Input(placeholder="filter: id or name, status:failed error_text:\"card declined\" customer=c-42"
                                " (enter: done, esc: clear)", id="filter")
        yield PagedTable(id="workflows")
        yield Static(id="pageinfo")
        yield KeyFooter()

    def on_mount(self) -> None:
        """Build the columns and ask for the first page."""
        table = self.query_one(PagedTable)
        table.define_columns([(key, self._label(key), width, narrowest) for key, _, width, narrowest in COLUMNS],
                             grow=["blocked_on", "error"], widest={"blocked_on": _blocked_on_width([])},
                             drop=DROPPED_WHEN_NARROW)
        self.query_one("#filter", Input).display = False
        self._draw_topbar()
        self.reload()
        # Ages ("4s ago") move without a commit; redraw them from the cached page.
        # Ages and the countdowns to timers and deadlines tick on screen.
        self.set_interval(1, self._redraw_ages, name="ages")
        table.focus()

    # -- loading

    @property
    def busy(self) -> bool:
        """Whether a page is still on its way."""
        return super().busy or self._filter_pending

    def read(self) -> None:
        """Re-query the page on screen."""
        # Status counts scan an index of every workflow: under a stream of commits, refresh
        # them every COUNTS_EVERY seconds and reuse them in between (the page is always fresh).
        now = time.monotonic()
        counts = None
        if self.page is not None and self.page.total >= 0 and now - self._counted_at < COUNTS_EVERY:
            counts = self.page.counts
            if not self._recount_due:
                # A trailing recount, so the last burst of commits is counted too.
                self._recount_due = True
                self.set_timer(COUNTS_EVERY, self._recount)
        else:
            self._counted_at = now
        self._fetch(self.query_state, counts, self.page is None)

    def _recount(self) -> None:
        self._recount_due = False
        self.reload()

    @work(thread=True, group="workflows", exit_on_error=False)
    def _fetch(self, query: WorkflowsQuery, counts: dict[str, int] | None, first: bool = False) -> None:
        try:
            if first:
                # The first paint does not wait for the status counts: they scan an
                # index of every workflow (0.15 s at a million, several times that
                # from a cold disk cache), the page is a few rows of another index.
                quick = self.data.workflows(query, count=False)
                self.post_message(self.PageLoaded(query, quick, row_cells(quick, self.data.clock()), partial=True))
            page = self.data.workflows(query, counts)
            cells = row_cells(page, self.data.clock())  # here, not on the UI thread
        except Exception as exc:  # noqa: BLE001 - shown to the operator, not raised
            self.post_message(self.LoadFailed(str(exc)))
            return
        self.post_message(self.PageLoaded(query, page, cells))

    def on_workflows_screen_page_loaded(self, message: PageLoaded) -> None:
        """Show the page if it answers the current question; else ask again."""
        if message.partial:
            # The same read goes on for the counts: draw the rows, stay loading.
            if message.asked == self.query_state and self.page is None:
                self.page = message.page
                self._cells = message.cells
                self._redraw()
            return
        if message.asked == self.query_state:
            self._load_failed = False
            self.query_state = message.page.query  # the store may have clamped the offset
            self.page = message.page
            self._cells = message.cells
            self._redraw()
            if self._open_when_shown and not self._filter_pending:
                self._open_when_shown = False
                self.action_open()
        else:
            self._dirty = True
        self.read_done()

    def on_live_screen_load_failed(self, message: LiveScreen.LoadFailed) -> None:
        """Say why the list could not be read; the next change or key tries again."""
        self._open_when_shown = False
        self._load_failed = True  # the ticking ages must not draw the last good page over the reason
        reason = printable(f"cannot read the database: {message.reason}", oneline=True)
        self.query_one("#pageinfo", Static).update(Text(reason, "red"))
        self.read_done()

    # -- drawing

    def _label(self, key: str) -> Text:
        label = {k: lbl for k, lbl, _, _ in COLUMNS}[key]
        if key == self.query_state.sort:
            return Text(f"{label} {'▼' if self.query_state.descending else '▲'}", style="bold")
        return Text(label)

    def _draw_topbar(self) -> None:
        self.query_one("#topbar", Static).update(self.topbar(Text("  workflows")))

    def _redraw_ages(self) -> None:
        if self.page is not None and not self._load_failed:
            self._cells = row_cells(self.page, self.data.clock())
            # Where the cursor goes on a page still on its way is that page's: a tick keeps it.
            wanted, self._cursor_after = self._cursor_after, None
            self._redraw()
            self._cursor_after = wanted

    def on_resize(self, _event: events.Resize) -> None:
        """Pack the status counts again for the new width."""
        self._redraw()

    def _redraw(self) -> None:
        page = self.page
        if page is None:
            return
        q = page.query
        # The key that selects each status sits beside it; the active filter is in reverse.
        counted = page.total >= 0
        entries = [Text.assemble(("0 ", "dim"), ("all", "bold reverse" if q.status is None else "bold"),
                                 f" {sum(page.counts.values()):,}" if counted else " …")]
        for key, status in STATUS_KEYS.items():
            entries.append(Text.assemble(
                (f"{key} ", "dim"), (status, STATUS_STYLES[status] + (" reverse" if q.status == status else "")),
                f" {page.counts.get(status, 0):,}" if counted else " …"))
        if not counted:
            entries.append(Text("counting…", style="dim"))
        bar = self.query_one("#counts", Static)
        bar.update(packed(entries, bar.content_size.width))
        if page.total >= 0 and page.problem is None:  # a page read without counts has no queue figures: keep them
            line = self.query_one("#queues", Static)
            line.display = bool(page.queues)
            line.update(Text("queues  ", style="dim") + Text("   ".join(page.queues)))
        table = self.query_one(PagedTable)
        for key, _, _, _ in COLUMNS:
            table.set_label(key, self._label(key))
        table.set_widest("blocked_on", _blocked_on_width(self._cells))
        table.has_more_before = q.offset > 0
        table.has_more_after = q.offset + len(page.rows) < page.total if counted else len(page.rows) >= q.limit
        table.set_page([(key, [Text("● ", style="bold magenta") + cells[0], *cells[1:]] if key in self.marked
                         else cells) for key, cells in self._cells], cursor_at=self._cursor_after)
        self._cursor_after = None
        table.refresh()
        info = Text()
        if not counted:
            info.append(f" {q.offset + 1:,}–{q.offset + len(page.rows):,} of …" if page.rows else " …")
        elif page.total:
            info.append(f" {q.offset + 1:,}–{q.offset + len(page.rows):,} of {page.total:,}")
            if page.total > q.limit:
                info.append("   ] next page   [ previous page", style="dim")
        elif page.problem is not None:
            info.append(" " + printable(page.problem, oneline=True), style="red")
        else:
            info.append(" no workflows match" if (q.status or q.text or q.awaiting) else " no workflows yet")
        info.append(f"   sorted by {q.sort} {'▼' if q.descending else '▲'}", style="dim")
        if q.text:
            info.append("   filter: ", style="dim")
            info.append_text(text(q.text, "bold"))
        if self.marked:
            info.append(f"   {len(self.marked):,} marked", style="bold magenta")
            info.append(" (R X T: act on them)", style="dim")
        if q.awaiting:
            info.append("   awaiting ", style="dim")
            info.append(q.awaiting, style="bold yellow")
            info.append(" (a: all)", style="dim")
        self.query_one("#pageinfo", Static).update(info)

    def _ask(self, query: WorkflowsQuery, cursor: int | None = 0) -> None:
        self.query_state = query
        self._cursor_after = cursor
        self.reload()

    # -- actions

    def action_filter(self) -> None:
        """Show the filter box and type into it."""
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        # A text filter scans every row (LIKE '%…%'), so wait for a pause in the typing.
        if self._filter_timer is not None:
            self._filter_timer.stop()
        self._filter_pending = True
        self._filter_timer = self.set_timer(FILTER_DEBOUNCE, lambda: self._apply_filter(event.value))

    def _apply_filter(self, value: str) -> None:
        self._filter_pending = False
        self._filter_timer = None
        if value != self.query_state.text:
            self._ask(replace(self.query_state, text=value, offset=0))
        elif self._open_when_shown and not self._page_is_stale:
            self._open_when_shown = False
            self.action_open()

    @on(Input.Submitted, "#filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        if not event.value:
            event.input.display = False
        self.query_one(PagedTable).focus()

    def action_clear_filter(self) -> None:
        """Drop the text filter (esc)."""
        box = self.query_one("#filter", Input)
        if box.value or box.display:
            box.value = ""
            box.display = False
            self.query_one(PagedTable).focus()
            self._ask(replace(self.query_state, text="", offset=0))

    def action_awaiting_approval(self) -> None:
        """Toggle the filter to workflows waiting for an approval (with the status and text filters)."""
        awaiting = None if self.query_state.awaiting else "approval"
        self._ask(replace(self.query_state, awaiting=awaiting, offset=0))

    def action_status(self, status: str | None) -> None:
        """Show only workflows in one status (None: all)."""
        self._ask(replace(self.query_state, status=status, offset=0))

    def action_sort(self, key: str | None = None) -> None:
        """Sort by the next column (or by `key`), ascending first; `r` reverses."""
        q = self.query_state
        if key is None:
            key = SORT_ORDER[(SORT_ORDER.index(q.sort) + 1) % len(SORT_ORDER)] if q.sort in SORT_ORDER else "id"
        self._ask(replace(q, sort=key, descending=False, offset=0))

    def action_reverse(self) -> None:
        """Flip the sort direction."""
        self._ask(replace(self.query_state, descending=not self.query_state.descending, offset=0))

    def action_page(self, delta: int) -> None:
        """Load the next (1) or previous (-1) page."""
        q = self.query_state
        offset = max(0, q.offset + delta * q.limit)
        if self.page is not None and offset >= self.page.total:
            return
        if offset != q.offset:
            self._ask(replace(q, offset=offset), cursor=0 if delta > 0 else q.limit - 1)

    @on(PagedTable.PageRequested)
    def _edge(self, event: PagedTable.PageRequested) -> None:
        self.action_page(event.delta)

    @on(DataTable.HeaderSelected)
    def _header(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        if key not in SORT_ORDER:
            return
        if key == self.query_state.sort:
            self.action_reverse()
        else:
            self.action_sort(key)

    @property
    def _page_is_stale(self) -> bool:
        """Whether the rows on screen answer an older question (a key changed it; the read is on its way)."""
        return self.page is None or self._filter_pending or self.page.query != self.query_state

    @on(DataTable.RowSelected)
    def _row_selected(self, _event: DataTable.RowSelected) -> None:
        self.action_open()

    def action_open(self) -> None:
        """Open the workflow under the cursor; right after a key changed the list, once it is shown."""
        if self._page_is_stale:
            # "3" then enter, typed together, means the first blocked workflow, not whatever
            # row the old page had under the cursor.
            self._open_when_shown = True
            return
        key = self.query_one(PagedTable).current_key
        if key is not None:
            self.post_message(self.WorkflowChosen(key))

    def action_mark(self) -> None:
        """Mark or unmark the workflow under the cursor, then move down."""
        table = self.query_one(PagedTable)
        key = table.current_key
        if key is None:
            return
        self.marked.symmetric_difference_update({key})
        self._redraw()
        table.action_cursor_down()

    def action_bulk(self, action: BulkAction) -> None:
        """Find the workflows the action takes (the marked ones, else the filtered set), then confirm."""
        if self.data.readonly:
            self.notify("the console is read-only: no write actions", severity="error", markup=False)
            return
        self._bulk_preview(action, self.query_state, tuple(sorted(self.marked)))

    @work(thread=True, group="action-preview", exit_on_error=False)
    def _bulk_preview(self, action: BulkAction, query: WorkflowsQuery, marked: tuple[str, ...]) -> None:
        try:
            preview = self.data.bulk_preview(action, query, marked)
        except ActionRefused as exc:
            self.post_message(self.BulkFailed(str(exc)))
            return
        self.post_message(self.BulkPreviewed(preview))

    def on_workflows_screen_bulk_failed(self, message: BulkFailed) -> None:
        """Say why the bulk action could not be prepared."""
        self.notify(printable(message.reason), title="Bulk action", severity="error", markup=False)

    def on_workflows_screen_bulk_previewed(self, message: BulkPreviewed) -> None:
        """Name the workflows and what will be done to each; the dialog takes the action on confirm."""
        p = message.preview
        n = len(p.ids)
        which = "marked" if p.marked else "the filter takes"
        body = Text(f"{n:,} workflow(s) {which}", style="bold")
        if p.ids:
            body.append(": " + ", ".join(p.ids[:BULK_SHOWN]) + (", …" if n > BULK_SHOWN else ""))
        body.append(f"\n{BULK_WHAT[p.action]} Each is done on its own, audited as if done one by one; one"
                    " refusal does not stop the rest.")
        title = Text(f"{p.action.capitalize()} {n:,} workflow(s)")
        self.app.push_screen(ActionDialog(title, body, p.action.capitalize(), lambda reason: self.data.bulk(p, reason),
                                          ask_reason=p.action != "retry", allowed=n > 0), self._bulk_done)

    def _bulk_done(self, said: str | None) -> None:
        if said is not None:
            self.notify(printable(said), title="Done", markup=False)
            self.marked.clear()
            self.reload()

    def action_signal(self) -> None:
        """Send a signal to the workflow under the cursor."""
        key = self.query_one(PagedTable).current_key
        if key is None or self.page is None:
            return
        row = next((r for r in self.page.rows if r.id == key), None)
        self.request_signal(key, row.blocked_on if row else None)


def packed(entries: list[Text], width: int, gap: int = 2) -> Text:
    """The entries on as many lines as `width` needs (0: one line), never one cut in two.

    On a phone's width (64 columns) the status counts take two lines instead of losing
    the last statuses off the edge.
    """
    lines: list[Text] = []
    for entry in entries:
        if lines and (not width or len(lines[-1]) + gap + len(entry) <= width):
            lines[-1].append(" " * gap)
            lines[-1].append_text(entry)
        else:
            lines.append(entry.copy())
    return Text("\n").join(lines)


def _blocked_on_width(cells: list[Row]) -> int:
    """How wide "blocked on" may grow for these rows: its longest cell, in steps, within its bounds."""
    index = [key for key, _, _, _ in COLUMNS].index("blocked_on")
    default = COLUMNS[index][2]
    longest = max((row[index].cell_len for _, row in cells), default=0)
    return max(default, min(BLOCKED_ON_WIDEST, -(-longest // BLOCKED_ON_STEP) * BLOCKED_ON_STEP))


def row_cells(page: WorkflowsPage, now: float) -> list[Row]:
    """The table's cells for a page, built where the page is read (a worker thread)."""
    # The soonest timer or deadline on the page is marked: it fires next.
    soonest = min((r.wake_at for r in page.rows if r.wake_at is not None), default=None)
    return [
        (r.id, [text(r.id), text(r.workflow), status_text(r.status),
                # A pending workflow no live worker can run says so, as `replaylog list` does.
                text(r.no_worker, "yellow") if r.no_worker else
                waits_cell(r.waits, r.wake_at, now, first=r.wake_at is not None and r.wake_at == soonest),
                Text(f"{r.slots:,}", justify="right"), Text(age(r.updated_at, now), style="dim"),
                # Stored text: one line, never markup; the column cuts it with `…`.
                text(r.error or "", "red")])
        for r in page.rows
    ]
