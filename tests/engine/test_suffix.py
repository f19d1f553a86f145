"""The suffix index (issue 23): longest match, frequency-scored continuations, documents kept apart, incremental
add and remove, persistence and corrupt files; the suffix drafter on top of it; and exactness on the real bundled
model - ``specchat generate --draft suffix`` after saving conversations gives plain decoding's greedy ids."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specchat.engine.controls import SamplingParams
from specchat.engine.drafter_kinds import DRAFTER_KINDS, NGRAM, SUFFIX
from specchat.engine.suffix import CorruptIndexError, SuffixIndex
from specchat.engine.suffix_drafter import SuffixDrafter

GREEDY = SamplingParams()
RNG = np.random.default_rng(0)


def doc(key, tokens):
    return (key, list(tokens), 0)


# -- the index ---------------------------------------------------------------------------------------------
def test_lookup_returns_the_continuation_of_the_longest_match():
    index = SuffixIndex.build([doc((1, 1), [9, 1, 2, 3, 4, 50, 51, 52]), doc((1, 2), [7, 0, 1, 2, 3, 4, 60, 61])])
    cand = index.lookup([0, 1, 2, 3, 4], 8)
    assert cand is not None and cand.tokens == [60, 61] and cand.match_len == 5 and cand.occurrences == 1
    assert index.doc_at(cand.position) == (1, 2)
    assert index.lookup([5, 6, 7, 8], 8) is None  # nothing of it was ever said


def test_continuations_are_scored_by_frequency_and_cut_at_min_token_prob():
    common = [1, 2, 3, 4]
    docs = [doc((i, 0), common + [10, 11, 12]) for i in range(3)] + [doc((9, 0), common + [20, 21, 22])]
    index = SuffixIndex.build(docs)
    cand = index.lookup(common, 8)
    assert cand.tokens == [10, 11, 12] and cand.probs == pytest.approx([0.75, 0.75, 0.75])
    assert index.lookup(common, 8, min_token_prob=0.8).tokens == []  # the majority is not sure enough


def test_draft_length_follows_the_match_length_as_max_spec_factor_says():
    index = SuffixIndex.build([doc((1, 1), list(range(100, 140)))])
    assert len(index.lookup([100, 101, 102, 103], 30).tokens) == 4  # factor 1.0: as long as the match
    assert len(index.lookup([100, 101, 102, 103], 30, max_spec_factor=2.5).tokens) == 10
    assert len(index.lookup(list(range(100, 120)), 8, max_spec_factor=4.0).tokens) == 8  # the cap asked for


def test_a_draft_never_runs_past_its_document():
    index = SuffixIndex.build([doc((1, 1), [1, 2, 3, 4, 5]), doc((1, 2), [6, 7, 8, 9, 10])])
    assert index.lookup([1, 2, 3, 4], 10, max_spec_factor=4.0).tokens == [5]
    # and a match never reaches back across the start of a document
    cand = index.lookup([4, 5, 6, 7, 8, 9], 10, max_spec_factor=4.0)
    assert cand.match_len == 4 and cand.tokens == [10]


def test_added_documents_are_found_without_a_resort_and_removed_ones_never_again():
    index = SuffixIndex.build([doc((1, 1), [1, 2, 3, 4, 5, 6])])
    index.add((2, 1), [40, 41, 42, 43, 44, 45])
    assert index.lookup([40, 41, 42, 43], 4).tokens == [44, 45]
    assert len(index) == 2 and index.n_tokens == 12
    assert index.remove((1, 1)) and not index.remove((1, 1))
    assert index.lookup([1, 2, 3, 4], 4) is None
    index.add((2, 2), [1, 2, 3, 4, 99])
    assert index.lookup([1, 2, 3, 4], 4).tokens == [99]
    assert index.remove_group(2) == 2 and len(index) == 0 and index.lookup([40, 41, 42, 43], 4) is None


def test_replacing_a_document_under_its_key_drops_the_old_text():
    index = SuffixIndex()
    index.add((1, 1), [1, 2, 3, 4, 5])
    index.add((1, 1), [1, 2, 3, 4, 6])
    assert index.lookup([1, 2, 3, 4], 4).tokens == [6] and len(index) == 1


def test_long_matches_are_found_past_the_most_frequent_short_ngram():
    """A 4-gram said hundreds of times (more than the candidates looked at) still leads to the one long copy:
    the order-12 table finds it first."""
    filler = [doc((i, 0), [1, 2, 3, 4, 7]) for i in range(600)]
    long_doc = doc((999, 0), list(range(200, 212)) + [1, 2, 3, 4, 8, 9])
    index = SuffixIndex.build([long_doc, *filler], max_candidates=64)
    cand = index.lookup(list(range(200, 212)) + [1, 2, 3, 4], 2)
    assert cand.tokens == [8, 9] and cand.match_len == 16


def _doc_at_by_scan(index, position):
    """What doc_at must answer: the live document whose span holds ``position`` (the old linear scan)."""
    return next((k for k in index.keys() if index.span(k)[0] <= position < index.span(k)[1]), None)


def test_doc_at_names_the_right_document_after_adds_removes_replaces_compacts_and_a_load(tmp_path):
    rng = np.random.default_rng(7)
    index = SuffixIndex.build([doc((c, 1), rng.integers(0, 500, rng.integers(1, 40))) for c in range(400)])
    for c in range(400, 700):
        index.add((c, 1), rng.integers(0, 500, rng.integers(1, 40)))
    for c in range(0, 700, 3):
        index.remove((c, 1))
    for c in range(1, 700, 7):
        index.add((c, 1), rng.integers(0, 500, 5))  # a replaced document moves to the corpus's end

    def check(ix):
        probes = rng.integers(0, ix._n + 2, 3000).tolist() + [0, -1, ix._n]
        assert [ix.doc_at(p) for p in probes] == [_doc_at_by_scan(ix, p) for p in probes]
        assert sum(ix.doc_at(p) is not None for p in probes) > 1000  # most probes land in a live document

    check(index)
    index.compact()
    check(index)
    index.add((9999, 1), [1, 2, 3])
    path = tmp_path / "i.npz"
    index.save(path)
    check(SuffixIndex.load(path)[0])


class _NoScan(dict):
    """A document table that refuses to be walked: doc_at must find a document without visiting the others."""

    def _walked(self, *_a):
        raise AssertionError("doc_at walked every document")

    __iter__ = items = values = keys = _walked


def test_doc_at_does_not_walk_every_document():
    index = SuffixIndex.build([doc((c, 1), [c % 97, 5, 6, 7]) for c in range(10_000)])
    index.add((10_000, 1), [1, 2, 3])
    want = {p: _doc_at_by_scan(index, p) for p in (1, 2, 5 * 9_999 + 1, index.span((10_000, 1))[0])}
    index._docs = _NoScan(index._docs)
    assert {p: index.doc_at(p) for p in want} == want and want[1] == (0, 1) and None not in want.values()


def test_save_and_load_keep_every_document_and_merge_the_added_ones(tmp_path):
    index = SuffixIndex.build([doc((1, 1), [1, 2, 3, 4, 5, 6])])
    index.add((2, 7), [10, 11, 12, 13, 14], checksum=1234)
    index.remove((1, 1))
    path = tmp_path / "i.npz"
    index.save(path, {"fingerprint": "abc"})
    loaded, meta = SuffixIndex.load(path)
    assert meta == {"fingerprint": "abc"} and loaded.keys() == [(2, 7)] and loaded.checksum((2, 7)) == 1234
    assert loaded.lookup([10, 11, 12, 13], 4).tokens == [14]
    assert loaded.lookup([1, 2, 3, 4], 4) is None
    assert loaded.nbytes() > 0


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip", "empty"])
def test_a_damaged_file_is_one_clear_error(tmp_path, damage):
    path = tmp_path / "i.npz"
    SuffixIndex.build([doc((1, 1), list(range(50)))]).save(path)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"not an index at all")
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # one byte of the corpus changed: the checksum says so
        arr = dict(np.load(path))
        arr["corpus"] = arr["corpus"].copy()
        arr["corpus"][5] += 1
        with open(path, "wb") as f:
            np.savez(f, **arr)
    with pytest.raises(CorruptIndexError) as err:
        SuffixIndex.load(path)
    assert "\n" not in str(err.value)


def test_a_file_of_other_orders_is_stale(tmp_path):
    path = tmp_path / "i.npz"
    SuffixIndex.build([doc((1, 1), list(range(50)))], orders=(6, 3)).save(path)
    with pytest.raises(CorruptIndexError, match="other n-gram orders"):
        SuffixIndex.load(path)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="non-negative"):
        SuffixIndex().add((1, 1), [1, -5, 2])
    with pytest.raises(ValueError, match="orders"):
        SuffixIndex(orders=(0,))


# -- the drafter -----------------------------------------------------------------------------------------------
def test_suffix_is_a_free_drafter_kind_with_the_ngram_cap():
    assert DRAFTER_KINDS[SUFFIX].free and DRAFTER_KINDS[SUFFIX].k_cap == DRAFTER_KINDS[NGRAM].k_cap
    assert SuffixDrafter.kind == SUFFIX and SuffixDrafter.k_cap == DRAFTER_KINDS[SUFFIX].k_cap


def test_the_drafter_copies_from_the_history_when_its_match_is_longer():
    reply = list(range(300, 340))
    index = SuffixIndex.build([doc((5, 11), [1000, 1001] + reply)])
    d = SuffixDrafter(index, max_spec_factor=2.0)
    context = [1, 2, 3, 4, 5, 6] + reply[:10]  # this conversation never said it; the history did
    out = d.draft(context, 16, GREEDY, RNG)
    assert out.tokens == reply[10:26] and d.last_source == "history" and d.source() == "history (5, 11)"
    assert d.time_one_token(1) == 0.0


def test_the_drafter_stays_with_the_conversation_when_its_match_is_longer():
    index = SuffixIndex.build([doc((5, 11), [20, 21, 22, 23, 90, 91])])
    d = SuffixDrafter(index)
    context = [10, 11, 20, 21, 22, 23, 24, 25, 26, 27, 5, 10, 11, 20, 21, 22, 23]
    assert d.lookup(context, 3) == [24, 25, 26] and d.last_source == "conversation"


def test_without_an_index_it_drafts_like_ngram():
    from specchat.engine.drafters import NgramDrafter

    context = [7, 8, 9, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4]
    builds = [None, lambda: None]  # no corpus, or one still building
    for corpus in builds:
        d = SuffixDrafter(corpus)
        assert d.lookup(context, 4) == NgramDrafter().lookup(context, 4) == [5, 6, 1, 2]


def test_an_empty_history_is_not_looked_up(monkeypatch: pytest.MonkeyPatch):
    """Nothing saved yet (a new data dir, the bench's default suite): the drafter drafts like n-gram without asking
    the empty index anything each round (its lookups, the rename scan and the saved-reply check cost ~20 us a round
    for nothing, on a 12 ms row)."""
    from specchat.engine.drafters import NgramDrafter

    index = SuffixIndex()

    def asked(*_args: object, **_kw: object) -> None:
        raise AssertionError("the empty index was asked")

    for name in ("lookup", "renames", "reply_after"):
        monkeypatch.setattr(index, name, asked)
    context = [7, 8, 9, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4]
    assert SuffixDrafter(index).lookup(context, 4) == NgramDrafter().lookup(context, 4) == [5, 6, 1, 2]


def test_the_history_draft_stops_after_an_end_of_turn_token():
    index = SuffixIndex.build([doc((1, 1), [1, 2, 3, 4, 5, 2, 9, 9])])  # 2 plays end-of-turn
    d = SuffixDrafter(index, boundary=lambda t: t == 2, max_spec_factor=4.0)
    assert d.lookup([0, 1, 2, 3, 4], 10) == [5, 2]


def test_the_decoder_prices_and_bounds_the_suffix_drafter_like_ngram(tiny_target):
    """SpeculativeDecoder hands its n-gram drafters the measured verify cost and the target's end-of-turn test;
    the suffix drafter is one (a subclass), so it gets both with no change to the decoder."""
    from specchat.engine.controls import ControlState, Controls
    from specchat.engine.model import Model
    from specchat.engine.speculative import SpeculativeDecoder

    target = Model(tiny_target, n_ctx=256, n_batch=128, threads=1)
    drafter = SuffixDrafter(SuffixIndex())
    dec = SpeculativeDecoder(target, {SUFFIX: drafter}, Controls(ControlState(k=4)), drafter=SUFFIX)
    try:
        assert drafter.verify_cost is not None and drafter.boundary == target.is_eog
    finally:
        dec.close()


# -- renames: the history's text said otherwise -------------------------------------------------------------
# a saved reply: "def largest ( xs ) : return max ( xs ) # largest of xs <end>", the names as ids 7 (largest) and
# 8 (average) and the words around them as ids 100..
SAVED = [98, 99, 100, 101, 102, 7, 103, 104, 105, 106, 107, 108, 7, 109, 110, 111, 112]
RENAMED = [98, 99, 100, 101, 102, 8, 103, 104, 105, 106, 107, 108]  # the same task with another name


def test_renames_finds_the_text_the_context_says_otherwise_where_the_match_resumes():
    index = SuffixIndex.build([doc((1, 1), SAVED)])
    found = index.renames(RENAMED, 0)
    assert [(r.old, r.new) for r in found] == [((7,), (8,))]
    assert found[0].anchor >= 3 and SAVED[found[0].position - 1] == 7
    assert index.renames(SAVED[:12], 0) == []  # the same text: nothing renamed
    assert index.renames([1, 2, 3, 4, 8, 103, 104, 105, 106, 107], 0) == []  # nothing agrees before the change
    assert index.occurs([7, 103]) and not index.occurs([8, 103]) and index.occurs([])


def _renames_by_walking(index, tokens, start, max_gap, anchor, max_anchor=16):
    """What ``SuffixIndex.renames`` answers, spelled out one position and one pair of gap lengths at a time (its
    docstring as code, the reference its vectorised comparison is held to)."""
    from specchat.engine.suffix import SEP

    buf, n, found = index._buf[: index._n].tolist(), index.orders[-1], {}
    for q in range(max(start, n + anchor + 2), len(tokens) + 1):
        gram = tokens[q - n : q]
        for p in range(n + 2, len(buf)):  # p: the corpus token after the n-gram (indexed n-grams have one)
            if buf[p - n : p] != gram or buf[p] == SEP or buf[p - n - 1] == tokens[q - n - 1]:
                continue  # not this n-gram, or the match does not start here
            a, b = q - n, p - n
            for total in range(2, 2 * max_gap + 1):
                hit = None
                for gx in range(max(1, total - max_gap), min(max_gap, total - 1) + 1):
                    gy = total - gx
                    ea, eb = a - gx, b - gy
                    if ea < anchor or eb < anchor + 1:
                        continue
                    new, old = tokens[ea:a], buf[eb:b]
                    if SEP in old or new == old:
                        continue
                    m = 0
                    while m < max_anchor and ea - m - 1 >= 0 and eb - m - 1 >= 0 and buf[eb - m - 1] == tokens[ea - m - 1]:
                        m += 1
                    if m >= anchor:
                        hit = (tuple(old), tuple(new), m)
                        break
                if hit is not None:
                    if hit[2] > found.get(hit[:2], 0):
                        found[hit[:2]] = hit[2]
                    break
    return found


@pytest.mark.parametrize("seed", range(40))
def test_renames_answers_as_the_walk_over_every_position_and_gap_does(seed):
    """Random small vocabularies (so n-grams recur and changes abound): the same (old, new) pairs with the same
    longest anchors as the reference walk, for several gap lengths and anchors, from the start and from a later
    position (the window ``renames`` copies), over built and incrementally added documents."""
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(3, 12))
    base = rng.integers(0, vocab, size=int(rng.integers(20, 90))).tolist()
    mutate = lambda: [t if rng.random() > 0.15 else int(rng.integers(0, vocab + 3)) for t in base]  # noqa: E731
    index = SuffixIndex.build([doc((j, 0), mutate()) for j in range(int(rng.integers(1, 3)))], orders=(4,))
    index.add((9, 9), mutate())
    context = mutate()
    for max_gap, anchor in ((1, 3), (2, 1), (4, 3), (4, 1)):
        for start in (0, len(context) // 2):
            got = {(r.old, r.new): r.anchor for r in index.renames(context, start, max_gap=max_gap, anchor=anchor)}
            assert got == _renames_by_walking(index, context, start, max_gap, anchor), (max_gap, anchor, start)


def test_the_drafter_copies_a_saved_reply_under_this_conversations_names():
    """The history's continuation says ``largest`` (7) where this conversation said ``average`` (8): the draft is
    the saved text renamed, matched back through the renamed span (longer than the plain match behind it)."""
    index = SuffixIndex.build([doc((5, 11), SAVED)])
    d = SuffixDrafter(index, max_spec_factor=2.0)
    out = d.draft(RENAMED, 5, GREEDY, RNG)
    assert out.tokens == [8, 109, 110, 111, 112] and d.last_source == "history"
    assert d.last_match_len > 6  # through the rename, back to the start of the task
    assert SuffixDrafter(index, max_spec_factor=2.0).lookup(SAVED[:12], 5) == [7, 109, 110, 111, 112]


def test_a_rename_the_target_keeps_refusing_is_dropped():
    """Each verify through a renamed span counts for the rename or against it; one that keeps failing (this
    conversation means something else by the text) is forgotten, and the drafts say the saved text again."""
    index = SuffixIndex.build([doc((5, 11), SAVED)])
    d = SuffixDrafter(index, max_spec_factor=2.0)
    context = list(RENAMED)
    for _ in range(2):
        assert d.draft(context, 5, GREEDY, RNG).tokens[0] == 8
        d.rollback(context + [42])  # the target wrote something else at the renamed token
    assert ((7,), (8,)) not in d._renames
    assert d.draft(context, 5, GREEDY, RNG).tokens[:1] != [8]


def test_a_rename_that_holds_is_kept():
    index = SuffixIndex.build([doc((5, 11), SAVED)])
    d = SuffixDrafter(index, max_spec_factor=2.0)
    for _ in range(4):
        draft = d.draft(RENAMED, 5, GREEDY, RNG).tokens
        d.rollback(RENAMED + draft)  # all kept
    assert d._renames[((7,), (8,))].held == 4 and d.draft(RENAMED, 5, GREEDY, RNG).tokens[0] == 8


def test_the_same_question_again_copies_the_saved_reply_as_saved():
    """A reply that lists records matches the saved list after every changed number, so "renames" (id 3 -> id 0,
    ...) are learned from the list itself; a saved continuation must not be renamed by them into text the history
    already has. Every history draft of the reply asked again is the saved text (fails with renames applied to it:
    1 of 72 drafts was)."""
    prompt = [1, 2, 3, 4]
    reply = [5, 6]
    for n in range(10):
        reply += [30, 31, 32, 100 + n, 33, 34, 200 + n % 3, 35, 36]  # {"id": n, "v": x},
    reply += [7, 8, 2]  # 2 ends the saved message
    d = SuffixDrafter(SuffixIndex.build([doc((1, 1), [*prompt, 2]), doc((1, 2), reply)]))
    drafts = []
    for cut in range(12, len(reply) - 4):
        out = d.lookup(prompt + reply[:cut], 16)
        if d.last_source == "history":
            drafts.append(out == reply[cut : cut + len(out)])
    assert d._renames and len(drafts) > 50 and all(drafts), f"{sum(drafts)} of {len(drafts)} drafts as saved"


QUESTION = [40, 41, 42, 43, 44, 45]  # a saved user message
ANSWER = [60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71]  # the reply saved after it
END = 2  # the end-of-turn token the conversation closes each message with
HEADER = [1, 9, 3]  # the chat template between a message's end and its reply (in no saved message)


@pytest.mark.parametrize("end", [None, END], ids=["saved-as-text", "saved-with-end-token"])
def test_reply_after_finds_the_saved_reply_to_the_same_message(end):
    closed = [] if end is None else [end]
    index = SuffixIndex.build([doc((1, 1), [50, 51, *closed]), doc((1, 2), [52, 53, *closed]),
                               doc((4, 7), QUESTION + closed), doc((4, 8), ANSWER + closed)])
    context = [5, 6, 7, *QUESTION]  # the system prompt and the message's template before it
    for r in range(1, 6):
        cand = index.reply_after(context, HEADER + ANSWER[:r], 64, end=END, max_spec_factor=4.0)
        assert cand.tokens == ANSWER[r:] + closed and cand.match_len == len(QUESTION) + r
        assert index.doc_at(cand.position) == (4, 8)
    assert index.reply_after(context, HEADER + ANSWER[:3], 4, end=END).tokens == ANSWER[3:7]  # the cap asked for
    assert len(index.reply_after(context, HEADER + ANSWER[:1], 64, end=END).tokens) == len(QUESTION) + 1  # factor 1
    # the plain lookup matches inside the reply only: nothing at its first tokens, the reply so far later
    assert index.lookup([*context, END, *HEADER, ANSWER[0]], 64) is None
    assert index.lookup([*context, END, *HEADER, *ANSWER[:5]], 64).match_len == 5


def test_reply_after_needs_the_whole_message_and_the_reply_as_saved():
    index = SuffixIndex.build([doc((4, 7), QUESTION), doc((4, 8), ANSWER)])
    assert index.reply_after(QUESTION, HEADER + ANSWER[:2], 64, end=END) is not None
    assert index.reply_after([99, 41, 42, 43, 44, 45], HEADER + ANSWER[:2], 64, end=END) is None  # another question
    assert index.reply_after([99, *QUESTION[2:]], HEADER + ANSWER[:2], 64, end=END) is None  # its end only
    assert index.reply_after(QUESTION, HEADER + [60, 99], 64, end=END) is None  # this reply went on otherwise
    assert index.reply_after(QUESTION, HEADER, 64, end=END) is None  # nothing of the reply yet: the header unknown
    assert index.reply_after(QUESTION[:-1], HEADER + ANSWER[:2], 64, end=END) is None  # not where the message ends
    with_end = SuffixIndex.build([doc((4, 7), [*QUESTION, END]), doc((4, 8), ANSWER)])
    assert with_end.reply_after(QUESTION, HEADER + ANSWER[:2], 64, end=END) is not None
    assert with_end.reply_after(QUESTION, HEADER + ANSWER[:2], 64, end=END + 1) is None  # another token after it
    other = SuffixIndex.build([doc((4, 7), QUESTION), doc((5, 1), ANSWER)])  # the next document is not its reply
    assert other.reply_after(QUESTION, HEADER + ANSWER[:2], 64, end=END) is None
    index.remove((4, 8))
    assert index.reply_after(QUESTION, HEADER + ANSWER[:2], 64, end=END) is None
    index.add((4, 9), ANSWER)  # a reply saved again later, not after its message: the lookup's, not this
    assert index.reply_after(QUESTION, HEADER + ANSWER[:2], 64, end=END) is None


def test_reply_after_scores_the_saved_answers_by_frequency_and_follows_the_newest_only():
    from specchat.engine.suffix import MAX_ANSWERS

    other = [60, 61, 62, 63, 90, 91, 92, 93]  # the same question answered otherwise once
    docs = [doc((1, 1), QUESTION), doc((1, 2), ANSWER), doc((2, 1), QUESTION), doc((2, 2), ANSWER),
            doc((3, 1), QUESTION), doc((3, 2), other)]
    cand = SuffixIndex.build(docs).reply_after(QUESTION, HEADER + ANSWER[:2], 64, end=END, max_spec_factor=4.0)
    assert cand.tokens[:2] == ANSWER[2:4] and cand.probs[:2] == [1.0, 1.0]  # all three agree so far
    assert cand.tokens[2:] == ANSWER[4:] and cand.probs[2] == pytest.approx(2 / 3)  # then two of three go on so
    many = [d for c in range(MAX_ANSWERS + 5) for d in (doc((c, 1), QUESTION), doc((c, 2), other if c < 5 else ANSWER))]
    cand = SuffixIndex.build(many).reply_after(QUESTION, HEADER + ANSWER[:4], 64, end=END, max_spec_factor=4.0)
    assert cand.occurrences == MAX_ANSWERS and cand.probs[0] == 1.0  # the five old other answers not looked at


def test_the_same_question_asked_again_drafts_its_saved_reply_from_the_first_token():
    """Asked again, the reply's first tokens match inside the saved reply only (1, 2, 3 ... tokens: no draft, or a
    short one); the message above them matches the saved one whole, so the saved reply is a sure match from the
    start (:data:`specchat.engine.suffix_drafter.ANSWERED`), and a drafter that has learned nothing yet proposes
    several tokens of it at the reply's first round. Fails without ``SuffixIndex.reply_after``: no history draft."""
    from specchat.engine.suffix_drafter import ANSWERED

    index = SuffixIndex.build([doc((4, 7), QUESTION), doc((4, 8), ANSWER)])  # saved as the app saves them: text
    d = SuffixDrafter(index, boundary=lambda t: t == END)
    context = [5, 6, END, 7, *QUESTION, END, *HEADER, ANSWER[0]]
    out = d.draft(context, 16, GREEDY, RNG)
    assert d.last_source == "history" and d.last_kind == ANSWERED and d.source() == "history (4, 8)"
    assert len(out.tokens) >= 3 and out.tokens == ANSWER[1 : 1 + len(out.tokens)]
    # a reply that leaves the saved one is not followed back to its start
    d.rollback(context + out.tokens)
    gone = [*context, *out.tokens, 99, 98, 97, 96, 95, 94, 93, 92, 91]
    d.lookup(gone, 16)
    assert d.last_kind != ANSWERED


