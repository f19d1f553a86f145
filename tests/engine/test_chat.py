"""Conversations on the real engine: template rendering, multi-turn KV reuse on target and draft,
context overflow, regenerate, edit-and-resend, stop mid-reply, the per-token text of a reply (detokenize_pieces)."""

from __future__ import annotations

import pytest

from enginekit import TINY_NEAR_TIE, VerifiedRows, assert_same_greedy_reply_up_to_near_ties, build_decoder, session_turn
from specchat.engine.chat import ChatSession
from specchat.engine.events import ContextTrimmed, EngineError, Piece, PromptDone, Step, Turn
from specchat.errors import UserError


@pytest.fixture()
def session(tiny_pair):
    target, draft = tiny_pair
    dec = build_decoder(target, draft, k=3)
    s = ChatSession(dec, system_prompt="You are terse.", n_predict=24)
    yield s
    s.close()


def test_template_renders_with_the_models_own_chat_template(session):
    toks = session.template.tokens(session.messages + [type(session.messages[0])("user", "hi")])
    text = b"".join(session.decoder.target.piece(t) for t in toks).decode()
    # control tokens render as b"" in pieces; the plain text of the ChatML turns remains
    assert "system\nYou are terse." in text and "user\nhi" in text and text.endswith("assistant\n")


def test_second_turn_decodes_only_new_tokens_on_target_and_draft(session):
    turn1, ev1 = session_turn(session, "Say something about cats.")
    prompt1 = next(e for e in ev1 if isinstance(e, PromptDone))
    assert prompt1.cached_n == 0
    target = session.decoder.target
    draft = session.decoder.drafters["model"].model
    kv_before = len(target.tokens)
    turn2, ev2 = session_turn(session, "And dogs?")
    prompt2 = next(e for e in ev2 if isinstance(e, PromptDone))
    # the cache kept everything of turn 1 that is still valid; only the new message was decoded
    assert prompt2.cached_n == kv_before
    assert turn2.prompt_n == prompt2.prompt_n
    new_msg_tokens = len(session.template.tokens(session.messages[:-1])) - kv_before
    assert turn2.prompt_n == new_msg_tokens
    assert turn2.prompt_n < 20 < turn1.prompt_n
    # the exact generated ids of reply 1 are in the conversation tokens (never re-tokenized)
    conv = session.template.tokens(session.messages)
    assert conv[len(conv) - len(turn2.tokens) - 5 :] != []  # sanity
    reply1 = session.messages[2].tokens
    assert reply1 == turn1.tokens
    joined = session.template.tokens(session.messages[:3])
    assert joined[prompt1.prompt_n : prompt1.prompt_n + len(reply1)] == reply1
    # the draft model followed: its KV is a prefix of the target's committed tokens
    assert draft.tokens == target.tokens[: len(draft.tokens)]
    assert len(draft.tokens) > kv_before


def test_regenerate_rolls_back_the_last_reply_and_reuses_the_prompt(session):
    rows = VerifiedRows(session.decoder.target)
    turn1, _ = session_turn(session, "Tell me a story.")
    rows1 = rows.take()
    n_msgs = len(session.messages)
    events = list(session.regenerate())
    turn = next(e for e in events if isinstance(e, Turn))
    prompt = next(e for e in events if isinstance(e, PromptDone))
    assert len(session.messages) == n_msgs
    assert session.messages[-1].tokens == turn.tokens
    assert prompt.prompt_n == 1  # only the last prompt token is re-fed; the rest is cached
    # greedy: the same reply again, each token the argmax of the logits it was verified with; the regenerated
    # prompt is one single-row decode on the cache where turn 1 decoded it in one batch, so the two may part
    # only at a near-tie of batch-size numerics (specchat.engine.chat, "Greedy replies and batch sizes")
    start = len(session.template.tokens(session.messages[:-1]))
    assert_same_greedy_reply_up_to_near_ties(
        (rows1, start, turn1.tokens), (rows.take(), start, turn.tokens), TINY_NEAR_TIE
    )


def test_edit_last_replaces_the_user_message_and_drops_the_reply(session):
    session_turn(session, "Tell me about the sea.")
    events = list(session.edit_last("Tell me about mountains."))
    assert isinstance(events[-1], Turn)
    roles = [m.role for m in session.messages]
    assert roles == ["system", "user", "assistant"]
    assert session.messages[1].content == "Tell me about mountains."


