"""Group commit on PostgreSQL: outcomes and verdicts of many workflows, lease-fenced, in one transaction.

A slot is one statement: the workflow row is fenced (owner, epoch, and this slot next)
and advanced, and the command row inserted only if the fence held. A lone workflow's
slot is that one statement in autocommit: one round trip and one WAL flush.

After a connection fault the same work is tried again on a new connection (see
PGConnection._run). A commit whose answer was lost may have happened: a retry that
finds its fence moved looks for its own row under its own lease, so an outcome is
reported written exactly when it is, never written twice and never lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from psycopg.pq.abc import PGresult

from replaylog.engine.core import EVENT, CommandRecord, Outcome
from replaylog.engine.errors import DuplicateWorkflowIdError, StoreError
from replaylog.engine.store.postgres.connection import NOTIFY, POSTGRES, Conn, Cursor, PGConnection
from replaylog.engine.store.postgres.marks import MARKS_IN_COMMIT, ON_CONFLICT, marks_json
from replaylog.engine.store.postgres.operations import code_ended
from replaylog.engine.store.postgres.text import (
    bool_array,
    claim_text,
    float8,
    float8_array,
    formats,
    int4_array,
    int8_array,
    text_array,
)
from replaylog.engine.store.rows import Claim, ClaimAsk, PendingRecord, StartMark, dumps, verdict_values
from replaylog.engine.store.shared.attributes import ATTRIBUTES, index_slot
from replaylog.engine.store.shared.base import SeenCancels
from replaylog.engine.store.shared.keys import SLOT_LIMIT, SLOTS_NOW
from replaylog.engine.store.shared.operations import CHILD_ACTS, TIME_WAITS, child_act, child_deadline, keep_retry
from replaylog.engine.store.shared.runs import continue_run
from replaylog.engine.vocab import SlotKind, Status, status_info

# The commands row of a slot, as every slot statement inserts it.
_INSERT_COMMAND = (" INSERT INTO commands (slot_key, kind, name, ok, value, error, attempts, recorded_at, args,"
                   " traceback)")
# A lane-0 start mark's row, as every slot statement that carries one inserts it (its values follow).
_MARK_LANE_0 = " m AS (INSERT INTO inflight (workflow_id, lane, slot, name, attempts, started_at) SELECT "
# A slot with its workflow row fenced and rewritten (`_LoneFence` says when a lone slot needs it):
# the row must hold the claim's lease and the slot must be next, which the commands table says
# (the one before it is written; `slots`, which a slot written under the lock fence leaves
# behind, is not past it). The row's count, lease expiry and updated_at are rewritten:
# updated_at, which is indexed, at most once a second, so that most rewrites change no indexed
# column and stay HOT (no index writes). A slot already written is not written twice (its key
# is the primary key) and the statement then returns no row: after a lost answer, even one whose
# statement was still running on the server, the retry looks for its own row (`_mine`).
_SLOT = (
    "WITH f AS (UPDATE workflows SET slots = %s + 1, lease_expires = %s,"
    " updated_at = CASE WHEN updated_at < %s - 1 THEN %s ELSE updated_at END"
    " WHERE id = %s AND lease_owner = %s AND lease_epoch = %s AND slots <= %s"
    " AND (%s = 0 OR EXISTS (SELECT 1 FROM commands WHERE slot_key = %s - 1)) RETURNING cancel_requested)"
    + _INSERT_COMMAND + " SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s, %s FROM f ON CONFLICT (slot_key) DO NOTHING"
    # The fence's row also says whether an operator asked to cancel: the worker learns of
    # it from the commit itself, without a query of its own per slot (as on SQLite).
    " RETURNING (SELECT cancel_requested FROM f)"
)
# A task of a parallel group (engine.store.sqlite.commit, Commits._write_parallel): fenced by the
# lease alone, whatever slot is next, since the group's tasks complete in any order;
# `slots` only grows. A slot already written is not written twice (its key is the
# primary key): the statement then returns no row.
_PARALLEL = (
    "WITH f AS (UPDATE workflows SET slots = GREATEST(slots, %s + 1), lease_expires = %s"
    " WHERE id = %s AND lease_owner = %s AND lease_epoch = %s RETURNING 1)"
    " INSERT INTO commands (slot_key, kind, name, ok, value, error, attempts, recorded_at, args, traceback,"
    " parallel_group, parallel) SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, TRUE FROM f"
    " ON CONFLICT (slot_key) DO NOTHING"
    " RETURNING NULL::text"
)
_MARKS_IN_COMMIT_PSYCOPG = MARKS_IN_COMMIT.replace("$1", "%s")
_MINE = ("SELECT w.cancel_requested FROM commands c, workflows w WHERE c.slot_key = %s AND w.id = %s"
         " AND w.lease_owner = %s AND w.lease_epoch = %s")


# Trick "one statement a batch": a group commit of slots from different workflows goes as one
# statement, its rows as one array a column (postgres.text, binary arrays): the fence of every
# workflow row in one UPDATE, the command rows of those whose fence held in one INSERT, and
# the start marks that ride the commit (engine.worker.committer, Committer.add_mark) in one
# upsert, each only where its workflow's slot was written (its lease held). It returns the
# id (and any cancel request) of each workflow whose slot was written. As `_SLOT`, a slot is
# written only if its workflow's lease holds and it is the next slot (a retry after a lost
# answer finds the row it rewrote past the slot, and looks for its own row). A workflow twice in one
# batch (the UPDATE would take one of its rows) takes the pipeline of `_SLOT` statements.
# Measured on 2 vCPUs (pgserver 16, fsync on), batches of 32 slots, in turns with a `_SLOT`
# statement a slot and the marks as JSON (`MARKS_IN_COMMIT`) in one pipeline: the server's
# CPU a slot ~29-35 -> ~15-18 µs, and with a mark each ~35-48 -> ~21-23 µs; a batch's time
# ~1.4-2.2 -> ~0.9-1.2 ms. A statement's own cost (its executor started and ended) was most
# of a slot's, and taking the JSON apart most of a mark's.
_BATCH = (
    "WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[],"
    " $6::text[], $7::text[], $8::boolean[], $9::text[], $10::text[], $11::int[], $12::text[], $13::text[],"
    " $16::bigint[], $17::text[], $18::int[], $19::float8[])"
    " AS v(id, owner, epoch, slot, key, kind, name, ok, value, error, attempts, args, traceback,"
    " mark_slot, mark_name, mark_attempts, mark_started_at)),"
    " f AS (UPDATE workflows w SET slots = v.slot + 1, lease_expires = $14::float8,"
    " updated_at = CASE WHEN w.updated_at < $15::float8 - 1 THEN $15::float8 ELSE w.updated_at END"
    " FROM v WHERE w.id = v.id AND w.lease_owner = v.owner AND w.lease_epoch = v.epoch AND w.slots <= v.slot"
    # (A scalar subquery, one look in the key a row: an EXISTS planned while the table was small
    # became a hashed subplan, a scan of the whole table a batch, kept in the generic plan.)
    " AND (v.slot = 0 OR (SELECT TRUE FROM commands c WHERE c.slot_key = v.key - 1))"
    " RETURNING w.id, w.cancel_requested),"
    " i AS (" + _INSERT_COMMAND.lstrip()
    + " SELECT v.key, v.kind, v.name, v.ok, v.value, v.error, v.attempts, $15::float8, v.args, v.traceback"
    " FROM v JOIN f ON f.id = v.id),"
    + _MARK_LANE_0
    + "v.id, 0, v.mark_slot, v.mark_name, v.mark_attempts, v.mark_started_at FROM v JOIN f ON f.id = v.id"
    " WHERE v.mark_slot IS NOT NULL" + ON_CONFLICT + ")"
    " SELECT id, cancel_requested FROM f"
)
_BATCH_FORMATS = (1,) * 19


# How each of `_BATCH`'s array columns is encoded, in the order of its parameters ($1-$13, $16-$19).
_BATCH_COLUMNS: tuple[Callable[[Sequence[Any]], bytes], ...] = (
    text_array, text_array, int8_array, int8_array, int8_array, text_array, text_array, bool_array, text_array,
    text_array, int4_array, text_array, text_array, int8_array, text_array, int4_array, float8_array)
_NO_MARK = (None, None, None, None)


def _batch_params(records: Sequence[PendingRecord], marks: dict[str, StartMark], now: float,
                  ttl: float) -> list[bytes | None] | None:
    """The parameters of `_BATCH` (all binary): one array a column, then the lease's expiry and the time,
    then the marks' columns (`marks`: a workflow's lane-0 mark, by its id). None if the server
    would refuse a value (an attempts count past int's range): the pipeline then says which."""
    rows = []
    for claim, slot, rec, text, _, traceback in records:
        if slot >= SLOT_LIMIT:  # its key would be the next workflow's
            raise StoreError(f"workflow {claim.id!r} has recorded {SLOT_LIMIT} slots, the most one workflow can")
        wid, owner, _epoch = claim_text(claim)
        stored = _stored(rec, text)
        mark = marks.get(claim.id)
        rows.append((wid, owner, claim.epoch, slot, claim.base + slot, rec.kind.encode(), rec.name.encode(),
                     bool(rec.ok), None if stored is None else stored.encode(),
                     None if rec.error is None else rec.error.encode(), rec.attempts,
                     None if rec.args is None else rec.args.encode(), None if traceback is None else traceback.encode(),
                     *(_NO_MARK if mark is None else (mark[1], mark[2].encode(), mark[3], mark[4]))))
    try:
        columns = zip(*rows, strict=True)  # (every row is as long: a tuple of 17)
        arrays: list[bytes | None] = [encode(column) for encode, column in zip(_BATCH_COLUMNS, columns, strict=True)]
    except OverflowError:
        return None
    return [*arrays[:13], float8(now + ttl), float8(now), *arrays[13:]]


def _numbered(statement: str, refs: Sequence[tuple[int, str]]) -> str:
    """`statement` with its `%s` placeholders numbered and typed for PREPARE: the i-th becomes
    `$n::type` for `refs[i] = (n, type)` (one parameter may stand in several places)."""
    parts = statement.split("%s")
    assert len(parts) == len(refs) + 1
    return "".join(part + (f"${refs[i][0]}::{refs[i][1]}" if i < len(refs) else "") for i, part in enumerate(parts))


# `_SLOT` for the raw path (PGConnection._execute_raw): typed, since its parameters go as
# text, and each value sent once: the slot ($1), the time ($3), the claim's id, owner and
# epoch ($4-$6), encoded once per claim (postgres.text.claim_text), and the slot's key ($7).
_SLOT_RAW = _numbered(_SLOT, (
    (1, "bigint"), (2, "float8"), (3, "float8"), (3, "float8"), (4, "text"), (5, "text"), (6, "bigint"),
    (1, "bigint"), (1, "bigint"), (7, "bigint"),
    (7, "bigint"), (8, "text"), (9, "text"), (10, "boolean"), (11, "text"), (12, "text"),
    (13, "int"), (3, "float8"), (14, "text"), (15, "text")))
# `_slot_text`'s formats: the lease's expiry ($2) and the time ($3) go binary (postgres.text, "binary times").
_SLOT_RAW_FORMATS = formats(15, (1, 2))
# `_SLOT_RAW` with the start mark of the workflow's next activity written in the same statement, if
# the slot is ($16-$19: its slot, name, attempts and time): a lone workflow's slot with the mark that
# rode it (engine.worker.committer, Committer.enqueue), one statement, one transaction.
_SLOT_HEAD, _SLOT_TAIL = _SLOT_RAW.split(" RETURNING (SELECT cancel_requested FROM f)")
assert not _SLOT_TAIL and _SLOT_HEAD.count(_INSERT_COMMAND) == 1
_SLOT_MARK_RAW = (
    _SLOT_HEAD.replace(_INSERT_COMMAND, ", i AS (" + _INSERT_COMMAND.lstrip()) + " RETURNING 1),"
    + _MARK_LANE_0 + "$4::text, 0, $16::bigint, $17::text, $18::int, $19::float8 FROM i" + ON_CONFLICT + ")"
    " SELECT (SELECT cancel_requested FROM f) FROM i"
)
# Its formats: the times ($2, $3, $19) binary.
_SLOT_MARK_RAW_FORMATS = formats(19, (1, 2, 18))

# Trick "lock fence" (`_LoneFence`, PGCommits._commit_raw): a lone workflow's slot, when this
# connection wrote the slot before it under the same lease less than `_ROW_EVERY` ago, locks
# the workflow's row (FOR SHARE) instead of rewriting it, and inserts the command row if the
# lease holds. The lock fences as the rewrite did: a claim or any other write of the row waits
# for it, or has committed first and the lock, which then reads the row as it is now, finds
# the lease gone. That the slot is next is known here: this connection wrote the one before
# it, under this lease, and nothing else writes a workflow's slots while its lease is held.
# The row's count, lease expiry and updated_at are rewritten by a `_SLOT` statement at least
# once a second, as SQLite's fence does (engine.store.sqlite.fence); leases are renewed by the
# worker's loop meanwhile, and readers count a running workflow's slots (keys.SLOTS_NOW).
# An UPDATE opens and closes every index of its table (workflows has 15), builds the row's
# projection over its ~25 columns and writes a new row version; a lock does none of that.
# Counted under callgrind, one backend of pgserver 16 (fsync off), 1,000 lone slots each:
# the server's instructions a slot 211,000 -> 118,000 without a mark, 292,000 -> 196,000
# with one; row 9's one workflow 0.78 -> 0.85 of the floor, medians of twelve runs in turns
# (docs/performance.md, "The lock fence").
_LOCK = ("WITH f AS (SELECT cancel_requested FROM workflows WHERE id = $2::text AND lease_owner = $3::text"
         " AND lease_epoch = $4::bigint FOR SHARE)")
_LOCK_VALUES = (" SELECT $5::bigint, $6::text, $7::text, $8::boolean, $9::text, $10::text, $11::int, $1::float8,"
                " $12::text, $13::text FROM f")
# Its parameters are `_slot_text`'s without the slot and the lease's expiry (the time, $1, binary).
_LOCK_RAW = _LOCK + _INSERT_COMMAND + _LOCK_VALUES + " RETURNING (SELECT cancel_requested FROM f)"
_LOCK_RAW_FORMATS = formats(13, (0,))
# With the workflow's next start mark ($14-$17; its time binary), as `_SLOT_MARK_RAW`.
_LOCK_MARK_RAW = (
    _LOCK + ", i AS (" + _INSERT_COMMAND.lstrip() + _LOCK_VALUES + "),"
    + _MARK_LANE_0 + "$2::text, 0, $14::bigint, $15::text, $16::int, $17::float8 FROM f" + ON_CONFLICT + ")"
    " SELECT cancel_requested FROM f"
)
_LOCK_MARK_RAW_FORMATS = formats(17, (0, 16))
# How long a lone workflow's slots may go without their row's rewrite (seconds): updated_at,
# which the console shows as an age in seconds, moves about this often (as SQLite's UPDATED_AT_STEP).
_ROW_EVERY = 1.0
_NEVER = float("-inf")  # a row rewritten at no known time


class _LoneFence:
    """Which lone slots may take the lock fence (the trick is described at `_LOCK`).

    Per workflow: the lease epoch and next slot of the last slot this connection wrote, and
    when its row was last rewritten. A slot not found so (the first under a claim, one after
    another path wrote, a retry after a lost answer) rewrites the row, which checks against the
    commands table that it is next. Forgetting is always safe: it only costs a rewrite.
    """

    __slots__ = ("_last",)

    # Past this many workflows remembered, all are forgotten (a worker runs far fewer at once).
    LIMIT = 4096

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, int, float]] = {}  # workflow id → (epoch, next slot, row rewritten at)

    def locks(self, claim: Claim, slot: int, now: float) -> bool:
        """Whether `slot` may be written under the lock fence alone."""
        last = self._last.get(claim.id)
        return last is not None and last[0] == claim.epoch and last[1] == slot and now - last[2] < _ROW_EVERY

    def wrote(self, claim: Claim, slot: int, now: float, row: bool) -> None:
        """`slot` was written (`row`: with its row rewritten at `now`; else under the lock fence)."""
        last = self._last
        if row:
            if len(last) >= self.LIMIT and claim.id not in last:
                last.clear()
            last[claim.id] = (claim.epoch, slot + 1, now)
        else:  # (the lock was taken on this entry; one forgotten since makes the next slot rewrite the row)
            prev = last.get(claim.id)
            last[claim.id] = (claim.epoch, slot + 1, _NEVER if prev is None else prev[2])

    def forget(self, workflow_id: str) -> None:
        """The workflow's run ended here: nothing to remember."""
        self._last.pop(workflow_id, None)


