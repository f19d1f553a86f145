"""Figures that agree (issue 11): each window's figures come from the same rounds, nothing is reported before it
exists, how K was chosen is said in words, auto-K's on/off notices, and the break-even sentence.

Pure: counters, a cost model fed by hand, the auto-K policy; the real engine's side is in test_explain_real.py.
"""

from __future__ import annotations

import math

import pytest

from specchat.engine.events import CostEstimate
from specchat.engine.telemetry import AutoK, CostModel, KDecision, KReason, TurnCounters, break_even_line
from specchat.engine.telemetry.figures import auto_k_notice, k_status, recent_figures, reply_figures
from specchat.engine.telemetry.speedup import break_even_alpha, speedup_curve


def _v_model(cm: CostModel, v1: float = 1.8, slope: float = 0.5, t1: float = 10.0) -> None:
    """Give the cost model a verify cost (single row t1, then v(K) = v1 + slope·(K-1)) as calibration would."""
    for _ in range(3):
        for rows in (1, 2, 3, 5, 9, 17):
            v = 1.0 if rows == 1 else v1 + slope * (rows - 2)
            cm.observe_verify(rows, v * t1)


# -- this reply -----------------------------------------------------------------------------------------------


def test_reply_figures_come_from_the_reply_rounds_and_nothing_before_it_exists() -> None:
    tc = TurnCounters()
    fig = reply_figures(tc)
    assert fig.window == "reply" and fig.window_label == "this reply"
    assert (fig.acceptance, fig.alpha, fig.mean_len, fig.k_used, fig.tok_s) == (None, None, None, None, None)
    tc.add_step(drafted=0, accepted=0, emitted=1, k=0, speculative=True)  # auto-K off: a plain round
    assert reply_figures(tc, 10.0).acceptance is None  # no drafts: no acceptance, not 0 %
    # (drafted, accepted): 4 of 4; 4 drafted, first rejected; 2 drafted, 1 accepted
    for d, a in ((4, 4), (4, 0), (2, 1)):
        tc.add_step(drafted=d, accepted=a, emitted=a + 1, k=4, speculative=True)
    fig = reply_figures(tc, 200.0)
    assert (fig.rounds, fig.drafting_rounds, fig.drafted, fig.accepted, fig.rejections) == (3, 3, 10, 5, 2)
    assert fig.acceptance == pytest.approx(5 / 10)
    assert fig.alpha == pytest.approx(5 / 7)  # accepted / (accepted + rounds cut by a rejection)
    assert fig.mean_len == pytest.approx(1 + 5 / 3) and fig.k_used == pytest.approx(10 / 3)
    assert fig.tok_s == pytest.approx(tc.predicted_n / 0.2)
    # the two acceptance figures differ, and the reply says why in words
    assert any("acceptance 50 % counts every drafted token; α 0.71" in n for n in fig.notes)


# -- the recent window: the cost model's own rounds -------------------------------------------------------------


def test_recent_figures_are_the_rounds_alpha_comes_from() -> None:
    """The sidebar showed "no drafts" next to "α = 0.60" (the prior) and "acceptance 100 %" next to "α = 0.71":
    the reply's acceptance beside the cost model's α. The recent figures are the cost model's window."""
    cm = CostModel()
    _v_model(cm)
    fig = recent_figures(cm.window("ngram"))
    assert fig.window == "recent" and "half-life 48 tokens" in fig.window_label
    assert fig.alpha is None and fig.acceptance is None  # the prior alone is not a measurement
    assert cm.alpha("ngram") == pytest.approx(0.6)  # ... though auto-K starts from it
    assert cm.estimate("ngram", 4).alpha_is_prior
    for d, a in [(4, 4), (4, 2), (8, 8), (3, 0), (6, 6)] * 4:
        cm.observe_step("ngram", 8, d, a, 0.1, 20.0, d + 1)
    fig = recent_figures(cm.window("ngram"))
    assert fig.alpha == pytest.approx(cm.alpha("ngram"))  # the very α auto-K and the break-even line use
    assert not cm.estimate("ngram", 8).alpha_is_prior
    w = cm.window("ngram")
    assert fig.acceptance == pytest.approx((w.accepted - w.prior_accepted) / w.drafted)
    assert fig.mean_len == pytest.approx(1 + (w.accepted - w.prior_accepted) / w.drafting_rounds)
    assert fig.drafting_rounds < 20  # weighted by age: older rounds count less
    # the prior's weight has aged away: without it, α ≥ acceptance over the same rounds
    assert fig.prior_share < 0.05 and fig.alpha >= fig.acceptance


