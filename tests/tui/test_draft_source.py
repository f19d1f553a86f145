"""Where a draft came from, on screen (issue 23): the words (plain functions), and the sidebar and a reply's summary
with the real bundled model drafting from a real history database through the suffix drafter."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from tuikit import SIZE, send, settle, wait_ready

from specchat.engine.events import DraftSource
from specchat.tui.draft_source import age, origin_summary, source_line

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)


def _describe(conv: int):
    return {3: ("Refactor parser", (NOW - timedelta(days=3, hours=2)).isoformat())}.get(conv)


def test_each_source_in_words():
    assert source_line(None) == ""
    assert source_line(DraftSource("conversation", "ngram")) == "draft from this conversation"
    assert source_line(DraftSource("history", "suffix", 3, 9), describe=_describe, now=NOW) == (
        'draft from conversation #3 ("Refactor parser", 3 days ago)')
    assert source_line(DraftSource("history", "suffix", 4, 1), describe=_describe, now=NOW) == "draft from conversation #4"
    # a copy from the conversation on screen, already saved: this conversation
    assert source_line(DraftSource("history", "suffix", 3, 1), current=3, describe=_describe) == (
        "draft from this conversation")
    # a chain's rounds: the model link names itself, a free link is named
    assert source_line(DraftSource("model", "tiny.gguf"), "suffix,tiny.gguf") == "draft from the draft model (tiny.gguf)"
    assert source_line(DraftSource("conversation", "suffix"), "suffix,tiny.gguf") == (
        "draft from this conversation (chain link suffix)")


def test_ages_and_a_replys_kept_drafts_by_origin():
    assert age((NOW - timedelta(seconds=20)).isoformat(), NOW) == "just now"
    assert age((NOW - timedelta(minutes=1)).isoformat(), NOW) == "1 minute ago"
    assert age((NOW - timedelta(hours=5)).isoformat(), NOW) == "5 hours ago"
    assert age("not a time", NOW) == ""
    assert origin_summary({}, []) == ""
    line = origin_summary({"history": 40, "conversation": 12, "model": 5}, [3, 8], describe=_describe)
    assert line.startswith('drafts kept: 40 from conversation #3 ("Refactor parser", ') and " and 1 more" in line
    assert line.endswith("12 from this conversation, 5 from the draft model")


@pytest.mark.usefixtures("isolated_config")
async def test_the_sidebar_and_the_reply_name_the_saved_conversation_the_suffix_drafter_copied(tmp_path):
    """The model's own answer is saved as conversation #1 "Reverse a string"; asked again with ``draft = "suffix"``,
    the sidebar says the draft came from it (title and age from the history) and the reply's summary counts the
    kept drafts from it. Fails if the engine stops naming a round's source, or the screen stops showing it."""
    from specchat.commands.tui import make_factory
    from specchat.config import Settings
    from specchat.engine.events import Turn
    from specchat.engine.protocol import Message
    from specchat.history import HistoryStore
    from specchat.loading import load_engine, wait_for_history
    from specchat.tui.app import SpecChatApp

    prompt = "Write a Python function that reverses a string."
    settings = Settings(target="bundled", draft="suffix", k=16, auto_k=False, n_predict=48, n_ctx=1024, threads=1,
                        data_dir=tmp_path, theme="specchat-dark")
    plain = load_engine(settings.model_copy(update={"draft": "none"}))
    try:
        answer = [e for e in plain.send(prompt) if isinstance(e, Turn)][-1].text
    finally:
        plain.close()
    store = HistoryStore(tmp_path / "history.sqlite3")
    conv = store.create_conversation("Reverse a string")
    store.append_message(conv, Message("user", prompt))
    store.append_message(conv, Message("assistant", answer))
    box: dict = {}
    real = make_factory(settings)

    def factory(progress):
        box["engine"] = real(progress)
        assert wait_for_history(box["engine"], 60) == []  # the index holds the saved answer before the first reply
        return box["engine"]

    app = SpecChatApp(factory, settings, store, make_factory=make_factory, export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, prompt)
        await settle(pilot)
        reply = app.chat_screen.assistant_messages()[-1]
        assert reply.reply_text == answer  # greedy: the copy is exact
        shown = app.chat_screen.sidebar.text_of("draft-source")
        assert shown.startswith(f'draft from conversation #{conv} ("Reverse a string", just now)'), shown
        assert f'from conversation #{conv} ("Reverse a string", just now)' in str(reply.border_subtitle)
        assert "drafts kept: " in str(reply.border_subtitle)
        assert str(reply.tooltip).startswith("drafts kept: ") and f"conversation #{conv}" in str(reply.tooltip)
    store.close()
