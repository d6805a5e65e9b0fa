"""Talking to a served console as a browser's page does: HTTP for the page and the token, a websocket for a session."""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass, field

import aiohttp

# Escape sequences in what the console writes to the browser's terminal: CSI, OSC, and the two-byte ones.
_ESCAPES = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def screen_text(raw: bytes) -> str:
    """The printable text of a stretch of terminal output, escape sequences dropped."""
    return _ESCAPES.sub(b"", raw).decode("utf-8", errors="replace")


@dataclass
class Session:
    """One console session over the websocket, as textual.js drives it."""

    ws: aiohttp.ClientWebSocketResponse
    received: bytearray = field(default_factory=bytearray)

    async def shows(self, text: str, timeout: float = 60.0, *, since: int = 0) -> bool:
        """Read the session's output until `text` appears in it (after byte `since`); False on timeout."""
        deadline = time.monotonic() + timeout
        while text not in screen_text(bytes(self.received[since:])):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                message = await self.ws.receive(timeout=left)
            except TimeoutError:
                return False
            if message.type == aiohttp.WSMsgType.BINARY:
                self.received += message.data
            elif message.type == aiohttp.WSMsgType.TEXT:
                self.received += message.data.encode()
            elif message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                return False
        return True

    async def keys(self, *typed: str) -> None:
        """Type into the session: each string as a terminal sends it ("\\r" is enter, "\\x13" ctrl+s).

        A control key goes in a string of its own, as a browser sends it: Textual reads a packet
        that mixes one with text ("\\x15abc") as something else than the keys.
        """
        for chunk in typed:
            await self.ws.send_str(json.dumps(["stdin", chunk]))
            await asyncio.sleep(0)  # let the server forward it before the next


async def open_session(http: aiohttp.ClientSession, url: str, *, width: int = 120, height: int = 36,
                       headers: dict[str, str] | None = None) -> Session:
    """Open a console session on a served console (raises aiohttp.WSServerHandshakeError if refused)."""
    ws_url = url.replace("http://", "ws://") + f"/ws?width={width}&height={height}"
    ws = await http.ws_connect(ws_url, headers=headers or {"Origin": url})
    await ws.send_str(json.dumps(["resize", {"width": width, "height": height}]))
    return Session(ws)