def test_stop_mid_reply_keeps_the_partial_reply_marked_stopped(session):
    session.n_predict = 200
    gen = session.send("Write a long poem.")
    n_steps = 0
    for ev in gen:
        if isinstance(ev, Step):
            n_steps += 1
            if n_steps == 3:
                session.controls.request_stop()
        if isinstance(ev, Turn):
            turn = ev
    assert turn.stop_reason == "stopped"
    msg = session.messages[-1]
    assert msg.role == "assistant" and msg.stopped and msg.tokens == turn.tokens and msg.tokens
    # the next turn works and reuses the cache
    turn2, ev2 = session_turn(session, "Thanks.")
    assert next(e for e in ev2 if isinstance(e, PromptDone)).cached_n > 0
    assert not session.messages[-1].stopped


def test_context_overflow_drops_oldest_turns_but_keeps_the_system_prompt(tiny_pair):
    target, draft = tiny_pair
    dec = build_decoder(target, draft, k=3, n_ctx=256)
    s = ChatSession(dec, system_prompt="System prompt stays.", n_predict=16)
    try:
        trimmed = []
        for i in range(8):
            events = list(s.send(f"Message number {i}: " + "please remember this sentence. " * 3))
            trimmed += [e for e in events if isinstance(e, ContextTrimmed)]
            assert isinstance(events[-1], Turn)
        assert trimmed, "the conversation must have overflowed n_ctx=256"
        assert all(t.n_ctx == 256 for t in trimmed)
        visible = s._visible()
        assert visible[0].role == "system" and visible[0].content == "System prompt stays."
        assert visible[1].role == "user"
        assert len(visible) < len(s.messages)  # history keeps everything, the model sees a window
        assert len(dec.target.tokens) <= 256
    finally:
        s.close()


def test_a_message_longer_than_the_context_is_a_clear_error(tiny_pair):
    target, draft = tiny_pair
    dec = build_decoder(target, draft, k=3, n_ctx=128)
    s = ChatSession(dec, n_predict=16)
    try:
        with pytest.raises(UserError, match="too long"):
            list(s.send("word " * 400))
    finally:
        s.close()


def test_pieces_never_include_the_end_of_generation_token(session):
    turn, events = session_turn(session, "Hi")
    eos = session.decoder.target.eos
    assert eos not in turn.tokens
    assert all(p.token != eos for p in events if isinstance(p, Piece) and p.kind != "rejected")
    assert not any(isinstance(e, EngineError) for e in events)


def test_turn_text_is_the_concatenation_of_non_rejected_pieces(session):
    turn, events = session_turn(session, "Count to ten.")
    text = "".join(p.text for p in events if isinstance(p, Piece) and p.kind != "rejected")
    assert text == turn.text
    assert len(turn.kinds) == len(turn.tokens) == turn.predicted_n


@pytest.mark.parametrize("prompt", ["Count to ten.", "héllo wörld 日本語 🙂"])
def test_detokenize_pieces_of_a_reply_gives_back_its_streamed_pieces(session, prompt):
    turn, events = session_turn(session, prompt)
    streamed = [p.text for p in events if isinstance(p, Piece) and p.kind != "rejected"]
    assert turn.tokens and len(streamed) == len(turn.tokens)
    # an unfinished character at the end is flushed into the turn's text, not streamed as a piece:
    # detokenize_pieces puts it on the last token, so its pieces join to the saved reply
    tail = turn.text[len("".join(streamed)):]
    assert session.detokenize_pieces(turn.tokens) == [*streamed[:-1], streamed[-1] + tail]
    assert "".join(session.detokenize_pieces(session.messages[-1].tokens)) == session.messages[-1].content


def test_detokenize_pieces_puts_a_split_character_on_the_token_that_completes_it(session):
    from specchat.engine.detokenize import PieceDecoder

    target = session.decoder.target
    ids = target.tokenize("日本語 🙂 ok", add_bos=False, special=False)
    raw = [target.piece(t) for t in ids]
    assert any(not _is_utf8(b) for b in raw), "this tokenizer no longer splits these characters"
    pieces = session.detokenize_pieces(ids)
    assert "".join(pieces) == "日本語 🙂 ok"
    # every piece is what the bytes up to its token complete, nothing more
    for i in range(len(ids)):
        done = b"".join(raw[: i + 1]).decode("utf-8", errors="ignore")
        assert "".join(pieces[: i + 1]) == done
    assert "" in pieces  # the first bytes of a split character give no text yet
    cut = ids[: next(i for i in range(1, len(ids)) if not _is_utf8(b"".join(raw[:i])))]  # ends mid-character
    assert session.detokenize_pieces(cut)[-1].endswith("\ufffd")
    # the stream decoder the speculative loop uses: the same pieces, one token at a time
    stream = PieceDecoder(target.piece)
    assert [stream.decode(t) for t in ids] == pieces and stream.finish() == ""
    with pytest.raises(ValueError, match="not in the vocabulary"):
        session.detokenize_pieces([ids[0], target.n_vocab])


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
