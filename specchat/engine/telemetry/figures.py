"""What a reader is shown: speculation figures over defined windows, how K was chosen, and the words that
explain where two numbers legitimately differ - all built here, engine side, so a UI only lays them out.

Two windows, each computing every figure from the same rounds (:class:`~specchat.engine.events.Figures`):

* **this reply** (:func:`reply_figures`): every round of the reply so far, from its
  :class:`~specchat.engine.telemetry.counters.TurnCounters` (exact counts);
* **recent** (:func:`recent_figures`): the rounds the cost model's α comes from - this drafter's rounds
  weighted by age in tokens of text (:class:`~specchat.engine.telemetry.cost_model.AlphaWindow`), so the
  acceptance and mean accepted length shown next to auto-K's α and the break-even line describe the rounds
  auto-K decided on (before, the sidebar showed the reply's acceptance next to the cost model's α: "acceptance
  100 %" next to "α = 0.71", or "no drafts" next to the prior "α = 0.60").

Both define acceptance = accepted / drafted and α = accepted / (accepted + rejections) (the cost model's
per-position estimate, Leviathan et al. 2023's α): over the same rounds α ≥ acceptance, since a rejection
ends a round and the tokens drafted after it count against acceptance but are no evidence about α. Nothing
is reported before it exists: no drafts, no acceptance (None, not 0).

:func:`k_status` says how a round's K was chosen (:class:`~specchat.engine.events.KStatus`: ``K 16 (auto:
holding, best now 4)``), and :func:`auto_k_notice` the one line said when auto-K turns drafting off or back
on (:class:`~specchat.engine.events.AutoKNotice`).
"""

from __future__ import annotations

import math
from functools import lru_cache

from specchat.engine.events import AutoKNotice, CostEstimate, Figures, KState, KStatus
from specchat.engine.telemetry.auto_k import AutoK, KDecision, KReason
from specchat.engine.telemetry.cost_model import AlphaWindow
from specchat.engine.telemetry.counters import TurnCounters

REPLY_LABEL = "this reply"
#: a share of α's weight below this is not worth a note ("α still holds the prior ...")
PRIOR_NOTE_SHARE = 0.05


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def _notes(acceptance: float | None, alpha: float | None, prior_share: float, prior_alpha: float | None) -> tuple[str, ...]:
    notes = []
    # over the same rounds α ≥ acceptance; only the prior's pseudo-rounds can pull α below it (said below)
    if acceptance is not None and alpha is not None and round(alpha, 2) > round(acceptance, 2):
        notes.append(
            f"acceptance {acceptance * 100:.0f} % counts every drafted token; α {alpha:.2f} counts a rejection once "
            "per round (it ends the round: the tokens drafted after it were never judged)"
        )
    if alpha is not None and prior_alpha is not None and prior_share >= PRIOR_NOTE_SHARE:
        notes.append(f"α still leans on its starting guess {prior_alpha:.2f} ({prior_share * 100:.0f} % of its weight)")
    return tuple(notes)


def reply_figures(counters: TurnCounters, elapsed_ms: float | None = None) -> Figures:
    """The figures of the reply so far (``elapsed_ms``: generation time so far, for tok/s; None = not yet)."""
    c = counters
    acceptance = _ratio(c.draft_n_accepted, c.draft_n)
    alpha = _ratio(c.draft_n_accepted, c.draft_n_accepted + c.rejections) if c.n_spec_steps else None
    tok_s = c.predicted_n / elapsed_ms * 1000.0 if elapsed_ms and elapsed_ms > 0 and c.n_steps else None
    return Figures(
        window="reply",
        window_label=REPLY_LABEL,
        rounds=float(c.asked_steps),
        drafting_rounds=float(c.n_spec_steps),
        drafted=float(c.draft_n),
        accepted=float(c.draft_n_accepted),
        rejections=float(c.rejections),
        acceptance=acceptance,
        alpha=alpha,
        mean_len=1.0 + c.draft_n_accepted / c.n_spec_steps if c.n_spec_steps else None,
        k_used=_ratio(c.draft_n, c.n_spec_steps),
        tok_s=tok_s,
        notes=_notes(acceptance, alpha, 0.0, None),
    )


