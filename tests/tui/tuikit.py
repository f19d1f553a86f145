"""Helpers for the TUI tests: settings for the app, ways to wait for the app's workers, history and drawing probes.

Waiting is by events (the fake engine's holds, Textual's ``workers.wait_for_complete``), never by sleeping
a fixed time; the timeouts only keep a broken test from hanging the suite.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fake_engine import FakeEngine
from textual.color import Color

from specchat.config import Settings
from specchat.tui.screens.history import HistoryScreen
from specchat.tui.widgets.prompt import PromptInput
from specchat.tui.widgets.token_view import TokenView

SIZE = (120, 40)


def fake_settings(**kw: Any) -> Settings:
    """Real settings for the app under test: the defaults (no config file, no environment) with auto-K off,
    and ``kw`` on top."""
    return Settings(**{"auto_k": False, **kw})


async def settle(pilot) -> None:
    """Wait for every worker to finish and the messages they posted to be handled."""
    await pilot.app.workers.wait_for_complete()
    for _ in range(3):
        await pilot.pause()


async def wait_ready(pilot) -> None:
    await settle(pilot)
    assert pilot.app.engine is not None or pilot.app.engine_error is not None


async def wait_hold(pilot, engine: FakeEngine, n: int = 1) -> None:
    """Wait until the fake engine blocks at its n-th hold, then let the UI handle what was posted."""
    assert await asyncio.to_thread(engine.wait_hold, n), "the engine never reached the hold"
    for _ in range(3):
        await pilot.pause()


async def send(pilot, text: str) -> None:
    prompt = pilot.app.query_one(PromptInput)
    prompt.text = text
    prompt.focus()
    await pilot.press("enter")


async def send_each(pilot, *texts: str) -> None:
    """Send each message in turn and wait for its reply to finish (the turns of a conversation)."""
    for text in texts:
        await send(pilot, text)
        await settle(pilot)


async def reopen_first_saved(pilot) -> None:
    """Open the history browser, open its first (most recent) conversation, wait for the app to draw it."""
    await pilot.press("ctrl+o")
    await pilot.pause()
    assert isinstance(pilot.app.screen, HistoryScreen)
    await pilot.press("enter")
    await settle(pilot)
    assert not isinstance(pilot.app.screen, HistoryScreen)


def notifications(app) -> list[str]:
    """The text of every notification the app has shown (toasts)."""
    return [n.message for n in app._notifications]


def saved_messages(store, conv_id: int) -> list[tuple[str, str]]:
    """(role, content) of a conversation as the history database holds it, system prompt left out."""
    _, messages = store.load(conv_id)
    return [(m.role, m.content) for m in messages if m.role != "system"]


def reply_spans(view: TokenView) -> list[tuple[str, str]]:
    """The (text, kind) pieces of a reply without ghosts and line breaks: what history can give back."""
    return [(text, kind) for text, kind in view.kinds_text() if kind and kind != "rejected"]


def drawn_spans(view: TokenView) -> list[tuple[str, str, set]]:
    """Every drawn span as (kind, text, the set of rich Styles of the strip cells under its characters).

    Read from ``render_line`` (the strips the terminal receives), not from the widget's span list, so a
    wrong style class or a lost span shows up here.
    """
    out = []
    for y in range(view.row_count):
        row = view._rows[y]
        cell_styles = []
        for segment in view.render_line(y):
            cell_styles.extend([segment.style] * len(segment.text))
        for span in row.spans:
            text = row.plain[span.start : span.end]
            out.append((span.style.removeprefix(".token--"), text, set(cell_styles[span.start : span.end])))
    return out


def token_colour(app, kind: str) -> str:
    """The theme's colour for a token kind as a lower-case #rrggbb."""
    return Color.parse(app.get_css_variables()[f"token-{kind}"]).hex.lower()


def style_colour(style) -> str | None:
    return style.color.get_truecolor().hex.lower() if style is not None and style.color is not None else None


def screen_text(app) -> str:
    """The characters on the terminal now (every layer composited), one line per row: what a user reads."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(segment.text for segment in strip).rstrip() for strip in strips)


async def palette(pilot, query: str) -> None:
    """Open the command palette, type ``query`` and run the first entry it finds (as a user does)."""
    await pilot.press("ctrl+p")
    await pilot.pause()
    await pilot.press(*query)
    await pilot.pause()
    await pilot.press("enter")
    await pilot.pause()
