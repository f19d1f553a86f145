"""The target's verify cost v(K) in the app (issue 12): the sidebar's "verify cost" block (weight format, where v
came from, a chart of v per K up to the drafter's cap with the current K marked, the engine's reason in words)
and the F1 help's copy of it.

The formatting is tested as pure functions (:mod:`specchat.tui.verify_chart`, ``format_verify`` and friends in
the sidebar); the app on the fake engine, whose EngineInfo carries a cached curve and whose Steps carry it
"measured", moved a little every round as the real fit moves. The real engine's curve through a real pty is
``tests/terminal/test_verify_curve_pty.py``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from fake_engine import DEFAULT_VERIFY, FakeEngine, verify_curve
from tuikit import SIZE, fake_settings, send, settle, wait_hold, wait_ready

from specchat.engine.controls import ControlState
from specchat.engine.drafter_kinds import DRAFTER_KINDS, K_MAX, MODEL, NGRAM, SUFFIX
from specchat.engine.events import CostEstimate, KStatus
from specchat.engine.protocol import EngineInfo
from specchat.tui.app import SpecChatApp
from specchat.tui.screens.help import HelpScreen
from specchat.tui.stats import StatsSnapshot
from specchat.tui.verify_chart import BAR_WIDTH, chart_ks, chart_rows, v_text, verify_block
from specchat.tui.widgets.sidebar import Sidebar
from specchat.tui.widgets.sidebar_text import (
    SPARK_WIDTH,
    current_k,
    drafter_cap,
    format_verify,
    verify_curve as shown_curve,
)

#: the sidebar's text columns (36 less its border, padding and scrollbar): the sparklines' 26 + " 100 %"
TEXT_WIDTH = SPARK_WIDTH + 6
Q41 = DEFAULT_VERIFY  # v(K) = 1 + 0.62 K: v(16) = 10.9, "no batched kernel on this CPU"
F16 = verify_curve("F16", 0.1, "measured")  # v(16) = 2.6, a batched kernel
INFO = EngineInfo(target_name="t.gguf", draft_name="ngram", drafters=("ngram",), n_ctx=512, k_max=K_MAX,
                  can_speculate=True, verify=Q41, weights="Q4_1")


def _fill(row: str) -> int:
    """Eighths of a chart row's bar."""
    bar = row[5 : 5 + BAR_WIDTH]
    eighths = " \u258f\u258e\u258d\u258c\u258b\u258a\u2589\u2588"
    return sum(eighths.index(ch) for ch in bar)


# -- the chart: pure functions ---------------------------------------------------------------------------------


def test_the_chart_has_a_row_per_power_of_two_up_to_the_cap_and_the_current_k():
    assert chart_ks(64) == (1, 2, 4, 8, 16, 32, 64)
    assert chart_ks(16, 3) == (1, 2, 3, 4, 8, 16)
    assert chart_ks(16, 40) == (1, 2, 4, 8, 16)  # a K above the cap drafts at most the cap
    assert chart_ks(5) == (1, 2, 4, 5)


def test_each_row_says_v_of_its_k_plus_1_rows_and_marks_the_current_k_once():
    rows = chart_rows(Q41, 16, 3)
    assert [r.split()[:2] for r in rows] == [["K", str(k)] for k in (1, 2, 3, 4, 8, 16)]
    assert rows[-1].endswith("11 of 17")  # v(16) = 10.9, as the reason line writes it: "costs 11 rows"
    assert rows[2].endswith("2.9 of 4 \u25c2") and sum("\u25c2" in r for r in rows) == 1
    assert all(len(r) <= TEXT_WIDTH for r in chart_rows(Q41, K_MAX, 64)), "wider than the sidebar"


def test_a_bar_is_v_out_of_k_plus_1_so_a_flat_curve_draws_short_bars_and_a_steep_one_long_bars():
    q41, f16 = chart_rows(Q41, 16), chart_rows(F16, 16)
    assert _fill(q41[-1]) == round(11 / 17 * BAR_WIDTH * 8)  # v as written, out of 17 rows
    assert _fill(f16[-1]) == round(2.6 / 17 * BAR_WIDTH * 8)
    assert all(_fill(a) > _fill(b) for a, b in zip(q41[1:], f16[1:], strict=True))
    assert [_fill(r) for r in f16] == sorted((_fill(r) for r in f16), reverse=True)  # batching pays more with K


def test_the_chart_text_moves_only_when_a_value_as_written_moves():
    """A curve refitted after every round moves a little: the text (and so the sidebar, which skips unchanged
    text) must not change until a value as written changes."""
    jitter = replace(Q41, v=(1.0, *(v * 1.004 for v in Q41.v[1:])))
    assert chart_rows(jitter, 64, 3) == chart_rows(Q41, 64, 3)
    moved = replace(Q41, v=(1.0, *(v * 1.05 for v in Q41.v[1:])))
    assert chart_rows(moved, 64, 3) != chart_rows(Q41, 64, 3)
    assert (v_text(7.04), v_text(9.94), v_text(10.92), v_text(40.68)) == ("7.0", "9.9", "11", "41")