def recent_label(window: AlphaWindow) -> str:
    return f"recent rounds (auto-K's window: weighted by age, half-life {window.half_life:.0f} tokens of text)"


def recent_figures(window: AlphaWindow) -> Figures:
    """The figures of the rounds α comes from (prior pseudo-observations excluded from every count; α is the
    cost model's own, prior included, with its share in ``prior_share``)."""
    w = window
    accepted = max(0.0, w.accepted - w.prior_accepted)
    rejections = max(0.0, w.rejections - w.prior_rejections)
    drafted = w.drafted
    alpha = w.alpha
    weight = w.accepted + w.rejections
    prior_share = (w.prior_accepted + w.prior_rejections) / weight if weight > 0 and alpha is not None else 0.0
    prior_total = w.prior_accepted + w.prior_rejections
    prior_alpha = w.prior_accepted / prior_total if prior_total > 0 else None
    acceptance = min(1.0, accepted / drafted) if w.drafting_rounds > 0 and drafted > 0 else None
    return Figures(
        window="recent",
        window_label=recent_label(w),
        rounds=w.rounds,
        drafting_rounds=w.drafting_rounds,
        drafted=drafted,
        accepted=accepted,
        rejections=rejections,
        acceptance=acceptance,
        alpha=alpha,
        mean_len=1.0 + accepted / w.drafting_rounds if w.drafting_rounds > 0 else None,
        k_used=_ratio(drafted, w.drafting_rounds),
        prior_share=prior_share,
        notes=_notes(acceptance, alpha, prior_share, prior_alpha),
    )


def k_status(
    *,
    speculative: bool,
    k_control: int,
    k_round: int,
    k_cap: int,
    auto_k: AutoK | None = None,
    decision: KDecision | None = None,
    best_k: int | None = None,
    k_used: float | None = None,
) -> KStatus:
    """How a round's K was chosen. ``speculative``: the round could draft (speculation on, a drafter, a
    target that rolls back); ``auto_k``/``decision``: auto-K and its decision for the round, None for a fixed
    K; ``best_k``: the cost model's best K now; ``k_used``: tokens drafted per drafting round (recent).

    The same inputs give the same (immutable) status: it is built once and then reused
    (:func:`_status_of`), since a reply's rounds mostly repeat the last one's - a prose reply at auto-K rebuilt
    one label and its notes on each of ~250 rounds, ~40 µs each right after a decode had evicted the caches
    (10 of its ~120 ms outside ``llama_decode``; AMD EPYC Zen 4, bundled Q4_1, ``--threads 1``). ``dwell``
    is counted up to ``dwell_min``: past it auto-K is free to move and the count says nothing more."""
    if auto_k is None or decision is None:
        return _status_of(speculative, k_control, k_round, k_cap, None, None, None, None, 0.0, 0, best_k, k_used)
    dwell_min = auto_k.dwell_min
    return _status_of(
        speculative, k_control, k_round, k_cap, auto_k.k, decision.reason, decision.probe,
        (min(auto_k.dwell, dwell_min), dwell_min), auto_k.margin, auto_k.patience, best_k, k_used,
    )


