"""Recurrent targets (issue 2): a model whose KV cannot be partly removed is refused for speculation with a
clear message, and still works with speculation off. Real llama.cpp on a tiny Mamba GGUF
(:mod:`recurrentmodel`), no mocks.

What llama.cpp (vendored in llama-cpp-python 0.3.36) does: ``llama_memory_recurrent::seq_rm`` keeps one state
per sequence, so removing positions ``p0..`` with ``0 < p0 <= pos_max`` succeeds only as a rollback through
per-token state snapshots, of which a context keeps ``n_rs_seq`` (``llama_context_params.n_rs_seq``, default 0,
and clamped to 0 for architectures without rollback support, Mamba among them). With none it returns False;
removing everything (``p0 = 0``) succeeds.
"""

from __future__ import annotations


import llama_cpp
import numpy as np
import pytest

from recurrentmodel import write_tiny_mamba_gguf
from specchat.cli import main
from specchat.config import Settings
from specchat.engine.chat import ChatSession
from specchat.engine.events import EngineError, Piece, PromptDone, Turn
from specchat.loading import load_engine
from specchat.engine.model import Model
from specchat.errors import UserError

N_CTX = 256


@pytest.fixture(scope="session")
def tiny_mamba(tmp_path_factory):
    return write_tiny_mamba_gguf(tmp_path_factory.mktemp("recurrent") / "tiny-mamba.gguf", name="tiny-mamba")


@pytest.fixture()
def mamba(tiny_mamba):
    m = Model(tiny_mamba, n_ctx=N_CTX, n_batch=512, threads=1)
    yield m
    m.close()


def settings(target, draft, **kw) -> Settings:
    return Settings(target=str(target), draft=str(draft), threads=1, n_ctx=N_CTX, n_predict=8, **kw)


def turn_of(events) -> Turn:
    errors = [e for e in events if isinstance(e, EngineError)]
    assert not errors, errors
    turns = [e for e in events if isinstance(e, Turn)]
    assert len(turns) == 1, events[-3:]
    return turns[0]


def assert_plain(turn: Turn, events) -> None:
    assert turn.predicted_n > 0
    assert turn.draft_n == 0 and turn.draft_n_accepted == 0
    assert set(turn.kinds) == {"plain"}
    assert {p.kind for p in events if isinstance(p, Piece)} == {"plain"}


# -- the model itself -------------------------------------------------------------------------------
def test_llama_cpp_loads_the_tiny_mamba_as_a_recurrent_model(mamba):
    assert mamba.meta("general.architecture") == "mamba"
    assert llama_cpp.llama_model_is_recurrent(mamba.model)
    assert not llama_cpp.llama_model_is_hybrid(mamba.model)
    assert mamba.is_recurrent
    assert llama_cpp.llama_n_rs_seq(mamba.ctx) == 0  # no rollback snapshots: partial removal must fail
    assert mamba.n_vocab == 49152 and mamba.chat_template  # the SmolLM2 tokenizer and template


def test_decode_carries_the_recurrent_state_across_calls(mamba, tiny_mamba):
    toks = mamba.tokenize("The quick brown fox jumps over the lazy dog", add_bos=False)
    whole = mamba.decode(toks, logits_last=1)[0]
    assert np.isfinite(whole).all()
    assert mamba.tokens == toks and mamba.kv_pos_max() == len(toks) - 1
    # the same tokens as a 3-token batch, then one token per decode (the plain generation path)
    other = Model(tiny_mamba, n_ctx=N_CTX, n_batch=512, threads=1)
    try:
        other.decode(toks[:3], logits_last=0)
        for t in toks[3:]:
            last = other.decode([t], logits_last=1)[0]
    finally:
        other.close()
    assert int(np.argmax(last)) == int(np.argmax(whole))
    # measured: max |diff| ~1e-4 with logits up to ~400; dropping one token from the state moves them by ~26
    np.testing.assert_allclose(last, whole, rtol=0, atol=1e-4 * float(np.abs(whole).max()))


def test_trim_to_a_middle_position_is_refused_and_leaves_the_state_intact(mamba, tiny_mamba):
    toks = mamba.tokenize("What is 2+2?", add_bos=False)
    assert len(toks) >= 4
    mamba.decode(toks, logits_last=0)
    # llama.cpp's own answer for a partial removal of a recurrent state
    assert not llama_cpp.llama_memory_seq_rm(mamba.mem, 0, 2, -1)
    assert not llama_cpp.llama_memory_seq_rm(mamba.mem, 0, len(toks) - 1, -1)
    with pytest.raises(UserError) as err:
        mamba.trim(2)
    msg = str(err.value)
    assert "\n" not in msg and "recurrent/hybrid" in msg and "--draft none" in msg and mamba.name in msg
    # nothing was removed: the state still holds every token and continues exactly where it was
    assert mamba.tokens == toks and mamba.kv_pos_max() == len(toks) - 1
    mamba.trim(len(toks))  # keeping everything is a no-op, not an error
    nxt = mamba.tokenize(" The answer", add_bos=False)
    cont = mamba.decode(nxt, logits_last=1)[0]
    fresh = Model(tiny_mamba, n_ctx=N_CTX, n_batch=512, threads=1)
    try:
        ref = fresh.decode(toks + nxt, logits_last=1)[0]
    finally:
        fresh.close()
    assert int(np.argmax(cont)) == int(np.argmax(ref))


