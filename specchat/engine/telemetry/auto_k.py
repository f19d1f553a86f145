"""Auto-K: the policy that picks each round's K from the cost model, and the typed decision it returns.

:class:`AutoK` picks K* = argmax over 0..K_max of the cost model's predicted speedup online, with warm-up,
hysteresis, probing while off, a "cannot pay" rule for costly drafters and single-row re-calibration.
:meth:`AutoK.choose` returns a :class:`KDecision`: the K and a :class:`KReason`, the one list of every
rule that can decide a round.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from enum import StrEnum

from specchat.engine.drafter_kinds import K_MAX
from specchat.engine.telemetry.cost_model import CostModel
from specchat.engine.telemetry.speedup import best_k, expected_tokens


class KReason(StrEnum):
    """Why auto-K chose a round's K: every reason a :class:`KDecision` can carry (see :class:`AutoK`)."""

    #: too few drafting rounds of this drafter yet: ``k_init``, or the cap for a free drafter that picks its
    #: own draft length
    WARM_UP = "warm-up"
    #: one plain round to re-time the single-row target decode, the unit of v and c (none came in
    #: ``calibrate_every`` observations, e.g. a model drafter always drafts)
    CALIBRATE = "calibrate"
    #: while off: one round drafts the K that would be best if α were ``probe_alpha``, to gather evidence
    PROBE = "probe"
    #: the probe's evidence predicts a gain: speculation is back on at the best K
    PROBE_PAID = "probe paid"
    #: it does not: stay off until the next probe (the interval doubles, or resets after a promising probe)
    PROBE_FAILED = "probe failed"
    #: the best K beat the current one by ``margin`` on ``patience`` boundaries: K moved (to 0 = off, too)
    SWITCH = "switch"
    #: keep the current K: nothing beats it by ``margin``, or the last move is still dwelling
    HOLD = "hold"
    #: a costly drafter for which no K beats plain decoding even at α = ``cannot_pay_alpha``: do not draft
    CANNOT_PAY = "cannot pay"
    #: cannot pay, and ``probe_max`` rounds went by: the engine re-times one draft decode now
    #: (:attr:`KDecision.remeasure`), since a cost measured under contention can be wrong
    REMEASURE = "re-measure"
    #: a free drafter's recent drafting rounds delivered less than plain decoding would have, as timed
    #: (:meth:`~specchat.engine.telemetry.CostModel.measured_gain`): drafting off, whatever the model predicted
    MEASURED_LOSS = "measured loss"


@dataclass(frozen=True, slots=True)
class KDecision:
    """What :meth:`AutoK.choose` decided for the next round: draft ``k`` tokens (0 = a plain round), and why."""

    k: int
    reason: KReason

    @property
    def remeasure(self) -> bool:
        """The engine should re-time the drafter (one draft decode) before this round."""
        return self.reason is KReason.REMEASURE

    @property
    def probe(self) -> bool:
        """This round only gathers evidence while speculation is off (a drafter with a KV should not catch
        up on every token since its last round for it)."""
        return self.reason is KReason.PROBE and self.k > 0


