"""The arithmetic of speculation's pay: expected tokens per round, predicted speedup, the best K, and the
sentence that explains it.

Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative Decoding", arXiv 2211.17192,
§3.3-3.4, eq. 1 and Theorem 3.8) with a *measured* verify cost instead of the paper's "a verify call
costs one target step":

    E(α, K) = (1 − α^(K+1)) / (1 − α)          expected tokens per round (K + 1 at α = 1)
    S(K)    = E(α, K) / (c·K + v(K)),  S(0) = 1  predicted speedup over plain decoding

where α is the per-position acceptance, c = draft ms per drafted token / target ms of a single-row
decode, and v(K) = target ms of a (K+1)-row verify batch / target ms of a single-row decode. v must be
measured, not assumed (:mod:`specchat.engine.telemetry.verify_cost`): on this machine ``specchat models tune``
measured v(16) ≈ 6.7 for the bundled SmolLM2 Q4_1 and 2.6 / 3.9 for its F16 / Q8_0 re-encodings (README, "The
lesson", has the table). A draft that costs about as
much as the target (c ≈ 1) can never pay, whatever v and α are: S(K) ≤ (K+1) / (K+1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import accumulate

from specchat.engine.events import CostEstimate


def expected_tokens(alpha: float, k: int) -> float:
    """E(α, K) = (1 − α^(K+1)) / (1 − α): expected tokens a round emits (accepted prefix + 1).

    Leviathan et al. 2023, eq. 1, assuming each draft position is accepted independently with
    probability α. Equals K + 1 at α = 1 and 1 at α = 0.
    """
    if k < 0:
        raise ValueError(f"K must be >= 0, got {k}")
    if alpha <= 0.0:
        return 1.0
    if alpha >= 1.0 - 1e-9:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, k: int, c: float, v: float) -> float:
    """S(K) = E(α, K) / (c·K + v) for K ≥ 1, and S(0) = 1 (plain decoding is the unit).

    ``c`` is the draft cost per drafted token and ``v`` the verify cost of K+1 rows, both relative to
    one single-row target decode.
    """
    if k == 0:
        return 1.0
    return expected_tokens(alpha, k) / (c * k + v)


def speedup_curve(alpha: float, c: float, v: Sequence[float], k_max: int) -> list[float]:
    """[S(0), S(1), ..., S(k_max)] where ``v[K]`` is the verify cost of K+1 rows (``v[0]`` unused).

    E is accumulated as 1 + α + ... + α^K, so this is O(k_max) with no powers.
    """
    out = [1.0]
    e = 1.0
    term = 1.0
    a = min(max(alpha, 0.0), 1.0)
    for k in range(1, k_max + 1):
        term *= a
        e += term
        out.append(e / (c * k + v[k]))
    return out


def best_k(curve: Sequence[float]) -> int:
    """argmax of a speedup curve; ties (within 1e-9 relative) go to the smaller K (0 = do not draft)."""
    best = 0
    for k in range(1, len(curve)):
        if curve[k] > curve[best] * (1.0 + 1e-9):
            best = k
    return best


def break_even_alpha(c: float, v: Sequence[float], k_max: int, gain: float = 1.0) -> float:
    """The smallest per-position acceptance α at which some K in 1..``k_max`` is predicted to beat plain
    decoding by more than ``gain`` (S(K) > gain; 1.0 = break-even), with draft cost ``c`` and verify costs
    ``v`` as in :func:`speedup_curve`; ``math.inf`` when no K does, not even at α = 1 (a draft that costs
    about as much as the target). S(K) grows with α, so a bisection over α finds it (to 1e-4)."""
    if max(speedup_curve(1.0, c, v, k_max)) <= gain:
        return math.inf
    lo, hi = 0.0, 1.0
    for _ in range(14):
        mid = 0.5 * (lo + hi)
        if max(speedup_curve(mid, c, v, k_max)) > gain:
            hi = mid
        else:
            lo = mid
    return hi


def cheapest_from(v: Sequence[float]) -> list[float]:
    """``[j]`` = the least of ``v[j:]``: what any verify of at least j rows costs. The bound by which a drafter
    pricing its draft position by position (:meth:`specchat.engine.drafters.NgramDrafter._length`) stops once no
    longer draft can be worth more - each further position adds at most the survival so far, at no less than
    this cost - exactly: the same length and worth as pricing every position (on prose 26.6 positions a call
    became 4.5; AMD EPYC Zen 4, bundled Q4_1, auto-K)."""
    return list(accumulate(reversed(v), min))[::-1]


def first_p_to_pay(v: Sequence[float], gain: float = 1.0) -> float:
    """The first position's survival P_1 at or below which no draft of any length d can beat ``gain`` tokens per unit
    of verify cost v(d): every later P_i is at most P_1 (a product of factors ≤ 1), so d positions expect at most
    1 + d·P_1 tokens, and min over d of (gain·v(d) − 1)/d is where that bound reaches the price. A drafter that
    knows P_1 at or below it knows its answer, d = 0, before pricing a position (−inf: no d priced)."""
    return min(((gain * x - 1.0) / d for d, x in enumerate(v) if d > 0 and x > 0.0), default=-math.inf)


class CheapestFrom:
    """:func:`cheapest_from` of the table asked last, kept while the same list is asked again, and its
    :func:`first_p_to_pay` at ``gain`` (:meth:`floor`): a drafter prices its candidates each round against a table
    that changes only when the cost model refits it, into a new list
    (:meth:`~specchat.engine.telemetry.verify_cost.VerifyCost.table`, and
    :meth:`~specchat.engine.telemetry.cost_model.CostModel.measured_v` scaling it), never in place. Recomputed
    per call it was ~12 % of the n-gram's draft step on prose (AMD EPYC Zen 4, bundled Q4_1, auto-K)."""

    __slots__ = ("_table", "_cheapest", "_gain", "_floor")

    def __init__(self, gain: float = 1.0) -> None:
        self._table: Sequence[float] | None = None
        self._cheapest: list[float] = []
        self._gain = gain
        self._floor = -math.inf

    def __call__(self, table: Sequence[float]) -> list[float]:
        if table is not self._table:
            self._refresh(table)
        return self._cheapest

    def floor(self, table: Sequence[float]) -> float:
        """:func:`first_p_to_pay` of ``table`` at this bound's gain."""
        if table is not self._table:
            self._refresh(table)
        return self._floor

    def _refresh(self, table: Sequence[float]) -> None:
        self._cheapest, self._floor, self._table = cheapest_from(table), first_p_to_pay(table, self._gain), table


