"""Defects the state fuzz (test_fuzz.py) found, each pinned by a deterministic test."""

from __future__ import annotations

from fake_engine import FakeEngine
from tuikit import SIZE, send, wait_hold, wait_ready

from specchat.engine.events import Piece
from specchat.tui.messages import EngineFailed, LoadProgress, PiecesBatch, StatsUpdated, TurnFinished


async def test_engine_messages_that_arrive_once_the_app_is_closing_are_not_drawn(make_app, history_store):
    """Fuzz seed 89 (sequence 80..89): the app closed mid-reply; the reply's last StatsUpdated arrived after the
    screen was gone and its handler raised NoMatches('Sidebar') (Pilot's run_test shuts the app down from the
    test's task, so the app still handles the messages the engine thread posts while it stops).

    Here the messages come after the app has closed; each handler must ignore them. The stopped reply is still
    saved: the shutdown saves it itself.
    """
    engine = FakeEngine(hold_at_steps=(2,))
    app, _ = make_app(engine, history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "go")
        await wait_hold(pilot, engine)
        turn_id = app.host.turn_id
        snapshot = app.chat_screen.stats.snapshot()
    late = [
        StatsUpdated(snapshot),
        PiecesBatch(turn_id, [Piece("late", "plain", 0)], ["a notice"]),
        TurnFinished(turn_id, engine.turns[-1], None),
        LoadProgress(0.5, "loading"),
        EngineFailed("late failure"),
    ]
    for message in late:
        name = f"on_{message.handler_name.removeprefix('on_')}"
        # a turn's messages are the chat screen's, loading's the app's
        handler = getattr(app.chat_screen, name, None) or getattr(app, name)
        handler(message)  # raised NoMatches / ScreenStackError before
    (conv,) = history_store.list_conversations()
    _, saved = history_store.load(conv.id)
    assert saved[-1].role == "assistant" and saved[-1].stopped