class AutoK:
    """Choose K at each step boundary: K* = argmax over 0..k_max of the cost model's S(K), 0 = do not draft.

    Deterministic (no RNG). :meth:`choose` returns a :class:`KDecision`; its :class:`KReason` names which
    rule below decided. The policy:

    * **warm-up** - until the cost model has seen ``warmup_steps`` drafting rounds of this drafter, use
      ``k_init`` (default 1: the first rounds measure the draft cost at the least risk, instead of
      trusting a prior). A *free* drafter that chooses its own length (n-gram: it proposes only
      confident continuations, nothing when nothing matches) warms up at its cap instead: drafting
      costs nothing, it proposes only what it trusts, and a round verified at a large cap tells the
      cost model's replay exactly what every smaller cap would have given (so K can only move down
      on evidence, never creep up on the geometric extrapolation of short rounds);
    * **hysteresis** - move from K to the best K only when it is predicted to beat K by more than
      ``margin`` (relative), on ``patience`` consecutive boundaries, and never reverse the last move
      before ``min_dwell`` boundaries at the new K (its evidence must come in first; moving on the same
      way, e.g. ramping up as acceptance evidence grows, is not held back). For a free drafter that
      chooses its own length the dwell is ``free_dwell``: a cap that is too high costs little (it
      drafts only what it trusts), one that is too low loses the long copies, so it may come back up
      sooner. Near the optimum S(K) is
      flat, so estimation noise does not make K flap. A move up reaches at most twice the largest verify
      batch the cost model has timed: beyond it v is a line's extrapolation, and with K up to 64 one lucky
      warm-up (α̂ ≈ 1) would otherwise jump from K = 1 straight to 64 on a guessed v (the engine times
      every batch size up to K_MAX + 1 before the first round, so this only binds without calibration). Speculation is switched on only when some K is
      predicted to beat plain decoding by ``margin``, and off when none beats it by ``margin / 2`` (a
      band, so it does not flap at the break-even point either);
    * **probing** - at K = 0 no new acceptance evidence arrives (the old evidence keeps ageing in the
      cost model), so now and then one round drafts ``probe_k`` tokens, the K that would be best if α
      were ``probe_alpha`` (a free drafter that sizes its own drafts by the measured verify cost is asked at
      its cap: it proposes only what it expects to pay, so on a CPU where short batches cost more than their
      rows - an AMD EPYC verifies 2 rows of the bundled Q4_1 for 1.85-2.5 single rows - a probe of 1 token,
      the α = 0.8 optimum there, lost on every probe). If the model then predicts a gain, K switches on at once. Otherwise the
      interval between probes doubles from ``probe_min`` up to ``probe_max`` while probes fail, but
      stays where the probes' expected loss (c·K + v(K) − E(α̂, K) plain rounds each) is under
      ``probe_budget`` of the time: free n-gram probes keep coming every ``probe_min`` rounds. A
      promising probe - its own acceptance, accepted / (accepted + 1 rejection) or 1 if all were
      accepted, reaches the break-even α - resets the doubling, so evidence gathers quickly once the
      text became predictable. Probing never stops: even a draft that cannot pay today is re-measured
      every ``probe_max`` rounds, since costs measured under contention can be wrong. A probe whose
      drafter proposed nothing (no n-gram match) is retried on the next round;
    * **cannot pay** - when the draft cost is known (the engine times one draft decode before the first
      round, :func:`specchat.engine.calibration.calibrate_draft_cost`) and no K would beat plain decoding
      by ``margin`` even at a per-position acceptance of ``cannot_pay_alpha`` (0.9; a model drafter's
      warm-up first prefills the whole prompt into its KV, which a gain only reachable above 90 %
      acceptance rarely repays), a costly drafter is not used at all: no warm-up, no probes; every
      ``probe_max`` rounds the decision asks the engine to re-measure the draft, and drafting resumes
      (warm-up, then the rules above) once some K could pay;
    * **calibration** - v and c are ratios to the single-row target time; when no single-row timing came
      in ``calibrate_every`` observations (a model drafter always drafts, so plain rounds never happen),
      one plain round re-measures it.

    **A free drafter that prices its own drafts** (n-gram: :meth:`specchat.engine.drafters.NgramDrafter.draft_length`
    proposes a draft only where its expected tokens beat the measured v(d) by ``margin``, and proposes nothing
    otherwise) is not switched by the predicted curve at all: it already makes the per-round choice with the draft
    in hand, and a curve replayed from a few short early drafts turned it off for a whole reply that later
    copied long runs (a replayed Xeon F16 summary: 0.99x where any fixed K read 1.47x). Its K is the cap, and it
    is judged by what its rounds *delivered*: when the recent drafting rounds' measured gain (the plain time of
    the tokens they emitted over their wall time) falls below ``1 - margin / 2`` and they lost more than
    ``loss_rows`` single-row decodes (so a few cheap misses on a format with a flat v - F16's 2-row batch costs
    1.0-1.14 rows - do not stop a drafter whose long copies are still to come), drafting goes off
    (:attr:`KReason.MEASURED_LOSS`, an AMD EPYC's steep v where a few doubtful drafts lose more than the good
    ones gain); it probes at the cap every ``probe_min`` plain rounds (doubling while probes lose), a probe that
    proposes nothing is retried on the next round at no cost, and one kept whole (the copy goes on: the drafter
    sizes its next drafts by the match it is in; on an AMD EPYC a short batch costs about its rows, so a whole
    probe of 4-8 tokens does not pay for itself there) or whose own round paid turns drafting back on with a
    fresh measurement.

    ``k_max`` bounds every K; :meth:`choose` may lower it per drafter (its kind's cap).
    """

    def __init__(
        self,
        k_max: int = K_MAX,
        *,
        k_init: int = 1,
        margin: float = 0.05,
        patience: int = 2,
        min_dwell: int = 16,
        free_dwell: int = 4,
        warmup_steps: int = 2,
        probe_min: int = 8,
        probe_max: int = 128,
        probe_alpha: float = 0.8,
        probe_budget: float = 0.01,
        calibrate_every: int = 64,
        cannot_pay_alpha: float = 0.9,
        loss_rows: float = 8.0,
    ) -> None:
        if not (1 <= k_max <= K_MAX):
            raise ValueError(f"k_max must be in 1..{K_MAX}, got {k_max}")
        if k_init < 1:
            raise ValueError(f"k_init must be >= 1, got {k_init}")
        if probe_min < 1 or probe_budget <= 0:
            raise ValueError("probe_min must be >= 1 and probe_budget > 0")
        self.k_max = k_max
        self.k_init = min(k_init, k_max)
        self.margin = margin
        self.patience = max(1, patience)
        self.min_dwell = max(0, min_dwell)
        self.free_dwell = max(0, free_dwell)
        self.warmup_steps = warmup_steps
        self.probe_min = probe_min
        self.probe_max = max(probe_max, probe_min)
        self.probe_alpha = probe_alpha
        self.probe_budget = probe_budget
        self.calibrate_every = calibrate_every
        self.cannot_pay_alpha = cannot_pay_alpha
        self.loss_rows = loss_rows
        self.reset()

    def reset(self) -> None:
        """Forget the policy state (K back to ``k_init``); the cost model keeps its estimates."""
        #: the regime: the K used outside probes and calibration rounds
        self.k = self.k_init
        self._drafter: str | None = None
        self._free = False
        self._cap = self.k_max  # the K bound of the current drafter
        self._streak = 0
        self._dwell = self.min_dwell  # boundaries since the regime last changed (free to move at start)
        self._last_dir = 0  # direction of that change: +1 up, -1 down
        self._plain = 0
        self._fails = 0
        self._interval = self.probe_min
        self._probe_pending = False
        self._probe_before = 0

    def fork(self) -> AutoK:
        """A policy with these settings and a fresh state, for another link of a drafter chain
        (:mod:`specchat.engine.chain`): each link's K moves on its own evidence, while its α and c stay the cost
        model's (keyed by the link's name)."""
        twin = copy.copy(self)
        twin.reset()
        return twin

    @property
    def probe_interval(self) -> int:
        """Plain rounds between probes while K = 0."""
        return self._interval

    @property
    def cap(self) -> int:
        """The largest K auto-K chooses for the current drafter (its kind's cap, at most ``k_max``)."""
        return self._cap

    @property
    def dwell(self) -> int:
        """Step boundaries since K last moved (a move is not reversed before :attr:`dwell_min` of them)."""
        return self._dwell

    @property
    def dwell_min(self) -> int:
        """How long K holds after a move before auto-K may reverse it (``free_dwell`` for a free drafter that
        chooses its own length, else ``min_dwell``)."""
        return self.free_dwell if self._free else self.min_dwell

    # -- helpers -----------------------------------------------------------------------------------
    def _probe_size(self, cm: CostModel, drafter: str) -> int:
        if self._free:  # it sizes its own drafts by the measured verify cost: a probe asks at the cap
            return self._cap
        return max(1, best_k(cm.speedups(drafter, self._cap, alpha=self.probe_alpha)))

    def _set_interval(self, cm: CostModel, drafter: str) -> None:
        kp = self._probe_size(cm, drafter)
        loss = cm.c(drafter) * kp + cm.v(kp) - expected_tokens(cm.alpha(drafter), kp)
        cap = max(self.probe_min, min(self.probe_max, int(loss / self.probe_budget)))
        self._interval = min(self.probe_min * 2 ** min(self._fails, 30), cap)

    def break_even_alpha(self, cm: CostModel, drafter: str) -> float:
        """The smallest α at which some K up to the drafter's cap would beat plain decoding by ``margin``
        (``math.inf`` when none would, not even at α = 1)."""
        return cm.break_even_alpha(drafter, self._cap, 1.0 + self.margin)

    def _cannot_pay(self, cm: CostModel, drafter: str) -> bool:
        """No K is predicted to beat plain decoding by ``margin`` even at α = ``cannot_pay_alpha``."""
        return max(cm.speedups(drafter, self._cap, alpha=self.cannot_pay_alpha)) <= 1.0 + self.margin

    def _go_off(self, cm: CostModel, drafter: str) -> None:
        self.k = 0
        self._dwell = 0
        self._plain = 0
        self._streak = 0
        self._fails = 0
        self._set_interval(cm, drafter)

    def _probe(self, cm: CostModel, drafter: str) -> KDecision:
        self._probe_pending = True
        self._probe_before = cm.spec_steps(drafter)
        return KDecision(self._probe_size(cm, drafter), KReason.PROBE)

    def _choose_free(self, cm: CostModel, drafter: str) -> KDecision:
        """The policy for a free drafter that prices its own drafts (class docstring): the cap, judged by what
        its drafting rounds delivered."""
        n_spec = cm.spec_steps(drafter)
        if self._probe_pending:
            if n_spec == self._probe_before:
                return self._probe(cm, drafter)  # nothing was proposed: no cost, no evidence; again
            self._probe_pending = False
            drafted, accepted = cm.last_draft(drafter)
            # a probe kept whole says the copy goes on: the drafter sizes its next drafts by the match it is in
            paid = accepted == drafted or (accepted + 1) / (cm.v(drafted) * cm.cost_ratio(drafter)) >= 1.0
            if paid:
                self.k = self._cap
                self._dwell = 0
                self._last_dir = 1
                self._fails = 0
                cm.forget_measured(drafter)  # the new regime is judged by its own rounds
                return KDecision(self.k, KReason.PROBE_PAID)
            self._fails += 1
            self._interval = min(self.probe_min * 2 ** min(self._fails, 30), self.probe_max)
            self._plain = 0
            return KDecision(0, KReason.PROBE_FAILED)
        if n_spec < self.warmup_steps and self.k > 0:
            self.k = self._cap
            return KDecision(self.k, KReason.WARM_UP)
        self._dwell += 1
        if self.k > 0:
            gain = cm.measured_gain(drafter)
            lost = cm.measured_loss_rows(drafter)
            if gain is not None and gain < 1.0 - self.margin / 2 and lost > self.loss_rows:
                self._go_off(cm, drafter)
                self._interval = self.probe_min
                self._last_dir = -1
                return KDecision(0, KReason.MEASURED_LOSS)
            self.k = self._cap
            return KDecision(self.k, KReason.HOLD)
        self._plain += 1
        if self._plain >= self._interval:
            self._plain = 0
            return self._probe(cm, drafter)
        return KDecision(0, KReason.HOLD)

    # -- the policy --------------------------------------------------------------------------------
    def choose(self, cost_model: CostModel, drafter: str, *, free: bool = False, k_cap: int | None = None) -> KDecision:
        """The K for the next round with ``drafter`` (call once per step boundary, then observe the round).

        ``free``: the drafter costs ~nothing and chooses its own length (see the warm-up). ``k_cap``: the
        largest K this drafter is asked for (its kind's cap; default ``k_max``)."""
        cm = cost_model
        if drafter != self._drafter:
            self.reset()
            self._drafter = drafter
            self._cap = self.k_max if k_cap is None else max(1, min(self.k_max, k_cap))
        self._free = free
        if not free and cm.has_draft_cost(drafter) and self._cannot_pay(cm, drafter):
            # no K beats plain decoding even if every draft were accepted: do not draft at all (no
            # warm-up, no α probes - a model drafter's probe would also have to catch its KV up on
            # every token since its last round); re-time the draft every probe_max rounds instead
            if self.k != 0:
                self._go_off(cm, drafter)
                self._last_dir = -1
            self._plain += 1
            if self._plain >= self.probe_max:
                self._plain = 0
                return KDecision(0, KReason.REMEASURE)
            return KDecision(0, KReason.CANNOT_PAY)
        if free:
            return self._choose_free(cm, drafter)
        n_spec = cm.spec_steps(drafter)
        if n_spec < self.warmup_steps:
            self.k = self._cap if free else min(self.k_init, self._cap)
            return KDecision(self.k, KReason.WARM_UP)
        since = cm.steps_since_single_row
        if self.k > 0 and not self._probe_pending and (since is None or since >= self.calibrate_every):
            return KDecision(0, KReason.CALIBRATE)

        curve = cm.speedups(drafter, self._cap)
        # ramp: never jump past twice the largest verify batch ever timed (its v is a line's extrapolation)
        reach = max(1, self.k, 2 * (cm.largest_measured_rows() - 1))
        best = best_k(curve[: reach + 1])
        if self._probe_pending:
            return self._judge_probe(cm, drafter, curve, best, n_spec)
        return self._move(cm, drafter, curve, best)

    def _judge_probe(self, cm: CostModel, drafter: str, curve: list[float], best: int, n_spec: int) -> KDecision:
        """The round after a probe: back on at the best K if the probe's evidence predicts a gain by ``margin``,
        else stay off (the probe interval doubles, or resets when the probe's own acceptance would pay)."""
        gain = 1.0 + self.margin
        if n_spec == self._probe_before:
            return self._probe(cm, drafter)  # nothing was drafted: no evidence yet, try again
        self._probe_pending = False
        if best > 0 and curve[best] > gain:
            self.k = best
            self._dwell = 0
            self._last_dir = 1
            self._streak = 0
            self._fails = 0
            return KDecision(self.k, KReason.PROBE_PAID)
        # a probe whose own acceptance would pay is promising: probe again soon to gather evidence
        drafted, accepted = cm.last_draft(drafter)
        alpha_probe = accepted / (accepted + 1) if accepted < drafted else 1.0
        self._fails = 0 if alpha_probe >= self.break_even_alpha(cm, drafter) else self._fails + 1
        self._set_interval(cm, drafter)
        self._plain = 0
        return KDecision(0, KReason.PROBE_FAILED)

    def _move(self, cm: CostModel, drafter: str, curve: list[float], best: int) -> KDecision:
        """Hysteresis: move K to the best one when it beats the current K by ``margin`` on ``patience``
        boundaries and the last move has dwelt (off when nothing beats plain decoding by ``margin / 2``); while
        off, probe every probe interval plain rounds."""
        gain = 1.0 + self.margin
        if self.k > 0 and curve[best] <= 1.0 + self.margin / 2:
            want = 0  # no K beats plain decoding by enough to be worth drafting
        elif best > 0 and curve[best] > gain * curve[self.k]:
            want = best
        else:
            want = self.k
        self._dwell += 1
        direction = (want > self.k) - (want < self.k)
        dwell = self.dwell_min
        if direction and (direction == self._last_dir or self._dwell > dwell):
            self._streak += 1
            if self._streak >= self.patience:
                self._last_dir = direction
                if want == 0:
                    self._go_off(cm, drafter)
                else:
                    self.k = want
                    self._dwell = 0
                    self._streak = 0
                return KDecision(self.k, KReason.SWITCH)
        else:
            self._streak = 0
        if self.k == 0:
            self._plain += 1
            if self._plain >= self._interval and self._dwell > self.min_dwell:
                self._plain = 0
                return self._probe(cm, drafter)
        return KDecision(self.k, KReason.HOLD)


__all__ = ["AutoK", "KDecision", "KReason"]
