"""A DataTable that holds one page of rows fetched in SQL, and asks for the next page at its edges."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
        self._widest: list[int | None] = []
        self._drop: list[str] = []
        # The columns shown (indices into _specs): all of them unless the terminal is too
        # narrow even for their narrowest widths; and the page's rows whole, hidden cells too.
        self._shown: list[int] = []
        self._rows: list[Cells] = []

    def define_columns(self, specs: Sequence[ColumnSpec], grow: Sequence[str] = (),
                       widest: Mapping[str, int] | None = None, drop: Sequence[str] = ()) -> None:
        """Add the columns; their widths then follow the table's width (see `fit_widths`).

        Args:
            specs: (key, label, width, narrowest) per column, in order.
            grow: the keys of the columns that share the room left over on a wide terminal.
            widest: how wide a growing column may get (its longest useful content); the
                others take the rest.
            drop: the keys of columns to hide, in this order, while even the narrowest
                widths do not fit (a phone's 64 columns): the rest then fit, none cut off
                the edge.
        """
        self._specs = list(specs)
        self._grow = [key in grow for key, _, _, _ in self._specs]
        self._widest = [(widest or {}).get(key) for key, _, _, _ in self._specs]
        self._drop = list(drop)
        self._shown = list(range(len(self._specs)))
        for key, label, width, _ in self._specs:
            self.add_column(header(label), key=key, width=width)
        self._fit()

    def set_widest(self, key: str, width: int) -> None:
        """How wide a growing column may get from now on (say, its widest cell on this page); refits if it changed."""
        index = [k for k, _, _, _ in self._specs].index(key)
        if self._widest[index] != width:
            self._widest[index] = width
            self._fit()

    def set_label(self, key: str, label: str | Text) -> None:
        """Change a column's label (cut with `…` like every label); a hidden column's is kept for when it shows."""
        index = [k for k, _, _, _ in self._specs].index(key)
        spec = self._specs[index]
        self._specs[index] = (spec[0], label, spec[2], spec[3])
        if ColumnKey(key) in self.columns:
            self.columns[ColumnKey(key)].label = header(label)

    @property
    def hidden(self) -> list[str]:
        """The keys of the columns hidden for want of width."""
        return [key for i, (key, _, _, _) in enumerate(self._specs) if i not in self._shown]

    def _visible(self, cells: Cells) -> list[Text]:
        """The cells of the columns shown."""
        return [cells[i] for i in self._shown if i < len(cells)]

    def on_resize(self, _event: events.Resize) -> None:
        """Fit the columns to the new width."""
        self._fit()

    def _fit(self) -> None:
        if not self._specs or not self.size.width:
            return
        shown = list(range(len(self._specs)))
        keys = [key for key, _, _, _ in self._specs]
        for key in self._drop:
            # Keep room for the vertical scrollbar, so a page that starts to scroll still fits.
            room = self.size.width - self.styles.scrollbar_size_vertical - 2 * self.cell_padding * len(shown)
            if sum(self._specs[i][3] for i in shown) <= room:
                break
            shown.remove(keys.index(key))
        room = self.size.width - self.styles.scrollbar_size_vertical - 2 * self.cell_padding * len(shown)
        widths = fit_widths([(self._specs[i][2], self._specs[i][3]) for i in shown], room,
                            [self._grow[i] for i in shown], [self._widest[i] for i in shown])
        labels = {c.key.value: c.label for c in self.ordered_columns}
        if shown == self._shown and [c.width for c in self.ordered_columns] == widths:
            return
        # Rebuilt through the public API (a resize is rare; the table holds one page at most).
        rows = self._rows
        self._shown = shown
        cursor = self.cursor_row
        self.clear(columns=True)
        for i, width in zip(shown, widths, strict=True):
            key = keys[i]
            self.add_column(labels.get(key, header(self._specs[i][1])), key=key, width=width)
        for position, cells in enumerate(rows):
            self.add_row(*self._visible(cells), key=str(position))
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
        self._rows = [cells for _, cells in rows]
        for position, (_key, whole) in enumerate(rows):
            row_key = str(position)
            cells = self._visible(whole)
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


def fit_widths(columns: Sequence[tuple[int, int]], room: int, grow: Sequence[bool] = (),
               widest: Sequence[int | None] = ()) -> list[int]:
    """Column widths that fit `room` cells: each (width, narrowest) gives up cells in
    proportion to what it can spare, and never goes below its narrowest; with room to
    spare, the columns marked in `grow` share it (the first ones take the odd cells), each
    up to its `widest` (None: no limit), the others taking what a full one leaves."""
    widths = [width for width, _ in columns]
    deficit = sum(widths) - room
    caps = list(widest) + [None] * (len(columns) - len(widest))
    growing = [i for i, g in enumerate(grow) if g]
    if deficit < 0 and growing:
        left = -deficit
        while left > 0:
            open_ = [i for i in growing if caps[i] is None or widths[i] < (caps[i] or 0)]
            if not open_:
                break
            extra, odd = divmod(left, len(open_))
            for n, i in enumerate(open_):
                give = extra + (1 if n < odd else 0)
                cap = caps[i]
                if cap is not None:
                    give = min(give, cap - widths[i])
                widths[i] += give
                left -= give
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
