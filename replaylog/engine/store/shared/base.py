"""What both backends share under the reads and the operator writes: the SQL dialect and the primitives.

The reads (`shared.reads`) and the operator writes (`shared.operations`) are written
once, over a few primitives each backend's connection class implements (`StoreBase`),
in SQL with `?` placeholders whose few differences a `Dialect` names (locks, list
parameters, LIMIT without a bound, the row that breaks ties, the slot count). Where a
backend's SQL really differs (claims, commits, inserting a workflow), it stays in the
backend's own module. The worker's per-slot path (commit, leases, marks) does not go
through this layer: it speaks to its driver directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ClassVar, Protocol, Self, TypeVar

from replaylog.engine.store.rows import encode_payload
from replaylog.engine.vocab import Status

T = TypeVar("T")


class Rows(Protocol):
    """What a statement's cursor gives on both drivers."""

    def fetchone(self) -> Any:
        """The next row, or None."""

    def fetchall(self) -> list[Any]:
        """The rows left."""

    def __iter__(self) -> Iterator[Any]: ...


class Dialect:
    """The SQL one backend speaks where the logic is the same: subclassed once per backend.

    Shared statements are written with `?` placeholders; `run` executes one on the
    backend's connection (translating them where the driver wants another style).
    """

    # Appended to a SELECT that reads the row a write then changes (the row lock on a server).
    lock: ClassVar[str] = ""
    # The same for one table of a join (`lock_of("w")`), and a lock that keeps a row as read.
    lock_of_format: ClassVar[str] = ""
    share_lock: ClassVar[str] = ""
    # The column that breaks ties in a sorted page of workflows.
    tie: ClassVar[str] = "seq"
    # What a LIKE with backslash escapes needs after it.
    like_escape: ClassVar[str] = ""
    # A column's value that no index of the column may be used for (`unindexed.format("w.status")`),
    # where the planner would otherwise pick that index over the one a statement walks in order.
    unindexed: ClassVar[str] = "{}"
    # A new workflow seq, in an UPDATE of a workflow's row (a run continued as new takes one).
    next_seq: ClassVar[str] = "(SELECT COALESCE(MAX(seq), 0) + 1 FROM workflows)"
    # A workflow (of the `workflows` table) whose error holds every word of the `?` parameter
    # (`error_query` makes it from the operator's text): the backend's full-text search.
    error_match: ClassVar[str] = ""
    # A JSON object's members as a FROM item (formatted with the expression of its JSON text),
    # one row per member with its `key`; and a member's value as text, NULL for a JSON null
    # (formatted with the item's alias). The search-attribute index is made of these.
    json_pairs: ClassVar[str] = ""
    json_text: ClassVar[str] = ""

    def error_query(self, text: str) -> str:
        """The full-text parameter of `error_match` for an operator's words."""
        return text

    def lock_of(self, alias: str) -> str:
        """The row lock of one table of a join, by its alias ("" where writes lock the whole store)."""
        return self.lock_of_format.format(alias)

    def run(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Rows:
        """Execute one statement written with `?` placeholders."""
        raise NotImplementedError

    def run_many(self, conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Execute one statement written with `?` placeholders once per row of parameters."""
        raise NotImplementedError

    def compiled_records(self, conn: Any, sql: str, params: tuple[Any, ...], record_type: type[Any],
                         loads: Any) -> list[Any] | None:
        """A history's records read by a compiled path (engine.store.sqlite.speedups); None where there is none."""
        return None

    def in_list(self, column: str, values: Iterable[Any]) -> tuple[str, list[Any]]:
        """`column` is one of `values`: the SQL and its parameters."""
        raise NotImplementedError

    def limit(self, limit: int) -> int | None:
        """A LIMIT parameter; a negative `limit` means no limit."""
        raise NotImplementedError


class StoreBase:
    """The primitives a backend's connection class gives the shared reads and operator writes.

    Each backend's connection class (`SQLiteConnection`, `PGConnection`) sets `dialect`
    and `max_payload` and implements the methods that raise NotImplementedError here.
    """

    dialect: ClassVar[Dialect]
    max_payload: int
    # The clock a recorded wake time (a timer, a wait's deadline) is due by: the wall clock,
    # unless a test environment moves time by hand (replaylog.testing), set by `open_store`.
    # Leases, retries and stamps always use the wall clock: they measure real waiting.
    wake_clock: Callable[[], float] = staticmethod(time.time)

    def close(self) -> None:
        """Close the connection."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def encode_payload(self, value: Any, what: str) -> str:
        """Encode a value as JSON text within the payload cap, or raise naming `what`."""
        return encode_payload(value, what, self.max_payload)

    # -- what the backends implement

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows of one read statement (`?` placeholders), outside any write."""
        raise NotImplementedError

    def _query_one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first row of one read statement (`?` placeholders), or None."""
        raise NotImplementedError

    def _snapshot(self, fn: Callable[[Any], T]) -> T:
        """`fn(connection)` in one read transaction: its statements see one snapshot."""
        raise NotImplementedError

    def _operate(self, workflow_id: str, action: str, now: float, who: str, body: Callable[[Any], T],
                 again: Callable[[str], T]) -> T:
        """`body(connection)` as one operator write transaction that appends the audit row of `action`.

        A backend that tries a write again after a lost answer finds that row (by
        `workflow_id`, `action`, `now` and `who`) if the first try committed, and returns
        `again(its detail)` instead of writing twice.
        """
        raise NotImplementedError

    def _after_bulk_delete(self) -> None:
        """Upkeep after a write that deleted many rows (a prune's batch), outside its transaction: nothing here."""

    def _insert_workflow(self, conn: Any, wid: str, workflow: str, input_text: str | None, now: float,
                         *, status: str = Status.PENDING.value, slots: int = 0, result: str | None = None,
                         error: str | None = None, diagnostic: str | None = None, error_kind: str | None = None,
                         forked_from: str | None = None, forked_slot: int | None = None) -> int:
        """Insert a workflow row; return its seq. DuplicateWorkflowIdError if the id is taken."""
        raise NotImplementedError


class SeenCancels:
    """The cancel requests (workflow id → reason) a store's slot commits came upon; the worker takes them out.

    Both backends' commits learn of an operator's cancel request from the commit fence
    itself (no query of their own per slot) and note it here.
    """

    _cancels: dict[str, str]

    @property
    def cancels(self) -> dict[str, str]:
        """Cancel requests seen by this connection's slot commits, by workflow id (the reason, "" if none)."""
        # Set as an attribute, never through `self.__dict__`: asking for an instance's __dict__
        # makes CPython 3.11 keep it as a dict whose attribute reads its interpreter no longer
        # specialises (each miss costs a generic lookup). The worker's committer asks for
        # this once, and the store's per-slot path then read six attributes that way: ~1,000
        # CPU instructions a slot (bench.instructions).
        try:
            return self._cancels
        except AttributeError:
            self._cancels = {}
            return self._cancels
