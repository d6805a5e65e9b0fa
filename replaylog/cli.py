"""The `replaylog` command line: start, worker, signal, list, show, check, console, demo, and the
operator's actions: cancel, terminate, retry, fork, export, import.

Bad input exits non-zero with one line on stderr (no traceback) and writes nothing.
"""

from __future__ import annotations

import json
import logging
import os
import signal as signal_mod
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NoReturn, cast

import click

from replaylog.client import (
    BULK_PAST,
    NO_INPUT,
    BulkAction,
    BulkOutcome,
    Client,
    Slot,
    WorkflowHandle,
    WorkflowView,
    resolve_db,
)
from replaylog.engine.app import AppImportError, Registry, load_app, resolve_app_spec
from replaylog.engine.check import judge
from replaylog.engine.core import DEFAULT_MAX_SLOTS, HISTORY_WARN
from replaylog.engine.errors import ReplaylogError, StoreError
from replaylog.engine.filters import parse_duration, parse_query, workflow_filter
from replaylog.engine.history import HistoryDocument, parse_document
from replaylog.engine.queues import check_start as check_queue_options
from replaylog.engine.retention import BATCH, parse_cutoff
from replaylog.engine.schedules import CATCH_UPS, DEFAULT_CATCH_UP, DEFAULT_OVERLAP, OVERLAPS
from replaylog.engine.store import (
    OperatorStore,
    ScheduleRow,
    WorkflowFilter,
    default_max_payload,
    open_store,
    redact_url,
)
from replaylog.engine.text import (
    RETRY,
    cancel_text,
    countdown,
    duration,
    heartbeat_text,
    preview,
    printable,
    queue_text,
    retry_text,
    utc,
    waits_text,
)
from replaylog.engine.vocab import FINISHED, UNFINISHED, SlotKind, Status, kind_info
from replaylog.engine.workflow_log import WORKFLOW_LOGGER

if TYPE_CHECKING:
    from rich.console import Console, Group
    from rich.table import Table
    from rich.text import Text

    from replaylog.console.app import ReplaylogConsole

# rich (and `console.format`, which styles with it) is imported in the functions that
# print with it, not here: `replaylog --help` and the commands that print no table or
# styled text skip its import (~35 ms of `import replaylog.cli` under -X importtime).


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
    def db(self) -> Path | str:
        """--db, else $REPLAYLOG_DB, else ./replaylog.db: a file path, a sqlite:///path URL
        (both as a Path), or a PostgreSQL URL (as given: a string)."""
        try:
            # Other URL schemes say in one line that they are not supported.
            return resolve_db(self._db)
        except StoreError as exc:
            fail(str(exc))

    def set_db(self, db: str) -> None:
        """Take --db given after the subcommand."""
        if self._db is not None and os.path.abspath(self._db) != os.path.abspath(db):
            fail(f"--db given twice with different values: {redact_url(self._db)} and {redact_url(db)}")
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
        db = self.db
        if not create and isinstance(db, Path) and not db.exists():
            fail(f"no database at {db}")
        return open_store(self.db, readonly=readonly, max_payload=self.max_payload)

    def client(self, *, readonly: bool = False, app: Registry | None = None) -> Client:
        """A client on the database (see `open` for when a missing one is an error)."""
        return Client(self.db, max_payload=self.max_payload, readonly=readonly, app=app)


pass_settings = click.make_pass_decorator(Settings)

_DB_HELP = "Database file or postgresql:// URL (else $REPLAYLOG_DB, else ./replaylog.db)."
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


def _version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """`--version`: the version, and which paths the SQLite store's slots, the marks and the worker take here."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import version

    from replaylog.engine.marks import writer_path
    from replaylog.engine.native import compiled_path
    from replaylog.engine.store import sqlite_slot_path

    click.echo(f"replaylog, version {version('replaylog')}\nSQLite store's slot path: {sqlite_slot_path()}\n"
               f"in-flight mark writer: {writer_path()}\nper-slot modules (mypyc): {compiled_path()}")
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", metavar="PATH", help=_DB_HELP)
@click.option("--max-payload", type=click.IntRange(min=1), metavar="BYTES", help=_MAX_PAYLOAD_HELP)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Show the version, and whether the SQLite store's compiled path is in use, and exit.")
@click.pass_context
def cli(ctx: click.Context, db: str | None, max_payload: int | None) -> None:
    """replaylog: durable workflows re-derived by replaying a log of outcomes."""
    ctx.obj = Settings(db, max_payload)


class Seconds(click.ParamType):  # type: ignore[type-arg]
    """A length of time: seconds (`90`, `1.5`, any sign: the client words a negative one) or a number and
    a unit (`30s`, `5m`, `2h`, `1d`, as engine.filters.parse_duration reads them)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        """The number of seconds `value` says; a usage error naming what is wrong."""
        if isinstance(value, int | float):
            return float(value)
        try:
            return float(value)
        except ValueError:
            pass
        try:
            return parse_duration(str(value), f"--{param.name if param else 'delay'}")
        except StoreError as exc:
            self.fail(str(exc), param, ctx)


@cli.command()
@click.argument("workflow_name", metavar="WORKFLOW")
@click.argument("input_json", required=False, metavar="[INPUT_JSON]")
@click.option("--id", "workflow_id", help="Use this id instead of a generated one.")
@click.option("--app", help="Module or .py file with the workflows (else $REPLAYLOG_APP, else replaylog.samples).")
@click.option("--if-exists", type=click.Choice(["fail", "return"]), default="fail", show_default=True,
              help="With --id, when that workflow exists: refuse, or print its id and touch nothing"
                   " (a client that retries a start gets the same workflow); with --dedup-id, the same for"
                   " the unfinished workflow that holds it.")
@click.option("--queue", metavar="NAME", help="Start it queued on this queue (declared by the app or a worker).")
@click.option("--priority", type=int, default=0, show_default=True,
              help="On a queue: lower is admitted first (0 or more).")
@click.option("--dedup-id", metavar="ID",
              help="On a queue: refuse the start while an unfinished workflow on it has this dedup id.")
@click.option("--delay", type=Seconds(), metavar="TIME", help="On a queue: not admitted before TIME from now"
                                                             " (seconds, or 30s, 5m, 2h).")
@click.option("--timeout", "timeout_text", metavar="DURATION",
              help="Cancel the workflow (reason: timeout) this long after it starts: seconds, or 90s, 30m, 1h, 2d.")
@global_options
@pass_settings
def start(settings: Settings, workflow_name: str, input_json: str | None, workflow_id: str | None,
          app: str | None, if_exists: str, queue: str | None, priority: int, dedup_id: str | None,
          delay: float | None, timeout_text: str | None) -> None:
    """Start a workflow; print its id. INPUT_JSON may be `-` (stdin) or `@path`."""
    timeout = None if timeout_text is None else _timeout(timeout_text)
    registry = _app(app)
    fn = registry.workflow(workflow_name)  # an unknown name: one line, naming the ones the app knows
    # A workflow is called fn(ctx) or fn(ctx, input): refused before INPUT_JSON is read
    # (the client checks it again, as it checks every start).
    refusal = registry.input_refusal(workflow_name, given=input_json is not None)
    if refusal is not None:
        fail(refusal)
    check_queue_options(queue, priority, dedup_id, delay)  # before INPUT_JSON is read, as the input's shape
    value, given = read_json_arg(input_json, "the workflow input", settings.max_payload)
    with settings.client() as client:
        # The app's own Queue, when it declares one of that name: recorded if no worker has yet.
        handle = client.start(fn, value if given else NO_INPUT, id=workflow_id,
                              if_exists="return" if if_exists == "return" else "fail",
                              queue=registry.queues.get(queue, queue) if queue is not None else None,
                              priority=priority, dedup_id=dedup_id, delay=delay, timeout=timeout)
    click.echo(handle.id)


