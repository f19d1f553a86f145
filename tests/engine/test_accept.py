"""The exactness rule alone (:func:`specchat.engine.sampling.accept`), on numpy arrays: no model.

Greedy: the longest argmax-matching prefix and the target's argmax after it. Stochastic: the emitted tokens
follow the target's warped p (chi-square), whatever q proposed, at every position a round reaches. The same
rule on real GGUF models is tested in test_speculative.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from specchat.engine.controls import SamplingParams
from specchat.engine.sampling import accept, sample, warp

GREEDY = SamplingParams(temperature=0.0)
VOCAB = 7


def rows_with_argmax(ids: list[int], vocab: int = VOCAB) -> np.ndarray:
    """Logits whose row j has its maximum at ``ids[j]`` (float32, like the engine's copy of llama.cpp's rows)."""
    rng = np.random.default_rng(len(ids))
    out = rng.normal(size=(len(ids), vocab)).astype(np.float32)
    for j, t in enumerate(ids):
        out[j, t] = out[j].max() + 1.0
    return out


@pytest.mark.parametrize(
    "argmax, draft, expected",
    [
        ([3, 1, 4, 1], [3, 1, 4], (3, 1)),  # all kept: the bonus is the argmax of the last row
        ([3, 1, 4, 1], [3, 5, 4], (1, 1)),  # the first mismatch ends it: the correction is row 1's argmax
        ([3, 1, 4, 1], [2, 1, 4], (0, 3)),  # rejected at once: a plain round's token
        ([6], [], (0, 6)),  # no draft: one plain decode
    ],
)
def test_greedy_keeps_the_argmax_prefix_and_adds_the_targets_token(argmax, draft, expected):
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    assert accept(rows_with_argmax(argmax), draft, None, GREEDY, rng) == expected
    assert rng.bit_generator.state == before  # greedy draws nothing


def _p_value(samples: list[int], probs: np.ndarray) -> float:
    """Chi-square p-value of ``samples`` against ``probs``; every sample must be in the support."""
    support = np.flatnonzero(probs > 0)
    counts = np.bincount(samples, minlength=probs.shape[0])
    assert counts[probs == 0].sum() == 0, "a token outside the target's support was emitted"
    return float(stats.chisquare(counts[support], probs[support] * len(samples)).pvalue)


@pytest.mark.parametrize("top_k, top_p", [(0, 1.0), (4, 0.9)])
@pytest.mark.parametrize("drafter", ["model", "deterministic"])
def test_stochastic_accept_emits_the_targets_distribution(top_k, top_p, drafter):
    """A 2-token draft: the first emitted token follows p0; given d1 was kept, the next follows p1; given
    both were kept, the bonus follows p2 - for a sampled draft with its q, and for a fixed draft (q one-hot)."""
    sp = SamplingParams(temperature=1.0, top_k=top_k, top_p=top_p)
    gen = np.random.default_rng(42)
    target = gen.normal(scale=1.5, size=(3, VOCAB))
    p = [warp(row, sp) for row in target]
    q = [warp(row + gen.normal(scale=1.0, size=VOCAB), sp) for row in target[:2]]  # a draft near the target
    rng = np.random.default_rng(7)
    first: list[int] = []
    second: list[int] = []  # given the first draft token was kept
    bonus: list[int] = []  # given both were kept
    n = 12_000
    for _ in range(n):
        if drafter == "model":
            draft = [sample(q[0], rng), sample(q[1], rng)]
            qs = q
        else:
            draft = [int(np.argmax(q[0])), int(np.argmax(q[1]))]
            qs = None
        a, final = accept(target, draft, qs, sp, rng)
        emitted = [*draft[:a], final]
        first.append(emitted[0])
        if a >= 1:
            second.append(emitted[1])
        if a == 2:
            bonus.append(final)
    assert len(second) > n // 10 and len(bonus) > n // 50, "the draft must be kept often enough to test later positions"
    assert len(first) - len(second) > n // 10, "and rejected often enough to exercise residual sampling"
    assert _p_value(first, p[0]) > 0.001
    assert _p_value(second, p[1]) > 0.001
    assert _p_value(bonus, p[2]) > 0.001


def test_stochastic_accept_is_reproducible_from_the_seed():
    sp = SamplingParams(temperature=0.8, top_k=5, top_p=0.95)
    logits = np.random.default_rng(1).normal(size=(4, VOCAB))
    q = [warp(row, sp) for row in logits[:3]]

    def run(seed: int) -> list[tuple[int, int]]:
        rng = np.random.default_rng(seed)
        return [accept(logits, [1, 2, 3], q, sp, rng) for _ in range(50)]

    assert run(3) == run(3)
    assert run(3) != run(4)
