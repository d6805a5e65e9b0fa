"""A worker's metrics (Prometheus), JSON log lines and OpenTelemetry spans, from real workers on real stores."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_helpers import free_port
from test_stats import filled_queues, listed_by_queue

from conftest import ROOT, cli_env, run_cli, start_worker, wait_for
from replaylog.engine.app import load_app
from replaylog.engine.store import STATUSES, open_store
from replaylog.engine.worker import Worker

APP = "telemetry_app"


def _start(db: Path | str, workflow: str, n: int, wid: str) -> None:
    result = run_cli(db, "start", workflow, str(n), "--id", wid, "--app", APP)
    assert result.returncode == 0, result.stderr


# ---------------------------------------------------------------- metrics


def _exposition(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """An exposition's samples, read with prometheus-client's own parser: (name, labels) → value."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The endpoint's samples (`_samples`)."""
    return _samples(_exposition(port))


def _metric_name(name: str) -> str:
    """A sample's or a family's name without the suffix its type adds (`_total`, `_bucket`, …)."""
    return re.sub(r"_(bucket|sum|count|created|total)$", "", name)


def test_the_metrics_endpoint_parses_and_its_counts_match_list(db_path: Path) -> None:
    for i in (1, 2):
        _start(db_path, "order", i, f"order-{i}")
    _start(db_path, "doomed", 3, "doomed-3")
    port = free_port()
    worker = subprocess.Popen(
        [sys.executable, "-m", "replaylog", "--db", str(db_path), "worker", "--quiet", "--app", APP,
         "--metrics-port", str(port)], env=cli_env(), cwd=ROOT, stdin=subprocess.DEVNULL)
    try:
        def settled() -> bool:
            statuses = [r["status"] for r in json.loads(run_cli(db_path, "list", "--json").stdout)]
            return sorted(statuses) == ["blocked", "blocked", "failed"]
        assert wait_for(settled, timeout=60)
        samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        assert wait_for(lambda: bool(samples.update(_scrape(port)) or samples), timeout=30)
        listed = json.loads(run_cli(db_path, "list", "--json").stdout)
        for status in ("pending", "running", "blocked", "completed", "failed"):
            expected = sum(1 for r in listed if r["status"] == status)
            assert samples[("replaylog_workflows", (("status", status),))] == expected, status
        # fetch ran once in each workflow; flaky three times in each order, twice it raised;
        # broken twice in doomed, both raised.
        assert samples[("replaylog_activity_attempts_total", (("activity", "fetch"),))] == 3
        assert samples[("replaylog_activity_attempts_total", (("activity", "flaky"),))] == 6
        assert samples[("replaylog_activity_failures_total", (("activity", "flaky"),))] == 4
        assert samples[("replaylog_activity_attempts_total", (("activity", "broken"),))] == 2
        assert samples[("replaylog_activity_failures_total", (("activity", "broken"),))] == 2
        with open_store(db_path, readonly=True) as store:
            slots = sum(len(store.list_commands(r["id"])) for r in listed)
        assert samples[("replaylog_slot_commit_seconds_count", ())] >= slots
        assert samples[("replaylog_claim_seconds_count", ())] >= 1
        assert samples[("replaylog_commit_batch_size_count", ())] >= 1
        assert samples[("replaylog_live_workers", ())] == 1
        assert samples[("replaylog_workflows_past_wake_time", ())] == 0
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def test_the_metrics_count_each_queues_workflows_by_status_as_list_does(db: Path | str) -> None:
    # Settled: serial holds one blocked and two queued, storm one completed.
    with filled_queues(db, metrics_port=0) as worker:
        assert worker.metrics_port
        text = _exposition(worker.metrics_port)
    samples = _samples(text)
    for name in ("serial", "storm", "per-worker", "paced"):
        listed = listed_by_queue(db, name)
        served = {dict(labels)["status"]: value for (metric, labels), value in samples.items()
                  if metric == "replaylog_queue_workflows" and dict(labels)["queue"] == name}
        assert {status: n for status, n in served.items() if n} == listed, name
        assert len(served) == len(STATUSES)
    assert samples[("replaylog_queue_workflows", (("queue", "serial"), ("status", "queued")))] == 2
    # A limit only for the queues that have one.
    limits = {dict(labels)["queue"]: value for (metric, labels), value in samples.items()
              if metric == "replaylog_queue_concurrency_limit"}
    assert limits == {"serial": 1, "storm": 4}
    # The free workflow is on no queue: only the status gauge counts it.
    assert samples[("replaylog_workflows", (("status", "blocked"),))] == 2
    # The dashboard in docs/ queries only what a worker serves (a family with no sample yet included:
    # no activity of this app fails).
    from prometheus_client.parser import text_string_to_metric_families

    dashboard = json.loads((ROOT / "docs/grafana-dashboard.json").read_text(encoding="utf-8"))
    queried = {_metric_name(name) for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"replaylog_[a-z_]+", target["expr"])}
    served_names = {_metric_name(family.name) for family in text_string_to_metric_families(text)}
    assert {"replaylog_queue_workflows", "replaylog_queue_concurrency_limit"} <= queried
    assert len(queried) >= 14 and queried <= served_names, queried - served_names


