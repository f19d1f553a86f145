"""The kinds of drafter: the names a user types for them and how far each may draft, in one table.

``draft = "ngram"``, ``--draft none`` or a draft model file: :data:`DRAFTER_KINDS` is the only place these
names and each kind's cap on K are written; everything else (the CLI, the config, the loader, the engine,
the bench, the app) imports them from here. A model drafter is *named* after its file; its kind is
:data:`MODEL`.

:data:`K_MAX`, the largest K anything accepts (``--k``, ``k`` in the config, the app's K keys, auto-K, the
bench's ``--k`` list, the size of a verify batch), is the largest cap in the table; the engine asks a
drafter for at most its own kind's cap. So raising one kind's cap - e.g. letting the free n-gram drafter
go further than a model drafter - is a one-line change to the table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DrafterKind:
    """One row of the table."""

    name: str
    #: the largest K a drafter of this kind is asked for (0: it never drafts)
    k_cap: int
    #: drafting costs about nothing next to a target decode (no model runs)
    free: bool


#: no drafter: every round is a plain single-row decode (the baseline)
NONE = "none"
#: prompt-lookup drafting over the conversation (:class:`specchat.engine.drafters.NgramDrafter`)
NGRAM = "ngram"
#: prompt lookup over the conversation and a suffix index of every saved conversation
#: (:class:`specchat.engine.suffix_drafter.SuffixDrafter`, issue 23)
SUFFIX = "suffix"
#: a draft GGUF with its own llama.cpp context (:class:`specchat.engine.drafters.ModelDrafter`)
MODEL = "model"
#: between the links of a drafter chain, e.g. ``suffix,draft.gguf``: free drafters first, a draft model last
#: (:mod:`specchat.engine.chain`; llama.cpp's comma-separated ``--spec-type``)
CHAIN_SEP = ","


#: The caps. A model drafter pays c per drafted token and its acceptance decays geometrically, so past 16
#: a longer draft buys nothing (E(α, K) is within 1 % of its limit 1/(1 − α) for α ≤ 0.75). The free n-gram
#: drafter proposes only confident copies, and on a target with a batched kernel the verify curve keeps
#: flattening past 16 rows (measured here with ``specchat models tune``, 1 thread: the SmolLM2 F16/Q8_0
#: re-encodings verify 65 rows for ~4-9 single rows against ~2-4 for 17, so a 64-token copy gains ~1.5-2x
#: over a 16-token one; README, "The lesson"), so it may draft up to 64, as llama.cpp's n-gram drafters are
#: run (docs/speculative.md: ``--spec-type ngram-simple --draft-max 64``).
DRAFTER_KINDS: dict[str, DrafterKind] = {
    NONE: DrafterKind(NONE, k_cap=0, free=True),
    NGRAM: DrafterKind(NGRAM, k_cap=64, free=True),
    # free like n-gram: a round's lookup in the history's index takes a median 0.06 ms over 0.5 M tokens on the
    # AMD EPYC here (scripts/suffix_index_figures.py), against ~10 ms for one target token of the bundled model;
    # its drafts are copies too, so the same verify curve argues for the same cap
    SUFFIX: DrafterKind(SUFFIX, k_cap=64, free=True),
    MODEL: DrafterKind(MODEL, k_cap=16, free=False),
}

#: the largest K anything accepts: the largest cap of any kind
K_MAX: int = max(kind.k_cap for kind in DRAFTER_KINDS.values())


def chain_links(drafter: str | None) -> list[str]:
    """The links of a drafter chain's name (``"suffix, draft.gguf"`` -> ``["suffix", "draft.gguf"]``); [] when
    ``drafter`` is not a chain (no :data:`CHAIN_SEP`)."""
    if not drafter or CHAIN_SEP not in drafter:
        return []
    return [part.strip() for part in drafter.split(CHAIN_SEP)]


def kind_of(drafter: str | None) -> str:
    """The kind of a drafter by its name: a kind's own name (``ngram``, ``suffix``, ``none``) is itself, anything else
    (a file) a model; a chain is the kind of its last link (the one its cap note is about)."""
    links = chain_links(drafter)
    if links:
        drafter = links[-1].lower()
    return drafter if drafter in DRAFTER_KINDS and drafter != MODEL else MODEL


def k_cap_note(drafter: str | None, k: int, *, auto_k: bool = False) -> str:
    """One line when a fixed ``k`` is above the cap of ``drafter``'s kind (a model drafter: 16), so its rounds
    draft fewer tokens than K says; "" otherwise (auto-K chooses within the cap itself; no drafter drafts none)."""
    kind = DRAFTER_KINDS[kind_of(drafter)]
    if auto_k or kind.name == NONE or k <= kind.k_cap:
        return ""
    whose = "its" if not chain_links(drafter) else f"the {chain_links(drafter)[-1]} link's"
    return f"K {k} is above a {kind.name} drafter's cap of {kind.k_cap}: {whose} rounds draft at most {kind.k_cap} tokens"


__all__ = [
    "CHAIN_SEP", "DRAFTER_KINDS", "K_MAX", "MODEL", "NGRAM", "NONE", "SUFFIX", "DrafterKind", "chain_links", "k_cap_note",
    "kind_of",
]