def test_the_block_names_the_format_and_the_source_and_draws_no_chart_before_a_measurement():
    head, chart, reason = verify_block(Q41, 16, 3)
    assert head == "verify cost v(K) \u00b7 Q4_1, cached calibration"
    assert chart.splitlines() == chart_rows(Q41, 16, 3)
    assert reason == "Q4_1: no batched kernel on this CPU; verifying 17 rows costs 11 rows"
    assert verify_block(F16, 16)[0] == "verify cost v(K) \u00b7 F16, measured this session"
    prior = verify_curve("F32", 0.0, "prior")
    head, chart, reason = verify_block(prior, 16)
    assert head.endswith("F32, not measured yet") and chart == ""  # v = 1 is assumed, not drawn
    assert reason == "F32: verify cost not measured yet (v = 1 assumed until the first timings)"
    short = replace(F16, measured_rows=17)
    assert "timed up to 17 rows, extrapolated past" in verify_block(short, 64)[0]
    assert "extrapolated" not in verify_block(short, 16)[0]


def test_without_a_curve_the_block_says_why_in_words():
    assert format_verify(None, None) == ("verify cost v(K): \u2013 (no model loaded)", "", "")
    remote = replace(INFO, verify=None, draft_timing=False)  # a llama-server times no verify batches
    assert format_verify(None, remote) == ("verify cost v(K): not reported by this engine", "", "")
    recurrent = replace(INFO, verify=None, can_speculate=False)
    assert format_verify(None, recurrent)[0] == "verify cost v(K): not measured (this target cannot speculate)"


def test_the_live_curve_is_preferred_to_the_engines_info():
    live = CostEstimate(alpha=0.6, c=0.0, v=1.0, best_k=4, predicted_speedup=1.5, target_ms_per_token=10.0,
                        draft_ms_per_token=0.0, verify=F16)
    assert shown_curve(StatsSnapshot(cost=live), INFO) is F16
    assert shown_curve(StatsSnapshot(cost=replace(live, verify=None)), INFO) is Q41
    assert shown_curve(StatsSnapshot(), INFO) is Q41
    assert shown_curve(StatsSnapshot(), None) is None


def test_the_chart_goes_to_the_drafters_cap_and_marks_the_k_the_rounds_draft_up_to():
    assert drafter_cap(NGRAM) == DRAFTER_KINDS[NGRAM].k_cap
    assert drafter_cap("draft-model.gguf") == DRAFTER_KINDS[MODEL].k_cap
    assert drafter_cap("none") == drafter_cap(None) == K_MAX  # no drafter: the target's whole curve
    # a chain reaches its largest link's cap (the free link drafts up to 64 where a model link stops at 16)
    assert drafter_cap("suffix,draft-model.gguf") == DRAFTER_KINDS[SUFFIX].k_cap > DRAFTER_KINDS[MODEL].k_cap
    assert drafter_cap("draft-a.gguf,draft-b.gguf") == DRAFTER_KINDS[MODEL].k_cap
    fixed = ControlState(k=5, speculative=True, auto_k=False, drafter="ngram")
    holding = KStatus(state="holding", k=8, k_round=8, k_cap=64)
    assert current_k(None, fixed) == 5 and current_k(holding, fixed) == 5  # a key changed K: the next round's
    auto = replace(fixed, auto_k=True)
    assert current_k(holding, auto) == 8 and current_k(None, auto) is None
    assert current_k(replace(holding, state="off for cost", k=0), auto) is None
    assert current_k(KStatus(state="fixed K", k=5, k_round=5, k_cap=64), auto) is None  # auto-K just turned on
    assert current_k(holding, replace(fixed, speculative=False)) is None
    assert current_k(holding, replace(fixed, drafter="none")) is None


# -- the app on the fake engine ----------------------------------------------------------------------------------


async def test_the_sidebar_shows_the_cached_curve_before_a_reply_and_the_live_one_after(make_app):
    app, engine = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        sidebar = app.query_one(Sidebar)
        assert sidebar.text_of("verify-label") == "verify cost v(K) \u00b7 Q4_1, cached calibration"
        assert sidebar.text_of("verify-chart") == "\n".join(chart_rows(Q41, K_MAX, 3))  # ngram: up to 64, K 3
        assert sidebar.query_one("#verify-chart").display
        assert sidebar.text_of("verify-reason") == Q41.reason
        await send(pilot, "hi")
        await settle(pilot)
        assert sidebar.text_of("verify-label") == "verify cost v(K) \u00b7 Q4_1, measured this session"
        assert "K  3" in sidebar.text_of("verify-chart") and "2.9 of 4 \u25c2" in sidebar.text_of("verify-chart")
        await pilot.press("ctrl+up")  # K 4: the mark moves with the key, before any round
        await pilot.pause()
        chart = sidebar.text_of("verify-chart").splitlines()
        assert [r for r in chart if r.endswith("\u25c2")] == [r for r in chart if r.startswith("K  4")]
        assert not any(r.startswith("K  3") for r in chart)
        await pilot.press("ctrl+t")  # speculation off: nothing is marked
        await pilot.pause()
        assert "\u25c2" not in sidebar.text_of("verify-chart")


