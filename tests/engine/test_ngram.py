"""The n-gram drafter (prompt lookup with a learned draft length): it only proposes - the longest earlier
match, as far as recent acceptance trusts it - and the target's verify keeps the output exact."""

from __future__ import annotations

import numpy as np
import pytest

from enginekit import build_decoder, pieces, run_turn, steps
from specchat.engine.controls import SamplingParams
from specchat.engine.drafter_kinds import K_MAX
from specchat.engine import drafters
from specchat.engine.drafters import EXACT, QUOTED, SUBSTITUTED, Draft, NgramDrafter

SP = SamplingParams()
RNG = np.random.default_rng(0)


def test_ngram_drafts_nothing_without_a_match():
    d = NgramDrafter(1, 4)
    assert d.draft(list(range(100, 140)), 8, SP, RNG).tokens == []
    assert d.last_match_len == 0


def test_ngram_copies_a_long_match_and_picks_the_longest_earlier_occurrence():
    d = NgramDrafter(1, 4)
    src = list(range(1, 41))
    # the 4-gram [37..40] occurs twice; only the first occurrence is preceded by the same 6 tokens
    ctx = src + [7, 7, 37, 38, 39, 40, 99, 98] + src[:39] + [40]
    e, length = d._match(ctx)
    assert e == 40 and length == 40  # the original copy, matched all the way back
    draft = d.draft(ctx, 8, SP, RNG).tokens
    assert len(draft) >= 6 and draft == [7, 7, 37, 38, 39, 40, 99, 98][: len(draft)]  # a long copy is trusted


def test_ngram_draft_length_follows_recent_acceptance():
    d = NgramDrafter(1, 4)
    src = list(range(1, 100))
    ctx = src + src[:50]  # a 50-token match: the prior trusts it for the whole K
    assert len(d.draft(ctx, 8, SP, RNG).tokens) == 8
    for _ in range(12):  # the target keeps refusing the first token of 48..63-long matches
        drafted = d.draft(ctx, 8, SP, RNG).tokens
        if not drafted:
            break
        d.rollback(ctx)  # nothing of the draft was committed: rejected at position 0
    assert d.draft(ctx, 8, SP, RNG).tokens == []  # no longer confident: no draft
    assert d.confidence(50) < d.min_confidence
    # evidence relaxes towards the prior, so the bucket is tried again later
    for _ in range(400):  # other (10-token) matches keep being drafted and accepted meanwhile
        assert d.draft(src + src[:10], 1, SP, RNG).tokens == [11]
        d.rollback(src + src[:10] + [11])
    assert d.confidence(50) > d.min_confidence


def test_ngram_learns_from_full_acceptance_and_one_token_matches_start_untrusted():
    d = NgramDrafter(1, 4)
    ctx = [5, 6, 7, 8, 9, 1, 2, 3, 5]
    assert d.confidence(1) < d.min_confidence
    assert d.draft(ctx, 4, SP, RNG).tokens == []  # a one-token match: not enough evidence to draft
    c_before = d.confidence(12)
    ctx2 = list(range(1, 40)) + list(range(1, 13))
    got = d.draft(ctx2, 4, SP, RNG).tokens
    assert got == [13, 14, 15, 16][: len(got)] and len(got) >= 2
    d.rollback(ctx2 + got)  # all accepted
    assert d.confidence(12) > c_before


def test_ngram_reports_its_natural_length_and_a_cap_takes_its_prefix():
    """The drafter tells the cost model how long it would draft with no cap (auto-K's replay); a cap of
    k proposes exactly the first k tokens of that uncapped draft."""
    src = list(range(1, 60))
    ctx = src + src[:30]  # a 30-token match: trusted far
    full = NgramDrafter(1, 4).draft(ctx, K_MAX, SP, RNG)
    assert full.natural == len(full.tokens) >= 6
    for k in (1, 3, 5, 12):
        capped = NgramDrafter(1, 4).draft(ctx, k, SP, RNG)
        assert capped.tokens == full.tokens[:k] and capped.natural == full.natural
    assert len(NgramDrafter(1, 4).draft(ctx, 12, SP, RNG).tokens) == full.natural < 12  # it stops by itself
    none = NgramDrafter(1, 4).draft(list(range(100, 140)), 8, SP, RNG)
    assert none.tokens == [] and none.natural == 0
    # a model drafter fills whatever K it is given: it reports no natural length
    assert Draft().natural is None


