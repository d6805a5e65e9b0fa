"""Showing stored text safely: every stored string is shown as text, never interpreted."""

from __future__ import annotations

import json
import re
from typing import Any

# C0 controls except tab and newline, DEL, and the C1 range (\x9b is a one-byte CSI).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str, *, oneline: bool = False) -> str:
    """Return `text` with terminal control characters made visible (\\x1b, not ESC).

    With `oneline`, newlines and tabs become visible too, for table cells.
    """
    out = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    if oneline:
        out = out.replace("\n", "\\n").replace("\t", "\\t")
    return out


def preview(value: Any, width: int = 60) -> str:
    """A one-line, control-free preview of a JSON value, cut to `width` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = printable(text, oneline=True)
    return text if len(text) <= width else text[: width - 1] + "…"


def pretty_json(value: Any) -> str:
    """A JSON value pretty-printed, with control characters escaped by the encoder."""
    return printable(json.dumps(value, indent=2, ensure_ascii=False))
