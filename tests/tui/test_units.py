"""Unit tests of the TUI's pure parts: sanitising, wrapping, the token view's O(batch) appends, live stats,
the batching pump, themes, keymap resolution, sidebar text."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from fake_engine import FakeClock, FakeEngine, tokenize

from specchat.engine.controls import ControlState
from specchat.engine.events import CostEstimate, KStatus, Piece, PromptDone, Step, Turn
from specchat.tui.generation import pump_turn
from specchat.tui.keys import ALL_IDS, resolve_keymap
from specchat.tui.messages import PiecesBatch, StatsUpdated, TurnFinished
from specchat.tui.sanitize import sanitize
from specchat.tui.stats import LiveStats
from specchat.tui.themes import (
    BUILTIN_THEMES_DIR,
    TOKEN_VARIABLES,
    ThemeFileError,
    load_theme_file,
    load_themes,
    theme_dirs,
)
from specchat.tui.widgets.ab_table import format_ab
from specchat.tui.widgets.sidebar_text import (
    break_even_text,
    format_k,
    format_positions,
    status_line,
)
from specchat.tui.widgets.token_view import TokenView, wrap_offsets

# -- sanitising -----------------------------------------------------------------------------------------


def test_sanitize_neutralises_escapes_and_controls_but_keeps_newline_and_tab():
    raw = "a\x1b[31mred\x1b]52;c;SGVsbG8=\x07\r\n\tb\x9bc\u202ed\x00\x7f"
    out = sanitize(raw)
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out and "\u202e" not in out
    assert "\x00" not in out and "\x7f" not in out and "\r" not in out
    assert "\u241b[31mred" in out  # ESC shown as the visible control picture
    assert "\n\tb" in out
    assert sanitize("plain text\n\twith tab") == "plain text\n\twith tab"


# -- wrapping ---------------------------------------------------------------------------------------------


def _rows(text: str, width: int) -> list[str]:
    bounds = [0, *wrap_offsets(text, width), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def test_wrap_breaks_at_spaces_and_folds_long_words():
    assert _rows("hello world this is", 10) == ["hello ", "world this ", "is"]
    assert _rows("a" * 25, 10) == ["a" * 10, "a" * 10, "a" * 5]
    assert _rows("ab \u4e2d\u6587\u5b57\u7b26", 4) == ["ab ", "\u4e2d\u6587", "\u5b57\u7b26"]  # wide chars count 2


def test_wrap_is_prefix_stable():
    """Appending text never moves a break before the last row: the property the O(batch) append relies on."""
    rng = random.Random(7)
    alphabet = "ab c  d\u4e2d\u00e9xyzw"
    for _ in range(1500):
        width = rng.randint(1, 12)
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 50)))
        full = wrap_offsets(text, width)
        for cut in range(len(text) + 1):
            assert set(wrap_offsets(text[:cut], width)) <= set(full), (text, width, cut)


# -- token view -------------------------------------------------------------------------------------------


def as_pieces(spans: list[tuple[str, str]]) -> list[Piece]:
    """Pieces of (text, kind) spans, token ids in order."""
    return [Piece(text, kind, i) for i, (text, kind) in enumerate(spans)]  # type: ignore[arg-type]


def _stream_pieces(n_words: int) -> list[Piece]:
    kinds = ["accepted", "accepted", "rejected", "corrected", "bonus", "plain"]
    rng = random.Random(3)
    pieces = []
    for i in range(n_words):
        word = rng.choice([" alpha", " be", " gamma-delta", ",", " x", "\n", " supercalifragilistic", "\t("])
        pieces.append(Piece(word, kinds[i % len(kinds)], i))
    return pieces


def test_token_view_appends_in_o_batch_and_matches_a_full_rewrap():
    width, batch = 37, 5
    view = TokenView()
    view._rebuild(width)
    pieces = _stream_pieces(3000)
    worst = 0
    for i in range(0, len(pieces), batch):
        chunk = pieces[i : i + batch]
        view.append_pieces(chunk)
        chunk_chars = sum(len(p.text) + 3 * p.text.count("\t") for p in chunk)
        worst = max(worst, view.last_wrap_chars - chunk_chars)
        # only the open row (< width + a word) plus the new text is re-wrapped, however long the reply is
        assert view.last_wrap_chars <= 2 * width + chunk_chars + 25
    incremental = [row.plain for row in view._rows]
    incremental_spans = [[(s.start, s.end, s.style) for s in row.spans] for row in view._rows]
    view._rebuild(width)
    assert [row.plain for row in view._rows] == incremental
    assert [[(s.start, s.end, s.style) for s in row.spans] for row in view._rows] == incremental_spans
    assert view.total_wrap_chars < 10 * sum(len(p.text) for p in pieces)  # linear overall, not quadratic


def test_token_view_reply_excludes_ghosts_and_ghosts_never_break_lines():
    view = TokenView()
    view._rebuild(40)
    view.append_pieces(as_pieces([("Hello", "accepted"), (" wrong\n", "rejected"), (" world", "corrected"), ("\n", "bonus"), ("ok", "plain")]))
    assert view.reply_text == "Hello world\nok"
    assert view.ghost_text == " wrong\u21b5"  # as displayed: a refused newline is a symbol
    assert view.visible_text() == "Hello wrong\u21b5 world\nok"
    view.set_show_ghosts(False)
    assert view.visible_text() == "Hello world\nok"
    assert [row.plain for row in view._rows] == ["Hello world", "ok"]
    view.set_show_ghosts(True)
    assert [row.plain for row in view._rows] == ["Hello wrong\u21b5 world", "ok"]


def test_token_view_sanitises_model_text():
    view = TokenView()
    view._rebuild(80)
    view.append_pieces(as_pieces([("\x1b[2J\x1b[Hboom", "plain"), ("\x07", "accepted")]))
    assert "\x1b" not in view.visible_text() and "\x07" not in view.visible_text()
    assert view.reply_text == "\u241b[2J\u241b[Hboom\u2407"


# -- live stats ----------------------------------------------------------------------------------------


def _step(k=3, drafted=3, accepted=2, emitted=3, spec=True, drafter="ngram", t=10.0, cost=None):
    return Step(k=k, drafted=drafted, accepted=accepted, emitted=emitted, t_draft_ms=1.0, t_verify_ms=t - 1.5,
                t_overhead_ms=0.5, t_step_ms=t, speculative=spec, auto_k=False, drafter=drafter, n_past=0, cost=cost)


def _turn(n, ms, spec=True):
    return Turn(prompt_n=1, prompt_ms=1, predicted_n=n, predicted_ms=ms, predicted_per_second=n * 1000 / ms,
                draft_n=0, draft_n_accepted=0, acceptance=0, mean_len=1, accepted_per_pos=[], draft_ms_per_step=0,
                verify_ms_per_step=0, overhead_ms=0, step_ms=ms, n_steps=1, n_spec_steps=0, stop_reason="eos",
                text="", speculative=spec)


def test_live_stats_positions_acceptance_history_and_rolling_rate():
    stats = LiveStats()
    stats.start_turn(0.0)
    stats.observe_prompt(PromptDone(prompt_n=10, prompt_ms=5, cached_n=2), 0.1)
    stats.observe_step(_step(drafted=3, accepted=3, emitted=4), 0.2)
    stats.observe_step(_step(drafted=3, accepted=1, emitted=2), 0.3)
    stats.observe_step(_step(k=0, drafted=0, accepted=0, emitted=1, spec=False, drafter="none"), 0.4)
    snap = stats.snapshot()
    assert snap.per_position == pytest.approx((1.0, 0.5, 0.5))
    assert snap.tok_s == pytest.approx(7 / 0.3)  # 7 tokens between the prompt (t=0.1) and t=0.4
    assert snap.tokens == 7 and snap.steps == 3 and snap.prompt_n == 10 and snap.cached_n == 2
    assert snap.acceptance_history == pytest.approx((1.0, 1 / 3))
    assert snap.k == 0 and snap.speculative is False


def _ab_turn(target, drafter, n, ms, *, on, spec_steps, drafted=0, steps=10):
    return Turn(prompt_n=1, prompt_ms=1, predicted_n=n, predicted_ms=ms, predicted_per_second=n * 1000 / ms,
                draft_n=drafted, draft_n_accepted=drafted // 2, acceptance=0.5 if drafted else None, mean_len=1,
                accepted_per_pos=[], draft_ms_per_step=0, verify_ms_per_step=0, overhead_ms=0, step_ms=ms,
                n_steps=steps, n_spec_steps=spec_steps, stop_reason="eos", text="", speculative=on > 0,
                target=target, drafter=drafter, spec_on_steps=on)


def test_live_stats_ab_table_is_the_engines_ab_summary_one_section_per_pair():
    from specchat.engine.telemetry.ab import ab_summary

    turns = [
        _ab_turn("small.gguf", "ngram", 100, 1000, on=0, spec_steps=0),  # 100 tok/s: (small, ngram)'s baseline
        _ab_turn("small.gguf", "ngram", 300, 1500, on=10, spec_steps=8, drafted=40),  # 200 tok/s: 2.00x
        _ab_turn("small.gguf", "ngram", 90, 1000, on=10, spec_steps=0, drafted=0),  # drafter never drafted
        _ab_turn("big\x1b[31m.gguf", "draft.gguf", 50, 1000, on=10, spec_steps=10, drafted=30),  # another pair
        _ab_turn("small.gguf", "ngram", 50, 100, on=4, spec_steps=4, drafted=8),  # switched mid-reply
    ]
    stats = LiveStats()
    for i, turn in enumerate(turns):
        stats.start_turn(i)
        stats.finish_turn(turn)
    rows = stats.snapshot().ab
    assert rows == ab_summary(turns)  # the engine's computation, not a second one in the TUI
    text = "\n".join(format_ab(rows))
    lines = text.split("\n")
    small, big = lines.index("small.gguf + ngram"), lines.index("big\u241b[31m.gguf + draft.gguf")  # inert names
    assert small < big  # pairs in the order they first ran, each its own section
    section = lines[small:big]
    assert [line.split()[0] for line in section[2:6]] == ["off", "on", "barely", "mixed"]
    assert section[3].split() == ["on", "1", "200.0", "2.00", "40"]  # drafted tokens per reply: 40
    assert section[4].split() == ["barely", "1", "90.0", "0.90", "0"]
    assert "speculation pays: 2.00\u00d7 off" in section[6]
    other = lines[big : big + 4]
    assert other[2].split() == ["on", "1", "50.0", "\u2013", "30"]  # never a ratio against another pair's "off"
    assert other[3] == "turn speculation off for a baseline reply"
    assert any(line.startswith("barely: ") for line in lines) and any(line.startswith("mixed: ") for line in lines)
    assert "\x1b" not in text


def test_sidebar_text_helpers():
    assert format_ab(())[0].startswith("A/B:")
    assert format_positions((1.0, 0.5)) == ["d1  \u2588" * 1 + "\u2588" * 9 + " 100%", "d2  " + "\u2588" * 5 + "\u2591" * 5 + "  50%"]
    cost = CostEstimate(alpha=0.9, c=0.93, v=1.0, best_k=0, predicted_speedup=0.9, target_ms_per_token=10, draft_ms_per_token=9.3)
    assert "best K = off" in break_even_text(cost) and "0.93" in break_even_text(cost)
    cheap = CostEstimate(alpha=0.7, c=0.02, v=1.0, best_k=6, predicted_speedup=2.4, target_ms_per_token=10, draft_ms_per_token=0.2)
    assert "best K = 6" in break_even_text(cheap)
    assert "waiting" in break_even_text(None)
    from specchat.engine.controls import ControlState

    # before any round, K is what the controls say, in the engine's words
    assert format_k(None, ControlState(k=5, auto_k=True)) == ["K auto (no round yet)"]
    assert format_k(None, ControlState(k=4, speculative=False)) == ["speculation off"]
    assert format_k(None, ControlState(k=4)) == ["K 4 (fixed)"]


# -- the pump (worker side) -------------------------------------------------------------------------------


def test_pump_batches_pieces_instead_of_posting_per_token():
    engine = FakeEngine(["word " * 400])
    posted: list = []
    clock = FakeClock(step=0.001)  # 1 ms per event: ~33 events per 33 ms batch
    turn = pump_turn(1, engine.send("go"), posted.append, LiveStats(), clock)
    batches = [m for m in posted if isinstance(m, PiecesBatch)]
    pieces = [p for b in batches for p in b.pieces]
    assert turn is not None and turn.predicted_n == len(tokenize("word " * 400))
    assert all(isinstance(p, Piece) for p in pieces)  # the engine's own record, through the batch
    assert "".join(p.text for p in pieces if p.kind != "rejected") == turn.text
    n_events = len(pieces) + len(engine.steps_seen) + 2
    assert len(batches) <= n_events * 0.001 / (1 / 30) + 2  # ~30 posts a second, not one per token
    assert len(batches) >= 5
    assert isinstance(posted[-1], TurnFinished) and posted[-1].turn is turn and posted[-1].error is None
    stats = [m for m in posted if isinstance(m, StatsUpdated)]
    assert stats and stats[0].can_replace(stats[-1])
    assert not batches[0].can_replace(batches[-1])  # pieces never coalesce: each carries text


def test_pump_turns_an_engine_exception_into_an_error_message():
    engine = FakeEngine(fail_at_step=2)
    posted: list = []
    turn = pump_turn(3, engine.send("go"), posted.append, LiveStats(), FakeClock())
    assert turn is None
    finished = posted[-1]
    assert isinstance(finished, TurnFinished) and finished.turn_id == 3
    assert "RuntimeError" in finished.error and "llama_decode" in finished.error

    def broken_start():
        raise ValueError("the prompt alone is longer than the context")

    posted.clear()
    pump_turn(4, broken_start, posted.append, LiveStats(), FakeClock())
    assert "longer than the context" in posted[-1].error


# -- themes ---------------------------------------------------------------------------------------------


def test_builtin_themes_load_and_define_token_colours():
    result = load_themes([BUILTIN_THEMES_DIR])
    assert result.errors == []
    names = {t.name for t in result.themes}
    assert {"specchat-dark", "specchat-light", "specchat-high-contrast", "specchat-solarized"} <= names
    for theme in result.themes:
        assert set(TOKEN_VARIABLES) <= set(theme.variables), theme.name
    assert any(not t.dark for t in result.themes)


def test_broken_theme_files_are_reported_and_skipped(tmp_path: Path):
    themes = tmp_path / "themes"
    themes.mkdir()
    (themes / "bad-toml.toml").write_text("name = \n")
    (themes / "bad-colour.toml").write_text('name = "x"\nprimary = "not-a-colour"\n')
    (themes / "unknown-key.toml").write_text('name = "y"\nprimary = "#fff"\nprimery = "#000"\n')
    (themes / "no-name.toml").write_text('primary = "#fff"\n')
    (themes / "good.toml").write_text('name = "mine"\nprimary = "#ff0000"\n[variables]\ntoken-accepted = "#00ff00"\n')
    result = load_themes(theme_dirs(tmp_path))
    assert "mine" in {t.name for t in result.themes}
    assert len(result.errors) == 4
    joined = "\n".join(result.errors)
    for name in ("bad-toml.toml", "bad-colour.toml", "unknown-key.toml", "no-name.toml"):
        assert name in joined
    assert "primery" in joined and "not-a-colour" in joined
    with pytest.raises(ThemeFileError, match="invalid TOML"):
        load_theme_file(themes / "bad-toml.toml")


# -- keymap ---------------------------------------------------------------------------------------------


def test_keymap_accepts_both_orientations_and_reports_unknown_ids():
    keymap, problems = resolve_keymap({"k_up": "alt+up", "ctrl+g": "toggle_ghosts", "alt+g": "toggle_ghosts", "x": "nope"})
    assert keymap == {"k_up": "alt+up", "toggle_ghosts": "ctrl+g,alt+g"}
    assert len(problems) == 2 and "nope" in problems[0] and "k_up" in problems[0]
    assert problems[1].startswith("keymap gives ctrl+g to toggle_ghosts, but it is also help's default key")
    assert {"send", "newline", "stop", "regenerate", "new_chat", "history", "export", "help"} <= ALL_IDS


@pytest.mark.parametrize(
    ("keymap", "problem"),
    [
        ({"ctrl+g": "toggle_ghosts"}, "keymap gives ctrl+g to toggle_ghosts, but it is also help's default key: "
         "toggle_ghosts gets it and help keeps f1; to keep both, give toggle_ghosts another key"),
        ({"k_up": "escape"}, "keymap gives escape to k_up, but it is also stop's default key: k_up gets it and stop "
         "has no key left; to keep both, give k_up another key"),
        ({"ctrl+j": "k_up"}, "keymap gives ctrl+j to k_up, but it is also newline's default key: k_up gets it and "
         "newline keeps shift+enter; to keep both, give k_up another key"),
        ({"k_up": "alt+x", "k_down": "alt+x"}, "keymap gives alt+x to both k_down and k_up; only one can have it: "
         "give each its own key"),
        ({"ctrl+d": "k_down"}, "keymap gives ctrl+d to k_down, but the prompt uses ctrl+d to delete character right: "
         "k_down gets it and the prompt loses it; to keep both, give k_down another key"),
        ({"k_up": "f4,ctrl+k"}, "keymap gives ctrl+k to k_up, but the prompt uses ctrl+k to delete to line end: "
         "k_up gets it and the prompt loses it; to keep both, give k_up another key"),
    ],
)
def test_keymap_reports_a_key_another_binding_also_has(keymap, problem):
    """Textual resolves such a clash silently (the other binding loses the key); the app says so in one line."""
    assert resolve_keymap(keymap)[1] == [problem]


def test_keymap_that_moves_keys_between_bindings_is_no_clash():
    assert resolve_keymap({"help": "f1", "ctrl+g": "k_up"}) == ({"help": "f1", "k_up": "ctrl+g"}, [])


# -- import hygiene -------------------------------------------------------------------------------------


def test_tui_modules_do_not_import_llama_cpp_or_engine_internals():
    code = textwrap.dedent(
        """
        import sys
        import specchat.tui.app, specchat.commands.tui
        bad = [m for m in sys.modules if m == "llama_cpp" or m.startswith("llama_cpp.") or m in (
            "specchat.engine.model", "specchat.engine.chat", "specchat.loading", "specchat.engine.speculative")]
        print(",".join(bad))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_fake_engine_tokenizer_round_trips():
    text = "Hello, world!\n```py\nx = 1\n```"
    assert "".join(tokenize(text)) == text
    assert isinstance(next(iter(FakeEngine().send("x"))), (Piece, PromptDone))