def test_a_worker_without_metrics_or_traces_imports_neither(db_path: Path) -> None:
    _start(db_path, "doomed", 1, "doomed-1")
    code = ("import sys\n"
            "from replaylog.cli import main\n"
            "try:\n"
            f"    main(['--db', {str(db_path)!r}, 'worker', '--until-idle', '--quiet', '--app', {APP!r}])\n"
            "except SystemExit:\n"
            "    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('prometheus_client', 'opentelemetry'))))\n")
    done = subprocess.run([sys.executable, "-c", code], env=cli_env(), cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr
    assert json.loads(run_cli(db_path, "list", "--json").stdout)[0]["status"] == "failed"


def test_a_metrics_port_that_is_taken_is_one_line_and_no_worker(db_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli(db_path, "worker", "--until-idle", "--metrics-port", str(port), "--app", APP)
    assert result.returncode == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}" in result.stderr


# ---------------------------------------------------------------- JSON logs


def test_json_logs_are_one_object_per_event_with_the_workflow_and_slot(db_path: Path) -> None:
    _start(db_path, "order", 1, "order-1")
    _start(db_path, "doomed", 2, "doomed-2")
    result = run_cli(db_path, "worker", "--until-idle", "--log-format", "json", "--app", APP)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines and all({"ts", "level", "workflow_id", "slot", "event", "error", "message"} <= set(x) for x in lines)
    assert lines[0]["event"] == "worker_started"
    by_event = {(x["workflow_id"], x["event"]): x for x in lines}
    blocked = by_event[("order-1", "blocked")]
    assert blocked["level"] == "info" and blocked["error"] is None
    failed = by_event[("doomed-2", "failed")]
    assert "order 2 is broken" in failed["error"] and failed["level"] == "warning"
    (logged,) = [x for x in lines if x["event"] == "log"]
    assert logged["workflow_id"] == "order-1" and logged["slot"] == 2
    assert logged["message"] == "order 1 fetched, waiting for go"
    assert "replaylog worker serving" not in result.stderr  # the start line went to stdout, as JSON


# ---------------------------------------------------------------- traces


@pytest.fixture
def spans() -> Iterator[object]:
    """An OpenTelemetry SDK provider whose in-memory exporter the test reads (the global provider is set once)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.clear()
    exporter.shutdown()


# A caller in another process: a web request's span, inside which the workflow is started.
_CALLER = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from replaylog import Client
trace.set_tracer_provider(TracerProvider())
with trace.get_tracer("web").start_as_current_span("POST /orders") as span:
    Client(sys.argv[1]).start("order", 5, id="order-5")
    print(format(span.get_span_context().trace_id, "032x"), format(span.get_span_context().span_id, "016x"))
"""


def test_spans_join_the_callers_trace_one_per_run_and_attempt_none_for_replayed_slots(
        db_path: Path, spans: object) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    assert isinstance(spans, InMemorySpanExporter)
    caller = subprocess.run([sys.executable, "-c", _CALLER, str(db_path)], env=cli_env(), cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert caller.returncode == 0, caller.stderr
    trace_id, parent_id = caller.stdout.split()
    registry = load_app(APP)
    Worker(db_path, registry, poll=0.002, tracing=True).run(until_idle=True)  # fetch, flaky ×3, blocks on go
    with open_store(db_path) as store:
        store.send_signal("order-5", "go")
    Worker(db_path, registry, poll=0.002, tracing=True).run(until_idle=True)  # replays, then fetch again
    finished = spans.get_finished_spans()
    runs = [s for s in finished if s.name == "workflow order"]
    attempts = [s for s in finished if s.name.startswith("activity ")]
    assert len(runs) == 2
    assert [(s.name, s.attributes["replaylog.slot"], s.attributes["replaylog.attempt"]) for s in attempts] == [
        ("activity fetch", 0, 1), ("activity flaky", 1, 1), ("activity flaky", 1, 2), ("activity flaky", 1, 3),
        ("activity fetch", 2, 1)]  # slots 0 and 1 replayed in the second run: no span for them
    assert [s.attributes["replaylog.status"] for s in attempts] == [
        "completed", "failed", "failed", "completed", "completed"]
    assert attempts[1].status.status_code.name == "ERROR" and "attempt 1 refused" in attempts[1].status.description
    assert [r.attributes["replaylog.status"] for r in runs] == ["blocked", "completed"]
    for s in finished:
        if s.name.startswith(("workflow ", "activity ")):
            assert format(s.context.trace_id, "032x") == trace_id  # the caller's trace, across processes
            assert s.attributes["replaylog.workflow_id"] == "order-5"
    assert {format(r.parent.span_id, "016x") for r in runs} == {parent_id}
    first, second = runs
    assert {a.parent.span_id for a in attempts[:4]} == {first.context.span_id}
    assert attempts[4].parent.span_id == second.context.span_id


def test_a_failed_workflow_records_its_error_on_its_span(db_path: Path, spans: object) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    assert isinstance(spans, InMemorySpanExporter)
    with open_store(db_path) as store:
        store.start_workflow("doomed", 7, workflow_id="doomed-7")
    Worker(db_path, load_app(APP), poll=0.002, tracing=True).run(until_idle=True)
    (run,) = [s for s in spans.get_finished_spans() if s.name == "workflow doomed"]
    assert run.attributes["replaylog.status"] == "failed" and run.status.status_code.name == "ERROR"
    assert "order 7 is broken" in run.status.description
    assert run.parent is None  # started with no trace around it: a trace of its own


def test_after_a_kill_9_the_resumed_run_makes_spans_only_for_what_runs_live(
        db_path: Path, tmp_path: Path, spans: object) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    assert isinstance(spans, InMemorySpanExporter)
    with open_store(db_path) as store:
        store.start_workflow("steps", 8, workflow_id="steps-8")
    env = cli_env(REPLAYLOG_TEST_LEDGER=str(tmp_path / "ledger"), REPLAYLOG_TEST_STEP_SECONDS="0.3")
    worker = start_worker(db_path, "--app", "worker_app", env=env)

    def recorded() -> int:
        with open_store(db_path, readonly=True) as store:
            return len(store.list_commands("steps-8"))
    try:
        assert wait_for(lambda: recorded() >= 3, timeout=60)
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    before = recorded()
    os.environ["REPLAYLOG_TEST_LEDGER"] = str(tmp_path / "ledger")
    try:
        Worker(db_path, load_app("worker_app"), poll=0.002, ttl=1.0, tracing=True).run(until_idle=True)
    finally:
        del os.environ["REPLAYLOG_TEST_LEDGER"]
    assert recorded() == 8
    attempts = [s for s in spans.get_finished_spans() if s.name == "activity step"]
    slots = sorted(s.attributes["replaylog.slot"] for s in attempts)
    assert slots == list(range(before, 8))  # the recorded prefix replayed: no span for it
    (run,) = [s for s in spans.get_finished_spans() if s.name == "workflow steps"]
    assert run.attributes["replaylog.status"] == "completed"


def test_an_async_attempt_makes_one_span_and_one_count_across_the_runs_that_await_it(
        db_path: Path, spans: object) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from replaylog.engine.telemetry import Metrics

    assert isinstance(spans, InMemorySpanExporter)
    with open_store(db_path) as store:
        store.start_workflow("aorder", 4, workflow_id="aorder-4")
    metrics = Metrics(db_path)
    # Each aflaky attempt suspends the run; the next run collects it (and replays the failed ones before it).
    Worker(db_path, load_app(APP), poll=0.002, tracing=True, metrics=metrics).run(until_idle=True)
    with open_store(db_path, readonly=True) as store:
        row = store.get_workflow("aorder-4")
    assert (row.status, row.result) == ("completed", 12), row.error
    finished = spans.get_finished_spans()
    attempts = [(s.name, s.attributes["replaylog.slot"], s.attributes["replaylog.attempt"],
                 s.attributes["replaylog.status"]) for s in finished if s.name.startswith("activity ")]
    assert attempts == [("activity aflaky", 0, 1, "failed"), ("activity aflaky", 0, 2, "failed"),
                        ("activity aflaky", 0, 3, "completed"), ("activity fetch", 1, 1, "completed")]
    runs = {s.context.span_id: s for s in finished if s.name == "workflow aorder"}
    assert [runs[s.parent.span_id].attributes["replaylog.status"] for s in finished
            if s.name.startswith("activity ")] == ["suspended", "suspended", "suspended", "completed"]
    count = metrics.registry.get_sample_value
    assert count("replaylog_activity_attempts_total", {"activity": "aflaky"}) == 3
    assert count("replaylog_activity_failures_total", {"activity": "aflaky"}) == 2
