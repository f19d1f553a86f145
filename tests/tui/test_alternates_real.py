"""Regenerate with speculation off, then on, on the real bundled model (issue 11): both replies are kept as
versions of one reply, each with its own numbers; greedy, so their texts are the same (or part at a near-tie,
measured as the race does: specchat.race); the A/B table's rows are the engine's ab_summary of those real
turns, in the pair's own section."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from tuikit import SIZE, reply_spans, send, settle, wait_ready

from specchat.commands.tui import make_factory
from specchat.config import Settings
from specchat.engine.telemetry.ab import ab_summary, turn_mode
from specchat.history import HistoryStore
from specchat.race import NEAR_TIE
from specchat.race.verdict import _near_tie
from specchat.tui.app import SpecChatApp
from specchat.tui.widgets.ab_table import pair_title
from specchat.tui.widgets.prompt import PromptInput

#: copy-heavy, so the n-gram drafter finds something to draft
PROMPT = "Repeat this line three times: the cat sat on the mat and the dog sat on the log."


@pytest.mark.slow
async def test_bundled_regenerate_off_then_on_keeps_both_versions_and_the_ab_table_shows_them(
    tmp_path, bundled_model
):
    settings = Settings(
        target="bundled", draft="ngram", k=3, auto_k=False, n_predict=40, n_ctx=1024, threads=1,
        data_dir=tmp_path, theme="specchat-dark",
    )
    store = HistoryStore(tmp_path / "history.sqlite3")
    app = SpecChatApp(make_factory(settings), settings, store, make_factory=make_factory, export_dir=tmp_path)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_ready(pilot)
            assert app.engine_error is None, app.engine_error
            session = app.engine
            assert session.controls.snapshot().sampling.temperature == 0.0  # greedy
            await pilot.press("ctrl+t")  # speculation off: the baseline
            await send(pilot, PROMPT)
            await settle(pilot)
            await pilot.press("ctrl+t")  # on (n-gram, K = 3), and the same message again
            await pilot.press("ctrl+r")
            await settle(pilot)

            last = session.messages[-1]
            off, on = last.versions()
            assert last.alternate_index == 1 and last.content == on.content
            assert turn_mode(off.stats) == "off" and off.stats.draft_n == 0
            assert on.stats.spec_on_steps == on.stats.n_steps > 0 and on.stats.draft_n > 0
            # greedy: the same text, or a batch-size near-tie where the token ids part (as the race checks it)
            first = next((i for i, (a, b) in enumerate(zip(off.tokens, on.tokens)) if a != b), None)

            # the pane: one reply, version 2/2 with its own numbers; flip to 1/2: the baseline's numbers, plain
            reply = app.chat_screen.assistant_messages()[-1]
            assert reply.reply_text == on.content and str(reply.border_subtitle).startswith("reply 2/2 \u00b7 ")
            assert f"{on.stats.predicted_per_second:.1f} tok/s" in str(reply.border_subtitle)
            assert "accepted" in {kind for _, kind in reply_spans(reply.tokens)} or on.stats.draft_n_accepted == 0
            app.query_one(PromptInput).focus()
            await pilot.press("left")
            await settle(pilot)
            assert reply.reply_text == off.content and str(reply.border_subtitle).startswith("reply 1/2 \u00b7 ")
            assert f"{off.stats.predicted_per_second:.1f} tok/s" in str(reply.border_subtitle)
            assert "no speculation" in str(reply.border_title)
            assert {kind for _, kind in reply_spans(reply.tokens)} == {"plain"}
            assert session.messages[-1].content == off.content

            # history keeps both, with their numbers, and the choice
            _, records = store.records(app.chat_screen.recorder.conversation_id)
            saved = [r.message for r in records[-1].version_records()]
            assert [m.content for m in saved] == [off.content, on.content]
            assert [m.stats.predicted_n for m in saved] == [off.stats.predicted_n, on.stats.predicted_n]
            assert [m.stats.draft_n for m in saved] == [0, on.stats.draft_n]
            assert records[-1].message.alternate_index == 0

            # the A/B table: the engine's summary of these two real turns, in the pair's own section
            rows = app.chat_screen.stats.snapshot().ab
            assert rows == ab_summary([off.stats, on.stats])
            assert {r.pair for r in rows} == {(on.stats.target, "ngram")}
            lines = str(app.chat_screen.sidebar.query_one("#ab").render()).split("\n")
            head = lines.index(pair_title(on.stats.target, "ngram"))
            assert [line.split()[0] for line in lines[head + 2 : head + 2 + len(rows)]] == [r.mode for r in rows]
            assert lines[head + 2].split()[1:3] == ["1", f"{rows[0].tok_s:.1f}"]

            if first is not None:  # measured last: it decodes on fresh caches
                prompt_ids = session.template.tokens(session.messages[:-1])
                gap = _near_tie(session, prompt_ids, SimpleNamespace(turn=off.stats), SimpleNamespace(turn=on.stats), first)
                assert abs(gap) <= NEAR_TIE, f"the replies part at token {first} by {gap:.2f}: not a near-tie"
    finally:
        store.close()
