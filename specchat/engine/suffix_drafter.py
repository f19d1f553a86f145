"""The ``suffix`` drafter: prompt lookup over this conversation, and a suffix index over every saved one (issue 23).

SuffixDecoding (Oliaro et al. 2024, arXiv:2411.04975; vLLM's ``suffix`` method, ArcticInference's
``SuffixDecodingCache``) drafts from two trees: one over the current request and a global one over earlier
responses, taking the longer match. Here the current conversation is the n-gram drafter's own index (so its
learned per-match-length acceptance, its verify-cost pricing and its end-of-turn boundary are the same code), and
the global tree is a :class:`specchat.engine.suffix.SuffixIndex` over the history, built and kept up to date by
:mod:`specchat.history.corpus` (the engine never opens the history itself).

Each round both are looked up (the conversation's match exact or substituted, as the n-gram drafter chooses), and
the draft worth more expected tokens per unit of verify cost is proposed; the other is scored as a shadow. A history
continuation is its own kind of match (:data:`HISTORY`), with its own learned acceptance that starts at
:data:`HISTORY_PRIOR_SHARE` of an exact match's prior. A history draft's length follows
SuffixDecoding: tokens whose frequency-estimated probability (the product of count ratios along the path) is at
least ``min_token_prob``, at most ``max_spec_factor`` × match length + ``max_spec_offset`` (ArcticInference's
defaults: 0.1, 1.0, 0.0). When the engine prices drafts by the measured verify cost (an auto-K round, the same
``verify_cost`` hook as :class:`~specchat.engine.drafters.NgramDrafter`), the length is the one with the most
expected tokens per unit of verify cost, position i counted as probs[i] × the learned P(a copy of match length
l + i is accepted).

**The same message again.** A saved message and the reply saved after it are two documents, and the chat template
between them is in neither, so a lookup matches a reply asked again only within itself: 1, 2, 3 ... tokens at its
start, priced as guesses. Where this turn's message is a saved message whole and the reply so far is its saved
reply's start (:meth:`SuffixIndex.reply_after`), that reply is its own kind of match (:data:`ANSWERED`), as long as
the message and the reply so far together, from a sure prior. Live on the AMD EPYC Zen 4 (``--threads 1``, the bench
family's ``average_revenue`` asked again with the question and its plain reply saved as the app saves them, auto-K,
4 interleaved pairs, medians): 3.15x plain decoding against 2.45x without it on the F16 re-encoding, 1.64x against
1.39x on the bundled Q4_1, the same text as plain decoding.

**Renames.** A repeated task rarely repeats its names: the saved reply said ``largest_value`` where this one says
``average_value``, and an exact match breaks at every such token. Where the context's match with the history
resumes after a short change (:meth:`SuffixIndex.renames`: at most :data:`MAX_RENAME` tokens on either side, at
least 3 agreeing tokens before it), the drafter records the pair (old, new). A lookup then also tries the context
with its new text put back as the saved text says it, and a continuation is renamed as this conversation says it -
both only for new text the history never has: saved replies that already say it stay reachable, and a saved reply
is copied as saved where this conversation repeats it (:meth:`SuffixDrafter._maps` has why). Each rename keeps how
often drafts held through it; one that falls below :data:`MIN_RENAME_TRUST` is dropped, so a rename that was a
coincidence stops costing verifies. What they buy and cost, on the bench's history task (the bundled model's greedy
reply to ``average_revenue`` with 20 saved tasks of the family) replayed through the drafter alone: at K 16 its drafts
keep 179 of the 256 tokens in 78 rounds with renames, 152 in 105 without (priced by the AMD EPYC Zen 4's measured
v(K), 55 against 50); the scan and the lookups through renamed text cost ~0.14 ms a round more (the drafter ~0.23
ms a round in all, n-gram 0.03; the same CPU, one core). Exact like every drafter: the target verifies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from specchat.engine.drafter_kinds import DRAFTER_KINDS, SUFFIX
from specchat.engine.drafters import (
    EXACT,
    NEGLIGIBLE_SURVIVAL,
    PRICED_MIN_GAIN,
    QUOTED,
    QUOTED_PRIOR_POWER,
    SHADOW_TOKENS,
    NgramDrafter,
)
from specchat.engine.events import DraftSource
from specchat.engine.suffix import MAX_HEADER, Candidate, SuffixIndex

#: the kind of match a history continuation is (its own learned acceptance, after the n-gram drafter's kinds)
HISTORY = QUOTED + 1
#: its learned p(l) starts at this share of an exact match's prior: another conversation's text goes on as this one
#: does less often than this conversation's own
HISTORY_PRIOR_SHARE = 0.5
#: a history match of this many tokens or more (the last of the drafter's match-length buckets) starts at
#: :data:`HISTORY_SURE_SHARE` instead: the context has run along the saved text that long - the same question asked
#: again, its reply repeating the saved one. At half an exact match's prior auto-K drafted 1, 1, 2, 4, 4, 2, 4, 6 ...
#: tokens of a reply it held whole before reaching 20-35. Replayed (tests/engine/test_history_replay.py, each of the
#: family's 25 tasks asked again, auto-K, 13 cost tables of the recorded profiles): 2.135x -> 2.286x plain; the family
#: against the other tasks' history unchanged (1.3552 -> 1.3550), the worst task against n-gram 0.971 (the Q4_1 of
#: issue 20's EPYC, a Zen 5; 0.998 before). 0.75 gave 2.228x; 0.9 from 16 tokens 2.353x but the EPYCs' Q4_1 lost
#: 0.5-0.7 % on the family
HISTORY_SURE_MATCH = 48
HISTORY_SURE_SHARE = 0.9
#: the kind of match the saved reply to the same message is (:meth:`SuffixIndex.reply_after`: the user's message
#: matched whole, the reply so far as saved): its own learned acceptance, from a prior of :data:`HISTORY_SURE_SHARE`
#: of a quoted match's (l / (l + 1)) ** 0.5 at every length - asked again, the reply is the saved one from its first
#: token, where the matches inside the reply alone are 1, 2, 3 ... tokens long and were priced as a guess. Replayed
#: (the family's 25 tasks asked again, auto-K, the AMD EPYC Zen 4's recorded F16 / issue 20's profile's Q4_1 / Q8_0):
#: a share of 0.8 / 0.9 / 1.0 gave 3.14x / 3.25x / 3.33x, 1.18x / 1.19x / 1.23x, 2.81x / 2.92x / 3.00x plain; 0.9, a
#: long history match's, because a question asked again after other turns, or sampled at T > 0, may part from its
#: saved reply (the learned acceptance then falls, from a prior that is not certainty)
ANSWERED = HISTORY + 1
#: the longest renamed text, in tokens, on either side (a field name, an identifier)
MAX_RENAME = 4
#: renames kept per conversation (the most trusted)
MAX_RENAMES = 256
#: a rename whose drafts held this rarely (Laplace-smoothed) is dropped
MIN_RENAME_TRUST = 0.3
#: context positions looked at for renames when a conversation arrives whole (a resumed one)
RENAME_SCAN = 512


class _Table:
    """A renaming (text -> text) with its keys by first token, the longest first (:meth:`SuffixDrafter._replace`)."""

    __slots__ = ("mapping", "by_first", "ends")

    def __init__(self, mapping: dict[tuple[int, ...], tuple[int, ...]]) -> None:
        self.mapping = mapping
        self.ends = {key[-1] for key in mapping}  # the last tokens of the keys
        self.by_first: dict[int, list[tuple[int, ...]]] = {}
        for key in sorted(mapping, key=len, reverse=True):
            self.by_first.setdefault(key[0], []).append(key)


@dataclass(slots=True)
class _Rename:
    """What the drafts through one rename did: the longest agreeing text before it when learned, when it was
    learned (its order), and how often a draft held through it or failed in it."""

    anchor: int
    order: int
    held: float = 0.0
    failed: float = 0.0

    def trust(self) -> float:
        return (self.held + 1.0) / (self.held + self.failed + 2.0)

    def rank(self) -> tuple[float, int, int]:
        return (self.trust(), self.anchor, self.order)


#: where the latest draft came from
Source = Literal["none", "conversation", "history"]


class SuffixDrafter(NgramDrafter):
    """:class:`NgramDrafter` over the conversation plus a frequency-scored lookup in ``corpus`` (an index, or a
    callable returning the index once its background build is done, None before)."""

    kind = SUFFIX
    free = DRAFTER_KINDS[SUFFIX].free
    k_cap = DRAFTER_KINDS[SUFFIX].k_cap
    PRIOR_SHARES = (*NgramDrafter.PRIOR_SHARES, HISTORY_PRIOR_SHARE, HISTORY_SURE_SHARE)
    PRIOR_POWERS = (*NgramDrafter.PRIOR_POWERS, NgramDrafter.PRIOR_POWERS[EXACT], QUOTED_PRIOR_POWER)
    #: a turn's own repeats are doubted as n-gram's are (:data:`specchat.engine.drafters.DOUBT_Z`) until the
    #: history has matched in the turn; from then on they compete with the history's matches undoubted
    #: (:meth:`lookup`). Doubted throughout, replayed over the bench's history tasks
    #: (``tests/engine/test_history_replay.py``), the suffix drafter lost up to 5.7 % of a reply to n-gram (the
    #: recorded F16 with flash attention off: worst 0.943 of n-gram, 0.996 undoubted); never doubted, a reply with
    #: nothing related in the history lost what the doubt buys n-gram (the default suite's copy-then-new on the AMD
    #: EPYC Zen 4, an empty history: 0.96 of n-gram, round by round)
    UNDOUBTED: frozenset[int] = frozenset()

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

    def _reset_index(self) -> None:
        super()._reset_index()  # another conversation: its renames are not this one's
        #: (old, new) -> the rename's record (the module docstring's renames)
        self._renames: dict[tuple[tuple[int, ...], tuple[int, ...]], _Rename] = {}
        self._scanned = 0  # context positions looked at for renames
        self._novel: dict[tuple[int, ...], bool] = {}  # renamed text -> the history never has it
        self._applied: list[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = []  # the draft's renamed spans
        self._tables: tuple[_Table, _Table] | None = None  # _maps' answer until a rename is learned, scored or dropped
        self._unanswered: tuple[int, int, int] | None = None  # (turn start, index, its size): no saved reply (_answered)
        self._history_turn = -1  # the turn start of the latest turn the history matched in (doubted_kinds)

    def _learn_renames(self, index: SuffixIndex, context: Sequence[int]) -> None:
        """Look at the context's positions not seen yet (at most :data:`RENAME_SCAN` back: a long conversation
        loaded at once) for matches with the history that resume after a change (:meth:`SuffixIndex.renames`)."""
        start = max(self._scanned, len(context) - RENAME_SCAN)
        self._scanned = len(context)
        for r in index.renames(context, start, max_gap=MAX_RENAME):
            if self.boundary is not None and any(self.boundary(t) for t in (*r.new, *r.old)):
                continue
            self._tables = None
            got = self._renames.get((r.old, r.new))
            if got is None:
                self._renames[(r.old, r.new)] = _Rename(r.anchor, len(self._renames))
            else:
                got.anchor = max(got.anchor, r.anchor)
        if len(self._renames) > MAX_RENAMES:  # keep the most trusted
            ranked = sorted(self._renames.items(), key=lambda kv: kv[1].rank(), reverse=True)
            self._renames = dict(ranked[:MAX_RENAMES])

    def _maps(self, index: SuffixIndex) -> tuple[_Table, _Table]:
        """(new -> old, old -> new), each text to its most trusted counterpart, both only for new text the history
        never has (a field name of this conversation's own): text it has (``average`` where another conversation
        said ``largest``) is matched as it is, so the saved replies that say it stay reachable, and a saved
        continuation is copied as it was saved. Kept until a rename is learned, scored or dropped (a round that
        changes none reads it as it was).

        Why the saved text is not renamed into text the history has: a reply that lists records (``{"id": 4,
        ...}``) matches the saved lists after every changed number, so "renames" 4 -> 3, 5 -> 3, ... are learned
        from the list itself, and renaming a saved continuation by them broke the very case the history is for -
        the same question asked again, its whole reply saved: its drafts went ``"id": 1`` where the saved reply (and
        the target) said ``"id": 4``. Replayed (``tests/engine/test_history_replay.py``; each of the family's 25 tasks
        asked again with its own conversation saved, auto-K, the AMD EPYC Zen 4's recorded F16 costs): 1.75× → 2.30×
        plain decoding; over the recorded profiles' F16 / Q4_1 / Q8_0 the geometric mean 1.67× → 2.13×, and the
        family against the other tasks' history 1.347× → 1.355×."""
        if self._tables is None:
            self._tables = self._build_maps(index)
        return self._tables

    def _build_maps(self, index: SuffixIndex) -> tuple[_Table, _Table]:
        back: dict[tuple[int, ...], tuple[tuple[int, ...], float]] = {}
        forward: dict[tuple[int, ...], tuple[tuple[int, ...], float]] = {}
        for (old, new), rec in self._renames.items():
            rank = rec.rank()
            novel = self._novel.get(new)
            if novel is None:
                novel = self._novel[new] = not index.occurs(new)
            if not novel:
                continue
            if old not in forward or rank > forward[old][1]:
                forward[old] = (new, rank)
            if new not in back or rank > back[new][1]:
                back[new] = (old, rank)
        return _Table({k: v for k, (v, _r) in back.items()}), _Table({k: v for k, (v, _r) in forward.items()})

    def _answered(self, index: SuffixIndex, context: Sequence[int], k: int,
                  kw: dict[str, float]) -> Candidate | None:
        """The saved reply to this turn's message, while this reply is going on as it did
        (:meth:`SuffixIndex.reply_after`); None otherwise. Once a turn's reply has begun and has no saved one (or
        has left it), it is not looked for again in that turn until the index changes: a reply that stops
        repeating the saved one never starts again at its beginning."""
        turn = self._turn_start
        key = (turn, id(index), len(index))
        if turn < 2 or self._unanswered == key:
            return None
        again = index.reply_after(context[max(0, turn - 1 - index.max_match) : turn - 1], context[turn:], k,
                                  end=context[turn - 1], **kw)  # type: ignore[arg-type]
        if again is None or not again.tokens:
            if len(context) - turn > MAX_HEADER + 1:  # the reply has begun, whatever the header's length: final
                self._unanswered = key
            return None
        return again

    @staticmethod
    def _replace(tokens: Sequence[int], table: _Table,
                 spans: list[tuple[int, int, tuple[int, ...], tuple[int, ...]]] | None = None) -> list[int]:
        """``tokens`` with every occurrence of a key of ``table`` replaced by its value (left to right, the longest
        key first); ``spans`` gets (output offset, length, key, value) of each replacement."""
        if not table.mapping:
            return list(tokens)
        by_first, mapping = table.by_first, table.mapping
        out: list[int] = []
        i, n = 0, len(tokens)
        while i < n:
            for key in by_first.get(tokens[i], ()):
                if tuple(tokens[i : i + len(key)]) == key:
                    value = mapping[key]
                    if spans is not None:
                        spans.append((len(out), len(value), key, value))
                    out.extend(value)
                    i += len(key)
                    break
            else:
                out.append(tokens[i])
                i += 1
        return out

    def _history(self, index: SuffixIndex, context: Sequence[int], k: int) -> tuple[Candidate | None, int]:
        """The history's candidate for ``context`` and its kind of match: the plain lookup's (:data:`HISTORY`), the
        saved reply to this turn's message where it matches longer (:data:`ANSWERED`), or the one through this
        conversation's renames when that matches longer (the context's new text put back as the saved text says
        it); either way the continuation's saved text renamed as this conversation says it (:attr:`_applied`
        records where)."""
        kw = {"max_spec_factor": self.max_spec_factor, "max_spec_offset": self.max_spec_offset,
              "min_token_prob": self.min_token_prob}
        self._learn_renames(index, context)
        cand = index.lookup(context, k, **kw)  # type: ignore[arg-type]
        kind = HISTORY
        again = self._answered(index, context, k, kw)
        if again is not None and (cand is None or again.match_len > cand.match_len):
            cand, kind = again, ANSWERED
        if not self._renames:
            return cand, kind
        back, forward = self._maps(index)
        tail = context[-index.max_match - 2 * MAX_RENAME :]
        # The text after the last renamed span is the same either way: a plain match that stops short of it says
        # the lookup through it would stop at the same place (and lose), so it is not made. Where no new text ends
        # within the plain match's reach (its length, or the shortest order), that last span cannot be there.
        reach = max(cand.match_len if cand is not None else 0, index.orders[-1] - 1) + 1
        at: list[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = []
        saved = self._replace(tail, back, at) if back.ends.intersection(tail[-reach:]) else tail
        after = len(saved) - at[-1][0] - at[-1][1] if at else 0
        if at and (after < index.orders[-1] or (cand is not None and cand.match_len >= after)):
            alt = index.lookup(saved, k, **kw)  # type: ignore[arg-type]
            if alt is not None and alt.tokens and alt.match_len >= len(saved) - at[-1][0] and (
                    cand is None or not cand.tokens or alt.match_len > cand.match_len):
                cand, kind = alt, HISTORY  # it matched back through a renamed span, and further than the plain lookup
        if cand is None or not cand.tokens:
            return cand, kind
        spans: list[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = []
        tokens = self._replace(cand.tokens, forward, spans)
        if not spans:
            return cand, kind
        probs: list[float] = []
        i = 0  # the saved continuation's position
        for off, length, old, _new in spans:
            while len(probs) < off:
                probs.append(cand.probs[i])
                i += 1
            probs.extend([cand.probs[i]] * length)
            i += len(old)
        probs.extend(cand.probs[i : i + len(tokens) - len(probs)])
        self._applied = [(off, length, old, new) for off, length, old, new in spans]
        return Candidate(tokens[:k], probs[:k], cand.match_len, cand.occurrences, cand.position), kind

    def rollback(self, committed: Sequence[int]) -> None:
        pending, applied, self._applied = self._pending, self._applied, []
        if pending is not None and applied:  # did the draft hold through the renamed text it proposed?
            n_ctx, _l, tokens, _kind = pending
            got = committed[n_ctx : n_ctx + len(tokens)]
            kept = 0
            while kept < len(got) and got[kept] == tokens[kept]:
                kept += 1
            for off, length, old, new in applied:
                rec = self._renames.get((old, new))
                if rec is None or off >= len(tokens) or off > kept:
                    continue  # never reached: no evidence
                self._tables = None
                if kept >= min(off + length, len(tokens)):
                    rec.held += 1
                else:
                    rec.failed += 1
                    if rec.trust() < MIN_RENAME_TRUST:
                        del self._renames[(old, new)]  # it keeps failing: this conversation means something else
        super().rollback(committed)

    def lookup(self, context: Sequence[int], k: int) -> list[int]:
        own = super().lookup(context, k)
        self.doubted_kinds = self.UNDOUBTED if self._history_turn == self._turn_start else NgramDrafter.doubted_kinds
        self._probs = None
        self._applied = []
        self.last_source = "conversation" if own else "none"
        index = self.index() if k > 0 else None
        if index is None or not len(index):  # no corpus, or nothing saved yet: the history's lookups find nothing
            return own
        cand, kind = self._history(index, context, k)
        if cand is None or not cand.tokens:
            self._applied = []
            return own
        tokens, probs = cand.tokens, cand.probs
        if self.boundary is not None:  # a saved message ends with its end-of-turn token: stop after it
            cut = next((i for i, t in enumerate(tokens) if self.boundary(t)), None)
            if cut is not None:
                tokens, probs = tokens[: cut + 1], probs[: cut + 1]
        if own:  # the conversation's match against the history's: the draft worth more per unit of verify cost
            own_worth = self._length(self.last_match_len, len(own), self.last_agreement, self.last_kind,
                                     self.last_start)[1]
            mine = self._history_length(cand.match_len, len(tokens), probs, kind)[1]
            if own_worth >= mine:
                self._shadows.append((len(context), cand.match_len, tokens[:SHADOW_TOKENS], kind))
                self._applied = []
                return own
            self._shadows.append((len(context), self.last_match_len, own[:SHADOW_TOKENS], self.last_kind))
        self._applied = [a for a in self._applied if a[0] < len(tokens)]
        self.last_match_len, self.last_agreement, self.last_kind = cand.match_len, 1.0, kind
        self.last_start = -1  # the history's text, not this conversation's
        self.last_source, self.last_position, self._probs = "history", cand.position, probs
        self._history_turn = self._turn_start  # the turn's later rounds: undoubted (above)
        return tokens

    def _prior(self, kind: int, lo: int) -> float:
        """An n-gram kind's prior as :class:`NgramDrafter` has it; a history match of :data:`HISTORY_SURE_MATCH`
        tokens or more at :data:`HISTORY_SURE_SHARE` of an exact match's."""
        prior = super()._prior(kind, lo)
        if kind == HISTORY and lo >= HISTORY_SURE_MATCH:
            return prior * HISTORY_SURE_SHARE / HISTORY_PRIOR_SHARE
        return prior

    def draft_length(self, match_len: int, available: int) -> int:
        probs = self._probs
        if probs is None:
            return super().draft_length(match_len, available)
        return self._history_length(match_len, available, probs, self.last_kind)[0]

    def _history_length(self, match_len: int, available: int, probs: Sequence[float],
                        kind: int = HISTORY) -> tuple[int, float]:
        """(how many of a history continuation's tokens to propose, what that draft is worth), as
        :meth:`NgramDrafter._length` with position i counted as probs[i] x the learned P(kept) of its ``kind`` of
        match (:data:`HISTORY`, :data:`ANSWERED`)."""
        n = min(available, len(probs))  # the index already stopped at min_token_prob and max_spec_factor
        table = self.verify_cost() if self.verify_cost is not None else None
        survival = self.last_survival = []
        copy = 1.0
        if table is None:
            for i in range(n):
                copy *= self.confidence(match_len + i, kind)
                survival.append(probs[i] * copy)
            return n, 1.0 + sum(survival)
        expected, best, best_d, worth = 1.0, self.min_gain, 0, 0.0
        last = min(n, len(table) - 1) - 1
        cheapest = self._cheapest(table) if last > 0 else table
        for i in range(last + 1):
            copy *= self.confidence(match_len + i, kind)
            p = probs[i] * copy  # probs are cumulative: p never grows along the path
            if p < NEGLIGIBLE_SURVIVAL:
                break  # the rest adds nothing a verify could pay for
            survival.append(p)
            expected += p
            cost = table[i + 1]
            if cost > 0:
                worth = max(worth, expected / cost)
                if expected / cost > best:
                    best, best_d = expected / cost, i + 1
            if i < last and expected + p * (last - i) <= worth * cheapest[i + 2]:
                break  # no longer draft can be worth more (as NgramDrafter._length)
        return best_d, worth

    def close(self) -> None:
        hook, self.on_close = self.on_close, None
        if hook is not None:
            hook()


__all__ = ["SuffixDrafter"]
