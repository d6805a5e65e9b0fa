"""What is PostgreSQL's alone: URLs and passwords, the schema's ownership and version, the
read-only session, durable commits, wake-ups by NOTIFY, and connection faults mid-commit."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from console_helpers import SIZE, async_test, column, make_app, settle, wait_until
from pg_server import LibpqLosingFirstAnswer, PGServer
from rich.text import Text

from conftest import ROOT, cli_env, run_cli, start_worker, wait_for
from replaylog import Client
from replaylog.console.data import SignalRefused
from replaylog.console.paged_table import PagedTable
from replaylog.engine.core import CommandRecord, Outcome
from replaylog.engine.errors import ReadOnlyError, SchemaVersionError, StoreError
from replaylog.engine.store import PendingRecord, open_store, redact_url
from replaylog.engine.store.postgres import connection as pg_connection
from replaylog.engine.store.shared.migrations import latest


def rec(name: str, value: object = None) -> CommandRecord:
    return CommandRecord("activity", name, True, value)


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://ops:s3cret@db.example:5432/app", "postgresql://ops:***@db.example:5432/app"),
    ("postgres://ops:s3cret@/app?host=/run/pg", "postgres://ops:***@/app?host=/run/pg"),
    ("postgresql://ops@/app?host=/run/pg&password=s3cret", "postgresql://ops@/app?host=/run/pg&password=***"),
    ("postgresql://db.example/app?sslmode=require", "postgresql://db.example/app?sslmode=require"),
    ("host=db.example password=s3cret dbname=app", "host=db.example password=*** dbname=app"),
])
def test_redact_url_hides_every_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def with_password(pg_server: PGServer, url: str) -> str:
    """The same database, reached as a role with a password (the socket trusts it; the URL carries it)."""
    pg_server.execute(pg_server.admin_url, "DO $$ BEGIN CREATE ROLE ops LOGIN SUPERUSER PASSWORD 's3cret';"
                      " EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    return url.replace("postgresql://postgres:@", "postgresql://ops:s3cret@")


def test_the_worker_banner_and_errors_never_show_the_password(pg_server: PGServer, pg_url: str) -> None:
    url = with_password(pg_server, pg_url)
    assert run_cli(url, "start", "refund", "7").returncode == 0
    loud = run_cli(url, "worker", "--until-idle", "--concurrency", "2")
    assert loud.returncode == 0, loud.stderr
    assert "s3cret" not in loud.stderr and "postgresql://ops:***@/" in loud.stderr.splitlines()[0]
    bad = run_cli(url, "show", "no-such-id")
    assert bad.returncode == 1 and "s3cret" not in bad.stderr + bad.stdout
    unreachable = run_cli(url.split("?")[0] + "?host=/nonexistent", "list")
    assert unreachable.returncode == 1 and "s3cret" not in unreachable.stderr
    assert len(unreachable.stderr.strip().splitlines()) == 1


def test_db_from_the_environment_takes_a_postgresql_url(pg_url: str) -> None:
    env = cli_env(REPLAYLOG_DB=pg_url)
    out = subprocess.run([sys.executable, "-m", "replaylog", "start", "refund", "3"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    with open_store(pg_url, readonly=True) as s:
        assert s.get_workflow(out.stdout.strip().splitlines()[-1]).workflow == "refund"


def test_a_readonly_session_is_refused_by_the_server_itself(pg_url: str) -> None:
    with open_store(pg_url) as s:
        wid = s.start_workflow("wf", 1)
    with open_store(pg_url, readonly=True) as r:
        assert r.get_workflow(wid).status == "pending"
        with pytest.raises(ReadOnlyError):
            r.start_workflow("wf", 2)
        # Past the store's own check: the session itself refuses any write.
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            r._conn.execute("UPDATE workflows SET status = 'failed'")
        assert r.count_workflows() == 1 and r.get_workflow(wid).status == "pending"


def test_commits_are_durable_whatever_the_server_default(pg_url: str) -> None:
    with open_store(pg_url) as s:
        assert s._conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
        assert s._conn.execute("SHOW search_path").fetchone()[0] == "replaylog"


def test_a_schema_named_replaylog_that_is_not_ours_is_refused_untouched(pg_server: PGServer, pg_url: str) -> None:
    pg_server.execute(pg_url, "CREATE SCHEMA replaylog; CREATE TABLE replaylog.orders (id int)")
    with pytest.raises(SchemaVersionError, match="not a replaylog one"):
        open_store(pg_url)
    tables = pg_server.execute(pg_url, "SELECT table_name FROM information_schema.tables"
                                       " WHERE table_schema = 'replaylog'")
    assert tables == [("orders",)]


def test_a_newer_schema_version_is_refused_untouched(pg_url: str, pg_server: PGServer) -> None:
    open_store(pg_url).close()
    newer = latest() + 1  # a version this replaylog does not know yet
    pg_server.execute(pg_url, f"UPDATE replaylog.meta SET version = {newer}")
    for readonly in (False, True):
        with pytest.raises(SchemaVersionError, match=f"schema version {newer}, newer"):
            open_store(pg_url, readonly=readonly)
    assert pg_server.execute(pg_url, "SELECT version FROM replaylog.meta") == [(newer,)]


def test_a_readonly_open_of_an_empty_database_creates_nothing(pg_url: str, pg_server: PGServer) -> None:
    with pytest.raises(SchemaVersionError, match="not initialised"):
        open_store(pg_url, readonly=True)
    assert pg_server.execute(pg_url, "SELECT 1 FROM pg_namespace WHERE nspname = 'replaylog'") == []


def test_another_tables_in_other_schemas_are_left_alone(pg_url: str, pg_server: PGServer) -> None:
    pg_server.execute(pg_url, "CREATE TABLE public.workflows (id int)")
    with open_store(pg_url) as s:
        s.start_workflow("wf", 1, workflow_id="x")
    assert pg_server.execute(pg_url, "SELECT count(*) FROM public.workflows") == [(0,)]


def test_a_notification_changes_the_change_token_of_another_connection(pg_url: str) -> None:
    with open_store(pg_url) as watcher, open_store(pg_url) as writer:
        before = watcher.data_version()
        writer.start_workflow("wf", 1)
        assert wait_for(lambda: watcher.data_version() != before, timeout=120)
        seen = watcher.data_version()
        wid = writer.start_workflow("wf", 2)
        assert wait_for(lambda: watcher.data_version() != seen, timeout=120)
        seen = watcher.data_version()
        writer.send_signal(wid, "go", 1)
        assert wait_for(lambda: watcher.data_version() != seen, timeout=120)


def test_closing_a_store_ends_its_change_listener_without_waiting_for_a_notification(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The listening thread's own look at the closing flag is put off for an hour: only close()
    # can end its wait (a client's close, a command's exit, used to wait out a poll).
    monkeypatch.setattr(pg_connection, "LISTEN_IDLE", 3600.0)
    store = open_store(pg_url)
    store.data_version()  # starts the listener
    listener = store._listener  # type: ignore[attr-defined]
    assert listener is not None and listener.is_alive()
    store.close()
    listener.join(120)
    assert not listener.is_alive()
    with open_store(pg_url) as watcher, open_store(pg_url) as writer:  # a new store still hears changes
        seen = watcher.data_version()
        writer.start_workflow("wf", 1)
        assert wait_for(lambda: watcher.data_version() != seen, timeout=120)


def test_a_client_dropped_unclosed_ends_its_listener_and_its_connections(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # `Client(url).get_handle(wid).export()` is a natural line that never closes its client: the
    # listening thread it started must not keep it alive and connected (reconnecting, once its
    # database is gone) for the rest of the process. Only the finalizer can end the wait here.
    monkeypatch.setattr(pg_connection, "LISTEN_IDLE", 3600.0)
    before = set(threading.enumerate())
    client = Client(pg_url)
    wid = client.start("wf", 1).id
    assert client.get_handle(wid).describe().status == "pending"
    (listener,) = [t for t in threading.enumerate() if t not in before and t.name == "replaylog-pg-listen"]

    def connections() -> int:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            (count,) = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                     " AND pid <> pg_backend_pid()").fetchone() or (0,)
        return int(count)

    assert connections() == 2  # the client's and its listener's
    del client
    gc.collect()
    listener.join(120)
    assert not listener.is_alive()
    assert wait_for(lambda: connections() == 0, timeout=120)


def terminate_others(pg_url: str) -> int:
    """pg_terminate_backend on every other connection to the test's database; how many."""
    with psycopg.connect(pg_url, autocommit=True) as admin:
        rows = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                             " WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchall()
    return len(rows)


