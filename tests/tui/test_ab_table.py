"""The sidebar's A/B table in the app (issue 11): one section per (target, drafter) pair, never mixing pairs,
built from the engine's ab_summary over the replies of the session (fake engine; the real one: test_e2e_real)."""

from __future__ import annotations

from fake_engine import FakeEngine
from tuikit import SIZE, fake_settings, send_each, wait_ready

from specchat.engine.telemetry.ab import ab_summary, turn_mode
from specchat.tui.app import SpecChatApp


def ab_text(app) -> str:
    return str(app.chat_screen.sidebar.query_one("#ab").render())


def section(text: str, title: str) -> list[str]:
    """The lines of one pair's section: from its heading to the blank line after it."""
    lines = text.split("\n")
    start = lines.index(title)
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return lines[start:end]


async def test_switching_the_pair_mid_session_never_mixes_its_turns(tmp_path):
    first = FakeEngine(["one two three four five six"], target_name="target-a.gguf")
    second = FakeEngine(["seven eight nine ten eleven"], target_name="target-b.gguf")

    def make_factory(settings):
        return lambda progress: second

    app = SpecChatApp(lambda progress: first, fake_settings(data_dir=tmp_path), make_factory=make_factory,
                      export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert ab_text(app).startswith("A/B: ")  # nothing yet
        await send_each(pilot, "on 1", "on 2")  # speculation on (ngram, K = 3)
        await pilot.press("ctrl+t")  # off: the baseline of (target-a, ngram)
        await send_each(pilot, "off 1")
        app.chat_screen.set_drafter("none")  # another pair on the same target: (target-a, none), speculation still off
        await send_each(pilot, "none 1")
        app.switch_model("bundled", "ngram", "bundled SmolLM2 + ngram")  # the palette's model switch
        await wait_ready(pilot)
        assert app.engine is second
        await send_each(pilot, "b 1")

        turns = [*first.turns, *second.turns]
        rows = app.chat_screen.stats.snapshot().ab
        assert rows == ab_summary(turns)
        # every row holds the turns of exactly one pair (and one mode)
        for row in rows:
            mine = [t for t in turns if (t.target, t.drafter) == row.pair and turn_mode(t) == row.mode]
            assert row.turns == len(mine) and row.tokens == sum(t.predicted_n for t in mine)
        assert [r.pair for r in rows] == [("target-a.gguf", "ngram")] * 2 + [("target-a.gguf", "none"),
                                                                             ("target-b.gguf", "ngram")]
        text = ab_text(app)
        a = section(text, "target-a.gguf + ngram")
        assert [line.split()[:2] for line in a[2:4]] == [["off", "1"], ["on", "2"]]
        on_a = next(r for r in rows if r.pair == ("target-a.gguf", "ngram") and r.mode == "on")
        assert f"{on_a.ratio:.2f}" in a[3] and f"{on_a.drafted / 2:.0f}" == a[3].split()[-1]
        none = section(text, "target-a.gguf + none")
        assert [line.split()[:2] for line in none[2:3]] == [["off", "1"]]
        b = section(text, "target-b.gguf + ngram")
        assert b[2].split()[:2] == ["on", "1"] and b[2].split()[3] == "\u2013"  # no baseline of its own
        assert b[3] == "turn speculation off for a baseline reply"