# The kinds whose commit may do more than write its slot (`_acts`): any other takes the raw path at once.
_MAY_ACT = frozenset((SlotKind.CHILD.value, SlotKind.CHILD_START.value, EVENT, ATTRIBUTES, *CHILD_ACTS))


def _stored(rec: CommandRecord, text: str | None) -> str | None:
    """The value column of `rec`: its JSON text (`text` if the caller encoded it already); None for a failure."""
    if not rec.ok:
        return None
    return dumps(rec.value) if text is None or rec.error is not None else text


def _slot_text(claim: Claim, slot: int, rec: CommandRecord, text: str | None, now: float, ttl: float,
               traceback: str | None) -> list[bytes | None]:
    """The parameters of `_SLOT_RAW` (formats `_SLOT_RAW_FORMATS`): text, and the times binary."""
    if slot >= SLOT_LIMIT:  # its key would be the next workflow's
        raise StoreError(f"workflow {claim.id!r} has recorded {SLOT_LIMIT} slots, the most one workflow can")
    wid, owner, epoch = claim_text(claim)
    stored = _stored(rec, text)
    error, args = rec.error, rec.args
    return [b"%d" % slot, float8(now + ttl), float8(now), wid, owner, epoch, b"%d" % (claim.base + slot),
            rec.kind.encode(), rec.name.encode(), b"t" if rec.ok else b"f",
            None if stored is None else stored.encode(), None if error is None else error.encode(),
            b"%d" % rec.attempts, None if args is None else args.encode(),
            None if traceback is None else traceback.encode()]


