"""A DataTable that holds one page of rows fetched in SQL, and asks for the next page at its edges."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable

Cells = Sequence[Text]


class PagedTable(DataTable[Text]):
    """One page of a longer result; the screen that owns it fetches pages in SQL.

    Moving past the last row (or above the first) posts `PageRequested`, so `j`/`k`
    and the arrow keys walk the whole result without the table ever holding it.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    class PageRequested(Message):
        """The cursor ran off one end of the page: the owner should load the page `delta` away."""

        def __init__(self, table: PagedTable, delta: int) -> None:
            super().__init__()
            self.table = table
            self.delta = delta

        @property
        def control(self) -> PagedTable:
            """The table that asked."""
            return self.table

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=True)
        self.has_more_after = False
        self.has_more_before = False

    def set_page(self, rows: Sequence[tuple[str, Cells]], *, cursor_at: str | int | None = None) -> None:
        """Show these rows; cells change in place when the same rows are already shown.

        Args:
            rows: (row key, cells) in display order.
            cursor_at: a row key to keep the cursor on, or an index; None keeps the current key.
        """
        keys = [key for key, _ in rows]
        current_keys = [rk.value for rk in self.rows]
        if cursor_at is None and self.row_count:
            cursor_at = self.current_key
        if keys == current_keys:
            # The same rows in the same order: touch only changed cells, so a live
            # refresh never rebuilds the table or moves the cursor.
            columns = list(self.columns)
            for key, cells in rows:
                old = self.get_row(key)
                for col, new, before in zip(columns, cells, old, strict=False):
                    if new != before:
                        self.update_cell(key, col, new)
        else:
            self.clear()
            for key, cells in rows:
                self.add_row(*cells, key=key)
        if not rows:
            return
        index = 0
        if isinstance(cursor_at, int):
            index = max(0, min(cursor_at, len(rows) - 1))
        elif isinstance(cursor_at, str) and cursor_at in keys:
            index = keys.index(cursor_at)
        elif isinstance(cursor_at, str):
            index = min(self.cursor_row, len(rows) - 1)
        self.move_cursor(row=index, animate=False)

    @property
    def current_key(self) -> str | None:
        """The key of the row under the cursor, if any."""
        if not self.row_count or self.cursor_row < 0:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

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
