"""The bench's summary: one row per (target, prompt, mode) from the run records.

Per (target, prompt, mode): median / min / max of ``predicted_per_second``, acceptance (Σ accepted / Σ
drafted over the runs), mean len (1 + Σ accepted / Σ verify steps with a draft, llama.cpp's figure) and the
speedup = the **median of the per-pair ratios** spec tok/s / baseline tok/s (not a ratio of medians: each
ratio is measured under the same conditions). The ``baseline`` row (K = 0) pools all baseline runs of the
prompt on that target (the reference's round-opening baselines included). With several targets,
``x_reference`` is the median over rounds of tok/s / the round's reference baseline tok/s.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specchat.engine.drafter_kinds import K_MAX

@dataclass(slots=True)
class SummaryRow:
    prompt: str
    mode: str
    k: int | None
    runs: int
    tps_median: float
    tps_min: float
    tps_max: float
    acceptance: float | None
    mean_len: float
    alpha: float | None  # per-position acceptance (MLE), None without drafts
    tokens_per_round: float
    k_mean: float
    speedup: float | None  # median of pair ratios (1.0 for the baseline row)
    speedup_min: float | None
    speedup_max: float | None
    pairs: int
    overhead_per_round: float = 0.0  # ms outside llama_decode per round
    draft_ms_per_token: float = 0.0  # wall ms of the draft calls per drafted token, in the runs
    rounds_by_drafted: list[int] = field(default_factory=list)  # Σ over the runs
    predicted_n: int = 0  # Σ tokens
    accepted: int = 0  # Σ draft_n_accepted (with ``rejections``: the counts α came from)
    rejections: int = 0  # Σ rounds with a rejection
    round_log: list[list[int | None]] = field(default_factory=list)  # the runs' round logs, concatenated
    target: str = ""  # the loaded target ("" = the only one)
    x_reference: float | None = None  # several targets: median of tok/s / the round's reference baseline


def alpha_mle(accepted: int, rejections: int) -> float | None:
    """α̂ = Σ accepted / (Σ accepted + Σ rounds with a rejection) (right-censored geometric MLE)."""
    tot = accepted + rejections
    return accepted / tot if tot else None


def summarize(records: Sequence[dict[str, Any]]) -> list[SummaryRow]:
    """One row per (target, prompt, mode, K), in the order the targets and prompts first appear (baseline
    first per prompt)."""
    groups: dict[tuple[str, str, str, int | None], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r.get("target") or "", r["prompt"], r["mode"], r["k"]), []).append(r)
    targets = list(dict.fromkeys(r.get("target") or "" for r in records))
    prompts = list(dict.fromkeys(r["prompt"] for r in records))
    order = sorted(
        groups,
        key=lambda g: (
            targets.index(g[0]), prompts.index(g[1]), {"baseline": 0, "spec": 1, "auto": 2}[g[2]],
            g[3] if g[3] is not None else 10**6,
        ),
    )
    rows = []
    for key in order:
        rs = groups[key]
        xs = [r["x_reference"] for r in rs if r.get("x_reference") is not None]
        tps = [r["predicted_per_second"] for r in rs]
        drafted = sum(r["draft_n"] for r in rs)
        acc = sum(r["draft_n_accepted"] for r in rs)
        spec_steps = sum(r["n_spec_steps"] for r in rs)
        steps = sum(r["n_steps"] for r in rs)
        ratios = [r["speedup"] for r in rs if r["speedup"] is not None]
        is_base = key[2] == "baseline"
        rows.append(
            SummaryRow(
                target=key[0], prompt=key[1], mode=key[2], k=key[3], runs=len(rs),
                x_reference=statistics.median(xs) if xs else None,
                tps_median=statistics.median(tps), tps_min=min(tps), tps_max=max(tps),
                acceptance=acc / drafted if drafted else None,
                mean_len=1.0 + acc / spec_steps if spec_steps else 1.0,
                alpha=alpha_mle(acc, sum(r["rejections"] for r in rs)) if drafted else None,
                tokens_per_round=sum(r["predicted_n"] for r in rs) / steps if steps else 0.0,
                overhead_per_round=sum(r.get("overhead_ms", 0.0) for r in rs) / steps if steps else 0.0,
                draft_ms_per_token=sum(r.get("draft_ms", 0.0) for r in rs) / drafted if drafted else 0.0,
                rounds_by_drafted=[sum(col) for col in zip(*(r.get("rounds_by_drafted") or [0] * (K_MAX + 1) for r in rs))],
                predicted_n=sum(r["predicted_n"] for r in rs),
                k_mean=statistics.fmean(r["k_mean"] for r in rs),
                speedup=1.0 if is_base else (statistics.median(ratios) if ratios else None),
                speedup_min=1.0 if is_base else (min(ratios) if ratios else None),
                speedup_max=1.0 if is_base else (max(ratios) if ratios else None),
                pairs=len(ratios),
                accepted=acc,
                rejections=sum(r["rejections"] for r in rs),
                round_log=[x for r in rs for x in (r.get("round_log") or [])],
            )
        )
    return rows


#: issue 20's bar: auto-K reaches at least this share of the best of plain decoding and every fixed K, per prompt
AUTO_K_BAR = 0.98


@dataclass(frozen=True, slots=True)
class AutoVerdict:
    """Auto-K against the best other choice on one prompt of one target (:func:`auto_verdicts`)."""

    target: str
    prompt: str
    auto: float  # auto-K's speedup (median of its pair ratios)
    best: tuple[int, ...]  # the best choice: () = plain decoding, else the fixed K(s) that drafted it
    best_speedup: float  # its speedup (1.0 for plain decoding; pooled over twins)
    pairs: int  # the pair ratios behind ``best_speedup`` (0 for plain decoding)
    #: each fixed K of the best choice measured alone, when it is several twins (their spread is the noise)
    alone: tuple[float, ...] = ()

    @property
    def ratio(self) -> float:
        return self.auto / self.best_speedup if self.best_speedup > 0 else float("nan")

    @property
    def best_label(self) -> str:
        return "plain" if not self.best else " = ".join(f"K {k}" for k in self.best)


def _rounds(run: dict[str, Any]) -> tuple[tuple[int | None, int | None], ...]:
    """A run's rounds as (drafted, accepted): the same for two runs that decoded the very same batches."""
    return tuple((r[1], r[2]) for r in run.get("round_log") or [])


