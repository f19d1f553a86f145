"""What the bench prints and writes: the summary table, noise warnings, the arithmetic, the speedup plot
and the JSON report (written atomically)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specchat.bench.summary import AUTO_K_BAR, AutoVerdict, SummaryRow
from specchat.engine.drafter_kinds import MODEL, NONE
from specchat.errors import UserError

if TYPE_CHECKING:  # the arithmetic imports the calibration (llama.cpp); the report only reads its figures
    from specchat.bench.arithmetic import Exchange, SpeedCap


def _fmt(x: float | None, spec: str, none: str = "-") -> str:
    return none if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _mode_label(r: SummaryRow) -> str:
    return "auto" if r.mode == "auto" else str(r.k)


def format_table(rows: Sequence[SummaryRow]) -> str:
    w = max([12, *(len(r.prompt) for r in rows)])
    head = (
        f"{'prompt':<{w}} {'K':>4} {'runs':>4} {'tok/s med':>9} {'min':>7} {'max':>7} {'accept':>7} "
        f"{'mean len':>8} {'speedup':>8} {'(pair min..max)':>16}"
    )
    lines = [head, "-" * len(head)]
    prev = None
    for r in rows:
        name = r.prompt if r.prompt != prev else ""
        prev = r.prompt
        rng = "" if r.mode == "baseline" or r.speedup is None else f"{r.speedup_min:.2f}..{r.speedup_max:.2f}"
        k = "base" if r.mode == "baseline" else _mode_label(r)
        lines.append(
            f"{name:<{w}} {k:>4} {r.runs:>4} {r.tps_median:>9.1f} {r.tps_min:>7.1f} {r.tps_max:>7.1f} "
            f"{_fmt(r.acceptance, '.3f'):>7} {r.mean_len:>8.2f} {_fmt(r.speedup, '.2f') + '×':>8} {rng:>16}"
        )
        if r.mode == "auto":
            lines[-1] += f"  (mean K {r.k_mean:.1f})"
    return "\n".join(lines)


def format_drafters(rows: Sequence[SummaryRow], labels: Sequence[str]) -> str:
    """The drafters side by side (``--draft suffix`` against ``ngram``, plain decoding the unit): per prompt and K,
    each drafter's mean accepted length and its speedup over its own adjacent baselines."""
    w = max([12, *(len(r.prompt) for r in rows)])
    cw = max([16, *(len(label) + 2 for label in labels)])
    head = f"{'prompt':<{w}} {'K':>4} {'plain tok/s':>11} " + " ".join(f"{label:>{cw}}" for label in labels)
    lines = ["", "drafters side by side: mean len / speedup over plain decoding (each its own baseline pairs)", head,
             "-" * len(head)]
    for prompt in dict.fromkeys(r.prompt for r in rows):
        mine = [r for r in rows if r.prompt == prompt]
        base = [r.tps_median for r in mine if r.mode == "baseline"]
        plain = f"{sorted(base)[len(base) // 2]:.1f}" if base else "-"
        modes = list(dict.fromkeys((r.mode, r.k) for r in mine if r.mode != "baseline"))
        for i, (mode, k) in enumerate(modes):
            cells = []
            for label in labels:
                r = next((x for x in mine if x.target == label and (x.mode, x.k) == (mode, k)), None)
                cells.append("-" if r is None else f"{r.mean_len:.2f} / {_fmt(r.speedup, '.2f')}\u00d7")
            name = prompt if i == 0 else ""
            kl = "auto" if mode == "auto" else str(k)
            lines.append(f"{name:<{w}} {kl:>4} {plain if i == 0 else '':>11} " + " ".join(f"{c:>{cw}}" for c in cells))
    return "\n".join(lines)


