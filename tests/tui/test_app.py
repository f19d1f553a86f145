"""Pilot tests of the app's behaviour with the deterministic fake engine."""

from __future__ import annotations

import dataclasses
import gc
import threading
from pathlib import Path

import pytest
from fake_engine import DEFAULT_REPLY, FakeEngine
from tuikit import (
    SIZE,
    drawn_spans,
    fake_settings,
    notifications,
    reopen_first_saved,
    reply_spans,
    saved_messages,
    send,
    send_each,
    settle,
    style_colour,
    token_colour,
    wait_hold,
    wait_ready,
)

from specchat.engine.protocol import Message
from specchat.errors import ModelFileError
from specchat.tui.app import SpecChatApp
from specchat.tui.screens.help import HelpScreen
from specchat.tui.screens.history import HistoryScreen
from specchat.tui.widgets.chat import AssistantMessage, ChatNotice, UserMessage
from specchat.tui.widgets.prompt import PromptInput
from specchat.tui.widgets.token_view import TokenView


def _figures(app) -> str:
    """How K was chosen, then this reply's figures, as the sidebar shows them."""
    return app.chat_screen.sidebar.text_of("k-status") + "\n" + app.chat_screen.sidebar.text_of("reply-figures")


async def test_first_frame_appears_before_the_engine_loads_and_shows_progress(make_app):
    gate = threading.Event()
    engine = FakeEngine()

    def slow_factory(progress):
        progress(0.25, "loading fake-target.gguf")
        assert gate.wait(30)
        return engine

    app = SpecChatApp(slow_factory, fake_settings())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.pause()
        assert app.engine is None
        assert "loading 25 %" in str(app.chat_screen.sidebar.query_one("#status").render())
        await send(pilot, "too early")
        assert app.query_one(PromptInput).text == "too early"  # kept, not lost
        assert any("still loading" in n for n in notifications(app))
        gate.set()
        await wait_ready(pilot)
        assert app.engine is engine
        assert "ready" in str(app.chat_screen.sidebar.query_one("#status").render())


#: run in a fresh interpreter by the heap-freeze test: the app on the fake engine, twice, and the collector's
#: frozen count after each (the freeze is once per process, so it must be a process of its own)
HEAP_FREEZE_CHILD = r"""
import asyncio, gc, json, sys
sys.path.insert(0, sys.argv[1])
from fake_engine import FakeClock, FakeEngine
from tuikit import SIZE, fake_settings, settle, wait_ready
from specchat.tui.app import SpecChatApp
from specchat.tui.heap import freeze_startup_heap

async def one_app():
    engine = FakeEngine()
    app = SpecChatApp(lambda progress: engine, fake_settings(), clock=FakeClock(), export_dir=sys.argv[2])
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await settle(pilot)
        return gc.get_freeze_count()

before = gc.get_freeze_count()
first = asyncio.run(one_app())
again = freeze_startup_heap()
second = asyncio.run(one_app())
print(json.dumps({"before": before, "first": first, "again": again, "second": second}))
"""


def test_once_the_engine_is_ready_the_start_up_heap_is_frozen_once_per_process(tmp_path):
    """The collector's full passes stop walking the start-up objects (specchat.tui.heap: 77 -> 25 ms median
    pause measured in the app), and a second app in the same process (a test run) does not freeze again.
    In a process of its own: freezing is global to the interpreter, so in the test process it would change
    the collector for every test after this one (and depend on whether an earlier test had frozen it)."""
    import json
    import subprocess
    import sys

    parent = gc.get_freeze_count()
    proc = subprocess.run(
        [sys.executable, "-c", HEAP_FREEZE_CHILD, str(Path(__file__).parent), str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counts["before"] == 0
    assert counts["first"] > 10_000  # the imports' functions and types alone are tens of thousands
    assert counts["again"] is False  # once per process
    assert counts["second"] <= counts["first"]  # none added (reference counting still frees frozen objects)
    # this process's collector: nothing unfrozen or frozen here (the count only falls, as reference counting
    # frees objects an earlier app of this process froze)
    assert gc.get_freeze_count() <= parent


async def test_send_streams_a_coloured_reply(make_app):
    app, engine = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "explain speculative decoding")
        await settle(pilot)
        assert engine.calls == ["send:explain speculative decoding"]
        assert [w.text for w in app.query(UserMessage)] == ["explain speculative decoding"]
        reply = app.chat_screen.assistant_messages()[-1]
        turn = engine.turns[-1]
        assert reply.finished and reply.reply_text == turn.text == engine.messages[-1].content
        kinds = {k for _, k in reply.tokens.kinds_text() if k}
        assert {"accepted", "corrected", "bonus", "rejected"} <= kinds
        assert "tok/s" in reply.border_subtitle
        # colours: each kind's span is drawn in the theme's token colour
        theme = app.current_theme
        view = reply.tokens
        colours = {}
        for y in range(view.row_count):
            row = view._rows[y]
            strip = view.render_line(y)
            for span in row.spans:
                kind = span.style.removeprefix(".token--")
                text = row.plain[span.start : span.end]
                for seg in strip:
                    if seg.text == text and seg.style and seg.style.color:
                        colours.setdefault(kind, seg.style.color.triplet.hex)
        assert colours["accepted"] == theme.variables["token-accepted"]
        assert colours["corrected"] == theme.variables["token-corrected"]
        assert colours["rejected"] != colours["accepted"]
        assert _figures(app).count("acceptance") == 1 and "\u2013" not in _figures(app).split("\n")[0]


async def test_ghosts_toggle_and_are_never_part_of_the_reply(make_app, monkeypatch):
    app, engine = make_app()
    copied: list[str] = []
    monkeypatch.setattr(app, "copy_to_clipboard", copied.append)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "hi")
        await settle(pilot)
        view = app.query_one(TokenView)
        ghosts = view.ghost_text
        assert ghosts and ghosts.strip()
        assert view.visible_text() != view.reply_text
        await pilot.press("f7")
        assert not view.show_ghosts and view.visible_text() == view.reply_text
        assert "(hidden)" in str(app.query_one("#legend").render())
        await pilot.press("f7")
        assert view.show_ghosts
        await pilot.press("f9")
        assert copied == [engine.messages[-1].content]


