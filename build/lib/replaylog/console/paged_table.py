"""A DataTable that holds one page of rows fetched in SQL, and asks for the next page at its edges."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, cast

from rich.console import RenderableType
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

Cells = Sequence[Text]
# (key, label, width, narrowest): a column is `width` cells wide when the terminal has room,
# and gives up cells, down to `narrowest`, when it does not (an 80-column terminal). The
# columns named to `define_columns(grow=…)` also take whatever room is left over (a wide one).
ColumnSpec = tuple[str, str | Text, int, int]
MOVE_HELP = "move; past the end of a page loads the next page"


def header(label: str | Text) -> Text:
    """A column label that ends in `…` where its column is narrower than it (not cut mid-word silently)."""
    label = label.copy() if isinstance(label, Text) else Text(label)
    label.no_wrap, label.overflow = True, "ellipsis"
    return label


class PagedTable(DataTable[Text]):
    """One page of a longer result; the screen that owns it fetches pages in SQL.

    Moving past the last row (or above the first) posts `PageRequested`, so `j`/`k`
    and the arrow keys walk the whole result without the table ever holding it.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "cursor_down", "Down", show=False, tooltip=MOVE_HELP),
        Binding("k", "cursor_up", "Up", show=False, tooltip=MOVE_HELP),
        # DataTable's own keys, here again to be named in the help (which lists tooltips).
        Binding("down", "cursor_down", "Down", show=False, tooltip=MOVE_HELP),
        Binding("up", "cursor_up", "Up", show=False, tooltip=MOVE_HELP),
        Binding("enter", "select_cursor", "Select", show=False, key_display="enter",
                tooltip="open the workflow, slot or signal under the cursor"),
        # Columns fit the width, so home/end go to the first/last row rather than scroll sideways.
        Binding("home", "scroll_top", "First row", show=False, tooltip="first / last row of the page"),
        Binding("end", "scroll_bottom", "Last row", show=False, tooltip="first / last row of the page"),
    ]

    @dataclass
    class PageRequested(Message):
        """The cursor ran off one end of the page: the owner should load the page `delta` away."""

        table: PagedTable
        delta: int

        @property
        def control(self) -> PagedTable:
            """The table that asked."""
            return self.table

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        # Rendered cell contents by what they show (see `_render_cell`), and styled cells by
        # place; made first, as DataTable clears its caches (and so these) while it starts.
        # Small: what they hold is walked by every full garbage collection.
        self._content_cache: LRUCache[tuple[object, ...], list[list[Segment]]] = LRUCache(1024)
        self._styled_cache: dict[tuple[object, ...], list[list[Segment]]] = {}
        self._styled_for = -1  # the DataTable update count the styled cells belong to
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=True)
        self.has_more_after = False
        self.has_more_before = False
        self._keys: list[str] = []
        self._specs: list[ColumnSpec] = []
        self._grow: list[bool] = []

    def define_columns(self, specs: Sequence[ColumnSpec], grow: Sequence[str] = ()) -> None:
        """Add the columns; their widths then follow the table's width (see `fit_widths`).

        Args:
            specs: (key, label, width, narrowest) per column, in order.
            grow: the keys of the columns that share the room left over on a wide terminal.
        """
        self._specs = list(specs)
        self._grow = [key in grow for key, _, _, _ in self._specs]
        for key, label, width, _ in self._specs:
            self.add_column(header(label), key=key, width=width)
        self._fit()

    def set_label(self, key: str, label: str | Text) -> None:
        """Change a column's label (cut with `…` like every label)."""
        self.columns[ColumnKey(key)].label = header(label)

    def on_resize(self, _event: events.Resize) -> None:
        """Fit the columns to the new width."""
        self._fit()

    def _fit(self) -> None:
        if not self._specs or not self.size.width:
            return
        # Keep room for the vertical scrollbar, so a page that starts to scroll still fits.
        room = self.size.width - self.styles.scrollbar_size_vertical - 2 * self.cell_padding * len(self._specs)
        widths = fit_widths([(width, narrowest) for _, _, width, narrowest in self._specs], room, self._grow)
        columns = list(self.ordered_columns)
        if [c.width for c in columns] == widths:
            return
        # Rebuilt through the public API (a resize is rare; the table holds one page at most).
        rows = [self.get_row_at(i) for i in range(self.row_count)]
        cursor = self.cursor_row
        self.clear(columns=True)
        for column, width in zip(columns, widths, strict=True):
            self.add_column(column.label, key=column.key.value, width=width)
        for position, cells in enumerate(rows):
            self.add_row(*cells, key=str(position))
        if rows:
            self.move_cursor(row=min(cursor, len(rows) - 1), animate=False)

    def set_page(self, rows: Sequence[tuple[str, Cells]], *, cursor_at: str | int | None = None) -> None:
        """Show these rows, changing only the cells that differ from what is shown.

        Rows are keyed by position, not by their own key: a live refresh whose rows moved
        (a list sorted by "updated") rewrites cells in place instead of clearing and
        rebuilding the table, which would reset its scroll and redo its layout.

        Args:
            rows: (row key, cells) in display order; `key_at` maps a position back to its key.
            cursor_at: a row key to put the cursor on, or an index; None follows the row
                under the cursor to wherever it moved (or stays at the same position).
        """
        keys = [key for key, _ in rows]
        following = self.current_key if cursor_at is None else cursor_at
        shown = self.row_count
        columns = list(self.columns)
        for position, (_key, cells) in enumerate(rows):
            row_key = str(position)
            if position >= shown:
                self.add_row(*cells, key=row_key)
                continue
            for column, new, old in zip(columns, cells, self.get_row(row_key), strict=False):
                if not _same(new, old):
                    self.update_cell(row_key, column, new)
        for position in range(len(rows), shown):
            self.remove_row(str(position))
        self._keys = keys
        if not rows:
            return
        index = self.cursor_row
        if isinstance(following, int):
            index = following
        elif following in keys:
            index = keys.index(following)
        index = max(0, min(index, len(rows) - 1))
        if index != self.cursor_row:
            self.move_cursor(row=index, animate=False)

    def key_at(self, position: int) -> str | None:
        """The key of the row shown at a position."""
        return self._keys[position] if 0 <= position < len(self._keys) else None

    @property
    def current_key(self) -> str | None:
        """The key of the row under the cursor, if any."""
        return self.key_at(self.cursor_row) if self.row_count else None

    def action_cursor_down(self) -> None:
        """Move down; past the last row, ask for the next page."""
        if self.row_count and self.cursor_row >= self.row_count - 1 and self.has_more_after:
            self.post_message(self.PageRequested(self, +1))
            return
        super().action_cursor_down()

    def action_cursor_up(self) -> None:
        """Move up; above the first row, ask for the previous page."""
        if self.cursor_row <= 0 and self.has_more_before:
            self.post_message(self.PageRequested(self, -1))
            return
        super().action_cursor_up()

    def _clear_caches(self) -> None:
        super()._clear_caches()
        self._content_cache.clear()
        self._styled_cache.clear()

    def notify_style_update(self) -> None:
        """Drop the rendered cells with DataTable's own (a theme or CSS change restyles them)."""
        super().notify_style_update()
        self._content_cache.clear()
        self._styled_cache.clear()

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False) -> list[list[Segment]]:
        """Render a body cell as DataTable does, reusing the rendered text of a cell that showed the same.

        DataTable drops every rendered cell on any change (its caches are keyed by an update
        counter), so a live refresh whose rows all moved down one (a new workflow on top of a
        list sorted by "updated") re-rendered every visible cell through Rich: 50-200 ms on
        the UI thread. The text of a cell does not depend on where it is shown; only its
        styles (zebra stripe, cursor, the row/column meta a click reads) do, and applying
        those to cached segments is cheap. The result is the same segments DataTable makes
        (a test compares them); header, label and multi-line cells take DataTable's path.
        """
        if row_index < self.fixed_rows or column_index < self.fixed_columns or row_index < 0 or column_index < 0:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        row = self.rows.get(row_key) if row_key is not None else None
        cells = self._get_row_renderables(row_index).cells
        if row is None or row.height != 1 or column_index >= len(cells) or not isinstance(cells[column_index], Text):
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        cell = cast(Text, cells[column_index])
        if self._styled_for != self._update_count:  # any change restyles every cell: drop the old ones
            self._styled_cache.clear()
            self._styled_for = self._update_count
        place = (row_key, column_index, base_style, cursor, hover, self._show_hover_cursor,
                 self._pseudo_class_state, width)
        styled = self._styled_cache.get(place)
        if styled is not None:
            return styled
        content = (cell.plain, cell.style, tuple(cell.spans), cell.justify, cell.overflow, cell.no_wrap, cell.end,
                   width, self.cell_padding)
        lines = self._content_cache.get(content)
        if lines is None:
            options = self.app.console_options.update_dimensions(width, 1).update(no_wrap=True)
            lines = self.app.console.render_lines(Padding(cast(RenderableType, cell), (0, self.cell_padding)), options)
            self._content_cache[content] = lines
        component_style, post_style = self._get_styles_to_render_cell(
            False, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor,
            self.cursor_foreground_priority == "css", self.cursor_background_priority == "css")
        pre_style = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component_style
        styled = [list(Segment.apply_style(line, pre_style, post_style)) for line in lines]
        self._styled_cache[place] = styled
        return styled


