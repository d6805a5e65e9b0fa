"""Schema migrations after 0.1.0: one ordered list for both backends.

Version 1 is 0.1.0's schema, which each backend's schema module creates. Every later
change is a `Migration` appended to `MIGRATIONS`, said once in portable changes that
each backend renders in its own SQL (SQLite: `ALTER TABLE`, and sqlite-utils'
`Table.transform()` for what `ALTER TABLE` cannot do; PostgreSQL: `ALTER TABLE` in the
`replaylog` schema). A database created today takes version 1 and then every migration,
so the upgrade path of a 0.1.0 database is the path every new one is created by.

Each backend takes the migrations a database lacks in one transaction, under its write
lock (SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory lock), the first time a writable
store opens it, and records each one in the `migrations` table. A change a released
replaylog has shipped is never edited: a correction is another migration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from replaylog.engine.errors import SchemaVersionError
from replaylog.engine.store.shared.keys import SLOT_BITS

ColumnType = Literal["text", "integer", "real", "boolean"]


@dataclass(frozen=True)
class AddColumn:
    """A new nullable column, NULL in every row already there."""

    table: str
    column: str
    type: ColumnType


@dataclass(frozen=True)
class AddIndex:
    """A new index; `where` makes it partial (the same SQL expression on both backends)."""

    name: str
    table: str
    columns: tuple[str, ...]
    where: str | None = None
    unique: bool = False

    def sql(self, table: str) -> str:
        """The CREATE INDEX statement on `table` (the name as the backend spells it)."""
        unique = "UNIQUE " if self.unique else ""
        where = f" WHERE {self.where}" if self.where else ""
        return f"CREATE {unique}INDEX {self.name} ON {table} ({', '.join(self.columns)}){where}"


@dataclass(frozen=True)
class Transform:
    """What SQLite's ALTER TABLE cannot do: rename or drop columns, change types, NOT NULL on or off.

    SQLite rebuilds the table with sqlite-utils' `Table.transform()` (its partial indexes
    dropped first and made again after: sqlite-utils refuses to carry them); PostgreSQL
    alters it in place. A partial index on a column renamed or dropped is the migration's
    to drop (`Sql`) before and make again (`AddIndex`) after.
    """

    table: str
    rename: Mapping[str, str] = field(default_factory=dict)
    drop: frozenset[str] = frozenset()
    types: Mapping[str, ColumnType] = field(default_factory=dict)
    not_null: Mapping[str, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class Sql:
    """A statement in each backend's SQL, for what the changes above cannot say (filling a new column)."""

    sqlite: str
    postgres: str


Change = AddColumn | AddIndex | Transform | Sql


@dataclass(frozen=True)
class Migration:
    """The changes that bring a database from `version - 1` to `version`."""

    version: int
    summary: str
    changes: tuple[Change, ...]


# The version 0.1.0 created; the first migration brings a database to FIRST + 1.
FIRST = 1