def test_ngram_cost_aware_length():
    """With a verify cost: long drafts when verify rows are free, none when each row costs a full step."""
    src = list(range(1, 60))
    ctx = src + src[:2]  # a two-token match: p ~ 0.67 per position by the prior
    flat = NgramDrafter(1, 4, verify_cost=lambda: [1.0] * 65)  # the table v by K, as CostModel.measured_v gives it
    assert len(flat.draft(ctx, 8, SP, RNG).tokens) == 8
    steep = NgramDrafter(1, 4, verify_cost=lambda: [1.0 + k for k in range(65)])  # a row costs as much as a decode
    assert steep.draft(ctx, 8, SP, RNG).tokens == []
    unmeasured = NgramDrafter(1, 4, verify_cost=lambda: None)  # not measured beyond one row: the confidence rule
    assert unmeasured.draft(ctx, 8, SP, RNG).tokens == NgramDrafter(1, 4).draft(ctx, 8, SP, RNG).tokens
    assert steep.draft(ctx, 8, SP, RNG).tokens == []


def test_ngram_speculation_stays_exact_on_a_copy(tiny_target):
    """K = K_MAX with the learned length: the greedy reply equals plain decoding (the target decides)."""
    dec = build_decoder(tiny_target, None, k=K_MAX, drafter="ngram")
    try:
        text = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu " * 4
        ctx = dec.target.tokenize(text, add_bos=True)
        dec.controls.set_speculative(False)
        base, _ = run_turn(dec, ctx, 48)
        dec.reset()
        dec.controls.set_speculative(True)
        spec, events = run_turn(dec, ctx, 48)
        assert spec.tokens == base.tokens
        assert all(s.drafted <= K_MAX for s in steps(events))
    finally:
        dec.close()


def _row(i: int) -> list[int]:
    """A record of a list, as token ids: ``{"id": i, "revenue": ...},`` with only the number changing."""
    return [50, 51, 52, i, 53, 54, 55, 56]


CHEAP = [1.0 + 0.05 * k for k in range(65)]  # a verify table where a batch costs little more than one row


def test_ngram_goes_on_past_the_changed_token_of_a_repeated_record():
    """The next record of a list has a new number: no exact match ends in it, but the text before it matched the
    previous record, so the draft is what followed the number there (a substituted match)."""
    d = NgramDrafter(1, 4, verify_cost=lambda: CHEAP)
    ctx = _row(1) + _row(2) + [50, 51, 52, 3]
    assert d.lookup(ctx, 4) == [53, 54, 55, 56]
    assert d.last_kind == SUBSTITUTED and d.last_match_len == 7  # the 2nd record back to its start, the number not counted
    draft = d.draft(ctx, 8, SP, RNG)
    assert draft.tokens == [53, 54, 55, 56, 50, 51, 52, 3][: len(draft.tokens)] and draft.tokens
    # the same number again is an exact match, longer than the substituted one: the exact match wins
    same = _row(1) + _row(2) + [50, 51, 52, 2]
    assert d.lookup(same, 4) == [53, 54, 55, 56] and d.last_kind != SUBSTITUTED


def _lines(slots: tuple[int, ...]) -> list[int]:
    """Lines of one 20-token text with a slot after it (``if n % 3 == 0`` ... ``if n % 5 == 0``), then a new line
    begun: 12 tokens of the text, the rest still to come."""
    text, tail = list(range(10, 30)), list(range(40, 46))
    out: list[int] = []
    for slot in slots:
        out += [1, *text, slot, *tail]
    return [*out, 1, *text[:12]]