async def test_k_change_and_speculation_toggle_mid_reply_show_in_the_next_steps(make_app):
    engine = FakeEngine(["word " * 60], k=3, hold_at_steps=(3, 6))
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "go")
        await wait_hold(pilot, engine, 1)
        assert [s.k for s in engine.steps_seen] == [3, 3, 3]
        assert _figures(app).startswith("K 3 (fixed)\n")
        await pilot.press("f4")  # K 3 -> 4, mid-reply
        assert engine.controls.snapshot().k == 4
        assert _figures(app).startswith("K 3 (fixed)\nnext round: K 4 (fixed)\n")  # the key's effect, and when
        engine.release()
        await wait_hold(pilot, engine, 2)
        assert [s.k for s in engine.steps_seen[3:6]] == [4, 4, 4]  # the very next step used K = 4
        assert _figures(app).startswith("K 4 (fixed)\nthis reply")
        await pilot.press("f5")  # speculation off, mid-reply
        assert "next round: speculation off" in _figures(app)
        engine.release()
        await settle(pilot)
        after = engine.steps_seen[6:]
        assert after and all(not s.speculative and s.drafted == 0 and s.k == 0 for s in after)
        assert _figures(app).startswith("speculation off\nlast reply")
        reply = app.chat_screen.assistant_messages()[-1]
        assert reply.reply_text == engine.turns[-1].text
        tail_kinds = [k for _, k in reply.tokens.kinds_text()][-len(after) :]
        assert set(tail_kinds) == {"plain"}
        await pilot.press("f3", "f3")
        assert engine.controls.snapshot().k == 2
        await pilot.press("f6")
        assert engine.controls.snapshot().auto_k is True and "next round" not in _figures(app)  # still off
        await pilot.press("f5")
        assert "next round: K auto" in _figures(app)


async def test_escape_stops_and_keeps_the_partial_reply(make_app):
    engine = FakeEngine(hold_at_steps=(4,))
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "go")
        await wait_hold(pilot, engine)
        assert app.generating
        await pilot.press("escape")
        await settle(pilot)
        assert not app.generating
        reply = app.chat_screen.assistant_messages()[-1]
        assert reply.stopped and "stopped" in reply.border_subtitle and reply.has_class("stopped")
        assert reply.reply_text and reply.reply_text == engine.messages[-1].content
        assert len(reply.reply_text) < len(DEFAULT_REPLY)
        assert engine.messages[-1].stopped
        await pilot.press("escape")  # nothing running: a harmless no-op
        assert not app.generating


async def test_ctrl_c_stops_a_streaming_reply_at_once_and_copies_when_idle(make_app):
    """ctrl+c (the stop key no escape sequence begins with: no ESCDELAY wait) stops the reply at the round it
    lands in, as Esc does; with no reply streaming it keeps its meaning: the prompt copies its selection."""
    engine = FakeEngine(hold_at_steps=(4,))
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "go")
        await wait_hold(pilot, engine)
        steps = len(engine.steps_seen)
        await pilot.press("ctrl+c")
        await settle(pilot)
        assert not app.generating and engine.messages[-1].stopped
        assert len(engine.steps_seen) <= steps + 1  # the round in flight, then the stop
        reply = app.chat_screen.assistant_messages()[-1]
        assert reply.stopped and "stopped" in reply.border_subtitle
        prompt = app.query_one(PromptInput)
        prompt.set_text("copy me")
        prompt.select_all()
        await pilot.press("ctrl+c")  # idle: the TextArea's copy, not a stop (nothing to stop) nor a quit hint
        await pilot.pause()
        assert app.clipboard == "copy me" and not app.generating


