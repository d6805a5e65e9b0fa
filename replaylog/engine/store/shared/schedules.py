"""Schedules in the store, on either backend: the operator's writes and the worker's look at due ticks.

A look (`fire_schedules`) is one write transaction per due schedule: the schedule's row
is read under the backend's lock, `engine.schedules.plan` says which ticks start, each
tick's workflow is inserted under its derived id (`tick_id`) through the store's one
insert (a taken id is refused, so a tick starts once however many workers look), and
the row's next tick is moved on, all committed together. A worker killed in the middle
commits nothing, and the next look does the same again.

Operators' actions on schedules go in the audit trail under the id "schedule:NAME".
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from replaylog.engine import schedules as cron
from replaylog.engine.errors import DuplicateWorkflowIdError, ScheduleRefusedError
from replaylog.engine.store.rows import ScheduleRow, loads
from replaylog.engine.store.shared.base import StoreBase
from replaylog.engine.store.shared.operations import _audit, actor
from replaylog.engine.vocab import FINISHED

_COLUMNS = ("name, workflow, cron, timezone, input, has_input, overlap, catch_up, paused, origin, next_at,"
            " last_tick, last_id, buffered, skipped, created_at, updated_at")
_FINISHED_SQL = ", ".join(f"'{s.value}'" for s in sorted(FINISHED))


def _row(r: Sequence[Any]) -> ScheduleRow:
    return ScheduleRow(name=r[0], workflow=r[1], cron=r[2], timezone=r[3], input=loads(r[4]), has_input=bool(r[5]),
                       overlap=r[6], catch_up=r[7], paused=bool(r[8]), origin=r[9], next_at=float(r[10]),
                       last_tick=r[11], last_id=r[12], buffered=r[13], skipped=int(r[14]), created_at=r[15],
                       updated_at=r[16])


def audit_id(name: str) -> str:
    """The id a schedule's actions are audited under."""
    return f"schedule:{name}"


