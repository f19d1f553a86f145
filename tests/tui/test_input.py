"""Input arrives whole (issue 9), at the Pilot level: keys still queued when Enter is handled, messages sent
during a reply, Ctrl+N during a reply. The same behaviour through a real pty: tests/terminal/test_input_bursts.py.
"""

from __future__ import annotations

from fake_engine import FakeEngine
from textual import events
from tuikit import SIZE, notifications, saved_messages, send, settle, wait_hold, wait_ready

from specchat.tui.widgets.chat import UserMessage
from specchat.tui.widgets.prompt import PromptInput


def _type_burst(app, text: str) -> None:
    """Post every key to the app at once, as the terminal driver does for one read of a fast burst."""
    for ch in text:
        if ch == "\r":
            app.post_message(events.Key("enter", "\r"))
        elif ch == "\n":
            app.post_message(events.Key("ctrl+j", "\n"))
        else:
            app.post_message(events.Key(ch, ch))


async def test_keys_still_queued_when_enter_is_handled_are_part_of_the_message(make_app, history_store):
    app, engine = make_app(history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        app.query_one(PromptInput).focus()
        await pilot.pause()
        _type_burst(app, "hello there\rsecond\nline\r")
        await settle(pilot)
        await settle(pilot)
        assert [c for c in engine.calls if c.startswith("send:")] == ["send:hello there", "send:second\nline"]
        assert [t for r, t in saved_messages(history_store, app.chat_screen.recorder.conversation_id) if r == "user"] == [
            "hello there", "second\nline"
        ]
        assert app.query_one(PromptInput).text == ""


async def test_a_message_sent_during_a_reply_is_queued_and_sent_after_it_whole(make_app, history_store):
    engine = FakeEngine(["one", "two", "three"], hold_at_steps=(0,))
    app, _ = make_app(engine, history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "first")
        await wait_hold(pilot, engine)
        await send(pilot, "second")
        await pilot.pause()
        prompt = app.query_one(PromptInput)
        prompt.insert("third")  # typed next: must not be merged into the queued message
        await pilot.press("enter")
        await pilot.pause()
        queued = [w for w in app.query(UserMessage) if w.has_class("queued")]
        assert [w.text for w in queued] == ["second", "third"]
        assert all("queued" in str(w.border_title) for w in queued)
        assert prompt.text == ""
        assert engine.calls == ["send:first"]  # nothing reached the engine during the reply
        for n in (2, 3):  # every turn holds at its first step: release each in turn
            engine.release()
            await wait_hold(pilot, engine, n)
        engine.release()
        await settle(pilot)
        assert engine.calls == ["send:first", "send:second", "send:third"]
        assert not any(w.has_class("queued") for w in app.query(UserMessage))
        # on screen: each message followed by its own reply
        kinds = [type(w).__name__ for w in app.chat_screen.chat.children if type(w).__name__ in ("UserMessage", "AssistantMessage")]
        assert kinds == ["UserMessage", "AssistantMessage"] * 3
        assert saved_messages(history_store, app.chat_screen.recorder.conversation_id) == [
            ("user", "first"), ("assistant", "one"), ("user", "second"), ("assistant", "two"),
            ("user", "third"), ("assistant", "three"),
        ]


async def test_ctrl_n_during_a_reply_says_it_stops_and_starts_a_new_chat(make_app, history_store):
    engine = FakeEngine(hold_at_steps=(2,))
    app, _ = make_app(engine, history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "first")
        await wait_hold(pilot, engine)
        await send(pilot, "queued one")
        await pilot.pause()
        conv = app.chat_screen.recorder.conversation_id
        await pilot.press("ctrl+n")
        await pilot.pause()
        notes = notifications(app)
        assert any("Stopping the reply, then starting a new chat" in n for n in notes), notes
        assert any("1 queued message went back to the prompt" in n for n in notes), notes
        assert app.query_one(PromptInput).text == "queued one"
        await settle(pilot)
        assert not app.generating
        assert not list(app.query(UserMessage)) and not app.chat_screen.assistant_messages()
        assert app.chat_screen.recorder.conversation_id is None
        assert engine.calls[-1] == "reset"
        # the stopped chat is kept, its partial reply marked stopped; the queued message was never sent
        _, saved = history_store.load(conv)
        assert [m.role for m in saved] == ["user", "assistant"] and saved[-1].stopped


def test_the_escape_delay_is_shortened_unless_the_user_set_one():
    """Esc is the stop key; Textual waits ESCDELAY ms (100 by default) before a lone Esc counts (issue 9)."""
    from specchat.commands.tui import ESCAPE_DELAY_MS, set_escape_delay

    env: dict[str, str] = {}
    set_escape_delay(env)
    assert env == {"ESCDELAY": str(ESCAPE_DELAY_MS)} and ESCAPE_DELAY_MS < 100
    env = {"ESCDELAY": "300"}
    set_escape_delay(env)
    assert env == {"ESCDELAY": "300"}


async def test_up_right_after_typing_moves_the_cursor_instead_of_editing(make_app):
    """Typed fast, "x" then up: the prompt is not empty (the "x" is still queued), so up does not start an edit."""
    app, engine = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "first")
        await settle(pilot)
        prompt = app.query_one(PromptInput)
        prompt.focus()
        await pilot.pause()
        app.post_message(events.Key("x", "x"))
        app.post_message(events.Key("up", None))
        await settle(pilot)
        assert not app.chat_screen.editing and prompt.text == "x"
        await pilot.press("end", "backspace")  # up moved the cursor to the start of the line
        await settle(pilot)
        assert prompt.text == ""
        await pilot.press("up")  # a really empty prompt (nothing queued): up edits the last message
        await pilot.pause()
        assert app.chat_screen.editing and prompt.text == "first"