def test_a_draft_stops_where_the_text_it_copies_had_varied():
    """A copy in progress is trusted, except at a position where the text it copies went on otherwise each time it
    occurred before (the slot of a repeated line): there the drafter counts the share of earlier occurrences that
    agree, and stops its draft before the slot (SuffixDecoding's frequency score, on this conversation's text)."""
    d = NgramDrafter(1, 4, verify_cost=lambda: CHEAP)
    draft = d.draft(_lines((101, 102, 103)), 64, SP, RNG)
    assert draft.tokens == list(range(22, 30))  # the text up to the slot, not the slot's last value (103)
    at_slot = d.last_survival[8] / d.last_survival[7]  # P(slot kept | all before it kept)
    assert at_slot == pytest.approx(d.confidence(d.last_match_len + 8) / 3)  # 1 of 3 earlier lines had 103
    # where every earlier line agreed, the slot is as sure as the copy around it, and the draft goes on past it
    same = NgramDrafter(1, 4, verify_cost=lambda: CHEAP)
    draft = same.draft(_lines((103, 103, 103)), 64, SP, RNG)
    assert draft.tokens[:10] == [*range(22, 30), 103, 40]
    assert same.last_survival[8] / same.last_survival[7] == pytest.approx(same.confidence(same.last_match_len + 8))


def test_a_copy_of_the_text_above_is_trusted_more_than_the_reply_repeating_itself():
    """A match into the text before this turn's end-of-turn token (the user's message: a *quoted* match) learns its
    own acceptance from a surer prior than a match into the reply itself: a reply copying the message above goes on
    far more surely than one repeating its own words (over the recorded replies, 97-100 % against 90-97 % per token
    at 8+ matched tokens). Priced where a token must be ~90 % sure to pay, the copy drafts and the repeat does not."""
    eot = 2
    steep = [1.0 + 0.9 * k for k in range(K_MAX + 1)]
    words = list(range(100, 130))
    quoting = NgramDrafter(1, 4, verify_cost=lambda: steep, boundary=lambda t: t == eot)
    draft = quoting.draft([*words, eot, 7, *words[:12]], 8, SP, RNG)  # the reply copies the message above
    assert quoting.last_kind == QUOTED and quoting.last_match_len == 12
    assert draft.tokens and draft.tokens == words[12 : 12 + len(draft.tokens)]
    repeating = NgramDrafter(1, 4, verify_cost=lambda: steep, boundary=lambda t: t == eot)
    draft = repeating.draft([50, eot, 7, *words, 8, *words[:12]], 8, SP, RNG)  # the same words, twice in the reply
    assert repeating.last_kind == EXACT and repeating.last_match_len == 12
    assert draft.tokens == []
    assert quoting.confidence(12, QUOTED) > quoting.confidence(12, EXACT)
    assert quoting.confidence(4, QUOTED) == quoting.confidence(4, EXACT)  # short matches: no surer than the reply's


