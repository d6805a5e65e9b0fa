"""The console in a browser: textual-serve runs one console process per browser session.

`ConsoleServer` is textual-serve's `Server` with the checks a served operator console
needs before a session starts, all made before the websocket is accepted:

- Bound to a loopback address, it needs no token by default, but it still refuses a
  request whose Host is not a loopback name (a DNS-rebinding page that resolves its own
  name to 127.0.0.1) and a websocket opened by a page of another origin (any site the
  operator visits could otherwise type into the console).
- Bound anywhere else, it needs a token (`ServeRefused` otherwise). The page asks for it
  in a form (POSTed: never in a URL, so never in an access log or the browser's history);
  a right token earns an HttpOnly, SameSite=Strict cookie holding a random session key
  (not the token), and only a request with a key this server issued may open a session.

Each session runs `replaylog console` in its own process, with the database in
$REPLAYLOG_DB (a URL's password never on a command line), the token removed from its
environment, and the browser's address in $REPLAYLOG_REMOTE_ADDR, which the store's
audit trail records with every write the session makes.
"""

from __future__ import annotations

import asyncio
import hmac
import html
import ipaddress
import logging
import os
import secrets
import shlex
import sys
from importlib.resources import files
from string import Template
from typing import Any

from aiohttp import web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

from replaylog.console.data import REMOTE_ADDR_ENV, redact_url

TOKEN_ENV = "REPLAYLOG_CONSOLE_TOKEN"
COOKIE = "replaylog_console"
# Below this many CSS pixels wide (a phone held upright) the page starts with a smaller font,
# so that the console gets the columns it lays out for (it adapts down to about 60).
NARROW_PX = 640

log = logging.getLogger("replaylog.console.serve")


class ServeRefused(Exception):
    """The console cannot be served as asked (a non-loopback address without a token)."""


def is_loopback(host: str) -> bool:
    """Whether a host name or address reaches this machine only: localhost, 127.0.0.0/8, ::1."""
    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_name(host_header: str) -> str:
    """The name part of a Host header ("[::1]:8080" → "::1", "box:80" → "box")."""
    if host_header.startswith("["):
        return host_header[1:].partition("]")[0]
    return host_header.rpartition(":")[0] if host_header.count(":") == 1 else host_header


class _Session(AppService):
    """One browser session's console process: told who it serves, never given the token."""

    def __init__(self, command: str, environment: dict[str, str], **kwargs: Any) -> None:
        super().__init__(command, **kwargs)
        self._session_environment = environment

    def _build_environment(self, width: int = 80, height: int = 24) -> dict[str, str]:
        environment = super()._build_environment(width=width, height=height)
        environment.pop(TOKEN_ENV, None)
        environment.update(self._session_environment)
        return environment


def _page(name: str) -> Template:
    return Template(files("replaylog.console").joinpath(name).read_text(encoding="utf-8"))


