"""A sidebar a newcomer can read (issue 11): nothing shown before it exists, every figure under its window's
name, K in the engine's words, auto-K's notices said once, sparklines on fixed scales, the glossary on F1.

The fake engine's Steps carry the engine's own KStatus and Figures (built by specchat.engine.telemetry.figures
over real counters and a real cost model); the last test runs the bundled SmolLM2.
"""

from __future__ import annotations

import pytest
from fake_engine import AUTO_K_STATES, FakeEngine
from tuikit import SIZE, notifications, send, settle, wait_hold, wait_ready

from specchat.tui.screens.help import GLOSSARY, HelpScreen
from specchat.tui.widgets.chat import ChatNotice
from specchat.tui.widgets.sidebar import Sidebar
from specchat.tui.widgets.sidebar_text import BLOCKS, SPARK_WIDTH, bars, format_spark_acc, format_spark_tok

FULL = BLOCKS[-1]


def _sidebar_figures(app) -> str:
    """Every text of the sidebar but the loading status and the pair."""
    sidebar = app.query_one(Sidebar)
    return "\n".join(sidebar.text_of(w) for w in sidebar._texts if w not in ("status", "pair"))


def _status_bar(app) -> str:
    return str(app.query_one("#status-bar").render())


# -- nothing before it exists ----------------------------------------------------------------------------------


async def test_no_tok_s_number_before_the_first_reply_in_the_sidebar(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        sidebar = app.query_one(Sidebar)
        assert sidebar.display
        digits = sidebar.query_one("#tok-s")
        assert not digits.display  # no big 0.0
        assert sidebar.text_of("tok-s-label") == "tok/s: no reply yet"
        texts = _sidebar_figures(app)
        assert "0.0" not in texts and "0.00" not in texts and "0 %" not in texts
        assert sidebar.text_of("k-status") == "K 3 (fixed)"  # the controls, in the engine's words
        await send(pilot, "hi")
        await settle(pilot)
        assert digits.display and float(digits.value) > 0
        assert sidebar.text_of("tok-s-label") == "tok/s of the last reply"


async def test_no_tok_s_number_before_the_first_reply_in_the_status_bar_at_80_columns(make_app):
    app, engine = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_ready(pilot)
        assert app.query_one("#status-bar").display
        bar = _status_bar(app)
        assert bar.startswith("no reply yet \u00b7 K 3 (fixed)"), bar
        assert "tok/s" not in bar and "0.0" not in bar
        await send(pilot, "hi")
        await settle(pilot)
        bar = _status_bar(app)
        rate = engine.turns[-1].predicted_per_second
        assert bar.startswith(f"{rate:.1f} tok/s \u00b7 K 3 (fixed) \u00b7 acceptance "), bar
        assert bar.endswith("(reply) \u00b7 ready"), bar


async def test_the_status_bar_says_generating_during_a_reply(make_app):
    engine = FakeEngine(hold_at_steps=(4,))
    app, _ = make_app(engine)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_ready(pilot)
        await send(pilot, "hi")
        await wait_hold(pilot, engine)
        bar = _status_bar(app)
        assert " tok/s \u00b7 K 3 (fixed) \u00b7 acceptance " in bar and bar.endswith(" \u00b7 generating"), bar
        engine.release()
        await settle(pilot)
        assert _status_bar(app).endswith(" \u00b7 ready")


# -- each window under its name, K in words --------------------------------------------------------------------


async def test_reply_and_recent_figures_are_separate_named_windows(make_app):
    engine = FakeEngine(hold_at_steps=(9,))
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "go")
        await wait_hold(pilot, engine)
        sidebar = app.query_one(Sidebar)
        assert sidebar.text_of("reply-figures").startswith("this reply \u00b7 ")  # mid-reply
        engine.release()
        await settle(pilot)
        step = engine.steps_seen[-1]  # the end of the turn posts the last round's figures
        reply = sidebar.text_of("reply-figures").split("\n")
        assert reply[0] == f"last reply \u00b7 {step.reply.drafting_rounds:.0f} drafting rounds"
        assert sidebar.text_of("positions-label") == "acceptance per draft position \u00b7 last reply"
        assert f"acceptance  {step.reply.acceptance * 100:.0f} % ({step.reply.accepted:.0f} of " in reply[1]
        recent = sidebar.text_of("recent-figures").split("\n")
        assert recent[0] == step.recent.window_label  # the engine's own words for the window
        assert recent[1] == f"acceptance  {step.recent.acceptance * 100:.0f} %"
        assert recent[2] == f"\u03b1           {step.recent.alpha:.2f} per position"
        # α and acceptance differ: the recent window's note says why, in words
        assert sidebar.text_of("recent-notes") == "\n".join(step.recent.notes) and step.recent.notes
        # the break-even line quotes the same α as the recent window it sits under
        assert f"\u03b1 = {step.recent.alpha:.2f}" in sidebar.text_of("break-even")