def test_another_conversation_forgets_this_ones_renames():
    index = SuffixIndex.build([doc((5, 11), SAVED)])
    d = SuffixDrafter(index, max_spec_factor=2.0)
    d.draft(RENAMED, 5, GREEDY, RNG)
    assert d._renames
    d.reset()
    assert not d._renames and d.lookup(SAVED[:12], 5)[:1] == [7]


# -- exactness on the bundled model ---------------------------------------------------------------------------
@pytest.mark.slow
def test_suffix_copies_an_earlier_tasks_reply_under_the_new_names_on_the_bundled_model(bundled_model):
    """The bench's history family on the real bundled model: the reply to ``average_price`` saved (its prompt and
    reply, tokenised as the history corpus does), then ``largest_weight`` asked. The drafter learns what the new
    task calls otherwise, copies the saved reply under the new names (drafts that held through a rename), and
    the greedy ids are plain decoding's (up to a near-tie, where a batch's logits may part from one row's on some
    CPUs). Fixed K: no CPU's costs decide what is drafted."""
    from enginekit import VerifiedRows, assert_same_greedy_reply_up_to_near_ties, build_decoder, pieces

    from specchat.bench.history_suite import task
    from specchat.engine.chat import ChatSession
    from specchat.race import NEAR_TIE

    dec = build_decoder(bundled_model, drafter="suffix", k=16, n_ctx=2048)
    rows = VerifiedRows(dec.target)
    try:
        session = ChatSession(dec, n_predict=160)
        dec.controls.set_speculative(False)
        earlier = "".join(p.text for p in pieces(session.send(task(0))))
        session.reset()
        rows.take()
        plain = [p.token for p in pieces(session.send(task(1)))]
        runs = [(rows.take(), len(dec.target.tokens) - len(plain) + 1, plain)]
        target, end = dec.target, dec.target.eos
        drafter = dec.drafters["suffix"]
        drafter.corpus = SuffixIndex.build([((1, 1), [*target.tokenize(task(0)), end], 0),
                                            ((1, 2), [*target.tokenize(earlier), end], 0)])
        session.reset()
        dec.controls.set_speculative(True)
        events = list(session.send(task(1)))
        reply = [p.token for p in pieces(events) if p.kind != "rejected"]
        runs.append((rows.take(), len(dec.target.tokens) - len(reply) + 1, reply))
        assert_same_greedy_reply_up_to_near_ties(runs[0], runs[1], NEAR_TIE)
        text = lambda ids: "".join(map(target.token_text, ids))  # noqa: E731
        held = {(text(old), text(new)): r.held for (old, new), r in drafter._renames.items()}
        assert sum(held.values()) > 0, held
    finally:
        dec.close()


