"""The bench's arithmetic: the engine's cost model calibrated on the pair, its predictions next to the
measurements, and the recommended K (Leviathan et al. 2023, §3.3-3.4, with a measured verify cost).

* the engine's own calibration (:mod:`specchat.engine.calibration`) on a fresh
  :class:`~specchat.engine.telemetry.CostModel`, at the suite's first prompt, and once more at the first prompt
  of every further depth bucket the suite reaches (:func:`calibrate_by_depth`: each prompt is priced at its own
  depth, as auto-K prices each turn): the same functions and the
  same fit as auto-K and the sidebar, with the verify sizes of ``MEASURE_ROWS`` (every K up to 16, then
  20, 24, 32, 48, 64) timed ``reps`` times (each right after a single-row decode). So the bench's c and
  v(K) are the engine's:
* target alone: the cost model's single-row decode time (median);
* draft alone: a draft model's single-row decode, timed against the target's with both caches empty
  (c = draft / target per token); a drafter that runs no model (n-gram) costs c = 0 until rounds time it -
  its cost in the runs is printed per prompt;
* v(K) = time of a (K+1)-row verify decode (logits on every row, as the speculative loop asks) / time of
  a single-row decode, as the cost model fits it (row medians shrunk toward a line, made monotone);
* α = Σ accepted / (Σ accepted + Σ rounds with a rejection) over the fixed-K runs of a prompt (the
  maximum-likelihood per-position acceptance, as the cost model estimates it);
* E(α, K) and S(K) = E / (c·K + v(K)) from :mod:`specchat.engine.telemetry`, next to the measured tokens
  per round and the measured speedup;
* the replay: the rounds of the largest fixed K replayed at every K (what each would have given with a
  smaller cap is known exactly; only positions never drafted use the geometric tail) - the estimate auto-K
  uses live. The recommended K = argmax of the replay's S over 0..K_MAX (0 = off), or of the geometric S
  when no rounds were logged.

E assumes every round drafts K tokens; an n-gram drafter proposes fewer (or none) when the text has no
earlier match, so its measured tokens per round can fall below E - that gap is printed, not hidden.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specchat.bench.progress import Progress
from specchat.bench.summary import SummaryRow, alpha_mle
from specchat.engine.calibration import MEASURE_ROWS, calibrate_draft_cost, calibrate_verify_cost, draft_cost_ratios
from specchat.engine.calibration_cache import depth_bucket
from specchat.engine.drafter_kinds import K_MAX, NONE
from specchat.engine.events import CostEstimate, VerifyCurve
from specchat.engine.protocol import Message
from specchat.engine.telemetry import (
    CostModel,
    best_k,
    break_even_alpha,
    break_even_line,
    expected_tokens,
    natural_length,
    predicted_speedup,
    replay_speedups,
    speedup_curve,
)

#: the name of the pooled entry of the arithmetic (every prompt's fixed-K runs together)
ALL_PROMPTS = "(all prompts)"


@dataclass(slots=True)
class Calibration:
    """The engine's cost model after :func:`calibrate`, and where it was measured."""

    cost_model: CostModel
    drafter: str  # the drafter's name (NONE when there is none)
    draft_kind: str  # MODEL | NGRAM | NONE (specchat.engine.drafter_kinds)
    context_n: int  # tokens in the target's KV while timing
    reps: int  # repetitions of the verify timings
    weights: str = "?"  # the target's weight format
    row_by_row: bool = False  # the target decodes every batch one row at a time (Model.row_by_row)

    def verify_curve(self) -> VerifyCurve:
        """v(K) with its reason in words, as the engine states it (:meth:`VerifyCost.curve`)."""
        return self.cost_model.verify.curve(self.weights, "measured", row_by_row=self.row_by_row)

    @property
    def target_ms(self) -> float:
        return self.cost_model.target_ms() or 0.0

    @property
    def draft_ms(self) -> float:
        return self.cost_model.draft_ms_per_token(self.drafter)

    @property
    def c(self) -> float:
        return self.cost_model.c(self.drafter)

    def v_table(self) -> list[float]:
        """v(K) for K = 0..K_MAX, as auto-K and the sidebar read it."""
        return [self.cost_model.v(k) for k in range(K_MAX + 1)]


