"""End-to-end Pilot tests with the real engine: the tiny generated pair and the bundled SmolLM2.

The engine is built exactly as ``specchat`` builds it (:func:`specchat.commands.tui.make_factory` ->
``specchat.loading.load_engine``). To change K or speculation *mid-reply* deterministically, the real
engine's event stream is wrapped by :class:`Holding`, which pauses the consuming worker right after the n-th
Step (the engine itself is suspended between two rounds, exactly where a UI change lands in real use) and
records every Step the engine emits.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from enginekit import TINY_NEAR_TIE, VerifiedRows, assert_same_greedy_reply_up_to_near_ties
from tuikit import (
    SIZE,
    drawn_spans,
    reopen_first_saved,
    reply_spans,
    saved_messages,
    screen_text,
    send,
    settle,
    style_colour,
    token_colour,
    wait_ready,
)

from specchat.commands.tui import make_factory
from specchat.config import Settings
from specchat.engine.events import Event, Step
from specchat.tui.app import SpecChatApp
from specchat.tui.screens.history import HistoryScreen
from specchat.tui.widgets.chat import UserMessage
from specchat.tui.widgets.prompt import PromptInput


class Holding:
    """Delegates to a real ChatEngine; can pause its event stream after given Step counts."""

    def __init__(self, engine, hold_after_steps: tuple[int, ...] = ()) -> None:
        self.engine = engine
        self.controls = engine.controls
        self.hold_after = set(hold_after_steps)
        self.steps: list[Step] = []
        self._release = threading.Semaphore(0)
        self._cond = threading.Condition()
        self.holds = 0

    # protocol
    @property
    def messages(self):
        return self.engine.messages

    def info(self):
        return self.engine.info()

    def send(self, text):
        return self._wrap(self.engine.send(text))

    def regenerate(self):
        return self._wrap(self.engine.regenerate())

    def edit_last(self, text):
        return self._wrap(self.engine.edit_last(text))

    def reset(self, system_prompt=None):
        self.engine.reset(system_prompt)

    def load(self, messages):
        self.engine.load(messages)

    def detokenize_pieces(self, tokens):
        return self.engine.detokenize_pieces(tokens)

    def close(self):
        self.engine.close()

    # hooks
    def _wrap(self, events: Iterator[Event]) -> Iterator[Event]:
        count = 0
        for event in events:
            yield event
            if isinstance(event, Step):
                self.steps.append(event)
                count += 1
                if count in self.hold_after:
                    with self._cond:
                        self.holds += 1
                        self._cond.notify_all()
                    while not self._release.acquire(timeout=0.01):
                        if self.controls.stop_requested:
                            break

    def release(self) -> None:
        self._release.release()

    def wait_hold(self, n: int) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.holds >= n, 60)


def _settings(tmp_path: Path, target: Path | str, draft: Path | str, **kw) -> Settings:
    values = dict(
        target=str(target), draft=str(draft), k=3, auto_k=False, n_predict=48, n_ctx=1024, threads=2,
        data_dir=tmp_path, theme="specchat-dark",
    )
    values.update(kw)
    return Settings(**values)


def _app(settings: Settings, hold_after: tuple[int, ...] = (), store=None) -> tuple[SpecChatApp, dict]:
    box: dict = {}
    real_factory = make_factory(settings)

    def factory(progress):
        box["engine"] = Holding(real_factory(progress), hold_after)
        return box["engine"]

    return SpecChatApp(factory, settings, store, make_factory=make_factory, export_dir=settings.data_dir), box


async def _wait_hold(pilot, engine: Holding, n: int) -> None:
    assert await asyncio.to_thread(engine.wait_hold, n)
    for _ in range(3):
        await pilot.pause()


async def test_tiny_pair_send_k_change_and_speculation_toggle_mid_reply(tmp_path, tiny_pair, greedy_prompts):
    target, draft = tiny_pair
    app, box = _app(_settings(tmp_path, target, draft, n_predict=60), hold_after=(3, 6))
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert app.engine_error is None, app.engine_error
        engine: Holding = box["engine"]
        assert engine.info().draft_name == draft.name
        await send(pilot, greedy_prompts[0])
        await _wait_hold(pilot, engine, 1)
        assert [s.k for s in engine.steps] == [3, 3, 3] and all(s.speculative for s in engine.steps)
        await pilot.press("f4")  # K 3 -> 4 while the reply is running
        engine.release()
        await _wait_hold(pilot, engine, 2)
        assert [s.k for s in engine.steps[3:6]] == [4, 4, 4]
        assert app.chat_screen.sidebar.text_of("k-status").startswith("K 4 (fixed)")
        await pilot.press("f5")  # speculation off mid-reply
        engine.release()
        await settle(pilot)
        after = engine.steps[6:]
        assert after, "the reply ended before the toggle could show"
        assert all(s.drafted == 0 and not s.speculative for s in after)
        reply = app.chat_screen.assistant_messages()[-1]
        turn = reply.turn
        assert turn is not None and reply.reply_text == turn.text == engine.messages[-1].content
        assert turn.draft_n > 0 and turn.predicted_n == len(turn.tokens)
        tail = [k for _, k in reply.tokens.kinds_text() if k][-len(after) :]
        assert set(tail) == {"plain"}
        assert app.chat_screen.sidebar.text_of("k-status").startswith("speculation off")


async def test_tiny_pair_escape_regenerate_new_chat_and_history(tmp_path, tiny_pair, greedy_prompts):
    from specchat.history import HistoryStore

    target, draft = tiny_pair
    store = HistoryStore(tmp_path / "history.sqlite3")
    settings = _settings(tmp_path, target, draft, n_predict=60)
    app, box = _app(settings, hold_after=(2,), store=store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        engine: Holding = box["engine"]
        await send(pilot, greedy_prompts[1])
        await _wait_hold(pilot, engine, 1)
        conv_id = app.chat_screen.recorder.conversation_id  # mid-reply: the message is saved already, the reply not yet
        assert conv_id is not None and saved_messages(store, conv_id) == [("user", greedy_prompts[1])]
        await pilot.press("escape")
        await settle(pilot)
        reply = app.chat_screen.assistant_messages()[-1]
        assert reply.stopped and engine.messages[-1].stopped and engine.messages[-1].stats.stop_reason == "stopped"
        assert reply.reply_text == engine.messages[-1].content
        assert len(engine.steps) <= 3  # ended within one step of the request
        _, saved = store.load(conv_id)  # the stopped reply is saved as stopped, with its exact tokens
        assert saved[-1].stopped and saved[-1].content == reply.reply_text
        assert saved[-1].tokens == engine.messages[-1].tokens
        engine.hold_after = set()
        await pilot.press("ctrl+r")
        await settle(pilot)
        roles = [m.role for m in engine.messages if m.role != "system"]
        assert roles == ["user", "assistant"]
        regenerated = engine.messages[-1]
        assert not regenerated.stopped and regenerated.content == app.chat_screen.assistant_messages()[-1].reply_text
        assert len(app.chat_screen.assistant_messages()) == 1
        assert app.chat_screen.recorder.conversation_id == conv_id
        _, saved = store.load(conv_id)
        assert [m.content for m in saved if m.role != "system"] == [greedy_prompts[1], regenerated.content]
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert [m for m in engine.messages if m.role != "system"] == []
        # reopen from history and continue with the real engine
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, HistoryScreen)
        await pilot.press("enter")
        await pilot.pause()
        assert app.chat_screen.recorder.conversation_id == conv_id
        assert [w.text for w in app.query(UserMessage)] == [greedy_prompts[1]]
        await send(pilot, greedy_prompts[2])
        await settle(pilot)
        assert [m.role for m in engine.messages if m.role != "system"] == ["user", "assistant", "user", "assistant"]
        _, saved = store.load(conv_id)
        assert len([m for m in saved if m.role != "system"]) == 4
        assert saved[-1].stats is not None and saved[-1].stats.predicted_n > 0
    store.close()


async def test_tiny_pair_edit_last_message_replaces_the_exchange_in_chat_and_history(
    tmp_path, tiny_pair, greedy_prompts, history_store
):
    target, draft = tiny_pair
    app, box = _app(_settings(tmp_path, target, draft, n_predict=40), store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert app.engine_error is None, app.engine_error
        engine: Holding = box["engine"]
        rows = VerifiedRows(engine.engine.decoder.target)
        await send(pilot, greedy_prompts[0])
        await settle(pilot)
        old_reply = engine.messages[-1].content
        rows.take()  # only the edited reply's rows from here
        prompt = app.query_one(PromptInput)
        await pilot.press("up")
        assert prompt.text == greedy_prompts[0]
        prompt.set_text(greedy_prompts[3])
        await pilot.press("enter")
        await settle(pilot)
        edited = engine.messages[-1]
        turns = [(m.role, m.content) for m in engine.messages if m.role != "system"]
        assert turns == [("user", greedy_prompts[3]), ("assistant", edited.content)]
        assert edited.content != old_reply and edited.stats is not None and edited.stats.predicted_n > 0
        assert [w.text for w in app.query(UserMessage)] == [greedy_prompts[3]]
        assert [r.reply_text for r in app.chat_screen.assistant_messages()] == [edited.content]
        conv_id = app.chat_screen.recorder.conversation_id
        assert saved_messages(history_store, conv_id) == turns
        _, saved = history_store.load(conv_id)
        assert saved[-1].tokens == edited.tokens
        edited_rows = rows.take()
        edited_start = len(engine.engine.template.tokens(engine.messages[:-1]))
        # nothing of the replaced exchange stayed in the model's context: a fresh chat replies the same (greedy),
        # up to a near-tie of batch-size numerics (specchat.engine.chat, "Greedy replies and batch sizes")
        await pilot.press("ctrl+n")
        await pilot.pause()
        await send(pilot, greedy_prompts[3])
        await settle(pilot)
        fresh = engine.messages[-1].tokens
        fresh_start = len(engine.engine.template.tokens(engine.messages[:-1]))
        assert fresh_start == edited_start
        assert_same_greedy_reply_up_to_near_ties(
            (edited_rows, edited_start, edited.tokens), (rows.take(), fresh_start, fresh), TINY_NEAR_TIE
        )


async def test_tiny_pair_reply_reopened_from_history_keeps_its_token_colours(
    tmp_path, tiny_pair, greedy_prompts, history_store
):
    target, draft = tiny_pair
    app, box = _app(_settings(tmp_path, target, draft, n_predict=40), store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert app.engine_error is None, app.engine_error
        await send(pilot, greedy_prompts[4])
        await settle(pilot)
        streamed = app.chat_screen.assistant_messages()[-1]
        live = reply_spans(streamed.tokens)
        assert "accepted" in {kind for _, kind in live}
        await pilot.press("ctrl+n")
        await pilot.pause()
        await reopen_first_saved(pilot)
        (reply,) = app.chat_screen.assistant_messages()
        assert reply.saved_coloured
        assert reply_spans(reply.tokens) == live  # the real detokenizer gives back the streamed pieces
        n_vocab = box["engine"].engine.decoder.target.n_vocab
        with pytest.raises(ValueError, match="not in the vocabulary"):  # checked before llama.cpp sees it
            box["engine"].detokenize_pieces([1, n_vocab])
        assert reply.reply_text == streamed.reply_text
        drawn = drawn_spans(reply.tokens)
        assert "saved" not in {kind for kind, _, _ in drawn}
        for kind, text, styles in drawn:
            if text.strip():
                assert {style_colour(s) for s in styles} == {token_colour(app, kind)}, (kind, text)


async def test_ready_shows_only_once_a_message_can_be_sent(tmp_path, tiny_target):
    """The real loader has made every progress report (its last one said "ready": "loading 100 %: ready")
    but the app has no engine yet: nothing on screen says ready, and a message is refused (kept in the
    prompt). A pty test sent a message on that text and was refused. Once the engine is in use, "ready"."""
    settings = _settings(tmp_path, tiny_target, "ngram", threads=1)
    real_factory = make_factory(settings)
    reported, release = threading.Event(), threading.Event()
    texts: list[str] = []

    def factory(progress):
        engine = real_factory(lambda fraction, what: (texts.append(what), progress(fraction, what)))
        reported.set()
        release.wait(60)
        return engine

    app = SpecChatApp(factory, settings, None, export_dir=tmp_path)
    try:
        async with app.run_test(size=SIZE) as pilot:
            assert await asyncio.to_thread(reported.wait, 60)
            for _ in range(5):
                await pilot.pause()
            assert texts and app.engine is None
            assert not re.search(r"\bready\b", screen_text(app)), screen_text(app)
            assert "ready" not in app.chat_screen.sidebar.status_text
            await send(pilot, "hello")
            assert app.query_one(PromptInput).text == "hello"  # refused, kept
            release.set()
            await wait_ready(pilot)
            assert re.search(r"\bready\b", screen_text(app)) and app.chat_screen.sidebar.status_text == "ready"
            await send(pilot, "hello")
            await settle(pilot)
            assert app.query_one(PromptInput).text == "" and len(app.engine.messages) >= 2
    finally:
        release.set()


async def test_bad_model_path_is_shown_in_the_app(tmp_path):
    settings = _settings(tmp_path, tmp_path / "missing.gguf", "ngram")
    app, _ = _app(settings)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert app.engine is None and app.engine_error
        assert "missing.gguf" in app.engine_error


@pytest.mark.slow
async def test_bundled_model_with_ngram_drafter_replies(tmp_path, bundled_model):
    settings = _settings(tmp_path, "bundled", "ngram", n_predict=32, auto_k=True)
    app, box = _app(settings)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert app.engine_error is None, app.engine_error
        await send(pilot, "Write a Python function that adds two numbers.")
        await settle(pilot)
        reply = app.chat_screen.assistant_messages()[-1]
        assert reply.finished and not reply.error
        turn = reply.turn
        assert turn is not None and 0 < turn.predicted_n <= 32 and reply.reply_text == turn.text
        assert turn.predicted_per_second > 0
        assert "tok/s" in reply.border_subtitle
        assert box["engine"].steps and box["engine"].steps[-1].auto_k
