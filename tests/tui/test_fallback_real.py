"""A template-less model in the app (issue 9): the sidebar and a notice say the fallback format is in use."""

from __future__ import annotations

from tuikit import SIZE, send, settle, wait_ready

from specchat.commands.tui import make_factory
from specchat.config import Settings
from specchat.tui.app import SpecChatApp
from specchat.tui.widgets.chat import ChatNotice


async def test_the_sidebar_and_a_notice_say_the_fallback_format_is_in_use(tmp_path, make_tiny_gguf):
    target = make_tiny_gguf(seed=3, metadata_overrides={"tokenizer.chat_template": None}, name="tiny-no-template")
    settings = Settings(target=str(target), draft="ngram", k=3, auto_k=False, n_predict=8, n_ctx=512, threads=1,
                        data_dir=tmp_path, theme="specchat-dark")
    app = SpecChatApp(make_factory(settings), settings, None)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert app.engine_error is None, app.engine_error
        assert "fallback '### Role:'" in str(app.chat_screen.sidebar.query_one("#pair").render())
        await send(pilot, "Hi")
        await settle(pilot)
        notices = [n.text for n in app.query(ChatNotice)]
        assert any("has no chat template" in n and "### Role:" in n for n in notices), notices
