"""The key footer at a phone's width: every key a screen shows is on screen whole, the help key first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from console_helpers import async_test, make_app, settle, wait_until
from console_seed import ROLES
from textual.pilot import Pilot
from textual.widgets._footer import FooterKey

from replaylog.console.help_screen import HelpScreen
from replaylog.console.key_footer import KeyFooter

PHONE = (64, 30)


def footer_keys(pilot: Pilot[Any]) -> tuple[list[str], list[str]]:
    """(the keys the screen's bindings put in its footer and the palette's, the footer's keys shown whole in order)."""
    screen = pilot.app.screen
    footer = screen.query_one(KeyFooter)
    bound = [binding.key for (_node, binding, _enabled, _tip) in screen.active_bindings.values()
             if binding.show or binding.key == pilot.app.COMMAND_PALETTE_BINDING]
    whole = []
    for key in footer.query(FooterKey):
        text = len(key.key_display) + (1 + len(key.description) if key.description else 0)
        if footer.region.contains_region(key.region) and key.region.width >= text and key.region in screen.region:
            whole.append(key.key)
    return sorted(bound), whole


@async_test
async def test_at_a_phones_width_every_footer_key_is_on_screen_and_help_comes_first(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=PHONE) as pilot:
        await settle(pilot)
        for opened in (None, ROLES["blocked"], ROLES["completed"]):
            if opened is not None:
                app.open_workflow(opened)
                await settle(pilot)
            bound, whole = footer_keys(pilot)
            assert len(bound) >= 8 and sorted(whole) == bound, (opened, set(bound) - set(whole))
            assert whole[0] == "question_mark", opened
            # Wrapped: the footer takes the lines its keys need, and the screen still shows its table.
            assert app.screen.query_one(KeyFooter).region.height >= 2
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        bound, whole = footer_keys(pilot)
        assert sorted(whole) == bound


@async_test
async def test_a_footer_whose_keys_fit_stays_one_line_as_textuals_own(console_db: Path) -> None:
    app = make_app(console_db)
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(pilot)
        footer = app.screen.query_one(KeyFooter)
        bound, whole = footer_keys(pilot)
        assert sorted(whole) == bound
        assert footer.region.height == 1 and not footer.compact and not footer.has_class("-wrapped")


@async_test
async def test_a_narrow_footer_keeps_every_key_whole_after_its_keys_are_composed_again(console_db: Path) -> None:
    # A screen's bindings changing recomposes the footer: fresh keys in the stock order, with no
    # resize after them. The grid must be measured in the order it shows the keys (help first),
    # or a column is too wide and the last key of the first line is cut at the right edge.
    app = make_app(console_db)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        for width in (64, 100, 58, 72, 64):
            await pilot.resize_terminal(width, 30)
            await settle(pilot)
            footer = app.screen.query_one(KeyFooter)
            bound, whole = footer_keys(pilot)
            assert sorted(whole) == bound, (width, "after a resize", set(bound) - set(whole))
            old = set(footer.query(FooterKey))
            app.screen.refresh_bindings()
            assert await wait_until(pilot, lambda f=footer, o=old: not o & set(f.query(FooterKey))), width
            await settle(pilot)
            bound, whole = footer_keys(pilot)
            assert sorted(whole) == bound, (width, "after a recompose", set(bound) - set(whole))
            assert footer.has_class("-wrapped") == (width < 100), width
            assert whole[0] == "question_mark" or width >= 100, width
