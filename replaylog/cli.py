"""The `replaylog` command line: start, worker, signal, list, show, check, console, demo.

Bad input exits non-zero with one line on stderr (no traceback) and writes nothing.
"""

from __future__ import annotations

import json
import os
import signal as signal_mod
import sqlite3
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from engine.app import AppImportError, Registry, load_app, resolve_app_spec
from engine.core import dry_replay
from engine.errors import ReplaylogError, StoreError
from engine.store import STATUSES, SQLiteStore, WorkflowRow, default_max_payload, is_damaged
from engine.text import preview, printable

DEFAULT_DB = "replaylog.db"


class CLIError(click.ClickException):
    """A one-line error for the user; exits 1."""

    def show(self, file: Any = None) -> None:
        click.echo(f"replaylog: error: {printable(self.message, oneline=True)}", err=True)


def fail(message: str) -> NoReturn:
    """Stop the command with a one-line error."""
    raise CLIError(message)


class Settings:
    """Global options resolved once per invocation."""

    def __init__(self, db: str | None, max_payload: int | None) -> None:
        self.db = Path(db or os.environ.get("REPLAYLOG_DB") or DEFAULT_DB)
        self._max_payload = max_payload

    @property
    def max_payload(self) -> int:
        """--max-payload, else $REPLAYLOG_MAX_PAYLOAD, else 1 MiB."""
        if self._max_payload is not None:
            return self._max_payload
        try:
            return default_max_payload()
        except StoreError as exc:
            fail(str(exc))

    def open(self, *, readonly: bool = False) -> SQLiteStore:
        """Open the store; a one-line error if it cannot be."""
        try:
            return SQLiteStore(self.db, readonly=readonly, max_payload=self.max_payload)
        except ReplaylogError as exc:
            fail(str(exc))


pass_settings = click.make_pass_decorator(Settings)


def _app(spec: str | None) -> Registry:
    try:
        return load_app(spec)
    except AppImportError as exc:
        fail(str(exc))