def format_exchange(rows: Sequence[SummaryRow], labels: Sequence[str],
                    exchanges: Mapping[tuple[str, str, str, int | None], Exchange]) -> str:
    """The first drafter against each other one, per prompt and K: the ratios of their tokens a round, of their
    verify rows a round (``exchanges``, keyed by (drafter, prompt, mode, K): :func:`~specchat.bench.arithmetic.exchange`)
    and so of their tokens per row - the speedup their rounds predict - beside the ratio of their measured speedups.
    Where a longer accepted run costs nearly as many more rows, it buys little: that is what this table shows."""
    if len(labels) < 2 or not exchanges:
        return ""
    first, *others = labels
    w = max([12, *(len(r.prompt) for r in rows)])
    lines: list[str] = []
    for other in others:
        head = (f"{'prompt':<{w}} {'K':>4} {'tokens/round':>20} {'verify rows/round':>20} {'tokens/row':>20} "
                f"{'measured':>9}")
        lines += ["", f"the exchange rate, {first} against {other}: each drafter's rounds as drafted, priced at this "
                      f"CPU's v(d) (its calibration at the prompt's depth); tokens/row is what the rounds predict over "
                      f"plain decoding, measured the ratio of the two speedups", head, "-" * len(head)]
        for prompt in dict.fromkeys(r.prompt for r in rows):
            for mode, k in dict.fromkeys((r.mode, r.k) for r in rows if r.prompt == prompt and r.mode != "baseline"):
                a, b = exchanges.get((first, prompt, mode, k)), exchanges.get((other, prompt, mode, k))
                if a is None or b is None:
                    continue
                ra = next(r for r in rows if (r.target, r.prompt, r.mode, r.k) == (first, prompt, mode, k))
                rb = next(r for r in rows if (r.target, r.prompt, r.mode, r.k) == (other, prompt, mode, k))
                cells = [f"{x:.2f} / {y:.2f} {x / y:.2f}\u00d7" for x, y in (
                    (a.tokens_per_round, b.tokens_per_round), (a.rows_per_round, b.rows_per_round),
                    (a.tokens_per_row, b.tokens_per_row))]
                measured = (f"{ra.speedup / rb.speedup:.2f}\u00d7" if ra.speedup and rb.speedup else "-")
                kl = "auto" if mode == "auto" else str(k)
                lines.append(f"{prompt:<{w}} {kl:>4} " + " ".join(f"{c:>20}" for c in cells) + f" {measured:>9}")
    return "\n".join(lines)


def format_verdicts(verdicts: Sequence[AutoVerdict]) -> str:
    """Auto-K against max(plain, best fixed K) per prompt, with the bar (:func:`~specchat.bench.summary.auto_verdicts`:
    fixed Ks that drafted the very same rounds pooled as one choice)."""
    if not verdicts:
        return ""
    w = max([12, *(len(v.prompt) for v in verdicts)])
    lines = ["", f"auto-K against the best of plain decoding and every fixed K (the bar: {AUTO_K_BAR:.2f} of it)",
             f"{'prompt':<{w}} {'auto-K':>7}  {'best':<22} {'ratio':>5}", "-" * (w + 38)]
    twins = []
    for v in verdicts:
        best = f"{v.best_label} {v.best_speedup:.2f}×"
        mark = "" if v.ratio >= AUTO_K_BAR else "  below"
        lines.append(f"{v.prompt:<{w}} {v.auto:>6.2f}×  {best:<22} {v.ratio:>5.2f}{mark}")
        if v.alone:
            twins.append(f"{v.prompt}: {' and '.join(f'K {k} {x:.2f}×' for k, x in zip(v.best, v.alone))} alone, "
                         f"{v.best_speedup:.2f}× over their {v.pairs} pairs")
    met = sum(v.ratio >= AUTO_K_BAR for v in verdicts)
    lines.append(f"{met} of {len(verdicts)} prompt(s) at or above the bar")
    if twins:
        lines.append("fixed Ks joined by '=' drafted and kept the very same rounds (the same batches decoded): one "
                     "choice, their pairs pooled - " + "; ".join(twins))
    return "\n".join(lines)


def noise_warnings(rows: Sequence[SummaryRow], spread: float = 1.5) -> list[str]:
    """A line per prompt whose baseline runs varied by more than ``spread``× (max/min tok/s): a busy
    machine (other processes, OpenMP threads spinning on shared cores) makes single ratios unreliable."""
    out = []
    for r in rows:
        if r.mode == "baseline" and r.tps_min > 0 and r.tps_max / r.tps_min > spread:
            out.append(
                f"warning: {r.prompt}: baseline runs ranged {r.tps_min:.1f}..{r.tps_max:.1f} tok/s "
                f"({r.tps_max / r.tps_min:.1f}×): the machine is busy; trust medians of many pairs, or use fewer --threads"
            )
    return out