def _slot_params(claim: Claim, slot: int, rec: CommandRecord, text: str | None, now: float,
                 ttl: float, parallel_group: int | None = None, traceback: str | None = None) -> tuple[object, ...]:
    """The parameters of `_SLOT` (of `_PARALLEL` for a task of the parallel group whose first slot is
    `parallel_group`); `traceback` a failure's."""
    if slot >= SLOT_LIMIT:  # its key would be the next workflow's
        raise StoreError(f"workflow {claim.id!r} has recorded {SLOT_LIMIT} slots, the most one workflow can")
    kind, name, ok, _, error, attempts, args = rec
    row = (claim.base + slot, kind, name, bool(ok), _stored(rec, text), error, attempts, now, args, traceback)
    if parallel_group is not None:
        return (slot, now + ttl, claim.id, claim.owner, claim.epoch, *row, parallel_group)
    return (slot, now + ttl, now, now, claim.id, claim.owner, claim.epoch, slot, slot, claim.base + slot, *row)


def _start_child(conn: Conn, claim: Claim, rec: CommandRecord, now: float, due_from: float) -> None:
    """Start the child workflow a parent's slot records, in the same transaction: never twice.

    The worker checks the id before it commits; a workflow of that id that is not this
    parent's child (started meanwhile) refuses the whole commit. `due_from` is the wake clock's
    time, which the child's deadline is counted from.
    """
    child_id = rec.value["id"]
    child_input = rec.value.get("input")
    cur = conn.execute(
        "INSERT INTO workflows (id, workflow, status, input, slots, created_at, updated_at, parent)"
        " VALUES (%s, %s, 'pending', %s, 0, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
        (child_id, rec.name, None if child_input is None else dumps(child_input), now, now, claim.id))
    if cur.rowcount == 0:
        row = conn.execute("SELECT parent FROM workflows WHERE id = %s", (child_id,)).fetchone()
        if row is None or row[0] != claim.id:
            raise DuplicateWorkflowIdError(f"a workflow with id {child_id!r} already exists")
    else:
        child_deadline(POSTGRES, conn, child_id, claim.id, rec.value, due_from)


