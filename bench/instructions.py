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

The core row is the Context alone (`Context.call_activity` live, each outcome handed to a
`record` that does nothing): the part of a slot that is the engine's core, without the
worker, the committer or the store (docs/performance.md, "The cost of a slot, by stage").

The compiled paths (the SQLite store's, engine.store.sqlite.speedups; the mark writer's; the
per-slot modules compiled by mypyc, engine.native: the core's cursor, the worker's run and
committer) are counted where they are built;
`REPLAYLOG_PURE_PYTHON=1 python -m bench.instructions` counts the pure-Python path.

The resume row is counted the same way on histories of 5N and 15N slots (10,000 and
30,000 by default, built first outside valgrind): loading a history (`load_state`, what a
worker does after a claim) and replaying it in the core up to the wait it blocked on.

The short-store row is workload 5's store part, a figure per workflow: N/4 and 3N/4
started three-slot workflows (built outside valgrind) claimed 16 at a time, their slots
committed as batches of 16 and then their verdicts as one batch, on one connection and one
thread (the worker's threads and committer are left out: their interleaving under valgrind
changes the batches from run to run).
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

KINDS = ("floor", "engine", "engine-no-marks", "core")
# Loading a history, and loading then replaying it (the replay is their difference).
RESUME_KINDS = ("resume-load", "resume-load-replay")
# The resume row's histories are this many times N slots long (and three times that).
RESUME_FACTOR = 5
_RESUME_ID = "resume"
# The short-store row: N // SHORT_DIVISOR three-slot workflows (and three times that), claimed
# and committed SHORT_BATCH at a time.
SHORT_KIND = "short-store"
SHORT_DIVISOR = 4
SHORT_BATCH = 16


def _short_db(workdir: Path, n: int) -> Path:
    return workdir / f"short-store-{n}.db"


def build_short(workdir: Path, n: int) -> None:
    """`n` started three-slot workflows, in their own database (not counted)."""
    from bench.replaylog_runs import fresh_db
    from replaylog.engine.store import open_store

    with open_store(fresh_db(workdir, f"short-store-{n}")) as store:
        for _ in range(n):
            store.start_workflow("chain", 3)


def _short_child(n: int, workdir: Path) -> None:
    """Claim, commit three slots and the verdict of `n` workflows, SHORT_BATCH at a time, as a worker's store would."""
    from bench.replaylog_runs import REGISTRY
    from replaylog.engine.core import CommandRecord, Outcome
    from replaylog.engine.store import PendingRecord, open_store
    from replaylog.engine.vocab import Status

    names = frozenset(REGISTRY.workflows)
    done = 0
    with open_store(_short_db(workdir, n)) as store:
        while claims := store.claim("bench", ttl=30, limit=SHORT_BATCH, names=names):
            for slot in range(3):
                written, _ = store.commit_batch(
                    [PendingRecord(c, slot, CommandRecord("activity", "step", True, slot, None, 1, f"[{slot}]"))
                     for c in claims], ttl=30)
                if not all(written):
                    raise SystemExit(f"slot {slot} of a short workflow was refused")
            _, finished = store.commit_batch(finishes=[(c, Outcome(Status.COMPLETED, result=3)) for c in claims],
                                             ttl=30)
            done += sum(finished)
    if done != n:
        raise SystemExit(f"{done} of {n} short workflows completed")


def _resume_db(workdir: Path, n: int) -> Path:
    return workdir / f"resume-{n}.db"


def build_history(workdir: Path, n: int) -> None:
    """A workflow that recorded `n` slots and blocked on a signal, in its own database (not counted)."""
    from bench.replaylog_runs import REGISTRY, fresh_db
    from replaylog.engine.store import open_store
    from replaylog.engine.worker import Worker

    db = fresh_db(workdir, f"resume-{n}")
    with open_store(db) as store:
        store.start_workflow("resumable", n, workflow_id=_RESUME_ID)
    Worker(db, REGISTRY).run(until_idle=True)
    with open_store(db) as store:
        row = store.get_workflow(_RESUME_ID)
    if row.status != "blocked" or row.slots != n:
        raise SystemExit(f"the resume history is {row.status} with {row.slots} slots, not blocked after {n}")


def _resume_child(kind: str, n: int, workdir: Path) -> None:
    import time

    from bench.replaylog_runs import REGISTRY
    from replaylog.engine.core import Context, execute
    from replaylog.engine.store import open_store

    with open_store(_resume_db(workdir, n)) as store:
        state = store.load_state(_RESUME_ID)
    if len(state.commands) != n:
        raise SystemExit(f"the resume history holds {len(state.commands)} slots, not {n}")
    if kind == "resume-load-replay":
        ctx = Context(state, workflow_id=_RESUME_ID, activities=REGISTRY.activities, clock=time.time)
        outcome = execute(REGISTRY.workflow("resumable"), ctx, state)
        if outcome.status != "blocked" or ctx.replayed_commands != n or ctx.executed_commands:
            raise SystemExit(f"the replay ended {outcome.status} after {ctx.replayed_commands} slots")


