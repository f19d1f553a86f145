"""Regenerate keeps the previous reply as an alternate; ← → (or alt+p / alt+n) flip between the versions of the
last reply in an empty prompt, each drawn with its own colours and numbers; history keeps every version and the
chosen one (issue 11). Pilot tests with the fake engine and a real SQLite history; the real model:
test_e2e_real.py."""

from __future__ import annotations

from fake_engine import FakeEngine
from tuikit import (
    SIZE,
    notifications,
    reopen_first_saved,
    reply_spans,
    saved_messages,
    send_each,
    settle,
    wait_hold,
    wait_ready,
)

from specchat.tui.keys import APP_KEYS, PROMPT_KEYS, resolve_keymap
from specchat.tui.widgets.prompt import PromptInput

ANSWERS = ["first answer with drafts", "second answer plain", "third answer with drafts"]


def last_reply(app):
    return app.chat_screen.assistant_messages()[-1]


def saved_versions(store, conv_id: int) -> tuple[list[str], int]:
    """The saved last reply's versions (texts, in the order generated) and which one is chosen."""
    _, records = store.records(conv_id)
    last = records[-1]
    return [r.message.content for r in last.version_records()], last.message.alternate_index


async def test_regenerate_twice_keeps_three_versions_flip_persists_and_reopens(make_app, history_store):
    engine = FakeEngine(ANSWERS)
    app, _ = make_app(engine, history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send_each(pilot, "q")
        conv_id = app.chat_screen.recorder.conversation_id
        first_spans = reply_spans(last_reply(app).tokens)
        first_ghosts = last_reply(app).tokens.ghost_text
        assert first_ghosts  # speculation on: refused drafts shown
        await pilot.press("ctrl+t")  # the second version without speculation: other colours, other numbers
        await pilot.press("ctrl+r")
        await settle(pilot)
        await pilot.press("ctrl+t")
        await pilot.press("ctrl+r")
        await settle(pilot)
        last = engine.messages[-1]
        assert [v.content for v in last.versions()] == ANSWERS and last.alternate_index == 2
        assert saved_versions(history_store, conv_id) == (ANSWERS, 2)
        assert len(app.chat_screen.assistant_messages()) == 1  # one reply in the pane, three versions of it
        reply = last_reply(app)
        assert reply.reply_text == ANSWERS[2] and str(reply.border_subtitle).startswith("reply 3/3 \u00b7 ")

        app.query_one(PromptInput).focus()
        await pilot.press("left")  # empty, focused prompt: the previous version
        await pilot.pause()
        assert engine.messages[-1].content == ANSWERS[1] and engine.calls[-1] == "select_alternate:1"
        assert reply.reply_text == ANSWERS[1]
        assert {kind for _, kind in reply_spans(reply.tokens)} == {"plain"} and not reply.tokens.ghost_text
        second_turn = engine.turns[1]
        subtitle = str(reply.border_subtitle)
        assert subtitle.startswith("reply 2/3 \u00b7 ") and f"{second_turn.predicted_per_second:.1f} tok/s" in subtitle
        assert "no drafts" in subtitle and "no speculation" in str(reply.border_title)
        assert saved_versions(history_store, conv_id) == (ANSWERS, 1)  # the choice is saved at once

        await pilot.press("alt+p")  # the other key: the first version, as it streamed (ghosts included)
        await pilot.pause()
        assert reply.reply_text == ANSWERS[0]
        assert reply_spans(reply.tokens) == first_spans and reply.tokens.ghost_text == first_ghosts
        first_turn = engine.turns[0]
        assert f"acceptance {first_turn.acceptance * 100:.0f}%" in str(reply.border_subtitle)
        assert "ngram \u00b7 K=3" in str(reply.border_title)
        await pilot.press("left")  # nothing before the first: a notice, nothing changes
        await pilot.pause()
        assert any("is the first version" in n for n in notifications(app)) and reply.reply_text == ANSWERS[0]
        await pilot.press("alt+n")
        await pilot.pause()
        assert saved_versions(history_store, conv_id) == (ANSWERS, 1)

        # reopen it from the history browser: the versions are there, the chosen one shown, and they flip
        await pilot.press("ctrl+n")
        await pilot.pause()
        await reopen_first_saved(pilot)
        reply = last_reply(app)
        assert reply.reply_text == ANSWERS[1] and str(reply.border_subtitle).startswith("reply 2/3")
        assert [v.content for v in engine.messages[-1].versions()] == ANSWERS
        app.query_one(PromptInput).focus()
        await pilot.press("right")
        await settle(pilot)  # an uncoloured saved version is coloured by the engine (detokenize_pieces)
        assert reply.reply_text == ANSWERS[2] and str(reply.border_subtitle).startswith("reply 3/3")
        third = engine.messages[-1]
        assert third.content == ANSWERS[2]
        assert [kind for _, kind in reply_spans(reply.tokens)] == list(third.kinds)  # its own colours
        assert saved_versions(history_store, conv_id) == (ANSWERS, 2)
        # and the conversation continues from the chosen version
        await send_each(pilot, "next")
        assert [m.content for m in engine.messages if m.role == "assistant"][0] == ANSWERS[2]


async def test_history_keeps_the_old_reply_while_its_regeneration_runs(make_app, history_store):
    """Was: action_regenerate saved messages[:-1] before the new reply, so until it ended (or for ever, if the
    app died meanwhile) history had lost the old reply."""
    engine = FakeEngine(["first answer", "second answer"])
    app, _ = make_app(engine, history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send_each(pilot, "q")
        conv_id = app.chat_screen.recorder.conversation_id
        engine.hold_at_steps = {0}
        await pilot.press("ctrl+r")
        await wait_hold(pilot, engine)
        assert saved_messages(history_store, conv_id) == [("user", "q"), ("assistant", "first answer")]
        _, records = history_store.records(conv_id)
        first_created = records[-1].created
        engine.release()
        await settle(pilot)
        assert saved_versions(history_store, conv_id) == (["first answer", "second answer"], 1)
        _, records = history_store.records(conv_id)
        assert records[-1].alternates[0].created == first_created  # the old version keeps its own date


async def test_flipping_is_refused_during_a_reply_and_arrows_edit_a_non_empty_prompt(make_app):
    engine = FakeEngine(["first answer", "second answer", "third answer"])
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        prompt = app.query_one(PromptInput)
        await send_each(pilot, "q")
        await pilot.press("left")
        await pilot.pause()
        assert any("has one version" in n for n in notifications(app))
        await pilot.press("ctrl+r")
        await settle(pilot)
        engine.hold_at_steps = {0}
        await pilot.press("ctrl+r")
        await wait_hold(pilot, engine)
        prompt.focus()
        await pilot.press("left")
        await pilot.pause()
        assert any("flip between versions once it ends" in n for n in notifications(app))
        assert not any(c.startswith("select_alternate") for c in engine.calls)
        engine.release()
        await settle(pilot)
        assert str(last_reply(app).border_subtitle).startswith("reply 3/3")
        prompt.text = "abc"
        prompt.move_cursor((0, 3))
        prompt.focus()
        await pilot.press("left")  # a prompt with text: the arrow moves its cursor
        await pilot.pause()
        assert prompt.cursor_location == (0, 2)
        assert not any(c.startswith("select_alternate") for c in engine.calls)


def test_version_keys_clash_with_no_other_binding():
    keys = [k.strip() for spec in (*APP_KEYS, *PROMPT_KEYS) for k in spec.keys.split(",")]
    assert len(keys) == len(set(keys))
    assert resolve_keymap({}) == ({}, [])
    _, problems = resolve_keymap({"reply_next": "ctrl+r"})  # the keymap reports a clash it would make
    assert any("regenerate" in p for p in problems)
    # a key the prompt edits with stays the prompt's for these (not priority) bindings: said so, not the opposite
    _, problems = resolve_keymap({"reply_prev": "ctrl+left"})
    assert problems == [
        "keymap gives ctrl+left to reply_prev, but the prompt uses ctrl+left to cursor word left: the prompt keeps "
        "it while it has the focus, so reply_prev gets it only elsewhere; to keep both, give reply_prev another key"
    ]


async def test_an_earlier_reply_is_chosen_and_flipped_and_the_screen_engine_and_file_agree(make_app, history_store):
    """Issue 22: only the last reply's versions could be flipped. shift+up (in an empty prompt) or alt+u chooses
    an earlier reply, marked in the pane; the flip keys then flip its versions in the engine, on screen and in
    the SQLite file, the later messages untouched; shift+down goes back to the last reply; a reopened
    conversation flips its earlier reply too, and the next turn continues from the version chosen."""
    answers = ["sea answer one", "sea answer two", "mountain answer"]
    engine = FakeEngine(answers)
    app, _ = make_app(engine, history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send_each(pilot, "sea?")
        await pilot.press("ctrl+r")
        await settle(pilot)
        await send_each(pilot, "mountains?")
        conv_id = app.chat_screen.recorder.conversation_id
        place = next(i for i, m in enumerate(engine.messages) if m.content == answers[1])
        earlier, last = app.chat_screen.assistant_messages()
        assert (earlier.place, last.place) == (place, len(engine.messages) - 1)
        prompt = app.query_one(PromptInput)
        prompt.focus()

        await pilot.press("shift+up")
        await pilot.pause()
        assert earlier.has_class("chosen-reply") and not last.has_class("chosen-reply")
        assert any("Reply 1 of 2 is chosen: version 2/2, left / right flip its versions." in n
                   for n in notifications(app))
        await pilot.press("left")
        await pilot.pause()
        assert engine.calls[-1] == f"select_alternate:0@{place}"
        assert engine.messages[place].content == answers[0] and engine.messages[-1].content == answers[2]
        assert earlier.reply_text == answers[0] and str(earlier.border_subtitle).startswith("reply 1/2 \u00b7 ")
        assert last.reply_text == answers[2]
        _, records = history_store.records(conv_id)
        assert [r.message.content for r in records if r.message.role == "assistant"] == [answers[0], answers[2]]
        assert [v.message.content for v in records[place].version_records()] == answers[:2]
        assert records[place].message.alternate_index == 0
        await pilot.press("left")  # nothing before the first version of that reply: a notice
        await pilot.pause()
        assert any("Reply 1/2 is the first version." in n for n in notifications(app))

        prompt.text = "abc"  # a prompt holding text: shift+down selects in it; alt+d chooses whatever it holds
        prompt.move_cursor((0, 3))
        await pilot.press("shift+up")
        await pilot.pause()
        assert earlier.has_class("chosen-reply") and prompt.text == "abc"
        await pilot.press("alt+d")
        await pilot.pause()
        assert not earlier.has_class("chosen-reply") and prompt.text == "abc"
        assert any("The last reply is chosen; it has one version." in n for n in notifications(app))
        prompt.text = ""
        await pilot.press("left")  # the last reply again: it has one version
        await pilot.pause()
        assert any("The last reply has one version" in n for n in notifications(app))
        assert engine.messages[place].content == answers[0]

        # reopened from history: the earlier reply shows the version chosen, flips, and the chat goes on from it
        await pilot.press("ctrl+n")
        await pilot.pause()
        await reopen_first_saved(pilot)
        earlier, last = app.chat_screen.assistant_messages()
        assert earlier.reply_text == answers[0] and str(earlier.border_subtitle).startswith("reply 1/2")
        app.query_one(PromptInput).focus()
        await pilot.press("alt+u", "right")
        await settle(pilot)
        assert earlier.reply_text == answers[1] and last.reply_text == answers[2]
        _, records = history_store.records(conv_id)
        assert records[place].message.content == answers[1] and records[-1].message.content == answers[2]
        await send_each(pilot, "rivers?")
        assert [m.content for m in engine.messages if m.role == "assistant"][:2] == [answers[1], answers[2]]
        assert not app.chat_screen.chat.query(".chosen-reply")  # a new reply is the chosen one again