def _starts_child(rec: CommandRecord) -> bool:
    """Whether recording `rec` starts a child workflow (ctx.call_workflow's slot)."""
    return rec.kind in _STARTS_CHILD and bool(rec.ok) and rec.error is None


# The slots whose commit starts a child workflow (ctx.call_workflow, ctx.start_workflow).
_STARTS_CHILD = frozenset((SlotKind.CHILD.value, SlotKind.CHILD_START.value))


def _notifies(rec: CommandRecord) -> bool:
    """Whether committing `rec` is told to listeners: a child it starts or acts on, or an event a reader waits for."""
    return _starts_child(rec) or rec.kind == EVENT or rec.kind in CHILD_ACTS


def _indexes(rec: CommandRecord) -> bool:
    """Whether committing `rec` sets search attributes (engine.store.shared.attributes)."""
    return rec.kind == ATTRIBUTES and bool(rec.ok)


def _acts(rec: CommandRecord) -> bool:
    """Whether committing `rec` writes more than its slot: told to listeners, or search attributes set."""
    return _notifies(rec) or _indexes(rec)


def _act(conn: Conn, claim: Claim, rec: CommandRecord, now: float, due_from: float, fresh: bool) -> None:
    """What a written slot does besides itself, in its transaction: a child started or acted on, attributes set.

    `due_from` is the wake clock's time (see _start_child); `fresh`: written by this statement,
    not found committed by a retry after a lost answer (which did its act then).
    """
    if _starts_child(rec):
        _start_child(conn, claim, rec, now, due_from)
    elif not fresh:
        return
    elif rec.kind in CHILD_ACTS and rec.ok:
        child_act(POSTGRES, conn, claim.id, rec.kind, rec.name, rec.value, now)
    elif _indexes(rec):
        index_slot(POSTGRES, conn, claim.id, dumps(rec.value))


