"""`replaylog list --awaiting approval` and `list --tree`: a real SQLite file, real worker subprocesses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_fault_agents import agent_env

from conftest import run_cli


def seeded(tmp_path: Path, db: Path | str) -> tuple[Any, dict[str, str]]:
    env = agent_env(tmp_path)

    def cli(*args: str) -> Any:
        return run_cli(db, *args, env=env)

    ids = {name: cli("start", name, "--app", "agent_app").stdout.strip().splitlines()[-1]
           for name in ("family", "guarded", "waits_for_go")}
    assert cli("worker", "--until-idle", "--quiet", "--app", "agent_app").returncode == 0
    return cli, ids


def test_list_awaiting_approval_shows_only_workflows_waiting_for_an_answer(tmp_path: Path, db: Path | str) -> None:
    cli, ids = seeded(tmp_path, db)
    listed = json.loads(cli("list", "--json", "--awaiting", "approval").stdout)
    assert [r["id"] for r in listed] == [ids["guarded"]]
    assert listed[0]["blocked_on"] == "approval:req-0"
    table = cli("list", "--awaiting", "approval").stdout
    assert ids["guarded"] in table and ids["waits_for_go"] not in table and ids["family"] not in table
    assert "approval: delete the backups (request req-0)" in table
    assert cli("approve", ids["guarded"]).returncode == 0
    assert json.loads(cli("list", "--json", "--awaiting", "approval").stdout) == []
    bad = cli("list", "--awaiting", "signal")
    assert bad.returncode != 0 and "'signal' is not 'approval'" in bad.stderr and bad.stdout == ""


def test_list_tree_puts_children_under_their_parent(tmp_path: Path, db: Path | str) -> None:
    cli, ids = seeded(tmp_path, db)
    fam = ids["family"]
    flat = json.loads(cli("list", "--json").stdout)
    assert {r["id"]: r["parent"] for r in flat}[f"{fam}.0.0"] == f"{fam}.0"
    tree = json.loads(cli("list", "--json", "--tree").stdout)
    order = [r["id"] for r in tree]
    # Top-level workflows only lead, each followed by its children, depth first.
    assert order.index(f"{fam}.0") == order.index(fam) + 1 and order.index(f"{fam}.0.0") == order.index(fam) + 2
    assert [r["parent"] for r in tree if r["id"].startswith(fam)] == [None, fam, f"{fam}.0"]
    table = cli("list", "--tree").stdout.splitlines()
    (parent_line,) = [i for i, line in enumerate(table) if line.lstrip().startswith(fam + " ")]
    indent = len(table[parent_line]) - len(table[parent_line].lstrip())
    assert table[parent_line + 1][indent:].startswith(f"└ {fam}.0 ")
    assert table[parent_line + 2][indent:].startswith(f"  └ {fam}.0.0 ")
    # --limit counts top-level workflows: the one shown comes with its whole family.
    limited = json.loads(cli("list", "--json", "--tree", "--status", "blocked", "--limit", "1").stdout)
    assert limited[0]["parent"] is None and all(r["parent"] is not None for r in limited[1:])


def test_list_tree_counts_top_level_workflows_and_shows_every_child(tmp_path: Path, db: Path | str) -> None:
    cli, ids = seeded(tmp_path, db)
    everything = cli("list", "--tree")
    # All of them shown: no "N of M" (a child is not a workflow the count missed).
    assert everything.returncode == 0 and " of " not in everything.stdout and everything.stderr == ""
    assert f"{ids['family']}.0.0" in everything.stdout
    assert cli("list", "--tree", "--limit", "0").stdout.splitlines()[1:] == everything.stdout.splitlines()[1:]
    cut = cli("list", "--tree", "--limit", "1")
    assert cut.stdout.splitlines()[0] == "1 of 3 top-level workflow(s), each with its children"
    assert cut.stderr.strip() == "showing 1 of 3 top-level workflow(s), each with its children; use --limit 0 for all"


def test_a_fork_keeps_the_parallel_marks_and_groups_of_the_slots_it_copies(tmp_path: Path, db: Path | str) -> None:
    from replaylog.engine.store import open_store

    env = agent_env(tmp_path)
    wid = run_cli(db, "start", "two_groups", "--app", "agent_app", env=env).stdout.strip()
    assert run_cli(db, "worker", "--until-idle", "--quiet", "--app", "agent_app", env=env).returncode == 0
    fork = run_cli(db, "fork", wid, "--from-slot", "4", "--id", "groups-fork", env=env)
    assert fork.returncode == 0, fork.stderr
    with open_store(db, readonly=True) as store:
        original = [(c.parallel, c.parallel_group) for c in store.list_commands(wid)]
        assert original[:4] == [(True, 0), (True, 0), (True, 2), (True, 2)]
        assert [(c.parallel, c.parallel_group) for c in store.list_commands("groups-fork")] == original[:4]


def test_importing_an_unfinished_parent_starts_the_child_it_waits_for(tmp_path: Path, db: Path | str) -> None:
    cli, ids = seeded(tmp_path, db)
    fam = ids["family"]
    exported = tmp_path / "family.json"
    assert cli("export", fam, "-o", str(exported)).returncode == 0
    other = tmp_path / "other.db"
    imported = run_cli(other, "import", str(exported), "--id", "fam-copy")
    assert imported.returncode == 0, imported.stderr
    listed = {r["id"]: r for r in json.loads(run_cli(other, "list", "--json").stdout)}
    # The child its slot 0 started exists, pending, under the imported parent (no outcome was exported).
    assert listed[f"{fam}.0"]["parent"] == "fam-copy" and listed[f"{fam}.0"]["status"] == "pending"
    assert listed[f"{fam}.0"]["workflow"] == "child_waits"