@pytest.mark.slow
@pytest.mark.usefixtures("isolated_config")
def test_the_same_question_asked_again_in_the_app_drafts_its_saved_reply_from_its_start(tmp_path):
    """The real bundled model and the app's own corpus (a history database, the index built by HistoryCorpus, which
    saves each message's text without an end token): a question's plain greedy reply saved, then the question asked
    again with ``draft = "suffix"``. The drafter's lookup once the reply's first token is sampled (the round before
    it looks up the prompt alone) finds the saved reply after the saved question
    (:data:`specchat.engine.suffix_drafter.ANSWERED`), the drafts copy it, and the ids are plain decoding's. A
    lookup is not priced, so no CPU's costs decide this."""
    from specchat.config import Settings
    from specchat.engine.events import Piece, Turn
    from specchat.engine.protocol import Message
    from specchat.engine.suffix_drafter import ANSWERED
    from specchat.history import HistoryStore
    from specchat.loading import load_engine, wait_for_history

    prompt = "Write a Python function that reverses a string."
    settings = Settings(target="bundled", draft="suffix", k=16, auto_k=False, n_predict=48, n_ctx=1024, threads=1,
                        data_dir=tmp_path)
    plain = load_engine(settings.model_copy(update={"draft": "none"}))
    try:
        events = list(plain.send(prompt))
        answer, ids = events[-1].text, [e.token for e in events if isinstance(e, Piece)]
    finally:
        plain.close()
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        conv = store.create_conversation("Reverse a string")
        store.append_message(conv, Message("user", prompt))
        store.append_message(conv, Message("assistant", answer))
    session = load_engine(settings)
    try:
        assert wait_for_history(session, 60) == []
        drafter = session.decoder.drafters["suffix"]
        saved = session.decoder.target.tokenize(answer, add_bos=False, special=False)
        seen: list[tuple[int, int, list[int]]] = []
        lookup = drafter.lookup

        def spy(context, k):
            out = lookup(context, k)
            seen.append((len(context), drafter.last_kind, out))
            return out

        drafter.lookup = spy
        events = list(session.send(prompt))
        turn = [e for e in events if isinstance(e, Turn)][-1]
        assert [e.token for e in events if isinstance(e, Piece) and e.kind != "rejected"] == ids
        n_prompt = seen[0][0]  # fixed K: every round looks up, the first with the prompt alone
        _n, kind, first = next(x for x in seen if x[0] == n_prompt + 1)
        assert kind == ANSWERED and first and first == saved[1 : 1 + len(first)], (kind, first, saved[:8])
        assert turn.accepted_by_origin.get("history", 0) > 0
    finally:
        session.close()


