"""Sampling, and the exactness rule of speculative decoding: which draft tokens the target keeps.

- :func:`warp` turns logits into the sampling distribution: temperature, then top-k, then top-p
  (nucleus), as llama.cpp's default sampler chain orders them. p (target) and q (draft) must be warped
  the same way for rejection sampling to be exact.
- :func:`accept_or_resample` is the acceptance rule of Leviathan et al. 2023 ("Fast Inference from
  Transformers via Speculative Decoding", Alg. 1) and Chen et al. 2023 ("Accelerating LLM Decoding with
  Speculative Sampling") at one draft position: accept draft token d with probability min(1, p(d)/q(d));
  on rejection sample from max(0, p - q) renormalised over the full vocabulary. With a one-hot q (a
  deterministic drafter: n-gram, or a greedy draft model) this is "accept with probability p(d), else
  sample p with d removed", llama.cpp's sample-and-match in distribution.
- :func:`accept` applies it to a whole verified draft - the README's claim that speculation changes the
  speed and never the text ("How the engine works"). At temperature 0 everything reduces to argmax
  matching.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specchat.engine.controls import SamplingParams


def warp(logits: np.ndarray, sp: SamplingParams) -> np.ndarray:
    """Probabilities over the full vocabulary after temperature, top-k and top-p (zeros elsewhere).

    Requires ``sp.temperature > 0`` (temperature 0 is argmax, handled by the callers).
    """
    x = logits.astype(np.float64, copy=False) / sp.temperature
    n = x.shape[0]
    if 0 < sp.top_k < n:
        idx = np.argpartition(x, n - sp.top_k)[n - sp.top_k :]
    else:
        idx = np.arange(n)
    vals = x[idx]
    vals = np.exp(vals - vals.max())
    vals /= vals.sum()
    if sp.top_p < 1.0:
        order = np.argsort(-vals, kind="stable")
        cum = np.cumsum(vals[order])
        # keep the smallest prefix whose mass reaches top_p (always at least one token)
        n_keep = int(np.searchsorted(cum, sp.top_p, side="left")) + 1
        keep = order[:n_keep]
        idx = idx[keep]
        vals = vals[keep]
        vals /= vals.sum()
    probs = np.zeros(n, dtype=np.float64)
    probs[idx] = vals
    return probs


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Inverse-CDF sampling of one token from a normalised distribution."""
    cdf = np.cumsum(probs)
    u = rng.random() * cdf[-1]
    return int(min(np.searchsorted(cdf, u, side="right"), probs.shape[0] - 1))


def accept_or_resample(
    p: np.ndarray, q: np.ndarray | None, draft_token: int, rng: np.random.Generator
) -> tuple[bool, int]:
    """One position of exact speculative sampling.

    ``q`` is the draft's warped distribution, or None for a deterministic drafter (q one-hot at
    ``draft_token``). Returns ``(True, draft_token)`` on acceptance, else ``(False, token)`` with the
    token sampled from the residual ``max(0, p - q) / sum(max(0, p - q))``; if the residual is empty
    (p == q) it samples from p.
    """
    pd = float(p[draft_token])
    qd = 1.0 if q is None else float(q[draft_token])
    if qd <= 0.0:  # cannot happen for a token sampled from q; treat as a certain rejection
        ratio = 0.0
    else:
        ratio = pd / qd
    if ratio >= 1.0 or rng.random() < ratio:
        return True, draft_token
    if q is None:
        residual = p.copy()
        residual[draft_token] = 0.0
    else:
        residual = np.maximum(p - q, 0.0)
    total = residual.sum()
    if total <= 0.0:
        return False, sample(p, rng)
    return False, sample(residual / total, rng)


def accept(
    logits: np.ndarray,
    draft: Sequence[int],
    q: Sequence[np.ndarray] | None,
    sampling: SamplingParams,
    rng: np.random.Generator,
) -> tuple[int, int]:
    """One round's verdict on a draft: ``(n_accepted, final)``.

    ``logits`` are the target's m + 1 rows of the verify batch ``[last, *draft]``: row j predicts the
    token after the batch's j-th token, so row 0 judges ``draft[0]`` and row m is the bonus position.
    ``q`` holds the draft's warped distribution of each draft token (None or empty: a deterministic
    drafter, q one-hot). ``draft[:n_accepted]`` is kept and ``final`` follows it: the target's own token
    at the first rejection (the correction), or its extra token after a fully accepted draft (the bonus).

    * temperature 0: ``draft[j]`` is kept while it equals the argmax of row j; ``final`` is the argmax of
      the first row not matched. Every emitted token is the argmax of the logits it was verified with.
    * T > 0 (Leviathan et al. 2023, Alg. 1; Chen et al. 2023): :func:`accept_or_resample` position by
      position, stopping at the first rejection, whose resampled token is ``final``; after a fully accepted
      draft ``final`` is sampled from row m. The emitted tokens then follow the target's warped
      distribution exactly, whatever the draft proposed.
    """
    m = len(draft)
    if sampling.temperature <= 0:
        return accept_argmax(logits.argmax(axis=1), draft)
    for i in range(m):
        ok, token = accept_or_resample(warp(logits[i], sampling), q[i] if q else None, draft[i], rng)
        if not ok:
            return i, token
    return m, sample(warp(logits[m], sampling), rng)


def accept_argmax(best: Sequence[int] | np.ndarray, draft: Sequence[int]) -> tuple[int, int]:
    """:func:`accept` at temperature 0 from the rows' argmax ``best`` (``best[j]`` of row j, m + 1 of them):
    ``draft[j]`` is kept while it equals ``best[j]``, and ``final`` is the argmax of the first row not matched."""
    m = len(draft)
    a = 0
    while a < m and int(best[a]) == draft[a]:
        a += 1
    return a, int(best[a])
