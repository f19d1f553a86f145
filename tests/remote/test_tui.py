"""The app on a llama-server, as people use it: Pilot with the real remote engine, and ``specchat --server URL``
in a real pseudo-terminal (pexpect + pyte)."""

from __future__ import annotations

import os
import re
import sys
import time

import pexpect
import pyte
import pytest

from specchat.commands.tui import make_factory
from specchat.config import Settings
from specchat.engine.remote import FIXED_REASON
from specchat.history import HistoryStore
from specchat.tui.app import SpecChatApp
from specchat.tui.widgets.chat import ChatNotice
from specchat.tui.widgets.prompt import PromptInput

from .conftest import SERVER_K

SIZE = (120, 40)


async def settle(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    for _ in range(3):
        await pilot.pause()


async def test_app_streams_colours_saves_and_explains_fixed_k(tmp_path, self_draft_server):
    settings = Settings(
        server_url=self_draft_server.url, n_predict=24, data_dir=tmp_path, theme="specchat-dark",
        sampling={"temperature": 0.0},
    )
    store = HistoryStore(tmp_path / "history.sqlite3")
    app = SpecChatApp(make_factory(settings), settings, store, make_factory=make_factory, export_dir=tmp_path)
    notes: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        app.notify = lambda message, **kw: notes.append(str(message))  # type: ignore[method-assign]
        await settle(pilot)
        assert app.engine is not None, app.engine_error
        assert any("no ghost text" in n.text for n in app.query(ChatNotice))
        prompt = app.query_one(PromptInput)
        prompt.text = "Count from 1 to 5."
        prompt.focus()
        await pilot.press("enter")
        await settle(pilot)
        reply = app.chat_screen.assistant_messages()[-1]
        kinds = {k for _, k in reply.tokens.kinds_text() if k}
        assert {"plain", "accepted", "bonus"} <= kinds and "rejected" not in kinds
        assert reply.reply_text == app.engine.messages[-1].content
        # the K keys, speculation and auto-K toggles say why they do not apply; nothing changes
        for key in ("f4", "f3", "f5", "f6"):
            notes.clear()
            await pilot.press(key)
            await pilot.pause()
            assert notes == [FIXED_REASON], key
        state = app.engine.controls.snapshot()
        assert state.k == SERVER_K and state.speculative and not state.auto_k
        assert app.chat_screen.sidebar.text_of("k-status").startswith(f"K {SERVER_K} (fixed)")
        # a llama-server reports no draft time: the sidebar says so instead of showing 0.00 ms
        assert "draft       not reported" in app.chat_screen.sidebar.text_of("reply-figures")
        assert "0.00 ms" not in app.chat_screen.sidebar.text_of("reply-figures")
        _conv, saved = store.load(app.chat_screen.recorder.conversation_id)
        assert saved[-1].kinds == app.engine.messages[-1].kinds and saved[-1].stats.drafter == "server: draft-simple"
    store.close()


class Screen:
    """A pyte screen fed from a pexpect child."""

    def __init__(self, child: pexpect.spawn, cols: int, rows: int) -> None:
        self.child = child
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)

    def text(self) -> str:
        return "\n".join(self.screen.display)

    def wait_for(self, pattern: str, timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.stream.feed(self.child.read_nonblocking(65536, timeout=0.2))
            except pexpect.TIMEOUT:
                pass
            if re.search(pattern, self.text()):
                return self.text()
        raise AssertionError(f"{pattern!r} never appeared on screen:\n{self.text()}")


@pytest.mark.parametrize("cols,rows", [(100, 30), (60, 20)])
def test_specchat_server_in_a_real_terminal(tmp_path, self_draft_server, cols, rows):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECCHAT_")}
    config = tmp_path / "config.toml"
    config.write_text("")
    env.update(TERM="xterm-256color", SPECCHAT_CONFIG=str(config), SPECCHAT_DATA_DIR=str(tmp_path))
    child = pexpect.spawn(
        sys.executable, ["-m", "specchat.cli", "--server", self_draft_server.url, "--n-predict", "16",
                         "--temperature", "0"],
        env=env, dimensions=(rows, cols),
    )
    screen = Screen(child, cols, rows)
    try:
        screen.wait_for(r"ready")
        child.send("Count from 1 to 5.")
        child.send("\r")
        # the finished reply's summary ("16 tok \u00b7 ..."): "tok/s" alone is always on screen (the sidebar's
        # caption, the status bar), and quitting before a token arrived saved an empty reply
        screen.wait_for(r"\d+ tok \u00b7")
        child.send("\x1bOS")  # F4: K up
        screen.wait_for(r"K keys do not apply")
        child.send("\x11")  # ctrl+q
        child.expect(pexpect.EOF, timeout=60)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, screen.text()
    # the conversation was saved in the data dir given to the app
    store = HistoryStore(tmp_path / "history.sqlite3")
    try:
        conversations = store.list_conversations()
        _conv, saved = store.load(conversations[0].id)
        assert saved[-1].role == "assistant" and saved[-1].kinds and "accepted" in saved[-1].kinds
    finally:
        store.close()


async def test_app_when_the_server_is_unreachable_or_dies_mid_reply(tmp_path, llama_server):
    from .conftest import free_port

    # unreachable at start: the app says so and stays up (saved chats stay readable)
    settings = Settings(server_url=f"http://127.0.0.1:{free_port()}", data_dir=tmp_path, theme="specchat-dark")
    app = SpecChatApp(make_factory(settings), settings, None, make_factory=make_factory, export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.engine is None and "connection refused" in (app.engine_error or "")
        assert any("connection refused" in n.text for n in app.query(ChatNotice))
    # dies mid-reply: the partial reply stays on screen and in history, marked, with one error line
    server = llama_server()
    settings = Settings(server_url=server.url, n_predict=400, data_dir=tmp_path, theme="specchat-dark",
                        sampling={"temperature": 0.0})
    store = HistoryStore(tmp_path / "history.sqlite3")
    app = SpecChatApp(make_factory(settings), settings, store, make_factory=make_factory, export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        prompt = app.query_one(PromptInput)
        prompt.text = "Write a very long story about a lighthouse keeper."
        prompt.focus()
        await pilot.press("enter")
        deadline = time.monotonic() + 120
        while not (app.chat_screen.assistant_messages() and app.chat_screen.assistant_messages()[-1].reply_text) and time.monotonic() < deadline:
            await pilot.pause(0.05)
        server.kill()
        await settle(pilot)
        reply = app.chat_screen.assistant_messages()[-1]
        assert reply.error and "closed the connection" in reply.error and reply.reply_text
        errors = [n.text for n in app.query(ChatNotice) if "ended with an error" in n.text]
        assert len(errors) == 1
        _conv, saved = store.load(app.chat_screen.recorder.conversation_id)
        assert saved[-1].role == "assistant" and saved[-1].stopped and saved[-1].content == reply.reply_text
    store.close()
