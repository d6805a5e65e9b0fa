"""Row 13: what tracing costs workload 1 (one workflow of trivial activities), on, off and not installed.

Three worker processes (bench._tracing_proc), one per side: tracing off with OpenTelemetry
installed (the reference), tracing on with the SDK's in-memory exporter, and tracing off
with OpenTelemetry not importable. They take turns in one run, one chain each per round,
the order rotating each round so that no side always follows the same one; each round's
ratios are the side's time over the reference's time of that round, and the figure is
the median round. Targets: on within 25% of off, not installed within 2% of off.

Rounds are short and many: on a shared machine the disk's fsync rate and the load drift
within seconds, and a ratio of two runs taken seconds apart drifts less than one of runs
minutes apart. The CPU seconds of each worker run are reported beside the wall time: the
disk sets workload 1's pace, so the wall ratio says what tracing costs at the disk's
speed of the day, the CPU per slot what it costs wherever commits are cheaper.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

from bench._tracing_proc import MODES
from bench.replaylog_runs import fresh_db
from bench.sizes import Sizes

ROOT = Path(__file__).resolve().parent.parent
ON_TARGET, ABSENT_TARGET = 1.25, 1.02


def _line(out: IO[str], mode: str) -> str:
    line = out.readline()
    if not line:
        raise RuntimeError(f"the {mode} process ended without answering")
    return line


def tracing_cost(workdir: Path, sizes: Sizes) -> dict[str, Any]:
    """Workload 1 with tracing off, on (in-memory exporter) and not installed, alternated; median ratios."""
    n = sizes.tracing_slots
    procs = {mode: subprocess.Popen(
        [sys.executable, "-m", "bench._tracing_proc", mode, str(fresh_db(workdir, f"tracing-{mode}")), str(n)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for mode in MODES}
    rounds: list[dict[str, Any]] = []
    try:
        for mode, proc in procs.items():
            assert proc.stdout is not None
            if _line(proc.stdout, mode).strip() != "ready":
                raise RuntimeError(f"the {mode} process did not start")
        for r in range(sizes.tracing_rounds):
            runs: dict[str, dict[str, Any]] = {}
            for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                proc = procs[mode]
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
                runs[mode] = json.loads(_line(proc.stdout, mode))
            off = runs["off"]
            rounds.append({**{f"{mode}_{k}": v for mode, run in runs.items() for k, v in run.items()},
                           "on_ratio": runs["on"]["wall_s"] / off["wall_s"],
                           "absent_ratio": runs["absent"]["wall_s"] / off["wall_s"],
                           "on_cpu_ratio": runs["on"]["cpu_s"] / off["cpu_s"],
                           "absent_cpu_ratio": runs["absent"]["cpu_s"] / off["cpu_s"]})
    finally:
        for proc in procs.values():
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in procs.values():
            proc.wait(timeout=120)
    # Each side must have been what it claims: spans made only with tracing on (one per attempt,
    # one for the run), OpenTelemetry never loaded, nor asked for, in the other two.
    spans = {r["on_spans"] for r in rounds}
    if spans != {n + 1} or any(r["off_spans"] or r["absent_spans"] for r in rounds):
        raise RuntimeError(f"tracing on made {sorted(spans)} spans per run, not {n + 1}")
    if any(r["off_otel_loaded"] or r["absent_otel_loaded"] for r in rounds):
        raise RuntimeError("OpenTelemetry was loaded in a worker with tracing off")
    on, absent = (statistics.median(r[f"{side}_ratio"] for r in rounds) for side in ("on", "absent"))
    return {
        "slots": n, "rounds": rounds, "spans_per_run": n + 1,
        "off_slots_per_s": statistics.median(n / r["off_wall_s"] for r in rounds),
        "on_slots_per_s": statistics.median(n / r["on_wall_s"] for r in rounds),
        "absent_slots_per_s": statistics.median(n / r["absent_wall_s"] for r in rounds),
        "on_ratio": on, "absent_ratio": absent,
        "on_cpu_ratio": statistics.median(r["on_cpu_ratio"] for r in rounds),
        "absent_cpu_ratio": statistics.median(r["absent_cpu_ratio"] for r in rounds),
        # What tracing costs where no disk hides it: the worker's CPU per slot, on minus off.
        "on_cpu_us_per_slot_added": statistics.median((r["on_cpu_s"] - r["off_cpu_s"]) / n * 1e6 for r in rounds),
        "off_cpu_us_per_slot": statistics.median(r["off_cpu_s"] / n * 1e6 for r in rounds),
        "absent_otel_imports_asked": sum(r["absent_otel_imports_asked"] for r in rounds),
        "target": f"on <= {ON_TARGET}x off, not installed <= {ABSENT_TARGET}x off (time)",
        "met": on <= ON_TARGET and absent <= ABSENT_TARGET,
    }
