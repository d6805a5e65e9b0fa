"""The PostgreSQL tests' databases are lent again after a test: each test must still start on a
database as empty as a new one, whatever the test before it left."""

from __future__ import annotations

import psycopg
from pg_server import Databases, PGServer

from conftest import start_worker
from replaylog.engine.store import open_store


def test_a_database_given_back_is_lent_again_empty(pg_server: PGServer) -> None:
    dbs = Databases(pg_server)
    url = dbs.take()
    with open_store(url) as s:
        s.start_workflow("wf", 1, workflow_id="left-behind")
    idle = psycopg.connect(url)  # a connection the test forgot: ended, not waited for
    dbs.give_back(url)
    assert idle.closed or idle.broken or _dead(idle)
    again = dbs.take()
    assert again == url
    assert pg_server.execute(again, "SELECT to_regnamespace('replaylog')") == [(None,)]
    with open_store(again) as s:
        assert s.list_workflows(limit=-1) == []
    dbs.give_back(again)


def test_a_database_left_with_things_of_a_tests_own_is_dropped_not_lent(pg_server: PGServer) -> None:
    dbs = Databases(pg_server)
    url = dbs.take()
    pg_server.execute(url, "CREATE TABLE public.mine (x int)")
    dbs.give_back(url)
    name = url.split("?")[0].rsplit("/", 1)[1]
    assert pg_server.execute(pg_server.admin_url, "SELECT 1 FROM pg_database WHERE datname = %s", (name,)) == []
    other = dbs.take()
    assert other != url
    dbs.give_back(other)


def test_a_worker_still_running_at_the_end_of_a_test_does_not_reach_the_next(pg_server: PGServer) -> None:
    dbs = Databases(pg_server)
    url = dbs.take()
    worker = start_worker(url, "--create")
    try:
        with open_store(url) as s:
            s.start_workflow("refund", 7)
        dbs.give_back(url)  # its connections are ended; it reconnects, or it does not
    finally:
        worker.kill()
        worker.wait(60)
    again = dbs.take()
    assert pg_server.execute(again, "SELECT to_regnamespace('replaylog')") == [(None,)]
    dbs.give_back(again)


def _dead(conn: psycopg.Connection[object]) -> bool:
    try:
        conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return True
    return False
