"""One side of the tracing-cost rows (bench.tracing_runs): a worker process that runs workload 1 when told.

Run as `python -m bench._tracing_proc MODE DB SLOTS`. MODE is one of

- `off`: OpenTelemetry installed (API and SDK), tracing off: the worker's default;
- `on`: tracing on, every span handed to the SDK's in-memory exporter through a
  SimpleSpanProcessor (the span is exported as it ends, on the worker's thread: the
  dearest way to export, so the figure bounds what a batching exporter costs);
- `absent`: tracing off in an interpreter where OpenTelemetry is not installed, as far as
  imports can tell: `sys.meta_path`'s path finder is wrapped so that it finds no
  `opentelemetry` module, and `import opentelemetry` fails with the ModuleNotFoundError
  of a package that is not there (`importlib.util.find_spec` answers None). Everything
  else is the same interpreter, the same files and the same installed packages, so the
  two sides differ in that one thing; a venv without the extra would differ in every
  package's location and in its start-up too. The wrapper counts what asked for it.

It warms its database as workload 1 does (the WAL grown past its first checkpoint, kept
open), prints "ready", then for each line "go" on stdin starts a chain of SLOTS trivial
activities, runs a worker until idle, and prints one JSON line: wall and CPU seconds of
the worker's run, spans exported, `opentelemetry` imports asked for, whether any
`opentelemetry` module is loaded. The processes of the three modes take turns (the
parent sends "go" to one at a time), so they see the same disk and the same load.
"""

from __future__ import annotations

import importlib.machinery
import json
import sys
import time
from pathlib import Path
from typing import Any

MODES = ("off", "on", "absent")


class WithoutOpenTelemetry:
    """The interpreter's path finder, blind to `opentelemetry` and its submodules; counts the asks."""

    def __init__(self, finder: Any) -> None:
        self.finder = finder
        self.asked = 0

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        """No spec for `opentelemetry…` (as if not installed); the path finder's answer for any other name."""
        if name.partition(".")[0] == "opentelemetry":
            self.asked += 1
            return None
        return self.finder.find_spec(name, path, target)

    def invalidate_caches(self) -> None:
        """Pass on to the path finder."""
        self.finder.invalidate_caches()


def hide_opentelemetry() -> WithoutOpenTelemetry:
    """Make `opentelemetry` unimportable in this interpreter, before anything imported it."""
    loaded = sorted(m for m in sys.modules if m.partition(".")[0] == "opentelemetry")
    if loaded:
        raise RuntimeError(f"OpenTelemetry was imported before it could be hidden: {loaded}")
    finder = WithoutOpenTelemetry(importlib.machinery.PathFinder)
    sys.meta_path[sys.meta_path.index(importlib.machinery.PathFinder)] = finder
    return finder


def main() -> None:
    """Serve "go" lines until stdin closes (see the module's docstring)."""
    mode, db, slots = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    if mode not in MODES:
        raise SystemExit(f"unknown mode {mode!r} (one of {', '.join(MODES)})")
    hidden = hide_opentelemetry() if mode == "absent" else None
    exporter: Any = None
    if mode == "on":
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)

    from bench.replaylog_runs import REGISTRY, _warm_engine
    from replaylog.engine.store import open_store
    from replaylog.engine.worker import Worker

    keeper = _warm_engine(db)
    print("ready", flush=True)
    try:
        for line in sys.stdin:
            if line.strip() != "go":
                break
            with open_store(db) as store:
                store.start_workflow("chain", slots)
            worker = Worker(db, REGISTRY, tracing=mode == "on")
            wall, cpu = time.perf_counter(), time.process_time()
            worker.run(until_idle=True)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if worker.completed != 1:
                raise RuntimeError(f"the {slots}-slot workflow did not complete")
            spans = 0
            if exporter is not None:
                spans = len(exporter.get_finished_spans())
                exporter.clear()
            print(json.dumps({
                "wall_s": wall, "cpu_s": cpu, "spans": spans,
                "otel_imports_asked": None if hidden is None else hidden.asked,
                "otel_loaded": any(m.partition(".")[0] == "opentelemetry" for m in sys.modules)}), flush=True)
    finally:
        keeper.close()


if __name__ == "__main__":
    main()
