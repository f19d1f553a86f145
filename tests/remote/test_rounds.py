"""Token fates from llama-server's cumulative counters (:mod:`specchat.engine.server_rounds`), as pure
functions of the counter sequences llama-server b11434 was seen to send (the real server's streams are
checked in test_engine.py)."""

from __future__ import annotations

import random

import pytest

from specchat.engine.server_rounds import Round, RoundTracker


def feed(chunks):
    """chunks: (n_tokens, draft_n, draft_n_accepted, predicted_ms) -> (kinds, rounds)."""
    tracker = RoundTracker()
    kinds, rounds = [], []
    for chunk in chunks:
        k, r = tracker.chunk(*chunk)
        kinds += k
        rounds += r
    rounds += tracker.finish()
    return tracker, kinds, rounds


def test_self_draft_stream_every_round_three_accepted_and_a_bonus():
    # seen with the bundled model as its own draft, K = 3: the counters move on each round's first token
    chunks = [(1, None, None, 0.001)]  # the first token: sampled from the prompt, no counters yet
    for r in range(1, 4):
        chunks.append((1, 3 * r, 3 * r, 100.0 * r))
        chunks += [(1, 3 * r, 3 * r, 100.0 * r)] * 3
    chunks.append((1, 9, 9, 350.0))  # no budget left for a draft: a plain round
    _, kinds, rounds = feed(chunks)
    assert kinds == ["plain"] + ["accepted"] * 3 + ["bonus"] + ["accepted"] * 3 + ["bonus"] + ["accepted"] * 3 + [
        "bonus", "plain"]
    assert [(r.drafted, r.accepted, r.emitted) for r in rounds] == [(0, 0, 1), (3, 3, 4), (3, 3, 4), (3, 3, 4), (0, 0, 1)]
    assert [r.t_ms for r in rounds] == pytest.approx([0.001, 99.999, 100.0, 100.0, 50.0])


def test_a_rejection_gives_accepted_then_a_correction():
    _, kinds, rounds = feed([(1, None, None, 0), (1, 3, 1, 10), (1, 3, 1, 10), (1, 6, 1, 20)])
    assert kinds == ["plain", "accepted", "corrected", "corrected"]
    assert [(r.drafted, r.accepted, r.emitted) for r in rounds] == [(0, 0, 1), (3, 1, 2), (3, 0, 1)]


def test_absent_counters_mean_no_draft_yet():
    # an n-gram server sends no draft_n until its first draft is verified
    _, kinds, rounds = feed([(1, None, None, 1.0)] * 5 + [(1, 8, 8, 9.0)] + [(1, 8, 8, 9.0)] * 8)
    assert kinds == ["plain"] * 5 + ["accepted"] * 8 + ["bonus"]
    assert sum(1 for r in rounds if r.drafted) == 1


def test_the_first_token_is_plain_even_when_it_arrives_merged_with_a_round():
    # a CJK reply: the first character was three byte tokens, the 2nd and 3rd from the first draft round
    _, kinds, _ = feed([(3, 3, 3, 50.0), (3, 6, 6, 90.0), (1, 6, 6, 90.0)])
    assert kinds == ["plain", "accepted", "accepted", "accepted", "bonus", "accepted", "accepted"]


def test_a_round_cut_short_counts_its_unsent_accepted_tokens():
    # the final chunk moved the counters for a round none of whose tokens were sent
    tracker, kinds, rounds = feed([(1, None, None, 0), (1, 3, 3, 5), (1, 3, 3, 5), (0, 6, 5, 9)])
    assert kinds == ["plain", "accepted", "accepted"]
    # the first round sent 2 of its 3 accepted + bonus; the last, 2 accepted + a correction, sent nothing
    assert rounds[1:] == [Round(3, 3, 2, 5.0), Round(3, 2, 0, 4.0)]
    assert tracker.unsent_accepted == 1 + 2
    assert kinds.count("accepted") + tracker.unsent_accepted == tracker.draft_n_accepted == 5


def test_counters_that_go_backwards_are_refused():
    tracker = RoundTracker()
    tracker.chunk(1, 3, 2, 1.0)
    with pytest.raises(ValueError, match="draft_n"):
        tracker.chunk(1, 2, 2, 2.0)
    with pytest.raises(ValueError, match="draft_n"):
        RoundTracker().chunk(1, 2, 3, 1.0)  # more accepted than drafted


def simulate(rng: random.Random, n_rounds: int, k: int, merge: float):
    """A token stream in the shape llama-server sends it: per round the counters move on its first token;
    with probability ``merge`` a token is held back and sent with the next (a split UTF-8 character)."""
    truth, tokens = [], []  # per token: (kind, draft_n, accepted_n)
    dn = an = 0
    truth.append("plain")
    tokens.append((None, None))
    for _ in range(n_rounds):
        d = rng.choice([0, k, k, k, rng.randint(1, k)])
        if d == 0:
            truth.append("plain")
            tokens.append((dn or None, an or None))
            continue
        a = rng.randint(0, d)
        dn, an = dn + d, an + a
        truth += ["accepted"] * a + ["corrected" if a < d else "bonus"]
        tokens += [(dn, an)] * (a + 1)
    chunks, held = [], 0
    for i, (d_n, a_n) in enumerate(tokens):
        held += 1
        if i == len(tokens) - 1 or rng.random() >= merge:
            chunks.append((held, d_n, a_n, float(i)))
            held = 0
    return truth, chunks, an


@pytest.mark.parametrize("seed", range(20))
def test_fates_are_exact_token_by_token_when_no_token_is_held_back(seed):
    rng = random.Random(seed)
    truth, chunks, accepted = simulate(rng, 60, 4, merge=0.0)
    tracker, kinds, rounds = feed(chunks)
    assert kinds == truth
    assert sum(r.emitted for r in rounds) == len(truth)
    assert tracker.unsent_accepted == 0


@pytest.mark.parametrize("seed", range(20))
def test_held_back_tokens_keep_the_accepted_count_exact(seed):
    rng = random.Random(seed)
    truth, chunks, accepted = simulate(rng, 60, 4, merge=0.3)
    tracker, kinds, rounds = feed(chunks)
    assert len(kinds) == len(truth)
    assert kinds.count("accepted") + tracker.unsent_accepted == accepted == tracker.draft_n_accepted
    assert sum(r.accepted for r in rounds) == accepted
    assert sum(r.emitted for r in rounds) == len(truth)