def _timeout(text: str) -> float:
    """`--timeout`: seconds ("3600") or a duration ("1h"); one line naming what is wrong, if neither."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = parse_duration(text, "--timeout")
    if not 0 < seconds < 1e12:
        fail(f"--timeout must be a positive duration, not {text!r}")
    return seconds


@cli.command()
@click.argument("workflow_id")
@click.argument("name")
@click.argument("payload_json", required=False, metavar="[PAYLOAD_JSON]")
@global_options
@pass_settings
def signal(settings: Settings, workflow_id: str, name: str, payload_json: str | None) -> None:
    """Send a signal (payload defaults to null). PAYLOAD_JSON may be `-` (stdin) or `@path`."""
    payload, _ = read_json_arg(payload_json, f"the payload of signal {name!r}", settings.max_payload)
    with settings.client() as client:
        seq = client.signal(workflow_id, name, payload)
    click.echo(f"signal {printable(name, oneline=True)!s} #{seq} sent to {printable(workflow_id, oneline=True)}")


@cli.command()
@click.argument("workflow_id")
@click.option("--reject", is_flag=True, help="Refuse the request (the default answer approves it).")
@click.option("--note", help="A note the workflow receives with the answer.")
@click.option("--request", "request", metavar="RID",
              help="Answer only if this is the pending request (as `show` names it): a stale answer is refused.")
@global_options
@pass_settings
def approve(settings: Settings, workflow_id: str, reject: bool, note: str | None, request: str | None) -> None:
    """Answer the approval request a workflow waits on (and only it, once)."""
    with settings.client() as client:
        rid = client.get_handle(workflow_id).approve(note=note, reject=reject, request=request)
    verb = "rejected" if reject else "approved"
    click.echo(f"{verb} request {rid} of {printable(workflow_id, oneline=True)}")


@cli.command()
@click.argument("workflow_id")
@click.argument("key", required=False)
@click.option("--wait", type=click.FloatRange(min=0), metavar="SECONDS",
              help="With KEY: wait up to SECONDS for the workflow to set it (exit 1 if it does not).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: each key and its latest value.")
@global_options
@pass_settings
def events(settings: Settings, workflow_id: str, key: str | None, wait: float | None, as_json: bool) -> None:
    """Show a workflow's events (ctx.set_event): the latest value of each key, or of KEY.

    With KEY the value is printed as JSON alone, for scripts; an unset KEY exits 1.
    """
    if wait is not None and key is None:
        fail("--wait waits for one KEY: give it")
    with settings.client(readonly=True) as client:
        if key is not None and wait:
            client.get_event(workflow_id, key, timeout=wait)
        found = client.events(workflow_id)
    if key is not None:
        if key not in found:
            fail(f"workflow {workflow_id} has set no event {key!r}" + (f" within {wait:g} s" if wait else ""))
        found = {key: found[key]}
    if as_json:
        click.echo(json.dumps(found))
    elif key is not None:
        click.echo(json.dumps(found[key]))
    else:
        _console().print(_listing(f"{len(found)} event(s)", ("key", "value"),
                                  [(_t(k), _t(preview(v, 200))) for k, v in found.items()], wide="value"))


# ---------------------------------------------------------------- worker


@cli.command()
@click.option("--app", help="Module or .py file with the workflows (else $REPLAYLOG_APP, else replaylog.samples).")
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
# A worker always creates a missing database now; --create stays accepted for scripts written before.
@click.option("--create", is_flag=True, hidden=True, expose_value=False,
              help="Accepted for older scripts: a worker creates a missing database.")
@click.option("--quiet", "-q", is_flag=True,
              help="Print no start line and nothing per workflow; of the workflows' log lines, WARNING and above.")
@click.option("--metrics-port", type=click.IntRange(1, 65535), metavar="PORT",
              help="Serve Prometheus metrics on http://HOST:PORT/metrics (with --processes N, process i on PORT+i).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, metavar="HOST",
              help="The address --metrics-port binds.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one JSON object per event on stdout (ts, level, workflow_id, slot, event, error, message).")
@click.option("--retention", metavar="AGE",
              help="Prune workflows finished longer ago than AGE (30d, 12h), at start and every 5 minutes,"
                   " as `replaylog prune --finished-before AGE` would.")
@click.option("--max-slots", type=click.IntRange(min=1), default=DEFAULT_MAX_SLOTS, show_default=True, metavar="N",
              help="The most slots one run's history may hold: a workflow that passes it fails, told to use"
                   " ctx.continue_as_new.")
@click.option("--child", is_flag=True, hidden=True, help="Started by another worker, which announced it.")
@global_options
@pass_settings
def worker(settings: Settings, app: str | None, until_idle: bool, processes: int, concurrency: int,
           lease: float, no_inflight: bool, no_cpu_focus: bool, quiet: bool, metrics_port: int | None,
           metrics_host: str, log_format: str, retention: str | None, max_slots: int, child: bool) -> None:
    """Run every runnable workflow until stopped (SIGTERM or ctrl-c finish the current slot)."""
    from replaylog.engine.worker import Worker

    # Checked before anything starts; only this process prunes (its --child processes never get it).
    keep_for = None if retention is None else parse_duration(retention, "--retention")

    registry = _app(app)
    json_logs = log_format == "json"
    if json_logs:
        _json_logs(quiet)
    else:
        _show_workflow_logs(quiet)
    # A worker is the natural first process on a new database (started before any workflow),
    # so it creates a missing one; its start line says it did, so a mistyped path shows at once.
    # A bad database (not replaylog's, damaged, newer) still fails here, in one line.
    db = settings.db
    created = isinstance(db, Path) and not db.exists()
    settings.open(create=True).close()
    metrics = _serve_metrics(settings, metrics_port, metrics_host)  # before the children: a taken port stops all
    children: list[subprocess.Popen[bytes]] = []
    if processes > 1:
        base = [sys.executable, "-m", "replaylog", "--db", str(settings.db),
                "--max-payload", str(settings.max_payload), "worker", "--app", resolve_app_spec(app),
                "--concurrency", str(concurrency), "--lease", str(lease), "--max-slots", str(max_slots), "--child"]
        base += ["--until-idle"] * until_idle + ["--no-inflight"] * no_inflight + ["--quiet"] * quiet
        base += ["--no-cpu-focus"] * no_cpu_focus + ["--log-format", log_format, "--metrics-host", metrics_host]
        # In a session of their own: ctrl-c in a terminal signals the whole foreground
        # process group, and a child that heard it from the terminal and then from this
        # process took the second as "leave now" and dropped its workflows. Only this
        # process passes signals on (on_signal).
        children = [subprocess.Popen(base + (["--metrics-port", str(metrics_port + i)] if metrics_port else []),
                                     start_new_session=True) for i in range(1, processes)]

    def event(wid: str, text: str) -> None:
        stamp = datetime.now().strftime("%H:%M:%S")
        line, *more = text.split("\n")  # a failure's traceback comes on the lines after, indented
        said = [f"{stamp} {printable(wid, oneline=True)} {printable(line, oneline=True)}"]
        said += [f"    {printable(part, oneline=True)}" for part in more]
        click.echo("\n".join(said), err=True)

    w = Worker(settings.db, registry, concurrency=concurrency, ttl=lease, track_inflight=not no_inflight,
               focus_cpu=not no_cpu_focus, max_payload=settings.max_payload,
               on_event=None if quiet or json_logs else event, metrics=metrics, retention=keep_for,
               max_slots=max_slots)

    stopped_by: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        if w.stop_requested:
            os._exit(128 + signum)  # a second ctrl-c: leave now, leases lapse on their own
        stopped_by.append(signal_mod.Signals(signum).name)
        w.request_stop()
        for proc in children:
            proc.send_signal(signum)

    signal_mod.signal(signal_mod.SIGTERM, on_signal)
    signal_mod.signal(signal_mod.SIGINT, on_signal)
    if not quiet and not child:
        # On stderr, with the per-workflow events: stdout stays for what a script reads. Said
        # once the signal handlers are in place: a SIGTERM after it always stops the worker cleanly.
        line = _serving(settings, registry, concurrency, [os.getpid()] + [c.pid for c in children], created=created)
        if metrics_port:
            line += f"; metrics on http://{metrics_host}:{metrics_port}/metrics"
        _worker_line(line, "worker_started", json_logs)
    try:
        w.run(until_idle=until_idle)
    except ReplaylogError as exc:
        fail(str(exc))
    finally:
        for proc in children:  # not `child`: that is the --child flag
            proc.wait()
        if metrics is not None:
            metrics.close()
    if stopped_by and not quiet:
        _worker_line(_one(_stopped_line(stopped_by[0], w.handed_back, w.completed)), "worker_stopped", json_logs)
    if w.left_unknown:
        names = ", ".join(f"{printable(name, oneline=True)} ({n})" for name, n in w.left_unknown.items())
        click.echo(f"left {sum(w.left_unknown.values())} pending workflow(s) no worker here knows: {names}", err=True)
    bad = [c.returncode for c in children if c.returncode not in (0, -signal_mod.SIGTERM, -signal_mod.SIGINT)]
    if bad:
        fail(f"{len(bad)} worker process(es) exited with an error")


@cli.command()
@global_options
@pass_settings
def migrate(settings: Settings) -> None:
    """Bring the database's schema up to this replaylog's, in one transaction (every workflow kept)."""
    with settings.client() as client:
        before, now = client.migrate()
    where = redact_url(str(settings.db))
    if before == now:
        click.echo(f"{where}: schema version {now}, up to date")
    else:
        click.echo(f"{where}: schema version {before} -> {now}")


@cli.command()
@click.option("--finished-before", "finished_before", required=True, metavar="AGE|TIME",
              help="Workflows finished (last updated) before this: an age (30d, 12h, 90m, 2w) or an ISO date or"
                   " time, UTC unless it says otherwise (2026-01-31, 2026-01-31T12:00).")
@click.option("--status", "statuses", default=",".join(sorted(FINISHED)), show_default=True, metavar="S,S",
              help="Only workflows in these finished statuses, comma-separated.")
@click.option("--dry-run", is_flag=True, help="Count what would be pruned and show the first ids; write nothing.")
@click.option("--vacuum", is_flag=True,
              help="SQLite: afterwards give the freed space back to the file system (a VACUUM: rewrites the file,"
                   " needs that much free disk, holds the write lock while it runs).")
@click.option("--batch", type=click.IntRange(min=1), default=BATCH, show_default=True,
              help="Top-level workflows per write transaction (workers commit between batches).")
@global_options
@pass_settings
def prune(settings: Settings, finished_before: str, statuses: str, dry_run: bool, vacuum: bool, batch: int) -> None:
    """Delete finished workflows with everything they own (slots, signals, audit rows, child workflows).

    A workflow is kept while any child workflow of it is unfinished, and a child goes
    with its parent. Export first (`replaylog export`) what must outlive the database.
    """
    cutoff = parse_cutoff(finished_before, time.time())  # worded as the option, before anything opens
    with settings.client(readonly=dry_run) as client:
        report = client.prune(cutoff, statuses=statuses, dry_run=dry_run, vacuum=vacuum, batch=batch)
    total = report.pruned + report.children
    first = ", ".join(report.first) + (", …" if report.pruned > len(report.first) else "")
    verb = "would prune" if dry_run else "pruned"
    line = (f"{verb} {total} workflow(s) finished before {utc(report.cutoff)}"
            + (f" ({report.pruned} top-level, {report.children} children with them)" if report.children else "")
            + (f": {first}" if first else ""))
    click.echo(_one(line))
    if report.kept:
        kept = ", ".join(report.kept_ids) + (", …" if report.kept > len(report.kept_ids) else "")
        click.echo(_one(f"kept {report.kept} workflow(s) whose child workflows still run: {kept}"))
    if report.space:
        click.echo(_one(report.space), err=True)


class _WorkflowLines(logging.Formatter):
    """A workflow's log line as the worker shows it: time, workflow id, level, message (and any traceback)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(workflow_id)s %(levelname)s %(message)s", datefmt="%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        """The line, its control characters made visible (a message is the workflow code's text)."""
        return printable(super().format(record))


def _show_workflow_logs(quiet: bool) -> None:
    """Show the workflows' `ctx.logger` lines on stderr: INFO and above, WARNING and above with --quiet.

    Unless the app set up logging itself while it was imported (a handler of its own on
    the root or the workflow logger): then its set-up decides where the lines go.
    """
    wf_logger = logging.getLogger(WORKFLOW_LOGGER)
    if logging.getLogger().handlers or wf_logger.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_WorkflowLines())
    wf_logger.addHandler(handler)
    wf_logger.setLevel(logging.WARNING if quiet else logging.INFO)
    wf_logger.propagate = False  # ours alone: a root handler the app adds later would print each line twice


# The worker's own lines and its per-workflow events are logged here and under the engine's
# worker; with --log-format json both go to stdout as JSON, beside the workflows' lines.
_WORKER_LOGGERS = ("replaylog.cli.worker", "replaylog.worker")


def _json_logs(quiet: bool) -> None:
    """--log-format json: every event and every workflow log line as one JSON object on stdout."""
    from replaylog.engine.telemetry import JsonLines

    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonLines())
    for name in (WORKFLOW_LOGGER, *_WORKER_LOGGERS):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING if quiet else logging.INFO)
        logger.propagate = False  # one line per event, whatever handler the app adds to the root


def _worker_line(text: str, event: str, json_logs: bool) -> None:
    """A line of the worker's own (started, stopped): on stderr, or as a JSON event."""
    if json_logs:
        logging.getLogger(_WORKER_LOGGERS[0]).info(text, extra={"event": event})
    else:
        click.echo(printable(text, oneline=True), err=True)


