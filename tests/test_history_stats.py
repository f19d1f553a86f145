"""``specchat history stats`` (issue 24): acceptance per target, drafter and llama.cpp build from the saved replies,
with a drop between builds flagged beyond noise; every local reply is stamped with its build and CPU."""

from __future__ import annotations

import dataclasses

import pytest

from specchat.cli import main
from specchat.config import load_settings
from specchat.engine.build import engine_build, this_cpu
from specchat.engine.conversation import reply_message
from specchat.engine.events import Turn
from specchat.engine.protocol import Message
from specchat.history import HistoryStore
from specchat.history.stats import DROP_P, acceptance_drops, group_stats, parse_groups
from specchat.loading import load_engine


def _turn_of(events) -> Turn:
    return next(e for e in events if isinstance(e, Turn))


def test_a_real_reply_is_stamped_with_its_build_and_cpu_and_counted(tmp_path, isolated_config, capsys):
    """A reply of the bundled model through the engine, saved in a real SQLite history: its statistics carry the
    llama-cpp-python build and this CPU, and ``history stats`` counts it under them."""
    settings = load_settings(None, {"threads": 1, "draft": "ngram", "n_predict": 40})
    session = load_engine(settings)
    try:
        prompt = "Repeat exactly: the quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog."
        turn = _turn_of(session.send(prompt))
    finally:
        session.close()
    assert turn.build == engine_build() and turn.build.startswith("llama-cpp-python ")
    assert turn.cpu == this_cpu() and turn.cpu
    db = tmp_path / "h.sqlite3"
    with HistoryStore(db) as store:
        conv = store.create_conversation(target=turn.target, draft=turn.drafter)
        store.append_message(conv, Message("user", prompt))
        store.append_message(conv, reply_message(turn))
        [row] = store.reply_stats()
    assert (row["build"], row["cpu"], row["draft_n"], row["accepted"]) == (turn.build, turn.cpu, turn.draft_n, turn.draft_n_accepted)
    assert main(["history", "stats", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["TARGET", "DRAFTER", "BUILD"]
    assert turn.build in out and turn.target in out and "no acceptance drop between builds" in out
    assert main(["history", "stats", "--db", str(db), "--by", "cpu"]) == 0
    assert this_cpu().split(" (flags")[0] in capsys.readouterr().out


def _rows(build: str, accepted: int, drafted: int, *, n: int = 10, target: str = "t.gguf", created: str = "2026-11-01"):
    return [
        {"created": f"{created}T00:00:{i:02d}", "target": target, "drafter": "ngram", "draft_n": drafted // n,
         "accepted": accepted // n, "spec_steps": drafted // n // 4, "predicted_n": 100, "predicted_ms": 1000.0,
         "build": build, "cpu": "AMD EPYC (flags x)"}
        for i in range(n)
    ]


def test_an_acceptance_drop_between_builds_is_flagged_and_noise_is_not():
    """78 % of 2,000 drafted tokens on one build, 71 % on the next: flagged (z ≈ 5); 78 % -> 77 % on 200
    tokens each: noise. A later build that recovers is compared with the one before it."""
    rows = _rows("b1", 1560, 2000) + _rows("b2", 1420, 2000, created="2026-11-02") + _rows("b3", 1560, 2000, created="2026-11-03")
    drops = acceptance_drops(rows)
    assert [(d.before, d.after) for d in drops] == [("b1", "b2")]
    d = drops[0]
    assert d.acceptance_before == pytest.approx(0.78) and d.acceptance_after == pytest.approx(0.71)
    assert d.p < DROP_P and d.z > 4
    assert acceptance_drops(_rows("b1", 156, 200) + _rows("b2", 154, 200, created="2026-11-02")) == []
    other_target = _rows("b1", 1560, 2000) + _rows("b2", 1420, 2000, target="other.gguf", created="2026-11-02")
    assert acceptance_drops(other_target) == []  # different targets are never compared
    g = {x.key: x for x in group_stats(rows, ("build",))}
    assert g[("b2",)].acceptance == pytest.approx(0.71) and g[("b2",)].replies == 10 and g[("b1",)].tok_s == pytest.approx(100.0)


def test_history_stats_flags_a_drop_from_the_database(tmp_path, capsys):
    """Through the CLI on a real SQLite file: two builds' replies for one pair, the second accepting less."""
    db = tmp_path / "h.sqlite3"
    base = Turn(prompt_n=10, prompt_ms=5.0, predicted_n=100, predicted_ms=1000.0, predicted_per_second=100.0,
                draft_n=200, draft_n_accepted=156, acceptance=0.78, mean_len=4.0, accepted_per_pos=[], draft_ms_per_step=0.0,
                verify_ms_per_step=0.0, overhead_ms=0.0, step_ms=1000.0, n_steps=50, n_spec_steps=40, stop_reason="eos",
                text="x", drafter="ngram", speculative=True, target="t.gguf", build="llama-cpp-python 0.3.35", cpu="cpu")
    with HistoryStore(db) as store:
        conv = store.create_conversation(target="t.gguf", draft="ngram")
        for i in range(20):
            t = base if i < 10 else dataclasses.replace(base, draft_n_accepted=132, acceptance=0.66, build="llama-cpp-python 0.3.36")
            store.append_message(conv, Message("user", f"q{i}"))
            store.append_message(conv, reply_message(t))
    assert main(["history", "stats", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "acceptance dropped for t.gguf + ngram: 78.0% on llama-cpp-python 0.3.35 -> 66.0% on llama-cpp-python 0.3.36" in out


def test_history_stats_bad_input_is_one_line(tmp_path, capsys):
    assert main(["history", "stats", "--db", str(tmp_path / "h.sqlite3"), "--by", "target,colour"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "colour is not one of target, drafter, build, cpu" in err
    assert parse_groups(None) == ("target", "drafter", "build")
    assert main(["history", "stats", "--db", str(tmp_path / "none.sqlite3")]) == 0
    assert "no saved replies yet" in capsys.readouterr().out