def test_recent_alpha_notes_the_prior_while_it_still_weighs() -> None:
    cm = CostModel()
    _v_model(cm)
    cm.observe_step("model", 1, 1, 1, 5.0, 18.0, 2)
    fig = recent_figures(cm.window("model"))
    assert fig.acceptance == pytest.approx(1.0) and fig.alpha is not None and fig.alpha < 1.0
    assert fig.prior_share > 0.05
    # α is below acceptance only because of the prior: that is what the note says (not the rejection rule)
    assert [n for n in fig.notes if "starting guess 0.60" in n] and not [n for n in fig.notes if "counts" in n]


# -- how K was chosen ------------------------------------------------------------------------------------------


def test_k_status_labels_every_state() -> None:
    auto = AutoK()
    cm = CostModel()
    _v_model(cm)
    assert k_status(speculative=False, k_control=4, k_round=0, k_cap=16).label == "speculation off"
    fixed = k_status(speculative=True, k_control=4, k_round=4, k_cap=16)
    assert (fixed.state, fixed.label, fixed.note) == ("fixed K", "K 4 (fixed)", "")
    end = k_status(speculative=True, k_control=4, k_round=2, k_cap=16)
    assert end.label == "K 4 (fixed)" and "token budget" in end.note
    # warming up: the first decision for a drafter
    d = auto.choose(cm, "ngram", free=True, k_cap=16)
    assert d.reason is KReason.WARM_UP
    st = k_status(speculative=True, k_control=3, k_round=d.k, k_cap=16, auto_k=auto, decision=d, best_k=4)
    assert (st.state, st.label, st.k, st.reason) == ("warming up", "K 16 (auto: warming up)", 16, "warm-up")
    # holding at 16 while the model's argmax is 4 (auto-K waits for patience / dwell): both numbers, and why
    st = k_status(speculative=True, k_control=3, k_round=16, k_cap=16, auto_k=auto,
                  decision=KDecision(16, KReason.HOLD), best_k=4, k_used=5.2)
    assert st.label == "K 16 (auto: holding, best now 4)"
    assert "until another K beats it by 5 % on 2 rounds in a row" in st.note
    assert "K 16 is a cap: the drafter proposed 5.2 tokens per drafting round" in st.note
    # off for cost (regime 0) and probing (a round drafts while the regime is 0)
    auto.k = 0
    st = k_status(speculative=True, k_control=3, k_round=0, k_cap=16, auto_k=auto,
                  decision=KDecision(0, KReason.CANNOT_PAY), best_k=0)
    assert (st.state, st.label) == ("off for cost", "K 0 (auto: off for cost)")
    st = k_status(speculative=True, k_control=3, k_round=3, k_cap=16, auto_k=auto,
                  decision=KDecision(3, KReason.PROBE), best_k=0)
    assert (st.state, st.label, st.k, st.k_round) == ("probing", "K 0 (auto: probing with K 3)", 0, 3)


def test_a_status_is_reused_only_where_nothing_it_says_has_changed() -> None:
    """k_status builds a status once per distinct input and reuses it (a reply's rounds mostly repeat the last
    one's): the dwell count is part of what it says while auto-K is still held by it, and past ``dwell_min``
    it is counted no further, so the status stops changing only then."""
    auto = AutoK()
    auto.k = 16
    hold = KDecision(16, KReason.HOLD)

    def status(dwell: int, best_k: int = 4, k_round: int = 16):
        auto._dwell = dwell
        return k_status(speculative=True, k_control=3, k_round=k_round, k_cap=16, auto_k=auto, decision=hold,
                        best_k=best_k, k_used=5.2)

    held = auto.dwell_min
    early = [status(d) for d in range(held)]
    assert [s.dwell for s in early] == list(range(held))
    assert len({s.note for s in early}) == held  # "it has held d of N rounds" moves with d
    assert f"it has held 1 of {held} rounds" in early[1].note
    late = [status(d) for d in (held, held + 1, 10 * held)]
    assert all(s is late[0] for s in late) and late[0].dwell == held
    assert "it has held" not in late[0].note
    # anything else it says still moves it
    assert status(10 * held, best_k=8).label == "K 16 (auto: holding, best now 8)"
    assert status(10 * held, k_round=15).k_round == 15
    assert status(10 * held) is late[0]


