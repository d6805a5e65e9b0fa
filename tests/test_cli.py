"""The `replaylog` CLI through real subprocesses: the flows, the JSON shapes, the bad inputs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from conftest import run_cli
from replaylog.engine.store import open_store, redact_url

Cli = Callable[..., CompletedProcess[str]]


@pytest.fixture
def cli(db: Path | str) -> Cli:
    """run_cli bound to the test's database, once per store backend (a file, a PostgreSQL database)."""
    return lambda *args, **kw: run_cli(db, *args, **kw)


def snapshot(db: Path | str) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """Everything the database holds, to prove a refusal wrote nothing."""
    with open_store(db) as s:
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


def test_piped_tables_carry_no_trailing_spaces(cli: Cli) -> None:
    wid = start(cli, "refund", "7")
    assert cli("worker", "--until-idle", "--quiet").returncode == 0
    assert cli("signal", wid, "approval", '{"approved": true}').returncode == 0
    for args in (("show", wid), ("list",)):
        out = cli(*args).stdout
        assert "fetch_invoice" in out or wid in out
        assert [line for line in out.splitlines() if line != line.rstrip()] == [], args


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


def test_failed_workflow_shows_error_and_refuses_signals(cli: Cli, db: Path | str, tmp_path: Path) -> None:
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
    before = snapshot(db)
    one_line_error(cli("signal", wid, "approval"), "failed", "accepts no signals")
    assert snapshot(db) == before


def test_nondeterministic_workflow_fails_with_positioned_diagnostic_and_is_not_retried(cli: Cli) -> None:
    wid = start(cli, "refund", "8")
    cli("worker", "--until-idle", "--quiet", "--app", "replaylog.samples.legacy_v1")
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
    bad = cli("check", wid, "--app", "replaylog.samples.legacy_v1")
    assert bad.returncode == 1
    assert "slot 0" in bad.stderr and "activity:fetch_invoice" in bad.stderr
    everything = cli("check", "--all", "--app", "replaylog.samples.legacy_v1")
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
        (("signal", "WID", "timer"), ("the signal name 'timer' is reserved for durable timers",)),
        (("show", "wf-missing"), ("no workflow with id",)),
        (("check",), ("WORKFLOW_ID or --all",)),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(cli: Cli, db: Path | str, args: tuple[str, ...],
                                                  needles: tuple[str, ...]) -> None:
    wid = start(cli, "refund", "7")
    before = snapshot(db)
    one_line_error(cli(*[wid if a == "WID" else a for a in args]), *needles)
    assert snapshot(db) == before


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


def test_db_takes_a_sqlite_url_and_an_unreachable_postgresql_is_one_line_without_its_password(
        tmp_path: Path) -> None:
    from conftest import run_cli

    db = tmp_path / "by-url.db"
    proc = run_cli(f"sqlite:///{db}", "start", "refund", "1")
    assert proc.returncode == 0, proc.stderr
    with open_store(db, readonly=True) as s:
        assert s.get_workflow(proc.stdout.strip().splitlines()[-1]).workflow == "refund"
    before = sorted(tmp_path.iterdir())
    proc = run_cli(f"postgresql://ops:s3cret@/replaylog?host={tmp_path}/no-server", "start", "refund", "1")
    one_line_error(proc, "cannot connect to postgresql://ops:***@/replaylog")
    assert proc.returncode == 1 and "s3cret" not in proc.stderr
    assert sorted(tmp_path.iterdir()) == before  # nothing written