def format_arithmetic(ar: dict[str, Any]) -> str:
    lines = ["", "The arithmetic (Leviathan et al. 2023, with the measured verify cost v):"]
    t_ms = ar["target_ms_per_token"]
    lines.append(
        f"  target alone: {t_ms:.2f} ms per single-row decode = {ar['target_tok_s'] or 0:.1f} tok/s "
        f"(context {ar['context_n']} tokens, median)"
    )
    if ar["draft_kind"] == MODEL:
        lines.append(f"  draft alone:  {ar['draft_ms_per_token']:.2f} ms per token = {ar['draft_tok_s'] or 0:.1f} tok/s ({ar['draft']})")
    elif ar["draft_kind"] != NONE:
        lines.append(f"  draft alone:  {ar['draft']} runs no model: c = 0 until rounds time its lookups ('in the runs' below)")
    lines.append(f"  cost ratio c = draft / target per token = {ar['c']:.4f}")
    v = ar["v"]
    ks = [k for k in ar.get("timed_k") or sorted(int(k) for k in v) if k > 0 and str(k) in v]
    lines.append(f"  verify cost v(K) = t(K+1 rows) / t(1 row), the engine's fit of {ar['reps']} timings per size (as auto-K reads it):")
    for chunk in range(0, len(ks), 8):
        part = ks[chunk : chunk + 8]
        lines.append("    " + "  ".join(f"K={k:<2d} {v[str(k)]:5.2f}" for k in part))
    if ar.get("verify_reason"):
        lines.append(f"    {ar['verify_reason']}")
    for p in ar["prompts"]:
        if p["alpha"] is None:
            continue
        lines.append("")
        lines.append(f"  {p['prompt']}: α = {p['alpha']:.3f} (accepted / (accepted + rejections) over the fixed-K runs)")
        if "context_n" in p:  # calibrated at its own depth (bench.arithmetic.calibrate_by_depth)
            pv = p["v"]
            lines.append(
                f"    priced at its own depth ({p['context_n']} tokens in the KV): one row {p['target_ms_per_token']:.2f} ms, "
                + ", ".join(f"v({k}) {pv[str(k)]:.2f}" for k in (8, 16, 64) if str(k) in pv)
            )
        if p["rows"]:
            lines.append(
                f"    {'K':>3} {'E(α,K)':>7} {'tok/round':>9} {'v(K)':>6} {'predicted':>9} {'from rounds':>11} {'measured':>9}"
            )
            for row in p["rows"]:
                lines.append(
                    f"    {row['k']:>3} {row['E']:>7.2f} {row['tokens_per_round']:>9.2f} {row['v']:>6.2f} "
                    f"{row['predicted_speedup']:>8.2f}× {_fmt(row['predicted_from_rounds'], '.2f'):>10}× "
                    f"{_fmt(row['measured_speedup'], '.2f'):>8}×"
                )
            lines.append("    predicted = E(α,K) / (c·K + v(K)), every round drafting K (Leviathan et al.)")
            lines.append(
                "    from rounds = the runs' tokens / Σ over their rounds of (v(d) + c·d) for the d actually drafted, "
                "with the runs' own draft cost and ms per round outside llama_decode"
            )
        if p.get("c_in_runs") is not None:
            lines.append(
                f"    in the runs a drafted token cost c = {p['c_in_runs']:.4f} (draft calls' wall time, incl. Python and "
                "catch-up rows)"
            )
        if "replay" in p:
            rp, gk = p["replay"], p["geometric_best_k"]
            lines.append(
                f"    geometric model (every round drafting K): best {'off' if gk == 0 else f'K = {gk}'} "
                f"(predicted {p['geometric_best_speedup']:.2f}×)"
            )
            lines.append(
                f"    replay of the K={rp['from_k']} runs' {rp['rounds']} rounds at every K (exact up to each round's "
                "draft, geometric past it; what auto-K uses):"
            )
        best = p["best_k"]
        rec = "off (K = 0)" if best == 0 else f"K = {best}"
        tail = ""
        if "best_measured_k" in p:
            bm = p["best_measured_k"]
            tail = f"; best measured: {'off' if bm == 0 else f'K = {bm}'}"
        lines.append(f"    recommended {rec} (predicted {p['predicted_best_speedup']:.2f}×){tail}")
        lines.append(f"    {p['break_even']}")
    return "\n".join(lines)


