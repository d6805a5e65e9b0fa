"""The served console in a real browser: headless Chromium (Debian's package) driven by Playwright.

Skipped, with the reason, where Chromium or Playwright is not installed (.ci/run installs
both on CI). What the browser's terminal shows is read from the session's websocket frames,
the bytes xterm.js draws.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from console_web import screen_text
from serve_helpers import served_console

from conftest import wait_for
from replaylog.engine.store import open_store

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None)
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")


class Terminal:
    """What the page's terminal was sent, and keys typed into it as a person types them."""

    def __init__(self, page: sync_api.Page) -> None:
        self.page = page
        self.received = bytearray()
        self.last_frame = time.monotonic()
        page.on("websocket", lambda ws: ws.on("framereceived", self._frame))

    def _frame(self, payload: str | bytes) -> None:
        self.received += payload if isinstance(payload, bytes) else payload.encode()
        self.last_frame = time.monotonic()

    def shows(self, text: str, *, since: int = 0, timeout: float = 60.0) -> bool:
        """Wait until the terminal was sent `text` (after byte `since`); False on timeout."""
        deadline = time.monotonic() + timeout
        while text not in screen_text(bytes(self.received[since:])):
            if time.monotonic() > deadline:
                return False
            self.page.wait_for_timeout(50)  # lets Playwright deliver the frames that came meanwhile
        return True

    def settle(self, quiet: float = 0.3, timeout: float = 30.0) -> None:
        """Wait until the console has drawn nothing for `quiet` seconds.

        A new screen or dialog is drawn before its input takes the focus (on mount, drawn
        again): keys pressed in between reach the screen beneath (where `s` sends a signal).
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() - self.last_frame < quiet and time.monotonic() < deadline:
            self.page.wait_for_timeout(50)

    def press(self, *keys: str, expect: str | None = None) -> None:
        """Press keys (Playwright's names: "g", "Enter", "Control+s"); then wait for `expect` on screen."""
        mark = len(self.received)
        for key in keys:
            self.page.keyboard.press(key)
        if expect is not None:
            assert self.shows(expect, since=mark), f"the screen never showed {expect!r}"
            self.settle()

    def type(self, text: str) -> None:
        """Type text into the focused input; wait until the input shows it."""
        mark = len(self.received)
        self.page.keyboard.type(text)
        # An input is drawn "▊  TEXT": the whole text at its start (a list row may show the same id).
        assert self.shows(f"▊  {text}", since=mark), f"the input never showed {text!r}"


@pytest.mark.parametrize(("width", "height"), [(1280, 800), (390, 844)], ids=["desktop", "phone"])
def test_a_browser_sends_a_signal_and_answers_an_approval_and_the_store_has_both(
        demo_db: Path, tmp_path: Path, width: int, height: int) -> None:
    with served_console(demo_db) as served, sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": width, "height": height})
        terminal = Terminal(page)
        page.goto(served.url + "/")
        assert terminal.shows("agent-991"), "the list never showed the demo's workflows"
        assert terminal.shows("blocked")
        terminal.settle()
        shot = tmp_path / f"console-{width}.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000  # a drawn page, not a blank one
        page.locator(".xterm-screen").click()  # the terminal takes the keys

        terminal.press("g", expect="Go to workflow id")  # the dialog: the footer says "Go to id"
        terminal.type("report-200")
        terminal.press("Enter", expect="1 Slots")
        terminal.press("s", expect="Send a signal to")
        terminal.type("from-browser")
        terminal.press("Tab")  # the payload: the dialog sends only what the operator typed
        mark = len(terminal.received)
        terminal.page.keyboard.type("null")
        assert terminal.shows("valid JSON", since=mark)  # checked, so ctrl+s may send it
        terminal.press("Control+s", expect="Signal sent")

        terminal.press("Escape", expect="agent-991")  # back to the list
        terminal.press("g", expect="Go to workflow id")  # the dialog: the footer says "Go to id"
        terminal.type("support-992")
        terminal.press("Enter", expect="1 Slots")
        terminal.press("a", expect="a note the workflow receives")
        terminal.type("ok from a phone" if width < 640 else "ok from a desk")
        terminal.press("Control+y", expect="approved")
        browser.close()

    def stored() -> bool:
        with open_store(demo_db, readonly=True) as store:
            signals = [s.name for s in store.list_signals("report-200")]
            answers = [a for a in store.list_audit("support-992") if a.action == "approve"]
        return signals == ["from-browser"] and len(answers) == 1
    assert wait_for(stored), _what_is_stored(demo_db)
    with open_store(demo_db, readonly=True) as store:
        (answer,) = [a for a in store.list_audit("support-992") if a.action == "approve"]
        (signal,) = [a for a in store.list_audit("report-200") if a.action == "signal"]
    assert answer.actor.endswith("for browser 127.0.0.1") and signal.actor.endswith("for browser 127.0.0.1")


def _what_is_stored(db: Path) -> str:
    with open_store(db, readonly=True) as store:
        return f"signals {store.list_signals('report-200')}, audit {store.list_audit('support-992')}"
