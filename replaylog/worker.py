"""The embedded worker: run an application's workflows inside the application.

    from replaylog import Worker

    with Worker("app.db", app=[order_workflow, charge, ship]):
        serve_http()            # workflows run in background threads meanwhile

    Worker("app.db", app="myapp.workflows").run()   # or block, as `replaylog worker` does

The engine's worker (`replaylog.engine.worker`) does the work; this is its public face:
the database and the app resolved as the command line resolves them, a missing database
created, stopping on SIGTERM/SIGINT when it runs on the main thread, and a `with` block
that stops it the way SIGTERM does when the block ends.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from replaylog.client import AppLike, app_registry, resolve_db
from replaylog.engine.core import DEFAULT_MAX_SLOTS
from replaylog.engine.store import default_max_payload, open_store
from replaylog.engine.telemetry import Metrics
from replaylog.engine.worker import DEFAULT_LEASE_TTL
from replaylog.engine.worker import Worker as EngineWorker

__all__ = ["AsyncWorker", "Worker"]

# asyncio is imported inside the `async` methods, which run only on an event loop that has
# already loaded it: `import replaylog` (and the `replaylog worker` of a sync app) skips its
# ~40 ms import (-X importtime).

# How often `run_async` looks whether the worker's thread has ended (a worker stopped by
# `stop()` from elsewhere, or by a damaged database): a look costs nothing on the loop.
RUN_ASYNC_LOOK = 0.1


class Worker:
    """Runs every runnable workflow of one database with the functions of one app.

    Args:
        db: a SQLite file path, a `sqlite:///path` URL or a `postgresql://` URL; else
            $REPLAYLOG_DB, else ./replaylog.db. A database that does not exist yet is
            created (as `replaylog worker --create`).
        app: the workflows and activities: a module, an import string or .py path (as
            `--app`), or a list of @workflow and @activity functions.
        concurrency: workflows run at once (one thread each).
        lease: lease length in seconds (renewed while a workflow runs).
        max_payload: the cap in bytes on every value recorded (else $REPLAYLOG_MAX_PAYLOAD,
            else 1 MiB).
        track_inflight: record that an activity started before running it.
        focus_cpu: while commits are crowded, run engine code on one CPU (docs/performance.md).
        on_event: called with (workflow id, event text) as workflows start, block and finish.
        metrics_port: serve Prometheus metrics on http://metrics_host:PORT/metrics while it
            runs (0 picks a free port: see `metrics_port` after start); needs the `metrics`
            extra. None: no metrics, and prometheus-client is never imported.
        metrics_host: the address the metrics port binds.
        tracing: an OpenTelemetry span per workflow run and per activity attempt, through
            the tracer provider the application configured; needs the `otel` extra.
        max_slots: the most slots one run's history may hold (default 50,000): a workflow that
            passes it fails, told to use `ctx.continue_as_new`; None: no cap.

    `run()` blocks until stopped; `with Worker(...):` runs it in background threads for the
    length of the block. On stopping (SIGTERM, SIGINT, `stop()` or the end of the block)
    each workflow finishes its current slot and is handed back: nothing recorded runs
    again. A Worker runs once.
    """

    def __init__(self, db: str | os.PathLike[str] | None = None, *, app: AppLike, concurrency: int = 64,
                 lease: float = DEFAULT_LEASE_TTL, max_payload: int | None = None, track_inflight: bool = True,
                 focus_cpu: bool = True, on_event: Callable[[str, str], None] | None = None,
                 clock: Callable[[], float] = time.time, metrics_port: int | None = None,
                 metrics_host: str = "127.0.0.1", tracing: bool = False,
                 max_slots: int | None = DEFAULT_MAX_SLOTS) -> None:
        self.db = resolve_db(db)
        self.registry = app_registry(app)
        self.max_payload = max_payload if max_payload is not None else default_max_payload()
        self._metrics = None if metrics_port is None else Metrics(self.db)
        self._metrics_at = (metrics_host, metrics_port or 0)
        self.metrics_port: int | None = None  # the port metrics are served on, once started
        self._engine = EngineWorker(self.db, self.registry, concurrency=concurrency, ttl=lease,
                                    track_inflight=track_inflight, focus_cpu=focus_cpu, clock=clock,
                                    max_payload=self.max_payload, on_event=on_event, metrics=self._metrics,
                                    tracing=tracing, max_slots=max_slots)
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._ran = False

    @property
    def left_unknown(self) -> dict[str, int]:
        """After `run(until_idle=True)`: the pending workflows left because this app lacks their names."""
        return self._engine.left_unknown

    @property
    def stop_requested(self) -> bool:
        """True once a stop was asked for (a signal, `stop()`, the end of a `with` block)."""
        return self._engine.stop_requested

    def _prepare(self) -> None:
        if self._ran:
            raise RuntimeError("a Worker runs once: make a new one")
        self._ran = True
        # Create a missing database and fail here, in the caller's thread, on a bad one.
        open_store(self.db, max_payload=self.max_payload).close()
        if self._metrics is not None:
            host, port = self._metrics_at
            self.metrics_port = self._metrics.serve(port, host)

    def _done(self) -> None:
        if self._metrics is not None:
            self._metrics.close()

    def run(self, *, until_idle: bool = False) -> None:
        """Serve until stopped; with `until_idle`, until nothing this app knows is pending or running.

        On the main thread, SIGTERM and SIGINT stop it (a second one leaves at once; the
        leases then lapse on their own) and the previous handlers are restored after.
        """
        self._prepare()
        if threading.current_thread() is not threading.main_thread():
            try:
                self._engine.run(until_idle=until_idle)
            finally:
                self._done()
            return
        engine = self._engine

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            if engine.stop_requested:
                os._exit(128 + signum)  # a second signal: leave now, leases lapse on their own
            engine.request_stop()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            engine.run(until_idle=until_idle)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._done()

    def start(self) -> None:
        """Run in background threads; return at once (`stop()` ends it)."""
        self._prepare()

        def serve() -> None:
            try:
                self._engine.run()
            except BaseException as exc:  # noqa: BLE001 - kept for stop() to raise in the caller's thread
                self._failure = exc

        self._thread = threading.Thread(target=serve, name="replaylog-worker", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop as SIGTERM does and wait for it: current slots finish, workflows are handed back.

        Raises what stopped the background worker early, if anything did (a damaged database, say).
        """
        self._engine.stop()
        if self._thread is not None:
            self._thread.join(timeout)
        self._done()
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def __enter__(self) -> Worker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- inside an application's event loop

    async def run_async(self) -> None:
        """Serve until stopped or cancelled, from a coroutine: the loop is never blocked.

        The worker runs in its background threads (and its async activities on its own
        event loop), as `start()` runs it; this coroutine waits for it. Cancelling the
        task that awaits it (an application shutting down) stops the worker as SIGTERM
        does, waits for that without blocking the loop, and re-raises CancelledError.
        """
        import asyncio

        await asyncio.to_thread(self.start)
        thread = self._thread
        assert thread is not None
        try:
            while thread.is_alive():
                await asyncio.sleep(RUN_ASYNC_LOOK)
        except asyncio.CancelledError:
            await asyncio.to_thread(self.stop)
            raise
        await asyncio.to_thread(self.stop)  # raises what stopped it early, if anything did

    async def __aenter__(self) -> Worker:
        """`async with Worker(...)`: run in background threads for the block, started without blocking the loop."""
        import asyncio

        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Stop as SIGTERM does, waiting without blocking the loop."""
        import asyncio

        await asyncio.to_thread(self.stop)


# The worker for asyncio applications is the same class: `async with AsyncWorker(...)` and
# `await worker.run_async()` work on any Worker.
AsyncWorker = Worker
