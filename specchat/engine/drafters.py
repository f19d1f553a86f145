"""Drafters: who proposes the K tokens the target verifies.

All drafters share one protocol (like llama.cpp's ``common_speculative_impl`` with its
``draft``/``accept`` steps in ``common/speculative.cpp``):

- :meth:`Drafter.draft` gets the full committed context (every token the target has committed, plus
  the last sampled token that is not yet in the target's KV) and proposes up to ``k`` tokens;
- :meth:`Drafter.rollback` gets the committed tokens after verification so a drafter with a KV cache
  drops the rows the target rejected.

:class:`ModelDrafter` runs a second GGUF with its own context; :class:`NgramDrafter` is prompt-lookup
decoding (Saxena 2023; llama.cpp ``ngram-simple``/``lookup``; HF ``PromptLookupCandidateGenerator``):
no model, drafts are the continuation of the most recent earlier occurrence of the longest matching
suffix.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from specchat.engine.controls import SamplingParams
from specchat.engine.model import Model
from specchat.engine.sampling import sample, warp


@dataclass(slots=True)
class Draft:
    """A proposal: ``tokens`` and, for a stochastic model draft, the warped q of each token."""

    tokens: list[int] = field(default_factory=list)
    q: list[np.ndarray] | None = None  # None = deterministic drafter (q one-hot at each token)
    t_ms: float = 0.0  # wall time of the draft call
    decode_ms: float = 0.0  # of which inside llama_decode


class Drafter(Protocol):
    name: str
    #: True when drafting costs (about) nothing next to a target decode (no model is run)
    free: bool

    def draft(self, context: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator) -> Draft: ...

    def rollback(self, committed: Sequence[int]) -> None: ...

    def reset(self) -> None: ...

    def close(self) -> None: ...


class ModelDrafter:
    """A small draft model with its own llama.cpp context.

    Its KV follows the committed tokens by longest common prefix (the reuse scheme of llama.cpp's
    ``common_speculative_use_draft_model`` before 2026): each call decodes only the tokens the draft
    KV is missing, then drafts one token per decode. At temperature 0 it drafts the argmax; at T > 0
    it samples from its warped distribution q and returns q for exact rejection sampling.
    """

    free = False

    def __init__(self, model: Model, name: str | None = None) -> None:
        self.model = model
        self.name = name or model.name

    def draft(self, context: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator) -> Draft:
        t0 = time.perf_counter()
        d0 = self.model.decode_ms_total
        out = Draft(q=[] if sampling.temperature > 0 else None)
        if k <= 0 or not context:
            return out
        model = self.model
        room = model.n_ctx - len(context)
        k = min(k, room)
        if k <= 0:
            return out
        keep = min(model.sync_prefix(context), len(context) - 1)
        model.trim(keep)
        logits = model.decode(context[keep:], logits_last=1)[0]
        for i in range(k):
            if sampling.temperature > 0:
                q = warp(logits, sampling)
                tok = sample(q, rng)
                out.q.append(q)
            else:
                tok = int(np.argmax(logits))
            out.tokens.append(tok)
            if model.is_eog(tok) or i == k - 1:
                break
            logits = model.decode([tok], logits_last=1)[0]
        out.decode_ms = model.decode_ms_total - d0
        out.t_ms = (time.perf_counter() - t0) * 1000.0
        return out

    def rollback(self, committed: Sequence[int]) -> None:
        """Drop draft rows the target rejected: keep the common prefix with the committed tokens."""
        self.model.sync_prefix(committed)

    def reset(self) -> None:
        self.model.clear()

    def close(self) -> None:
        self.model.close()


class NgramDrafter:
    """Prompt-lookup drafting over the prompt and everything generated so far.

    For n from ``max_n`` down to ``min_n``, look up the last n tokens of the context in an index of
    every earlier n-gram (kept incrementally: O(max_n) dict updates per new token) and propose the
    tokens that followed its most recent earlier occurrence. No match, no draft: the step becomes a
    plain decode and costs nothing extra.
    """

    free = True

    def __init__(self, min_n: int = 1, max_n: int = 4, name: str = "ngram") -> None:
        if not (1 <= min_n <= max_n):
            raise ValueError(f"ngram sizes must satisfy 1 <= min_n <= max_n, got {min_n}..{max_n}")
        self.min_n = min_n
        self.max_n = max_n
        self.name = name
        self.reset()

    def reset(self) -> None:
        self._tokens: list[int] = []
        # n -> {ngram tuple: end position (index of the token that followed it)}
        self._index: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(self.min_n, self.max_n + 1)}

    def _extend_index(self, context: Sequence[int]) -> None:
        have = len(self._tokens)
        if have > len(context) or list(context[:have]) != self._tokens:
            self.reset()
            have = 0
        self._tokens.extend(context[have:])
        toks = self._tokens
        # index n-grams ending at e (exclusive) for every e < len: they all have a continuation token
        for e in range(max(have, 1), len(toks)):
            for n, idx in self._index.items():
                if e >= n:
                    idx[tuple(toks[e - n : e])] = e

    def lookup(self, context: Sequence[int], k: int) -> list[int]:
        """The continuation (up to k tokens) of the longest suffix match, or []."""
        self._extend_index(context)
        toks = self._tokens
        L = len(toks)
        for n in range(self.max_n, self.min_n - 1, -1):
            if L < n + 1:
                continue
            e = self._index[n].get(tuple(toks[L - n :]))
            if e is not None and e < L:
                return toks[e : min(e + k, L)]
        return []

    def draft(self, context: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator) -> Draft:
        t0 = time.perf_counter()
        tokens = self.lookup(context, k) if k > 0 else []
        return Draft(tokens=list(tokens), q=None, t_ms=(time.perf_counter() - t0) * 1000.0)

    def rollback(self, committed: Sequence[int]) -> None:
        """Nothing to undo: the index only ever holds committed tokens."""

    def close(self) -> None:
        pass