async def test_streaming_does_not_redraw_the_curve_while_its_values_as_written_stay(make_app):
    """The fake's live curve moves by up to 0.4 % every round (as the real fit does): between two holds of a
    reply, many stats updates arrive, and the chart's widget is never updated."""
    engine = FakeEngine(hold_at_steps=(2, 9))
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "go")
        await wait_hold(pilot, engine, 1)
        sidebar = app.query_one(Sidebar)
        chart = sidebar.query_one("#verify-chart")
        assert "measured this session" in sidebar.text_of("verify-label")
        updates: list[object] = []
        real_update = chart.update
        chart.update = lambda *a, **kw: (updates.append(a), real_update(*a, **kw))[1]  # type: ignore[method-assign]
        figures = sidebar.text_of("reply-figures")
        engine.release()
        await wait_hold(pilot, engine, 2)
        assert sidebar.text_of("reply-figures") != figures, "no stats update arrived between the holds"
        assert {s.cost.verify.v for s in engine.steps_seen[2:9]} != {engine.steps_seen[2].cost.verify.v}
        assert updates == []
        engine.release()
        await settle(pilot)


async def test_an_engine_without_a_curve_says_not_reported(make_app):
    engine = FakeEngine(verify=None)
    real_info = engine.info
    engine.info = lambda: replace(real_info(), draft_timing=False)  # a llama-server
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "go")
        await settle(pilot)
        sidebar = app.query_one(Sidebar)
        assert sidebar.text_of("verify-label") == "verify cost v(K): not reported by this engine"
        assert not sidebar.query_one("#verify-chart").display and not sidebar.query_one("#verify-reason").display
        await pilot.press("f1")
        await pilot.pause()
        text = str(app.screen.query_one("#help-text").render())
        assert "Verify cost of this target\n  verify cost v(K): not reported by this engine\n" in text


@pytest.mark.parametrize("size", [(60, 20), (80, 24), SIZE])
async def test_f1_shows_this_targets_curve_and_reason_after_the_glossary(make_app, size):
    app, _ = make_app()
    async with app.run_test(size=size) as pilot:
        await wait_ready(pilot)
        await send(pilot, "hi")
        await settle(pilot)
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = str(app.screen.query_one("#help-text").render())
        sidebar = app.query_one(Sidebar)  # hidden below 100 columns, yet the help shows what it would
        block = "\n".join(
            ["Verify cost of this target", "  verify cost v(K) \u00b7 Q4_1, measured this session",
             *(f"  {row}" for row in chart_rows(Q41, K_MAX, 3)), f"  {Q41.reason}"]
        )
        assert block in text and block.split("\n", 1)[1] == "\n".join(
            f"  {line}" for part in sidebar.verify_texts() for line in part.splitlines()
        )
        assert text.index("\nv(K)  ") < text.index("Colours") < text.index("Verify cost of this target") < text.index("Keys")
        assert "charts v of K+1 rows per K" in text  # the v(K) term says what the chart is
        box = app.screen.query_one("#help-box")
        help_width = box.content_region.width
        assert all(len(f"  {row}") <= help_width for row in chart_rows(Q41, K_MAX, 3)), "the chart wraps"


async def test_after_a_model_switch_the_new_targets_curve_is_shown_not_the_old_live_one(tmp_path):
    first = FakeEngine(target_name="target-a.gguf")
    second = FakeEngine(target_name="target-b.gguf", verify=replace(F16, source="cache"))
    app = SpecChatApp(lambda progress: first, fake_settings(data_dir=tmp_path), make_factory=lambda s: (lambda p: second),
                      export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "on a")
        await settle(pilot)
        sidebar = app.query_one(Sidebar)
        assert sidebar.text_of("verify-label").endswith("Q4_1, measured this session")
        app.switch_model("bundled", "ngram", "bundled SmolLM2 + ngram")
        await wait_ready(pilot)
        assert app.engine is second
        assert sidebar.text_of("verify-label") == "verify cost v(K) \u00b7 F16, cached calibration"
        assert sidebar.text_of("verify-reason") == F16.reason
        assert sidebar.text_of("break-even").startswith("break-even: waiting")  # the old target's line is gone