def test_the_policy_passes_through_the_states_a_reader_sees() -> None:
    """Driven by the real policy: a costly drafter is off for cost from its first round; a free drafter whose
    drafts are all rejected warms up, goes off, then probes."""
    cm = CostModel()
    _v_model(cm)
    cm.observe_draft_cost("model", 10.0)  # c = 1: a draft as costly as the target
    auto = AutoK()
    d = auto.choose(cm, "model", free=False, k_cap=16)
    assert k_status(speculative=True, k_control=3, k_round=d.k, k_cap=16, auto_k=auto, decision=d).state == "off for cost"

    cm, auto, states = CostModel(), AutoK(), []
    _v_model(cm)
    for _ in range(80):
        d = auto.choose(cm, "ngram", free=True, k_cap=16)
        states.append(k_status(speculative=True, k_control=3, k_round=d.k, k_cap=16, auto_k=auto, decision=d).state)
        if d.k > 0:
            cm.observe_step("ngram", d.k, 3, 0, 0.1, 25.0, 4)
        else:
            cm.observe_plain(10.0)
    assert states[0] == "warming up" and "off for cost" in states and "probing" in states
    first_off = states.index("off for cost")
    assert "probing" in states[first_off:]


# -- auto-K's notice -------------------------------------------------------------------------------------------


def _estimate(c: float, alpha_to_pay: float, best: int = 0, s: float = 1.0) -> CostEstimate:
    return CostEstimate(alpha=0.5, c=c, v=3.0, best_k=best, predicted_speedup=s, target_ms_per_token=10.0,
                        draft_ms_per_token=10.0 * c, alpha_to_pay=alpha_to_pay)


def test_auto_k_notice_says_why_in_one_line() -> None:
    off = auto_k_notice(drafting=False, drafter="self", decision=KDecision(0, KReason.CANNOT_PAY),
                        estimate=_estimate(0.98, math.inf), alpha=None, k=0)
    assert off.message == "auto-K: drafting off — the draft costs 0.98× a target token; it cannot pay even at 100 % acceptance"
    assert (off.drafting, off.drafter, off.reason) == (False, "self", "cannot pay")
    costly = auto_k_notice(drafting=False, drafter="skip", decision=KDecision(0, KReason.CANNOT_PAY),
                           estimate=_estimate(0.41, 0.953), alpha=None, k=0)
    assert costly.message == (
        "auto-K: drafting off — the draft costs 0.41× a target token; it could pay only above 95 % acceptance per "
        "position (α)"
    )
    low = auto_k_notice(drafting=False, drafter="ngram", decision=KDecision(0, KReason.SWITCH),
                        estimate=_estimate(0.0, 0.62), alpha=0.41, k=0)
    assert low.message.startswith("auto-K: drafting off — recent α 0.41 is below the 0.62 it needs to pay")
    on = auto_k_notice(drafting=True, drafter="ngram", decision=KDecision(8, KReason.PROBE_PAID),
                       estimate=_estimate(0.0, 0.62, best=8, s=1.43), alpha=0.93, k=8)
    assert on.message == (
        "auto-K: drafting on at K 8 — recent α 0.93 predicts 1.43× plain decoding (it pays above α = 0.62); the "
        "draft costs 0.00× a target token"
    )
    for notice in (off, costly, low, on):
        assert "\n" not in notice.message


# -- the break-even sentence -------------------------------------------------------------------------------------


def test_break_even_alpha_is_where_the_best_k_first_pays() -> None:
    v = [1.0, 1.8, 2.3, 2.8, 3.3, 3.8]
    need = break_even_alpha(0.0, v, 5)
    assert max(speedup_curve(need, 0.0, v, 5)) > 1.0 >= max(speedup_curve(need - 2e-4, 0.0, v, 5))
    assert break_even_alpha(1.0, v, 5) == math.inf  # a draft as costly as the target never pays
    assert CostModel().estimate("x", 3).alpha_to_pay is not None


def test_break_even_line_never_asks_for_alpha_above_zero() -> None:
    """Issue 11: bench printed "α = 0.00: needs α > 0.00 to pay" for a free drafter whose drafts were all
    rejected: the bound α > c says nothing when c = 0 (the verify cost decides)."""
    est = CostEstimate(alpha=0.0, c=0.0, v=1.8, best_k=0, predicted_speedup=1.0, target_ms_per_token=10.0,
                       draft_ms_per_token=0.0)
    assert "needs α > 0.00" not in break_even_line(est)
    assert break_even_line(est) == "draft costs 0.00× target per token, α = 0.00: the verify cost of a batch eats the gain; best K = off"
    with_need = CostEstimate(alpha=0.0, c=0.0, v=1.8, best_k=0, predicted_speedup=1.0, target_ms_per_token=10.0,
                             draft_ms_per_token=0.0, alpha_to_pay=0.47)
    assert break_even_line(with_need) == "draft costs 0.00× target per token, α = 0.00: pays only above α = 0.47; best K = off"
