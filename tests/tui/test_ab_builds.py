"""The A/B section's line of this pair across llama.cpp builds (issue 24), from a real SQLite history holding replies
stamped with another build: "acceptance with this pair: N % today, 78 % on build b1", shown only where another
build of the same pair and CPU has data, read off the UI thread."""

from __future__ import annotations

import dataclasses
import threading

from fake_engine import FakeEngine
from tuikit import SIZE, fake_settings, send, settle, wait_ready

from specchat.engine.conversation import reply_message
from specchat.engine.events import Turn
from specchat.engine.protocol import Message
from specchat.history import HistoryStore
from specchat.history.stats import pair_across_builds
from specchat.tui.app import SpecChatApp
import specchat.tui.widgets.ab_table as ab_table
from specchat.tui.widgets.ab_table import ABTable

CPU = "AMD EPYC 9R14 (flags 0123456789ab)"
OLD = Turn(prompt_n=10, prompt_ms=5.0, predicted_n=100, predicted_ms=1000.0, predicted_per_second=100.0,
           draft_n=200, draft_n_accepted=156, acceptance=0.78, mean_len=4.0, accepted_per_pos=[], draft_ms_per_step=0.0,
           verify_ms_per_step=0.0, overhead_ms=0.0, step_ms=1000.0, n_steps=50, n_spec_steps=40, stop_reason="eos",
           text="x", drafter="ngram", speculative=True, target="fake-target-135M", build="b1", cpu=CPU)


def _seed(db, turns: list[Turn]) -> None:
    with HistoryStore(db) as store:
        conv = store.create_conversation(target="fake-target-135M", draft="ngram")
        for i, turn in enumerate(turns):
            store.append_message(conv, Message("user", f"q{i}"))
            store.append_message(conv, reply_message(turn))


def _rows(*turns: Turn) -> list[dict]:
    return [{"created": f"2026-11-0{i + 1}", "target": t.target, "drafter": t.drafter, "draft_n": t.draft_n,
             "accepted": t.draft_n_accepted, "spec_steps": t.n_spec_steps, "predicted_n": t.predicted_n,
             "predicted_ms": t.predicted_ms, "build": t.build, "cpu": t.cpu} for i, t in enumerate(turns)]


def test_the_line_compares_this_build_with_the_others_of_the_same_pair_and_cpu_only():
    now = dataclasses.replace(OLD, build="b2", draft_n_accepted=142)
    key = {"target": "fake-target-135M", "drafter": "ngram", "cpu": CPU}
    assert pair_across_builds(_rows(OLD, now), **key, build="b2") == "acceptance with this pair: 71 % today, 78 % on build b1"
    assert pair_across_builds(_rows(now), **key, build="b2") == ""  # no other build: nothing to say
    other_cpu = dataclasses.replace(OLD, cpu="Intel Xeon (flags x)")
    other_pair = dataclasses.replace(OLD, drafter="tiny-draft.gguf")
    assert pair_across_builds(_rows(other_cpu, other_pair, now), **key, build="b2") == ""
    assert pair_across_builds(_rows(OLD), **key, build="b2") == "acceptance with this pair: nothing drafted yet today, 78 % on build b1"
    many = [dataclasses.replace(OLD, draft_n=2000, draft_n_accepted=1560)] * 2 + [
        dataclasses.replace(OLD, build="b2", draft_n=2000, draft_n_accepted=1300)] * 2
    line = pair_across_builds(_rows(*many), **key, build="b2")
    assert line.startswith("acceptance with this pair: 65 % today, 78 % on build b1 (a drop beyond noise from b1")


async def test_the_sidebar_says_the_pairs_acceptance_on_another_build_from_the_saved_replies(tmp_path, monkeypatch):
    db = tmp_path / "history.sqlite3"
    _seed(db, [OLD] * 3)
    engine = FakeEngine(["word " * 30], build="b2", cpu=CPU)
    store = HistoryStore(db)
    app = SpecChatApp(lambda progress: engine, fake_settings(), store, export_dir=tmp_path)
    reads: list[str] = []
    real = ab_table.builds_line

    def spy(path, key):
        reads.append(threading.current_thread().name)
        return real(path, key)

    monkeypatch.setattr(ab_table, "builds_line", spy)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_ready(pilot)
            table = app.query_one(ABTable)
            assert table.builds_line == ""  # before a reply of this session: no build to compare
            await send(pilot, "go")
            await settle(pilot)
            turn = engine.turns[-1]
            expected = f"acceptance with this pair: {turn.draft_n_accepted / turn.draft_n * 100:.0f} % today, 78 % on build b1"
            assert table.builds_line.startswith(expected)  # (and, the fake engine accepting less, the drop is said)
            assert expected in str(table.render())
            assert reads and threading.main_thread().name not in reads  # the database was read off the UI thread
    finally:
        store.close()


async def test_no_other_build_in_the_history_shows_no_line(tmp_path):
    db = tmp_path / "history.sqlite3"
    _seed(db, [dataclasses.replace(OLD, cpu="another CPU (flags z)")])  # the same pair on another CPU only
    engine = FakeEngine(["word " * 30], build="b2", cpu=CPU)
    store = HistoryStore(db)
    app = SpecChatApp(lambda progress: engine, fake_settings(), store, export_dir=tmp_path)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_ready(pilot)
            await send(pilot, "go")
            await settle(pilot)
            assert app.query_one(ABTable).builds_line == ""
            assert "on build" not in str(app.query_one(ABTable).render())
    finally:
        store.close()
