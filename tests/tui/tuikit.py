"""Helpers for the TUI tests: settings stand-in and ways to wait for the app's workers.

Waiting is by events (the fake engine's holds, Textual's ``workers.wait_for_complete``), never by sleeping
a fixed time; the timeouts only keep a broken test from hanging the suite.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from fake_engine import FakeEngine

from specchat.tui.widgets.prompt import PromptInput

SIZE = (120, 40)


def fake_settings(**kw: Any) -> SimpleNamespace:
    """A settings-like object with the fields the app reads (the real one is specchat.config.Settings)."""
    values = dict(theme="specchat-dark", keymap={}, system_prompt="", k=3, auto_k=False)
    values.update(kw)
    return SimpleNamespace(**values)


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