def test_a_terminated_backend_costs_a_retry_and_the_commit_happens_once(pg_url: str) -> None:
    with open_store(pg_url) as s:
        s.start_workflow("wf", 1, workflow_id="x")
        (claim,) = s.claim("w1", ttl=30)
        assert s.commit_record(claim, 0, rec("a", 0), ttl=30)
        assert terminate_others(pg_url) >= 1
        # The store's connection is dead: the next commit reconnects and writes once.
        assert s.commit_record(claim, 1, rec("a", 1), ttl=30)
        written, finished = s.commit_batch([PendingRecord(claim, 2, rec("a", 2))],
                                           finishes=[(claim, Outcome(status="completed", result=3))], ttl=30)
        assert written == [True] and finished == [True]
        assert [c.slot for c in s.list_commands("x")] == [0, 1, 2]
        assert s.get_workflow("x").status == "completed"


def test_a_commit_whose_answer_was_lost_is_reported_written_not_refused(pg_url: str) -> None:
    """The server committed, the connection died before the answer came: the retry finds its own row."""
    with open_store(pg_url) as s:
        s.start_workflow("wf", 1, workflow_id="x")
        (claim,) = s.claim("w1", ttl=30)
        real = s._conn
        params_seen: list[int] = []

        class LosesTheAnswer:
            """Forwards to the real connection; the first slot statement commits, then the connection dies.

            (A lone slot goes straight through libpq, prepared, and blocking: its answer is lost
            in `exec_prepared`.)
            """

            pgconn = LibpqLosingFirstAnswer(real, params_seen)

            def __getattr__(self, name: str) -> object:
                return getattr(real, name)

            def execute(self, sql: str, params: object = None) -> object:
                cur = real.execute(sql, params)
                if "INSERT INTO commands" in sql and not sql.startswith("PREPARE") and not params_seen:
                    params_seen.append(1)
                    real.close()
                    raise psycopg.OperationalError("the connection was lost")
                return cur

            def wait(self, gen: object) -> object:
                results = real.wait(gen)
                if not params_seen:
                    params_seen.append(1)
                    real.close()
                    raise psycopg.OperationalError("the connection was lost")
                return results

        s._conn = LosesTheAnswer()  # type: ignore[assignment]
        assert s.commit_record(claim, 0, rec("a", 0), ttl=30) is True
        assert params_seen
        assert s.commit_record(claim, 1, rec("a", 1), ttl=30) is True
        assert [c.slot for c in s.list_commands("x")] == [0, 1]


