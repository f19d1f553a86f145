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


def test_two_servers_are_two_pairs_and_b_is_set_against_a():
    """With --server-b (issue 24): each server's replies are a pair of their own ("model @ host"), and once both
    answered the table adds B against A over every reply of each, token-weighted (tests/remote/test_app_servers.py
    runs it on real servers)."""
    from dataclasses import replace

    from specchat.engine.events import Turn
    from specchat.tui.widgets.ab_table import format_ab

    base = Turn(prompt_n=5, prompt_ms=5.0, predicted_n=100, predicted_ms=1000.0, predicted_per_second=100.0,
                draft_n=60, draft_n_accepted=45, acceptance=0.75, mean_len=2.0, accepted_per_pos=[],
                draft_ms_per_step=0.0, verify_ms_per_step=0.0, overhead_ms=0.0, step_ms=1000.0, n_steps=30,
                n_spec_steps=20, stop_reason="eos", text="x", drafter="server: draft-simple", speculative=True,
                target="m.gguf @ 127.0.0.1:8080", spec_on_steps=30)
    plain = replace(base, draft_n=0, draft_n_accepted=0, n_spec_steps=0, spec_on_steps=0, speculative=False,
                    predicted_ms=2000.0, drafter="server", target="m.gguf @ 127.0.0.1:8081")
    rows = ab_summary([base, base, plain])
    lines = format_ab(rows, ("m.gguf @ 127.0.0.1:8080", "m.gguf @ 127.0.0.1:8081"))
    assert "m.gguf @ 127.0.0.1:8080 + server: draft-simple" in lines and "m.gguf @ 127.0.0.1:8081 + server" in lines
    at = lines.index("server B vs A, this session")
    assert lines[at + 2].split() == ["A", "2", "100.0", "75%"]
    assert lines[at + 3].split() == ["B", "1", "50.0", "\u2013"]
    assert lines[at + 4] == "B runs at 0.50\u00d7 A's speed"
    assert "server B vs A, this session" not in format_ab(rows, ("m.gguf @ 127.0.0.1:8080", "never answered"))
    assert "server B vs A, this session" not in format_ab(rows)