def test_newer_schema_is_refused_clearly(cli: Cli, db: Path | str) -> None:
    start(cli, "refund", "7")
    with open_store(db) as s:
        if isinstance(db, str):  # PostgreSQL: the version is a row of replaylog.meta
            s._conn.execute("UPDATE meta SET version = 99")
        else:
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
def test_payload_just_under_the_cap_is_stored_whole_and_over_it_refused(cli: Cli, db: Path | str, tmp_path: Path,
                                                                        source: str) -> None:
    wid = start(cli, "two_approvals")
    under, over = big_payload(CAP), big_payload(CAP + 1)

    def send(doc: str) -> CompletedProcess[str]:
        if source == "stdin":
            return cli("--max-payload", str(CAP), "signal", wid, "approval", "-", input=doc)
        path = tmp_path / "doc.json"
        path.write_text(doc)
        return cli("--max-payload", str(CAP), "signal", wid, "approval", f"@{path}")

    before = snapshot(db)
    refused = send(over)
    one_line_error(refused, "over the cap of 4096 bytes", "stdin" if source == "stdin" else "doc.json")
    assert snapshot(db) == before
    assert send(under).returncode == 0
    shown = json.loads(cli("show", wid, "--json").stdout)
    assert shown["signals"][0]["payload"] == json.loads(under)


def test_default_cap_is_one_mebibyte_and_env_configures_it(cli: Cli, db: Path | str) -> None:
    from conftest import cli_env

    wid = start(cli, "two_approvals")
    over_default = big_payload(1024 * 1024 + 1)
    one_line_error(cli("signal", wid, "approval", "-", input=over_default), "over the cap of 1048576 bytes")
    env = cli_env(REPLAYLOG_MAX_PAYLOAD="2000000")
    assert cli("signal", wid, "approval", "-", input=over_default, env=env).returncode == 0


@pytest.mark.parametrize("source", ["stdin", "file"])
def test_invalid_json_from_stdin_or_file_names_the_source_and_writes_nothing(cli: Cli, db: Path | str,
                                                                              tmp_path: Path, source: str) -> None:
    wid = start(cli, "two_approvals")
    before = snapshot(db)
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
    assert snapshot(db) == before


def test_missing_or_unreadable_payload_file_is_one_line(cli: Cli, db: Path | str, tmp_path: Path) -> None:
    wid = start(cli, "two_approvals")
    before = snapshot(db)
    one_line_error(cli("signal", wid, "approval", f"@{tmp_path / 'nope.json'}"), "nope.json", "No such file")
    one_line_error(cli("start", "refund", f"@{tmp_path}"), str(tmp_path))
    assert snapshot(db) == before


def test_stored_text_with_escapes_and_markup_prints_literally(cli: Cli) -> None:
    wid = start(cli, "two_approvals", "--id", "evil")
    cli("signal", wid, "approval", json.dumps("[/bold] \x1b[31mred\x1b[0m"))
    out = cli("show", wid)
    assert out.returncode == 0
    assert "\x1b[31m" not in out.stdout
    assert "\\x1b[31mred" in out.stdout and "[/bold]" in out.stdout


# ------------------------------------------------------------------ check on finished workflows


def write_app(tmp_path: Path, name: str, body: str) -> str:
    """A one-workflow app file `steps` whose body is `body` (indented code after `def steps(ctx):`)."""
    app = tmp_path / f"{name}.py"
    app.write_text(
        "from replaylog import workflow, activity\n"
        "@activity\ndef a():\n    return 1\n"
        "@activity\ndef b():\n    return 2\n"
        "@workflow\ndef steps(ctx):\n" + body
    )
    return str(app)


def run_steps(cli: Cli, app: str) -> str:
    wid = start(cli, "steps", "--app", app)
    assert cli("worker", "--until-idle", "--quiet", "--app", app).returncode == 0
    return wid