def _faulty(store: object, fault_after: str, fault_before: str = "") -> list[str]:
    """Wrap the store's connection: the first statement containing `fault_after` runs and its
    connection then dies; one containing `fault_before` (after that) dies before it runs."""
    real = store._conn  # type: ignore[attr-defined]
    faults: list[str] = []

    class Faulty:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def execute(self, statement: str, params: object = None) -> object:
            if fault_before and fault_before in statement and not faults:
                faults.append("before")
                real.close()
                raise psycopg.OperationalError("the connection was lost")
            cur = real.execute(statement, params)
            if fault_after and fault_after in statement and not faults:
                faults.append("after")
                real.close()
                raise psycopg.OperationalError("the connection was lost")
            return cur

    store._conn = Faulty()  # type: ignore[attr-defined]
    return faults


@pytest.mark.parametrize("fault", ["the claim's answer", "the history read"])
def test_a_claim_that_met_a_fault_returns_the_workflows_it_leased_with_their_histories(pg_url: str,
                                                                                       fault: str) -> None:
    """The claim's one statement committed and the connection died before its answer came, or
    the history read after it died: the retry returns the workflows that claim leased, with
    their histories (not nothing, which would strand them until their lease lapses)."""
    with open_store(pg_url) as s:
        s.start_workflow("wf", 1, workflow_id="x")
        (first,) = s.claim("w1", ttl=30)
        assert s.commit_record(first, 0, rec("a", 0), ttl=30)
        s.release(first)
        if fault == "the claim's answer":
            faults = _faulty(s, fault_after="SET status = 'running'")
        else:
            faults = _faulty(s, fault_after="", fault_before="JOIN commands")
        claims = s.claim("w1", ttl=30)
        assert faults
        assert [(c.id, c.epoch) for c in claims] == [("x", first.epoch + 1)]
        assert claims[0].state is not None and [r.value for r in claims[0].state.commands] == [0]
        assert s.claim("w1", ttl=30) == []  # leased once: nothing else to claim


def lose_the_next_answer(store: object) -> None:
    """The store's next transaction commits on the server, then its connection dies before the answer comes."""
    real = store._conn  # type: ignore[attr-defined]

    depth = [0]

    class LosesTheAnswer:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        @contextmanager
        def transaction(self) -> Iterator[object]:
            depth[0] += 1
            try:
                with real.transaction() as tx:
                    yield tx
            finally:
                depth[0] -= 1
            if depth[0] == 0:  # the outermost one (not a savepoint) has committed: only the answer is lost
                real.close()
                raise psycopg.OperationalError("the connection was lost")

    store._conn = LosesTheAnswer()  # type: ignore[attr-defined]