def _keys_burst(app, *keys: str) -> None:
    """Post key events to the app at once (one read of the terminal driver): a name, or a character."""
    for key in keys:
        if len(key) == 1:
            app.post_message(events.Key(key, key))
        else:
            app.post_message(events.Key(key, None))


async def _scrolled(pilot, widget, y: float) -> float:
    """Where ``widget`` rests once a burst of paging keys is handled and its scroll animation has ended.

    The keys are handled first (bounded: polled until the scroll's target is ``y``, or 100 pauses), and only then is
    the animation awaited: awaited at once, it found no animation yet (the keys were still queued) and returned,
    and the test read the position wherever the animation then was (CI on the AMD EPYC read 50.9999 for 51)."""
    for _ in range(100):
        if widget.scroll_target_y == y:
            break
        await pilot.pause()
    await pilot.wait_for_animation()
    await settle(pilot)
    return widget.scroll_y


async def test_arrows_and_editing_keys_in_one_burst_apply_in_order_with_the_text(make_app):
    """An arrow (or backspace, home) and characters typed in one burst act in the order typed: "ab", left, "X"
    is "aXb" (before: the arrow's binding ran once the key had bubbled to the App, after the X was inserted)."""
    cases = [
        ("ab", ("left", "X"), "aXb"),
        ("abc", ("left", "left", "X", "right", "Y"), "aXbYc"),
        ("abc", ("backspace", "d"), "abd"),
        ("abc", ("home", "Z"), "Zabc"),
        ("abc", ("left", "backspace", "Q", "end", "!"), "aQc!"),
    ]
    app, _engine = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        prompt = app.query_one(PromptInput)
        prompt.focus()
        for start, keys, expected in cases:
            prompt.set_text(start)
            await pilot.pause()
            _keys_burst(app, *keys)
            await settle(pilot)
            assert prompt.text == expected, (start, keys, prompt.text)


async def test_several_page_downs_in_one_burst_scroll_several_pages(make_app):
    """Three PageDowns in one burst scroll three pages, in the chat pane and in the help (before: each aimed one
    page below the position the first one's animation had not yet left, so the burst scrolled one page)."""
    from specchat.tui.screens.help import HelpScreen
    from specchat.tui.widgets.chat import ChatNotice

    app, _engine = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_ready(pilot)
        chat = app.chat_screen.chat
        for i in range(120):
            chat.mount(ChatNotice(f"line {i}"))
        await settle(pilot)
        chat.focus()
        chat.scroll_home(animate=False)
        await pilot.pause()
        page = chat.scrollable_content_region.height
        assert chat.max_scroll_y > 4 * page
        _keys_burst(app, "pagedown", "pagedown", "pagedown")
        assert await _scrolled(pilot, chat, 3 * page) == 3 * page
        _keys_burst(app, "pageup", "pageup")
        assert await _scrolled(pilot, chat, page) == page

        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        box = app.screen.query_one("#help-box")
        page = box.scrollable_content_region.height
        assert box.max_scroll_y > 3 * page and box.scroll_y == 0
        _keys_burst(app, "pagedown", "pagedown", "pagedown")
        assert await _scrolled(pilot, box, 3 * page) == 3 * page


async def test_escape_right_after_enter_in_one_burst_stops_that_reply(make_app):
    """"hi", Enter and Esc in one burst: the Esc lands after the reply has started on the UI side but (often)
    before the engine thread has begun it; that stop is the reply's (it was lost: the engine cleared every stop
    request when it began a turn). Repeated, since it is a race with the engine thread."""
    engine = FakeEngine(["word " * 400], hold_at_steps=(1,))
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        app.query_one(PromptInput).focus()
        await pilot.pause()
        for i in range(8):
            _type_burst(app, f"hi {i}\r")
            app.post_message(events.Key("escape", None))
            await settle(pilot)
            assert not app.generating
            assert engine.messages[-1].role == "assistant" and engine.messages[-1].stopped, i
