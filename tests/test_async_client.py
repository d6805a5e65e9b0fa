"""AsyncClient and the worker inside an application's event loop, on both backends."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import async_app
import pytest

from replaylog import AsyncClient, AsyncWorker, Worker, WorkflowCancelled, WorkflowFailed


def test_result_waits_without_blocking_the_loop(db: Path | str) -> None:
    async def main() -> list[object]:
        async with AsyncClient(db, app=async_app) as client, AsyncWorker(db, app=async_app, focus_cpu=False):
            handle = await client.start(async_app.gated)
            async def signal_later() -> None:
                # Runs only while the loop is free: the result below waits for these signals.
                while (await handle.describe()).blocked_on != "go":
                    await asyncio.sleep(0.01)
                await handle.signal("go", 1)
                while len(await handle.history()) < 2 or (await handle.describe()).status != "blocked":
                    await asyncio.sleep(0.01)
                await handle.signal("go", 2)

            sender = asyncio.create_task(signal_later())
            result = await handle.result(timeout=60)
            await sender
            return list(result)

    _started, first, value, second, later = asyncio.run(main())
    assert (first, value, second, later) == (1, 2, 2, True)


def test_a_hundred_awaited_results_hold_no_thread_and_raise_what_the_sync_handle_raises(db: Path | str) -> None:
    async def main() -> None:
        async with AsyncClient(db, app=async_app) as client:
            handles = [await client.start(async_app.gated) for _ in range(100)]
            before = threading.active_count()
            waits = [asyncio.create_task(h.result(timeout=120)) for h in handles]
            await asyncio.sleep(0.2)
            assert threading.active_count() < before + 40  # asyncio's executor at most, not one a wait
            assert not any(w.done() for w in waits)
            for h in handles:
                await h.cancel("no more")
            async with AsyncWorker(db, app=async_app, focus_cpu=False):
                for w in waits:
                    with pytest.raises(WorkflowCancelled, match="no more"):
                        await w
            failed = await client.start(async_app.sleeps_badly)
            with pytest.raises(TimeoutError, match=r"did not finish within 0\.05 s"):
                await failed.result(timeout=0.05)
            worker = Worker(db, app=async_app, focus_cpu=False)
            task = asyncio.create_task(worker.run_async())
            with pytest.raises(WorkflowFailed, match=r"asyncio\.sleep\(1\)"):
                await failed.result(timeout=60)
            assert (await client.list(status="failed"))[0].id == failed.id
            task.cancel()  # an application shutting down: the worker stops as on SIGTERM
            with pytest.raises(asyncio.CancelledError):
                await task
            assert worker.stop_requested

    asyncio.run(main())


def test_get_event_and_events_are_awaitable(db: Path | str) -> None:
    async def main() -> None:
        async with AsyncClient(db, app=async_app) as client, AsyncWorker(db, app=async_app, focus_cpu=False):
            handle = await client.start(async_app.pipeline, 2)
            assert await handle.result(timeout=60) == 8
            assert await handle.get_event("missing", timeout=None) is None  # finished: it never will be set
            assert await client.events(handle.id) == {}
            assert [s.name for s in await handle.history()] == ["double", "adouble"]
            doc = await handle.export()
            copy = await client.import_history(doc, id="copy")
            assert (await copy.describe()).status == "completed"

    asyncio.run(main())


def test_every_operation_of_the_sync_client_and_handle_is_awaitable_on_the_async_ones(db: Path | str) -> None:
    import inspect

    from replaylog import AsyncWorkflowHandle, Client, WorkflowHandle

    for sync, awaitable in ((Client, AsyncClient(db)), (WorkflowHandle, AsyncClient(db).get_handle("x"))):
        names = [n for n, member in inspect.getmembers(sync) if not n.startswith("_") and callable(member)]
        for name in names:
            if name in ("get_handle", "filter") or inspect.isclass(getattr(sync, name)):
                continue
            assert inspect.iscoroutinefunction(getattr(awaitable, name)), name

    async def main() -> None:
        async with AsyncClient(db, app=async_app) as client, AsyncWorker(db, app=async_app, focus_cpu=False):
            handle = await client.start(async_app.pipeline, 1)
            assert await handle.result(timeout=60) == 4
            assert await client.count(client.filter(status="completed")) == 1  # reached through __getattr__
            assert await handle.fork_slot(1) == 1  # WorkflowHandle's, reached through __getattr__
            forked = await handle.fork(1)
            assert isinstance(forked, AsyncWorkflowHandle) and await forked.result(timeout=60) == 4
            # The typed reads of one run, awaitable: the same records as the sync handle's.
            view = await handle.view()
            assert view.history == await handle.history(run=1) == handle.handle.history()
            assert view.runs == await handle.runs() and view.signals == await handle.signals()
            assert (await client.stats()).counts["completed"] == 2

    asyncio.run(main())