async def test_regenerate_replaces_the_last_reply(make_app):
    engine = FakeEngine(["first answer", "second answer"])
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "q")
        await settle(pilot)
        assert app.chat_screen.assistant_messages()[-1].reply_text == "first answer"
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert engine.calls == ["send:q", "regenerate"]
        replies = app.chat_screen.assistant_messages()
        assert [r.reply_text for r in replies] == ["second answer"]
        assert [m.role for m in engine.messages] == ["user", "assistant"]


async def test_new_chat_clears_the_conversation(make_app):
    app, engine = make_app(settings=fake_settings(system_prompt="be brief"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "q")
        await settle(pilot)
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert engine.calls[-1] == "reset"
        assert engine.messages[0].content == "be brief"
        assert not app.chat_screen.assistant_messages() and not list(app.query(UserMessage))
        assert app.chat_screen.recorder.conversation_id is None


async def test_engine_error_mid_reply_ends_the_turn_with_a_message(make_app):
    engine = FakeEngine(fail_at_step=2)
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "q")
        await settle(pilot)
        assert not app.generating
        errors = [n for n in app.query(ChatNotice) if n.has_class("error")]
        assert errors and "llama_decode" in errors[-1].text
        assert app.chat_screen.assistant_messages()[-1].has_class("failed")
        engine.fail_at_step = None
        await send(pilot, "again")  # still usable
        await settle(pilot)
        assert app.chat_screen.assistant_messages()[-1].finished and not app.chat_screen.assistant_messages()[-1].error


async def test_model_error_is_shown_and_history_stays_readable(tmp_path):
    from specchat.history import HistoryStore

    store = HistoryStore(tmp_path / "h.sqlite3")
    from specchat.engine.protocol import Message

    conv = store.create_conversation("old chat")
    store.append_message(conv, Message("user", "hello"))
    store.append_message(conv, Message("assistant", "hi there", tokens=[101, 102], kinds=["accepted", "bonus"]))

    def failing_factory(progress):
        raise ModelFileError("model file /x/target.gguf is truncated (98 of 100 MB); download it again")

    app = SpecChatApp(failing_factory, fake_settings(), store, export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert app.engine is None and "truncated" in app.engine_error
        notice = [n for n in app.query(ChatNotice) if n.has_class("error")][-1]
        assert "download it again" in notice.text and "ctrl+o" in notice.text
        assert "model error" in str(app.chat_screen.sidebar.query_one("#status").render())
        await send(pilot, "hello?")
        assert any("No model is loaded" in n for n in notifications(app))
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, HistoryScreen)
        await pilot.press("enter")
        await pilot.pause()
        assert [w.text for w in app.query(UserMessage)] == ["hello"]
        assert [r.reply_text for r in app.chat_screen.assistant_messages()] == ["hi there"]
        # no engine to split the reply into its tokens: drawn as one uncoloured piece, as before
        assert reply_spans(app.chat_screen.assistant_messages()[0].tokens) == [("hi there", "saved")]
    store.close()


async def test_history_is_saved_and_reopened_with_a_real_store(make_app, tmp_path):
    from specchat.history import HistoryStore

    store = HistoryStore(tmp_path / "history.sqlite3")
    engine = FakeEngine(["one", "two", "three"])
    app, _ = make_app(engine, history_store=store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send_each(pilot, "first question", "second question")
        conv_id = app.chat_screen.recorder.conversation_id
        assert conv_id is not None
        _, saved = store.load(conv_id)
        assert [(m.role, m.content) for m in saved] == [
            ("user", "first question"), ("assistant", "one"), ("user", "second question"), ("assistant", "two")
        ]
        assert saved[1].stats is not None and saved[1].stats.predicted_n == engine.turns[0].predicted_n
        await pilot.press("ctrl+n")
        await pilot.pause()
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, HistoryScreen)
        await pilot.press("ctrl+s")  # export from the browser
        await pilot.pause()
        exported = sorted(tmp_path.glob(f"specchat-{conv_id}-*.md"))
        assert exported and "first question" in exported[0].read_text()
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, HistoryScreen)
        assert app.chat_screen.recorder.conversation_id == conv_id
        assert engine.calls[-1] == "load" and [m.content for m in engine.loaded] == [m.content for m in saved]
        assert [w.text for w in app.query(UserMessage)] == ["first question", "second question"]
        await send(pilot, "third question")  # continue the reopened conversation
        await settle(pilot)
        _, saved = store.load(conv_id)
        assert [m.content for m in saved][-2:] == ["third question", "three"]
        assert len(store.list_conversations()) == 1
        # delete from the browser (Delete, then the dialog's Delete button)
        await pilot.press("ctrl+o")
        await pilot.pause()
        await pilot.press("delete")
        await pilot.pause()
        await pilot.press("tab", "enter")
        await pilot.pause()
        assert store.list_conversations() == []
        assert app.chat_screen.recorder.conversation_id is None
        await pilot.press("escape")
    store.close()