async def test_k_shows_the_engines_words_and_note_while_holding(make_app):
    script, cost = AUTO_K_STATES["holding"]
    engine = FakeEngine(hold_at_steps=(4,), auto_k=True, auto_k_script=(script,), cost=cost)
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "go")
        await wait_hold(pilot, engine)
        sidebar = app.query_one(Sidebar)
        status = engine.steps_seen[-1].status
        assert sidebar.text_of("k-status") == status.label == f"K 16 (auto: holding, best now {cost.best_k})"
        # the note quotes the recent drafted length, which moves per round: the note of a round seen (stats are
        # posted ~4 times a second, not every round)
        assert sidebar.text_of("k-note") in {s.status.note for s in engine.steps_seen}
        assert "until another K beats it" in sidebar.text_of("k-note")
        engine.release()
        await settle(pilot)


async def test_a_remote_engine_draft_time_says_not_reported(make_app):
    """A llama-server reports no draft time (its Steps say 0 ms): "not reported", never 0.00 ms."""
    from dataclasses import replace

    engine = FakeEngine()
    real_info = engine.info
    engine.info = lambda: replace(real_info(), draft_timing=False)
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "go")
        await settle(pilot)
        sidebar = app.query_one(Sidebar)
        assert "draft       not reported" in sidebar.text_of("reply-figures")
        assert "ms/round" in sidebar.text_of("reply-figures")  # the verify time is reported


async def test_every_sidebar_text_is_laid_out_at_its_wrapped_height(make_app):
    """A text whose wrapped height changes while its line count does not must be laid out again, or its last
    line is cut off: the tok/s caption goes from "tok/s: no reply yet" (one line at the sidebar's width) to
    "tok/s over the last 1 s of this reply" (two), and mid-reply the main screen's snapshot showed "reply" cut."""
    from textual.content import Content

    engine = FakeEngine(hold_at_steps=(9,))
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "How does speculative decoding work?")
        await wait_hold(pilot, engine)
        await pilot.pause()
        sidebar = app.query_one(Sidebar)
        for widget_id, static in sidebar._statics.items():
            text = sidebar.text_of(widget_id)
            if not static.display or not text:
                continue
            region = static.content_region
            assert region.height == len(Content(text).wrap(region.width)), (widget_id, text, region)
        engine.release()
        await settle(pilot)


# -- auto-K's notices ------------------------------------------------------------------------------------------


async def test_each_auto_k_notice_is_said_exactly_once(make_app):
    """Off at round 1, back on at round 5: one chat line and one toast each, in order, markup-free; a second
    reply with no change says nothing more."""
    script, cost = AUTO_K_STATES["holding"]
    engine = FakeEngine(auto_k=True, auto_k_script=(script,), cost=cost, auto_k_notices={1: False, 5: True})
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "go")
        await settle(pilot)
        lines = [n.text for n in app.query(ChatNotice) if n.text.startswith("auto-K:")]
        assert len(lines) == 2 and lines[0].startswith("auto-K: drafting off") and lines[1].startswith(
            "auto-K: drafting on at K 16"
        ), lines
        toasts = [n for n in notifications(app) if n.startswith("auto-K:")]
        assert toasts == lines
        engine.auto_k_notices = {}
        await send(pilot, "again")
        await settle(pilot)
        assert [n.text for n in app.query(ChatNotice) if n.text.startswith("auto-K:")] == lines
        assert [n for n in notifications(app) if n.startswith("auto-K:")] == lines


async def test_a_burst_of_auto_k_notices_in_one_batch_is_each_said_once(make_app):
    """Notices on consecutive rounds land in one PiecesBatch (~15 Hz): none is lost or doubled."""
    script, cost = AUTO_K_STATES["holding"]
    flips = {i: bool(i % 2) for i in range(12)}
    engine = FakeEngine(auto_k=True, auto_k_script=(script,), cost=cost, auto_k_notices=flips)
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "go")
        await settle(pilot)
        lines = [n.text for n in app.query(ChatNotice) if n.text.startswith("auto-K:")]
        assert [line.startswith("auto-K: drafting on") for line in lines] == [flips[i] for i in range(12)]
        assert len([n for n in notifications(app) if n.startswith("auto-K:")]) == 12


