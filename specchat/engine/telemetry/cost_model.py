"""The cost model: online estimates of α, c and v(K) from the rounds, and the predicted speedup curve.

:class:`CostModel` learns per drafter the acceptance α and the draft cost per token, shares one
:class:`~specchat.engine.telemetry.verify_cost.VerifyCost` for the target, and predicts
S(K) = E(α, K) / (c·K + v(K)) (:mod:`specchat.engine.telemetry.speedup`) - as the replay of the drafter's
recent rounds at every K once it has some (:mod:`specchat.engine.telemetry.replay`). The observations run
once per round and cost microseconds; the replay curve (a small numpy product, 0.05-0.5 ms) is recomputed at
most every :data:`CURVE_REFRESH_MS` of generation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specchat.engine.drafter_kinds import K_MAX
from specchat.engine.events import CostEstimate, Round, VerifyCurve
from specchat.engine.telemetry.recent import RecentMedian
from specchat.engine.telemetry.replay import Replay, natural_length
from specchat.engine.telemetry.speedup import best_k, break_even_alpha, speedup_curve
from specchat.engine.telemetry.verify_cost import MAX_ROWS, VerifyCost

#: How stale (in ms of generation, as the rounds report it) the speedup curve may be. Replaying the recent
#: rounds costs up to 0.5 ms, and it used to let go of the GIL in each numpy call over more than 500 elements
#: (it now works in blocks under that: :data:`~specchat.engine.telemetry.replay.GIL_FREE_LOOP`): in the app,
#: the UI thread took it and the engine waited for it back. py-spy on the app streaming a reply (bundled
#: model, n-gram K 3, --threads 1, one replay per round): 7 % of the engine thread's time waiting for the GIL
#: in replay_speedups. Staleness in ms rather than rounds bounds what it can cost auto-K: cheap rounds share a
#: curve, a round of 100 ms or more always gets a fresh one. Calibrations and a changed drafter, cap or α
#: override refresh it at once.
CURVE_REFRESH_MS = 100.0
#: drafting rounds (age-weighted) before what they measured corrects the prediction (CostModel.cost_ratio)
MIN_MEASURED_ROUNDS = 3.0
#: the correction's bounds: a cost model off by more than this is a bug, not drift
COST_RATIO_CLAMP = 3.0


@dataclass(frozen=True, slots=True)
class AlphaWindow:
    """The rounds α is estimated from, as the cost model weights them (see :class:`CostModel`): sums over one
    drafter's rounds, each weighted by its age in tokens of text - the same weights for every sum, so figures
    computed from them (α, acceptance, mean accepted length) all describe the same rounds. ``prior_*`` is the
    part of ``accepted``/``rejections`` that is the prior's pseudo-observations, not evidence."""

    accepted: float  # accepted draft tokens, prior included
    rejections: float  # rounds whose draft was cut short, prior included
    drafted: float  # drafted tokens
    rounds: float  # rounds that asked the drafter for tokens
    drafting_rounds: float  # of those, rounds that drafted at least one token
    prior_accepted: float
    prior_rejections: float
    half_life: float  # in tokens of text

    @property
    def alpha(self) -> float | None:
        """The cost model's α (prior included); None when no round drafted (it would be the prior alone)."""
        tot = self.accepted + self.rejections
        return self.accepted / tot if tot > 0.0 and self.drafting_rounds > 0.0 else None


