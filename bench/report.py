"""The report: one rich table for people, one JSON file for machines, and Markdown for docs/performance.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text


def _f(value: Any, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}{unit}"


def _verdict(m: dict[str, Any]) -> Text:
    if m.get("status") == "skipped":
        return Text("skipped", style="yellow")
    if m.get("status") == "error":
        return Text("error", style="red")
    return Text("met", style="green") if m.get("met") else Text("not met", style="red")


def _speedup(ours: float | None, theirs: float | None, lower_is_better: bool = False) -> str:
    """replaylog's advantage as a factor: >1 means replaylog is ahead."""
    if not ours or not theirs:
        return "—"
    return f"{(theirs / ours) if lower_is_better else (ours / theirs):,.1f}×"


def _pg_peer(single: dict[str, Any], group: dict[str, Any], short: dict[str, Any], signal: dict[str, Any]) -> str:
    """The DBOS cell of the PostgreSQL row: replaylog's advantage on the same server (target 5×)."""
    cells = []
    for label, r, field in (("1 wf", single, "slots_per_s"), ("50 wfs", group, "slots_per_s"),
                            ("3-step", short, "workflows_per_s"), ("signal", signal, "median_ms")):
        d = r.get("dbos")
        if isinstance(d, dict) and "error" in d:
            cells.append(f"{label} error")
        elif isinstance(d, dict):
            cells.append(f"{label} {_f(r.get('vs_dbos'), '×', 1)} ({_f(d.get(field), '', 1)})")
    return "; ".join(cells) or "—"


