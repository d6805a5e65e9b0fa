"""Start marks on PostgreSQL, batched across a worker's workflow threads.

Trick "batched marks": every workflow thread of a process hands its start mark to one
sender per database (`MarkSender.shared`); the thread that finds no send in progress
sends every mark queued by then as one statement (one transaction, committed without
waiting for the WAL flush) and does not wait for its answer, which is read before the
next batch goes out (PGConnection._send_unanswered); a thread that finds a send in
progress waits until its mark is sent (not answered). A lone workflow's mark goes out at
once, alone. Measured on 2 vCPUs with 50 workflows at once (floor ~3,500 commits/s):
one transaction per mark, each thread on its own connection, held the worker at
~2,000-2,450 slots/s (8,000-9,700 without marks); batched, 4,500-6,700 slots/s, ~10
marks per batch (docs/postgres.md).

What a mark promises is unchanged: it is handed to the kernel before its activity runs,
so it outlives the worker process (the server runs what it was sent), it is fenced by the
claim's lease (owner, epoch) in the statement, and it may be lost only with a server
crash (it only ever says "possibly ran").
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import ClassVar

from replaylog.engine.store.postgres.connection import Conn, PGConnection
from replaylog.engine.store.postgres.text import claim_text, float8, formats
from replaylog.engine.store.rows import StartMark

# Lasts until the end of the statement's implicit transaction: no wait for the flush.
_SYNC_OFF = " AND set_config('synchronous_commit', 'off', true) IS NOT NULL"
# What a mark does to the workflow's inflight row of its lane (0: the workflow's own thread; k: the
# k-th task of the parallel group running): its latest mark.
ON_CONFLICT = (
    " ON CONFLICT (workflow_id, lane) DO UPDATE SET slot = excluded.slot, name = excluded.name,"
    " attempts = excluded.attempts, started_at = excluded.started_at,"
    # A new attempt ends the last one's retry wait and error. The mark of the attempt that failed
    # may arrive after the verdict that kept its wait (marks are sent without waiting): it keeps it.
    " retry_at = CASE WHEN inflight.slot = excluded.slot AND inflight.attempts = excluded.attempts"
    " THEN inflight.retry_at END,"
    " error = CASE WHEN inflight.slot = excluded.slot AND inflight.attempts = excluded.attempts"
    " THEN inflight.error END"
)
# A mark sent alone (on the mark sender's connection) may reach the server after the commit that
# carried the workflow's next mark (on the committer's): it never takes a later slot's place.
_UPSERT = _SYNC_OFF + ON_CONFLICT + " WHERE inflight.lane <> 0 OR excluded.slot >= inflight.slot"
# The marks of one batch as a JSON array of objects; the lease fence is the join. One mark per
# lane of a workflow (a batch keeps a lane's latest: ON CONFLICT cannot touch a row twice); a
# mark without a lane is lane 0's.
_MARKS_INSERT = (
    "INSERT INTO inflight (workflow_id, lane, slot, name, attempts, started_at)"
    " SELECT w.id, COALESCE(m.lane, 0), m.slot, m.name, m.attempts, m.started_at"
    " FROM jsonb_to_recordset($1::jsonb) AS m(id text, lane bigint, slot bigint, name text, attempts int,"
    " started_at double precision, owner text, epoch bigint)"
    " JOIN workflows w ON w.id = m.id AND w.lease_owner = m.owner AND w.lease_epoch = m.epoch"
    " WHERE TRUE"
)
_MARKS = _MARKS_INSERT + _UPSERT
# The marks that ride a group commit (engine.worker.committer, Committer.add_mark), in its
# transaction: durable with it, so without `_SYNC_OFF`, which would let the whole commit skip the flush.
MARKS_IN_COMMIT = _MARKS_INSERT + ON_CONFLICT
_MARKS_PSYCOPG = _MARKS.replace("$1", "%s")
# A batch of one mark (a lone workflow's, always): its values as parameters, the claim's
# encoded once per claim (postgres.text), and no JSON to build, send and take apart.
_MARK = (
    "INSERT INTO inflight (workflow_id, lane, slot, name, attempts, started_at)"
    " SELECT id, $8::bigint, $2::bigint, $3::text, $4::int, $5::float8 FROM workflows"
    " WHERE id = $1::text AND lease_owner = $6::text AND lease_epoch = $7::bigint" + _UPSERT
)
# `_MARK`'s parameter formats: its time ($5) goes binary (postgres.text, "binary times").
_MARK_FORMATS = formats(8, (4,))


def marks_json(batch: Sequence[StartMark]) -> str:
    """The marks of `batch` as `_MARKS` reads them: one per lane of a workflow, its latest."""
    latest = {(m[0].id, m[5]): m for m in batch}
    return json.dumps([{"id": c.id, "lane": lane, "slot": slot, "name": name, "attempts": attempts,
                        "started_at": started_at, "owner": c.owner, "epoch": c.epoch}
                       for c, slot, name, attempts, started_at, lane in latest.values()])


class _Waiter:
    """A thread waiting for its mark to be sent: a held lock, released once."""

    __slots__ = ("done", "error", "lead")

    def __init__(self) -> None:
        self.done = threading.Lock()
        self.done.acquire()
        self.lead = False
        self.error: BaseException | None = None


class MarkSender:
    """One connection that sends the start marks of every workflow thread of this process, in batches."""

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _shared: ClassVar[dict[str, MarkSender]] = {}
    _sending: bool  # a batch is being sent (its thread sends the next, or clears this)
    _closing: bool  # `release` waits for the batch in flight

    @classmethod
    def shared(cls, url: str) -> MarkSender:
        """The process's sender for `url` (opened on first use); `release` it when done."""
        with cls._lock:
            sender = cls._shared.get(url)
            if sender is None:
                sender = cls._shared[url] = MarkSender(url)
            sender._users += 1
            return sender

    def release(self) -> None:
        """One user less; the last closes the connection."""
        with MarkSender._lock:
            self._users -= 1
            if self._users > 0:
                return
            MarkSender._shared.pop(self._url, None)
        with self._state:
            while self._sending:
                self._closing = True
                self._state.wait()
        self._conn.close()

    def __init__(self, url: str) -> None:
        self._url = url
        self._users = 0
        self._conn = PGConnection(url)
        # Taken with bare acquire/release on the per-mark path (a `with` on a Condition is two
        # Python-level calls more); the Condition is only waited on by `release`.
        self._mutex = threading.Lock()
        self._state = threading.Condition(self._mutex)
        self._closing = False
        # Marks waiting to be sent, each with the lock its thread waits on (None: the
        # sending thread's own) and whether that thread is to send next.
        self._queue: list[tuple[StartMark, _Waiter | None]] = []
        self._sending = False

    def mark(self, mark: StartMark) -> None:
        """Send `mark` (alone or with others queued meanwhile); return once it was handed to the kernel.

        As the worker's Committer: each waiting thread is woken once, when its mark was
        sent or when it is to send the next batch (a notify_all woke every workflow thread
        per batch, and each woken thread waited for the GIL: ~2 ms per mark).
        """
        mutex = self._mutex
        mutex.acquire()
        if not self._sending:  # nothing in flight: this thread sends its own mark at once, alone
            self._sending = True
            mutex.release()
            try:
                self._send_one(mark)
            finally:
                self._hand_on()
            return
        waiter = _Waiter()
        self._queue.append((mark, waiter))
        mutex.release()
        waiter.done.acquire()  # released once sent (or failed), or when this thread is to send
        if waiter.error is not None:
            raise waiter.error
        if waiter.lead:
            mutex.acquire()
            batch, self._queue = self._queue, []
            mutex.release()
            self._lead(batch)

    def _lead(self, batch: list[tuple[StartMark, _Waiter | None]]) -> None:
        failed: BaseException | None = None
        try:
            self._send([m for m, _ in batch])
        except BaseException as exc:
            failed = exc  # every mark of the batch failed: each waiting thread raises it too
            raise
        finally:
            for _, w in batch:
                if w is not None:
                    w.error = failed
                    w.done.release()
            self._hand_on()

    def _hand_on(self) -> None:
        """After a send: the first thread that queued a mark meanwhile sends next, or nobody is sending."""
        mutex = self._mutex
        mutex.acquire()
        if self._queue:
            nxt = self._queue[0][1]
            assert nxt is not None
            nxt.lead = True
            nxt.done.release()
        else:
            self._sending = False
            if self._closing:
                self._state.notify_all()  # only `release` waits on it
        mutex.release()

    def _send_one(self, mark: StartMark) -> None:
        claim, slot, name, attempts, started_at, lane = mark
        wid, owner, epoch = claim_text(claim)
        self._conn._send_unanswered("replaylog_mark", _MARK, (
            wid, b"%d" % slot, name.encode(), b"%d" % attempts, float8(started_at), owner, epoch,
            b"%d" % lane if lane else b"0"),
            lambda conn, _: conn.execute(_MARKS_PSYCOPG, (marks_json([mark]),)), _MARK_FORMATS)

    def _send(self, batch: list[StartMark]) -> None:
        if len(batch) == 1:
            self._send_one(batch[0])
            return
        text = marks_json(batch)

        def redo(conn: Conn, _: int) -> None:  # the ordinary way: after a failed or unsent batch
            conn.execute(_MARKS_PSYCOPG, (text,))

        self._conn._send_unanswered("replaylog_marks", _MARKS, (text.encode(),), redo)