class _DrafterStats:
    __slots__ = (
        "acc", "rej", "clock", "draft", "ratio", "spec_steps", "last", "replay", "drafted", "rounds", "drafting", "prior_acc",
        "prior_rej", "spent_ms", "t1_by_drafted", "plain_ms", "measured",
    )

    def __init__(self, clock: float, prior_alpha: float, prior_weight: float, window: int, replay: int) -> None:
        # prior as pseudo-observations: prior_weight rejections and the matching accepted count
        self.rej = prior_weight
        self.acc = prior_weight * prior_alpha / (1.0 - prior_alpha)
        self.prior_rej = self.rej
        self.prior_acc = self.acc
        # the other sums of the same rounds, aged with the same factor (AlphaWindow)
        self.drafted = 0.0
        self.rounds = 0.0
        self.drafting = 0.0
        self.clock = clock
        self.draft = RecentMedian(window)  # ms per drafted token
        self.ratio = RecentMedian(window)  # ms per drafted token / the single-row target ms at that time: c
        self.spec_steps = 0
        self.last: tuple[int, int] = (0, 0)
        self.replay = Replay(replay)
        # the drafting rounds' wall time, the single-row time at each one by its draft length (what the cost
        # model prices them at with today's table, CostModel.cost_ratio), and what plain decoding would have
        # taken for the tokens they emitted (CostModel.measured_gain)
        self.spent_ms = 0.0
        self.t1_by_drafted: dict[int, float] = {}
        self.plain_ms = 0.0
        self.measured = 0.0  # drafting rounds in those sums (age-weighted)

    def age(self, f: float) -> None:
        self.acc *= f
        self.rej *= f
        self.prior_acc *= f
        self.prior_rej *= f
        self.drafted *= f
        self.rounds *= f
        self.drafting *= f
        self.spent_ms *= f
        for d in self.t1_by_drafted:
            self.t1_by_drafted[d] *= f
        self.plain_ms *= f
        self.measured *= f