MIGRATIONS: list[Migration] = [
    Migration(2, "tracebacks of failures: workflows.traceback, commands.traceback", (
        # The Python traceback of a failed workflow, and of a failed activity's last
        # attempt (its slot's row): NULL where none was kept (every failure before it).
        AddColumn("workflows", "traceback", "text"),
        AddColumn("commands", "traceback", "text"),
    )),
    Migration(3, "the trace context a workflow was started in: workflows.trace_context", (
        # W3C trace context headers as JSON ({"traceparent": …}), set by a start made inside
        # an OpenTelemetry span: the worker's spans of the workflow join that trace.
        AddColumn("workflows", "trace_context", "text"),
    )),
    Migration(4, "schedules: one row per cron schedule (engine.schedules)", (
        # next_at: the next tick not yet looked at; last_id: the workflow the schedule started
        # last (its overlap policy asks whether it still runs); buffered: a tick kept by
        # overlap buffer-one. origin: "app" (@workflow(schedule=...)) or "operator" (the CLI).
        Sql(sqlite="CREATE TABLE schedules (name TEXT PRIMARY KEY, workflow TEXT NOT NULL, cron TEXT NOT NULL,"
                   " timezone TEXT NOT NULL, input TEXT, has_input INTEGER NOT NULL, overlap TEXT NOT NULL,"
                   " catch_up TEXT NOT NULL, paused INTEGER NOT NULL DEFAULT 0, origin TEXT NOT NULL,"
                   " next_at REAL NOT NULL, last_tick REAL, last_id TEXT, buffered REAL,"
                   " skipped INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, updated_at REAL NOT NULL)",
            postgres="CREATE TABLE replaylog.schedules (name text PRIMARY KEY, workflow text NOT NULL,"
                     " cron text NOT NULL, timezone text NOT NULL, input text, has_input boolean NOT NULL,"
                     " overlap text NOT NULL, catch_up text NOT NULL, paused boolean NOT NULL DEFAULT false,"
                     " origin text NOT NULL, next_at double precision NOT NULL, last_tick double precision,"
                     " last_id text, buffered double precision, skipped bigint NOT NULL DEFAULT 0,"
                     " created_at double precision NOT NULL, updated_at double precision NOT NULL)"),
    )),
    Migration(5, "finding workflows: full-text search of errors, search attributes, forks by origin", (
        # Full-text search of a workflow's error (`list --error-text`). SQLite: an FTS5 table
        # keyed by workflows.seq (stable under VACUUM, unlike the rowid), kept by triggers
        # that fire only when the error changes (never on a lease renewal or a claim).
        # sqlite-utils' enable_fts is not used: it runs executescript, which commits the
        # migration's open transaction, keys the index by rowid, and its update trigger
        # fires on every write of the row. PostgreSQL: a GIN index of the error's tsvector.
        # (A later Transform of workflows or commands rebuilds the table without its triggers:
        # that migration makes these again.)
        Sql(sqlite="CREATE VIRTUAL TABLE workflows_fts USING fts5(error)",
            postgres="CREATE INDEX workflows_error_search ON replaylog.workflows"
                     " USING gin (to_tsvector('simple', coalesce(error, '')))"),
        Sql(sqlite="INSERT INTO workflows_fts (rowid, error) SELECT seq, error FROM workflows WHERE error IS NOT NULL",
            postgres="SELECT 1"),
        Sql(sqlite="CREATE TRIGGER workflows_fts_insert AFTER INSERT ON workflows WHEN new.error IS NOT NULL"
                   " BEGIN INSERT INTO workflows_fts (rowid, error) VALUES (new.seq, new.error); END",
            postgres="SELECT 1"),
        Sql(sqlite="CREATE TRIGGER workflows_fts_delete AFTER DELETE ON workflows WHEN old.error IS NOT NULL"
                   " BEGIN DELETE FROM workflows_fts WHERE rowid = old.seq; END",
            postgres="SELECT 1"),
        Sql(sqlite="CREATE TRIGGER workflows_fts_update AFTER UPDATE OF error ON workflows"
                   " WHEN old.error IS NOT new.error BEGIN DELETE FROM workflows_fts WHERE rowid = old.seq;"
                   " INSERT INTO workflows_fts (rowid, error) SELECT new.seq, new.error WHERE new.error IS NOT NULL;"
                   " END",
            postgres="SELECT 1"),
        # Search attributes (ctx.upsert_search_attributes): each workflow's current ones,
        # indexed for equality, kept from the `attributes` slots by a trigger on commands, so
        # every path that writes slots (a worker's commit, fork, import) keeps them alike.
        Sql(sqlite="CREATE TABLE search_attributes (workflow_id TEXT NOT NULL, key TEXT NOT NULL,"
                   " value TEXT NOT NULL, PRIMARY KEY (workflow_id, key))",
            postgres="CREATE TABLE replaylog.search_attributes (workflow_id text NOT NULL, key text NOT NULL,"
                     " value text NOT NULL, PRIMARY KEY (workflow_id, key))"),
        AddIndex("search_attributes_value", "search_attributes", ("key", "value")),
        Sql(sqlite="CREATE TRIGGER commands_search_attributes AFTER INSERT ON commands"
                   " WHEN new.kind = 'attributes' AND new.ok BEGIN"
                   f" DELETE FROM search_attributes WHERE workflow_id = (SELECT id FROM workflows"
                   f" WHERE seq = new.slot_key >> {SLOT_BITS}) AND key IN (SELECT key FROM json_each(new.value));"
                   " INSERT INTO search_attributes (workflow_id, key, value) SELECT w.id, j.key,"
                   " CASE j.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE CAST(j.value AS TEXT) END"
                   f" FROM workflows w, json_each(new.value) j WHERE w.seq = new.slot_key >> {SLOT_BITS}"
                   " AND j.type <> 'null'; END",
            postgres="CREATE FUNCTION replaylog.index_search_attributes() RETURNS trigger LANGUAGE plpgsql AS $$"
                     " BEGIN DELETE FROM replaylog.search_attributes s USING replaylog.workflows w"
                     f" WHERE w.seq = NEW.slot_key >> {SLOT_BITS} AND s.workflow_id = w.id"
                     " AND s.key IN (SELECT jsonb_object_keys(NEW.value::jsonb));"
                     " INSERT INTO replaylog.search_attributes (workflow_id, key, value) SELECT w.id, j.key, j.value"
                     f" FROM replaylog.workflows w, jsonb_each_text(NEW.value::jsonb) j"
                     f" WHERE w.seq = NEW.slot_key >> {SLOT_BITS} AND j.value IS NOT NULL;"
                     " RETURN NULL; END $$"),
        Sql(sqlite="SELECT 1",
            postgres="CREATE TRIGGER commands_search_attributes AFTER INSERT ON replaylog.commands FOR EACH ROW"
                     " WHEN (NEW.kind = 'attributes' AND NEW.ok)"
                     " EXECUTE FUNCTION replaylog.index_search_attributes()"),
        # `list --forked-from ID`: the forks of a workflow, one range of a partial index.
        AddIndex("workflows_forked_from", "workflows", ("forked_from",), where="forked_from IS NOT NULL"),
    )),
    Migration(6, "retry waits: inflight.error, inflight.retry_at", (
        # An activity waiting durably for its next attempt under a retry policy: the last
        # attempt's error and the next attempt's time, beside its attempt count. A start mark
        # clears retry_at (the next attempt has started).
        AddColumn("inflight", "error", "text"),
        AddColumn("inflight", "retry_at", "real"),
    )),
    Migration(7, "heartbeats: inflight.details, inflight.heartbeat_at, inflight.heartbeat_expires", (
        # An attempt's latest heartbeat: its details (JSON) for the next attempt, when it beat, and
        # when it is due by under a heartbeat timeout: a claim takes a running workflow over once
        # that time has passed, without waiting for its lease to lapse.
        AddColumn("inflight", "details", "text"),
        AddColumn("inflight", "heartbeat_at", "real"),
        AddColumn("inflight", "heartbeat_expires", "real"),
    )),
    Migration(8, "queues: the queues table; workflows.queue, priority, dedup_id, not_before, admitted_at", (
        # A queued workflow's queue, its priority (lower first), its deduplication id, the
        # time before which it is not admitted (a delay), and when a claim admitted it
        # (rate limits count admissions in a window). NULL on every workflow of no queue.
        AddColumn("workflows", "queue", "text"),
        AddColumn("workflows", "priority", "integer"),
        AddColumn("workflows", "dedup_id", "text"),
        AddColumn("workflows", "not_before", "real"),
        AddColumn("workflows", "admitted_at", "real"),
        # The waiting line of each queue, in claim order; partial, so no other workflow touches it.
        AddIndex("workflows_queued", "workflows", ("queue", "priority", "seq"), "status = 'queued'"),
        # A queue's admitted workflows by status (its concurrency counts them) and by admission
        # time (its rate limit counts a window of them): workflows of no queue are in neither.
        AddIndex("workflows_queue_status", "workflows", ("queue", "status"), "queue IS NOT NULL"),
        AddIndex("workflows_queue_admitted", "workflows", ("queue", "admitted_at"), "admitted_at IS NOT NULL"),
        AddIndex("workflows_dedup", "workflows", ("queue", "dedup_id"), "dedup_id IS NOT NULL"),
        # The queues workers' apps declare, with their limits (NULL: none): the claim reads
        # them, so every worker enforces the same ones. The last worker to start with a queue
        # declared differently sets it (engine.store.shared.queues.declare_queues).
        Sql("CREATE TABLE queues (name TEXT PRIMARY KEY, concurrency INTEGER, worker_concurrency INTEGER,"
            " rate_limit INTEGER, rate_period REAL, declared_by TEXT NOT NULL, declared_at REAL NOT NULL)",
            "CREATE TABLE replaylog.queues (name text PRIMARY KEY, concurrency bigint, worker_concurrency bigint,"
            " rate_limit bigint, rate_period double precision, declared_by text NOT NULL,"
            " declared_at double precision NOT NULL)"),
    )),
    Migration(9, "continue-as-new: workflows.run, signals.run, and the runs table of earlier runs", (
        # The workflow's current run (NULL: run 1). ctx.continue_as_new ends a run and starts
        # the next under a new seq, so each run's slots keep their own key range.
        AddColumn("workflows", "run", "integer"),
        # NULL: a signal of the current run (consumed or waiting); else the earlier run that
        # consumed it. A run continued as new leaves the signals it did not consume to the next.
        AddColumn("signals", "run", "integer"),
        # One row per earlier run: its number, the seq its slots are keyed by, its input, its
        # slot count and when it ended. The current run is the workflow's row itself.
        Sql(sqlite="CREATE TABLE runs (workflow_id TEXT NOT NULL, run INTEGER NOT NULL, seq INTEGER NOT NULL,"
                   " input TEXT, slots INTEGER NOT NULL, ended_at REAL NOT NULL, PRIMARY KEY (workflow_id, run))",
            postgres="CREATE TABLE replaylog.runs (workflow_id text NOT NULL, run bigint NOT NULL, seq bigint NOT NULL,"
                     " input text, slots bigint NOT NULL, ended_at double precision NOT NULL,"
                     " PRIMARY KEY (workflow_id, run))"),
    )),
    Migration(10, "queued workflows by the end of their delay: workflows_delayed", (
        # A worker sleeps until the first delay ends (next_wake), as until the first timer: one
        # seek; only delayed queued workflows are in it.
        AddIndex("workflows_delayed", "workflows", ("not_before",), "status = 'queued' AND not_before IS NOT NULL"),
    )),
    Migration(11, "parallel groups told apart: commands.parallel_group", (
        # The slot of its ctx.parallel group's first task, on each task of the group: two
        # groups back to back are two groups. NULL on the tasks recorded before it (their
        # `parallel` mark alone: consecutive marked slots read as one group) and elsewhere.
        AddColumn("commands", "parallel_group", "integer"),
    )),
    Migration(12, "workflow timeouts: workflows.deadline", (
        # When a workflow started with a timeout is cancelled (reason "timeout"); a child started
        # without one of its own inherits its parent's. Workers look for the passed ones in
        # this partial index (those not yet asked to cancel).
        AddColumn("workflows", "deadline", "real"),
        AddIndex("workflows_deadline", "workflows", ("deadline",),
                 where="deadline IS NOT NULL AND cancel_requested IS NULL"),
    )),
    Migration(13, "children started without waiting: workflows.parent_close", (
        # What happens to a child started with ctx.start_workflow when its parent finishes while
        # it runs: "cancel", "terminate" or "abandon"; NULL for every other workflow.
        AddColumn("workflows", "parent_close", "text"),
    )),
    Migration(14, "search attributes written by the store's commits: the trigger on commands dropped", (
        # The store writes search_attributes itself where it writes an `attributes` slot (a
        # commit) or copies slots (fork, import): engine.store.shared.attributes. The trigger
        # of migration 5 ran on every slot inserted, whatever its kind.
        Sql(sqlite="DROP TRIGGER IF EXISTS commands_search_attributes",
            postgres="DROP TRIGGER IF EXISTS commands_search_attributes ON replaylog.commands"),
        Sql(sqlite="SELECT 1", postgres="DROP FUNCTION IF EXISTS replaylog.index_search_attributes()"),
        # Made again from every workflow's `attributes` slots, of its current run and its earlier
        # ones (later runs have higher seqs, so later slots): per key, the last value set, a null
        # removing it. A row the slots do not name is kept.
        Sql(sqlite="INSERT INTO search_attributes (workflow_id, key, value) SELECT t.workflow_id, t.key, t.value FROM"
                   " (SELECT o.id AS workflow_id, j.key AS key, CASE j.type WHEN 'true' THEN 'true'"
                   " WHEN 'false' THEN 'false' WHEN 'null' THEN NULL ELSE CAST(j.value AS TEXT) END AS value,"
                   " ROW_NUMBER() OVER (PARTITION BY o.id, j.key ORDER BY c.slot_key DESC) AS latest"
                   " FROM (SELECT id, seq FROM workflows UNION ALL SELECT workflow_id, seq FROM runs) o"
                   f" JOIN commands c ON c.slot_key BETWEEN o.seq << {SLOT_BITS} AND ((o.seq + 1) << {SLOT_BITS}) - 1,"
                   " json_each(c.value) j WHERE c.kind = 'attributes' AND c.ok) t"
                   " WHERE t.latest = 1 AND t.value IS NOT NULL"
                   " ON CONFLICT (workflow_id, key) DO UPDATE SET value = excluded.value",
            postgres="INSERT INTO replaylog.search_attributes (workflow_id, key, value)"
                     " SELECT t.workflow_id, t.key, t.value FROM"
                     " (SELECT o.id AS workflow_id, j.key AS key, j.value AS value,"
                     " ROW_NUMBER() OVER (PARTITION BY o.id, j.key ORDER BY c.slot_key DESC) AS latest"
                     " FROM (SELECT id, seq FROM replaylog.workflows UNION ALL"
                     " SELECT workflow_id, seq FROM replaylog.runs) o"
                     f" JOIN replaylog.commands c ON c.slot_key BETWEEN o.seq << {SLOT_BITS}"
                     f" AND ((o.seq + 1) << {SLOT_BITS}) - 1,"
                     " jsonb_each_text(c.value::jsonb) j WHERE c.kind = 'attributes' AND c.ok) t"
                     " WHERE t.latest = 1 AND t.value IS NOT NULL"
                     " ON CONFLICT (workflow_id, key) DO UPDATE SET value = excluded.value"),
    )),
    Migration(15, "an in-flight record per task of a parallel group: inflight keyed by (workflow_id, lane)", (
        # Lane 0 holds the activity a workflow runs on its own thread (every activity outside a
        # parallel group: the record each new one writes over); lane k the k-th task of the parallel
        # group running, so that after a takeover every task of a group counts its attempts on, reads
        # its last heartbeat's details and waits its own backoff. A lane is written over by the next
        # activity in it: a workflow has at most 1 + its widest group's rows, and no statement is
        # added to delete them as outcomes are recorded (readers keep the rows whose slot has none).
        # SQLite cannot change a primary key in place: the table is made again, its rows in lane 0.
        Sql(sqlite="CREATE TABLE inflight_lanes (workflow_id TEXT NOT NULL, lane INTEGER NOT NULL DEFAULT 0,"
                   " slot INTEGER NOT NULL, name TEXT NOT NULL, attempts INTEGER NOT NULL, started_at REAL NOT NULL,"
                   " error TEXT, retry_at REAL, details TEXT, heartbeat_at REAL, heartbeat_expires REAL,"
                   " PRIMARY KEY (workflow_id, lane)) WITHOUT ROWID",
            postgres="ALTER TABLE replaylog.inflight ADD COLUMN lane bigint NOT NULL DEFAULT 0"),
        Sql(sqlite="INSERT INTO inflight_lanes (workflow_id, lane, slot, name, attempts, started_at, error, retry_at,"
                   " details, heartbeat_at, heartbeat_expires) SELECT workflow_id, 0, slot, name, attempts, started_at,"
                   " error, retry_at, details, heartbeat_at, heartbeat_expires FROM inflight",
            postgres="ALTER TABLE replaylog.inflight DROP CONSTRAINT inflight_pkey"),
        Sql(sqlite="DROP TABLE inflight",
            postgres="ALTER TABLE replaylog.inflight ADD PRIMARY KEY (workflow_id, lane)"),
        Sql(sqlite="ALTER TABLE inflight_lanes RENAME TO inflight", postgres="SELECT 1"),
    )),
]


