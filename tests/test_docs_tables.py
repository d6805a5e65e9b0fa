"""Tables in docs/ that are made from the code or from data: they must say what their source says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.report import markdown as bench_markdown
from console import keys

ROOT = Path(__file__).resolve().parent.parent


def between(text: str, start: str, end: str) -> str:
    """The text between two marker lines (exclusive)."""
    assert start in text and end in text, f"markers {start} / {end} missing"
    return text.split(start, 1)[1].split(end, 1)[0].strip()


def test_console_doc_key_table_is_the_one_the_bindings_make() -> None:
    """docs/console.md lists exactly the keys the `?` help is made from (regenerate: python -m console.keys --write)."""
    doc = (ROOT / "docs/console.md").read_text(encoding="utf-8")
    assert between(doc, keys.START, keys.END) == keys.markdown().strip(), (
        "docs/console.md's key table is stale: run .venv/bin/python -m console.keys --write docs/console.md")


def test_key_table_names_every_screen_and_a_key_of_each() -> None:
    """The generated table is not empty: every help section shows up with its keys."""
    table = keys.markdown()
    for heading in ("everywhere", "workflows", "workflow", "value view", "signal dialog"):
        assert f"| {heading} | `" in table
    assert "| workflow | `c` | check:" in table


def test_with_table_refuses_a_file_without_markers() -> None:
    """Writing the table into a file without the markers fails loudly instead of appending somewhere."""
    with pytest.raises(ValueError, match="markers"):
        keys.with_table("no markers here", "| t |\n")


def test_performance_doc_table_is_the_baselines() -> None:
    """docs/performance.md shows the table bench.report makes from bench/baseline.json."""
    doc = (ROOT / "docs/performance.md").read_text(encoding="utf-8")
    baseline = json.loads((ROOT / "bench/baseline.json").read_text(encoding="utf-8"))
    shown = between(doc, "<!-- bench-table:start -->", "<!-- bench-table:end -->")
    assert shown == bench_markdown(baseline).strip(), (
        "docs/performance.md differs from bench/baseline.json: paste python -m bench.report bench/baseline.json")