def test_a_diverging_context_starts_the_recurrent_state_over(mamba):
    toks = mamba.tokenize("def fib(n):", add_bos=False)
    mamba.decode(toks, logits_last=0)
    # a shared prefix cannot be kept (that would need a partial removal): sync_prefix clears everything
    assert mamba.sync_prefix(toks[:2] + [toks[2] + 1]) == 0
    assert mamba.tokens == [] and mamba.kv_pos_max() == -1
    # a context that extends the state keeps all of it
    mamba.decode(toks, logits_last=0)
    assert mamba.sync_prefix(toks + [5, 6]) == len(toks) and mamba.tokens == toks
    # removing everything is what llama.cpp allows
    assert llama_cpp.llama_memory_seq_rm(mamba.mem, 0, 0, -1)
    assert mamba.kv_pos_max() == -1


# -- the loader -------------------------------------------------------------------------------------
@pytest.mark.parametrize("draft_kind", ["same-file", "llama-draft"])
def test_a_draft_model_for_a_recurrent_target_is_refused_in_one_line(tiny_mamba, tiny_target, draft_kind):
    draft = tiny_mamba if draft_kind == "same-file" else tiny_target  # the llama draft shares the tokenizer
    with pytest.raises(UserError) as err:
        load_engine(settings(tiny_mamba, draft))
    msg = str(err.value)
    assert "\n" not in msg
    assert "recurrent/hybrid" in msg and "--draft none" in msg and "tiny-mamba.gguf" in msg


def test_the_ngram_default_falls_back_to_plain_decoding_over_several_turns(tiny_mamba):
    session = load_engine(settings(tiny_mamba, "ngram"))
    try:
        info = session.info()
        assert info.can_speculate is False
        assert info.note and "recurrent" in info.note and "tiny-mamba.gguf" in info.note
        assert info.draft_name == "none"
        assert session.controls.snapshot().speculative is False

        ev1 = list(session.send("Hello there"))
        turn1 = turn_of(ev1)
        assert_plain(turn1, ev1)
        kv_after_1 = list(session.decoder.target.tokens)

        # turn 2 extends the conversation: the recurrent state continues, only the new message is decoded
        ev2 = list(session.send("And again, please."))
        turn2 = turn_of(ev2)
        assert_plain(turn2, ev2)
        prompt2 = next(e for e in ev2 if isinstance(e, PromptDone))
        assert prompt2.cached_n == len(kv_after_1) > 0
        assert turn2.prompt_n == len(session.template.tokens(session.messages[:-1])) - len(kv_after_1)

        # turning speculation back on does not make the engine speculate on a recurrent target
        session.controls.set_drafter("ngram")
        session.controls.set_speculative(True)
        session.controls.set_auto_k(False)
        session.controls.set_k(4)
        ev3 = list(session.send("Repeat: Hello there. Hello there. Hello there."))
        assert_plain(turn_of(ev3), ev3)

        # regenerating the last reply diverges from the state: the engine starts over, same greedy reply
        turn3 = turn_of(ev3)
        ev4 = list(session.regenerate())
        turn4 = turn_of(ev4)
        assert_plain(turn4, ev4)
        assert next(e for e in ev4 if isinstance(e, PromptDone)).cached_n == 0
        assert turn4.tokens == turn3.tokens
    finally:
        session.close()

    # the continued state gave the same reply as decoding the whole conversation from scratch
    fresh = load_engine(settings(tiny_mamba, "ngram"))
    try:
        fresh.load(session.messages[:2])
        ev = list(fresh.send("And again, please."))
        assert next(e for e in ev if isinstance(e, PromptDone)).cached_n == 0
        assert turn_of(ev).tokens == turn2.tokens
    finally:
        fresh.close()


def test_regenerate_after_a_one_token_reply(tiny_mamba):
    session = load_engine(Settings(target=str(tiny_mamba), draft="ngram", threads=1, n_ctx=N_CTX, n_predict=1))
    try:
        first = turn_of(list(session.send("hi")))
        assert first.predicted_n == 1
        again = turn_of(list(session.regenerate()))
        assert again.tokens == first.tokens
    finally:
        session.close()


def test_a_recurrent_draft_for_a_transformer_target_is_refused(tiny_mamba, tiny_target):
    with pytest.raises(UserError, match="recurrent/hybrid") as exc:
        load_engine(Settings(target=str(tiny_target), draft=str(tiny_mamba), threads=1, n_ctx=N_CTX, n_predict=4))
    assert "\n" not in str(exc.value)


# -- the command line -------------------------------------------------------------------------------
@pytest.mark.parametrize("draft", [["--draft", "none"], []], ids=["draft-none", "default-ngram"])
def test_generate_runs_a_recurrent_target_with_speculation_off(capsys, isolated_config, tiny_mamba, draft):
    rc = main(["generate", "--target", str(tiny_mamba), *draft, "--prompt", "hi", "--n-predict", "4", "--raw",
               "--threads", "1", "--n-ctx", str(N_CTX)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.strip()
    assert "Traceback" not in err


def test_generate_refuses_a_draft_model_for_a_recurrent_target(capsys, isolated_config, tiny_mamba):
    rc = main(["generate", "--target", str(tiny_mamba), "--draft", str(tiny_mamba), "--prompt", "hi",
               "--n-predict", "4", "--raw", "--threads", "1", "--n-ctx", str(N_CTX)])
    out, err = capsys.readouterr()
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("specchat: error: ") and "recurrent/hybrid" in lines[0] and "--draft none" in lines[0]
    assert out == ""


def test_chat_session_on_a_recurrent_target_reports_it_cannot_speculate(tiny_mamba):
    session = load_engine(settings(tiny_mamba, "none"))
    try:
        assert isinstance(session, ChatSession)
        info = session.info()
        assert info.can_speculate is False and info.note
        ev = list(session.raw("The meaning of life is"))
        assert_plain(turn_of(ev), ev)
    finally:
        session.close()
