"""Group commit: the outcomes of one or many workflows, lease-fenced, in one transaction.

A lone workflow's common slot is one guarded statement instead (`Commits.commit_record`).

This is the per-slot path: every statement here runs once per recorded slot, so it is
written for CPU instructions (README, Performance), and measured with
`python -m bench.instructions`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import time
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from replaylog.engine.core import CommandRecord, Outcome
from replaylog.engine.errors import DuplicateWorkflowIdError, ReadOnlyError, StoreError
from replaylog.engine.store.rows import Claim, ClaimAsk, PendingRecord, StartMark, dumps, verdict_values
from replaylog.engine.store.shared.attributes import ATTRIBUTES, index_slot
from replaylog.engine.store.shared.base import SeenCancels
from replaylog.engine.store.shared.keys import SLOT_LIMIT, SLOTS_NOW
from replaylog.engine.store.shared.operations import CHILD_ACTS, TIME_WAITS, child_act, child_deadline, keep_retry
from replaylog.engine.store.shared.runs import continue_run
from replaylog.engine.store.sqlite.connection import SQLITE, SQLiteConnection, store_error
from replaylog.engine.store.sqlite.fence import FAST, REFUSE, UPDATED_AT_STEP
from replaylog.engine.store.sqlite.operations import code_ended
from replaylog.engine.vocab import SlotKind, Status, status_info

# Bound once: compared on every slot (a global is cheaper to read than an enum member).
_ACTIVITY = SlotKind.ACTIVITY.value
# The slots whose commit starts a child workflow (ctx.call_workflow, ctx.start_workflow).
_STARTS_CHILD = frozenset((SlotKind.CHILD.value, SlotKind.CHILD_START.value))

# A failed slot, or one whose value the caller did not encode: with the failure's traceback.
_INSERT_COMMAND = ("INSERT INTO commands (slot_key, kind, name, ok, value, error, attempts, recorded_at, args,"
                   " traceback) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
# A successful slot, the common case, binds no None and no bool: Python's sqlite3 binds
# only exact int, float and str directly and sends anything else (None included) through
# its adapter lookup, two failed attribute lookups with their exceptions: ~4,000 CPU
# instructions a slot, a twentieth of all the engine spent on one.
_INSERT_OK = ("INSERT INTO commands (slot_key, kind, name, ok, value, attempts, recorded_at)"
              " VALUES (?, ?, ?, 1, ?, ?, ?)")
# The commonest of all: an activity that succeeded at its first attempt. Every parameter
# bound costs ~500 instructions; these two are constants here. Its argument key is bound
# (a str, never None: an activity that opts out of the guard takes _INSERT_OK).
_INSERT_FIRST_TRY = ("INSERT INTO commands (slot_key, kind, name, ok, value, attempts, recorded_at, args)"
                     " VALUES (?, 'activity', ?, 1, ?, 1, ?, ?)")
# _INSERT_OK with the argument key.
_INSERT_OK_ARGS = ("INSERT INTO commands (slot_key, kind, name, ok, value, attempts, recorded_at, args)"
                   " VALUES (?, ?, ?, 1, ?, ?, ?, ?)")


def _guarded(insert: str) -> str:
    """`insert` as one statement that writes its row only while the workflow's row is as the fence left it.

    Its parameters are the insert's, then the row's rowid, id, lease owner, lease epoch and
    `slots` column (CommitFence.guard); a pending cancel request refuses it too, so that
    the fenced transaction, which reads it, takes the slot.
    """
    head, values = insert.split(" VALUES (")
    return (f"{head} SELECT {values.removesuffix(')')} FROM workflows WHERE rowid = ? AND id = ?"
            " AND lease_owner = ? AND lease_epoch = ? AND slots = ? AND cancel_requested IS NULL")


# The lone slot's one statement (Commits.commit_record): in autocommit mode a statement is
# its own transaction, durable (synchronous=FULL) when it returns, and a writing statement
# takes the write lock before it reads, as BEGIN IMMEDIATE does. Guarded by the workflow's
# row it replaces BEGIN IMMEDIATE, PRAGMA data_version, the INSERT and COMMIT: measured
# under callgrind, the four statements through sqlite3 cost 44,400 instructions a slot, this
# one 34,600 (the row found by its rowid; by its id alone, 35,800); bench.instructions'
# engine row went from 78,700 to 67,400 instructions a slot.
_GUARDED_OK = _guarded(_INSERT_OK)
_GUARDED_FIRST_TRY = _guarded(_INSERT_FIRST_TRY)
_GUARDED_OK_ARGS = _guarded(_INSERT_OK_ARGS)
# The fenced rewrite of the workflow's row (Commits._write_record): its rowid is kept for _guarded's statements.
# No RETURNING: what it would return (cancel_requested and the rowid) is read after it by
# _FENCED_READ, in the same transaction, when it wrote the row. RETURNING gathers its rows in a
# temporary b-tree (a 4 KiB page zeroed, opened and closed): counted under callgrind, a fenced
# rewrite cost ~35,000 instructions more with it, the read after it ~18,000 (a short workflow's
# first slot is fenced so: 19,000 instructions fewer a workflow).
_FENCED_ROW = " WHERE id = ? AND lease_owner = ? AND lease_epoch = ? AND slots = ?"
_FENCED_READ = "SELECT cancel_requested, rowid FROM workflows WHERE id = ?"
# The same rewrite where the row's `slots` is behind: the slots written without the row's
# rewrite leave it so, and a connection that forgot them (CommitFence.clear, after any other
# write here or a failed commit) expects it current. The slot is still the next under this
# lease if the one before it is written and it is not: the commands table says so. Its
# parameters: slots, updated_at, lease_expires, id, owner, epoch, the slot, its command row's
# key, the slot again and its key again.
_BEHIND_ROW = ("UPDATE workflows SET slots = ?, updated_at = ?, lease_expires = ?"
               " WHERE id = ? AND lease_owner = ? AND lease_epoch = ? AND slots <= ?"
               " AND NOT EXISTS (SELECT 1 FROM commands WHERE slot_key = ?)"
               " AND (? = 0 OR EXISTS (SELECT 1 FROM commands WHERE slot_key = ? - 1))")
# A run's verdict (Commits._write_finish): the workflow's row, if the claim still holds the lease.
# Its parameters: verdict_values' nine, whether the code ended the workflow, id, owner, epoch.
# No RETURNING, and the ended flag computed here, not `status IN (…)` in SQL: each built a
# temporary b-tree (a 4 KiB page zeroed, opened and closed) for every verdict. With _ENDED read
# after it (what code_ended needs, and what spares most verdicts tell_parent's and
# close_children's queries), counted under callgrind on many short workflows, this took
# 95,000 instructions off a completed workflow's verdict.
_VERDICT = ("UPDATE workflows SET status = ?, blocked_on = ?, wake_at = ?, result = ?, error = ?, diagnostic = ?,"
            " error_kind = ?, traceback = ?,"
            f" lease_owner = NULL, lease_expires = NULL, updated_at = ?, slots = {SLOTS_NOW},"
            # A run that came to a verdict was not interrupted; one that ended the workflow
            # makes the last worker error history.
            " interruptions = 0, retry_at = NULL, worker_error = CASE WHEN ? THEN NULL ELSE worker_error END"
            " WHERE id = ? AND lease_owner = ? AND lease_epoch = ?")
# Trick "a completed verdict, lean": the commonest verdict, a workflow completed with nothing
# to report beside its result. Its NULLs are written in the statement: Python's sqlite3 module
# binds an exact int, float or str directly, but None (and a bool) through its adapter look-up,
# which formats an AttributeError (PrepareProtocol has no __adapt__) and drops it, ~2,200 CPU
# instructions each, seven a verdict. And it leaves `error` out: naming it fires the full-text
# trigger (workflows_fts_update, AFTER UPDATE OF error), whose WHEN is checked inside its
# program, ~10,000 instructions a verdict for nothing; the error a row may hold (none, unless
# an odd import left one) is read with _ENDED and cleared then. Measured: see _write_finish.
_COMPLETED = ("UPDATE workflows SET status = 'completed', blocked_on = NULL, wake_at = NULL, result = ?,"
              " diagnostic = NULL, error_kind = NULL, traceback = NULL,"
              f" lease_owner = NULL, lease_expires = NULL, updated_at = ?, slots = {SLOTS_NOW},"
              " interruptions = 0, retry_at = NULL, worker_error = NULL"
              " WHERE id = ? AND lease_owner = ? AND lease_epoch = ?")
_CLEAR_ERROR = "UPDATE workflows SET error = NULL WHERE id = ?"
# What code_ended needs of a workflow its code ended, read in the verdict's transaction: the
# cancel request it may not have reached, whether it has a parent to tell, whether any child
# has a parent-close policy to apply (most workflows have neither: two queries not made); and
# whether an error is left on its row (see _COMPLETED).
_ENDED = ("SELECT cancel_requested, parent IS NOT NULL,"
          " EXISTS (SELECT 1 FROM workflows c WHERE c.parent = ?1 AND c.parent_close IS NOT NULL),"
          " error IS NOT NULL"
          " FROM workflows WHERE id = ?1")
# The slots whose commit writes more than their command row: the fenced transaction writes them.
_WRITES_MORE = frozenset((*_STARTS_CHILD, *CHILD_ACTS, ATTRIBUTES))

# The common slot of `Commits.commit_record` compiled (`lone_write` in engine.store.sqlite's C
# file, called by the store's bound twin, `__init__`): what its pure-Python lines do (the fence's
# guard, the value's text, one of the guarded statements, the fence advanced), with what it
# reads of this module and fence.py given to it (`lone_setup`, by each store it is bound to: a
# test may turn the compiled path off while this module is imported); and, under its
# data-version fence (fence.py's CommitFence), the same statement unguarded.
# bench.instructions' engine row: 43,372 -> 41,166 CPU instructions a slot, then -> 38,374.
_LONE_SETUP = (_GUARDED_OK, _GUARDED_FIRST_TRY, _GUARDED_OK_ARGS, _INSERT_OK, _INSERT_FIRST_TRY, _INSERT_OK_ARGS,
               _ACTIVITY, _WRITES_MORE, dumps, UPDATED_AT_STEP)


class Commits(SQLiteConnection, SeenCancels):
    """The worker's lease-fenced writes of outcomes and run verdicts (a cancel request met: `cancels`)."""

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False, max_payload: int | None = None) -> None:
        super().__init__(path, readonly=readonly, max_payload=max_payload)
        compiled = self._compiled
        if compiled is None or readonly:
            return
        compiled.lone_setup(*_LONE_SETUP)
        if type(self).commit_record is Commits.commit_record:
            # Trick "lone slot bound" (its measured gain: bind_lone in engine.store.sqlite's C
            # file): this store's commit_record is the compiled one, an attribute of its own,
            # which hands back to this class's methods whatever is not a lone common slot.
            # (Not where a subclass has a commit_record of its own: it would be shadowed.)
            self.commit_record = compiled.bind_lone(  # type: ignore[method-assign]
                self._conn, self._stmts, self._fence, functools.partial(Commits.commit_record, self),
                self._commit_fenced, self._lone_failed, sqlite3.Error, globals(), SLOT_LIMIT)

    def close(self) -> None:
        """Close the connection."""
        with contextlib.suppress(AttributeError):
            del self.commit_record  # the compiled one refers to this store: no cycle left for the collector
        super().close()

    if TYPE_CHECKING:  # (Leases', beside this class in SQLiteStore)
        def _claim_in(self, conn: sqlite3.Connection, owner: str, ttl: float, limit: int,
                      dead_owners: Sequence[str], names: Collection[str] | None,
                      written: dict[str, tuple[int, int]] | None = None) -> list[Claim]: ...

    def commit_batch(self, records: Sequence[PendingRecord] = (), *,
                     finishes: Sequence[tuple[Claim, Outcome]] = (), ttl: float,
                     marks: Sequence[StartMark] = (), claims: Sequence[ClaimAsk] = ()) -> tuple[list[bool], list[bool]]:
        """Commit outcomes and run verdicts of one or many workflows in one transaction: group commit.

        Each slot is written only if its claim still holds the lease and the slot is
        the next one (fencing); each finish only if the lease still holds. The answer
        says, per record and per finish, whether it was written. `marks` are refused:
        here they go to the host's mark file (engine.marks), not through a commit.
        `claims`: the worker's claims, made after the writes in the same transaction (each
        answered on its ClaimAsk; one that fails is undone alone, and says why there).
        """
        if marks:
            raise ValueError("a SQLite store keeps start marks in its mark file, not in its commits")
        now = time.time()
        # (A try costs nothing until it catches: SQLite's errors leave as the store's.)
        try:
            conn = self._begin_immediate()
            try:
                try:
                    # This connection's data_version, for the fence (read once: it cannot move
                    # while this transaction holds the write lock).
                    version = self._cur.execute("PRAGMA data_version").fetchone()[0] if records or claims else 0
                    written, finished = self._write_batch(conn, records, finishes, now, ttl, version)
                    for ask in claims:
                        self._ride(conn, ask, version)
                    self._end(conn)
                except BaseException:
                    if conn.in_transaction:  # (_end rolled back already where COMMIT failed)
                        self._fence.clear()
                        conn.execute("ROLLBACK")
                    for ask in claims:
                        ask.claims = None  # undone with the rest: nothing was claimed
                    raise
            finally:
                self._gate.release()
        except sqlite3.Error as exc:
            raise store_error(exc, self.path) from exc
        cancels = self.cancels
        for claim, _ in finishes:
            self._fence.finished(claim.id)
            cancels.pop(claim.id, None)
        return written, finished

    def _write_batch(self, conn: sqlite3.Connection, records: Sequence[PendingRecord],
                     finishes: Sequence[tuple[Claim, Outcome]], now: float, ttl: float,
                     version: int) -> tuple[list[bool], list[bool]]:
        """`commit_batch`'s writes, inside its transaction (`version`: its data_version): (written, finished)."""
        write_record, write_parallel = self._write_record, self._write_parallel
        first_tries: list[tuple[Any, ...]] = []
        # Trick "first try in C" (`first_try` in engine.store.sqlite's C file), where
        # compiled: the commonest outcome under the fence's FAST rule, the fence's check
        # and its row made without the interpreter; anything else by `_write_record`.
        first_try = None if self._compiled is None else self._compiled.first_try
        fence, add = self._fence, first_tries.append
        written = []
        for claim, slot, rec, text, group, traceback in records:
            if group is not None:
                written.append(write_parallel(claim, slot, rec, now, ttl, text, traceback, group))
                continue
            row = None if first_try is None else first_try(fence, claim, slot, rec, text, now, version, SLOT_LIMIT)
            if row is None:
                written.append(write_record(claim, slot, rec, now, ttl, version, text, traceback, first_tries))
            else:
                add(row)
                written.append(True)
        if first_tries:
            # The batch's commonest rows in one executemany instead of an execute each:
            # 25 outcomes a commit (store.commit_batch alone under callgrind) cost
            # 48,400-49,300 instructions an outcome one execute each, 46,600-46,800 so.
            self._execute_many(_INSERT_FIRST_TRY, first_tries)
        return written, [self._write_finish(conn, claim, outcome, now) for claim, outcome in finishes]

    def _ride(self, conn: sqlite3.Connection, ask: ClaimAsk, version: int) -> None:
        """Trick "claims ride the commit": the worker's claim made in this group commit's transaction.

        A claim committed by the worker's loop on a connection of its own moved this
        connection's PRAGMA data_version, so the commit fence (fence.py) then knew nothing:
        2,653 of the 4,000 second and third slots of 2,000 three-slot workflows were fenced
        (the row rewritten and read again), and each claim was a durable commit of its own.
        Here the claim shares the commit's fsync and the fence stands. Measured on 2,000
        three-slot workflows in one worker (2 vCPUs), in turns with the tree before: median
        1,195 -> 1,369 workflows/s and CPU 1.57 -> 1.39 s (eight runs each); the bench's
        workload 5, 1,257 -> 1,466 (seven each). docs/performance.md, "Workload 5: where its
        CPU goes, and claims that ride the group commit". A savepoint keeps a failing claim
        from undoing the outcomes it rides with.

        The fence also learns each claimed row as the claim wrote it (a claim that takes over a
        lease this connection wrote under replaces what it knew with the new epoch), so the
        first slot after the claim, with nothing committed by others in between, writes its
        command row alone, without the row's rewrite and read: 10.5 -> 8.5 statements a
        workflow, and in turns with the tree before (eighteen runs each, two sets), CPU 1.29 ->
        1.21 s and 1.15 -> 1.10 s a run, workflows/s +3-10% ("Workload 5: the first slot after
        a claim" in docs/performance.md).
        """
        now = time.time()  # (before the claim's own: a restamp is due no later for it)
        written: dict[str, tuple[int, int]] = {}
        conn.execute("SAVEPOINT claim")
        try:
            taken = self._claim_in(conn, ask.owner, ask.ttl, ask.limit, ask.dead_owners, ask.names, written)
        except Exception as exc:  # noqa: BLE001 - the claim's own failure, answered on its ask
            conn.execute("ROLLBACK TO claim")
            conn.execute("RELEASE claim")
            ask.error = self._translate(exc) if isinstance(exc, sqlite3.Error) else exc
            return
        conn.execute("RELEASE claim")
        # The fence learns each claimed row as the claim wrote it (its lease, `slots`, updated_at):
        # this connection's own write, as a fenced slot's is, so a first slot after the claim with
        # nothing committed by others in between writes its command row alone. (Should this
        # commit fail, the fence is cleared with the rest: commit_batch, _end.)
        fence = self._fence
        for c in taken:
            slots, row = written[c.id]
            fence.note(c, version, slots, row)
            fence.stamped(c.id, now)
        ask.claims = taken

    def commit_record(self, claim: Claim, slot: int, rec: CommandRecord, text: str | None = None, *,
                      ttl: float, parallel_group: int | None = None, traceback: str | None = None) -> bool:
        """`commit_batch` for one outcome alone: what a lone workflow does once per slot.

        The same transaction and fencing, without the batch's lists; True if written.
        `text` is the value's JSON text if the caller encoded it already; `parallel_group`
        marks a task of a parallel group; `traceback` is a failure's (see PendingRecord).

        On the compiled path a store's own compiled twin answers instead (see `__init__`):
        these lines are the pure-Python path, and what the twin hands back.
        """
        if self.readonly:
            raise ReadOnlyError(f"database {self.path} is open read-only")
        now = time.time()
        if parallel_group is None and slot < SLOT_LIMIT:
            w = self._fence.guard(claim, slot, now)
            kind, name, ok, value, error, attempts, args = rec
            if w is not None and ok and error is None and kind not in _WRITES_MORE:
                # The common slot: one guarded autocommit statement (see _GUARDED_OK).
                if text is None:
                    text = int.__repr__(value) if type(value) is int else dumps(value)  # dumps's int case, inline
                row_key = claim.base + slot
                if args is None:
                    sql = _GUARDED_OK
                    params: tuple[Any, ...] = (row_key, kind, name, text, attempts, now, w.row, claim.id,
                                               claim.owner, claim.epoch, w.column)
                elif attempts == 1 and kind == _ACTIVITY:
                    sql = _GUARDED_FIRST_TRY
                    params = (row_key, name, text, now, args, w.row, claim.id, claim.owner, claim.epoch, w.column)
                else:
                    sql = _GUARDED_OK_ARGS
                    params = (row_key, kind, name, text, attempts, now, args, w.row, claim.id, claim.owner,
                              claim.epoch, w.column)
                try:
                    written = self._cur.execute(sql, params).rowcount
                except sqlite3.Error as exc:
                    self._lone_failed(exc)
                if written == 1:
                    w.next_slot = slot + 1
                    return True
            # Not taken, or the row refused it (the lease is gone, or a cancel request waits):
            # the fenced transaction decides, as for any other slot.
        return self._commit_fenced(claim, slot, rec, text, ttl, parallel_group, traceback, now)

    def _lone_failed(self, exc: sqlite3.Error) -> NoReturn:
        """A lone slot's statement failed: nothing is known written, and SQLite's error leaves as the store's."""
        self._fence.clear()
        raise store_error(exc, self.path) from exc

    def _commit_fenced(self, claim: Claim, slot: int, rec: CommandRecord, text: str | None, ttl: float,
                       parallel_group: int | None, traceback: str | None, now: float) -> bool:
        """`commit_record` as one fenced transaction: any slot the lone slot's statement does not take."""
        # `_begin_immediate` and `_end` spelled out: two Python calls fewer on every slot
        # (each call costs several hundred CPU instructions; bench.instructions).
        cur = self._cur
        self._enter_gate()
        try:
            cur.execute("BEGIN IMMEDIATE")
            try:
                if parallel_group is not None:
                    written = self._write_parallel(claim, slot, rec, now, ttl, text, traceback, parallel_group)
                else:
                    version = cur.execute("PRAGMA data_version").fetchone()[0]
                    written = self._write_record(claim, slot, rec, now, ttl, version, text, traceback)
                cur.execute("COMMIT")
            except BaseException:
                self._fence.clear()  # what they say was written was not
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise store_error(exc, self.path) from exc
        finally:
            self._gate.release()
        return written

    # The per-slot transactions are spelled out with these two rather than taken from
    # `_write`: they run once per slot, and a context manager cost as much as a statement.

    def _begin_immediate(self) -> sqlite3.Connection:
        """BEGIN IMMEDIATE, the process's write gate taken first (the caller gives it back: `_gate.release()`)."""
        if self.readonly:
            raise ReadOnlyError(f"database {self.path} is open read-only")
        self._enter_gate()
        try:
            self._cur.execute("BEGIN IMMEDIATE")
        except BaseException as exc:
            self._gate.release()
            if isinstance(exc, sqlite3.OperationalError):
                raise self._translate(exc) from None
            raise
        return self._conn

    def _end(self, conn: sqlite3.Connection) -> None:
        try:
            self._cur.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            self._fence.clear()  # what they say was written was not
            conn.execute("ROLLBACK")
            raise self._translate(exc) from None

    def _write_record(self, claim: Claim, slot: int, rec: CommandRecord, now: float, ttl: float,
                      version: int, text: str | None = None, traceback: str | None = None,
                      first_tries: list[tuple[Any, ...]] | None = None) -> bool:
        """Write one slot's outcome if the claim still holds the lease and `slot` is next.

        The workflow's row is fenced and rewritten only when the commit fence cannot
        tell that nothing changed (see CommitFence). With `first_tries`, the row of an
        activity that succeeded at its first attempt is appended there for the caller to
        insert with the batch's others, in the same transaction.
        """
        key = claim.id
        fence = self._fence
        column = fence.check(claim, slot, version, now)
        if column == REFUSE:
            return False
        if column != FAST:
            cur = self._cur
            if fence.restamp_due(key, now):
                # updated_at is in two indexes, so setting it rewrites two more pages: at most once a second.
                rewritten = cur.execute(
                    "UPDATE workflows SET slots = ?, updated_at = ?, lease_expires = ?" + _FENCED_ROW,
                    (slot + 1, now, now + ttl, key, claim.owner, claim.epoch, column),
                ).rowcount
                fence.stamped(key, now)
            else:
                rewritten = cur.execute(
                    "UPDATE workflows SET slots = ?, lease_expires = ?" + _FENCED_ROW,
                    (slot + 1, now + ttl, key, claim.owner, claim.epoch, column),
                ).rowcount
            if rewritten != 1:
                # Refused: the lease is gone, or the row is behind what this connection forgot.
                row_key = claim.base + slot
                rewritten = cur.execute(_BEHIND_ROW, (slot + 1, now, now + ttl, key, claim.owner, claim.epoch,
                                                      slot, row_key, slot, row_key)).rowcount
                if rewritten == 1:
                    fence.stamped(key, now)
            if rewritten != 1:
                fence.forget(key)
                return False
            fenced = cur.execute(_FENCED_READ, (key,)).fetchone()
            if fenced[0] is not None:
                # An operator asked to cancel. Any commit of another connection (a cancel
                # request is one) takes this path, not FAST: so the worker learns of a
                # cancel here, without a query of its own per slot.
                self.cancels[key] = fenced[0]
            fence.note(claim, version, slot + 1, fenced[1])
        if slot >= SLOT_LIMIT:  # its key would be the next workflow's
            raise StoreError(f"workflow {key!r} has recorded {SLOT_LIMIT} slots, the most one workflow can")
        row_key = claim.base + slot
        kind, name, ok, value, error, attempts, args = rec
        if ok and error is None:
            if text is None:
                text = int.__repr__(value) if type(value) is int else dumps(value)  # dumps's int case, inline
            if args is None:
                self._cur.execute(_INSERT_OK, (row_key, kind, name, text, attempts, now))
                if kind == ATTRIBUTES:
                    index_slot(SQLITE, self._conn, key, text)
            elif attempts == 1 and kind == _ACTIVITY:
                if first_tries is None:
                    self._cur.execute(_INSERT_FIRST_TRY, (row_key, name, text, now, args))
                else:
                    first_tries.append((row_key, name, text, now, args))
            else:
                self._cur.execute(_INSERT_OK_ARGS, (row_key, kind, name, text, attempts, now, args))
                if kind in _STARTS_CHILD:
                    self._start_child(claim, name, value, now)
                elif kind in CHILD_ACTS:
                    child_act(SQLITE, self._conn, claim.id, kind, name, value, now)
                elif kind == ATTRIBUTES:
                    index_slot(SQLITE, self._conn, key, text)
        else:
            text = dumps(value) if ok else None
            self._cur.execute(_INSERT_COMMAND, (row_key, kind, name, int(ok), text, error, attempts, now, args,
                                                traceback))
            if text is not None and kind == ATTRIBUTES:
                index_slot(SQLITE, self._conn, key, text)
        return True

    def _start_child(self, claim: Claim, workflow: str, value: dict[str, Any], now: float) -> None:
        """Start the child workflow a parent's slot records, in the same transaction: never twice.

        The worker checks the id before it commits; a workflow of that id that is not
        this parent's child (started meanwhile) refuses the whole commit.
        """
        child_id = value["id"]
        child_input = value.get("input")
        cur = self._cur.execute(
            "INSERT OR IGNORE INTO workflows (id, workflow, status, input, slots, created_at, updated_at,"
            " lease_epoch, seq, parent) VALUES (?, ?, 'pending', ?, 0, ?, ?, 0,"
            " (SELECT COALESCE(MAX(seq), 0) + 1 FROM workflows), ?)",
            (child_id, workflow, None if child_input is None else dumps(child_input), now, now, claim.id),
        )
        if cur.rowcount == 0:
            row = self._cur.execute("SELECT parent FROM workflows WHERE id = ?", (child_id,)).fetchone()
            if row is None or row[0] != claim.id:
                raise DuplicateWorkflowIdError(f"a workflow with id {child_id!r} already exists")
        else:
            child_deadline(SQLITE, self._conn, child_id, claim.id, value, self.wake_clock())

    def _write_parallel(self, claim: Claim, slot: int, rec: CommandRecord, now: float, ttl: float,
                        text: str | None, traceback: str | None, group: int) -> bool:
        """Write a parallel task's outcome if the claim still holds the lease, whatever slot is next.

        `group` is the slot of the group's first task (commands.parallel_group).

        The tasks of a group complete in any order, and each outcome is committed as it
        completes: a slow task must not hold back (or lose, in a crash) the others'
        outcomes. So the group's slots are fenced by the lease alone, `slots` only ever
        grows (to the highest slot written + 1), and the commit fence forgets the
        workflow: the next slot after the group is fenced on the row again, which holds
        the group's end only once every task is recorded. Exactly once still holds: a
        slot's key is the primary key, so a slot already written is refused, never
        written twice. A crash leaves gaps inside the group, which loaders fill with
        engine.core.HOLE and the next run runs again.
        """
        key = claim.id
        self._fence.forget(key)
        cur = self._cur.execute(
            "UPDATE workflows SET slots = MAX(slots, ?), lease_expires = ?"
            " WHERE id = ? AND lease_owner = ? AND lease_epoch = ?",
            (slot + 1, now + ttl, key, claim.owner, claim.epoch),
        )
        if cur.rowcount != 1:
            return False
        if slot >= SLOT_LIMIT:
            raise StoreError(f"workflow {key!r} has recorded {SLOT_LIMIT} slots, the most one workflow can")
        kind, name, ok, value, error, attempts, args = rec
        if ok and text is None:
            text = dumps(value)
        cur = self._cur.execute(
            "INSERT OR IGNORE INTO commands (slot_key, kind, name, ok, value, error, attempts, recorded_at, args,"
            " parallel, traceback, parallel_group) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)",
            (claim.base + slot, kind, name, int(ok), text if ok else None, error, attempts, now, args, traceback,
             group),
        )
        if cur.rowcount != 1:
            return False
        if ok and kind == ATTRIBUTES and text is not None:
            index_slot(SQLITE, self._conn, key, text)
        return True

    def _write_finish(self, conn: sqlite3.Connection, claim: Claim, outcome: Outcome, now: float) -> bool:
        if outcome.status == Status.CONTINUED:
            return continue_run(SQLITE, conn, claim, outcome, now)
        # Plain text (sqlite3 binds an exact str without its adapter look-up); may become pending below.
        status = str(outcome.status)
        blocked_on, wake_at = outcome.blocked_on, outcome.wake_at
        consumed = ",".join(map(str, outcome.consumed_signals))
        if status == Status.BLOCKED:
            # A signal of this name that arrived during the run makes a wait runnable, not
            # blocked; so does a cancel request the run has not raised yet, for a wait or a
            # sleep (its wait is to raise it).
            # (NOT IN (NULL) is never true in SQL, so leave the clause out when nothing was consumed.)
            unconsumed = f" AND seq NOT IN ({consumed})" if consumed else ""
            # A signal named "timer" wakes no sleeper (nor one named "retry" a retry wait).
            waits = ", ".join(f"'{w}'" for w in sorted(TIME_WAITS))
            signals = (f"CASE WHEN ?2 IN ({waits}) THEN 0 ELSE"
                       " (SELECT COUNT(*) FROM signals WHERE workflow_id = ?1 AND name = ?2 AND run IS NULL"
                       f"{unconsumed}) END")
            cancel = "" if outcome.cancel_delivered else (
                " + (SELECT COUNT(*) FROM workflows WHERE id = ?1 AND cancel_requested IS NOT NULL)")
            arrived = conn.execute(f"SELECT {signals}{cancel}", (claim.id, blocked_on)).fetchone()[0]
            if arrived:
                status, blocked_on, wake_at = Status.PENDING.value, None, None
        ended = status_info(status).code_ended
        # _COMPLETED where it writes what _VERDICT would (verdict_values), with `error` cleared below.
        # Its measured gain, with _ENDED read, the claim's row and the first slots' rows written on
        # the compiled path (the connection's `_fetch`, `_execute_many`): bench.instructions'
        # short-store row, 451,354 -> 373,288 CPU instructions a workflow (docs/performance.md,
        # "Workload 5: the store's hot statements without the sqlite3 module").
        lean = status == Status.COMPLETED and blocked_on is None and outcome.error is None and not outcome.diagnostic
        if lean:
            if self._execute(_COMPLETED, (dumps(outcome.result), now, claim.id, claim.owner, claim.epoch)) != 1:
                return False
        elif conn.execute(_VERDICT, (*verdict_values(outcome, status, blocked_on, wake_at, now), 1 if ended else 0,
                                     claim.id, claim.owner, claim.epoch)).rowcount != 1:
            return False
        if ended:
            ((requested, parent, children, error_left),) = self._fetch(_ENDED, (claim.id,))
            if lean and error_left:
                conn.execute(_CLEAR_ERROR, (claim.id,))
            code_ended(conn, claim.id, outcome, status, requested, now, parent=bool(parent),
                       children=bool(children))
        if outcome.retry:
            keep_retry(SQLITE, conn, claim.id, outcome.retry, now)
        if consumed:
            conn.execute(
                f"UPDATE signals SET consumed = 1 WHERE workflow_id = ? AND consumed = 0 AND seq IN ({consumed})",
                (claim.id,),
            )
        return True
