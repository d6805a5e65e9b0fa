"""The client for asyncio applications: `AsyncClient` and `AsyncWorkflowHandle`, awaitable.

    from replaylog import AsyncClient

    async with AsyncClient("app.db") as client:
        handle = await client.start(order_workflow, {"sku": "A1"})
        result = await handle.result(timeout=30)       # the loop goes on serving meanwhile

The same methods as `Client` and `WorkflowHandle`, with the same arguments, answers and
errors (the ones not written out here, schedules and bulk actions say, are reached through
`__getattr__`, so a method the sync client gains is awaitable here at once): each is the
sync client's own operation, run on a thread of asyncio's default executor for the few
milliseconds a store call takes, so the event loop is never blocked.
Waits (`result`, `get_event`) hold no thread while they wait: the loop is woken by the
store's change signal, PostgreSQL's LISTEN/NOTIFY (as the sync client waits), and on a
SQLite file by a look at `PRAGMA data_version` every few milliseconds, each look an
awaited step, never a sleep of the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from replaylog.client import (
    NO_INPUT,
    NOTIFY_SAFETY,
    SQLITE_POLL,
    AppLike,
    Client,
    ClientClosedError,
    Slot,
    WorkflowHandle,
    WorkflowInfo,
)
from replaylog.engine.check import Verdict
from replaylog.engine.history import HistoryDocument
from replaylog.engine.store import Store

__all__ = ["AsyncClient", "AsyncWorkflowHandle"]

R = TypeVar("R")
T = TypeVar("T")


class AsyncClient:
    """A connection to one replaylog database, for asyncio code: `Client`'s methods, awaitable.

    Args:
        db, max_payload, app, readonly: as `Client`'s.

    `async with AsyncClient(...) as client:` closes it on leaving; `close()` is awaitable.
    """

    def __init__(self, db: str | os.PathLike[str] | None = None, *, max_payload: int | None = None,
                 app: AppLike | None = None, readonly: bool = False) -> None:
        self.client = Client(db, max_payload=max_payload, app=app, readonly=readonly)

    @property
    def db(self) -> Any:
        """The database, resolved as `Client` resolves it."""
        return self.client.db

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection; waiting calls raise ClientClosedError."""
        await asyncio.to_thread(self.client.close)

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self.client.closed

    async def start(self, workflow: Callable[..., R] | str, input: Any = NO_INPUT, **options: Any
                    ) -> AsyncWorkflowHandle[R]:
        """Start a workflow; return its handle (see `Client.start`: `id`, `if_exists`, `queue`, … as there)."""
        start: Callable[..., WorkflowHandle[R]] = self.client.start
        handle = await asyncio.to_thread(start, workflow, input, **options)
        return AsyncWorkflowHandle(self, handle)

    def get_handle(self, workflow_id: str) -> AsyncWorkflowHandle[Any]:
        """The handle of a workflow by its id (nothing is read until it is used)."""
        return AsyncWorkflowHandle(self, self.client.get_handle(workflow_id))

    async def list(self, *args: Any, **filters: Any) -> list[WorkflowInfo]:
        """Workflows, most recently updated first (see `Client.list`: the same filters)."""
        return await asyncio.to_thread(self.client.list, *args, **filters)

    async def signal(self, workflow_id: str, name: str, payload: Any = None) -> int:
        """Send a signal to a workflow; its sequence number (see `Client.signal`)."""
        return await asyncio.to_thread(self.client.signal, workflow_id, name, payload)

    async def get_event(self, workflow_id: str, key: str, timeout: float | None = None) -> Any:
        """The latest value the workflow set under `key` (see `AsyncWorkflowHandle.get_event`)."""
        return await self.get_handle(workflow_id).get_event(key, timeout)

    async def events(self, workflow_id: str) -> dict[str, Any]:
        """Every event key the workflow set, with its latest value."""
        return await asyncio.to_thread(self.client.events, workflow_id)

    async def import_history(self, doc: dict[str, Any] | HistoryDocument, *,
                             id: str | None = None) -> AsyncWorkflowHandle[Any]:
        """Write an exported history as a new workflow; its handle (see `Client.import_history`)."""
        return AsyncWorkflowHandle(self, await asyncio.to_thread(self.client.import_history, doc, id=id))

    def filter(self, **fields: Any) -> Any:
        """The WorkflowFilter `list` and the bulk actions take (see `Client.filter`): a plain call, it reads nothing."""
        return self.client.filter(**fields)

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        # Every other operation of Client's (schedules, bulk actions, filters, prune, …), awaitable:
        # run on the executor as the ones above, a handle it returns made an AsyncWorkflowHandle.
        return _awaitable(self, getattr(self.client, name), name)

    async def _wait(self, check: Callable[[Store], T | None], timeout: float | None) -> T | None:
        """`Client._wait` for the loop: `check` after each change of the store; None after `timeout`."""
        client = self.client
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()

        def wake() -> None:  # from the store's notification thread, or a look's
            loop.call_soon_threadsafe(changed.set)

        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        client._listeners.add(wake)
        try:
            with client._waiting():
                while True:
                    await asyncio.to_thread(client._open)
                    if not client._notified:
                        await asyncio.to_thread(client._look)
                    changed.clear()
                    found = await asyncio.to_thread(client._call, check)
                    if found is not None:
                        return found
                    while not changed.is_set():
                        left = None if deadline is None else deadline - time.monotonic()
                        if left is not None and left <= 0:
                            return None
                        step = NOTIFY_SAFETY if client._notified else SQLITE_POLL
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(changed.wait(), step if left is None else min(left, step))
                        if client.closed:
                            raise ClientClosedError("this client was closed while a call waited")
                        if changed.is_set():
                            break
                        if client._notified:
                            break  # the safety look: read the workflow again
                        await asyncio.to_thread(client._look)
        finally:
            client._listeners.discard(wake)


