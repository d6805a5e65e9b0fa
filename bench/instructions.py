"""CPU instructions per slot, counted by valgrind: the engine's per-slot path against the floor's commit.

`python -m bench.instructions` (`make bench-instructions`). Timings on these shared
machines drift by more than the changes worth making to the slot path, but the number
of instructions a slot executes is the same from run to run (within a few hundred, from
the worker's idle loop and the cyclic collector) whatever else the machine is doing. On
the disks here each 1,000 instructions of a lone workflow's slot cost about 0.002 of
workload 1's ratio (README, Performance), so this is the figure to watch while working
on the slot path.

Each kind is run twice under `valgrind --tool=callgrind` with N and 3N slots (or floor
commits); the difference divided by 2N leaves out start-up and imports. Only user-space
instructions are counted: system calls (fsync, file locks) are not, and neither is the
disk.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

KINDS = ("floor", "engine", "engine-no-marks")


def _child(kind: str, n: int, workdir: Path) -> None:
    """Run `n` slots (or floor commits) of `kind` in this process: what valgrind counts."""
    from bench.floor import commit_row, open_floor
    from bench.replaylog_runs import REGISTRY, fresh_db
    from replaylog.engine.store import open_store
    from replaylog.engine.worker import Worker

    if kind == "floor":
        conn = open_floor(fresh_db(workdir, "floor"))
        for i in range(n):
            commit_row(conn, i)
        conn.close()
        return
    db = fresh_db(workdir, kind)
    with open_store(db) as store:
        store.start_workflow("chain", n)
    worker = Worker(db, REGISTRY, track_inflight=kind == "engine")
    worker.run(until_idle=True)
    if worker.completed != 1:
        raise SystemExit(f"the {n}-slot workflow did not complete")


def _count(valgrind: str, kind: str, n: int, workdir: Path) -> int:
    proc = subprocess.run(
        [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m", "bench.instructions",
         "--child", kind, str(n), str(workdir)],
        capture_output=True, text=True, check=False,
    )
    found = re.search(r"Collected\s*:\s*(\d+)", proc.stderr)
    if proc.returncode != 0 or found is None:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise SystemExit(f"valgrind run of {kind} ({n}) failed (exit {proc.returncode}):\n{tail}")
    return int(found.group(1))


def measure(slots: int, kinds: tuple[str, ...] = KINDS) -> dict[str, Any]:
    """Instructions per slot (per commit for the floor) of each kind, and the engine's against the floor's."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    out: dict[str, Any] = {"slots": slots}
    with tempfile.TemporaryDirectory(prefix="replaylog-instructions-") as tmp:
        for kind in kinds:
            small = _count(valgrind, kind, slots, Path(tmp))
            large = _count(valgrind, kind, 3 * slots, Path(tmp))
            out[kind] = round((large - small) / (2 * slots))
    if "floor" in out and "engine" in out:
        out["engine_vs_floor"] = round(out["engine"] / out["floor"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    """Print (and optionally save) instructions per slot of the engine and of the floor."""
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=2000, help="N: runs of N and 3N slots (default 2000)")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--child", nargs=3, metavar=("KIND", "N", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, n, workdir = args.child
        _child(kind, int(n), Path(workdir))
        return 0
    if args.slots < 1:
        parser.error("--slots must be at least 1")
    figures = measure(args.slots)
    for kind in KINDS:
        what = "a commit" if kind == "floor" else "a slot"
        print(f"{kind:16s} {figures[kind]:>8,} instructions {what}")
    print(f"engine / floor   {figures['engine_vs_floor']:>8}")
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
