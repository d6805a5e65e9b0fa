"""What the console reads, as plain frozen data: built on a worker thread, shown on the UI thread.

Each function takes a store that the calling thread opened (a sqlite3 connection
must not cross threads) and returns only dataclasses, never live objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.app import Registry
from engine.core import dry_replay
from engine.errors import ReplaylogError
from engine.store import STATUSES, CommandRow, InflightRow, ReaderStore, SignalRow, WorkflowRow, WorkflowSummary

# Big enough to fill any terminal, small enough that a page is built in milliseconds;
# the table only ever holds one page (a 100k-row DataTable freezes Textual for seconds).
WORKFLOW_PAGE = 100
SLOT_PAGE = 200
SIGNAL_PAGE = 200
# Slots shown on each side of a divergence in the aligned view.
ALIGN_CONTEXT = 8


@dataclass(frozen=True)
class WorkflowsQuery:
    """What the workflows screen shows: filter, order and page."""

    status: str | None = None
    text: str = ""
    sort: str = "updated"
    descending: bool = True
    offset: int = 0
    limit: int = WORKFLOW_PAGE


@dataclass(frozen=True)
class WorkflowsPage:
    """One page of workflows with the totals the header shows."""

    query: WorkflowsQuery
    rows: tuple[WorkflowSummary, ...]
    total: int  # -1 while not counted yet
    counts: dict[str, int]


def fetch_workflows(store: ReaderStore, query: WorkflowsQuery,
                    counts: dict[str, int] | None = None, *, count: bool = True) -> WorkflowsPage:
    """A page of workflows plus the header's counts: a LIMIT/OFFSET query and an index scan, never every row.

    Args:
        store: a store this thread opened.
        query: filter, order and page.
        counts: status counts to reuse; None counts afresh (about 150 ms at 1,000,000 workflows,
            so the screen reuses them between commits that come faster than once a second).
        count: False reads the page alone, with no counts and a total of -1 (not known yet):
            what the console paints first, before the counts' index scan.
    """
    if not count:
        rows = store.list_workflow_summaries(status=query.status, text=query.text or None, sort=query.sort,
                                             descending=query.descending, limit=query.limit, offset=query.offset)
        return WorkflowsPage(query, tuple(rows), -1, {})
    fresh = counts is None
    if counts is None:
        counts = store.status_counts()
    if query.text or not fresh:
        total = store.count_workflows(status=query.status, text=query.text or None)
    elif query.status:
        total = counts.get(query.status, 0)  # the counts already hold it: skip a second scan
    else:
        total = sum(counts.values())
    offset = min(query.offset, max(0, (total - 1) // query.limit * query.limit))
    if offset != query.offset:
        query = WorkflowsQuery(query.status, query.text, query.sort, query.descending, offset, query.limit)
    rows = store.list_workflow_summaries(status=query.status, text=query.text or None, sort=query.sort,
                                         descending=query.descending, limit=query.limit, offset=query.offset)
    return WorkflowsPage(query, tuple(rows), total, counts)


@dataclass(frozen=True)
class WorkflowDetail:
    """One workflow, a page of its slots, a page of its signals and its in-flight activity."""

    row: WorkflowRow
    offset: int
    commands: tuple[CommandRow, ...]
    signals: tuple[SignalRow, ...]
    inflight: InflightRow | None
    signal_total: int = 0
    signal_waiting: int = 0
    signal_offset: int = 0


def fetch_detail(store: ReaderStore, workflow_id: str, offset: int, limit: int = SLOT_PAGE,
                 signal_offset: int | None = None) -> WorkflowDetail:
    """A workflow with one page of its slots and one page of its signals (never a whole log).

    Args:
        store: a store this thread opened.
        workflow_id: the workflow.
        offset: the first slot of the slot page (clamped to the history).
        limit: slots per page.
        signal_offset: the first signal of the signal page, by delivery order; None for the
            latest page (the signals an operator acts on; older ones are consumed history).
    """
    row = store.get_workflow(workflow_id)
    offset = max(0, min(offset, max(0, (row.slots - 1) // limit * limit)))
    commands = tuple(store.list_commands(workflow_id, offset=offset, limit=limit))
    total, waiting = store.count_signals(workflow_id)
    latest = max(0, total - SIGNAL_PAGE)
    signal_offset = latest if signal_offset is None else max(0, min(signal_offset, latest))
    signals = tuple(store.list_signals(workflow_id, offset=signal_offset, limit=SIGNAL_PAGE))
    return WorkflowDetail(row, offset, commands, signals, store.inflight(workflow_id), total, waiting, signal_offset)


@dataclass(frozen=True)
class AlignedRow:
    """One slot of the aligned view: what history holds beside what the code issues now."""

    slot: int
    recorded: str | None
    issued: str | None
    verdict: str  # "match", "diverges", "after" (past the divergence) or "unknown"


@dataclass(frozen=True)
class Diagnosis:
    """What the diagnosis tab shows for one workflow."""

    workflow_id: str
    kind: str  # "nondeterministic", "activity", "other" or "none"
    source: str  # where the issued commands came from
    message: str = ""
    slot: int | None = None
    recorded: str | None = None
    issued: str | None = None
    aligned: tuple[AlignedRow, ...] = ()
    failed_command: CommandRow | None = None
    verdict: str | None = None
    verdict_ok: bool | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def _labels(commands: list[CommandRow]) -> dict[int, str]:
    return {c.slot: f"{c.kind}:{c.name}" for c in commands}


def _align(store: ReaderStore, workflow_id: str, total_slots: int, slot: int,
           issued: tuple[str, ...] | None, stored_issued: str | None) -> tuple[AlignedRow, ...]:
    """Recorded history beside the issued commands, a window around the first divergence."""
    start = max(0, slot - ALIGN_CONTEXT)
    end = max(slot + ALIGN_CONTEXT + 1, start + 1)
    recorded = _labels(store.list_commands(workflow_id, offset=start, limit=end - start))
    rows: list[AlignedRow] = []
    last = min(end, max(total_slots, slot + 1, len(issued) if issued is not None else 0))
    for i in range(start, last):
        rec = recorded.get(i)
        if issued is not None:
            iss = issued[i] if i < len(issued) else None
            verdict = "match" if i < slot else ("diverges" if i == slot else "after")
        else:
            # Without the code, the stored diagnostic is all we know: the slots before the
            # divergence matched by definition, and nothing is known after it.
            iss = rec if i < slot else (stored_issued if i == slot else None)
            verdict = "match" if i < slot else ("diverges" if i == slot else "unknown")
        rows.append(AlignedRow(i, rec, iss, verdict))
    return tuple(rows)


def _first_divergence(store: ReaderStore, workflow_id: str, issued: tuple[str, ...], total: int) -> int | None:
    recorded = _labels(store.list_commands(workflow_id))
    for i in range(max(len(issued), total)):
        if recorded.get(i) != (issued[i] if i < len(issued) else None):
            return i
    return None


def diagnose(store: ReaderStore, workflow_id: str, registry: Registry | None, *, check: bool = False) -> Diagnosis:
    """Explain why a workflow failed; with `check` (or a registry for a divergence) dry-replay it too."""
    row = store.get_workflow(workflow_id)
    verdict: str | None = None
    verdict_ok: bool | None = None
    issued: tuple[str, ...] | None = None
    notes: list[str] = []
    if registry is not None and (check or row.diagnostic):
        try:
            fn = registry.workflow(row.workflow)
        except ReplaylogError as exc:
            verdict, verdict_ok = str(exc), False
        else:
            result = dry_replay(fn, store.load_state(workflow_id), workflow_id=workflow_id)
            issued = result.issued
            verdict_ok = result.ok
            verdict = (f"{result.verdict} ({result.replayed} slot(s) replayed)" if result.ok
                       else (result.error or result.verdict))
    elif check:
        verdict, verdict_ok = "no workflow code loaded: start the console with --app to check", None
    if row.diagnostic:
        d = row.diagnostic
        slot = int(d.get("slot", 0))
        if issued is not None:
            source = f"dry replay against the current code ({registry.spec if registry else ''})"
            current = _first_divergence(store, workflow_id, issued, row.slots) if verdict_ok is False else None
            if verdict_ok:
                notes.append("the current code no longer diverges: the stored diagnostic is from an older run")
            elif current is not None and current != slot:
                notes.append(f"the current code first diverges at slot {current}, not at the stored slot {slot}")
                slot = current
        else:
            source = "the stored diagnostic (start the console with --app to replay the current code)"
        aligned = _align(store, workflow_id, row.slots, slot, issued, d.get("issued"))
        return Diagnosis(workflow_id, "nondeterministic", source, str(d.get("message", "")), slot,
                         d.get("recorded"), d.get("issued"), aligned, None, verdict, verdict_ok, tuple(notes))
    if row.status == "failed":
        failed = store.last_failed_command(workflow_id)
        kind = "activity" if failed is not None and (row.error or "").startswith("ActivityError") else "other"
        return Diagnosis(workflow_id, kind, "the stored error", row.error or "", failed.slot if failed else None,
                         failed_command=failed if kind == "activity" else None, verdict=verdict,
                         verdict_ok=verdict_ok)
    return Diagnosis(workflow_id, "none", "", verdict=verdict, verdict_ok=verdict_ok)


def find_workflow_ids(store: ReaderStore, text: str, limit: int = 20) -> list[tuple[str, str, str]]:
    """(id, workflow, status) of workflows whose id or name contains `text`, for the palette."""
    return [(r.id, r.workflow, r.status) for r in store.list_workflow_summaries(text=text or None, limit=limit)]


__all__ = ["STATUSES", "AlignedRow", "Diagnosis", "WorkflowDetail", "WorkflowsPage", "WorkflowsQuery",
           "diagnose", "fetch_detail", "fetch_workflows", "find_workflow_ids"]