def test_a_reply_repeating_itself_drafts_only_what_pays_at_its_lower_confidence_bound(monkeypatch):
    """Where a 2-row verify costs 1.8 single rows, a 12-token match of the reply into itself pays on its estimate alone
    (p 0.85 from the prior: 1.85 tokens for 1.8 rows) but not at its lower confidence bound (two rounds of evidence:
    p 0.73), so it is not proposed; the same match into the message above (quoted) is, and so is this one without the
    doubt. Not proposed, it is still scored as a shadow against what the target commits: as the reply goes on
    repeating itself, the evidence grows until the draft pays at its bound too, and it is proposed."""
    eot = 2
    dear = [1.0 + 0.8 * k for k in range(K_MAX + 1)]
    words = list(range(100, 140))
    reply = [50, eot, 7, *words, 8]  # the reply has said these words once
    d = NgramDrafter(1, 4, verify_cost=lambda: dear, boundary=lambda t: t == eot)
    assert d.draft([*reply, *words[:12]], 8, SP, RNG).tokens == []
    assert d.last_kind == EXACT and d.last_match_len == 12
    proposed: list[int] = []
    for i in range(13, len(words) - 4):  # plain rounds: the target commits what the copy said, one token each
        proposed = d.draft([*reply, *words[:i]], 8, SP, RNG).tokens
        if proposed:
            break
    assert proposed and proposed == words[i : i + len(proposed)]  # the evidence lifted the doubt before the words ran out
    quoting = NgramDrafter(1, 4, verify_cost=lambda: dear, boundary=lambda t: t == eot)
    assert quoting.draft([*words, eot, 7, *words[:12]], 8, SP, RNG).tokens[:1] == [words[12]]
    assert quoting.last_kind == QUOTED
    monkeypatch.setattr(drafters, "DOUBT_Z", 0.0)
    undoubted = NgramDrafter(1, 4, verify_cost=lambda: dear, boundary=lambda t: t == eot)
    assert undoubted.draft([*reply, *words[:12]], 8, SP, RNG).tokens == [words[12]]


def test_a_substituted_match_needs_three_tokens_before_the_change():
    d = NgramDrafter(1, 4, verify_cost=lambda: CHEAP)
    assert d.lookup([60, 61, 1, 70, 71, 72, 60, 61, 2], 4) == []  # only 2 tokens matched before the change
    assert d.lookup([59, 60, 61, 1, 70, 71, 72, 59, 60, 61, 2], 4) == [70, 71, 72, 59]
    assert d.last_kind == SUBSTITUTED


def test_substituted_matches_learn_their_own_acceptance_and_stop_when_refused(monkeypatch):
    """A text where a change is an insertion, not a substitution: substituted drafts keep being refused, so the
    drafter stops proposing them, and what it learned about exact matches is untouched (the learning itself: without
    the doubt, drafters.DOUBT_Z, which would not propose the first one)."""
    monkeypatch.setattr(drafters, "DOUBT_Z", 0.0)
    d = NgramDrafter(1, 4, verify_cost=lambda: [1.0 + 0.3 * k for k in range(65)])  # a token must be 30 % likely
    ctx = _row(1) + _row(2) + [50, 51, 52, 3]
    exact_before = d.confidence(7, EXACT)
    sub_before = d.confidence(7, SUBSTITUTED)
    assert sub_before < exact_before  # it starts from a share of the exact prior
    for _ in range(12):
        if not d.draft(ctx, 8, SP, RNG).tokens:
            break
        d.rollback(ctx)  # refused at its first token
    assert d.draft(ctx, 8, SP, RNG).tokens == []
    assert d.confidence(7, SUBSTITUTED) < sub_before and d.confidence(7, EXACT) == exact_before


def test_the_match_that_loses_is_scored_as_a_shadow_in_its_own_table():
    """Where the exact match wins, the substituted candidate is still scored against the text the target commits
    next: a list whose records do go on past a changed number teaches the drafter so without proposing it."""
    d = NgramDrafter(1, 4, verify_cost=lambda: CHEAP)
    before = d.confidence(3, SUBSTITUTED)
    # a record with 9, another with 1, then [50, 51, 52, 9]: the exact match (the record with 9, 4 tokens back to the
    # separator) beats the substituted one (the record with 1, 3 tokens)
    text = [40, 50, 51, 52, 9, 53, 54, 55, 56, 41, 50, 51, 52, 1, 53, 54, 55, 56, 42, 50, 51, 52, 9]
    assert d.draft(text, 8, SP, RNG).tokens[:1] == [53]
    assert d.last_kind != SUBSTITUTED
    d.draft(text + [53, 54, 55, 56], 8, SP, RNG)  # the record went on as both said: the shadow is scored now
    assert d.confidence(3, SUBSTITUTED) > before