def latest() -> int:
    """The schema version this replaylog writes (MIGRATIONS is read when called: a test adds one)."""
    return FIRST + len(MIGRATIONS)


def pending(version: int) -> list[Migration]:
    """The migrations a database at `version` lacks, in order; the list itself checked first."""
    numbers = [m.version for m in MIGRATIONS]
    expected = list(range(FIRST + 1, FIRST + 1 + len(MIGRATIONS)))
    if numbers != expected:
        raise SchemaVersionError(f"the migrations are numbered {numbers}, not {expected}")
    return [m for m in MIGRATIONS if m.version > version]


def take(version: int, apply: Callable[[Change], None], record: Callable[[Migration], None]) -> None:
    """Take every migration a database at `version` lacks: each change applied, then the migration recorded.

    The caller holds the transaction and the write lock; `version` is read under them.
    """
    for migration in pending(max(version, FIRST)):
        for change in migration.changes:
            apply(change)
        record(migration)


def newer_text(where: object, version: int) -> str:
    """The refusal of a database newer than this replaylog, both backends' words."""
    return (f"{where} has schema version {version}, newer than this replaylog understands ({latest()});"
            " upgrade replaylog")


def older_text(where: object, version: int) -> str:
    """The refusal of a read-only open of a database that needs migrations."""
    return (f"{where} has schema version {version}, older than this replaylog's ({latest()}); "
            "run `replaylog migrate` (or any command that writes, such as `replaylog worker`) to upgrade it")