def test_check_a_completed_workflow_the_code_would_extend_has_diverged(cli: Cli, tmp_path: Path) -> None:
    v1 = write_app(tmp_path, "v1", "    ctx.call_activity(a)\n    return 'done'\n")
    v2 = write_app(tmp_path, "v2", "    ctx.call_activity(a)\n    ctx.call_activity(b)\n    return 'done'\n")
    wid = run_steps(cli, v1)
    assert json.loads(cli("show", wid, "--json").stdout)["status"] == "completed"
    same = cli("check", wid, "--app", v1)
    assert same.returncode == 0 and "replays cleanly; completes" in same.stdout
    extended = cli("check", wid, "--app", v2)
    one_line_error(extended, "slot 1", "history ends there", "the workflow completed", "activity:b")
    assert extended.stdout == ""
    verdict = json.loads(cli("check", wid, "--app", v2, "--json").stdout)
    assert verdict["ok"] is False
    assert verdict["diagnostic"] == {"slot": 1, "recorded": None, "issued": "activity:b",
                                     "message": verdict["diagnostic"]["message"]}


def test_check_a_completed_workflow_the_code_now_ends_short_of_or_blocks_after(cli: Cli, tmp_path: Path) -> None:
    v1 = write_app(tmp_path, "v1", "    ctx.call_activity(a)\n    return 'done'\n")
    wid = run_steps(cli, v1)
    # Unconsumed history: the code returns without issuing the recorded slot 0.
    short = write_app(tmp_path, "short", "    return 'done'\n")
    one_line_error(cli("check", wid, "--app", short), "slot 0", "activity:a", "completed without issuing it")
    # The code now waits on a signal after the recorded history of a completed workflow.
    waits = write_app(tmp_path, "waits", "    ctx.call_activity(a)\n    ctx.wait_signal('more')\n")
    one_line_error(cli("check", wid, "--app", waits), "the workflow completed", "blocks on signal 'more'")


def test_check_and_retry_give_one_verdict_on_a_failed_workflow_does_it_replay_and_would_a_retry_succeed(
        cli: Cli, tmp_path: Path) -> None:
    v1 = write_app(tmp_path, "v1", "    ctx.call_activity(a)\n    raise ValueError('boom')\n")
    wid = run_steps(cli, v1)
    shown = json.loads(cli("show", wid, "--json").stdout)
    assert shown["status"] == "failed" and shown["diagnostic"] is None
    # The same code: the history replays, a retry would fail again. check says so and exits 1; so is retry refused.
    same = cli("check", wid, "--app", v1)
    one_line_error(same, "the recorded history replays, but a retry would fail: workflow code raised ValueError")
    as_json = json.loads(cli("check", wid, "--app", v1, "--json").stdout)
    assert (as_json["ok"], as_json["replays"], as_json["retry"]) == (False, True, "refused")
    one_line_error(cli("retry", wid, "--app", v1), "cannot be retried", same.stderr.split(": ", 3)[-1].strip())
    other = write_app(tmp_path, "other", "    ctx.call_activity(a)\n    raise KeyError('k')\n")
    one_line_error(cli("check", wid, "--app", other), "a retry would fail", "KeyError")
    early = write_app(tmp_path, "early", "    raise ValueError('boom')\n")
    one_line_error(cli("check", wid, "--app", early), "does not replay", "slot 0", "activity:a",
                   "failed before issuing it")
    assert json.loads(cli("check", wid, "--app", early, "--json").stdout)["replays"] is False
    # After a fix: check exits 0 and retry accepts, with the same words.
    fixed = write_app(tmp_path, "fixed", "    ctx.call_activity(a)\n    return 'ok'\n")
    checked = cli("check", wid, "--app", fixed)
    assert checked.returncode == 0, checked.stderr
    verdict = checked.stdout.strip().split(": ", 1)[1]
    assert verdict == "replays cleanly; completes (1 slot(s) replayed): a retry may go ahead"
    as_json = json.loads(cli("check", wid, "--app", fixed, "--json").stdout)
    assert (as_json["ok"], as_json["replays"], as_json["retry"], as_json["verdict"]) == (True, True, "allowed",
                                                                                      verdict)
    retried = cli("retry", wid, "--app", fixed)
    assert retried.returncode == 0 and retried.stdout.strip() == f"{wid} is pending again ({verdict})"


