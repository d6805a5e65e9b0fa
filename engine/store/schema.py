"""The SQLite schema and its migrations: one list of steps, taken in one transaction.

A file is ours when its application_id says so (or it is empty); its user_version is
the schema version. A newer or foreign file is refused before anything writes to it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from engine.errors import SchemaVersionError
from engine.store.keys import SLOT_LIMIT

SCHEMA_VERSION = 2
# "RPLG": marks a database as ours, so we never add tables to somebody else's file.
APPLICATION_ID = 0x52504C47


def refuse_foreign(conn: sqlite3.Connection, path: Path) -> int:
    """Raise SchemaVersionError for a file that is not ours or is newer; return its version."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables):
        raise SchemaVersionError(f"{path} is a SQLite database, but not a replaylog one")
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path} has schema version {version}, newer than this replaylog "
            f"understands ({SCHEMA_VERSION}); upgrade replaylog"
        )
    return int(version)


def check_schema(conn: sqlite3.Connection, path: Path, *, readonly: bool) -> None:
    """Bring a writable file to SCHEMA_VERSION; refuse a read-only one that is not there yet."""
    version = refuse_foreign(conn, path)
    if version == SCHEMA_VERSION:
        return
    if readonly:
        if version == 0:
            raise SchemaVersionError(
                f"{path} is not initialised (schema version 0); open it writable once"
            )
        raise SchemaVersionError(
            f"{path} has schema version {version}, older than this replaylog's ({SCHEMA_VERSION}); "
            "stop its workers, then open it writable once (`replaylog console` without --readonly) to upgrade it"
        )
    migrate(conn)


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema to SCHEMA_VERSION in one transaction, one step per version.

    A new database takes every step, so the upgrade path of an old one is the path
    every new one is created by.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Read under the write lock: another process may have migrated while we waited.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version >= SCHEMA_VERSION:
            conn.execute("COMMIT")
            return
        if version < 1:
            create_v1(conn)
        if version < 2:
            v1_to_v2(conn)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def create_v1(conn: sqlite3.Connection) -> None:
    """Schema version 1."""
    # Imported here, once per new database: it takes ~40 ms to import (more than
    # a whole `replaylog signal`), and only creating the schema uses it.
    import sqlite_utils

    db = sqlite_utils.Database(conn)
    db["workflows"].create(
        {"id": str, "workflow": str, "status": str, "blocked_on": str, "input": str, "result": str,
         "error": str, "diagnostic": str, "slots": int, "created_at": float, "updated_at": float,
         "lease_owner": str, "lease_epoch": int, "lease_expires": float},
        pk="id", not_null={"workflow", "status", "slots", "lease_epoch", "created_at", "updated_at"},
        defaults={"slots": 0, "lease_epoch": 0},
    )
    db["workflows"].create_index(["status", "updated_at"], index_name="workflows_status_updated")
    db["workflows"].create_index(["updated_at"], index_name="workflows_updated")
    conn.execute(
        "CREATE TABLE commands (workflow_id TEXT, slot INTEGER, kind TEXT NOT NULL, name TEXT NOT NULL,"
        " ok INTEGER NOT NULL, value TEXT, error TEXT, attempts INTEGER NOT NULL, recorded_at FLOAT NOT NULL,"
        " PRIMARY KEY (workflow_id, slot)) WITHOUT ROWID"
    )
    db["signals"].create(
        {"workflow_id": str, "seq": int, "name": str, "payload": str, "consumed": int, "sent_at": float},
        pk=("workflow_id", "seq"), not_null={"name", "payload", "consumed", "sent_at"},
        defaults={"consumed": 0},
    )
    # The start marks of workers that are gone (engine.marks keeps the live ones),
    # one row per workflow. (WITHOUT ROWID from when every start mark was a row here.)
    conn.execute(
        "CREATE TABLE inflight (workflow_id TEXT PRIMARY KEY, slot INTEGER NOT NULL, name TEXT NOT NULL,"
        " attempts INTEGER NOT NULL, started_at FLOAT NOT NULL) WITHOUT ROWID"
    )


def v1_to_v2(conn: sqlite3.Connection) -> None:
    """Key each command row by one integer, (workflow seq << 32) + slot, in a rowid table.

    Version 1 kept commands in a WITHOUT ROWID b-tree keyed (workflow_id, slot).
    SQLite appends to a rowid table's last page cheaply (a full page gets one new
    page beside it), but splits an index b-tree, which is what a WITHOUT ROWID table
    is, by spreading its cells over three pages: a commit that split one wrote five
    pages, and a lone workflow's slots averaged 1.2 to 1.7 pages a commit instead of
    1.02. Each page a commit writes is fsynced on every slot's path. Workflows are
    numbered in start order, so the newest one's slots append; the row also loses
    the repeated id (half its size). `seq` is a column of its own, not the implicit
    rowid, which VACUUM may renumber.
    """
    conn.execute("ALTER TABLE workflows ADD COLUMN seq INTEGER")
    conn.execute("UPDATE workflows SET seq = rowid")
    conn.execute("CREATE UNIQUE INDEX workflows_seq ON workflows (seq)")
    conn.execute(
        "CREATE TABLE commands_v2 (slot_key INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL,"
        " ok INTEGER NOT NULL, value TEXT, error TEXT, attempts INTEGER NOT NULL, recorded_at FLOAT NOT NULL)"
    )
    copied = conn.execute(
        "INSERT INTO commands_v2 SELECT (w.seq << 32) + c.slot, c.kind, c.name, c.ok, c.value, c.error,"
        " c.attempts, c.recorded_at FROM commands c JOIN workflows w ON w.id = c.workflow_id"
        " ORDER BY w.seq, c.slot"
    ).rowcount
    total = conn.execute("SELECT COUNT(*) FROM commands").fetchone()[0]
    if copied != total:
        # Rows of no workflow: never written by replaylog. Keep the file as it is.
        raise SchemaVersionError(
            f"cannot upgrade: {total - copied} of {total} command rows belong to no workflow; "
            "the database is left at schema version 1"
        )
    conn.execute("DROP TABLE commands")
    conn.execute("ALTER TABLE commands_v2 RENAME TO commands")
    # For people reading the file with sqlite3: version 1's columns, by workflow id.
    conn.execute(
        "CREATE VIEW command_log AS SELECT w.id AS workflow_id, c.slot_key - (w.seq << 32) AS slot, c.kind,"
        " c.name, c.ok, c.value, c.error, c.attempts, c.recorded_at FROM workflows w JOIN commands c"
        f" ON c.slot_key BETWEEN w.seq << 32 AND (w.seq << 32) + {SLOT_LIMIT - 1}"
    )