# -- sparklines on fixed scales --------------------------------------------------------------------------------


def test_bars_use_a_fixed_scale_a_full_series_fills_the_top_row():
    assert bars([1.0] * 5, 1.0) == [FULL * 5, FULL * 5]  # 100 %: both rows full, never a flat bottom row
    assert bars([0.0] * 3, 1.0) == ["   ", "   "]  # 0 %: empty
    assert bars([0.5], 1.0) == [" ", FULL]  # half the scale: the bottom row
    assert bars([0.25, 1.0], 1.0) == [f" {FULL}", f"{BLOCKS[4]}{FULL}"]
    assert len(bars(range(100), 99.0)[0]) == SPARK_WIDTH  # the last SPARK_WIDTH rounds
    caption, drawn = format_spark_acc((1.0, 1.0))
    assert caption == "acceptance per round, last 2"
    assert drawn.split("\n")[0].endswith(" 100 %") and drawn.split("\n")[1].endswith("   0 %")
    caption, drawn = format_spark_tok((10.0, 40.0))
    assert drawn.split("\n")[0].endswith(" 40") and drawn.split("\n")[1].endswith(" 0")
    assert format_spark_acc(()) == ("acceptance per round: \u2013 (no drafts)", "")


async def test_a_reply_with_every_draft_accepted_draws_the_acceptance_sparkline_at_the_top(make_app):
    engine = FakeEngine(k=2, accept_pattern=(2,))
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "go")
        await settle(pilot)
        sidebar = app.query_one(Sidebar)
        rounds = sum(1 for s in engine.steps_seen if s.drafted)
        assert all(s.accepted == s.drafted for s in engine.steps_seen if s.drafted) and rounds > 2
        top, bottom = sidebar.text_of("spark-acc").split("\n")
        shown = min(rounds, SPARK_WIDTH)
        assert top[:shown] == FULL * shown and top.endswith("100 %")
        assert bottom[:shown] == FULL * shown and bottom.endswith("0 %")
        assert sidebar.text_of("spark-acc-label") == f"acceptance per round, last {shown}"


# -- the glossary ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["f1", "ctrl+g"])
async def test_the_glossary_opens_first_on_f1_and_ctrl_g_and_scrolls_at_60x20(make_app, key):
    app, _ = make_app()
    async with app.run_test(size=(60, 20)) as pilot:
        await wait_ready(pilot)
        await pilot.press(key)
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = str(app.screen.query_one("#help-text").render())
        assert text.startswith("Glossary\n")
        for term in ("acceptance", "\u03b1 (alpha)", "mean len", "K", "v(K)", "c", "break-even"):
            assert f"\n{term}  " in text, term
        for kind in ("accepted", "corrected", "bonus", "plain", "rejected"):
            assert f"  {kind:<10} " in text
        assert text.index("Glossary") < text.index("Colours") < text.index("Keys")
        box = app.screen.query_one("#help-box")
        assert box.region.width <= 60 and box.region.height <= 20
        assert box.max_scroll_y > 0 and box.scroll_y == 0
        await pilot.press("pagedown")
        await pilot.pause()
        assert box.scroll_y > 0  # it scrolls with the keys people press
        await pilot.press(key)
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


def test_the_glossary_is_short_one_or_two_lines_each():
    for term, meaning in GLOSSARY:
        assert len(term) + len(meaning) <= 2 * 100, term  # two lines of the help box at its widest (100)


