"""The history browser (ctrl+o) and what it leads to: search, open, delete with confirmation, export.

Pilot tests with the fake engine and a real :class:`~specchat.history.HistoryStore` (a real SQLite file).
"""

from __future__ import annotations

from fake_engine import FakeEngine
from tuikit import SIZE, send_each, settle, wait_ready

from specchat.tui.screens.history import HistoryScreen


async def test_opening_a_saved_chat_in_markdown_view_does_not_crash(make_app, history_store):
    """F8, ctrl+o, down, enter: the saved replies are drawn as Markdown (was MountError in set_markdown)."""
    engine = FakeEngine(["first **reply**", "second reply", "third reply"])
    app, _ = make_app(engine, history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send_each(pilot, "one")
        await pilot.press("ctrl+n")
        await send_each(pilot, "two")
        first_id = history_store.list_conversations()[-1].id
        await pilot.press("f8")
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, HistoryScreen)
        await pilot.press("down")
        await pilot.press("enter")
        await settle(pilot)
        assert not isinstance(app.screen, HistoryScreen)
        assert app.conversation_id == first_id
        (reply,) = app.assistant_messages()
        assert reply.markdown_shown and not reply.tokens.display
        await pilot.press("f8")  # and back to the token view
        await pilot.pause()
        assert not reply.markdown_shown and reply.tokens.display