def _serve_metrics(settings: Settings, port: int | None, host: str) -> Any:
    """Start serving --metrics-port (None: no metrics, and prometheus-client never imported)."""
    if port is None:
        return None
    from replaylog.engine.telemetry import Metrics

    try:
        metrics = Metrics(settings.db)
        metrics.serve(port, host)
    except ImportError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}")
    return metrics


def _stopped_line(signame: str, handed_back: list[str], completed: int) -> str:
    """What a worker stopped by a signal says last: which workflows it gave back unfinished."""
    back = (f"handed back {len(handed_back)} unfinished workflow(s), their history kept, for the next worker:"
            f" {', '.join(handed_back[:10])}{', …' if len(handed_back) > 10 else ''}" if handed_back
            else "no workflow was running, none handed back")
    return f"replaylog worker (pid {os.getpid()}) stopped by {signame}: {back}; {completed} completed while it ran"


def _serving(settings: Settings, registry: Registry, concurrency: int, pids: list[int], *, created: bool) -> str:
    """The worker's start line: what it serves (and whether it just created it), how, and which processes to signal."""
    names = sorted(registry.workflows)
    shown = ", ".join(names[:8]) + (f", … ({len(names)} in all)" if len(names) > 8 else "")
    db = settings.db
    where = db.resolve() if isinstance(db, Path) else redact_url(db)  # a URL's password stays out
    new = " (a new database: created it, as there was none)" if created else ""
    return (f"replaylog worker serving {where}{new}: app {registry.spec} "
            f"({len(names)} workflow(s): {shown or 'none'}), concurrency {concurrency}, "
            f"{len(pids)} process(es), pid {', '.join(map(str, pids))}")


# ---------------------------------------------------------------- reading


def _when(ts: float | None, *, short: bool = False) -> str:
    """A stored time in UTC (the long form says so; a table's column header says it for the short)."""
    if ts is None:
        return ""
    return utc(ts, "short" if short else "full")


def _clock_value(value: Any) -> str:
    """A recorded `now` slot as a UTC time; anything that is not a plausible time as its JSON."""
    from replaylog.console.format import clock_read

    return clock_read(value) or preview(value, 40)


# Piped output is laid out this wide: wide enough that no line of ours wraps, so a script
# (or grep) gets each value and each verdict on one line.
_PIPED_WIDTH = 10_000