@lru_cache(maxsize=256)
def _status_of(
    speculative: bool, k_control: int, k_round: int, k_cap: int, regime_k: int | None, reason: KReason | None,
    probe: bool | None, dwell: tuple[int, int] | None, margin: float, patience: int, best_k: int | None,
    k_used: float | None,
) -> KStatus:
    """:func:`k_status` of auto-K's scalars (``regime_k`` None: no auto-K decision this round)."""
    auto = regime_k is not None
    regime = regime_k if regime_k is not None else (k_control if speculative else 0)
    if not speculative:
        state: KState = "speculation off"
    elif not auto:
        state = "fixed K"
    elif reason is KReason.WARM_UP:
        state = "warming up"
    elif probe:
        state = "probing"
    elif regime == 0:
        state = "off for cost"
    else:
        state = "holding"
    notes: list[str] = []
    if state == "speculation off":
        label = "speculation off"
    elif state == "fixed K":
        label = f"K {k_control} (fixed)"
        if k_control > k_cap:
            pass  # said from the controls, with the drafter's kind (specchat.engine.drafter_kinds.k_cap_note)
        elif k_round < k_control:
            notes.append(f"this round asked for {k_round}: the reply's token budget or the context is nearly used up")
    else:
        assert dwell is not None
        tail: str = state
        if state == "holding" and best_k is not None and best_k != regime:
            tail += f", best now {'off' if best_k == 0 else best_k}"
            held, dwell_min = dwell
            wait = f"; it has held {held} of {dwell_min} rounds since its last move" if held < dwell_min else ""
            notes.append(
                f"auto-K keeps K {regime} until another K beats it by {margin * 100:.0f} % on "
                f"{patience} rounds in a row{wait}"
            )
        if reason is KReason.CALIBRATE:
            tail += ", this round plain to re-time one row"
        elif state == "probing":
            tail += f" with K {k_round}"
        label = f"K {regime} (auto: {tail})"
    if state in ("holding", "warming up", "fixed K") and k_used is not None and regime > 0 and k_used < regime - 0.5:
        notes.append(f"K {regime} is a cap: the drafter proposed {k_used:.1f} tokens per drafting round (recent)")
    return KStatus(
        state=state, k=regime, k_round=k_round, k_cap=k_cap, best_k=best_k,
        reason=reason.value if reason is not None else "",
        dwell=dwell[0] if dwell is not None else None,
        dwell_min=dwell[1] if dwell is not None else None,
        label=label, note="; ".join(notes),
    )


def auto_k_notice(
    *, drafting: bool, drafter: str, decision: KDecision, estimate: CostEstimate, alpha: float | None, k: int,
    measured_gain: float | None = None,
) -> AutoKNotice:
    """The one line said when auto-K turns drafting off (``drafting`` False) or back on, with the reason in
    numbers: the draft cost c, the break-even α (the smallest α at which some K pays, with the measured v),
    the recent α (None: no evidence yet) and, when on, the K and the predicted speedup."""
    c = estimate.c
    need = estimate.alpha_to_pay
    cost = f"the draft costs {c:.2f}× a target token"
    if drafting:
        seen = f"recent α {alpha:.2f}" if alpha is not None else "the evidence"
        pays = f" (it pays above α = {need:.2f})" if need is not None and math.isfinite(need) else ""
        text = (
            f"auto-K: drafting on at K {k} — {seen} predicts {estimate.predicted_speedup:.2f}× plain decoding{pays}; "
            f"{cost}"
        )
    elif decision.reason is KReason.MEASURED_LOSS and measured_gain is not None:
        text = (
            f"auto-K: drafting off — its recent drafts, as timed, delivered {measured_gain:.2f}× plain decoding "
            "(verifying a batch costs more than its accepted tokens save on this CPU); it will probe now and then"
        )
    elif need is None or not math.isfinite(need):
        text = f"auto-K: drafting off — {cost}; it cannot pay even at 100 % acceptance"
    elif decision.reason in (KReason.CANNOT_PAY, KReason.REMEASURE) or alpha is None:
        text = f"auto-K: drafting off — {cost}; it could pay only above {need * 100:.0f} % acceptance per position (α)"
    else:
        text = (
            f"auto-K: drafting off — recent α {alpha:.2f} is below the {need:.2f} it needs to pay ({cost}); "
            "it will probe now and then"
        )
    return AutoKNotice(
        text, drafting=drafting, drafter=drafter, reason=decision.reason.value, c=c, alpha_to_pay=need, alpha=alpha,
        k=k if drafting else 0, measured_gain=measured_gain,
    )


__all__ = ["REPLY_LABEL", "auto_k_notice", "k_status", "recent_figures", "recent_label", "reply_figures"]
