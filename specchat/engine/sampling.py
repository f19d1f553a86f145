"""Warping and exact speculative sampling.

- :func:`warp` turns logits into the sampling distribution: temperature, then top-k, then top-p
  (nucleus), as llama.cpp's default sampler chain orders them. p (target) and q (draft) must be warped
  the same way for rejection sampling to be exact.
- :func:`accept_or_resample` is the acceptance rule of Leviathan et al. 2023 ("Fast Inference from
  Transformers via Speculative Decoding", Alg. 1) and Chen et al. 2023 ("Accelerating LLM Decoding with
  Speculative Sampling"): accept draft token d with probability min(1, p(d)/q(d)); on rejection sample
  from max(0, p - q) renormalised over the full vocabulary. With a one-hot q (a deterministic drafter:
  n-gram, or a greedy draft model) this is "accept with probability p(d), else sample p with d removed",
  llama.cpp's sample-and-match in distribution. At temperature 0 everything reduces to argmax matching.
"""

from __future__ import annotations

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