def test_check_a_workflow_failed_by_divergence_replays_cleanly_under_the_code_that_recorded_it(cli: Cli) -> None:
    wid = start(cli, "refund", "8")
    cli("worker", "--until-idle", "--quiet", "--app", "replaylog.samples.legacy_v1")
    cli("signal", wid, "approval", "true")
    cli("worker", "--until-idle", "--quiet")
    assert json.loads(cli("show", wid, "--json").stdout)["diagnostic"]["slot"] == 0
    one_line_error(cli("check", wid), "slot 0", "activity:fetch_customer", "activity:fetch_invoice")
    fixed = cli("check", wid, "--app", "replaylog.samples.legacy_v1")
    assert fixed.returncode == 0 and "no longer diverges" in fixed.stdout


def test_check_a_workflow_that_failed_live_at_the_slot_history_ends_at(cli: Cli, tmp_path: Path) -> None:
    app = write_app(tmp_path, "v1", "    ctx.call_activity(a)\n    ctx.call_activity('nope')\n")
    wid = run_steps(cli, app)
    assert "unknown activity 'nope'" in json.loads(cli("show", wid, "--json").stdout)["error"]
    # Judged as a retry runs it: the history replays up to the slot that failed live, which would run again.
    verdict = cli("check", wid, "--app", app)
    assert verdict.returncode == 0 and "replays cleanly; slot 1 would run activity:nope live" in verdict.stdout
    assert "a retry may go ahead" in verdict.stdout


def test_check_says_each_verdict_once_and_piped_output_is_not_wrapped(cli: Cli) -> None:
    long_id = "refund-" + "x" * 150
    wid = start(cli, "refund", "7", "--id", long_id)
    cli("worker", "--until-idle", "--quiet")
    one = cli("check", wid, "--app", "replaylog.samples.legacy_v1")
    one_line_error(one, long_id, "slot 0", "activity:fetch_invoice", "activity:fetch_customer")
    assert one.stdout == ""
    everything = cli("check", "--all", "--app", "replaylog.samples.legacy_v1")
    assert everything.returncode == 1
    assert everything.stderr.splitlines() == [
        f"{long_id}: NonDeterministicError: non-determinism at slot 0: history has activity:fetch_invoice, "
        "the workflow issued activity:fetch_customer"]
    assert everything.stdout.splitlines() == [
        "checked 1 unfinished workflow(s): 0 replay cleanly, 1 diverge or fail"]


# ------------------------------------------------------------------ a missing database, options anywhere


@pytest.mark.parametrize("args", [("console",), ("console", "--readonly"), ("list",), ("list", "--json"),
                                  ("show", "wf-1"), ("check", "wf-1"), ("check", "--all"),
                                  ("signal", "wf-1", "approval")])
def test_a_command_on_a_missing_database_says_so_and_creates_nothing(tmp_path: Path, args: tuple[str, ...]) -> None:
    from conftest import run_cli

    db = tmp_path / "typo.db"
    proc = run_cli(db, *args, timeout=30)
    one_line_error(proc, f"no database at {db}")
    assert proc.returncode == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_start_and_worker_create_the_database_and_the_worker_says_so(tmp_path: Path) -> None:
    from conftest import run_cli

    db = tmp_path / "served.db"
    served = run_cli(db, "worker", "--until-idle")
    assert served.returncode == 0, served.stderr
    assert db.exists()
    assert served.stderr.startswith(f"replaylog worker serving {db} (a new database: created it, as there was none):")
    again = run_cli(db, "worker", "--until-idle")
    assert again.returncode == 0 and again.stderr.startswith(f"replaylog worker serving {db}: app ")
    # --create, from scripts written when a worker needed it, is still accepted.
    assert run_cli(tmp_path / "old.db", "worker", "--until-idle", "--quiet", "--create").returncode == 0
    assert run_cli(tmp_path / "started.db", "start", "refund", "1").returncode == 0
    assert (tmp_path / "started.db").exists()