async def test_the_message_is_saved_when_sent_and_the_reply_when_the_turn_ends(make_app, history_store):
    engine = FakeEngine(["a first answer of several words", DEFAULT_REPLY], hold_at_steps=(2,))
    app, _ = make_app(engine, history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "first question")
        await wait_hold(pilot, engine)
        # mid-reply: the question is saved already (a crash now would lose only the reply)
        conv_id = app.chat_screen.recorder.conversation_id
        assert conv_id is not None and app.generating
        assert saved_messages(history_store, conv_id) == [("user", "first question")]
        engine.release()
        await settle(pilot)
        assert saved_messages(history_store, conv_id) == [
            ("user", "first question"), ("assistant", "a first answer of several words")
        ]
        await send(pilot, "second question")
        await wait_hold(pilot, engine, 2)
        assert saved_messages(history_store, conv_id)[-1] == ("user", "second question")
        await pilot.press("escape")
        await settle(pilot)
        _, saved = history_store.load(conv_id)
        assert [(m.role, m.content) for m in saved] == [(m.role, m.content) for m in engine.messages]
        assert saved[-1].stopped and saved[-1].content and len(saved[-1].content) < len(DEFAULT_REPLY)
        assert saved[-1].stats == engine.turns[-1] and saved[-1].stats.stop_reason == "stopped"


@pytest.mark.parametrize("how", ["quit key", "app exit"])
async def test_quitting_mid_reply_saves_the_partial_reply_marked_stopped(make_app, history_store, how):
    engine = FakeEngine(hold_at_steps=(2,))
    app, _ = make_app(engine, history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "go")
        await wait_hold(pilot, engine)
        if how == "quit key":
            await pilot.press("ctrl+q")
        # else: leaving run_test exits the app without the quit action (on_unmount shuts the engine down)
    assert engine.closed and engine.messages[-1].stopped
    (conv,) = history_store.list_conversations()
    _, saved = history_store.load(conv.id)
    assert [(m.role, m.content) for m in saved] == [("user", "go"), ("assistant", engine.messages[-1].content)]
    assert saved[-1].stopped and saved[-1].content and saved[-1].tokens == engine.turns[-1].tokens


async def test_export_current_chat_never_overwrites(make_app, tmp_path):
    app, engine = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "hello")
        await settle(pilot)
        await pilot.press("ctrl+s")
        await pilot.press("ctrl+s")
        files = sorted(tmp_path.glob("specchat-unsaved-hello*.md"))
        assert len(files) == 2
        text = files[0].read_text()
        assert "hello" in text and engine.messages[-1].content in text
        assert app.query_one(TokenView).ghost_text not in text