def test_pump_posts_a_mode_change_at_once_and_throttles_the_rest():
    steps = [_step(k=3) for _ in range(5)] + [_step(k=5)] + [_step(k=5) for _ in range(3)]
    posted: list = []
    clock = FakeClock(step=0.001)  # everything within 10 ms: only forced stats go out
    pump_turn(1, iter(steps), posted.append, LiveStats(), clock)
    ks = [m.snapshot.k for m in posted if isinstance(m, StatsUpdated)]
    assert ks == [None, 3, 5, 5]  # start, first step, the K change (at its own step), the end of the turn



def test_a_calibration_before_the_first_round_is_in_the_sidebar_at_once_and_gone_with_the_first_round():
    """Auto-K times v(K) for seconds after the prompt (the first turn of a model, and the first turn at each new
    depth bucket). The engine says so with :class:`Calibrating`; the pump posts it at once (nothing else comes for
    seconds), the big number gives way to what is being timed - also on a later turn, where it would show the
    last reply's rate - and the first round's stats replace it."""
    from specchat.engine.events import Calibrating
    from specchat.tui.widgets.sidebar_text import status_line, tok_s_caption, tok_s_value

    stats = LiveStats()
    posted: list = []
    clock = FakeClock(step=0.001)  # all within one flush interval: only forced stats go out at once
    events = [Calibrating(depth=512, context_n=700), PromptDone(prompt_n=700, prompt_ms=5.0, cached_n=600), _step(k=3)]
    pump_turn(1, iter(events), posted.append, stats, clock)
    snaps = [m.snapshot for m in posted if isinstance(m, StatsUpdated)]
    during = [s for s in snaps if s.calibrating is not None]
    assert during and during[0].calibrating.depth == 512  # posted at once, before the PromptDone
    assert tok_s_value(during[0]) is None
    assert tok_s_caption(during[0]) == "tok/s: timing v(K) after 512+ tokens before the first round (once; cached after)"
    assert snaps[-1].calibrating is None and tok_s_caption(snaps[-1]) != tok_s_caption(during[0])

    # a later turn: the last reply's rate is not shown under a calibration's caption
    stats.finish_turn(_turn(1, 10.0))
    stats.start_turn(clock())
    stats.observe_calibrating(Calibrating(depth=0, context_n=40))
    snap = stats.snapshot()
    assert tok_s_value(snap) is None and "timing v(K) for this model" in tok_s_caption(snap)
    # the one-line status bar of a narrow terminal says it too, not "no reply yet"
    assert status_line(snap, None, "ready").startswith("timing v(K) for this model \u00b7 ")
    stats.observe_prompt(PromptDone(prompt_n=40, prompt_ms=1.0, cached_n=0), clock())
    assert stats.snapshot().calibrating is None and tok_s_value(stats.snapshot()) is not None


def test_the_status_bar_shows_the_next_rounds_k_once_a_key_changed_it() -> None:
    """The narrow terminal's one-line status bar: the last round's K, or the next round's once a key changed the
    controls after it (speculation toggled while idle read as if nothing had happened: found in tmux at 60x20)."""
    stats = LiveStats()
    snap = stats.snapshot()
    holding = KStatus(state="holding", k=64, k_round=64, k_cap=64)
    on = ControlState(k=8, speculative=True, auto_k=True, drafter="ngram")
    snap = replace(snap, status=holding)
    assert status_line(snap, on, "ready").split(" \u00b7 ")[1] == holding.label
    off = replace(on, speculative=False)
    assert status_line(snap, off, "ready").split(" \u00b7 ")[1] == "next round: speculation off"
    last_off = replace(snap, status=KStatus(state="speculation off", k=0, k_round=0, k_cap=64))
    assert status_line(last_off, on, "ready").split(" \u00b7 ")[1] == "next round: K auto"
    assert status_line(last_off, replace(on, auto_k=False), "ready").split(" \u00b7 ")[1] == "next round: K 8 (fixed)"
    assert status_line(last_off, off, "ready").split(" \u00b7 ")[1] == last_off.status.label  # type: ignore[union-attr]
