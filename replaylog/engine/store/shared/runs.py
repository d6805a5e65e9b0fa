"""Runs: a workflow continued as new (ctx.continue_as_new) goes on in a fresh history, on either backend.

The workflow's row is its current run. Continuing it, in the transaction of the run's
verdict and fenced by its lease like any verdict: the run is kept as a `runs` row (its
number, the seq its slots are keyed by, its input, its slot count), the signals it consumed
are marked as its own (`signals.run`), and the workflow's row takes a new seq (an empty
key range: the new run's history), the next run number, the new input, and is pending.
There is no moment when neither run exists, and a signal sent meanwhile is either
committed before (not consumed: it carries over) or after (the new run's).
"""

from __future__ import annotations

from typing import Any

from replaylog.engine.core import Outcome
from replaylog.engine.errors import OperatorRefusedError, UnknownWorkflowIdError
from replaylog.engine.store.rows import Claim, CommandRow, RunRow, dumps
from replaylog.engine.store.shared.base import Dialect, StoreBase
from replaylog.engine.store.shared.keys import SLOT_LIMIT, SLOTS_NOW, SLOTS_SHOWN, first_key_of
from replaylog.engine.store.shared.reads import _COMMAND_COLUMNS, _command_row, _named_groups


def continue_run(sql: Dialect, conn: Any, claim: Claim, outcome: Outcome, now: float) -> bool:
    """End the claimed run continued as new and start the next, in the caller's transaction; False if the
    lease is gone (nothing written)."""
    row = sql.run(conn, f"SELECT COALESCE(run, 1), seq, input, {SLOTS_NOW} FROM workflows"
                  f" WHERE id = ? AND lease_owner = ? AND lease_epoch = ?{sql.lock}",
                  (claim.id, claim.owner, claim.epoch)).fetchone()
    if row is None:
        return False
    run, seq, old_input, slots = int(row[0]), int(row[1]), row[2], int(row[3])
    sql.run(conn, "INSERT INTO runs (workflow_id, run, seq, input, slots, ended_at) VALUES (?, ?, ?, ?, ?, ?)",
            (claim.id, run, seq, old_input, slots, now))
    consumed = list(outcome.consumed_signals)
    if consumed:
        among, params = sql.in_list("seq", consumed)
        sql.run(conn, f"UPDATE signals SET consumed = ? WHERE workflow_id = ? AND run IS NULL AND {among}",
                (True, claim.id, *params))
    sql.run(conn, "UPDATE signals SET run = ? WHERE workflow_id = ? AND run IS NULL AND consumed = ?",
            (run, claim.id, True))
    sql.run(conn, "DELETE FROM inflight WHERE workflow_id = ?", (claim.id,))
    sql.run(conn, f"UPDATE workflows SET seq = {sql.next_seq}, run = ?, input = ?, status = 'pending',"
            " blocked_on = NULL, wake_at = NULL, result = NULL, error = NULL, diagnostic = NULL, error_kind = NULL,"
            " traceback = NULL, slots = 0, lease_owner = NULL, lease_expires = NULL, interruptions = 0,"
            " retry_at = NULL, worker_error = NULL, updated_at = ? WHERE id = ?",
            (run + 1, dumps(outcome.result) if outcome.next_has_input else None, now, claim.id))
    return True


def list_runs(sql: Dialect, conn: Any, workflow_id: str) -> list[RunRow]:
    """Every run of a workflow, oldest first: the earlier ones kept, then the current one."""
    earlier = [RunRow(int(r[0]), int(r[1]), r[2], int(r[3]), float(r[4]), False) for r in sql.run(
        conn, "SELECT run, seq, input, slots, ended_at FROM runs WHERE workflow_id = ? ORDER BY run", (workflow_id,))]
    current = sql.run(conn, f"SELECT COALESCE(run, 1), seq, input, {SLOTS_SHOWN}, updated_at FROM workflows"
                      " WHERE id = ?", (workflow_id,)).fetchone()
    if current is None:
        return earlier
    return [*earlier, RunRow(int(current[0]), int(current[1]), current[2], int(current[3]), None, True)]


class SharedRuns(StoreBase):
    """Reads of a workflow's runs: which there are, and an earlier run's slots."""

    def list_runs(self, workflow_id: str) -> list[RunRow]:
        """Every run of a workflow, oldest first (the last one is current); UnknownWorkflowIdError if none."""
        found = self._snapshot(lambda conn: list_runs(self.dialect, conn, workflow_id))
        if not found or not found[-1].current:
            raise UnknownWorkflowIdError(f"no workflow with id {workflow_id!r}")
        return found

    def run_commands(self, workflow_id: str, run: int, *, offset: int = 0, limit: int = -1) -> list[CommandRow]:
        """The recorded slots of run `run` of a workflow, in order; OperatorRefusedError for a run it does not have."""
        runs = self.list_runs(workflow_id)
        if not any(r.run == run for r in runs):
            kept = ", ".join(str(r.run) for r in runs)
            raise OperatorRefusedError(f"workflow {workflow_id!r} has no run {run} (its runs: {kept})")
        if runs[-1].run == run:
            return self.list_commands(workflow_id, offset=offset, limit=limit)  # type: ignore[attr-defined,no-any-return]
        base = first_key_of("runs", "workflow_id = ? AND run = ?")
        rows = self._query(
            f"SELECT {_COMMAND_COLUMNS} FROM commands c"
            f" WHERE c.slot_key BETWEEN {base} + ? AND {base} + {SLOT_LIMIT - 1} ORDER BY c.slot_key LIMIT ?",
            (workflow_id, run, min(max(int(offset), 0), SLOT_LIMIT), workflow_id, run, self.dialect.limit(limit)))
        return _named_groups([_command_row(r) for r in rows])
