"""Snapshot tests (pytest-textual-snapshot) of the main screen mid-reply, in two themes.

Deterministic by construction: the fake engine holds at a fixed step (so the reply is always cut at the same
token), the clock is injected (so tok/s and "loaded in" are the same every run), and the prompt's cursor
does not blink. Update the SVGs with ``pytest tests/tui/test_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

import pytest
from fake_engine import FakeClock, FakeEngine
from tuikit import fake_settings, send, wait_hold, wait_ready

from specchat.tui.app import SpecChatApp
from specchat.tui.widgets.prompt import PromptInput

TERMINAL = (110, 36)


def _mid_reply_app(theme: str) -> tuple[SpecChatApp, FakeEngine]:
    engine = FakeEngine(hold_at_steps=(9,))
    app = SpecChatApp(lambda progress: engine, fake_settings(theme=theme), clock=FakeClock())
    return app, engine


@pytest.mark.parametrize("theme", ["specchat-dark", "specchat-light"])
def test_main_screen_mid_reply(snap_compare, theme):
    app, engine = _mid_reply_app(theme)

    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        app.query_one(PromptInput).cursor_blink = False
        await send(pilot, "How does speculative decoding work?")
        await wait_hold(pilot, engine)
        assert app.generating
        await pilot.pause()

    assert snap_compare(app, terminal_size=TERMINAL, run_before=run_before)
