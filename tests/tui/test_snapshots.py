"""Snapshot tests (pytest-textual-snapshot) of the main screen mid-reply, in two themes.

Deterministic by construction: the fake engine holds at a fixed step (so the reply is always cut at the same
token), the clock is injected (so tok/s and "loaded in" are the same every run), and the prompt's cursor
does not blink. Update the SVGs with ``pytest tests/tui/test_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

import pytest
from fake_engine import AUTO_K_STATES, FakeClock, FakeEngine
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


# -- small terminals (issue 9): every screen at 60x20 and 80x24 -----------------------------------------------

SMALL = [(60, 20), (80, 24)]


def _small_app(tmp_path, history=False):
    from specchat.history import HistoryStore

    engine = FakeEngine(hold_at_steps=(9,))
    store = None
    if history:
        store = HistoryStore(tmp_path / "history.sqlite3")
        conv = store.create_conversation(target="fake-target-135M", draft="ngram", system_prompt="")
        from specchat.engine.protocol import Message

        store.sync(conv, [Message("user", "What is speculative decoding?"), Message("assistant", "A way to go faster.")])
        with store._conn:  # a fixed date: the browser shows it
            store._conn.execute("UPDATE conversations SET created = ?, updated = ?", ("2025-01-02T03:04:05", "2025-01-02T03:04:05"))
            store._conn.execute("UPDATE messages SET created = ?", ("2025-01-02T03:04:05",))
    app = SpecChatApp(lambda progress: engine, fake_settings(), store, clock=FakeClock(), export_dir=tmp_path)
    return app, engine


@pytest.mark.parametrize("size", SMALL, ids=lambda s: f"{s[0]}x{s[1]}")
def test_small_chat_mid_reply(snap_compare, size, tmp_path):
    app, engine = _small_app(tmp_path)

    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        app.query_one(PromptInput).cursor_blink = False
        await send(pilot, "How does speculative decoding work?")
        await wait_hold(pilot, engine)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SMALL, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("screen", ["help", "history"])  # the palette: test_small_terminal.py
def test_small_screens(snap_compare, size, screen, tmp_path):
    app, _ = _small_app(tmp_path, history=screen == "history")
    keys = {"help": "ctrl+g", "history": "ctrl+o", "palette": "ctrl+p"}

    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        app.query_one(PromptInput).cursor_blink = False
        await pilot.press(keys[screen])
        for _ in range(3):  # the palette searches in a worker
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
        if screen == "palette":
            from textual.command import CommandInput

            for field in app.screen.query(CommandInput):
                field.cursor_blink = False
            await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


# -- issue 11: the sidebar in each auto-K state, and the glossary ----------------------------------------------


@pytest.mark.parametrize("state", list(AUTO_K_STATES))
def test_sidebar_in_each_auto_k_state(snap_compare, state):
    """The fake engine's Steps carry the engine's own KStatus for the state (built by ``k_status``), its
    reply and recent-window Figures: the sidebar shows ``K 16 (auto: holding, best now 4)`` and its note,
    ``K 0 (auto: off for cost)``, ``K 0 (auto: probing with K 3)`` ..., each window's figures under its name."""
    script, cost = AUTO_K_STATES[state]
    # off for cost: auto-K's notice that drafting went off, once, before the first round (chat line + toast)
    notices = {0: False} if state == "off for cost" else None
    engine = FakeEngine(
        hold_at_steps=(9,), auto_k=True, auto_k_script=(script,), cost=cost, auto_k_notices=notices
    )
    app = SpecChatApp(lambda progress: engine, fake_settings(auto_k=True), clock=FakeClock())

    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        app.query_one(PromptInput).cursor_blink = False
        await send(pilot, "How does speculative decoding work?")
        await wait_hold(pilot, engine)
        assert engine.steps_seen[-1].status.state == state
        await pilot.pause()

    assert snap_compare(app, terminal_size=(110, 60), run_before=run_before)


@pytest.mark.parametrize("page", [0, 1])
def test_glossary_on_f1_at_60x20(snap_compare, page, tmp_path):
    """F1 opens the glossary (above the keys; ctrl+g: test_small_screens[help-*]); page 1: scrolled down one
    page with the key people press, to the colours drawn in the reply's own styles."""
    app, _ = _small_app(tmp_path)

    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        app.query_one(PromptInput).cursor_blink = False
        await pilot.press("f1")
        await pilot.pause()
        for _ in range(page):
            await pilot.press("pagedown")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(60, 20), run_before=run_before)
