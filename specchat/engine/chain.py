"""A drafter chain: free drafters first, a draft model last, one of them drafting each round (issue 23).

llama.cpp takes several speculative types at once (``--spec-type ngram-simple,draft``: a comma-separated list,
``common_speculative_init`` builds one implementation per type and ``common_speculative_draft`` asks them in
order, the first that returns a draft wins). specchat's ``--draft suffix,DRAFT.gguf`` (or ``ngram,DRAFT.gguf``) is
the same: each round the free links (n-gram, suffix) are asked in order, and the first that proposes a draft
drafts the round; when none does, the draft model does. A free link proposes only a continuation it is confident
of - :meth:`specchat.engine.drafters.NgramDrafter.draft_length` prices it against the measured verify cost (auto-K)
or its learned acceptance (a fixed K) and stays quiet otherwise - so "a confident match" is the free drafter's own
test, and a round costs the model's c only when nothing free is worth verifying. On this CPU that order is the one
that pays: a free draft costs ~0.06 ms a round (:data:`specchat.engine.drafter_kinds.DRAFTER_KINDS`), a model draft
0.5-1.4 target tokens per token.

Each link keeps its own name in every :class:`~specchat.engine.events.Round` (``drafter``; the chain's in
``chain``), so the cost model keeps each link's α and c apart, and auto-K decides each link's K with a policy of
its own (:meth:`specchat.engine.telemetry.auto_k.AutoK.fork`): a model link that cannot pay (the bundled model as
its own draft: c ≈ 1) leaves the rounds no free link drafts plain, while the free links keep drafting. The chain
itself only orders the links; :meth:`specchat.engine.speculative.SpeculativeDecoder._choose_k` asks it per round.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from specchat.engine.controls import SamplingParams
from specchat.engine.drafter_kinds import CHAIN_SEP
from specchat.engine.drafters import Draft, Drafter
from specchat.engine.events import DraftSource

#: (K, the policy's decision) for a link this round: the decoder's K rule applied to that link
KFor = Callable[[Drafter], tuple[int, object]]


class DrafterChain:
    """``links`` in order: free drafters, then at most one model drafter (the last). Not itself a link of the
    decoder's rounds: :meth:`choose` picks the link that drafts each round."""

    def __init__(self, links: Sequence[Drafter], name: str | None = None) -> None:
        links = list(links)
        if len(links) < 2:
            raise ValueError("a drafter chain needs at least two links")
        if any(not d.free for d in links[:-1]):
            raise ValueError("only a chain's last link may be a draft model")
        names = [d.name for d in links]
        if len(set(names)) != len(names):
            raise ValueError(f"a drafter chain's links need distinct names, got {names}")
        self.links = links
        self.name = name or CHAIN_SEP.join(names)
        #: the kind of its last link (a model's, when it has one: what a chain costs at most per drafted token)
        self.kind = links[-1].kind
        self.free = all(d.free for d in links)
        self.k_cap = max(d.k_cap for d in links)
        #: the link of the latest round
        self.active: Drafter = links[-1]
        self._prepared: tuple[int, Draft] | None = None

    def choose(self, context: Sequence[int], k_for: KFor, sampling: SamplingParams,
               rng: np.random.Generator) -> tuple[Drafter, int, object]:
        """This round's link, its K and its policy's decision: the first free link that proposes a draft (its
        draft is kept for :meth:`take`), else the last link (a model drafter drafts what its K says; 0 = plain)."""
        self._prepared = None
        for link in self.links[:-1]:
            k, decision = k_for(link)
            if k <= 0:
                continue
            draft = link.draft(context, k, sampling, rng)
            if draft.tokens:
                self.active = link
                self._prepared = (len(context), draft)
                return link, k, decision
        self.active = self.links[-1]
        k, decision = k_for(self.active)
        return self.active, k, decision

    def take(self, context: Sequence[int]) -> Draft | None:
        """The draft :meth:`choose` already made for ``context`` (a free link's), once; None: the link drafts now."""
        prepared, self._prepared = self._prepared, None
        if prepared is not None and prepared[0] == len(context):
            return prepared[1]
        return None

    def draft_source(self) -> DraftSource | None:
        source = getattr(self.active, "draft_source", None)
        return source() if source is not None else None

    # -- the Drafter protocol, for callers that treat the chain as one drafter ----------------------------------------
    def draft(self, context: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator) -> Draft:
        """The first link's draft that has tokens (each link up to its own cap), else the last link's."""
        for link in self.links:
            draft = link.draft(context, min(k, link.k_cap), sampling, rng)
            self.active = link
            if draft.tokens:
                return draft
        return draft

    def rollback(self, committed: Sequence[int]) -> None:
        self.active.rollback(committed)

    def time_one_token(self, token: int) -> float:
        return self.links[-1].time_one_token(token)

    def limit_catch_up(self, tokens: int) -> None:
        for link in self.links:
            link.limit_catch_up(tokens)

    def reset(self) -> None:
        self._prepared = None
        for link in self.links:
            link.reset()

    def close(self) -> None:
        for link in self.links:
            link.close()


def every_drafter(drafters: Mapping[str, Drafter]) -> list[Drafter]:
    """Every drafter that drafts rounds: ``drafters`` with each chain replaced by its links, each object once (a
    chain's ``ngram`` link and the ``ngram`` drafter beside it are two drafters of one name)."""
    out: list[Drafter] = []
    for d in drafters.values():
        for link in d.links if isinstance(d, DrafterChain) else [d]:
            if all(link is not other for other in out):
                out.append(link)
    return out


def each_link(drafters: Mapping[str, Drafter]) -> dict[str, Drafter]:
    """Every drafter that drafts rounds, by name: ``drafters`` with each chain replaced by its links (what the cost
    model and the calibration key by). Two drafters of one name - a chain's ``ngram`` link and the ``ngram`` drafter
    beside it - share their name's figures: the same kind of drafter with the same settings."""
    out: dict[str, Drafter] = {}
    for name, d in drafters.items():
        if isinstance(d, DrafterChain):
            out.update((link.name, link) for link in d.links)
        else:
            out[name] = d
    return out


__all__ = ["DrafterChain", "each_link", "every_drafter"]
