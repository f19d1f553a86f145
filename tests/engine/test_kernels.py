"""Where the weights go and how batches are decoded: llama.cpp's extra buffer types (``repack``), one row at a
time where their multi-row kernels crash (this CPU's AMX), the thread split, and what ``repack = "auto"`` picks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from enginekit import N_BATCH, TINY_NEAR_TIE, build_decoder, pieces, plain_then_speculative, run_turn, steps
from specchat import loading
from specchat.engine.kernels import AMX_FORMATS
from specchat.engine.model import Model, extra_buffer_types_safe, system_info
from specchat.loading import repack_for

from tinymodels import GREEDY_PROMPTS

REPO = Path(__file__).resolve().parents[2]


def test_row_by_row_sends_only_one_row_batches_and_returns_the_same_logits(tiny_target, monkeypatch):
    """A model that decodes row by row hands llama.cpp only one-row batches, and the rows it returns are those
    of the batched decode (the same tokens at the same positions; CPU kernels differ by ~1e-3)."""
    batched = Model(tiny_target, n_ctx=256, n_batch=N_BATCH, threads=1, repack=False)
    rowwise = Model(tiny_target, n_ctx=256, n_batch=N_BATCH, threads=1, repack=False)
    rowwise.row_by_row = True  # what repack=True sets on a CPU whose multi-row AMX kernels crash
    sizes: list[int] = []
    real = llama_cpp.llama_decode

    def recording(ctx, batch):
        sizes.append(int(batch.n_tokens))
        return real(ctx, batch)

    try:
        tokens = batched.tokenize(GREEDY_PROMPTS[0] * 2, add_bos=True)[:40]
        want = batched.decode(tokens, logits_last=17)
        monkeypatch.setattr(llama_cpp, "llama_decode", recording)
        got = rowwise.decode(tokens, logits_last=17)
        assert sizes == [1] * len(tokens), "a multi-row batch reached llama_decode"
        assert got.shape == want.shape == (17, batched.n_vocab)
        # the kernels differ by ~1e-3 on an AMX Xeon and up to ~0.03 on an AVX2-only EPYC (this tiny model's
        # logits span ±150): the same rows within 1e-3 of their range, the same argmax wherever it is no near-tie
        span = float(np.abs(want).max())
        assert np.abs(got - want).max() <= 1e-3 * span
        top2 = np.sort(want, axis=1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > TINY_NEAR_TIE
        assert clear.any() and (got.argmax(1) == want.argmax(1))[clear].all()
        assert rowwise.tokens == batched.tokens == list(tokens)
        # a verify-like scratch batch leaves the KV as it was
        sizes.clear()
        rowwise.time_scratch_decode([tokens[-1]] * 9)
        assert sizes == [1] * 9 and rowwise.tokens == list(tokens) and rowwise.kv_pos_max() == len(tokens) - 1
    finally:
        batched.close()
        rowwise.close()


def test_repack_on_decodes_multi_row_batches_without_crashing_on_this_cpu(bundled_model):
    """In a subprocess (a segfault must not kill the suite): the bundled Q4_1 with llama.cpp's extra buffer
    types on decodes 17- and 65-row batches. On a CPU whose AMX batch kernels crash (this one: AMX_INT8 = 1)
    that only works because the model decodes them one row at a time; elsewhere the batches are real."""
    script = textwrap.dedent(f"""
        from specchat.engine.model import Model, extra_buffer_types_safe
        m = Model({str(bundled_model)!r}, n_ctx=512, n_batch=128, threads=1, repack=True)
        ctx = m.tokenize("<|im_start|>user\\nHello<|im_end|>\\n<|im_start|>assistant\\n")
        m.decode(ctx, logits_last=1)
        for rows in (2, 17, 65):
            out = m.decode([ctx[-1]] * rows, logits_last=rows)
            assert out.shape[0] == rows
            m.trim(len(ctx))
        print(m.repack, m.row_by_row, not extra_buffer_types_safe())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=str(REPO))
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    repack, row_by_row, amx_crashes = proc.stdout.split()
    assert repack == "True" and row_by_row == amx_crashes


def test_speculation_on_a_row_by_row_target_is_still_exact_and_costs_k_plus_1_rows(bundled_model):
    """The one-row-kernel target (repack on; row by row on this CPU) with n-gram drafts of up to 64 tokens:
    greedy output equals its own plain decoding, and every verify batch reached llama.cpp as single rows."""
    from specchat.bench.suite import DEFAULT_SUITE
    from specchat.engine.chat import ChatSession

    prompt = next(p["prompt"] for p in DEFAULT_SUITE if p["name"] == "copy-heavy")
    # the decoder wires the n-gram's turn boundary to its target's is_eog: the target is built with it (a target
    # swapped in afterwards left the drafter asking a freed vocabulary - a segfault once the pages were reused)
    dec = build_decoder(bundled_model, None, drafter="ngram", k=64, n_ctx=2048, repack=True)
    dec.target.row_by_row = True  # as on this CPU; forced so the test means the same on any CPU
    session = ChatSession(dec, n_predict=80)
    try:
        plain, events = plain_then_speculative(session, prompt)
        assert [p.token for p in pieces(events) if p.kind != "rejected"] == plain
        assert max(s.drafted for s in steps(events)) > 16
    finally:
        session.close()


