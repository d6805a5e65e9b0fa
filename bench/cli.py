"""The bench's command line: pick workloads and sizes, run them, print and save the report."""

from __future__ import annotations

import argparse
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from bench import (
    async_runs,
    client_runs,
    console_runs,
    peer_dbos,
    postgres_runs,
    queue_runs,
    replaylog_runs,
    retention_runs,
    timer_runs,
    tracing_runs,
)
from bench.report import print_table, write_json
from bench.sizes import FULL, SMOKE, Sizes

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = (
    "single", "group", "resume", "signal", "short", "queues", "prune", "timers", "sleepers", "wake", "async",
    "tracing", "console",
    "postgres",
    "peer",
)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    return {"nproc": os.cpu_count(), "cpu": cpu, "platform": platform.platform(),
            "python": platform.python_version(), "sqlite": sqlite3.sqlite_version}


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The options."""
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks the suite works, in seconds")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON output path (default bench/results/bench-<mode>-<UTC time>.json)")
    p.add_argument("--only", default=",".join(WORKLOADS),
                   help=f"comma-separated workloads to run (default all: {','.join(WORKLOADS)})")
    p.add_argument("--no-peer", action="store_true", help="skip DBOS even if it is installed")
    p.add_argument("--workdir", type=Path, default=None,
                   help="where the benchmark databases go (default a fresh folder in the system temp dir;"
                        " the console's "
                        "million-row database is cached in bench/results/ in full runs)")
    return p.parse_args(argv)


def default_workdir() -> Path:
    """A fresh folder for the run's databases (and PostgreSQL's data folder) in the system temp dir.

    Never inside the repository: a run that is killed leaves its folder behind, and one
    under bench/ was once committed whole (thousands of PostgreSQL data files). To measure
    another disk than the temp dir's (a tmpfs /tmp, say), pass --workdir.
    """
    return Path(tempfile.mkdtemp(prefix="replaylog-bench-"))


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Run the chosen workloads; a failure in one is recorded and the rest still run."""
    sizes: Sizes = SMOKE if args.smoke else FULL
    only = {w.strip() for w in args.only.split(",") if w.strip()}
    unknown = only - set(WORKLOADS)
    if unknown:
        raise SystemExit(f"unknown workload(s): {', '.join(sorted(unknown))}")
    own_tmp = args.workdir is None
    workdir = default_workdir() if own_tmp else args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    # The console workload caches its million-row database here; a fresh clone has no such folder.
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "meta": {"mode": "smoke" if args.smoke else "full", "started": datetime.now(UTC).isoformat(),
                 "machine": machine(), "sizes": sizes.to_dict(), "workdir": str(workdir)},
        "measurements": {},
    }
    postgres_runs.PEER = not args.no_peer
    jobs: dict[str, Callable[[], dict[str, Any]]] = {
        "single": lambda: replaylog_runs.single(workdir, sizes),
        "group": lambda: replaylog_runs.group(workdir, sizes),
        "resume": lambda: replaylog_runs.resume(workdir, sizes),
        "signal": lambda: replaylog_runs.signal_latency(workdir, sizes),
        "short": lambda: replaylog_runs.short(workdir, sizes),
        "queues": lambda: queue_runs.queues(workdir, sizes),
        "prune": lambda: retention_runs.retention(workdir, sizes),
        "timers": lambda: timer_runs.precision(workdir, sizes),
        "sleepers": lambda: timer_runs.sleepers(workdir, sizes),
        "wake": lambda: client_runs.result_wakeup(workdir, sizes),
        "async": lambda: async_runs.async_bench(workdir, sizes),
        "tracing": lambda: tracing_runs.tracing_cost(workdir, sizes),
        "console": lambda: console_runs.console_bench(
            workdir if args.smoke or not own_tmp else ROOT / "bench" / "results", sizes),
        "postgres": lambda: postgres_runs.postgres(workdir, sizes),
    }
    try:
        for name, job in jobs.items():
            if name not in only:
                continue
            console.print(f"[bold]{name}[/bold] …")
            t0 = time.perf_counter()
            try:
                figure = job()
                figure.setdefault("status", "ok")
            except Exception as exc:  # noqa: BLE001 - one broken workload must not hide the others
                traceback.print_exc()
                figure = {"status": "error", "error": f"{type(exc).__name__}: {exc}", "met": False}
            figure["wall_s"] = time.perf_counter() - t0
            results["measurements"][name] = figure
            console.print(f"  {name}: {figure.get('status')} in {figure['wall_s']:.1f} s")
        if "peer" in only:
            if args.no_peer:
                results["measurements"]["peer"] = {"status": "skipped", "note": "--no-peer given"}
            elif not peer_dbos.available():
                results["measurements"]["peer"] = {
                    "status": "skipped", "note": "DBOS is not installed (pip install -e '.[peer]')"}
            else:
                console.print("[bold]peer (DBOS)[/bold] …")
                t0 = time.perf_counter()
                peer = peer_dbos.run_peer(workdir, sizes, only | set(WORKLOADS[:5]) if only == {"peer"} else only)
                peer["status"] = "ok"
                peer["wall_s"] = time.perf_counter() - t0
                results["measurements"]["peer"] = peer
                _add_ratios(results["measurements"])
                console.print(f"  peer: done in {peer['wall_s']:.1f} s")
    finally:
        if own_tmp:
            shutil.rmtree(workdir, ignore_errors=True)
    results["meta"]["finished"] = datetime.now(UTC).isoformat()
    return results


def _add_ratios(m: dict[str, Any]) -> None:
    """replaylog ÷ DBOS per workload (for latency, DBOS ÷ replaylog): above 1, replaylog is ahead."""
    peer = m["peer"]
    pairs = {"single": ("slots_per_s", "slots_per_s", False), "group": ("slots_per_s", "slots_per_s", False),
             # DBOS reads each recorded step as it replays it, so its replay rate is set
             # against replaylog's load *and* replay.
             "resume": ("load_and_replay_slots_per_s", "replay_slots_per_s", False),
             "signal": ("median_ms", "median_ms", True), "short": ("workflows_per_s_1p", "workflows_per_s_1p", False)}
    ratios = {}
    for key, (ours_f, theirs_f, lower) in pairs.items():
        ours, theirs = m.get(key, {}).get(ours_f), (peer.get(key) or {}).get(theirs_f)
        if ours and theirs:
            ratios[key] = theirs / ours if lower else ours / theirs
    peer["replaylog_advantage"] = ratios


def main(argv: list[str] | None = None) -> None:
    """Entry point of `python -m bench`."""
    args = parse(argv)
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # piped into a file or CI log: do not wrap the table to 80
    results = run(args, console)
    out = args.out or ROOT / "bench" / "results" / (
        f"bench-{results['meta']['mode']}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json")
    write_json(results, out)
    print_table(results, console)
    console.print(f"JSON written to {out}")
    failed = [k for k, v in results["measurements"].items() if v.get("status") == "error"]
    if failed:
        console.print(f"[red]workloads that failed to run: {', '.join(failed)}[/red]")
        sys.exit(1)


if __name__ == "__main__":
    main()