def _console(stderr: bool = False) -> Console:
    """A rich console: a terminal's width, else one that never wraps (nor pads to its width)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=_PIPED_WIDTH, soft_wrap=True)


def _print(*renderables: Any) -> None:
    """Print on stdout: as laid out on a terminal; piped, each line without the padding rich adds to its width."""
    console = _console()
    if console.is_terminal:
        console.print(*renderables)
        return
    with console.capture() as captured:
        console.print(*renderables)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def _t(value: Any) -> Text:
    """A table cell that is always text, never markup."""
    from rich.text import Text

    return Text(printable("" if value is None else str(value), oneline=True))


def _head() -> Table:
    """The two-column grid of facts atop `show`."""
    from rich.table import Table

    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    return head


def _slots_table(slots: list[Slot]) -> Table:
    return _listing(
        f"{len(slots)} slot(s)", ("slot", "kind", "name", "ok", "value / error", "attempts", "when (UTC)"),
        _slot_rows(slots), wide="value / error")


def _long_history(slots: int) -> str:
    return (f"{slots} slots, past {HISTORY_WARN:,}: use ctx.continue_as_new(input) to go on in a fresh history"
            " before the cap (worker --max-slots) fails the workflow")


def _show_earlier_run(view: WorkflowView) -> None:
    """`show ID --run N` of an earlier run: its input, its end, its slots and the signals it consumed."""
    from rich.text import Text

    head = _head()
    head.add_row("id", _t(view.info.id))
    head.add_row("workflow", _t(view.info.workflow))
    head.add_row("run", _t(f"{view.run.run} of {view.runs[-1].run} (the latest: show {view.info.id})"))
    head.add_row("status", _status(Status.CONTINUED.value))
    head.add_row("input", _t(preview(view.run.input, 200) if view.run.has_input else "(none)"))
    head.add_row("ended", _t(_when(view.run.ended_at)))
    if view.run.slots > HISTORY_WARN:
        head.add_row("history", Text(_long_history(view.run.slots), style="yellow"))
    shown: list[Any] = [head, _slots_table(view.history)]
    if view.signals:
        shown.append(_listing(
            f"{len(view.signals)} signal(s) it consumed", ("seq", "name", "payload", "sent"),
            [(_t(s.seq), _t(s.name), _t(preview(s.payload)), _t(_when(s.sent_at))) for s in view.signals]))
    _print(*shown)


# The options that choose workflows, on `list` and on the bulk actions (engine.filters).
_FILTER_OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("--status", "S,S", "Only workflows in these statuses (comma-separated)."),
    ("--workflow", "NAME,NAME", "Only workflows of these names."),
    ("--queue", "NAME,NAME", "Only workflows started on these queues."),
    ("--parent", "ID", "Only the children of this workflow (ctx.call_workflow)."),
    ("--forked-from", "ID", "Only the forks of this workflow."),
    ("--created-after", "AGE|TIME", "Only workflows started at or after this: an age (2h, 7d) or an ISO time."),
    ("--created-before", "AGE|TIME", "Only workflows started before this."),
    ("--updated-after", "AGE|TIME", "Only workflows last updated at or after this."),
    ("--updated-before", "AGE|TIME", "Only workflows last updated before this."),
    ("--error-kind", "KIND,KIND", "Only failed workflows of these error kinds (activity, nondeterministic, code,"
                                  " engine)."),
    ("--error-text", "WORDS", "Only workflows whose error holds all these words (full-text search)."),
)


def filter_options(fn: Any) -> Any:
    """The filter options (`_FILTER_OPTIONS`, `--attr`, `--filter`), passed on as the keyword `filters`."""
    def keep(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        ctx.meta.setdefault("replaylog_filters", {})[param.name] = value
        return value

    for flag, metavar, text in reversed(_FILTER_OPTIONS):
        fn = click.option(flag, metavar=metavar, help=text, expose_value=False, callback=keep)(fn)
    fn = click.option("--attr", "attr", multiple=True, metavar="KEY=VALUE", expose_value=False, callback=keep,
                      help="Only workflows with this search attribute (ctx.upsert_search_attributes); repeatable.")(fn)
    return click.option("--filter", "query", metavar="QUERY", expose_value=False, callback=keep,
                        help="Filters as the console's filter box writes them: 'status:failed"
                             " error_text:\"card declined\" customer=c-42'.")(fn)


def _filter_given(ctx: click.Context) -> WorkflowFilter:
    """The WorkflowFilter of a command's filter options (an unknown field or a bad value: one line)."""
    given: dict[str, Any] = dict(ctx.meta.get("replaylog_filters", {}))
    query, attrs = given.pop("query", None), given.pop("attr", ())
    fields = {name: value for name, value in given.items() if value is not None}
    if query:
        extra, rest = parse_query(query)
        if rest:
            fail(f"--filter {query!r}: {rest!r} is no field:value or KEY=VALUE")
        fields.update({k: v for k, v in _filter_fields(extra).items() if k not in fields})
        attrs = (*attrs, *(f"{k}={v}" for k, v in extra.attributes))
    return workflow_filter(fields, attrs)


def _filter_fields(where: WorkflowFilter) -> dict[str, Any]:
    """A parsed filter's fields back as `workflow_filter` takes them (times as epoch seconds)."""
    return {k: v for k, v in {
        "status": where.statuses, "workflow": where.workflows, "queue": where.queues, "parent": where.parent,
        "forked_from": where.forked_from, "created_after": where.created_after,
        "created_before": where.created_before, "updated_after": where.updated_after,
        "updated_before": where.updated_before, "error_kind": where.error_kinds, "error_text": where.error_text,
    }.items() if v not in (None, ())}


@cli.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.option("--limit", type=click.IntRange(min=0), default=None,
              help="At most this many (default: all with --json, 200 in the table; 0 means all).")
@click.option("--awaiting", type=click.Choice(["approval"]), default=None,
              help="Only workflows waiting for this: 'approval' (ctx.request_approval; answer with `approve`).")
@click.option("--tree", is_flag=True,
              help="Child workflows (ctx.call_workflow) under their parent, indented: the filters and --limit"
                   " choose the top-level workflows, each shown with all its children.")