def calibrate(session: Any, prompt: str, *, reps: int = 7, progress: Progress | None = None) -> Calibration:
    """Calibrate a fresh engine cost model on the pair, through the engine's own path.

    The functions and the order of :meth:`SpeculativeDecoder.generate`'s first turn
    (:mod:`specchat.engine.calibration`): the draft timed against the target with both KVs empty, then the
    chat-formatted ``prompt`` (minus its last token) decoded into the target, then v(K). The bench times
    the verify sizes of :data:`~specchat.engine.calibration.MEASURE_ROWS` (every K up to 16, then up to
    K_MAX; the engine only a few), ``reps`` times over, each right after a single-row batch so drift hits
    both; the cost model's fit turns the timings into v(K) and c - the same estimator the sidebar and auto-K
    read, so the bench cannot disagree with them.
    """
    dec = session.decoder
    target = dec.target
    dec.reset()
    session.reset()
    ctx = session.template.tokens([Message("user", prompt)])
    ctx = ctx[: max(2, min(len(ctx), target.n_ctx - K_MAX - 2))]
    drafter = dec.drafter
    drafters = {drafter.name: drafter} if drafter is not None else {}
    cm = CostModel()
    ratios = draft_cost_ratios(target, drafters, int(ctx[0]))
    target.decode(ctx[:-1], logits_last=0)
    last = int(ctx[-1])
    pairs = [rows for r in MEASURE_ROWS[1:] for rows in (1, r)]
    for r in range(reps):
        if progress:
            progress(r, reps, "verify cost v(K)")
        calibrate_verify_cost(target, cm, last, pairs, reps=1)
    calibrate_draft_cost(cm, drafters, last, ratios)
    dec.reset()
    session.reset()
    return Calibration(
        cost_model=cm, drafter=drafter.name if drafter is not None else NONE,
        draft_kind=drafter.kind if drafter is not None else NONE, context_n=len(ctx), reps=reps,
        weights=target.weights, row_by_row=target.row_by_row,
    )


def calibrate_by_depth(session: Any, suite: Sequence[dict[str, str]], *, reps: int = 7,
                       progress: Progress | None = None) -> dict[str, Calibration]:
    """:func:`calibrate` once per depth bucket the suite's prompts reach
    (:func:`~specchat.engine.calibration_cache.depth_bucket`: 0 below 256 tokens, then 256, 512, 1024, ...), at
    the first prompt of each; returns every prompt's calibration by name.

    Why not one at the first prompt: a verify row's attention walks the whole context, so a batch's cost per row
    grows with depth faster than a single row's - the default suite's summary (1440 tokens) was priced by the code
    prompt's calibration (49 tokens), and its predictions ran high (AMD EPYC Zen 4, bundled Q4_1, 2026-12-05: one
    row 12.4 ms and v(16) 9.8 at 49 tokens, 20.7 ms and 11.6 at 1440; the copy-heavy prompt, 332 tokens, 13.7 ms
    and 10.5). Auto-K prices each turn at its own bucket too. Each calibration takes 20-46 s there."""
    tokens = {p["name"]: len(session.template.tokens([Message("user", p["prompt"])])) for p in suite}
    first: dict[int, str] = {}
    for p in suite:
        first.setdefault(depth_bucket(tokens[p["name"]] - 1), p["name"])
    prompts = {p["name"]: p["prompt"] for p in suite}
    done: dict[int, Calibration] = {}
    for i, (bucket, name) in enumerate(first.items()):
        step = None
        if progress is not None and len(first) > 1:
            def step(r: int, n: int, what: str, i: int = i, name: str = name) -> None:
                progress(i * n + r, len(first) * n, f"{what} at the {name} prompt's depth")
        done[bucket] = calibrate(session, prompts[name], reps=reps, progress=step or progress)
    return {name: done[depth_bucket(n - 1)] for name, n in tokens.items()}