def rows(results: dict[str, Any]) -> list[tuple[str, str, str, Text, str]]:
    """(measurement, figure, target, verdict, vs DBOS) per line of the table."""
    m = results["measurements"]
    peer = m.get("peer", {})
    out: list[tuple[str, str, str, Text, str]] = []

    def peer_cell(key: str, field: str, ours: float | None, lower: bool = False) -> str:
        p = peer.get(key)
        if not isinstance(p, dict):
            return peer.get("note", "—") if key == "single" else "—"
        if "error" in p:
            return "error"
        return f"{_speedup(ours, p.get(field), lower)} ({_f(p.get(field), '', 1)})"

    def add(key: str, label: str, figure: str, target: str, peer_text: str = "—") -> None:
        if key not in m:
            return
        r = m[key]
        if r.get("status") in ("skipped", "error"):
            out.append((label, r.get("note", r.get("error", "")), target, _verdict(r), peer_text))
        else:
            out.append((label, figure, target, _verdict(r), peer_text))

    s = m.get("single", {})
    add("single", f"1. one workflow, {_f(s.get('slots'))} slots",
        f"{_f(s.get('slots_per_s'))} slots/s = {_f(s.get('ratio_vs_floor'), '', 2)} of floor "
        f"({_f(s.get('floor_tx_per_s'))} tx/s); without in-flight marks "
        f"{_f(s.get('no_inflight_ratio_vs_floor'), '', 2)}", ">= 0.93 of floor",
        peer_cell("single", "slots_per_s", s.get("slots_per_s")))
    g = m.get("group", {})
    add("group", f"2. {_f(g.get('workflows'))} × {_f(g.get('slots_each'))} slots, one worker",
        f"{_f(g.get('slots_per_s'))} slots/s = {_f(g.get('ratio_vs_floor'), '×', 2)} floor, "
        f"{_f(g.get('outcomes_per_commit'), '', 1)} outcomes/commit"
        + (f"; without CPU focus {_f(g['no_cpu_focus_ratio_vs_floor'], '×', 2)}"
           if "no_cpu_focus_ratio_vs_floor" in g else ""), ">= 3× floor",
        peer_cell("group", "slots_per_s", g.get("slots_per_s")))
    r = m.get("resume", {})
    add("resume", f"3. resume after {_f(r.get('slots'))} slots",
        f"load {_f(r.get('load_ms'), ' ms', 1)} + replay {_f(r.get('replay_ms'), ' ms', 1)} "
        f"({_f(r.get('replay_slots_per_s'))} slots/s), {r.get('activities_reexecuted', '—')} re-run",
        "replay <= 25 ms", peer_cell("resume", "replay_slots_per_s", r.get("load_and_replay_slots_per_s")))
    sg = m.get("signal", {})
    add("signal", f"4. signal → next slot ({sg.get('samples', '—')} samples)",
        f"median {_f(sg.get('median_ms'), ' ms', 1)}, p99 {_f(sg.get('p99_ms'), ' ms', 1)}",
        "median <= 20 ms, p99 <= 100 ms", peer_cell("signal", "median_ms", sg.get("median_ms"), lower=True))
    sh = m.get("short", {})
    add("short", f"5. {_f(sh.get('workflows'))} workflows × 3 slots",
        f"1 proc {_f(sh.get('workflows_per_s_1p'))}/s, 2 procs {_f(sh.get('workflows_per_s_2p'))}/s; "
        f"starts {_f(sh.get('starts_per_s'))}/s", ">= 2,500/s, 1 proc (median of 3)",
        peer_cell("short", "workflows_per_s_1p", sh.get("workflows_per_s_1p")))
    q = m.get("queues", {})
    qc, qs = q.get("claim", {}), q.get("short", {})
    add("queues", f"11. queues: a claim, and {_f(qs.get('workflows'))} short workflows through a queue of 64",
        f"claim queued {_f(qc.get('queued_ms'), ' ms', 2)} vs unqueued {_f(qc.get('unqueued_ms'), ' ms', 2)}"
        f" = {_f(qc.get('ratio'), '×', 2)} (CPU {_f(qc.get('cpu_ratio'), '×', 2)});"
        f" workload 5 queued {_f(qs.get('queued_per_s'))}/s vs"
        f" {_f(qs.get('unqueued_per_s'))}/s = {_f(qs.get('ratio'), '', 2)}", ">= 0.8 of unqueued")
    pr = m.get("prune", {})
    add("prune", f"12. prune {_f(pr.get('finished'))} finished workflows in batches while a worker runs"
        f" {_f(pr.get('live_workflows'))} live ones",
        f"live {_f(pr.get('pruned_slots_per_s'))} vs unpruned {_f(pr.get('unpruned_slots_per_s'))} slots/s"
        f" = {_f(pr.get('ratio'), '', 2)}; pruned in {_f(pr.get('prune_s'), ' s', 1)}; file"
        f" {_f(pr.get('before_mb'), ' MB', 1)} → {_f(pr.get('after_prune_mb'), ' MB', 1)} (pages free)"
        f" → {_f(pr.get('after_vacuum_mb'), ' MB', 1)} after VACUUM", ">= 0.8 of unpruned")
    t = m.get("timers", {})
    add("timers", f"7. {_f(t.get('timers'))} timers over {_f(t.get('spread_s'), ' s')}, worker running",
        f"late: median {_f(t.get('median_late_ms'), ' ms', 1)}, p99 {_f(t.get('p99_late_ms'), ' ms', 1)}, "
        f"{t.get('early', '—')} early", "median <= 50 ms, p99 <= 200 ms")
    z = m.get("sleepers", {})
    add("sleepers", f"8. {_f(z.get('sleepers'))} workflows asleep at once",
        f"worker RSS {_f(z.get('worker_rss_mb'), ' MB')}, idle CPU {_f(z.get('idle_cpu_percent'), '%', 1)}; "
        f"all woke in {_f(z.get('all_awake_after_s'), ' s', 1)} ({_f(z.get('wakeups_per_s'))}/s)",
        "idle CPU < 5%")
    w = m.get("wake", {})
    ws, wp = w.get("sqlite", {}), w.get("postgres", {})
    add("wake", f"10. handle.result() wakes after the workflow finishes ({ws.get('samples', '—')} samples)",
        f"SQLite median {_f(ws.get('median_ms'), ' ms', 1)}, p99 {_f(ws.get('p99_ms'), ' ms', 1)}; "
        f"PostgreSQL median {_f(wp.get('median_ms'), ' ms', 1)}, p99 {_f(wp.get('p99_ms'), ' ms', 1)}",
        "median <= 50 ms")
    a = m.get("async", {})
    aw, asl = a.get("waiting", {}), a.get("slots", {})
    add("async", f"14. async: {_f(aw.get('workflows'))} workflows awaiting a {_f(aw.get('activity_s'), ' s', 1)} "
        "async activity, one worker process; workload 1 as an async workflow",
        f"all done in {_f(aw.get('wall_s'), ' s', 2)}, peak {aw.get('peak_threads', '—')} threads "
        f"(concurrency {aw.get('concurrency', '—')}), RSS {_f(aw.get('rss_mb'), ' MB')}; async "
        f"{_f(asl.get('async_slots_per_s'))} vs sync {_f(asl.get('sync_slots_per_s'))} slots/s = "
        f"{_f(asl.get('ratio_async_vs_sync'), '', 2)}",
        "< 3 s (1 s activity), threads bounded; >= 0.8 of sync")
    tr = m.get("tracing", {})
    add("tracing", f"13. workload 1 ({_f(tr.get('slots'))} slots) with tracing on, off, not installed",
        f"off {_f(tr.get('off_slots_per_s'))} slots/s; on (in-memory exporter) {_f(tr.get('on_ratio'), '×', 3)}"
        f" the time (CPU {_f(tr.get('on_cpu_ratio'), '×', 2)}: +{_f(tr.get('on_cpu_us_per_slot_added'))} µs a slot"
        f" on {_f(tr.get('off_cpu_us_per_slot'))}); OpenTelemetry not installed"
        f" {_f(tr.get('absent_ratio'), '×', 3)} (CPU {_f(tr.get('absent_cpu_ratio'), '×', 3)},"
        f" {tr.get('absent_otel_imports_asked', '—')} imports asked)",
        "on <= 1.25×, not installed <= 1.02× off")
    c = m.get("console", {})
    add("console", f"6. console, {_f(c.get('workflows'))} workflows",
        f"paint {_f(c.get('first_paint_s'), ' s', 2)}, RSS {_f(c.get('peak_rss_mb'), ' MB')}, "
        f"open {_f(c.get('slots'))}-slot {_f(c.get('open_workflow_s'), ' s', 2)}, "
        f"stall {_f(c.get('max_stall_ms'), ' ms')}",
        "0.5 s, 150 MB, 0.5 s, 100 ms")
    pg = m.get("postgres", {})
    ps, pgg, psh, psg = (pg.get(k, {}) for k in ("single", "group", "short", "signal"))
    add("postgres", "9. PostgreSQL",
        f"1 wf {_f(ps.get('slots_per_s'))} slots/s = {_f(ps.get('ratio_vs_floor'), '', 2)} of floor "
        f"({_f(ps.get('floor_tx_per_s'))} tx/s), worker CPU {_f(ps.get('worker_cpu_us_per_slot'), ' µs')} a slot; "
        f"{_f(pgg.get('workflows'))} wfs "
        f"{_f(pgg.get('ratio_vs_floor'), '×', 2)} floor; 3-step wfs/s 1/2/4 procs "
        f"{_f(psh.get('workflows_per_s_1p'))}/{_f(psh.get('workflows_per_s_2p'))}/{_f(psh.get('workflows_per_s_4p'))}; "
        f"signal median {_f(psg.get('median_ms'), ' ms', 1)}, p99 {_f(psg.get('p99_ms'), ' ms', 1)}",
        ">= 0.8 floor and <= 90 µs, >= 2.5× floor, 20/100 ms", _pg_peer(ps, pgg, psh, psg))
    return out


