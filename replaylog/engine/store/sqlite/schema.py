"""The SQLite schema: version 1 (0.1.0's) created here, later versions by the shared migrations.

A file is ours when its application_id says so (or it is empty); its user_version is
the schema version. A newer or foreign file is refused before anything writes to it, and
so is one a development build made before 0.1.0 (a version past 1 with no `migrations`
table: those builds numbered their own layouts). A reader never migrates.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from replaylog.engine.errors import SchemaVersionError
from replaylog.engine.store.shared.keys import key_bounds
from replaylog.engine.store.shared.migrations import (
    FIRST,
    AddColumn,
    AddIndex,
    Change,
    ColumnType,
    Migration,
    Sql,
    Transform,
    latest,
    newer_text,
    older_text,
    take,
)

# "RPLG": marks a database as ours, so we never add tables to somebody else's file.
APPLICATION_ID = 0x52504C47

_FIRST, _LAST = key_bounds("w")


def _create(conn: sqlite3.Connection) -> None:
    """Schema version 1: the tables a new database starts with.

    Commands live in a rowid table keyed by one integer, (workflow seq << 32) + slot
    (engine.store.shared.keys): SQLite appends to a rowid table's last page cheaply (a full
    page gets one new page beside it), but splits an index b-tree, such as a WITHOUT
    ROWID table keyed (workflow_id, slot), by spreading its cells over three pages: a
    lone workflow's slots then averaged 1.2 to 1.7 WAL pages a commit instead of 1.02,
    and each page a commit writes is fsynced on every slot's path. Workflows are
    numbered in start order, so the newest one's slots append. `seq` is a column of its
    own, not the implicit rowid, which VACUUM may renumber.
    """
    conn.execute(
        "CREATE TABLE workflows (id TEXT PRIMARY KEY, workflow TEXT NOT NULL, status TEXT NOT NULL,"
        " blocked_on TEXT, input TEXT, result TEXT, error TEXT, diagnostic TEXT,"
        " slots INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, updated_at REAL NOT NULL,"
        " lease_owner TEXT, lease_epoch INTEGER NOT NULL DEFAULT 0, lease_expires REAL, seq INTEGER)"
    )
    conn.execute("CREATE INDEX workflows_status_updated ON workflows (status, updated_at)")
    conn.execute("CREATE INDEX workflows_updated ON workflows (updated_at)")
    conn.execute("CREATE UNIQUE INDEX workflows_seq ON workflows (seq)")
    conn.execute(
        "CREATE TABLE commands (slot_key INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL,"
        " ok INTEGER NOT NULL, value TEXT, error TEXT, attempts INTEGER NOT NULL, recorded_at REAL NOT NULL)"
    )
    conn.execute(
        "CREATE TABLE signals (workflow_id TEXT, seq INTEGER, name TEXT NOT NULL, payload TEXT NOT NULL,"
        " consumed INTEGER NOT NULL DEFAULT 0, sent_at REAL NOT NULL, PRIMARY KEY (workflow_id, seq))"
    )
    # The start marks of workers that are gone (engine.marks keeps the live ones), one
    # row per workflow, looked up by id only.
    conn.execute(
        "CREATE TABLE inflight (workflow_id TEXT PRIMARY KEY, slot INTEGER NOT NULL, name TEXT NOT NULL,"
        " attempts INTEGER NOT NULL, started_at REAL NOT NULL) WITHOUT ROWID"
    )
    # For people reading the file with sqlite3: each command by workflow id and slot.
    conn.execute(
        f"CREATE VIEW command_log AS SELECT w.id AS workflow_id, c.slot_key - {_FIRST} AS slot, c.kind,"
        " c.name, c.ok, c.value, c.error, c.attempts, c.recorded_at FROM workflows w JOIN commands c"
        f" ON c.slot_key BETWEEN {_FIRST} AND {_LAST}"
    )
    # The workers that run on this database and the workflow names their apps know,
    # so that a pending workflow no live worker knows can say so (engine.worker keeps
    # its row: written at start, stamped at each lease renewal, deleted at exit).
    conn.execute(
        "CREATE TABLE workers (owner TEXT PRIMARY KEY, host TEXT NOT NULL, pid INTEGER NOT NULL,"
        " app TEXT NOT NULL, names TEXT NOT NULL, ttl FLOAT NOT NULL, started_at FLOAT NOT NULL,"
        " seen_at FLOAT NOT NULL)"
    )
    # A worker claims pending workflows of its names only, oldest first: per name, one
    # range of this index in order. Partial, so a running workflow's restamps never touch it.
    conn.execute("CREATE INDEX workflows_pending ON workflows (workflow, updated_at) WHERE status = 'pending'")
    # A run stopped by an error that is no outcome (see Leases.hand_back): the last
    # such error, when the workflow may be claimed again, and how many in a row.
    conn.execute("ALTER TABLE workflows ADD COLUMN worker_error TEXT")
    conn.execute("ALTER TABLE workflows ADD COLUMN retry_at FLOAT")
    conn.execute("ALTER TABLE workflows ADD COLUMN interruptions INTEGER NOT NULL DEFAULT 0")
    # The argument guard's key of an activity slot's arguments (engine.core.args_key):
    # their canonical JSON when short, else a digest; NULL when nothing is checked.
    conn.execute("ALTER TABLE commands ADD COLUMN args TEXT")
    # 1 for a task of a ctx.parallel group (shown grouped in the console's transcript); NULL otherwise.
    conn.execute("ALTER TABLE commands ADD COLUMN parallel INTEGER")
    # A child workflow's parent (ctx.call_workflow): the child's verdict is delivered to it.
    conn.execute("ALTER TABLE workflows ADD COLUMN parent TEXT")
    conn.execute("CREATE INDEX workflows_parent ON workflows (parent) WHERE parent IS NOT NULL")
    # What failed a failed workflow (engine.core.ErrorKind), so readers match on it, not on the text.
    conn.execute("ALTER TABLE workflows ADD COLUMN error_kind TEXT")
    # Durable timers and wait deadlines: a blocked workflow's recorded wake time. A claim
    # takes the due ones from this partial index (one range, wake_at <= now) and a worker
    # sleeps until its first entry: 10,000 sleepers cost no scan, only a seek.
    conn.execute("ALTER TABLE workflows ADD COLUMN wake_at FLOAT")
    conn.execute(
        "CREATE INDEX workflows_wake ON workflows (wake_at) WHERE status = 'blocked' AND wake_at IS NOT NULL")
    # An operator's cancel request: its reason ("" if none given), NULL while none was
    # made. The worker learns of it at a claim, or through the commit fence mid-run.
    conn.execute("ALTER TABLE workflows ADD COLUMN cancel_requested TEXT")
    # A fork's origin: the workflow it was copied from and the slot its code ran live from.
    conn.execute("ALTER TABLE workflows ADD COLUMN forked_from TEXT")
    conn.execute("ALTER TABLE workflows ADD COLUMN forked_slot INTEGER")
    # The operators' actions (start, signal, cancel, terminate, retry, fork, import):
    # when, by whom (user@host), why. Append-only; read by workflow id.
    conn.execute(
        "CREATE TABLE audit (seq INTEGER PRIMARY KEY, workflow_id TEXT NOT NULL, action TEXT NOT NULL,"
        " at REAL NOT NULL, actor TEXT NOT NULL, reason TEXT, detail TEXT)"
    )
    conn.execute("CREATE INDEX audit_workflow ON audit (workflow_id, seq)")
    # Version 1 is 0.1.0's layout, as 0.1.0 made it: changes go in shared/migrations.py.


_TYPES: dict[ColumnType, str] = {"text": "TEXT", "integer": "INTEGER", "real": "REAL", "boolean": "INTEGER"}
_PY_TYPES: dict[ColumnType, type] = {"text": str, "integer": int, "real": float, "boolean": int}
# Which migrations a file has taken, and when (a file past version 1 without it was made
# by a development build before 0.1.0).
_LOG = ("CREATE TABLE IF NOT EXISTS migrations (version INTEGER PRIMARY KEY, summary TEXT NOT NULL,"
        " applied_at REAL NOT NULL)")


def _transform(conn: sqlite3.Connection, change: Transform) -> None:
    """Rebuild a table with sqlite-utils, inside the migration's transaction.

    sqlite-utils refuses to carry a partial index over a rebuild that renames or drops a
    column, so those are dropped here and made again from their own SQL afterwards.
    """
    # Imported only when a migration rebuilds a table: it takes ~40 ms to import.
    import sqlite_utils

    partial = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ?"
                           " AND sql LIKE '% WHERE %'", (change.table,)).fetchall()
    for name, _ in partial:
        conn.execute(f"DROP INDEX {name}")
    sqlite_utils.Database(conn).table(change.table).transform(
        types={c: _PY_TYPES[t] for c, t in change.types.items()}, rename=dict(change.rename),
        drop=set(change.drop), not_null=dict(change.not_null))
    for _, sql in partial:
        conn.execute(sql)


def _apply(conn: sqlite3.Connection, change: Change) -> None:
    if isinstance(change, AddColumn):
        conn.execute(f"ALTER TABLE {change.table} ADD COLUMN {change.column} {_TYPES[change.type]}")
    elif isinstance(change, AddIndex):
        conn.execute(change.sql(change.table))
    elif isinstance(change, Transform):
        _transform(conn, change)
    elif isinstance(change, Sql):
        conn.execute(change.sqlite)


def _record(conn: sqlite3.Connection, migration: Migration) -> None:
    conn.execute(_LOG)
    conn.execute("INSERT INTO migrations (version, summary, applied_at) VALUES (?, ?, ?)",
                 (migration.version, migration.summary, time.time()))


# The file's header and what it holds, read in one statement (refuse_foreign): its version,
# its application id, how many tables it has and whether one is the migrations log.
_HEADER = ("SELECT (SELECT user_version FROM pragma_user_version),"
           " (SELECT application_id FROM pragma_application_id),"
           " (SELECT count(*) FROM sqlite_master WHERE type = 'table'),"
           " (SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'migrations')")


def refuse_foreign(conn: sqlite3.Connection, path: Path) -> int:
    """Raise SchemaVersionError for a file that is not ours, newer, or pre-0.1.0; return its version."""
    # One statement, so one snapshot: read one by one, the id could be read before another
    # process's creation commits and the tables after it, and a new file refused as foreign.
    raw_version, app_id, tables, migrations_log = conn.execute(_HEADER).fetchone()
    version = int(raw_version)
    if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables):
        raise SchemaVersionError(f"{path} is a SQLite database, but not a replaylog one")
    if version > latest():
        raise SchemaVersionError(newer_text(path, version))
    if version > FIRST and not migrations_log:
        raise SchemaVersionError(f"{path} was made by a development build of replaylog before 0.1.0"
                                 f" (schema version {version}), which cannot be upgraded: make it again")
    return version


def check_schema(conn: sqlite3.Connection, path: Path, *, readonly: bool) -> tuple[int, int]:
    """Bring a writable file to the latest version; refuse a read-only one that is not there yet.

    Returns the version the file had and the one it has now.
    """
    version = refuse_foreign(conn, path)
    if version == latest():
        return version, version
    if readonly:
        if version == 0:
            raise SchemaVersionError(
                f"{path} is not initialised (schema version 0); open it writable once"
            )
        raise SchemaVersionError(older_text(path, version))
    return migrate(conn)


def migrate(conn: sqlite3.Connection) -> tuple[int, int]:
    """Create the file or take every migration it lacks, in one transaction: all of them or none."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Read under the write lock: another process may have migrated while we waited.
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        target = latest()
        if version >= target:
            conn.execute("COMMIT")
            return version, version
        if version < FIRST:
            _create(conn)
        take(version, lambda change: _apply(conn, change), lambda done: _record(conn, done))
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {target}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return version, target