def format_plot(rows: Sequence[SummaryRow], width: int = 40) -> str:
    """Speedup vs K as horizontal bars; ``|`` marks 1.0× (break-even)."""
    spec = [r for r in rows if r.mode != "baseline" and r.speedup is not None]
    if not spec:
        return ""
    top = max(2.0, max(r.speedup_max or r.speedup for r in spec)) * 1.05
    one = int(round(width / top))
    lines = ["", f"speedup vs K (each # = {top / width:.3f}×, '|' = 1.0× break-even)"]
    prev = None
    for r in rows:
        if r.mode == "baseline":
            continue
        if r.prompt != prev:
            lines.append(f"  {r.prompt}")
            prev = r.prompt
        if r.speedup is None:
            continue
        n = int(round(r.speedup / top * width))
        bar = list("#" * n + " " * (width - n))
        if one < width:
            bar[one] = "|" if bar[one] == " " else "+"
        label = "auto" if r.mode == "auto" else f"K={r.k}"
        lines.append(f"    {label:>5} {''.join(bar)} {r.speedup:.2f}×")
    return "\n".join(lines)


def format_formats(rows: Sequence[SummaryRow], targets: Sequence[str], reference: str,
                   caps: Mapping[tuple[str, str], SpeedCap] | None = None) -> str:
    """Every target's modes as multiples of the reference's baseline, per prompt: "× the bundled Q4_1
    baseline" across formats, from one interleaved run (each ratio against the same round's reference run);
    with ``caps`` ((prompt, target) -> :class:`~specchat.bench.arithmetic.SpeedCap`) each target's physical
    bound on this CPU beside it, and what it is made of."""
    def col(r: SummaryRow) -> str:
        return "base" if r.mode == "baseline" else _mode_label(r) if r.mode == "auto" else f"K={r.k}"

    cols = sorted({col(r) for r in rows}, key=lambda c: (c != "base", c == "auto", int(c[2:]) if c.startswith("K=") else 0))
    prompts = list(dict.fromkeys(r.prompt for r in rows))
    w_p = max([10, *(len(p) for p in prompts)])
    w_t = max([8, *(len(t) for t in targets)])
    head = f"{'prompt':<{w_p}} {'target':<{w_t}} " + " ".join(f"{c:>7}" for c in cols)
    lines = ["", f"× {reference}: each run's tok/s / the same round's {reference} baseline run, median over rounds", head,
             "-" * len(head)]
    for prompt in prompts:
        first = True
        for t in targets:
            cells = {col(r): r.x_reference for r in rows if r.prompt == prompt and r.target == t}
            if not cells:
                continue
            name = prompt if first else ""
            first = False
            line = f"{name:<{w_p}} {t:<{w_t}} " + " ".join(f"{_fmt(cells.get(c), '.2f') + ('×' if cells.get(c) is not None else ''):>7}" for c in cols)
            cap = (caps or {}).get((prompt, t))
            lines.append(line + (f"   cap {cap.x:.2f}×" if cap is not None else ""))
    if caps:
        lines += ["", f"cap = the most a target reaches with a free drafter on this CPU, × {reference}: its plain speed × "
                      "1 / ((1 − coverage) + coverage · v(K) / E(α, K)) at the best K (Amdahl over the share of the reply "
                      "drafting rounds covered; every covered round drafting K)"]
        for (prompt, t), cap in caps.items():
            lines.append(
                f"  {prompt} {t}: {cap.x:.2f}× = plain {cap.x_plain:.2f}× · {cap.gain:.2f} (coverage {cap.coverage:.0%}, "
                f"α {cap.alpha:.3f}, v({cap.k}) = {cap.v:.2f})"
            )
    return "\n".join(lines)


def build_report(
    *,
    meta: dict[str, Any],
    records: Sequence[dict[str, Any]],
    rows: Sequence[SummaryRow],
    arith: dict[str, Any] | None,
    interrupted: bool,
) -> dict[str, Any]:
    return {
        "specchat_bench": 1,
        "interrupted": interrupted,
        **meta,
        "records": list(records),
        "summary": [asdict(r) for r in rows],
        "arithmetic": arith,
    }


def write_json(path: str, report: dict[str, Any]) -> None:
    p = Path(path).expanduser()
    tmp = p.with_name(p.name + ".tmp")
    try:
        tmp.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(p)
    except OSError as exc:
        raise UserError(f"cannot write --json {p}: {exc.strerror or exc}; choose a writable path") from None


__all__ = [
    "build_report", "format_arithmetic", "format_formats", "format_plot", "format_table", "format_verdicts",
    "noise_warnings", "write_json",
]