@filter_options
@global_options
@pass_settings
@click.pass_context
def list_cmd(ctx: click.Context, settings: Settings, as_json: bool, limit: int | None, awaiting: str | None,
             tree: bool) -> None:
    """List workflows, most recently updated first, of every filter given (docs/cli.md, "Filters")."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    where = _filter_given(ctx)
    if limit is None:
        limit = 0 if as_json else 200
    with settings.client(readonly=True) as client:
        listed = client.listing(where, limit=limit, awaiting=awaiting, tree=tree)
    top, total, rows, depth = listed.top, listed.total, listed.rows, listed.depth
    waiting, approvals, attributes = listed.waiting, listed.approvals, listed.attributes
    if as_json:
        click.echo(json.dumps([
            {"id": r.id, "workflow": r.workflow, "status": r.status, "blocked_on": r.blocked_on,
             "wake_at": r.wake_at, "slots": r.slots,
             "updated_at": r.updated_at, "error": r.error, "waiting_for_worker": waiting[r.id],
             "parent": r.parent, "search_attributes": attributes.get(r.id, {}), "queue": r.queue,
             "position": r.position} for r in rows
        ]))
        return
    # --limit and the total count top-level workflows under --tree: a child comes with its parent, uncounted.
    counted = "top-level workflow(s), each with its children" if tree else "workflow(s)"
    cut = total != len(top)
    table = Table(title=f"{len(top)} of {total} {counted}" if cut else None, box=box.SIMPLE_HEAD)
    now = time.time()
    # A failed workflow's error, or why a cancelled or terminated one was stopped (the
    # operator's reason): a column of its own, last, when a row has one.
    errors = any(r.error for r in rows)
    queued = any(r.queue for r in rows)  # a column only when a workflow of the page is on a queue
    # Each search attribute a row on the page has is a column of its own, after the slots.
    keys = sorted({k for found in attributes.values() for k in found})
    columns = (("id", "workflow", "status", "blocked on") + ("queue",) * queued + ("slots", *keys, "updated (UTC)")
               + ("error / reason",) * errors)
    for col in columns:
        # Ids are what operators copy into the next command: never cut them short.
        table.add_column(col, justify="right" if col == "slots" else "left", overflow="fold",
                         no_wrap=col in ("id", "status", "updated (UTC)", "slots"))
    for r in rows:
        # A pending workflow no live worker can run says so where a blocked one names its signal.
        waits = (_t(_blocked_text(r.blocked_on, r.wake_at, now, approvals.get(r.id))) if r.blocked_on
                 else _waits(waiting[r.id]))
        # A child is indented under its parent; the id itself stays whole, to be copied.
        shown_id = Text("  " * (depth[r.id] - 1) + "└ ", style="dim") + _t(r.id) if depth.get(r.id) else _t(r.id)
        found = attributes.get(r.id, {})
        cells = [shown_id, _t(r.workflow), _status(r.status), waits]
        if queued:
            cells.append(_t(f"{r.queue} #{r.position}" if r.position is not None else r.queue))
        cells += [_t(r.slots), *(_t(found.get(k, "")) for k in keys), _t(_when(r.updated_at, short=True))]
        if errors:
            cells.append(Text(printable(r.error or "", oneline=True), style="red" if r.status == Status.FAILED else ""))
        table.add_row(*cells)
    _print(table)
    if cut:
        click.echo(f"showing {len(top)} of {total} {counted}; use --limit 0 for all", err=True)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@global_options
@pass_settings
def stats(settings: Settings, as_json: bool) -> None:
    """How the database stands: counts by status and queue, the oldest waits, overdue timers, live workers, slots/s."""
    with settings.client(readonly=True) as client:
        st = client.stats()
    pending, blocked = (None if t is None else max(0.0, st.at - t) for t in (st.oldest_pending, st.oldest_blocked))
    if as_json:
        click.echo(json.dumps({
            "at": st.at, "counts": st.counts, "total": sum(st.counts.values()),
            "oldest_pending_age": pending, "oldest_blocked_age": blocked, "past_wake_time": st.overdue,
            "slots_last_minute": st.slots_last_minute, "slots_per_second": st.slots_per_second,
            "queues": [{"name": q.name, "concurrency": q.concurrency, "admitted": q.admitted, "counts": q.counts,
                        "total": sum(q.counts.values())} for q in st.queues],
            "workers": [{"owner": w.owner, "host": w.host, "pid": w.pid, "names": list(w.names),
                         "started_at": w.started_at, "last_heartbeat": w.seen_at,
                         "heartbeat_age": max(0.0, st.at - w.seen_at)} for w in st.workers]}))
        return
    counts = " · ".join(f"{status} {n}" for status, n in st.counts.items())
    lines = [("workflows", f"{sum(st.counts.values())}: {counts}")]
    # A queue's line names only the statuses it has workflows in: with every status it would not fit a line.
    lines += [(f"queue {printable(q.name, oneline=True)}",
               f"{sum(q.counts.values())}: " + (" · ".join(f"{s} {n}" for s, n in q.counts.items() if n) or "empty")
               + ("; no limit" if q.concurrency is None else f"; limit {q.concurrency}, {q.admitted} taken"))
              for q in st.queues]
    lines += [
             ("oldest pending", "none" if pending is None else f"{duration(pending)} (since {_when(st.at - pending)})"),
             ("oldest blocked", "none" if blocked is None else f"{duration(blocked)} (since {_when(st.at - blocked)})"),
             ("past wake time", f"{st.overdue} blocked workflow(s) whose timer or deadline has passed"),
             ("slots committed", f"{st.slots_per_second:.1f}/s over the last minute ({st.slots_last_minute})"),
             ("live workers", str(len(st.workers)) if st.workers else "none")]
    for label, value in lines:
        click.echo(f"{label:<16} {value}")
    if st.workers:
        _print(_listing("", ("owner", "host", "pid", "serves", "started (UTC)", "last heartbeat"), [
            (_t(w.owner), _t(w.host), _t(w.pid), _t(", ".join(w.names)), _t(_when(w.started_at, short=True)),
             _t(f"{duration(max(0.0, st.at - w.seen_at))} ago")) for w in st.workers]))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, one object per queue.")
@global_options
@pass_settings
def queues(settings: Settings, as_json: bool) -> None:
    """Each queue workers have declared: running, waiting, its limits and its rate window."""
    with settings.client(readonly=True) as client:
        rows = client.queues()
    if as_json:
        click.echo(json.dumps([
            {"name": q.name, "running": q.admitted, "running_now": q.running, "waiting": q.waiting,
             "delayed": q.delayed, "concurrency": q.concurrency, "worker_concurrency": q.worker_concurrency,
             "rate_limit": None if q.rate_limit is None else {"starts": q.rate_limit[0], "seconds": q.rate_limit[1]},
             "started_in_window": q.recent, "declared_by": q.declared_by, "declared_at": q.declared_at}
            for q in rows]))
        return
    if not rows:
        click.echo("no queues: a worker records its app's queues when it starts")
        return
    _print(_listing(f"{len(rows)} queue(s)", ("queue", "running", "waiting", "limit", "per worker", "rate",
                                              "declared by"), [
        (_t(q.name), _t(q.admitted), _t(f"{q.waiting}" + (f" ({q.delayed} delayed)" if q.delayed else "")),
         _t(q.concurrency if q.concurrency is not None else "none"),
         _t(q.worker_concurrency if q.worker_concurrency is not None else "none"),
         _t("none" if q.rate_limit is None else f"{q.recent}/{q.rate_limit[0]} per {q.rate_limit[1]:g}s"),
         _t(f"{q.declared_by}, {_when(q.declared_at, short=True)}")) for q in rows], wide="declared by"))


def _blocked_text(blocked_on: str | None, wake_at: float | None, now: float,
                  approval: dict[str, Any] | None) -> str:
    """What a blocked workflow waits on: a timer, a signal's name, or "approval: ACTION (request RID)".

    A wait with a deadline (a signal's or an approval's timeout) says until when.
    """
    if approval is not None:
        shown = f"approval: {approval['action']} (request {approval['request']})"
        return waits_text(shown, wake_at, now)
    return waits_text(blocked_on, wake_at, now)


def _waits(waiting: str | None) -> Text:
    from rich.text import Text

    return Text(printable(waiting or "", oneline=True), style="yellow")


def _status(status: str, waiting: str | None = None) -> Text:
    from replaylog.console.format import status_text

    shown = status_text(status)  # styled as the console styles it
    if waiting:
        shown.append(printable(f" — {waiting}", oneline=True), style="yellow")
    return shown


@cli.command()
@click.argument("workflow_id")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--run", "run", type=click.IntRange(min=1), metavar="N",
              help="Show run N (ctx.continue_as_new numbers them) while it is kept; else the latest.")
@global_options
@pass_settings
def show(settings: Settings, workflow_id: str, as_json: bool, run: int | None) -> None:
    """Show a workflow: status, input, result or error, every slot, every signal (of its latest run)."""
    from rich.text import Text

    from replaylog.console.format import worker_error_line

    with settings.client(readonly=True) as client:
        handle = client.get_handle(workflow_id)
        if as_json:
            # The object an application gets from WorkflowHandle.details(run).
            click.echo(json.dumps(handle.details(run)))
            return
        view = handle.view(run)
    if not view.run.current:
        _show_earlier_run(view)
        return
    row, data, runs = view.info, view.details, view.runs
    head = _head()
    head.add_row("id", _t(row.id))
    head.add_row("workflow", _t(row.workflow))
    if len(runs) > 1:
        head.add_row("run", _t(f"{runs[-1].run} (continued as new from run {runs[-2].run}; earlier runs kept:"
                               f" {', '.join(str(r.run) for r in runs[:-1])}, see show {row.id} --run N)"))
    head.add_row("status", _status(row.status, data["waiting_for_worker"]))
    if row.slots > HISTORY_WARN:
        head.add_row("history", Text(_long_history(row.slots), style="yellow"))
    if row.blocked_on:
        now = time.time()
        until = f" ({countdown(row.wake_at, now)})" if row.wake_at is not None else ""
        head.add_row("blocked on", _t(_blocked_text(row.blocked_on, row.wake_at, now, data["approval"]) + until))
        if data["approval"]:
            head.add_row("details", _t(preview(data["approval"]["details"], 200)))
    if row.queue is not None:
        head.add_row("queue", _t(queue_text(row.queue, row.position, time.time(), priority=row.priority,
                                            not_before=row.not_before, dedup_id=row.dedup_id,
                                            admitted_at=row.admitted_at)))
    if data["parent"]:
        head.add_row("parent", _t(data["parent"]))
    for child in data["children"]:
        head.add_row("child", _t(f"{child['id']} ({child['workflow']}, {child['status']})"))
    head.add_row("input", _t(preview(row.input, 200) if row.has_input else "(none)"))
    if row.status == Status.COMPLETED:
        head.add_row("result", _t(preview(row.result, 200)))
    if row.error:
        head.add_row("error", Text(printable(row.error, oneline=True), style="red"))
    if row.diagnostic:
        d = row.diagnostic
        head.add_row("diverged at", _t(f"slot {d.slot}: recorded {d.recorded or '(nothing)'}, "
                                       f"issued {d.issued or '(nothing)'}"))
    if row.worker_error:
        # A run stopped without an outcome (KeyboardInterrupt, SystemExit, a worker failure),
        # said as the console's workflow screen says it.
        line = worker_error_line(row.worker_error, row.status, row.retry_at)
        head.add_row("worker error", Text(printable(line, oneline=True), style="yellow"))
    if data["cancel"] is not None:
        said = cancel_text(data["cancel"]["state"], data["cancel"]["why"], data["cancel"]["reason"])
        head.add_row("cancel", Text(printable(said, oneline=True), style="yellow"))
    if row.forked_from is not None:
        head.add_row("forked from", _t(f"{row.forked_from} at slot {row.forked_slot}"))
    head.add_row("updated", _t(_when(row.updated_at)))
    # Every activity in flight: one, or each task of a parallel group, with its own attempts and heartbeat.
    for i in data["inflight_tasks"]:
        if i["retry_at"] is not None and row.blocked_on == RETRY:
            head.add_row("retry", Text(printable(retry_text(i["slot"], i["name"], i["attempts"], i["error"],
                                                            i["retry_at"], time.time()), oneline=True), style="yellow"))
        else:
            head.add_row("in flight", Text(printable(
                f"slot {i['slot']} activity {i['name']} started {i['attempts']} time(s), no recorded outcome"
                " (it possibly ran)", oneline=True), style="yellow"))
        if i["heartbeat_at"] is not None:
            head.add_row("heartbeat", _t(heartbeat_text(i["heartbeat_at"], i["details"], time.time())))
    shown: list[Any] = [head]
    if row.traceback:
        shown += _traceback("traceback", row.traceback)
    shown.append(_slots_table(view.history))
    for c in view.history:
        if c.traceback:
            shown += _traceback(f"traceback of slot {c.slot} ({c.kind} {c.name})", c.traceback)
    if view.signals:
        shown.append(_listing(
            f"{len(view.signals)} signal(s)", ("seq", "name", "payload", "state", "sent"),
            [(_t(s.seq), _t(s.name), _t(preview(s.payload)), _t("consumed" if s.consumed else "waiting"),
              _t(_when(s.sent_at))) for s in view.signals]))
    if data["audit"]:
        shown.append(_listing(
            f"{len(data['audit'])} operator action(s)", ("when (UTC)", "action", "by", "reason", "detail"),
            [(_t(_when(a["at"], short=True)), _t(a["action"]), _t(a["actor"]), _t(a["reason"]), _t(a["detail"]))
             for a in data["audit"]]))
    _print(*shown)


def _traceback(title: str, text: str) -> list[Group]:
    """A failure's traceback as `show` prints it: a title, then its lines (control characters made visible)."""
    from rich.console import Group
    from rich.text import Text

    return [Group(Text(printable(title, oneline=True), style="bold"), Text(printable(text), style="red"), Text(""))]