def _written(cur: Cursor, claim: Claim, slot: int, attempt: int, cancels: dict[str, str]) -> bool:
    """Whether the slot statement run on `cur` wrote the slot; note a cancel request its fence came upon."""
    row = cur.fetchone() if cur.rowcount == 1 else None
    if row is None:
        # Refused: the lease is gone, or (after a lost answer) this very slot was committed.
        return bool(attempt) and _mine(cur.connection, claim, slot, cancels)
    if row[0] is not None:
        cancels[claim.id] = row[0]
    return True


def _mine(conn: Conn, claim: Claim, slot: int, cancels: dict[str, str]) -> bool:
    """Whether `slot` is committed under `claim`'s lease (looked for after a lost answer); note a cancel request."""
    row = conn.execute(_MINE, (claim.base + slot, claim.id, claim.owner, claim.epoch)).fetchone()
    if row is None:
        return False
    if row[0] is not None:
        cancels[claim.id] = row[0]
    return True


def _raw_written(conn: Conn, result: PGresult, claim: Claim, slot: int, attempt: int, cancels: dict[str, str]
                 ) -> bool:
    """Whether the `_SLOT_RAW` statement that gave `result` wrote the slot; note a cancel its fence came upon."""
    if result.ntuples != 1:
        # Refused: the lease is gone, or (after a lost answer) this very slot was committed.
        return bool(attempt) and _mine(conn, claim, slot, cancels)
    found = result.get_value(0, 0)
    if found is not None:
        cancels[claim.id] = found.decode()
    return True