async def test_broken_user_theme_is_reported_and_skipped(make_app, tmp_path):
    themes = tmp_path / "cfg" / "themes"
    themes.mkdir(parents=True)
    (themes / "broken.toml").write_text("name = 'half\n")
    (themes / "mine.toml").write_text('name = "mine"\nprimary = "#ff8800"\n[variables]\ntoken-accepted = "#123456"\n')
    app, _ = make_app(user_theme_dir=tmp_path / "cfg", settings=fake_settings(theme="mine"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert app.theme == "mine"
        assert len(app.theme_errors) == 1 and "broken.toml" in app.theme_errors[0]
        assert any("broken.toml" in n for n in notifications(app))
        assert app.get_css_variables()["token-accepted"] == "#123456"
        # a theme without token colours still works: defaults fill in
        app.set_theme("textual-light")
        await pilot.pause()
        assert app.get_css_variables()["token-rejected"]


async def test_unknown_theme_falls_back_with_a_notice(make_app):
    app, _ = make_app(settings=fake_settings(theme="no-such-theme"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.theme == "specchat-dark"
        assert any("no-such-theme" in n for n in notifications(app))


async def test_keymap_from_settings_remaps_bindings(make_app):
    settings = fake_settings(keymap={"k_up": "alt+up", "ctrl+g": "toggle_ghosts", "ctrl+t": "teleport"})
    app, engine = make_app(settings=settings)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert len(app.keymap_problems) == 2 and "teleport" in app.keymap_problems[0]
        assert "ctrl+g to toggle_ghosts, but it is also help's default key" in app.keymap_problems[1]
        assert sum("help's default key" in n for n in notifications(app)) == 1
        await pilot.press("alt+up")
        assert engine.controls.snapshot().k == 4
        await pilot.press("f4")  # the old key no longer raises K
        assert engine.controls.snapshot().k == 4
        await pilot.press("ctrl+g")
        assert app.chat_screen.show_ghosts is False
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert "alt+up" in str(app.screen.query_one("#help-text").render())
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


async def test_prompt_enter_sends_and_ctrl_j_inserts_a_newline(make_app):
    app, engine = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        app.query_one(PromptInput).focus()
        await pilot.press("a", "ctrl+j", "b", "shift+enter", "c")
        assert app.query_one(PromptInput).text == "a\nb\nc"
        await pilot.press("enter")
        await settle(pilot)
        assert engine.calls == ["send:a\nb\nc"]
        assert app.query_one(PromptInput).text == ""
        await pilot.press("enter")  # empty prompt: nothing is sent
        await settle(pilot)
        assert engine.calls == ["send:a\nb\nc"]


async def test_model_output_and_user_text_are_sanitised(make_app):
    engine = FakeEngine(["\x1b[2J\x1b]0;pwned\x07 evil\x9b31m"])
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "show \x1b[5m me")
        await settle(pilot)
        view = app.query_one(TokenView)
        drawn = "".join(seg.text for y in range(view.row_count) for seg in view.render_line(y))
        assert "\x1b" not in drawn and "\x07" not in drawn and "\x9b" not in drawn
        assert "\u241b" in drawn and "\u241b[2J\u241b]0;pwned\u2407 evil\ufffd31m" == view.reply_text
        user = app.query_one(UserMessage)
        assert "\x1b" not in str(user.render())


async def test_markdown_view_toggles_without_losing_the_token_view(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "code please")
        await settle(pilot)
        reply = app.chat_screen.assistant_messages()[-1]
        rows_before = [r.plain for r in reply.tokens._rows]
        await pilot.press("f8")
        await pilot.pause()
        assert reply.markdown_shown and not reply.tokens.display
        from textual.widgets import Markdown

        md = reply.query_one(Markdown)
        assert md.source == reply.reply_text
        assert md.query("MarkdownFence")  # the code block is a highlighted fence
        await pilot.press("f8")
        await pilot.pause()
        assert not reply.markdown_shown and reply.tokens.display
        assert [r.plain for r in reply.tokens._rows] == rows_before


async def test_quit_mid_reply_stops_the_engine_and_waits_for_the_worker(make_app):
    engine = FakeEngine(hold_at_steps=(2,))
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "go")
        await wait_hold(pilot, engine)
        assert engine.generating.is_set()
        await pilot.press("ctrl+q")
    assert engine.controls.stop_requested or engine.messages[-1].stopped
    assert not engine.generating.is_set()  # the engine's generator ran to its end
    assert not app.host.turn_running and engine.closed


async def test_exit_without_quit_action_also_stops_the_worker(make_app):
    engine = FakeEngine(hold_at_steps=(2,))
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "go")
        await wait_hold(pilot, engine)
    assert not engine.generating.is_set() and engine.closed


async def test_palette_commands_switch_drafter_k_temperature_and_theme(make_app):
    from specchat.tui.commands import SpecChatCommands

    app, engine = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        provider = SpecChatCommands(app.screen)
        commands = {text: cb for text, cb, _ in provider._commands()}
        assert {"Drafter: ngram", "Drafter: none", "K = 7", "Temperature = 0.7", "Theme: specchat-light"} <= set(commands)
        commands["K = 7"]()
        commands["Temperature = 0.7"]()
        commands["Drafter: none"]()
        commands["Theme: specchat-light"]()
        await pilot.pause()
        state = engine.controls.snapshot()
        assert state.k == 7 and state.sampling.temperature == 0.7 and state.drafter == "none"
        assert app.theme == "specchat-light"
        hits = [hit async for hit in provider.search("temperature 1.5")]
        assert hits and "Temperature = 1.5" in str(hits[0].text)


async def test_switching_the_model_carries_the_conversation_over(make_app, tmp_path):
    from specchat.config import Settings
    from specchat.tui.commands import model_choices

    first, second = FakeEngine(["from the first model"]), FakeEngine(["from the second model"])
    built: list[str] = []

    def make_factory(settings):
        def factory(progress):
            built.append(settings.target)
            return second

        return factory

    settings = Settings(data_dir=tmp_path)
    app = SpecChatApp(lambda progress: first, settings, make_factory=make_factory, export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "hello")
        await settle(pilot)
        app.switch_model("preset:qwen2.5-1.5b", "ngram", "preset qwen2.5-1.5b")  # files not on this machine
        await pilot.pause()
        assert built == [] and app.engine is first
        assert any("specchat models pull qwen2.5-1.5b" in n for n in notifications(app))
        app.switch_model("bundled", "ngram", "bundled SmolLM2 + ngram")
        await wait_ready(pilot)
        assert built == ["bundled"] and app.engine is second and first.closed
        assert [m.content for m in second.loaded] == ["hello", "from the first model"]
        assert app.settings.target == "bundled"
        labels = [label for label, *_ in model_choices()]
        assert "preset smollm2-f16-q41" in labels
        assert ("preset smollm2-q8-ngram", "preset:smollm2-q8-ngram", "ngram") in [c[:3] for c in model_choices()]
        assert ("bundled SmolLM2 + suffix", "bundled", "suffix") in [c[:3] for c in model_choices()]  # issue 23
        # and a drafter chain: the history's copies first, the model drafting for itself otherwise (no download)
        chain = ("bundled SmolLM2 + suffix,bundled", "bundled", "suffix,bundled")
        assert chain in [c[:3] for c in model_choices()]
        app.switch_model(chain[1], chain[2], chain[0])
        await wait_ready(pilot)
        assert built == ["bundled", "bundled"] and app.settings.draft == "suffix,bundled", notifications(app)


async def test_palette_lists_every_key_action(make_app):
    app, engine = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        titles = {c.title: c for c in app.get_system_commands(app.screen)}
        for title in ("K+", "K\u2212", "Spec", "Ghosts", "Markdown", "Regenerate", "New chat", "History", "Export",
                      "Edit last message"):
            assert title in titles
        assert "Stop" not in titles  # only while a reply runs
        await titles["K+"].callback()
        assert engine.controls.snapshot().k == 4


async def test_theme_switch_recolours_finished_tokens_and_sidebar_shows_the_last_reply_rate(make_app):
    app, engine = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "hi")
        await settle(pilot)
        view = app.query_one(TokenView)

        def accepted_colour() -> str:
            for y in range(view.row_count):
                row = view._rows[y]
                for span in row.spans:
                    if span.style == ".token--accepted":
                        text = row.plain[span.start : span.end]
                        for seg in view.render_line(y):
                            if seg.text == text:
                                return seg.style.color.triplet.hex
            raise AssertionError("no accepted token drawn")

        assert accepted_colour() == app.get_theme("specchat-dark").variables["token-accepted"]
        app.set_theme("specchat-high-contrast")
        await pilot.pause()
        assert accepted_colour() == app.get_theme("specchat-high-contrast").variables["token-accepted"]
        assert str(app.chat_screen.sidebar.query_one("#tok-s-label").render()) == "tok/s of the last reply"
        assert app.chat_screen.sidebar.query_one("#tok-s").value == f"{engine.turns[-1].predicted_per_second:.1f}"