def test_an_operator_write_whose_answer_was_lost_is_made_once_and_answered_as_the_first_try(pg_url: str) -> None:
    """Each operator write is retried after a lost answer; its own audit row says it committed."""
    with open_store(pg_url) as s:
        lose_the_next_answer(s)
        wid = s.start_workflow("wf", 1, workflow_id="x")  # not "already exists"
        lose_the_next_answer(s)
        assert s.send_signal(wid, "go", 1) == 1  # not a second signal, #2
        lose_the_next_answer(s)
        assert s.cancel_workflow(wid, "enough") == "pending"  # not "already asked to cancel"
        lose_the_next_answer(s)
        assert s.fork_workflow(wid, 0, new_id="y") == "y"  # not "already exists"
        lose_the_next_answer(s)
        assert s.terminate_workflow("y") == "pending"  # not "is terminated"
        assert [sig.seq for sig in s.list_signals(wid)] == [1]
        assert [a.action for a in s.list_audit(wid)] == ["start", "signal", "cancel"]
        assert [a.action for a in s.list_audit("y")] == ["fork", "terminate"]
        assert s.get_workflow("y").status == "terminated"


def test_writes_whose_answer_was_lost_are_made_once(pg_url: str) -> None:
    """An approval, a cascading cancel, a parallel task's slot and a child's slot: retried after a lost
    answer, each finds its own commit and answers as the first try would have."""
    with open_store(pg_url) as s:
        s.start_workflow("asks", None, workflow_id="a")
        (claim,) = s.claim("w1", ttl=30)
        s.commit_batch(finishes=[(claim, Outcome(status="blocked", blocked_on="approval:req-0"))], ttl=30)
        lose_the_next_answer(s)
        assert s.answer_approval("a", approved=True, by="ann@host") == "req-0"  # not "no pending request"
        assert s.count_signals("a") == (1, 1)
        assert [x.action for x in s.list_audit("a")] == ["start", "approve"]

        s.start_workflow("parent", None, workflow_id="p")
        (parent,) = s.claim("w1", ttl=30, names=["parent"])
        lose_the_next_answer(s)
        child = CommandRecord("child", "kid", True, {"id": "p.0", "input": None}, None, 1, "[null]")
        assert s.commit_record(parent, 0, child, ttl=30) is True  # not "'p.0' already exists"
        assert s.family("p")["children"] == [{"id": "p.0", "workflow": "kid", "status": "pending"}]
        lose_the_next_answer(s)
        assert s.cancel_workflow("p", "enough") == "running"  # not "already asked to cancel"
        assert [(x.action, x.detail) for x in s.list_audit("p.0")] == [("cancel", "with its parent, from p")]

        real = s._conn
        lost: list[int] = []

        class LosesTheAnswer:
            """The first slot statement commits, then the connection dies before its answer comes."""

            def __getattr__(self, name: str) -> object:
                return getattr(real, name)

            def execute(self, statement: str, params: object = None) -> object:
                cur = real.execute(statement, params)
                if "INSERT INTO commands" in statement and not lost:
                    lost.append(1)
                    real.close()
                    raise psycopg.OperationalError("the connection was lost")
                return cur

        s._conn = LosesTheAnswer()  # type: ignore[assignment]
        assert s.commit_record(parent, 2, rec("task", 2), ttl=30, parallel_group=1) is True  # found as its own
        assert lost and [c.slot for c in s.list_commands("p")] == [0, 2]


def test_pg_terminate_backend_mid_run_loses_and_doubles_nothing(pg_url: str, tmp_path: Path) -> None:
    from test_worker import APP, env_for, ledger, recorded, start_many, statuses

    env = env_for(tmp_path, 0.03)
    ids = start_many(pg_url, 6, 40, env)
    worker = start_worker(pg_url, "--app", APP, "--until-idle", env=env)
    terminations = 0
    seen = 0
    for _ in range(4):  # a few terminations spread over the run, each of every connection at once
        # Caught mid-run, however slow the machine: ten more slots recorded since the last
        # termination, and more to come.
        assert wait_for(lambda seen=seen: worker.poll() is not None or len(recorded(pg_url)) >= seen + 10,
                        timeout=120)
        seen = len(recorded(pg_url))
        if worker.poll() is not None or seen >= 6 * 40 - 10:
            break
        terminations += terminate_others(pg_url) > 0
    assert worker.wait(timeout=120) == 0, worker.stderr.read().decode() if worker.stderr else ""
    assert terminations > 0, "the worker was never caught mid-run"
    assert set(statuses(pg_url).values()) == {"completed"}
    assert sum(1 for wid, _ in recorded(pg_url) if wid in ids) == 6 * 40
    runs = ledger(tmp_path)
    assert max(runs.values()) == 1  # no slot's activity ran twice after a recorded outcome


