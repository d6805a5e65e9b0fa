"""The `replaylog` command line: start, worker, signal, list, show, check, console, demo.

Bad input exits non-zero with one line on stderr (no traceback) and writes nothing.
"""

from __future__ import annotations

import functools
import json
import os
import signal as signal_mod
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from console.format import clock_read, status_text, worker_error_line
from engine.app import AppImportError, Registry, load_app, resolve_app_spec
from engine.check import check_workflow
from engine.errors import ReplaylogError, StoreError
from engine.store import (
    STATUSES,
    OperatorStore,
    ReaderStore,
    WorkflowRow,
    database_path,
    default_max_payload,
    is_damaged,
    open_store,
    waiting_reason,
)
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
    """Global options resolved once per invocation.

    `--db` and `--max-payload` may come before the subcommand or after it; given in both
    places they must agree (a database path given twice that differs is more likely a
    mistake than an override, and the wrong database is the costly one to write).
    """

    def __init__(self, db: str | None, max_payload: int | None) -> None:
        self._db = db
        self._max_payload = max_payload

    @property
    def db(self) -> Path:
        """--db, else $REPLAYLOG_DB, else ./replaylog.db: a file path or a sqlite:///path URL."""
        try:
            # Other store URLs (postgresql://) say in one line that they are not supported yet.
            return database_path(self._db or os.environ.get("REPLAYLOG_DB") or DEFAULT_DB)
        except StoreError as exc:
            fail(str(exc))

    def set_db(self, db: str) -> None:
        """Take --db given after the subcommand."""
        if self._db is not None and os.path.abspath(self._db) != os.path.abspath(db):
            fail(f"--db given twice with different values: {self._db} and {db}")
        self._db = db

    def set_max_payload(self, max_payload: int) -> None:
        """Take --max-payload given after the subcommand."""
        if self._max_payload is not None and self._max_payload != max_payload:
            fail(f"--max-payload given twice with different values: {self._max_payload} and {max_payload}")
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

    def open(self, *, readonly: bool = False, create: bool = False) -> OperatorStore:
        """Open the store; a one-line error if it cannot be.

        Only `create` makes a database where there is none: reading, signalling or
        watching a path that holds none is a mistake (a typo in --db) to say, not to paper
        over with an empty file.
        """
        if not create and not self.db.exists():
            fail(f"no database at {self.db}")
        try:
            return open_store(self.db, readonly=readonly, max_payload=self.max_payload)
        except ReplaylogError as exc:
            fail(str(exc))


pass_settings = click.make_pass_decorator(Settings)

_DB_HELP = "Database file (else $REPLAYLOG_DB, else ./replaylog.db)."
_MAX_PAYLOAD_HELP = ("Cap in bytes on every stored value: inputs, signal payloads, activity and workflow results"
                     " (else $REPLAYLOG_MAX_PAYLOAD, else 1 MiB).")


def _settings(ctx: click.Context) -> Settings:
    settings = ctx.find_object(Settings)
    assert settings is not None, "the group's callback made it before any subcommand parses"
    return settings