def _core_child(n: int) -> None:
    """The Context alone: the workflow's `n` live activity slots, each outcome recorded nowhere."""
    import time

    from bench.replaylog_runs import REGISTRY
    from replaylog.engine.core import CommandRecord, Context, WorkflowState, execute

    def record(slot: int, rec: CommandRecord) -> None:
        pass

    def on_start(slot: int, name: str, attempt: int) -> None:
        pass

    state = WorkflowState(input=n)
    ctx = Context(state, workflow_id="core", activities=REGISTRY.activities, clock=time.time, record=record,
                  on_start=on_start)
    outcome = execute(REGISTRY.workflow("chain"), ctx, state)
    if outcome.status != "completed" or ctx.executed_commands != n:
        raise SystemExit(f"the core run ended {outcome.status} after {ctx.executed_commands} slots")


def _child(kind: str, n: int, workdir: Path) -> None:
    """Run `n` slots (or floor commits) of `kind` in this process: what valgrind counts."""
    from bench.floor import commit_row, open_floor
    from bench.replaylog_runs import REGISTRY, fresh_db
    from replaylog.engine.store import open_store
    from replaylog.engine.worker import Worker

    if kind in RESUME_KINDS:
        _resume_child(kind, n, workdir)
        return
    if kind == SHORT_KIND:
        _short_child(n, workdir)
        return
    if kind == "core":
        _core_child(n)
        return
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


def measure(slots: int, kinds: tuple[str, ...] = KINDS + RESUME_KINDS + (SHORT_KIND,)) -> dict[str, Any]:
    """Instructions per slot (per commit for the floor) of each kind, and the engine's against the floor's.

    With the resume kinds: `resume-load` and `resume-replay` per slot, and `resume_slots`,
    the length of history their `resume_*_total` figures are for (RESUME_FACTOR × N).
    With SHORT_KIND: its figure per workflow, and `short_workflows` (N // SHORT_DIVISOR).
    """
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    from replaylog.engine import marks, native
    from replaylog.engine.store.sqlite import speedups

    # Which paths the children ran (they inherit this process's environment: REPLAYLOG_PURE_PYTHON).
    out: dict[str, Any] = {"slots": slots, "compiled": speedups.COMPILED is not None,
                           "compiled_marks": marks.COMPILED is not None,
                           "compiled_worker": native.compiled_path() == "compiled"}
    with tempfile.TemporaryDirectory(prefix="replaylog-instructions-") as tmp:
        resume = RESUME_FACTOR * slots
        if any(kind in RESUME_KINDS for kind in kinds):
            build_history(Path(tmp), resume)
            build_history(Path(tmp), 3 * resume)
        short = max(1, slots // SHORT_DIVISOR)
        if SHORT_KIND in kinds:
            build_short(Path(tmp), short)
            build_short(Path(tmp), 3 * short)
            out["short_workflows"] = short
        for kind in kinds:
            n = resume if kind in RESUME_KINDS else short if kind == SHORT_KIND else slots
            small = _count(valgrind, kind, n, Path(tmp))
            large = _count(valgrind, kind, 3 * n, Path(tmp))
            out[kind] = round((large - small) / (2 * n))
    if "floor" in out and "engine" in out:
        out["engine_vs_floor"] = round(out["engine"] / out["floor"], 2)
    if "resume-load" in out and "resume-load-replay" in out:
        out["resume_slots"] = resume
        out["resume-replay"] = out.pop("resume-load-replay") - out["resume-load"]
        out["resume_load_total"] = out["resume-load"] * resume
        out["resume_replay_total"] = out["resume-replay"] * resume
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
    print("the SQLite store's compiled path:", "on" if figures["compiled"] else
          "off (not built, or REPLAYLOG_PURE_PYTHON set): the pure-Python path's figures")
    print("the compiled mark writer:", "on" if figures["compiled_marks"] else
          "off (not built, or REPLAYLOG_PURE_PYTHON set): the Python writer's figures")
    print("the per-slot modules compiled by mypyc:", "on" if figures["compiled_worker"] else
          "off (not built, edited since, or REPLAYLOG_PURE_PYTHON set): their sources' figures")
    for kind in KINDS:
        what = "a commit" if kind == "floor" else "a slot (the Context alone)" if kind == "core" else "a slot"
        print(f"{kind:16s} {figures[kind]:>8,} instructions {what}")
    print(f"engine / floor   {figures['engine_vs_floor']:>8}")
    resume = figures["resume_slots"]
    for part in ("load", "replay"):
        print(f"resume-{part:9s} {figures[f'resume-{part}']:>8,} instructions a slot"
              f" ({figures[f'resume_{part}_total'] / 1e6:,.1f} M for {resume:,} slots)")
    print(f"{SHORT_KIND:16s} {figures[SHORT_KIND]:>8,} instructions a three-slot workflow in the store"
          f" (claims, batched slots and verdicts; {figures['short_workflows']:,} and 3× that)")
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
