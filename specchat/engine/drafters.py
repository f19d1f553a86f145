"""Drafters: who proposes the K tokens the target verifies.

All drafters share one protocol (like llama.cpp's ``common_speculative_impl`` with its
``draft``/``accept`` steps in ``common/speculative.cpp``):

- :meth:`Drafter.draft` gets the full committed context (every token the target has committed, plus the last
  sampled token not yet in the target's KV; within a reply one list, appended to) and proposes up to ``k`` tokens;
- :meth:`Drafter.rollback` gets the committed tokens after verification so a drafter with a KV cache
  drops the rows the target rejected.

:class:`ModelDrafter` runs a second GGUF with its own context; :class:`NgramDrafter` is prompt-lookup decoding
(Saxena 2023; llama.cpp ``ngram-simple``/``lookup``; HF ``PromptLookupCandidateGenerator``): no model, drafts are
the continuation of the most recent earlier occurrence of the longest matching suffix.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from specchat.engine.controls import SamplingParams
from specchat.engine.drafter_kinds import DRAFTER_KINDS, MODEL, NGRAM
from specchat.engine.events import DraftSource
from specchat.engine.model import Model
from specchat.engine.sampling import sample, warp
from specchat.engine.telemetry import CheapestFrom


@dataclass(slots=True)
class Draft:
    """A proposal: ``tokens`` and, for a stochastic model draft, the warped q of each token."""

    tokens: list[int] = field(default_factory=list)
    q: list[np.ndarray] | None = None  # None = deterministic drafter (q one-hot at each token)
    t_ms: float = 0.0  # wall time of the draft call
    decode_ms: float = 0.0  # of which inside llama_decode
    #: of ``t_ms``, the time spent reading context the drafter had missed, when that was more than a round's
    #: usual one or two tokens (its first round after a model switch or on a long prompt, a probe's window):
    #: the draft's prompt processing, not a cost per drafted token. Such a round's first token came out of
    #: that decode; the others cost one single-row decode each. 0 in a steady round.
    catch_up_ms: float = 0.0
    #: how many tokens the drafter would have proposed with no cap (up to its kind's cap), when it decides its own
    #: draft length (n-gram: only confident continuations); None = it always fills the K it is given
    natural: int | None = None
    #: the drafter's own estimate, per position j = 1..len(tokens), that its first j tokens are all accepted (None:
    #: it has none); at temperature 0 the verify is split where that lowers its expected cost
    #: (:meth:`specchat.engine.telemetry.verify_cost.VerifyCost.plan`)
    survival: tuple[float, ...] | None = None


class Drafter(Protocol):
    name: str
    #: its row in :data:`specchat.engine.drafter_kinds.DRAFTER_KINDS` (MODEL or NGRAM)
    kind: str
    #: True when drafting costs (about) nothing next to a target decode (no model is run)
    free: bool
    #: the largest K it is asked for (its kind's cap in :data:`specchat.engine.drafter_kinds.DRAFTER_KINDS`)
    k_cap: int

    def draft(self, context: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator) -> Draft: ...

    def rollback(self, committed: Sequence[int]) -> None: ...

    def time_one_token(self, token: int) -> float:
        """ms of drafting one token now (0 for a drafter that runs no model); leaves the drafter's state as
        it was. Lets the cost model know the draft cost before any round drafts."""
        ...

    def limit_catch_up(self, tokens: int) -> None:
        """For the next draft call only: read at most ``tokens`` of context it has not seen (a probe after
        many plain rounds must not pay for the whole gap); no-op for a drafter without a KV cache."""
        ...

    def reset(self) -> None: ...

    def close(self) -> None: ...


#: a steady round's draft reads at most this many committed tokens it has not seen (the correction, or the
#: last draft token and the bonus); a longer catch-up is timed apart (:attr:`Draft.catch_up_ms`)
STEADY_CATCH_UP = 2


class ModelDrafter:
    """A small draft model with its own llama.cpp context.

    Its KV follows the committed tokens by longest common prefix (the reuse scheme of llama.cpp's
    ``common_speculative_use_draft_model`` before 2026): each call decodes only the tokens the draft
    KV is missing, then drafts one token per decode. At temperature 0 it drafts the argmax; at T > 0
    it samples from its warped distribution q and returns q for exact rejection sampling.

    A catch-up longer than :data:`STEADY_CATCH_UP` tokens (the whole conversation, on the first round after
    a model switch) is reported apart in :attr:`Draft.catch_up_ms`: counted as a cost per drafted token it
    made the first turn after a switch read c = 3.2× where the steady value was 0.4× (and auto-K then judged
    the layer-skip draft unprofitable after one round).
    """

    kind = MODEL
    free = DRAFTER_KINDS[MODEL].free
    k_cap = DRAFTER_KINDS[MODEL].k_cap

    def __init__(self, model: Model, name: str | None = None) -> None:
        self.model = model
        self.name = name or model.name
        #: the draft KV holds context[offset:] (0 unless a limited catch-up restarted it on a window)
        self.offset = 0
        self._max_gap: int | None = None

    def limit_catch_up(self, tokens: int) -> None:
        """Next draft only: if more than ``tokens`` committed tokens are missing from the draft KV, restart
        it on the last ``tokens`` of the context instead of decoding the whole gap (auto-K's probes after
        many plain rounds: a catch-up costs about c·v(16)/17 target steps per missed token on this CPU).
        The draft then sees a shorter context until the conversation is reset; the target still verifies
        every token, so only acceptance can change, never the output."""
        self._max_gap = max(1, int(tokens))

    def draft(self, context: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator) -> Draft:
        t0 = time.perf_counter()
        d0 = self.model.decode_ms_total
        out = Draft(q=[] if sampling.temperature > 0 else None)
        max_gap, self._max_gap = self._max_gap, None
        if k <= 0 or not context:
            return out
        model = self.model
        if self.offset >= len(context):
            self.offset = 0
        ctx = context[self.offset :]
        room = model.n_ctx - len(ctx)
        k = min(k, room)
        if k <= 0:
            return out
        keep = min(model.sync_prefix(ctx), len(ctx) - 1)
        if max_gap is not None and len(ctx) - keep > max_gap:
            self.offset = len(context) - max_gap
            ctx = context[self.offset :]
            model.clear()
            keep = 0
        context = ctx
        model.trim(keep)
        t_catch0, greedy = time.perf_counter(), out.q is None  # greedy: each row's argmax only (Model.decode)
        row = model.decode(context[keep:], logits_last=1, argmax=greedy)[0]
        if len(context) - keep > STEADY_CATCH_UP:
            out.catch_up_ms = (time.perf_counter() - t_catch0) * 1000.0
        for i in range(k):
            if greedy:
                tok = int(row)
            else:
                q = warp(row, sampling)
                tok = sample(q, rng)
                out.q.append(q)
            out.tokens.append(tok)
            if model.is_eog(tok) or i == k - 1:
                break
            row = model.decode([tok], logits_last=1, argmax=greedy)[0]
        out.decode_ms = model.decode_ms_total - d0
        out.t_ms = (time.perf_counter() - t0) * 1000.0
        return out

    def draft_source(self) -> DraftSource:
        """Its drafts come from the draft model."""
        return DraftSource("model", self.name)

    def rollback(self, committed: Sequence[int]) -> None:
        """Drop draft rows the target rejected: keep the common prefix with the committed tokens."""
        self.model.sync_prefix(committed[self.offset :])

    def time_one_token(self, token: int) -> float:
        """One single-row decode of ``token`` after the draft KV, timed, then removed again (the draft's
        cost per token, without the catch-up of a real round); NaN when the context is full."""
        return self.model.time_scratch_decode([int(token)])

    def reset(self) -> None:
        self.model.clear()
        self.offset = 0

    def close(self) -> None:
        self.model.close()


#: continuation tokens of an unproposed match scored against the text (a plain round commits one)
SHADOW_TOKENS = 4
#: a priced draft must be expected to beat a plain round by this factor (1: any expected gain)
PRICED_MIN_GAIN = 1.0
#: a priced draft of a reply repeating itself (an :data:`EXACT` or :data:`SUBSTITUTED` match) must still beat a plain
#: round when each position's learned acceptance m is lowered to its lower confidence bound m - z·sqrt(m(1 - m) / n),
#: n its bucket's (decayed) count with the prior's pseudo-counts - z = DOUBT_Z (:meth:`NgramDrafter._length`). The
#: drafts proposed are those whose estimate came out above the break-even, so an estimate from few rounds is
#: proposed when it errs high (the winner's curse), and on the AMD EPYC Zen 4 (Genoa), where a 2-row batch of the
#: bundled Q4_1 costs 1.9 single rows, prose's 6-7 such drafts a reply cost 1.6 % (auto-K 0.96-0.97 of plain
#: decoding). Measured there (``--threads 1``, 256 tokens, three pairs each round by round on two copies with the
#: copies swapped, ``specchat.bench.lockstep``; 2026-12-06), auto-K ÷ plain, before -> after: prose 0.962 -> 0.990,
#: copy-heavy 1.360 -> 1.373, copy-then-new 1.058 -> 1.053. A quoted match (a copy of the message above) is not
#: doubted: vetoing its first long drafts, whose buckets have few rounds yet, cost copy-heavy 4 % (1.313 -> 1.263).
#: Replayed over every recorded CPU profile (``tests/engine/test_cost_profiles.py``, 347 cases): auto-K's worst case
#: against plain decoding 0.935 -> 0.958, cases under 0.98 of plain 21 -> 9, under 0.98 of the best fixed K 33 ->
#: 28, geometric mean over plain 1.2858 -> 1.2841. Not taken: z 1.0 (prose 0.984 live, where z 0.5 read 0.995 in
#: the same run); z 0.3 and 0.75 (worse on the replay); a flat margin instead, the ratio to beat 1.1 (prose 0.985, but
#: copy-heavy 1.313 -> 1.265 live and 0.90 of the best fixed K replayed). The suffix drafter doubts as this one does
#: until the history has matched in the turn (:attr:`NgramDrafter.doubted_kinds`, ``SuffixDrafter.lookup``)
DOUBT_Z = 0.5
#: a priced draft's positions stop being counted once P(all kept so far) falls below this: the rest adds under
#: 0.01 expected tokens to a 64-token draft (on prose 26.6 positions a call of 64; the exact bound of
#: :func:`~specchat.engine.telemetry.speedup.cheapest_from` stops them sooner)
NEGLIGIBLE_SURVIVAL = 1e-4
#: a priced position's p is at most this: a copy's long buckets learn ~0.999, yet it breaks at an edit (AMD EPYC Zen 4
#: F16 copy-heavy ÷ K 16, calibration x0.85-1.15: min 0.923 -> 0.968; 347 replayed cases ÷ plain 1.2871 -> 1.2907)
MAX_POSITION_P = 0.99
#: a substituted match (the text goes on as an earlier occurrence did, past one changed token) counts only when
#: this many tokens matched before the change: shorter ones, proposed where a reply had stopped copying, were
#: mostly wrong (the default suite replayed with every CPU profile's verify costs: at 1 its worst prompt lost
#: 3.2 %, at 3 1.8 %)
MIN_SUBSTITUTED_MATCH = 3
#: a substituted match's learned acceptance starts from this share of an exact match's prior: a change may as
#: well be an insertion, after which the copy does not go on (at the full prior the same replay lost 1.8 % on
#: its geometric mean, 5.7 % on its worst prompt)
SUBSTITUTED_PRIOR_SHARE = 0.5
#: how many tokens before a draft position an earlier occurrence must share with it for its next token to count in
#: that position's *agreement* (:meth:`NgramDrafter._agreement`). Replayed with every CPU profile's verify costs
#: (``tests/data/cpu-profiles``, 4 CPUs x their formats) over the recorded default suite, 155 cases, auto-K against
#: plain decoding, geometric mean: 1.3794 without agreement; depth 12 1.3949 (code +2.0 %, prose +2.0 %, summary
#: +0.6 %, copy-then-new +1.0 %, copy-heavy unchanged; worst case unchanged, 0.960), 8 1.3931, 16 1.3923, 24
#: 1.3879, 6 1.3904; the 4-gram alone (depth 4) 1.3786 - copy-heavy -2.3 %: a copied block's common 4-grams went
#: on otherwise elsewhere in the text, where a context of 12 tokens finds only the slots where a repeated line
#: varied (``if n % 3``, ``if n % 5``). Fixed K gains as much (K 16: 1.2933 -> 1.3166), so auto-K against the
#: best fixed K stays 1.047
AGREEMENT_DEPTH = 12
#: the kinds of match whose acceptance :class:`NgramDrafter` learns apart (an index into its tables; a subclass
#: adds its own after these, :attr:`NgramDrafter.PRIOR_SHARES`): an exact match into the reply being written, a
#: substituted match, an exact match into the text before this turn (the user's message, earlier turns: *quoted*)
EXACT, SUBSTITUTED, QUOTED = 0, 1, 2
#: the exponent of a quoted match's prior p(l) = (l / (l + 1)) ** e from QUOTED_SURE_MATCH tokens on (an exact match's
#: is 2). A reply that copies the text before it goes on copying far more surely than one that repeats itself: over the
#: recorded replies (the default suite, the bundled model and its Q8_0 and F16 re-encodings, 1,040 positions with a
#: match of 4+ tokens into the prompt, 1,881 into the reply), the next token was kept at match lengths 8-15 / 16-31 /
#: 32+ 97 % / 100 % / 99 % of the time where the match was into the prompt, 90 % / 93 % / 97 % into the reply itself
#: (prose 84 % / 89 % / 94 %). With one prior for both, a copy's first drafts waited until its learned p(l) caught up.
#: Live on an AMD EPYC Zen 4 (``--threads 1``, one process, auto-K replies to the default suite interleaved with and
#: without it, medians of 3): auto-K ÷ plain on copy-heavy 1.20 -> 1.26 (bundled Q4_1) and 1.47 -> 1.57 (Q8_0),
#: geometric mean over the five prompts 1.021 -> 1.055 and 1.073 -> 1.087 (with QUOTED_SURE_MATCH, Q4_1: copy-heavy 1.15
#: -> 1.24, copy-then-new 0.99 -> 1.04, summary 1.00 -> 1.03, prose 0.96 -> 0.98; Q8_0: copy-heavy 1.40 -> 1.57, code
#: 1.02 -> 0.99, summary 1.08 -> 1.03, the suite 1.095 -> 1.104)
QUOTED_PRIOR_POWER = 0.5
#: a quoted match shorter than this starts from an exact match's prior: at 4-7 matched tokens a quoted match's next
#: token was kept 76 % of the time (the exact prior there: 64-73 %) - where a reply's edit begins, short matches into
#: the text above keep offering what the edit changed
QUOTED_SURE_MATCH = 8


class NgramDrafter:
    """Prompt-lookup drafting over the prompt and everything generated so far, with a learned draft length.

    **Match** (Saxena 2023, prompt lookup decoding; llama.cpp ``ngram-simple``/``lookup``; HF
    ``PromptLookupCandidateGenerator``): for n from ``max_n`` down to ``min_n``, look the last n tokens up
    in an index of every earlier n-gram (kept incrementally: O(max_n) dict updates per new token). Among
    the ``max_candidates`` most recent occurrences of the longest n that matches, take the one whose match
    with the current suffix extends furthest back (its *match length* l, counted up to ``max_match``;
    ties go to the most recent); the draft is what followed it. A long match is a copy in progress.

    **Length** (how far to trust the copy). The drafter learns, per match-length bucket, p(l) = P(the continuation token
    is accepted | the suffix matched l tokens), from what the target kept: after a verify, :meth:`rollback` sees the
    committed tokens, i.e. how many of the draft were accepted. Draft position i (0-based) is reached only if positions
    < i were accepted, and then the match is l + i long, so P(first d accepted) = prod_{i<d} p(l + i). Counts start from
    a prior that grows with l, mean (l/(l+1))^2 with weight ``prior_weight`` (0.25, 0.44, 0.56, 0.64 for l = 1..4, 0.94
    at 32: close to what the bundled SmolLM2 showed on code, prose, a copy and a summary, where one- to three-token
    matches were right 25-50 % of the time and matches of 24+ tokens ~99 %), and relax back to it with a half-life of
    ``half_life`` rounds, so the estimates follow recent acceptance and a bucket that stopped drafting is tried again. A
    continuation found but not proposed (its price too high for its confidence) is scored too, for free, against the
    tokens the target commits next (a *shadow* draft): where v is steep the drafter would otherwise never draft, so
    never learn that a copy in progress is ~99 % right. Each later position's p is also multiplied by its *agreement*:
    of the earlier occurrences of that position's context (``AGREEMENT_DEPTH`` tokens, found through its last
    ``max_n``), the share that went on with the draft's token, as SuffixDecoding scores a candidate by how often it
    followed the match (Oliaro et al. 2024); the first position's is the share of the match's candidates
    (``last_agreement``). A copy usually breaks where the text it copies had itself varied - a repeated line with
    another number in it: on the recorded replies (default suite, both recording CPUs), at match lengths of 16 or more
    the first continuation token was kept 344 times of 345 where every earlier occurrence of its 4-gram agreed, 16 of
    24 where fewer than half did. A priced position's p counts at most :data:`MAX_POSITION_P`.

    * With ``verify_cost`` set (a callable returning the table v by K, ``table[K]`` the verify cost of K+1 rows relative
      to one row, or None while it is not measured beyond one row: the engine sets
      :meth:`specchat.engine.telemetry.CostModel.measured_v`): d = argmax_d (1 + sum_{i<=d} P_i) / v(d), the expected
      tokens of the round per unit of its verify cost (d = 0 means a plain round). Where v is steep - an AMD EPYC
      verifies 2 rows of the bundled Q4_1 for 1.85-2.5 single rows - a short or doubtful match is not worth a batch at
      all, and the drafter stays quiet. A reply repeating itself (an exact or substituted match, not a quoted one) is
      proposed only where it still pays at each position's lower confidence bound (:data:`DOUBT_Z`): the drafts chosen
      are those whose estimates erred high;
    * otherwise (or while v is not measured beyond one row): the longest d with P(first d accepted) >=
      ``min_confidence``. A drafted token costs about v(K) - v(K-1) target steps; on this CPU's build that is ~0.5
      (v is steep), the default's order. Matches of 1-3 tokens start below it: they draft once evidence says so.

    **Substitution.** Text that repeats with one token changed - the next record of a list with a new number, a
    saved reply's template with another field name, a copy with a renamed identifier - breaks the exact match at
    the changed token, and the suffix after it matches nothing long until the copy has gone on for a while. So
    the drafter also looks up the suffix *before* the last token: an earlier occurrence of it that went on with
    another token (the one the text changed) is a *substituted match*, and the draft is what followed that token
    there. It has its own learned p(l) (its prior ``SUBSTITUTED_PRIOR_SHARE`` of an exact match's, since a change
    may as well be an insertion after which the copy does not go on), needs ``MIN_SUBSTITUTED_MATCH`` tokens
    matched before the change, and wins over the exact match when its best draft is worth more (the expected
    tokens per unit of verify cost when priced, the expected tokens otherwise); the other one is scored as a
    shadow in its own table. Replayed with the recorded verify costs of three CPUs (``tests/data/cpu-profiles``)
    on the bundled SmolLM2's greedy replies to the bench's history tasks (21 functions over records, each
    measured against an index of the other 20, leave-one-out), the tokens per unit of verify cost moved by a
    geometric mean of +0.1 % to +3.5 % per CPU and format (suffix drafter; from -5 % to +24 % per reply, the
    gains where an example list's rows differ in one number), the n-gram drafter's by -0.1 % to +3.4 %; on the
    default suite +0.2 % over prompts, formats and CPUs, from -1.8 % (Xeon F16, copy-heavy: a 64-token match
    broken by an insertion) to +7.6 % (issue 20's EPYC's F16, code). The bench's history task on this AMD EPYC Zen 5
    (bundled Q4_1, fixed K 16): mean accepted length 1.87 to 2.13 (n-gram), 2.43 to 2.78 (suffix).

    **Boundaries.** A continuation stops after the first end-of-turn token of the text it copies (``boundary``,
    the target's ``is_eog``, set by the engine): what follows it is the next message's chat template and
    another speaker's words, which a reply copying the message above does not go on with. On the bench's
    copy-then-new reply (an edited copy of the prompt's code, then an explanation) a 64-token match proposed 47
    tokens running 34 past the source message's end; the Xeon's Q4_1 verified 48 rows for 6 kept.

    **Quoted matches.** An exact match into the text before this turn (up to its latest end-of-turn token: the
    user's message, earlier turns) is a *quoted* match (:data:`QUOTED`), with its own learned p(l) from a surer
    prior (:data:`QUOTED_PRIOR_POWER`, from :data:`QUOTED_SURE_MATCH` tokens on): a reply that copies the message
    above goes on copying more surely than one that repeats itself.

    No match, or no position confident enough: no draft, and the round is a plain decode that costs nothing extra.
    The drafter only proposes; the target's verify decides what is kept (exactness is the speculative loop's).
    """

    kind = NGRAM
    free = DRAFTER_KINDS[NGRAM].free
    k_cap = DRAFTER_KINDS[NGRAM].k_cap
    #: lower bounds of the match-length buckets
    BUCKETS: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48)
    #: per kind of match (:data:`EXACT`, :data:`SUBSTITUTED`, :data:`QUOTED`, ...): the share of the prior its learned
    #: p(l) starts at, and the prior's exponent e in (l / (l + 1)) ** e
    PRIOR_SHARES: tuple[float, ...] = (1.0, SUBSTITUTED_PRIOR_SHARE, 1.0)
    PRIOR_POWERS: tuple[float, ...] = (2.0, 2.0, QUOTED_PRIOR_POWER)
    #: the kinds of match whose priced drafts must still pay at the lower confidence bound (:data:`DOUBT_Z`)
    doubted_kinds: frozenset[int] = frozenset({EXACT, SUBSTITUTED})

    def __init__(
        self,
        min_n: int = 1,
        max_n: int = 4,
        name: str = NGRAM,
        *,
        min_confidence: float = 0.6,
        max_candidates: int = 16,
        max_match: int = 64,
        prior_weight: float = 2.0,
        half_life: float = 64.0,
        verify_cost: Callable[[], Sequence[float] | None] | None = None,
        min_gain: float = PRICED_MIN_GAIN,
        boundary: Callable[[int], bool] | None = None,
    ) -> None:
        if not (1 <= min_n <= max_n):
            raise ValueError(f"ngram sizes must satisfy 1 <= min_n <= max_n, got {min_n}..{max_n}")
        if not (0.0 < min_confidence <= 1.0):
            raise ValueError(f"min_confidence must be in (0, 1], got {min_confidence}")
        self.min_n = min_n
        self.max_n = max_n
        self.name = name
        self.min_confidence = min_confidence
        self.max_candidates = max(1, max_candidates)
        self.max_match = max(max_n, max_match)
        self.prior_weight = prior_weight
        self._relax = 0.5 ** (1.0 / half_life) if half_life > 0 else 1.0
        self.verify_cost, self.min_gain, self._cheapest = verify_cost, min_gain, CheapestFrom(min_gain)
        #: tokens a continuation stops after (end of a turn), None: none
        self.boundary = boundary
        #: per kind, per bucket: the prior p(l) its learned acceptance starts from and relaxes back to
        self._priors = [[self._prior(kind, lo) for lo in self.BUCKETS] for kind in range(len(self.PRIOR_SHARES))]
        #: the bucket of every match length up to the last bucket's bound (a list index: the lookup runs for each
        #: position of every priced draft)
        self._bucket_of = [max(0, sum(1 for lo in self.BUCKETS if lo <= n) - 1) for n in range(self.BUCKETS[-1] + 1)]
        self.reset()

    def reset(self) -> None:
        """Forget the text and what was learned about it."""
        self._reset_index()
        w = self.prior_weight
        # per kind of match (PRIOR_SHARES): pseudo-counts of accepted positions, and of verified positions
        self._acc = [[p * w for p in prior] for prior in self._priors]
        self._n = [[w] * len(prior) for prior in self._priors]
        #: the proposed draft: (context length, match length, draft, kind of match)
        self._pending: tuple[int, int, list[int], int] | None = None
        #: continuations found but not proposed (too doubtful for their verify cost, or the other kind of match
        #: won), scored at the next lookup
        self._shadows: list[tuple[int, int, list[int], int]] = []
        #: match length of the latest lookup (0 = no match), for display and tests
        self.last_match_len = 0
        #: the kind of the latest lookup's match (:data:`EXACT`, :data:`SUBSTITUTED`, ...; the class docstring)
        self.last_kind = EXACT
        #: of the latest lookup's candidate occurrences, the share whose next token is the draft's first
        self.last_agreement = 1.0
        #: the latest :meth:`draft_length`'s P(first j accepted), j = 1.. (:attr:`Draft.survival`)
        self.last_survival: list[float] = []
        #: where the latest lookup's continuation starts in the indexed text (-1: none, or not in this text)
        self.last_start = -1

    def _reset_index(self) -> None:
        self._tokens: list[int] = []
        #: the list last read: handed again, longer, it is the same text continued (the decoder appends to one list
        #: in a reply), not compared whole: 9 us a round at 300 tokens, 36 at 4,000 after a decode (AMD EPYC Zen 4)
        self._seen: Sequence[int] | None = None
        #: where this turn's text begins in the indexed text: after its latest end-of-turn token (``boundary``)
        self._turn_start = 0
        #: the indexed positions of end-of-turn tokens, in order (each new token asked once; a continuation is cut
        #: at the first one by bisection, where asking each of its up to 64 tokens was ~7,000 calls a prose reply)
        self._ends: list[int] = []
        #: :meth:`_agreement` by position: (the occurrences of its n-gram, how many there were, the share)
        self._agreements: dict[int, tuple[list[int], int, float]] = {}
        # n -> {ngram tuple: end positions (index of the token that followed it), oldest first}
        self._index: dict[int, dict[tuple[int, ...], list[int]]] = {n: {} for n in range(self.min_n, self.max_n + 1)}

    def _extend_index(self, context: Sequence[int]) -> None:
        have = len(self._tokens)
        if have > len(context) or (context is not self._seen and list(context[:have]) != self._tokens):
            self._reset_index()  # another conversation: new text, same learned acceptance
            have = 0
        self._seen = context
        self._tokens.extend(context[have:])
        toks = self._tokens
        if self.boundary is not None:
            self._ends.extend(i for i in range(have, len(toks)) if self.boundary(toks[i]))
            self._turn_start = self._ends[-1] + 1 if self._ends else 0
        # index n-grams ending at e (exclusive) for every e < len: they all have a continuation token
        for e in range(max(have, 1), len(toks)):
            for n, idx in self._index.items():
                if e >= n:
                    key = tuple(toks[e - n : e])
                    pos = idx.get(key)
                    if pos is None:
                        idx[key] = [e]
                    else:
                        pos.append(e)

    def _match(self, context: Sequence[int]) -> tuple[int, int]:
        """(end position of the best earlier occurrence, its match length), or (-1, 0)."""
        self._extend_index(context)
        toks = self._tokens
        L = len(toks)
        for n in range(self.max_n, self.min_n - 1, -1):
            if L < n + 1:
                continue
            positions = self._index[n].get(tuple(toks[L - n :]))
            if not positions:
                continue
            best, best_len = -1, -1
            nexts: list[int] = []
            for e in reversed(positions[-self.max_candidates :]):
                if e >= L:
                    continue
                nexts.append(toks[e])
                m = n
                while m < self.max_match and e - m - 1 >= 0 and toks[e - m - 1] == toks[L - m - 1]:
                    m += 1
                if m > best_len:
                    best, best_len = e, m
            if best >= 0:
                self.last_agreement = nexts.count(toks[best]) / len(nexts)
                return best, best_len
        self.last_agreement = 1.0
        return -1, 0

    def _substituted_match(self) -> tuple[int, int]:
        """(start of the continuation, match length) of the best substituted match of the indexed text, or (-1, 0):
        an earlier occurrence of the n-gram before the last token that went on with another token, its match
        counted back from there (the changed token not included), the continuation what followed the change."""
        toks = self._tokens
        L = len(toks)
        for n in range(self.max_n, self.min_n - 1, -1):
            if L < n + 2:
                continue
            positions = self._index[n].get(tuple(toks[L - 1 - n : L - 1]))
            if not positions:
                continue
            best, best_len = -1, -1
            for e in reversed(positions[-self.max_candidates :]):
                if e + 1 >= L or toks[e] == toks[L - 1]:
                    continue  # nothing after it yet, or the same token: the exact match's
                m = n
                while m < self.max_match and e - m - 1 >= 0 and toks[e - m - 1] == toks[L - 2 - m]:
                    m += 1
                if m > best_len:
                    best, best_len = e, m
            if best >= 0:
                return (best + 1, best_len) if best_len >= MIN_SUBSTITUTED_MATCH else (-1, 0)
        return -1, 0

    def _continuation(self, start: int, k: int) -> list[int]:
        """Up to k indexed tokens from ``start``, stopped after the first end-of-turn token."""
        end = min(start + k, len(self._tokens))
        j = bisect_left(self._ends, start)
        if j < len(self._ends) and self._ends[j] < end:
            end = self._ends[j] + 1
        return self._tokens[start:end]

    def _agreement(self, p: int) -> float:
        """Of the earlier occurrences of the context before indexed position ``p`` (found through its ``max_n``
        tokens, the ``max_candidates`` most recent occurrences, those sharing :data:`AGREEMENT_DEPTH` tokens of
        context with ``p``), the share whose next token is ``p``'s; 1.0 where no other occurrence has that context.
        Kept by position until that n-gram occurs again (a copy prices the same positions round after round)."""
        depth = max(AGREEMENT_DEPTH, self.max_n)
        if p < depth:
            return 1.0
        toks = self._tokens
        kept = self._agreements.get(p)
        if kept is not None and len(kept[0]) == kept[1]:
            return kept[2]
        occ = self._index[self.max_n][tuple(toks[p - self.max_n : p])]  # p itself is one: it is indexed
        context = toks[p - depth : p]
        target = toks[p]
        same = other = 0
        for q in occ[-self.max_candidates :]:
            if q == p or (q >= depth and toks[q - depth : q] == context):
                if toks[q] == target:
                    same += 1
                else:
                    other += 1
        share = same / (same + other) if other else 1.0
        self._agreements[p] = (occ, len(occ), share)
        return share

    def _bucket(self, match_len: int) -> int:
        of = self._bucket_of
        return of[match_len] if match_len < len(of) else len(self.BUCKETS) - 1

    def confidence(self, match_len: int, kind: int | None = None) -> float:
        """Current estimate of p(l): P(the next continuation token is accepted | match length l), for a match of
        ``kind`` (None: the latest lookup's)."""
        b = self._bucket(match_len)
        s = self.last_kind if kind is None else kind
        return self._acc[s][b] / self._n[s][b]

    def lookup(self, context: Sequence[int], k: int) -> list[int]:
        """The continuation (up to k tokens) of the best suffix match, exact or substituted (the one whose best
        draft is worth more, the other kept as a shadow), or []."""
        e, self.last_match_len = self._match(context)
        exact = QUOTED if 0 <= e < self._turn_start else EXACT
        self.last_kind, self.last_start = exact, e
        if k <= 0:
            return []
        cont = self._continuation(e, k) if e >= 0 else []
        s, s_len = self._substituted_match()
        alt = self._continuation(s, k) if s >= 0 else []
        if not alt:
            return cont
        exact_len, agreement = self.last_match_len, self.last_agreement
        exact_worth = self._length(exact_len, len(cont), agreement, exact, e)[1] if cont else 0.0
        if cont and exact_worth >= self._length(s_len, len(alt), 1.0, SUBSTITUTED, s)[1]:
            self._shadows.append((len(context), s_len, alt[:SHADOW_TOKENS], SUBSTITUTED))
            return cont
        if cont:
            self._shadows.append((len(context), exact_len, cont[:SHADOW_TOKENS], exact))
        self.last_match_len, self.last_agreement, self.last_kind, self.last_start = s_len, 1.0, SUBSTITUTED, s
        return alt

    def _prior(self, kind: int, lo: int) -> float:
        """The prior p(l) of ``kind`` at match length ``lo``: its share of (l / (l + 1)) ** its power; a quoted match
        shorter than :data:`QUOTED_SURE_MATCH` has an exact match's power."""
        short_quote = kind == QUOTED and lo < QUOTED_SURE_MATCH
        power = self.PRIOR_POWERS[EXACT if short_quote else kind]
        return self.PRIOR_SHARES[kind] * (lo / (lo + 1.0)) ** power

    def draft_length(self, match_len: int, available: int) -> int:
        """How many of ``available`` continuation tokens to propose for the latest lookup's match of ``match_len``."""
        return self._length(match_len, available, self.last_agreement, self.last_kind, self.last_start, False)[0]

    def _length(self, match_len: int, available: int, agreement: float, kind: int,
                start: int = -1, need_worth: bool = True) -> tuple[int, float]:
        """(how many of ``available`` continuation tokens to propose, what that draft is worth): with the verify
        cost measured, the best expected tokens per unit of verify cost of any length; otherwise the expected
        tokens of the round (1 + P_1 + ... + P_d). ``agreement`` scales the first position, :meth:`_agreement`
        the later ones of a continuation that starts at indexed position ``start`` (-1: not in this text). Sets
        :attr:`last_survival`. Without ``need_worth``, a first position no length can pay for (``CheapestFrom.floor``)
        answers (0, 0.0) unpriced: 131 of prose's 170 pricings, its draft step 66 -> 55 us a round with the caches
        evicted as by a decode (bundled Q4_1's table, AMD EPYC Zen 4; the same drafts at three formats' tables)."""
        p = 1.0
        table = self.verify_cost() if self.verify_cost is not None else None
        survival = self.last_survival = []
        end = len(self._tokens) if start >= 0 else 0
        if table is None:  # not measured beyond one row: v = 1 would make any draft free
            d = 0
            for i in range(available):
                p *= self.confidence(match_len + i, kind)
                if 0 < i and start + i < end:
                    p *= self._agreement(start + i)
                if p < self.min_confidence:
                    break
                survival.append(p)
                d = i + 1
            return d, 1.0 + sum(survival)
        expected = 1.0
        best, best_d = self.min_gain, 0  # a plain round: one token per unit cost, and the margin a draft must beat
        worth = 0.0
        p = agreement  # earlier occurrences that went on otherwise: the copy may not go on here either
        doubt = DOUBT_Z if kind in self.doubted_kinds else 0.0
        p_low = p  # the same product at each position's lower confidence bound (DOUBT_Z)
        expected_low = best_low = 1.0
        acc, n = self._acc[kind], self._n[kind]
        b = self._bucket(match_len)
        if not need_worth and p * min(acc[b] / n[b], MAX_POSITION_P) < self._cheapest.floor(table) - 1e-9:
            return 0, 0.0  # the answer without pricing a position: d positions expect at most 1 + d·P_1
        last = min(available, len(table) - 1) - 1
        cheapest = self._cheapest(table) if last > 0 else table  # a longer draft costs at least cheapest[d + 1]
        for i in range(last + 1):
            b = self._bucket(match_len + i)
            m = min(acc[b] / n[b], MAX_POSITION_P)
            p *= m
            if doubt:
                p_low *= max(0.0, m - doubt * math.sqrt(max(0.0, m * (1.0 - m)) / n[b]))
            if 0 < i and start + i < end:
                a = self._agreement(start + i)
                p *= a
                p_low *= a
            if p < NEGLIGIBLE_SURVIVAL:
                break  # the rest adds nothing a verify could pay for
            survival.append(p)
            expected += p
            expected_low += p_low
            cost = table[i + 1]
            if cost > 0:
                worth = max(worth, expected / cost)
                if expected / cost > best:
                    best, best_d, best_low = expected / cost, i + 1, expected_low / cost
            if i < last and expected + p * (last - i) <= worth * cheapest[i + 2]:
                break  # no longer draft can be worth more: each further position adds at most p
        if doubt and best_d and best_low <= self.min_gain:
            best_d = 0  # it pays only if its estimate errs low: not proposed (a shadow still scores it)
        return best_d, worth

    def draft(self, context: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator) -> Draft:
        t0 = time.perf_counter()
        self._pending = None
        shadows, self._shadows = self._shadows, []
        for shadow in shadows:  # what the last lookup would have proposed, against what the target then kept
            self._learn(*shadow, context)
        tokens: list[int] = []
        natural = 0
        if k > 0:
            # look as far as its cap so the cost model learns the length this drafter would choose at any
            # cap (auto-K's replay); the first k of that draft are what drafting with cap k proposes
            cont = self.lookup(context, max(k, self.k_cap))
            if cont:
                natural = self.draft_length(self.last_match_len, len(cont))
                tokens = list(cont[: min(k, natural)])
                if tokens:
                    self._pending = (len(context), self.last_match_len, tokens, self.last_kind)
                else:
                    self._shadows.append((len(context), self.last_match_len, cont[:SHADOW_TOKENS],
                                          self.last_kind))
        survival = tuple(self.last_survival[: len(tokens)]) if len(self.last_survival) >= len(tokens) else None
        return Draft(tokens=tokens, q=None, t_ms=(time.perf_counter() - t0) * 1000.0, natural=natural,
                     survival=survival if tokens else None)

    def draft_source(self) -> DraftSource:
        """Its drafts copy this conversation."""
        return DraftSource("conversation", self.name)

    def rollback(self, committed: Sequence[int]) -> None:
        """Learn from the verify: ``committed`` extends the drafted context by the accepted draft prefix."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self._learn(*pending, committed, verified=True)

    def _learn(self, n_ctx: int, match_len: int, tokens: Sequence[int], kind: int, committed: Sequence[int],
               *, verified: bool = False) -> None:
        """Count the outcome of ``tokens`` proposed after ``n_ctx`` context tokens for a match of ``match_len``
        (of ``kind``, each kind its own counts), as far as ``committed`` (the text the target kept) tells it: the
        accepted positions, then the first refusal; for a shadow (``verified`` False) positions not committed yet are
        unknown and not counted, for a verified draft the first position past what was kept was refused."""
        got = committed[n_ctx : n_ctx + len(tokens)]
        if not got and not verified:
            return
        a = 0
        while a < len(got) and got[a] == tokens[a]:
            a += 1
        r = self._relax
        w = self.prior_weight
        acc, n = self._acc[kind], self._n[kind]
        for b, p0 in enumerate(self._priors[kind]):  # relax every bucket towards its prior (recent evidence counts)
            acc[b] = acc[b] * r + p0 * w * (1.0 - r)
            n[b] = n[b] * r + self.prior_weight * (1.0 - r)
        known = len(tokens) if verified else len(got)
        for i in range(min(a + 1, known)):  # positions verified: accepted ones, then the first rejection
            b = self._bucket(match_len + i)
            n[b] += 1.0
            if i < a:
                acc[b] += 1.0

    def time_one_token(self, token: int) -> float:
        """A lookup runs no model: drafting costs nothing next to a target decode."""
        return 0.0

    def limit_catch_up(self, tokens: int) -> None:
        """The n-gram index is extended incrementally at no real cost: nothing to limit."""

    def close(self) -> None:
        pass
