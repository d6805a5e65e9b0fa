"""Tables in docs/ that are made from the code or from data: they must say what their source says."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click
import pytest

from bench.report import markdown as bench_markdown
from conftest import run_cli
from replaylog import Client, Queue
from replaylog.cli import cli
from replaylog.console import keys

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


def json_blocks(doc: str) -> list[Any]:
    """Every ```json block of a document, parsed."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    return [json.loads(m) for m in re.findall(r"^```json\n(.*?)^```", text, flags=re.M | re.S)]


def test_cli_doc_names_every_command_and_option() -> None:
    """docs/cli.md names each command of the `replaylog` group and each of its visible options."""
    doc = (ROOT / "docs/cli.md").read_text(encoding="utf-8")
    missing = []
    for name, command in cli.commands.items():
        if f"## {name}" not in doc:
            missing.append(f"command {name}")
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                missing += [f"{name} {opt}" for opt in param.opts if opt not in doc]
    assert not missing, f"docs/cli.md does not mention: {missing}"


def test_cli_doc_json_shapes_are_what_the_commands_print(tmp_path: Path) -> None:
    """The keys of list --json, show --json, check --json, export and stats --json in docs/cli.md are the keys the
    commands print."""
    db = tmp_path / "replaylog.db"

    def cmd(*args: str) -> str:
        # In this process but for the worker (conftest.run_cli): the shapes, not the process, are checked.
        done = run_cli(db, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    cmd("start", "refund", "7", "--id", "r-7")
    cmd("signal", "r-7", "approval", '{"approved": true}')
    cmd("worker", "--until-idle", "--quiet")
    with Client(tmp_path / "replaylog.db") as client:  # a queue, so that `queues --json` prints one
        client.start("refund", 8, queue=Queue("refunds", concurrency=2))
    printed = {"list": json.loads(cmd("list", "--json")), "show": json.loads(cmd("show", "r-7", "--json")),
               "queues": json.loads(cmd("queues", "--json")),
               "check": json.loads(cmd("check", "r-7", "--json")), "export": json.loads(cmd("export", "r-7")),
               "stats": json.loads(cmd("stats", "--json"))}
    (documented_list, documented_show, documented_queues, documented_check, documented_export,
     documented_stats) = json_blocks("docs/cli.md")
    assert set(documented_list[0]) == set(printed["list"][0])
    assert set(documented_queues[0]) == set(printed["queues"][0])
    assert set(documented_queues[0]["rate_limit"]) == {"starts", "seconds"}
    assert set(documented_show) == set(printed["show"])
    for part in ("commands", "signals", "audit"):
        assert set(documented_show[part][0]) == set(printed["show"][part][0]), part
    assert set(documented_check) == set(printed["check"])
    assert set(documented_export) == set(printed["export"])
    for part in ("slots", "signals"):
        assert set(documented_export[part][0]) == set(printed["export"][part][0]), part
    assert set(documented_stats) == set(printed["stats"])
    assert set(documented_stats["counts"]) == set(printed["stats"]["counts"])


# docs/screenshots/NAME.svg is a copy of the console snapshot test's SVG (tests/__snapshots__/…/TEST.svg).
SCREENSHOTS = {
    "workflows": "test_workflows_screen", "workflows-filtered": "test_workflows_screen_filtered",
    "workflows-readonly": "test_workflows_screen_readonly", "workflow-slots": "test_workflow_screen_slots",
    "workflow-signals": "test_workflow_screen_signals", "slot-value": "test_slot_value",
    "signal-dialog": "test_signal_dialog_invalid_json", "help": "test_help_screen",
    "diagnosis-activity-failure": "test_diagnosis_activity_failure",
    "diagnosis-nondeterminism": "test_diagnosis_divergence_dry_replayed",
}


def test_docs_screenshots_are_the_snapshot_tests_pictures() -> None:
    """Every screenshot the docs show is the console as its snapshot test last drew it, not an older picture."""
    shots = ROOT / "docs/screenshots"
    assert {p.stem for p in shots.glob("*.svg")} == set(SCREENSHOTS), "a screenshot without a snapshot test"
    snapshots = ROOT / "tests/__snapshots__/test_console_snapshots"
    stale = [name for name, test in SCREENSHOTS.items()
             if (shots / f"{name}.svg").read_bytes() != (snapshots / f"{test}.svg").read_bytes()]
    assert not stale, f"stale docs/screenshots (copy them from {snapshots.relative_to(ROOT)}): {stale}"


def test_readme_is_a_short_users_document() -> None:
    """The README stays a first page (at most 250 lines); reference material lives in docs/."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move reference material to docs/"
    for doc in ("tutorial", "workflows", "cli", "console", "guarantees", "performance", "architecture", "postgres"):
        assert f"(docs/{doc}.md)" in "\n".join(lines), f"README.md does not link docs/{doc}.md"
        assert (ROOT / "docs" / f"{doc}.md").is_file()


def test_readme_puts_replaylog_on_path_before_its_first_bare_command() -> None:
    """`make demo` leaves replaylog in an unactivated .venv: the tour says how to reach it before using it bare."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first_bare = re.search(r"^replaylog (start|worker|list|show) ", text, flags=re.MULTILINE)
    assert first_bare is not None
    before = text[:first_bare.start()]
    assert "source .venv/bin/activate" in before and ".venv/bin/replaylog" in before
