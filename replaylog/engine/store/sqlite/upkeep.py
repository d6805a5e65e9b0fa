"""What a worker's loop asks of a store on one host's file: marks, dead processes, the WAL.

A worker calls `upkeep(owner)` on every pass of its loop; it does something only when
one of its timers is due. Each worker process keeps its start marks in a memory-mapped
file beside the database (`engine.marks`), and WAL requires every process on one host,
so a pid says whether a worker is alive: the files of dead workers are folded into the
`inflight` table and deleted, and the owners of running workflows whose process is gone
are named so a claim need not wait out their leases. A PostgreSQL store has none of
this (hosts share no files and pids; its marks are rows).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time

from replaylog.engine.errors import ReadOnlyError, ReplaylogError, StoreError
from replaylog.engine.marks import MarkBoard, board_files, board_owner, read_board
from replaylog.engine.store.sqlite.connection import BUSY_TIMEOUT_S, SQLiteConnection
from replaylog.engine.store.sqlite.inflight import InflightMarks

log = logging.getLogger("replaylog.worker")

DEAD_OWNER_CHECK = 1.0
# Readers whose transactions keep overlapping (a slow console, a backup) stop SQLite's
# autocheckpoint from ever restarting the WAL, and it grows without bound. Past this
# size the worker asks for a RESTART checkpoint, which waits briefly for those readers.
WAL_RESTART_AT = 8 * 1024 * 1024
WAL_CHECK = 0.5
# A RESTART holds writers back while it waits for readers: 1 s at WAL_RESTART_AT, longer
# in proportion as the WAL grows past it, at most WAL_RESTART_WAIT_MAX. Two console-style
# readers that each hold 0.2-1.0 s transactions (tests/test_fault_contention.py) kept a
# flat 1 s try from succeeding about half the time, and a minute of that let the WAL reach
# 40-49 MB in some runs; scaled, about one try in ten is held back and the WAL peaked at
# 15-21 MB in six one-minute runs.
WAL_RESTART_WAIT = 1.0
WAL_RESTART_WAIT_MAX = 4.0
# A reader that never lets go (a stuck console) makes every RESTART fail, and each try
# holds writers back while it waits: after a try readers held back, wait longer before the next.
WAL_RESTART_BACKOFF_MAX = 60.0
# Past this size, a try readers held back is logged as a warning: something is wrong.
WAL_WARN_AT = 64 * 1024 * 1024


def pid_alive(pid: int) -> bool:
    """Whether a process of this host has that pid (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Upkeep(InflightMarks, SQLiteConnection):
    """A worker's start-mark file, and the upkeep of marks, dead owners and the WAL."""

    # When each piece of upkeep is next due (time.monotonic()), and the WAL's backoff.
    _next_dead_check = 0.0
    _next_wal_check = 0.0
    _wal_backoff = WAL_CHECK

    def open_marks(self, owner: str, records: int) -> MarkBoard | None:
        """This worker's mark file beside the database, `records` workflow threads' worth."""
        try:
            return MarkBoard(self.path, owner, records)
        except OSError as exc:
            raise StoreError(f"cannot create the in-flight mark file beside {self.path}: {exc}") from None

    def upkeep(self, owner: str) -> list[str] | None:
        """Whatever is due: dead workers' marks kept, dead owners found, the WAL bounded.

        Returns the owners on this host whose process is gone when it looked for them
        (their leases need not be waited out), else None (nothing new: keep the last list).
        """
        now = time.monotonic()
        dead = None
        if now >= self._next_dead_check:
            self._fold_dead_boards(owner)
            dead = self._dead_owners(owner)
            self._next_dead_check = now + DEAD_OWNER_CHECK
        if now >= self._next_wal_check:
            self._next_wal_check = now + self._bound_wal()
        return dead

    def _after_bulk_delete(self) -> None:
        """Copy the WAL's frames into the file now, on this connection, without blocking writers.

        A prune's batch writes a hundred or more WAL pages; left to SQLite's autocheckpoint,
        copying them falls on whichever connection commits next past its threshold, most
        often a live worker's, whose next slots then wait for it.
        """
        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def reclaim_space(self, *, full: bool = False) -> str:
        """Hand the pages pruned workflows left free back to the file system; what was done, in a line.

        Freed pages are reused by later writes, so a store pruned regularly stops growing
        without this. A file made with `PRAGMA auto_vacuum = INCREMENTAL` gives its free
        pages back at once (an incremental vacuum); any other file only through `full`: a
        VACUUM, which rewrites the whole file (it needs that much free disk and holds the
        write lock while it runs), then a checkpoint that truncates the WAL it went through.
        """
        if self.readonly:
            raise ReadOnlyError(f"database {self.path} is open read-only")
        conn = self._conn
        before = self.path.stat().st_size
        incremental = conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        if incremental:
            conn.execute("PRAGMA incremental_vacuum").fetchall()
        elif full:
            conn.execute("VACUUM")
        else:
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            size = conn.execute("PRAGMA page_size").fetchone()[0]
            return (f"{int(free) * int(size) / 1e6:.1f} MB of {self.path} is free for new workflows to reuse;"
                    " --vacuum gives it back to the file system")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        after = self.path.stat().st_size
        how = "incremental vacuum" if incremental else "VACUUM"
        return f"{how}: {self.path} went from {before / 1e6:.1f} MB to {after / 1e6:.1f} MB"

    def _dead_owners(self, me: str) -> list[str]:
        """Owners on this host whose process is gone."""
        host = me.partition(":")[0]
        dead = []
        for (owner,) in self._conn.execute(
                "SELECT DISTINCT lease_owner FROM workflows WHERE status = 'running' AND lease_owner IS NOT NULL"):
            owner_host, _, rest = owner.partition(":")
            pid_text = rest.partition(":")[0]
            if owner_host == host and owner != me and pid_text.isdigit() and not pid_alive(int(pid_text)):
                dead.append(owner)
        return dead

    def _fold_dead_boards(self, me: str) -> None:
        """Keep the marks of workers that died in the database, and delete their files."""
        host = me.partition(":")[0]
        mine = os.getpid()
        for path, pid in board_files(self.path):
            if pid == mine or pid_alive(pid):
                continue
            owner = board_owner(path)
            if owner is None or owner.partition(":")[0] != host:
                continue  # another host's (or container's) pid says nothing here: leave it
            marks = read_board(path)
            try:
                if marks:
                    self.fold_marks(marks)
            except ReplaylogError as exc:
                log.warning("could not keep the in-flight marks of %s: %s", path.name, exc)
                continue  # the file stays; a later look tries again
            path.unlink(missing_ok=True)

    def _bound_wal(self) -> float:
        """Restart the WAL once it has grown past WAL_RESTART_AT; return seconds until the next look."""
        try:
            size = os.stat(f"{self.path}-wal").st_size
        except FileNotFoundError:
            size = 0
        if size <= WAL_RESTART_AT:
            self._wal_backoff = WAL_CHECK
            return WAL_CHECK
        # The bigger the WAL, the longer a try may hold writers back: readers whose
        # transactions overlap need a longer wait to clear, and a WAL that keeps growing
        # costs every reader more.
        outcome = self._restart_wal(min(WAL_RESTART_WAIT_MAX, WAL_RESTART_WAIT * size / WAL_RESTART_AT))
        if outcome != "held":
            # Restarted; or another connection's checkpoint (another worker's restart, an
            # autocheckpoint) kept this one from starting, which says nothing about readers.
            self._wal_backoff = WAL_CHECK
            return WAL_CHECK
        self._wal_backoff = min(WAL_RESTART_BACKOFF_MAX, max(WAL_CHECK, self._wal_backoff) * 2)
        if size >= WAL_WARN_AT:
            log.warning("the WAL of %s is %.0f MB: read transactions keep it from restarting"
                        " (a reader that stays in one, such as a backup or an open sqlite3 shell,"
                        " lets it grow); next try in %.0f s", self.path, size / 1e6, self._wal_backoff)
        return self._wal_backoff

    def _restart_wal(self, wait: float) -> str:
        """A RESTART checkpoint that waits at most `wait` s: "done", "held" (by readers) or "elsewhere".

        The autocheckpoint copies frames but can never restart the log while readers keep
        overlapping; a RESTART holds writers back while it waits, hence the short wait.
        "elsewhere": another connection was running a checkpoint, so this one could not
        start; SQLite says so at once, with no frame counts (-1).
        """
        conn = self._conn
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
            try:
                busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
            finally:
                conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        except sqlite3.Error as exc:  # only a missed chance to shrink the WAL: a later look tries again
            log.warning("WAL checkpoint failed: %s", exc)
            return "held"
        log.debug("WAL checkpoint: busy=%s frames=%s copied=%s", busy, frames, copied)
        if not busy:
            return "done"
        return "elsewhere" if frames == -1 else "held"
