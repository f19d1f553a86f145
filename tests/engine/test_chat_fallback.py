"""A model without a chat template (issue 9): the fallback format's turn markers end the reply.

The tiny model is made to write a marker deterministically: one run of a template-less tiny GGUF gives its
greedy reply ids; a second file with the *same weights* stores the text ``"\\n\\n###"`` and ``" User:"`` for two
consecutive ids of that reply (tokens the prompt does not use, so the prompt's ids are unchanged, which the
test checks). The same ids then spell a ``### User:`` line, split over two tokens, on the real decode loop.
"""

from __future__ import annotations

import pytest

from enginekit import build_decoder, pieces, session_turn
from specchat.engine.chat import FALLBACK_STOPS, ChatSession, _partial_stop_at

PROMPT = "Hi"
# GPT-2 byte-level BPE stores a space as "\u0120" and a newline as "\u010a"
MARKER_TOKENS = ("\u010a\u010a###", "\u0120User:")


def _session(path, drafter="ngram"):
    dec = build_decoder(path, None, k=3, drafter=drafter, speculative=drafter != "none")
    return ChatSession(dec, n_predict=24)


@pytest.fixture(scope="module")
def no_template(make_tiny_gguf):
    return make_tiny_gguf(seed=3, metadata_overrides={"tokenizer.chat_template": None}, name="tiny-no-template")


def test_a_template_less_model_uses_the_fallback_and_says_so(no_template):
    session = _session(no_template)
    try:
        assert session.info().chat_template is False
        assert session.template.stop_strings == FALLBACK_STOPS
        _, events = session_turn(session, PROMPT)
        assert any("no chat template" in getattr(e, "message", "") for e in events)
    finally:
        session.close()


@pytest.mark.parametrize("drafter", ["ngram", "none"])
def test_the_reply_ends_before_a_turn_marker_the_model_writes(make_tiny_gguf, no_template, drafter):
    plain = _session(no_template, drafter)
    try:
        prompt_ids = plain.template.tokens(_user(PROMPT))
        free, _ = session_turn(plain, PROMPT)
    finally:
        plain.close()
    ids = free.tokens
    assert free.stop_reason == "length" and len(ids) == 24  # left alone, it runs on
    # two consecutive, distinct reply ids the prompt does not use, not at the very start
    at = next(i for i in range(2, len(ids) - 1)
              if ids[i] != ids[i + 1] and not {ids[i], ids[i + 1]} & set(prompt_ids) and ids[i] not in ids[:i]
              and ids[i + 1] not in ids[:i])
    marked = make_tiny_gguf(
        seed=3, metadata_overrides={"tokenizer.chat_template": None}, name="tiny-no-template-marker",
        token_overrides={ids[at]: MARKER_TOKENS[0], ids[at + 1]: MARKER_TOKENS[1]},
    )
    session = _session(marked, drafter)
    try:
        assert session.template.tokens(_user(PROMPT)) == prompt_ids  # same prompt ids, same weights
        turn, events = session_turn(session, PROMPT)
    finally:
        session.close()
    assert turn.stop_reason == "stop"
    assert turn.tokens == ids[:at] and turn.predicted_n == at
    kept = [p for p in pieces(events) if p.kind != "rejected"]
    assert "".join(p.text for p in kept) == turn.text
    assert [p.token for p in kept] == turn.tokens
    assert "#" not in turn.text and "User:" not in turn.text  # no part of the marker was shown or kept
    assert session.messages[-1].content == turn.text and not session.messages[-1].stopped


def _user(text):
    from specchat.engine.protocol import Message

    return [Message("user", text)]


def test_partial_marker_detection():
    stops = FALLBACK_STOPS
    assert _partial_stop_at("hello\n\n###", stops) == len("hello\n\n")
    assert _partial_stop_at("hello ### Us", stops) == len("hello ")
    assert _partial_stop_at("hello", stops) == len("hello")
    assert _partial_stop_at("a #", stops) == 2