def _awaitable(client: AsyncClient, attr: Any, name: str) -> Callable[..., Awaitable[Any]]:
    """A sync client's or handle's method as a coroutine function; anything else is refused."""
    if name.startswith("_") or not callable(attr):
        raise AttributeError(name)

    async def call(*args: Any, **kwargs: Any) -> Any:
        value = await asyncio.to_thread(attr, *args, **kwargs)
        return AsyncWorkflowHandle(client, value) if isinstance(value, WorkflowHandle) else value

    call.__name__ = name
    call.__doc__ = attr.__doc__
    return call


class AsyncWorkflowHandle(Generic[R]):
    """One workflow, by its id, for asyncio code: `WorkflowHandle`'s methods, awaitable."""

    def __init__(self, client: AsyncClient, handle: WorkflowHandle[R]) -> None:
        self._client = client
        self.handle = handle  # the sync handle underneath

    @property
    def id(self) -> str:
        """The workflow's id."""
        return self.handle.id

    def __repr__(self) -> str:
        return f"AsyncWorkflowHandle({self.id!r})"

    async def describe(self) -> WorkflowInfo:
        """The workflow as it stands now."""
        return await asyncio.to_thread(self.handle.describe)

    async def result(self, timeout: float | None = None) -> R:
        """Wait, without blocking the loop, until the workflow finishes; its result (see `WorkflowHandle.result`)."""
        row = await self._client._wait(self.handle._finished, timeout)
        return await asyncio.to_thread(self.handle._ended, row, timeout)

    async def get_event(self, key: str, timeout: float | None = None) -> Any:
        """The latest value the workflow set under `key`, waiting as `WorkflowHandle.get_event` does."""
        answer = await self._client._wait(self.handle._event_look(key, timeout), timeout)
        return None if answer is None else answer[1]

    async def events(self) -> dict[str, Any]:
        """Every event key the workflow set, with its latest value."""
        return await asyncio.to_thread(self.handle.events)

    async def signal(self, name: str, payload: Any = None) -> int:
        """Send the workflow a signal; its sequence number."""
        return await asyncio.to_thread(self.handle.signal, name, payload)

    async def approve(self, note: str | None = None, reject: bool = False, request: str | None = None) -> str:
        """Answer the approval request the workflow waits on (see `WorkflowHandle.approve`)."""
        return await asyncio.to_thread(self.handle.approve, note, reject, request)

    async def cancel(self, reason: str | None = None) -> str:
        """Ask the workflow to cancel; its status before the request."""
        return await asyncio.to_thread(self.handle.cancel, reason)

    async def terminate(self, reason: str | None = None) -> str:
        """Stop the workflow at once; its status before."""
        return await asyncio.to_thread(self.handle.terminate, reason)

    async def retry(self, *args: Any, **kwargs: Any) -> Verdict | None:
        """Set a failed workflow going again (see `WorkflowHandle.retry`)."""
        return await asyncio.to_thread(self.handle.retry, *args, **kwargs)

    async def fork(self, *args: Any, **kwargs: Any) -> AsyncWorkflowHandle[R]:
        """A new workflow from a copy of this one's first slots; its handle (see `WorkflowHandle.fork`)."""
        return AsyncWorkflowHandle(self._client, await asyncio.to_thread(self.handle.fork, *args, **kwargs))

    async def export(self) -> dict[str, Any]:
        """The workflow's whole history as one versioned JSON document."""
        return await asyncio.to_thread(self.handle.export)

    async def history(self, from_slot: int = 0, *, run: int | None = None) -> list[Slot]:
        """The recorded slots in order, from `from_slot` on, of the latest run or of run `run`
        (see `WorkflowHandle.history`)."""
        return await asyncio.to_thread(self.handle.history, from_slot, run=run)

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        # Every other operation of WorkflowHandle's, awaitable (as AsyncClient's).
        return _awaitable(self._client, getattr(self.handle, name), name)