def replay_of_rounds(fixed: Sequence[SummaryRow], alpha: float, c: float, vt: Sequence[float]) -> dict[str, Any] | None:
    """The rounds of the largest fixed K replayed at every K (auto-K's estimate, see
    :func:`specchat.engine.telemetry.replay_speedups`): exact up to what each round drafted, the
    geometric model with α only past it. None without logged rounds."""
    logged = [r for r in fixed if r.round_log]
    if not logged:
        return None
    top = max(logged, key=lambda r: int(r.k or 0))
    log = top.round_log
    d = [int(x[1]) for x in log]
    a = [int(x[2]) for x in log]
    n = [natural_length(int(x[0]), int(x[1]), x[3]) for x in log]
    curve = replay_speedups(d, a, n, [1.0] * len(log), alpha, c, vt, K_MAX)
    bk = best_k(curve)
    return {"from_k": int(top.k or 0), "rounds": len(log), "curve": curve, "best_k": bk,
            "predicted_best_speedup": curve[bk]}


def _row_prediction(r: SummaryRow, alpha: float, c: float, vt: Sequence[float], t1: float, o0: float) -> dict[str, Any]:
    """One fixed-K row's predictions (geometric, with the overheads, from its rounds) beside its measurement;
    ``o0`` is the baseline's overhead per round."""
    k = int(r.k or 0)
    e = expected_tokens(alpha, k)
    # the same S with the rounds' measured time outside llama_decode added to both sides:
    # E·(t1 + o_0) / (t1·(c·K + v(K)) + o_K)
    with_o = e * (t1 + o0) / (t1 * (c * k + vt[k]) + r.overhead_per_round) if t1 > 0 else None
    # the rounds as they happened: their draft lengths d, costed with the measured v(d), the
    # runs' own draft cost per token and overhead per round, against one token per plain round
    c_run = r.draft_ms_per_token / t1 if t1 > 0 and r.draft_ms_per_token > 0 else c
    cost_rounds = sum(n * (t1 * (c_run * d + vt[d]) + r.overhead_per_round) for d, n in enumerate(r.rounds_by_drafted))
    from_rounds = r.predicted_n * (t1 + o0) / cost_rounds if cost_rounds > 0 else None
    return {
        "k": k,
        "E": e,
        "predicted_from_rounds": from_rounds,
        "tokens_per_round": r.tokens_per_round,
        "v": vt[k],
        "predicted_speedup": predicted_speedup(alpha, k, c, vt[k]),
        "predicted_with_overhead": with_o,
        "overhead_ms_per_round": r.overhead_per_round,
        "measured_speedup": r.speedup,
    }