class SharedSchedules(StoreBase):
    """Schedules: added, listed, paused, resumed, deleted and triggered by operators; fired by workers."""

    # -- reads

    def list_schedules(self) -> list[ScheduleRow]:
        """Every schedule, by name."""
        return [_row(r) for r in self._query(f"SELECT {_COLUMNS} FROM schedules ORDER BY name")]

    def get_schedule(self, name: str) -> ScheduleRow:
        """One schedule; ScheduleRefusedError if there is none of that name."""
        r = self._query_one(f"SELECT {_COLUMNS} FROM schedules WHERE name = ?", (name,))
        if r is None:
            raise ScheduleRefusedError(f"no schedule named {name!r}")
        return _row(r)

    def next_schedule_at(self) -> float | None:
        """The earliest next tick of a schedule that is not paused (epoch seconds), None if none."""
        r = self._query_one("SELECT MIN(next_at) FROM schedules WHERE paused = ?", (False,))
        return None if r is None or r[0] is None else float(r[0])

    # -- the operator's writes

    def add_schedule(self, name: str, workflow: str, cron_expr: str, *, input: Any = None, has_input: bool = False,
                     timezone: str = cron.DEFAULT_TIMEZONE, overlap: str = cron.DEFAULT_OVERLAP,
                     catch_up: str = cron.DEFAULT_CATCH_UP, start_at: float | None = None,
                     origin: str = "operator") -> ScheduleRow:
        """Add a schedule; its first tick is the first after `start_at` (else now, by the wake clock).

        Every argument is checked before anything is written: a malformed cron expression,
        an unknown time zone, an unknown policy, an input JSON cannot hold or a name taken
        is refused whole (ScheduleRefusedError, ValueNotJSONError).
        """
        cron.check_name(name)
        cron.check_cron(cron_expr)
        cron.zone(timezone)
        cron.check_choice(overlap, cron.OVERLAPS, "overlap policy")
        cron.check_choice(catch_up, cron.CATCH_UPS, "catch-up policy")
        if not workflow:
            raise ScheduleRefusedError("a schedule needs a workflow name")
        input_text = self.encode_payload(input, f"the input of schedule {name!r}") if has_input else None
        first = cron.next_tick(cron_expr, timezone, self.wake_clock() if start_at is None else start_at)
        now, who, sql = time.time(), actor(), self.dialect

        def add(conn: Any) -> None:
            if sql.run(conn, f"SELECT 1 FROM schedules WHERE name = ?{sql.lock}", (name,)).fetchone():
                raise ScheduleRefusedError(f"a schedule named {name!r} already exists (delete it first)")
            sql.run(conn, f"INSERT INTO schedules ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL,"
                    " NULL, 0, ?, ?)", (name, workflow, cron_expr, timezone, input_text, has_input, overlap,
                                        catch_up, False, origin, first, now, now))
            _audit(sql, conn, audit_id(name), "schedule add", now, who,
                   detail=f"{workflow} at {cron_expr!r} ({timezone}); overlap {overlap}, catch-up {catch_up}")

        self._operate(audit_id(name), "schedule add", now, who, add, lambda _: None)
        return self.get_schedule(name)

    def pause_schedule(self, name: str, paused: bool = True, reason: str | None = None) -> ScheduleRow:
        """Pause a schedule (its ticks start nothing) or resume it (from its next tick after now: the
        ticks that came while it was paused are not caught up)."""
        now, who, sql = time.time(), actor(), self.dialect
        action = "schedule pause" if paused else "schedule resume"
        clock = self.wake_clock()

        def write(conn: Any) -> None:
            found = sql.run(conn, f"SELECT cron, timezone FROM schedules WHERE name = ?{sql.lock}", (name,)).fetchone()
            if found is None:
                raise ScheduleRefusedError(f"no schedule named {name!r}")
            if paused:
                sql.run(conn, "UPDATE schedules SET paused = ?, updated_at = ? WHERE name = ?", (True, now, name))
            else:
                sql.run(conn, "UPDATE schedules SET paused = ?, next_at = ?, buffered = NULL, updated_at = ?"
                        " WHERE name = ?", (False, cron.next_tick(found[0], found[1], clock), now, name))
            _audit(sql, conn, audit_id(name), action, now, who, reason)

        self._operate(audit_id(name), action, now, who, write, lambda _: None)
        return self.get_schedule(name)

    def delete_schedule(self, name: str, reason: str | None = None) -> None:
        """Delete a schedule; the workflows it started are untouched."""
        now, who, sql = time.time(), actor(), self.dialect

        def delete(conn: Any) -> None:
            if sql.run(conn, "DELETE FROM schedules WHERE name = ? RETURNING name", (name,)).fetchone() is None:
                raise ScheduleRefusedError(f"no schedule named {name!r}")
            _audit(sql, conn, audit_id(name), "schedule delete", now, who, reason)

        self._operate(audit_id(name), "schedule delete", now, who, delete, lambda _: None)

    def trigger_schedule(self, name: str) -> str:
        """Start the schedule's workflow now, whatever its policies and even paused; return its id.

        Its id is the schedule's name and this moment's tick time (to the second): a second
        trigger within the same second is refused as a taken id. Later ticks count it as the
        schedule's last workflow (overlap).
        """
        now, who, sql = time.time(), actor(), self.dialect
        tick = float(int(self.wake_clock()))
        wid = cron.tick_id(name, tick)

        def trigger(conn: Any) -> str:
            found = sql.run(conn, f"SELECT workflow, input, has_input FROM schedules WHERE name = ?{sql.lock}",
                            (name,)).fetchone()
            if found is None:
                raise ScheduleRefusedError(f"no schedule named {name!r}")
            self._insert_workflow(conn, wid, found[0], found[1] if found[2] else None, now)
            _audit(sql, conn, wid, "start", now, who, detail=f"{found[0]} (schedule {name} triggered)")
            sql.run(conn, "UPDATE schedules SET last_id = ?, updated_at = ? WHERE name = ?", (wid, now, name))
            _audit(sql, conn, audit_id(name), "schedule trigger", now, who, detail=wid)
            return wid

        return self._operate(audit_id(name), "schedule trigger", now, who, trigger, lambda done: done)

    # -- the worker's

    def sync_app_schedules(self, schedules: Mapping[str, str]) -> list[str]:
        """Make the app's schedules (workflow name → cron, from @workflow(schedule=...)) rows; the names changed.

        A schedule of the app's is named after its workflow. One that is missing is added;
        one whose cron expression the app changed takes the new one (from its next tick);
        a paused one stays paused. A schedule an operator made under the same name is left alone.
        """
        changed: list[str] = []
        existing = {s.name: s for s in self.list_schedules()}
        for workflow, expr in sorted(schedules.items()):
            have = existing.get(workflow)
            if have is None:
                try:
                    self.add_schedule(workflow, workflow, expr, origin="app")
                except ScheduleRefusedError as exc:
                    if "already exists" not in str(exc):  # another worker added it meanwhile: fine
                        raise
                    continue
                changed.append(workflow)
            elif have.origin == "app" and have.cron != expr:
                self._recron(workflow, expr)
                changed.append(workflow)
        return changed

    def _recron(self, name: str, expr: str) -> None:
        cron.check_cron(expr)
        now, who, sql = time.time(), actor(), self.dialect
        clock = self.wake_clock()

        def write(conn: Any) -> None:
            found = sql.run(conn, f"SELECT timezone FROM schedules WHERE name = ?{sql.lock}", (name,)).fetchone()
            if found is None:
                return
            sql.run(conn, "UPDATE schedules SET cron = ?, next_at = ?, updated_at = ? WHERE name = ?",
                    (expr, cron.next_tick(expr, found[0], clock), now, name))
            _audit(sql, conn, audit_id(name), "schedule change", now, who, detail=f"cron {expr!r} (from the app)")

        self._operate(audit_id(name), "schedule change", now, who, write, lambda _: None)

    def fire_schedules(self, now: float | None = None) -> list[str]:
        """Start the workflows of every due tick (by the wake clock, or `now`); return their ids.

        One write transaction per due schedule (see the module's docstring); a schedule
        with nothing due costs nothing but the read that finds it.
        """
        clock = self.wake_clock() if now is None else now
        due = [r[0] for r in self._query(
            "SELECT s.name FROM schedules s LEFT JOIN workflows w ON w.id = s.last_id WHERE s.paused = ? AND"
            f" (s.next_at <= ? OR (s.buffered IS NOT NULL AND (w.status IS NULL OR w.status IN ({_FINISHED_SQL}))))",
            (False, clock))]
        started: list[str] = []
        for name in due:
            started += self._fire(name, clock)
        return started

    def _fire(self, name: str, clock: float) -> list[str]:
        now, who, sql = time.time(), actor(), self.dialect

        def fire(conn: Any) -> list[str]:
            found = sql.run(conn, f"SELECT {_COLUMNS} FROM schedules WHERE name = ?{sql.lock}", (name,)).fetchone()
            if found is None:
                return []
            s = _row(found)
            if s.paused:
                return []
            running = False
            if s.last_id is not None:
                last = sql.run(conn, "SELECT status FROM workflows WHERE id = ?", (s.last_id,)).fetchone()
                running = last is not None and last[0] not in FINISHED
            p = cron.plan(expr=s.cron, tz=s.timezone, overlap=s.overlap, catch_up=s.catch_up, next_at=s.next_at,
                          buffered=s.buffered, running=running, now=clock)
            input_text = found[4] if s.has_input else None
            started: list[str] = []
            for tick in p.start:
                wid = cron.tick_id(name, tick)
                try:
                    self._insert_workflow(conn, wid, s.workflow, input_text, now)
                except DuplicateWorkflowIdError:
                    continue  # started already (an earlier schedule of this name, or a trigger)
                _audit(sql, conn, wid, "start", now, who, detail=f"{s.workflow} (schedule {name}, tick"
                       f" {cron.tick_id('', tick)[1:]})")
                started.append(wid)
            last_tick = max(p.start) if p.start else s.last_tick
            sql.run(conn, "UPDATE schedules SET next_at = ?, buffered = ?, last_tick = ?, last_id = ?,"
                    " skipped = skipped + ?, updated_at = ? WHERE name = ?",
                    (p.next_at, p.buffered, last_tick, started[-1] if started else s.last_id, p.skipped, now, name))
            return started

        # A retry after a lost answer reads the row again: its next tick has moved on if the
        # first try committed, so nothing starts twice (and a taken id is refused anyway).
        return self._operate(audit_id(name), "schedule tick", now, who, fire, lambda _: [])