def _listing(title: str, columns: tuple[str, ...], rows: list[tuple[Text, ...]], wide: str | None = None) -> Table:
    """One of show's tables: `wide` is the column that takes what is left; the short ones never wrap."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for col in columns:
        if wide is None:
            table.add_column(col)
        else:
            table.add_column(col, no_wrap=col != wide, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def _slot_rows(slots: list[Slot]) -> list[tuple[Text, ...]]:
    """show's slot rows: each ctx.parallel group opens with a line of its own, its tasks marked ‖."""
    from rich.text import Text

    last = {c.parallel_group: c.slot for c in slots}  # each group's last recorded slot
    rows: list[tuple[Text, ...]] = []
    group = None
    for c in slots:
        if c.parallel_group is not None and c.parallel_group != group:
            first, end = c.slot, last[c.parallel_group]
            span = f"slot {first}" if first == end else f"slots {first}–{end}"
            rows.append((_t(""), _t("‖"), Text(f"in parallel: {span}", style="italic"), *(_t(""),) * 4))
        group = c.parallel_group
        rows.append((_t(c.slot), _t(c.kind + (" ‖" if group is not None else "")), _t(c.name),
                     Text("ok", style="green") if c.ok else Text("failed", style="red"),
                     _t(_slot_value(c)), _t(c.attempts), _t(_when(c.recorded_at, short=True))))
    return rows


def _slot_value(c: Slot) -> str:
    if not c.ok:
        return preview(c.error, 40)
    # A clock read, a wake time, a deadline are times to the reader, not epoch numbers
    # (JSON keeps the number); a patch marker holds no value.
    kind = kind_info(c.kind)
    if kind.time is not None:
        return _clock_value(c.value)
    return "(marker)" if kind.marker is not None else preview(c.value, 40)


# ---------------------------------------------------------------- check


@cli.command()
@click.argument("workflow_id", required=False)
@click.option("--all", "check_all", is_flag=True, help="Check every unfinished workflow.")
@click.option("--app", help="Module or .py file with the workflows (else $REPLAYLOG_APP, else replaylog.samples).")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict of one workflow as a JSON object.")
@click.option("--history", "histories", multiple=True, metavar="FILE",
              help="Dry-replay exported histories (`replaylog export`) instead, without a database; repeatable.")
@click.argument("more_histories", nargs=-1, metavar="[FILE]...")
@global_options
@pass_settings
def check(settings: Settings, workflow_id: str | None, check_all: bool, app: str | None, as_json: bool,
          histories: tuple[str, ...], more_histories: tuple[str, ...]) -> None:
    """Dry-replay history against the current code, with no side effects: exit 1 if it diverges.

    A completed workflow replays cleanly only if the code ends as it ended (a history the
    code would extend has diverged). A failed one is judged as `retry` runs it: exit 0
    when its history replays and a retry may go ahead, exit 1 when it diverges or a retry
    would fail again (then the line names the slot to fork from).
    """
    if histories:
        # `check --history a.json b.json`: the first file is the option's, the rest come as arguments.
        files = [*histories, *([workflow_id] if workflow_id else []), *more_histories]
        if check_all or as_json:
            fail("--history checks exported files: not with --all or --json")
        _check_histories(files, _app(app))
        return
    if more_histories:
        fail(f"unexpected extra argument {more_histories[0]!r}")
    if bool(workflow_id) == check_all:
        fail("give one WORKFLOW_ID or --all")
    if as_json and check_all:
        fail("--json checks one WORKFLOW_ID, not --all")
    registry = _app(app)
    with settings.client(readonly=True, app=registry) as client:
        if not workflow_id:
            _check_all(client)
            return
        verdict = client.get_handle(workflow_id).check()
    if as_json:
        click.echo(json.dumps({"id": workflow_id, **verdict.to_dict()}))
    else:
        # Said once: on stdout when it replays cleanly, on stderr (with exit 1) when not.
        click.echo(printable(f"{workflow_id}: {verdict.text}", oneline=True), err=not verdict.ok)
    if not verdict.ok:
        sys.exit(1)


def _check_histories(files: list[str], registry: Registry) -> None:
    """Dry-replay exported histories against the app's code: a replay corpus for CI. Exit 1 if any fails."""
    docs = [_read_document(f) for f in files]  # every file is read first: a bad one is refused before any verdict
    failures = 0
    for path, doc in zip(files, docs, strict=True):
        try:
            fn = registry.workflow(doc.workflow)
        except ReplaylogError as exc:
            ok, text = False, str(exc)
        else:
            failed = [slot for slot, c in enumerate(doc.commands) if not c.ok]
            verdict = judge(fn, doc.state, workflow_id=doc.id, status=doc.status, recorded_error=doc.error,
                            diverged=doc.diagnostic is not None, failed_slot=failed[-1] if failed else None)
            ok, text = verdict.ok, verdict.text
        failures += not ok
        click.echo(_one(f"{path} ({doc.id}): {text}"), err=not ok)
    click.echo(f"checked {len(docs)} exported history(ies): {len(docs) - failures} replay cleanly, "
               f"{failures} diverge or fail")
    if failures:
        sys.exit(1)


def _check_all(client: Client) -> None:
    from rich.progress import Progress
    from rich.text import Text

    ids = client.matching(client.filter(status=UNFINISHED))  # oldest first
    failures: list[tuple[str, str]] = []
    console = _console(stderr=True)
    # A progress bar only on a terminal: piped, rich's stopped display leaves a blank line.
    with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("replaying", total=len(ids))
        for wid in ids:
            verdict = client.get_handle(wid).check()
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


# ---------------------------------------------------------------- operator actions


def _one(text: str) -> str:
    return printable(text, oneline=True)


# How many ids a bulk action names before it acts (the rest are counted).
_BULK_SHOWN = 10


def _bulk(ctx: click.Context, settings: Settings, action: BulkAction, reason: str | None, dry_run: bool, yes: bool,
          app: Registry | None = None, force: bool = False) -> None:
    """A bulk action: the matching ids shown, confirmation (unless --yes), each done on its own, a summary."""
    where = _filter_given(ctx)
    with settings.client(app=app) as client:
        ids = client.matching(where)
        shown = ", ".join(ids[:_BULK_SHOWN]) + (", …" if len(ids) > _BULK_SHOWN else "")
        click.echo(_one(f"{action}: {len(ids)} workflow(s) match" + (f": {shown}" if ids else "")), err=True)
        if dry_run or not ids:
            click.echo(_one(f"dry run: nothing was {BULK_PAST[action]}" if dry_run else "nothing to do"), err=True)
            return
        if not yes:
            if not sys.stdin.isatty():
                fail(f"{action} of {len(ids)} workflow(s) needs confirmation: add --yes (no terminal to ask on)")
            if not click.confirm(f"{action.capitalize()} these {len(ids)} workflow(s)?", err=True):
                fail(f"nothing was {BULK_PAST[action]}")

        def said(outcome: BulkOutcome) -> None:
            if outcome.ok:
                click.echo(_one(f"{outcome.id} {BULK_PAST[action]}"))
            else:
                click.echo(_one(f"{outcome.id} refused: {outcome.error}"), err=True)

        report = client.bulk(action, ids, reason=reason, force=force, on_each=said)
    refused = len(report.refused)
    click.echo(_one(f"{BULK_PAST[action]} {report.done} of {len(ids)} workflow(s)"
                    + (f"; {refused} refused (above)" if refused else "")), err=True)
    if refused:
        sys.exit(1)