def auto_verdicts(records: Sequence[dict[str, Any]]) -> list[AutoVerdict]:
    """Per (target, prompt) with auto-K runs: auto-K's speedup against max(plain, the best fixed K), the bar of
    issue 20 (:data:`AUTO_K_BAR`).

    **Twins are one choice.** Fixed Ks whose runs drafted and kept the very same rounds (n-gram drafts shorter
    than the smaller cap: K 16 and K 64 on the code prompt, every K on prose) decoded the very same batches, so
    they have one true speed; the max of their separate medians is the max of noisy copies of one figure,
    biased upward (AMD EPYC Zen 4, 2026-12-05: K 16 and K 64 on the code prompt drafted identically and read
    1.00x and 1.10x in one run). Their pair ratios are pooled into one median, and each one's own figure is kept
    beside it (``alone``), the spread of the noise itself."""
    groups: dict[tuple[str, str], dict[tuple[str, int | None], list[dict[str, Any]]]] = {}
    for r in records:
        if r["mode"] != "baseline" and r.get("speedup") is not None:
            groups.setdefault((r.get("target") or "", r["prompt"]), {}).setdefault((r["mode"], r["k"]), []).append(r)
    out = []
    for (target, prompt), modes in groups.items():
        autos = modes.get(("auto", None))
        if not autos:
            continue
        fixed = {int(k or 0): rs for (mode, k), rs in modes.items() if mode == "spec"}
        twins: list[list[int]] = []
        for k in sorted(fixed):
            sig = sorted(_rounds(r) for r in fixed[k])
            for group in twins:
                if sorted(_rounds(r) for r in fixed[group[0]]) == sig:
                    group.append(k)
                    break
            else:
                twins.append([k])
        best: tuple[tuple[int, ...], float, int, tuple[float, ...]] = ((), 1.0, 0, ())
        for group in twins:
            ratios = [r["speedup"] for k in group for r in fixed[k]]
            pooled = statistics.median(ratios)
            if pooled > best[1]:
                alone = tuple(statistics.median(r["speedup"] for r in fixed[k]) for k in group) if len(group) > 1 else ()
                best = (tuple(group), pooled, len(ratios), alone)
        out.append(AutoVerdict(target=target, prompt=prompt, auto=statistics.median(r["speedup"] for r in autos),
                               best=best[0], best_speedup=best[1], pairs=best[2], alone=best[3]))
    return out


__all__ = ["AUTO_K_BAR", "AutoVerdict", "SummaryRow", "alpha_mle", "auto_verdicts", "summarize"]
