"""Snapshot tests (pytest-textual-snapshot) of the A/B table with two pairs and of a reply showing ``reply 1/2``
(issue 11). Deterministic like tests/tui/test_snapshots.py: the fake engine's timings, an injected clock, no
cursor blink, no toasts. Update with ``pytest tests/tui/test_snapshots_ab.py --snapshot-update``."""

from __future__ import annotations

from fake_engine import FakeClock, FakeEngine, verify_curve
from tuikit import fake_settings, send_each, settle, wait_ready

from specchat.tui.app import SpecChatApp
from specchat.tui.widgets.prompt import PromptInput

TERMINAL = (110, 44)


def test_ab_table_with_two_pairs(snap_compare, tmp_path):
    first = FakeEngine(["one two three four five six seven eight"], target_name="SmolLM2-135M-Q4_1.gguf")
    second = FakeEngine(["nine ten eleven twelve thirteen"], target_name="SmolLM2-360M-f16.gguf",
                        verify=verify_curve("F16", 0.1))  # a batched kernel: a flat v(K)
    app = SpecChatApp(lambda progress: first, fake_settings(data_dir=tmp_path), clock=FakeClock(),
                      make_factory=lambda settings: (lambda progress: second), export_dir=tmp_path)

    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        app.query_one(PromptInput).cursor_blink = False
        await send_each(pilot, "on")
        await pilot.press("ctrl+t")
        await send_each(pilot, "off")
        app.switch_model("bundled", "ngram", "another pair")
        await wait_ready(pilot)
        await send_each(pilot, "on")
        ab = app.chat_screen.sidebar.query_one("#ab")
        app.chat_screen.sidebar.scroll_to_widget(ab, top=True, animate=False)
        app.clear_notifications()
        await settle(pilot)

    assert snap_compare(app, terminal_size=TERMINAL, run_before=run_before)


def test_reply_showing_version_1_of_2(snap_compare, tmp_path):
    engine = FakeEngine(["A first answer, drafted by n-gram.", "A second answer, without speculation."])
    app = SpecChatApp(lambda progress: engine, fake_settings(), clock=FakeClock(), export_dir=tmp_path)

    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        app.query_one(PromptInput).cursor_blink = False
        await send_each(pilot, "Explain speculative decoding in one line.")
        await pilot.press("ctrl+t")
        await pilot.press("ctrl+r")
        await settle(pilot)
        app.query_one(PromptInput).focus()
        await pilot.press("left")
        app.clear_notifications()
        await settle(pilot)
        assert str(app.chat_screen.assistant_messages()[-1].border_subtitle).startswith("reply 1/2")

    assert snap_compare(app, terminal_size=TERMINAL, run_before=run_before)