def _generate(capsys, data_dir: Path, prompt: str, *flags: str) -> dict:
    from specchat.cli import main

    rc = main(["--data-dir", str(data_dir), "generate", "--json", "--prompt", prompt, "--n-predict", "48", *flags])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


@pytest.mark.usefixtures("isolated_config")
def test_generate_draft_suffix_copies_saved_replies_and_equals_plain_decoding(capsys, tmp_path):
    """A few conversations saved (the bundled model's own greedy replies); asked again, ``--draft suffix`` drafts
    from them - more accepted than n-gram, which sees only this conversation - and the greedy ids are plain
    decoding's. The index is then on disk under <data dir>/suffix."""
    from specchat.engine.protocol import Message
    from specchat.history import HistoryStore

    data_dir = tmp_path / "d"
    prompts = ["Write a Python function that adds two numbers.", "Name three colours of the rainbow."]
    plain = {p: _generate(capsys, data_dir, p, "--draft", "none") for p in prompts}
    with HistoryStore(data_dir / "history.sqlite3") as store:
        for p in prompts:
            conv = store.create_conversation()
            store.append_message(conv, Message("user", p))
            store.append_message(conv, Message("assistant", plain[p]["text"]))
    for p in prompts:
        ngram = _generate(capsys, data_dir, p, "--draft", "ngram", "--k", "16")
        spec = _generate(capsys, data_dir, p, "--draft", "suffix", "--k", "16")
        assert spec["tokens"] == plain[p]["tokens"]
        assert spec["draft_n_accepted"] > ngram["draft_n_accepted"]
    assert list((data_dir / "suffix").glob("*.npz"))


