"""The commit fence: what a connection knows of the slots it wrote, so most slot commits skip the workflow row.

One speed trick, kept in this one module (see CommitFence for what it gains and why it is safe).
"""

from __future__ import annotations

from replaylog.engine.store.rows import Claim

# While a workflow records slot after slot, its updated_at moves at most this often
# (seconds): the console shows ages in seconds, and each restamp costs two index pages.
UPDATED_AT_STEP = 1.0
# What `CommitFence.check` answers besides a column value to fence the row at.
REFUSE = -1  # not the next slot of this lease: refuse it, never leave a gap
FAST = -2  # nothing could have changed since this connection's last slot: write the command row alone


class _Written:
    """A workflow's last slot written by this connection: under which lease and data_version."""

    __slots__ = ("column", "epoch", "next_slot", "pager", "row", "version")

    def __init__(self, epoch: int, version: int, next_slot: int, column: int, row: int) -> None:
        self.epoch = epoch
        self.version = version  # this connection's PRAGMA data_version at that commit
        self.next_slot = next_slot
        self.column = column  # the workflow row's `slots` column as this connection last wrote it
        self.row = row  # the workflow row's rowid then (a guarded slot statement finds the row by it)
        # The connection's SQLite data version after the last slot the compiled lone slot wrote
        # (its data-version fence, engine.store.sqlite.speedups); -1: none since the row was fenced.
        self.pager = -1


class CommitFence:
    """The commit fence's speed trick: most slot commits skip the workflow's row.

    Fencing a slot reads the workflow's row, and rewriting that row per slot (count,
    lease expiry) put a second page into every commit's fsync; on the disks here that
    was ~9 us of a ~170 us slot. So the row is written only when something could have
    changed. PRAGMA data_version changes for a connection only when another connection
    commits: if it is what it was at this workflow's last slot written here, under the
    same lease epoch and with this slot next, nobody else has written anything since
    (no claim, no lease taken over), and the command row alone is written. Otherwise,
    and at least once a second (UPDATED_AT_STEP, so updated_at stays current), the row
    is fenced and rewritten as before: owner, epoch, and the count this connection last
    wrote there.

    A connection's own writes do not change its data_version: anything else it writes
    (a claim, a release) and any failed commit must `clear()` the fence. The one exception
    is a claim made in a group commit (`Commits._ride`): it changes only the rows it claims,
    and it `note()`s each as it wrote it (lease, `slots`, updated_at), as a fenced slot's
    rewrite is noted; the rest stay known.

    A lone slot (engine.store.sqlite.commit, `Commits.commit_record`) does without the
    transaction and data_version: `guard` gives what its one autocommit statement checks on
    the workflow's row, the same owner, epoch and count the fenced UPDATE checks.

    The compiled twin of that slot (`lone_write` in engine.store.sqlite.speedups' C file)
    does what `guard` does on `_written` and `_stamped` directly, and advances
    `_Written.next_slot` as the caller does: a change to what these hold, or to `guard`'s
    rule, is a change there too (tests/test_speedups.py runs both). It also skips the row
    by this class's FAST rule, on SQLite's own data version (which, unlike PRAGMA
    data_version, counts this connection's commits too) kept in `_Written.pager`: a slot
    after the compiled one, with nothing committed to the file in between, by anyone, is
    written without the row's check, and its commit is refused if that turns out false.
    """

    __slots__ = ("_stamped", "_written")

    def __init__(self) -> None:
        self._written: dict[str, _Written] = {}
        self._stamped: dict[str, float] = {}  # workflow id → the updated_at this connection last wrote

    def check(self, claim: Claim, slot: int, version: int, now: float) -> int:
        """How to write `slot`: REFUSE, FAST (the command row alone), or the `slots` value to fence the row at.

        FAST counts the slot as written: if writing its command row then fails, the
        caller rolls back and clears the fence.
        """
        key = claim.id
        w = self._written.get(key)
        if w is not None and w.epoch == claim.epoch:
            if w.next_slot != slot:
                return REFUSE
            if w.version == version and now - self._stamped.get(key, 0.0) < UPDATED_AT_STEP:
                w.next_slot = slot + 1
                return FAST
            return w.column
        # A claim sets the column to the true count. After `clear()` it may be behind (the FAST
        # and guarded slots since the last rewrite left it): the caller checks the commands
        # table then (engine.store.sqlite.commit, _BEHIND_ROW).
        return slot

    def guard(self, claim: Claim, slot: int, now: float) -> _Written | None:
        """What this connection knows of the workflow if `slot` is its next and no restamp is due, else None.

        The caller writes the slot with one statement guarded by the row (owner, epoch,
        `column`, and no cancel request) and advances `next_slot` if it was written;
        None, or a row that refused, sends it to the fenced transaction, which decides.
        """
        w = self._written.get(claim.id)
        if (w is not None and w.epoch == claim.epoch and w.next_slot == slot
                and now - self._stamped.get(claim.id, 0.0) < UPDATED_AT_STEP):
            return w
        return None

    def restamp_due(self, workflow_id: str, now: float) -> bool:
        """Whether the workflow's updated_at is due to be rewritten (at most once a second)."""
        return now - self._stamped.get(workflow_id, 0.0) >= UPDATED_AT_STEP

    def stamped(self, workflow_id: str, now: float) -> None:
        """Note that the workflow's updated_at was rewritten now."""
        if len(self._stamped) > 10_000:
            self._stamped.clear()  # bounded: ids of workflows run elsewhere since
            self._written.clear()
        self._stamped[workflow_id] = now

    def note(self, claim: Claim, version: int, next_slot: int, row: int) -> None:
        """Note that the workflow's row (rowid `row`) was fenced and rewritten with `slots = next_slot`."""
        self._written[claim.id] = _Written(claim.epoch, version, next_slot, next_slot, row)

    def forget(self, workflow_id: str) -> None:
        """The workflow's row refused a slot (its lease is gone): know nothing of it."""
        self._written.pop(workflow_id, None)

    def finished(self, workflow_id: str) -> None:
        """The workflow's run ended (its verdict is committed): drop everything kept for it."""
        self._stamped.pop(workflow_id, None)
        self._written.pop(workflow_id, None)

    def clear(self) -> None:
        """Know nothing of any slot written before: after another write here, or a failed commit."""
        self._written.clear()
