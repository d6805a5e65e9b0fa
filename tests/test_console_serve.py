"""`replaylog console --serve`: the console in a browser session, and the checks made before one starts.

Each test runs the real server (a CLI subprocess) and talks to it as textual.js does: the
page and the token over HTTP, the session over its websocket, keys typed as a terminal
sends them. The browser itself is in test_console_browser.py.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from console_web import open_session, screen_text
from serve_helpers import served_console

from conftest import cli_env, run_cli, wait_for
from replaylog.console.serve import is_loopback
from replaylog.engine.store import open_store

TOKEN = "tok-7f3a9c1e-never-shown"


def run(test: Callable[[aiohttp.ClientSession], Awaitable[None]]) -> None:
    """Run one async check with its own HTTP client (cookies kept, as a browser keeps them)."""
    async def go() -> None:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:  # keeps an IP's cookies
            await test(http)
    asyncio.run(go())


def test_a_served_session_shows_the_list_and_audits_its_writes_with_the_browsers_address(demo_db: Path) -> None:
    with served_console(demo_db) as served:
        async def check(http: aiohttp.ClientSession) -> None:
            page = await http.get(served.url + "/")
            assert page.status == 200 and "data-session-websocket-url" in await page.text()
            session = await open_session(http, served.url)
            assert await session.shows("refund-deadline-21"), "the list never showed the demo's workflows"
            mark = len(session.received)
            await session.keys("g")
            assert await session.shows("Go to workflow id", since=mark)  # the dialog (the footer says "Go to id")
            mark = len(session.received)
            await session.keys("report-200", "\r")
            assert await session.shows("1 Slots", since=mark)  # the workflow's screen
            mark = len(session.received)
            await session.keys("s")
            assert await session.shows("Send a signal to", since=mark)
            mark = len(session.received)
            await session.keys("nudge")
            assert await session.shows("nudge", since=mark)
            mark = len(session.received)
            # The payload, typed at once after tab: the dialog sends only what the operator typed,
            # and the keys after tab land in the payload however quickly they arrive.
            await session.keys("\t", "null")
            assert await session.shows("valid JSON", since=mark), screen_text(bytes(session.received[mark:]))
            mark = len(session.received)
            await session.keys("\x13")  # ctrl+s sends
            assert await session.shows("Signal sent", since=mark), screen_text(bytes(session.received[-6000:]))
            assert await wait_async(lambda: _signal_names(demo_db, "report-200") == ["nudge"])
            await session.ws.close()
        run(check)
    with open_store(demo_db, readonly=True) as store:
        (audit,) = [a for a in store.list_audit("report-200") if a.action == "signal"]
    assert audit.actor.endswith(" for browser 127.0.0.1"), audit.actor


async def wait_async(predicate: Callable[[], bool], timeout: float = 60.0) -> bool:
    """conftest.wait_for without blocking the event loop (the session's websocket keeps being served)."""
    return await asyncio.to_thread(wait_for, predicate, timeout)


def _signal_names(db: Path | str, workflow_id: str) -> list[str]:
    with open_store(db, readonly=True) as store:
        return [s.name for s in store.list_signals(workflow_id)]


def test_a_readonly_served_console_writes_nothing(demo_db: Path) -> None:
    with served_console(demo_db, "--readonly") as served:
        async def check(http: aiohttp.ClientSession) -> None:
            session = await open_session(http, served.url)
            assert await session.shows("report-200")
            await session.keys("g")
            assert await session.shows("Go to workflow id")  # the dialog (the footer says "Go to id")
            mark = len(session.received)
            await session.keys("report-200", "\r")
            assert await session.shows("1 Slots", since=mark)
            mark = len(session.received)
            await session.keys("s")
            assert await session.shows("read-only", since=mark)
            await session.ws.close()
        run(check)
    assert _signal_names(demo_db, "report-200") == []


def test_a_token_is_asked_before_any_session_and_a_wrong_or_missing_one_is_refused(demo_db: Path) -> None:
    with served_console(demo_db, env=cli_env(REPLAYLOG_CONSOLE_TOKEN=TOKEN)) as served:
        async def check(http: aiohttp.ClientSession) -> None:
            page = await http.get(served.url + "/")
            body = await page.text()
            assert page.status == 200 and 'name="token"' in body and "data-session-websocket-url" not in body
            with pytest.raises(aiohttp.WSServerHandshakeError) as missing:
                await open_session(http, served.url)
            assert missing.value.status == 401
            wrong = await http.post(served.url + "/login", data={"token": "not-it"}, allow_redirects=False)
            assert wrong.status == 401 and "not the one" in await wrong.text()
            assert not http.cookie_jar.filter_cookies(served.url)  # nothing earned
            with pytest.raises(aiohttp.WSServerHandshakeError):
                await open_session(http, served.url)
            right = await http.post(served.url + "/login", data={"token": TOKEN}, allow_redirects=False)
            assert right.status == 303
            cookie = right.cookies["replaylog_console"]
            assert cookie.value != TOKEN and cookie["httponly"] and cookie["samesite"] == "Strict"
            page = await http.get(served.url + "/")
            body = await page.text()
            assert "data-session-websocket-url" in body and TOKEN not in body
            session = await open_session(http, served.url)
            assert await session.shows("refund-deadline-21")
            assert TOKEN.encode() not in session.received
            await session.ws.close()
        run(check)
    assert TOKEN not in served.output[0]
    assert "wrong token" in served.output[0]  # the attempt is logged, the token never


def test_a_database_password_is_never_in_the_page_the_session_or_the_log(pg_url: str) -> None:
    secret = "pw-5b8e1d-never-shown"
    url = re.sub(r"^postgresql://([^:@/]*)(:[^@]*)?@", rf"postgresql://\1:{secret}@", pg_url)
    assert secret in url
    with open_store(url) as store:  # the test server trusts local connections: any password opens it
        store.start_workflow("refund", 5, workflow_id="refund-pg-5")
    with served_console(url) as served:
        async def check(http: aiohttp.ClientSession) -> None:
            page = await http.get(served.url + "/")
            assert secret not in await page.text()
            session = await open_session(http, served.url)
            assert await session.shows("refund-pg-5")
            assert secret.encode() not in session.received
            await session.ws.close()
        run(check)
    assert "Serving the replaylog console" in served.output[0]
    assert secret not in served.output[0]


def test_a_page_of_another_site_or_a_rebound_host_gets_no_session(demo_db: Path) -> None:
    with served_console(demo_db) as served:
        async def check(http: aiohttp.ClientSession) -> None:
            with pytest.raises(aiohttp.WSServerHandshakeError) as other_site:
                await open_session(http, served.url, headers={"Origin": "http://evil.example"})
            assert other_site.value.status == 403
            # DNS rebinding: a site's own name resolved to 127.0.0.1 arrives with that name as its Host.
            rebound = {"Host": f"evil.example:{served.port}", "Origin": f"http://evil.example:{served.port}"}
            page = await http.get(served.url + "/", headers={"Host": rebound["Host"]})
            assert page.status == 403
            with pytest.raises(aiohttp.WSServerHandshakeError) as rebound_ws:
                await open_session(http, served.url, headers=rebound)
            assert rebound_ws.value.status == 403
        run(check)


def test_a_non_loopback_bind_without_a_token_refuses_to_serve(demo_db: Path) -> None:
    result = run_cli(demo_db, "console", "--serve", "--host", "0.0.0.0", "--port", "1")
    assert result.returncode == 1
    assert "--host 0.0.0.0 is not a loopback address" in result.stderr and "REPLAYLOG_CONSOLE_TOKEN" in result.stderr
    assert "Serving" not in result.stdout


def test_host_and_port_without_serve_are_a_mistake(demo_db: Path) -> None:
    result = run_cli(demo_db, "console", "--port", "8080")
    assert result.returncode == 1 and "add --serve" in result.stderr


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.3.2.1", True), ("localhost", True), ("::1", True), ("[::1]", True),
    ("0.0.0.0", False), ("::", False), ("192.0.2.7", False), ("box.example", False), ("localhost.example", False),
])
def test_only_loopback_names_count_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
