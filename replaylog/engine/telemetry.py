"""What a worker tells the outside besides its store: Prometheus metrics, JSON log lines, OpenTelemetry spans.

Each is off unless asked for (`replaylog worker --metrics-port N --log-format json`,
`Worker(metrics=…, tracing=…)`), and off it costs the worker one `is None` test at each
hook: prometheus-client and OpenTelemetry are imported only when they are on.

Metrics go through prometheus-client rather than hand-written text: its histograms are
thread-safe without a lock of ours on the slot path, its exposition format (and the
OpenMetrics one, by content negotiation) is the one Prometheus parses, and its parser is
what the tests read the endpoint with. The store's numbers (`replaylog stats`) are read
at each scrape, not kept up to date by the worker.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from replaylog.engine.store import open_store
from replaylog.engine.text import utc

if TYPE_CHECKING:  # prometheus-client is imported only when metrics are on
    from prometheus_client.metrics_core import Metric

# Slot commit and claim latencies: a commit is ~1-10 ms on a local disk, longer under load.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    """A worker's Prometheus metrics, and the store's numbers read at each scrape.

    Args:
        db: the database the worker runs (a path or a URL), read by each scrape for the
            `replaylog stats` numbers.
    """

    def __init__(self, db: str | os.PathLike[str]) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Histogram
        except ImportError:
            raise ImportError("worker metrics need prometheus-client: pip install 'replaylog[metrics]'") from None
        self.db = db
        self.registry = CollectorRegistry()
        self.slot_commit = Histogram(
            "replaylog_slot_commit_seconds", "From a slot's outcome to its commit being durable (group commit too).",
            buckets=LATENCY_BUCKETS, registry=self.registry)
        self.claim = Histogram("replaylog_claim_seconds", "One claim of runnable workflows (a store round trip).",
                               buckets=LATENCY_BUCKETS, registry=self.registry)
        self.batch = Histogram("replaylog_commit_batch_size", "Records (slots and outcomes) per group commit.",
                               buckets=BATCH_BUCKETS, registry=self.registry)
        self.attempts = Counter("replaylog_activity_attempts", "Live activity attempts, by activity name.",
                                ["activity"], registry=self.registry)
        self.failures = Counter("replaylog_activity_failures", "Activity attempts that raised, by activity name.",
                                ["activity"], registry=self.registry)
        self.registry.register(_StoreCollector(db))
        self._server: Any = None

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve /metrics over HTTP on a daemon thread; the port it listens on (0 picks a free one)."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        return int(server.server_port)

    def close(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def attempt_ended(self, name: str, failed: bool) -> None:
        """Count one live attempt of activity `name`, and whether it raised."""
        self.attempts.labels(name).inc()
        if failed:
            self.failures.labels(name).inc()


class _StoreCollector:
    """The `replaylog stats` numbers as gauges, read from the store at each scrape."""

    def __init__(self, db: str | os.PathLike[str]) -> None:
        self.db = db

    def describe(self) -> list[Metric]:
        """Nothing up front: the registry must not read the store when this is registered."""
        return []

    def collect(self) -> Iterator[Metric]:
        """One snapshot of the store, as gauges."""
        from prometheus_client.core import GaugeMetricFamily

        with open_store(self.db, readonly=True) as store:
            st = store.stats()
        by_status = GaugeMetricFamily("replaylog_workflows", "Workflows by status.", labels=["status"])
        for status, n in st.counts.items():
            by_status.add_metric([status], n)
        yield by_status
        # Workflows of no queue are only in replaylog_workflows; a queue with no limit has no limit gauge.
        by_queue = GaugeMetricFamily("replaylog_queue_workflows", "Workflows on each queue, by status.",
                                     labels=["queue", "status"])
        limits = GaugeMetricFamily("replaylog_queue_concurrency_limit",
                                   "Each queue's concurrency: its workflows admitted and not finished, at most.",
                                   labels=["queue"])
        for q in st.queues:
            for status, n in q.counts.items():
                by_queue.add_metric([q.name, status], n)
            if q.concurrency is not None:
                limits.add_metric([q.name], q.concurrency)
        yield by_queue
        yield limits
        for name, text, value in (
                ("replaylog_oldest_pending_age_seconds", "How long the longest-waiting pending workflow has waited.",
                 0.0 if st.oldest_pending is None else st.at - st.oldest_pending),
                ("replaylog_oldest_blocked_age_seconds", "How long the longest-blocked workflow has waited.",
                 0.0 if st.oldest_blocked is None else st.at - st.oldest_blocked),
                ("replaylog_workflows_past_wake_time", "Blocked workflows whose timer or deadline has passed.",
                 float(st.overdue)),
                ("replaylog_slots_committed_per_second", "Slots recorded per second over the last minute.",
                 st.slots_per_second),
                ("replaylog_live_workers", "Workers that stamped their row within three lease lengths.",
                 float(len(st.workers)))):
            yield GaugeMetricFamily(name, text, value=value)
        heartbeat = GaugeMetricFamily("replaylog_worker_last_heartbeat_timestamp_seconds",
                                      "Each live worker's last heartbeat (epoch seconds).", labels=["owner", "host"])
        for w in st.workers:
            heartbeat.add_metric([w.owner, w.host], w.seen_at)
        yield heartbeat


class JsonLines(logging.Formatter):
    """One JSON object per record, for log shippers: ts, level, workflow_id, slot, event, error, message.

    `workflow_id`, `slot`, `event` and `error` come from the record's attributes (a
    worker's events and `ctx.logger` set them; null where a record has none); an
    exception's text is the error when the record has no error of its own.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        error = getattr(record, "error", None)
        if error is None and record.exc_info:
            error = self.formatException(record.exc_info)
        line = {
            "ts": record.created,
            "time": utc(record.created, "iso"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "workflow_id": getattr(record, "workflow_id", None),
            "slot": getattr(record, "slot", None),
            "event": getattr(record, "event", None) or "log",
            "error": error,
            "message": record.getMessage(),
        }
        return json.dumps(line, ensure_ascii=False, default=str)


def trace_context_now() -> str | None:
    """The active OpenTelemetry trace context as JSON text (W3C headers), to store with a workflow's start.

    None when no span is active, or when the application never imported OpenTelemetry
    (then no span can be active, and nothing is imported here either).
    """
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry.propagate import inject

    carrier: dict[str, str] = {}
    inject(carrier)
    return json.dumps(carrier, sort_keys=True) if "traceparent" in carrier else None


class Tracing:
    """OpenTelemetry spans of a worker: one per workflow run, one per live activity attempt.

    Needs opentelemetry-api (`pip install 'replaylog[otel]'`); the application configures
    the tracer provider and its exporter, as with any instrumented library. Replayed slots
    make no span: only live attempts reach `RunSpans.attempt_started`.

    An async activity's attempt outlives the run that started it (the run suspends while
    the attempt runs on the worker's event loop): its span is carried to the workflow's
    next run, which ends it with the attempt's outcome. So each attempt has one span,
    a child of the run that started it.
    """

    def __init__(self) -> None:
        try:
            from opentelemetry import trace
        except ImportError:
            raise ImportError("worker traces need opentelemetry-api: pip install 'replaylog[otel]'") from None
        self.tracer = trace.get_tracer("replaylog")
        # By workflow id: the open attempt spans of its run that suspended, for its next run.
        self._carried: dict[str, dict[tuple[int, int], Any]] = {}
        self._lock = threading.Lock()

    def run(self, workflow_id: str, workflow: str, stored_context: str | None) -> RunSpans:
        """Start the span of one run of a workflow, a child of the trace it was started in (if stored)."""
        from opentelemetry import context as otel_context
        from opentelemetry.propagate import extract

        parent = extract(json.loads(stored_context)) if stored_context else otel_context.Context()
        span = self.tracer.start_span(f"workflow {workflow}", context=parent,
                                      attributes={"replaylog.workflow_id": workflow_id})
        with self._lock:
            carried = self._carried.pop(workflow_id, {})
        return RunSpans(self, span, workflow_id, carried)

    def carry(self, workflow_id: str, spans: dict[tuple[int, int], Any]) -> None:
        """Keep a suspended run's open attempt spans for the workflow's next run."""
        with self._lock:
            self._carried.setdefault(workflow_id, {}).update(spans)

    def close(self) -> None:
        """End the spans carried for runs that never came (the worker stopped): interrupted."""
        with self._lock:
            left, self._carried = self._carried, {}
        for spans in left.values():
            for span in spans.values():
                _end(span, "interrupted", None)


class RunSpans:
    """The spans of one workflow run: the run's, and one per activity attempt under it (thread-safe)."""

    def __init__(self, tracing: Tracing, span: Any, workflow_id: str,
                 carried: dict[tuple[int, int], Any] | None = None) -> None:
        from opentelemetry import trace

        self.tracing = tracing
        self.tracer = tracing.tracer
        self.span = span
        self.workflow_id = workflow_id
        self._parent = trace.set_span_in_context(span)
        # Open attempt spans by (slot, attempt); those of async attempts a suspended run started come carried.
        self._open: dict[tuple[int, int], Any] = dict(carried or {})
        self._lock = threading.Lock()

    def attempt_started(self, slot: int, name: str, attempt: int) -> None:
        """A live attempt of activity `name` at `slot` begins (its span comes carried if an earlier run started it)."""
        with self._lock:
            if (slot, attempt) in self._open:
                return
        span = self.tracer.start_span(f"activity {name}", context=self._parent, attributes={
            "replaylog.workflow_id": self.workflow_id, "replaylog.slot": slot, "replaylog.attempt": attempt})
        with self._lock:
            self._open[(slot, attempt)] = span

    def attempt_ended(self, slot: int, attempt: int, error: str | None) -> None:
        """The attempt returned (error None) or raised (its error text)."""
        with self._lock:
            span = self._open.pop((slot, attempt), None)
        if span is not None:
            _end(span, "failed" if error is not None else "completed", error)

    def end(self, status: str, error: str | None = None) -> None:
        """The run ended: `status` is the workflow's (completed, blocked, failed, …) or why the run stopped.

        A run "suspended" on async activities hands its open attempt spans to the workflow's next run.
        """
        with self._lock:
            left, self._open = self._open, {}
        if status == "suspended":
            self.tracing.carry(self.workflow_id, left)
        else:
            for span in left.values():  # attempts the run's end cut short (a worker stopping, a lost lease)
                _end(span, "interrupted", None)
        _end(self.span, status, error if status == "failed" else None)


def _end(span: Any, status: str, error: str | None) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("replaylog.status", status)
    if error is not None:
        span.add_event("exception", {"exception.message": error})
        span.set_status(Status(StatusCode.ERROR, error.splitlines()[0] if error else None))
    span.end()