@pytest.mark.parametrize(
    "setting, weights, speculates, safe, want",
    [
        ("on", "Q4_1", True, False, True),
        ("off", "Q4_1", False, False, False),
        ("auto", "Q4_1", False, True, None),  # llama.cpp's default where batches are safe
        ("auto", "Q4_1", True, True, None),
        ("auto", "Q4_1", False, False, True),  # plain decoding on an AMX format: the one-row kernels
        ("auto", "Q8_0", False, False, True),
        ("auto", "Q4_1", True, False, False),  # speculation needs batches: the plain kernels
        ("auto", "F16", False, False, False),  # no AMX kernels for F16: nothing to gain
    ],
)
def test_repack_auto_uses_one_row_kernels_only_where_they_pay(monkeypatch, setting, weights, speculates, safe, want):
    monkeypatch.setattr(loading, "extra_buffer_types_safe", lambda: safe)
    assert repack_for(setting, weights, speculates) is want


@pytest.mark.parametrize(
    "setting, safe, measured, want",
    [
        ("auto", True, "off", False),  # a tune of the file here found it faster without the extra buffer types
        ("auto", True, "auto", None),  # ... or not: llama.cpp's default
        ("auto", True, None, None),  # nothing measured
        ("on", True, "off", True),  # a setting the user chose is never overridden
        ("auto", False, "off", False),  # the one-row CPUs decide by their kernels, as before
    ],
)
def test_repack_auto_follows_a_measured_tune(monkeypatch, setting, safe, measured, want):
    monkeypatch.setattr(loading, "extra_buffer_types_safe", lambda: safe)
    assert repack_for(setting, "Q4_1", True, measured=measured) is want


def test_extra_buffer_types_follow_what_this_build_uses_on_this_cpu():
    assert extra_buffer_types_safe() == ("AMX_INT8 = 1" not in system_info())
    assert {"Q4_0", "Q4_1", "Q8_0"} <= AMX_FORMATS and "F16" not in AMX_FORMATS


def test_threads_and_threads_batch_reach_the_context(tiny_target):
    m = Model(tiny_target, n_ctx=128, n_batch=N_BATCH, threads=1, threads_batch=2)
    try:
        assert (m.threads, m.threads_batch) == (1, 2)
        assert (llama_cpp.llama_n_threads(m.ctx), llama_cpp.llama_n_threads_batch(m.ctx)) == (1, 2)
        m.set_threads(1, 1)
        assert llama_cpp.llama_n_threads_batch(m.ctx) == 1 and m.threads_batch == 1
    finally:
        m.close()


def test_loader_applies_threads_batch_and_the_repack_setting(tiny_target):
    from specchat.config import Settings
    from specchat.loading import load_engine

    s = load_engine(Settings(target=str(tiny_target), draft="none", threads=1, threads_batch=2, repack="off", n_ctx=128))
    try:
        t = s.decoder.target
        assert (t.threads, t.threads_batch, t.repack, t.row_by_row) == (1, 2, False, False)
        assert s.info().weights == t.weights == "F32"
    finally:
        s.close()


def test_run_turn_on_a_row_by_row_target_reports_plain_pieces(tiny_target):
    """Plain decoding on a row-by-row target: the reply equals the batched target's (one-row batches only)."""
    a = build_decoder(tiny_target, None, drafter="ngram", speculative=False)
    b = build_decoder(tiny_target, None, drafter="ngram", speculative=False)
    b.target.row_by_row = True
    try:
        ctx = a.target.tokenize(GREEDY_PROMPTS[1], add_bos=True)
        ta, _ = run_turn(a, ctx, 30)
        tb, _ = run_turn(b, ctx, 30)
        assert ta.tokens == tb.tokens
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(
    "draft, k, auto_k, one_row",
    [("none", 3, False, True), ("ngram", 0, False, True), ("ngram", 3, False, False), ("ngram", 0, True, False)],
)
def test_repack_auto_gives_the_one_row_kernels_to_sessions_that_do_not_speculate(monkeypatch, bundled_model, draft, k,
                                                                                 auto_k, one_row):
    """On a CPU whose AMX batches crash (simulated for the choice; the model itself checks the real CPU), the
    bundled Q4_1 gets llama.cpp's repacked layouts exactly when the session will not verify batches: no
    drafter, or a fixed K = 0."""
    from specchat.config import Settings
    from specchat.loading import load_engine

    monkeypatch.setattr(loading, "extra_buffer_types_safe", lambda: False)
    s = load_engine(Settings(target=str(bundled_model), draft=draft, k=k, auto_k=auto_k, threads=1, n_ctx=256))
    try:
        assert s.decoder.target.repack is one_row
    finally:
        s.close()


