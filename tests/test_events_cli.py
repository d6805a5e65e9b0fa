"""`replaylog events`: what a workflow published with ctx.set_event, read from the command line."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli


def _ran(db: Path | str, *args: str) -> str:
    done = run_cli(db, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_events_prints_the_latest_value_of_each_key_or_of_one(db: Path | str) -> None:
    _ran(db, "start", "add", "5", "--app", "client_app", "--id", "a-5")
    _ran(db, "start", "waits", "--app", "client_app", "--id", "w-1")
    _ran(db, "worker", "--app", "client_app", "--until-idle", "--quiet")
    assert json.loads(_ran(db, "events", "a-5", "--json")) == {"progress": 1.0}
    assert json.loads(_ran(db, "events", "a-5", "progress")) == 1.0
    assert json.loads(_ran(db, "events", "w-1", "stage", "--json")) == {"stage": "waiting"}
    table = _ran(db, "events", "a-5")
    assert "progress" in table and "1.0" in table


def test_events_refuses_in_one_line(db: Path | str) -> None:
    _ran(db, "start", "waits", "--app", "client_app", "--id", "w-2")
    _ran(db, "worker", "--app", "client_app", "--until-idle", "--quiet")
    for args, said in [(("events", "nope"), "no workflow with id 'nope'"),
                       (("events", "w-2", "missing", "--wait", "0.2"), "has set no event 'missing' within 0.2 s"),
                       (("events", "w-2", "missing"), "has set no event 'missing'"),
                       (("events", "w-2", "--wait", "1"), "--wait waits for one KEY")]:
        done = run_cli(db, *args)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("replaylog: error: ") and said in done.stderr