def _write_finish(conn: Conn, claim: Claim, outcome: Outcome, now: float, attempt: int) -> bool:
    status = str(outcome.status)  # plain text; may become pending below
    if status == Status.CONTINUED:
        # Refused: the lease is gone; or, after a lost answer, this very continuation was
        # written (the workflow is pending in its next run, unclaimed since: a claim bumps the epoch).
        return continue_run(POSTGRES, conn, claim, outcome, now) or (bool(attempt) and conn.execute(
            "SELECT 1 FROM workflows WHERE id = %s AND lease_owner IS NULL AND lease_epoch = %s"
            " AND status = 'pending'", (claim.id, claim.epoch)).fetchone() is not None)
    blocked_on, wake_at = outcome.blocked_on, outcome.wake_at
    consumed = list(outcome.consumed_signals)
    if status == Status.BLOCKED:
        # Lock the row first: a signal or cancel request sent meanwhile (send_signal and
        # cancel_workflow lock it too) is then either committed and counted here, or sees
        # the workflow blocked and wakes it.
        locked = conn.execute("SELECT cancel_requested FROM workflows WHERE id = %s FOR UPDATE",
                              (claim.id,)).fetchone()
        # A signal of the awaited name makes a wait runnable (a signal named "timer" wakes
        # no sleeper); so does a cancel request the run has not raised yet, for a wait or a
        # sleep (its wait is to raise it).
        found = None if blocked_on in TIME_WAITS else conn.execute(
            "SELECT EXISTS (SELECT 1 FROM signals WHERE workflow_id = %s AND name = %s AND run IS NULL"
            " AND NOT (seq = ANY(%s)))",
            (claim.id, blocked_on, consumed)).fetchone()
        arrived = found is not None and bool(found[0])
        cancelled = not outcome.cancel_delivered and locked is not None and locked[0] is not None
        if arrived or cancelled:
            status, blocked_on, wake_at = Status.PENDING.value, None, None
    cur = conn.execute(
        "UPDATE workflows SET status = %s, blocked_on = %s, wake_at = %s, result = %s, error = %s, diagnostic = %s,"
        " error_kind = %s, traceback = %s, lease_owner = NULL, lease_expires = NULL, updated_at = %s,"
        f" interruptions = 0, retry_at = NULL, slots = {SLOTS_NOW},"
        " worker_error = CASE WHEN %s IN ('completed', 'failed', 'cancelled') THEN NULL ELSE worker_error END"
        " WHERE id = %s AND lease_owner = %s AND lease_epoch = %s RETURNING cancel_requested",
        (*verdict_values(outcome, status, blocked_on, wake_at, now), status, claim.id, claim.owner, claim.epoch))
    # Refused: the lease is gone; or, after a lost answer, this very verdict was written
    # (nobody has claimed the workflow since: a claim bumps the epoch).
    if cur.rowcount != 1 and (not attempt or conn.execute(
            "SELECT 1 FROM workflows WHERE id = %s AND lease_owner IS NULL AND lease_epoch = %s"
            " AND status <> 'running'", (claim.id, claim.epoch)).fetchone() is None):
        return False
    if cur.rowcount == 1 and status_info(status).code_ended:
        # (Not when a retry found its verdict committed: its parent was told then.)
        written = cur.fetchone()
        code_ended(conn, claim.id, outcome, status, None if written is None else written[0], now)
    if cur.rowcount == 1 and outcome.retry:
        keep_retry(POSTGRES, conn, claim.id, outcome.retry, now)
    if consumed:
        conn.execute("UPDATE signals SET consumed = true WHERE workflow_id = %s AND NOT consumed AND seq = ANY(%s)",
                     (claim.id, consumed))
    return True