@pytest.mark.usefixtures("isolated_config")
def test_loading_gives_the_suffix_drafter_the_history_unless_the_setting_turns_it_off(tiny_target, tmp_path):
    from specchat.config import Settings
    from specchat.engine.model import Model
    from specchat.history.corpus import HistoryCorpus
    from specchat.loading import suffix_drafter, tokenizer_fingerprint

    target = Model(tiny_target, n_ctx=256, n_batch=128, threads=1)
    try:
        off = suffix_drafter(Settings(data_dir=tmp_path, suffix={"corpus": False}), target)
        assert off.corpus is None and off.index() is None
        on = suffix_drafter(Settings(data_dir=tmp_path, suffix={"exclude": [7]}), target)
        assert isinstance(on.corpus, HistoryCorpus) and on.corpus.exclude == {7}
        assert on.corpus.wait(10) and len(on.index()) == 0  # no history yet: an empty index
        on.close()  # saves it, per tokenizer
        assert (tmp_path / "suffix" / f"{tokenizer_fingerprint(target)[:32]}.npz").is_file()
    finally:
        target.close()


def test_suffix_resolves_as_a_free_drafter_with_the_configured_target():
    from specchat.models.registry import resolve_pair

    pair = resolve_pair("bundled", "suffix")
    assert pair.drafter == SUFFIX and pair.draft is None
    assert resolve_pair("bundled", " Suffix ").drafter == SUFFIX