def _bulk_options(fn: Any) -> Any:
    """A one-workflow action's WORKFLOW_ID made optional, with the filter options to act on many instead."""
    fn = click.option("--yes", "-y", is_flag=True, help="With filters: act without asking for confirmation.")(fn)
    fn = click.option("--dry-run", is_flag=True, help="With filters: show what matches; do nothing.")(fn)
    fn = filter_options(fn)
    return click.argument("workflow_id", required=False)(fn)


def _one_or_many(ctx: click.Context, workflow_id: str | None, dry_run: bool, yes: bool) -> bool:
    """True for a bulk action (filters, no id); one-line refusals for neither or both."""
    filtered = any(v not in (None, ()) for v in ctx.meta.get("replaylog_filters", {}).values())
    if workflow_id is not None and (filtered or dry_run or yes):
        fail("give a WORKFLOW_ID or filters (--status, --workflow, …), not both")
    if workflow_id is None and not filtered:
        fail("give a WORKFLOW_ID, or filters (--status, --workflow, …) to act on every workflow they match")
    return workflow_id is None


def _stopping(act: Callable[[WorkflowHandle[Any], str | None], str]) -> click.Command:
    """A command `act.__name__ WORKFLOW_ID|FILTERS [--reason TEXT]`: runs `act` on the handle, prints the line
    it returns; with filters, on every workflow they match (`_bulk`).

    Its help is `act`'s docstring. (cancel and terminate: the same arguments, one write.)
    """
    action = cast(BulkAction, act.__name__)

    @_bulk_options
    @click.option("--reason", help="Why: kept with the workflow and in the audit trail, shown by `show` and `list`.")
    @global_options
    @pass_settings
    @click.pass_context
    def command(ctx: click.Context, settings: Settings, workflow_id: str | None, reason: str | None, dry_run: bool,
                yes: bool) -> None:
        if _one_or_many(ctx, workflow_id, dry_run, yes):
            _bulk(ctx, settings, action, reason, dry_run, yes)
            return
        with settings.client() as client:
            said = act(client.get_handle(str(workflow_id)), reason)
        click.echo(_one(said))

    return cli.command(name=act.__name__, help=act.__doc__)(command)


@_stopping
def cancel(handle: WorkflowHandle[Any], reason: str | None) -> str:
    """Ask a pending, running or blocked workflow to cancel.

    Its code sees WorkflowCancelled at its current or next ctx call and may run
    compensating activities; when the exception leaves it, its status is `cancelled`.
    """
    was = handle.cancel(reason)
    return f"cancel requested for {handle.id} (was {was}): its code sees WorkflowCancelled at its next ctx call"


@_stopping
def terminate(handle: WorkflowHandle[Any], reason: str | None) -> str:
    """Stop a pending, running or blocked workflow at once: no workflow code runs again.

    An activity in flight may still finish; its outcome is not recorded.
    """
    was = handle.terminate(reason)
    return f"{handle.id} terminated (was {was})"


@cli.command()
@_bulk_options
@click.option("--app", help="Module or .py file with the workflows (else $REPLAYLOG_APP, else replaylog.samples).")
@click.option("--force", is_flag=True, help="Skip the dry replay against the current code.")
@click.option("--reason", help="Why: kept in the audit trail.")
@global_options
@pass_settings
@click.pass_context
def retry(ctx: click.Context, settings: Settings, workflow_id: str | None, app: str | None, force: bool,
          reason: str | None, dry_run: bool, yes: bool) -> None:
    """Set a failed workflow going again, history kept, once its history replays against the current code.

    Refused if the dry replay diverges, or if it would end in the same recorded activity
    failure (fork from that slot instead). With filters instead of an id, every failed
    workflow they match, each on its own.
    """
    if _one_or_many(ctx, workflow_id, dry_run, yes):
        _bulk(ctx, settings, "retry", reason, dry_run, yes, app=None if force else _app(app), force=force)
        return
    with settings.client(app=None if force else _app(app)) as client:
        verdict = client.get_handle(str(workflow_id)).retry(reason, force=force)
    said = "dry replay skipped (--force)" if verdict is None else verdict.text
    click.echo(_one(f"{workflow_id} is pending again ({said})"))


@cli.command()
@click.argument("workflow_id")
@click.option("--from-slot", "from_slot", type=int, metavar="K",
              help="Copy slots 0..K-1; from slot K the fork's code runs live.")
@click.option("--from-failure", is_flag=True,
              help="From the last slot whose outcome is an error: the activity that failed runs again.")
@click.option("--from-activity", "from_activity", metavar="NAME",
              help="From the first slot of activity NAME: it, and everything after it, runs again.")
@click.option("--id", "new_id", help="The fork's id (else a generated one).")
@global_options
@pass_settings
def fork(settings: Settings, workflow_id: str, from_slot: int | None, from_failure: bool, from_activity: str | None,
         new_id: str | None) -> None:
    """Start a new workflow from a copy of another's history up to slot K, and every signal it received.

    K is given by one of --from-slot, --from-failure or --from-activity. The original is
    untouched. Activities from slot K run again, under the fork's own idempotency keys.
    """
    with settings.client() as client:
        original = client.get_handle(workflow_id)
        slot = original.fork_slot(from_slot, from_failure=from_failure, from_activity=from_activity)
        wid = original.fork(slot, id=new_id).id
        again = [s for s in original.history(slot) if s.kind == SlotKind.ACTIVITY]
    click.echo(wid)
    names = ", ".join(f"{c.name} (slot {c.slot})" for c in again[:10]) + (", …" if len(again) > 10 else "")
    click.echo(_one(f"forked {workflow_id} at slot {slot}: "
                    + (f"{len(again)} activit{'y' if len(again) == 1 else 'ies'} recorded from slot {slot}"
                       f" will run again, with new idempotency keys: {names}" if again else
                       "no recorded activity runs again")), err=True)


@cli.command(name="export")
@click.argument("workflow_id")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), help="Write to FILE (else stdout).")
@global_options
@pass_settings
def export_cmd(settings: Settings, workflow_id: str, output: str | None) -> None:
    """Write a workflow's whole history as one versioned JSON document."""
    with settings.client(readonly=True) as client:
        text = json.dumps(client.get_handle(workflow_id).export(), ensure_ascii=False)
    if output is None:
        click.echo(text)
        return
    try:
        Path(output).write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}")