class PGCommits(PGConnection, SeenCancels):
    """The worker's lease-fenced writes of outcomes and run verdicts, on PostgreSQL (see `cancels`)."""

    _lone_fence: _LoneFence

    def commit_record(self, claim: Claim, slot: int, rec: CommandRecord, text: str | None = None, *,
                      ttl: float, parallel_group: int | None = None, traceback: str | None = None) -> bool:
        """Commit one outcome if the lease holds and `slot` is next: one statement, one round trip.

        `parallel_group` (the slot of its group's first task) marks a task of a parallel
        group: written if the lease holds and the
        slot is not written yet, whatever slot is next. A child workflow's slot starts the
        child in the same transaction.
        """
        now = time.time()
        cancels = self.cancels
        if parallel_group is None and (rec.kind not in _MAY_ACT or not _acts(rec)):
            return self._commit_raw(claim, slot, rec, text, now, ttl, traceback)

        params = _slot_params(claim, slot, rec, text, now, ttl, parallel_group, traceback)
        statement = _SLOT if parallel_group is None else _PARALLEL
        if not _acts(rec):
            return self._run(lambda conn, attempt: _written(conn.execute(statement, params), claim, slot,
                                                            attempt, cancels), write=True)

        def commit_acting(conn: Conn, attempt: int) -> bool:
            with conn.transaction():
                cur = conn.execute(statement, params)
                # A slot found committed by a retry after a lost answer (not written now) did its act then.
                fresh = cur.rowcount == 1
                written = _written(cur, claim, slot, attempt, cancels)
                if written:
                    _act(conn, claim, rec, now, self.wake_clock(), fresh)
                    if _notifies(rec):
                        conn.execute(NOTIFY)  # a new pending workflow, or an event set
            return written

        return self._run(commit_acting, write=True)

    def _commit_raw(self, claim: Claim, slot: int, rec: CommandRecord, text: str | None, now: float, ttl: float,
                    traceback: str | None, mark: StartMark | None = None) -> bool:
        """One slot that does not act, as one statement to libpq (`_SLOT_RAW`, or `_LOCK_RAW` where the
        lock fence holds; with `mark`, its workflow's next start mark in the same statement); whether
        it was written."""
        params = _slot_text(claim, slot, rec, text, now, ttl, traceback)
        if mark is None:
            name, statement, param_formats = "replaylog_slot", _SLOT_RAW, _SLOT_RAW_FORMATS
            lock_name, lock, lock_formats = "replaylog_lock", _LOCK_RAW, _LOCK_RAW_FORMATS
        else:
            _, mark_slot, mark_name, attempts, started_at, _ = mark
            params += [b"%d" % mark_slot, mark_name.encode(), b"%d" % attempts, float8(started_at)]
            name, statement, param_formats = "replaylog_slot_mark", _SLOT_MARK_RAW, _SLOT_MARK_RAW_FORMATS
            lock_name, lock, lock_formats = "replaylog_lock_mark", _LOCK_MARK_RAW, _LOCK_MARK_RAW_FORMATS
        cancels = self.cancels
        fence = self.lone_fence

        def commit(conn: Conn, attempt: int) -> bool:
            # (A retry after a lost answer rewrites the row: its check finds the slot if it was written.)
            row = attempt > 0 or not fence.locks(claim, slot, now)
            if row:
                result = self._execute_raw(conn, name, statement, params, param_formats)
            else:
                result = self._execute_raw(conn, lock_name, lock, params[2:], lock_formats)
            written = _raw_written(conn, result, claim, slot, attempt, cancels)
            if written:
                fence.wrote(claim, slot, now, row)
            return written

        return self._run(commit, write=True)

    @property
    def lone_fence(self) -> _LoneFence:
        """Which lone slots this connection may write under the lock fence (see `_LOCK`)."""
        try:
            return self._lone_fence
        except AttributeError:  # (made on first use, as SeenCancels.cancels)
            self._lone_fence = _LoneFence()
            return self._lone_fence

    def commit_batch(self, records: Sequence[PendingRecord] = (), *,
                     finishes: Sequence[tuple[Claim, Outcome]] = (), ttl: float,
                     marks: Sequence[StartMark] = (),
                     claims: Sequence[ClaimAsk] = ()) -> tuple[list[bool], list[bool]]:
        """Commit outcomes and run verdicts of one or many workflows in one transaction: group commit.

        `marks`: start marks written in the same transaction, after the slots (each fenced by
        its claim's lease, as a mark sent alone): engine.worker.committer, Committer.add_mark.
        `claims` are refused: a worker on a server claims on its loop's connection.
        """
        if claims:
            raise ValueError("a PostgreSQL store's worker claims on its own connection, not in its commits")
        now = time.time()
        cancels = self.cancels

        if len(records) == 1 and not finishes:
            claim, slot, rec, text, group, traceback = records[0]
            if group is None and (rec.kind not in _MAY_ACT or not _acts(rec)) and (not marks or (
                    len(marks) == 1 and marks[0][5] == 0 and marks[0][0].id == claim.id)):
                # One slot (with its workflow's next start mark): one statement, as `commit_record`'s.
                return [self._commit_raw(claim, slot, rec, text, now, ttl, traceback, marks[0] if marks else None)], []

        # Only slots, none of which acts (starts a child, sets search attributes): nothing is
        # read before the COMMIT, so the batch goes out in one pipeline, one round trip and one
        # transaction: to libpq directly (PGConnection._pipeline_raw), or through psycopg with a
        # parallel group's tasks among them.
        slots_only = not finishes and not any(_acts(r.record) for r in records)
        raw = slots_only and all(r.parallel_group is None for r in records)

        batch = None
        ids = {r.claim.id for r in records} if raw and len(records) > 1 else set()
        if len(ids) == len(records) > 1:
            # One statement (`_BATCH`), with the marks of the batch's workflows in lane 0 (the
            # workflow thread's, one a workflow); any other mark goes as JSON after it.
            riding: dict[str, StartMark] = {}
            others: list[StartMark] = []
            for m in marks:
                if m[5] == 0 and m[0].id in ids and m[0].id not in riding:
                    riding[m[0].id] = m
                else:
                    others.append(m)
            batch = _batch_params(records, riding, now, ttl)
            if batch is not None:
                marks = others
        marks_text = marks_json(marks) if marks else None

        then = None if marks_text is None else ("replaylog_marks_in_commit", MARKS_IN_COMMIT, (marks_text.encode(),))
        if batch is not None:
            rows = [batch]

            def commit_batched(conn: Conn, attempt: int) -> tuple[list[bool], list[bool]]:
                (result,) = self._pipeline_raw(conn, "replaylog_batch", _BATCH, rows, _BATCH_FORMATS, then)
                found: dict[str, bytes | None] = {}
                for i in range(result.ntuples):
                    wid = result.get_value(i, 0)
                    assert wid is not None
                    found[wid.decode()] = result.get_value(i, 1)
                written = []
                for r in records:
                    if r.claim.id not in found:
                        # Refused: the lease is gone, or (after a lost answer) this very slot was committed.
                        written.append(attempt > 0 and _mine(conn, r.claim, r.slot, cancels))
                        continue
                    cancel = found[r.claim.id]
                    if cancel is not None:
                        cancels[r.claim.id] = cancel.decode()
                    written.append(True)
                return written, []

            return self._run(commit_batched, write=True)

        if raw and records:
            raws = [_slot_text(r.claim, r.slot, r.record, r.text, now, ttl, r.traceback) for r in records]

            def commit_slots(conn: Conn, attempt: int) -> tuple[list[bool], list[bool]]:
                results = self._pipeline_raw(conn, "replaylog_slot", _SLOT_RAW, raws, _SLOT_RAW_FORMATS, then)
                # (After a lost answer, a refused slot is looked for as our own row.)
                return [_raw_written(conn, res, r.claim, r.slot, attempt, cancels)
                        for res, r in zip(results, records, strict=True)], []

            return self._run(commit_slots, write=True)

        params = [_slot_params(r.claim, r.slot, r.record, r.text, now, ttl, r.parallel_group, r.traceback)
                  for r in records]

        def commit(conn: Conn, attempt: int) -> tuple[list[bool], list[bool]]:
            if slots_only:
                with conn.pipeline(), conn.transaction():
                    cursors = [conn.execute(_PARALLEL if r.parallel else _SLOT, p)
                               for r, p in zip(records, params, strict=True)]
                    if marks_text is not None:
                        conn.execute(_MARKS_IN_COMMIT_PSYCOPG, (marks_text,))
                # (After a lost answer, a refused slot is looked for as our own row.)
                return [_written(c, r.claim, r.slot, attempt, cancels)
                        for c, r in zip(cursors, records, strict=True)], []
            with conn.transaction():
                # Pipelined: the slots' statements go out together and their answers come back
                # together, one round trip for the batch instead of one per outcome.
                with conn.pipeline() as pipe:
                    cursors = [conn.execute(_PARALLEL if r.parallel else _SLOT, p)
                               for r, p in zip(records, params, strict=True)]
                    pipe.sync()
                fresh = [c.rowcount == 1 for c in cursors]  # (as in commit_record's commit_acting)
                written = [_written(c, r.claim, r.slot, attempt, cancels)
                           for c, r in zip(cursors, records, strict=True)]
                children = [r for r, w in zip(records, written, strict=True) if w and _starts_child(r.record)]
                for r in children:
                    _start_child(conn, r.claim, r.record, now, self.wake_clock())
                for r, w, f in zip(records, written, fresh, strict=True):
                    if w and f and r.record.kind in CHILD_ACTS and r.record.ok:
                        child_act(POSTGRES, conn, r.claim.id, r.record.kind, r.record.name, r.record.value, now)
                        children.append(r)  # (told to listeners below)
                    elif w and f and _indexes(r.record):
                        index_slot(POSTGRES, conn, r.claim.id, dumps(r.record.value))
                if marks_text is not None:
                    conn.execute(_MARKS_IN_COMMIT_PSYCOPG, (marks_text,))
                finished = [_write_finish(conn, claim, outcome, now, attempt) for claim, outcome in finishes]
                if finishes or children or any(r.record.kind == EVENT for r in records):
                    conn.execute(NOTIFY)
            return written, finished

        result = self._run(commit, write=True)
        fence = self.lone_fence
        for claim, _ in finishes:
            cancels.pop(claim.id, None)
            fence.forget(claim.id)
        return result