def print_table(results: dict[str, Any], console: Console | None = None) -> None:
    """Print the results table."""
    console = console or Console()
    meta = results["meta"]
    peer = results["measurements"].get("peer", {})
    peer_head = f"vs DBOS {peer['version']}" if peer.get("version") else "vs DBOS"
    where = f"{meta['machine']['cpu']}, {meta['machine']['nproc']} cores"
    table = Table(title=f"replaylog bench ({meta['mode']}) — {where}", title_justify="left")
    table.add_column("measurement")
    table.add_column("figure")
    table.add_column("target")
    table.add_column("verdict")
    table.add_column(f"{peer_head} (replaylog ×; DBOS figure)")
    for row in rows(results):
        table.add_row(row[0], row[1], row[2], row[3], row[4])
    console.print(table)
    if peer.get("note"):
        console.print(Text(f"peer: {peer['note']}", style="yellow"))


def write_json(results: dict[str, Any], path: Path) -> None:
    """Write the results as JSON (parent folders created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")


def markdown(results: dict[str, Any]) -> str:
    """The results table as Markdown (what docs/performance.md shows)."""
    peer = results["measurements"].get("peer", {})
    head = f"vs DBOS {peer['version']}" if peer.get("version") else "vs DBOS"
    lines = [f"| measurement | figure | target | verdict | {head} (replaylog ×; DBOS figure) |",
             "|---|---|---|---|---|"]
    for label, figure, target, verdict, peer_text in rows(results):
        cells = [label, figure, target, verdict.plain, peer_text]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    print(markdown(json.loads(Path(sys.argv[1]).read_text())))