def test_a_huge_draft_request_is_held_to_the_longest_continuation_kept():
    from specchat.engine.suffix import MAX_DRAFT

    index = SuffixIndex()
    index.add((1, 1), list(range(5000)))
    cand = index.lookup(list(range(2000)), 10**6, max_spec_factor=16.0)
    assert cand.tokens == list(range(2000, 2000 + MAX_DRAFT))


def test_pricing_a_history_continuation_stops_early_only_where_nothing_longer_could_be_worth_more(monkeypatch):
    """As the n-gram drafter's (``test_ngram.py``): a history continuation's probabilities are cumulative, so the
    bound on what a longer draft can be worth holds, and stopping there gives the length and worth of pricing
    every position."""
    import random

    from specchat.engine.suffix_drafter import HISTORY

    rng = random.Random(23)
    stopped_early = 0
    for _ in range(2000):
        table = [1.0]
        for _ in range(rng.randint(1, 65)):
            table.append(max(0.5, table[-1] + rng.choice([rng.uniform(0.0, 1.5), rng.uniform(-0.5, 0.5)])))
        d = SuffixDrafter(None, verify_cost=lambda table=table: table)
        for b in range(len(d.BUCKETS)):
            d._n[HISTORY][b] = rng.uniform(0.5, 40.0)
            d._acc[HISTORY][b] = d._n[HISTORY][b] * rng.choice([rng.random(), 0.99, 1.0])
        probs, p = [], 1.0
        for _ in range(rng.randint(1, 64)):
            p *= rng.choice([1.0, 1.0, rng.random()])
            probs.append(p)
        args = (rng.randint(1, 70), rng.randint(0, 70), probs)
        got = d._history_length(*args)
        priced = len(d.last_survival)
        with monkeypatch.context() as m:
            m.setattr(d, "_cheapest", lambda t: [0.0] * len(t))
            assert d._history_length(*args) == got, args
            stopped_early += priced < len(d.last_survival)
    assert stopped_early > 100
