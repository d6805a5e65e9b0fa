"""The committer's baton: the threads a group commit answered are woken one at a time, each
by the one before as it leaves engine code, and none waits on a thread that keeps it.

The committer runs on a real SQLite file; a second connection holding the write lock keeps
the first commit waiting while the others queue behind it. Run on the installed path (compiled
where `make test` built it) and again, in a process of its own, on the sources.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from replaylog.engine.compiled import PURE_ENV
from replaylog.engine.core import CommandRecord
from replaylog.engine.store import open_store
from replaylog.engine.worker.committer import Committer

DEADLINE = 60.0  # seconds: a generous bound for a loaded machine, never a measured window


def _wait_for(predicate: object, what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


def _rec(value: int) -> CommandRecord:
    return CommandRecord("activity", "a", True, value, None, 1, "k")


def held_baton_scenario(db: Path) -> None:
    """Four slots: one commits while the write lock is held, three queue behind it and commit in one
    transaction; of the two answered there and woken in turn, the first keeps the baton (it never
    comes back to commit): the second goes on anyway (after BATON_WAIT)."""
    with open_store(db) as store:
        for i in range(4):
            store.start_workflow("wf", None, workflow_id=f"w{i}")
        claims = {c.id: c for c in store.claim("me", ttl=60, limit=4)}
    assert sorted(claims) == ["w0", "w1", "w2", "w3"]
    committer = Committer(db, ttl=60, baton_at=0.0)
    committer.start()
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the first commit waits for this lock
    results: dict[str, bool] = {}
    returned: list[str] = []
    release_keeper = threading.Event()

    def slot(workflow_id: str) -> None:
        results[workflow_id] = committer.commit_record(claims[workflow_id], 0, _rec(1))
        returned.append(workflow_id)
        if workflow_id in ("w2", "w3") and len([w for w in returned if w in ("w2", "w3")]) == 1:
            # The first of the two woken in turn keeps the baton: it goes on to something
            # that is not a commit (an activity, say) until the other one has gone on.
            release_keeper.wait(DEADLINE)

    threads = {w: threading.Thread(target=slot, args=(w,), daemon=True) for w in claims}
    threads["w0"].start()
    _wait_for(lambda: committer.leading, "the first slot's commit")
    for n, w in enumerate(("w1", "w2", "w3"), start=1):
        threads[w].start()
        _wait_for(lambda n=n: len(committer._pending) == n, f"{w} to queue")
    blocker.execute("ROLLBACK")
    blocker.close()
    # w1 leads the second commit (w1, w2, w3); of w2 and w3 one is woken and keeps the baton
    # until all four have returned: the other may not wait for it.
    _wait_for(lambda: {"w0", "w1", "w2", "w3"} <= set(returned), "all four slots to return")
    release_keeper.set()
    for t in threads.values():
        t.join(DEADLINE)
    committer.stop()
    assert results == {"w0": True, "w1": True, "w2": True, "w3": True}
    with open_store(db) as store:
        assert [len(store.load_state(w).commands) for w in sorted(claims)] == [1, 1, 1, 1]


def test_a_thread_that_keeps_the_baton_holds_nobody_up(tmp_path: Path) -> None:
    held_baton_scenario(tmp_path / "b.db")


def test_a_thread_that_keeps_the_baton_holds_nobody_up_on_the_sources(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, __file__, str(tmp_path / "p.db")], env={**os.environ, PURE_ENV: "1"},
                         capture_output=True, text=True, timeout=3 * DEADLINE)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("pure Python"), out.stdout


def test_threads_answered_together_all_go_on_when_each_passes_the_baton(tmp_path: Path) -> None:
    # Twelve workflows' slots from twelve threads, each slot's thread coming straight back for
    # the next and passing the baton at its end: every slot is committed, in one transaction
    # with others, and every thread ends.
    db = tmp_path / "c.db"
    with open_store(db) as store:
        for i in range(12):
            store.start_workflow("wf", None, workflow_id=f"w{i:02}")
        claims = store.claim("me", ttl=60, limit=12)
    committer = Committer(db, ttl=60, baton_at=0.0)
    committer.start()
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            for s in range(50):
                assert committer.commit_record(claims[i], s, _rec(s))
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)
        finally:
            committer.pass_baton()  # as a worker's thread does at its run's end

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    assert not any(t.is_alive() for t in threads) and errors == []
    committer.stop()
    assert committer.commits == 600 and committer.batches < 600  # some slots shared a commit
    with open_store(db) as store:
        assert {len(store.load_state(c.id).commands) for c in claims} == {50}


if __name__ == "__main__":  # the sources' run: REPLAYLOG_PURE_PYTHON is set by the test above
    from replaylog.engine import native

    held_baton_scenario(Path(sys.argv[1]))
    print(native.compiled_path())