def bare_cli(*args: str, env: dict[str, str] | None = None) -> CompletedProcess[str]:
    """`replaylog ARGS…` with no --db put in front."""
    import subprocess
    import sys

    from conftest import ROOT, cli_env

    return subprocess.run([sys.executable, "-m", "replaylog", *args], capture_output=True, text=True,
                          env=env or cli_env(), cwd=ROOT, stdin=subprocess.DEVNULL, timeout=60)


def test_global_options_are_accepted_after_the_subcommand(db_path: Path, tmp_path: Path) -> None:
    from conftest import cli_env

    db = str(db_path)
    started = bare_cli("start", "two_approvals", "--db", db)
    assert started.returncode == 0, started.stderr
    wid = started.stdout.strip()
    assert json.loads(bare_cli("list", "--db", db, "--json").stdout)[0]["id"] == wid
    assert json.loads(bare_cli("show", wid, "--json", "--db", db).stdout)["status"] == "pending"
    assert bare_cli("check", wid, "--db", db).returncode == 0
    # --max-payload after the subcommand caps this payload.
    one_line_error(bare_cli("signal", wid, "approval", big_payload(100), "--db", db, "--max-payload", "50"),
                   "over the cap of 50 bytes")
    # The subcommand's --db wins over $REPLAYLOG_DB (which only says where to look when no --db is given).
    other = tmp_path / "other.db"
    env = cli_env(REPLAYLOG_DB=str(other))
    assert json.loads(bare_cli("list", "--json", "--db", db, env=env).stdout)[0]["id"] == wid
    assert not other.exists()


def test_a_global_option_given_twice_must_agree(db_path: Path, tmp_path: Path) -> None:
    db = str(db_path)
    wid = bare_cli("start", "two_approvals", "--db", db).stdout.strip()
    same = bare_cli("--db", db, "list", "--json", "--db", str(tmp_path / "." / db_path.name))
    assert same.returncode == 0 and json.loads(same.stdout)[0]["id"] == wid
    one_line_error(bare_cli("--db", db, "list", "--db", str(tmp_path / "other.db")),
                   "--db given twice with different values", "other.db")
    one_line_error(bare_cli("--db", db, "--max-payload", "10", "signal", wid, "approval", "--max-payload", "20"),
                   "--max-payload given twice with different values: 10 and 20")
    assert json.loads(bare_cli("show", wid, "--json", "--db", db).stdout)["signals"] == []


# ------------------------------------------------------------------ human output


def test_show_prints_a_clock_slot_as_a_utc_time_and_json_keeps_the_number(cli: Cli) -> None:
    from datetime import UTC, datetime

    wid = start(cli, "refund", "7")
    cli("worker", "--until-idle", "--quiet")
    cli("signal", wid, "approval", '{"approved": true}')
    cli("worker", "--until-idle", "--quiet")
    now = json.loads(cli("show", wid, "--json").stdout)["commands"][1]
    assert now["kind"] == "now" and isinstance(now["value"], float)
    shown = cli("show", wid).stdout
    row = next(line for line in shown.splitlines() if " now " in line)
    assert datetime.fromtimestamp(now["value"], tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC") in row
    assert str(int(now["value"])) not in row  # (the result, the workflow's own data, may hold the number)


def test_a_foreground_worker_says_what_it_serves_on_stderr_unless_quiet(cli: Cli, db: Path | str) -> None:
    start(cli, "refund", "7")
    loud = cli("worker", "--until-idle", "--concurrency", "8")
    assert loud.returncode == 0, loud.stderr
    first = loud.stderr.splitlines()[0]
    where = db.resolve() if isinstance(db, Path) else redact_url(db)
    assert first.startswith(f"replaylog worker serving {where}: app replaylog.samples (10 workflow(s): ")
    assert "refund" in first and "concurrency 8, 1 process(es), pid " in first
    assert loud.stdout == ""
    quiet = cli("worker", "--until-idle", "--quiet")
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == ""