# -- the real thing --------------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_real_reply_on_the_bundled_model_shows_the_windowed_figures_with_labels(tmp_path, bundled_model):
    """SmolLM2 (the bundled Q4_1) with the n-gram drafter and a fixed K on a copy-heavy prompt: after the real
    reply the sidebar names each window and its figures are the engine's last Step's."""
    from specchat.commands.tui import make_factory
    from specchat.config import Settings
    from specchat.engine.events import Step
    from specchat.tui.app import SpecChatApp

    settings = Settings(
        target="bundled", draft="ngram", k=4, auto_k=False, n_predict=48, n_ctx=1024, threads=1,
        data_dir=tmp_path, theme="specchat-dark",
    )
    steps: list[Step] = []
    real_factory = make_factory(settings)

    class Recording:  # the real engine, with its Steps kept for the assertions
        def __init__(self, engine) -> None:
            self._engine = engine
            self.controls = engine.controls

        def __getattr__(self, name):
            return getattr(self._engine, name)

        @property
        def messages(self):
            return self._engine.messages

        def send(self, text):
            for event in self._engine.send(text):
                if isinstance(event, Step):
                    steps.append(event)
                yield event

    app = SpecChatApp(lambda progress: Recording(real_factory(progress)), settings, export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert app.engine_error is None, app.engine_error
        sidebar = app.query_one(Sidebar)
        assert sidebar.text_of("tok-s-label") == "tok/s: no reply yet"
        await send(pilot, "Repeat exactly: the cat sat on the mat. the cat sat on the mat. the cat sat on the mat.")
        await settle(pilot)
        reply = app.chat_screen.assistant_messages()[-1]
        assert reply.finished and not reply.error and steps
        last = steps[-1]
        assert last.reply is not None and last.recent is not None and last.status is not None
        assert sidebar.text_of("tok-s-label") == "tok/s of the last reply"
        assert sidebar.text_of("k-status").split("\n")[0] == last.status.label == "K 4 (fixed)"
        figures = sidebar.text_of("reply-figures").split("\n")
        n = int(last.reply.drafting_rounds)
        assert figures[0] == (f"last reply \u00b7 {n} drafting round{'s' if n != 1 else ''}" if n else "last reply \u00b7 no drafts")
        assert any(line.startswith("verify      ") and line.endswith(" ms/round") for line in figures)
        recent = sidebar.text_of("recent-figures").split("\n")
        assert recent[0] == last.recent.window_label and recent[0].startswith("recent rounds (auto-K's window")
        assert n > 0, "the n-gram drafter found no copy to draft"  # greedy: the same reply every run
        # every figure of each window, from that window
        assert figures[1] == (
            f"acceptance  {last.reply.acceptance * 100:.0f} % ({last.reply.accepted:.0f} of {last.reply.drafted:.0f})"
        )
        assert recent[2] == f"\u03b1           {last.recent.alpha:.2f} per position"
        assert f"\u03b1 = {last.cost.alpha:.2f}" in sidebar.text_of("break-even")
        assert f"{last.cost.alpha:.2f}" == f"{last.recent.alpha:.2f}"  # break-even and the window agree


async def test_a_model_drafters_k_above_its_cap_is_said_in_the_sidebar(tmp_path, tiny_pair, capsys):
    """K 40 with a model drafter (the tiny pair: real models) runs at its cap of 16: the sidebar says so under
    K from the start (before any reply) and after a reply; the command says it on stderr (one line) before the
    app takes the screen. K 16, or the n-gram drafter's K 40, is said nothing of."""
    from specchat.commands.arguments import warn_k_above_cap
    from specchat.commands.tui import make_factory
    from specchat.config import Settings
    from specchat.tui.app import SpecChatApp

    target, draft = tiny_pair
    note = "K 40 is above a model drafter's cap of 16: its rounds draft at most 16 tokens"
    settings = Settings(target=str(target), draft=str(draft), k=40, auto_k=False, n_predict=24, n_ctx=512,
                        threads=1, data_dir=tmp_path)
    assert warn_k_above_cap(settings) == note
    assert capsys.readouterr().err == f"specchat: note: {note}\n"
    assert warn_k_above_cap(settings.model_copy(update={"k": 16})) == ""
    assert warn_k_above_cap(settings.model_copy(update={"draft": "ngram"})) == ""
    assert warn_k_above_cap(settings.model_copy(update={"auto_k": True})) == ""
    app = SpecChatApp(make_factory(settings), settings, make_factory=make_factory, export_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_ready(pilot)
        assert app.engine_error is None, app.engine_error
        assert app.chat_screen.sidebar.text_of("k-note") == note
        await send(pilot, "Hello there")
        await settle(pilot)
        assert app.chat_screen.sidebar.text_of("k-note").startswith(note)
        assert app.engine.messages[-1].stats.k_max <= 16
        await pilot.press("f3")  # K down: 39 is still above the cap; then set 16 from the palette's K = 16
        await pilot.pause()
        assert app.chat_screen.sidebar.text_of("k-note").startswith("K 39 is above")
        app.chat_screen.set_k(16)
        await pilot.pause()
        assert "above" not in app.chat_screen.sidebar.text_of("k-note")  # (the last round's own notes stay until the next)