def arithmetic(cal: Calibration, rows: Sequence[SummaryRow], at_depth: Mapping[str, Calibration] | None = None
               ) -> dict[str, Any]:
    """Predictions from (α, c, v) next to the measurements, per prompt and pooled; the best K. ``at_depth`` (from
    :func:`calibrate_by_depth`): each prompt's own calibration, whose t1 and v(K) price that prompt (its entry
    says where it was timed when that is not ``cal``)."""
    vt = cal.v_table()
    t1, c, draft_ms = cal.target_ms, cal.c, cal.draft_ms
    head_vt, head_t1 = vt, t1
    out: dict[str, Any] = {
        "target_ms_per_token": t1,
        "target_tok_s": 1000.0 / t1 if t1 > 0 else None,
        "draft": cal.drafter,
        "draft_kind": cal.draft_kind,
        "draft_ms_per_token": draft_ms,
        "draft_tok_s": 1000.0 / draft_ms if draft_ms > 0 else None,
        "c": c,
        "v": {str(k): v for k, v in enumerate(vt)},
        "timed_k": [r - 1 for r in MEASURE_ROWS if r > 1],
        "weights": cal.weights,
        "verify_reason": cal.verify_curve().reason,
        "context_n": cal.context_n,
        "reps": cal.reps,
        "prompts": [],
    }
    by_prompt: dict[str, list[SummaryRow]] = {}
    for r in rows:
        by_prompt.setdefault(r.prompt, []).append(r)
    pooled_acc = pooled_rej = 0
    pooled = [(ALL_PROMPTS, None)] if len(by_prompt) > 1 else []
    for name, prs in [*by_prompt.items(), *pooled]:
        own = (at_depth or {}).get(name, cal)
        vt, t1 = (own.v_table(), own.target_ms) if own is not cal else (head_vt, head_t1)
        if prs is None:  # α over every fixed-K run of every prompt: the pair's overall recommendation
            fixed: list[SummaryRow] = []
            alpha = alpha_mle(pooled_acc, pooled_rej)
        else:  # α pooled over the fixed-K runs of this prompt (auto runs choose K from it, not vice versa)
            fixed = [r for r in prs if r.mode == "spec"]
            a_sum = sum(r.accepted for r in fixed)
            rej_sum = sum(r.rejections for r in fixed)
            pooled_acc += a_sum
            pooled_rej += rej_sum
            alpha = alpha_mle(a_sum, rej_sum)
        entry: dict[str, Any] = {"prompt": name, "alpha": alpha, "rows": []}
        if own is not cal:  # priced at its own depth
            entry["context_n"] = own.context_n
            entry["target_ms_per_token"] = t1
            entry["v"] = {str(k): v for k, v in enumerate(vt)}
        d_tok = [r.draft_ms_per_token for r in fixed if r.draft_ms_per_token > 0]
        entry["c_in_runs"] = statistics.median(d_tok) / t1 if d_tok and t1 > 0 else None
        if alpha is not None:
            curve = speedup_curve(alpha, c, vt, K_MAX)
            bk = best_k(curve)
            entry["best_k"] = bk
            entry["predicted_best_speedup"] = curve[bk]
            entry["curve"] = curve
            base = next((r for r in prs or [] if r.mode == "baseline"), None)
            o0 = base.overhead_per_round if base else 0.0
            entry["rows"] = [_row_prediction(r, alpha, c, vt, t1, o0) for r in fixed]
            replay = replay_of_rounds(fixed, alpha, c, vt)
            if replay is not None:
                entry["replay"] = replay
                entry["geometric_best_k"], entry["geometric_best_speedup"] = bk, curve[bk]
                entry["best_k"], entry["predicted_best_speedup"] = replay["best_k"], replay["predicted_best_speedup"]
                entry["curve"] = replay["curve"]
            rk, rs = entry["best_k"], entry["predicted_best_speedup"]
            entry["break_even"] = break_even_line(
                CostEstimate(alpha=alpha, c=c, v=vt[rk], best_k=rk, predicted_speedup=rs,
                             target_ms_per_token=t1, draft_ms_per_token=draft_ms,
                             alpha_to_pay=break_even_alpha(c, vt, K_MAX))
            )
            measured = {int(r.k or 0): r.speedup for r in fixed if r.speedup is not None}
            if measured:
                mk = max(measured, key=lambda k: measured[k])
                entry["best_measured_k"] = mk if measured[mk] > 1.0 else 0
        out["prompts"].append(entry)
    return out


@dataclass(frozen=True, slots=True)
class Exchange:
    """What one drafter's rounds bought and what they paid, in single target rows (:func:`exchange`): the product's
    exchange rate. Its tokens per row is the speedup over plain decoding the rounds predict (a plain round: one token
    for one row), outside the Python of a round."""

    tokens_per_round: float
    rows_per_round: float  # mean of v(d) + c·d over the rounds, d as drafted

    @property
    def tokens_per_row(self) -> float:
        return self.tokens_per_round / self.rows_per_round


