"""In-flight activities: after a crash, `show` marks the activity that possibly ran.

The start of every live attempt is recorded before the activity runs (a cheap write
that a process crash does not lose), so after a SIGKILL the operator sees which slot
may have had its effect, and how many times it was started.
"""

from __future__ import annotations

import json
from pathlib import Path

from fault_harness import crash_mid_activity, fault_env, read_jsonl, report

from conftest import run_cli
from replaylog.engine.store import open_store


def test_show_marks_the_activity_in_flight_at_a_crash_with_its_attempt_count(tmp_path: Path) -> None:
    db = tmp_path / "inflight.db"
    ledger = tmp_path / "ledger.jsonl"
    store = open_store(db)
    wid = store.start_workflow("stalled", "held")
    seen: list[dict[str, object]] = []

    def shown_in_flight(crash: int) -> None:  # after the crash-th SIGKILL in the middle of the activity at slot 1
        shown = run_cli(db, "show", "--json", wid)
        assert shown.returncode == 0, shown.stderr
        inflight = json.loads(shown.stdout)["inflight"]
        seen.append(inflight)
        assert {k: inflight[k] for k in ("slot", "name", "attempts")} == {"slot": 1, "name": "stall",
                                                                           "attempts": crash}
        text = run_cli(db, "show", wid, env=fault_env(tmp_path, COLUMNS="200"))
        assert f"slot 1 activity stall started {crash} time(s), no recorded outcome" in text.stdout
        # The console reads the same thing through the store.
        row = store.inflight(wid)
        assert row is not None and (row.slot, row.name, row.attempts) == (1, "stall", crash)

    crash_mid_activity(db, tmp_path, 2, shown_in_flight)
    final = json.loads(run_cli(db, "show", "--json", wid).stdout)
    assert final["status"] == "completed" and final["inflight"] is None
    assert "in flight" not in run_cli(db, "show", wid).stdout
    assert store.inflight(wid) is None
    store.close()
    events = read_jsonl(ledger)
    assert [e["event"] for e in events] == ["start", "start", "start", "end"]
    assert final["commands"][1]["value"]["pid"] == events[-1]["pid"]
    report("inflight", {"crashes_mid_activity": 2, "attempts_shown_after_each": [s["attempts"] for s in seen],
                        "marked_after_completion": False})