async def test_loading_every_turn_and_closing_run_on_one_engine_thread(make_app):
    """llama.cpp's OpenMP keeps a compute pool per calling thread: all engine work must stay on one thread."""
    factory_threads: set[int] = set()
    engine = FakeEngine(["a", "b", "c", "d"])

    def factory(progress):
        factory_threads.add(threading.get_ident())
        return engine

    app = SpecChatApp(factory, fake_settings())
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        for text in ("one", "two"):
            await send(pilot, text)
            await settle(pilot)
        await pilot.press("ctrl+r")
        await settle(pilot)
        await send(pilot, "three")
        await settle(pilot)
    assert engine.calls == ["send:one", "send:two", "regenerate", "send:three", "close"]
    assert engine.threads == factory_threads and len(factory_threads) == 1
    (ident,) = factory_threads
    assert ident != threading.main_thread().ident
    assert ident not in {t.ident for t in threading.enumerate()}  # the engine thread ended with the app


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="per-thread niceness is Linux-only")
@pytest.mark.parametrize("threads", ["all", "fewer"])
def test_ui_thread_yields_cpu_to_the_engine_thread_only_when_llama_takes_every_core(tmp_path, threads):
    """In a fresh process: the engine thread keeps the normal priority; the UI thread drops to UI_NICE when
    llama.cpp's threads take every core, and keeps its priority when a core is left for it (issue 9)."""
    import os
    import subprocess
    import sys
    import textwrap

    cores = os.cpu_count() or 1
    if threads == "fewer" and cores < 2:
        pytest.skip("one core: no thread count leaves a core for the UI")
    n = cores if threads == "all" else 1
    script = textwrap.dedent(
        f"""
        import asyncio, os, sys, threading
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        from fake_engine import FakeEngine
        from tuikit import fake_settings, wait_ready
        from specchat.tui.app import SpecChatApp
        from specchat.tui.priority import UI_NICE
        seen = {{}}
        def factory(progress):
            tid = threading.get_native_id()
            seen["engine"] = os.getpriority(os.PRIO_PROCESS, tid)
            return FakeEngine()
        async def main():
            start = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
            app = SpecChatApp(factory, fake_settings(threads={n}))
            async with app.run_test() as pilot:
                await wait_ready(pilot)
                ui = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
            print(start, seen["engine"], ui, UI_NICE)
        asyncio.run(main())
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    start, engine_nice, ui_nice, wanted = map(int, out.stdout.split())
    assert engine_nice == start
    assert ui_nice == (max(start, wanted) if threads == "all" else start)


async def test_keymap_can_move_the_prompt_keys_too(make_app):
    app, engine = make_app(settings=fake_settings(keymap={"newline": "ctrl+l", "ctrl+f": "send"}))
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        app.query_one(PromptInput).focus()
        await pilot.press("a", "ctrl+l", "b")
        assert app.query_one(PromptInput).text == "a\nb"
        await pilot.press("ctrl+f")
        await settle(pilot)
        assert engine.calls == ["send:a\nb"]


# -- editing the last message ---------------------------------------------------------------------------


async def test_up_on_an_empty_prompt_edits_the_last_message_and_sending_replaces_the_exchange(
    make_app, history_store
):
    import sqlite3

    engine = FakeEngine(["one", "two", "three"])
    app, _ = make_app(engine, history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send_each(pilot, "first question", "second question")
        conv_id = app.chat_screen.recorder.conversation_id
        prompt = app.query_one(PromptInput)
        await pilot.press("up")
        assert prompt.text == "second question" and prompt.cursor_location == prompt.document.end
        assert app.query(UserMessage)[-1].has_class("editing") and "editing" in str(prompt.border_title)
        prompt.insert(", shorter")
        engine.hold_at_steps = {0}  # hold the new reply before its first token
        await pilot.press("enter")
        await wait_hold(pilot, engine)
        assert engine.calls[-1] == "edit:second question, shorter"
        # mid-reply: the old message and reply are gone from the pane and already from history
        assert [w.text for w in app.query(UserMessage)] == ["first question", "second question, shorter"]
        assert [r.reply_text for r in app.chat_screen.assistant_messages()] == ["one", ""]
        assert saved_messages(history_store, conv_id) == [
            ("user", "first question"), ("assistant", "one"), ("user", "second question, shorter")
        ]
        assert prompt.text == "" and not app.chat_screen.editing and not prompt.border_title
        await pilot.press("up")  # not while a reply is being generated
        assert prompt.text == "" and not app.chat_screen.editing
        assert any("still being generated" in n for n in notifications(app))
        engine.release()
        await settle(pilot)
        assert [r.reply_text for r in app.chat_screen.assistant_messages()] == ["one", "three"]
        assert [(m.role, m.content) for m in engine.messages] == saved_messages(history_store, conv_id) == [
            ("user", "first question"), ("assistant", "one"), ("user", "second question, shorter"), ("assistant", "three")
        ]
        _, saved = history_store.load(conv_id)
        assert saved[-1].stats == engine.turns[-1] and saved[-1].tokens == engine.turns[-1].tokens
        assert not any(w.has_class("editing") for w in app.query(UserMessage))
    with sqlite3.connect(history_store.path) as db:  # no row of the replaced reply is left behind
        assert db.execute("SELECT count(*) FROM messages").fetchone()[0] == 4
        assert db.execute("SELECT count(*) FROM turn_stats").fetchone()[0] == 2
        assert db.execute("SELECT count(*) FROM messages WHERE content IN ('two', 'second question')").fetchone()[0] == 0


async def test_escape_cancels_an_edit_and_puts_the_prompt_back(make_app):
    engine = FakeEngine(["one", "two"])
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        prompt = app.query_one(PromptInput)
        prompt.focus()
        await pilot.press("up")  # nothing to edit yet
        assert not app.chat_screen.editing and any("Nothing to edit" in n for n in notifications(app))
        await send(pilot, "question")
        await settle(pilot)
        prompt.set_text("a\nb")
        await pilot.press("up")  # a prompt with text: up moves the cursor, it does not edit
        assert prompt.text == "a\nb" and prompt.cursor_location == (0, 1) and not app.chat_screen.editing
        commands = {c.title: c for c in app.get_system_commands(app.screen)}
        commands["Edit last message"].callback()  # the palette edits even with a draft in the prompt
        assert prompt.text == "question" and app.chat_screen.editing
        assert app.query_one(UserMessage).has_class("editing") and prompt.has_class("editing")
        await pilot.press("escape")
        assert prompt.text == "a\nb" and not app.chat_screen.editing
        assert not app.query_one(UserMessage).has_class("editing") and not prompt.has_class("editing")
        assert engine.calls == ["send:question"]
        await pilot.press("enter")  # after a cancel, Enter is an ordinary send again
        await settle(pilot)
        assert engine.calls == ["send:question", "send:a\nb"]
        assert [w.text for w in app.query(UserMessage)] == ["question", "a\nb"]
        assert [r.reply_text for r in app.chat_screen.assistant_messages()] == ["one", "two"]


async def test_editing_after_a_failed_reply_replaces_the_failed_exchange(make_app):
    engine = FakeEngine(["never " * 20, "fine"], fail_at_step=1)
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "q")
        await settle(pilot)
        assert [n for n in app.query(ChatNotice) if n.has_class("error")]
        engine.fail_at_step = None
        await pilot.press("up")
        assert app.query_one(PromptInput).text == "q"
        app.query_one(PromptInput).set_text("q, reworded")
        await pilot.press("enter")
        await settle(pilot)
        assert not list(app.query(ChatNotice))  # the error notice belonged to the replaced exchange
        assert [w.text for w in app.query(UserMessage)] == ["q, reworded"]
        assert [(r.reply_text, r.error) for r in app.chat_screen.assistant_messages()] == [("fine", None)]
        assert [(m.role, m.content) for m in engine.messages] == [("user", "q, reworded"), ("assistant", "fine")]


async def test_the_edit_key_is_remappable_and_listed_in_help(make_app):
    app, _ = make_app(settings=fake_settings(keymap={"edit_last": "ctrl+e"}))
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "question")
        await settle(pilot)
        prompt = app.query_one(PromptInput)
        await pilot.press("up")
        assert prompt.text == "" and not app.chat_screen.editing  # up no longer edits
        await pilot.press("ctrl+e")
        assert prompt.text == "question" and app.chat_screen.editing
        await pilot.press("escape")
        prompt.set_text("draft")
        prompt.move_cursor((0, 0))
        await pilot.press("ctrl+e")  # with text in the prompt the key keeps the TextArea's meaning (line end)
        assert prompt.text == "draft" and prompt.cursor_location == (0, 5) and not app.chat_screen.editing
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        help_lines = str(app.screen.query_one("#help-text").render()).splitlines()
        line = next(line for line in help_lines if "[edit_last]" in line)
        assert line.split()[0] == "ctrl+e" and "edit your last message" in line


# -- replies reopened from history keep their colours ------------------------------------------------------


def _assert_drawn_in_kind_colours(app, view: TokenView) -> set[str]:
    """Every drawn span has its kind's theme colour (and corrected = bold, bonus = underline); returns the kinds."""
    drawn = drawn_spans(view)
    for kind, text, styles in drawn:
        if not text.strip():
            continue
        assert {style_colour(s) for s in styles} == {token_colour(app, kind)}, (kind, text)
        if kind == "corrected":
            assert all(s.bold for s in styles), text
        if kind == "bonus":
            assert all(s.underline for s in styles), text
    return {kind for kind, _, _ in drawn}


async def test_a_reopened_reply_is_drawn_in_its_kind_colours(make_app, history_store):
    engine = FakeEngine()
    app, _ = make_app(engine, history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "explain speculative decoding")
        await settle(pilot)
        live = reply_spans(app.chat_screen.assistant_messages()[-1].tokens)
        await pilot.press("ctrl+n")
        await pilot.pause()
        await reopen_first_saved(pilot)
        (reply,) = app.chat_screen.assistant_messages()
        assert reply.saved_coloured
        assert engine.detokenized == [engine.turns[-1].tokens]  # asked once, on the engine thread
        assert len(engine.threads) == 1 and threading.main_thread().ident not in engine.threads
        assert reply_spans(reply.tokens) == live  # the same pieces with the same kinds as when it streamed
        assert reply.reply_text == engine.turns[-1].text
        kinds = _assert_drawn_in_kind_colours(app, reply.tokens)
        assert {"accepted", "corrected", "bonus"} <= kinds and "saved" not in kinds
        app.set_theme("specchat-light")  # theme colours still apply to the reopened reply
        await pilot.pause()
        _assert_drawn_in_kind_colours(app, reply.tokens)


async def test_a_reopened_reply_that_drafted_says_its_ghosts_were_not_saved(make_app, history_store):
    """History keeps a reply's tokens and kinds, not its rejected drafts: a reopened reply that had some says
    "ghosts not saved" on its border (the live reply showed them and says nothing of it); a reply whose drafts
    were all accepted, or that drafted nothing, says nothing either."""
    engine = FakeEngine()
    app, _ = make_app(engine, history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "explain speculative decoding")
        await settle(pilot)
        live = app.chat_screen.assistant_messages()[-1]
        turn = engine.turns[-1]
        assert turn.draft_n > turn.draft_n_accepted and "rejected" in {p.kind for p in live.pieces}
        assert "ghosts not saved" not in str(live.border_subtitle)
        await pilot.press("ctrl+n")
        await pilot.pause()
        await reopen_first_saved(pilot)
        (reply,) = app.chat_screen.assistant_messages()
        assert reply.saved_coloured and "rejected" not in {p.kind for p in reply.pieces}
        assert str(reply.border_subtitle).endswith("ghosts not saved")
    plain = AssistantMessage()
    plain.saved_message = Message("assistant", "x")
    plain.turn = dataclasses.replace(turn, draft_n=4, draft_n_accepted=4)
    assert not plain.ghosts_not_saved


async def test_reopened_in_a_later_session_coloured_once_the_same_model_loads_and_never_by_another(
    make_app, history_store
):
    first, _ = make_app(FakeEngine(), history_store=history_store)
    async with first.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "explain speculative decoding")
        await settle(pilot)
        live = reply_spans(first.chat_screen.assistant_messages()[-1].tokens)
    (conv,) = history_store.list_conversations()
    _, saved = history_store.load(conv.id)

    # the same model, still loading when the conversation is opened: plain first, coloured once it is ready
    gate = threading.Event()
    same_model = FakeEngine()

    def slow_factory(progress):
        assert gate.wait(30)
        return same_model

    app = SpecChatApp(slow_factory, fake_settings(), history_store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+o")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        (reply,) = app.chat_screen.assistant_messages()
        assert app.engine is None and reply.reply_text == saved[-1].content
        assert {kind for _, kind in reply_spans(reply.tokens)} == {"saved"}
        gate.set()
        await wait_ready(pilot)
        await settle(pilot)
        assert reply.saved_coloured and reply_spans(reply.tokens) == live
        _assert_drawn_in_kind_colours(app, reply.tokens)

    # another model's vocabulary: the ids mean other text, so the reply stays as saved (text intact)
    other_model = FakeEngine(["entirely different words here"])
    app, _ = make_app(other_model, history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await reopen_first_saved(pilot)
        (reply,) = app.chat_screen.assistant_messages()
        assert other_model.detokenized == [saved[-1].tokens]  # asked, and its answer did not fit the reply
        assert not reply.saved_coloured and reply.reply_text == saved[-1].content
        assert {kind for _, kind in reply_spans(reply.tokens)} == {"saved"}
