"""Queues in the store, on either backend: declared limits, admission under them, and what waits.

Admission is the claim's: a worker's claim admits queued workflows (`queued` → `running`)
inside its write transaction, after it has the queue's lock (SQLite: the file's single
writer; PostgreSQL: the queue's row, FOR UPDATE) and counts, under that lock, what the
queue holds now. Two workers can therefore never both see the last free place: the limits
hold across every worker process and host, whatever each one remembers.

- concurrency: the queue's workflows admitted and not finished (pending, running or
  blocked): a workflow keeps its place while it waits on a timer or a signal.
- worker_concurrency: the queue's workflows running under this worker's leases.
- rate limit (n, seconds): admissions whose `admitted_at` falls in the last `seconds`.

Order: lower priority first, then start order (seq); a `not_before` in the future (a
delay) keeps a workflow out, and the ones behind it are not held up by it.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from replaylog.engine.queues import Queue, QueueError, limits_text
from replaylog.engine.store.rows import QueueRow
from replaylog.engine.store.shared.base import Dialect
from replaylog.engine.vocab import UNFINISHED, Status

# The statuses of a workflow on a queue that holds a place in its concurrency (every unfinished
# one but the queued), and those a dedup id is taken by (every unfinished one), as SQL lists.
_HOLDING = tuple(s.value for s in UNFINISHED if s is not Status.QUEUED)
ADMITTED = "(" + ", ".join(f"'{s}'" for s in _HOLDING) + ")"
_OPEN = "(" + ", ".join(f"'{s.value}'" for s in UNFINISHED) + ")"

_DUE = "status = 'queued' AND queue = {q} AND (not_before IS NULL OR not_before <= {mark}){only}"


# The end of the earliest delay of a queued workflow (of `only`'s names): one seek in workflows_delayed.
DELAYED = ("SELECT not_before FROM workflows WHERE status = 'queued' AND not_before IS NOT NULL{only}"
           " ORDER BY not_before LIMIT 1")


def earliest(times: Sequence[float | None] | None) -> float | None:
    """The earliest of the times a row holds (None: none of them), as `next_wake` answers."""
    found = [float(t) for t in times or () if t is not None]
    return min(found) if found else None


def room_sql(mark: str, only: str) -> str:
    """EXISTS: some queue has a queued workflow due (of the names in `only`) and room under its
    global concurrency and rate limit. Parameters: the due-by time, `only`'s, the time now.

    The cheap look before a claim (`has_claimable`): a full queue costs no write transaction.
    (A worker's own concurrency for the queue is left to the admission, which knows the owner.)
    """
    due = _DUE.format(q="q.name", mark=mark, only=only)
    return (f"EXISTS (SELECT 1 FROM queues q WHERE EXISTS (SELECT 1 FROM workflows WHERE {due})"
            " AND (q.concurrency IS NULL OR q.concurrency > (SELECT COUNT(*) FROM workflows a"
            f" WHERE a.queue = q.name AND a.status IN {ADMITTED}))"
            " AND (q.rate_limit IS NULL OR q.rate_limit > (SELECT COUNT(*) FROM workflows r"
            f" WHERE r.queue = q.name AND r.admitted_at > {mark} - q.rate_period)))")


def _only(sql: Dialect, names: Collection[str] | None) -> tuple[str, list[Any]]:
    if names is None:
        return "", []
    clause, params = sql.in_list("workflow", names)
    return f" AND {clause}", params


def admit(sql: Dialect, conn: Any, owner: str, names: Collection[str] | None, limit: int,
          due_by: float) -> list[str]:
    """Admit up to `limit` queued workflows (of `names`) that their queues have room for; their ids.

    Runs inside the caller's claim transaction, which then leases the ids it returns. Each
    queue with a due workflow is locked (in name order, as every worker does) before its
    counts are read, and `admitted_at` is stamped with the time read under that lock.
    `due_by`: the clock delays are due by (the store's wake clock).
    """
    only, named = _only(sql, names)
    due = _DUE.format(q="q.name", mark="?", only=only)
    queues = sql.run(
        conn, "SELECT name, concurrency, worker_concurrency, rate_limit, rate_period FROM queues q"
        f" WHERE EXISTS (SELECT 1 FROM workflows WHERE {due}) ORDER BY name{sql.lock}", (due_by, *named)).fetchall()
    skip = f"{sql.lock} SKIP LOCKED" if sql.lock else ""
    admitted: list[str] = []
    for name, concurrency, per_worker, rate, period in queues:
        left = limit - len(admitted)
        if left <= 0:
            break
        now = time.time()  # under the queue's lock: the rate window is counted and stamped at one time
        if concurrency is not None:
            active = sql.run(conn, f"SELECT COUNT(*) FROM workflows WHERE queue = ? AND status IN {ADMITTED}",
                             (name,)).fetchone()[0]
            left = min(left, int(concurrency) - int(active))
        if per_worker is not None and left > 0:
            mine = sql.run(conn, "SELECT COUNT(*) FROM workflows WHERE queue = ? AND status = 'running'"
                           " AND lease_owner = ?", (name, owner)).fetchone()[0]
            left = min(left, int(per_worker) - int(mine))
        if rate is not None and left > 0:
            recent = sql.run(conn, "SELECT COUNT(*) FROM workflows WHERE queue = ? AND admitted_at > ?",
                             (name, now - float(period))).fetchone()[0]
            left = min(left, int(rate) - int(recent))
        if left <= 0:
            continue
        ids = [r[0] for r in sql.run(
            conn, f"SELECT id FROM workflows WHERE {_DUE.format(q='?', mark='?', only=only)}"
            f" ORDER BY priority, seq LIMIT ?{skip}", (name, due_by, *named, left)).fetchall()]
        if ids:
            chosen, params = sql.in_list("id", ids)
            sql.run(conn, f"UPDATE workflows SET admitted_at = ? WHERE {chosen}", (now, *params))
            admitted += ids
    return admitted


def declare(sql: Dialect, conn: Any, queues: Iterable[Queue], by: str, now: float) -> list[str]:
    """Record queues and their limits (the newest declaration of a name wins); say what changed.

    Returns one line per queue whose stored limits differed from the declared ones: the
    worker logs it as a warning, since two deploys disagree (or a deploy changed a limit).
    """
    changed = []
    for q in sorted(queues, key=lambda q: q.name):
        rate, period = q.rate_limit if q.rate_limit is not None else (None, None)
        old = sql.run(conn, f"SELECT concurrency, worker_concurrency, rate_limit, rate_period, declared_by FROM queues"
                      f" WHERE name = ?{sql.lock}", (q.name,)).fetchone()
        new = (q.concurrency, q.worker_concurrency, rate, period)
        if old is not None:
            was = (old[0], old[1], old[2], None if old[3] is None else float(old[3]))
            if was != new:
                changed.append(f"queue {q.name!r}: its limits were {_text(was)} (declared by {old[4]}),"
                               f" now {q.limits_text()}")
        sql.run(conn, "INSERT INTO queues (name, concurrency, worker_concurrency, rate_limit, rate_period,"
                " declared_by, declared_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET"
                " concurrency = excluded.concurrency, worker_concurrency = excluded.worker_concurrency,"
                " rate_limit = excluded.rate_limit, rate_period = excluded.rate_period,"
                " declared_by = excluded.declared_by, declared_at = excluded.declared_at",
                (q.name, *new, by, now))
    return changed


def _text(limits: tuple[Any, Any, Any, Any]) -> str:
    concurrency, per_worker, rate, period = limits
    return limits_text(concurrency, per_worker, None if rate is None else (int(rate), float(period)))


def check_start(sql: Dialect, conn: Any, queue: str, dedup_id: str | None) -> str | None:
    """Inside a start's transaction: refuse an unknown queue; the id of the unfinished workflow
    holding `dedup_id` on it, if one does (None if none).

    The queue's row is locked (on a server), so two starts with one dedup id are ordered
    and the second sees the first.
    """
    if sql.run(conn, f"SELECT 1 FROM queues WHERE name = ?{sql.lock}", (queue,)).fetchone() is None:
        known = [r[0] for r in sql.run(conn, "SELECT name FROM queues ORDER BY name").fetchall()]
        raise QueueError(f"unknown queue {queue!r} (known: {', '.join(known) or 'none'}): a worker records its"
                         " app's queues when it starts")
    if dedup_id is None:
        return None
    row = sql.run(conn, f"SELECT id FROM workflows WHERE queue = ? AND dedup_id = ? AND status IN {_OPEN} LIMIT 1",
                  (queue, dedup_id)).fetchone()
    return None if row is None else str(row[0])


def queue_rows(sql: Dialect, conn: Any, due_by: float) -> list[QueueRow]:
    """Every declared queue with its figures now: running, waiting (and how many of them are delayed)."""
    now = time.time()
    out = []
    for name, concurrency, per_worker, rate, period, by, at in sql.run(
            conn, "SELECT name, concurrency, worker_concurrency, rate_limit, rate_period, declared_by, declared_at"
            " FROM queues ORDER BY name").fetchall():
        counts = dict(sql.run(conn, f"SELECT status, COUNT(*) FROM workflows WHERE queue = ? AND status IN {_OPEN}"
                              " GROUP BY status", (name,)).fetchall())
        delayed = sql.run(conn, "SELECT COUNT(*) FROM workflows WHERE status = 'queued' AND queue = ?"
                          " AND not_before > ?", (name, due_by)).fetchone()[0]
        recent = 0 if rate is None else sql.run(
            conn, "SELECT COUNT(*) FROM workflows WHERE queue = ? AND admitted_at > ?",
            (name, now - float(period))).fetchone()[0]
        out.append(QueueRow(
            name=name, concurrency=None if concurrency is None else int(concurrency),
            worker_concurrency=None if per_worker is None else int(per_worker),
            rate_limit=None if rate is None else (int(rate), float(period)),
            running=int(counts.get(Status.RUNNING, 0)), admitted=sum(int(counts.get(s, 0)) for s in _HOLDING),
            waiting=int(counts.get(Status.QUEUED, 0)), delayed=int(delayed), recent=int(recent),
            declared_by=by, declared_at=float(at)))
    return out
