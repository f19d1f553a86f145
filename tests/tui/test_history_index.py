"""The suffix drafter's history index in the app (issue 23): the sidebar's line while it is built (plain function)
and, with the real bundled model over a real history whose saved index is corrupt, the line moving from the build
to "ready" and the one warning notification, the history untouched; a suffix drafter merely offered in the menu
shows nothing until it is chosen and drafts."""

from __future__ import annotations

import asyncio
import threading

import pytest
from tuikit import SIZE, screen_text, send, settle, wait_ready

from specchat.history.index_progress import IndexProgress
from specchat.tui.widgets.sidebar_text import history_index_text


def test_the_history_index_in_one_line():
    assert history_index_text(None) == ""
    assert history_index_text(IndexProgress("loading", "loading the index")) == "history index: loading"
    assert history_index_text(IndexProgress("indexing", "", 3_200, 10_000)) == "history index: 3,200/10,000 messages"
    assert history_index_text(IndexProgress("ready", "", 10_000, 10_000, 5_000_000)) == (
        "history: 10,000 messages, 5.0 M tokens")
    assert history_index_text(IndexProgress("ready", "", 1, 1, 12)) == "history: 1 message, 12 tokens"
    assert history_index_text(IndexProgress("ready", "", 40, 40, 42_345)) == "history: 40 messages, 42.3 k tokens"
    assert history_index_text(IndexProgress("off", "off")) == "history index: off (the history could not be read)"
    assert history_index_text(IndexProgress("stopped", "stopped")) == ""


def _history(store, n_conversations: int) -> None:
    from specchat.engine.protocol import Message

    for i in range(n_conversations):
        conv = store.create_conversation(f"Question {i}")
        store.append_message(conv, Message("user", f"What is {i} plus {i}?"))
        store.append_message(conv, Message("assistant", f"{i} plus {i} is {2 * i}."))


async def _until(pilot, condition, what: str) -> None:
    """Let the UI handle what the corpus's thread posted until ``condition()`` (bounded, no fixed sleep)."""
    for _ in range(500):
        if condition():
            return
        await pilot.pause()
    raise AssertionError(f"never: {what}")


@pytest.mark.usefixtures("isolated_config")
async def test_a_corrupt_index_is_rebuilt_in_the_background_with_its_progress_in_the_sidebar_and_one_warning(
    tmp_path, monkeypatch
):
    """``draft = "suffix"`` over 20 saved messages whose saved index is garbage: the app is ready while the index is
    rebuilt; the sidebar says how far (held at message 5 of 20 by a gate in the tokenising), then "history: 20
    messages, N tokens"; the rebuild is one warning notification, never repeated; the history is intact. Fails if
    the corpus stops reporting, the app stops showing it, or a notice is lost or shown twice."""
    from specchat.commands.tui import make_factory
    from specchat.config import Settings
    from specchat.history import HistoryStore, corpus
    from specchat.loading import load_engine, wait_for_history
    from specchat.tui.app import SpecChatApp

    settings = Settings(target="bundled", draft="suffix", k=4, auto_k=False, n_predict=8, n_ctx=512, threads=1,
                        data_dir=tmp_path, theme="specchat-dark")
    store = HistoryStore(settings.history_path())
    _history(store, 10)
    before = store.corpus_messages()
    first = load_engine(settings)  # writes the index file, which is then made garbage
    try:
        assert wait_for_history(first, 60) == []
    finally:
        first.close()
    (saved,) = (tmp_path / "suffix").glob("*.npz")
    saved.write_bytes(b"PK\x03\x04 not the index it claims to be")

    reached, release = threading.Event(), threading.Event()
    tokens = corpus.HistoryCorpus._tokens
    calls = 0

    def gated(self, text):
        nonlocal calls
        calls += 1
        if calls == 6:  # messages 0-4 tokenised and reported: hold the build here
            reached.set()
            release.wait(60)
        return tokens(self, text)

    monkeypatch.setattr(corpus.HistoryCorpus, "_tokens", gated)
    monkeypatch.setattr(corpus, "PROGRESS_EVERY_S", 0.0)  # every message reported: the held one is known
    app = SpecChatApp(make_factory(settings), settings, store, make_factory=make_factory, export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        try:
            await wait_ready(pilot)
            assert app.engine is not None  # ready while the index is still being built
            assert await asyncio.to_thread(reached.wait, 60), "the rebuild never started"
            sidebar = app.chat_screen.sidebar
            await _until(pilot, lambda: sidebar.text_of("history-index") == "history index: 5/20 messages",
                         f"the build's progress in the sidebar (it says {sidebar.text_of('history-index')!r})")
            assert "history index: 5/20 messages" in screen_text(app)
            warnings = [n for n in app._notifications if "was rebuilt from the history" in n.message]
            assert len(warnings) == 1 and warnings[0].severity == "warning"
            release.set()
            assert await asyncio.to_thread(wait_for_history, app.engine, 60) == [warnings[0].message]
            n_tokens = app.engine.decoder.drafter.corpus.index().n_tokens
            ready = f"history: 20 messages, {n_tokens:,} tokens"
            await _until(pilot, lambda: sidebar.text_of("history-index") == ready, "the ready line")
            assert ready in screen_text(app)
            await send(pilot, "What is 3 plus 3?")  # a turn, and its save reaching the index: no new notice
            await settle(pilot)
            await asyncio.to_thread(app.engine.decoder.drafter.corpus.settle)
            await _until(pilot, lambda: sidebar.text_of("history-index").startswith("history: 22 messages"),
                         "the saved reply counted")
            assert len([n for n in app._notifications if "was rebuilt" in n.message]) == 1
        finally:
            release.set()  # a failed assert must not leave the corpus's thread held while the app closes
    assert store.corpus_messages()[:len(before)] == before  # the history is untouched
    store.close()


@pytest.mark.usefixtures("isolated_config")
async def test_a_suffix_drafter_offered_in_the_menu_shows_its_index_once_chosen_and_used(tmp_path):
    """``draft = "ngram"``: the suffix drafter is offered, its index not started, the sidebar silent; once it is
    chosen and a reply drafts with it, the index is built and the sidebar says so."""
    from specchat.commands.tui import make_factory
    from specchat.config import Settings
    from specchat.history import HistoryStore
    from specchat.tui.app import SpecChatApp

    settings = Settings(target="bundled", draft="ngram", k=4, auto_k=False, n_predict=8, n_ctx=512, threads=1,
                        data_dir=tmp_path, theme="specchat-dark")
    store = HistoryStore(settings.history_path())
    _history(store, 3)
    app = SpecChatApp(make_factory(settings), settings, store, make_factory=make_factory, export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        sidebar = app.chat_screen.sidebar
        lazy = app.engine.decoder.drafters["suffix"].corpus
        assert not lazy.started and sidebar.text_of("history-index") == ""
        app.chat_screen.set_drafter("suffix")
        await send(pilot, "What is 1 plus 1?")
        await settle(pilot)
        assert lazy.started and await asyncio.to_thread(lazy.wait, 60) and await asyncio.to_thread(lazy.settle)
        n_tokens = lazy().n_tokens
        ready = f"history: 8 messages, {n_tokens:,} tokens"  # the 6 saved before and this turn's 2
        await _until(pilot, lambda: sidebar.text_of("history-index") == ready, "the ready line")
        assert not [n for n in app._notifications if n.severity == "warning"]
    store.close()