def _same(a: Text, b: object) -> bool:
    # Text.__eq__ ignores the base style, and a status cell differs from the old one only by it.
    return (isinstance(b, Text) and a.plain == b.plain and a.style == b.style and a.spans == b.spans
            and a.justify == b.justify)


def fit_widths(columns: Sequence[tuple[int, int]], room: int, grow: Sequence[bool] = ()) -> list[int]:
    """Column widths that fit `room` cells: each (width, narrowest) gives up cells in
    proportion to what it can spare, and never goes below its narrowest; with room to
    spare, the columns marked in `grow` share it (the first ones take the odd cells)."""
    widths = [width for width, _ in columns]
    deficit = sum(widths) - room
    growing = [i for i, g in enumerate(grow) if g]
    if deficit < 0 and growing:
        extra, odd = divmod(-deficit, len(growing))
        for n, i in enumerate(growing):
            widths[i] += extra + (1 if n < odd else 0)
        return widths
    spare = [width - narrowest for width, narrowest in columns]
    if deficit <= 0 or not sum(spare):
        return widths
    if deficit >= sum(spare):
        return [narrowest for _, narrowest in columns]
    total = sum(spare)
    cuts = [deficit * s // total for s in spare]
    left = deficit - sum(cuts)
    for i in sorted(range(len(cuts)), key=lambda i: spare[i] - cuts[i], reverse=True):
        if left <= 0:
            break
        if cuts[i] < spare[i]:
            cuts[i] += 1
            left -= 1
    return [width - cut for width, cut in zip(widths, cuts, strict=True)]
