"""The console's keys as a Markdown table, made from the same bindings as the `?` help.

`python -m console.keys` prints the table; `python -m console.keys --write docs/console.md`
puts it between the file's `<!-- keys:start -->` and `<!-- keys:end -->` markers.
tests/test_docs_tables.py checks that docs/console.md holds what this prints, so the
keys are typed once, in the bindings.
"""

from __future__ import annotations

import sys
from pathlib import Path

from textual.app import App

from console.app import ReplaylogConsole
from console.help_screen import help_rows

START = "<!-- keys:start -->"
END = "<!-- keys:end -->"


def markdown() -> str:
    """The key table: one row per described binding (keys sharing a description share a row)."""
    # get_key_display formats a binding as the footer shows it; the console does not change it.
    display = App[None]().get_key_display
    lines = ["| where | keys | does |", "| --- | --- | --- |"]
    for heading, rows in help_rows(ReplaylogConsole.help_sections(), display, code="the code given with --app"):
        for keys, what in rows:
            shown = " ".join(f"`{k}`" for k in keys.split(" "))
            cell = what.replace("|", r"\|")
            lines.append(f"| {heading} | {shown} | {cell} |")
    return "\n".join(lines) + "\n"


def with_table(text: str, table: str) -> str:
    """`text` with the part between the markers replaced by `table`."""
    head, found, rest = text.partition(START)
    _, found_end, tail = rest.partition(END)
    if not found or not found_end:
        raise ValueError(f"the markers {START} and {END} are missing")
    return f"{head}{START}\n{table}{END}{tail}"


def main(argv: list[str]) -> None:
    """Print the table, or write it into the file given after --write."""
    if argv[:1] == ["--write"] and len(argv) == 2:
        path = Path(argv[1])
        path.write_text(with_table(path.read_text(encoding="utf-8"), markdown()), encoding="utf-8")
    elif not argv:
        sys.stdout.write(markdown())
    else:
        sys.exit("usage: python -m console.keys [--write FILE]")


if __name__ == "__main__":
    main(sys.argv[1:])