def test_ngram_speculation_with_substituted_matches_stays_exact_on_a_list(bundled_model):
    """The bundled SmolLM2 writing a list of records whose fields change from row to row (``{"id": 2, "name":
    "user_ii", ...}``): the n-gram drafter proposes substituted matches (priced by a fixed cheap verify table, so
    what it proposes does not rest on this CPU's costs), some are kept, and the greedy reply is exactly plain
    decoding's. (Replayed offline at this table: 19 substituted drafts, 62 of their tokens kept.)"""
    from specchat.engine.chat import ChatSession

    prompt = ('Write a Python list of 10 dictionaries, each {"id": i, "name": "user_i", "active": True}, '
              'for i from 1 to 10.')
    dec = build_decoder(bundled_model, None, drafter="ngram", k=16, n_ctx=1024)
    session = ChatSession(dec, n_predict=160)
    ngram = dec.drafters["ngram"]
    proposed: list[bool] = []
    real_draft = ngram.draft

    def recording_draft(context, k, sampling, rng):
        out = real_draft(context, k, sampling, rng)
        if out.tokens:
            proposed.append(ngram.last_kind == SUBSTITUTED)
        return out

    try:
        dec.controls.set_speculative(False)
        plain = [p.token for p in pieces(session.send(prompt))]
        session.reset()
        ngram.verify_cost = lambda: [1.0 + 0.1 * k for k in range(65)]
        ngram.draft = recording_draft
        dec.controls.set_speculative(True)
        events = list(session.send(prompt))
        assert [p.token for p in pieces(events) if p.kind != "rejected"] == plain
        drafting = [s for s in steps(events) if s.drafted]
        assert len(drafting) == len(proposed)
        substituted = [s for s, sub in zip(drafting, proposed, strict=True) if sub]
        assert substituted, "no substituted match was proposed"
        assert sum(s.accepted for s in substituted) >= 10, "substituted drafts were hardly ever kept"
    finally:
        ngram.draft = real_draft
        session.close()


def _random_pricing_case(rng, min_gain: float = 1.0) -> tuple[NgramDrafter, tuple]:
    """A drafter pricing against a random table (rising, or not), with random learned acceptances of every kind over a
    random indexed text, and random ``_length`` arguments (match length, tokens available, agreement, kind, start)."""
    table = [1.0]
    for _ in range(rng.randint(1, 65)):
        table.append(max(0.5, table[-1] + rng.choice([rng.uniform(0.0, 1.5), rng.uniform(-0.5, 0.5)])))
    d = NgramDrafter(1, 4, verify_cost=lambda table=table: table, min_gain=min_gain)
    text = [rng.randint(0, 6) for _ in range(rng.randint(0, 150))]
    if text:
        d._extend_index(text)
    for kind in (EXACT, SUBSTITUTED, QUOTED):
        for b in range(len(d.BUCKETS)):
            d._n[kind][b] = rng.uniform(0.5, 40.0)
            d._acc[kind][b] = d._n[kind][b] * rng.choice([rng.random(), 0.99, 1.0])
    args = (rng.randint(1, 70), rng.randint(0, 70), rng.choice([1.0, rng.random()]),
            rng.choice([EXACT, SUBSTITUTED, QUOTED]), rng.randint(-1, len(text) - 1))
    return d, args