class CostModel:
    """Online estimates of α (per drafter), draft cost per token (per drafter), single-row target cost
    and the verify-cost table v(rows); predicts S(K) and the best K.

    **α, the per-position acceptance.** Under Leviathan et al.'s model each draft position is accepted
    independently with probability α and the round stops at the first rejection, so a round that drafted
    d tokens and accepted a has likelihood α^a·(1 − α) if a < d, and α^d if a = d (a right-censored
    geometric). The maximum-likelihood estimate over many rounds is

        α̂ = Σ a / (Σ a + Σ [a < d])        (accepted tokens / (accepted tokens + rejections))

    which, unlike accepted/drafted, is not biased down by long drafts (accepted/drafted → α(1−α^K)/(K(1−α))).
    Both sums are exponentially weighted by age measured in *tokens of text* (half-life
    ``alpha_half_life`` tokens; a round ages them by the accepted + 1 tokens it emitted, a plain round by
    one): predictability is a property of the text, so the window covers about the same stretch of text
    at K = 1 (many rounds, little evidence each) as at K = 16 (few rounds, much evidence each). Plain
    rounds age the evidence too, so while not drafting the ratio stays but a new probe moves it quickly;
    ageing stops at ``alpha_min_weight`` (accepted tokens + rejections), so a single lucky probe cannot
    outweigh everything seen before: one accepted token of four is no proof, four of four is.
    Start: ``prior_alpha`` as ``prior_weight`` pseudo-rejections, which ages away.

    **Timings** are medians of the last ``timing_window`` samples
    (:class:`~specchat.engine.telemetry.recent.RecentMedian`), robust to the spikes of a shared CPU.

    **Draft cost** per drafter: draft ms / drafted tokens (rounds with a draft only). An n-gram lookup
    measures ~0. Before any measurement: 0 (the first drafting round measures it). c is the median of
    *ratios*, each draft timing divided by the single-row target time of its moment (the verify table's t1
    then, or the interleaved target decode of :func:`~specchat.engine.calibration.draft_cost_ratios`), not
    the draft median over today's t1: a shared CPU's load moves both models' times together, and a draft
    timed once at start-up divided by a t1 measured later under twice the load read c = 0.5 for a
    self-draft (c = 1), which let auto-K warm up a drafter that cannot pay (seen as a flaky
    ``test_auto_k_never_drafts_with_a_draft_as_costly_as_the_target``).

    **Verify cost**: :class:`~specchat.engine.telemetry.verify_cost.VerifyCost` (``max_rows``,
    ``timing_window``, ``v_shrink``); single-row samples come from plain rounds and from drafting rounds
    whose drafter proposed nothing.

    Pass ``t_overhead_ms`` (the round's time outside llama_decode) so the prediction covers the whole
    step; ``observe_plain`` should then get the whole plain step time too.
    """

    def __init__(
        self,
        *,
        max_rows: int = MAX_ROWS,
        alpha_half_life: float = 48.0,
        timing_window: int = 31,
        v_shrink: float = 4.0,
        prior_alpha: float = 0.6,
        prior_weight: float = 1.0,
        alpha_min_weight: float = 8.0,
        replay_rounds: int = 64,
        replay_half_life: float = 128.0,
        replay_prior: float = 1.0,
        curve_refresh_ms: float = CURVE_REFRESH_MS,
    ) -> None:
        if not (0.0 < prior_alpha < 1.0):
            raise ValueError("prior_alpha must be in (0, 1)")
        self.max_rows = max_rows
        self.alpha_half_life = alpha_half_life
        self.timing_window = timing_window
        self.v_shrink = v_shrink
        self.prior_alpha = prior_alpha
        self.prior_weight = prior_weight
        self.alpha_min_weight = alpha_min_weight
        self.replay_rounds = max(1, replay_rounds)
        self.replay_half_life = replay_half_life
        self.replay_prior = replay_prior
        self.curve_refresh_ms = curve_refresh_ms
        self._alpha_decay = 0.5 ** (1.0 / alpha_half_life)
        self.reset()

    def reset(self) -> None:
        self._clock = 0.0  # tokens of text seen (α ages with text, not with rounds)
        self._drafters: dict[str, _DrafterStats] = {}
        self.verify = VerifyCost(self.max_rows, window=self.timing_window, shrink=self.v_shrink)
        self._curve_key: tuple | None = None
        self._break_even_key: tuple | None = None
        self._break_even = math.inf
        self._curve: list[float] = []
        self._scaled: dict[str, tuple[list[float], float, list[float]]] = {}  # measured_v's: (table, ratio, scaled)
        self._gen_ms = 0.0  # generation time observed in rounds (the clock the curve's refresh runs on)
        self._curve_ms = 0.0  # _gen_ms when the cached curve was computed

    # -- observations ------------------------------------------------------------------------------
    def _stats(self, drafter: str) -> _DrafterStats:
        st = self._drafters.get(drafter)
        if st is None:
            st = _DrafterStats(
                self._clock, self.prior_alpha, self.prior_weight, self.timing_window, self.replay_rounds
            )
            self._drafters[drafter] = st
        elif st.clock != self._clock:
            f = self._alpha_decay ** (self._clock - st.clock)
            tot = st.acc + st.rej
            if tot * f < self.alpha_min_weight:  # age, but keep some evidence: one probe is not all
                f = min(1.0, self.alpha_min_weight / tot) if tot > 0.0 else 1.0
            st.age(f)
            st.clock = self._clock
        return st

    def observe_step(
        self,
        drafter: str,
        k: int,
        drafted: int,
        accepted: int,
        t_draft_ms: float,
        t_verify_ms: float,
        rows_verified: int,
        t_overhead_ms: float = 0.0,
        natural: int | None = None,
        catch_up_ms: float = 0.0,
        verify_decodes: Sequence[tuple[int, float]] | None = None,
    ) -> None:
        """One round with drafter ``drafter`` asked for ``k`` tokens and proposed ``drafted``, of which
        the target accepted ``accepted``; the verify batch had ``rows_verified`` rows (drafted + 1).

        ``verify_decodes``: the verify's decodes as (rows, ms) when it was split (:meth:`VerifyCost.plan`; a
        rejection in its leading single rows may have ended it early): each joins the table at its own size,
        with the round's overhead shared by rows, so the one-batch costs the plan is made from stay one-batch
        costs. None: one decode of ``rows_verified`` rows taking ``t_verify_ms``.

        ``catch_up_ms``: the part of ``t_draft_ms`` spent reading context the drafter had missed
        (:attr:`specchat.engine.drafters.Draft.catch_up_ms`): not a cost per drafted token. The draft cost
        is then timed on the round's other tokens (its first came out of the catch-up decode), or not at all.

        ``natural``: the draft length the drafter would have chosen with no cap (a drafter that decides
        its own length, e.g. n-gram; 0 = it found nothing to propose); None = it always fills K. A round
        with ``drafted`` = 0 (the drafter was asked but proposed nothing) counts for the replay curve.
        """
        if drafted < 0 or not (0 <= accepted <= drafted):
            raise ValueError(f"inconsistent step: drafted={drafted} accepted={accepted}")
        natural = natural_length(k, drafted, natural)
        self._clock += accepted + 1  # the clock counts tokens of text (the round emitted accepted + 1)
        self._gen_ms += max(0.0, t_draft_ms) + max(0.0, t_verify_ms) + max(0.0, t_overhead_ms)
        st = self._stats(drafter)
        if k > 0:
            st.replay.add(drafted, accepted, natural, self._clock)
            st.rounds += 1.0
        if drafted > 0:
            t1 = self.target_ms()
            if t1:
                st.t1_by_drafted[drafted] = st.t1_by_drafted.get(drafted, 0.0) + t1
                st.plain_ms += t1 * (accepted + 1)
                st.spent_ms += max(0.0, t_draft_ms) + max(0.0, t_verify_ms) + max(0.0, t_overhead_ms)
                st.measured += 1.0
            st.drafted += drafted
            st.drafting += 1.0
            st.acc += accepted
            if accepted < drafted:
                st.rej += 1.0
            if catch_up_ms > 0.0:
                if drafted > 1:
                    self._add_draft_ms(st, max(0.0, t_draft_ms - catch_up_ms) / (drafted - 1))
            else:
                self._add_draft_ms(st, max(0.0, t_draft_ms) / drafted)
            st.spec_steps += 1
            st.last = (drafted, accepted)
        if not verify_decodes:
            self.verify.observe(rows_verified, t_verify_ms + t_overhead_ms)
        else:
            decoded = sum(rows for rows, _ in verify_decodes)
            for rows, ms in verify_decodes:
                self.verify.observe(rows, ms + t_overhead_ms * rows / decoded)

    def observe_draft_cost(self, drafter: str, ms_per_token: float) -> None:
        """A draft-cost measurement outside generation (one timed draft decode, see
        :func:`specchat.engine.calibration.calibrate_draft_cost`): ``drafter`` takes ``ms_per_token`` per
        drafted token."""
        if not ms_per_token >= 0.0:  # also refuses NaN (the draft's context was full: nothing measured)
            return
        self._curve_key = None
        self._add_draft_ms(self._stats(drafter), ms_per_token)

    def observe_draft_ratio(self, drafter: str, ratio: float) -> None:
        """A draft-cost measurement as a ratio to the target's single-row decode timed beside it
        (:func:`specchat.engine.calibration.draft_cost_ratios`): c itself, free of the load's drift."""
        if not ratio >= 0.0:
            return
        self._curve_key = None
        st = self._stats(drafter)
        st.ratio.add(ratio)
        t1 = self.target_ms()
        if t1:
            st.draft.add(ratio * t1)

    def _add_draft_ms(self, st: _DrafterStats, ms_per_token: float) -> None:
        st.draft.add(ms_per_token)
        t1 = self.target_ms()
        if t1:  # paired with the target time of the same moment (see the class docstring: draft cost)
            st.ratio.add(ms_per_token / t1)

    def has_draft_cost(self, drafter: str) -> bool:
        """True once the draft cost of ``drafter`` was measured (by a round or a calibration)."""
        st = self._drafters.get(drafter)
        return st is not None and (st.draft.value is not None or st.ratio.value is not None)

    def observe_verify(self, rows: int, t_ms: float) -> None:
        """A verify-cost measurement outside generation: one target decode of ``rows`` rows took ``t_ms``
        (see :func:`specchat.engine.calibration.calibrate_verify_cost`)."""
        self._clock += 1
        self._curve_key = None
        self.verify.observe(rows, t_ms)

    def replace_verify_timings(self, timings: Sequence[tuple[int, float]]) -> None:
        """Forget every verify timing and take ``timings`` (rows, ms) instead: a cached calibration rescaled to
        this moment's single-row time (:func:`specchat.engine.calibration.rescale_cached_verify_cost`)."""
        self.verify.reset()
        self._curve_key = None
        for rows, ms in timings:
            self.observe_verify(rows, ms)

    def observe(self, rnd: Round) -> None:
        """One round of the loop (:class:`~specchat.engine.events.Round`): a drafting round when the drafter was
        asked (K > 0; it may have proposed nothing, and that counts too), else a plain single-row decode. The
        round's overhead is charged to its verify, so the predictions cover whole rounds."""
        if rnd.k > 0:
            self.observe_step(
                rnd.drafter, rnd.k, rnd.drafted, rnd.accepted, rnd.t_draft_ms, rnd.t_verify_ms, rnd.drafted + 1,
                t_overhead_ms=rnd.t_overhead_ms, natural=rnd.natural, catch_up_ms=rnd.catch_up_ms,
                verify_decodes=rnd.verify_decodes,
            )
        else:
            self.observe_plain(rnd.t_verify_ms + rnd.t_overhead_ms)

    def observe_plain(self, t_ms: float) -> None:
        """One plain single-row decode (K = 0, speculation off) that took ``t_ms``."""
        self._clock += 1
        self._gen_ms += max(0.0, t_ms)
        self.verify.observe(1, t_ms)

    # -- estimates ---------------------------------------------------------------------------------
    def alpha(self, drafter: str) -> float:
        st = self._drafters.get(drafter)
        if st is None:
            return self.prior_alpha
        tot = st.acc + st.rej
        return st.acc / tot if tot > 0.0 else self.prior_alpha

    def window(self, drafter: str) -> AlphaWindow:
        """The weighted rounds of ``drafter`` that α comes from (:class:`AlphaWindow`), aged to now."""
        st = self._stats(drafter) if drafter in self._drafters else None
        if st is None:
            acc = self.prior_weight * self.prior_alpha / (1.0 - self.prior_alpha)
            return AlphaWindow(acc, self.prior_weight, 0.0, 0.0, 0.0, acc, self.prior_weight, self.alpha_half_life)
        return AlphaWindow(
            st.acc, st.rej, st.drafted, st.rounds, st.drafting, st.prior_acc, st.prior_rej, self.alpha_half_life
        )

    def break_even_alpha(self, drafter: str, k_max: int = K_MAX, gain: float = 1.0) -> float:
        """The smallest α at which some K in 1..``k_max`` beats plain decoding by more than ``gain`` with this
        drafter's measured c and the measured v(K) (:func:`~specchat.engine.telemetry.speedup.break_even_alpha`:
        the geometric model, every round drafting K); ``math.inf`` when none does even at α = 1."""
        table, c = self.verify.table(), self.c(drafter)
        key = (c, self.verify.version, k_max, gain)  # a bisection of 15 speedup curves: once per c and v(K)
        if key != self._break_even_key:
            self._break_even_key, self._break_even = key, break_even_alpha(c, table, k_max, gain)
        return self._break_even

    def draft_ms_per_token(self, drafter: str) -> float:
        """The draft's ms per token now: c × t1 once both are known (so draft ms, target ms and c shown
        together agree), else the measured median; 0 before any measurement."""
        st = self._drafters.get(drafter)
        if st is None:
            return 0.0
        t1 = self.target_ms()
        if st.ratio.value is not None and t1:
            return st.ratio.value * t1
        v = st.draft.value
        return v if v is not None else 0.0

    def target_ms(self) -> float | None:
        """t1: target ms of a single-row decode (None before any target timing)."""
        return self.verify.target_ms()

    def largest_measured_rows(self) -> int:
        """The largest verify batch (rows) with a timing; 0 when none. v beyond it is extrapolated."""
        return self.verify.largest_measured_rows()

    @property
    def steps_since_single_row(self) -> int | None:
        """Observations since the last single-row target timing (None = never measured)."""
        return self.verify.since_single_row

    def v(self, k: int) -> float:
        """v(K): predicted verify cost of K+1 rows relative to one row (v(0) = 1)."""
        return self.verify.v(k)

    def cost_ratio(self, drafter: str) -> float:
        """What ``drafter``'s recent drafting rounds really took over what the cost model prices them at *now*
        (t1 at each round · (v(d) + c·d) with today's v and c), clamped to [1/:data:`COST_RATIO_CLAMP`,
        :data:`COST_RATIO_CLAMP`]; 1.0 until :data:`MIN_MEASURED_ROUNDS` (age-weighted) rounds drafted. The
        speedup curve is divided by it for every K > 0 (:meth:`speedups`) and the n-gram's prices multiplied
        (:meth:`measured_v`), so where the rounds and the table disagree, the rounds win.

        Priced with today's table, not the one each round met: the rounds' own verify timings join the table
        too, so a ratio of the prices the rounds *met* counted a calibration's error twice once the table had
        learnt it. Measured (AMD EPYC Zen 4, bundled Q4_1, ``--threads 1``, the bench's summary prompt, auto-K,
        a cached calibration of v(16) = 5.3 where the rounds cost ~10): the table rose to v(1) 2.0, the old ratio
        stayed at 1.7-2.9, so the n-gram priced a 2-row verify at 3.5-4.5 rows and proposed in 9 rounds of ~190
        (fixed K 16: 34, 83 % kept) - auto-K 0.92x of plain where K 16 read 1.06x."""
        st = self._drafters.get(drafter)
        if st is None or st.measured < MIN_MEASURED_ROUNDS or st.spent_ms <= 0.0:
            return 1.0
        c = self.c(drafter)
        priced = sum(t1 * (self.verify.v(d) + c * d) for d, t1 in st.t1_by_drafted.items())
        if priced <= 0.0:
            return 1.0
        return min(COST_RATIO_CLAMP, max(1.0 / COST_RATIO_CLAMP, st.spent_ms / priced))

    def forget_measured(self, drafter: str) -> None:
        """Drop what ``drafter``'s drafting rounds measured so far (auto-K turned it back on: the new regime is
        judged by its own rounds)."""
        st = self._drafters.get(drafter)
        if st is not None:
            st.spent_ms = st.plain_ms = 0.0
            st.t1_by_drafted = {}
            st.measured = 0.0

    def measured_gain(self, drafter: str) -> float | None:
        """What ``drafter``'s recent drafting rounds delivered against plain decoding: the plain time of the tokens
        they emitted (t1 each) over their wall time; None before :data:`MIN_MEASURED_ROUNDS` rounds drafted.
        Below 1 the drafts lost time, whatever the model predicted."""
        st = self._drafters.get(drafter)
        if st is None or st.measured < MIN_MEASURED_ROUNDS or st.spent_ms <= 0.0:
            return None
        return st.plain_ms / st.spent_ms

    def measured_loss_rows(self, drafter: str) -> float:
        """The time ``drafter``'s recent drafting rounds lost against plain decoding (their wall time minus the
        plain time of the tokens they emitted), in single-row decodes; negative when they gained."""
        st = self._drafters.get(drafter)
        t1 = self.target_ms()
        if st is None or not t1:
            return 0.0
        return (st.spent_ms - st.plain_ms) / t1

    def measured_v(self, drafter: str | None = None) -> list[float] | None:
        """The table v by K (``[K]`` = v of K+1 rows) once a batch of more than one row was timed, else None (the
        flat prior is no price): what the n-gram drafter sizes its drafts by
        (:meth:`specchat.engine.drafters.NgramDrafter.draft_length`). With ``drafter``, every multi-row entry is
        scaled by its :meth:`cost_ratio`: what its rounds really cost against what the table priced them at."""
        if self.verify.largest_measured_rows() <= 1:
            return None
        table = self.verify.table()
        r = self.cost_ratio(drafter) if drafter is not None else 1.0
        if r == 1.0 or drafter is None:
            return table
        # the same scaled list while the table and the ratio stay, so that a drafter's bound on it is kept
        # (speedup.CheapestFrom): a new list per call was 4 us of a ~17 us pricing, and the bound redone on it
        # most of the rest (AMD EPYC Zen 4, the bundled Q4_1's prose reply replayed, 2026-12-06)
        kept = self._scaled.get(drafter)
        if kept is None or kept[0] is not table or kept[1] != r:
            kept = self._scaled[drafter] = (table, r, [table[0], *(x * r for x in table[1:])])
        return kept[2]

    def spec_steps(self, drafter: str) -> int:
        """Rounds observed in which ``drafter`` proposed at least one token."""
        st = self._drafters.get(drafter)
        return st.spec_steps if st else 0

    def last_draft(self, drafter: str) -> tuple[int, int]:
        """(drafted, accepted) of ``drafter``'s latest round with a draft; (0, 0) if none."""
        st = self._drafters.get(drafter)
        return st.last if st else (0, 0)

    def c(self, drafter: str) -> float:
        """c = draft ms per drafted token / single-row target ms: the median of the ratios timed together
        (class docstring); before any ratio, the draft median over t1; 0 before either is measured."""
        st = self._drafters.get(drafter)
        if st is not None and st.ratio.value is not None:
            return st.ratio.value
        t1 = self.target_ms()
        return self.draft_ms_per_token(drafter) / t1 if t1 else 0.0

    def speedups(self, drafter: str, k_max: int = K_MAX, alpha: float | None = None) -> list[float]:
        """[S(0), ..., S(k_max)] with the current estimates (``alpha`` overrides α̂, e.g. α = 1 for a
        ceiling). Cached until a calibration or :attr:`curve_refresh_ms` of rounds since it was computed (see
        :data:`CURVE_REFRESH_MS`)."""
        if k_max >= self.max_rows:
            raise ValueError(f"k_max must be < {self.max_rows}, got {k_max}")
        key = (drafter, k_max, alpha)
        if key == self._curve_key and self._gen_ms - self._curve_ms < self.curve_refresh_ms:
            return self._curve
        v_by_k = self.verify.table()
        a = self.alpha(drafter) if alpha is None else alpha
        st = self._drafters.get(drafter)
        if alpha is None and st is not None and len(st.replay):
            curve = st.replay.curve(
                a, self.c(drafter), v_by_k, k_max, self._clock, self.replay_half_life, self.replay_prior
            )
        else:
            curve = speedup_curve(a, self.c(drafter), v_by_k, k_max)
        r = self.cost_ratio(drafter) if alpha is None else 1.0  # an α override is the geometric model as priced
        if r != 1.0:
            curve = [curve[0], *(x / r for x in curve[1:])]
        self._curve_key, self._curve, self._curve_ms = key, curve, self._gen_ms
        return curve

    def estimate(self, drafter: str, k_current: int, k_max: int = K_MAX, *, verify: VerifyCurve | None = None,
                 alpha_to_pay: float | None = None) -> CostEstimate:
        """The current view for ``drafter`` at K = ``k_current``, and the best K over 0..``k_max``; ``verify``
        (the target's v(K) curve in words, see :meth:`VerifyCost.curve`) is passed through, and so is
        ``alpha_to_pay`` when the caller knows it (it depends on c and v only, not on α: the loop refits it a few
        times a second, :data:`specchat.engine.speculative.FIGURES_REFRESH_S`); else it is bisected here."""
        curve = self.speedups(drafter, k_max)
        b = best_k(curve)
        t1 = self.target_ms()
        return CostEstimate(
            alpha=self.alpha(drafter),
            c=self.c(drafter),
            v=self.v(k_current),
            best_k=b,
            predicted_speedup=curve[b],
            target_ms_per_token=t1 or 0.0,
            draft_ms_per_token=self.draft_ms_per_token(drafter),
            verify=verify,
            alpha_to_pay=self.break_even_alpha(drafter, k_max) if alpha_to_pay is None else alpha_to_pay,
            alpha_is_prior=self.spec_steps(drafter) == 0,
        )


__all__ = ["AlphaWindow", "CostModel"]