class ConsoleServer(Server):
    """textual-serve's Server for the replaylog console, with the session checks above.

    Args:
        db: the database (a path or a URL; a URL's password is never printed).
        host: the address to bind; not a loopback one needs `token`.
        port: the TCP port.
        token: the secret a browser must give before a session starts; None: none asked
            (loopback only).
        readonly: sessions open the console read-only.
        app: the workflow code (`--app`) each session loads for dry replays.
        max_payload: the cap each session's writes apply (None: the default).
    """

    def __init__(self, db: str | os.PathLike[str], *, host: str = "127.0.0.1", port: int = 8080,
                 token: str | None = None, readonly: bool = False, app: str | None = None,
                 max_payload: int | None = None) -> None:
        if not token and not is_loopback(host):
            raise ServeRefused(f"--host {host} is not a loopback address: anyone who reaches it could drive the"
                               f" console, so give a token (--token or ${TOKEN_ENV})")
        args = [sys.executable, "-m", "replaylog", "console"]
        args += ["--readonly"] if readonly else []
        args += ["--app", app] if app else []
        super().__init__(shlex.join(args), host=host, port=port, title="replaylog console")
        self.db = os.fspath(db)
        self.token = token or None
        self.readonly = readonly
        self.max_payload = max_payload
        self._sessions: set[str] = set()  # the cookie values this server issued
        self._index = _page("serve_index.html")
        self._login = _page("serve_login.html")

    # -- the checks

    def _signed_in(self, request: web.Request) -> bool:
        if self.token is None:
            return True
        key = request.cookies.get(COOKIE, "")
        return any(hmac.compare_digest(key, issued) for issued in self._sessions)

    def _host_allowed(self, request: web.Request) -> bool:
        # With no token, the loopback bind is the only guard: a page that rebinds its own
        # name to 127.0.0.1 arrives with that name as its Host, and is turned away.
        return self.token is not None or is_loopback(_host_name(request.host))

    def _same_origin(self, request: web.Request) -> bool:
        origin = request.headers.get("Origin")
        if origin is None:  # not a browser (browsers always send Origin on a websocket)
            return True
        return origin.rstrip("/") in (f"http://{request.host}", f"https://{request.host}")

    # -- the routes

    async def _make_app(self) -> web.Application:
        app = web.Application()
        app.add_routes([
            web.get("/", self.handle_index, name="index"),
            web.post("/login", self.handle_login, name="login"),
            web.get("/ws", self.handle_websocket, name="websocket"),
            web.static("/static", self.statics_path, name="static"),
        ])
        app.on_startup.append(self.on_startup)
        app.on_shutdown.append(self.on_shutdown)
        return app

    async def on_startup(self, app: web.Application) -> None:
        """Say where the console is served (the database named without its password)."""
        guard = "a token" if self.token else "no token (loopback only)"
        mode = ", read-only" if self.readonly else ""
        self.console.print(f"Serving the replaylog console of {redact_url(self.db)} at {self.public_url}"
                           f" ({guard}{mode}); Ctrl+C stops it", highlight=False, markup=False)

    async def handle_index(self, request: web.Request) -> web.Response:
        """The console's page, or the page that asks for the token."""
        if not self._host_allowed(request):
            raise web.HTTPForbidden(text="replaylog console: this page is served to localhost only\n")
        if not self._signed_in(request):
            return self._login_page(wrong=False)
        asked = to_int(request.query.get("fontsize", "0"), 0)  # 0: the page picks by its width
        font = min(max(asked, 6), 48) if asked > 0 else 0
        scheme = "wss" if _secure(request) else "ws"
        text = self._index.substitute(
            websocket=html.escape(f"{scheme}://{request.host}/ws", quote=True),
            font_size=font, narrow_px=NARROW_PX, title=html.escape(self.title))
        return web.Response(text=text, content_type="text/html", headers=_NO_STORE)

    def _login_page(self, *, wrong: bool) -> web.Response:
        notice = '<p class="wrong" role="alert">That token is not the one this console was started with.</p>' \
            if wrong else ""
        return web.Response(text=self._login.substitute(notice=notice), content_type="text/html",
                            status=401 if wrong else 200, headers=_NO_STORE)

    async def handle_login(self, request: web.Request) -> web.Response:
        """Check the token the page sent; a right one earns a session cookie."""
        if self.token is None:
            return web.Response(status=303, headers={"Location": "/"})
        form = await request.post()
        given = form.get("token")
        if not isinstance(given, str) or not hmac.compare_digest(given.encode(), self.token.encode()):
            log.warning("replaylog console: a wrong token from %s", request.remote)
            await asyncio.sleep(0.5)  # a guesser's pace, not an operator's
            return self._login_page(wrong=True)
        key = secrets.token_urlsafe(32)
        self._sessions.add(key)
        response = web.Response(status=303, headers={"Location": "/", **_NO_STORE})
        response.set_cookie(COOKIE, key, httponly=True, samesite="Strict", path="/", secure=_secure(request))
        return response

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """Start a console session for a browser that passed every check; refuse any other before it starts."""
        if not self._host_allowed(request) or not self._same_origin(request):
            raise web.HTTPForbidden(text="replaylog console: a session is opened from the console's own page only\n")
        if not self._signed_in(request):
            raise web.HTTPUnauthorized(text="replaylog console: give the token on the console's page first\n")
        websocket = web.WebSocketResponse(heartbeat=15)
        width = to_int(request.query.get("width", "80"), 80)
        height = to_int(request.query.get("height", "24"), 24)
        environment = {"REPLAYLOG_DB": self.db, REMOTE_ADDR_ENV: request.remote or "unknown"}
        if self.max_payload is not None:
            environment["REPLAYLOG_MAX_PAYLOAD"] = str(self.max_payload)
        await websocket.prepare(request)
        session = _Session(self.command, environment, write_bytes=websocket.send_bytes,
                           write_str=websocket.send_str, close=websocket.close,
                           download_manager=self.download_manager, debug=self.debug)
        log.info("replaylog console: session for %s", request.remote)
        try:
            await session.start(width, height)
            await self._process_messages(websocket, session)
        except asyncio.CancelledError:
            await websocket.close()
        finally:
            await session.stop()
        return websocket


def _secure(request: web.Request) -> bool:
    """Whether the browser reached us over https (directly, or through a proxy that says so)."""
    return request.secure or request.headers.get("X-Forwarded-Proto") == "https"


_NO_STORE = {"Cache-Control": "no-store", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"}