def test_a_closed_model_fails_in_python_and_never_reads_freed_memory(bundled_model):
    """In a subprocess (a regression segfaults): every call that reads a closed model's vocabulary or context - the
    n-gram's turn boundary (is_eog, bound to a target that was swapped out), a piece, tokenizing, a decode - raises
    ModelClosedError; an id the memo already holds still answers (it reads no memory of the model's)."""
    script = textwrap.dedent(f"""
        from specchat.engine.model import Model, ModelClosedError
        m = Model({str(bundled_model)!r}, n_ctx=256, n_batch=64, threads=1)
        seen = m.is_eog(m.eos)
        m.close()
        failed = []
        for call in (lambda: m.is_eog(5), lambda: m.piece(5), lambda: m.tokenize("hi"), lambda: m.decode([5]),
                     lambda: m.token_text(5)):
            try:
                call()
            except ModelClosedError:
                failed.append(True)
        print(len(failed), seen, m.is_eog(m.eos))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert proc.stdout.split() == ["5", "True", "True"]


def test_decode_hands_out_its_own_logits_rows_and_reads_them_where_llama_cpp_moved_them(tiny_target):
    """:meth:`Model.decode` reads llama.cpp's logits buffer through an array kept per address (``Model._logits``): the
    rows it returns are the ones llama.cpp's own pointer shows right after the decode, also after a decode that asks
    for more rows than the buffer held (llama.cpp moves it), and each returned array is a copy no later decode
    touches."""
    a = Model(tiny_target, n_ctx=256, n_batch=N_BATCH, threads=1, repack=False)
    b = Model(tiny_target, n_ctx=256, n_batch=N_BATCH, threads=1, repack=False)
    try:
        tokens = a.tokenize(" ".join(GREEDY_PROMPTS) * 4, add_bos=True)[:40]
        assert len(tokens) == 40
        got: list[np.ndarray] = []
        for part, rows in ((tokens[:10], 1), (tokens[10:11], 1), (tokens[11:40], 29), (tokens[:1], 1), (tokens[1:3], 2)):
            got.append(a.decode(part, logits_last=rows))
            b.decode(part, logits_last=rows)
            want = np.ctypeslib.as_array(llama_cpp.llama_get_logits(b.ctx), shape=(rows, b.n_vocab))
            assert np.array_equal(got[-1], want)  # the same tokens, batches and kernels: bit for bit
        first = a.decode(tokens[3:4], logits_last=1)
        assert not np.array_equal(first, got[3])  # another token's row: the check below can tell them apart
        b.clear()
        b.decode(tokens[:10], logits_last=1)
        assert np.array_equal(got[0], np.ctypeslib.as_array(llama_cpp.llama_get_logits(b.ctx), shape=(1, b.n_vocab)))
    finally:
        a.close()
        b.close()


def test_decode_asked_for_argmax_gives_each_rows_argmax_read_where_llama_cpp_wrote_it(tiny_target):
    """``Model.decode(argmax=True)`` - what a greedy verify and a greedy draft model read - is each requested row's
    argmax of the very rows a twin's decode returns (bit-identical batches), across a decode that moves llama.cpp's
    buffer, and after a decode of other tokens the ids follow the new rows, never a stale view; the row-by-row path
    (``row_by_row``) gives the same ids."""
    a = Model(tiny_target, n_ctx=256, n_batch=N_BATCH, threads=1, repack=False)
    b = Model(tiny_target, n_ctx=256, n_batch=N_BATCH, threads=1, repack=False)
    try:
        tokens = a.tokenize(" ".join(GREEDY_PROMPTS) * 4, add_bos=True)[:40]
        parts = ((tokens[:10], 1), (tokens[10:11], 1), (tokens[11:40], 29), (tokens[:1], 1), (tokens[1:3], 2))
        for part, rows in parts:
            if len(a.tokens) + len(part) > 40:
                a.clear()
                b.clear()
            ids = a.decode(part, logits_last=rows, argmax=True)
            want = b.decode(part, logits_last=rows)
            assert ids.shape == (rows,) and ids.tolist() == want.argmax(axis=1).tolist()
        assert len(set(a.decode(tokens[3:4], logits_last=1, argmax=True).tolist() + ids.tolist())) > 1
        b.clear()
        b.row_by_row = True  # as where the repacked layouts' multi-row kernels crash: one row per decode
        ids_rows = b.decode(tokens[:12], logits_last=5, argmax=True)
        b.clear()
        assert ids_rows.shape == (5,) and ids_rows.tolist() == b.decode(tokens[:12], logits_last=5).argmax(axis=1).tolist()
    finally:
        a.close()
        b.close()