def exchange(r: SummaryRow, v_by_k: Sequence[float], t1_ms: float) -> Exchange | None:
    """The rounds of ``r`` as they happened, each priced at v(d) (``v_by_k``: this CPU's calibration) for the d it
    drafted plus its draft calls' measured wall time per token in single rows (``t1_ms``: one row's ms; ~0 for a
    free drafter). Two drafters' exchanges side by side say why a longer accepted run buys less on a CPU whose v(K)
    is steep: on the AMD EPYC Zen 4 (bundled Q4_1, ``--suite history``, auto-K, README) suffix's rounds carried
    1.15-1.62x n-gram's tokens for 1.14-1.42x its verify rows, 1.00-1.14x the tokens per row. None without rounds."""
    rounds = sum(r.rounds_by_drafted)
    if not rounds or t1_ms <= 0 or not v_by_k:
        return None
    c = r.draft_ms_per_token / t1_ms
    top = len(v_by_k) - 1
    rows = sum(n * (v_by_k[min(d, top)] + c * d) for d, n in enumerate(r.rounds_by_drafted) if n)
    return Exchange(tokens_per_round=r.predicted_n / rounds, rows_per_round=rows / rounds)


@dataclass(frozen=True, slots=True)
class SpeedCap:
    """The most a target can reach on a prompt on this CPU with a free drafter, in multiples of the reference
    baseline (:func:`speed_cap`), and the figures it comes from."""

    x: float  # the cap, × the reference baseline
    x_plain: float  # the target's own plain decoding, × the reference baseline (measured)
    gain: float  # the most drafting can multiply the target's own plain speed by
    k: int  # the K of that bound
    v: float  # v(K) there, the target's calibration on this CPU
    alpha: float  # per-position acceptance of the rounds
    coverage: float  # share of the reply's tokens that came out of drafting rounds


def speed_cap(rows: Sequence[SummaryRow], v_by_k: Sequence[float]) -> SpeedCap | None:
    """Amdahl's bound on one target's speed on one prompt, from this CPU's physics (issue 20: "the bench prints
    the cap from v(K), acceptance and coverage"). Of the reply's tokens a share ``coverage`` came out of drafting
    rounds (the widest K's runs: the most of the text a draft was found for) and the rest can only be decoded
    one row each; a drafting round at K keeps E(α, K) tokens for a verify of v(K) rows (Leviathan et al. 2023,
    c = 0 for a free drafter), so a token costs (1 − coverage) + coverage · v(K) / E(α, K) single rows at best -
    every covered round drafting the full K, none wasted. The bound is that over the best K, times the target's
    own plain speed against the reference's (measured in the same rounds). None without drafting rows or a
    measured ratio to the reference."""
    base = next((r for r in rows if r.mode == "baseline"), None)
    spec = [r for r in rows if r.mode != "baseline" and r.alpha is not None and r.predicted_n > 0]
    if base is None or base.x_reference is None or not spec:
        return None
    widest = max(spec, key=lambda r: (r.k if r.k is not None else -1, r.predicted_n))
    drafting = sum(widest.rounds_by_drafted[1:])
    coverage = min(1.0, (widest.accepted + drafting) / widest.predicted_n)
    alpha = min(float(widest.alpha or 0.0), 0.999)
    best_gain, best_k = 1.0, 0
    for k in range(1, min(K_MAX, len(v_by_k) - 1) + 1):
        gain = 1.0 / ((1.0 - coverage) + coverage * v_by_k[k] / expected_tokens(alpha, k))
        if gain > best_gain:
            best_gain, best_k = gain, k
    return SpeedCap(
        x=base.x_reference * best_gain, x_plain=base.x_reference, gain=best_gain, k=best_k,
        v=v_by_k[best_k] if best_k else 1.0, alpha=alpha, coverage=coverage,
    )


__all__ = [
    "ALL_PROMPTS", "Calibration", "Exchange", "SpeedCap", "arithmetic", "calibrate", "calibrate_by_depth", "exchange",
    "replay_of_rounds", "speed_cap",
]