def _take_db(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        _settings(ctx).set_db(value)


def _take_max_payload(ctx: click.Context, _param: click.Parameter, value: int | None) -> None:
    if value is not None:
        _settings(ctx).set_max_payload(value)


def global_options(fn: Any) -> Any:
    """Accept the group's --db and --max-payload after the subcommand too (`replaylog list --db X`)."""
    fn = click.option("--max-payload", type=click.IntRange(min=1), metavar="BYTES", expose_value=False,
                      callback=_take_max_payload, help=_MAX_PAYLOAD_HELP)(fn)
    return click.option("--db", metavar="PATH", expose_value=False, callback=_take_db, help=_DB_HELP)(fn)


def _app(spec: str | None) -> Registry:
    try:
        return load_app(spec)
    except AppImportError as exc:
        fail(str(exc))


# Past this many bytes, the rest of an input over the cap coming down a pipe is not counted.
COUNT_LIMIT = 1 << 30


def _whole_size(fh: BinaryIO, data: bytes) -> str:
    """The size of an input over the cap, of which `data` was read: the file's size, or counted to its end."""
    try:
        st = os.fstat(fh.fileno())
        if stat.S_ISREG(st.st_mode):
            return f"{st.st_size - fh.tell() + len(data)} bytes"
    except (OSError, ValueError):
        pass  # not a file with a size (a pipe, a terminal): count what is left
    total = len(data)
    while total <= COUNT_LIMIT:
        chunk = fh.read(1 << 20)
        if not chunk:
            return f"{total} bytes"
        total += len(chunk)
    return f"more than {COUNT_LIMIT} bytes"


def read_json_arg(raw: str | None, what: str, max_bytes: int) -> tuple[Any, bool]:
    """Parse an inline JSON argument, `-` (standard input) or `@path` (a file).

    Returns (value, given). The size cap applies to the raw text as given, in bytes
    (UTF-8), so a huge input is refused before it is parsed; the error names the
    source and the input's size.
    """
    if raw is None:
        return None, False
    size = ""
    if raw == "-":
        source = "stdin"
        data = sys.stdin.buffer.read(max_bytes + 1)
        if len(data) > max_bytes:
            size = _whole_size(sys.stdin.buffer, data)
    elif raw.startswith("@"):
        path = Path(raw[1:])
        source = f"file {path}"
        try:
            with path.open("rb") as fh:
                data = fh.read(max_bytes + 1)
                if len(data) > max_bytes:
                    size = _whole_size(fh, data)
        except OSError as exc:
            fail(f"cannot read {what} from {source}: {exc.strerror or exc}")
    else:
        source = "the command line"
        data = raw.encode()
        size = f"{len(data)} bytes"
    if len(data) > max_bytes:
        fail(f"{what} from {source} is {size}, over the cap of {max_bytes} bytes")
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
@click.option("--db", metavar="PATH", help=_DB_HELP)
@click.option("--max-payload", type=click.IntRange(min=1), metavar="BYTES", help=_MAX_PAYLOAD_HELP)
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
@global_options
@pass_settings
def start(settings: Settings, workflow_name: str, input_json: str | None, workflow_id: str | None,
          app: str | None) -> None:
    """Start a workflow; print its id. INPUT_JSON may be `-` (stdin) or `@path`."""
    registry = _app(app)
    if workflow_name not in registry.workflows:
        fail(str(_unknown_workflow(registry, workflow_name)))
    # A workflow is called fn(ctx) or fn(ctx, input): refuse now what could only fail later.
    refusal = registry.input_refusal(workflow_name, given=input_json is not None)
    if refusal is not None:
        fail(refusal)
    value, given = read_json_arg(input_json, "the workflow input", settings.max_payload)
    with settings.open(create=True) as store:
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
@global_options
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
@click.option("--until-idle", is_flag=True,
              help="Return once no workflow this app knows is pending or running.")
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes on this database.")
@click.option("--concurrency", type=click.IntRange(min=1), default=64, show_default=True,
              help="Workflows run at once in each process.")
@click.option("--lease", type=click.FloatRange(min=0.5), default=5.0, show_default=True,
              help="Lease length in seconds (renewed while a workflow runs).")
@click.option("--no-inflight", is_flag=True, help="Do not record that an activity started before running it.")
@click.option("--no-cpu-focus", is_flag=True,
              help="Never move workflow threads onto one CPU while commits are crowded (docs/performance.md).")
@click.option("--create", is_flag=True, help="Create the database if there is none (else a missing one is an error).")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing: no start line, nothing per workflow.")
@click.option("--child", is_flag=True, hidden=True, help="Started by another worker, which announced it.")
@global_options
@pass_settings
def worker(settings: Settings, app: str | None, until_idle: bool, processes: int, concurrency: int,
           lease: float, no_inflight: bool, no_cpu_focus: bool, create: bool, quiet: bool, child: bool) -> None:
    """Run every runnable workflow until stopped (SIGTERM or ctrl-c finish the current slot)."""
    from engine.worker import Worker

    registry = _app(app)
    # Fail early, in one line, on a bad database; a missing one is refused unless --create:
    # a worker on a mistyped path would otherwise wait for ever on an empty new file.
    settings.open(create=create).close()
    children: list[subprocess.Popen[bytes]] = []
    if processes > 1:
        base = [sys.executable, "-m", "replaylog", "--db", str(settings.db),
                "--max-payload", str(settings.max_payload), "worker", "--app", resolve_app_spec(app),
                "--concurrency", str(concurrency), "--lease", str(lease), "--child"]
        base += ["--until-idle"] * until_idle + ["--no-inflight"] * no_inflight + ["--quiet"] * quiet
        base += ["--no-cpu-focus"] * no_cpu_focus
        # In a session of their own: ctrl-c in a terminal signals the whole foreground
        # process group, and a child that heard it from the terminal and then from this
        # process took the second as "leave now" and dropped its workflows. Only this
        # process passes signals on (on_signal).
        children = [subprocess.Popen(base, start_new_session=True) for _ in range(processes - 1)]
    if not quiet and not child:
        # On stderr, with the per-workflow events: stdout stays for what a script reads.
        click.echo(printable(_serving(settings, registry, concurrency, [os.getpid()] + [c.pid for c in children]),
                             oneline=True), err=True)

    def event(wid: str, text: str) -> None:
        stamp = datetime.now().strftime("%H:%M:%S")
        click.echo(f"{stamp} {printable(wid, oneline=True)} {printable(text, oneline=True)}", err=True)

    w = Worker(settings.db, registry, concurrency=concurrency, ttl=lease, track_inflight=not no_inflight,
               focus_cpu=not no_cpu_focus, max_payload=settings.max_payload, on_event=None if quiet else event)

    def on_signal(signum: int, _frame: object) -> None:
        if w.stopping:
            os._exit(128 + signum)  # a second ctrl-c: leave now, leases lapse on their own
        w.stop()
        for proc in children:
            proc.send_signal(signum)

    signal_mod.signal(signal_mod.SIGTERM, on_signal)
    signal_mod.signal(signal_mod.SIGINT, on_signal)
    try:
        w.run(until_idle=until_idle)
    except ReplaylogError as exc:
        fail(str(exc))
    finally:
        for proc in children:  # not `child`: that is the --child flag
            proc.wait()
    if w.left_unknown:
        names = ", ".join(f"{printable(name, oneline=True)} ({n})" for name, n in w.left_unknown.items())
        click.echo(f"left {sum(w.left_unknown.values())} pending workflow(s) no worker here knows: {names}", err=True)
    bad = [c.returncode for c in children if c.returncode not in (0, -signal_mod.SIGTERM, -signal_mod.SIGINT)]
    if bad:
        fail(f"{len(bad)} worker process(es) exited with an error")


def _serving(settings: Settings, registry: Registry, concurrency: int, pids: list[int]) -> str:
    """The worker's start line: what it serves, how, and which processes to signal."""
    names = sorted(registry.workflows)
    shown = ", ".join(names[:8]) + (f", … ({len(names)} in all)" if len(names) > 8 else "")
    return (f"replaylog worker serving {settings.db.resolve()}: app {registry.spec} "
            f"({len(names)} workflow(s): {shown or 'none'}), concurrency {concurrency}, "
            f"{len(pids)} process(es), pid {', '.join(map(str, pids))}")


# ---------------------------------------------------------------- reading


def _when(ts: float | None, *, short: bool = False) -> str:
    """A stored time in UTC (the long form says so; a table's column header says it for the short)."""
    if ts is None:
        return ""
    when = datetime.fromtimestamp(ts, tz=UTC)
    return when.strftime("%m-%d %H:%M:%S") if short else when.strftime("%Y-%m-%d %H:%M:%S UTC")


def _clock_value(value: Any) -> str:
    """A recorded `now` slot as a UTC time; anything that is not a plausible time as its JSON."""
    return clock_read(value) or preview(value, 40)


# Piped output is laid out this wide: wide enough that no line of ours wraps, so a script
# (or grep) gets each value and each verdict on one line.
_PIPED_WIDTH = 10_000


def _console(stderr: bool = False) -> Console:
    """A rich console: a terminal's width, else one that never wraps (nor pads to its width)."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=_PIPED_WIDTH, soft_wrap=True)


def _t(value: Any) -> Text:
    """A table cell that is always text, never markup."""
    return Text(printable("" if value is None else str(value), oneline=True))


def workflow_json(store: ReaderStore, row: WorkflowRow) -> dict[str, Any]:
    """The `show --json` object."""
    inflight = store.inflight(row.id)
    return {
        "id": row.id, "workflow": row.workflow, "status": row.status, "blocked_on": row.blocked_on,
        "waiting_for_worker": _waiting(store, row.workflow, row.status),
        "input": row.input, "result": row.result, "error": row.error, "diagnostic": row.diagnostic,
        "created_at": row.created_at, "updated_at": row.updated_at, "slots": row.slots,
        "worker_error": row.worker_error, "retry_at": row.retry_at, "error_kind": row.error_kind,
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


def _waiting(store: ReaderStore, workflow: str, status: str,
             served: Callable[[], frozenset[str] | None] | None = None) -> str | None:
    """Why a pending workflow waits for a worker (no live worker knows its name), else None."""
    if status != "pending":
        return None
    return waiting_reason(workflow, served() if served is not None else store.served_names())


@cli.command(name="list")
@click.option("--status", type=click.Choice(STATUSES), help="Only workflows in this status.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.option("--limit", type=click.IntRange(min=0), default=None,
              help="At most this many (default: all with --json, 200 in the table; 0 means all).")
@global_options
@pass_settings
def list_cmd(settings: Settings, status: str | None, as_json: bool, limit: int | None) -> None:
    """List workflows, most recently updated first."""
    if limit is None:
        limit = 0 if as_json else 200
    with settings.open(readonly=True) as store:
        rows = store.list_workflows(status=status, limit=limit or -1)
        total = store.count_workflows(status=status) if limit and len(rows) == limit else len(rows)
        served = functools.cache(store.served_names)  # read once, and only if a pending row asks
        waiting = {r.id: _waiting(store, r.workflow, r.status, served) for r in rows}
    if as_json:
        click.echo(json.dumps([
            {"id": r.id, "workflow": r.workflow, "status": r.status, "blocked_on": r.blocked_on, "slots": r.slots,
             "updated_at": r.updated_at, "error": r.error, "waiting_for_worker": waiting[r.id]} for r in rows
        ]))
        return
    table = Table(title=f"{len(rows)} of {total} workflow(s)" if total != len(rows) else None, box=box.SIMPLE_HEAD)
    for col in ("id", "workflow", "status", "blocked on", "slots", "updated (UTC)"):
        # Ids are what operators copy into the next command: never cut them short.
        table.add_column(col, justify="right" if col == "slots" else "left", overflow="fold",
                         no_wrap=col in ("id", "status", "updated (UTC)", "slots"))
    for r in rows:
        # A pending workflow no live worker can run says so where a blocked one names its signal.
        waits = _t(r.blocked_on) if r.blocked_on else _waits(waiting[r.id])
        table.add_row(_t(r.id), _t(r.workflow), _status(r.status), waits, _t(r.slots),
                      _t(_when(r.updated_at, short=True)))
    _console().print(table)
    if total != len(rows):
        click.echo(f"showing {len(rows)} of {total}; use --limit 0 for all", err=True)


def _waits(waiting: str | None) -> Text:
    return Text(printable(waiting or "", oneline=True), style="yellow")


def _status(status: str, waiting: str | None = None) -> Text:
    shown = status_text(status)  # styled as the console styles it
    if waiting:
        shown.append(printable(f" — {waiting}", oneline=True), style="yellow")
    return shown


@cli.command()
@click.argument("workflow_id")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@global_options
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
    head.add_row("status", _status(row.status, data["waiting_for_worker"]))
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
    if row.worker_error:
        # A run stopped without an outcome (KeyboardInterrupt, SystemExit, a worker failure),
        # said as the console's workflow screen says it.
        line = worker_error_line(row.worker_error, row.status, row.retry_at)
        head.add_row("worker error", Text(printable(line, oneline=True), style="yellow"))
    head.add_row("updated", _t(_when(row.updated_at)))
    if data["inflight"]:
        i = data["inflight"]
        head.add_row("in flight", Text(printable(
            f"slot {i['slot']} activity {i['name']} started {i['attempts']} time(s), no recorded outcome"
            " (it possibly ran)", oneline=True), style="yellow"))
    console.print(head)
    slots = Table(title=f"{len(data['commands'])} slot(s)", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("slot", "kind", "name", "ok", "value / error", "attempts", "when (UTC)"):
        # The value column takes what is left; the short ones never wrap.
        slots.add_column(col, no_wrap=col != "value / error", overflow="fold")
    for c in data["commands"]:
        slots.add_row(_t(c["slot"]), _t(c["kind"]), _t(c["name"]),
                      Text("ok", style="green") if c["ok"] else Text("failed", style="red"),
                      _t(_slot_value(c)), _t(c["attempts"]),
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


def _slot_value(c: dict[str, Any]) -> str:
    if not c["ok"]:
        return preview(c["error"], 40)
    # A clock read is a time to the reader, not an epoch number (JSON keeps the number).
    return _clock_value(c["value"]) if c["kind"] == "now" else preview(c["value"], 40)


# ---------------------------------------------------------------- check


@cli.command()
@click.argument("workflow_id", required=False)
@click.option("--all", "check_all", is_flag=True, help="Check every unfinished workflow.")
@click.option("--app", help="Module or .py file with the workflows (else $REPLAYLOG_APP, else sample_workflows).")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict of one workflow as a JSON object.")
@global_options
@pass_settings
def check(settings: Settings, workflow_id: str | None, check_all: bool, app: str | None, as_json: bool) -> None:
    """Dry-replay history against the current code, with no side effects: exit 1 if it diverges.

    A finished workflow replays cleanly only if the code ends as it ended: a completed
    history the code would extend has diverged; a failed one must fail the same way.
    """
    if bool(workflow_id) == check_all:
        fail("give one WORKFLOW_ID or --all")
    if as_json and check_all:
        fail("--json checks one WORKFLOW_ID, not --all")
    registry = _app(app)
    with settings.open(readonly=True) as store:
        if not workflow_id:
            _check_all(store, registry)
            return
        try:
            verdict = check_workflow(store, registry, workflow_id)
        except ReplaylogError as exc:
            fail(str(exc))
    if as_json:
        click.echo(json.dumps({"id": workflow_id, **verdict.to_dict()}))
    else:
        # Said once: on stdout when it replays cleanly, on stderr (with exit 1) when not.
        click.echo(printable(f"{workflow_id}: {verdict.text}", oneline=True), err=not verdict.ok)
    if not verdict.ok:
        sys.exit(1)


def _check_all(store: ReaderStore, registry: Registry) -> None:
    from rich.progress import Progress

    ids = [r.id for r in store.list_workflows(status=("pending", "running", "blocked"), limit=-1, sort="created",
                                               descending=False)]
    failures: list[tuple[str, str]] = []
    console = _console(stderr=True)
    # A progress bar only on a terminal: piped, rich's stopped display leaves a blank line.
    with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("replaying", total=len(ids))
        for wid in ids:
            verdict = check_workflow(store, registry, wid)
            if not verdict.ok:
                failures.append((wid, verdict.text))
            progress.advance(task)
    for wid, text in failures:
        console.print(Text(printable(f"{wid}: {text}", oneline=True), style="red"))
    summary = f"checked {len(ids)} unfinished workflow(s): {len(ids) - len(failures)} replay cleanly, " \
              f"{len(failures)} diverge or fail"
    click.echo(summary)
    if failures:
        sys.exit(1)


# ---------------------------------------------------------------- console and demo


@cli.command()
@click.option("--readonly", is_flag=True, help="Open the database read-only: no write actions.")
@click.option("--app", help="Module or .py file with the workflows, for dry replays in diagnostics.")
@global_options
@pass_settings
def console(settings: Settings, readonly: bool, app: str | None) -> None:
    """Open the operator console (a terminal UI) on the database."""
    settings.open(readonly=readonly).close()
    registry = _app(app) if app else None
    from console.app import ReplaylogConsole  # only the command line knows the console

    ReplaylogConsole(settings.db, readonly=readonly, registry=registry).run()


@cli.command()
@click.option("--no-console", is_flag=True, help="Only seed and print the tour; do not open the console.")
@global_options
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