def test_a_signal_wakes_an_idle_worker_on_another_connection(pg_url: str, tmp_path: Path) -> None:
    from test_worker import APP, env_for, statuses

    env = env_for(tmp_path)
    wid = run_cli(pg_url, "start", "waits", "--app", APP, env=env).stdout.strip()
    worker = start_worker(pg_url, "--app", APP, env=env)
    try:
        assert wait_for(lambda: statuses(pg_url)[wid] == "blocked", timeout=60)
        assert run_cli(pg_url, "signal", wid, "go", '"now"', env=env).returncode == 0
        assert wait_for(lambda: statuses(pg_url)[wid] == "completed", timeout=60)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)


def restart_storm(pg_server: PGServer, pg_url: str, tmp_path: Path, *, workflows: int, steps: int,
                  every: float, limit: int) -> int:
    """A worker runs `workflows` × `steps` slots while the server is stopped and started (pg_ctl)
    every `every` seconds, at most `limit` times; checks nothing lost or doubled; the restarts made."""
    from test_worker import APP, env_for, ledger, recorded, start_many, statuses

    env = env_for(tmp_path, 0.05)
    ids = start_many(pg_url, workflows, steps, env)
    worker = subprocess.Popen([sys.executable, "-m", "replaylog", "--db", pg_url, "worker", "--app", APP,
                               "--until-idle"], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    restarts = 0
    try:
        assert wait_for(lambda: len(recorded(pg_url)) >= 10, timeout=60)
        while restarts < limit and worker.poll() is None:
            pg_server.restart()
            restarts += 1
            time.sleep(every)
        assert worker.wait(timeout=60 + 30 * workflows * steps / 40) == 0, \
            worker.stderr.read().decode() if worker.stderr else ""
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(30)
    assert restarts >= 1
    assert set(statuses(pg_url).values()) == {"completed"}
    assert sum(1 for wid, _ in recorded(pg_url) if wid in ids) == workflows * steps
    assert max(ledger(tmp_path).values()) == 1
    err = worker.stderr.read().decode() if worker.stderr else ""
    # Said once per outage and connection fault seen, not once per reconnect attempt.
    assert 1 <= err.count("lost the connection") <= 5 * restarts
    return restarts


def test_a_server_restart_mid_run_loses_and_doubles_nothing(pg_server: PGServer, pg_url: str, tmp_path: Path) -> None:
    """CI size: two restarts a few seconds apart (`make soak` restarts it every few seconds for minutes)."""
    restart_storm(pg_server, pg_url, tmp_path, workflows=4, steps=40, every=2.0, limit=2)


@pytest.mark.soak
def test_soak_server_restarted_every_few_seconds_loses_and_doubles_nothing(pg_server: PGServer, pg_url: str,
                                                                         tmp_path: Path) -> None:
    """The soak variant (make soak): as DBOS's chaos suite, the server stopped and started every 3 s.

    20 × 2,000 slots, so the run outlasts 20 restarts (20 × 200 was done after 4 once marks were batched).
    """
    assert restart_storm(pg_server, pg_url, tmp_path, workflows=20, steps=2000, every=3.0, limit=1000) >= 20


def test_store_errors_are_one_line(pg_url: str) -> None:
    with open_store(pg_url) as s, pytest.raises(StoreError) as err:
        s.list_workflows(sort="nope")
    assert "\n" not in str(err.value)


def test_the_demo_refuses_postgresql_in_one_line(pg_url: str) -> None:
    proc = run_cli(pg_url, "demo")
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@async_test
async def test_the_readonly_console_on_postgresql_refreshes_on_notification_and_hides_the_password(
        pg_server: PGServer, pg_url: str) -> None:
    url = with_password(pg_server, pg_url)
    with open_store(url) as store:
        store.start_workflow("refund", 1, workflow_id="first")
    app = make_app(url, readonly=True, poll_interval=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(PagedTable)
        assert column(table, "id") == ["first"]
        title = app.screen.topbar(Text("")).plain  # type: ignore[attr-defined]
        assert "s3cret" not in title and "postgresql://ops:***@/" in title and "read-only" in title
        with open_store(url) as store:  # another process starts one: NOTIFY, the console's token moves
            store.start_workflow("refund", 2, workflow_id="second")
        assert await wait_until(pilot, lambda: sorted(column(table, "id")) == ["first", "second"])
        with pytest.raises(SignalRefused, match="read-only"):
            app.data.send_signal("first", "go", 1)


@async_test
async def test_the_console_on_postgresql_shows_a_running_workflows_new_slots_with_no_notification(
        pg_url: str) -> None:
    """Slots are committed without a NOTIFY: the console reads what it shows again every few seconds."""
    with open_store(pg_url) as store:
        store.start_workflow("refund", 1, workflow_id="running")
        (claim,) = store.claim("w1", ttl=60)
        assert store.commit_record(claim, 0, rec("a"), ttl=60)
        app = make_app(pg_url, readonly=True, poll_interval=0.05)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            table = app.screen.query_one(PagedTable)
            assert column(table, "slots") == ["1"]
            seen = app.changes_seen
            for slot in range(1, 4):
                assert store.commit_record(claim, slot, rec("a"), ttl=60)
            assert await wait_until(pilot, lambda: column(table, "slots") == ["4"])
            assert app.changes_seen > seen


@pytest.mark.pgserver
def test_a_data_folder_left_by_a_cut_short_initdb_is_made_afresh() -> None:
    """On a loaded machine pgserver's initdb can be cut short, leaving the bootstrap backend's
    postmaster.pid (a negative pid, seven lines): every start then failed on reading it."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="replaylog-pg-"))
    base.chmod(0o755)
    pgdata = base / "pg"
    pgdata.mkdir()
    (pgdata / "PG_VERSION").write_text("16\n")
    (pgdata / "postmaster.pid").write_text(f"-24094\n{pgdata}\n1796271023\n5432\n\n\n  2265599    327682\n")
    try:
        server = PGServer(pgdata, durable=False)
        try:
            assert server.execute(server.admin_url, "SELECT 1") == [(1,)]
        finally:
            server.close()
        # Stopped for good (pgserver's own cleanup left a server restarted by pg_ctl running).
        assert not (pgdata / "postmaster.pid").exists()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.admin_url, connect_timeout=2).close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_start_mark_sent_without_waiting_outlives_a_killed_worker_and_counts_its_attempts(
        pg_url: str, tmp_path: Path) -> None:
    # Start marks go out without waiting for their answer (PGConnection._send_unanswered):
    # a worker SIGKILLed while its activity runs must still leave the mark, on the server,
    # where every host sees it; the next worker counts its attempts on from it.
    from fault_harness import crash_mid_activity, read_jsonl

    ledger = tmp_path / "ledger.jsonl"
    with open_store(pg_url) as store:
        wid = store.start_workflow("stalled", "held")

        def marked(crash: int) -> None:  # killed mid-activity at slot 1, its mark's answer maybe unread
            # The server runs what it was sent (a statement already in its socket): wait for it.
            assert wait_for(lambda: (m := store.inflight(wid)) is not None and m.attempts == crash, timeout=120)
            row = store.inflight(wid)
            assert row is not None and (row.slot, row.name, row.attempts) == (1, "stall", crash)

        crash_mid_activity(pg_url, tmp_path, 2, marked)
        assert store.get_workflow(wid).status == "completed"
        assert [e["attempt"] for e in read_jsonl(ledger) if e.get("event") == "start"] == [1, 2, 3]


def test_a_start_mark_whose_connection_broke_is_made_again_when_the_next_goes_out(pg_url: str) -> None:
    # Marks are sent without waiting for their answer (engine.store.postgres.marks); when
    # the answer (read before the next batch is sent) says one never ran, it is made again
    # on a new connection.
    with open_store(pg_url) as s, open_store(pg_url) as other:
        s.start_workflow("wf", 1, workflow_id="x")
        s.start_workflow("wf", 1, workflow_id="y")
        x, y = s.claim("w1", ttl=30, limit=2)
        s.mark_started(x, 0, "a", 1, time.time())
        assert wait_for(lambda: other.inflight("x") is not None, timeout=120)
        assert terminate_others(pg_url) >= 1  # the mark sender's backend is gone; it does not know yet
        s.mark_started(x, 0, "a", 2, time.time())
        s.mark_started(y, 0, "b", 1, time.time())  # reads the answer of x's: lost, so x's is made again
        assert wait_for(lambda: (m := other.inflight("y")) is not None and m.name == "b", timeout=120)
        row = other.inflight("x")
        assert row is not None and (row.slot, row.name, row.attempts) == (0, "a", 2)


def test_a_start_mark_under_a_lease_taken_over_is_refused_after_the_new_lease_marked(pg_url: str) -> None:
    # A lone mark goes out with its claim's id, owner and epoch encoded once per lease
    # (engine.store.postgres.text): the old lease's mark, sent after the new lease's from the
    # same process, must still be fenced out by its own epoch.
    with open_store(pg_url) as s, open_store(pg_url) as other:
        s.start_workflow("wf", 1, workflow_id="x")
        s.start_workflow("wf", 1, workflow_id="y")
        (old,) = s.claim("w1", ttl=0.0, limit=1)  # x (the oldest), lapsed at once
        s.mark_started(old, 0, "old", 1, time.time())
        claims = {c.id: c for c in s.claim("w2", ttl=60, limit=2)}  # y pending, x lapsed
        new, y = claims["x"], claims["y"]
        assert new.epoch == old.epoch + 1
        s.mark_started(new, 0, "new", 2, time.time())
        s.mark_started(old, 0, "stale", 3, time.time())
        s.mark_started(y, 0, "after", 1, time.time())  # sent after the stale one, on the same connection
        assert wait_for(lambda: other.inflight("y") is not None, timeout=120)
        row = other.inflight("x")
        assert row is not None and (row.name, row.attempts) == ("new", 2)


def test_times_reach_the_server_as_the_very_floats_sent(pg_url: str) -> None:
    # A lone slot's time and its lease's expiry, and a start mark's time, go to libpq in
    # binary float8 (engine.store.postgres.text, "binary times"): each must read back as the
    # float the worker had, to the last bit (text of fewer digits would round it).
    started_at = 1_764_900_000.123_456_7  # more digits than microseconds: a rounding would show
    with open_store(pg_url) as s, open_store(pg_url) as other:
        s.start_workflow("wf", 1, workflow_id="x")
        (x,) = s.claim("w1", ttl=30, limit=1)
        s.mark_started(x, 0, "a", 1, started_at)
        assert wait_for(lambda: other.inflight("x") is not None, timeout=120)
        mark = other.inflight("x")
        assert mark is not None and mark.started_at == started_at
        before = time.time()
        assert s.commit_record(x, 0, rec("a", 1), ttl=30.25)
        after = time.time()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            (recorded_at,) = conn.execute("SELECT recorded_at FROM replaylog.commands").fetchone()  # type: ignore[misc]
            (expires,) = conn.execute(  # type: ignore[misc]
                "SELECT lease_expires FROM replaylog.workflows WHERE id = 'x'").fetchone()
        assert before <= recorded_at <= after
        assert expires == recorded_at + 30.25  # the store's own sum, exactly


def test_a_batch_of_marks_carries_each_time_exactly(pg_url: str) -> None:
    # Marks sent together are one JSON array (engine.store.postgres.marks), each time in it
    # float text: it must read back as the very float, as a lone mark's binary one does.
    from replaylog.engine.store.postgres.marks import MarkSender

    times = {"x": 1_764_900_000.123_456_7, "y": 5e-324, "z": 0.1}
    with open_store(pg_url) as s, open_store(pg_url) as other:
        for wid in times:
            s.start_workflow("wf", 1, workflow_id=wid)
        claims = {c.id: c for c in s.claim("w1", ttl=30, limit=3)}
        sender = MarkSender.shared(pg_url)
        try:
            sender._send([(claims[wid], 0, "a", 1, t, 0) for wid, t in times.items()])
            sender._send([(claims["x"], 0, "a", 2, times["x"], 0)])  # reads the batch's answer: it ran
        finally:
            sender.release()
        for wid, t in times.items():
            assert wait_for(lambda wid=wid: other.inflight(wid) is not None, timeout=120)
            mark = other.inflight(wid)
            assert mark is not None and mark.started_at == t, (wid, mark)


def test_a_group_commit_with_a_slot_the_server_refuses_writes_none_of_its_slots_and_the_store_goes_on(
        pg_url: str) -> None:
    # A batch of slots is one pipeline ending in one Sync, one transaction: a statement the
    # server refuses (an attempts count past its int column) aborts the others, the error is
    # raised once the pipeline's answers were read, and the connection serves the next commit.
    with open_store(pg_url) as s:
        s.start_workflow("wf", 1, workflow_id="x")
        s.start_workflow("wf", 1, workflow_id="y")
        claims = {c.id: c for c in s.claim("w1", ttl=60, limit=2)}
        good = PendingRecord(claims["x"], 0, CommandRecord("activity", "a", True, 1, None, 1, None))
        bad = PendingRecord(claims["y"], 0, CommandRecord("activity", "b", True, 2, None, 2**40, None))
        with pytest.raises(StoreError, match="out of range"):
            s.commit_batch([good, bad], ttl=60)
        assert s.list_commands("x") == [] and s.list_commands("y") == []
        fixed = PendingRecord(claims["y"], 0, CommandRecord("activity", "b", True, 2, None, 2, None))
        assert s.commit_batch([good, fixed], ttl=60)[0] == [True, True]
        assert [c.name for c in s.list_commands("x")] == ["a"] and [c.name for c in s.list_commands("y")] == ["b"]


def test_start_marks_of_many_threads_share_batches_and_each_workflow_keeps_its_latest(pg_url: str) -> None:
    # The workflow threads of a process share one mark sender: marks queued while a batch
    # is sent go out together, in one statement; two of one workflow in a batch (a parallel
    # group's tasks) keep the later one instead of failing the statement.
    import threading

    with open_store(pg_url) as s:
        for i in range(8):
            s.start_workflow("wf", 1, workflow_id=f"w{i}")
        claims = s.claim("w1", ttl=60, limit=8)
    errors: list[BaseException] = []

    def marker(k: int) -> None:
        try:
            with open_store(pg_url) as mine:
                for attempt in range(1, 41):
                    for c in (claims[k], claims[(k + 1) % 8]):  # every workflow marked by two threads
                        mine.mark_started(c, 0, f"t{k}", attempt, time.time())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=marker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with open_store(pg_url) as s:
        for c in claims:
            assert wait_for(lambda c=c: (m := s.inflight(c.id)) is not None and m.attempts == 40, timeout=120)


def test_a_child_signal_whose_commit_answer_was_lost_reaches_the_child_once(pg_url: str) -> None:
    """The retry after a lost answer finds the slot committed: the signal it carried is not sent again."""
    with open_store(pg_url) as s:
        s.start_workflow("parent", None, workflow_id="p")
        (parent,) = s.claim("w1", ttl=30, names=["parent"])
        start = {"id": "p.0", "input": None, "parent_close": "cancel"}
        assert s.commit_record(parent, 0, CommandRecord("child_start", "kid", True, start, None, 1, "[null]"), ttl=30)
        lose_the_next_answer(s)
        signal = CommandRecord("child_signal", "go", True, {"id": "p.0", "payload": 1}, None, 1, '["p.0"]')
        assert s.commit_record(parent, 1, signal, ttl=30) is True
        lose_the_next_answer(s)
        written, _ = s.commit_batch([PendingRecord(parent, 2, CommandRecord(
            "child_signal", "go", True, {"id": "p.0", "payload": 2}, None, 1, '["p.0"]'))], ttl=30)
        assert written == [True]
        assert [(sig.name, sig.payload) for sig in s.list_signals("p.0")] == [("go", 1), ("go", 2)]
        assert [x.action for x in s.list_audit("p.0")] == ["signal", "signal"]


def test_a_workflows_slots_are_read_as_a_range_of_the_key_however_many_commands_there_are(pg_url: str) -> None:
    """`show`, the console and the client read one workflow's slots by a range of the commands' key:
    joined to the workflows row instead, the planner walked the whole key in order for the ORDER BY
    ... LIMIT, and one workflow's read grew with every other workflow's commands."""
    from replaylog.engine.store.shared import reads

    with open_store(pg_url) as s:
        wid = s.start_workflow("wf", 1)
        (claim,) = s.claim("w1", ttl=30)
        for slot in range(3):
            assert s.commit_record(claim, slot, rec("a", slot), ttl=30)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        # 200,000 commands of 20,000 other workflows, numbered past this one.
        conn.execute("INSERT INTO replaylog.commands (slot_key, kind, name, ok, attempts, recorded_at)"
                     " SELECT ((g / 10 + 1000)::bigint << 32) + g % 10, 'activity', 'x', true, 1, 0"
                     " FROM generate_series(0, 199999) g")
        conn.execute("ANALYZE replaylog.commands")
        conn.execute("ANALYZE replaylog.workflows")
        conn.execute("SET search_path TO replaylog")
        for sql, params in (
                (f"SELECT {reads._COMMAND_COLUMNS} FROM commands c WHERE {reads._KEYS_FROM}"
                 " ORDER BY c.slot_key LIMIT %s", (wid, 0, wid, 50)),  # (a page, as the console reads)
                (f"SELECT {reads._COMMAND_COLUMNS} FROM commands c WHERE {reads._KEYS_FROM} AND c.ok = %s"
                 " ORDER BY c.slot_key DESC LIMIT 1", (wid, 0, wid, False))):
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql.replace("?", "%s"), params).fetchall())
            assert "Index Cond: ((slot_key >=" in plan and "Join Filter" not in plan, plan
    with open_store(pg_url) as s:
        assert [c.slot for c in s.list_commands(wid)] == [0, 1, 2]
        assert [c.slot for c in s.list_commands(wid, offset=1, limit=1)] == [1]
        assert s.first_slot(wid, "activity", "a") == 0
        assert s.last_failed_command(wid) is None
