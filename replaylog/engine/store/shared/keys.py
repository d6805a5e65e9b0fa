"""The key of a command row: (workflow seq << SLOT_BITS) + slot, in Python and in SQL.

Workflows are numbered (`seq`) in start order, so the newest workflow's slots append to
the end of the commands table's rowid b-tree, the cheapest write SQLite has: 1.02 WAL
pages a commit, against 1.2-1.7 for a b-tree keyed (workflow id, slot) that splits in
the middle. Every place that builds or takes apart a key goes through this module.
"""

from __future__ import annotations

SLOT_BITS = 32
# A workflow holds fewer slots than this: one more would take the next workflow's first key.
SLOT_LIMIT = 1 << SLOT_BITS


def slot_key(seq: int, slot: int = 0) -> int:
    """The command key of `slot` of the workflow numbered `seq` (slot 0 by default: its base)."""
    return (seq << SLOT_BITS) + slot


def key_bounds(wf: str) -> tuple[str, str]:
    """The first and last command key of the workflows row named `wf`, as SQL expressions."""
    return f"({wf}.seq << {SLOT_BITS})", f"(({wf}.seq << {SLOT_BITS}) + {SLOT_LIMIT - 1})"


def first_key_of(table: str, where: str) -> str:
    """The first command key of the one row of `table` (workflows or runs) that `where` picks, as a scalar
    subquery: a read of its commands is then a range of the commands' key, whatever the planner would
    make of a join (PostgreSQL walked the whole key in order for an ORDER BY ... LIMIT)."""
    return f"(SELECT seq << {SLOT_BITS} FROM {table} WHERE {where})"


def slot_of(key: str) -> str:
    """The slot of the command key `key` (an SQL expression), as SQL."""
    return f"({key} & {SLOT_LIMIT - 1})"


def unrecorded(wf: str, slot: str) -> str:
    """SQL that is true while slot `slot` (an SQL expression) of the workflows row named `wf` has no
    recorded outcome: past its last recorded slot, or a gap below it, where a task of a parallel group
    still runs while a later task of the group is recorded. One seek in the commands' key."""
    return f"NOT EXISTS (SELECT 1 FROM commands WHERE commands.slot_key = ({wf}.seq << {SLOT_BITS}) + {slot})"


# For readers that join `workflows w` to `commands c`.
FIRST_KEY, LAST_KEY = key_bounds("w")


def slots_now(wf: str) -> str:
    """SQL for the true slot count of the workflows row named `wf`: its last slot + 1 (0 for none)."""
    return ("COALESCE((SELECT c.slot_key - {0} + 1 FROM commands c WHERE c.slot_key BETWEEN {0} AND {1}"
            " ORDER BY c.slot_key DESC LIMIT 1), 0)").format(*key_bounds(wf))


# A running workflow's `slots` column is rewritten at most about once a second: most slot
# commits write only the command row (SQLite: engine.store.sqlite.fence; PostgreSQL: the lock
# fence, engine.store.postgres.commit). Its true count is its last slot + 1, one seek in the
# commands' key; every reader that shows or decides by the count takes that for a running
# workflow, and a claim, a hand-back and a verdict write it.
SLOTS_NOW = slots_now("workflows")
SLOTS_SHOWN = f"CASE WHEN status = 'running' THEN {SLOTS_NOW} ELSE slots END AS slots"

# A claim loads the histories of the workflows it takes when they are at most this many
# slots long: one query per table for the whole batch, instead of a read transaction per
# workflow. Longer ones are loaded by their worker thread, so a claim never holds the
# write lock for long.
CLAIM_LOAD_SLOTS = 256
