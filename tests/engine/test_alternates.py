"""Regenerate keeps the previous reply as an alternate (issue 11): the versions of a reply, choosing which one the
conversation continues from, and the caches following the choice. Tiny GGUFs (the model does not matter)."""

from __future__ import annotations

import pytest

from enginekit import VerifiedRows, argmax_violations, build_decoder
from specchat.engine.chat import ChatSession
from specchat.engine.controls import SamplingParams
from specchat.engine.events import EngineError, PromptDone, Turn
from specchat.engine.protocol import Message
from specchat.errors import UserError


def test_versions_and_choosing_one() -> None:
    a, b, c = (Message("assistant", x, tokens=[i]) for i, x in enumerate("abc"))
    two = a.with_new_version(b)
    assert (two.content, two.alternate_index, [m.content for m in two.alternates]) == ("b", 1, ["a"])
    three = two.with_new_version(c)
    assert [m.content for m in three.versions()] == ["a", "b", "c"] and three.alternate_index == 2
    first = three.with_version(0)
    assert first.content == "a" and [m.content for m in first.versions()] == ["a", "b", "c"]
    assert all(not m.alternates for m in first.versions())
    with pytest.raises(IndexError):
        three.with_version(3)


@pytest.fixture()
def session(tiny_pair):
    target, draft = tiny_pair
    dec = build_decoder(target, draft, k=3)
    s = ChatSession(dec, system_prompt="You are terse.", n_predict=16)
    yield s
    s.close()


@pytest.fixture()
def flat_session(tiny_flat_pair):
    """A target whose softmax at T = 1 is spread out: a regenerated reply differs from the first."""
    target, draft = tiny_flat_pair
    s = ChatSession(build_decoder(target, draft, k=3), system_prompt="You are terse.", n_predict=16)
    yield s
    s.close()


def test_regenerate_keeps_the_previous_reply_and_the_next_turn_extends_the_chosen_one(flat_session):
    session = flat_session
    target = session.decoder.target
    rows = VerifiedRows(target)
    list(session.send("Tell me about the sea."))
    first = session.messages[-1]
    # a different reply to the same message (sampled), as a user regenerating would get
    session.controls.set_sampling(SamplingParams(temperature=1.0, seed=3))
    events = list(session.regenerate())
    assert isinstance(events[-1], Turn)
    second = session.messages[-1]
    assert second.tokens != first.tokens
    assert [v.tokens for v in second.versions()] == [first.tokens, second.tokens] and second.alternate_index == 1
    assert len(session.messages) == 3  # system, user, the reply (with its alternate)
    assert second.alternates[0].stats is not None and second.alternates[0].stats.text == first.content

    # choose the first version: nothing is decoded now; the next turn extends exactly its tokens
    session.controls.set_sampling(SamplingParams())
    chosen = session.select_alternate(0)
    assert chosen.tokens == first.tokens and [v.tokens for v in chosen.versions()] == [first.tokens, second.tokens]
    rows.take()
    events = list(session.send("And the mountains?"))
    prompt = next(e for e in events if isinstance(e, PromptDone))
    turn = events[-1]
    context = session.template.tokens(session.messages[:-1])
    start = len(context)
    assert context[: len(session.template.tokens(session.messages[:2]))] == session.template.tokens(session.messages[:2])
    assert _contains(context, first.tokens) and not _contains(context, second.tokens)
    # the KV kept the common prefix (system + user, the part of the versions that agree), decoded the rest
    assert prompt.cached_n + prompt.prompt_n == len(context)
    assert target.tokens[: len(context) - 1] == context[:-1]
    assert argmax_violations(rows.take(), start, turn.tokens) == []  # greedy: each token its row's argmax


def _contains(seq: list[int], sub: list[int]) -> bool:
    return any(seq[i : i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


def test_choosing_a_version_needs_a_reply_and_a_version(session):
    with pytest.raises(UserError, match="does not end with a reply"):
        session.select_alternate(0)
    list(session.send("Hi."))
    assert session.select_alternate(0).content == session.messages[-1].content  # the only version
    with pytest.raises(UserError, match=r"has 1 version\(s\), numbered 0..0; 1 is not one"):
        session.select_alternate(1)


def test_a_failed_regenerate_keeps_the_previous_reply(session):
    list(session.send("Hi."))
    before = session.messages[-1]
    target = session.decoder.target
    real = target.decode

    def broken(*a, **kw):
        from specchat.engine.model import DecodeError

        raise DecodeError("simulated llama_decode failure")

    target.decode = broken
    try:
        events = list(session.regenerate())
    finally:
        target.decode = real
    assert isinstance(events[-1], EngineError)
    assert session.messages[-1] is before  # the reply is still there, and still the chosen one


def test_an_earlier_reply_keeps_its_versions_and_the_next_turn_extends_the_one_chosen_there(flat_session):
    """Issue 22: the versions of a reply flip after the chat went on. Choosing an earlier reply's other version
    decodes nothing; the next turn's prompt holds that version's exact ids at its place, the later messages
    after it as they were, and the KV keeps only the prefix before the place where the versions part."""
    session = flat_session
    target = session.decoder.target
    list(session.send("Tell me about the sea."))
    first = session.messages[-1]
    session.controls.set_sampling(SamplingParams(temperature=1.0, seed=3))
    list(session.regenerate())
    second = session.messages[-1]
    assert second.tokens != first.tokens
    session.controls.set_sampling(SamplingParams())
    list(session.send("And the mountains?"))
    place = len(session.messages) - 3  # the first reply: system, user, reply, user, reply
    assert session.messages[place].alternate_index == 1 and session.messages[place].tokens == second.tokens
    later = list(session.messages[place + 1 :])

    with pytest.raises(UserError, match="at message 1: it is not a reply"):
        session.select_alternate(0, at=1)  # a user message
    with pytest.raises(UserError, match=r"the reply at message 2 has 2 version\(s\), numbered 0..1; 2 is not one"):
        session.select_alternate(2, at=place)
    chosen = session.select_alternate(0, at=place)
    assert chosen.tokens == first.tokens and session.messages[place] is chosen
    assert [v.tokens for v in chosen.versions()] == [first.tokens, second.tokens]
    assert session.messages[place + 1 :] == later  # the messages after it stay as they are

    rows = VerifiedRows(target)
    events = list(session.send("And the rivers?"))
    prompt = next(e for e in events if isinstance(e, PromptDone))
    context = session.template.tokens(session.messages[:-1])
    assert _contains(context, first.tokens) and not _contains(context, second.tokens)
    assert all(_contains(context, m.tokens) for m in later if m.role == "assistant")
    # the KV kept only what comes before the versions part: system + user and the ids the versions share
    shared = next(i for i, (a, b) in enumerate(zip(first.tokens + [-1], second.tokens + [-2])) if a != b)
    at = next(i for i in range(len(context)) if context[i : i + len(first.tokens)] == first.tokens)
    assert prompt.cached_n <= at + shared and prompt.cached_n + prompt.prompt_n == len(context)
    assert target.tokens[: len(context) - 1] == context[:-1]
    assert argmax_violations(rows.take(), len(context), events[-1].tokens) == []
