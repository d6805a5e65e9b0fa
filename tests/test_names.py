"""Workflows by recorded name: what an app registers, what a start may pass, what a worker claims."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path
from typing import Any

import pytest
from console_helpers import SIZE, async_test, make_app, settle

from conftest import on_server, run_cli
from replaylog.engine.app import AppImportError, load_app
from replaylog.engine.store import Store, open_store


def write_app(tmp_path: Path, source: str, name: str = "app.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def count(db: Path) -> int:
    with open_store(db, readonly=True) as s:
        return s.count_workflows()


# ---------------------------------------------------------------- registration (issue 13, item 4)


def test_two_functions_with_one_python_name_both_register_under_their_recorded_names(tmp_path: Path) -> None:
    app = write_app(tmp_path, """
        from replaylog import activity, workflow

        @activity(name="fetch_a")
        def fetch(x):
            return "a"

        @activity(name="fetch_b")
        def fetch(x):
            return "b"

        @workflow(name="first")
        def wf(ctx):
            return 1

        @workflow(name="second")
        def wf(ctx):
            return 2
    """)
    reg = load_app(str(app))
    assert set(reg.workflows) == {"first", "second"}
    assert set(reg.activities) == {"fetch_a", "fetch_b"}
    assert reg.workflows["first"](None) == 1 and reg.workflows["second"](None) == 2
    assert reg.activities["fetch_a"](0) == "a"


def test_decorated_functions_imported_from_another_module_still_register(tmp_path: Path) -> None:
    write_app(tmp_path, """
        from replaylog import workflow

        @workflow
        def shared(ctx):
            return 1

        @workflow
        def not_imported(ctx):
            return 2
    """, "names_lib_mod.py")
    app = write_app(tmp_path, """
        from names_lib_mod import shared
        from replaylog import workflow

        @workflow
        def own(ctx):
            return 3
    """)
    assert set(load_app(str(app)).workflows) == {"shared", "own"}


@pytest.mark.parametrize("kind", ["workflow", "activity"])
def test_two_functions_with_one_recorded_name_are_refused_when_the_app_loads(tmp_path: Path, kind: str) -> None:
    app = write_app(tmp_path, f"""
        from replaylog import activity, workflow

        @{kind}(name="refund")
        def refund_v1(ctx):
            return 1

        @{kind}(name="refund")
        def refund_v2(ctx):
            return 2
    """)
    with pytest.raises(AppImportError) as err:
        load_app(str(app))
    message = str(err.value)
    assert f"registers {kind} 'refund' twice" in message
    assert "twice: refund_v1 (app.py:4) and refund_v2 (app.py:8)" in message
    assert "replaylog_app_" not in message
    assert "\n" not in message


def test_an_app_with_a_duplicate_name_is_refused_by_the_cli_and_nothing_is_written(db_path: Path,
                                                                                 tmp_path: Path) -> None:
    app = write_app(tmp_path, """
        from replaylog import workflow

        @workflow(name="x")
        def one(ctx):
            return 1

        @workflow(name="x")
        def two(ctx):
            return 2
    """)
    for args in (["start", "x"], ["worker", "--until-idle"]):
        proc = run_cli(db_path, *args, "--app", str(app))
        assert proc.returncode == 1
        assert proc.stderr.count("\n") == 1 and "registers workflow 'x' twice" in proc.stderr
    assert not db_path.exists()


# ---------------------------------------------------------------- inputs at start (issue 13, item 5)

SIGNATURES = """
    from replaylog import workflow

    @workflow
    def needs(ctx, order):
        return order

    @workflow
    def takes_none(ctx):
        return 0

    @workflow
    def optional(ctx, order=1):
        return order
