"""The `replaylog` CLI through real subprocesses: the flows, the JSON shapes, the bad inputs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from engine.store import SQLiteStore

Cli = Callable[..., CompletedProcess[str]]


def snapshot(db: Path) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """Everything the database holds, to prove a refusal wrote nothing."""
    with SQLiteStore(db) as s:
        conn = s._conn
        return (
            conn.execute("SELECT * FROM workflows ORDER BY id").fetchall(),
            conn.execute("SELECT * FROM command_log ORDER BY workflow_id, slot").fetchall(),
            conn.execute("SELECT * FROM signals ORDER BY workflow_id, seq").fetchall(),
        )


def one_line_error(proc: CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def start(cli: Cli, *args: str) -> str:
    proc = cli("start", *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_refund_tour_start_worker_signal_show(cli: Cli) -> None:
    wid = start(cli, "refund", "7")
    assert cli("worker", "--until-idle", "--quiet").returncode == 0
    shown = json.loads(cli("show", wid, "--json").stdout)
    assert (shown["status"], shown["blocked_on"], shown["input"]) == ("blocked", "approval", 7)
    assert [(c["slot"], c["kind"], c["name"], c["value"]) for c in shown["commands"]] == [
        (0, "activity", "fetch_invoice", 700)]

    sent = cli("signal", wid, "approval", '{"approved": true}')
    assert sent.returncode == 0 and "#1" in sent.stdout
    assert cli("worker", "--until-idle", "--quiet").returncode == 0
    shown = json.loads(cli("show", wid, "--json").stdout)
    assert shown["status"] == "completed" and shown["error"] is None and shown["diagnostic"] is None
    assert shown["result"]["receipt"]["charged"] == -700
    assert [c["name"] for c in shown["commands"]] == ["fetch_invoice", "now", "charge_card"]
    assert all(c["ok"] and c["attempts"] == 1 for c in shown["commands"])
    assert shown["signals"] == [{"seq": 1, "name": "approval", "payload": {"approved": True}, "consumed": True,
                                 "sent_at": shown["signals"][0]["sent_at"]}]

    listed = json.loads(cli("list", "--json").stdout)
    assert [(r["id"], r["workflow"], r["status"], r["blocked_on"]) for r in listed] == [
        (wid, "refund", "completed", None)]
    table = cli("show", wid)
    assert table.returncode == 0 and "charge_card" in table.stdout and "completed" in table.stdout


def test_start_prints_the_id_on_the_last_line_and_honours_id(cli: Cli) -> None:
    assert start(cli, "refund", "7", "--id", "my-refund") == "my-refund"
    one_line_error(cli("start", "refund", "7", "--id", "my-refund"), "already exists")


def test_list_filters_by_status(cli: Cli) -> None:
    start(cli, "refund", "1")
    start(cli, "shipping")
    cli("worker", "--until-idle", "--quiet")
    blocked = json.loads(cli("list", "--status", "blocked", "--json").stdout)
    assert [r["workflow"] for r in blocked] == ["refund"]
    assert "refund" in cli("list", "--status", "blocked").stdout


def test_failed_workflow_shows_error_and_refuses_signals(cli: Cli, db_path: Path, tmp_path: Path) -> None:
    app = tmp_path / "failing_app.py"
    app.write_text(
        "from replaylog import workflow, activity\n"
        "@activity\n"
        "def explode():\n    raise RuntimeError('no')\n"
        "@workflow\n"
        "def doomed(ctx):\n    ctx.call_activity(explode, max_retries=2)\n"
    )
    wid = start(cli, "doomed", "--app", str(app))
    cli("worker", "--until-idle", "--quiet", "--app", str(app))
    shown = json.loads(cli("show", wid, "--json").stdout)
    assert shown["status"] == "failed" and "RuntimeError: no" in shown["error"]
    assert shown["commands"][0]["ok"] is False and shown["commands"][0]["attempts"] == 2
    before = snapshot(db_path)
    one_line_error(cli("signal", wid, "approval"), "failed", "accepts no signals")
    assert snapshot(db_path) == before


def test_nondeterministic_workflow_fails_with_positioned_diagnostic_and_is_not_retried(cli: Cli) -> None:
    wid = start(cli, "refund", "8")
    cli("worker", "--until-idle", "--quiet", "--app", "sample_workflows.legacy_v1")
    cli("signal", wid, "approval", "true")
    cli("worker", "--until-idle", "--quiet")
    shown = json.loads(cli("show", wid, "--json").stdout)
    assert shown["status"] == "failed"
    assert shown["diagnostic"]["slot"] == 0
    assert shown["diagnostic"]["recorded"] == "activity:fetch_customer"
    assert shown["diagnostic"]["issued"] == "activity:fetch_invoice"
    assert "slot 0" in shown["diagnostic"]["message"]
    # Never retried automatically: another worker pass leaves it exactly as it was.
    cli("worker", "--until-idle", "--quiet")
    assert json.loads(cli("show", wid, "--json").stdout) == shown


def test_check_exits_zero_when_clean_and_one_with_the_diagnostic(cli: Cli) -> None:
    wid = start(cli, "refund", "7")
    cli("worker", "--until-idle", "--quiet")
    ok = cli("check", wid)
    assert ok.returncode == 0 and "replays cleanly" in ok.stdout
    bad = cli("check", wid, "--app", "sample_workflows.legacy_v1")
    assert bad.returncode == 1
    assert "slot 0" in bad.stderr and "activity:fetch_invoice" in bad.stderr
    everything = cli("check", "--all", "--app", "sample_workflows.legacy_v1")
    assert everything.returncode == 1 and "1 diverge" in everything.stdout
    assert cli("check", "--all").returncode == 0


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("start", "refund", "{not json"), ("invalid JSON", "workflow input")),
        (("start", "no_such_workflow"), ("unknown workflow 'no_such_workflow'",)),
        (("start", "refund", "--app", "no.such.module"), ("no.such.module", "failed to import")),
        (("signal", "wf-missing", "approval"), ("no workflow with id 'wf-missing'",)),
        (("signal", "WID", "approval", "{bad"), ("invalid JSON", "approval")),
        (("show", "wf-missing"), ("no workflow with id",)),
        (("check",), ("WORKFLOW_ID or --all",)),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(cli: Cli, db_path: Path, args: tuple[str, ...],
                                                  needles: tuple[str, ...]) -> None:
    wid = start(cli, "refund", "7")
    before = snapshot(db_path)
    one_line_error(cli(*[wid if a == "WID" else a for a in args]), *needles)
    assert snapshot(db_path) == before


def test_app_that_raises_on_import_is_one_line(cli: Cli, tmp_path: Path) -> None:
    app = tmp_path / "broken_app.py"
    app.write_text("raise ImportError('missing dependency foo')\n")
    one_line_error(cli("worker", "--until-idle", "--app", str(app)), "failed to import", "missing dependency foo")


def test_db_from_env_and_default_path(tmp_path: Path) -> None:
    from conftest import cli_env, run_cli

    env_db = tmp_path / "from-env.db"
    proc = run_cli(tmp_path / "ignored.db", "list", "--json")  # --db wins
    assert proc.returncode != 0 and "no database" in proc.stderr
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "replaylog", "start", "refund", "1"], capture_output=True,
                         text=True, env=cli_env(REPLAYLOG_DB=str(env_db)), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert env_db.exists() and not (tmp_path / "replaylog.db").exists()
    out = subprocess.run([sys.executable, "-m", "replaylog", "start", "refund", "1"], capture_output=True,
                         text=True, env=cli_env(), cwd=tmp_path)
    assert out.returncode == 0 and (tmp_path / "replaylog.db").exists()


def test_newer_schema_is_refused_clearly(cli: Cli, db_path: Path) -> None:
    start(cli, "refund", "7")
    with SQLiteStore(db_path) as s:
        s._conn.execute("PRAGMA user_version = 99")
    one_line_error(cli("list"), "schema version 99", "newer")


# ------------------------------------------------------------------ inputs from stdin and files


def test_signal_payload_from_stdin_and_file(cli: Cli, tmp_path: Path) -> None:
    wid = start(cli, "two_approvals")
    cli("worker", "--until-idle", "--quiet")
    assert cli("signal", wid, "approval", "-", input='{"by": "stdin"}').returncode == 0
    payload = tmp_path / "payload.json"
    payload.write_text('{"by": "file"}')
    assert cli("signal", wid, "approval", f"@{payload}").returncode == 0
    cli("worker", "--until-idle", "--quiet")
    shown = json.loads(cli("show", wid, "--json").stdout)
    assert [s["payload"] for s in shown["signals"]] == [{"by": "stdin"}, {"by": "file"}]
    assert shown["status"] == "completed"


def test_start_input_from_stdin_and_file(cli: Cli, tmp_path: Path) -> None:
    a = start_with_input(cli, "-", input="12")
    f = tmp_path / "input.json"
    f.write_text("13")
    b = start_with_input(cli, f"@{f}")
    assert json.loads(cli("show", a, "--json").stdout)["input"] == 12
    assert json.loads(cli("show", b, "--json").stdout)["input"] == 13


def start_with_input(cli: Cli, arg: str, input: str | None = None) -> str:
    proc = cli("start", "refund", arg, input=input)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


CAP = 4096


def big_payload(size: int) -> str:
    """A JSON string document of exactly `size` bytes."""
    return json.dumps("x" * (size - 2))


@pytest.mark.parametrize("source", ["stdin", "file"])
def test_payload_just_under_the_cap_is_stored_whole_and_over_it_refused(cli: Cli, db_path: Path, tmp_path: Path,
                                                                        source: str) -> None:
    wid = start(cli, "two_approvals")
    under, over = big_payload(CAP), big_payload(CAP + 1)

    def send(doc: str) -> CompletedProcess[str]:
        if source == "stdin":
            return cli("--max-payload", str(CAP), "signal", wid, "approval", "-", input=doc)
        path = tmp_path / "doc.json"
        path.write_text(doc)
        return cli("--max-payload", str(CAP), "signal", wid, "approval", f"@{path}")

    before = snapshot(db_path)
    refused = send(over)
    one_line_error(refused, "over the cap of 4096 bytes", "stdin" if source == "stdin" else "doc.json")
    assert snapshot(db_path) == before
    assert send(under).returncode == 0
    shown = json.loads(cli("show", wid, "--json").stdout)
    assert shown["signals"][0]["payload"] == json.loads(under)


def test_default_cap_is_one_mebibyte_and_env_configures_it(cli: Cli, db_path: Path) -> None:
    from conftest import cli_env

    wid = start(cli, "two_approvals")
    over_default = big_payload(1024 * 1024 + 1)
    one_line_error(cli("signal", wid, "approval", "-", input=over_default), "over the cap of 1048576 bytes")
    env = cli_env(REPLAYLOG_MAX_PAYLOAD="2000000")
    assert cli("signal", wid, "approval", "-", input=over_default, env=env).returncode == 0


@pytest.mark.parametrize("source", ["stdin", "file"])
def test_invalid_json_from_stdin_or_file_names_the_source_and_writes_nothing(cli: Cli, db_path: Path,
                                                                              tmp_path: Path, source: str) -> None:
    wid = start(cli, "two_approvals")
    before = snapshot(db_path)
    if source == "stdin":
        proc = cli("signal", wid, "approval", "-", input="{oops")
        one_line_error(proc, "invalid JSON", "stdin")
        proc = cli("start", "refund", "-", input="[1,")
        one_line_error(proc, "invalid JSON", "stdin")
    else:
        bad = tmp_path / "bad.json"
        bad.write_text("{oops")
        one_line_error(cli("signal", wid, "approval", f"@{bad}"), "invalid JSON", "bad.json")
        one_line_error(cli("start", "refund", f"@{bad}"), "invalid JSON", "bad.json")
    assert snapshot(db_path) == before


def test_missing_or_unreadable_payload_file_is_one_line(cli: Cli, db_path: Path, tmp_path: Path) -> None:
    wid = start(cli, "two_approvals")
    before = snapshot(db_path)
    one_line_error(cli("signal", wid, "approval", f"@{tmp_path / 'nope.json'}"), "nope.json", "No such file")
    one_line_error(cli("start", "refund", f"@{tmp_path}"), str(tmp_path))
    assert snapshot(db_path) == before


def test_stored_text_with_escapes_and_markup_prints_literally(cli: Cli) -> None:
    wid = start(cli, "two_approvals", "--id", "evil")
    cli("signal", wid, "approval", json.dumps("[/bold] \x1b[31mred\x1b[0m"))
    out = cli("show", wid)
    assert out.returncode == 0
    assert "\x1b[31m" not in out.stdout
    assert "\\x1b[31mred" in out.stdout and "[/bold]" in out.stdout