def read_json_arg(raw: str | None, what: str, max_bytes: int) -> tuple[Any, bool]:
    """Parse an inline JSON argument, `-` (standard input) or `@path` (a file).

    Returns (value, given). The size cap applies to the raw text, so a huge input is
    refused before it is parsed; the error names the source.
    """
    if raw is None:
        return None, False
    if raw == "-":
        source = "stdin"
        data = sys.stdin.buffer.read(max_bytes + 1)
    elif raw.startswith("@"):
        path = Path(raw[1:])
        source = f"file {path}"
        try:
            with path.open("rb") as fh:
                data = fh.read(max_bytes + 1)
        except OSError as exc:
            fail(f"cannot read {what} from {source}: {exc.strerror or exc}")
    else:
        source = "the command line"
        data = raw.encode()
    if len(data) > max_bytes:
        fail(f"{what} from {source} is over the cap of {max_bytes} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        fail(f"{what} from {source} is not UTF-8 text")
    try:
        return json.loads(text), True
    except json.JSONDecodeError as exc:
        fail(f"invalid JSON in {what} from {source}: {exc.msg} at line {exc.lineno} column {exc.colno}")
    except RecursionError:
        fail(f"invalid JSON in {what} from {source}: nested too deeply")


# ---------------------------------------------------------------- the group


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", metavar="PATH", help="Database file (else $REPLAYLOG_DB, else ./replaylog.db).")
@click.option("--max-payload", type=click.IntRange(min=1), metavar="BYTES",
              help="Cap on an input's or a signal payload's size (else $REPLAYLOG_MAX_PAYLOAD, else 1 MiB).")
@click.version_option(package_name="replaylog")
@click.pass_context
def cli(ctx: click.Context, db: str | None, max_payload: int | None) -> None:
    """replaylog: durable workflows re-derived by replaying a log of outcomes."""
    ctx.obj = Settings(db, max_payload)


@cli.command()
@click.argument("workflow_name", metavar="WORKFLOW")
@click.argument("input_json", required=False, metavar="[INPUT_JSON]")
@click.option("--id", "workflow_id", help="Use this id instead of a generated one.")
@click.option("--app", help="Module or .py file with the workflows (else $REPLAYLOG_APP, else sample_workflows).")
@pass_settings
def start(settings: Settings, workflow_name: str, input_json: str | None, workflow_id: str | None,
          app: str | None) -> None:
    """Start a workflow; print its id. INPUT_JSON may be `-` (stdin) or `@path`."""
    registry = _app(app)
    if workflow_name not in registry.workflows:
        fail(str(_unknown_workflow(registry, workflow_name)))
    value, given = read_json_arg(input_json, "the workflow input", settings.max_payload)
    with settings.open() as store:
        try:
            wid = store.start_workflow(workflow_name, value, has_input=given, workflow_id=workflow_id)
        except ReplaylogError as exc:
            fail(str(exc))
    click.echo(wid)


def _unknown_workflow(registry: Registry, name: str) -> Exception:
    try:
        registry.workflow(name)
    except ReplaylogError as exc:
        return exc
    return ReplaylogError(name)  # pragma: no cover - only called for unknown names


@cli.command()
@click.argument("workflow_id")
@click.argument("name")
@click.argument("payload_json", required=False, metavar="[PAYLOAD_JSON]")
@pass_settings
def signal(settings: Settings, workflow_id: str, name: str, payload_json: str | None) -> None:
    """Send a signal (payload defaults to null). PAYLOAD_JSON may be `-` (stdin) or `@path`."""
    payload, _ = read_json_arg(payload_json, f"the payload of signal {name!r}", settings.max_payload)
    with settings.open() as store:
        try:
            seq = store.send_signal(workflow_id, name, payload)
        except ReplaylogError as exc:
            fail(str(exc))
    click.echo(f"signal {printable(name, oneline=True)!s} #{seq} sent to {printable(workflow_id, oneline=True)}")


# ---------------------------------------------------------------- worker


@cli.command()
@click.option("--app", help="Module or .py file with the workflows (else $REPLAYLOG_APP, else sample_workflows).")
@click.option("--until-idle", is_flag=True, help="Return once no workflow is pending or running.")
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes on this database.")
@click.option("--concurrency", type=click.IntRange(min=1), default=64, show_default=True,
              help="Workflows run at once in each process.")
@click.option("--lease", type=click.FloatRange(min=0.5), default=5.0, show_default=True,
              help="Lease length in seconds (renewed while a workflow runs).")
@click.option("--no-inflight", is_flag=True, help="Do not record that an activity started before running it.")
@click.option("--no-cpu-focus", is_flag=True,
              help="Never move workflow threads onto one CPU while commits are crowded (README: Performance).")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing per workflow.")
@pass_settings
def worker(settings: Settings, app: str | None, until_idle: bool, processes: int, concurrency: int,
           lease: float, no_inflight: bool, no_cpu_focus: bool, quiet: bool) -> None:
    """Run every runnable workflow until stopped (SIGTERM or ctrl-c finish the current slot)."""
    from engine.worker import Worker

    registry = _app(app)
    settings.open().close()  # fail early, in one line, on a bad database
    children: list[subprocess.Popen[bytes]] = []
    if processes > 1:
        base = [sys.executable, "-m", "replaylog", "--db", str(settings.db),
                "--max-payload", str(settings.max_payload), "worker", "--app", resolve_app_spec(app),
                "--concurrency", str(concurrency), "--lease", str(lease)]
        base += ["--until-idle"] * until_idle + ["--no-inflight"] * no_inflight + ["--quiet"] * quiet
        base += ["--no-cpu-focus"] * no_cpu_focus
        children = [subprocess.Popen(base) for _ in range(processes - 1)]

    def event(wid: str, text: str) -> None:
        stamp = datetime.now().strftime("%H:%M:%S")
        click.echo(f"{stamp} {printable(wid, oneline=True)} {printable(text, oneline=True)}", err=True)

    w = Worker(settings.db, registry, concurrency=concurrency, ttl=lease, track_inflight=not no_inflight,
               focus_cpu=not no_cpu_focus, max_payload=settings.max_payload, on_event=None if quiet else event)

    def on_signal(signum: int, _frame: object) -> None:
        if w.stopping:
            os._exit(128 + signum)  # a second ctrl-c: leave now, leases lapse on their own
        w.stop()
        for child in children:
            child.send_signal(signum)

    signal_mod.signal(signal_mod.SIGTERM, on_signal)
    signal_mod.signal(signal_mod.SIGINT, on_signal)
    try:
        w.run(until_idle=until_idle)
    except ReplaylogError as exc:
        fail(str(exc))
    finally:
        for child in children:
            child.wait()
    bad = [c.returncode for c in children if c.returncode not in (0, -signal_mod.SIGTERM, -signal_mod.SIGINT)]
    if bad:
        fail(f"{len(bad)} worker process(es) exited with an error")


# ---------------------------------------------------------------- reading


def _when(ts: float | None, *, short: bool = False) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts).strftime("%m-%d %H:%M:%S" if short else "%Y-%m-%d %H:%M:%S")


