"""The ``suffix`` drafter: prompt lookup over this conversation, and a suffix index over every saved one (issue 23).

SuffixDecoding (Oliaro et al. 2024, arXiv:2411.04975; vLLM's ``suffix`` method, ArcticInference's
``SuffixDecodingCache``) drafts from two trees: one over the current request and a global one over earlier
responses, taking the longer match. Here the current conversation is the n-gram drafter's own index (so its
learned per-match-length acceptance, its verify-cost pricing and its end-of-turn boundary are the same code), and
the global tree is a :class:`specchat.engine.suffix.SuffixIndex` over the history, built and kept up to date by
:mod:`specchat.history.corpus` (the engine never opens the history itself).

Each round both are looked up (the conversation's match exact or substituted, as the n-gram drafter chooses);
the longer match wins, an equal one goes to the history when its first token's
frequency beats the share of this conversation's occurrences that agree. A history draft's length follows
SuffixDecoding: tokens whose frequency-estimated probability (the product of count ratios along the path) is at
least ``min_token_prob``, at most ``max_spec_factor`` × match length + ``max_spec_offset`` (ArcticInference's
defaults: 0.1, 1.0, 0.0). When the engine prices drafts by the measured verify cost (an auto-K round, the same
``verify_cost`` hook as :class:`~specchat.engine.drafters.NgramDrafter`), the length is the one with the most
expected tokens per unit of verify cost, position i counted as probs[i] × the learned P(a copy of match length
l + i is accepted). Exact like every drafter: the target verifies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from specchat.engine.drafter_kinds import DRAFTER_KINDS, SUFFIX
from specchat.engine.drafters import NEGLIGIBLE_SURVIVAL, PRICED_MIN_GAIN, NgramDrafter
from specchat.engine.events import DraftSource
from specchat.engine.suffix import SuffixIndex

#: where the latest draft came from
Source = Literal["none", "conversation", "history"]


class SuffixDrafter(NgramDrafter):
    """:class:`NgramDrafter` over the conversation plus a frequency-scored lookup in ``corpus`` (an index, or a
    callable returning the index once its background build is done, None before)."""

    kind = SUFFIX
    free = DRAFTER_KINDS[SUFFIX].free
    k_cap = DRAFTER_KINDS[SUFFIX].k_cap

    def __init__(
        self,
        corpus: SuffixIndex | Callable[[], SuffixIndex | None] | None = None,
        min_n: int = 1,
        max_n: int = 4,
        name: str = SUFFIX,
        *,
        max_spec_factor: float = 1.0,
        max_spec_offset: float = 0.0,
        min_token_prob: float = 0.1,
        verify_cost: Callable[[], Sequence[float] | None] | None = None,
        boundary: Callable[[int], bool] | None = None,
        min_gain: float = PRICED_MIN_GAIN,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        if max_spec_factor <= 0:
            raise ValueError(f"max_spec_factor must be > 0, got {max_spec_factor}")
        if not (0.0 <= min_token_prob <= 1.0):
            raise ValueError(f"min_token_prob must be in [0, 1], got {min_token_prob}")
        super().__init__(min_n, max_n, name, verify_cost=verify_cost, boundary=boundary, min_gain=min_gain)
        self.corpus = corpus
        self.max_spec_factor = max_spec_factor
        self.max_spec_offset = max_spec_offset
        self.min_token_prob = min_token_prob
        self.on_close = on_close
        #: where the latest lookup's continuation came from, and its corpus position (history drafts)
        self.last_source: Source = "none"
        self.last_position = -1
        self._probs: list[float] | None = None  # the history continuation's frequency probabilities
        self._source_key: object = None  # the document the latest history draft copied (draft_source)

    def index(self) -> SuffixIndex | None:
        """The history's index, or None (no corpus, or still building)."""
        corpus = self.corpus
        return corpus() if callable(corpus) else corpus

    def source(self) -> str:
        """The latest draft's source in a word or two (:meth:`draft_source` as text): ``none``, ``conversation``, or
        the history document (its key) it copies, ``history (5, 11)``."""
        if self.last_source == "none":
            return "none"
        src = self.draft_source()
        if src.origin == "history" and src.conversation is not None:
            return f"history ({src.conversation}, {src.message})"
        return src.origin

    def draft_source(self) -> DraftSource:
        """The latest draft's source: this conversation, or the saved message it copies (the index names its documents
        by (conversation id, message id), :mod:`specchat.history.corpus`)."""
        if self.last_source != "history":
            return DraftSource("conversation", self.name)
        index = self.index()
        key, pos = self._source_key, self.last_position
        span = index.span(key) if index is not None and key is not None else None
        if index is not None and (span is None or not span[0] <= pos < span[1]):
            # a new document: doc_at bisects the starts; a copy going on stays in the one it was found in
            key = self._source_key = index.doc_at(pos)
        if isinstance(key, tuple) and len(key) == 2 and all(isinstance(x, int) for x in key):
            return DraftSource("history", self.name, conversation=key[0], message=key[1])
        return DraftSource("history", self.name)

    def lookup(self, context: Sequence[int], k: int) -> list[int]:
        own = super().lookup(context, k)
        self._probs = None
        self.last_source = "conversation" if own else "none"
        index = self.index() if k > 0 else None
        if index is None:
            return own
        cand = index.lookup(context, k, max_spec_factor=self.max_spec_factor, max_spec_offset=self.max_spec_offset,
                            min_token_prob=self.min_token_prob)
        if cand is None or not cand.tokens:
            return own
        longer = cand.match_len > self.last_match_len
        if own and not longer and not (cand.match_len == self.last_match_len and cand.probs[0] > self.last_agreement):
            return own
        tokens, probs = cand.tokens, cand.probs
        if self.boundary is not None:  # a saved message ends with its end-of-turn token: stop after it
            cut = next((i for i, t in enumerate(tokens) if self.boundary(t)), None)
            if cut is not None:
                tokens, probs = tokens[: cut + 1], probs[: cut + 1]
        self.last_match_len, self.last_agreement = cand.match_len, 1.0  # the agreement is in the probabilities
        self.last_substituted = False
        self.last_source, self.last_position, self._probs = "history", cand.position, probs
        return tokens

    def draft_length(self, match_len: int, available: int) -> int:
        probs = self._probs
        if probs is None:
            return super().draft_length(match_len, available)
        n = min(available, len(probs))  # the index already stopped at min_token_prob and max_spec_factor
        table = self.verify_cost() if self.verify_cost is not None else None
        survival = self.last_survival = []
        copy = 1.0
        if table is None:
            for i in range(n):
                copy *= self.confidence(match_len + i)
                survival.append(probs[i] * copy)
            return n
        expected, best, best_d = 1.0, self.min_gain, 0
        for i in range(min(n, len(table) - 1)):
            copy *= self.confidence(match_len + i)
            if probs[i] * copy < NEGLIGIBLE_SURVIVAL:
                break  # the rest adds nothing a verify could pay for
            survival.append(probs[i] * copy)
            expected += probs[i] * copy
            cost = table[i + 1]
            if cost > 0 and expected / cost > best:
                best, best_d = expected / cost, i + 1
        return best_d

    def close(self) -> None:
        hook, self.on_close = self.on_close, None
        if hook is not None:
            hook()


__all__ = ["SuffixDrafter"]