def _read_document(path: str) -> HistoryDocument:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        fail(f"{path}: not UTF-8 text")
    except json.JSONDecodeError as exc:
        fail(f"{path}: invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    except RecursionError:
        fail(f"{path}: invalid JSON: nested too deeply")
    return parse_document(data, path)


@cli.command(name="import")
@click.argument("file", metavar="FILE")
@click.option("--id", "new_id", help="Import under this id (else the exported one).")
@global_options
@pass_settings
def import_cmd(settings: Settings, file: str, new_id: str | None) -> None:
    """Write an exported history as a new workflow; print its id.

    A workflow exported running or blocked is imported pending; a finished one keeps its status.
    """
    doc = _read_document(file)
    with settings.client() as client:
        wid = client.import_history(doc, id=new_id).id
    click.echo(wid)


# ---------------------------------------------------------------- schedules


@cli.group()
def schedule() -> None:
    """Cron schedules that start a workflow at each tick: add, list, pause, resume, delete, trigger."""


def _schedule_line(row: ScheduleRow) -> str:
    state = "paused" if row.paused else f"next run {utc(row.next_at)}"
    return _one(f"schedule {row.name}: {row.workflow} at {row.cron!r} ({row.timezone}); {state}")


@schedule.command(name="add")
@click.argument("name")
@click.option("--cron", "cron_expr", required=True, metavar="EXPR",
              help="Cron expression: five fields (minute hour day month weekday), or six with seconds first.")
@click.option("--workflow", "workflow_name", required=True, metavar="W", help="The workflow each tick starts.")
@click.option("--input", "input_json", metavar="JSON", help="Its input (JSON, `-` for stdin, `@path`); else none.")
@click.option("--timezone", default="UTC", show_default=True, metavar="TZ",
              help="IANA time zone the cron expression is read in (Europe/Paris, America/New_York, …).")
@click.option("--overlap", type=click.Choice(OVERLAPS), default=DEFAULT_OVERLAP, show_default=True,
              help="A tick while the last started workflow still runs: skip it, keep one for when it ends,"
                   " or start anyway.")
@click.option("--catch-up", "catch_up", type=click.Choice(CATCH_UPS), default=DEFAULT_CATCH_UP, show_default=True,
              help="Ticks missed while no worker ran: none start, the latest starts, or every one starts.")
@click.option("--app", help="Module or .py file with the workflows (else $REPLAYLOG_APP, else replaylog.samples).")
@global_options
@pass_settings
def schedule_add(settings: Settings, name: str, cron_expr: str, workflow_name: str, input_json: str | None,
                 timezone: str, overlap: str, catch_up: str, app: str | None) -> None:
    """Add a schedule NAME: each tick starts one workflow W, id NAME@<tick in UTC>."""
    registry = _app(app)
    registry.workflow(workflow_name)  # an unknown name: one line, naming the ones the app knows
    refusal = registry.input_refusal(workflow_name, given=input_json is not None)
    if refusal is not None:
        fail(refusal.replace("INPUT_JSON", "--input"))
    value, given = read_json_arg(input_json, "the schedule's input", settings.max_payload)
    with settings.client(app=registry) as client:
        row = client.add_schedule(name, workflow_name, cron_expr, value if given else NO_INPUT, timezone=timezone,
                                  overlap=overlap, catch_up=catch_up)
    click.echo(_schedule_line(row))


@schedule.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@global_options
@pass_settings
def schedule_list(settings: Settings, as_json: bool) -> None:
    """List the schedules with their next run."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    with settings.client(readonly=True) as client:
        rows = client.schedules()
    if as_json:
        click.echo(json.dumps([schedule_json(r) for r in rows]))
        return
    if not rows:
        click.echo("no schedules")
        return
    table = Table(box=box.SIMPLE_HEAD)
    for col in ("name", "workflow", "cron", "time zone", "next run (UTC)", "overlap", "catch-up", "last started"):
        table.add_column(col, overflow="fold", no_wrap=col in ("name", "next run (UTC)"))
    for r in rows:
        table.add_row(_t(r.name), _t(r.workflow), _t(r.cron), _t(r.timezone),
                      Text("paused", style="yellow") if r.paused else _t(utc(r.next_at)), _t(r.overlap),
                      _t(r.catch_up), _t(r.last_id or "—"))
    _print(table)


def schedule_json(row: ScheduleRow) -> dict[str, Any]:
    """A schedule as `schedule list --json` prints it."""
    return {"name": row.name, "workflow": row.workflow, "cron": row.cron, "timezone": row.timezone,
            "input": row.input, "has_input": row.has_input, "overlap": row.overlap, "catch_up": row.catch_up,
            "paused": row.paused, "origin": row.origin, "next_at": row.next_at, "last_tick": row.last_tick,
            "last_id": row.last_id, "buffered": row.buffered, "skipped": row.skipped}


def _schedule_action(verb: str, act: Callable[[Client, str, str | None], str]) -> None:
    @click.argument("name")
    @click.option("--reason", help="Why: kept in the audit trail (under schedule:NAME).")
    @global_options
    @pass_settings
    def command(settings: Settings, name: str, reason: str | None) -> None:
        with settings.client() as client:
            click.echo(act(client, name, reason))

    command.__doc__ = act.__doc__
    schedule.command(name=verb, help=act.__doc__)(command)


def _pause(client: Client, name: str, reason: str | None) -> str:
    """Pause a schedule: its ticks start nothing until it is resumed."""
    return _schedule_line(client.pause_schedule(name, reason))


def _resume(client: Client, name: str, reason: str | None) -> str:
    """Resume a schedule from its next tick after now (ticks missed while paused are not caught up)."""
    return _schedule_line(client.resume_schedule(name, reason))


def _delete(client: Client, name: str, reason: str | None) -> str:
    """Delete a schedule; the workflows it started are untouched."""
    client.delete_schedule(name, reason)
    return f"schedule {printable(name, oneline=True)} deleted"


_schedule_action("pause", _pause)
_schedule_action("resume", _resume)
_schedule_action("delete", _delete)


@schedule.command(name="trigger")
@click.argument("name")
@global_options
@pass_settings
def schedule_trigger(settings: Settings, name: str) -> None:
    """Start the schedule's workflow now (whatever its policies, even paused); print its id."""
    with settings.client() as client:
        click.echo(client.trigger_schedule(name).id)


# ---------------------------------------------------------------- console and demo


@cli.command()
@click.option("--readonly", is_flag=True, help="Open the database read-only: no write actions.")
@click.option("--app", help="Module or .py file with the workflows, for dry replays in diagnostics"
                             " (else $REPLAYLOG_APP, else replaylog.samples).")
@click.option("--serve", is_flag=True, help="Serve the console in a browser (one console per browser session).")
@click.option("--host", help="With --serve: the address to bind (default 127.0.0.1; any other needs a token).")
@click.option("--port", type=click.IntRange(1, 65535), help="With --serve: the TCP port (default 8080).")
@click.option("--token", envvar="REPLAYLOG_CONSOLE_TOKEN", show_envvar=True,
              help="With --serve: the secret the page asks for before a session starts.")
@global_options
@pass_settings
def console(settings: Settings, readonly: bool, app: str | None, serve: bool, host: str | None, port: int | None,
            token: str | None) -> None:
    """Open the operator console (a terminal UI) on the database, or serve it in a browser (--serve)."""
    if not serve and (host is not None or port is not None):
        fail("--host and --port serve the console in a browser: add --serve")
    settings.open(readonly=readonly).close()
    if serve:
        _app(app)  # a bad app is refused here, in one line, not in every browser session
        _serve_console(settings, readonly, app, host or "127.0.0.1", port or 8080, token)
        return
    console_app(settings, readonly=readonly, app=app).run()


def console_app(settings: Settings, *, readonly: bool, app: str | None) -> ReplaylogConsole:
    """The console `replaylog console` opens: with the app every command loads (--app, else
    $REPLAYLOG_APP, else replaylog.samples), so `c` and the Diagnosis tab replay the code a
    worker runs, as `check` and `retry` do."""
    from replaylog.console.app import ReplaylogConsole  # only the command line knows the console

    return ReplaylogConsole(settings.db, readonly=readonly, registry=_app(app))


def _serve_console(settings: Settings, readonly: bool, app: str | None, host: str, port: int,
                   token: str | None) -> None:
    from replaylog.console.serve import ConsoleServer, ServeRefused

    try:  # each session's process starts in this folder: a relative --db or --app means the same there
        server = ConsoleServer(settings.db, host=host, port=port, token=token, readonly=readonly, app=app,
                               max_payload=settings.max_payload)
    except ServeRefused as exc:
        fail(str(exc))
    try:
        server.serve()
    except OSError as exc:  # the port is taken, the address is not this machine's
        fail(f"cannot serve on {host}:{port}: {exc.strerror or exc}")


@cli.command()
@click.option("--no-console", is_flag=True, help="Only seed and print the tour; do not open the console.")
@click.option("--fresh", is_flag=True,
              help="Seed an existing demo database afresh, dropping the changes made in it (else they are kept).")
@global_options
@pass_settings
def demo(settings: Settings, no_console: bool, fresh: bool) -> None:
    """Seed a demo database with workflows in every state (once: a second run keeps your changes), run a worker,
    open the console."""
    from replaylog.demo import DemoRefused, run_demo

    if isinstance(settings.db, str):
        fail("the demo seeds a SQLite file; give --db a file path")
    try:
        run_demo(settings.db, open_console=not no_console, echo=_echo_err, fresh=fresh)
    except DemoRefused as exc:
        fail(str(exc))


def _echo_err(text: str) -> None:
    click.echo(text, err=True)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `replaylog` command."""
    try:
        cli.main(args=argv, prog_name="replaylog", standalone_mode=True)
    except ReplaylogError as exc:  # every refusal of the engine or the store ends a command here, in one line
        click.echo(f"replaylog: error: {printable(str(exc), oneline=True)}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