def test_pricing_stops_early_only_where_no_longer_draft_could_be_worth_more(monkeypatch):
    """``_length`` stops pricing positions once none further can be worth more (each adds at most the survival so
    far, at no less than the cheapest verify of that many rows): the length, its worth and the survival it
    proposes are those of pricing every position - over random tables (rising, or not), learned acceptances,
    agreements and kinds - and a doubtful match stops within a few positions of the 64 its cap looks at."""
    import random

    rng = random.Random(20261206)
    full_scan = lambda table: [0.0] * len(table)  # noqa: E731 - no bound: every position is priced
    stopped_early = 0
    for _ in range(3000):
        d, args = _random_pricing_case(rng)
        got = d._length(*args)
        priced = len(d.last_survival)
        proposed = d.last_survival[: got[0]]
        with monkeypatch.context() as m:
            m.setattr(d, "_cheapest", full_scan)
            assert d._length(*args) == got, args
            assert d.last_survival[: got[0]] == proposed, args
            stopped_early += priced < len(d.last_survival)
    assert stopped_early > 300  # the bound does stop: otherwise this test checks nothing

    # a 3-token match of prose (the prior's p(l) ~0.56 and falling) against a steep table: a handful of positions
    d = NgramDrafter(1, 4, verify_cost=lambda: [1.0 + 0.9 * k for k in range(65)])
    d._length(3, 64, 1.0, EXACT)
    assert len(d.last_survival) <= 8


def test_a_first_position_no_length_can_pay_for_answers_no_draft_unpriced_and_the_answer_is_the_priced_one():
    """``draft_length`` skips pricing where the first position's survival P_1 is at or under
    :func:`~specchat.engine.telemetry.speedup.first_p_to_pay` of the table (d positions expect at most 1 + d·P_1): its
    length is then pricing's own over random tables, learned acceptances, agreements and kinds, and the bound answers
    a good share of the cases - a short doubtful match against a steep table, prose's most rounds - unpriced."""
    import random

    rng = random.Random(20261207)
    unpriced = 0
    for _ in range(3000):
        d, args = _random_pricing_case(rng, min_gain=rng.choice([1.0, 1.05]))
        priced = d._length(*args)
        priced_positions = len(d.last_survival)
        assert d._length(*args, need_worth=False)[0] == priced[0], args
        unpriced += priced_positions > 0 and not d.last_survival
    assert unpriced > 300  # the bound does answer: otherwise this test checks nothing

    # prose's 2-token match (the prior's p(l) 0.44) on the bundled Q4_1's table on an AMD EPYC Zen 4: no position priced
    d = NgramDrafter(1, 4, verify_cost=lambda: [1.0, 1.83, 2.39, 2.91, 3.63, 4.17, 4.70, 4.97, 5.67])
    d.last_agreement, d.last_kind, d.last_start = 1.0, EXACT, -1
    assert d.draft_length(2, 8) == 0 and d.last_survival == []


class _Watched(list):
    """A token list that counts the reads of its whole start (``text[:n]``)."""

    whole = 0

    def __getitem__(self, i):
        if isinstance(i, slice) and i.start is None and (i.stop or 0) > 1:
            self.whole += 1
        return super().__getitem__(i)


def test_the_text_it_has_read_continued_is_not_compared_whole_and_any_other_is():
    """Within a reply the decoder hands one list it appends to: a drafter that has read it reads only what is new
    (comparing the whole context each round took ~9 us at 300 tokens and ~36 at 4,000 with a decode's caches).
    Another list is compared whole: the same text is kept indexed, a text changed anywhere starts the index over."""
    base = [7, 8, 9, 1, 2, 3, 4, 5, 6, 1, 2, 3]
    d = NgramDrafter(1, 4)
    text = _Watched(base)
    d.draft(text, 4, SP, RNG)
    text.extend([4, 5])
    assert d.draft(text, 4, SP, RNG) is not None and text.whole == 0  # read on from where it was
    assert d._tokens == base + [4, 5]
    again = _Watched(base + [4, 5])
    assert d.lookup(again, 4) == NgramDrafter(1, 4).lookup(base + [4, 5], 4) and again.whole == 1
    changed = [7, 8, 0, *base[3:], 4, 5]  # an edit early in the conversation
    d.lookup(changed, 4)
    assert d._tokens == changed  # indexed anew: nothing of the old text is left to copy
