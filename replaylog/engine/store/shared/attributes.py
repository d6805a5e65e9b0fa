"""The search-attribute index: each workflow's current search attributes, written by the store's writes.

ctx.upsert_search_attributes records an `attributes` slot whose value is a JSON object;
the `search_attributes` table holds, per workflow and key, the latest value as text (a
key set to None is gone), indexed for `list --attr KEY=VALUE`. Every write that inserts
`commands` rows keeps it: a worker's commit of an `attributes` slot (`index_slot`, in
the commit's transaction) and a bulk copy of slots, fork or import (`rebuild`).

It is kept here rather than by a trigger on `commands`: a trigger's program runs on every
slot inserted, though only an `attributes` slot has anything to index, and that cost
~7,700 CPU instructions on every slot of every workflow on SQLite (bench.instructions;
docs/performance.md, "The cost of a slot, by stage").
"""

from __future__ import annotations

from typing import Any

from replaylog.engine.store.shared.base import Dialect
from replaylog.engine.vocab import SlotKind

# The kind of slot whose value sets search attributes.
ATTRIBUTES = SlotKind.ATTRIBUTES.value


def index_slot(sql: Dialect, conn: Any, workflow_id: str, text: str) -> None:
    """An `attributes` slot whose value is the JSON object `text` was just written: set its keys' values.

    Each key it names is replaced; a key whose value is null is removed; other keys stay.
    """
    pairs, value = sql.json_pairs.format("?"), sql.json_text.format("j")
    sql.run(conn, f"DELETE FROM search_attributes WHERE workflow_id = ? AND key IN (SELECT j.key FROM {pairs} j)",
            (workflow_id, text))
    sql.run(conn, f"INSERT INTO search_attributes (workflow_id, key, value) SELECT ?, j.key, {value}"
            f" FROM {pairs} j WHERE {value} IS NOT NULL", (workflow_id, text))


def rebuild(sql: Dialect, conn: Any, workflow_id: str, first_key: int, last_key: int) -> None:
    """The search attributes of a workflow whose slots were copied in bulk, from its slots keyed first..last.

    The same as indexing each successful `attributes` slot in order: per key, the value
    of the last slot that names it, unless that value is null. Keys already indexed for
    the workflow and not named by these slots stay.
    """
    pairs, value = sql.json_pairs.format("c.value"), sql.json_text.format("j")
    sql.run(conn, f"DELETE FROM search_attributes WHERE workflow_id = ? AND key IN (SELECT j.key FROM commands c,"
            f" {pairs} j WHERE c.slot_key BETWEEN ? AND ? AND c.kind = '{ATTRIBUTES}' AND c.ok)",
            (workflow_id, first_key, last_key))
    sql.run(conn, "INSERT INTO search_attributes (workflow_id, key, value) SELECT ?, t.key, t.value FROM"
            f" (SELECT j.key AS key, {value} AS value,"
            " ROW_NUMBER() OVER (PARTITION BY j.key ORDER BY c.slot_key DESC) AS latest"
            f" FROM commands c, {pairs} j WHERE c.slot_key BETWEEN ? AND ? AND c.kind = '{ATTRIBUTES}' AND c.ok) t"
            " WHERE t.latest = 1 AND t.value IS NOT NULL", (workflow_id, first_key, last_key))
