"""GGUF validation (specchat.engine.gguf) and the tiny test models themselves (tests/tinymodels.py)."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import numpy as np
import pytest


def _llama(path: Path, **kw) -> llama_cpp.Llama:
    return llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=1, n_threads_batch=1, verbose=False, **kw)


PROMPTS = ["Hello there", "Write a python function that adds two numbers.", "Once upon a time"]


def _greedy_with_margins(model: llama_cpp.Llama, prompt: str, n: int) -> tuple[list[int], list[int], list[float]]:
    toks = model.tokenize(prompt.encode(), add_bos=False, special=True)
    model.reset()
    model.eval(toks)
    gen, margins = [], []
    for _ in range(n):
        logits = np.array(model.scores[model.n_tokens - 1])
        top2 = np.partition(logits, -2)[-2:]
        margins.append(float(top2[1] - top2[0]))
        gen.append(int(logits.argmax()))
        model.eval([gen[-1]])
    return toks, gen, margins


class TestTinyModels:
    def test_tiny_target_loads_tokenizes_and_decodes(self, tiny_target, bundled_model):
        tiny = _llama(tiny_target)
        real = _llama(bundled_model, vocab_only=True)
        text = "Hello, world! Ünïcode 🙂 <|im_start|>"
        assert tiny.tokenize(text.encode(), special=True) == real.tokenize(text.encode(), special=True)
        assert tiny.n_vocab() == real.n_vocab() == 49152
        toks = tiny.tokenize(b"Hello there", add_bos=False)
        tiny.eval(toks)
        assert np.isfinite(np.array(tiny.scores[len(toks) - 1])).all()
        assert tiny.detokenize(toks) == b"Hello there"
        assert tiny.metadata["tokenizer.chat_template"] == real.metadata["tokenizer.chat_template"]

    def test_target_logits_are_peaked_and_draft_agrees_often_but_not_always(self, tiny_target, tiny_draft, tiny_draft_far):
        target = _llama(tiny_target, logits_all=True)
        contexts, margins = [], []
        for prompt in PROMPTS:
            toks, gen, m = _greedy_with_margins(target, prompt, 40)
            contexts.append((toks, gen))
            margins += m
        margins = np.array(margins)
        assert (margins > 0.5).mean() > 0.9
        assert np.median(margins) > 5.0

        def agreement(path: Path) -> float:
            draft = _llama(path, logits_all=True)
            hits = []
            for toks, gen in contexts:
                draft.reset()
                draft.eval(toks + gen)
                hits += [int(np.argmax(draft.scores[len(toks) - 1 + i])) == g for i, g in enumerate(gen)]
            return float(np.mean(hits))

        near, far = agreement(tiny_draft), agreement(tiny_draft_far)
        assert 0.3 <= near <= 0.85, near
        assert far < near and far < 0.3, far
