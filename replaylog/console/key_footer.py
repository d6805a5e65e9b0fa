"""The key footer every console screen docks at its bottom: every key shown, whatever the width.

Textual's Footer is one line that scrolls sideways: the keys past the right edge are
hidden (the mouse wheel brings them in), and on a phone's 64 columns in the served
console that hid the help key itself. This one keeps the stock footer while its keys fit
on one line; when they do not, it turns compact (less padding, as `Footer(compact=True)`)
and lays the keys out on as many lines as they take, the help key (`?`: every key of
every screen) first and the command palette's key last, so each key an operator needs
is on screen and can be clicked (or tapped, in a browser).
"""

from __future__ import annotations

from collections.abc import Sequence

from textual import events
from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

# The cells a key takes beside its text ("k desc") on one line, from Textual's Footer CSS
# (textual.widgets._footer; textual is pinned): " k desc " (no padding without a description),
# and the palette's key a right padding and a left border more. Wrapped, a key is its text,
# compact, and one cell of gutter parts the columns.
_NORMAL_PADDING, _PALETTE_EDGES, _GUTTER = 2, 2, 1
# The app's help action (console.keys binds `?` to it), however the footer names its namespace.
HELP_ACTION = "help"


class KeyFooter(Footer):
    """A Footer that wraps its keys onto more lines (compact) when they do not fit on one."""

    DEFAULT_CSS = """
    KeyFooter.-wrapped {
        layout: grid;
        height: auto;
        grid-columns: auto;
        grid-gutter: 0 1;
        FooterKey {
            margin: 0;
        }
        FooterKey.-command-palette {
            dock: none;
            border-left: none;
        }
    }
    """

    # The keys of the last compose, in the stock footer's order (for `_fit`).
    _stock: tuple[Widget, ...] = ()

    def compose(self) -> ComposeResult:
        """The stock footer's keys (remembered in their order, for `_fit`)."""
        self._stock = tuple(super().compose())
        yield from self._stock

    def on_resize(self, _event: events.Resize) -> None:
        """Lay the keys out for the new width."""
        self._fit()

    async def recompose(self) -> None:
        """Compose the keys of the bindings now active, then lay them out."""
        await super().recompose()
        self._fit()

    def _fit(self) -> None:
        # The columns are measured on the keys in the order the grid will show them (the help
        # key first), never in the order they happen to have now: after a recompose that is the
        # stock order, whose columns differ, and no later resize may come to correct them.
        width = self.size.width
        stock = [w for w in self._stock if w.parent is self]
        if not width or not any(isinstance(w, FooterKey) for w in stock):
            return
        if _one_line(stock) <= width:
            self.compact = False
            self.remove_class("-wrapped")
            self._order(stock)
            return
        wrapped = sorted(stock, key=lambda w: not _is_help(w))
        self.compact = True
        self.add_class("-wrapped")
        self.styles.grid_size_columns = _columns(wrapped, width)
        self._order(wrapped)

    def _order(self, widgets: Sequence[Widget]) -> None:
        """Put the keys in this order (the grid fills its lines in it)."""
        for index, widget in enumerate(w for w in widgets if w.parent is self):
            if self.children[index] is not widget:
                self.move_child(widget, before=index)


def _text(key: FooterKey) -> int:
    """The cells of a key's text ("k desc"), without padding."""
    return len(key.key_display) + (1 + len(key.description) if key.description else 0)


def _one_line(widgets: Sequence[Widget]) -> int:
    """The cells the keys take on one line, as the stock (not compact) footer draws them."""
    return sum(_text(k) + _NORMAL_PADDING * bool(k.description) + _PALETTE_EDGES * k.has_class("-command-palette")
               for k in widgets if isinstance(k, FooterKey))


def _columns(widgets: list[Widget], width: int) -> int:
    """As many grid columns as fit in width (each as wide as its widest key), filled row by row in this order."""
    texts = [_text(k) for k in widgets if isinstance(k, FooterKey)]
    return next((n for n in range(len(texts), 1, -1)
                 if sum(max(texts[i::n]) for i in range(n)) + _GUTTER * (n - 1) <= width), 1)


def _is_help(widget: Widget) -> bool:
    return isinstance(widget, FooterKey) and widget.action.rpartition(".")[2] == HELP_ACTION