def break_even_line(estimate: CostEstimate) -> str:
    """One sentence on whether speculation pays, from a :class:`CostEstimate`.

    Since E(α, K) = 1 + α + … + α^K ≤ 1 + K·α and v ≥ 1, S(K) > 1 needs α > c: a draft that costs c
    target-steps per token must be accepted more often than c. With c ≥ 1 nothing can pay (a draft as
    expensive as the target loses even at 100 % acceptance). When the estimate knows the break-even α
    (:attr:`CostEstimate.alpha_to_pay`, which also counts the verify cost) the sentence gives it; it never
    says "needs α > 0.00": a free draft (n-gram) that does not pay is held back by the verify cost.
    """
    c = estimate.c
    head = f"draft costs {c:.2f}× target per token"
    if c >= 1.0:
        return f"{head}: speculation cannot pay here; best K = off"
    a = estimate.alpha
    if estimate.best_k == 0:
        need = estimate.alpha_to_pay
        if need is not None and not math.isfinite(need):
            why = "no K pays even at full acceptance (verifying a batch costs too much)"
        elif need is not None:
            why = f"pays only above α = {need:.2f}"
        elif a <= c and c >= 0.005:
            why = f"needs α > {c:.2f} to pay"
        else:
            why = "the verify cost of a batch eats the gain"
        return f"{head}, α = {a:.2f}: {why}; best K = off"
    return f"{head}, α = {a:.2f}: best K = {estimate.best_k}, predicted {estimate.predicted_speedup:.1f}×"


__all__ = [
    "CheapestFrom", "best_k", "break_even_alpha", "break_even_line", "cheapest_from", "expected_tokens",
    "first_p_to_pay", "predicted_speedup", "speedup_curve",
]