def _console(stderr: bool = False) -> Console:
    """A rich console; piped output is laid out 120 wide rather than rich's 80."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 120)


def _t(value: Any) -> Text:
    """A table cell that is always text, never markup."""
    return Text(printable("" if value is None else str(value), oneline=True))


def workflow_json(store: SQLiteStore, row: WorkflowRow) -> dict[str, Any]:
    """The `show --json` object."""
    inflight = store.inflight(row.id)
    return {
        "id": row.id, "workflow": row.workflow, "status": row.status, "blocked_on": row.blocked_on,
        "input": row.input, "result": row.result, "error": row.error, "diagnostic": row.diagnostic,
        "created_at": row.created_at, "updated_at": row.updated_at, "slots": row.slots,
        "commands": [
            {"slot": c.slot, "kind": c.kind, "name": c.name, "ok": c.ok, "value": c.value, "error": c.error,
             "attempts": c.attempts, "recorded_at": c.recorded_at}
            for c in store.list_commands(row.id)
        ],
        "signals": [
            {"seq": s.seq, "name": s.name, "payload": s.payload, "consumed": s.consumed, "sent_at": s.sent_at}
            for s in store.list_signals(row.id)
        ],
        "inflight": None if inflight is None else {
            "slot": inflight.slot, "name": inflight.name, "attempts": inflight.attempts,
            "started_at": inflight.started_at},
    }


@cli.command(name="list")
@click.option("--status", type=click.Choice(STATUSES), help="Only workflows in this status.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.option("--limit", type=click.IntRange(min=0), default=None,
              help="At most this many (default: all with --json, 200 in the table; 0 means all).")
@pass_settings
def list_cmd(settings: Settings, status: str | None, as_json: bool, limit: int | None) -> None:
    """List workflows, most recently updated first."""
    if limit is None:
        limit = 0 if as_json else 200
    with settings.open(readonly=True) as store:
        rows = store.list_workflows(status=status, limit=limit or -1)
        total = store.count_workflows(status=status) if limit and len(rows) == limit else len(rows)
    if as_json:
        click.echo(json.dumps([
            {"id": r.id, "workflow": r.workflow, "status": r.status, "blocked_on": r.blocked_on, "slots": r.slots,
             "updated_at": r.updated_at, "error": r.error} for r in rows
        ]))
        return
    table = Table(title=f"{len(rows)} of {total} workflow(s)" if total != len(rows) else None, box=box.SIMPLE_HEAD)
    for col in ("id", "workflow", "status", "blocked on", "slots", "updated"):
        # Ids are what operators copy into the next command: never cut them short.
        table.add_column(col, justify="right" if col == "slots" else "left", overflow="fold",
                         no_wrap=col in ("id", "status", "updated", "slots"))
    for r in rows:
        table.add_row(_t(r.id), _t(r.workflow), _status(r.status), _t(r.blocked_on), _t(r.slots),
                      _t(_when(r.updated_at, short=True)))
    _console().print(table)
    if total != len(rows):
        click.echo(f"showing {len(rows)} of {total}; use --limit 0 for all", err=True)


_STATUS_STYLE = {"pending": "cyan", "running": "blue", "blocked": "yellow", "completed": "green", "failed": "red"}


def _status(status: str) -> Text:
    return Text(status, style=_STATUS_STYLE.get(status, ""))


@cli.command()
@click.argument("workflow_id")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@pass_settings
def show(settings: Settings, workflow_id: str, as_json: bool) -> None:
    """Show a workflow: status, input, result or error, every slot, every signal."""
    with settings.open(readonly=True) as store:
        try:
            row = store.get_workflow(workflow_id)
        except ReplaylogError as exc:
            fail(str(exc))
        data = workflow_json(store, row)
    if as_json:
        click.echo(json.dumps(data))
        return
    console = _console()
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("id", _t(row.id))
    head.add_row("workflow", _t(row.workflow))
    head.add_row("status", _status(row.status))
    if row.blocked_on:
        head.add_row("blocked on", _t(row.blocked_on))
    head.add_row("input", _t(preview(row.input, 200) if row.has_input else "(none)"))
    if row.status == "completed":
        head.add_row("result", _t(preview(row.result, 200)))
    if row.error:
        head.add_row("error", Text(printable(row.error, oneline=True), style="red"))
    if row.diagnostic:
        d = row.diagnostic
        head.add_row("diverged at", _t(f"slot {d['slot']}: recorded {d['recorded'] or '(nothing)'}, "
                                       f"issued {d['issued'] or '(nothing)'}"))
    head.add_row("updated", _t(_when(row.updated_at)))
    if data["inflight"]:
        i = data["inflight"]
        head.add_row("in flight", Text(printable(
            f"slot {i['slot']} activity {i['name']} started {i['attempts']} time(s), no recorded outcome"
            " (it possibly ran)", oneline=True), style="yellow"))
    console.print(head)
    slots = Table(title=f"{len(data['commands'])} slot(s)", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("slot", "kind", "name", "ok", "value / error", "attempts", "when"):
        # The value column takes what is left; the short ones never wrap.
        slots.add_column(col, no_wrap=col != "value / error", overflow="fold")
    for c in data["commands"]:
        slots.add_row(_t(c["slot"]), _t(c["kind"]), _t(c["name"]),
                      Text("ok", style="green") if c["ok"] else Text("failed", style="red"),
                      _t(preview(c["value"], 40) if c["ok"] else preview(c["error"], 40)), _t(c["attempts"]),
                      _t(_when(c["recorded_at"], short=True)))
    console.print(slots)
    if data["signals"]:
        sigs = Table(title=f"{len(data['signals'])} signal(s)", title_justify="left", box=box.SIMPLE_HEAD)
        for col in ("seq", "name", "payload", "state", "sent"):
            sigs.add_column(col)
        for s in data["signals"]:
            sigs.add_row(_t(s["seq"]), _t(s["name"]), _t(preview(s["payload"])),
                         _t("consumed" if s["consumed"] else "waiting"), _t(_when(s["sent_at"])))
        console.print(sigs)


# ---------------------------------------------------------------- check


def check_one(store: SQLiteStore, registry: Registry, workflow_id: str) -> tuple[bool, str, dict[str, Any] | None]:
    """Dry-replay one workflow against the current code: (ok, verdict, diagnostic dict)."""
    row = store.get_workflow(workflow_id)
    try:
        fn = registry.workflow(row.workflow)
    except ReplaylogError as exc:
        return False, str(exc), None
    result = dry_replay(fn, store.load_state(workflow_id), workflow_id=workflow_id)
    if result.ok:
        return True, f"{result.verdict} ({result.replayed} slot(s) replayed)", None
    diag = result.diagnostic.to_dict() if result.diagnostic else None
    return False, result.error or result.verdict, diag


@cli.command()
@click.argument("workflow_id", required=False)
@click.option("--all", "check_all", is_flag=True, help="Check every unfinished workflow.")
@click.option("--app", help="Module or .py file with the workflows (else $REPLAYLOG_APP, else sample_workflows).")
@pass_settings
def check(settings: Settings, workflow_id: str | None, check_all: bool, app: str | None) -> None:
    """Dry-replay history against the current code, with no side effects: exit 1 if it diverges."""
    if bool(workflow_id) == check_all:
        fail("give one WORKFLOW_ID or --all")
    registry = _app(app)
    with settings.open(readonly=True) as store:
        if workflow_id:
            try:
                ok, verdict, diag = check_one(store, registry, workflow_id)
            except ReplaylogError as exc:
                fail(str(exc))
            line = f"{printable(workflow_id, oneline=True)}: {printable(verdict, oneline=True)}"
            if ok:
                click.echo(line)
                return
            click.echo(line, err=True)
            if diag:
                click.echo(json.dumps(diag), err=True)
            sys.exit(1)
        _check_all(store, registry)


def _check_all(store: SQLiteStore, registry: Registry) -> None:
    from rich.progress import Progress

    ids = [r.id for r in store.list_workflows(status=("pending", "running", "blocked"), limit=-1, sort="created",
                                               descending=False)]
    failures: list[tuple[str, str]] = []
    console = _console(stderr=True)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("replaying", total=len(ids))
        for wid in ids:
            ok, verdict, _ = check_one(store, registry, wid)
            if not ok:
                failures.append((wid, verdict))
            progress.advance(task)
    for wid, verdict in failures:
        console.print(Text(printable(f"{wid}: {verdict}", oneline=True), style="red"))
    summary = f"checked {len(ids)} unfinished workflow(s): {len(ids) - len(failures)} replay cleanly, " \
              f"{len(failures)} diverge or fail"
    click.echo(summary)
    if failures:
        sys.exit(1)


# ---------------------------------------------------------------- console and demo


@cli.command()
@click.option("--readonly", is_flag=True, help="Open the database read-only: no write actions.")
@click.option("--app", help="Module or .py file with the workflows, for dry replays in diagnostics.")
@pass_settings
def console(settings: Settings, readonly: bool, app: str | None) -> None:
    """Open the operator console (a terminal UI) on the database."""
    settings.open(readonly=readonly).close()
    registry = _app(app) if app else None
    from console.app import ReplaylogConsole  # only the command line knows the console

    ReplaylogConsole(settings.db, readonly=readonly, registry=registry).run()


@cli.command()
@click.option("--no-console", is_flag=True, help="Only seed and print the tour; do not open the console.")
@pass_settings
def demo(settings: Settings, no_console: bool) -> None:
    """Seed a demo database with workflows in every state, run a worker, open the console."""
    from replaylog.demo import run_demo

    run_demo(settings.db, open_console=not no_console, echo=_echo_err)


def _echo_err(text: str) -> None:
    click.echo(text, err=True)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `replaylog` command."""
    try:
        cli.main(args=argv, prog_name="replaylog", standalone_mode=True)
    except ReplaylogError as exc:  # a refusal that slipped past a command: still one line
        click.echo(f"replaylog: error: {printable(str(exc), oneline=True)}", err=True)
        sys.exit(1)
    except sqlite3.Error as exc:
        # SQLite finds most damage only when a query reaches the damaged page, long after
        # the file opened cleanly: still one line, and no traceback.
        hint = ("; the file is damaged: check it with PRAGMA integrity_check and restore it from a backup"
                if is_damaged(exc) else "")
        click.echo(f"replaylog: error: the database cannot be read: {printable(str(exc), oneline=True)}{hint}",
                   err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