"""


def test_start_refuses_an_input_the_workflow_cannot_take_and_writes_nothing(db_path: Path, tmp_path: Path) -> None:
    app = str(write_app(tmp_path, SIGNATURES))
    assert run_cli(db_path, "start", "optional", "--app", app).returncode == 0
    before = count(db_path)

    extra = run_cli(db_path, "start", "takes_none", "[1, 2]", "--app", app)
    assert extra.returncode == 1
    assert extra.stderr == "replaylog: error: workflow 'takes_none' takes no input (ctx): start it without INPUT_JSON\n"

    missing = run_cli(db_path, "start", "needs", "--app", app)
    assert missing.returncode == 1
    assert missing.stderr == "replaylog: error: workflow 'needs' needs an input (ctx, order): give INPUT_JSON\n"
    assert count(db_path) == before

    for args in (["needs", "[1, 2]"], ["optional", "5"], ["takes_none"]):
        proc = run_cli(db_path, "start", *args, "--app", app)
        assert proc.returncode == 0, proc.stderr
    assert count(db_path) == before + 3


def test_a_workflow_with_two_required_inputs_is_refused_when_the_app_loads(db_path: Path, tmp_path: Path) -> None:
    # It could never be started (a workflow receives one input value): say so at once,
    # rather than accept `start two_args '[1, 2]'` and fail the workflow with a TypeError.
    app = str(write_app(tmp_path, """
        from replaylog import workflow

        @workflow
        def fine(ctx):
            return 0

        @workflow
        def two_args(ctx, a, b):
            return a + b
    """))
    ok_app = str(write_app(tmp_path, SIGNATURES, "ok.py"))
    assert run_cli(db_path, "start", "takes_none", "--app", ok_app).returncode == 0
    before = count(db_path)
    proc = run_cli(db_path, "start", "two_args", "[1, 2]", "--app", app)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    # Named by its file and line, never by the module name a file app is imported under.
    assert "workflow 'two_args' (app.py:8) takes (ctx, a, b)" in proc.stderr
    assert "replaylog_app_" not in proc.stderr
    assert "one input value" in proc.stderr
    assert count(db_path) == before


def test_a_workflow_a_worker_cannot_call_is_refused_when_the_app_loads(tmp_path: Path) -> None:
    app = write_app(tmp_path, """
        from replaylog import workflow

        @workflow
        def no_ctx():
            return 0
    """)
    with pytest.raises(AppImportError, match="takes ctx as its first parameter"):
        load_app(str(app))
    app = write_app(tmp_path, """
        from replaylog import workflow

        @workflow
        def keyword(ctx, *, mode):
            return 0
    """, "kw.py")
    with pytest.raises(AppImportError, match="keyword-only parameter 'mode' has no default"):
        load_app(str(app))


# ---------------------------------------------------------------- claiming by name (issue 13, item 3)


def test_claim_takes_only_the_names_given_oldest_first(store: Store) -> None:
    ids = [store.start_workflow(name, 1) for name in ("a", "other", "b", "a", "other")]
    assert store.has_claimable(names={"a", "b"})
    assert not store.has_claimable(names={"nobody"})
    claims = store.claim("w1", ttl=30, limit=10, names={"a", "b"})
    assert [c.id for c in claims] == [ids[0], ids[2], ids[3]]
    assert not store.has_claimable(names={"a", "b"})
    assert store.has_runnable(names={"a"})  # running here
    assert not store.has_runnable(names={"nobody"})  # 'other' is pending, but not of these names
    assert store.pending_unknown({"a", "b"}) == {"other": 2}
    assert store.has_claimable(names=None)


def test_claim_by_name_reads_index_ranges_and_sorts_nothing(store: Store) -> None:
    if on_server(store):
        pytest.skip("SQLite-specific: reads SQLite's query plans through its trace callback")
    for i in range(50):
        store.start_workflow(f"name{i % 5}", i)
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    store.has_claimable(names={"name1", "name2"})
    store.claim("w1", ttl=30, limit=3, names={"name1", "name2"})
    store._conn.set_trace_callback(None)
    pending = [s for s in statements if s.startswith("SELECT") and "status = 'pending'" in s]
    assert pending
    for sql in pending:
        plan = " | ".join(r[3] for r in store._conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
        assert "workflows_pending" in plan, (sql, plan)
        assert "TEMP B-TREE" not in plan, (sql, plan)


def test_served_names_come_from_live_workers_only(store: Store) -> None:
    assert store.served_names() is None
    store.worker_started("h:1:a", host="h", pid=1, app="app", names={"x", "y"}, ttl=5.0)
    store.worker_started("h:2:b", host="h", pid=2, app="app2", names={"z"}, ttl=5.0)
    assert store.served_names() == {"x", "y", "z"}
    # Not seen for more than three lease lengths: gone (killed, say), whatever its row says.
    store._conn.execute("UPDATE workers SET seen_at = seen_at - 16 WHERE owner = 'h:2:b'")
    assert store.served_names() == {"x", "y"}
    store.renew([], ttl=5.0, worker="h:2:b")
    assert store.served_names() == {"x", "y", "z"}
    store.worker_stopped("h:1:a")
    store.worker_stopped("h:2:b")
    assert store.served_names() is None


# ---------------------------------------------------------------- the console says it too


def _rendered(widget: Any) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


@async_test
async def test_the_console_says_a_pending_workflow_waits_for_a_worker_that_knows_its_name(db_path: Path) -> None:
    from textual.widgets import Static

    with open_store(db_path) as store:
        wid = store.start_workflow("steps", 2)
    app = make_app(db_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.open_workflow(wid)
        await settle(pilot)
        assert "pending  no worker running" in _rendered(app.screen.query_one("#summary", Static))
    with open_store(db_path) as store:
        store.worker_started("h:1:a", host="h", pid=1, app="replaylog.samples", names={"shipping"}, ttl=5.0)
    app = make_app(db_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.open_workflow(wid)
        await settle(pilot)
        assert "pending  no running worker knows 'steps'" in _rendered(app.screen.query_one("#summary", Static))
